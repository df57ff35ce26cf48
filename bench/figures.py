#!/usr/bin/env python3
"""Today's figures for docs/performance.md: measure them, then render them as tables.

    bench/figures.py run    [--build build] [--out bench/results/figures.json] [--only NAME,...]
    bench/figures.py render [--in bench/results/figures.json] [--doc docs/performance.md]

`run` executes one fixed set of commands (below, QUESTIONS) with the binary in --build and
writes every command, its JSON answer, the machine, the date and the commit to one file.
`render` turns that file into the tables between the markers
    <!-- figures:begin -->  ...  <!-- figures:end -->
at the top of docs/performance.md, so the page opens with today's figures and every figure
carries the command that produced it. Nothing here times anything itself: each figure is what
`peregrine bench`, `bench-serve` or `run --json` reported (median or mean over their own
repetitions), next to the bound the same run measured.

Memory bandwidth on shared VMs moves from minute to minute; `run` measures every question in one
sitting and records the load average before and after, so a reader can tell a quiet run from a
disturbed one. Standard library only (Python 3.9+).
"""
import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"

# Dense weight types measured on the TinyLlama-1.1B shape (random weights of the real shape).
TYPES = ["q4_0", "q8_0", "q4_k", "bf16", "f16"]
# Prompts of the speculation table: Austen-like openings whose greedy text the demo model knows.
SPEC_PROMPTS = [
    "It is a truth universally acknowledged",
    "Elizabeth walked into the drawing room",
    "My dear Mr. Bennet",
]


def sh(cmd, cwd=ROOT):
    """Runs one command (a list), returns its stdout; stops the whole run on failure."""
    print("+ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout


def machine():
    """What this run ran on: CPU model, the ISA flags that matter, cores, load."""
    info = {"cpu": "?", "flags": [], "cores": os.cpu_count()}
    try:
        for line in sh(["lscpu"]).splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                info["cpu"] = value.strip()
            if key.strip() == "Flags":
                wanted = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile"]
                info["flags"] = [f for f in wanted if f in value.split()]
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def load_average():
    return round(os.getloadavg()[0], 2)


class Run:
    """One sitting: the binary, a scratch folder for synthesized models, and the records."""

    def __init__(self, build):
        self.exe = os.path.join(build, "peregrine")
        self.tmp = tempfile.mkdtemp(prefix="peregrine-figures-")
        self.records = []

    def model(self, preset, type_):
        path = os.path.join(self.tmp, f"{preset}-{type_}.gguf")
        if not os.path.exists(path):
            sh([self.exe, "synth", "--preset", preset, "--type", type_, "--seed", "1", "-o", path])
        return path

    def measure(self, question, label, cmd, shown):
        """Runs `cmd` (whose stdout is one JSON object) and keeps its answer under `question`;
        `shown` is the command as the page prints it (model files by name, not scratch paths)."""
        before = load_average()
        started = datetime.datetime.now(datetime.timezone.utc)
        result = json.loads(sh(cmd))
        self.records.append({
            "question": question,
            "label": label,
            "command": shown,
            "started": started.strftime("%Y-%m-%d %H:%M UTC"),
            "load_before": before,
            "load_after": load_average(),
            "result": result,
        })


def measure_dense(run):
    """decode, prefill and 16 sequences: one `bench` per weight type."""
    for t in TYPES:
        path = run.model("tinyllama-1.1b", t)
        run.measure("dense", t.upper(),
                    [run.exe, "bench", path, "-p", "512", "-n", "64", "-t", "2", "-r", "3", "-b", "1,4,16", "--json"],
                    shown=f"peregrine bench tinyllama-1.1b-{t}.gguf -p 512 -n 64 -t 2 -r 3 -b 1,4,16 --json")


def measure_serving(run):
    """The streaming-stall workload of issue 29: default scheduling against fixed chunks."""
    path = run.model("stories110m", "q8_0")
    load = ["--requests", "24", "--rate", "0.25", "--input-len", "256:896", "--output-len", "64:128",
            "--max-seqs", "8", "--seed", "1", "--json"]
    for label, extra in [("default", []), ("fixed chunks (--max-step-ms 0)", ["--max-step-ms", "0"])]:
        run.measure("serving", label, [run.exe, "bench-serve", path] + load + extra,
                    shown="peregrine bench-serve stories110m-q8_0.gguf " + " ".join(load + extra))


def measure_speculation(run, rounds=2):
    """Batch 1, T = 0 on the demo pair: plain decoding against each proposer, same prompts,
    the ways alternating within each round so each ratio compares neighbouring minutes."""
    draft = os.path.join(ROOT, "models", "demo-draft.gguf")
    heads = os.path.join(ROOT, "models", "demo-heads.gguf")
    ways = [("plain", []), ("ngram", ["--spec", "ngram"]), ("draft", ["--spec", "draft", "--draft-model", draft]),
            ("heads", ["--spec", "heads", "--heads", heads])]
    for rnd in range(rounds):
        for i, prompt in enumerate(SPEC_PROMPTS):
            for label, extra in ways:
                cmd = [run.exe, "run", "-p", prompt, "-n", "220", "-t", "2", "--temperature", "0", "--json"] + extra
                shown = " ".join(["peregrine run -p PROMPT -n 220 -t 2 --temperature 0 --json"] +
                                 [os.path.relpath(e, ROOT) if e.endswith(".gguf") else e for e in extra])
                run.measure("speculation", f"{label}|{rnd}.{i}", cmd, shown=shown)


def measure_moe(run):
    path = run.model("qwen1.5-moe-a2.7b", "q4_0")
    run.measure("moe", "Qwen1.5-MoE-A2.7B shape, Q4_0",
                [run.exe, "bench", path, "-p", "128", "-n", "32", "-t", "2", "-r", "2", "-b", "1,4", "--json"],
                shown="peregrine bench qwen1.5-moe-a2.7b-q4_0.gguf -p 128 -n 32 -t 2 -r 2 -b 1,4 --json")


def measure_layouts(run):
    """One model, one process against two processes split by tensor and by pipeline."""
    path = run.model("stories110m", "q8_0")
    mpirun = ["mpirun", "--oversubscribe", "-np", "2"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    options = ["-p", "128", "-n", "64", "-t", "1", "-r", "2", "-b", "", "--json"]
    shown = "peregrine bench stories110m-q8_0.gguf -p 128 -n 64 -t 1 -r 2 -b '' --json"
    for label, prefix, extra in [("1 process, 1 thread", [], []),
                                 ("TP=2 (2 processes x 1 thread)", mpirun, ["--tp", "2"]),
                                 ("PP=2 (2 processes x 1 thread)", mpirun, ["--pp", "2"])]:
        run.measure("layouts", label, prefix + [run.exe, "bench", path] + options + extra,
                    shown=("mpirun -np 2 " if prefix else "") + shown + "".join(" " + e for e in extra))


QUESTIONS = {"dense": measure_dense, "serving": measure_serving, "speculation": measure_speculation,
             "moe": measure_moe, "layouts": measure_layouts}


def cmd_run(args):
    run = Run(os.path.abspath(args.build))
    only = args.only.split(",") if args.only else list(QUESTIONS)
    previous = {}
    if os.path.exists(args.out):  # keep the questions this run does not measure
        with open(args.out) as f:
            previous = json.load(f)
    for name in only:
        QUESTIONS[name](run)
    commit = sh(["git", "rev-parse", "--short", "HEAD"]).strip()
    kept = [r for r in previous.get("records", []) if r["question"] not in only]
    doc = {"machine": machine(), "commit": commit, "records": kept + run.records}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    print(f"wrote {args.out}", file=sys.stderr)


# --- Rendering -----------------------------------------------------------------------------------

def fmt(x, digits=1):
    return "–" if x is None else f"{x:.{digits}f}"


def sitting(records):
    """'2026-12-02 06:10–06:24 UTC, load 1.2–1.9' for a group of records."""
    times = sorted(r["started"] for r in records)
    loads = [r["load_before"] for r in records] + [r["load_after"] for r in records]
    span = times[0] if times[0] == times[-1] else f"{times[0]} – {times[-1][11:]}"
    return f"{span}, load average {min(loads):.1f}–{max(loads):.1f}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_dense(records):
    decode, prefill, batches = [], [], []
    for r in records:
        j = r["result"]
        tg, pp = j["tg"], j["pp"]
        gbps = tg["tps_mean"] * j["bytes_read_per_token"] / 1e9
        decode.append([r["label"], fmt(tg["tps_mean"]), fmt(tg["bound_tps"]), fmt(tg["pct_of_bound"], 0) + " %",
                       fmt(gbps), fmt(j["bandwidth_gbps"])])
        prefill.append([r["label"], fmt(pp["tps_mean"]), fmt(pp["bound_tps"]), fmt(pp["pct_of_bound"], 0) + " %"])
        by_b = {b["batch"]: b for b in j.get("batched", [])}
        batches.append([r["label"]] + [f"{fmt(by_b[b]['tps_mean'])} / {fmt(by_b[b]['bound_tps'])}" if b in by_b else "–"
                                       for b in (1, 4, 16)])
    out = ["### Decode, one sequence (TinyLlama-1.1B shape)", "",
           table(["type", "tok/s", "bound tok/s", "of bound", "weights GB/s", "probe GB/s"], decode), "",
           "The bound is the read bandwidth the same run measured (best probe pass) ÷ the bytes a token "
           "reads (weights + KV).", "",
           "### Prefill, 512 tokens", "",
           table(["type", "tok/s", "roof tok/s", "of roof"], prefill), "",
           "The roof is the measured multiply-add peak (int8 for quantized types, f32 otherwise) ÷ the "
           "operations per token.", "",
           "### Batches: sequences decoding together (total tok/s / bound)", "",
           table(["type", "B=1", "B=4", "B=16"], batches)]
    return out


def render_serving(records):
    rows = []
    for r in records:
        c = r["result"]["continuous"]
        rows.append([r["label"], fmt(c["output_tps"]), fmt(c["ttft_ms"]["p50"], 0), fmt(c["itl_ms"]["p50"], 0),
                     fmt(c["itl_ms"]["p99"], 0),
                     fmt(c["itl_ms"]["p99"] / c["itl_ms"]["p50"], 1) + "×" if c["itl_ms"]["p50"] else "–",
                     c["completed"], c["errors"]])
    return ["### Serving: 24 requests at 0.25/s, prompts 256–896, outputs 64–128 (stories110m Q8_0)", "",
            table(["scheduling", "output tok/s", "TTFT p50 ms", "ITL p50 ms", "ITL p99 ms", "p99/p50", "done",
                   "errors"], rows)]


def render_speculation(records):
    speeds = {}
    for r in records:
        way, prompt = r["label"].split("|")
        speeds.setdefault(way, []).append((prompt, r["result"].get("decode_tokens_per_s")))
    plain = dict(speeds.get("plain", []))
    rows = []
    for way, runs in speeds.items():
        ratios = sorted(s / plain[p] for p, s in runs if plain.get(p) and s)
        tps = sorted(s for _, s in runs if s)
        rows.append([way, fmt(tps[len(tps) // 2], 0), fmt(ratios[len(ratios) // 2], 2) + "×" if ratios else "–"])
    return ["### Speculation, batch 1, T = 0 (demo target; median over prompts and rounds)", "",
            table(["proposer", "decode tok/s", "vs plain"], rows), "",
            "PROMPT: " + "; ".join(f"'{p}'" for p in SPEC_PROMPTS) + ". Every speculative run produces plain "
            "decoding's tokens (the engine tests hold that)."]


def render_moe(records):
    rows = []
    for r in records:
        j = r["result"]
        rows.append([r["label"], fmt(j["pp"]["tps_mean"]), fmt(j["tg"]["tps_mean"]), fmt(j["tg"]["bound_tps"]),
                     fmt(j["tg"]["pct_of_bound"], 0) + " %"])
    return ["### Mixture of experts", "", table(["model", "pp128 tok/s", "tg tok/s", "tg bound", "of bound"], rows)]


def render_layouts(records):
    rows = [[r["label"], fmt(r["result"]["pp"]["tps_mean"]), fmt(r["result"]["tg"]["tps_mean"])] for r in records]
    return ["### Layouts across processes (stories110m Q8_0, one host)", "",
            table(["layout", "pp128 tok/s", "tg64 tok/s"], rows)]


RENDERERS = {"dense": render_dense, "serving": render_serving, "speculation": render_speculation,
             "moe": render_moe, "layouts": render_layouts}


def cmd_render(args):
    with open(args.input) as f:
        doc = json.load(f)
    m = doc["machine"]
    out = [BEGIN, "<!-- generated by bench/figures.py render from bench/results/figures.json; "
           "edit the script, not this block -->", "",
           f"Machine: {m['cpu']}, {m['cores']} cores ({', '.join(m['flags'])}); commit {doc['commit']}. "
           "Regenerate: `bench/figures.py run && bench/figures.py render`.", ""]
    for name, render in RENDERERS.items():
        records = [r for r in doc["records"] if r["question"] == name]
        if not records:
            continue
        out += render(records)
        out += ["", f"Measured {sitting(records)}. Commands:", ""]
        out += ["- `" + c + "`" for c in dict.fromkeys(r["command"] for r in records)]
        out.append("")
    out.append(END)
    with open(args.doc) as f:
        text = f.read()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + "\n".join(out) + rest.split(END, 1)[1]
    else:
        raise SystemExit(f"{args.doc} has no {BEGIN} ... {END} block to fill")
    with open(args.doc, "w") as f:
        f.write(text)
    print(f"rendered {len(doc['records'])} records into {args.doc}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run")
    r.add_argument("--build", default=os.path.join(ROOT, "build"))
    r.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "figures.json"))
    r.add_argument("--only", help="comma-separated subset of " + ",".join(QUESTIONS))
    d = sub.add_parser("render")
    d.add_argument("--in", dest="input", default=os.path.join(ROOT, "bench", "results", "figures.json"))
    d.add_argument("--doc", default=os.path.join(ROOT, "docs", "performance.md"))
    args = p.parse_args()
    {"run": cmd_run, "render": cmd_render}[args.verb](args)


if __name__ == "__main__":
    main()
