"""GGUF files (llama.cpp, Ollama): the cache layout from the metadata, the weight bytes from the tensor infos.

The file is opened with the ``gguf`` package (llama.cpp's own Python reader, ``gguf.GGUFReader``), which
memory-maps it and parses the key/value metadata and the tensor infos; no tensor data is read (the tensor
views it builds are never touched). ``gguf`` imports numpy, so this module is imported only for a
``.gguf`` MODEL.

The layout mirrors llama.cpp's ``llama_model::load_hparams`` (``src/llama-model.cpp``) for the
architectures listed in :data:`ARCHITECTURES`; any other ``general.architecture`` is refused, because
llama.cpp hard-codes many layouts (sliding-window periods, recurrent layers) per architecture and
kvplan does not guess them:

- ``{arch}.block_count`` layers; ``{arch}.attention.head_count`` and ``head_count_kv`` (a scalar, or an
  array with one value per layer: a per-layer KV head count, 0 marking a recurrent layer in the
  hybrids); ``key_length`` / ``value_length`` (default ``embedding_length / head_count``), with
  ``key_length_swa`` / ``value_length_swa`` for sliding layers; ``context_length`` as max_model_len.
- Sliding layers, for the architectures llama.cpp gives SWA (:data:`SWA_ARCHS`; any other architecture is
  all full attention, as llama.cpp runs it, whatever ``sliding_window`` says):
  ``{arch}.attention.sliding_window`` tokens; which layers slide comes from
  ``{arch}.attention.sliding_window_pattern`` when the file has it (a per-layer bool array, or a period
  ``n``: layer ``i`` slides when ``i % n < n − 1``, llama.cpp's ``set_swa_pattern``), else from the period
  llama.cpp hard-codes for the architecture (Gemma 2: 2, Gemma 3: 6, Cohere2: 4, GPT-OSS: 2, ...).
- MLA (``deepseek2``): with ``attention.key_length_mla`` in the file (GGUFs converted for llama.cpp's
  MLA cache) each layer caches one latent of ``kv_lora_rank + rope.dimension_count``; without it llama.cpp
  caches per-head K and V of ``key_length`` / ``value_length`` for ``head_count_kv`` heads, and so does
  the spec.
- State layers (``ssm.*`` keys): Mamba-1 (``jamba``, and the pure ``mamba``), Mamba-2 (``granitehybrid``,
  ``nemotron_h``, the pure ``mamba2``), Gated DeltaNet (``qwen3next``) and LFM2's short convolutions
  (``lfm2``: ``shortconv.l_cache``, a layer with ``head_count_kv`` 0 is a convolution; src/models/lfm2.cpp);
  llama.cpp keeps recurrent states in f32 (``llama_memory_recurrent`` is created with ``GGML_TYPE_F32``),
  so the spec's state dtypes are fp32. A pure state-space GGUF (``mamba``, ``mamba2``) has no attention
  layer: its spec's attention fields (1 head of ``embedding_length``) are nominal.
- Layers without a cache of their own: Gemma 3n keeps KV in its first 20 layers (``n_layer_kv_from_start``
  is hard-coded 20, src/models/gemma3n.cpp:8), Gemma 4 in all but the last ``attention.shared_kv_layers``
  (src/models/gemma4.cpp:10); the later layers read an earlier one's (``num_kv_shared_layers``).
- Gemma 3 without ``sliding_window``, or with 0, is all full attention (src/models/gemma3.cpp:4-12:
  ``swa_type = NONE``); Gemma 4 requires ``sliding_window_pattern`` (an array) and the ``*_swa`` head dims.

The spec's dtype is fp16: llama.cpp caches K and V in f16 unless told otherwise (``--cache-type-k``,
``--cache-type-v``). The weight bytes are the sum over the tensor infos of ``n_elements × type size /
block size`` (quantized types included, ``gguf.GGML_QUANT_SIZES``), summed over every shard of a split
GGUF (``-00001-of-00003.gguf``); ``kvplan fit`` uses them unless ``--weights-dtype`` is given. The input
layer's tensors (``token_embd``, ``per_layer_token_embd``, ``pos_embd``, ``token_types``), which llama.cpp
keeps in host memory (src/llama-model.cpp:1603-1605; src/llama-arch.cpp:728-730, :921), are the spec's
``host_weights_bytes`` (less ``token_embd`` when there is no ``output.weight``: llama.cpp then puts a copy
on the output device). ``vocab_size`` is ``token_embd.weight``'s rows (its elements / ``embedding_length``),
else ``{arch}.vocab_size``, else the tokenizer's token count.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvplan.errors import SpecError

# Architectures whose every layer is full attention in llama.cpp's load_hparams (no SWA set).
# phi3: llama.cpp reads sliding_window but disables SWA ("Phi SWA is currently disabled").
FULL_ATTENTION_ARCHS = (
    "llama",
    "mistral3",
    "qwen",
    "qwen2",
    "qwen2moe",
    "qwen3",
    "qwen3moe",
    "phi2",
    "phi3",
    "openelm",
    "phimoe",
    "gemma",
    "command-r",
    "olmo",
    "olmoe",
    "granite",
    "granitemoe",
    "glm4",
    "deepseek",
    "internlm2",
    "exaone",
    "stablelm",
    "falcon",
    "gpt2",
    "gptneox",
    "starcoder",
    "starcoder2",
    "mpt",
    "bloom",
    "orion",
    "xverse",
    "refact",
    "baichuan",
    "dbrx",
    "seed_oss",
    "smollm3",
    "hunyuan-dense",
    "ernie4_5",
    "ernie4_5-moe",
)


@dataclass(frozen=True)
class _Swa:
    """llama.cpp's hard-coded sliding-window layout of one architecture.

    period: ``set_swa_pattern(period, dense_first)``; window: the default window (None: the file must give
    ``sliding_window``); fixed_window: llama.cpp overwrites the file's window with ``window``;
    only_if_window: SWA only when the file gives ``sliding_window > 0``; kind: ``sliding`` or ``chunked``;
    pattern_required: the file must give ``sliding_window_pattern`` as a per-layer array.
    """

    period: int
    window: int | None = None
    dense_first: bool = False
    fixed_window: bool = False
    only_if_window: bool = False
    kind: str = "sliding"
    pattern_required: bool = False


SWA_ARCHS: dict[str, _Swa] = {
    "gemma2": _Swa(2, window=4096),
    # gemma3: SWA only when sliding_window > 0 (src/models/gemma3.cpp:4-12), else every layer is full
    "gemma3": _Swa(6, only_if_window=True),
    "gemma3n": _Swa(5),  # src/models/gemma3n.cpp:4-5: load_swa_pattern(ml, 5); window required
    "gemma4": _Swa(0, pattern_required=True),  # src/models/gemma4.cpp:5-6: the pattern array is required
    # lfm2: with sliding_window > 0 every attention layer slides (src/models/lfm2.cpp:26-30)
    "lfm2": _Swa(0, only_if_window=True),
    "cohere2": _Swa(4),
    "gpt-oss": _Swa(2),
    "olmo2": _Swa(4, only_if_window=True),
    "smallthinker": _Swa(4, window=4096, dense_first=True, fixed_window=True, only_if_window=True),
    # llama4: chunked attention of 8,192 on 3 of 4 layers, unless the file says sliding_window = 0
    "llama4": _Swa(4, window=8192, fixed_window=True, kind="chunked"),
    # exaone4: only the 64-layer (32B) model has SWA (window 4,096 unless the file gives one)
    "exaone4": _Swa(4, window=4096),
}

MLA_ARCHS = ("deepseek2",)
# hybrids: which layers are recurrent, and the state kind of those layers
HYBRID_ARCHS: dict[str, str] = {
    "jamba": "mamba",  # recurrent iff head_count_kv[i] == 0
    "granitehybrid": "mamba2",  # recurrent iff head_count_kv[i] == 0
    "nemotron_h": "mamba2",  # recurrent iff head_count_kv[i] == 0 and feed_forward_length[i] == 0
    "qwen3next": "gdn",  # recurrent unless (i + 1) % 4 == 0 (llama.cpp's hard-coded interval)
    "lfm2": "short_conv",  # recurrent iff head_count_kv[i] == 0 (src/models/lfm2.cpp:11-13)
}
# pure state-space models: every layer recurrent, no attention (llm_arch_is_recurrent)
RECURRENT_ARCHS: dict[str, str] = {"mamba": "mamba", "mamba2": "mamba2"}
# layers from this index on keep no KV of their own (llama_hparams::n_layer_kv_from_start)
KV_FROM_START = {"gemma3n": 20}  # src/models/gemma3n.cpp:8 (hard-coded)
REFUSED = {
    "falcon-h1": "runs attention and Mamba-2 in parallel in every layer; kvplan reads that layout from its "
    "config.json (parallel_state), not yet from GGUF metadata",
}
ARCHITECTURES = tuple(sorted({*FULL_ATTENTION_ARCHS, *SWA_ARCHS, *MLA_ARCHS, *HYBRID_ARCHS, *RECURRENT_ARCHS}))

GGUF_MAGIC = b"GGUF"
_SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


def is_gguf(path: str | os.PathLike) -> bool:
    """True when ``path`` names a ``.gguf`` file, or a file starting with the GGUF magic."""
    p = Path(path)
    if p.suffix.lower() == ".gguf":
        return True
    try:
        with p.open("rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file, from its tensor info (no data read).

    Attributes:
        name: tensor name (``blk.0.attn_q.weight``).
        type_name: ggml type (``Q4_K``, ``F16`` ...).
        n_elements: elements (parameters).
        n_bytes: bytes in the file: ``n_elements × type size / block size``.
    """

    name: str
    type_name: str
    n_elements: int
    n_bytes: int


_READER_CLASS = None

# llama.cpp's limits on tensor infos (ggml/src/gguf.cpp gguf_init_from_file_impl, ggml.h): a name shorter than
# GGML_MAX_NAME bytes, at most GGML_MAX_DIMS dimensions.
GGML_MAX_NAME = 64
GGML_MAX_DIMS = 4
_MIN_TENSOR_INFO = 8 + 4 + 4 + 8  # name length, n_dims, type, offset: the smallest tensor info (bytes)
_MIN_KV = 8 + 4 + 1  # key length, value type, a 1-byte value: the smallest metadata entry (bytes)


class GGUFTensor:
    """One tensor info as :class:`_HeaderReader` reads it (the fields kvplan uses; no data view)."""

    __slots__ = ("name", "tensor_type", "n_elements", "n_bytes")

    def __init__(self, name: str, tensor_type, n_elements: int, n_bytes: int):
        self.name, self.tensor_type, self.n_elements, self.n_bytes = name, tensor_type, n_elements, n_bytes


def _reader_class(gguf):
    """``gguf.GGUFReader`` with llama.cpp's own checks and a cost bounded by the file's size.

    The stock reader builds one numpy view per array element (a Llama-3 GGUF's 128,256 tokens and 280,147
    merges take ~25 s), recurses into nested arrays, reads strings and counts past the end of the file
    without a word, and builds several numpy views per tensor info whatever ``tensor_count`` claims. This
    subclass:

    - keeps a numeric array as one view (``ReaderField.contents()`` returns the same list) and walks a
      string array's lengths without building its items (``contents()`` of such a field is then ``[]``;
      kvplan reads none: they are the tokenizer's);
    - refuses an array of arrays, as llama.cpp does (``gguf.cpp``: "has invalid GGUF type");
    - refuses a string, value, array, key count or tensor count that runs past the end of the file;
    - reads the tensor infos with ``struct`` (no data views) and checks them as llama.cpp's
      ``gguf_init_from_file_impl`` does: names shorter than 64 bytes and unique, at most 4 dimensions, a
      known ggml type, rows a whole number of blocks, each tensor's offset the padded end of the one
      before (``has offset X, expected Y``), and (as ``llama_model_loader``) the data within the file.

    Should a gguf release rename the methods it overrides, the stock reader is used as it is.
    """
    global _READER_CLASS
    if _READER_CLASS is not None:
        return _READER_CLASS
    import struct
    import sys

    import numpy as np

    base = gguf.GGUFReader
    needed = ("_get_field_parts", "gguf_scalar_to_np", "_get_str", "_build_fields", "_build_tensor_info",
              "_build_tensors")  # fmt: skip
    if not all(hasattr(base, name) for name in needed):
        _READER_CLASS = base
        return base
    array, string = gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING
    quant_sizes, quant_type = gguf.GGML_QUANT_SIZES, gguf.GGMLQuantizationType

    class _HeaderReader(base):
        def _order(self) -> str:
            file_little = (sys.byteorder == "little") != (self.byte_order == "S")  # "S": swapped vs the host
            return "<" if file_little else ">"

        def _get_str(self, offset):
            size = len(self.data)
            if offset + 8 > size:
                raise ValueError(f"a string length at byte {offset:,} runs past the end of the file ({size:,} B)")
            (length,) = struct.unpack_from(self._order() + "Q", self.data, offset)
            if length > size - offset - 8:
                raise ValueError(
                    f"a string at byte {offset:,} claims {length:,} B, past the end of the file ({size:,} B)"
                )
            return super()._get_str(offset)

        def _build_fields(self, offs, count):
            count = int(count)
            if count > (len(self.data) - offs) // _MIN_KV:
                raise ValueError(f"kv_count {count:,} cannot fit in the file's {len(self.data):,} B")
            return super()._build_fields(offs, count)

        def _get_field_parts(self, orig_offs, raw_type):
            gtype = gguf.GGUFValueType(raw_type)
            nptype = self.gguf_scalar_to_np.get(gtype)
            if nptype is not None:
                if orig_offs + np.dtype(nptype).itemsize > len(self.data):
                    raise ValueError(f"a metadata value at byte {orig_offs:,} runs past the end of the file")
                return super()._get_field_parts(orig_offs, raw_type)
            if gtype != array:
                return super()._get_field_parts(orig_offs, raw_type)
            offs = orig_offs
            raw_itype = self._get(offs, np.uint32)
            alen = self._get(offs + 4, np.uint64)
            if len(raw_itype) != 1 or len(alen) != 1:
                raise ValueError("metadata array runs past the end of the file")
            offs += 12
            itype = gguf.GGUFValueType(raw_itype[0])
            if itype == array:
                raise ValueError("a metadata array of arrays (llama.cpp refuses nested arrays)")
            n = int(alen[0])
            nptype = self.gguf_scalar_to_np.get(itype)
            types = [array, itype] if n else [array]
            if nptype is not None:
                if n > (len(self.data) - offs) // np.dtype(nptype).itemsize:
                    raise ValueError("metadata array runs past the end of the file")
                values = self._get(offs, nptype, n)
                return offs + int(values.nbytes) - orig_offs, [raw_itype, alen, values], [2] if n else [], types
            if itype == string:
                fmt = self._order() + "Q"
                size = len(self.data)
                if n > (size - offs) // 8:
                    raise ValueError("metadata string array runs past the end of the file")
                buf = memoryview(self.data)
                for _ in range(n):
                    if offs + 8 > size:
                        raise ValueError("metadata string array runs past the end of the file")
                    (length,) = struct.unpack_from(fmt, buf, offs)
                    offs += 8 + length
                if offs > size:
                    raise ValueError("metadata string array runs past the end of the file")
                return offs - orig_offs, [raw_itype, alen], [], types
            raise ValueError(f"a metadata array of unknown type {int(raw_itype[0])}")

        def _build_tensor_info(self, offs, count):
            count = int(count)
            size = len(self.data)
            if count > (size - offs) // _MIN_TENSOR_INFO:
                raise ValueError(f"tensor_count {count:,} cannot fit in the file's {size:,} B")
            order = self._order()
            u32, u64 = struct.Struct(order + "I"), struct.Struct(order + "Q")
            buf = memoryview(self.data)
            infos = []
            for i in range(count):
                if offs + 8 > size:
                    raise ValueError(f"tensor info {i} runs past the end of the file")
                (n,) = u64.unpack_from(buf, offs)
                if n >= GGML_MAX_NAME:
                    raise ValueError(f"tensor name {i} is {n:,} B long; llama.cpp allows at most {GGML_MAX_NAME - 1}")
                if offs + 8 + n + 4 > size:
                    raise ValueError(f"tensor info {i} runs past the end of the file")
                name = bytes(buf[offs + 8 : offs + 8 + n]).decode("utf-8")
                offs += 8 + n
                (n_dims,) = u32.unpack_from(buf, offs)
                if n_dims > GGML_MAX_DIMS:
                    raise ValueError(f"tensor {name!r} has {n_dims:,} dimensions; llama.cpp allows {GGML_MAX_DIMS}")
                offs += 4
                if offs + 8 * n_dims + 12 > size:
                    raise ValueError(f"tensor info {name!r} runs past the end of the file")
                dims = struct.unpack_from(f"{order}{n_dims}Q", buf, offs)
                offs += 8 * n_dims
                (raw_type,) = u32.unpack_from(buf, offs)
                (data_offset,) = u64.unpack_from(buf, offs + 4)
                offs += 12
                infos.append((name, dims, raw_type, data_offset))
            return offs, infos

        def _build_tensors(self, start_offs, fields):
            tensors = []
            seen = set()
            expected = 0  # llama.cpp: each tensor starts at the padded end of the one before
            align = int(self.alignment)
            for name, dims, raw_type, data_offset in fields:
                if name in seen:
                    raise ValueError(f"duplicate tensor name {name!r}")
                seen.add(name)
                try:
                    qtype = quant_type(raw_type)
                    block, type_size = quant_sizes[qtype]
                except (ValueError, KeyError):
                    raise ValueError(f"tensor {name!r} has an unknown ggml type {raw_type}") from None
                n_elements = 1
                for d in dims:
                    n_elements *= d
                if n_elements >= 1 << 63:
                    raise ValueError(f"tensor {name!r} has {n_elements:,} elements; llama.cpp allows < 2^63")
                if dims and dims[0] % block:
                    raise ValueError(f"tensor {name!r} ({qtype.name}) has rows of {dims[0]:,} elements, "
                                     f"not whole blocks of {block}")  # fmt: skip
                n_bytes = n_elements * type_size // block
                if data_offset != expected:
                    raise ValueError(f"tensor {name!r} has offset {data_offset:,}, expected {expected:,}")
                expected += -(-n_bytes // align) * align
                if start_offs + data_offset + n_bytes > len(self.data):
                    raise ValueError(
                        f"tensor {name!r} data ({n_bytes:,} B at {start_offs + data_offset:,}) is not within the "
                        f"file ({len(self.data):,} B)"
                    )
                tensors.append(GGUFTensor(name, qtype, n_elements, n_bytes))
            self.tensors = tensors

    _READER_CLASS = _HeaderReader
    return _READER_CLASS


def _open_reader(path: Path):
    """A ``gguf.GGUFReader`` on ``path`` (memory-mapped, read-only).

    Raises:
        SpecError: gguf is not installed, or the file is not a readable GGUF.
    """
    try:
        import gguf
    except ImportError:
        raise SpecError(
            f"{path}: reading a GGUF file needs the gguf package (a kvplan dependency): pip install gguf"
        ) from None
    if not path.is_file():
        raise SpecError(f"{path}: no such file" if not path.exists() else f"{path}: not a regular file")
    try:
        return _reader_class(gguf)(str(path), "r")
    except (
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        OSError,
        UnicodeDecodeError,
        OverflowError,
        RecursionError,
    ) as e:  # noqa: E501
        raise SpecError(f"{path}: not a readable GGUF file ({type(e).__name__}: {str(e)[:160]})") from None


def _metadata(reader, where: Path) -> dict[str, Any]:
    """Every metadata key except the tokenizer's (vocabularies are large and say nothing about the cache),
    plus the tokenizer's token count under :data:`TOKEN_COUNT_KEY`.

    Raises:
        SpecError: a value gguf cannot decode (a string that is not UTF-8), naming the file and key.
    """
    out: dict[str, Any] = {}
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is not None and len(tokens.parts) > 4:  # [key length, key, type, item type, count, items...]
        try:
            out[TOKEN_COUNT_KEY] = int(tokens.parts[4][0])
        except (IndexError, TypeError, ValueError):
            pass
    for key, field in reader.fields.items():
        if key.startswith(("tokenizer.", "GGUF.")):
            continue
        try:
            out[key] = field.contents()
        except (ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError, OverflowError) as e:
            raise SpecError(
                f"{where}: GGUF metadata key {key!r} is unreadable ({type(e).__name__}: {str(e)[:120]})"
            ) from None
    return out


def _tensors(reader) -> list[TensorInfo]:
    return [TensorInfo(t.name, t.tensor_type.name, int(t.n_elements), int(t.n_bytes)) for t in reader.tensors]


def read_gguf(path: str | os.PathLike) -> tuple[dict[str, Any], list[TensorInfo]]:
    """(metadata, tensor infos) of a GGUF file; for a split GGUF, the tensors of every shard.

    Only the header is parsed (the file is memory-mapped; tensor data is never read). Tokenizer keys
    are left out of the metadata.

    Raises:
        SpecError: gguf missing, an unreadable file, a split GGUF whose other shards are missing, or a tensor
            in two shards (llama.cpp's ``llama_model_loader``: "tensor '...' is duplicated").
    """
    p = Path(path)
    reader = _open_reader(p)
    meta = _metadata(reader, p)
    tensors = _tensors(reader)
    where = dict.fromkeys((t.name for t in tensors), p.name)
    count = meta.get("split.count")
    if isinstance(count, int) and count > 1:
        m = _SPLIT_RE.match(p.name)
        if m is None:
            raise SpecError(f"{p}: split.count={count} but the name is not NAME-0000k-of-{count:05d}.gguf")
        for no in range(1, count + 1):
            shard = p.with_name(f"{m['stem']}-{no:05d}-of-{count:05d}.gguf")
            if shard.name == p.name:
                continue
            if not shard.is_file():
                raise SpecError(f"{p}: split GGUF of {count} files but {shard.name} is missing beside it")
            for t in _tensors(_open_reader(shard)):
                if t.name in where:
                    raise SpecError(
                        f"{shard}: tensor {t.name!r} is in {where[t.name]} too; each tensor of a split GGUF is in "
                        'one shard (llama.cpp: "tensor is duplicated"): is a shard a copy of another?'
                    )
                where[t.name] = shard.name
                tensors.append(t)
    return meta, tensors


def load_gguf(path: str | os.PathLike, name: str | None = None):
    """Load a GGUF file as a :class:`~kvplan.specs.ModelSpec` (name: the file stem), weights from its tensors.

    Raises:
        SpecError: an unreadable file, an architecture kvplan does not know, missing or inconsistent keys.
    """
    p = Path(path)
    meta, tensors = read_gguf(p)
    if name is None:
        m = _SPLIT_RE.match(p.name)
        name = m["stem"] if m else p.stem
    return spec_from_gguf(meta, tensors, str(p), name)


# --- metadata -> spec -----------------------------------------------------------------------------


class _Meta:
    """Typed access to ``{arch}.*`` keys, naming the file and key in every error."""

    def __init__(self, meta: dict[str, Any], arch: str, where: str):
        self.meta, self.arch, self.where = meta, arch, where

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def has(self, suffix: str) -> bool:
        return self.key(suffix) in self.meta

    def raw(self, suffix: str, default: Any = None) -> Any:
        return self.meta.get(self.key(suffix), default)

    def error(self, suffix: str, problem: str) -> SpecError:
        """``FILE: arch.suffix problem`` (a problem that starts with ``=`` follows the key directly: ``=0 must``)."""
        sep = "" if problem.startswith("=") else " "
        return SpecError(f"{self.where}: {self.key(suffix)}{sep}{problem}")

    def int(self, suffix: str, default: Any = ..., minimum: int = 1) -> int | None:
        """A scalar integer key (``default`` when absent; required when no default)."""
        if not self.has(suffix):
            if default is ...:
                raise self.error(suffix, "is missing")
            return default
        v = self.raw(suffix)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.error(suffix, f"={v!r} must be an integer >= {minimum}")
        return v

    def per_layer(self, suffix: str, n_layer: int, default: Any = ...) -> list[int] | None:
        """A key that is a scalar or an array of one integer per layer, as a list of n_layer ints."""
        if not self.has(suffix):
            if default is ...:
                raise self.error(suffix, "is missing")
            return default
        v = self.raw(suffix)
        values = v if isinstance(v, list) else [v] * n_layer
        if len(values) != n_layer:
            raise self.error(suffix, f"has {len(values)} values but block_count is {n_layer}")
        for x in values:
            if isinstance(x, bool) or not isinstance(x, int) or x < 0:
                raise self.error(suffix, f"holds {x!r}; values must be integers >= 0")
        return list(values)


def _swa_layers(m: _Meta, n_layer: int, swa: _Swa | None) -> list[bool] | None:
    """Which layers slide: the file's sliding_window_pattern, else llama.cpp's period; None: no SWA."""
    if swa is None:
        return None  # llama.cpp reads no pattern for the architecture: every layer is full
    if swa.pattern_required and not isinstance(m.raw("attention.sliding_window_pattern"), list):
        raise m.error("attention.sliding_window_pattern", "is missing: llama.cpp requires it as a per-layer array")
    if m.has("attention.sliding_window_pattern"):
        pat = m.raw("attention.sliding_window_pattern")
        if isinstance(pat, list):
            if len(pat) != n_layer:
                raise m.error("attention.sliding_window_pattern", f"has {len(pat)} values but block_count is {n_layer}")
            return [bool(x) for x in pat]
        period = m.int("attention.sliding_window_pattern", minimum=0)
        dense_first = swa.dense_first
    else:
        period, dense_first = swa.period, swa.dense_first
    if dense_first:
        return [period == 0 or i % period != 0 for i in range(n_layer)]
    return [period == 0 or i % period < period - 1 for i in range(n_layer)]


def _state_block(m: _Meta, kind: str, n_embd: int = 0) -> dict[str, Any]:
    """The spec's state block of a hybrid's recurrent layers, from the ``ssm.*`` keys (LFM2:
    ``shortconv.l_cache``: llama.cpp's conv state is ``n_embd × (L_cache − 1)``, src/llama-hparams.cpp:214-217)."""
    f32 = {"conv_dtype": "fp32", "ssm_dtype": "fp32"}
    if kind == "short_conv":
        return {"short_conv": {"d_inner": n_embd, "d_conv": m.int("shortconv.l_cache"), **f32}}
    d_conv = m.int("ssm.conv_kernel")
    d_inner = m.int("ssm.inner_size")
    d_state = m.int("ssm.state_size")
    if kind == "mamba":
        return {"mamba": {"d_inner": d_inner, "d_conv": d_conv, "d_state": d_state, **f32}}
    heads = m.int("ssm.time_step_rank")
    groups = m.int("ssm.group_count")
    if d_inner % heads:
        raise m.error("ssm.inner_size", f"={d_inner} is not a multiple of ssm.time_step_rank={heads}")
    if kind == "mamba2":  # llama.cpp: n_head = ssm_dt_rank, head_dim = d_inner / n_head
        block = {"num_heads": heads, "head_dim": d_inner // heads, "d_state": d_state, "n_groups": groups}
        return {"mamba2": {**block, "d_conv": d_conv, **f32}}
    # gdn (qwen3next): k heads = ssm_n_group, v heads = ssm_dt_rank, head_k_dim = head_v_dim = ssm_d_state
    block = {"num_k_heads": groups, "num_v_heads": heads, "head_k_dim": d_state, "head_v_dim": d_state}
    return {"gdn": {**block, "d_conv": d_conv, **f32}}


def _recurrent(m: _Meta, arch: str, n_layer: int, kv: list[int]) -> list[str]:
    """Per layer: ``attn``, ``state`` or ``none``, as llama.cpp marks recurrent_layer_arr."""
    if arch == "qwen3next":
        interval = m.int("full_attention_interval", 4)
        return ["attn" if (i + 1) % interval == 0 else "state" for i in range(n_layer)]
    if arch == "nemotron_h":
        ff = m.per_layer("feed_forward_length", n_layer)
        return ["attn" if kv[i] else ("state" if ff[i] == 0 else "none") for i in range(n_layer)]
    if not any(kv):
        raise m.error("attention.head_count_kv", "is 0 on every layer: no attention layer")
    return ["attn" if kv[i] else "state" for i in range(n_layer)]


def spec_from_gguf(meta: dict[str, Any], tensors: list[TensorInfo], where: str, name: str):
    """Build a :class:`~kvplan.specs.ModelSpec` from GGUF metadata and tensor infos (see the module docstring).

    Raises:
        SpecError: no or an unknown ``general.architecture``, a missing or inconsistent key (the message
            names the file and the key).
    """
    from kvplan.specs import MAX_LAYERS, build_spec

    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise SpecError(f"{where}: no general.architecture in the GGUF metadata")
    if arch in REFUSED:
        raise SpecError(f"{where}: GGUF architecture {arch!r} {REFUSED[arch]}; write a spec YAML instead")
    if arch not in ARCHITECTURES:
        import difflib

        close = difflib.get_close_matches(arch, ARCHITECTURES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(
            f"{where}: GGUF architecture {arch!r}{hint}: kvplan does not know how llama.cpp lays out its cache "
            f"and will not guess; known: {', '.join(ARCHITECTURES)}; write a spec YAML instead"
        )
    m = _Meta(meta, arch, where)
    n_layer = m.int("block_count")
    if n_layer > MAX_LAYERS:  # before any per-layer list is built
        raise m.error("block_count", f"={n_layer} is more layers than kvplan handles ({MAX_LAYERS:,})")
    n_embd = m.int("embedding_length")
    n_ctx = m.int("context_length")
    if arch in RECURRENT_ARCHS:
        return _recurrent_spec(m, arch, n_layer, n_embd, n_ctx, where, name, meta, tensors)
    heads = m.per_layer("attention.head_count", n_layer)
    kv = m.per_layer("attention.head_count_kv", n_layer, heads)
    n_head0 = heads[0] or max(heads)
    if not n_head0:
        raise m.error("attention.head_count", "is 0 on every layer: no attention layer")
    head_dim = m.int("attention.key_length", None) or n_embd // n_head0
    v_head_dim = m.int("attention.value_length", None) or n_embd // n_head0
    num_q_heads = max(heads)
    data: dict[str, Any] = {
        "num_layers": n_layer,
        "num_q_heads": num_q_heads,
        "hidden_size": n_embd,
        "dtype": "fp16",
        "max_model_len": n_ctx,
    }
    notes = [f"GGUF general.architecture {arch}; KV f16 (llama.cpp's default --cache-type-k/-v)"]

    if arch in MLA_ARCHS and m.has("attention.key_length_mla"):
        rope = m.int("rope.dimension_count")
        mla: dict[str, Any] = {"kv_lora_rank": m.int("attention.kv_lora_rank"), "qk_rope_head_dim": rope}
        idx = m.int("attention.indexer.key_length", None)
        if idx:
            mla["index_head_dim"] = idx
        data.update(
            num_kv_heads=num_q_heads,  # nominal: MLA caches one latent, no per-head K/V
            head_dim=m.int("attention.key_length_mla"),
            v_head_dim=m.int("attention.value_length_mla", None) or v_head_dim,
            mla=mla,
        )
        notes.append("MLA: one latent of kv_lora_rank + rope.dimension_count per token and layer")
        return _finish(build_spec({"name": name, "source": where, **data, "notes": "; ".join(notes)}, where), tensors,
                       meta, arch)  # fmt: skip

    kinds: list[str]
    if arch in HYBRID_ARCHS:
        roles = _recurrent(m, arch, n_layer, kv)
        state_kind = HYBRID_ARCHS[arch]
        data.update(_state_block(m, state_kind, n_embd))
        kinds = ["full" if r == "attn" else (state_kind if r == "state" else "none") for r in roles]
    else:
        kinds = ["full"] * n_layer
    attn = [i for i, k in enumerate(kinds) if k == "full"]
    if not attn:
        why = "full_attention_interval" if arch == "qwen3next" else "attention.head_count_kv"
        raise m.error(why, f"leaves no attention layer among block_count={n_layer} layers")
    for i in attn:
        if kv[i] == 0:
            raise m.error("attention.head_count_kv", f"is 0 for attention layer {i}")

    swa = SWA_ARCHS.get(arch)
    window = m.int("attention.sliding_window", None, minimum=0)
    if swa is not None and arch == "llama4" and window == 0:
        swa = None  # llama.cpp: sliding_window = 0 switches llama4's chunked attention off
    if swa is not None and arch == "exaone4" and n_layer != 64 and not m.has("attention.sliding_window_pattern"):
        swa = None  # llama.cpp sets SWA for the 64-layer exaone4 only
    if swa is not None and swa.only_if_window and not window:
        swa = None
    sliding = _swa_layers(m, n_layer, swa)
    if sliding is not None and any(sliding[i] for i in attn):
        kind = swa.kind
        if swa.fixed_window or window is None:
            window = swa.window
        if not window:
            raise m.error("attention.sliding_window", "is missing or 0 but layers slide")
        data["sliding_window" if kind == "sliding" else "attention_chunk_size"] = window
        for i in attn:
            if sliding[i]:
                kinds[i] = kind
        k_swa = m.int("attention.key_length_swa", None)
        v_swa = m.int("attention.value_length_swa", None)
        if kind == "sliding" and (k_swa or v_swa):
            data["geometry"] = {"sliding": {"head_dim": k_swa or head_dim, "v_head_dim": v_swa or k_swa or v_head_dim}}
    attn_kv = sorted({kv[i] for i in attn})
    data.update(num_kv_heads=kv[attn[0]], head_dim=head_dim, v_head_dim=v_head_dim)
    if len(attn_kv) > 1:
        data["per_layer"] = {"num_kv_heads": [kv[i] if kinds[i] != "none" and kv[i] else None for i in range(n_layer)]}
    if len({heads[i] for i in attn}) > 1:  # OpenELM: query heads per layer too
        data.setdefault("per_layer", {})["num_q_heads"] = [heads[i] if i in attn else None for i in range(n_layer)]
    shared = _shared_layers(m, arch, n_layer)
    if shared:
        data["num_kv_shared_layers"] = shared
        notes.append(f"the last {shared} layers keep no KV of their own (llama.cpp n_layer_kv_from_start)")
    data["layers"] = kinds
    return _finish(build_spec({"name": name, "source": where, **data, "notes": "; ".join(notes)}, where), tensors,
                   meta, arch)  # fmt: skip


def _shared_layers(m: _Meta, arch: str, n_layer: int) -> int:
    """Layers at the end that read an earlier layer's KV: Gemma 3n's past its hard-coded 20, Gemma 4's
    ``attention.shared_kv_layers`` (llama.cpp ``n_layer_kv_from_start``; it asserts at least 2 layers keep KV,
    src/llama-model.cpp:2781)."""
    if arch in KV_FROM_START:
        shared = max(0, n_layer - KV_FROM_START[arch])
    elif arch == "gemma4":
        shared = m.int("attention.shared_kv_layers", 0, minimum=0)
    else:
        return 0
    if shared and n_layer - shared < 2:
        raise m.error("attention.shared_kv_layers", f"={shared} leaves fewer than 2 of {n_layer} layers with KV")
    return shared


def _recurrent_spec(m: _Meta, arch: str, n_layer: int, n_embd: int, n_ctx: int, where: str, name: str, meta, tensors):
    """A pure state-space GGUF (Mamba, Mamba-2): every layer recurrent (llama.cpp ``llm_arch_is_recurrent``:
    ``llama_memory_recurrent`` of f32 r and s rows, src/llama-model.cpp:2669-2677); the attention fields are
    nominal (one head of ``embedding_length``)."""
    from kvplan.specs import build_spec

    kind = RECURRENT_ARCHS[arch]
    data = {
        "num_layers": n_layer,
        "num_q_heads": 1,
        "num_kv_heads": 1,
        "head_dim": n_embd,
        "hidden_size": n_embd,
        "dtype": "fp16",
        "max_model_len": n_ctx,
        "layers": [kind] * n_layer,
        **_state_block(m, kind, n_embd),
    }
    notes = f"GGUF general.architecture {arch}: every layer recurrent (f32 states), no attention layer"
    return _finish(build_spec({"name": name, "source": where, **data, "notes": notes}, where), tensors, meta, arch)


# llama.cpp's input-layer tensors (LLM_TENSOR_LAYER_INPUT, src/llama-arch.cpp:728-730, :921), kept on the host
INPUT_TENSORS = ("token_embd.weight", "per_layer_token_embd.weight", "pos_embd.weight", "token_types.weight")
TOKEN_COUNT_KEY = "kvplan.tokenizer_token_count"  # kvplan's own key: the length of tokenizer.ggml.tokens


def _vocab_size(meta: dict[str, Any], tensors: list[TensorInfo], arch: str, n_embd: int | None) -> int | None:
    """Rows of ``token_embd.weight`` (``{n_embd, n_vocab}``), else ``{arch}.vocab_size``, else the tokenizer's
    token count (llama.cpp's ``n_vocab`` is ``vocab.n_tokens()``); None when none is there."""
    for t in tensors:
        if t.name == "token_embd.weight" and n_embd and t.n_elements % n_embd == 0:
            return t.n_elements // n_embd
    for key in (f"{arch}.vocab_size", TOKEN_COUNT_KEY):
        v = meta.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _finish(spec, tensors: list[TensorInfo], meta: dict[str, Any] | None = None, arch: str = ""):
    """The spec with its vocabulary, exact weight bytes and parameter count from the tensor infos, and the
    bytes llama.cpp keeps in host memory (its input layer)."""
    vocab = _vocab_size(meta or {}, tensors, arch, spec.hidden_size)
    if vocab is not None:
        spec = replace(spec, vocab_size=vocab)
    if not tensors:
        return spec
    names = {t.name for t in tensors}
    tied = "output.weight" not in names  # token_embd doubles as the output: a copy sits on the output device
    host = sum(t.n_bytes for t in tensors if t.name in INPUT_TENSORS and not (tied and t.name == "token_embd.weight"))
    return replace(
        spec,
        param_count=sum(t.n_elements for t in tensors),
        weights_bytes=sum(t.n_bytes for t in tensors),
        host_weights_bytes=host,
    )


def weight_bytes_by_type(tensors: list[TensorInfo]) -> dict[str, int]:
    """Bytes per ggml type (``{"Q4_K": ..., "F32": ...}``), largest first."""
    out: dict[str, int] = {}
    for t in tensors:
        out[t.type_name] = out.get(t.type_name, 0) + t.n_bytes
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
