"""serial_prefill: is a recompute run's published total reachable on its GPUs?

The uncached TTFT points fix t(n) = a*n + c*n^2 (`kvbench.model.prefill`); a run of R
requests of mean length n needs R * t(n) of serial prefill. If that exceeds the published
total, the text lists what would reconcile it: batching gains, a shared prefix kept in G1
(and what that would leave of the claimed speedup), more GPUs, or a faster model/setting.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kvbench.audit.bounds.base import BoundKind, Context, basis, stated_of, value
from kvbench.audit.bounds.prefill_scaling import fit_points
from kvbench.audit.quantities import fmt_num
from kvbench.model.prefill import shared_fraction_for_suffix, suffix_time

if TYPE_CHECKING:
    from kvbench.audit.schema import Bound


def _assumptions(b: Bound, n1: float, t1: float, n2: float, t2: float, n: float, gpus: float) -> list[str]:
    out = [
        "a single uncached request's TTFT is compute-bound prefill that already saturates the GPU, so "
        "batching concurrent prefills on it gains little; its time is t(n) = a*n + c*n^2, fitted through "
        f"({fmt_num(n1)} tokens, {fmt_num(t1)} s) and ({fmt_num(n2)} tokens, {fmt_num(t2)} s)",
        "the TTFT test and the recompute run used the same server, model and settings"
        + ("" if gpus == 1 else f"; the run's work is spread evenly over its {fmt_num(gpus)} GPUs"),
        f"every request is {fmt_num(n)} tokens long ({b.tokens} / {b.requests}); t(n) is convex, so unequal "
        "lengths with the same total would take longer: the GPU time is a lower bound",
        "the recompute run caches nothing: every request is prefilled in full; decode, queueing and "
        "transfer time are ignored (they would only add to the GPU time)",
    ]
    if not min(n1, n2) <= n <= max(n1, n2):
        out.append(
            f"{fmt_num(n)} tokens lies outside the fitted range [{fmt_num(min(n1, n2))}, "
            f"{fmt_num(max(n1, n2))}]: the fit is extrapolated"
        )
    return out


def _shared(
    ctx: Context,
    b: Bound,
    a: float,
    c: float,
    n: float,
    t_n: float,
    requests: float,
    total: float,
    gpus: float,
) -> dict[str, Any]:
    """The shared prefix (kept in G1 by the recompute run) that would bring it to the total."""
    target_suffix = (total * gpus - t_n) / (requests - 1.0) if requests > 1 else total * gpus - t_n
    f_fit = shared_fraction_for_suffix(a, c, n, target_suffix)
    f_lin = shared_fraction_for_suffix(t_n / n, 0.0, n, target_suffix)
    f_quad = shared_fraction_for_suffix(0.0, t_n / (n * n), n, target_suffix)
    shared: dict[str, Any] = {
        "how": "shared_prefix",
        "shared_fraction": {"fit": f_fit, "linear": f_lin, "quadratic": f_quad},
    }
    if f_fit is None or f_lin is None or f_quad is None:
        shared["text"] = "no shared prefix suffices: even the first request alone exceeds the total"
        return shared
    shared["text"] = (
        f"every prompt shares a prefix of >= {f_fit:.1%} of its tokens with all others "
        f"({f_lin:.1%} linear to {f_quad:.1%} quadratic cost), kept in GPU memory (G1) and reused "
        "by the recompute run"
    )
    if b.prompts is not None:
        prompts, _ = value(ctx, b, b.prompts, positive=True)
        s = suffix_time(a, c, n, f_fit)
        cap = (t_n + (requests - 1.0) * s) / (t_n + (prompts - 1.0) * s)
        shared["cached_speedup_cap"] = cap
        vs = ""
        if b.claim is not None:
            stated = stated_of(ctx, b.claim)
            shared["claim"], shared["claim_stated"] = b.claim, stated
            vs = f", not the {fmt_num(stated)}x of {b.claim}"
        shared["text"] += (
            f"; but then a cold cache reusing whole prompts ({fmt_num(requests / prompts)} uses each, "
            f"the same f) beats that baseline by at most {cap:.2f}x{vs}"
        )
    return shared


def _gpu_row(ctx: Context, b: Bound, serial: float, total: float, gpus: float) -> dict[str, Any]:
    needed = math.ceil(serial / total - 1e-9)
    row: dict[str, Any] = {
        "how": "gpus",
        "gpus_needed": needed,
        "text": f">= {needed} such GPUs working in parallel (serial {fmt_num(serial)} s / "
        f"{fmt_num(total)} s = {serial / total:.2f}), where the publication says {fmt_num(gpus)}",
    }
    if b.gpus_available is not None:
        avail, _ = value(ctx, b, b.gpus_available, positive=True)
        row["gpus_available"] = avail
        row["time_on_available_s"] = serial / avail
        row["text"] += (
            f"; all {fmt_num(avail)} GPUs of the node would still take {fmt_num(serial / avail)} s"
            if serial / avail > total
            else f"; the node's {fmt_num(avail)} GPUs would reach it ({fmt_num(serial / avail)} s)"
        )
    return row


def compute(ctx: Context, b: Bound) -> dict[str, Any]:
    n1, t1, n2, t2, a, c, used = fit_points(ctx, b)
    tokens, ftok = value(ctx, b, b.tokens, positive=True)
    requests, freq = value(ctx, b, b.requests, positive=True)
    total, ftot = value(ctx, b, b.total, positive=True)
    gpus = value(ctx, b, b.gpus, positive=True)[0] if b.gpus else 1.0
    n = tokens / requests
    t_n = a * n + c * n * n
    serial = requests * t_n
    gpu_time = serial / gpus
    gain = gpu_time / total
    per_gpu = "" if gpus == 1 else f" per GPU ({fmt_num(gpus)} GPUs)"
    shared = _shared(ctx, b, a, c, n, t_n, requests, total, gpus)
    gpu_row = _gpu_row(ctx, b, serial, total, gpus)
    reconcile = [
        {
            "how": "batching",
            "text": f"batching concurrent prefills gains {gain:.2f}x over serial prefill{per_gpu} "
            "(contradicts the assumption that one prefill saturates the GPU)",
            "gain": gain,
        },
        shared,
        gpu_row,
        {
            "how": "faster_prefill",
            "text": f"a model or settings whose prefill is {gain:.2f}x faster than in the TTFT test "
            f"(t({fmt_num(n)}) <= {fmt_num(t_n / gain)} s instead of {fmt_num(t_n)} s)",
        },
    ]
    out: dict[str, Any] = {
        "id": b.id,
        "kind": b.kind,
        "description": b.description,
        "basis": basis([*used, ftok, freq, ftot]),
        "points": [[n1, t1], [n2, t2]],
        "fit": {"a_s_per_token": a, "c_s_per_token2": c},
        "mean_tokens": n,
        "prefill_time_mean_s": t_n,
        "requests": requests,
        "gpus": gpus,
        "serial_gpu_time_s": serial,
        "gpu_time_s": gpu_time,
        "published_total_s": total,
        "needed_gain": gain,
        "reconcile": reconcile,
        "assumptions": _assumptions(b, n1, t1, n2, t2, n, gpus),
        "note": "a two-point fit; the shorter point may itself be implied, see the basis",
    }
    _verdict(out, shared, gpu_row, per_gpu)
    _cold_run(ctx, b, out, t_n, gpus, per_gpu)
    return out


def _verdict(out: dict[str, Any], shared: dict[str, Any], gpu_row: dict[str, Any], per_gpu: str) -> None:
    gain, total, n, t_n = (
        out["needed_gain"],
        out["published_total_s"],
        out["mean_tokens"],
        out["prefill_time_mean_s"],
    )
    requests, gpu_time, gpus = out["requests"], out["gpu_time_s"], out["gpus"]
    if gain <= 1.0:
        out["verdict"] = (
            f"consistent: {fmt_num(gpu_time)} s of serial prefill{per_gpu} fits in the published "
            f"{fmt_num(total)} s ({gain:.2f} of it)"
        )
        out["status"], out["headline"] = "ok", out["verdict"]
        return
    alts = [f"batching gains {gain:.1f}x on a GPU that one prefill already saturates"]
    f_fit = shared["shared_fraction"]["fit"]
    if f_fit is not None:
        cap_txt = ""
        if "cached_speedup_cap" in shared:
            cap_txt = (
                f" (then a cold cache beats that baseline by at most {shared['cached_speedup_cap']:.2f}x"
            )
            cap_txt += f", not {fmt_num(shared['claim_stated'])}x)" if "claim_stated" in shared else ")"
        alts.append(f"prompts share >= {f_fit:.1%} as a prefix cached in G1{cap_txt}")
    node = f" (the node has {fmt_num(gpu_row['gpus_available'])})" if "gpus_available" in gpu_row else ""
    alts.append(f"it ran on >= {gpu_row['gpus_needed']} GPUs{node} or a {gain:.1f}x faster model/setting")
    out["verdict"] = (
        f"inconsistent unless {', or '.join(alts)}: {fmt_num(requests)} x t({fmt_num(n)}) = "
        f"{fmt_num(requests)} x {fmt_num(t_n)} s = {fmt_num(gpu_time)} s of serial prefill{per_gpu}, "
        f"{gain:.2f}x the published {fmt_num(total)} s"
    )
    where = "one GPU" if gpus == 1 else f"{fmt_num(gpus)} GPUs"
    out["status"] = "finding"
    out["headline"] = (
        f"the {fmt_num(total)} s baseline is {gain:.1f}x faster than {where} can prefill "
        f"{fmt_num(requests)} x {fmt_num(n)} tokens ({fmt_num(gpu_time)} s"
        + ("; rests on an implied figure)" if "implied" in out["basis"] else ")")
    )


def _cold_run(ctx: Context, b: Bound, out: dict[str, Any], t_n: float, gpus: float, per_gpu: str) -> None:
    if b.cold_total is None or b.prompts is None:
        return
    cold, _ = value(ctx, b, b.cold_total, positive=True)
    prompts, _ = value(ctx, b, b.prompts, positive=True)
    first_uses = prompts * t_n / gpus
    out["cold_run"] = {
        "first_uses_gpu_time_s": first_uses,
        "published_total_s": cold,
        "needed_gain": first_uses / cold,
    }
    out["cold_run_text"] = (
        f"a cold-cache run ({b.cold_total} = {fmt_num(cold)} s) must still prefill each of the "
        f"{fmt_num(prompts)} prompts once: {fmt_num(prompts)} x {fmt_num(t_n)} s = "
        f"{fmt_num(first_uses)} s{per_gpu}, {first_uses / cold:.1f}x its total, unless prompts "
        "share prefixes (see the cold_reuse bound)"
    )


def lines(b: dict[str, Any]) -> list[str]:
    n, t = b["mean_tokens"], b["prefill_time_mean_s"]
    gpus = "1 GPU" if b["gpus"] == 1 else f"{fmt_num(b['gpus'])} GPUs"
    fit = b["fit"]
    out = [
        f"t(n) = a*n + c*n^2 through both points: a = {fit['a_s_per_token']:.3e} s/token, "
        f"c = {fit['c_s_per_token2']:.3e} s/token^2",
        f"mean request {fmt_num(n)} tokens: t({fmt_num(n)}) = {fmt_num(t)} s",
        f"serial GPU prefill of the run: {fmt_num(b['requests'])} x {fmt_num(t)} s = "
        f"{fmt_num(b['serial_gpu_time_s'])} s; on {gpus}: {fmt_num(b['gpu_time_s'])} s "
        f"against the published {fmt_num(b['published_total_s'])} s",
        f"concurrency gain the run needs from batching prefills: {b['needed_gain']:.2f}x",
        "what would reconcile it:",
    ]
    out += [f"  - {r['text']}" for r in b["reconcile"]]
    if "cold_run_text" in b:
        out.append(f"also: {b['cold_run_text']}")
    return out


KIND = BoundKind("serial_prefill", compute, lines)
