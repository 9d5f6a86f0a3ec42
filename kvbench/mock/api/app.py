"""MockApp: the state of one mock server, its routes and its small endpoints.

State: the profile, the engine (tiered cache model or fixed delays), the tokenizer, the fault
plan, the Prometheus metrics, the in-flight count and the ground-truth file. Completion requests
are handled in completions.py (and answered in responses.py); everything else is here:

  GET  /v1/models                       one model, owned_by "kvbench-mock", with max_model_len
  POST /tokenize, /detokenize           vLLM's shapes (tokenizer.py explains the tokenizer)
  GET  /health, /version, /metrics      metrics: Prometheus text (metrics.py)
  POST /reset_prefix_cache              {"success": true} after emptying every tier (or
                                        ?tiers=G1,G2 only those); a persisted G4 (--persist-dir)
                                        only with ?include_persistent=true or the profile's
                                        reset_clears_persistent
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

from aiohttp import web

from kvbench.mock import native
from kvbench.mock.api import completions
from kvbench.mock.api.body_memo import BodyMemo
from kvbench.mock.api.http_replies import BadRequest, error_response, read_json
from kvbench.mock.api.responses import WORDS
from kvbench.mock.config import FixedDelayProfile, TieredProfile
from kvbench.mock.costs.engine import FixedDelayEngine, TieredEngine, Trace
from kvbench.mock.faults import FaultConfig, FaultPlan
from kvbench.mock.metrics import MockMetrics
from kvbench.mock.tokenizer import Tokenizer, chat_tokens, plain_words_keys, split_tokens


def mock_version() -> str:
    try:
        from importlib.metadata import version

        return version("kvbench")
    except Exception:
        return "0.0.0+unknown"


class MockApp:
    """State and handlers of one mock server."""

    def __init__(
        self,
        profile: TieredProfile | FixedDelayProfile,
        ground_truth: Path | None,
        faults: FaultConfig,
        persist_dir: Path | None,
        exit_process_on_fault: bool,
    ) -> None:
        self.profile = profile
        self.metrics = MockMetrics(profile.model_name)
        self._generated = self.metrics.generation_tokens.labels(profile.model_name)
        self.engine: TieredEngine | FixedDelayEngine
        if isinstance(profile, TieredProfile):
            from kvbench.mock.costs.timing import derive_params

            self.engine = TieredEngine(profile, derive_params(profile), self.metrics, persist_dir)
        else:
            self.engine = FixedDelayEngine(profile, self.metrics)
        self.tokenizer = Tokenizer(self.engine.block_tokens, root=profile.model_name, cache_entries=128)
        self.tokenizer.ids(WORDS)
        # the plain-words path's first use imports numpy (~40 ms): here, not in the first request
        plain_words_keys(" ".join(WORDS), self.engine.block_tokens)
        self.body_memo: BodyMemo[Any] = BodyMemo()
        self.faults = FaultPlan(faults)
        self.exit_process_on_fault = exit_process_on_fault
        self.in_flight = 0
        self._gt: IO[str] | None = open(ground_truth, "a", encoding="utf-8") if ground_truth else None  # noqa: SIM115
        self.created = int(time.time())

    def close(self) -> None:
        self.engine.close()
        if self._gt is not None:
            self._gt.close()
            self._gt = None

    def write_trace(self, trace: Trace) -> None:
        """One ground-truth line for a finished request, flushed so that a crash keeps it."""
        if self._gt is not None:
            self._gt.write(json.dumps(trace.as_dict()) + "\n")
            self._gt.flush()

    def count_token(self) -> None:
        self._generated.inc()  # the labelled child, looked up once (once per token was ~2% of a stream)

    def build(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        r = app.router
        r.add_get("/v1/models", self.models)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat_completions)
        r.add_post("/tokenize", self.tokenize)
        r.add_post("/detokenize", self.detokenize)
        r.add_get("/health", self.health)
        r.add_get("/version", self.version)
        r.add_get("/metrics", self.metrics_handler)
        r.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        return app

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await completions.handle(self, request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await completions.handle(self, request, chat=True)

    # ------------------------------------------------------------------ small endpoints
    async def models(self, request: web.Request) -> web.Response:
        mn = self.profile.model_name
        card = {
            "id": mn,
            "object": "model",
            "created": self.created,
            "owned_by": "kvbench-mock",
            "root": mn,
            "parent": None,
            "max_model_len": self.engine.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        # which implementation ran the per-block work lands in the run's manifest (server_version)
        how = "C accelerator" if native.available() else "pure Python"
        return web.json_response({"version": f"kvbench-mock {mock_version()} ({how})"})

    async def metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        include = request.query.get("include_persistent", "false").lower() in ("1", "true", "yes")
        tiers = None
        if "tiers" in request.query:  # e.g. ?tiers=G1,G2: evict the fast tiers only
            tiers = [t.strip().upper() for t in request.query["tiers"].split(",") if t.strip()]
            unknown = sorted(set(tiers) - {"G1", "G2", "G3", "G4"})
            if unknown:
                return error_response(
                    400, f"tiers: unknown tier(s) {', '.join(unknown)} (known: G1, G2, G3, G4)"
                )
        return web.json_response({"success": self.engine.reset(include, tiers)})

    async def tokenize(self, request: web.Request) -> web.Response:
        try:
            body = await read_json(request)
            if "messages" in body:
                tokens = chat_tokens(body["messages"], bool(body.get("add_generation_prompt", True)))
            elif isinstance(body.get("prompt"), str):
                tokens = split_tokens(body["prompt"])
            else:
                raise BadRequest("give 'prompt' (a string) or 'messages'")
        except (BadRequest, ValueError) as exc:
            return error_response(400, str(exc))
        out: dict[str, Any] = {
            "count": len(tokens),
            "max_model_len": self.engine.max_model_len,
            "tokens": self.tokenizer.ids(tokens),
            "token_strs": tokens if body.get("return_token_strs") else None,
        }
        return web.json_response(out)

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            body = await read_json(request)
            ids = body.get("tokens")
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise BadRequest("'tokens' must be a list of integers")
        except BadRequest as exc:
            return error_response(400, str(exc))
        return web.json_response({"prompt": self.tokenizer.detokenize(ids)})
