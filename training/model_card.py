"""Writes models/README.md (the model card) from the measured figures in
models/training_summary.json and models/reference_outputs.json; nothing in it is typed by hand."""
import json
import math
from pathlib import Path

import torch

from export import MODEL_FILES, TOKENIZER_FILE, REFERENCE_FILE, model_from_gguf


def cpu_name():
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
        f"Hardware: {cpu_name()}, 2 CPU cores shared with other jobs (several concurrent C++ builds",
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
    spec = models / "spec_summary.json"
    if spec.exists():  # train_spec.py's section survives a retrain of the models (its figures may not)
        update_spec_section(models, json.loads(spec.read_text()))


SPEC_BEGIN = "<!-- speculative decoding section: written by training/train_spec.py -->"
SPEC_END = "<!-- end of the speculative decoding section -->"


def _pct(x):
    return f"{100 * x:.1f}%"


def _heads_rows(measured):
    rows = []
    for name, f in measured["figures"].items():
        if "val_top1" not in f:
            continue
        label = f"`{name}`" if name.endswith(".gguf") else name
        rows.append(f"| {label} | " + " | ".join(_pct(a) for a in f["val_top1"]) + " | " +
                    " | ".join(_pct(c) for c in f["chain"]) + f" | **{f['expected_accepted']:.3f}** | "
                    f"**{f['walk']['mean_accepted']:.3f}** |")
    return rows


def _draft_rows(measured):
    rows = []
    for name, f in measured["figures"].items():
        if "kl_target_draft" not in f:
            continue
        w = f["walk"]
        rows.append(f"| `{name}` | {f['validation_perplexity']:.2f} | {f['kl_target_draft']:.3f} | "
                    f"{_pct(f['top1_agreement'])} | " + " | ".join(_pct(c) for c in f["chain"]) +
                    f" | **{f['expected_accepted']:.3f}** | **{w['mean_accepted']:.3f}** | "
                    f"{w['tokens_per_verification']:.3f} | {w['histogram']} |")
    return rows


def _minutes(s):
    names = {"spec_val_cache": "validation hidden states and greedy branches",
             "spec_train_cache": "training-batch hidden states", "training_run": "the whole training run",
             "measure_run": "re-measuring the committed files"}
    parts = [f"{names.get(k, k)} {v} min" for k, v in s.get("minutes", {}).items()]
    if "heads" in s:
        parts.append(f"heads {s['heads']['train_minutes']} min (+ the ablation)")
    if "distilled_draft" in s:
        parts.append(f"distilled draft {s['distilled_draft']['train_minutes']} min")
    return "; ".join(parts)


def _spec_files(models: Path) -> list:
    size = {f: (models / f).stat().st_size for f in ("demo-heads.gguf", "demo-draft-distilled.gguf")
            if (models / f).exists()}
    return [
        "| file | what |",
        "|---|---|",
        f"| `demo-heads.gguf` | 4 Medusa-style heads for `demo-target.gguf`, GGUF v3, f32 "
        f"({size.get('demo-heads.gguf', 0) / 2**10:.0f} KiB) |",
        "| `demo-draft-distilled.gguf` | the draft's shape trained on the target's distribution, GGUF v3, f32, "
        f"tokenizer embedded ({size.get('demo-draft-distilled.gguf', 0) / 2**20:.1f} MiB) |",
        "| `spec_summary.json` | every figure of this section, the training histories and the ablation |",
        "| `reference_outputs.json` | also the distilled draft's torch reference (under `models`, as for the "
        "other two) and the heads' (under `heads`: each head's argmax at each prompt's last token, the first "
        "prompt's logits per head) |",
    ]


def _heads_format(target_sha: str) -> list:
    return [
        "### Heads file (`demo-heads.gguf`)",
        "",
        "Head i (i = 0..3) reads the target's final hidden state h_t (after the last RMSNorm, the vector",
        "the output head multiplies) and predicts the token at t + 2 + i (the target itself predicts",
        "t + 1): `logits_i = W_out (h_t + SiLU(W_i h_t + b_i))`, `W_out` = the target's tied token",
        "embedding (`token_embd.weight`), not stored here.",
        "",
        "| key | type | value |",
        "|---|---|---|",
        "| `general.architecture` | string | `medusa` |",
        "| `general.name` | string | `demo-heads` |",
        "| `medusa.head_count` | u32 | 4 |",
        "| `medusa.embedding_length` | u32 | 256 |",
        "| `medusa.vocab_size` | u32 | 1024 |",
        "| `medusa.target` | string | `demo-target` |",
        f"| `medusa.target_sha256` | string | sha256 of `demo-target.gguf`'s bytes (`{target_sha[:16]}...`) |",
        "",
        "Tensors, all f32: `medusa.{i}.weight` with GGUF dims {256, 256} (ggml order: W_i as torch's",
        "[out, in] matrix stored row-major, ne0 = in, so element (out o, in j) is at o * 256 + j) and",
        "`medusa.{i}.bias` with dims {256}, for i = 0..3, in that order.",
        "",
    ]


def _spec_training(s: dict) -> list:
    h, d = s.get("heads", {}), s.get("distilled_draft", {})
    lines = [
        "### How they were trained",
        "",
        f"Data: the first {h.get('data_batches', 300)} training batches (8 windows of BOS + 256 tokens) that",
        "`train_demo_models.py` drew (same seed, same order: the draft's whole run and the first third of",
        "the target's); the target's hidden states on them are computed once and cached. The target, its",
        "output matrix included, stays frozen.",
        "",
        f"Wall-clock on the busy machine: {_minutes(s)}.",
        "",
    ]
    if h:
        hp = h["hyperparameters"]
        chosen = (" (the ablation's best by expected acceptance, measured on the same validation windows as"
                  " the figures below)" if h.get("alpha_chosen_by") == "ablation" else "")
        lines += [
            "**Heads:** W_i = 0, b_i = 0 at the start (each head starts as the target's own next-token",
            "guess). Loss per head: (1 - a) x cross-entropy against the true token at t + 2 + i plus",
            "a x cross-entropy against the target's own distribution at t + 1 + i (= KL + a constant), with",
            f"**a = {hp['alpha']}**{chosen}; mean over the heads. AdamW (betas 0.9/0.95, no weight decay, which",
            f"would only pull toward \"copy the next-token guess\"), lr {hp['lr']} with {hp['warmup']} warm-up",
            "steps and cosine decay to lr/10, clipping 1.0, seed 1234, cached batches drawn at random:",
            f"{h['steps']} steps ({h['steps'] * hp['batch_size']} windows, {h['train_minutes']} min).",
            "",
        ]
        if h.get("ablation"):
            lines += ["Ablation of a, each run for the same number of steps from the same start (chain figures",
                      "as in the table below):", "",
                      "| a | steps | top-1 head 0 / 1 / 2 / 3 | expected accepted |", "|---|---|---|---|"]
            for a in h["ablation"]:
                lines.append(f"| {a['alpha']} | {a['steps']} | " + " / ".join(_pct(x) for x in a["val_top1"]) +
                             f" | {a['expected_accepted']:.3f} |")
            lines.append("")
    if d:
        hp = d["hyperparameters"]
        lines += [
            "**Distilled draft:** the draft's shape (dim 96, 2 layers, 3 heads / 1 KV head, FFN 256) and",
            "everything else as the old draft was trained (fresh weights from seed 1234, the same",
            f"{hp['steps']} batches in the same order, AdamW lr {hp['lr']}, warm-up {hp['warmup']}, cosine",
            "to lr/10) except the loss: a x cross-entropy against the target's distribution at every",
            "position (= KL(target || draft) + the target's entropy) plus (1 - a) x the next-token loss,",
            f"**a = {hp['alpha']}**. {d['steps']} steps, {d['train_minutes']} min.",
            "",
        ]
    return lines


def _spec_measures(s: dict) -> list:
    m = s["measured"]
    w = m["walk"]
    return [
        "### What greedy verification would accept",
        "",
        "Greedy verification accepts a proposal when it equals the target's own greedy token, so every",
        "figure compares proposals with the target's greedy continuation. **Top-1** is per head: how",
        "often its argmax equals the true validation token at t + 2 + i (every validation position).",
        f"**Chain j**: the fraction of positions t (the first {m['chain_windows']} validation windows,",
        f"{m['chain_positions']:,} positions) where heads 0..j-1 all equal the target's greedy tokens",
        "t + 2 .. t + 1 + j after the prefix up to t; **expected accepted** = their sum, the mean number",
        f"of proposals a verification accepts. **Replayed**: greedy speculative decoding of {w['prompts']}",
        f"validation prompts (BOS + the first {w['prompt_tokens']} tokens of evenly spaced paragraphs),",
        f"{w['new_tokens']} new tokens each, {w['proposals']} proposals per verification, replayed in torch;",
        "mean proposals accepted per verification (each verification also yields the target's own token).",
        "",
        "| heads | top-1 head 0 | head 1 | head 2 | head 3 | chain 1 | chain 2 | chain 3 | chain 4 | expected accepted | replayed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *_heads_rows(m),
        "",
        "The replayed figure is the lower one for the heads: there the prefix is the target's own greedy",
        "text, which at temperature 0 falls into loops (\"I am sure I should be very much in the world. I",
        "am sure I should be...\"), unlike the Austen text the heads were trained on; the heads read only",
        "h_t, while a draft reads the whole context and follows the loop.",
        "",
        "Drafts: teacher-forced on the whole validation split, perplexity, KL(target || draft) in nats per",
        "token and how often the draft's argmax equals the target's; chain j: the draft's greedy tokens",
        "t + 1 .. t + j after the prefix up to t all equal the target's (same positions as the heads);",
        "replayed as above:",
        "",
        "| draft | val perplexity | KL | top-1 agreement | chain 1 | chain 2 | chain 3 | chain 4 | expected accepted | replayed | tokens / verification (replayed) | verifications accepting 0..4 (replayed) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *_draft_rows(m),
        "",
        f"Measured with torch {s['torch']} on {s['hardware']}, {s['threads']} threads, a machine shared",
        "with other jobs (under `nice -n 19`); times are wall-clock under that load.",
        "",
    ]


def spec_section(models: Path, s: dict) -> list:
    """The model card's section on the speculative-decoding artifacts, from models/spec_summary.json."""
    return [
        SPEC_BEGIN,
        "## Speculative decoding: prediction heads and a distilled draft",
        "",
        "Made by `training/train_spec.py` against the frozen target (`demo-target.gguf`); figures in",
        "`spec_summary.json`, log in `training/work/spec_log.txt` when rerun.",
        "",
        *_spec_files(models),
        "",
        *_heads_format(s["target_sha256"]),
        *_spec_training(s),
        *_spec_measures(s),
        "```sh",
        "cmake --build build --target peregrine      # convert writes the distilled draft's GGUF",
        "nice -n 19 /usr/bin/python3 training/train_spec.py --heads --distill --peregrine build/peregrine",
        "nice -n 19 /usr/bin/python3 training/train_spec.py   # re-measure the committed files only",
        "```",
        SPEC_END,
    ]


def update_spec_section(models: Path, summary: dict):
    """Replaces (or appends) the speculative-decoding section of models/README.md."""
    card = models / "README.md"
    text = card.read_text() if card.exists() else ""
    section = "\n".join(spec_section(models, summary)) + "\n"
    if SPEC_BEGIN in text and SPEC_END in text:
        head, rest = text.split(SPEC_BEGIN, 1)
        text = head + section.rstrip("\n") + rest.split(SPEC_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    card.write_text(text)
