"""The G4 connector: makes llama-server's slot files a transparent KV tier, as LMCache does for vLLM.

llama-server can save a slot's KV to a file and restore it (POST /slots/N?action=save|restore),
but only when asked. This small proxy asks, so that an unmodified OpenAI client (kvbench's load)
reads KV from G4 without knowing it:

    request -> key = sha256(prompt) -> take a free slot
            -> G4 has kvlab-<key>.kv ?  restore it into the slot (a G4 hit; its time is inside TTFT)
            -> forward the request pinned to that slot (id_slot), stream the answer back
            -> it was a miss ?          save the slot to G4 (write-through), then end the answer

Every hit is a G4 hit: the connector never serves from what a slot happens to hold, because the
lab models the case G4 is for (accelerator memory too small to keep anything between requests).
A slot erase (kvbench's cache reset for llama.cpp) also empties the connector's files on G4, so a
reset leaves nothing cached anywhere and "cold" stays guaranteed. /metrics gains
kvbench_lab_g4_* counters (hits, misses, bytes and seconds of restores and saves), so a run's
metric deltas show that the measured phase really read from G4.

Run as `python -m kvbench.lab.connector --upstream URL --g4 DIR --slots N --port P --lab-dir D`
(`kvbench lab up` does). Needs only aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from kvbench.lab.config import CONNECTOR_FILE_PREFIX

GENERATE_PATHS = ("/v1/completions", "/v1/chat/completions", "/completion", "/completions")
PASS_HEADERS = ("content-type", "cache-control")
DONE = b"data: [DONE]"


def prompt_key(body: dict[str, Any]) -> str | None:
    """What determines a request's KV: its prompt (or chat messages). None: nothing to key on."""
    material = {k: body[k] for k in ("prompt", "messages") if k in body}
    if not material:
        return None
    text = json.dumps(material, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def slot_file(key: str) -> str:
    return f"{CONNECTOR_FILE_PREFIX}{key}.kv"


def metrics_text(stats: dict[str, float]) -> str:
    """The connector's counters in Prometheus text format (appended to llama-server's /metrics)."""
    lines = []
    for name, value in stats.items():
        full = f"kvbench_lab_g4_{name}_total"
        lines += [f"# TYPE {full} counter", f"{full} {value:g}"]
    return "\n".join(lines) + "\n"


class G4Connector:
    def __init__(self, upstream: str, g4_dir: Path, slots: int) -> None:
        self.upstream = upstream.rstrip("/")
        self.g4 = g4_dir
        self.slots = slots
        self.free: asyncio.Queue[int] = asyncio.Queue()
        self.saving: dict[str, asyncio.Event] = {}  # key -> set when its write-through is done
        self.session: aiohttp.ClientSession | None = None
        self.stats: dict[str, float] = dict.fromkeys(
            ("hits", "misses", "restore_errors", "restore_bytes", "restore_seconds", "saves",
             "save_errors", "save_bytes", "save_seconds"),
            0.0,
        )  # fmt: skip

    async def startup(self, app: web.Application) -> None:
        for slot in range(self.slots):
            self.free.put_nowait(slot)
        # llama-server closes the connection after each streamed answer: never reuse one
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

    async def cleanup(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.on_startup.append(self.startup)
        app.on_cleanup.append(self.cleanup)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.method == "POST" and request.path in GENERATE_PATHS:
            return await self.generate(request)
        if request.method == "GET" and request.path == "/metrics":
            return await self.metrics(request)
        response = await self.forward(request, await request.read())
        erased = request.method == "POST" and request.query.get("action") == "erase"
        if erased and request.path.startswith("/slots/") and response.status == 200:
            # a reset: wait for write-throughs still running, so none lands after the clear
            await asyncio.gather(*(event.wait() for event in list(self.saving.values())))
            await asyncio.to_thread(self.clear_g4)
        return response

    # -- generation: the G4 path ------------------------------------------------------------------------

    async def generate(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return await self.forward(request, raw)
        key = prompt_key(body) if isinstance(body, dict) else None
        if key is None:
            return await self.forward(request, raw)
        name = slot_file(key)
        while True:
            while (pending := self.saving.get(key)) is not None:
                await pending.wait()  # its KV is being computed or written to G4: read it when it is there
            on_g4 = await asyncio.to_thread((self.g4 / name).is_file)
            if key not in self.saving:  # nobody claimed it while we looked
                break
        # a miss claims the key before it computes: a request for the same prompt that arrives
        # meanwhile, or a reset, waits until the write-through has finished
        done = None
        if not on_g4:
            done = self.saving[key] = asyncio.Event()
        slot = await self.free.get()
        try:
            restored = on_g4 and await self.restore(slot, name)
            self.stats["hits" if restored else "misses"] += 1
            body["id_slot"] = slot
            body.setdefault("cache_prompt", True)
            response, status, held = await self.stream(request, body)
            if not restored and status == 200:
                # before the answer ends: when a phase is over, its KV is on G4 (no write-through
                # of one phase runs into the next one's measurements)
                await self.save(slot, name)
            if held:
                await response.write(held)
            await response.write_eof()
            return response
        finally:
            self.free.put_nowait(slot)
            if done is not None:
                self.saving.pop(key, None)
                done.set()

    async def slot_action(self, slot: int, action: str, name: str) -> tuple[int, dict[str, Any]]:
        assert self.session is not None
        url = f"{self.upstream}/slots/{slot}?action={action}"
        async with self.session.post(url, json={"filename": name}) as resp:
            data = await resp.json(content_type=None)
            return resp.status, data if isinstance(data, dict) else {}

    async def restore(self, slot: int, name: str) -> bool:
        t0 = time.perf_counter()
        status, data = await self.slot_action(slot, "restore", name)
        if status != 200:
            self.stats["restore_errors"] += 1
            log(f"restore {name} into slot {slot}: HTTP {status} {str(data)[:160]}")
            return False
        self.stats["restore_seconds"] += time.perf_counter() - t0
        self.stats["restore_bytes"] += float(data.get("n_read") or 0)
        return True

    async def save(self, slot: int, name: str) -> None:
        t0 = time.perf_counter()
        status, data = await self.slot_action(slot, "save", name)
        if status != 200:
            self.stats["save_errors"] += 1
            log(f"save slot {slot} to {name}: HTTP {status} {str(data)[:160]}")
            return
        self.stats["saves"] += 1
        self.stats["save_seconds"] += time.perf_counter() - t0
        self.stats["save_bytes"] += float(data.get("n_written") or 0)

    async def stream(
        self, request: web.Request, body: dict[str, Any]
    ) -> tuple[web.StreamResponse, int, bytes]:
        """Forward a generation request and copy its answer chunk by chunk, as it arrives, except
        the end: a stream's `data: [DONE]` (a whole answer when not streaming) is returned, not sent,
        so the caller can finish the write-through before the client sees the request end."""
        assert self.session is not None
        streaming = bool(body.get("stream"))
        held = b""
        async with self.session.post(
            self.upstream + request.path_qs, json=body, headers=_forward_headers(request)
        ) as up:
            out = web.StreamResponse(
                status=up.status, headers={k: v for k, v in up.headers.items() if k.lower() in PASS_HEADERS}
            )
            await out.prepare(request)
            async for chunk in up.content.iter_any():
                if held or not streaming:
                    held += chunk
                    continue
                at = chunk.find(DONE)
                if at >= 0:
                    chunk, held = chunk[:at], chunk[at:]
                if chunk:
                    await out.write(chunk)
            return out, up.status, held

    # -- everything else: passed through ---------------------------------------------------------------

    async def forward(self, request: web.Request, raw: bytes) -> web.Response:
        assert self.session is not None
        async with self.session.request(
            request.method,
            self.upstream + request.path_qs,
            data=raw or None,
            headers=_forward_headers(request),
        ) as up:
            data = await up.read()
            headers = {k: v for k, v in up.headers.items() if k.lower() in PASS_HEADERS}
            return web.Response(body=data, status=up.status, headers=headers)

    async def metrics(self, request: web.Request) -> web.Response:
        response = await self.forward(request, b"")
        text = (response.body or b"").decode(errors="replace") if response.status == 200 else ""
        return web.Response(text=text + metrics_text(self.stats), content_type="text/plain")

    def clear_g4(self) -> None:
        """A reset: remove the files this connector writes (and only those) from G4."""
        for path in self.g4.glob(f"{CONNECTOR_FILE_PREFIX}*.kv"):
            with contextlib.suppress(OSError):
                path.unlink()


def _forward_headers(request: web.Request) -> dict[str, str]:
    keep = ("content-type", "accept", "authorization")
    return {k: v for k, v in request.headers.items() if k.lower() in keep}


def log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvbench.lab.connector", description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, help="llama-server base URL")
    ap.add_argument("--g4", required=True, type=Path, help="llama-server's --slot-save-path (the G4 mount)")
    ap.add_argument("--slots", required=True, type=int, help="llama-server -np")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", required=True, type=int)
    ap.add_argument("--lab-dir", default="", help="the lab's state directory (lets `lab down` find us)")
    args = ap.parse_args(argv)
    connector = G4Connector(args.upstream, args.g4, args.slots)
    log(f"G4 connector on {args.host}:{args.port} -> {args.upstream}, G4 {args.g4}, {args.slots} slots")
    web.run_app(connector.app(), host=args.host, port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
