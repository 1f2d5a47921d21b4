"""Each engine takes only the KV cache dtypes its own code takes (EngineRules.kv_dtype, one place per engine).

The engines' lists are tests/fixtures/engine_kv_dtypes.json (scripts/engine_kv_dtypes.py: vLLM 0.33.0's
CacheDType and ModelDType, SGLang 0.5.23's --kv-cache-dtype and --dtype choices, TensorRT-LLM 1.x's
_VALID_KV_CACHE_DTYPES); llama.cpp's are its -ctk types, and iq4_nl's block is gguf's GGML_QUANT_SIZES.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvplan import engines
from kvplan.dtypes import get_kv_dtype
from kvplan.loader import load_bundled
from kvplan.options import Engine

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "engine_kv_dtypes.json").read_text())
GGML = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
# the engines' values kvplan does not size (refused as unknown); any other value of the engine's must be taken
NOT_SIZED = {
    "vllm": {"fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
             "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit",
             "int4_per_token_head", "nvfp4_4over6"},
    "sglang": {"mxfp8", "nvfp4", "fp4_mx_block16"},
    "trtllm": set(),
}  # fmt: skip
VLLM_ALLOWED = (
    "auto, float16, bfloat16, float32, fp8, fp8_e4m3, fp8_e5m2, int8_per_token_head, fp8_per_token_head, nvfp4 "
    "(vLLM 0.33.0 vllm/config/cache.py CacheDType, those kvplan sizes; float32 through --dtype with the auto cache)"
)
TRTLLM_ALLOWED = (
    "auto, float16, bfloat16, float32, fp8, nvfp4 (TensorRT-LLM 1.x _torch/pyexecutor/model_loader.py "
    "_VALID_KV_CACHE_DTYPES; the 16/32-bit ones are the model dtype with the auto cache)"
)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_each_engine_takes_what_its_code_takes(engine):
    eng = engines.get(Engine(engine))
    src = FIXTURE[engine]
    cache, model = set(src["kv_cache_dtype"]), set(src["dtype"])
    # every name kvplan takes for the engine is the engine's own: a cache dtype, or a model dtype (auto cache)
    assert set(eng.kv_cache_dtypes) <= cache | model, set(eng.kv_cache_dtypes) - cache - model
    # and every cache dtype of the engine's is taken, or one kvplan does not size
    assert cache - {"auto"} - set(eng.kv_cache_dtypes) == NOT_SIZED[engine]
    spec = load_bundled("llama3-8b")
    for name in GGML:
        assert name not in cache | model
        with pytest.raises(Exception, match=f"has no '{name}' KV cache"):
            eng.kv_dtype(spec, name)


@pytest.mark.parametrize(
    "args, message",
    [
        (["fit", "llama3-8b", "--gpu", "h100", "--kv-dtype", "q4_0"], f"vLLM has no 'q4_0' KV cache; allowed: {VLLM_ALLOWED}"),
        (["fit", "llama3-8b", "--gpu", "h100", "--engine", "trtllm", "--kv-dtype", "q4_0"],
         f"TensorRT-LLM has no 'q4_0' KV cache; allowed: {TRTLLM_ALLOWED}"),
        (["fit", "llama3-8b", "--gpu", "h100", "--engine", "trtllm", "--kv-dtype", "int8"],
         f"TensorRT-LLM has no 'int8' KV cache; allowed: {TRTLLM_ALLOWED}"),
        (["fit", "--gpu", "h100", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B", "--kv-cache-dtype", "q8_0",
          "--max-model-len", "8192"], f"vLLM has no 'q8_0' KV cache; allowed: {VLLM_ALLOWED}"),
        (["sweep", "llama3-8b", "--seq", "4k", "--gpu", "h100", "--kv-dtype", "q4_0"],
         f"every row refused: --kv-dtype: vLLM has no 'q4_0' KV cache; allowed: {VLLM_ALLOWED}"),
        (["fleet", "llama3-8b", "--concurrency", "100", "--seq", "4k", "--gpu", "h100", "--kv-dtype", "q5_1"],
         f"vLLM has no 'q5_1' KV cache; allowed: {VLLM_ALLOWED}"),
        (["fit", "llama3-8b", "--gpu", "h100", "--engine", "sglang", "--kv-dtype", "nvfp4"],
         "SGLang has no 'nvfp4' KV cache; allowed: auto, bf16, bfloat16, float16, float32, fp8_e4m3, fp8_e5m2"),
        (["fit", "llama3-8b", "--gpu", "h100", "--engine", "llamacpp", "--kv-dtype", "fp8"],
         "--kv-dtype: llama.cpp has no 'fp8' cache type; allowed: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1"),
    ],
)  # fmt: skip
def test_a_cache_dtype_the_engine_lacks_is_one_line_exit_2(cli, args, message):
    code, out, err = cli(*args)
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert err.startswith("kvplan: error: ") and message in err, err


def test_a_from_log_what_if_is_held_to_the_engine_too(cli, tmp_path):
    entry = yaml.safe_load((ROOT / "tests" / "fixtures" / "engine_logs" / "vllm-file-38962983769.yaml").read_text())
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(entry["lines"]) + "\n", encoding="utf-8")
    code, out, err = cli("fit", "qwen3-235b-a22b", "--from-log", log, "--kv-dtype", "q4_0")
    assert (code, out) == (2, "") and f"vLLM has no 'q4_0' KV cache; allowed: {VLLM_ALLOWED}" in err


def test_a_sweep_skips_the_rows_of_a_dtype_the_engine_lacks_and_refuses_an_unknown_name(cli):
    code, out, err = cli("sweep", "llama3-8b", "--seq", "4k", "--gpu", "h100", "--kv-dtype", "q4_0,fp8", "--json")
    assert code == 0 and "skipped 1 row: the engine refuses llama3-8b q4_0 (TP 1): --kv-dtype: vLLM has no" in err
    assert [r["kv_dtype"] for r in json.loads(out)] == ["fp8_e4m3"]
    code, out, err = cli("sweep", "llama3-8b", "--seq", "4k", "--gpu", "h100", "--kv-dtype", "foo,fp8")
    assert (code, out) == (2, "") and "kvplan: error: --kv-dtype: unknown dtype 'foo'; allowed: fp32" in err


def test_iq4_nl_is_ggmls_block_layout():
    gguf = pytest.importorskip("gguf")
    elems, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.IQ4_NL]
    d = get_kv_dtype("iq4_nl")
    assert (d.block_elems, d.block_bytes) == (elems, size) == (32, 18)
