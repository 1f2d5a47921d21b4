"""A real, preallocated (static) KV cache for a :class:`~kvplan.specs.ModelSpec`, in torch.

One :class:`LayerCache` per layer, allocated once at construction from that layer's own
:class:`~kvplan.specs.LayerSpec`; prefill and decode write into it in place (``copy_`` / ``index_copy_``),
never growing it or concatenating. Per layer kind, for a batch of B requests of at most S tokens (the
layer's own ``h = H_kv``, ``d = head_dim``, ``d_v = v_head_dim``):

================  ==========================================================================================
kind              tensors (``# shape``, dtype)
================  ==========================================================================================
full              ``k`` [B, h, S, d], ``v`` [B, h, S, d_v] in the KV dtype
sliding           ``k`` [B, h, W, d], ``v`` [B, h, W, d_v], W = min(S, window): a ring, token p in slot p % W
chunked           the same ring with W = min(S, attention_chunk_size)
mla               ``latent`` [B, S, kv_lora_rank + qk_rope_head_dim] (one latent, no V; DeepSeek-V2 §2.1),
                  plus ``index_k`` [B, S, index_head_dim] with a DeepSeek-V3.2 indexer, in the KV dtype
mamba             ``conv`` [B, d_conv − 1, d_inner], ``ssm`` [B, d_inner, d_state]
mamba2            ``conv`` [B, d_conv − 1, H·P + 2·G·N], ``ssm`` [B, H, P, N]
gdn               ``conv`` [B, d_conv − 1, 2·Hk·dk + Hv·dv], ``ssm`` [B, Hv, dk, dv]
short_conv        ``conv`` [B, d_conv − 1, d_inner]
linear_attention  ``ssm`` [B, H, d, d]
shared            nothing: reads layer ``shared_from``'s tensors (:meth:`StaticKVCache.read` follows it)
none              nothing
================  ==========================================================================================

State shapes are exactly :meth:`kvplan.specs.StateConfig.tensors` (vLLM ``MambaStateShapeCalculator``,
TP = 1) with a batch dimension in front, each in its own dtype (``conv_dtype`` / ``ssm_dtype``, default
the model dtype), whatever the KV dtype.

KV dtypes torch has no type for (``q8_0``, ``q4_0``, ``nvfp4``, ``int8``/``fp8_per_token_head`` with their
fp32 scales, see :attr:`kvplan.dtypes.KVDtype.torch_name`) are stored as ``uint8`` rows of exactly
:meth:`~kvplan.dtypes.KVDtype.row_bytes` bytes per token: ``k`` [B, S, row(h·d, h)] and ``v`` [B, S, row(h·d_v, h)]
(``latent`` [B, S, row(576)], ``index_k`` [B, S, row(index_head_dim)]); a state tensor in such a dtype is
one uint8 row [B, bytes_for(elements)] under its own name.

The bytes allocated equal :func:`kvplan.calc.estimate` ``(spec, S, B, kv_dtype).total_bytes`` exactly (for
the same layers), layer by layer (:meth:`StaticKVCache.layer_formula_bytes`): each tensor above is one row
of that formula times B (and tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvplan.calc import TOKEN_KINDS, layer_groups, layer_state_bytes, layer_token_bytes, resolve_kv_dtype, tokens_cached
from kvplan.dtypes import KVDtype, get_kv_dtype
from kvplan.errors import UsageError
from kvplan.specs import KV_HEAD_KINDS, STATE_KINDS, LayerSpec, ModelSpec

RING_KINDS = ("sliding", "chunked")
KV_KINDS = KV_HEAD_KINDS  # full, sliding, chunked: per-head K and V


def torch_dtype_of(dtype: KVDtype) -> torch.dtype | None:
    """The torch dtype a KV dtype is stored in, or None when it is stored as packed ``uint8`` rows."""
    if dtype.torch_name is None:
        return None
    return getattr(torch, dtype.torch_name, None)


def ring_positions(end: int, capacity: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Absolute position held by each slot of a ring of ``capacity`` slots after tokens 0..end−1 were written.

    Slot ``s`` holds the latest position ``p < end`` with ``p % capacity == s``, i.e.
    ``(end − 1) − ((end − 1 − s) mod capacity)``, or −1 when no such token was written yet.

    Returns:
        int64 tensor [capacity].
    """
    last = end - 1
    s = torch.arange(capacity, device=device)
    pos = last - torch.remainder(last - s, capacity)
    return torch.where(pos >= 0, pos, torch.full_like(pos, -1))


def _index_copy(dst: torch.Tensor, dim: int, idx: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.index_copy_(dim, idx, src)`` in place, for every dtype the cache stores.

    torch implements ``index_copy_`` for neither float8 dtype (``Float8_e4m3fn``, ``Float8_e5m2``) on CPU
    (nor on every CUDA build), so one-byte dtypes other than ``uint8`` are copied bit for bit through a
    ``uint8`` view of both tensors (same element size, so the view keeps shapes and strides; ``src`` must
    already be in ``dst``'s dtype).
    """
    if dst.element_size() == 1 and dst.dtype not in (torch.uint8, torch.int8, torch.bool):
        dst.view(torch.uint8).index_copy_(dim, idx, src.view(torch.uint8))
    else:
        dst.index_copy_(dim, idx, src)


@dataclass
class LayerCache:
    """The cache of one layer.

    Attributes:
        index: layer index in the model.
        kind: layer kind (see :data:`kvplan.specs.LAYER_KINDS`).
        capacity: token slots per request (S, or min(S, window) for a ring); 0 for state, shared and none.
        window: the sliding window or attention chunk (tokens) of a ring layer, else None.
        packed: True when stored as uint8 rows (no torch dtype for the KV or state dtype).
        tensors: name → tensor (``k``/``v``, ``latent``/``index_k``, ``conv``/``ssm``), shapes in the module
            doc; empty for shared and none layers.
        spec: the layer's :class:`~kvplan.specs.LayerSpec` (its own geometry).
        source: for a shared layer, the index of the layer whose tensors it reads (None: unknown); else None.
    """

    index: int
    kind: str
    capacity: int
    window: int | None
    packed: bool
    tensors: dict[str, torch.Tensor]
    spec: LayerSpec | None = None
    source: int | None = None

    @property
    def ring(self) -> bool:
        """True for sliding/chunked layers: token p lives in slot p % capacity."""
        return self.kind in RING_KINDS

    @property
    def nbytes(self) -> int:
        """Bytes this layer's tensors hold (Python int)."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


class StaticKVCache:
    """A preallocated KV cache for ``batch_size`` requests of up to ``seq_len`` tokens of ``spec``.

    Args:
        spec: the model.
        seq_len: S_max, tokens per request (>= 1).
        batch_size: B, requests (>= 1).
        kv_dtype: KV dtype name or object; None / ``auto`` = the model dtype.
        device: torch device (``cpu``, ``cuda``, ``cuda:1`` ...).
        layers: allocate only the first N layers (N in 1..num_layers); None = all.
        fill: when not None, write this byte value into every byte after allocating, so every page is
            resident (``torch.empty`` pages are not, on CPU, until written).

    Attributes:
        layers: one :class:`LayerCache` per allocated layer (shared and none layers included, with no tensors).
        kv_dtype: the :class:`~kvplan.dtypes.KVDtype` of attention caches (states keep their own dtypes).

    Raises:
        UsageError: seq_len/batch_size < 1, layers out of range, unknown dtype.
        torch.OutOfMemoryError / RuntimeError: the device cannot hold it (check free memory first:
            :mod:`kvplan.verify` does).
    """

    def __init__(
        self,
        spec: ModelSpec,
        seq_len: int,
        batch_size: int = 1,
        kv_dtype: str | KVDtype | None = None,
        *,
        device: torch.device | str = "cpu",
        layers: int | None = None,
        fill: int | None = None,
    ) -> None:
        for flag, value in (("--seq", seq_len), ("--batch", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{flag}: {value!r} must be an integer >= 1")
        n = spec.num_layers if layers is None else layers
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= spec.num_layers:
            raise UsageError(f"--layers: {layers!r} must be an integer in 1..{spec.num_layers} ({spec.name})")
        self.spec = spec
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.num_layers = n
        self.device = torch.device(device)
        self.kv_dtype = resolve_kv_dtype(spec, kv_dtype)
        self.layers: list[LayerCache] = [self._allocate(i) for i in range(n)]
        if fill is not None:
            self.fill_(fill)

    # --- allocation ----------------------------------------------------------------------------------

    def _empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device=self.device)

    def _allocate(self, i: int) -> LayerCache:
        """Allocate layer ``i`` from its own :class:`~kvplan.specs.LayerSpec` (shapes in the module doc)."""
        B, S = self.batch_size, self.seq_len
        ls = self.spec.layers[i]
        kind = ls.kind
        tdt = torch_dtype_of(self.kv_dtype)
        packed = tdt is None
        row = self.kv_dtype.row_bytes
        if kind in KV_KINDS:
            window = ls.window if kind in RING_KINDS else None
            cap = tokens_cached(S, window)
            h, d, d_v = ls.num_kv_heads, ls.head_dim, ls.v_head_dim
            if packed:
                tensors = {
                    "k": self._empty((B, cap, row(h * d, h)), torch.uint8),  # (B, S|W, row(H_kv·d))
                    "v": self._empty((B, cap, row(h * d_v, h)), torch.uint8),  # (B, S|W, row(H_kv·d_v))
                }
            else:
                tensors = {
                    "k": self._empty((B, h, cap, d), tdt),  # (B, H_kv, S|W, d)
                    "v": self._empty((B, h, cap, d_v), tdt),  # (B, H_kv, S|W, d_v)
                }
            if ls.state is not None:  # parallel_state: a Mamba-2 mixer beside the attention (Falcon-H1, Zamba2)
                state, _ = self._state_tensors(ls.state)
                tensors.update(state)
            return LayerCache(i, kind, cap, window, packed, tensors, ls)
        if kind == "mla":
            assert ls.mla is not None  # guaranteed by build_spec
            widths = {"latent": ls.mla.latent_dim}  # kv_lora_rank + qk_rope_head_dim
            if ls.mla.index_head_dim:
                widths["index_k"] = ls.mla.index_head_dim  # DeepSeek-V3.2 sparse-attention indexer key
            if packed:
                tensors = {n: self._empty((B, S, row(w, 1)), torch.uint8) for n, w in widths.items()}  # (B, S, row)
            else:
                tensors = {n: self._empty((B, S, w), tdt) for n, w in widths.items()}  # (B, S, width)
            return LayerCache(i, kind, S, None, packed, tensors, ls)
        if kind in STATE_KINDS:
            assert ls.state is not None  # guaranteed by build_spec
            tensors, packed = self._state_tensors(ls.state)
            return LayerCache(i, kind, 0, None, packed, tensors, ls)
        # shared: reads layer shared_from's cache; none: MLP/MoE-only block. Neither allocates anything.
        return LayerCache(i, kind, 0, None, False, {}, ls, source=ls.shared_from if kind == "shared" else None)

    def _state_tensors(self, state) -> tuple[dict[str, torch.Tensor], bool]:
        """A state's tensors, each in its own dtype: ``(B, *shape)``; (True when one had to be packed)."""
        tensors, packed = {}, False
        for t in state.tensors(self.spec.dtype, tp=1):
            dt = get_kv_dtype(t.dtype)
            sdt = torch_dtype_of(dt)
            if sdt is None:  # a state dtype torch cannot hold: one uint8 row per request
                tensors[t.name] = self._empty((self.batch_size, dt.bytes_for(t.elements)), torch.uint8)  # (B, bytes)
                packed = True
            else:
                tensors[t.name] = self._empty((self.batch_size, *t.shape), sdt)  # (B, *MambaStateShapeCalculator)
        return tensors, packed

    # --- accounting -------------------------------------------------------------------------------------

    def tensors(self) -> list[torch.Tensor]:
        """Every allocated tensor, layer by layer."""
        return [t for layer in self.layers for t in layer.tensors.values()]

    @property
    def num_tensors(self) -> int:
        """Number of allocated tensors (the allocator rounds each one separately)."""
        return len(self.tensors())

    @property
    def nbytes(self) -> int:
        """Bytes allocated for the cache: sum of ``numel × element_size`` over every tensor (int)."""
        return sum(layer.nbytes for layer in self.layers)

    def formula_bytes(self) -> int:
        """:func:`kvplan.calc` bytes for the same layers, S, B and dtype (what :attr:`nbytes` must equal)."""
        groups = layer_groups(self.spec, self.seq_len, self.kv_dtype, layers=range(self.num_layers))
        return sum(g.bytes for g in groups) * self.batch_size

    def layer_formula_bytes(self, index: int) -> int:
        """:mod:`kvplan.calc` bytes of layer ``index`` for the whole batch (what its tensors must hold).

        ``(layer_token_bytes × tokens_cached(S, window of its kind) + layer_state_bytes) × B``, with the
        window the spec gives the kind (:meth:`~kvplan.specs.ModelSpec.window_of`), as :func:`layer_groups`.
        """
        ls = self.spec.layers[index]
        tokens = tokens_cached(self.seq_len, self.spec.window_of(ls.kind)) if ls.kind in TOKEN_KINDS else 0
        per_request = layer_token_bytes(ls, self.kv_dtype) * tokens + layer_state_bytes(ls, self.spec.dtype)
        return per_request * self.batch_size

    def mismatched_layers(self) -> list[tuple[int, int, int]]:
        """(index, allocated bytes, formula bytes) of every layer whose tensors differ from the formula."""
        out = []
        for layer in self.layers:
            want = self.layer_formula_bytes(layer.index)
            if layer.nbytes != want:
                out.append((layer.index, layer.nbytes, want))
        return out

    def source_of(self, index: int) -> LayerCache:
        """The layer whose tensors layer ``index`` reads: itself, or for a shared layer its ``shared_from``.

        Raises:
            ValueError: a shared layer whose source is unknown or not an earlier layer with a cache.
        """
        layer = self.layers[index]
        if layer.kind != "shared":
            return layer
        src = layer.source
        if src is None or not 0 <= src < index or not self.layers[src].tensors:
            raise ValueError(f"layer {index} is shared but its source layer ({src}) holds no earlier cache")
        return self.layers[src]

    def data_ptrs(self) -> tuple[int, ...]:
        """Addresses of every tensor's storage (unchanged by writes when the cache does not grow)."""
        return tuple(t.data_ptr() for t in self.tensors())

    def fill_(self, value: int = 0) -> StaticKVCache:
        """Write byte ``value`` (0..255) into every byte of every tensor (makes the pages resident)."""
        for t in self.tensors():
            t.view(torch.uint8).fill_(value)
        return self

    # --- writes and reads ---------------------------------------------------------------------------

    def _slots(self, layer: LayerCache, start: int, T: int) -> tuple[int, int, torch.Tensor | None]:
        """(first token kept, tokens kept, ring slot indices or None) for writing positions start..start+T−1."""
        if start < 0 or T < 1:
            raise ValueError(f"layer {layer.index}: write of {T} tokens at position {start}")
        if start + T > self.seq_len:
            raise ValueError(
                f"layer {layer.index}: writing positions {start}..{start + T - 1} exceeds the cache's "
                f"{self.seq_len} tokens (a static cache does not grow)"
            )
        if not layer.ring:
            return 0, T, None
        skip = max(0, T - layer.capacity)  # only the last `capacity` tokens survive in a ring
        idx = torch.arange(start + skip, start + T, device=self.device) % layer.capacity
        return skip, T - skip, idx

    def write(
        self, index: int, start: int, k: torch.Tensor, v: torch.Tensor | None = None, *, batch_start: int = 0
    ) -> None:
        """Store tokens ``start .. start+T−1`` of layer ``index`` in place (casting to the cache dtype).

        Shapes: full/sliding/chunked: k [b, H_kv, T, d], v [b, H_kv, T, d_v] (packed: uint8 rows
        k [b, T, row_k], v [b, T, row_v]); mla: k = latent [b, T, kv_lora_rank + qk_rope_head_dim] and
        v = the indexer keys [b, T, index_head_dim] of a layer with an indexer, or None to leave them
        (packed: [b, T, row] each). The b rows are requests ``batch_start .. batch_start+b−1``.
        Ring layers keep the last ``capacity`` tokens, token p in slot p % capacity.

        Raises:
            ValueError: a state/shared/none layer (a shared layer's source writes; its readers follow),
                indexer keys for an MLA layer without an indexer, a write past seq_len or the batch, or
                a shape mismatch.
        """
        layer = self.layers[index]
        if layer.kind not in KV_KINDS and layer.kind != "mla":
            where = f" (write layer {layer.source}, whose cache it reads)" if layer.kind == "shared" else ""
            raise ValueError(f"layer {index} is {layer.kind}: it has no token cache to write{where}")
        if layer.kind == "mla":
            if v is not None and "index_k" not in layer.tensors:
                raise ValueError(f"layer {index}: indexer keys given but the layer has no index_head_dim")
            names, values = ("latent", "index_k"), (k, v)
        else:
            names, values = ("k", "v"), (k, v)
        token_dim = 1 if (layer.packed or layer.kind == "mla") else 2
        T = k.shape[token_dim]
        b = k.shape[0]
        if batch_start < 0 or batch_start + b > self.batch_size:
            raise ValueError(
                f"layer {index}: requests {batch_start}..{batch_start + b - 1} outside the batch of {self.batch_size}"
            )
        skip, kept, idx = self._slots(layer, start, T)
        for name, src in zip(names, values, strict=True):
            if name == "index_k" and src is None:
                continue  # MLA: the indexer keys are optional in a write
            dst = layer.tensors[name].narrow(0, batch_start, b)
            if src is None or src.dim() != dst.dim() or src.shape[token_dim] != T or src.shape[0] != b:
                raise ValueError(
                    f"layer {index}: {name} must be {dst.dim()}-D with {b} requests and {T} tokens on dim {token_dim}"
                )
            src = src.narrow(token_dim, skip, kept)
            if idx is None:
                dst.narrow(token_dim, start, kept).copy_(src)
            else:
                _index_copy(dst, token_dim, idx, src.to(dst.dtype))

    def read(self, index: int, end: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Views of what attention reads after tokens 0..end−1 of layer ``index`` were written (no copy).

        A shared layer reads its source layer's tensors (:meth:`source_of`): the views returned are of
        that layer's storage.

        Returns:
            (k, v, positions): full: k [B, H_kv, end, d], v [B, H_kv, end, d_v], positions [end] = 0..end−1;
            ring: the whole ring k [B, H_kv, W, d], v [B, H_kv, W, d_v], positions [W] from
            :func:`ring_positions` (−1 for an empty slot; mask those); mla: k = latent viewed as
            [B, 1, end, kv_lora_rank + qk_rope_head_dim] and v = its first kv_lora_rank columns
            [B, 1, end, kv_lora_rank] (absorbed MLA is MQA over the latent).

        Raises:
            ValueError: a packed, state or none layer, a shared layer without a source, or end out of
                1..seq_len.
        """
        layer = self.source_of(index)
        if layer.packed or layer.kind not in (*KV_KINDS, "mla"):
            raise ValueError(f"layer {index} ({layer.kind}, packed={layer.packed}) cannot be read for attention")
        if not 1 <= end <= self.seq_len:
            raise ValueError(f"layer {index}: end={end} must be in 1..{self.seq_len}")
        if layer.kind == "mla":
            assert layer.spec is not None and layer.spec.mla is not None
            lat = layer.tensors["latent"][:, :end].unsqueeze(1)  # (B, 1, end, kv_lora_rank + qk_rope_head_dim)
            pos = torch.arange(end, device=self.device)
            return lat, lat[..., : layer.spec.mla.kv_lora_rank], pos
        k, v = layer.tensors["k"], layer.tensors["v"]
        if layer.ring:
            return k, v, ring_positions(end, layer.capacity, self.device)
        return k[:, :, :end], v[:, :, :end], torch.arange(end, device=self.device)

    def read_index(self, index: int, end: int) -> torch.Tensor:
        """View of the DeepSeek-V3.2 indexer keys of MLA layer ``index`` for tokens 0..end−1 (no copy).

        Returns:
            [B, end, index_head_dim] (packed: [B, end, row]).

        Raises:
            ValueError: the layer has no indexer, or end out of 1..seq_len.
        """
        layer = self.layers[index]
        if "index_k" not in layer.tensors:
            raise ValueError(f"layer {index} ({layer.kind}) has no indexer keys")
        if not 1 <= end <= self.seq_len:
            raise ValueError(f"layer {index}: end={end} must be in 1..{self.seq_len}")
        return layer.tensors["index_k"][:, :end]  # (B, end, index_head_dim)
