"""Weights per GPU: the bytes a checkpoint puts on each GPU of a replica. Pure, exact ints.

``weights = ceil(weight bytes / (TP × PP))`` where weight bytes come from the checkpoint's own headers
(GGUF tensor infos, safetensors headers) when kvplan read them, else from the parameter count and the
weights dtype (:mod:`kvplan.dtypes`).
"""

from __future__ import annotations

from kvplan.calc import cdiv
from kvplan.dtypes import get_weight_dtype
from kvplan.errors import UsageError
from kvplan.specs import ModelSpec


def no_param_count_message(spec: ModelSpec, weights_dtype: str | None = None) -> str:
    """The one-line error for weights that cannot be sized: what is missing and what fixes it, told apart
    for a bundled name, a user's spec YAML, a checkpoint whose bytes but not parameters are known (with
    ``weights_dtype``), a safetensors index that does not tell the weights (``spec.weights_note``), a GGUF
    without tensor infos, and a config.json (local or from the Hub)."""
    from pathlib import Path

    from kvplan.data import bundled_specs_dir

    fix = "give --weights-gib (weights per GPU)"
    origin = spec.origin or spec.source
    if spec.weights_bytes is not None and weights_dtype is not None:
        return (
            f"{spec.name}: the checkpoint's weights are known in bytes ({spec.weights_bytes:,} B) but not in "
            f"parameters, so --weights-dtype {weights_dtype} cannot re-size them; drop --weights-dtype, or {fix}"
        )
    if spec.weights_note:  # a safetensors index was found but does not tell the weights
        return f"{spec.name}: {spec.weights_note}, so weights are unknown; {fix}, or write a spec YAML with param_count"
    if origin.lower().endswith(".gguf"):
        return f"{spec.name}: {origin} has no tensor infos (metadata only), so weights are unknown; {fix}"
    if not origin.lower().endswith((".json", ".gguf")) and "://" not in origin:  # a spec YAML
        if Path(origin).resolve().parent == bundled_specs_dir().resolve():
            return f"{spec.name}: the bundled spec gives no param_count, so weights are unknown; {fix}"
        return (
            f"{spec.name}: {origin} gives no param_count, so weights are unknown; add param_count (total "
            f"parameters) to that spec YAML, or {fix}"
        )
    return (
        f"{spec.name}: a config.json gives no parameter count and no safetensors weights were found with it "
        f"(model.safetensors or model.safetensors.index.json), so weights are unknown; {fix}, or write a spec "
        "YAML with param_count"
    )


def weights_per_gpu(spec: ModelSpec, weights_dtype: str | None, tp: int, pp: int) -> tuple[int, str]:
    """(bytes of weights on one GPU, dtype name): ``ceil(weight bytes / (TP × PP))``.

    Weight bytes = ``(param_count − param_count_unquantized) × weights dtype`` +
    ``param_count_unquantized × model dtype`` when the weights dtype differs from the model's (checkpoints
    keep embeddings, and for MXFP4 MoE models attention and router, in 16 bit); else
    ``param_count × weights dtype``. The weights dtype is ``weights_dtype`` if given, else the spec's
    ``weights_dtype`` (how the checkpoint ships), else the model dtype. A spec with ``weights_bytes`` (read
    from a GGUF's tensor infos or safetensors headers) uses those exact bytes unless ``weights_dtype`` is
    given; the dtype name is then ``checkpoint``.

    Raises:
        UsageError: the spec has no param_count (give --weights-gib; the message says what else fixes it
            for a bundled name, a spec YAML, a config.json or a checkpoint), or an unknown dtype.
    """
    if spec.weights_bytes is not None and weights_dtype is None:  # exact, from a GGUF's or safetensors' headers
        return cdiv(spec.weights_bytes, tp * pp), "checkpoint"
    model_wd = get_weight_dtype(spec.dtype)
    wd = get_weight_dtype(weights_dtype or spec.weights_dtype or spec.dtype)
    if spec.param_count is None:
        raise UsageError(no_param_count_message(spec, weights_dtype))
    kept = spec.param_count_unquantized if wd.bits != model_wd.bits else 0
    total = wd.bytes_for(spec.param_count - kept) + model_wd.bytes_for(kept)
    return cdiv(total, tp * pp), wd.name


def expert_split_weights(spec: ModelSpec, weights_dtype: str | None, par) -> tuple[int, str]:
    """(bytes of weights on the fullest GPU, dtype name) when a replica splits the routed experts differently
    from the rest of the model (:class:`kvplan.options.Parallel`: expert or attention data parallelism).

    The routed experts (``moe.routed_param_count`` parameters) are split over ``par.ep`` GPUs, whole experts
    each, the first ``E mod ep`` GPUs holding one more (vLLM 0.33 ``fused_moe/expert_map_manager.py
    determine_expert_map``: ``ceil(E / ep)`` on the fullest GPU), and each expert sliced over
    ``par.expert_slicing`` GPUs; everything else (attention, embeddings, dense MLPs, shared experts) is
    split over the attention TP group and held once per attention DP rank (vLLM: each DP rank is an engine
    of TP GPUs). PP divides both. The bytes of the routed experts are their parameters in the weights dtype
    (:func:`weights_per_gpu`'s dtype rules); a spec with exact checkpoint bytes gives them the experts' share
    of its parameters. Without ``moe`` facts, or a layout that TP-slices everything alike, this is
    :func:`weights_per_gpu`.

    Raises:
        UsageError: as :func:`weights_per_gpu`.
    """
    plain = par.attn_dp == 1 and par.ep == 1 and par.expert_slicing == par.attn_tp
    if spec.moe is None or plain:
        return weights_per_gpu(spec, weights_dtype, par.attn_tp * par.attn_dp, par.pp)
    total, name = weights_per_gpu(spec, weights_dtype, 1, 1)
    moe = spec.moe
    if name == "checkpoint":
        if not spec.param_count:
            return weights_per_gpu(spec, weights_dtype, par.attn_tp * par.attn_dp, par.pp)
        routed = total * moe.routed_param_count // spec.param_count
    else:
        routed = get_weight_dtype(name).bytes_for(moe.routed_param_count)
    rest = total - routed
    local = cdiv(moe.num_experts, par.ep)
    experts = cdiv(routed * local, moe.num_experts * par.expert_slicing * par.pp)
    return cdiv(rest, par.attn_tp * par.pp) + experts, name
