"""Serving-engine rules kvplan mirrors, one module per engine, each rule a small function citing the engine
file (and version) it follows.

- :mod:`kvplan.engines.vllm`: vLLM's KV-cache planning (``vllm/v1/core/kv_cache_planning.py``,
  ``kv_cache_utils.py``, ``kv_cache_interface.py``, ``platforms/interface.py``), by version.

Pure Python: no numpy or torch (``kvplan estimate`` and ``kvplan fit`` import none).
"""
