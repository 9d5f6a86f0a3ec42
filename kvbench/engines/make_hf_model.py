"""Write a tiny random-weight Llama as a Hugging Face folder, for vLLM.

Runs INSIDE vLLM's own venv (torch, transformers, tokenizers), not in kvbench's:
    <vllm venv>/bin/python make_hf_model.py --out DIR --seed 0 --layers 4 --width 256 ...
It imports `tinyvocab` from its own folder (plain module, standard library only).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--words-file", help="whole-word tokens, one per line")
    for key, default in (("seed", 0), ("layers", 4), ("width", 256), ("heads", 4), ("kv-heads", 4),
                         ("ffn", 768), ("context", 32768)):  # fmt: skip
        ap.add_argument(f"--{key}", type=int, default=default)
    args = ap.parse_args()

    import tinyvocab
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, processors
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(args.out)
    words = Path(args.words_file).read_text().split() if args.words_file else []
    toks = tinyvocab.tokens(words)
    vocab = {t: i for i, t in enumerate(toks)}

    # Llama 2's tokenizer.json shape: prepend a space, spaces become "▁", BPE with byte fallback
    bpe = models.BPE(
        vocab=vocab, merges=tinyvocab.merges(words), unk_token="<unk>", byte_fallback=True, fuse_unk=True
    )
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend(tinyvocab.SPACE), normalizers.Replace(" ", tinyvocab.SPACE)]
    )
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace(tinyvocab.SPACE, " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tinyvocab.BOS)]
    )
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=args.context,
    )
    hf_tok.chat_template = tinyvocab.CHAT_TEMPLATE
    hf_tok.save_pretrained(out)

    config = LlamaConfig(
        vocab_size=len(toks),
        hidden_size=args.width,
        intermediate_size=args.ffn,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.context,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=tinyvocab.BOS,
        eos_token_id=tinyvocab.EOS,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    # the constant channel that biases the output against special and byte tokens (see tinyvocab)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = tinyvocab.CONST
        for layer in model.model.layers:
            layer.input_layernorm.weight[0] = 0.0
            layer.post_attention_layernorm.weight[0] = 0.0
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        model.model.norm.weight.fill_(1.0)
        model.lm_head.weight.normal_(0.0, tinyvocab.HEAD_STD)
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[tinyvocab.banned_ids(), 0] = -tinyvocab.BAN
    model = model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()):,} parameters")


if __name__ == "__main__":
    main()
