#!/usr/bin/env python3
"""What each byte saved costs: the quality table of docs/perplexity.md.

For the demo target (models/demo-target.gguf) and stories260K (../shared, converted from llama2.c),
over the demo model's Austen validation text (training/austen_text.py), it measures:
  - every weight type and mix `peregrine convert --type` offers, with an f32 KV cache;
  - every KV cache type `peregrine perplexity --kv-type` offers, with f32 weights;
and for each: the bytes a decode step reads per token (weights, and K/V at the benchmark's
context), decode tokens/s here (`peregrine bench`, 128 tokens from a one-token prompt), perplexity
(`peregrine perplexity`, llama-perplexity's windows), and mean KL divergence and same-top-token
share against the f32-weights, f32-KV run (--save-logits / --kl-divergence). The lists of types
are read from the binary's --help, so types added later appear without changing this script.
Then, for every KV type: the longest context 1 GiB of KV holds for an 8B-shaped GQA model
(Llama 3 8B: 32 layers, 32 query and 8 KV heads of 128; `peregrine kv-calc`), and decode
tokens/s at a long context, where attention's reads dominate a step: the tiny-llama shape
(`synth --context`) with q8_0 weights, 64 tokens after 8192 (`bench --depth 8192`), in
alternating rounds so each type meets the same minutes.

    python3 bench/quality_table.py [--peregrine build/peregrine] [--chunks 100] [--doc docs/perplexity.md]

Writes markdown into --doc's quality-table block, to --out, or to stdout; the raw figures as JSON
with --json.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


def run(args, check=True):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))}: {p.stderr.strip().splitlines()[-1:]}")
    return p


def help_choices(peregrine, command, flag):
    """The values listed in `peregrine COMMAND --help` for FLAG (the words in its help text that
    look like type names: the list in parentheses, or after a colon)."""
    lines = run([peregrine, command, "--help"]).stdout.splitlines()
    starts = [i for i, l in enumerate(lines) if re.match(rf"\s+(-\w, )?{re.escape(flag)} ", l)]
    if not starts:
        raise RuntimeError(f"`{command} --help` has no {flag}")
    body = []
    for line in lines[starts[0] + 1:]:  # the help text, up to the next option
        if re.match(r"\s+-", line):
            break
        body.append(line)
    body = re.sub(r"\(default: [^)]*\)", "", " ".join(body))
    body = body[body.find(":") + 1:] if "(" not in body else " ".join(re.findall(r"\(([^)]*)\)", body))
    return [w for w in re.findall(r"[a-z0-9_]+", body) if re.fullmatch(r"(f|bf|q|iq)[0-9a-z_]*", w)]


def stored_types(peregrine, model):
    line = [l for l in run([peregrine, "info", model]).stdout.splitlines() if l.startswith("tensor types:")]
    return line[0].split(":", 1)[1].strip() if line else "?"


def measure(peregrine, model, kv, text, chunks, base, threads):
    """One row: perplexity (+ KL divergence against `base`, or saving it), and the decode bench."""
    row = {"model_file": str(model), "kv_type": kv, "stored": stored_types(peregrine, model)}
    ppl = [peregrine, "perplexity", model, "-f", text, "--chunks", chunks, "--kv-type", kv, "-t", threads, "--json"]
    if base["save"]:
        ppl += ["--save-logits", base["path"]]
    else:
        ppl += ["--kl-divergence", base["path"]]
    p = run(ppl, check=False)
    if p.returncode != 0:
        row["error"] = (p.stderr.strip().splitlines() or ["failed"])[-1]
        return row
    row["ppl"] = json.loads(p.stdout)
    bench = run([peregrine, "bench", model, "-p", "0", "-n", "128", "-r", "5", "-b", "", "-t", threads,
                 "--kv-type", kv, "--json"])
    row["bench"] = json.loads(bench.stdout)
    return row


def fmt_row(name, r, base_stored=None):
    if "error" in r:
        return f"| {name} | {r['stored']} | n/a | n/a | n/a | n/a | n/a | {r['error']} |"
    # convert keeps a matrix whose rows do not fill the type's blocks in f32.
    note = "no matrix fits the type's blocks: all kept f32" if name != "f32" and r["stored"] == base_stored else ""
    p, b = r["ppl"], r["bench"]
    weights = b["bytes_read_per_token"] / 1024
    kv = b["tg"]["kv_bytes_read_per_token"] / 1024
    k = p.get("kl_divergence")
    kld = f"{k['mean_kld']:.2e} ± {k['mean_kld_error']:.1e}" if k else "(base)"
    same = f"{100 * k['same_top']:.2f}%" if k else "100%"
    return (f"| {name} | {r['stored']} | {weights:.1f} + {kv:.1f} | {b['tg']['tps_mean']:.0f} ± {b['tg']['tps_sd']:.0f} | "
            f"{p['perplexity']:.4f} ± {p['perplexity_error']:.4f} | {kld} | {same} | {note} |")


HEADER = ("| {what} | stored as | KiB read per token (weights + KV) | decode tokens/s | perplexity | "
          "mean KLD vs f32/f32 | same top token | note |\n|---|---|---|---|---|---|---|---|")


def model_tables(peregrine, name, f32_file, text, chunks, threads, work, weight_types, kv_types):
    base = {"path": str(work / f"{name}-base.logits"), "save": True}
    rows = {"base": measure(peregrine, f32_file, "f32", text, chunks, base, threads)}
    if "error" in rows["base"]:
        raise RuntimeError(f"{name}: base run failed: {rows['base']['error']}")
    base["save"] = False
    weights = {}
    for t in weight_types:
        if t == "f32":
            weights[t] = rows["base"]
            continue
        out = work / f"{name}-{t}.gguf"
        conv = run([peregrine, "convert", f32_file, "-o", out, "--type", t], check=False)
        if conv.returncode != 0:
            weights[t] = {"stored": "-", "kv_type": "f32", "error": conv.stderr.strip().splitlines()[-1]}
            continue
        weights[t] = measure(peregrine, out, "f32", text, chunks, base, threads)
        out.unlink()
        print(f"  {name} weights {t}", file=sys.stderr)
    kvs = {}
    for kv in kv_types:
        kvs[kv] = rows["base"] if kv == "f32" else measure(peregrine, f32_file, kv, text, chunks, base, threads)
        print(f"  {name} kv {kv}", file=sys.stderr)
    return {"weights": weights, "kv": kvs}


def kv_calc_context(peregrine, kv):
    """The longest context 1 GiB of K/V holds for one sequence of an 8B-shaped GQA model."""
    out = run([peregrine, "kv-calc", "--layers", 32, "--heads", 32, "--kv-heads", 8, "--head-dim", 128,
               "--context", 8192, "--kv-type", kv]).stdout
    line = next(l for l in out.splitlines() if l.startswith("per token"))
    value, unit = re.findall(r"([0-9.]+) (B|KiB|MiB)", line)[1]  # the GQA column
    per_token = float(value) * {"B": 1, "KiB": 1024, "MiB": 1024 ** 2}[unit]
    return per_token, int(1024 ** 3 // per_token)


def long_context(peregrine, work, kv_types, threads, depth, rounds):
    """Decode tokens/s at `depth` positions per KV type, alternating types round by round."""
    model = work / "tiny-llama-long.gguf"
    run([peregrine, "synth", "--preset", "tiny-llama", "--type", "q8_0", "--seed", 1, "--context", depth + 256,
         "-o", model])
    rows = {kv: {"runs": []} for kv in kv_types}
    for r in range(rounds):
        for kv in (kv_types if r % 2 == 0 else list(reversed(kv_types))):
            b = json.loads(run([peregrine, "bench", model, "-p", 0, "-n", 64, "-r", 1, "-b", "", "-t", threads,
                                "--depth", depth, "--kv-type", kv, "--json"]).stdout)
            rows[kv]["runs"].append(b["tg"]["tps_mean"])
            rows[kv]["weights"] = b["bytes_read_per_token"]
            rows[kv]["kv"] = b["tg"]["kv_bytes_read_per_token"]
        print(f"  long context round {r + 1}", file=sys.stderr)
    for kv in kv_types:
        runs = sorted(rows[kv]["runs"])
        rows[kv]["median"] = runs[len(runs) // 2]
        rows[kv]["per_token"], rows[kv]["gib_context"] = kv_calc_context(peregrine, kv)
    return rows


def render_long(rows, meta):
    base = rows["f16"]
    out = [f"#### Every KV type at a long context", "",
           f"Longest context in 1 GiB of KV: one sequence of an 8B-shaped GQA model (32 layers, 8 KV heads "
           f"of 128; `peregrine kv-calc`). Decode: the tiny-llama shape (4 layers, 2 KV heads of 32, q8_0 "
           f"weights) generating 64 tokens after {meta['depth']} (`bench --depth {meta['depth']}`), median of "
           f"{meta['rounds']} alternating rounds; attention's K/V is most of what a step reads there. "
           f"The last column is the speed-up over f16 next to the ratio of bytes a step reads.", "",
           "| KV cache | bytes per token (8B GQA) | context in 1 GiB | KiB read per token (weights + KV) | "
           "decode tokens/s | vs f16: speed | vs f16: bytes |", "|---|---|---|---|---|---|---|"]
    for kv, r in rows.items():
        read = r["weights"] + r["kv"]
        base_read = base["weights"] + base["kv"]
        out.append(f"| {kv} | {r['per_token']:.0f} | {r['gib_context']:,} | {r['weights'] / 1024:.1f} + "
                   f"{r['kv'] / 1024:.1f} | {r['median']:.0f} | {r['median'] / base['median']:.2f}x | "
                   f"{base_read / read:.2f}x |")
    return "\n".join(out)


def render(results, meta):
    out = [f"Measured {meta['date']} by `bench/quality_table.py --chunks {meta['chunks']}` on {meta['cpu']}, "
           f"{meta['threads']} threads, machine load average {meta['load_before']:.1f} before and "
           f"{meta['load_after']:.1f} after (other jobs shared the machine: tokens/s are indicative). "
           f"Text: the demo model's Austen validation split; windows as llama-perplexity lays them "
           f"({meta['chunks']} windows per model: 256 tokens for the demo target, 512 for stories260K). "
           f"Read per token: the weights a decode step reads plus K/V at the benchmark's mean context "
           f"(64.5 positions); decode: 128 tokens from a one-token prompt, mean ± sd of 5 runs.", ""]
    for name, tables in results.items():
        out += [f"#### {name}: weight types (f32 KV cache)", "", HEADER.format(what="weights")]
        base_stored = tables["weights"]["f32"]["stored"]
        out += [fmt_row(t, r, base_stored) for t, r in tables["weights"].items()]
        out += ["", f"#### {name}: KV cache types (f32 weights)", "", HEADER.format(what="KV cache")]
        out += [fmt_row(t, r) for t, r in tables["kv"].items()]
        out += [""]
    if "long" in meta:
        out += [render_long(meta.pop("long"), meta), ""]
    return "\n".join(out)


def replace_block(doc, md):
    begin, end = "<!-- quality-table:begin -->", "<!-- quality-table:end -->"
    text = doc.read_text()
    if begin not in text or end not in text:
        sys.exit(f"quality_table: {doc} has no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    doc.write_text(head + begin + "\n<!-- generated by bench/quality_table.py --doc; rerun it, do not edit -->\n" +
                   md + "\n" + end + rest.split(end, 1)[1])


def cpu_name():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "this machine"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peregrine", default=str(ROOT / "build/peregrine"))
    ap.add_argument("--chunks", type=int, default=100, help="perplexity windows per model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--text", help="the text (default: the Austen validation split, written by training/austen_text.py)")
    ap.add_argument("--out", help="markdown file (default: stdout)")
    ap.add_argument("--doc", help="a markdown page whose quality-table block to replace (docs/perplexity.md)")
    ap.add_argument("--json", help="raw figures as JSON")
    ap.add_argument("--depth", type=int, default=8192, help="positions before the long-context decode runs")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of the long-context decode runs")
    ap.add_argument("--long-only", action="store_true", help="only the long-context table, printed (no --doc)")
    args = ap.parse_args()
    peregrine = args.peregrine
    weight_types = help_choices(peregrine, "convert", "--type")
    kv_types = help_choices(peregrine, "perplexity", "--kv-type")
    if "f32" not in kv_types or "f32" not in weight_types:
        sys.exit("quality_table: f32 must be among the weight and KV types (the base)")
    kv_types = ["f32"] + [k for k in kv_types if k != "f32"]
    weight_types = ["f32"] + [t for t in weight_types if t != "f32"]
    meta = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "threads": args.threads, "chunks": args.chunks,
            "load_before": os.getloadavg()[0], "weight_types": weight_types, "kv_types": kv_types,
            "depth": args.depth, "rounds": args.rounds}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # A copy, so a rebuild during the run cannot swap the binary between rows.
        shutil.copy2(peregrine, work / "peregrine")
        peregrine = str(work / "peregrine")
        text = args.text
        if not text:
            text = str(work / "austen-validation.txt")
            run([sys.executable, ROOT / "training/austen_text.py", "-o", text])
        stories = work / "stories260K-f32.gguf"
        st = SHARED / "models/stories260K"
        run([peregrine, "convert", st / "stories260K.bin", "--tokenizer", st / "tok512.bin", "-o", stories,
             "--type", "f32"])
        if args.long_only:
            print(render_long(long_context(peregrine, work, kv_types, str(args.threads), args.depth, args.rounds),
                              meta))
            return
        results = {}
        for name, f32_file in [("demo-target", ROOT / "models/demo-target.gguf"), ("stories260K", stories)]:
            results[name] = model_tables(peregrine, name, str(f32_file), text, str(args.chunks), str(args.threads),
                                         work, weight_types, kv_types)
        meta["long"] = long_context(peregrine, work, kv_types, str(args.threads), args.depth, args.rounds)
    long_rows = meta["long"]
    meta["load_after"] = os.getloadavg()[0]
    md = render(results, meta)
    if args.out:
        Path(args.out).write_text(md + "\n")
    elif not args.doc:
        print(md)
    if args.doc:
        replace_block(Path(args.doc), md)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results, "long_context": long_rows}, indent=1))


if __name__ == "__main__":
    main()
