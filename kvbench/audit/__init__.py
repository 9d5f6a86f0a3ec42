"""Audit published figures and claims: recompute each one from the data it cites.

`kvbench audit [CLAIMS.yaml]` reads a claims file (default: the shipped
``kvbench/reference/ibm-g4.yaml``), recomputes every claim and prints a ledger: a
verdict table (one line per claim, sizing check and bound), then each finding in
detail, the figures (published, derived, from the model, implied) and every
assumption made on the way.

Modules: schema (the file's model), reader (reading it), bound_fields (what each bound kind
reads), checks (file and per-item problems), units, quantities
(printed ranges), expr (the expression language), figures (values and provenance),
claims (one claim), readings (alternative readings), sizing, bounds/ (one module per
kind, a registry), ledger (results), text (the ledger as text), commands (CLI).

Claims file schema (YAML, `schema: kvbench-claims/1`)
-----------------------------------------------------
::

    schema: kvbench-claims/1
    name: my-paper                       # short name
    title: "..."                         # optional
    sources: {paper: {title: "...", date: "..."}}      # optional, for `source:`
    model: {geometry: gpt-oss-120b}      # optional: a kvbench preset, a config.json
                                         # path (relative to this file), or inline
                                         # KVGeometry fields
    units: [widgets]                     # optional: extra counted things (own dimension)
    compare: [...]                       # optional: rows for run reports (kvbench report)
    figures:                             # the numbers
      - id: rate_cached                  # [A-Za-z_][A-Za-z0-9_]*
        value: 4.26                      # as printed; null = not published (unknown)
        unit: req/s                      # s, ms, GB, GiB, GB/s, tokens, req/s, B/token, x, % ...
                                         # (the closed table in units.py; others are errors)
        decimals: 2                      # decimals as printed (-6 for "24 million");
                                         # the figure stands for [4.255, 4.265);
                                         # default: as the value is written (4.26 -> 2)
        source: paper                    # optional
        description: "..."               # optional
        test: throughput                 # optional tag(s) grouping related figures
      - id: per_request                  # a derived figure: kvbench's arithmetic
        expr: "tokens_total / requests_total"
        unit: tokens/request
      - id: kv_per_token                 # from the model's geometry
        from_model: bytes_per_token_full_only   # | bytes_per_token_all_layers | context_length
        unit: B/token
    claims:                              # statements to check
      - id: noisy-reduction
        expr: "percent_drop(rate_cached, rate_noisy)"
        stated: 18                       # the value as printed
        unit: "%"
        decimals: 0                      # "18%" means [17.5, 18.5); default: as written
        description: "..."
        assumptions: ["..."]             # optional, printed in the ledger
    sizing:                              # optional: do tokens, prompts and bytes fit the model?
      - {id: ws, tokens: tokens_total, requests: requests_total,
         prompts: prompts_distinct, bytes: kv_data_total}
    bounds:                              # optional: model-based limits
      - {id: reuse, kind: cold_reuse, requests: requests_total,
         prompts: prompts_distinct, claim: throughput-speedup}
      - {id: scaling, kind: prefill_scaling,        # uncached TTFT at two lengths
         short_tokens: n_short, short_time: ttft_short, long_tokens: n_long, long_time: ttft_long}
      - id: gpu-time                     # serial_prefill: a recompute run's GPU time from
        kind: serial_prefill             # t(n) = a*n + c*n^2 fitted to the two TTFT points
        short_tokens: n_short            # (same four fields as prefill_scaling)
        short_time: ttft_short
        long_tokens: n_long
        long_time: ttft_long
        tokens: tokens_total             # mean length = tokens / requests
        requests: requests_total
        total: total_baseline            # the published total the GPU time is held against
        prompts: prompts_distinct        # optional: the cold_reuse f that would reconcile it
        claim: throughput-speedup        # optional: speedup the reconciliation is compared with
        gpus: gpus_used                  # optional (default 1); gpus_available: optional
        cold_total: total_cached         # optional: a cold-cache run computing each prompt once
      - id: noise                        # bandwidth_headroom: competing traffic + the run's
        kind: bandwidth_headroom         # own rate against each bandwidth, with headroom
        noise: noise_bandwidth
        noise_sources: noise_clients     # optional
        demand: [kv_read_rate]           # rate figures; and/or sizing + duration: the
        sizing: ws                       # fitting readings of a sizing check / duration
        duration: total_cached
        rate_before: rate_cached         # optional pair: throughput without / with the noise
        rate_after: rate_noisy
        capacities:                      # noise: does the competing traffic cross it?
          - {figure: storage_read_bw, noise: true}
          - {figure: client_net_bw, noise: false}

Expressions use figure ids, numbers, ``+ - * / **`` and the functions
ratio(a, b), quotient(a, b), difference(a, b), sum(...), product(...),
percent_change(old, new), percent_increase(old, new), percent_drop(old, new),
percent_of(part, whole), reciprocal(a), abs(a). The percent_* functions return
fractions (0.155); a claim whose unit is "%" shows them as 15.5%. Values are
computed in base units (s, B, counts), so "GB" and "B/token" figures mix freely.

Units are checked as dimensions: adding s to GB, or claiming a req/s expression in GB, makes
that claim ``invalid`` (the reason and a fix such as ``ms/request``); a figure with an unknown
unit is invalid and so is everything using it; every other item is still judged. Only a file
that cannot be read at all (YAML, unknown keys, a key given twice, yes/no where a number is
meant, a `units:` word that is a built-in unit) is an error (exit 2).

Verdicts: ``consistent`` when the recomputed value rounds to the stated one (or
can, given the rounding of the figures it uses: said so in a note);
``discrepancy`` otherwise; ``unverifiable`` when a claim needs a figure that was
not published, or rests on one that another claim only implies (the value it
would need is solved for and shown); ``invalid`` when it cannot be judged. Bounds and
sizing checks end in ``finding``, ``ok`` or ``invalid`` (one status, rendered in the text and
the JSON alike); ``kvbench audit --strict`` exits 1 on any discrepancy, finding or invalid item.

For a discrepancy, alternative readings are searched: the claim's own computation read as a
slip (`slips.py`: a percentage's other base, points for percent, the inverse ratio, GB for GiB,
a unit-prefix slip, bits for bytes, one count for another, a dropped count of GPUs or nodes) and
the file's other figures and pairs of them (`readings.py`). A reading is shown only when it
gives the stated value within its rounding, and it names its slip.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvbench.audit.ledger import Ledger
    from kvbench.audit.schema import ClaimsFile

# Imported on first use, so that `kvbench --help` (which registers audit/commands.py) loads
# neither pydantic nor yaml.
_LAZY = {
    "ClaimResult": "kvbench.audit.ledger",
    "FigureValue": "kvbench.audit.ledger",
    "Ledger": "kvbench.audit.ledger",
    "Reading": "kvbench.audit.ledger",
    "ClaimsFile": "kvbench.audit.schema",
    "load_claims": "kvbench.audit.reader",
    "load_reference": "kvbench.audit.reader",
    "parse_claims": "kvbench.audit.reader",
    "format_ledger": "kvbench.audit.text",
}

__all__ = [*_LAZY, "audit", "audit_file"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kvbench.audit' has no attribute {name!r}")


def audit(cf: ClaimsFile) -> Ledger:
    """Recompute every figure, claim, sizing check and bound of a claims file.

    An item that cannot be judged (a unit or dimension error, a division by zero, a zero count
    in a bound) gets the verdict `invalid` with the reason; every other item is still judged.
    What breaks every item (the model's geometry) is a UsageError that names the file.
    """
    from kvbench.errors import UsageError

    try:
        return _audit(cf)
    except UsageError as exc:
        prefix = f"{cf.source}: "
        raise UsageError(exc.message if exc.message.startswith(prefix) else prefix + exc.message) from None


def _audit(cf: ClaimsFile) -> Ledger:
    from kvbench.audit.bounds import BOUND_KINDS, Context
    from kvbench.audit.checks import Problem, item_problems
    from kvbench.audit.claims import check_claim
    from kvbench.audit.figures import Figures
    from kvbench.audit.ledger import GENERAL_ASSUMPTIONS, Ledger, invalid_check
    from kvbench.audit.sizing import sizing_check
    from kvbench.errors import UsageError

    problems = item_problems(cf)
    figs = Figures(cf, problems.figures)
    figs.solve_unknowns(skip=set(problems.claims))
    claims = [check_claim(figs, c, problems.claims.get(c.id)) for c in cf.claims]

    def judged(section: str, item: Any, problem: Problem | None, run: Any) -> dict[str, Any]:
        if problem is None:
            try:
                return run()
            except UsageError as exc:
                problem = Problem(exc.message.removeprefix(f"{cf.source}: "))
        return invalid_check(item.id, getattr(item, "kind", section), item.description, problem.text())

    sizing = [
        judged("sizing", s, problems.sizing.get(s.id), lambda s=s: sizing_check(figs, s)) for s in cf.sizing
    ]
    ctx = Context(figs, claims, sizing)
    bounds = [
        judged("bound", b, problems.bounds.get(b.id), lambda b=b: BOUND_KINDS[b.kind].compute(ctx, b))
        for b in cf.bounds
    ]
    assumptions = list(GENERAL_ASSUMPTIONS)
    for f in cf.figures:
        if f.kind == "published" and ("taken to be" in f.description or "assumes" in f.description):
            assumptions.append(f"{f.id}: {f.description}")
    return Ledger(
        name=cf.name,
        title=cf.title,
        figures=list(figs.values.values()),
        claims=claims,
        sizing=sizing,
        bounds=bounds,
        assumptions=assumptions,
    )


def audit_file(path: Path | str | None = None) -> Ledger:
    from kvbench.audit.reader import load_claims

    return audit(load_claims(path))
