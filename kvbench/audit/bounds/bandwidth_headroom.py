"""bandwidth_headroom: competing traffic plus the run's own transfer rate against each bandwidth.

The run's own rate is the largest of its `demand` figures and of the fitting sizing readings
spread over `duration`; the competing traffic counts against a capacity only where it passes
through it. With a throughput pair (before/after the noise), it also says what capacity
would explain the drop by saturation alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbench.audit.bounds.base import BoundKind, Context, basis, value
from kvbench.audit.quantities import fmt_num
from kvbench.audit.units import parse_unit
from kvbench.errors import UsageError
from kvbench.model.topology import bandwidth_reading

if TYPE_CHECKING:
    from kvbench.audit.ledger import FigureValue
    from kvbench.audit.schema import Bound


def _demands(ctx: Context, b: Bound, used: list[FigureValue], rate_dims: Any) -> list[dict[str, Any]]:
    demands: list[dict[str, Any]] = []
    for ref in b.demand:
        v, fv = value(ctx, b, ref)
        if ctx.figs.units[ref].dims != rate_dims:
            raise UsageError(f"bounds '{b.id}': demand '{ref}' ({fv.unit}) is not a rate like {b.noise}")
        used.append(fv)
        demands.append(
            {"source": ref, "text": f"{ref} ({fv.kind}{' = ' + fv.expr if fv.expr else ''})", "rate": v}
        )
    if b.sizing is not None:
        duration, _ = value(ctx, b, b.duration, positive=True)
        sz = next(x for x in ctx.sizing if x["id"] == b.sizing)
        seen_bytes: set[float] = set()
        for srow in sz["rows"]:
            if not srow["fits"] or round(srow["bytes"], -6) in seen_bytes:
                continue
            seen_bytes.add(round(srow["bytes"], -6))
            demands.append(
                {
                    "source": f"sizing {b.sizing}",
                    "text": f"sizing {b.sizing}: {srow['tokens'].split(':')[0]} x {srow['layers']} "
                    f"= {fmt_num(srow['bytes'] / 1e9, 1)} GB, over {b.duration} "
                    f"({ctx.figs.show(b.duration or '')})",
                    "rate": srow["bytes"] / duration,
                }
            )
    if not demands:
        raise UsageError(
            f"bounds '{b.id}': no transfer rate to check (the sizing check has no fitting reading)"
        )
    return demands


def _row(
    cap: Any,
    capacity: float,
    description: str,
    demand: float,
    noise: float,
    per_source: float | None,
    keep: float | None,
) -> dict[str, Any]:
    shared = noise if cap.noise else 0.0
    load = demand + shared
    row: dict[str, Any] = {
        "figure": cap.figure,
        "description": cap.description or description,
        "capacity": capacity,
        "noise_shares": cap.noise,
        "load": load,
        "utilisation": load / capacity,
        "headroom": capacity - load,
        "fits": load <= capacity,
        # how many times its average the run's own traffic could burst to before saturating
        "burst_factor_to_saturate": (capacity - shared) / demand if capacity > shared else 0.0,
        "load_if_noise_shared": demand + noise,
    }
    if per_source is not None:
        row["noise_per_source_fits"] = per_source <= capacity
    if keep is not None:
        # saturation explains the drop only if the capacity left to the run is what it got under noise
        row["capacity_to_explain_drop"] = shared + demand * keep
    return row


def compute(ctx: Context, b: Bound) -> dict[str, Any]:
    noise, fnoise = value(ctx, b, b.noise)
    rate_dims = ctx.figs.units[fnoise.id].dims
    show = ctx.figs.units[b.capacities[0].figure]  # print rates in the first capacity's unit

    def gbs(x: float) -> str:
        return f"{fmt_num(x / show.factor, 1)} {show.text}"

    used = [fnoise]
    demands = _demands(ctx, b, used, rate_dims)
    demand = max(d["rate"] for d in demands)
    per_source = None
    if b.noise_sources is not None:
        per_source = noise / value(ctx, b, b.noise_sources, positive=True)[0]
    keep = None  # throughput kept under the competing traffic (fraction)
    if b.rate_before is not None and b.rate_after is not None:
        before, fb = value(ctx, b, b.rate_before, positive=True)
        after, fa = value(ctx, b, b.rate_after)
        used += [fb, fa]
        keep = after / before
    rows = []
    for cap in b.capacities:
        capacity, fcap = value(ctx, b, cap.figure, positive=True)
        if ctx.figs.units[cap.figure].dims != rate_dims:
            raise UsageError(
                f"bounds '{b.id}': capacity '{cap.figure}' ({fcap.unit}) is not a rate like {b.noise}"
            )
        used.append(fcap)
        rows.append(_row(cap, capacity, fcap.description, demand, noise, per_source, keep))
    fits = all(r["fits"] for r in rows)
    assumptions = [
        f"the run's own traffic moves at its average rate over the run: the largest reading, {gbs(demand)}; "
        "bursts are higher (see the burst factor)",
        f"the competing {gbs(noise)} is counted against a resource only where it passes through it: "
        + "; ".join(
            f"{r['figure']}: {'yes' if r['noise_shares'] else 'no (only the run itself)'}" for r in rows
        ),
        "bandwidths are the published maxima and add linearly; protocol overhead, erasure-coding "
        "traffic and writes of the cache fill are ignored",
    ]
    if per_source is not None:
        assumptions.append(
            f"the competing traffic is spread evenly over its {fmt_num(noise / per_source)} sources: "
            f"{gbs(per_source)} each"
        )
    out: dict[str, Any] = {
        "id": b.id,
        "kind": b.kind,
        "description": b.description,
        "basis": basis(used),
        "unit": show.text,
        "noise": noise,
        "noise_per_source": per_source,
        "demand_readings": demands,
        "demand": demand,
        "rows": rows,
        "fits": fits,
        "throughput_drop": None if keep is None else 1.0 - keep,
        "assumptions": assumptions,
        "note": "average rates over a run; a bound from totals, not a measurement of the fabric",
    }
    # the twin's reading of the same links (the mock's one sharing rule): ~0 here means bandwidth
    # alone predicts no drop, and the mechanisms it names are the mock's knobs for the rest
    caps = [(r["figure"], r["capacity"], r["noise_shares"]) for r in rows]
    flows = round(noise / per_source) if per_source else 1
    out["topology"] = bandwidth_reading(caps, demand, noise, flows)
    _verdict(out, rows, gbs, keep)
    return out


def _verdict(out: dict[str, Any], rows: list[dict[str, Any]], gbs: Any, keep: float | None) -> None:
    parts = "; ".join(
        f"{r['figure']} {gbs(r['load'])} of {gbs(r['capacity'])} ({r['utilisation']:.0%}, "
        f"{gbs(r['headroom'])} {'headroom' if r['fits'] else 'OVER'})"
        for r in rows
    )
    drop = "" if keep is None else f" the {1.0 - keep:.1%} throughput drop"
    if out["fits"]:
        explain = ""
        if keep is not None:
            need = "; ".join(
                f"{r['figure']} to deliver only {gbs(r['capacity_to_explain_drop'])} "
                f"of its {gbs(r['capacity'])}"
                for r in rows
                if r["noise_shares"]
            )
            spared = [r["figure"] for r in rows if not r["noise_shares"]]
            explain = f" (saturation would need {need or 'a resource the competing traffic crosses'}"
            explain += f"; {', '.join(spared)} carries none of the competing traffic)" if spared else ")"
        out["verdict"] = (
            f"the totals fit: {parts}. Bandwidth saturation alone cannot explain{drop or ' a slowdown'}"
            f"{explain}: it points at contention elsewhere (switch buffers and queueing, added latency "
            "per block read, storage-server CPU) or at bursts well above the average rate"
        )
        busiest = max(rows, key=lambda r: r["utilisation"])
        out["status"] = "ok"
        out["headline"] = (
            f"bandwidth fits (busiest: {busiest['figure']} at {busiest['utilisation']:.0%}): "
            f"saturation alone cannot explain{drop or ' a slowdown'}"
        )
    else:
        over = ", ".join(r["figure"] for r in rows if not r["fits"])
        out["verdict"] = f"over capacity in {over}: {parts}. Saturation can explain{drop or ' a slowdown'}"
        out["status"] = "finding"
        out["headline"] = f"over capacity in {over}: saturation can explain{drop or ' a slowdown'}"


def lines(b: dict[str, Any]) -> list[str]:
    u = b["unit"]
    k = parse_unit(u).factor

    def r(x: float) -> str:
        return fmt_num(x / k, 1)

    out = ["the run's own transfer rate (the largest reading is used):"]
    out += [f"  - {d['text']}: {r(d['rate'])} {u}" for d in b["demand_readings"]]
    noise = f"competing traffic: {r(b['noise'])} {u}"
    if b["noise_per_source"] is not None:
        noise += (
            f" ({r(b['noise_per_source'])} {u} from each of {fmt_num(b['noise'] / b['noise_per_source'])})"
        )
    out.append(noise)
    drop = b["throughput_drop"] is not None
    head = f"{'bandwidth':<16} {'capacity':>9} {'noise?':>6} {'load':>9} {'use':>5} {'headroom':>9}"
    head += f" {'burst x':>8}"
    out.append(head + (f" {'saturates at':>13}" if drop else "") + f"   ({u})")
    for row in b["rows"]:
        line = (
            f"{row['figure']:<16} {r(row['capacity']):>9} {'yes' if row['noise_shares'] else 'no':>6} "
            f"{r(row['load']):>9} {row['utilisation']:>5.0%} {r(row['headroom']):>9} "
            f"{row['burst_factor_to_saturate']:>7.1f}x"
        )
        out.append(line + (f" {r(row['capacity_to_explain_drop']):>13}" if drop else ""))
    out.append("burst x: how far the run's own traffic could exceed its average before saturating")
    for row in b["rows"]:
        if not row["noise_shares"]:
            over = row["load_if_noise_shared"] > row["capacity"]
            text = (
                f"if the competing traffic did cross {row['figure']}: {r(row['load_if_noise_shared'])} "
                f"of {r(row['capacity'])} {u}: {'over capacity' if over else 'fits'}"
            )
            if "noise_per_source_fits" in row:
                text += (
                    f"; each noise source ({r(b['noise_per_source'])} {u}) "
                    f"{'fits' if row['noise_per_source_fits'] else 'exceeds'} one such link"
                )
            out.append(text)
    if drop:
        out.append(
            f"'saturates at': the capacity at which the {b['throughput_drop']:.1%} drop would be "
            "explained by saturation alone (the run's share falling to its rate under the competing traffic)"
        )
    t = b.get("topology")
    if t:
        out.append(f"the twin's links ({t['rule']}): bandwidth alone predicts {t['bandwidth_drop']:.1%}")
        if t["other_mechanisms"]:
            others = "; ".join(t["other_mechanisms"])
            out.append(f"what else could cost it (mock knobs, off by default): {others}")
    return out


KIND = BoundKind("bandwidth_headroom", compute, lines)
