"""Causal masks and grouped-query attention in plain torch (the reference kvplan's cache is checked with).

Grouped-query attention (Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models
from Multi-Head Checkpoints", arXiv:2305.13245) lets ``G = H_q / H_kv`` query heads share one K/V head;
MHA (Vaswani et al. 2017, arXiv:1706.03762) is ``H_kv = H_q`` and MQA (Shazeer 2019) is ``H_kv = 1``.
Query head ``h`` reads KV head ``h // G`` (the layout of Hugging Face ``repeat_kv`` and of
``scaled_dot_product_attention(..., enable_gqa=True)``).

The grouped computation views ``q`` [B, H_q, T_q, d] as [B, H_kv, G·T_q, d] (no copy: the G query heads of a
KV head are adjacent) and multiplies it with ``k`` [B, H_kv, T_kv, d] batch by batch, so K and V are read
once per KV head and never copied per query head. (``torch.matmul`` on a [B, H_kv, G, T_q, d] query against
``k.unsqueeze(2)`` would broadcast by expanding and *copying* K G times; folding G into the row dimension
avoids that.)

Positions: a query block of T_q tokens is aligned to the *end* of the T_kv keys, so query ``i`` sits at
absolute position ``T_kv − T_q + i`` ("bottom-right" alignment). That is right for a whole prefill
(T_q = T_kv), a chunk of a prefill (T_q < T_kv) and a decode step (T_q = 1).

This is the only module (with :mod:`kvplan.kvcache` and :mod:`kvplan.verify`) that imports torch.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "allowed_keys",
    "attention_scores",
    "causal_mask",
    "group_query_heads",
    "grouped_query_attention",
    "positional_mask",
]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def allowed_keys(
    q_pos: torch.Tensor, k_pos: torch.Tensor, *, window: int | None = None, chunk: int | None = None
) -> torch.Tensor:
    """Boolean [T_q, T_kv]: may the query at absolute position ``q_pos[i]`` read the key at ``k_pos[j]``.

    Rules (all must hold): ``0 <= k_pos[j] <= q_pos[i]`` (causal; a negative key position marks an empty
    cache slot); with ``window``: ``q_pos[i] − window < k_pos[j]`` (the query and the window − 1 keys before
    it: Mistral / Gemma sliding-window attention); with ``chunk``: ``k_pos[j] // chunk == q_pos[i] // chunk``
    (Llama 4 chunked local attention).

    Args:
        q_pos: int tensor [T_q] of query positions.
        k_pos: int tensor [T_kv] of key positions (−1 for an unwritten ring slot).
        window: sliding window in tokens (>= 1), or None.
        chunk: attention chunk in tokens (>= 1), or None.

    Raises:
        ValueError: window or chunk < 1, or positions not 1-D.
    """
    if q_pos.dim() != 1 or k_pos.dim() != 1:
        raise ValueError(f"positions must be 1-D, got q_pos {tuple(q_pos.shape)} and k_pos {tuple(k_pos.shape)}")
    qp = q_pos[:, None]
    kp = k_pos[None, :]
    ok = (kp >= 0) & (kp <= qp)
    if window is not None:
        if window < 1:
            raise ValueError(f"window={window} must be >= 1 token")
        ok &= kp > qp - window
    if chunk is not None:
        if chunk < 1:
            raise ValueError(f"chunk={chunk} must be >= 1 token")
        ok &= torch.div(kp, chunk, rounding_mode="floor") == torch.div(qp, chunk, rounding_mode="floor")
    return ok


def positional_mask(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    *,
    window: int | None = None,
    chunk: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Additive mask [T_q, T_kv] (0 allowed, −inf not) from absolute positions; rules of :func:`allowed_keys`.

    Used for ring-buffer caches, whose slots hold keys out of position order.

    Raises:
        ValueError: as :func:`allowed_keys`.
    """
    ok = allowed_keys(q_pos, k_pos, window=window, chunk=chunk)
    return torch.zeros(ok.shape, dtype=dtype, device=ok.device).masked_fill_(~ok, float("-inf"))


def causal_mask(
    T_q: int,
    T_kv: int,
    *,
    window: int | None = None,
    chunk: int | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Additive causal mask [T_q, T_kv]: 0 where the key may be read, −inf where it is in the future.

    The query block is aligned to the end of the keys: query ``i`` is at absolute position
    ``T_kv − T_q + i``, so key ``j`` is allowed iff ``j <= T_kv − T_q + i`` (prefill, chunked prefill and
    decode alike). With ``window``: also ``pos_i − window < j`` (W keys including the query's own).
    With ``chunk``: also ``j // chunk == pos_i // chunk`` (Llama 4 chunked attention).

    Example: T_q = 3, T_kv = 3, row 1 (query at position 1) is ``[0, 0, −inf]``.

    Args:
        T_q: query tokens (>= 1).
        T_kv: key tokens (>= T_q).
        window: sliding window in tokens, or None.
        chunk: attention chunk in tokens, or None.
        device: device of the mask.
        dtype: floating dtype of the mask (fp32 by default; −inf is exact in every float dtype).

    Raises:
        ValueError: T_q < 1, T_kv < T_q (a query would see no key), window or chunk < 1.
    """
    if T_q < 1 or T_kv < T_q:
        raise ValueError(f"causal_mask needs 1 <= T_q <= T_kv, got T_q={T_q}, T_kv={T_kv}")
    q_pos = torch.arange(T_kv - T_q, T_kv, device=device)
    k_pos = torch.arange(T_kv, device=device)
    return positional_mask(q_pos, k_pos, window=window, chunk=chunk, dtype=dtype)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None) -> tuple[int, int, int, int, int, int]:
    """Validate shapes; return (B, H_q, H_kv, G, T_q, T_kv)."""
    if q.dim() != 4 or k.dim() != 4 or (v is not None and v.dim() != 4):
        shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}" + ("" if v is None else f", v {tuple(v.shape)}")
        raise ValueError(f"q, k, v must be 4-D [B, H, T, d]; got {shapes}")
    B, H_q, T_q, d = q.shape
    Bk, H_kv, T_kv, dk = k.shape
    if Bk != B:
        raise ValueError(f"batch mismatch: q has B={B}, k has B={Bk}")
    if dk != d:
        raise ValueError(f"head dim mismatch: q has d={d}, k has d={dk}")
    if H_kv < 1 or H_q % H_kv:
        raise ValueError(f"H_q={H_q} query heads is not a multiple of H_kv={H_kv} KV heads")
    if v is not None:
        Bv, H_v, T_v, _ = v.shape
        if (Bv, H_v, T_v) != (B, H_kv, T_kv):
            raise ValueError(f"v {tuple(v.shape)} must be [B={B}, H_kv={H_kv}, T_kv={T_kv}, d_v] like k")
    if q.dtype != k.dtype or (v is not None and v.dtype != q.dtype):
        raise ValueError(f"dtype mismatch: q {q.dtype}, k {k.dtype}" + ("" if v is None else f", v {v.dtype}"))
    return B, H_q, H_kv, H_q // H_kv, T_q, T_kv


def group_query_heads(q: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """View q [B, H_q, T_q, d] as [B, H_kv, G, T_q, d] (G = H_q / H_kv); no copy for a contiguous q.

    Query head ``h`` lands in group ``h // G`` (it reads KV head ``h // G``).

    Raises:
        ValueError: q not 4-D or H_q not a multiple of ``num_kv_heads``.
    """
    if q.dim() != 4:
        raise ValueError(f"q must be 4-D [B, H_q, T_q, d], got {tuple(q.shape)}")
    B, H_q, T_q, d = q.shape
    if num_kv_heads < 1 or H_q % num_kv_heads:
        raise ValueError(f"H_q={H_q} query heads is not a multiple of H_kv={num_kv_heads} KV heads")
    return q.reshape(B, num_kv_heads, H_q // num_kv_heads, T_q, d)


def _mask_of(
    mask: torch.Tensor | None, causal: bool, window: int | None, chunk: int | None, T_q: int, T_kv: int, device
) -> torch.Tensor | None:
    """The additive fp32 mask to apply, broadcastable to [B, H_q, T_q, T_kv], or None."""
    extra = None
    if mask is not None:
        if mask.dtype == torch.bool:
            extra = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill_(~mask, float("-inf"))
        else:
            extra = mask.to(torch.float32)
        if extra.dim() > 4 or extra.shape[-2:] != (T_q, T_kv):
            raise ValueError(f"mask {tuple(mask.shape)} must end in [T_q={T_q}, T_kv={T_kv}]")
    if causal or window is not None or chunk is not None:
        if T_q > T_kv:
            raise ValueError(f"causal attention needs T_q <= T_kv, got T_q={T_q}, T_kv={T_kv}")
        built = causal_mask(T_q, T_kv, window=window, chunk=chunk, device=device)
        extra = built if extra is None else extra + built
    return extra


def attention_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = True,
    window: int | None = None,
    chunk: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Scaled, masked attention logits ``q·kᵀ·scale + mask`` for grouped query heads, before the softmax.

    Args:
        q: [B, H_q, T_q, d] queries.
        k: [B, H_kv, T_kv, d] keys; H_q a multiple of H_kv. May be a strided view (a cache slice).
        mask: optional additive float mask or boolean mask (True = may attend), broadcastable to
            [B, H_q, T_q, T_kv]; applied in addition to ``causal``/``window``/``chunk``.
        causal: apply the bottom-right causal mask of :func:`causal_mask`.
        window: sliding window (tokens); implies the causal rule.
        chunk: attention chunk (tokens); implies the causal rule.
        scale: logit scale, default ``1/sqrt(d)``.

    Returns:
        [B, H_q, T_q, T_kv] in fp32 for fp16/bf16/fp32 inputs (fp64 stays fp64); −inf where masked.

    Raises:
        ValueError: shapes or dtypes mismatch, H_q not a multiple of H_kv, T_q > T_kv with a causal rule.
    """
    B, H_q, H_kv, G, T_q, T_kv = _check(q, k, None)
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qg = group_query_heads(q, H_kv).reshape(B, H_kv, G * T_q, d)  # view for a contiguous q
    s = torch.matmul(qg, k.transpose(-1, -2))  # (B, H_kv, G·T_q, T_kv); same batch dims: no expand copy
    s = s.to(torch.float32) if s.dtype in _LOW_PRECISION else s
    s = s.mul_(scale).view(B, H_q, T_q, T_kv)  # (B, H_kv, G, T_q, T_kv) == (B, H_q, T_q, T_kv)
    m = _mask_of(mask, causal, window, chunk, T_q, T_kv, q.device)
    if m is not None:
        try:
            fits = torch.broadcast_shapes(m.shape, s.shape) == s.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"mask {tuple(m.shape)} does not broadcast to [B, H_q, T_q, T_kv] = {tuple(s.shape)}")
        s = s.add_(m)
    return s


def grouped_query_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = True,
    window: int | None = None,
    chunk: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Grouped-query attention ``softmax(q·kᵀ·scale + mask)·v`` without copying K or V per query head.

    Shapes:
        q [B, H_q, T_q, d], k [B, H_kv, T_kv, d], v [B, H_kv, T_kv, d_v] → out [B, H_q, T_q, d_v].
        G = H_q / H_kv query heads share a KV head (query head h reads KV head h // G). MHA: H_kv = H_q;
        MQA: H_kv = 1. d_v may differ from d (DeepSeek MLA in absorbed form: d = 576, d_v = 512, H_kv = 1).
        k and v may be strided views of a cache (a prefix of the token axis, a slice of the last axis).

    Dtypes:
        q, k, v share one floating dtype. The products run in that dtype; logits, mask and softmax are fp32
        for fp16/bf16 inputs; the probabilities are cast back to the input dtype for ``·v``; the output has
        the input dtype.

    Masking:
        ``causal`` (default) applies the bottom-right mask of :func:`causal_mask` (query i at absolute
        position T_kv − T_q + i); ``window`` / ``chunk`` narrow it; ``mask`` (additive float, or boolean
        with True = may attend, broadcastable to [B, H_q, T_q, T_kv]) is applied as well. A row with every
        key masked gives NaN, as a softmax over nothing must.

    Memory:
        Transient: the logits and probabilities, ``B·H_q·T_q·T_kv`` fp32 values each, plus the output.
        No tensor of K's or V's size is allocated.

    Raises:
        ValueError: non-4-D inputs, batch/head/dim/length mismatch, H_q not a multiple of H_kv, mixed
            dtypes, a mask of the wrong shape, or T_q > T_kv with a causal rule.

    Sources: Vaswani et al. 2017 (scaled dot-product attention); Ainslie et al. 2023 (GQA).
    """
    B, H_q, H_kv, G, T_q, T_kv = _check(q, k, v)
    d_v = v.shape[-1]
    s = attention_scores(q, k, mask=mask, causal=causal, window=window, chunk=chunk, scale=scale)
    p = torch.softmax(s, dim=-1)
    del s
    p = p.to(v.dtype).view(B, H_kv, G * T_q, T_kv)
    out = torch.matmul(p, v)  # (B, H_kv, G·T_q, d_v)
    return out.view(B, H_q, T_q, d_v)
