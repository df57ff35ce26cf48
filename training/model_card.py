"""Writes models/README.md (the model card) from the measured figures in
models/training_summary.json and models/reference_outputs.json; nothing in it is typed by hand."""
import json
import math
from pathlib import Path

import torch

from export import MODEL_FILES, TOKENIZER_FILE, REFERENCE_FILE, model_from_gguf


def _cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _shape_rows(models: Path):
    rows = []
    for name, filename in MODEL_FILES.items():
        model, _ = model_from_gguf(models / filename, torch.float32)
        s = model.s
        rows.append((name, filename, s, model.n_params(), (models / filename).stat().st_size))
    return rows


def write_model_card(models: Path, work_summary: dict):
    ref = json.loads((models / REFERENCE_FILE).read_text())
    c = work_summary.get("corpus", {})
    rows = _shape_rows(models)
    t = {name: work_summary.get(name, {}) for name in MODEL_FILES}
    lines = [
        "# Embedded demo models",
        "",
        "Two small Llama-architecture models trained from scratch on Jane Austen's six novels, so that",
        "peregrine generates real text with nothing to download. They share one tokenizer: the",
        "**target** is the demo model, the **draft** is 5-10x smaller for speculative decoding.",
        "",
        "```sh",
        "build/peregrine run models/demo-target.gguf -p \"It is a truth universally\" --temperature 0",
        "```",
        "",
        "They are toys: a few million parameters trained for about an hour on two CPU cores. They write",
        "Austen-flavoured English with plausible words and punctuation, but little sense.",
        "",
        "## Files",
        "",
        "| file | what |",
        "|---|---|",
    ]
    for name, filename, s, n, size in rows:
        lines.append(f"| `{filename}` | {name} model, GGUF v3, f32 weights, tokenizer embedded ({size / 2**20:.1f} MiB) |")
    lines += [
        f"| `{TOKENIZER_FILE}` | the SentencePiece model both were trained with (for re-tokenizing prompts) |",
        f"| `{REFERENCE_FILE}` | torch reference: greedy continuations and first-step logits for fixed prompts |",
        "| `training_summary.json` | every measured figure below, plus the loss / validation history |",
        "| `training_log.txt` | the training run's log (loss every 10 steps, validation every 100) |",
        "",
        "All are produced by `training/train_demo_models.py`; the GGUF files are written by",
        "`peregrine convert` (peregrine's own GGUF writer) from llama2.c checkpoints.",
        "",
        "## Corpus and licence",
        "",
        "The six novels (*Sense and Sensibility*, *Pride and Prejudice*, *Mansfield Park*, *Emma*,",
        "*Northanger Abbey*, *Persuasion*) as shipped by the Debian package `r-cran-janeaustenr`",
        "(R data, read with `Rscript`). The texts are in the public domain (Austen died in 1817; the",
        "package takes them from Project Gutenberg); the R packaging is MIT-licensed",
        "(`/usr/share/doc/r-cran-janeaustenr/copyright`). The corpus is rebuilt from the package, never",
        "committed. Cleaning: printed lines are joined into paragraphs; title lines, chapter and",
        "volume headings, \"THE END\" and `* * *` separators are dropped; Gutenberg's `_italics_`",
        "underscores are removed. The last 5% of each novel's paragraphs are the validation split.",
        "",
        "| split | paragraphs | characters | tokens |",
        "|---|---|---|---|",
        f"| train | {c.get('train', {}).get('paragraphs', '?')} | {c.get('train', {}).get('characters', '?')} | {c.get('train_tokens', '?')} |",
        f"| validation | {c.get('validation', {}).get('paragraphs', '?')} | {c.get('validation', {}).get('characters', '?')} | {c.get('validation_tokens', '?')} |",
        "",
        "Tokenizer: SentencePiece BPE (llama's model type), 1024 pieces, byte fallback, identity",
        "normalization, ids 0/1/2 = `<unk>`/`<s>`/`</s>`. Each paragraph ends with the newline byte",
        "token `<0x0A>`. Training windows start with BOS followed by the start of a paragraph.",
        "",
        "## Shapes",
        "",
        "Llama architecture as peregrine runs it: RMSNorm (eps 1e-5), RoPE on adjacent pairs (theta",
        "10000), SwiGLU, no biases, output head tied to the token embedding.",
        "",
        "| model | dim | FFN | layers | heads | KV heads | head dim | vocab | context | parameters |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, filename, s, n, size in rows:
        lines.append(f"| {name} | {s.dim} | {s.hidden_dim} | {s.n_layers} | {s.n_heads} | {s.n_kv_heads} | "
                     f"{s.head_dim} | {s.vocab_size} | {s.seq_len} | {n:,} |")
    if len(rows) == 2:
        lines.append(f"\nThe target has {rows[0][3] / rows[1][3]:.1f}x the draft's parameters.")
    lines += [
        "",
        "## Training and results",
        "",
        f"Hardware: {_cpu_name()}, 2 CPU cores shared with other jobs (several concurrent C++ builds",
        "and fuzzers; training ran under `nice -n 19`), `torch.set_num_threads(2)`, Debian's torch",
        f"{torch.__version__}. Times are wall-clock on that busy machine; an idle one is faster.",
        "AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), linear warm-up then cosine decay to",
        "lr/10, gradient clipping at 1.0, seed 1234. Validation perplexity is measured on the whole",
        "validation split (non-overlapping windows of the training length, each after BOS).",
        "",
        "| model | steps | batch x seq | tokens seen | peak lr | time (min) | final train loss | validation perplexity |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in MODEL_FILES:
        s = t[name]
        if not s:
            lines.append(f"| {name} | ? | | | | | | |")
            continue
        hp = s["hyperparameters"]
        steps = f"{s['steps']}" + ("" if s["steps"] == s["planned_steps"] else f" (of {s['planned_steps']} planned; stopped by the time budget)")
        lines.append(f"| {name} | {steps} | {hp['batch_size']} x 256 | {s['tokens_seen']:,} | {hp['lr']} | "
                     f"{s['train_minutes']} | {s['final_train_loss']:.3f} | **{s['validation_perplexity']:.2f}** |")
    if "total_minutes" in work_summary:
        lines.append(f"\nWhole script (corpus, tokenizer, both models, evaluation): {work_summary['total_minutes']} min.")
    g = work_summary.get("greedy_samples", {})
    lines += ["", "## Greedy samples", "",
              f"Greedy decoding (temperature 0), {g.get('tokens', '?')} new tokens after the prompt",
              f"\"{g.get('prompt', '')}\", computed by the torch model from the GGUF weights:", ""]
    for name in MODEL_FILES:
        lines += [f"**{name}:**", "", "> " + g.get(name, "?").replace("\n", "\n> "), ""]
    lines += [
        "## Reproducing and checking",
        "",
        "```sh",
        "cmake -S . -B build -G Ninja && cmake --build build --target peregrine",
        "nice -n 19 /usr/bin/python3 training/train_demo_models.py --peregrine build/peregrine",
        "/usr/bin/python3 training/train_demo_models.py --check-only   # recompute the reference from these files",
        "```",
        "",
        "Use Debian's `/usr/bin/python3`; the script installs `python3-torch python3-numpy",
        "python3-sentencepiece r-cran-janeaustenr libopenblas0-pthread` with apt-get when missing.",
        "Seeds are fixed, so a rerun gives the same shapes and a comparable validation perplexity",
        "(bit-identical weights are not promised: thread scheduling and the time budget",
        "(`--max-minutes`) can change the floating-point path or the step count).",
        "",
        f"`tests/demo` (`test_demo`) loads both GGUF files with peregrine and checks, for the {len(next(iter(ref['models'].values()))['cases'])}",
        f"prompts in `{REFERENCE_FILE}`, that peregrine tokenizes each prompt as SentencePiece does,",
        f"reproduces the torch greedy continuation ({ref['n_new_tokens']} tokens) token for token, and",
        "matches the first-step logits to 1e-3 of their range.",
        "",
    ]
    (models / "README.md").write_text("\n".join(lines))
