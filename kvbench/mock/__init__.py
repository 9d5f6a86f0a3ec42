"""kvbench's mock OpenAI-compatible server with a modelled tiered KV cache (G1-G4).

Rooms: api/ (the HTTP side: server, app, completions, responses, serving, http_replies) and
costs/ (the cost model: timing, the tiered cache, the engine, fabric, onboarding, prediction).
At the top: tokenizer (the mock's tokenizer and block keys), span_hash, native (the C hot paths),
config (pydantic profile and fault models), profiles (YAML profiles), metrics, faults, spawn
(spawned_mock), commands (`kvbench mock ...`).

Imports nothing from kvbench but model (KV geometry, prefill) and errors. Importing this package is
cheap; aiohttp loads with kvbench.mock.api.server.
"""
