#!/usr/bin/env python3
"""Checks that the documentation points at things that exist.

    check_doc_links.py REPO_ROOT

1. Every relative Markdown link `[text](path)` in README.md and docs/**/*.md names a file or
   folder that exists (anchors after '#' are not checked: topic pages are linked whole).
2. Every source path the map and the topic pages name in backticks (docs/architecture.md,
   docs/design/*.md) exists: `src/engine/engine_core.cpp`, `engine/engine_core.*` (a folder of
   src/), `tests/kernels/kernel_test_util.h`. A `*` matches any ending. Bare file names without a
   folder are not checked (they are named beside their folder in the same sentence).

Prints every broken reference (file, line, target) and exits 1 if there is any. Standard library only.
"""
import glob
import os
import re
import sys

TOP_FOLDERS = {"src", "tests", "bench", "docs", "cmake", "training", "models", "fuzz", "scripts"}
EXTENSIONS = (".cpp", ".h", ".*", ".md", ".py", ".cmake", ".txt", ".mjs", ".js", ".sh")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`]+)`")
PATH = re.compile(r"[A-Za-z0-9_.*/-]+")


def exists(path):
    return bool(glob.glob(path)) if "*" in path else os.path.exists(path)


def check_links(root, doc, lines, errors):
    for n, line in enumerate(lines, 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a URL or an anchor on the same page
            path = os.path.normpath(os.path.join(os.path.dirname(doc), target.split("#")[0]))
            if not exists(path):
                errors.append(f"{os.path.relpath(doc, root)}:{n}: link to {target}: no such file")


def check_source_paths(root, doc, lines, errors):
    src_folders = {d for d in os.listdir(os.path.join(root, "src")) if os.path.isdir(os.path.join(root, "src", d))}
    for n, line in enumerate(lines, 1):
        for code in CODE.findall(line):
            for token in PATH.findall(code):
                if "/" not in token or not token.endswith(EXTENSIONS):
                    continue
                first = token.split("/")[0]
                if first in TOP_FOLDERS:
                    candidate = os.path.join(root, token)
                elif first in src_folders:
                    candidate = os.path.join(root, "src", token)
                else:
                    continue
                if not exists(candidate):
                    errors.append(f"{os.path.relpath(doc, root)}:{n}: `{token}`: no such file")


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    root = os.path.abspath(sys.argv[1])
    in_docs = sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    docs = [os.path.join(root, "README.md")] + in_docs
    design = sorted(glob.glob(os.path.join(root, "docs", "design", "*.md")))
    maps = [os.path.join(root, "docs", "architecture.md")] + design
    errors = []
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            lines = f.read().splitlines()
        check_links(root, doc, lines, errors)
        if doc in maps:
            check_source_paths(root, doc, lines, errors)
    for e in errors:
        print(e)
    print(f"checked {len(docs)} documents: {len(errors)} broken reference(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
