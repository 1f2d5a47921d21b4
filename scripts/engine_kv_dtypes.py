"""Write tests/fixtures/engine_kv_dtypes.json: the KV cache dtypes each engine's own code takes.

Read as text (``ast``, nothing imported) from the engines' sources at the versions kvplan models::

    python3 scripts/engine_kv_dtypes.py --vllm .../site-packages/vllm --sglang .../site-packages/sglang

- vLLM 0.33.0 (``pip download --no-deps vllm==0.33.0``, unzipped): ``vllm/config/cache.py`` ``CacheDType`` (the
  ``Literal`` that ``CacheConfig._validate_cache_dtype`` checks ``--kv-cache-dtype`` against) and
  ``vllm/config/model.py`` ``ModelDType`` (``--dtype``: the cache's dtype when ``--kv-cache-dtype`` is auto).
- SGLang 0.5.23: ``sglang/srt/arg_groups/fields/model.py``, the ``choices`` of the ``kv_cache_dtype`` and
  ``dtype`` fields (``--kv-cache-dtype``, ``--dtype``).
- TensorRT-LLM 1.x: ``tensorrt_llm/_torch/pyexecutor/model_loader.py`` ``_VALID_KV_CACHE_DTYPES`` =
  ``("fp8", "nvfp4", "auto")``, which ``validate_and_set_kv_cache_quant`` holds ``kv_cache_config.dtype`` to;
  transcribed by hand from a stored 1.x version (the repository is too large to fetch here; the 0.21 code,
  ``model_engine.py``, had ``("fp8", "auto")``).
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "engine_kv_dtypes.json"


def _literal(path: Path, name: str) -> list[str]:
    """The strings of ``name = Literal[...]`` in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return [e.value for e in node.value.slice.elts]
    raise SystemExit(f"{path}: no {name} = Literal[...]")


def _choices(path: Path, field: str) -> list[str]:
    """The ``choices=[...]`` of the annotated field ``field`` (``kv_cache_dtype: A[str, Arg(..., choices=[...])]``)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == field:
            for sub in ast.walk(node.annotation):
                if isinstance(sub, ast.keyword) and sub.arg == "choices":
                    return [e.value for e in sub.value.elts]
    raise SystemExit(f"{path}: no choices for {field}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", type=Path, required=True, help="the vllm package directory of vLLM 0.33.0")
    ap.add_argument("--sglang", type=Path, required=True, help="the sglang package directory of SGLang 0.5.23")
    a = ap.parse_args()
    out = {
        "vllm": {
            "version": "0.33.0",
            "kv_cache_dtype": _literal(a.vllm / "config" / "cache.py", "CacheDType"),
            "kv_cache_dtype_source": "vllm/config/cache.py CacheDType",
            "dtype": _literal(a.vllm / "config" / "model.py", "ModelDType"),
            "dtype_source": "vllm/config/model.py ModelDType",
        },
        "sglang": {
            "version": "0.5.23",
            "kv_cache_dtype": _choices(a.sglang / "srt" / "arg_groups" / "fields" / "model.py", "kv_cache_dtype"),
            "kv_cache_dtype_source": "sglang/srt/arg_groups/fields/model.py kv_cache_dtype choices",
            "dtype": _choices(a.sglang / "srt" / "arg_groups" / "fields" / "model.py", "dtype"),
            "dtype_source": "sglang/srt/arg_groups/fields/model.py dtype choices",
        },
        "trtllm": {
            "version": "1.x (PyTorch backend)",
            "kv_cache_dtype": ["fp8", "nvfp4", "auto"],
            "kv_cache_dtype_source": "tensorrt_llm/_torch/pyexecutor/model_loader.py _VALID_KV_CACHE_DTYPES "
            "(transcribed by hand)",
            "dtype": ["auto", "float16", "bfloat16", "float32"],
            "dtype_source": "the model dtype (LLM dtype, tensorrt_llm/_utils.py str_dtype_to_torch names; by hand)",
        },
    }
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
