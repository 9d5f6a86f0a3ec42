"""Pydantic models of mock profiles and fault settings (strict: extra="forbid", frozen).

A profile is YAML data in kvbench/mock/profiles/ (see kvbench.mock.profiles). Two kinds,
told apart by `kind`:

* ``tiered``: a modelled GPU plus KV-cache tiers G1..G4 and a network fabric in front of
  G4. Costs come from physical parameters (timing.py); coefficients left null are fitted
  from the profile's ``calibration`` points (timing.derive_params).
* ``fixed-delay``: TTFT is a constant, no cache effects; for benchmarking the harness.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvbench.model.kv_geometry import PRESETS
from kvbench.model.topology import PRESETS as TOPOLOGIES

TIER_NAMES = ("G1", "G2", "G3", "G4")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TierConfig(StrictModel):
    enabled: bool = Field(
        description="Whether the tier CACHES KV blocks. G2 (host memory) still stages G3/G4 reads to the "
        "GPU when its caching is off, as in the published G4 test."
    )
    capacity_bytes: float = Field(gt=0, description="Modelled capacity; LRU eviction beyond it.")
    read_bandwidth_bytes_per_s: float | None = Field(
        default=None,
        gt=0,
        description="Bandwidth ONE transfer reaches alone (bytes per model second). For G2 this is the "
        "host->GPU copy (PCIe). null: fitted from calibration.cached (G4 only).",
    )
    aggregate_bandwidth_bytes_per_s: float | None = Field(
        default=None,
        gt=0,
        description="Total bandwidth shared by concurrent transfers (processor sharing, each of k "
        "transfers gets min(read_bandwidth, aggregate/k)). null: same as read_bandwidth, i.e. k "
        "simultaneous transfers each take k times as long.",
    )
    latency_s: float | None = Field(
        default=None,
        ge=0,
        description="Fixed cost per access (one access per request and tier). null: fitted (G4 only).",
    )


class TiersConfig(StrictModel):
    G1: TierConfig = Field(description="GPU memory (HBM). A hit costs nothing to onboard.")
    G2: TierConfig = Field(description="Host DRAM; its bandwidth is the host->GPU copy.")
    G3: TierConfig = Field(description="Local NVMe; read into host memory, then copied to the GPU.")
    G4: TierConfig = Field(description="Shared storage over the network fabric, then host, then GPU.")

    def by_name(self, name: str) -> TierConfig:
        tier: TierConfig = getattr(self, name)
        return tier


class StepConfig(StrictModel):
    """The engine's step scheduler: what batching and queueing under load come from."""

    token_budget: int = Field(
        ge=1, description="Tokens computed per step (vLLM max_num_batched_tokens, llama.cpp n_batch)."
    )


class SlotCacheConfig(StrictModel):
    """llama.cpp's cache shape (kvbench.mock.costs.slots): one prompt per slot, moved through a RAM cache."""

    similarity: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="A slot is reused for a request when their common prefix is more than this share of "
        "the request (llama-server --slot-prompt-similarity); else the least recently used slot.",
    )
    ram_tokens: int | None = Field(
        default=None,
        ge=0,
        description="RAM prompt cache size in tokens (llama-server --cache-ram, in tokens); 0: none; "
        "null: holds every prompt. A restore reads the whole entry at tiers.G2's latency and bandwidth; "
        "a slot's own hit pays tiers.G1's.",
    )


class GpuConfig(StrictModel):
    prefill_linear_s_per_token: float | None = Field(
        default=None, ge=0, description="a in prefill = a*(n-c) + b*(n^2-c^2)/2; null: fitted."
    )
    prefill_quadratic_s_per_token2: float | None = Field(
        default=None, ge=0, description="b (attention) in the prefill formula; null: fitted."
    )
    decode_step_base_s: float = Field(
        ge=0, description="Time of one decode step of a batch, reading the weights (model seconds)."
    )
    hbm_bandwidth_bytes_per_s: float = Field(
        gt=0, description="GPU memory bandwidth: each step also reads every batched sequence's KV."
    )
    max_num_seqs: int = Field(default=256, ge=1, description="Requests admitted at once; the rest queue.")
    request_fixed_s: float = Field(
        default=0.0,
        ge=0,
        description="Model seconds per request before prefill that use no GPU (parse, tokenize, schedule).",
    )
    step: StepConfig | None = Field(
        default=None,
        description="Run the GPU in steps with a token budget (mock.costs.step); null: processor sharing.",
    )
    slot_cache: SlotCacheConfig | None = Field(
        default=None,
        description="Cache as llama.cpp's slots do (gpu.max_num_seqs slots, each holding one prompt, and a "
        "RAM prompt cache) instead of the shared tiers G1 and G2; null: the shared tiers.",
    )


class ContentionConfig(StrictModel):
    """Costs of competing traffic beyond bandwidth sharing (kvbench.model.topology.Contention), each
    scaled by the noise's load u (achieved / capacity of the link it shares with cache reads). All
    off by default: the published bandwidths alone predict no drop at the published noise."""

    loaded_latency_s: float = Field(
        default=0.0, ge=0, description="Latency under load: model seconds added to each G4 access at u = 1."
    )
    storage_cpu_slowdown: float = Field(
        default=0.0, ge=0, le=1, description="Storage CPU: share of one G4 read's own rate lost at u = 1."
    )
    incast_loss: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Incast at the switch: share of the client link's goodput lost at u = 1.",
    )


class FabricConfig(StrictModel):
    topology: str | None = Field(
        default=None,
        description="A kvbench.model.topology preset (links, capacities, the paths of cache reads and "
        "noise); null: the storage (G4 aggregate) behind one link of capacity_bytes_per_s that the noise "
        "also crosses.",
    )
    capacity_bytes_per_s: float | None = Field(
        default=None,
        gt=0,
        description="topology null only: the network link in front of G4, shared by G4 reads and noise.",
    )
    noise_scale: float = Field(
        default=1000.0,
        gt=0,
        description="fabric_noise_scale: modelled bytes per real byte, for a noise connection to the "
        "fabric port that does not declare its offered rate (a declared one is modelled at that rate; "
        "its real bytes only confirm it is on).",
    )
    contention: ContentionConfig = Field(
        default_factory=ContentionConfig, description="Costs of noise beyond bandwidth (default off)."
    )

    @model_validator(mode="after")
    def _check(self) -> FabricConfig:
        if self.topology is None and self.capacity_bytes_per_s is None:
            raise ValueError("fabric: give topology (a preset) or capacity_bytes_per_s")
        if self.topology is not None:
            if self.topology not in TOPOLOGIES:
                raise ValueError(
                    f"fabric.topology: unknown {self.topology!r} (known: {', '.join(sorted(TOPOLOGIES))})"
                )
            if self.capacity_bytes_per_s is not None:
                raise ValueError(
                    "fabric: capacity_bytes_per_s comes from the topology; give one or the other"
                )
        return self


class CalibrationPoint(StrictModel):
    tokens: int = Field(gt=0, description="Prompt length in tokens.")
    ttft_s: float = Field(gt=0, description="Published time to first token, seconds.")
    note: str = Field(default="", description="Where the number comes from.")


class Calibration(StrictModel):
    source: str = Field(description="Publication the points come from.")
    uncached: list[CalibrationPoint] = Field(
        min_length=2, max_length=2, description="Two cold TTFT points: fit prefill a and b."
    )
    cached: list[CalibrationPoint] = Field(
        min_length=2, max_length=2, description="Two warm (G4) TTFT points: fit G4 latency and bandwidth."
    )


class FitRecord(StrictModel):
    """What `kvbench fit` (kvbench.twin) fitted a twin profile to; read by people and the report only."""

    runs: list[str] = Field(description="The run directories the twin was fitted to.")
    source: dict[str, str | float | None] = Field(
        default_factory=dict, description="The system measured: engine, kind, mock profile, pace, machine."
    )
    terms: dict[str, dict[str, float | int | str | None]] = Field(
        description="Per fitted term (prefill, onboard, decode): its coefficients, R^2, residuals, points."
    )
    valid: dict[str, float | int | None] = Field(
        description="Ranges the fit holds for: prompt and cached tokens, the most connections seen."
    )
    observed_throughput: list[dict[str, float | int | str | None]] = Field(
        default_factory=list,
        description="The throughput phases read (recorded: the mock has no knob to fit).",
    )
    notes: list[str] = Field(default_factory=list, description="What was not fitted, and why.")
    validation: list[dict[str, float | int | str | bool | None]] = Field(
        default_factory=list,
        description="Set by `kvbench fit --validate`: per run and metric, measured, predicted, error.",
    )


class TieredProfile(StrictModel):
    kind: Literal["tiered"] = "tiered"
    name: str = Field(description="Profile name.")
    description: str = Field(description="One line.")
    model_name: str = Field(description="Served model id (/v1/models) and the metrics' model_name label.")
    geometry: str = Field(description="A kvbench.model.kv_geometry preset name.")
    sliding_at_full: bool = Field(
        description="Whether sliding-window layers store KV for every token (true) or only the window."
    )
    block_tokens: int = Field(ge=1, description="Prefix-cache block size in tokens.")
    time_scale: float = Field(
        default=1.0, gt=0, description="Real seconds per model second: every modelled duration is multiplied."
    )
    onboard_chunk_tokens: int = Field(
        default=256, ge=1, description="Host->GPU copy chunk: the pipeline tail after a G3/G4 read."
    )
    reset_clears_persistent: bool = Field(
        default=False, description="Whether /reset_prefix_cache also empties a persisted G4."
    )
    max_model_len: int | None = Field(default=None, ge=1, description="Default: the geometry's context.")
    gpu: GpuConfig
    tiers: TiersConfig
    fabric: FabricConfig
    calibration: Calibration | None = Field(default=None, description="Published points the fit uses.")
    fit: FitRecord | None = Field(
        default=None, description="Set by `kvbench fit`: this profile is a twin fitted to those runs."
    )

    @property
    def fabric_noise_scale(self) -> float:
        return self.fabric.noise_scale

    @model_validator(mode="after")
    def _check(self) -> TieredProfile:
        if self.geometry not in PRESETS:
            raise ValueError(f"geometry: unknown {self.geometry!r} (known: {', '.join(sorted(PRESETS))})")
        if self.calibration is None:
            if self.gpu.prefill_linear_s_per_token is None or self.gpu.prefill_quadratic_s_per_token2 is None:
                raise ValueError("gpu: prefill coefficients are null but there is no calibration to fit them")
            if self.tiers.G4.read_bandwidth_bytes_per_s is None or self.tiers.G4.latency_s is None:
                raise ValueError(
                    "tiers.G4: bandwidth/latency are null but there is no calibration to fit them"
                )
        if self.fabric.topology is not None and self.tiers.G4.aggregate_bandwidth_bytes_per_s is not None:
            raise ValueError(
                "tiers.G4.aggregate_bandwidth_bytes_per_s: with fabric.topology the storage's bandwidth is "
                "the topology's; leave it null"
            )
        for name in ("G1", "G2", "G3"):
            t = self.tiers.by_name(name)
            if t.read_bandwidth_bytes_per_s is None or t.latency_s is None:
                raise ValueError(f"tiers.{name}: read_bandwidth_bytes_per_s and latency_s are required")
        return self


class FixedDelayProfile(StrictModel):
    kind: Literal["fixed-delay"] = "fixed-delay"
    name: str = Field(description="Profile name.")
    description: str = Field(description="One line.")
    model_name: str = Field(description="Served model id.")
    ttft_ms: float = Field(default=50.0, ge=0, description="Time to first token, from request receipt.")
    decode_ms_per_token: float = Field(default=1.0, ge=0, description="Gap between output tokens.")
    max_model_len: int = Field(default=131_072, ge=1, description="Longest prompt plus output accepted.")


Profile = Annotated[TieredProfile | FixedDelayProfile, Field(discriminator="kind")]


OFFLOAD_TIERS = ("G2", "G3", "G4")


def offload_off_overrides() -> dict[str, bool]:
    """The profile's tiers with offload off, as `tiers.*.enabled` overrides: the GPU prefix cache
    (G1) on, as an engine keeps it with no offloading backend, and G2-G4 not caching. A profile
    shipped G4-only (ibm-g4, ci) has G1 off to reproduce its published test; turning offload off
    there must not also turn prefix caching off, or the arm measures no reuse, not no offload."""
    return {"tiers.G1.enabled": True, **{f"tiers.{t}.enabled": False for t in OFFLOAD_TIERS}}
