#!/usr/bin/env python3
"""Writes the demo models' validation text (or training text) without R.

corpus.py builds the corpus by asking Rscript for the six novels of Debian's r-cran-janeaustenr.
R itself is hundreds of packages; the novels are six character vectors in the package's lazy-load
database (data/Rdata.rdx, data/Rdata.rdb), which this script reads directly: the .deb is fetched
with `apt-get download` (no installation, no root needed) and unpacked with `dpkg-deb -x`, or
taken from an installed package. The paragraphs and the split are corpus.py's own functions, so
the text is byte for byte the `validation.txt` the training wrote (500 paragraphs, 249492
characters of prose; checked below).

    python3 training/austen_text.py -o /tmp/austen-validation.txt [--split validation|train]

R's lazy-load format (R Internals, "Serialization formats" and "Lazy loading"): the .rdx is a
gzip-compressed serialized list whose `variables` element maps each object name to an integer
pair (offset, length) into the .rdb; each .rdb record is a 4-byte big-endian uncompressed length
followed by zlib data, itself a serialized object. Serialization ("X\\n", XDR big-endian): three
ints (format version, writer's R version, minimal reader version), for version 3 the native
encoding (int length + bytes), then the object: an int of flags (type in the low byte), for a
character vector (type 16, STRSXP) its length and each element as a CHARSXP (type 9): flags,
byte length (-1 for NA), bytes.
"""
import argparse
import gzip
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import NOVELS, VALIDATION_FRACTION, paragraphs_of  # noqa: E402

PACKAGE = "r-cran-janeaustenr"
INSTALLED = Path("/usr/lib/R/site-library/janeaustenr")
STRSXP, CHARSXP = 16, 9


class Reader:
    """Big-endian reads over one serialized object."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def int(self) -> int:
        (v,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return v

    def bytes(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + n]
        if len(out) != n:
            raise ValueError("serialized object ends early")
        self.pos += n
        return out

    def header(self):
        if self.bytes(2) != b"X\n":
            raise ValueError("not an XDR serialization")
        version = self.int()
        self.int(), self.int()  # writer's R version, minimal reader version
        if version == 3:
            self.bytes(self.int())  # native encoding


def character_vector(data: bytes) -> list:
    """The elements of a serialized character vector (NA as None)."""
    r = Reader(data)
    r.header()
    if r.int() & 0xFF != STRSXP:
        raise ValueError("object is not a character vector")
    out = []
    for _ in range(r.int()):
        if r.int() & 0xFF != CHARSXP:
            raise ValueError("character vector element is not a string")
        n = r.int()
        out.append(None if n == -1 else r.bytes(n).decode("utf-8"))
    return out


def object_offsets(rdx: bytes) -> dict:
    """{name: (offset, length)} from the index. Rather than walk R's general list format, it
    finds the `names` attribute's strings and the integer pairs that precede them, in order: the
    index of a data-only package is variables = list(name = c(offset, length), ...)."""
    data = gzip.decompress(rdx)
    pairs, names = [], []
    r = Reader(data)
    r.header()
    # Integer vectors of length 2 (type 13) in order, until the first attribute pairlist.
    marker = struct.pack(">ii", 13, 2)
    pos = data.find(marker)
    while pos >= 0 and len(pairs) < len(NOVELS):
        offset, length = struct.unpack_from(">ii", data, pos + 8)
        pairs.append((offset, length))
        pos = data.find(marker, pos + 16)
    names_at = data.find(b"\x00\x00\x00\x05names")
    r.pos = names_at + 9
    if r.int() & 0xFF != STRSXP:
        raise ValueError("index has no names")
    for _ in range(r.int()):
        r.int()
        names.append(r.bytes(r.int()).decode("utf-8"))
    if len(names) != len(pairs):
        raise ValueError(f"index names {len(names)} objects but {len(pairs)} offsets")
    return dict(zip(names, pairs))


def read_novels(data_dir: Path) -> dict:
    """{novel: its printed lines joined with newlines}, as corpus.dump_novels writes them."""
    offsets = object_offsets((data_dir / "Rdata.rdx").read_bytes())
    rdb = (data_dir / "Rdata.rdb").read_bytes()
    novels = {}
    for name in NOVELS:
        offset, length = offsets[name]
        record = rdb[offset:offset + length]
        (size,) = struct.unpack_from(">I", record, 0)
        data = zlib.decompress(record[4:])
        if len(data) != size:
            raise ValueError(f"{name}: record is {len(data)} bytes, header says {size}")
        # writeLines writes each element and a newline; NA prints as "NA".
        novels[name] = "".join(("NA" if line is None else line) + "\n" for line in character_vector(data))
    return novels


def package_data_dir(work: Path) -> Path:
    if (INSTALLED / "data" / "Rdata.rdb").exists():
        return INSTALLED / "data"
    subprocess.run(["apt-get", "download", PACKAGE], cwd=work, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deb = next(work.glob(f"{PACKAGE}_*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "root")], check=True)
    return work / "root" / INSTALLED.relative_to("/") / "data"


def split_text(novels: dict, split: str) -> list:
    out = []
    for name in NOVELS:
        paras = paragraphs_of(novels[name])
        n_val = max(1, round(len(paras) * VALIDATION_FRACTION))
        out += paras[-n_val:] if split == "validation" else paras[:-n_val]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", required=True, help="text file to write")
    ap.add_argument("--split", choices=["validation", "train"], default="validation")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        novels = read_novels(package_data_dir(Path(tmp)))
    paras = split_text(novels, args.split)
    expected = {"validation": (500, 249492), "train": (9505, 3741425)}[args.split]
    got = (len(paras), sum(len(p) for p in paras))
    if got != expected:
        sys.exit(f"austen_text: {args.split} has {got[0]} paragraphs, {got[1]} characters; "
                 f"models/README.md says {expected[0]}, {expected[1]}")
    Path(args.out).write_text("\n".join(paras) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
