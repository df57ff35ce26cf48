#!/usr/bin/env python3
"""Today's figures for docs/performance.md: measure them, then render them as tables.

    bench/figures.py run    [--build build] [--out bench/results/figures.json] [--only NAME,...]
    bench/figures.py render [--in bench/results/figures.json] [--doc docs/performance.md]
    bench/figures.py check  [--in bench/results/figures.json] [--doc docs/performance.md]

`run` executes one fixed set of commands (below, QUESTIONS: dense, serving, speculation, moe,
layouts, links (root only: network namespaces)) with the binary in --build and writes every command, its JSON answer, the machine, the
date, the load and the commit to one file (questions not measured keep their records).
`render` turns that file into the tables between the markers
    <!-- figures:begin -->  ...  <!-- figures:end -->
at the top of docs/performance.md: one table per question (decode, prefill, batches, serving,
speculation, mixture of experts, layouts), each followed by where its figures come from (command,
machine, date, load) and what bounds them. `check` renders into memory and fails if the page's
block differs (tests/docs runs it), so the page never drifts from the file.

A record either comes from `run` (its `result` is what `peregrine bench`, `bench-serve` or
`run --json` printed) or was transcribed from a dated measurement in docs/performance-history.md:
then it says so in `source`, carries its own `machine`, and holds in `result` only the fields that
measurement reported (lists of repeated runs as `*_runs`). Nothing here times anything itself.

Memory bandwidth on shared VMs moves from minute to minute; `run` measures every question in one
sitting and records the load average before and after each command, and `render` marks a table
whose load exceeded the machine's cores "measured under load": such figures are not results.
Standard library only (Python 3.9+).
"""
import argparse
import datetime
import difflib
import json
import os
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
DEFAULT_JSON = os.path.join(ROOT, "bench", "results", "figures.json")
DEFAULT_DOC = os.path.join(ROOT, "docs", "performance.md")

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
    """What this run ran on: CPU model, the ISA flags that matter, cores."""
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

    def measure(self, question, label, cmd, shown, **fields):
        """Runs `cmd` (whose stdout is one JSON object) and keeps its answer under `question`;
        `shown` is the command as the page prints it (model files by name, not scratch paths);
        `fields` are kept beside it (model, workload)."""
        before = load_average()
        started = datetime.datetime.now(datetime.timezone.utc)
        result = json.loads(sh(cmd))
        self.records.append(dict(fields, question=question, label=label, command=shown,
                                 started=started.strftime("%Y-%m-%d %H:%M UTC"), load_before=before,
                                 load_after=load_average(), result=result))


def measure_dense(run):
    """decode, prefill and 1, 4, 16 sequences: one `bench` per weight type."""
    for t in TYPES:
        path = run.model("tinyllama-1.1b", t)
        run.measure("dense", t.upper(),
                    [run.exe, "bench", path, "-p", "512", "-n", "64", "-t", "2", "-r", "3", "-b", "1,4,16", "--json"],
                    shown=f"peregrine bench tinyllama-1.1b-{t}.gguf -p 512 -n 64 -t 2 -r 3 -b 1,4,16 --json",
                    model="synth tinyllama-1.1b")


STALL = "stall"
WORKLOADS = {
    STALL: "24 requests at 0.25/s, prompts 256–896 tokens, outputs 64–128, `--max-seqs 8`, "
           "synth stories110m Q8_0, 2 threads (issue 18's streaming-stall workload)",
}


def measure_serving(run):
    """The streaming-stall workload: fixed prefill chunks (the default) against a step budget."""
    path = run.model("stories110m", "q8_0")
    load = ["--requests", "24", "--rate", "0.25", "--input-len", "256:896", "--output-len", "64:128",
            "--max-seqs", "8", "-t", "2", "--seed", "1", "--json"]
    for label, extra in [("fixed chunks (default)", []), ("`--max-step-ms 150`", ["--max-step-ms", "150"])]:
        run.measure("serving", label, [run.exe, "bench-serve", path] + load + extra,
                    shown="peregrine bench-serve stories110m-q8_0.gguf " + " ".join(load + extra),
                    workload=STALL, workload_text=WORKLOADS[STALL])


def measure_speculation(run, rounds=2):
    """Batch 1, T = 0 on the demo pair: plain decoding against each proposer, same prompts,
    the ways alternating within each round so each ratio compares neighbouring minutes."""
    draft = os.path.join(ROOT, "models", "demo-draft.gguf")
    heads = os.path.join(ROOT, "models", "demo-heads.gguf")
    ways = [("plain", []), ("n-gram, adaptive K", ["--spec", "ngram"]),
            ("draft, adaptive K", ["--spec", "draft", "--draft-model", draft]),
            ("draft heads, adaptive K", ["--spec", "heads", "--heads", heads])]
    for rnd in range(rounds):
        for i, prompt in enumerate(SPEC_PROMPTS):
            for label, extra in ways:
                cmd = [run.exe, "run", "-p", prompt, "-n", "220", "-t", "2", "--temperature", "0", "--json"] + extra
                shown = " ".join(["peregrine run -p PROMPT -n 220 -t 2 --temperature 0 --json"] +
                                 [os.path.relpath(e, ROOT) if e.endswith(".gguf") else e for e in extra])
                run.measure("speculation", label, cmd, shown=shown, prompt=i, round=rnd, temperature=0,
                            model="demo target (models/demo-target.gguf, in the binary)")


def measure_moe(run):
    path = run.model("qwen1.5-moe-a2.7b", "q4_0")
    run.measure("moe", "peregrine",
                [run.exe, "bench", path, "-p", "128", "-n", "32", "-t", "2", "-r", "2", "-b", "1,4", "--json"],
                shown="peregrine bench qwen1.5-moe-a2.7b-q4_0.gguf -p 128 -n 32 -t 2 -r 2 -b 1,4 --json",
                model="synth qwen1.5-moe-a2.7b Q4_0")


def measure_layouts(run):
    """One model, one process against two processes split by tensor and by pipeline."""
    path = run.model("stories110m", "q8_0")
    mpirun = ["mpirun", "--oversubscribe", "-np", "2"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    options = ["-p", "128", "-n", "64", "-t", "1", "-r", "2", "-b", "", "--json"]
    shown = "peregrine bench stories110m-q8_0.gguf -p 128 -n 64 -t 1 -r 2 -b '' --json"
    for label, prefix, extra in [("1 process, 1 thread", [], []),
                                 ("`--tp 2` (2 processes × 1 thread)", mpirun, ["--tp", "2"]),
                                 ("`--pp 2` (2 processes × 1 thread)", mpirun, ["--pp", "2"])]:
        run.measure("layouts", label, prefix + [run.exe, "bench", path] + options + extra,
                    shown=("mpirun -np 2 " if prefix else "") + shown + "".join(" " + e for e in extra),
                    model="synth stories110m Q8_0")


# Link figures of issue 31: one-way latency (ms) and bandwidth (Gbit/s) of every host's link.
LINKS = [(0.05, 1), (0.05, 10), (0.05, 25), (0.5, 1), (0.5, 10), (0.5, 25), (2, 1), (2, 10), (2, 25)]


def measure_links(run):
    """TP=2 and PP=2 decode with one rank per "host" (network namespaces joined by links of the
    LINKS latency and bandwidth: scripts/netns-cluster.sh, root only), each beside `plan`'s
    prediction for the same model, layout and link; the device's bandwidth given to `plan` is the
    one that makes its one-process decode time the measured one."""
    if os.geteuid() != 0:
        raise SystemExit("links: needs root (network namespaces: scripts/netns-cluster.sh)")
    path = run.model("stories110m", "q8_0")
    options = ["-p", "16", "-n", "32", "-t", "1", "-r", "1", "-b", "", "--json"]
    shown = "peregrine bench stories110m-q8_0.gguf " + " ".join(options[:-3]) + " -b '' --json"
    model = "synth stories110m Q8_0"
    run.measure("links", "1 process", [run.exe, "bench", path] + options, shown=shown, model=model)
    one_ms = 1e3 / run.records[-1]["result"]["tg"]["tps_mean"]
    plan = [run.exe, "plan", path, "--memory", "64", "--tflops", "1", "--act-bytes", "4", "--all-reduce", "gather",
            "--json"]
    at_1gbs = json.loads(sh(plan + ["--bandwidth", "1"]))["layout"]["decode_memory_ms"]
    bandwidth = at_1gbs / one_ms  # GB/s: plan's one-process decode time equals the measured one
    script = os.path.join(ROOT, "scripts", "netns-cluster.sh")
    env = dict(os.environ, PEREGRINE_NETNS_SWITCH=os.path.join(os.path.dirname(run.exe), "tests", "dist",
                                                               "netns_switch"))
    for latency_ms, gbit in LINKS:
        name = f"fig{os.getpid() % 100000}"
        up = [script, "up", "2", "--name", name, "--delay", str(latency_ms), "--rate", str(gbit * 1000)]
        print("+ " + " ".join(up), file=sys.stderr, flush=True)
        cluster = subprocess.run(up, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout.strip()
        try:
            for flag in ("--tp", "--pp"):
                predicted = json.loads(sh(plan + ["--bandwidth", f"{bandwidth:.4f}", flag, "2",
                                                  "--link-latency", str(latency_ms * 1000),
                                                  "--link-bandwidth", str(gbit / 8)]))["layout"]
                run.measure("links", f"`{flag} 2`", [os.path.join(cluster, "mpirun"), "-np", "2", run.exe, "bench",
                                                     path] + options + [flag, "2"],
                            shown=f"netns-cluster.sh mpirun -np 2 {shown} {flag} 2", model=model,
                            link={"latency_ms": latency_ms, "gbit_per_s": gbit}, plan=predicted,
                            plan_command=f"peregrine plan stories110m-q8_0.gguf {flag} 2 --bandwidth "
                                         f"{bandwidth:.2f} --link-latency {latency_ms * 1000:g} "
                                         f"--link-bandwidth {gbit / 8:g} --act-bytes 4 --all-reduce gather")
        finally:
            subprocess.run([script, "down", name], check=False)


QUESTIONS = {"dense": measure_dense, "serving": measure_serving, "speculation": measure_speculation,
             "moe": measure_moe, "layouts": measure_layouts, "links": measure_links}


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
    here = machine()
    for r in run.records:
        r["machine"] = here
        r["commit"] = commit
    kept = [r for r in previous.get("records", []) if r["question"] not in only]
    doc = dict(previous, records=kept + run.records)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)


# --- Rendering -----------------------------------------------------------------------------------

def fmt(x, digits=1):
    """A figure as it was recorded: whole numbers whole, fractions below 1 to two places, the
    rest to `digits` places; '–' for a figure the record does not have."""
    if x is None:
        return "–"
    if isinstance(x, int):
        return str(x)
    return f"{x:.2f}" if abs(x) < 1 else f"{x:.{digits}f}"


def runs_or_mean(part, key="tps", digits=1):
    """'52.7, 53.8' when the record kept each run, else the mean."""
    if part is None:
        return "–"
    if part.get(key + "_runs"):
        return ", ".join(fmt(v, digits) for v in part[key + "_runs"])
    return fmt(part.get(key + "_mean"), digits)


def mean_of(part, key="tps"):
    if part is None:
        return None
    if part.get(key + "_mean") is not None:
        return part[key + "_mean"]
    runs = part.get(key + "_runs")
    return sum(runs) / len(runs) if runs else None


def share(part):
    """The part's share of its bound, as printed by bench or from its mean."""
    if part is None:
        return "–"
    if part.get("pct_of_bound") is not None:
        return fmt(part["pct_of_bound"], 0) + " %"
    m, b = mean_of(part), part.get("bound_tps")
    return fmt(100 * m / b, 0) + " %" if m and b else "–"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def machine_text(m):
    flags = f" ({', '.join(m['flags'])})" if m.get("flags") else ""
    return f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores{flags}"


def under_load(r):
    if r.get("under_load"):
        return True
    loads = [x for x in (r.get("load_before"), r.get("load_after")) if x is not None]
    cores = r.get("machine", {}).get("cores") or 1
    return bool(loads) and max(loads) > cores + 1


def provenance(records):
    """One line per sitting: when, where, at what load, from where; 'measured under load' where so."""
    groups = {}
    for r in records:
        key = (r.get("source") or f"`bench/figures.py run` at commit {r.get('commit', '?')}",
               machine_text(r.get("machine", {})))
        groups.setdefault(key, []).append(r)
    lines = []
    for (source, where), rs in groups.items():
        times = sorted(t for r in rs for t in (r.get("started"), r.get("ended")) if t)
        span = times[0] if times[0] == times[-1] else f"{times[0][:-4]} – {times[-1][11:]}"
        loads = [x for r in rs for x in (r.get("load_before"), r.get("load_after")) if x is not None]
        load = f", load average {min(loads):.1f}–{max(loads):.1f}" if loads else ""
        flag = " **Measured under load: not a result.**" if any(under_load(r) for r in rs) else ""
        lines.append(f"- {span} on {where}{load}; {source}.{flag}")
    return lines


def footer(records, bound):
    out = ["", "Where from:", ""] + provenance(records) + ["", "Commands:", ""]
    out += ["- `" + c + "`" for c in dict.fromkeys(r["command"] for r in records)]
    notes = list(dict.fromkeys(r["note"] for r in records if r.get("note")))
    out += ["", "Bound: " + bound + ("" if not notes else " " + " ".join(notes))]
    return out + [""]


def reference_cells(records, part):
    """The baseline columns (e.g. ik_llama.cpp in the same minutes), if any record has one."""
    names = list(dict.fromkeys(r["result"]["reference"]["name"] for r in records
                               if part in r["result"].get("reference", {})))
    return names, lambda r: [runs_or_mean(r["result"].get("reference", {}).get(part)) for _ in names]


def render_decode(records):
    rs = [r for r in records if "tg" in r["result"]]
    if not rs:
        return []
    names, ref = reference_cells(rs, "tg")
    rows = []
    for r in rs:
        j, tg = r["result"], r["result"]["tg"]
        m, per_token = mean_of(tg), j.get("bytes_read_per_token")
        rows.append([r["label"], runs_or_mean(tg), fmt(tg.get("bound_tps")), share(tg),
                     fmt(m * per_token / 1e9) if m and per_token else "–", fmt(j.get("bandwidth_gbps"))] + ref(r))
    return (["### Decode: one sequence, tokens/s", ""] +
            table(["type", "tok/s", "bound tok/s", "of bound", "weights GB/s", "probe GB/s"] +
                  [n + " tok/s" for n in names], rows) +
            footer(rs, "the read bandwidth the probe measured ÷ the bytes a token reads (weights + KV)."))


def render_prefill(records):
    rs = [r for r in records if "pp" in r["result"]]
    if not rs:
        return []
    names, ref = reference_cells(rs, "pp")
    rows = [[r["label"], runs_or_mean(r["result"]["pp"]), fmt(r["result"]["pp"].get("bound_tps")),
             share(r["result"]["pp"])] + ref(r) for r in rs]
    return (["### Prefill: a 512-token prompt, tokens/s", ""] +
            table(["type", "tok/s", "roof tok/s", "of roof"] + [n + " tok/s" for n in names], rows) +
            footer(rs, "the roof: the measured multiply-add peak (int8 for quantized types, f32 FMA "
                       "otherwise) ÷ the operations per token."))


def render_batches(records):
    rs = [r for r in records if r["result"].get("batched")]
    if not rs:
        return []
    sizes = sorted({b["batch"] for r in rs for b in r["result"]["batched"]})
    rows = []
    for r in rs:
        by_b = {b["batch"]: b for b in r["result"]["batched"]}
        rows.append([r["label"]] + [f"{runs_or_mean(by_b[b])} (bound {fmt(by_b[b].get('bound_tps'), 0)}, "
                                    f"{share(by_b[b])})" if b in by_b else "–" for b in sizes])
    return (["### Batches: sequences decoding together, total tokens/s", ""] +
            table(["type"] + [f"B={b}" for b in sizes], rows) +
            footer(rs, "min(B × the decode bound, the prefill roof): B sequences read the weights once "
                       "per step, and each row costs its arithmetic."))


def render_dense(records):
    return render_decode(records) + render_prefill(records) + render_batches(records)


def render_serving(records):
    rows = []
    for r in records:
        c = r["result"]["continuous"]
        ttft, itl = c.get("ttft_ms", {}), c.get("itl_ms", {})
        ratio = itl["p99"] / itl["p50"] if itl.get("p99") and itl.get("p50") else None
        rows.append([r.get("workload", "–"), r["label"], fmt(c.get("output_tps")), fmt(ttft.get("p50"), 0),
                     fmt(itl.get("p50")), fmt(itl.get("p99")), fmt(ratio, 1) + "×" if ratio else "–",
                     c["errors"] if c.get("errors") is not None else "–"])
    legend = dict.fromkeys(f"**{r['workload']}**: {r['workload_text']}" for r in records if r.get("workload"))
    return (["### Serving: many requests at once", ""] +
            table(["workload", "configuration", "output tok/s", "TTFT p50 ms", "ITL p50 ms", "ITL p99 ms",
                   "p99 ÷ p50", "failed"], rows) + ["", "Workloads: " + "; ".join(legend) + "."] +
            footer(records, "none that a table can state: these are latency workloads. The target "
                            "(issue 18) is an inter-token p99 within 5 × its p50 while prompts keep "
                            "arriving."))


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def speculation_rows(records):
    """Raw `run --json` records (one per prompt and round) become one row per proposer and
    temperature: medians, the speed ratio taken against plain on the same prompt and round.
    Transcribed records are rows already."""
    plain = {(r.get("temperature", 0), r.get("prompt"), r.get("round")): r["result"].get("decode_tokens_per_s")
             for r in records if r["label"] == "plain" and "prompt" in r}
    rows = {}
    for r in records:
        key = (r["label"], r.get("temperature", 0))
        res = r["result"]
        if "prompt" not in r:  # transcribed: a row already
            rows[key] = [res.get("decode_tokens_per_s"), res.get("ratio_vs_plain"), res.get("acceptance"),
                         res.get("tokens_per_target_pass")]
            continue
        row = rows.setdefault(key, [[], [], [], []])
        tps, base = res.get("decode_tokens_per_s"), plain.get((key[1], r.get("prompt"), r.get("round")))
        spec = res.get("spec", {})
        row[0].append(tps)
        row[1].append(tps / base if tps and base else None)
        row[2].append(spec.get("acceptance_rate"))
        row[3].append(spec.get("tokens_per_target_pass"))
    out = []
    for (label, temperature), cells in rows.items():
        cells = [median(c) if isinstance(c, list) else c for c in cells]
        out.append([label, str(temperature), fmt(cells[0], 0), fmt(cells[1], 2) + "×" if cells[1] else "–",
                    fmt(cells[2], 2), fmt(cells[3], 2)])
    return out


def render_speculation(records):
    return (["### Speculation: one sequence, plain decoding against each proposer", ""] +
            table(["proposer", "T", "decode tok/s", "× plain", "acceptance", "tokens per target pass"],
                  speculation_rows(records)) +
            ["", "Every speculative run produces plain decoding's tokens (the engine tests hold that)."] +
            footer(records, "tokens per target pass ÷ the pass's cost in one-row steps, less the "
                            "proposer's time."))


def render_moe(records):
    rows = []
    for r in records:
        j = r["result"]
        tg, by_b = j.get("tg"), {b["batch"]: b for b in j.get("batched", [])}
        rows.append([r["label"], r.get("model", "–"), runs_or_mean(j.get("pp")), runs_or_mean(tg),
                     fmt(tg.get("bound_tps")) if tg else "–", share(tg) if tg and tg.get("bound_tps") else "–"] +
                    [f"{runs_or_mean(by_b[b])} (bound {fmt(by_b[b].get('bound_tps'))})" if b in by_b else "–"
                     for b in (4, 16)])
    return (["### Mixture of experts", ""] +
            table(["engine", "model", "prefill tok/s", "decode tok/s", "decode bound", "of bound", "B=4",
                   "B=16"], rows) +
            footer(records, "the read bandwidth ÷ the bytes a step reads: the dense weights plus the "
                            "experts its tokens touch (E·(1 − (1 − k/E)^B) per layer expected)."))


def render_layouts(records):
    rows = [[r["label"], r.get("model", "–"), runs_or_mean(r["result"].get("pp")),
             runs_or_mean(r["result"].get("tg"))] for r in records]
    return (["### Layouts: one model over one or several processes on one host", ""] +
            table(["layout", "model", "prefill tok/s", "decode tok/s"], rows) +
            footer(records, "every layout shares the same host's cores and memory bandwidth, so one "
                            "process's decode bound holds for all of them; `peregrine plan` gives the "
                            "bounds of layouts over several accelerators."))


def render_links(records):
    one = [r for r in records if not r.get("link")]
    rows = []
    for r in sorted((r for r in records if r.get("link")),
                    key=lambda r: (r["label"], r["link"]["latency_ms"], r["link"]["gbit_per_s"])):
        tg, plan = r["result"]["tg"], r["plan"]
        comm = tg.get("comm", {})
        measured_ms = 1e3 / tg["tps_mean"]
        plan_ms = plan["decode_memory_ms"] + plan["decode_comm_ms"]
        rows.append([r["label"], f"{r['link']['latency_ms']:g} ms, {r['link']['gbit_per_s']:g} Gbit/s",
                     fmt(tg["tps_mean"]), fmt(measured_ms), fmt(plan_ms), fmt(measured_ms / plan_ms, 2),
                     fmt(comm.get("bytes_received_per_token", 0) / 1024), fmt(plan["comm_bytes_per_token"] / 1024)])
    base = (f"One process: {fmt(one[0]['result']['tg']['tps_mean'])} tokens/s "
            f"({fmt(1e3 / one[0]['result']['tg']['tps_mean'])} ms per token).") if one else ""
    return (["### Layouts across hosts: what the link costs, measured against `plan`", "",
             "Two \"hosts\" (network namespaces, `scripts/netns-cluster.sh`), one rank each over TCP; every host's "
             "link has the one-way latency (a user-space switch holds each frame) and the bandwidth (`tbf`) "
             "shown. " + base, ""] +
            table(["layout", "link", "decode tok/s", "ms/token", "plan ms/token", "measured ÷ plan",
                   "KiB/token to rank 0", "plan KiB/token"], rows) +
            footer(records, "`plan --all-reduce gather --act-bytes 4` with the device bandwidth that gives the "
                            "measured one-process decode; its communication is latency x messages per token "
                            "(TP: one exchange per all-reduce, 2 per layer, plus the step out and the logits "
                            "back; PP: the hidden state on and the logits back) plus bytes / bandwidth. The "
                            "switch adds its own wait to each frame, and on a machine under load every message "
                            "also waits for the peer's process to be scheduled, which no link figure models. "
                            "Bandwidths beyond what this VM moves through a veth pair and the switch (about "
                            "3 Gbit/s) are not reached."))


RENDERERS = {"dense": render_dense, "serving": render_serving, "speculation": render_speculation,
             "moe": render_moe, "layouts": render_layouts, "links": render_links}


def render(doc):
    """The block between the markers (markers included), from the figures file's contents."""
    out = [BEGIN, "<!-- generated by bench/figures.py render from bench/results/figures.json; "
           "edit those, not this block -->", ""]
    for name, render_question in RENDERERS.items():
        records = [r for r in doc["records"] if r["question"] == name]
        if records:
            out += render_question(records)
    out.append(END)
    return "\n".join(out)


def split_doc(path):
    with open(path) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} block to fill")
    head, rest = text.split(BEGIN, 1)
    block, tail = rest.split(END, 1)
    return head, BEGIN + block + END, tail


def load(path):
    with open(path) as f:
        return json.load(f)


def cmd_render(args):
    doc = load(args.input)
    head, _, tail = split_doc(args.doc)
    with open(args.doc, "w") as f:
        f.write(head + render(doc) + tail)
    print(f"rendered {len(doc['records'])} records into {args.doc}", file=sys.stderr)


def cmd_check(args):
    head, block, tail = split_doc(args.doc)
    want = render(load(args.input))
    if block == want:
        print(f"{args.doc}: the figures block matches {args.input}")
        return
    sys.stdout.writelines(difflib.unified_diff(block.splitlines(True), want.splitlines(True), args.doc, "rendered"))
    raise SystemExit(f"{args.doc}: the figures block differs from {args.input}; run bench/figures.py render")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run")
    r.add_argument("--build", default=os.path.join(ROOT, "build"))
    r.add_argument("--out", default=DEFAULT_JSON)
    r.add_argument("--only", help="comma-separated subset of " + ",".join(QUESTIONS))
    for verb in ("render", "check"):
        d = sub.add_parser(verb)
        d.add_argument("--in", dest="input", default=DEFAULT_JSON)
        d.add_argument("--doc", default=DEFAULT_DOC)
    args = p.parse_args()
    {"run": cmd_run, "render": cmd_render, "check": cmd_check}[args.verb](args)


if __name__ == "__main__":
    main()
