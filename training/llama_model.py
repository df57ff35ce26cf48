"""A minimal Llama-architecture decoder in PyTorch 1.13, matching what peregrine runs.

Conventions (they must agree with peregrine's `llama` forward pass and llama2.c's run.c):
  RMSNorm with eps 1e-5; RoPE rotating ADJACENT pairs (x[2i], x[2i+1]) by pos * 10000^(-2i/head_dim);
  SwiGLU FFN w2(silu(w1 x) * w3 x); no biases; causal attention scaled by 1/sqrt(head_dim);
  grouped-query attention where query head h reads KV head h // (n_heads // n_kv_heads).
Debian's torch 1.13 has no scaled_dot_product_attention, so attention is written out.
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F

NORM_EPS = 1e-5
ROPE_THETA = 10000.0


@dataclass
class LlamaShape:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int
    tied_output: bool  # True: the classifier reuses the token embedding

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    @property
    def kv_dim(self):
        return self.n_kv_heads * self.head_dim

    def as_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))  # (dim)

    def forward(self, x):
        # x: (..., dim)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.weight


def rope_tables(head_dim, seq_len, dtype=torch.float32):
    """cos/sin, each (seq_len, head_dim/2): angle[p, i] = p * theta^(-2i/head_dim)."""
    inv_freq = ROPE_THETA ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x: (batch, heads, seq, head_dim); cos/sin: (seq, head_dim/2). Rotates pairs (2i, 2i+1)."""
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    rot_even = x_even * cos - x_odd * sin
    rot_odd = x_even * sin + x_odd * cos
    return torch.stack((rot_even, rot_odd), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.s = s
        self.wq = nn.Linear(s.dim, s.dim, bias=False)      # weight (dim, dim)
        self.wk = nn.Linear(s.dim, s.kv_dim, bias=False)   # weight (kv_dim, dim)
        self.wv = nn.Linear(s.dim, s.kv_dim, bias=False)   # weight (kv_dim, dim)
        self.wo = nn.Linear(s.dim, s.dim, bias=False)      # weight (dim, dim)

    def qkv(self, x, cos, sin):
        """x: (batch, seq, dim) -> q (b, nh, seq, hd), k and v (b, nkv, seq, hd), q and k rotated."""
        b, t, _ = x.shape
        hd, nh, nkv = self.s.head_dim, self.s.n_heads, self.s.n_kv_heads
        q = self.wq(x).view(b, t, nh, hd).transpose(1, 2)    # (b, nh, t, hd)
        k = self.wk(x).view(b, t, nkv, hd).transpose(1, 2)   # (b, nkv, t, hd)
        v = self.wv(x).view(b, t, nkv, hd).transpose(1, 2)   # (b, nkv, t, hd)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin, mask):
        # x: (batch, seq, dim); mask: (seq, seq) additive, -inf above the diagonal
        b, t, _ = x.shape
        hd, nh, nkv = self.s.head_dim, self.s.n_heads, self.s.n_kv_heads
        q, k, v = self.qkv(x, cos, sin)
        group = nh // nkv
        # query head h uses KV head h // group: repeat each KV head `group` times in a row
        k = k.repeat_interleave(group, dim=1)                 # (b, nh, t, hd)
        v = v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd) + mask  # (b, nh, t, t)
        out = F.softmax(scores, dim=-1) @ v                   # (b, nh, t, hd)
        return self.wo(out.transpose(1, 2).reshape(b, t, self.s.dim))


class FeedForward(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.w1 = nn.Linear(s.dim, s.hidden_dim, bias=False)  # gate, weight (hidden, dim)
        self.w2 = nn.Linear(s.hidden_dim, s.dim, bias=False)  # down, weight (dim, hidden)
        self.w3 = nn.Linear(s.dim, s.hidden_dim, bias=False)  # up,   weight (hidden, dim)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.attention_norm = RMSNorm(s.dim)
        self.attention = Attention(s)
        self.ffn_norm = RMSNorm(s.dim)
        self.feed_forward = FeedForward(s)

    def forward(self, x, cos, sin, mask):
        x = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.s = s
        self.tok_embeddings = nn.Embedding(s.vocab_size, s.dim)  # weight (vocab, dim)
        self.layers = nn.ModuleList(Block(s) for _ in range(s.n_layers))
        self.norm = RMSNorm(s.dim)
        self.output = nn.Linear(s.dim, s.vocab_size, bias=False)  # weight (vocab, dim)
        if s.tied_output:
            self.output.weight = self.tok_embeddings.weight
        self.apply(self._init_weights)
        # GPT-2 style: shrink the residual-branch projections by depth
        for name, p in self.named_parameters():
            if name.endswith("wo.weight") or name.endswith("w2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * s.n_layers))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())  # tied weights count once

    def forward(self, tokens):
        # tokens: (batch, seq) int64 -> logits (batch, seq, vocab)
        return self.output(self.hidden(tokens))

    def hidden(self, tokens):
        """tokens: (batch, seq) -> the final hidden states AFTER the last RMSNorm (batch, seq, dim):
        the vectors the output head multiplies (what Medusa heads read)."""
        t = tokens.shape[1]
        dtype = self.tok_embeddings.weight.dtype
        cos, sin = rope_tables(self.s.head_dim, t, dtype)
        mask = torch.full((t, t), float("-inf"), dtype=dtype).triu(1)
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)


@torch.no_grad()
def greedy_continuation(model, prompt_ids, n_new):
    """Greedy decoding by full recomputation (no cache: slow but obviously right).
    Returns (new token ids, first-step logits as a list, smallest top-1/top-2 logit margin)."""
    ids = list(prompt_ids)
    first_logits, min_margin = None, float("inf")
    for _ in range(n_new):
        logits = model(torch.tensor([ids]))[0, -1]
        if first_logits is None:
            first_logits = logits.tolist()
        top2 = torch.topk(logits, 2).values
        min_margin = min(min_margin, float(top2[0] - top2[1]))
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt_ids):], first_logits, min_margin
