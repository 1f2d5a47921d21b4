"""scripts/trtllm_source_rules.py: the facts it reads at each release tag of a TensorRT-LLM clone.

The clone here is a small git repository the test builds: three tags whose files hold, at known line numbers,
the shapes of line the script looks for in TensorRT-LLM (resource_manager.py, _util.py, llm_args.py,
version.py). It is written for this test, not taken from TensorRT-LLM; the test checks that each fact is found,
with its value and its ``path:line``, that tags sort rc before final, and which tag is the first to floor.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def load_script():
    if "trtllm_source_rules" not in sys.modules:  # registered first: its dataclass looks its module up
        spec = importlib.util.spec_from_file_location(
            "trtllm_source_rules", ROOT / "scripts" / "trtllm_source_rules.py"
        )
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return sys.modules["trtllm_source_rules"]


RM_CEIL = """\
import math


class KVCacheManager:
    def __init__(self, kv_cache_config, max_seq_len, num_kv_heads, tp_size):
        self.max_attention_window_vec = [max_seq_len]
        if kv_cache_config.max_attention_window is not None:
            self.max_attention_window_vec = [min(max_seq_len, w) for w in kv_cache_config.max_attention_window]
        self.is_vswa = len(set(self.max_attention_window_vec)) > 1
        self.num_kv_heads_per_rank = (num_kv_heads + tp_size - 1) // tp_size
        f = kv_cache_config.free_gpu_memory_fraction if kv_cache_config.free_gpu_memory_fraction else 0.9

    def calculate_max_num_blocks(self, max_tokens, tokens_per_block):
        blocks_in_primary_pool = math.ceil(max_tokens / tokens_per_block)
        return blocks_in_primary_pool
"""
# the floor version: the same file with the dry-run branch, the floor on lines 15 and 18
RM_FLOOR = RM_CEIL.replace(
    "    def calculate_max_num_blocks(self, max_tokens, tokens_per_block):\n"
    "        blocks_in_primary_pool = math.ceil(max_tokens / tokens_per_block)\n",
    "    def init_blocks(self, kv_cache_config, tokens_per_block, is_estimating_kv_cache=False):\n"
    "        if is_estimating_kv_cache:\n"
    "            self.blocks_in_primary_pool = int(kv_cache_config.max_tokens // tokens_per_block)\n"
    "\n"
    "    def calculate_max_num_blocks(self, max_tokens, tokens_per_block):\n"
    "        blocks_in_primary_pool = int(max_tokens // tokens_per_block)\n",
)
UTIL = """\
def create_kv_cache_manager(config, kv_cache_config, max_seq_len):
    if is_gemma4_hybrid(config):
        sliding_window = config.sliding_window
        kv_cache_config.max_attention_window = [
            sliding_window if lt == "sliding_attention" else max_seq_len for lt in config.layer_types
        ]
    if is_mla(config):
        return KVCacheManager(
            kv_cache_config,
            CacheType.SELFKONLY,
            num_kv_heads=1,
            head_dim=config.kv_lora_rank + config.qk_rope_head_dim,
        )


def get_cache_size_per_token(config):
    head_dim = config.kv_lora_rank + config.qk_rope_head_dim
    kv_factor = 1
    return head_dim * kv_factor


def configure_kv_cache_capacity(total, peak, allocated, fraction, kv_size_per_token):
    kv_mem = int((total - peak + allocated) * fraction)
    max_tokens = int(kv_mem // kv_size_per_token)
    return max_tokens
"""
LLM_ARGS = """\
class KvCacheConfig:
    tokens_per_block: int = Field(default=32,
                                  description="tokens per block")
    free_gpu_memory_fraction: Optional[float] = Field(
        default=0.9, description="fraction of free memory")
"""


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> str:
    """A repository with tags v1.0.0 (ceil), v1.1.0rc1 (ceil) and v1.1.0 (floor), plus a tag the default
    pattern skips; returns its git dir."""
    work = tmp_path_factory.mktemp("trtllm")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def run(*args):
        cmd = ["git", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-C", str(work), *args]
        subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, **env})

    run("init", "-q")
    for tag, rm in (("v1.0.0", RM_CEIL), ("v1.1.0rc1", RM_CEIL), ("v1.1.0", RM_FLOOR), ("v0.21.0", RM_CEIL)):
        files = {
            "tensorrt_llm/version.py": f'__version__ = "{tag[1:]}"\n',
            "tensorrt_llm/_torch/pyexecutor/resource_manager.py": rm,
            "tensorrt_llm/_torch/pyexecutor/_util.py": UTIL,
            "tensorrt_llm/llmapi/llm_args.py": LLM_ARGS,
        }
        for path, text in files.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_text(text)
        run("add", "-A")
        run("commit", "-q", "--allow-empty", "-m", tag)
        run("tag", tag)
    return str(work / ".git")


def test_release_tags_in_release_order(clone):
    mod = load_script()
    assert mod.release_tags(clone) == ["v1.0.0", "v1.1.0rc1", "v1.1.0"]  # v0.21.0 is not a 1.x tag


def test_facts_at_a_ceil_tag(clone):
    facts = load_script().tag_facts(clone, "v1.0.0")["facts"]
    rm = "tensorrt_llm/_torch/pyexecutor/resource_manager.py"
    assert facts["version"]["value"] == "1.0.0"
    assert facts["block_rounding"]["value"] == "ceil"
    assert facts["block_rounding"]["evidence"] == [
        f"{rm}:14: blocks_in_primary_pool = math.ceil(max_tokens / tokens_per_block)"
    ]
    assert facts["estimation_dry_run_branch"]["value"] is False
    assert facts["window_default"]["evidence"] == [f"{rm}:6: self.max_attention_window_vec = [max_seq_len]"]
    assert facts["window_clamp"]["evidence"][0].startswith(f"{rm}:8: ")
    assert facts["vswa_test"]["evidence"][0].startswith(f"{rm}:9: ")
    assert facts["kv_heads_per_rank"]["value"] == "ceil(num_kv_heads / tp_size)"
    assert facts["free_gpu_memory_fraction_fallback"]["value"] == 0.9
    assert facts["tokens_per_block_default"]["value"] == 32
    assert facts["tokens_per_block_default"]["evidence"][0].startswith("tensorrt_llm/llmapi/llm_args.py:2: ")
    assert facts["free_gpu_memory_fraction_default"]["value"] == 0.9
    assert facts["free_gpu_memory_fraction_default"]["evidence"][0].startswith("tensorrt_llm/llmapi/llm_args.py:4: ")


def test_facts_from_util(clone):
    facts = load_script().tag_facts(clone, "v1.0.0")["facts"]
    util = "tensorrt_llm/_torch/pyexecutor/_util.py"
    assert facts["mla_pool"]["value"].startswith("K only (kv_factor 1), 1 head of kv_lora_rank + qk_rope_head_dim")
    assert [e.split(": ")[0] for e in facts["mla_pool"]["evidence"]] == [f"{util}:{n}" for n in (7, 10, 11, 12)]
    assert facts["mla_estimator"]["evidence"] == [
        f"{util}:17: head_dim = config.kv_lora_rank + config.qk_rope_head_dim",
        f"{util}:18: kv_factor = 1",
    ]
    assert facts["window_autofill"]["value"] == ["is_gemma4_hybrid"]
    assert [e.split(": ")[0] for e in facts["window_autofill"]["evidence"]] == [f"{util}:4", f"{util}:2"]
    assert facts["max_tokens_from_budget"]["value"] == [
        "kv_mem // kv_size_per_token",
        "kv_mem = int((total - peak + allocated) * fraction)",
    ]


def test_floor_tag_and_first_floor(clone):
    data = load_script().collect(clone)
    rel = data["releases"]["v1.1.0"]
    rm = "tensorrt_llm/_torch/pyexecutor/resource_manager.py"
    assert rel["facts"]["block_rounding"] == {
        "value": "floor",
        "evidence": [
            f"{rm}:15: self.blocks_in_primary_pool = int(kv_cache_config.max_tokens // tokens_per_block)",
            f"{rm}:18: blocks_in_primary_pool = int(max_tokens // tokens_per_block)",
        ],
    }
    assert rel["facts"]["estimation_dry_run_branch"]["value"] is True
    assert (data["first_floor_tag"], data["last_ceil_tag"]) == ("v1.1.0", "v1.1.0rc1")
    assert len(rel["commit"]) == 40 and rel["files_missing"] == []


def test_main_writes_the_fixture(clone, tmp_path, capsys):
    out = tmp_path / "rules.yaml"
    assert load_script().main([clone, "--out", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    assert list(data["releases"]) == ["v1.0.0", "v1.1.0rc1", "v1.1.0"]
    assert data["releases"]["v1.1.0rc1"]["facts"]["version"]["value"] == "1.1.0rc1"
    assert "v1.1.0 block_rounding: tensorrt_llm/_torch/pyexecutor/resource_manager.py:18:" in capsys.readouterr().out


def test_a_tagless_clone_is_refused(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    with pytest.raises(SystemExit, match="no tag matches"):
        load_script().collect(str(tmp_path / ".git"))
