"""Triton kernels behind `engine.kernels.sampling` (imported only when triton is).

One pass over each row of the logits [n, V] keeps five running numbers per row:

    best, idx  the largest raw logit and its lowest index (the greedy token)
    m          the largest temperature-scaled logit y = x / T
    z          sum(exp(y - m))
    s          sum(exp(y - m) * (y - m))

from which confidence = exp(y[idx] - m) / z = 1 / z and entropy = log z - s / z
(H = -sum p log p with p = exp(y - m) / z). When a block raises m to m', z and s are
rescaled by exp(m - m'):  s' = exp(m - m') * (s + (m - m') * z).  Working relative to the
running max keeps entropy accurate when it is tiny (a confident position), where the
textbook lse - E[y] would subtract two large numbers.

A row is streamed in BLOCK-wide tiles, so any V works. When there are few rows (a short
hole) one program per row would leave most of a big GPU idle, so a row can be split into
`splits` chunks: `_partials_kernel` writes each chunk's five numbers and `_combine_kernel`
merges them per row. With one chunk per row, `_partials_kernel` writes the results directly.

Banned tokens (-inf) contribute nothing; a row with every logit -inf yields token 0 and NaN
confidence/entropy, as torch's softmax/argmax do.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _merge(m, z, s, m_other, z_other, s_other):
    """Merge two (m, z, s) softmax summaries (scalars or same-shape tensors)."""
    m_new = tl.maximum(m, m_other)
    # With every logit so far -inf there is no finite max; any finite reference will do.
    ref = tl.where(m_new > float("-inf"), m_new, 0.0)
    # An empty summary (z == 0) has m == -inf: zero its shift rather than form -inf * 0.
    d = tl.where(z > 0.0, m - ref, 0.0)
    d_other = tl.where(z_other > 0.0, m_other - ref, 0.0)
    a = tl.where(z > 0.0, tl.exp(d), 0.0)
    a_other = tl.where(z_other > 0.0, tl.exp(d_other), 0.0)
    z_new = a * z + a_other * z_other
    s_new = a * (s + d * z) + a_other * (s_other + d_other * z_other)
    return m_new, z_new, s_new


@triton.jit
def _chunk_stats(row_ptr, start, chunk, V, inv_t, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    """best, idx, m, z, s over logits [start, min(start + chunk, V)) of one row."""
    stop = tl.minimum(start + chunk, V)
    offs = tl.arange(0, BLOCK)
    best = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), axis=0)
    idx = start
    m = best
    z = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
    s = z
    for lo in range(0, chunk, BLOCK):
        cols = start + lo + offs
        x = tl.load(row_ptr + cols, mask=cols < stop, other=float("-inf")).to(tl.float32)
        bmax, barg = tl.max(x, axis=0, return_indices=True, return_indices_tie_break_left=True)
        # Strictly greater: an equal value later in the row never replaces the earlier one.
        take = bmax > best
        idx = tl.where(take, start + lo + barg, idx)
        best = tl.where(take, bmax, best)
        if SCALE:
            y = x * inv_t
            bm = bmax * inv_t  # rounding is monotone: the max of the products
        else:
            y = x
            bm = bmax
        ref = tl.where(bm > float("-inf"), bm, 0.0)
        live = y > float("-inf")  # banned tokens and the tail past V have probability 0
        d = tl.where(live, y - ref, 0.0)
        p = tl.where(live, tl.exp(d), 0.0)
        pd = p * d
        m, z, s = _merge(m, z, s, bm, tl.sum(p, axis=0), tl.sum(pd, axis=0))
    return best, idx, m, z, s


@triton.jit
def _finish(out_row, token_ptr, conf_ptr, ent_ptr, idx, z, s):
    empty = z == 0.0  # every logit -inf
    zz = tl.where(empty, 1.0, z)
    conf = tl.where(empty, float("nan"), 1.0 / zz)
    ent = tl.where(empty, float("nan"), tl.log(zz) - s / zz)
    tl.store(token_ptr + out_row, idx.to(tl.int64))
    tl.store(conf_ptr + out_row, conf)
    tl.store(ent_ptr + out_row, ent)


@triton.jit
def _partials_kernel(
    logits_ptr, stride_row, V, chunk, inv_t,
    token_ptr, conf_ptr, ent_ptr,  # final outputs [n] (SPLIT == False)
    best_ptr, idx_ptr, m_ptr, z_ptr, s_ptr,  # partials [n, splits] (SPLIT == True)
    SCALE: tl.constexpr, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    part = tl.program_id(1)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    best, idx, m, z, s = _chunk_stats(row_ptr, part * chunk, chunk, V, inv_t, SCALE, BLOCK)
    if SPLIT:
        out = row * tl.num_programs(1) + part
        tl.store(best_ptr + out, best)
        tl.store(idx_ptr + out, idx)
        tl.store(m_ptr + out, m)
        tl.store(z_ptr + out, z)
        tl.store(s_ptr + out, s)
    else:
        _finish(row, token_ptr, conf_ptr, ent_ptr, idx, z, s)


@triton.jit
def _combine_kernel(
    best_ptr, idx_ptr, m_ptr, z_ptr, s_ptr, splits,
    token_ptr, conf_ptr, ent_ptr,
    BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_S)
    valid = offs < splits
    base = row * splits + offs
    best = tl.load(best_ptr + base, mask=valid, other=float("-inf"))
    idx = tl.load(idx_ptr + base, mask=valid, other=2147483647)
    m = tl.load(m_ptr + base, mask=valid, other=float("-inf"))
    z = tl.load(z_ptr + base, mask=valid, other=0.0)
    s = tl.load(s_ptr + base, mask=valid, other=0.0)
    # Greedy token: the lowest index among the chunks that reach the row's max. Every chunk's
    # idx starts at its first column, so an all -inf row still gives token 0.
    top = tl.max(best, axis=0)
    token = tl.min(tl.where(best == top, idx, 2147483647), axis=0)
    # Merge the softmax summaries: the same algebra as _merge, over the chunk axis.
    mm = tl.max(m, axis=0)
    ref = tl.where(mm > float("-inf"), mm, 0.0)
    d = tl.where(z > 0.0, m - ref, 0.0)
    a = tl.where(z > 0.0, tl.exp(d), 0.0)
    zz = tl.sum(a * z, axis=0)
    ss = tl.sum(a * (s + d * z), axis=0)
    _finish(row, token_ptr, conf_ptr, ent_ptr, token, zz, ss)
