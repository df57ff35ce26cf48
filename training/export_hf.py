"""Exports a llama-architecture GGUF with a SentencePiece vocabulary (the demo models) as a Hugging
Face checkpoint folder: config.json, model.safetensors (or shards with model.safetensors.index.json),
tokenizer.json and tokenizer_config.json, laid out as transformers' LlamaForCausalLM saves them.
qwen3 and phi3 files (peregrine synth's tiny presets) export the same way as Qwen3ForCausalLM and
Phi3ForCausalLM folders.

Needs only the Python standard library, so the tests can build the folder on any machine:
  python3 training/export_hf.py models/demo-target.gguf OUT_DIR [--dtype f32|f16|bf16] [--shards N]

The layout facts this encodes (not peregrine's code):
- HF stores Q/K rows per head as two halves (RoPE rotates x[i] with x[i + d/2]); GGUF "llama" stores
  the pairs adjacent (x[2i], x[2i+1]). Export undoes llama.cpp's permutation: HF row h*d + j*d/2 + i
  is GGUF row h*d + 2i + j. GGUF qwen3 and phi3 keep HF's halves (NEOX RoPE): no permutation.
- Qwen3's q_norm/k_norm are attn_q_norm/attn_k_norm; Phi-3's qkv_proj (rows q|k|v) is attn_qkv and
  its gate_up_proj (rows gate|up) is GGUF's ffn_up, the gate and up halves in the same order.
- A SentencePiece BPE vocabulary becomes a tokenizer.json BPE model the way transformers'
  SentencePieceExtractor builds it: every split of a piece into two pieces is a merge, merges are
  ordered by the merged piece's score (highest first), ties in vocabulary order.
- --dtype rounds the weight matrices (round to nearest even); norms stay f32, as mixed files may.
"""
import argparse
import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_reader import GgufFile  # noqa: E402

_LAYER_NAMES = {  # GGUF blk.N.<key> -> HF model.layers.N.<value>
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
}
_HF_CLASS = {"llama": ("LlamaForCausalLM", "llama"), "qwen3": ("Qwen3ForCausalLM", "qwen3"),
             "phi3": ("Phi3ForCausalLM", "phi3")}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                 "output.weight": "lm_head.weight"}
_SPACE = "\u2581"


def hf_name(gguf_name, arch="llama"):
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    _, layer, rest = gguf_name.split(".", 2)
    if arch == "phi3" and rest == "ffn_up.weight":
        return f"model.layers.{layer}.mlp.gate_up_proj.weight"
    return f"model.layers.{layer}.{_LAYER_NAMES[rest]}"


def f32_values(dims, ttype, buf):
    n = len(buf) // (4 if ttype == 0 else 2)
    return struct.unpack(f"<{n}{'f' if ttype == 0 else 'e'}", buf)


def unpermute_rows(values, row_len, n_head):
    """GGUF (adjacent pairs) -> HF (half-split) row order within each head."""
    rows = len(values) // row_len
    head_rows = rows // n_head
    half = head_rows // 2
    out = [None] * rows
    for h in range(n_head):
        for i in range(half):
            for j in range(2):
                out[h * head_rows + j * half + i] = values[(h * head_rows + 2 * i + j) * row_len:
                                                           (h * head_rows + 2 * i + j + 1) * row_len]
    return [x for row in out for x in row]


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    bits = struct.unpack(f"<{len(values)}I", struct.pack(f"<{len(values)}f", *values))
    return struct.pack(f"<{len(values)}H", *(((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF for b in bits))


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, bytes). Header padded with spaces to 8 bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for *_, data in tensors:
            f.write(data)


def tokenizer_files(meta):
    pieces, scores, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"], meta["tokenizer.ggml.token_type"]
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = []
    for piece, score in zip(pieces, scores):
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        merges += [(l, r, score) for l, r in local]
    merges.sort(key=lambda m: m[2], reverse=True)  # stable: ties stay in vocabulary order
    bos, eos, unk = (pieces[meta[f"tokenizer.ggml.{k}_token_id"]] for k in ("bos", "eos", "unknown"))
    added = [{"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, (p, t) in enumerate(zip(pieces, types)) if t in (2, 3)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": _SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": _SPACE}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": _SPACE}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[l, r] for l, r, _ in merges]},
    }
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": bos, "eos_token": eos, "unk_token": unk,
              "clean_up_tokenization_spaces": False, "legacy": True,
              "model_max_length": meta[meta["general.architecture"] + ".context_length"],
              "tokenizer_class": "LlamaTokenizer"}
    if "tokenizer.chat_template" in meta:
        config["chat_template"] = meta["tokenizer.chat_template"]
    return tokenizer, config


def export(gguf_path, out, dtype="f32", shards=1):
    g = GgufFile(gguf_path)
    m = g.meta
    arch = m.get("general.architecture")
    if arch not in _HF_CLASS or m.get("tokenizer.ggml.model") != "llama":
        raise SystemExit(f"{gguf_path}: only llama, qwen3 and phi3 models with a SentencePiece vocabulary are exported")
    a = arch + "."
    n_head = m[a + "attention.head_count"]
    n_kv = m.get(a + "attention.head_count_kv", n_head)
    dims_embd = g.raw["token_embd.weight"][0]
    tied = "output.weight" not in g.raw
    config = {
        "architectures": [_HF_CLASS[arch][0]], "model_type": _HF_CLASS[arch][1],
        "hidden_size": m[a + "embedding_length"], "intermediate_size": m[a + "feed_forward_length"],
        "num_hidden_layers": m[a + "block_count"], "num_attention_heads": n_head, "num_key_value_heads": n_kv,
        "max_position_embeddings": m[a + "context_length"], "rms_norm_eps": m[a + "attention.layer_norm_rms_epsilon"],
        "rope_theta": m.get(a + "rope.freq_base", 10000.0), "vocab_size": dims_embd[1], "hidden_act": "silu",
        "tie_word_embeddings": tied, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": m["tokenizer.ggml.bos_token_id"], "eos_token_id": m["tokenizer.ggml.eos_token_id"],
        "torch_dtype": {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dtype],
    }
    if a + "attention.key_length" in m:
        config["head_dim"] = m[a + "attention.key_length"]
    tensors = []
    for name, (dims, ttype, buf) in g.raw.items():
        values = f32_values(dims, ttype, buf)
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            values = unpermute_rows(values, dims[0], n_head if "attn_q" in name else n_kv)
        st_dtype = "F32" if len(dims) == 1 else dtype.upper()
        tensors.append((hf_name(name, arch), st_dtype, list(reversed(dims)), encode(values, st_dtype)))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tokenizer, tok_config = tokenizer_files(m)
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False) + "\n")
    if shards == 1:
        write_safetensors(out / "model.safetensors", tensors)
        return
    per = -(-len(tensors) // shards)
    weight_map = {}
    for s in range(shards):
        part = tensors[s * per:(s + 1) * per]
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(out / file, part)
        weight_map.update({t[0]: file for t in part})
    index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    ap.add_argument("--shards", type=int, default=1)
    args = ap.parse_args()
    export(args.gguf, args.out, args.dtype, args.shards)


if __name__ == "__main__":
    main()
