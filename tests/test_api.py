"""The Python API (kvplan.load_model / estimate / fit / fleet), the README's Python examples, cheap import,
and the small things of the same trial: spec sources, install hints."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

import kvplan
from kvplan.errors import SpecError, UsageError

from .conftest import ROOT

README = (ROOT / "README.md").read_text()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_readme_has_python_examples():
    assert PYTHON_BLOCKS and "## Python" in README


@pytest.mark.parametrize("code", PYTHON_BLOCKS, ids=[f"block{i}" for i in range(len(PYTHON_BLOCKS))])
def test_readme_python_examples_run(code, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    exec(compile(code, "README.md (python)", "exec"), {})


def test_estimate_is_what_the_cli_prints(cli):
    est = kvplan.estimate("gpt-oss-20b", "128k", batch=2)
    _, out, _ = cli("estimate", "gpt-oss-20b", "--seq", "128k", "--batch", "2", "--json")
    from kvplan import render

    assert render.estimate_json(est) == json.loads(out)


def test_fit_is_what_the_cli_prints(cli):
    from kvplan import render

    plan = kvplan.fit("llama3.1-70b", "h100", tp=4, max_model_len="32k", kv_dtype="fp8")
    _, out, _ = cli(
        "fit", "llama3.1-70b", "--gpu", "h100", "--tp", "4", "--max-model-len", "32k", "--kv-dtype", "fp8", "--json"
    )
    from kvplan import perf

    speed, _ = perf.fit_speed(kvplan.load_model("llama3.1-70b"), kvplan.get_gpu("h100"), plan, None)  # default N, T
    assert render.fit_json(plan, speed) == json.loads(out)


def test_fit_that_does_not_fit_is_a_result():
    plan = kvplan.fit("llama3.1-70b", "l4")
    assert plan.fits is False and plan.max_concurrent_requests == 0


def test_fleet_is_what_the_cli_prints(cli):
    from kvplan import render

    rows = kvplan.fleet("llama3.1-70b", "examples/chat-and-rag.yaml", gpus=["h100", "h200"], prices={"h100": 2.49})
    _, out, _ = cli(
        "fleet",
        "llama3.1-70b",
        "--workload",
        ROOT / "examples/chat-and-rag.yaml",
        "--gpu",
        "h100",
        "--gpu",
        "h200",
        "--price",
        "h100=2.49",
        "--json",
    )
    assert [render.fleet_row_dict(r) for r in rows] == json.loads(out)["layouts"]


def test_fleet_takes_a_mapping():
    wl = {"name": "w", "classes": [{"name": "chat", "concurrency": 10, "tokens": "4k"}]}
    rows = kvplan.fleet("llama3-8b", wl, gpus=["h100"], tps=[1], pp=1)
    assert len(rows) == 1 and rows[0].fits


def test_api_accepts_spec_and_gpu_objects():
    spec = kvplan.load_model("llama3-8b")
    gpu = kvplan.get_gpu("NVIDIA L4")
    assert kvplan.fit(spec, gpu).gpu == "l4-24gb"
    assert kvplan.estimate(spec, 4096).total_bytes == 536_870_912


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: kvplan.load_model("llama3-8bb"), SpecError, "unknown model 'llama3-8bb'"),
        (lambda: kvplan.estimate("llama3-8b", 0), UsageError, "--seq"),
        (lambda: kvplan.fit("llama3-8b", "h1000"), UsageError, "--gpu: unknown GPU 'h1000'"),
        (lambda: kvplan.fleet("llama3-8b"), UsageError, "workload: give a workload, or concurrency with seq"),
        # the CLI's rules, one UsageError each (they were a TypeError, a ValueError, or a cost of -1.0 / nan)
        (lambda: kvplan.fit("llama3-8b", "h100", gpu_memory_utilization="0.9"), UsageError,
         "--gpu-memory-utilization: '0.9' must be a number, not a str"),
        (lambda: kvplan.fit("llama3-8b", "h100", gpu_memory_utilization=True), UsageError,
         "--gpu-memory-utilization: True must be a number, not a bool"),
        (lambda: kvplan.fit("llama3-8b", "h100", gpu_memory_utilization=float("nan")), UsageError,
         "--gpu-memory-utilization: nan must be in (0, 1]"),
        (lambda: kvplan.fleet("llama3-8b", concurrency=10, seq=4096, gpus=["h100"], prices={"h100": "abc"}),
         UsageError, "--price: 'h100=abc' must be GPU=USD_PER_HOUR, e.g. h100=2.49"),
        (lambda: kvplan.fleet("llama3-8b", concurrency=10, seq=4096, gpus=["h100"], prices={"h100": -1}),
         UsageError, "--price: 'h100=-1': the price must be >= 0 USD per GPU-hour"),
        (lambda: kvplan.fleet("llama3-8b", concurrency=10, seq=4096, gpus=["h100"], prices={"h100": float("nan")}),
         UsageError, "--price: 'h100=nan' must be GPU=USD_PER_HOUR"),
        (lambda: kvplan.fleet("llama3-8b", concurrency=10, seq=4096, gpus=["h100"], prices={"l4": 1.0}),
         UsageError, "--price: 'l4' (l4-24gb) is not among the GPUs planned"),
        (lambda: kvplan.fleet("llama3-8b", [1, 2], gpus=["h100"]), UsageError,
         "workload: list '[1, 2]': give a workload YAML path, a mapping"),
        (lambda: kvplan.fleet("llama3-8b", 5, gpus=["h100"]), UsageError, "workload: int '5': give a workload"),
        (lambda: kvplan.fleet("llama3-8b", concurrency=10, seq=4096, gpus=[]), UsageError,
         "gpus: an empty list; give GPUs, or None for the whole catalog"),
    ],
)  # fmt: skip
def test_errors_are_kvplan_errors(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()


def test_fit_and_fleet_are_callable_modules_too():
    import kvplan.fit as fitmod  # importing the module must not shadow the function

    assert kvplan.fit is fitmod and fitmod.FitOptions is not None
    assert kvplan.fit("llama3-8b", "h100").fits
    from kvplan import fleet

    assert fleet("llama3-8b", concurrency=1, seq="1k", gpus=["h100"], tps=[1])[0].fits


def test_import_kvplan_is_cheap():
    code = "import sys, kvplan; print(sorted(m for m in sys.modules if m.split('.')[0] in {'kvplan', 'numpy', 'yaml', 'typer', 'rich', 'huggingface_hub', 'gguf', 'torch'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "['kvplan']"


def test_planning_commands_import_neither_hub_nor_gguf():
    code = (
        "import sys; from kvplan.cli import run; run(['estimate', 'meta-llama/Llama-3.1-8B', '--seq', '4096']);"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'huggingface_hub', 'gguf', 'torch'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


# --- spec sources ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((ROOT / "model_specs").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_bundled_spec_names_its_source(path):
    data = yaml.safe_load(path.read_text())
    assert isinstance(data.get("source"), str) and data["source"].startswith(("https://", "http://"))


def test_a_bundled_spec_without_source_is_an_error(tmp_path):
    from kvplan.loader import load_spec_yaml

    p = tmp_path / "x.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "x",
                "num_layers": 2,
                "num_q_heads": 4,
                "num_kv_heads": 2,
                "head_dim": 8,
                "dtype": "bf16",
                "max_model_len": 128,
            }
        )
    )
    with pytest.raises(SpecError, match="missing required field source"):
        load_spec_yaml(p, require_source=True)


def test_a_user_spec_without_source_warns(cli, tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "mine",
                "num_layers": 2,
                "num_q_heads": 4,
                "num_kv_heads": 2,
                "head_dim": 8,
                "dtype": "bf16",
                "max_model_len": 128,
            }
        )
    )
    code, out, err = cli("estimate", p, "--seq", "16")
    assert code == 0
    assert (
        err
        == f"kvplan: warning: {p}: no source (the config.json the numbers come from); add one so the spec can be checked\n"
    )
    assert "KV cache: 2,048 B" in out  # 2 layers × 2 heads × (8 + 8) × 16 tokens × 2 B


# --- install hints --------------------------------------------------------------------------------


def test_install_hint_for_a_clone(monkeypatch):
    from kvplan import install

    monkeypatch.setattr(install, "installed_from_clone", lambda: True)
    assert install.extra_hint("plot") == "pip install '.[plot]' in your kvplan clone"
    assert install.extra_hint("verify") == (
        "install the torch build for your machine first (CPU: pip install torch==2.13.0), then "
        "pip install '.[verify]' in your kvplan clone"
    )


def test_install_hint_from_an_index(monkeypatch):
    from kvplan import install

    monkeypatch.setattr(install, "installed_from_clone", lambda: False)
    assert install.extra_hint("plot") == "pip install 'kvplan[plot]'"
    assert install.extra_hint("verify").endswith("then pip install 'kvplan[verify]'")


def test_this_checkout_counts_as_a_clone():
    from kvplan.install import installed_from_clone

    # the tests run from a source tree (CI: `pip install '.[test]'` in a clone, recorded as dir_info)
    assert installed_from_clone() is True


def test_a_list_of_lengths_is_refused_in_python_terms():
    # the December 2026 trial: kvplan.estimate(cfg, ['8k', '32k']) blamed a comma and named the CLI's --seq
    with pytest.raises(UsageError) as e:
        kvplan.estimate("llama3-8b", ["8k", "32k"])
    assert str(e.value) == (
        "seq: one token count (an int, or a string like '32k'), not a list (['8k', '32k']); call kvplan.estimate "
        "once per length"
    )
    assert [kvplan.estimate("llama3-8b", s).total_bytes for s in ("8k", "32k")] == [1 << 30, 1 << 32]


def test_module_docs_point_at_files_that_ship():
    import kvplan.fit

    assert "shared/reference" not in (kvplan.fit.__doc__ or "")
