"""Export of the trained demo models and their torch reference outputs.

Path: torch checkpoint -> llama2.c legacy float32 checkpoint + tokenizer.bin -> `peregrine convert`
(peregrine's own GGUF writer embeds the tokenizer) -> models/*.gguf. The GGUF files are then read
back with an independent Python reader, checked bit-for-bit against the trained weights, and the
reference outputs (greedy continuations and first-step logits) are computed from THOSE weights in
float64, so they are exactly what the committed files should produce.
"""
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from gguf_reader import GgufFile
from llama_model import Llama, LlamaShape, greedy_continuation, NORM_EPS, ROPE_THETA

MODEL_FILES = {"target": "demo-target.gguf", "draft": "demo-draft.gguf"}
TOKENIZER_FILE = "demo-tokenizer.model"   # the SentencePiece model, for re-tokenizing prompts
REFERENCE_FILE = "reference_outputs.json"
PROMPTS = [
    "It is a truth universally",
    "Emma Woodhouse, handsome, clever, and rich,",
    "Mr. Darcy",
    "\"My dear Mr. Bennet,\" said his lady to him one day,",
    "She was not",
]
N_NEW_TOKENS = 32
SAMPLE_PROMPT, SAMPLE_TOKENS = "It is a truth universally", 96
LOGIT_DECIMALS = 6


def _layer_tensors(state, n_layers, key):
    return [state[f"layers.{i}.{key}"] for i in range(n_layers)]


def write_llama2c_checkpoint(ckpt, out: Path):
    """llama2.c legacy format: 7 x int32 header, then float32 tensors in run.c's order."""
    s, st = LlamaShape(**ckpt["shape"]), ckpt["state"]
    header = [s.dim, s.hidden_dim, s.n_layers, s.n_heads, s.n_kv_heads,
              s.vocab_size if s.tied_output else -s.vocab_size, s.seq_len]
    L = s.n_layers
    parts = [st["tok_embeddings.weight"]]                                  # (vocab, dim)
    parts += _layer_tensors(st, L, "attention_norm.weight")                # L x (dim)
    for key in ("wq", "wk", "wv", "wo"):                                   # L x (out, in)
        parts += _layer_tensors(st, L, f"attention.{key}.weight")
    parts += _layer_tensors(st, L, "ffn_norm.weight")
    for key in ("w1", "w2", "w3"):
        parts += _layer_tensors(st, L, f"feed_forward.{key}.weight")
    parts.append(st["norm.weight"])                                        # (dim)
    # two unused RoPE tables, (seq_len, head_dim/2) each; zeros (run.c never reads them)
    parts.append(torch.zeros(2 * s.seq_len * (s.head_dim // 2)))
    if not s.tied_output:
        parts.append(st["output.weight"])                                  # (vocab, dim)
    with open(out, "wb") as f:
        f.write(struct.pack("<7i", *header))
        for t in parts:
            f.write(t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes())


def write_llama2c_tokenizer(sp, out: Path):
    """tokenizer.bin: int32 max_token_length; per id: float32 score, int32 length, UTF-8 bytes.
    Pieces are written as SentencePiece has them ("▁" for spaces, "<0xNN>" bytes)."""
    pieces = [sp.id_to_piece(i).encode("utf-8") for i in range(sp.get_piece_size())]
    with open(out, "wb") as f:
        f.write(struct.pack("<i", max(len(p) for p in pieces)))
        for i, p in enumerate(pieces):
            f.write(struct.pack("<fi", sp.get_score(i), len(p)))
            f.write(p)


def model_from_gguf(path: Path, dtype=torch.float64):
    """Builds the torch model from a GGUF file's weights and llama metadata."""
    g = GgufFile(path)
    m, t = g.meta, g.tensors
    if m.get("general.architecture") != "llama":
        raise ValueError(f"{path}: architecture {m.get('general.architecture')!r}, expected llama")
    eps = m.get("llama.attention.layer_norm_rms_epsilon", NORM_EPS)
    theta = m.get("llama.rope.freq_base", ROPE_THETA)
    if abs(eps - NORM_EPS) > 1e-9 or abs(theta - ROPE_THETA) > 1e-3:
        raise ValueError(f"{path}: eps {eps} / rope base {theta} differ from the torch model's")
    shape = LlamaShape(dim=m["llama.embedding_length"], hidden_dim=m["llama.feed_forward_length"],
                       n_layers=m["llama.block_count"], n_heads=m["llama.attention.head_count"],
                       n_kv_heads=m.get("llama.attention.head_count_kv", m["llama.attention.head_count"]),
                       vocab_size=t["token_embd.weight"].shape[0],
                       seq_len=m["llama.context_length"], tied_output="output.weight" not in t)
    names = {"tok_embeddings.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
    if not shape.tied_output:
        names["output.weight"] = "output.weight"
    per_layer = {"attention_norm.weight": "attn_norm", "attention.wq.weight": "attn_q",
                 "attention.wk.weight": "attn_k", "attention.wv.weight": "attn_v",
                 "attention.wo.weight": "attn_output", "ffn_norm.weight": "ffn_norm",
                 "feed_forward.w1.weight": "ffn_gate", "feed_forward.w2.weight": "ffn_down",
                 "feed_forward.w3.weight": "ffn_up"}
    for i in range(shape.n_layers):
        for ours, theirs in per_layer.items():
            names[f"layers.{i}.{ours}"] = f"blk.{i}.{theirs}.weight"
    model = Llama(shape)
    state = {k: torch.from_numpy(np.array(t[v], dtype=np.float32)) for k, v in names.items()}
    if shape.tied_output:
        state["output.weight"] = state["tok_embeddings.weight"]
    model.load_state_dict(state, strict=True)
    model.eval()
    return model.to(dtype), g


def reference_cases(model, prompt_ids_list, prompts):
    cases = []
    for prompt, ids in zip(prompts, prompt_ids_list):
        new_ids, logits, margin = greedy_continuation(model, ids, N_NEW_TOKENS)
        cases.append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": new_ids,
                      "min_top2_margin": round(margin, 6),
                      "first_logits": [round(x, LOGIT_DECIMALS) for x in logits]})
    return cases


def _check_against_checkpoint(ckpt, model, g, sp, log):
    """The GGUF must hold exactly the trained weights and SentencePiece's vocabulary."""
    for k, v in ckpt["state"].items():
        got = model.state_dict()[k].to(torch.float32)
        if not torch.equal(got, v.to(torch.float32)):
            raise RuntimeError(f"exported tensor {k} differs from the trained weights")
    tokens = g.meta["tokenizer.ggml.tokens"]
    want = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    if tokens != want:
        bad = next(i for i, (a, b) in enumerate(zip(tokens, want)) if a != b) if len(tokens) == len(want) else -1
        raise RuntimeError(f"GGUF vocabulary differs from SentencePiece's (first at id {bad})")
    log("  weights and vocabulary match the checkpoint exactly")


def find_peregrine(peregrine) -> Path:
    """The given binary, else build/peregrine or build*/peregrine in the repository."""
    repo = Path(__file__).resolve().parent.parent
    if peregrine is None:
        found = [p for p in [repo / "build" / "peregrine", *sorted(repo.glob("build*/peregrine"))] if p.exists()]
        peregrine = found[0] if found else repo / "build" / "peregrine"
    peregrine = Path(peregrine)
    if not peregrine.exists():
        raise SystemExit(f"{peregrine} not found: build it (cmake --build build-demo --target peregrine)"
                         " and rerun with --export-only")
    return peregrine


def export_one(ckpt, name, out: Path, work: Path, peregrine: Path, sp, log):
    """Checkpoint -> llama2.c files in WORK -> `peregrine convert` -> OUT; reads OUT back and checks
    it holds exactly the checkpoint's weights and SentencePiece's vocabulary (work/tokenizer.bin
    must exist). Returns the float64 torch model built from the file."""
    write_llama2c_checkpoint(ckpt, work / f"{name}.bin")
    cmd = [str(peregrine), "convert", str(work / f"{name}.bin"), "--tokenizer",
           str(work / "tokenizer.bin"), "-o", str(out), "--type", "f32"]
    log("export: " + " ".join(cmd))
    subprocess.run(cmd, check=True)
    model, g = model_from_gguf(out)
    _check_against_checkpoint(ckpt, model, g, sp, log)
    return model


def export_all(work: Path, models: Path, peregrine, log):
    import sentencepiece as spm
    peregrine = find_peregrine(peregrine)
    models.mkdir(parents=True, exist_ok=True)
    sp = spm.SentencePieceProcessor(model_file=str(work / "tokenizer.model"))
    shutil.copyfile(work / "tokenizer.model", models / TOKENIZER_FILE)
    write_llama2c_tokenizer(sp, work / "tokenizer.bin")
    prompt_ids = [[sp.bos_id()] + sp.encode(p) for p in PROMPTS]
    reference = {"about": "Greedy continuations and first-step logits computed in float64 by "
                          "training/llama_model.py from the weights read back out of each GGUF file "
                          "(training/train_demo_models.py). prompt_ids include BOS.",
                 "n_new_tokens": N_NEW_TOKENS, "models": {}}
    samples = {}
    for name, filename in MODEL_FILES.items():
        ckpt = torch.load(work / f"{name}.pt")
        model = export_one(ckpt, name, models / filename, work, peregrine, sp, log)
        cases = reference_cases(model, prompt_ids, PROMPTS)
        for c in cases:
            c["greedy_text"] = sp.decode(c["greedy_ids"])
            log(f"  {name}: {c['prompt']!r} -> {c['greedy_text']!r} (min top-2 margin {c['min_top2_margin']})")
        reference["models"][filename] = {"steps_trained": ckpt["step"], "cases": cases}
        sample_ids, _, _ = greedy_continuation(model, [sp.bos_id()] + sp.encode(SAMPLE_PROMPT), SAMPLE_TOKENS)
        samples[name] = sp.decode(sp.encode(SAMPLE_PROMPT) + sample_ids)
    (models / REFERENCE_FILE).write_text(json.dumps(reference, indent=1, ensure_ascii=False) + "\n")
    summary_path = work / "training_summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary["greedy_samples"] = {"prompt": SAMPLE_PROMPT, "tokens": SAMPLE_TOKENS, **samples}
    (models / "training_summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    if (work / "training_log.txt").exists():
        shutil.copyfile(work / "training_log.txt", models / "training_log.txt")
    from model_card import write_model_card
    write_model_card(models, summary)
    log(f"export: wrote {', '.join(MODEL_FILES.values())}, {REFERENCE_FILE}, training_summary.json "
        f"and {TOKENIZER_FILE} to {models}")


def check_reference(models: Path) -> bool:
    """--check-only: recompute every recorded case from the committed GGUF files and compare.
    Both sides are float64 from identical weights, so ids must match exactly and logits to the
    rounding of the JSON (1e-6) plus summation-order noise."""
    reference = json.loads((models / REFERENCE_FILE).read_text())
    ok = True
    sp = None
    try:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=str(models / TOKENIZER_FILE))
    except (ImportError, OSError) as e:
        print(f"note: prompt tokenization not rechecked ({e})")
    for filename, entry in reference["models"].items():
        model, _ = model_from_gguf(models / filename)
        ids_list = [c["prompt_ids"] for c in entry["cases"]]
        for want, got in zip(entry["cases"], reference_cases(model, ids_list, [c["prompt"] for c in entry["cases"]])):
            diff = float(np.max(np.abs(np.array(want["first_logits"]) - np.array(got["first_logits"]))))
            same_ids = want["greedy_ids"] == got["greedy_ids"]
            same_prompt = sp is None or [sp.bos_id()] + sp.encode(want["prompt"]) == want["prompt_ids"]
            good = same_ids and same_prompt and diff <= 1e-5
            ok &= good
            print(f"{'ok ' if good else 'BAD'} {filename} {want['prompt']!r}: greedy ids "
                  f"{'match' if same_ids else 'DIFFER'}, prompt ids {'match' if same_prompt else 'DIFFER'}, "
                  f"max |logit diff| {diff:.2e}")
    print("check-only:", "all recorded outputs reproduced" if ok else "MISMATCH")
    return ok
