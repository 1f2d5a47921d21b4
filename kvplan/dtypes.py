"""KV-cache and weight dtypes: exact bytes for a row of elements, no torch.

A *row* is what one token stores for one layer in one of K or V: ``H_kv × head_dim`` elements
(``kv_lora_rank + qk_rope_head_dim`` for an MLA latent). Plain dtypes cost a whole number of bytes
per element. Block-quantized ggml types cost ``ceil(x / block) × block_bytes`` (the block carries its
own fp16 scale, and min for q4_1/q5_1). NVFP4 costs ``ceil(x/2) + ceil(x/16)`` (4-bit data plus one
fp8 scale per 16 elements). Per-token-head caches (vLLM ``int8``, ``fp8_per_token_head``) add one
fp32 scale per head per row.

Sources: ggml ``ggml-common.h`` block layouts (block_q8_0 = 2 + 32 B, block_q4_0 = 2 + 16 B,
block_q4_1 = 4 + 16 B, block_q5_0 = 2 + 4 + 16 B, block_q5_1 = 4 + 4 + 16 B, block_iq4_nl = 2 + 16 B); NVIDIA
NVFP4 (E2M1 data, E4M3 scale per 16); vLLM quantized KV cache docs (fp8 uses per-tensor scales; int8 per token-head
fp32 scales).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.errors import UsageError


@dataclass(frozen=True)
class KVDtype:
    """One storage format for cached K/V (or model weights).

    Attributes:
        name: canonical name (``bf16``, ``q8_0`` ...).
        block_elems: elements per quantization block (1 for plain types).
        block_bytes: bytes per block (the element size for plain types).
        fp4_scaled: NVFP4 layout, ``ceil(x/2) + ceil(x/16)`` bytes for x elements.
        scale_bytes_per_head: extra bytes per head per row (fp32 per-token-head scales).
        torch_name: the ``torch`` dtype attribute used to allocate this format, or None when torch has
            no native type (then kvplan allocates ``uint8`` storage of the exact byte count).
    """

    name: str
    block_elems: int
    block_bytes: int
    fp4_scaled: bool = False
    scale_bytes_per_head: int = 0
    torch_name: str | None = None
    description: str = ""

    def row_bytes(self, elements: int, heads: int = 1) -> int:
        """Exact bytes to store one row of ``elements`` values split into ``heads`` heads.

        Args:
            elements: values in the row (e.g. ``H_kv × head_dim``), >= 0.
            heads: heads the row holds, for per-head scales.

        Returns:
            Bytes (int).
        """
        if self.fp4_scaled:
            data = -(-elements // 2) + -(-elements // 16)
        else:
            data = -(-elements // self.block_elems) * self.block_bytes
        return data + self.scale_bytes_per_head * heads

    def bytes_for(self, elements: int) -> int:
        """Exact bytes for ``elements`` values stored as one flat tensor (weights, states)."""
        return self.row_bytes(elements, heads=0)

    @property
    def bits_per_element(self) -> float:
        """Average storage bits per element over a long row, scales included (for display only)."""
        if self.fp4_scaled:
            return 4.0 + 8.0 / 16
        return 8.0 * self.block_bytes / self.block_elems


_DTYPES: dict[str, KVDtype] = {
    d.name: d
    for d in (
        KVDtype("fp32", 1, 4, torch_name="float32", description="IEEE float32, 4 B"),
        KVDtype("fp16", 1, 2, torch_name="float16", description="IEEE float16, 2 B"),
        KVDtype("bf16", 1, 2, torch_name="bfloat16", description="bfloat16, 2 B"),
        KVDtype("fp8_e4m3", 1, 1, torch_name="float8_e4m3fn", description="FP8 E4M3, 1 B, per-tensor scale"),
        KVDtype("fp8_e5m2", 1, 1, torch_name="float8_e5m2", description="FP8 E5M2, 1 B, per-tensor scale"),
        KVDtype(
            "fp8_per_token_head",
            1,
            1,
            scale_bytes_per_head=4,
            description="FP8, 1 B + fp32 scale per token per head",
        ),
        KVDtype("int8", 1, 1, scale_bytes_per_head=4, description="int8, 1 B + fp32 scale per token per head"),
        KVDtype("q8_0", 32, 34, description="ggml q8_0: 34 B per 32 elements"),
        KVDtype("q4_0", 32, 18, description="ggml q4_0: 18 B per 32 elements"),
        KVDtype("q4_1", 32, 20, description="ggml q4_1: 20 B per 32 elements"),
        KVDtype("q5_0", 32, 22, description="ggml q5_0: 22 B per 32 elements"),
        KVDtype("q5_1", 32, 24, description="ggml q5_1: 24 B per 32 elements"),
        KVDtype("nvfp4", 1, 1, fp4_scaled=True, description="NVFP4: ceil(x/2) + ceil(x/16) B"),
    )
}

# ggml's iq4_nl: an fp16 scale and 16 B of 4-bit indices into a non-linear table per 32 elements (ggml-common.h
# block_iq4_nl, QK4_NL = 32; gguf's GGML_QUANT_SIZES[IQ4_NL] = (32, 18)), a llama.cpp KV cache type (common/arg.cpp
# kv_cache_types). get_kv_dtype knows it (estimate sizes it; only llama.cpp's EngineRules.kv_dtype takes it), but it
# is not among kv_dtype_names: ``kvplan verify`` has no packer for it.
IQ4_NL = KVDtype("iq4_nl", 32, 18, description="ggml iq4_nl: 18 B per 32 elements (llama.cpp cache type)")
_SIZED_ONLY: dict[str, KVDtype] = {IQ4_NL.name: IQ4_NL}

_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "f32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "f16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "fp8": "fp8_e4m3",
    "fp8_e4m3fn": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",  # SGLang / torch spellings
    "float8_e4m3": "fp8_e4m3",
    "e4m3": "fp8_e4m3",
    "e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
    "fp4": "nvfp4",
}


def kv_dtype_names() -> list[str]:
    """Canonical KV dtype names, then aliases (for help and error messages)."""
    return list(_DTYPES)


def get_kv_dtype(name: str, *, what: str = "--kv-dtype") -> KVDtype:
    """Look up a KV dtype by canonical name or alias, case-insensitively.

    Raises:
        UsageError: the name is unknown; the message lists the allowed names.
    """
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    try:
        return _DTYPES[key] if key in _DTYPES else _SIZED_ONLY[key]
    except KeyError:
        allowed = ", ".join([*kv_dtype_names(), *_SIZED_ONLY])
        raise UsageError(f"{what}: unknown dtype {name!r}; allowed: {allowed}") from None


# --- weights ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightDtype:
    """A weight storage format: bytes for P parameters = ceil(P × bits / 8) + group scales.

    Attributes:
        name: canonical name.
        bits: bits per parameter.
        group_size: parameters per scale group (0: no group scales).
        group_bytes: bytes of scale (and zero point) per group.
    """

    name: str
    bits: int
    group_size: int = 0
    group_bytes: int = 0
    description: str = ""

    def bytes_for(self, params: int) -> int:
        """Exact bytes for ``params`` parameters, group scales included."""
        data = -(-params * self.bits // 8)
        if self.group_size:
            data += -(-params // self.group_size) * self.group_bytes
        return data


_WEIGHT_DTYPES: dict[str, WeightDtype] = {
    w.name: w
    for w in (
        WeightDtype("fp32", 32, description="float32"),
        WeightDtype("bf16", 16, description="bfloat16 / float16"),
        WeightDtype("fp16", 16, description="float16"),
        # block-scaled FP8 (DeepSeek-V3, Qwen3-FP8: weight_block_size [128, 128]): one fp32 scale per 128 × 128
        WeightDtype("fp8", 8, 16384, 4, description="FP8, one fp32 scale per 128 x 128 block"),
        WeightDtype("int8", 8, description="int8 (per-channel scales, negligible)"),
        # AWQ/GPTQ: 4-bit weights, an fp16 scale and a 4-bit zero point per group of 128 (2.5 B per 128 = 5 per
        # 256: AutoAWQ qzeros / scales, GPTQ qzeros / scales; GPTQ's g_idx adds 4 B per input row, left out)
        WeightDtype("int4", 4, 256, 5, description="int4 AWQ/GPTQ, group 128: fp16 scale + packed 4-bit zero"),
        # bitsandbytes 4-bit (nf4 / fp4): one fp32 absmax per 64 weights (bnb_4bit_use_double_quant off, the
        # default of transformers' BitsAndBytesConfig)
        WeightDtype("nf4", 4, 64, 4, description="bitsandbytes nf4/fp4: 4 bit + fp32 absmax per 64"),
        # OCP MXFP4: 4-bit E2M1 and one E8M0 scale per 32.
        WeightDtype("mxfp4", 4, 32, 1, description="MXFP4: 4 bit + 1 B scale per 32"),
        WeightDtype("nvfp4", 4, 16, 1, description="NVFP4: 4 bit + 1 B scale per 16"),
    )
}

_WEIGHT_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "fp8_e4m3": "fp8",
    "awq": "int4",
    "gptq": "int4",
    "awq_marlin": "int4",
    "gptq_marlin": "int4",
    "w4a16": "int4",
    "bitsandbytes": "nf4",
    "bnb": "nf4",
    "bnb-nf4": "nf4",
    "fp4": "nf4",
    "w8a8": "int8",
    "w8a16": "int8",
    "fbgemm_fp8": "fp8",
    "modelopt": "fp8",
    "modelopt_fp4": "nvfp4",
}


def weight_dtype_names() -> list[str]:
    """Canonical weight dtype names."""
    return list(_WEIGHT_DTYPES)


def get_weight_dtype(name: str, *, what: str = "--weights-dtype") -> WeightDtype:
    """Look up a weight dtype by name or alias.

    Raises:
        UsageError: unknown name; the message lists the allowed names.
    """
    key = str(name).strip().lower()
    key = _WEIGHT_ALIASES.get(key, key)
    try:
        return _WEIGHT_DTYPES[key]
    except KeyError:
        allowed = ", ".join(weight_dtype_names())
        raise UsageError(f"{what}: unknown weights dtype {name!r}; allowed: {allowed}") from None
