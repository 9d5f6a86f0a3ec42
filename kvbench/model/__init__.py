"""Physics shared by the mock and the audit: KV geometry and prefill cost, pure and I/O-light.

    kv_geometry   KVGeometry (bytes per token, per sequence) and the built-in presets
    geometry      ONE resolver: preset name, config.json (file or folder), inline fields, run manifest
    prefill       prefill time t(n) = a*n + c*n^2 (one convention), its two-point fit, cached suffixes,
                  and the cold-cache reuse bound
    topology      the links cache reads and noise share (capacities), max-min fair per flow
    sizes         byte sizes as people write them (80GB, 1.5TiB)

The mock times requests with `prefill`; the audit bounds published figures with the same
formulas, so the two cannot disagree about the cost model. Imports only `kvbench.errors`.
"""
