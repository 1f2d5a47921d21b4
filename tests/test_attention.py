"""kvplan.attention against torch's scaled_dot_product_attention, the lesson's examples, and a no-copy check."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from torch.nn.functional import scaled_dot_product_attention as sdpa  # noqa: E402

from kvplan.attention import (  # noqa: E402
    attention_scores,
    causal_mask,
    group_query_heads,
    grouped_query_attention,
    positional_mask,
)
from kvplan.verify import LiveTensorPeak  # noqa: E402

# max |out − ref| / max |ref| against fp32 SDPA on the same (rounded) inputs. The bundled attention
# rounds q·kᵀ to the input dtype, as Hugging Face's eager attention does: bf16 keeps 8 significant bits.
REL_BOUND = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def ref_mask(T_q: int, T_kv: int, window: int | None = None) -> torch.Tensor:
    """Bottom-right causal mask, True = may attend, built with tril (independent of kvplan.attention)."""
    ones = torch.ones(T_q, T_kv, dtype=torch.bool)
    m = ones.tril(T_kv - T_q)
    if window is not None:
        m &= ~ones.tril(T_kv - T_q - window)
    return m


def rand(gen, *shape, dtype):
    return torch.randn(*shape, generator=gen).to(dtype)


# (B, H_q, H_kv, T_q, T_kv, d, d_v, window)
SHAPES = [
    pytest.param(2, 8, 2, 16, 16, 64, 64, None, id="gqa-prefill"),
    pytest.param(2, 8, 2, 1, 77, 64, 64, None, id="gqa-decode"),
    pytest.param(1, 32, 8, 7, 300, 128, 128, None, id="llama3-chunked-prefill"),
    pytest.param(3, 6, 6, 5, 40, 32, 32, None, id="mha"),
    pytest.param(2, 71, 1, 3, 50, 64, 64, None, id="mqa-falcon"),
    pytest.param(1, 16, 1, 4, 60, 576, 512, None, id="mla-absorbed-dv-ne-d"),
    pytest.param(2, 8, 4, 6, 6, 32, 16, None, id="dv-lt-d"),
    pytest.param(2, 8, 2, 12, 12, 32, 32, 4, id="window-prefill"),
    pytest.param(1, 8, 2, 1, 100, 32, 32, 16, id="window-decode"),
    pytest.param(2, 4, 2, 9, 50, 16, 16, 20, id="window-chunk"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("B,H_q,H_kv,T_q,T_kv,d,d_v,window", SHAPES)
def test_matches_sdpa(B, H_q, H_kv, T_q, T_kv, d, d_v, window, dtype):
    gen = torch.Generator().manual_seed(1000 * H_q + 10 * T_kv + d)
    q = rand(gen, B, H_q, T_q, d, dtype=dtype)
    k = rand(gen, B, H_kv, T_kv, d, dtype=dtype)
    v = rand(gen, B, H_kv, T_kv, d_v, dtype=dtype)
    ref = sdpa(q.float(), k.float(), v.float(), attn_mask=ref_mask(T_q, T_kv, window), enable_gqa=True)
    out = grouped_query_attention(q, k, v, window=window)
    assert out.shape == (B, H_q, T_q, d_v)
    assert out.dtype == dtype
    rel = (out.float() - ref).abs().max().item() / ref.abs().max().item()
    assert rel <= REL_BOUND[dtype], f"relative error {rel:.2e}"
    # the same inputs through SDPA in their own dtype agree to the same bound
    same = sdpa(q, k, v, attn_mask=ref_mask(T_q, T_kv, window), enable_gqa=True).float()
    assert (out.float() - same).abs().max().item() / ref.abs().max().item() <= REL_BOUND[dtype]


def test_query_head_h_reads_kv_head_h_div_G():
    # Make each KV head's V constant = its index: query head h must output h // G (G = 4).
    B, H_q, H_kv, T, d = 1, 8, 2, 3, 4
    q = torch.randn(B, H_q, T, d)
    k = torch.randn(B, H_kv, T, d)
    v = torch.arange(H_kv, dtype=torch.float32).view(1, H_kv, 1, 1).expand(B, H_kv, T, 1).contiguous()
    out = grouped_query_attention(q, k, v)
    expected = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1], dtype=torch.float32)  # h // 4
    assert torch.allclose(out[0, :, :, 0], expected[:, None].expand(H_q, T), atol=1e-6)  # Σ p = 1 (± rounding)


def test_lesson_masked_softmax_example():
    # Scores [2, 3, 5] for the query at position 1 of 3: key 2 is in the future.
    # softmax([2, 3]) = [1/(1+e), e/(1+e)] = [0.2689, 0.7311]; the future key gets exactly 0.0.
    mask = causal_mask(3, 3)
    assert mask[1].tolist() == [0.0, 0.0, -math.inf]
    p = torch.softmax(torch.tensor([2.0, 3.0, 5.0]) + mask[1], dim=-1)
    assert p[2].item() == 0.0
    assert p[:2].tolist() == pytest.approx([1 / (1 + math.e), math.e / (1 + math.e)], abs=1e-6)
    assert round(p[0].item(), 4) == 0.2689 and round(p[1].item(), 4) == 0.7311

    # The same through grouped_query_attention: d = 1, q = 1, k = scores, scale 1, one-hot V rows.
    q = torch.ones(1, 1, 3, 1)
    k = torch.tensor([2.0, 3.0, 5.0]).view(1, 1, 3, 1)
    v = torch.eye(3).view(1, 1, 3, 3)
    out = grouped_query_attention(q, k, v, scale=1.0)
    assert out[0, 0, 1].tolist() == pytest.approx([0.2689414, 0.7310586, 0.0], abs=1e-6)
    assert out[0, 0, 1, 2].item() == 0.0
    assert out[0, 0, 0].tolist() == [1.0, 0.0, 0.0]  # position 0 sees only itself


def test_lesson_shape_example():
    # B=1, T=4, H_q=8, H_kv=2, d=16: 8 / 2 = 4 query heads per KV head.
    gen = torch.Generator().manual_seed(11)  # seeded: an unseeded draw near 0 failed a relative tolerance
    q = torch.randn(1, 8, 4, 16, generator=gen)
    k = torch.randn(1, 2, 4, 16, generator=gen)
    assert group_query_heads(q, 2).shape == (1, 2, 4, 4, 16)  # (B, H_kv, G, T, d)
    s = attention_scores(q, k)
    assert s.shape == (1, 8, 4, 4)  # (B, H_q, T_q, T_kv)
    assert s.dtype == torch.float32
    # row t sees keys 0..t: upper triangle is −inf
    assert torch.isinf(s[0, 0]).tolist() == [
        [False, True, True, True],
        [False, False, True, True],
        [False, False, False, True],
        [False, False, False, False],
    ]
    # unmasked entries are q·k / sqrt(16) with query head h against KV head h // 4
    assert s[0, 5, 3, 1].item() == pytest.approx((q[0, 5, 3] @ k[0, 1, 1]).item() / 4, rel=1e-6, abs=1e-6)


def test_causal_mask_bottom_right_alignment():
    # 2 queries after 3 cached keys: they are positions 3 and 4 of 5.
    m = causal_mask(2, 5)
    assert torch.isfinite(m).tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    # decode: one query sees every key
    assert torch.isfinite(causal_mask(1, 7)).all()
    # window 3, decode at position 9 of 10: keys 7, 8, 9 only (9 − 3 < j <= 9)
    assert torch.isfinite(causal_mask(1, 10, window=3))[0].nonzero().flatten().tolist() == [7, 8, 9]
    # window exactly T: same as no window; window 1: only the diagonal
    assert torch.equal(causal_mask(4, 4, window=4), causal_mask(4, 4))
    assert torch.isfinite(causal_mask(4, 4, window=1)).equal(torch.eye(4, dtype=torch.bool))
    # chunk 4: position 5 sees 4 and 5 only
    assert torch.isfinite(causal_mask(1, 6, chunk=4))[0].nonzero().flatten().tolist() == [4, 5]
    assert causal_mask(2, 3, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_positional_mask_ring_slots():
    # A ring of 4 slots after positions 0..5: slots hold 4, 5, 2, 3; query at 5 with window 4.
    pos = torch.tensor([4, 5, 2, 3])
    m = positional_mask(torch.tensor([5]), pos, window=4)
    assert torch.isfinite(m).tolist() == [[True, True, True, True]]
    m = positional_mask(torch.tensor([5]), pos, window=3)  # 5 − 3 < j: position 2 is out
    assert torch.isfinite(m).tolist() == [[True, True, False, True]]
    # an empty slot (−1) is never read
    assert torch.isinf(positional_mask(torch.tensor([0]), torch.tensor([0, -1])))[0].tolist() == [False, True]


def test_bool_and_additive_masks_match_sdpa():
    gen = torch.Generator().manual_seed(7)
    q, k, v = (
        rand(gen, 2, 4, 5, 8, dtype=torch.float32),
        rand(gen, 2, 2, 9, 8, dtype=torch.float32),
        rand(gen, 2, 2, 9, 8, dtype=torch.float32),
    )
    allowed = torch.rand(2, 4, 5, 9, generator=gen) > 0.5
    allowed[..., 0] = True  # every row sees at least one key
    ref = sdpa(q, k, v, attn_mask=allowed, enable_gqa=True)
    out_bool = grouped_query_attention(q, k, v, mask=allowed, causal=False)
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, -math.inf)
    out_add = grouped_query_attention(q, k, v, mask=additive, causal=False)
    assert (out_bool - ref).abs().max().item() < 1e-5
    assert torch.equal(out_bool, out_add)


def test_strided_cache_views_are_accepted():
    # K/V as a prefix of a larger cache (non-contiguous on the token axis) and V as a latent slice (MLA).
    gen = torch.Generator().manual_seed(3)
    cache = rand(gen, 2, 1, 50, 576, dtype=torch.float32)
    k, v = cache[:, :, :30], cache[:, :, :30, :512]
    q = rand(gen, 2, 16, 1, 576, dtype=torch.float32)
    ref = sdpa(q, k.contiguous(), v.contiguous(), enable_gqa=True, scale=1 / math.sqrt(192))
    out = grouped_query_attention(q, k, v, scale=1 / math.sqrt(192))
    assert (out - ref).abs().max().item() < 1e-5


@pytest.mark.parametrize(
    "q_shape,k_shape,v_shape,match",
    [
        ((1, 6, 4, 8), (1, 4, 4, 8), (1, 4, 4, 8), "H_q=6 query heads is not a multiple of H_kv=4"),
        ((1, 8, 4, 8), (2, 2, 4, 8), (2, 2, 4, 8), "batch mismatch"),
        ((1, 8, 4, 8), (1, 2, 4, 16), (1, 2, 4, 8), "head dim mismatch"),
        ((1, 8, 4, 8), (1, 2, 4, 8), (1, 2, 5, 8), r"v \(1, 2, 5, 8\) must be"),
        ((1, 8, 4), (1, 2, 4, 8), (1, 2, 4, 8), "must be 4-D"),
        ((1, 8, 5, 8), (1, 2, 4, 8), (1, 2, 4, 8), "T_q <= T_kv"),
    ],
)
def test_errors(q_shape, k_shape, v_shape, match):
    with pytest.raises(ValueError, match=match):
        grouped_query_attention(torch.zeros(q_shape), torch.zeros(k_shape), torch.zeros(v_shape))


def test_error_on_mixed_dtypes_and_bad_masks():
    q, k, v = torch.zeros(1, 2, 3, 4), torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4)
    with pytest.raises(ValueError, match="dtype mismatch"):
        grouped_query_attention(q, k.bfloat16(), v)
    with pytest.raises(ValueError, match="mask"):
        grouped_query_attention(q, k, v, mask=torch.zeros(3, 5))
    with pytest.raises(ValueError, match="window=0"):
        causal_mask(2, 2, window=0)
    with pytest.raises(ValueError, match="T_q <= T_kv"):
        causal_mask(3, 2)


# --- K and V are never copied per query head -----------------------------------------------------------


def test_grouped_view_shares_storage():
    q = torch.randn(2, 32, 5, 64)
    g = group_query_heads(q, 8)
    assert g.data_ptr() == q.data_ptr() and g.shape == (2, 8, 4, 5, 64)
    assert q.view(2, 8, 4, 5, 64).data_ptr() == q.data_ptr()


def _decode_inputs():
    # One decode step, G = 16: K is 1 × 2 × 4096 × 128 × 4 B = 4 MiB; a per-query-head copy would be 64 MiB.
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, 32, 1, 128, generator=gen)
    k = torch.randn(1, 2, 4096, 128, generator=gen)
    v = torch.randn(1, 2, 4096, 128, generator=gen)
    return q, k, v, k.numel() * k.element_size()


def test_no_tensor_of_k_size_is_allocated():
    q, k, v, k_bytes = _decode_inputs()
    with LiveTensorPeak() as mode:
        out = grouped_query_attention(q, k, v)
    assert out.shape == (1, 32, 1, 128)
    # logits + probabilities: 2 × 32 × 4096 × 4 B = 1 MiB; output 16 KiB; no copy of K (4 MiB) or more
    assert mode.largest < k_bytes
    assert mode.peak < k_bytes
    assert mode.peak <= 2 * 32 * 4096 * 4 + 32 * 128 * 4 + 4096 * 8 + 64 * 1024


def test_the_copy_detector_catches_per_head_copies():
    # The check above can fail: an implementation that repeats K/V per query head (or lets
    # torch.matmul broadcast k.unsqueeze(2) against the grouped q, which expands and copies K G times)
    # allocates G × 4 MiB = 64 MiB.
    q, k, v, k_bytes = _decode_inputs()
    with LiveTensorPeak() as mode:
        kr = k.repeat_interleave(16, dim=1)
        torch.softmax(q @ kr.transpose(-1, -2) / math.sqrt(128), dim=-1)
    assert mode.largest == 16 * k_bytes
    with LiveTensorPeak() as mode:
        torch.matmul(q.view(1, 2, 16, 1, 128), k.unsqueeze(2).transpose(-1, -2))
    assert mode.largest == 16 * k_bytes
