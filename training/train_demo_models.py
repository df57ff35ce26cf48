#!/usr/bin/python3
"""Trains peregrine's embedded demo models (a ~2.4M-parameter target and a ~0.3M draft that share a
tokenizer) on the six Jane Austen novels, exports them to GGUF with peregrine's own converter and
records torch reference outputs for tests/demo.

  /usr/bin/python3 training/train_demo_models.py            # everything (~1 h on 2 CPU cores)
  /usr/bin/python3 training/train_demo_models.py --export-only   # reuse training/work checkpoints
  /usr/bin/python3 training/train_demo_models.py --check-only    # recompute models/reference_outputs.json
                                                                  # from the committed GGUF files
Use Debian's /usr/bin/python3: the packages it needs are Debian's python3-torch (1.13),
python3-numpy and python3-sentencepiece, which this script installs with apt-get when missing.
"""
import argparse
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
APT_PACKAGES = ["python3-torch", "python3-numpy", "python3-sentencepiece", "r-cran-janeaustenr",
                "libopenblas0-pthread"]


def ensure_packages():
    missing = [m for m in ("torch", "numpy", "sentencepiece") if importlib.util.find_spec(m) is None]
    no_r = subprocess.run(["sh", "-c", "command -v Rscript && test -d /usr/lib/R/site-library/janeaustenr"],
                          capture_output=True).returncode != 0
    if not missing and not no_r:
        return
    print(f"installing Debian packages (missing: {missing}{' R janeaustenr' if no_r else ''})", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y"] + APT_PACKAGES, check=True, env=env)
    os.execv(sys.executable, [sys.executable] + sys.argv)  # re-import with the new packages


ensure_packages()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(HERE))
import corpus  # noqa: E402
import export  # noqa: E402
from llama_model import Llama, LlamaShape  # noqa: E402

SEED = 1234
VOCAB_SIZE = 1024
SEQ_LEN = 256
# head_dim 32 everywhere. Target: 4 query heads share each KV head (GQA 8:2).
TARGET = LlamaShape(dim=256, hidden_dim=688, n_layers=3, n_heads=8, n_kv_heads=2,
                    vocab_size=VOCAB_SIZE, seq_len=SEQ_LEN, tied_output=True)
DRAFT = LlamaShape(dim=96, hidden_dim=256, n_layers=2, n_heads=3, n_kv_heads=1,
                   vocab_size=VOCAB_SIZE, seq_len=SEQ_LEN, tied_output=True)


def log(msg, file=None):
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if file is not None:
        with open(file, "a") as f:
            f.write(line + "\n")


class Batches:
    """Training windows: BOS followed by SEQ_LEN tokens starting at a random paragraph start, so
    that every window looks like what inference sees (BOS, then the start of a paragraph)."""

    def __init__(self, stream, starts, bos, seq_len, generator):
        self.stream = torch.tensor(stream, dtype=torch.long)
        self.starts = torch.tensor([s for s in starts if s + seq_len <= len(stream)], dtype=torch.long)
        self.bos, self.seq_len, self.g = bos, seq_len, generator

    def next(self, batch_size):
        picks = self.starts[torch.randint(len(self.starts), (batch_size,), generator=self.g)]
        rows = torch.stack([self.stream[p:p + self.seq_len] for p in picks.tolist()])  # (B, seq)
        bos = torch.full((batch_size, 1), self.bos, dtype=torch.long)
        return torch.cat([bos, rows], dim=1)  # (B, seq + 1): inputs [:, :-1], targets [:, 1:]


def validation_windows(stream, bos, seq_len):
    """Non-overlapping windows covering the whole validation stream, each prefixed with BOS."""
    rows = [[bos] + stream[i:i + seq_len] for i in range(0, len(stream) - seq_len + 1, seq_len)]
    return torch.tensor(rows, dtype=torch.long)  # (n_windows, seq + 1)


@torch.no_grad()
def mean_loss(model, windows, batch_size=8):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch_size):
        w = windows[i:i + batch_size]
        logits = model(w[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                 reduction="sum").item()
        count += w[:, 1:].numel()
    model.train()
    return total / count


def lm_loss(model, batch):
    """Next-token cross-entropy on a (B, seq + 1) batch of windows."""
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def learning_rate(step, hp, time_progress):
    """Linear warmup, then cosine decay to lr/10.
    With --max-minutes the decay follows whichever runs out first, steps or time, so a
    slower (busier) machine still ends with a fully decayed learning rate."""
    if step < hp["warmup"]:
        return hp["lr"] * (step + 1) / hp["warmup"]
    progress = max((step - hp["warmup"]) / max(1, hp["steps"] - hp["warmup"]), time_progress)
    return hp["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train_one(name, shape, hp, train_batches, val_windows, work, log_file, loss_fn=lm_loss):
    """Trains a fresh model (seed SEED) on train_batches.next(batch_size), each step minimising
    loss_fn(model, batch); checkpoints to WORK/NAME.pt and returns the run's figures."""
    torch.manual_seed(SEED)
    model = Llama(shape)
    n_params = model.n_params()
    log(f"{name}: {shape.as_dict()} -> {n_params} parameters; {hp}", log_file)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=hp["lr"], betas=(0.9, 0.95))
    quick_val = val_windows[:hp["quick_val_windows"]]
    ckpt = work / f"{name}.pt"
    start, steps_done, history = time.time(), 0, []
    for step in range(hp["steps"]):
        elapsed = time.time() - start
        time_progress = elapsed / (hp["max_minutes"] * 60) if hp.get("max_minutes") else 0.0
        if time_progress >= 1.0:
            log(f"{name}: stopping at step {steps_done}: time budget of {hp['max_minutes']} min used", log_file)
            break
        lr = learning_rate(step, hp, time_progress)
        for group in opt.param_groups:
            group["lr"] = lr
        loss = loss_fn(model, train_batches.next(hp["batch_size"]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        steps_done = step + 1
        elapsed = time.time() - start
        if step % 10 == 0 or steps_done == hp["steps"]:
            log(f"{name} step {steps_done}/{hp['steps']} loss {loss.item():.4f} lr {lr:.2e} "
                f"{elapsed / 60:.1f} min", log_file)
        if steps_done % hp["eval_every"] == 0 or steps_done == hp["steps"]:
            vl = mean_loss(model, quick_val)
            history.append({"step": steps_done, "train_loss": loss.item(), "val_loss_quick": vl})
            log(f"{name} step {steps_done} quick validation perplexity {math.exp(vl):.2f}", log_file)
            torch.save({"shape": shape.as_dict(), "state": model.state_dict(), "step": steps_done}, ckpt)
    train_minutes = (time.time() - start) / 60
    torch.save({"shape": shape.as_dict(), "state": model.state_dict(), "step": steps_done}, ckpt)
    val_loss = mean_loss(model, val_windows)
    summary = {"parameters": n_params, "steps": steps_done, "planned_steps": hp["steps"],
               "tokens_seen": steps_done * hp["batch_size"] * shape.seq_len,
               "train_minutes": round(train_minutes, 1), "final_train_loss": history[-1]["train_loss"],
               "validation_loss": val_loss, "validation_perplexity": math.exp(val_loss),
               "validation_tokens": int(val_windows[:, 1:].numel()), "hyperparameters": hp,
               "history": history}
    log(f"{name}: done in {train_minutes:.1f} min, full validation perplexity "
        f"{math.exp(val_loss):.3f} over {summary['validation_tokens']} tokens", log_file)
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check-only", action="store_true",
                    help="recompute reference outputs from the committed GGUF files and compare")
    ap.add_argument("--export-only", action="store_true",
                    help="skip training; export training/work/*.pt and write reference outputs")
    ap.add_argument("--work", type=Path, default=HERE / "work", help="scratch folder (not committed)")
    ap.add_argument("--models", type=Path, default=REPO / "models", help="output folder")
    ap.add_argument("--peregrine", type=Path, default=None, help="peregrine binary (for convert)")
    ap.add_argument("--target-steps", type=int, default=1200)
    ap.add_argument("--draft-steps", type=int, default=300)
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="per model: stop early (and still export) after this many minutes")
    ap.add_argument("--train", choices=["both", "target", "draft"], default="both",
                    help="retrain only one model, reusing the other's checkpoint and figures in --work")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    if args.check_only:
        sys.exit(0 if export.check_reference(args.models) else 1)

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "training_log.txt"
    summary_file = work / "training_summary.json"
    if not args.export_only:
        previous = json.loads(summary_file.read_text()) if summary_file.exists() else {}
        if log_file.exists() and args.train == "both":
            log_file.unlink()
        t0 = time.time()
        split = corpus.build_corpus(work)
        if args.train != "both" and (work / "tokenizer.model").exists():
            import sentencepiece as spm  # the kept model was trained with this tokenizer
            sp = spm.SentencePieceProcessor(model_file=str(work / "tokenizer.model"))
        else:
            sp = corpus.train_tokenizer(work, VOCAB_SIZE, SEED)
        train_stream, train_starts = corpus.token_stream(sp, split["train"])
        val_stream, _ = corpus.token_stream(sp, split["validation"])
        log(f"corpus: {len(split['train'])} train paragraphs ({len(train_stream)} tokens), "
            f"{len(split['validation'])} validation paragraphs ({len(val_stream)} tokens); "
            f"{time.time() - t0:.0f} s", log_file)
        bos = sp.bos_id()
        val_windows = validation_windows(val_stream, bos, SEQ_LEN)
        summary = {"hardware": f"{platform.processor() or platform.machine()}, "
                               f"{os.cpu_count()} CPU cores, torch {torch.__version__}, "
                               f"{args.threads} threads",
                   "corpus": {"train_tokens": len(train_stream), "validation_tokens": len(val_stream),
                              **json.loads((work / "corpus_stats.json").read_text())}}
        plans = [("draft", DRAFT, {"steps": args.draft_steps, "batch_size": 8, "lr": 4e-3,
                                   "warmup": 30, "eval_every": 100, "quick_val_windows": 16}),
                 ("target", TARGET, {"steps": args.target_steps, "batch_size": 8, "lr": 2.5e-3,
                                     "warmup": 30, "eval_every": 100, "quick_val_windows": 16})]
        for name, shape, hp in plans:
            if args.train not in ("both", name):
                summary[name] = previous[name]
                log(f"{name}: keeping the previous run's checkpoint and figures", log_file)
                continue
            hp["max_minutes"] = args.max_minutes
            g = torch.Generator().manual_seed(SEED)
            batches = Batches(train_stream, train_starts, bos, SEQ_LEN, g)
            summary[name] = train_one(name, shape, hp, batches, val_windows, work, log_file)
            summary_file.write_text(json.dumps(summary, indent=1))
        summary["total_minutes"] = round((time.time() - t0) / 60, 1)
        if args.train != "both":
            summary["total_minutes"] = round(summary["total_minutes"] + previous.get(
                "draft" if args.train == "target" else "target", {}).get("train_minutes", 0), 1)
        summary_file.write_text(json.dumps(summary, indent=1))
    export.export_all(work, args.models, args.peregrine, log)


if __name__ == "__main__":
    main()
