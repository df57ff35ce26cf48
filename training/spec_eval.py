"""Measures what speculative decoding would accept, in torch, for greedy (temperature 0) decoding.

Greedy verification accepts a proposal exactly when it equals the target's own greedy token given
everything before it, so every figure here compares proposals with the target's greedy
continuation. The tool for that is greedy_branches: for every prefix of a window at once, a
model's greedy continuation of a few tokens (a tree of T short branches sharing the window's
K/V), one batched pass per extra token instead of T separate decodes.
"""
import math

import torch
import torch.nn.functional as F

from llama_model import rope_tables


def _branch_step(model, tokens, k, prefix_kv, branch_kv, cos, sin, mask):
    """One more token on every branch. tokens: (B, R) the k-th token of each of R branches; branch
    r continues the window's prefix ending at position P_r, which mask (R, T) encodes (0 up to P_r,
    -inf after), and cos/sin (R + ..., hd/2) hold rows for positions P_r + k at [k + r]. prefix_kv[l]:
    the window's K/V (B, nkv, T, hd); branch_kv[l]: lists of the branches' own K/V so far.
    Returns logits (B, R, V)."""
    s = model.s
    b, t = tokens.shape
    group = s.n_heads // s.n_kv_heads
    x = model.tok_embeddings(tokens)                                    # (B, R, dim)
    for layer, (pk, pv), bkv in zip(model.layers, prefix_kv, branch_kv):
        q, kk, vv = layer.attention.qkv(layer.attention_norm(x), cos[k:k + t], sin[k:k + t])
        bkv[0].append(kk)
        bkv[1].append(vv)
        bk = torch.stack(bkv[0], dim=3).repeat_interleave(group, dim=1)  # (B, nh, T, k, hd)
        bv = torch.stack(bkv[1], dim=3).repeat_interleave(group, dim=1)
        pk_, pv_ = pk.repeat_interleave(group, dim=1), pv.repeat_interleave(group, dim=1)
        scale = 1 / math.sqrt(s.head_dim)
        sp = (q @ pk_.transpose(-2, -1)) * scale + mask                 # (B, nh, R, T)
        sb = (q.unsqueeze(-2) * bk).sum(-1) * scale                     # (B, nh, R, k)
        p = F.softmax(torch.cat([sp, sb], dim=-1), dim=-1)
        n_prefix = pk.shape[2]
        out = p[..., :n_prefix] @ pv_ + (p[..., n_prefix:].unsqueeze(-1) * bv).sum(-2)  # (B, nh, R, hd)
        x = x + layer.attention.wo(out.transpose(1, 2).reshape(b, t, s.dim))
        x = x + layer.feed_forward(layer.ffn_norm(x))
    return model.output(model.norm(x))


@torch.no_grad()
def greedy_branches(model, tokens, n_steps, last_only=False):
    """tokens: (B, T) windows. Returns (B, T, n_steps) int64: [b, t] is the model's greedy
    continuation of tokens[b, :t + 1] (what greedy decoding of that prefix would produce).
    last_only: only the whole window's continuation, (B, 1, n_steps): greedy generation with a
    K/V cache."""
    s = model.s
    b, t = tokens.shape
    dtype = model.tok_embeddings.weight.dtype
    cos, sin = rope_tables(s.head_dim, t + n_steps, dtype)
    mask = torch.full((t, t), float("-inf"), dtype=dtype).triu(1)
    # the window itself, keeping each layer's K/V
    x = model.tok_embeddings(tokens)
    prefix_kv = []
    for layer in model.layers:
        _, k, v = layer.attention.qkv(layer.attention_norm(x), cos[:t], sin[:t])
        prefix_kv.append((k, v))
        x = layer(x, cos[:t], sin[:t], mask)
    out = [model.output(model.norm(x)).argmax(-1)]
    if last_only:  # one branch at position t - 1: rows of the tables start there
        out[0], mask, cos, sin = out[0][:, -1:], mask[-1:], cos[t - 1:], sin[t - 1:]
    branch_kv = [([], []) for _ in model.layers]
    for k in range(1, n_steps):
        out.append(_branch_step(model, out[-1], k, prefix_kv, branch_kv, cos, sin, mask).argmax(-1))
    return torch.stack(out, dim=-1)


def chain_acceptance(proposals, greedy):
    """proposals, greedy: (N, K). Returns per-length j = 1..K the fraction of rows whose first j
    proposals all equal the greedy tokens, and their sum = expected proposals accepted per
    verification (greedy verification stops at the first mismatch)."""
    match = (proposals == greedy).long().cumprod(dim=-1).float()     # (N, K): prefix all-match
    rates = match.mean(0).tolist()
    return {"chain": rates, "expected_accepted": float(sum(rates))}


def speculative_walk(proposals, greedy_seq, prompt_len, n_new, k):
    """Greedy speculative decoding of one sequence, replayed: greedy_seq (L,) is the target's greedy
    continuation of the prompt (so it is also what speculative decoding produces), proposals (L, K)
    what the proposer would offer after each prefix greedy_seq[:p + 1]. From the prompt's end,
    each verification accepts the matching head of the proposal and adds the target's own token.
    Returns the list of accepted counts, one per verification."""
    p, accepted = prompt_len - 1, []   # p: index of the last committed token
    while p < prompt_len - 1 + n_new:
        want = greedy_seq[p + 1:p + 1 + k]
        got = proposals[p, :len(want)]
        a = int((got == want).long().cumprod(0).sum())
        accepted.append(a)
        p += a + 1
    return accepted
