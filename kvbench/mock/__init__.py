"""kvbench's mock OpenAI-compatible server with a modelled tiered KV cache (G1-G4).

Modules: tokenizer (the mock's tokenizer and block keys), config (pydantic profile and
fault models), profiles (YAML profiles: list_profiles, load_profile), timing (the pure
timing model, its fit and a closed-loop predictor), cache (tiered LRU prefix cache),
engine (async shared resources), fabric (noise sink), metrics, faults, server
(MockServer), app (MockApp: state, routes, small endpoints), completions (request
handling), responses (the one token loop, SSE and JSON writers), http (errors, JSON
bodies), spawn (spawned_mock), commands (`kvbench mock ...`).

Imports nothing from kvbench but model (KV geometry, prefill) and errors. Importing this package is
cheap; aiohttp loads with kvbench.mock.server.
"""
