#!/usr/bin/env python3
"""A concurrent stream's inter-token latency while hostile clients attack the server (issue 27).

Starts `peregrine serve -t 1` on the demo model, then for each phase streams completions back to
back (one at a time, 240 tokens each, ignore_eos) for --seconds and records, as the client sees
them, the gaps between deliveries of tokens (tokens the server writes together arrive as one
delivery) and the stream's tokens per second:

  quiet          no attack
  grammar-bomb   item 3: clients sending a grammar whose start state needs ~268 M expansion steps
                 (4 096 alternatives x 32 000 empty rules), n=16, again and again
  empty-messages item 4: clients sending 250 000 empty chat messages (7 MB) to
                 /v1/chat/completions and /tokenize, again and again
  held-bodies    item 5: 64 connections each sending all but the last byte of an 8 MiB body,
                 then holding it

Prints the gaps' p50 / p99 / max and tokens per second per phase, the attack requests answered (by status) and the server's
resident memory. Standard library only. Timings on a loaded machine say little: run it on a
quiet one.

  python3 bench/hostile_itl.py [--binary build/peregrine] [--seconds 5] [--attackers 4]
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter


def request_bytes(path, body, host="127.0.0.1"):
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def read_status(sock, limit_s):
    """Reads until the response head is in (and the body of a non-streamed answer); returns the
    status code, or 0 if none came within limit_s."""
    sock.settimeout(limit_s)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
        if not m:
            return 0
        head, _, rest = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        need = int(length.group(1)) if length else 0
        while len(rest) < need:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        return int(m.group(1))
    except (socket.timeout, OSError):
        return 0


class Server:
    def __init__(self, binary):
        self.proc = subprocess.Popen([binary, "serve", "-t", "1", "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r":(\d+)\s*$", line)
        if not m:
            raise SystemExit(f"serve did not start: {line!r}")
        self.port = int(m.group(1))

    def rss_mib(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return -1

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def stream_gaps(port, max_tokens=240):
    """One streamed completion: the gaps (ms) between deliveries of its tokens, the tokens, the
    seconds from the first delivery to the last, and the time to the first (ms)."""
    body = json.dumps({"model": "demo-target", "prompt": "Once upon a time", "max_tokens": max_tokens,
                       "ignore_eos": True, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(60)
    sent = time.perf_counter()
    sock.sendall(request_bytes("/v1/completions", body))
    gaps, last, pending, done, tokens, first = [], None, b"", False, 0, None
    try:
        while not done:
            chunk = sock.recv(65536)
            if not chunk:
                break
            now = time.perf_counter()
            pending += chunk
            *events, pending = pending.split(b"\n\n")  # whole events; the rest waits (chunk framing inside)
            done = any(b"data: [DONE]" in e for e in events)
            got = sum(b'"finish_reason":null' in e for e in events)  # token events
            if got == 0:
                continue
            # Tokens that arrive together (the server writes what is ready in one chunk) are one
            # delivery: the gap is between deliveries, and tokens per second say the pace.
            tokens += got
            if last is not None:
                gaps.append((now - last) * 1000)
            else:
                first = now
            last = now
    finally:
        sock.close()
    if last is None:
        return gaps, 0, 0.0, float("nan")
    return gaps, tokens, last - first, (first - sent) * 1000


def grammar_bomb(port, stop, statuses):
    grammar = "root ::= " + " | ".join(["a"] * 4096) + '\na ::= b{32000} "x"\nb ::= ""\n'
    body = json.dumps({"model": "demo-target", "prompt": "x", "max_tokens": 4, "n": 16, "grammar": grammar}).encode()
    while not stop.is_set():
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(request_bytes("/v1/completions", body))
            statuses[read_status(s, 120)] += 1


def empty_messages(port, stop, statuses, which=[0]):
    messages = "[" + ",".join(['{"role":"user","content":""}'] * 250000) + "]"
    bodies = [("/v1/chat/completions", ('{"model":"demo-target","messages":' + messages + "}").encode()),
              ("/tokenize", ('{"messages":' + messages + "}").encode())]
    i = which[0]
    which[0] += 1
    while not stop.is_set():
        path, body = bodies[i % 2]
        i += 1
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(request_bytes(path, body))
            statuses[read_status(s, 120)] += 1


def held_bodies(port, stop, statuses, connections=64, size=8 << 20):
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    body = b'{"model":"demo-target","prompt":"' + b"a" * (size - 40)
    held = []
    for _ in range(connections):
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(0.2)
        try:
            s.sendall(head)
            sent = 0
            while sent < size - 1 and not stop.is_set():
                try:
                    sent += s.send(body[sent:size - 1])
                except socket.timeout:
                    break  # the server stopped taking it (a body budget): hold what went
        except OSError:
            statuses["refused"] += 1
        held.append(s)
    statuses["held"] += len(held)
    stop.wait()
    for s in held:
        status = read_status(s, 0.05)
        statuses[status if status else "no answer"] += 1
        s.close()


def run_phase(server, name, attack, attackers, seconds):
    stop = threading.Event()
    statuses = Counter()
    threads = [threading.Thread(target=attack, args=(server.port, stop, statuses), daemon=True)
               for _ in range(attackers if attack else 0)]
    for t in threads:
        t.start()
    if attack:
        time.sleep(1.0)  # the attack is under way before the stream starts
    gaps, streams, tokens, streaming_s, ttfts, rss_peak = [], 0, 0, 0.0, [], server.rss_mib()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        g, t, s, ttft = stream_gaps(server.port)
        gaps += g
        ttfts.append(ttft)
        tokens += t
        streaming_s += s
        streams += 1
        rss_peak = max(rss_peak, server.rss_mib())
    stop.set()
    for t in threads:
        t.join(timeout=130)
    gaps.sort()

    def pct(p):
        return gaps[min(len(gaps) - 1, int(p / 100 * len(gaps)))] if gaps else float("nan")

    answered = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items(), key=str)) or "-"
    rate = tokens / streaming_s if streaming_s > 0 else float("nan")
    print(f"{name:15s} gap p50 {pct(50):7.2f} ms  p99 {pct(99):8.2f} ms  max {gaps[-1] if gaps else 0:8.1f} ms  "
          f"{rate:6.0f} tok/s  TTFT max {max(ttfts):7.1f} ms ({streams} streams)  RSS peak {rss_peak:5.0f} MiB  attack answers: {answered}")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "build", "peregrine"))
    ap.add_argument("--seconds", type=float, default=5.0, help="streaming time per phase")
    ap.add_argument("--attackers", type=int, default=4, help="concurrent attacking clients (items 3 and 4)")
    args = ap.parse_args()
    server = Server(args.binary)
    try:
        print(f"peregrine serve -t 1 on the demo model, port {server.port}; {args.seconds:g} s of streaming per phase")
        run_phase(server, "quiet", None, 0, args.seconds)
        run_phase(server, "grammar-bomb", grammar_bomb, args.attackers, args.seconds)
        run_phase(server, "empty-messages", empty_messages, args.attackers, args.seconds)
        run_phase(server, "held-bodies", held_bodies, 1, args.seconds)
        run_phase(server, "quiet again", None, 0, args.seconds)
        if not server.alive():
            print("the server died")
            return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
