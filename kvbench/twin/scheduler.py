"""The twin's scheduler: the step budget, the sequence limit and the fixed cost per request.

These three shape TTFT under load (kvbench.mock.costs.step says how), and a TTFT sweep of one
request at a time cannot show them. Each comes from the first of:
  given      `kvbench fit --step-budget / --max-seqs` (what the user's server was started with)
  source     the run was against kvbench's mock: the source profile's own values, exactly
  default    the engine's defaults as `kvbench engines serve` starts it (engines/serve.py), stated
             as assumed in the profile so a reader knows to give the real ones
The fixed cost is the cold fit's intercept (the server's own work per request: vLLM's scheduler and
detokeniser, ~9 ms on CPU). It also holds kvbench's own HTTP cost, which the twin's runs pay again
(well under a millisecond on one machine): modelled whole, a twin errs by that much slow, where
leaving it out erred by the server's whole fixed cost fast.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from kvbench.engines.serve import VLLM_MIN_STEP_BUDGET, vllm_step_budget
from kvbench.errors import UsageError
from kvbench.mock.profiles import load_profile

# (token budget per step, sequences at once) of each engine as kvbench's own `engines serve` starts
# it: llama.cpp n_batch 2048 and -np 4; vLLM --max-num-batched-tokens (engines.serve.vllm_step_budget:
# 8192, or the context where larger) and --max-num-seqs 4.
VLLM_DEFAULT = (VLLM_MIN_STEP_BUDGET, 4)
ENGINE_DEFAULTS: dict[str, tuple[int, int]] = {
    "llamacpp": (2048, 4),
    "vllm": VLLM_DEFAULT,
    "lmcache": VLLM_DEFAULT,
}
FIXED_ORIGIN = "fitted (the cold fit's intercept: the server's own work and kvbench's HTTP cost)"
OTHER_DEFAULT = (8192, 256)  # vLLM's own defaults on a GPU, for an engine kvbench does not start


@dataclass(frozen=True)
class Scheduler:
    token_budget: int | None  # None: the source shares its GPU (kvbench's mock): no steps
    max_num_seqs: int
    request_fixed_s: float
    origin: dict[str, str]  # per field: given, source profile or engine default

    def gpu_fields(self) -> dict[str, Any]:
        """The profile's `gpu:` keys this sets."""
        step = None if self.token_budget is None else {"token_budget": self.token_budget}
        return {"max_num_seqs": self.max_num_seqs, "request_fixed_s": self.request_fixed_s, "step": step}

    def record(self) -> dict[str, Any]:
        return {
            "token_budget": self.token_budget,
            "max_num_seqs": self.max_num_seqs,
            "request_fixed_s": self.request_fixed_s,
        } | {f"{k}_from": v for k, v in self.origin.items()}


def choose(
    engine: str,
    mock_profile: str | None,
    fixed_s: float,
    budget: int | None,
    max_seqs: int | None,
    kind: str = "server",
    context: int | None = None,
) -> Scheduler:
    """The twin's scheduler for a source system (see the module docstring for the order)."""
    src = None
    if kind == "mock" or engine in ("mock", "kvbench-mock"):
        with contextlib.suppress(UsageError):  # a profile file gone since the run: the defaults
            src = load_profile(mock_profile or "ibm-g4")
    if src is not None:
        gpu = getattr(src, "gpu", None)
        step = getattr(gpu, "step", None)
        return Scheduler(
            token_budget=budget if budget is not None else (step.token_budget if step else None),
            max_num_seqs=max_seqs or (gpu.max_num_seqs if gpu else OTHER_DEFAULT[1]),
            request_fixed_s=fixed_s,
            origin={
                "token_budget": "given" if budget is not None else f"source profile {src.name}",
                "max_num_seqs": "given" if max_seqs else f"source profile {src.name}",
                "request_fixed_s": FIXED_ORIGIN,
            },
        )
    if kind == "mock":  # kvbench's mock, its profile gone since the run: it shared its GPU all the same
        gone = f"source mock profile {mock_profile} (unreadable now: processor sharing, as any mock)"
        return Scheduler(
            token_budget=budget,
            max_num_seqs=max_seqs or OTHER_DEFAULT[1],
            request_fixed_s=fixed_s,
            origin={
                "token_budget": "given" if budget else gone,
                "max_num_seqs": "given" if max_seqs else gone,
                "request_fixed_s": FIXED_ORIGIN,
            },
        )
    known = engine in ENGINE_DEFAULTS
    d_budget, d_seqs = ENGINE_DEFAULTS.get(engine, OTHER_DEFAULT)
    if engine in ("vllm", "lmcache") and context:
        d_budget = vllm_step_budget(context)
    assumed = (
        f"engine default ({engine}, as kvbench engines serve starts it)"
        if known
        else (f"assumed ({engine}: vLLM's GPU defaults; give --step-budget / --max-seqs)")
    )
    return Scheduler(
        token_budget=budget or d_budget,
        max_num_seqs=max_seqs or d_seqs,
        request_fixed_s=fixed_s,
        origin={
            "token_budget": "given" if budget else assumed,
            "max_num_seqs": "given" if max_seqs else assumed,
            "request_fixed_s": FIXED_ORIGIN,
        },
    )
