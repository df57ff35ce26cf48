"""Medusa-style prediction heads on a frozen target, and their GGUF file.

Head i (0..K-1) reads the target's final hidden state h_t (after the last RMSNorm) and predicts
the token at t + 2 + i (the target itself predicts t + 1):
    logits_i = W_out (h_t + SiLU(W_i h_t + b_i)),   W_out = the target's (tied) token embedding.
W_i starts at zero, so every head starts as the target's own next-token prediction.

GGUF layout (written by gguf_writer.py): general.architecture = "medusa", general.name,
medusa.head_count / embedding_length / vocab_size (u32), medusa.target (name) and
medusa.target_sha256 (hex of the target file's bytes); tensors medusa.{i}.weight (f32, GGUF dims
{dim, dim}: the torch [out, in] matrix row-major, ne0 = in) and medusa.{i}.bias (f32, {dim}).
No output matrix: the proposer multiplies by the target's own.
"""
import hashlib
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from gguf_reader import GgufFile
from gguf_writer import write_gguf


class MedusaHeads(nn.Module):
    def __init__(self, n_heads, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_heads, dim, dim))  # [i] = W_i, torch [out, in]
        self.bias = nn.Parameter(torch.zeros(n_heads, dim))         # [i] = b_i

    def forward(self, h):
        """h: (..., dim) -> each head's hidden (..., K, dim); multiply by W_out for logits."""
        z = torch.einsum("...i,koi->...ko", h, self.weight) + self.bias
        return h.unsqueeze(-2) + F.silu(z)


def head_logits(heads, h, w_out):
    """h: (..., dim), w_out: (vocab, dim) -> (..., K, vocab)."""
    return heads(h) @ w_out.t()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def save_gguf(heads, path: Path, name: str, target_name: str, target_path: Path, vocab_size: int):
    k, dim, _ = heads.weight.shape
    meta = {"general.architecture": "medusa", "general.name": name,
            "medusa.head_count": k, "medusa.embedding_length": dim, "medusa.vocab_size": vocab_size,
            "medusa.target": target_name, "medusa.target_sha256": sha256_of(target_path)}
    tensors = {}
    for i in range(k):
        tensors[f"medusa.{i}.weight"] = heads.weight[i].detach().cpu().numpy()  # (out, in) -> {in, out}
        tensors[f"medusa.{i}.bias"] = heads.bias[i].detach().cpu().numpy()
    write_gguf(path, meta, tensors)


def load_gguf(path: Path, target_path: Path = None):
    """Reads a heads file back (checking its metadata, and the target's hash when given)."""
    g = GgufFile(path)
    m = g.meta
    if m.get("general.architecture") != "medusa":
        raise ValueError(f"{path}: architecture {m.get('general.architecture')!r}, expected medusa")
    if target_path is not None and m["medusa.target_sha256"] != sha256_of(target_path):
        raise ValueError(f"{path}: made for a different target than {target_path}")
    k, dim = m["medusa.head_count"], m["medusa.embedding_length"]
    heads = MedusaHeads(k, dim)
    with torch.no_grad():
        for i in range(k):
            w, b = g.tensors[f"medusa.{i}.weight"], g.tensors[f"medusa.{i}.bias"]
            if w.shape != (dim, dim) or b.shape != (dim,):
                raise ValueError(f"{path}: head {i} has shapes {w.shape} / {b.shape}")
            heads.weight[i].copy_(torch.from_numpy(np.array(w)))
            heads.bias[i].copy_(torch.from_numpy(np.array(b)))
    return heads, g
