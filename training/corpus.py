"""Corpus and tokenizer for the demo models.

Source: the six Jane Austen novels shipped by Debian's r-cran-janeaustenr (the texts are public
domain; the R packaging is MIT-licensed, see /usr/share/doc/r-cran-janeaustenr/copyright). The
package stores them as R character vectors, one element per printed line, so Rscript dumps them
and we rebuild paragraphs here. Nothing is downloaded.
"""
import json
import re
import subprocess
from pathlib import Path

NOVELS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey",
          "persuasion"]
VALIDATION_FRACTION = 0.05  # the last 5% of each novel's paragraphs

# Headings and furniture that are not prose: "CHAPTER XII", "Chapter 3", "VOLUME II", "THE END".
_HEADING = re.compile(r"^(chapter|volume)\s+[0-9ivxlc]+\.?$|^the end$|^by jane austen$|^finis$",
                      re.IGNORECASE)
_ONLY_SYMBOLS = re.compile(r"^[\s*.\-]*$")


def dump_novels(out_dir: Path) -> dict:
    """Writes NOVEL.lines.txt (the R vector, one element per line) for each novel via Rscript."""
    out_dir.mkdir(parents=True, exist_ok=True)
    script = "library(janeaustenr);" + "".join(
        f'writeLines({n}, "{out_dir / (n + ".lines.txt")}", useBytes=TRUE);' for n in NOVELS)
    subprocess.run(["Rscript", "-e", script], check=True)
    return {n: (out_dir / (n + ".lines.txt")).read_text(encoding="utf-8") for n in NOVELS}


def paragraphs_of(lines_text: str) -> list:
    """Blank-line separated paragraphs, lines joined with spaces, headings and markup removed."""
    lines = lines_text.split("\n")
    lines = lines[1:]  # the first line is the novel's title
    paragraphs, current = [], []
    for line in lines + [""]:
        line = line.strip()
        if line:
            current.append(line)
            continue
        if current:
            text = " ".join(current)
            current = []
            text = text.replace("_", "")             # Project Gutenberg italics markers
            text = re.sub(r"\s+", " ", text).strip()
            if _HEADING.match(text) or _ONLY_SYMBOLS.match(text):
                continue
            paragraphs.append(text)
    return paragraphs


def build_corpus(work: Path) -> dict:
    """Returns {"train": [paragraphs], "validation": [paragraphs]} and writes them as text."""
    texts = dump_novels(work / "novels")
    split = {"train": [], "validation": []}
    for name in NOVELS:
        paras = paragraphs_of(texts[name])
        n_val = max(1, round(len(paras) * VALIDATION_FRACTION))
        split["train"] += paras[:-n_val]
        split["validation"] += paras[-n_val:]
    for part, paras in split.items():
        (work / f"{part}.txt").write_text("\n".join(paras) + "\n", encoding="utf-8")
    stats = {part: {"paragraphs": len(p), "characters": sum(len(x) for x in p)}
             for part, p in split.items()}
    (work / "corpus_stats.json").write_text(json.dumps(stats, indent=1))
    return split


def train_tokenizer(work: Path, vocab_size: int, seed: int):
    """SentencePiece BPE (llama's model type) with byte fallback and ids 0/1/2 = <unk>/<s>/</s>.
    Identity normalization and kept whitespace so that a plain llama/SPM tokenizer (peregrine's,
    llama.cpp's) given the same pieces and scores produces the same ids."""
    import sentencepiece as spm
    prefix = work / "tokenizer"
    spm.SentencePieceTrainer.train(
        input=str(work / "train.txt"), model_prefix=str(prefix), model_type="bpe",
        vocab_size=vocab_size, byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, split_digits=True, max_sentence_length=65536,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=2,
        input_sentence_size=0, shuffle_input_sentence=False, seed_sentencepiece_size=1000000,
        minloglevel=2)
    return spm.SentencePieceProcessor(model_file=str(prefix) + ".model")


def token_stream(sp, paragraphs) -> tuple:
    """Encodes paragraphs into one stream where each paragraph is followed by the newline byte
    token. Returns (stream as a list of ids, start offset of every paragraph)."""
    newline = sp.piece_to_id("<0x0A>")
    stream, starts = [], []
    for ids in sp.encode(paragraphs):
        starts.append(len(stream))
        stream += ids
        stream.append(newline)
    return stream, starts
