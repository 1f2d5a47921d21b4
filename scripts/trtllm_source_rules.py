"""Write tests/fixtures/trtllm_source_rules.yaml: TensorRT-LLM's KV-cache sizing facts read at its release tags.

Run by hand on a clone of NVIDIA/TensorRT-LLM (a bare mirror is enough: only ``git show`` is used, nothing is
checked out, built or imported)::

    python3 scripts/trtllm_source_rules.py /path/to/TensorRT-LLM.git [--tags REGEX] [--out FILE]

For every tag matching ``--tags`` (default: the 1.x releases and release candidates, ``v1.0.0`` to the newest)
it reads, with ``git show TAG:PATH``, the files that size the PyTorch backend's KV cache:

- ``tensorrt_llm/version.py``: the version the tag ships (``__version__``);
- ``tensorrt_llm/_torch/pyexecutor/resource_manager.py`` (``KVCacheManager``): how ``max_tokens`` becomes the
  primary pool's block count (``calculate_max_num_blocks``: ``math.ceil(max_tokens / tokens_per_block)`` or
  ``int(max_tokens // tokens_per_block)``), whether the estimation dry run has its own branch
  (``is_estimating_kv_cache``), the default attention window (``max_attention_window_vec = [max_seq_len]``),
  the clamp of given windows to ``max_seq_len``, the variable-window (VSWA) test, and the KV-head split over
  tensor parallelism;
- ``tensorrt_llm/_torch/pyexecutor/_util.py`` (``KvCacheCreator``, ``create_kv_cache_manager``): how the
  memory measured after the estimation run becomes ``max_tokens`` (``... // kv_size_per_token``, or the newer
  ``(kv_mem - intercept) // slope``), how MLA layers are cached (``CacheType.SELFKONLY``, one head of
  ``kv_lora_rank + qk_rope_head_dim``), and which models get ``max_attention_window`` filled from their
  ``layer_types`` (sliding layers at their window) without the user giving it;
- ``tensorrt_llm/llmapi/llm_args.py`` (``KvCacheConfig``): the defaults of ``tokens_per_block`` and
  ``free_gpu_memory_fraction``.

Each fact is found by a pattern over the source lines; the fixture records the value it implies and, as
evidence, ``path:line`` with that line's text. No code beyond those single lines is written; nothing of the
engine is copied into kvplan. A fact whose pattern matches nowhere is written as ``not found`` with the paths
searched, so a moved or rewritten function shows up as a gap, not as a guess.

The fixture also names the first tag whose pool floors the block count (``first_floor_tag``).
tests/test_trtllm.py checks kvplan's rule table (kvplan/engines/trtllm.py ``RULE_SETS``, ``resolve_rules``)
against it when it is present.

Requires git and PyYAML. CI never runs this script.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "trtllm_source_rules.yaml"
DEFAULT_TAGS = r"^v1\.\d+\.\d+(?:rc\d+)?(?:\.post\d+)?$"

VERSION_PY = "tensorrt_llm/version.py"
RESOURCE_MANAGER = "tensorrt_llm/_torch/pyexecutor/resource_manager.py"
UTIL = "tensorrt_llm/_torch/pyexecutor/_util.py"
LLM_ARGS = "tensorrt_llm/llmapi/llm_args.py"
FILES = (VERSION_PY, RESOURCE_MANAGER, UTIL, LLM_ARGS)


# --- reading at a tag ------------------------------------------------------------------------------------


def git(git_dir: str, *args: str) -> str:
    """stdout of ``git --git-dir=GIT_DIR ARGS``.

    Raises:
        subprocess.CalledProcessError: git failed (an unknown tag or path).
    """
    out = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, check=True)
    return out.stdout


def release_tags(git_dir: str, pattern: str = DEFAULT_TAGS) -> list[str]:
    """The tags matching ``pattern``, oldest release first (rc before the final, by :func:`version_key`)."""
    rx = re.compile(pattern)
    return sorted((t for t in git(git_dir, "tag", "--list").split() if rx.match(t)), key=version_key)


def version_key(tag: str) -> tuple:
    """Sort key of ``v1.2.0rc4.post1``-style tags: (1, 2, 0, 0, 4, 1); a final release sorts after its rcs."""
    m = re.match(r"v?(\d+)\.(\d+)\.(\d+)(?:rc(\d+))?(?:\.post(\d+))?", tag)
    if not m:
        return (float("inf"), tag)
    major, minor, patch, rc, post = m.groups()
    return (int(major), int(minor), int(patch), 0 if rc is not None else 1, int(rc or 0), int(post or 0))


def read_at(git_dir: str, tag: str, path: str) -> list[str] | None:
    """The lines of ``path`` at ``tag`` (None when the tag has no such file)."""
    try:
        return git(git_dir, "show", f"{tag}:{path}").splitlines()
    except subprocess.CalledProcessError:
        return None


# --- finding the facts -------------------------------------------------------------------------------------


@dataclass
class Fact:
    """One fact at one tag: its value and the source lines it was read from (``path:line: text``)."""

    value: object = "not found"
    evidence: list[str] = field(default_factory=list)

    def add(self, path: str, lineno: int, text: str) -> None:
        self.evidence.append(f"{path}:{lineno}: {text.strip()}")

    def as_dict(self) -> dict:
        return {"value": self.value, "evidence": self.evidence}


def grep(lines: list[str] | None, pattern: str) -> list[tuple[int, str, re.Match]]:
    """(1-based line number, line, match) of every line matching ``pattern``."""
    rx = re.compile(pattern)
    return [(i + 1, line, m) for i, line in enumerate(lines or ()) if (m := rx.search(line))]


def field_default(lines: list[str] | None, name: str, span: int = 4) -> tuple[int, str, str] | None:
    """``(line, text, default)`` of a pydantic field ``name: T = Field(default=X, ...)`` whose ``default=``
    may sit up to ``span`` lines below the name (formatters wrap long Field calls)."""
    rx = re.compile(rf"^\s*{re.escape(name)}\s*:")
    for i, line in enumerate(lines or ()):
        if rx.search(line):
            text = " ".join(lines[i : i + span + 1])
            m = re.search(r"=\s*Field\(\s*default\s*=\s*([-\w.]+)", text) or re.search(r"=\s*([-\d.]+)\s*(?:#|$)", line)
            if m:
                return i + 1, line, m.group(1)
    return None


ROUNDING = {
    # calculate_max_num_blocks and the estimation dry-run branch (PR #9093) of resource_manager.py
    "ceil": r"blocks_in_primary_pool\s*=\s*math\.ceil\(\s*max_tokens\s*/\s*tokens_per_block\s*\)",
    "floor": r"blocks_in_primary_pool\s*=\s*int\(\s*(?:\w+\.)*max_tokens\s*//\s*tokens_per_block\s*\)",
}
BUDGET = {
    # _util.py: the measured KV memory -> max_tokens
    "kv_mem // kv_size_per_token": r"max_tokens\w*\s*=\s*int\(.*//\s*(?:self\.)?_?kv_size\w*",
    "(kv_mem - intercept) // slope": r"//\s*(?:\w+\.)*slope\b",
    "kv_mem = int((total - peak + allocated) * fraction)": r"kv_mem\w*\s*=\s*int\(\s*\(.*\)\s*\*\s*\w*fraction",
}


def rounding_fact(rm: list[str] | None) -> Fact:
    fact = Fact()
    kinds = []
    for kind, pattern in ROUNDING.items():
        for n, line, _ in grep(rm, pattern):
            fact.add(RESOURCE_MANAGER, n, line)
            kinds.append(kind)
    if kinds:
        fact.value = "floor" if set(kinds) == {"floor"} else "ceil" if set(kinds) == {"ceil"} else "ceil and floor"
    return fact


def flag_fact(lines: list[str] | None, path: str, pattern: str, yes: object, no: object) -> Fact:
    hits = grep(lines, pattern)
    fact = Fact(yes if hits else no)
    for n, line, _ in hits[:2]:
        fact.add(path, n, line)
    return fact


def budget_fact(util: list[str] | None) -> Fact:
    fact = Fact()
    kinds = []
    for kind, pattern in BUDGET.items():
        for n, line, _ in grep(util, pattern):
            fact.add(UTIL, n, line)
            if kind not in kinds:
                kinds.append(kind)
    if kinds:
        fact.value = kinds
    return fact


def default_fact(args: list[str] | None, name: str, cast) -> Fact:
    fact = Fact()
    found = field_default(args, name)
    if found:
        n, line, default = found
        try:
            fact.value = cast(default)
        except ValueError:
            fact.value = default
        fact.add(LLM_ARGS, n, line)
    return fact


def fallback_fraction(rm: list[str] | None) -> Fact:
    """The fraction resource_manager.py uses when the config leaves it unset (``... else 0.9``)."""
    fact = Fact()
    for n, line, m in grep(rm, r"free_gpu_memory_fraction\s+else\s+([\d.]+)"):
        fact.value = float(m.group(1))
        fact.add(RESOURCE_MANAGER, n, line)
    return fact


def mla_fact(util: list[str] | None, span: int = 30) -> Fact:
    """The KV cache manager built ``if is_mla(config)``: K only, one head of kv_lora_rank + qk_rope_head_dim."""
    fact = Fact()
    for n, line, _ in grep(util, r"^\s*(?:el)?if\s+is_mla\("):
        block = (util or [])[n : n + span]
        parts = {
            "selfkonly": r"CacheType\.SELFKONLY",
            "one_head": r"num_kv_heads\s*=\s*1\b",
            "head_dim": r"head_dim\s*=\s*(?:\w+\.)*kv_lora_rank\s*\+\s*(?:\w+\.)*qk_rope_head_dim",
        }
        seen = {}
        for key, pattern in parts.items():
            for j, text in enumerate(block):
                if re.search(pattern, text):
                    seen[key] = (n + 1 + j, text)
                    break
        if len(seen) == len(parts):
            fact.add(UTIL, n, line)
            for key in parts:
                fact.add(UTIL, *seen[key])
            fact.value = "K only (kv_factor 1), 1 head of kv_lora_rank + qk_rope_head_dim, not split over TP"
            return fact
    return fact


def mla_estimator_fact(util: list[str] | None) -> Fact:
    """The per-token size the estimation uses for MLA: ``kv_lora_rank + qk_rope_head_dim`` with kv_factor 1."""
    fact = Fact()
    hits = grep(util, r"(?:\w+\.)*kv_lora_rank\s*\+\s*(?:\w+\.)*qk_rope_head_dim")
    hits = [h for h in hits if not re.search(r"\bhead_dim=[^=\s]", h[1])]  # not the pool's keyword argument
    for n, line, _ in hits[:2]:
        fact.add(UTIL, n, line)
    for n, line, _ in grep(util, r"^\s*kv_factor\s*=\s*1\b")[:1]:
        fact.add(UTIL, n, line)
    if hits:
        fact.value = "kv_lora_rank + qk_rope_head_dim per layer"
    return fact


def window_autofill_fact(util: list[str] | None, span: int = 8) -> Fact:
    """Models whose sliding layers get ``max_attention_window`` filled from ``layer_types`` without the user
    setting it: the ``if is_<family>(config)`` guard above each fill."""
    fact = Fact([])
    for n, line, _ in grep(util, r"max_attention_window\s*=\s*\["):
        block = (util or [])[n - 1 : n - 1 + span]
        if not any("sliding" in b for b in block):
            continue
        fact.add(UTIL, n, line)
        for k in range(n - 1, max(n - 80, 0), -1):
            m = re.search(r"^\s*(?:el)?if\s+(is_\w+)\(", util[k - 1])
            if m:
                fact.add(UTIL, k, util[k - 1])
                if m.group(1) not in fact.value:
                    fact.value.append(m.group(1))
                break
    if not fact.evidence:
        fact.value = "none: every layer at max_seq_len unless kv_cache_config.max_attention_window is given"
    return fact


def tag_facts(git_dir: str, tag: str) -> dict:
    """Every fact kvplan needs, read at ``tag``, with the tag's commit and date."""
    src = {path: read_at(git_dir, tag, path) for path in FILES}
    version = Fact()
    for n, line, m in grep(src[VERSION_PY], r"__version__\s*=\s*[\"']([^\"']+)[\"']"):
        version.value = m.group(1)
        version.add(VERSION_PY, n, line)
    rm, util, args = src[RESOURCE_MANAGER], src[UTIL], src[LLM_ARGS]
    facts = {
        "version": version,
        "block_rounding": rounding_fact(rm),
        "estimation_dry_run_branch": flag_fact(rm, RESOURCE_MANAGER, r"is_estimating_kv_cache", True, False),
        "max_tokens_from_budget": budget_fact(util),
        "tokens_per_block_default": default_fact(args, "tokens_per_block", int),
        "free_gpu_memory_fraction_default": default_fact(args, "free_gpu_memory_fraction", float),
        "free_gpu_memory_fraction_fallback": fallback_fraction(rm),
        "window_default": flag_fact(
            rm, RESOURCE_MANAGER, r"max_attention_window_vec\s*=\s*\[\s*max_seq_len\s*\]",
            "every layer at max_seq_len", "not found",
        ),
        "window_clamp": flag_fact(
            rm, RESOURCE_MANAGER, r"min\(\s*max_seq_len\s*,\s*\w+\s*\)", "given windows cut to max_seq_len", "none"
        ),
        "vswa_test": flag_fact(
            rm, RESOURCE_MANAGER, r"len\(\s*set\(\s*(?:self\.)?max_attention_window_vec\s*\)\s*\)\s*>\s*1",
            "more than one distinct window", "not found",
        ),
        "window_autofill": window_autofill_fact(util),
        "kv_heads_per_rank": flag_fact(
            rm, RESOURCE_MANAGER, r"\(\s*\w*kv_head\w*\s*\+\s*tp_size\s*-\s*1\s*\)\s*//\s*tp_size",
            "ceil(num_kv_heads / tp_size)", "not found",
        ),
        "mla_pool": mla_fact(util),
        "mla_estimator": mla_estimator_fact(util),
    }  # fmt: skip
    return {
        "tag": tag,
        "commit": git(git_dir, "rev-list", "-n", "1", tag).strip(),
        "date": git(git_dir, "log", "-1", "--format=%cs", tag).strip(),
        "files_missing": [p for p in FILES if src[p] is None],
        "facts": {name: fact.as_dict() for name, fact in facts.items()},
    }


def collect(git_dir: str, pattern: str = DEFAULT_TAGS) -> dict:
    """The fixture: every matching tag's facts, and the first tag whose pool floors the block count.

    Raises:
        SystemExit: no tag matches (a shallow or tagless clone).
    """
    tags = release_tags(git_dir, pattern)
    if not tags:
        raise SystemExit(f"{git_dir}: no tag matches {pattern!r} (a clone without tags? run git fetch --tags)")
    releases = {}
    for tag in tags:
        print(f"reading {tag}", file=sys.stderr)
        releases[tag] = tag_facts(git_dir, tag)
    floor = [t for t in tags if releases[t]["facts"]["block_rounding"]["value"] == "floor"]
    ceil = [t for t in tags if releases[t]["facts"]["block_rounding"]["value"] == "ceil"]
    return {
        "source": "NVIDIA/TensorRT-LLM, read with git show TAG:PATH by scripts/trtllm_source_rules.py",
        "files": list(FILES),
        "first_floor_tag": floor[0] if floor else None,
        "last_ceil_tag": ceil[-1] if ceil else None,
        "releases": releases,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir", help="a clone or bare mirror of NVIDIA/TensorRT-LLM, with its tags")
    ap.add_argument("--tags", default=DEFAULT_TAGS, help=f"tags to read, a regex (default {DEFAULT_TAGS})")
    ap.add_argument("--out", type=Path, default=OUT, help=f"fixture to write (default {OUT.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    import yaml

    data = collect(args.git_dir, args.tags)
    for tag, rel in data["releases"].items():
        for name, fact in rel["facts"].items():
            for line in fact["evidence"]:
                print(f"{tag} {name}: {line}")
    header = "# Written by scripts/trtllm_source_rules.py; do not edit by hand.\n"
    args.out.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True))
    print(f"wrote {args.out} ({len(data['releases'])} tags; first floor: {data['first_floor_tag']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
