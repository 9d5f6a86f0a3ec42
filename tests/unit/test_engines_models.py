"""Tiny model recipe: vocabulary, seeded weights, the output bias channel, the GGUF file."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import numpy as np
import pytest

from kvbench.engines import tinyvocab
from kvbench.engines.models import ModelSpec, llama_weights, model_path
from kvbench.errors import UsageError


def test_vocabulary_layout() -> None:
    toks = tinyvocab.tokens()
    assert toks[:3] == ["<unk>", "<s>", "</s>"]
    assert toks[3] == "<0x00>" and toks[258] == "<0xFF>"
    assert toks[259] == tinyvocab.SPACE
    assert len(toks) == len(set(toks)) == 3 + 256 + 1 + 94
    assert len(tinyvocab.token_types()) == len(toks)
    # every printable ASCII character but the space is its own token
    assert all(chr(c) in toks for c in range(0x21, 0x7F))


def test_word_tokens_and_their_merge_chains() -> None:
    sp = tinyvocab.SPACE
    words = ["the", "then", "of"]
    toks = tinyvocab.tokens(words)
    added = toks[3 + 256 + 1 + 94 :]
    assert added == [sp + "t", sp + "th", sp + "the", sp + "then", sp + "o", sp + "of"]
    merges = tinyvocab.merges(words)
    assert merges[:3] == [(sp, "t"), (sp + "t", "h"), (sp + "th", "e")]
    # every merge joins two tokens into a token: SentencePiece and BPE both reach each word
    for left, right in merges:
        assert left in toks and right in toks and left + right in toks
    assert len(tinyvocab.token_types(words)) == len(toks)


def _spm_tokenize(text: str, vocab: list[str]) -> list[str]:
    """SentencePiece's merge loop as llama.cpp runs it (best-scored adjacent pair first)."""
    score = {t: -i for i, t in enumerate(vocab)}
    syms = list(tinyvocab.SPACE + text.replace(" ", tinyvocab.SPACE))
    while True:
        pairs = [(score[a + b], i) for i, (a, b) in enumerate(itertools.pairwise(syms)) if a + b in score]
        if not pairs:
            return syms
        _, i = max(pairs)
        syms[i : i + 2] = [syms[i] + syms[i + 1]]


def test_prompt_words_are_one_token_each() -> None:
    from kvbench.load.prompts import VOCAB, word_stream

    vocab = tinyvocab.tokens(VOCAB)
    words = word_stream(0, 1, 300)
    assert len(_spm_tokenize(" ".join(words), vocab)) == len(words)
    assert len(_spm_tokenize("hello, world", vocab)) > 2  # other text falls back to pieces


def test_spec_defaults_and_validation() -> None:
    spec = ModelSpec.default("llamacpp")
    assert (spec.layers, spec.width, spec.heads, spec.seed) == (4, 256, 4, 0)
    assert spec.name.startswith("tiny-llama-4x256-s0-r3-w") and len(spec.words) > 300
    wide = ModelSpec.default("vllm-cpu", width=512, layers=2, seed=3)
    assert (wide.width, wide.ffn, wide.heads, wide.kv_heads, wide.layers) == (512, 1536, 8, 8, 2)
    with pytest.raises(UsageError):
        ModelSpec(width=250, heads=4).check()


def test_model_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVBENCH_ENGINES_DIR", str(tmp_path))
    name = ModelSpec.default("llamacpp").name
    assert model_path("llamacpp").name == name + ".gguf"
    assert model_path("vllm-cpu").name == name
    assert model_path("vllm-cpu").parents[2].name == "vllm-cpu"


def _digest(weights: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(weights):
        h.update(name.encode())
        h.update(weights[name].tobytes())
    return h.hexdigest()


def test_weights_are_seeded() -> None:
    small = ModelSpec(layers=1, width=64, heads=1, kv_heads=1, ffn=128)
    assert _digest(llama_weights(small)) == _digest(llama_weights(small))
    other = ModelSpec(seed=1, layers=1, width=64, heads=1, kv_heads=1, ffn=128)
    assert _digest(llama_weights(small)) != _digest(llama_weights(other))


def test_constant_channel_biases_the_output() -> None:
    spec = ModelSpec(layers=2, width=64, heads=2, kv_heads=1, ffn=128)
    w = llama_weights(spec)
    n_vocab = len(tinyvocab.tokens())
    assert w["token_embd.weight"].shape == (n_vocab, 64)
    assert np.all(w["token_embd.weight"][:, 0] == tinyvocab.CONST)
    assert w["blk.0.attn_k.weight"].shape == (32, 64)  # one KV head of 32
    for i in range(spec.layers):
        assert np.all(w[f"blk.{i}.attn_output.weight"][0] == 0)  # nothing writes dim 0
        assert np.all(w[f"blk.{i}.ffn_down.weight"][0] == 0)
        assert w[f"blk.{i}.attn_norm.weight"][0] == 0  # nothing reads dim 0
        assert w[f"blk.{i}.ffn_norm.weight"][0] == 0
    head = w["output.weight"]
    banned = tinyvocab.banned_ids()
    assert np.all(head[banned, 0] == -tinyvocab.BAN)
    allowed = np.setdiff1d(np.arange(n_vocab), banned)
    assert np.all(head[allowed, 0] == 0)
    assert 0.8 < head[:, 1:].std() < 1.2  # a wide head: no near-ties for greedy decoding
    # the last hidden state: dim 0 still CONST, the rest whatever the blocks wrote
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((100, 64)) * 0.1  # blocks of std-0.02 weights keep these small
    hidden[:, 0] = tinyvocab.CONST
    normed = hidden / np.sqrt((hidden**2).mean(axis=1, keepdims=True) + 1e-5)
    logits = normed @ head.T
    assert logits[:, banned].max() < logits[:, allowed].max(axis=1).min()


def _gguf_py() -> Path | None:
    from kvbench.engines.install import engine_dir, installed

    info = installed("llamacpp")
    if info is not None:
        return info.gguf_py
    src = engine_dir("llamacpp") / "src" / "gguf-py"  # sources extracted, build not finished
    return src if src.is_dir() else None


def test_gguf_file_reads_back(tmp_path: Path) -> None:
    from kvbench.engines.models import gguf_module, write_gguf

    gguf_py = _gguf_py()
    try:
        gguf = gguf_module(gguf_py)
    except ImportError:
        pytest.skip(
            "no gguf package: neither llama.cpp's sources (kvbench engines install llamacpp) nor pip gguf"
        )
    spec = ModelSpec(layers=1, width=64, heads=1, kv_heads=1, ffn=128, words=("the", "of"))
    path = tmp_path / "m.gguf"
    write_gguf(path, spec, gguf_py=gguf_py)
    again = tmp_path / "m2.gguf"
    write_gguf(again, spec, gguf_py=gguf_py)
    assert path.read_bytes() == again.read_bytes()  # same seed, same file
    reader = gguf.GGUFReader(str(path))
    fields = reader.fields
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "llama"
    assert bytes(fields["tokenizer.ggml.model"].parts[-1]).decode() == "llama"
    assert int(fields["llama.block_count"].parts[-1][0]) == 1
    assert len(fields["tokenizer.ggml.tokens"].data) == len(tinyvocab.tokens(spec.words))
    names = {t.name for t in reader.tensors}
    assert {"token_embd.weight", "output.weight", "blk.0.ffn_down.weight"} <= names


def test_models_are_keyed_by_the_code_and_the_build_that_make_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvbench.engines import models

    monkeypatch.setenv("KVBENCH_ENGINES_DIR", str(tmp_path))
    key = models.maker_key("vllm-cpu")
    assert model_path("vllm-cpu").parent.name == key
    monkeypatch.setattr(models, "recipe", lambda engine: "another-build")
    assert models.maker_key("vllm-cpu") != key
    assert model_path("vllm-cpu").parent.name != key


def test_the_hf_model_script_runs_from_a_folder_without_kvbench_modules(tmp_path: Path) -> None:
    """make_hf_model.py runs in vLLM's venv with its folder first on sys.path; a kvbench module
    there named like a standard-library one (engines/tokenize.py did) breaks that interpreter."""
    from kvbench.engines import models

    seen = tmp_path / "seen.txt"
    fake_python = tmp_path / "python"
    fake_python.write_text(f'#!/bin/sh\nls "$(dirname "$1")" > {seen}\necho "no torch here"\nexit 1\n')
    fake_python.chmod(0o755)
    out = tmp_path / "models" / "tiny"
    out.parent.mkdir()
    with pytest.raises(models.EngineInstallError, match="make-model"):
        models._write_hf(out, ModelSpec(words=("alpha",)), python=fake_python, logs=tmp_path / "logs")
    assert set(seen.read_text().split()) == {"make_hf_model.py", "tinyvocab.py"}


@pytest.mark.parametrize("failure", ["exit", "raise"])
def test_a_failed_vllm_model_build_leaves_nothing_beside_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """make_model's helper files (`<model>.scripts/`, `<model>.words.txt`, `<model>.tmp/`) go when
    the build step exits non-zero and when it raises (an interrupt, a missing interpreter)."""
    from kvbench.engines import models
    from kvbench.engines.install_steps import Installed

    info = Installed("vllm-cpu", tmp_path / "venv", "v", "r", "t", {}, python=tmp_path / "python")
    monkeypatch.setattr(models, "installed", lambda engine: info)
    monkeypatch.setattr(models, "engine_dir", lambda engine: tmp_path / "engine")
    seen: list[str] = []

    def build_step(argv: list[str], **_kw: object) -> int:
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir()  # half a model written, then the step fails
        seen.extend(sorted(p.name for p in out.parent.iterdir()))
        if failure == "raise":
            raise KeyboardInterrupt
        return 3

    monkeypatch.setattr(models.subprocess, "call", build_step)
    out = tmp_path / "models" / "tiny"
    expected: type[BaseException] = KeyboardInterrupt if failure == "raise" else models.EngineInstallError
    with pytest.raises(expected):
        models.make_model("vllm-cpu", ModelSpec(words=("alpha",)), out=out)
    assert seen == ["tiny.scripts", "tiny.tmp", "tiny.words.txt"]  # the step really ran amid them
    assert list(out.parent.iterdir()) == []
