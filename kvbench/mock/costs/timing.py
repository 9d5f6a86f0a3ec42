"""The mock's timing model. Pure: no I/O, no clock, no asyncio; the server only waits
for what these functions say (times the profile's ``time_scale``).

Prefill (one request alone on the GPU)
    Computing token i of a sequence costs a linear part (projections, MLP: ``a``) plus
    attention over the i tokens before it (``b * i``). With a cached prefix of c tokens
    and n tokens in all, the GPU computes tokens c..n-1:
        prefill(n, c) = sum_{i=c}^{n-1} (a + b*i) ~= a*(n - c) + b*(n^2 - c^2)/2
    TTFT of a cold request is prefill(n, 0) (it includes producing the first token).
    Fit: two published cold points (n1, T1), (n2, T2) give two linear equations in a, b.

Onboarding (a cached prefix that is not in GPU memory)
    A hit in G3/G4 is read into host memory, then copied to the GPU in chunks; a G2 hit is
    only copied. The stages run as a pipeline, so
        onboard = max over stages (latency_s + bytes / rate) + one chunk / host->GPU bandwidth
    where a stage's rate is its share of the tier (processor sharing with a per-transfer
    cap: each of k concurrent transfers gets min(read_bandwidth, aggregate / k)). G4 reads
    cross the profile's topology (kvbench.model.topology: storage, networks) beside the
    noise flows: each of k reads gets its max-min fair share, capped at read_bandwidth, with
    the noise at its offered rate per flow; contention knobs (default off) add latency under
    load, storage-CPU slowdown and incast loss, scaled by the noise's load. Bytes of tokens
    s..e of a prefix are ``kv_bytes(e) - kv_bytes(s)`` of the profile's KVGeometry (sliding_at_full as set).
    Fit: with G4 reads the slowest stage, the two published warm points give
        warm(n) - prefill(n, c) - tail = L4 + kv_bytes(c) / BW4
    two linear equations in L4 and 1/BW4, where c = floor((n-1)/block)*block is the
    cached prefix (the last token is always computed, as in vLLM).

Decode
    One step serves every decoding request at once (continuous batching):
        step = decode_step_base_s + sum(kv_bytes(context_i)) / hbm_bandwidth
    i.e. reading the weights once plus each sequence's KV (memory bound).

Sharing the GPU
    Prefills and decode steps are jobs on ONE processor-sharing resource (capacity one GPU
    second per second): k concurrent jobs each progress at 1/k. So throughput under many
    connections falls out of the model; there is no throughput knob. Requests beyond
    ``max_num_seqs`` wait for admission (queue time). A profile with ``gpu.step`` runs the
    GPU in steps with a token budget instead (kvbench.mock.costs.step: chunked prefill sharing
    steps with decodes, a fixed cost per request), as vLLM and llama.cpp schedule.

Cache writes (newly computed blocks written through to enabled lower tiers) are
asynchronous and cost the request no time; they use no read bandwidth (links are full
duplex and offload runs off the request path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kvbench.mock.config import TIER_NAMES, Calibration, TieredProfile
from kvbench.mock.costs.step import StepParams
from kvbench.model import prefill as _prefill
from kvbench.model.kv_geometry import PRESETS, KVGeometry
from kvbench.model.topology import PRESETS as TOPOLOGIES
from kvbench.model.topology import Contention, Share, Topology, two_links

NoiseFlows = Sequence[float]  # offered rate of each noise flow, modelled bytes per model second


def prefill_seconds(n: int, c: int, a: float, b: float) -> float:
    """GPU seconds to prefill tokens c..n-1 of an n-token prompt (see module docstring).

    The profile's b is the per-token attention slope; `kvbench.model.prefill` writes the same
    cost as a*(n-c) + (b/2)*(n^2-c^2), the one convention shared with the audit.
    """
    return _prefill.prefill_time(n, c, a, b / 2.0)


def fit_prefill(p1: tuple[int, float], p2: tuple[int, float]) -> tuple[float, float]:
    """(a, b) with prefill_seconds(n, 0, a, b) == T at both points (n, T)."""
    (n1, t1), (n2, t2) = p1, p2
    try:
        a, c = _prefill.fit_prefill(n1, t1, n2, t2)
    except ValueError:
        raise ValueError("calibration: the two uncached points must have different lengths") from None
    b = 2.0 * c
    if a < 0 or b < 0:
        raise ValueError(f"calibration: uncached points give negative coefficients (a={a}, b={b})")
    return a, b


# ----------------------------------------------------------------------------- shared resources


class SharedResource:
    """Processor sharing with a per-job cap, on whatever clock the caller passes in.

    Each of the k jobs in progress advances at min(per_job_cap, capacity / k) units per time
    unit; whenever a job joins or leaves, or the capacity changes, the rates change and the
    caller asks next_finish() again (event-driven). `share`, when given, replaces that rule:
    share(k) is each of k jobs' rate (a link of a topology, shared with noise flows).
    """

    def __init__(
        self, capacity: float, per_job_cap: float | None = None, share: Callable[[int], float] | None = None
    ) -> None:
        self.capacity = capacity
        self.per_job_cap = per_job_cap
        self.share = share
        self._remaining: dict[int, float] = {}
        self._t = 0.0

    def __len__(self) -> int:
        return len(self._remaining)

    def rate_for(self, k: int) -> float:
        """Each job's rate with k jobs in progress."""
        if k <= 0:
            return 0.0
        if self.share is not None:
            return self.share(k)
        r = self.capacity / k
        return min(r, self.per_job_cap) if self.per_job_cap is not None else r

    def rate(self) -> float:
        return self.rate_for(len(self._remaining))

    def advance(self, now: float) -> None:
        dt = now - self._t
        if dt > 0 and self._remaining:
            done = self.rate() * dt
            for job in self._remaining:
                self._remaining[job] -= done
        self._t = max(self._t, now)

    def add(self, now: float, job: int, work: float) -> None:
        self.advance(now)
        self._remaining[job] = work

    def remove(self, now: float, job: int) -> float:
        self.advance(now)
        return self._remaining.pop(job, 0.0)

    def set_capacity(self, now: float, capacity: float) -> None:
        self.advance(now)
        self.capacity = capacity

    def next_finish(self) -> float | None:
        """When the first job in progress finishes if nothing changes; None when idle."""
        if not self._remaining:
            return None
        r = self.rate()
        if r <= 0:
            return None
        return self._t + max(0.0, min(self._remaining.values())) / r

    def pop_finished(self, now: float, tolerance: float = 1e-9) -> list[int]:
        """Advance to `now` and take out the jobs with at most `tolerance` time units left."""
        self.advance(now)
        r = self.rate()
        if r <= 0:
            return []
        done = [j for j, rem in self._remaining.items() if rem <= r * tolerance]
        for j in done:
            del self._remaining[j]
        return done


def processor_sharing_finish_times(
    jobs: Sequence[tuple[float, float]], capacity: float, per_job_cap: float | None = None
) -> list[float]:
    """Finish time of each (arrival, work) job on one SharedResource. Pure; for tests and sizing."""
    res = SharedResource(capacity, per_job_cap)
    order = sorted(range(len(jobs)), key=lambda i: jobs[i][0])
    finish = [0.0] * len(jobs)
    k = 0
    now = 0.0
    while k < len(order) or len(res):
        nxt = res.next_finish()
        arrival = jobs[order[k]][0] if k < len(order) else None
        if arrival is not None and (nxt is None or arrival <= nxt):
            now = arrival
            res.add(now, order[k], jobs[order[k]][1])
            k += 1
        else:
            assert nxt is not None
            now = nxt
            for j in res.pop_finished(now):
                finish[j] = now
    return finish


# ----------------------------------------------------------------------------- resolved parameters


@dataclass(frozen=True)
class TierParams:
    name: str
    enabled: bool
    capacity_bytes: float
    read_bandwidth: float  # bytes per model second, one transfer alone
    aggregate_bandwidth: float  # shared by concurrent transfers
    latency_s: float


@dataclass(frozen=True)
class ModelParams:
    """A tiered profile with every coefficient resolved (fitted where the YAML says null)."""

    geometry: KVGeometry
    sliding_at_full: bool
    block_tokens: int
    prefill_a: float
    prefill_b: float
    decode_base_s: float
    hbm_bandwidth: float
    tiers: tuple[TierParams, ...]  # G1..G4
    topology: Topology  # the links G4 reads cross, and the noise's path
    contention: Contention
    noise_scale: float
    time_scale: float
    onboard_chunk_tokens: int
    max_num_seqs: int
    max_model_len: int
    step: StepParams | None = None  # gpu.step: the step scheduler instead of processor sharing
    request_fixed_s: float = 0.0  # gpu.request_fixed_s: per request before prefill, no GPU

    def tier(self, name: str) -> TierParams:
        return self.tiers[TIER_NAMES.index(name)]

    # --- sizes
    def kv_bytes(self, tokens: int) -> float:
        return self.geometry.kv_bytes(tokens, self.sliding_at_full) if tokens > 0 else 0.0

    def range_bytes(self, start: int, end: int) -> float:
        return self.kv_bytes(end) - self.kv_bytes(start)

    @property
    def block_bytes(self) -> float:
        """Bytes one cached block occupies in a tier (marginal bytes per token x block)."""
        return self.geometry.bytes_per_token(self.sliding_at_full) * self.block_tokens

    def capacity_blocks(self, name: str) -> int:
        return int(self.tier(name).capacity_bytes // self.block_bytes)

    def cacheable_tokens(self, n: int) -> int:
        """Longest prefix of an n-token prompt that can come from cache (whole blocks, < n)."""
        return max(0, (n - 1) // self.block_tokens) * self.block_tokens

    # --- times (model seconds)
    def prefill_s(self, n: int, c: int) -> float:
        return prefill_seconds(n, c, self.prefill_a, self.prefill_b)

    def decode_step_s(self, contexts: Iterable[int]) -> float:
        return self.decode_base_s + sum(self.kv_bytes(c) for c in contexts) / self.hbm_bandwidth

    @property
    def noise_link(self) -> str | None:
        """The link where the noise competes with G4 reads (None: their paths share none)."""
        return self.topology.shared_link

    @property
    def noise_link_capacity(self) -> float | None:
        return self.topology.noise_link_capacity()

    def g4_share(self, concurrent: int, noise: NoiseFlows = ()) -> Share:
        """How `concurrent` G4 reads and the noise flows share the topology (max-min fair per flow)."""
        return self.topology.share(concurrent, self.tier("G4").read_bandwidth, noise, self.contention)

    def g4_latency_s(self, noise: NoiseFlows = ()) -> float:
        """G4 access latency, plus latency under load (contention.loaded_latency_s x the noise's load)."""
        extra = self.contention.loaded_latency_s
        u = self.g4_share(1, noise).noise_load if extra and noise else 0.0
        return self.tier("G4").latency_s + extra * u

    def transfer_rate(self, name: str, concurrent: int = 1, noise: NoiseFlows = ()) -> float:
        """Bytes per model second each of `concurrent` transfers from tier `name` gets."""
        if name == "G4":
            return self.g4_share(max(1, concurrent), noise).cache_each
        t = self.tier(name)
        return min(t.read_bandwidth, t.aggregate_bandwidth / max(1, concurrent))

    def chunk_tail_s(self, cached_tokens: int) -> float:
        chunk = min(self.onboard_chunk_tokens, cached_tokens)
        return self.range_bytes(0, chunk) / self.tier("G2").read_bandwidth if chunk > 0 else 0.0

    def onboard_s(
        self, bytes_by_tier: dict[str, float], concurrent: int = 1, noise: NoiseFlows = ()
    ) -> float:
        """Onboarding time with `concurrent` identical transfers on every link (see docstring)."""
        stages = []
        h2d = bytes_by_tier.get("G2", 0.0)
        for name in ("G3", "G4"):
            nbytes = bytes_by_tier.get(name, 0.0)
            if nbytes > 0:
                rate = self.transfer_rate(name, concurrent, noise)
                latency = self.g4_latency_s(noise) if name == "G4" else self.tier(name).latency_s
                stages.append(latency + nbytes / rate)
                h2d += nbytes
        if h2d <= 0:
            return 0.0
        stages.append(self.tier("G2").latency_s + h2d / self.transfer_rate("G2", concurrent))
        lower = sum(bytes_by_tier.get(n, 0.0) for n in ("G3", "G4")) > 0
        tail = self.chunk_tail_s(self.onboard_chunk_tokens) if lower else 0.0
        return max(stages) + tail

    def cold_ttft_s(self, n: int) -> float:
        return self.prefill_s(n, 0)

    def warm_ttft_s(self, n: int, tier: str = "G4", noise: NoiseFlows = ()) -> float:
        """TTFT of an n-token prompt alone whose cacheable prefix sits in `tier`."""
        c = self.cacheable_tokens(n)
        onboard = 0.0 if tier == "G1" else self.onboard_s({tier: self.kv_bytes(c)}, 1, noise)
        return onboard + self.prefill_s(n, c)


def fit_g4(cal: Calibration, a: float, b: float, partial: ModelParams) -> tuple[float, float]:
    """(latency_s, read_bandwidth) of G4 that reproduce the two cached points (see docstring)."""
    rows = []
    for p in cal.cached:
        c = partial.cacheable_tokens(p.tokens)
        rest = (
            p.ttft_s - prefill_seconds(p.tokens, c, a, b) - partial.chunk_tail_s(partial.onboard_chunk_tokens)
        )
        rows.append((partial.kv_bytes(c), rest))
    (x1, y1), (x2, y2) = rows
    if x1 == x2:
        raise ValueError("calibration: the two cached points must have different lengths")
    inv_bw = (y2 - y1) / (x2 - x1)
    latency = y1 - inv_bw * x1
    if inv_bw <= 0 or latency < 0:
        raise ValueError(f"calibration: cached points give latency {latency} s, 1/bandwidth {inv_bw}")
    return latency, 1.0 / inv_bw


def derive_params(profile: TieredProfile) -> ModelParams:
    """Resolve a tiered profile: fit what the YAML leaves null from its calibration points."""
    geometry = PRESETS[profile.geometry]
    cal = profile.calibration
    a, b = profile.gpu.prefill_linear_s_per_token, profile.gpu.prefill_quadratic_s_per_token2
    if a is None or b is None:
        assert cal is not None  # the profile validator guarantees it
        pts = [(p.tokens, p.ttft_s) for p in cal.uncached]
        a, b = fit_prefill(pts[0], pts[1])
    topology = _topology(profile)
    tiers = []
    for name in TIER_NAMES:
        t = profile.tiers.by_name(name)
        bw = t.read_bandwidth_bytes_per_s or 1.0  # G4 placeholder until fitted below
        aggregate = t.aggregate_bandwidth_bytes_per_s or bw
        tiers.append(
            TierParams(
                name=name,
                enabled=t.enabled,
                capacity_bytes=t.capacity_bytes,
                read_bandwidth=bw,
                aggregate_bandwidth=topology.cache_bandwidth if name == "G4" else aggregate,
                latency_s=t.latency_s or 0.0,
            )
        )
    params = ModelParams(
        geometry=geometry,
        sliding_at_full=profile.sliding_at_full,
        block_tokens=profile.block_tokens,
        prefill_a=a,
        prefill_b=b,
        decode_base_s=profile.gpu.decode_step_base_s,
        hbm_bandwidth=profile.gpu.hbm_bandwidth_bytes_per_s,
        tiers=tuple(tiers),
        topology=topology,
        contention=Contention(**profile.fabric.contention.model_dump()),
        noise_scale=profile.fabric.noise_scale,
        time_scale=profile.time_scale,
        onboard_chunk_tokens=profile.onboard_chunk_tokens,
        max_num_seqs=profile.gpu.max_num_seqs,
        step=StepParams(**profile.gpu.step.model_dump()) if profile.gpu.step else None,
        request_fixed_s=profile.gpu.request_fixed_s,
        max_model_len=profile.max_model_len or geometry.context_length or 131_072,
    )
    g4 = profile.tiers.G4
    if g4.latency_s is None or g4.read_bandwidth_bytes_per_s is None:
        assert cal is not None
        latency, bw = fit_g4(cal, a, b, params)
        if g4.latency_s is not None:
            raise ValueError("tiers.G4: give both latency_s and read_bandwidth_bytes_per_s, or neither")
        fitted = TierParams(
            name="G4",
            enabled=g4.enabled,
            capacity_bytes=g4.capacity_bytes,
            read_bandwidth=bw,
            aggregate_bandwidth=topology.cache_bandwidth,
            latency_s=latency,
        )
        params = _replace_tier(params, fitted)
        # The fit assumed one G4 read alone runs at its own bandwidth and is the slowest stage.
        for p in cal.cached:
            c = params.cacheable_tokens(p.tokens)
            g4_stage = latency + params.kv_bytes(c) / params.transfer_rate("G4")
            h2d_stage = params.tier("G2").latency_s + params.kv_bytes(c) / params.transfer_rate("G2")
            if params.transfer_rate("G4") < bw * (1 - 1e-9) or h2d_stage > g4_stage:
                raise ValueError("calibration: fitted G4 read is not the bottleneck; the fit does not apply")
    return params


def _topology(profile: TieredProfile) -> Topology:
    """The profile's topology preset, or its storage (G4 aggregate) behind one fabric link."""
    f = profile.fabric
    if f.topology is not None:
        return TOPOLOGIES[f.topology]
    g4 = profile.tiers.G4
    storage = g4.aggregate_bandwidth_bytes_per_s or g4.read_bandwidth_bytes_per_s or float("inf")
    assert f.capacity_bytes_per_s is not None  # the fabric validator guarantees it
    if storage == float("inf"):  # G4 bandwidth still to be fitted: the fabric alone bounds the storage
        storage = f.capacity_bytes_per_s
    return two_links(
        profile.name, storage, f.capacity_bytes_per_s, f"{profile.name}: storage behind one link"
    )


def _replace_tier(params: ModelParams, tier: TierParams) -> ModelParams:
    from dataclasses import replace

    tiers = tuple(tier if t.name == tier.name else t for t in params.tiers)
    return replace(params, tiers=tiers)
