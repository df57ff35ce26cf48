#!/usr/bin/python3
"""Trains what speculative decoding proposes with, for the demo target (models/demo-target.gguf,
kept frozen), and measures what greedy verification would accept:

  --heads    Medusa-style heads on the target's final hidden state -> models/demo-heads.gguf
  --distill  the draft's shape retrained on the target's distribution -> models/demo-draft-distilled.gguf
  (neither)  only re-measure the committed files

  nice -n 19 /usr/bin/python3 training/train_spec.py --heads --distill --peregrine build/peregrine

Both train on the first --data-batches training batches that train_demo_models.py drew (the same
windows in the same order: Batches seeded 1234), whose target hidden states are computed once
and cached in --work. Figures go to models/spec_summary.json and the "Speculative decoding"
section of models/README.md. Debian's /usr/bin/python3 with python3-torch (see
train_demo_models.py, which installs the packages).
"""
import os

# OpenBLAS's own threads fight torch's OpenMP threads on a busy machine (measured: attention's
# batched matmuls 5-10x slower); torch's threads are enough.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import train_demo_models as demo  # noqa: E402  (installs the Debian packages when missing)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import corpus  # noqa: E402
import export  # noqa: E402
import medusa_heads  # noqa: E402
import model_card  # noqa: E402
import spec_eval  # noqa: E402
from llama_model import greedy_continuation  # noqa: E402

K = 4  # heads / proposals per verification
TARGET_FILE, DRAFT_FILE = "demo-target.gguf", "demo-draft.gguf"
HEADS_FILE, DISTILLED_FILE = "demo-heads.gguf", "demo-draft-distilled.gguf"
SUMMARY_FILE = "spec_summary.json"
log = demo.log


class CachedBatches:
    """Training windows with the frozen target's final hidden states (after the last RMSNorm).
    tokens: (N, B, T + 1) as demo.Batches drew them; hidden: (N, B, T, dim) for tokens[..., :-1].
    next() replays them in order (wrapping); shuffled() draws whole cached batches at random."""

    def __init__(self, tokens, hidden):
        self.tokens, self.hidden, self.i = tokens, hidden, 0

    def next(self, batch_size):
        if batch_size != self.tokens.shape[1]:
            raise ValueError(f"cached batches hold {self.tokens.shape[1]} windows, not {batch_size}")
        i, self.i = self.i % len(self.tokens), self.i + 1
        return self.tokens[i], self.hidden[i]

    def shuffled(self, generator):
        i = int(torch.randint(len(self.tokens), (1,), generator=generator))
        return self.tokens[i], self.hidden[i]


@torch.no_grad()
def hidden_in_chunks(target, windows, chunk=8):
    """windows: (N, T + 1) -> target hidden states of windows[:, :-1], (N, T, dim)."""
    return torch.cat([target.hidden(windows[i:i + chunk, :-1]) for i in range(0, len(windows), chunk)])


def cached(path: Path, key: dict, compute, minutes: dict):
    """compute() once per key (the target's hash, sizes); kept in PATH for reruns. Records the
    minutes it took in minutes[PATH's stem] when it ran."""
    if path.exists():
        saved = torch.load(path)
        if saved.get("key") == key:
            return saved["value"]
    t0 = time.time()
    value = compute()
    torch.save({"key": key, "value": value}, path)
    minutes[path.stem] = round((time.time() - t0) / 60, 1)
    return value


def train_cache(target, target_sha, data, n_batches, work, log_file, minutes):
    def compute():
        g = torch.Generator().manual_seed(demo.SEED)
        batches = demo.Batches(data["train_stream"], data["train_starts"], data["bos"], demo.SEQ_LEN, g)
        tokens, hidden, t0 = [], [], time.time()
        for n in range(n_batches):
            tokens.append(batches.next(8))
            hidden.append(hidden_in_chunks(target, tokens[-1]))
            if n % 25 == 0:
                log(f"target hidden states: batch {n}/{n_batches}, {(time.time() - t0) / 60:.1f} min", log_file)
        return torch.stack(tokens), torch.stack(hidden)
    key = {"target_sha256": target_sha, "batches": n_batches, "batch_size": 8, "seed": demo.SEED}
    return CachedBatches(*cached(work / "spec_train_cache.pt", key, compute, minutes))


def val_cache(target, target_sha, data, chain_windows, work, log_file, minutes):
    """Validation windows, the target's hidden states on all of them and its greedy K + 1 token
    continuation after every prefix of the first chain_windows windows."""
    def compute():
        t0 = time.time()
        hidden = hidden_in_chunks(target, data["val_windows"])
        chain = data["val_windows"][:chain_windows, :-1]
        greedy = torch.cat([spec_eval.greedy_branches(target, chain[i:i + 8], K + 1)
                            for i in range(0, len(chain), 8)])
        log(f"validation: target hidden states and greedy branches in {(time.time() - t0) / 60:.1f} min", log_file)
        return hidden, greedy
    key = {"target_sha256": target_sha, "windows": len(data["val_windows"]), "chain_windows": chain_windows}
    return cached(work / "spec_val_cache.pt", key, compute, minutes)


def load_data(work, models, log_file):
    """The corpus split rebuilt as train_demo_models.py does, tokenized with the committed tokenizer;
    refuses to go on if the token counts differ from the ones the models were trained on."""
    import sentencepiece as spm
    split = corpus.build_corpus(work)
    sp = spm.SentencePieceProcessor(model_file=str(models / export.TOKENIZER_FILE))
    train_stream, train_starts = corpus.token_stream(sp, split["train"])
    val_stream, val_starts = corpus.token_stream(sp, split["validation"])
    want = json.loads((models / "training_summary.json").read_text())["corpus"]
    if (len(train_stream), len(val_stream)) != (want["train_tokens"], want["validation_tokens"]):
        raise SystemExit(f"corpus differs from the models' ({len(train_stream)}/{len(val_stream)} tokens, "
                         f"expected {want['train_tokens']}/{want['validation_tokens']})")
    log(f"corpus: {len(train_stream)} train / {len(val_stream)} validation tokens (as the models')", log_file)
    # The tokenizer under work/ is what export.export_one writes tokenizer.bin from.
    (work / "tokenizer.model").write_bytes((models / export.TOKENIZER_FILE).read_bytes())
    export.write_llama2c_tokenizer(sp, work / "tokenizer.bin")
    return {"sp": sp, "bos": sp.bos_id(), "train_stream": train_stream, "train_starts": train_starts,
            "val_stream": val_stream, "val_starts": val_starts,
            "val_windows": demo.validation_windows(val_stream, sp.bos_id(), demo.SEQ_LEN)}


# ---------------------------------------------------------------------------------------- heads


def heads_loss(heads, tokens, hidden, w_out, alpha):
    """tokens (B, T + 1) windows, hidden (B, T, dim) the target's states on tokens[:, :-1].
    Head i at t: cross-entropy against tokens[t + 2 + i] (weight 1 - alpha) plus cross-entropy
    against the target's own distribution at t + 1 + i (weight alpha; = KL + a constant).
    Returns the mean over heads."""
    t = hidden.shape[1]
    logits = medusa_heads.head_logits(heads, hidden, w_out)                 # (B, T, K, V)
    with torch.no_grad():
        teacher = F.softmax(F.linear(hidden, w_out), dim=-1)              # (B, T, V)
    total = 0.0
    for i in range(heads.weight.shape[0]):
        n = t - 1 - i                                                      # t + 2 + i <= T
        logq = F.log_softmax(logits[:, :n, i], dim=-1)
        hard = F.nll_loss(logq.reshape(-1, logq.shape[-1]), tokens[:, 2 + i:2 + i + n].reshape(-1))
        soft = -(teacher[:, 1 + i:1 + i + n] * logq).sum(-1).mean() if alpha > 0 else 0.0
        total = total + (1 - alpha) * hard + alpha * soft
    return total / heads.weight.shape[0]


def train_heads(cache, w_out, hp, log_file, val=None):
    """AdamW on the heads only (the target, W_out included, stays frozen), whole cached batches
    drawn at random (seeded). Returns (heads, figures)."""
    torch.manual_seed(demo.SEED)
    heads = medusa_heads.MedusaHeads(K, w_out.shape[1])
    opt = torch.optim.AdamW([{"params": [heads.weight], "weight_decay": hp["weight_decay"]},
                             {"params": [heads.bias], "weight_decay": 0.0}], lr=hp["lr"], betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(demo.SEED)
    start, steps_done, history = time.time(), 0, []
    for step in range(hp["steps"]):
        time_progress = (time.time() - start) / (hp["max_minutes"] * 60) if hp.get("max_minutes") else 0.0
        if time_progress >= 1.0:
            log(f"heads: stopping at step {steps_done}: time budget of {hp['max_minutes']} min used", log_file)
            break
        lr = demo.learning_rate(step, hp, time_progress)
        for group in opt.param_groups:
            group["lr"] = lr
        loss = heads_loss(heads, *cache.shuffled(g), w_out, hp["alpha"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(heads.parameters(), 1.0)
        opt.step()
        steps_done = step + 1
        if step % 20 == 0 or steps_done == hp["steps"]:
            log(f"heads(alpha {hp['alpha']}) step {steps_done}/{hp['steps']} loss {loss.item():.4f} "
                f"lr {lr:.2e} {(time.time() - start) / 60:.1f} min", log_file)
        if val is not None and (steps_done % hp["eval_every"] == 0 or steps_done == hp["steps"]):
            acc = head_accuracy(heads, val["windows"], val["hidden"], w_out)
            history.append({"step": steps_done, "train_loss": loss.item(), "val_top1": acc})
            log(f"heads step {steps_done}: validation top-1 per head {[round(a, 4) for a in acc]}", log_file)
    return heads, {"steps": steps_done, "train_minutes": round((time.time() - start) / 60, 1),
                   "final_train_loss": loss.item(), "hyperparameters": hp, "history": history}


@torch.no_grad()
def head_accuracy(heads, windows, hidden, w_out, chunk=16):
    """Per head, how often its argmax at t equals the true token at t + 2 + i (all positions of the
    validation windows where that token exists)."""
    t = hidden.shape[1]
    hits, counts = [0] * K, [0] * K
    for c in range(0, len(windows), chunk):
        pred = medusa_heads.head_logits(heads, hidden[c:c + chunk], w_out).argmax(-1)  # (b, T, K)
        for i in range(K):
            n = t - 1 - i
            hits[i] += int((pred[:, :n, i] == windows[c:c + chunk, 2 + i:2 + i + n]).sum())
            counts[i] += pred[:, :n, i].numel()
    return [h / c for h, c in zip(hits, counts)]


@torch.no_grad()
def head_chain(heads, hidden, greedy, w_out):
    """Heads' proposals at every position t of the chain windows against the target's own greedy
    tokens t + 2 .. t + 1 + K after that prefix (greedy[..., 1:]); positions with t + K + 1 within
    the context only."""
    t_max = hidden.shape[1] - K - 1
    pred = medusa_heads.head_logits(heads, hidden[:, :t_max], w_out).argmax(-1)   # (W, t_max, K)
    return spec_eval.chain_acceptance(pred.reshape(-1, K), greedy[:, :t_max, 1:].reshape(-1, K))


# ---------------------------------------------------------------------------------------- draft


def distill_loss(w_out, alpha):
    """For train_one: cross-entropy against the target's distribution (weight alpha; = KL + the
    target's entropy, a constant) plus the hard next-token loss (weight 1 - alpha)."""
    def loss_fn(model, batch):
        tokens, hidden = batch
        logq = F.log_softmax(model(tokens[:, :-1]), dim=-1)                 # (B, T, V)
        with torch.no_grad():
            teacher = F.softmax(F.linear(hidden, w_out), dim=-1)
        soft = -(teacher * logq).sum(-1).mean()
        hard = F.nll_loss(logq.reshape(-1, logq.shape[-1]), tokens[:, 1:].reshape(-1))
        return alpha * soft + (1 - alpha) * hard
    return loss_fn


@torch.no_grad()
def draft_agreement(draft, windows, hidden, w_out, chunk=8):
    """Teacher-forced on the validation windows: KL(target || draft) per token (nats), how often
    the draft's argmax equals the target's, and the draft's perplexity."""
    kl = agree = nll = 0.0
    for c in range(0, len(windows), chunk):
        w = windows[c:c + chunk]
        logq = F.log_softmax(draft(w[:, :-1]), dim=-1)
        logp = F.log_softmax(F.linear(hidden[c:c + chunk], w_out), dim=-1)
        kl += float((logp.exp() * (logp - logq)).sum())
        agree += float((logq.argmax(-1) == logp.argmax(-1)).sum())
        nll -= float(logq.gather(-1, w[:, 1:].unsqueeze(-1)).sum())
    n = windows[:, 1:].numel()
    return {"kl_target_draft": kl / n, "top1_agreement": agree / n, "validation_perplexity": math.exp(nll / n)}


# ------------------------------------------------------------------------------------- the walk


def walk_prompts(data, n_prompts, prompt_tokens):
    """BOS + the first prompt_tokens tokens of n_prompts validation paragraphs, evenly spaced."""
    starts = data["val_starts"]
    picks = [starts[round(i * len(starts) / n_prompts)] for i in range(n_prompts)]
    return torch.tensor([[data["bos"]] + data["val_stream"][p:p + prompt_tokens] for p in picks])


@torch.no_grad()
def walk(target, proposers, prompts, n_new, log_file, chunk=25):
    """Greedy speculative decoding of every prompt for n_new tokens, K proposals per verification,
    replayed from the target's greedy continuation. proposers: name -> f(seqs) giving (B, L, K)
    proposals after each prefix. Returns name -> figures."""
    seqs = torch.cat([torch.cat([prompts[c:c + chunk], spec_eval.greedy_branches(
        target, prompts[c:c + chunk], n_new + K + 1, last_only=True)[:, 0]], dim=1)
        for c in range(0, len(prompts), chunk)])
    out = {}
    for name, propose in proposers.items():
        proposals = torch.cat([propose(seqs[c:c + chunk]) for c in range(0, len(seqs), chunk)])
        accepted = [a for s, p in zip(seqs, proposals)
                    for a in spec_eval.speculative_walk(p, s, prompts.shape[1], n_new, K)]
        out[name] = {"verifications": len(accepted), "mean_accepted": sum(accepted) / len(accepted),
                     "tokens_per_verification": 1 + sum(accepted) / len(accepted),
                     "histogram": [accepted.count(a) for a in range(K + 1)]}
        log(f"walk {name}: {out[name]['mean_accepted']:.3f} accepted proposals per verification "
            f"(histogram 0..{K}: {out[name]['histogram']})", log_file)
    return out


@torch.no_grad()
def draft_chain(draft, windows, greedy):
    """The draft's greedy K tokens after every prefix of the chain windows against the target's
    greedy tokens t + 1 .. t + K after the same prefix (greedy[..., :K]); t + K + 1 within the
    context, as for the heads."""
    t_max = windows.shape[1] - 1 - K - 1
    pred = torch.cat([spec_eval.greedy_branches(draft, windows[i:i + 8, :-1], K) for i in range(0, len(windows), 8)])
    return spec_eval.chain_acceptance(pred[:, :t_max].reshape(-1, K), greedy[:, :t_max, :K].reshape(-1, K))


def draft_proposer(draft):
    return lambda seqs: spec_eval.greedy_branches(draft, seqs, K)


def heads_proposer(target, heads):
    """Proposals after prefix p: the heads on the target's state at p - 1 (the engine's last
    committed token p is the target's own pick from that state, not yet computed)."""
    def propose(seqs):
        pred = medusa_heads.head_logits(heads, target.hidden(seqs), target.tok_embeddings.weight).argmax(-1)
        return torch.cat([torch.zeros_like(pred[:, :1]), pred[:, :-1]], dim=1)  # row p = state p - 1
    return propose


# ------------------------------------------------------------------------------------ the runs


def check_branches(models, log_file):
    """spec_eval.greedy_branches against plain greedy decoding by recomputation (float64, both
    models, random prefixes): every acceptance figure below is only as right as this."""
    for filename in (TARGET_FILE, DRAFT_FILE):
        model, _ = export.model_from_gguf(models / filename)
        toks = torch.randint(3, model.s.vocab_size, (2, 24), generator=torch.Generator().manual_seed(demo.SEED))
        toks[:, 0] = 1
        branches = spec_eval.greedy_branches(model, toks, K + 1)
        last = spec_eval.greedy_branches(model, toks, 12, last_only=True)
        for b in range(2):
            for t in (0, 5, 23):
                if greedy_continuation(model, toks[b, :t + 1].tolist(), K + 1)[0] != branches[b, t].tolist():
                    raise SystemExit(f"greedy_branches differs from greedy decoding ({filename}, prefix {t})")
            if greedy_continuation(model, toks[b].tolist(), 12)[0] != last[b, 0].tolist():
                raise SystemExit(f"greedy_branches(last_only) differs from greedy decoding ({filename})")
    log("check: greedy_branches equals greedy decoding by recomputation on both models", log_file)


def heads_run(args, data, cache, val, w_out, log_file):
    base = {"batch_size": 8, "warmup": 30, "lr": args.heads_lr, "weight_decay": 0.0, "eval_every": 100,
            "max_minutes": args.max_minutes}
    ablation = []
    for alpha in ([0.0, 0.5, 1.0] if args.heads_ablation_steps else []):
        heads, fig = train_heads(cache, w_out, {**base, "steps": args.heads_ablation_steps, "alpha": alpha},
                                 log_file)
        ablation.append({"alpha": alpha, "steps": fig["steps"],
                         "val_top1": head_accuracy(heads, val["windows"], val["hidden"], w_out),
                         **head_chain(heads, val["hidden"][:len(val["greedy"])], val["greedy"], w_out)})
        log(f"heads ablation: {ablation[-1]}", log_file)
    alpha = args.heads_alpha
    if alpha == "best":
        if not ablation:
            raise SystemExit("--heads-alpha best needs the ablation (--heads-ablation-steps > 0)")
        alpha = max(ablation, key=lambda a: a["expected_accepted"])["alpha"]
        log(f"heads: alpha {alpha} has the highest expected acceptance in the ablation", log_file)
    heads, fig = train_heads(cache, w_out, {**base, "steps": args.heads_steps, "alpha": float(alpha)},
                             log_file, val)
    out = args.models / HEADS_FILE
    medusa_heads.save_gguf(heads, out, "demo-heads", "demo-target", args.models / TARGET_FILE, w_out.shape[0])
    back, _ = medusa_heads.load_gguf(out, args.models / TARGET_FILE)
    if not (torch.equal(back.weight, heads.weight) and torch.equal(back.bias, heads.bias)):
        raise SystemExit(f"{out} does not read back as the trained heads")
    log(f"export: {out} ({out.stat().st_size} bytes), reads back exactly", log_file)
    write_heads_reference(args.models, data["sp"])
    return {**fig, "data_batches": args.data_batches, "ablation": ablation,
            "alpha_chosen_by": "ablation" if args.heads_alpha == "best" else "--heads-alpha"}


@torch.no_grad()
def write_heads_reference(models: Path, sp):
    """Torch reference for a C++ heads proposer, in float64 from the committed GGUF files: for each
    of export.PROMPTS, the heads on the target's hidden state at the prompt's last token (each
    head's argmax and top-2 margin; the first prompt's full logits per head) ->
    reference_outputs.json["heads"]."""
    target, _ = export.model_from_gguf(models / TARGET_FILE)
    heads, _ = medusa_heads.load_gguf(models / HEADS_FILE, models / TARGET_FILE)
    heads = heads.double()
    cases = []
    for n, prompt in enumerate(export.PROMPTS):
        ids = [sp.bos_id()] + sp.encode(prompt)
        logits = medusa_heads.head_logits(heads, target.hidden(torch.tensor([ids]))[0, -1],
                                          target.tok_embeddings.weight)              # (K, V)
        top2 = torch.topk(logits, 2, dim=-1).values
        case = {"prompt": prompt, "prompt_ids": ids, "head_argmax": logits.argmax(-1).tolist(),
                "min_top2_margin": round(float((top2[:, 0] - top2[:, 1]).min()), 6)}
        if n == 0:
            case["head_logits"] = [[round(x, export.LOGIT_DECIMALS) for x in row] for row in logits.tolist()]
        cases.append(case)
    path = models / export.REFERENCE_FILE
    ref = json.loads(path.read_text())
    ref["heads"] = {HEADS_FILE: {
        "about": "Medusa heads on the target's final hidden state (after output_norm) at the prompt's last "
                 "token t: head i's logits predict token t + 2 + i; float64 from the GGUF weights "
                 "(training/train_spec.py). prompt_ids include BOS.", "cases": cases}}
    path.write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")


def distill_run(args, data, cache, w_out, log_file):
    hp = {"steps": args.distill_steps, "batch_size": 8, "lr": 4e-3, "warmup": 30, "eval_every": 100,
          "quick_val_windows": 16, "max_minutes": args.max_minutes, "alpha": args.distill_alpha}
    cache.i = 0  # the old draft's batches, in its order
    fig = demo.train_one("draft-distilled", demo.DRAFT, hp, cache, data["val_windows"], args.work, log_file,
                         distill_loss(w_out, args.distill_alpha))
    ckpt = torch.load(args.work / "draft-distilled.pt")
    out = args.models / DISTILLED_FILE
    model = export.export_one(ckpt, "draft-distilled", out, args.work, export.find_peregrine(args.peregrine),
                              data["sp"], lambda m: log(m, log_file))
    # Torch reference for peregrine's tests, like the other two models'.
    sp, ref_path = data["sp"], args.models / export.REFERENCE_FILE
    cases = export.reference_cases(model, [[sp.bos_id()] + sp.encode(p) for p in export.PROMPTS], export.PROMPTS)
    for c in cases:
        c["greedy_text"] = sp.decode(c["greedy_ids"])
    ref = json.loads(ref_path.read_text())
    ref["models"][DISTILLED_FILE] = {"steps_trained": ckpt["step"], "cases": cases}
    ref_path.write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    return fig


def measure(args, data, target, val, log_file):
    """Every figure for the committed files: heads' accuracy and chains, drafts' agreement, and the
    replayed speculative decoding of the validation prompts."""
    w_out = target.tok_embeddings.weight
    figures, proposers = {}, {}
    zero = medusa_heads.MedusaHeads(K, w_out.shape[1])  # = the target's next-token guess, K times
    heads_files = {"untrained heads (W = 0)": zero}
    if (args.models / HEADS_FILE).exists():
        heads_files[HEADS_FILE] = medusa_heads.load_gguf(args.models / HEADS_FILE, args.models / TARGET_FILE)[0]
    for name, heads in heads_files.items():
        figures[name] = {"val_top1": head_accuracy(heads, val["windows"], val["hidden"], w_out),
                         **head_chain(heads, val["hidden"][:len(val["greedy"])], val["greedy"], w_out)}
        proposers[name] = heads_proposer(target, heads)
        log(f"measure {name}: {figures[name]}", log_file)
    for filename in (DRAFT_FILE, DISTILLED_FILE):
        if (args.models / filename).exists():
            draft, _ = export.model_from_gguf(args.models / filename, torch.float32)
            figures[filename] = {**draft_agreement(draft, val["windows"], val["hidden"], w_out),
                                 **draft_chain(draft, val["windows"][:len(val["greedy"])], val["greedy"])}
            proposers[filename] = draft_proposer(draft)
            log(f"measure {filename}: {figures[filename]}", log_file)
    prompts = walk_prompts(data, args.prompts, args.prompt_tokens)
    for name, fig in walk(target, proposers, prompts, args.new_tokens, log_file).items():
        figures[name]["walk"] = fig
    n_positions = len(val["greedy"]) * (val["hidden"].shape[1] - K - 1)
    return {"figures": figures, "chain_positions": n_positions, "chain_windows": len(val["greedy"]),
            "walk": {"prompts": args.prompts, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                     "proposals": K}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", action="store_true", help=f"train the Medusa heads -> models/{HEADS_FILE}")
    ap.add_argument("--distill", action="store_true", help=f"distil the draft -> models/{DISTILLED_FILE}")
    ap.add_argument("--work", type=Path, default=HERE / "work", help="scratch folder (not committed)")
    ap.add_argument("--models", type=Path, default=demo.REPO / "models")
    ap.add_argument("--peregrine", type=Path, default=None, help="peregrine binary (convert, for --distill)")
    ap.add_argument("--data-batches", type=int, default=300, help="training batches of 8 windows (cached)")
    ap.add_argument("--heads-steps", type=int, default=600)
    ap.add_argument("--heads-lr", type=float, default=3e-3)
    ap.add_argument("--heads-alpha", default="best",
                    help="weight of the distillation term, or 'best': the ablation's best")
    ap.add_argument("--heads-ablation-steps", type=int, default=100,
                    help="first train alpha 0 / 0.5 / 1 for this many steps and record the figures (0: skip)")
    ap.add_argument("--distill-steps", type=int, default=300)
    ap.add_argument("--distill-alpha", type=float, default=1.0, help="weight of the KL term")
    ap.add_argument("--max-minutes", type=float, default=0, help="per training run: stop early after this")
    ap.add_argument("--chain-windows", type=int, default=64, help="validation windows for the chain figures")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.heads_alpha != "best":
        args.heads_alpha = float(args.heads_alpha)
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    log_file = args.work / "spec_log.txt"
    t0 = time.time()
    check_branches(args.models, log_file)
    data = load_data(args.work, args.models, log_file)
    target, _ = export.model_from_gguf(args.models / TARGET_FILE, torch.float32)
    target.requires_grad_(False)
    w_out = target.tok_embeddings.weight
    target_sha = medusa_heads.sha256_of(args.models / TARGET_FILE)
    summary_path = args.models / SUMMARY_FILE
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    minutes = summary.setdefault("minutes", {})  # wall-clock of the last run that did each part
    val_hidden, val_greedy = val_cache(target, target_sha, data, args.chain_windows, args.work, log_file, minutes)
    val = {"windows": data["val_windows"], "hidden": val_hidden, "greedy": val_greedy}
    if args.heads or args.distill:
        cache = train_cache(target, target_sha, data, args.data_batches, args.work, log_file, minutes)
    if args.heads:
        summary["heads"] = heads_run(args, data, cache, val, w_out, log_file)
    if args.distill:
        summary["distilled_draft"] = distill_run(args, data, cache, w_out, log_file)
    summary["measured"] = measure(args, data, target, val, log_file)
    summary["target_sha256"] = target_sha
    summary["hardware"] = model_card.cpu_name()
    summary["torch"] = torch.__version__
    summary["threads"] = args.threads
    minutes["training_run" if args.heads or args.distill else "measure_run"] = round((time.time() - t0) / 60, 1)
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    model_card.update_spec_section(args.models, summary)
    log(f"done in {(time.time() - t0) / 60:.1f} min; wrote {summary_path} and the model card's section", log_file)


if __name__ == "__main__":
    main()
