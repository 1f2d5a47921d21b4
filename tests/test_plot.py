"""kvplan plot: exact data behind the figure, PNG/SVG files written atomically, no overwrite without --force."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kvplan.calc import estimate
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled
from kvplan.plot import plot_data, sample_points

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_sample_points_cover_every_power_of_two_and_both_ends():
    pts = sample_points(131072)
    assert pts[0] == 512 and pts[-1] == 131072
    assert all(1 << k in pts for k in range(9, 18))
    assert pts == sorted(set(pts))
    assert len(pts) == 8 * 8 + 1  # 8 doublings from 512 to 128k, 8 points each, plus the end
    assert sample_points(100) == [100]  # shorter than the 512-token start: one point
    assert sample_points(1000)[:2] == [512, 558]  # 512 × 2^(1/8) = 558.3


def _fit_budget(model: str, gpu: str, **opts) -> int:
    from kvplan.fit import FitOptions, get_engine, plan_fit

    engine = get_engine(opts.pop("engine", "vllm"))
    return plan_fit(load_bundled(model), get_gpu(gpu), FitOptions(engine=engine, **opts)).kv_budget_bytes


def test_plot_data_is_exact_bytes():
    llama, gemma = load_bundled("llama3-8b"), load_bundled("gemma3-27b")
    data = plot_data([llama, gemma], [get_gpu("h100"), get_gpu("l4")], max_seq=131072)
    at = dict(zip(data.points, data.curves[0].bytes, strict=True))
    assert at[4096] == 536_870_912  # 4096 × 131,072 B (README)
    gemma_at = dict(zip(data.points, data.curves[1].bytes, strict=True))
    assert gemma_at[131072] == 11_173_625_856  # gemma3-27b at 128k (README)
    for s, b in zip(data.points, data.curves[1].bytes, strict=True):
        assert b == estimate(gemma, s).bytes_per_request
    assert [c.label for c in data.curves] == ["llama3-8b (GQA, KV bf16)", "gemma3-27b (GQA, KV bf16)"]
    # one budget per (model, GPU), models then GPUs in order
    assert [(b.model, b.gpu) for b in data.budgets] == [
        ("llama3-8b", "h100-sxm-80gb"), ("llama3-8b", "l4-24gb"), ("gemma3-27b", "h100-sxm-80gb"),
        ("gemma3-27b", "l4-24gb"),
    ]  # fmt: skip


MODELS = ["llama3.1-8b", "llama3.1-70b", "gemma3-27b", "deepseek-v3", "gpt-oss-120b"]
GPUS = ["h100", "l4", "h200"]


def test_each_models_budget_is_fits_on_each_gpu(cli):
    # The command: every GPU's budget used to be the first model's (llama3.1-8b: 54.6 GiB on an
    # H100) and was drawn under Llama-3.1-70B's curve, which leaves no KV memory on one H100.
    data = plot_data([load_bundled(m) for m in MODELS], [get_gpu(g) for g in GPUS], max_seq=131072)
    assert len(data.budgets) == len(MODELS) * len(GPUS)
    for m in MODELS:
        for g, b in zip(GPUS, data.budgets_of(m), strict=True):
            assert b.budget_bytes == _fit_budget(m, g), (m, g)
            code, out, _ = cli("fit", m, "--gpu", g, "--max-model-len", "4k", "--json")
            assert json.loads(out)["kv_budget_bytes"] == b.budget_bytes, (m, g)
            assert b.fits == (b.budget_bytes > 0)
            if b.fits:  # the line drawn against the budget is fit's per-request bytes, and crosses it where fit refuses
                code, out, _ = cli("fit", m, "--gpu", g, "--max-model-len", "128k", "--json")
                assert json.loads(out)["kv_bytes_per_request"] == b.request_bytes[-1], (m, g)
                assert (code == 0) == (b.request_bytes[-1] <= b.budget_bytes) == b.request_fits[-1], (m, g)
    # llama3.1-70b: 70.6e9 parameters × 2 B = 141.2e9 B = 131.5 GiB of bf16 weights, more than an H100's
    # 79.2 GiB (or an H200's 139.8 GiB × 0.9): no KV budget on any of the three GPUs, each one marked
    seventy = data.budgets_of("llama3.1-70b")
    assert [b.fits for b in seventy] == [False, False, False]
    assert all(b.weights_bytes == 141_200_000_000 for b in seventy)
    assert (
        "--gpu h100-sxm-80gb: llama3.1-70b does not fit: its weights, activation and overhead leave no KV memory "
        "(vllm, TP=1); marked in its panel"
    ) in data.notes
    # the small model still fits all three, each with its own budget
    eight = data.budgets_of("llama3.1-8b")
    assert all(b.fits for b in eight) and len({b.budget_bytes for b in eight}) == 3
    # sliding-window gemma3-27b on an H100: its exact cache (10.4 GiB) lies under the budget, but what vLLM counts
    # per request at 128k (window − 1 + in-flight tokens per sliding layer, whole blocks: 17.98 GiB) does not, and
    # fit refuses: the line drawn is the latter
    (gemma,) = [b for b in data.budgets_of("gemma3-27b") if b.gpu == "h100-sxm-80gb"]
    exact = data.curves[MODELS.index("gemma3-27b")].bytes[-1]
    assert exact == 11_173_625_856 < gemma.budget_bytes < gemma.request_bytes[-1] == 19_301_662_720


def _vllm_request_bytes(geometry: str, max_num_batched_tokens: int) -> dict[int, int]:
    """{max_model_len: bytes of one request} as vLLM 0.33's own get_kv_cache_configs counts them (whole blocks of
    every KV cache group), default settings, TP = PP = 1, bf16 (tests/fixtures/vllm_golden.json)."""
    golden = json.loads((Path(__file__).resolve().parent / "fixtures" / "vllm_golden.json").read_text())
    return {
        c["max_model_len"]: sum(c["request_bytes"])
        for c in golden["configs"]
        if c["geometry"] == geometry and (c["tp"], c["pp"], c["kv_dtype"]) == (1, 1, "bf16")
        and c["max_num_batched_tokens"] == max_num_batched_tokens and not c.get("speculative")
        and c["async_scheduling"] and c["prefix_caching"] and c["hybrid_kv_cache_manager"]
    }  # fmt: skip


def test_per_request_line_is_what_fit_counts_for_a_sliding_window_model(cli):
    # The README user's command drew gemma3-27b's exact cache (10.4 GiB at 128k, kvplan estimate) under its
    # 17.5 GiB budget on an H100 while 'kvplan fit --max-model-len 128k' refused: vLLM 0.33 holds window − 1 +
    # in-flight tokens per sliding layer, in whole blocks of every group. The line drawn against the budget is now
    # what fit counts, equal to vLLM's own count (an H100's defaults: 8,192 batched tokens, async scheduling).
    from kvplan.fit import FitOptions, plan_fit

    gemma = load_bundled("gemma3-27b")
    data = plot_data([gemma, load_bundled("llama3-8b")], [get_gpu("h100")], max_seq=131072)
    line = data.budgets_of("gemma3-27b")[0]
    at = dict(zip(data.points, line.request_bytes, strict=True))
    vllm = _vllm_request_bytes("gemma3-27b", 8192)
    assert at[4096] == vllm[4096] and at[131072] == vllm[131072] == 19_301_662_720  # 17.98 GiB
    exact = dict(zip(data.points, data.curves[0].bytes, strict=True))
    assert exact[131072] == 11_173_625_856  # the exact cache, kept as its own (thin) line: README's figure
    assert exact[131072] < line.budget_bytes < at[131072]  # the exact line is under the budget, vLLM's is not
    code, out, err = cli("fit", "gemma3-27b", "--gpu", "h100", "--max-model-len", "128k", "--json")
    fit = json.loads(out)
    assert code == 1 and fit["kv_bytes_per_request"] == at[131072] and fit["kv_budget_bytes"] == line.budget_bytes
    assert "needs 17.9761 GiB of KV per GPU" in err
    # point by point, the line lies under the budget exactly where fit takes one request (vLLM: one pool)
    h100 = get_gpu("h100")
    for s in data.points:
        fits = plan_fit(gemma, h100, FitOptions(max_model_len=s)).fits
        assert fits == (at[s] <= line.budget_bytes), s
    assert line.refused_under_budget() == ()
    assert line.request_fits[-1] is False and line.request_fits[0] is True
    # a full-attention model: vLLM's count is whole 16-token blocks of the exact cache
    llama = data.budgets_of("llama3-8b")[0]
    assert dict(zip(data.points, llama.request_bytes, strict=True))[4096] == 536_870_912  # 4096 × 131,072 B


def test_the_figure_says_which_line_is_which_and_crosses_what_fit_refuses_under_the_budget(cli):
    pytest.importorskip("matplotlib")
    from kvplan.plot import figure

    data = plot_data([load_bundled("gemma3-27b")], [get_gpu("h100"), get_gpu("a100")], max_seq=131072)
    ax = next(a for a in figure(data).axes if a.get_visible())
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "gemma3-27b (GQA, KV bf16): exact cache (kvplan estimate)" in legend
    # an A100's vLLM defaults (2,048 batched tokens) reserve fewer sliding tokens than an H100's: two lines
    assert "per request as vllm counts it (kvplan fit): h100-sxm-80gb" in legend
    assert "per request as vllm counts it (kvplan fit): a100-sxm-80gb" in legend
    h100, a100 = data.budgets_of("gemma3-27b")
    assert a100.request_bytes[-1] == _vllm_request_bytes("gemma3-27b", 2048)[131072] < h100.request_bytes[-1]
    solid = next(ln for ln in ax.get_lines() if ln.get_label().endswith(": h100-sxm-80gb"))
    assert list(solid.get_ydata()) == [b / (1 << 30) for b in h100.request_bytes]
    # SGLang's hybrid-SWA pools: gpt-oss-120b at 84,990 tokens lies under its budget in bytes, but its full-layer
    # pool is short and fit refuses (exit 1); the point is crossed
    gpt = plot_data([load_bundled("gpt-oss-120b")], [get_gpu("h100")], max_seq=131072, engine="sglang")
    (line,) = gpt.budgets
    refused = [gpt.points[j] for j in line.refused_under_budget()]
    assert 84990 in refused
    code, _, err = cli("fit", "gpt-oss-120b", "--gpu", "h100", "--engine", "sglang", "--max-model-len", "84990")
    assert code == 1 and "needs 84,990 tokens of the full-layer pool" in err
    ax = next(a for a in figure(gpt).axes if a.get_visible())
    crosses = [ln for ln in ax.get_lines() if ln.get_marker() == "x" and len(ln.get_xdata())]
    assert [list(c.get_xdata()) for c in crosses] == [refused]


def test_does_not_fit_is_drawn_in_the_models_panel():
    pytest.importorskip("matplotlib")
    from kvplan.plot import figure

    data = plot_data([load_bundled("llama3.1-8b"), load_bundled("llama3.1-70b")], [get_gpu("h100")], max_seq=32768)
    fig = figure(data)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title(loc="left") for ax in panels] == [
        "llama3.1-8b: KV budget per GPU with bf16 weights",
        "llama3.1-70b: KV budget per GPU with bf16 weights",
    ]
    texts = [[t.get_text() for t in ax.texts] for ax in panels]
    assert texts[0] == [f"h100-sxm-80gb: {data.budgets[0].budget_bytes / (1 << 30):,.1f} GiB"]  # its budget line
    usable = data.budgets[1].usable_bytes / (1 << 30)  # 0.9 × 79.2 GiB = 71.3 GiB (vLLM)
    # no budget line but a note: 141.2e9 B of weights = 131.5 GiB
    assert texts[1] == [f"h100-sxm-80gb: does not fit: weights 131.5 GiB/GPU, usable {usable:,.1f} GiB"]
    assert len(panels[1].lines) == 1  # the curve only: no budget line
    legend = [t.get_text() for t in panels[1].get_legend().get_texts()]
    assert legend == ["llama3.1-70b (GQA, KV bf16)"]  # the GPU is named once, in the red note


def test_unknown_weights_are_marked_in_the_models_panel(cli, tmp_path):
    pytest.importorskip("matplotlib")
    from dataclasses import replace

    from kvplan.plot import figure

    unknown = replace(load_bundled("gemma4-26b-a4b"), param_count=None, moe=None)
    data = plot_data([unknown, load_bundled("llama3-8b")], [get_gpu("h100")], max_seq=32768)
    assert data.no_budget == (("gemma4-26b-a4b", "h100-sxm-80gb", "weights unknown (no param_count)"),)
    assert data.notes == (
        "--gpu h100-sxm-80gb: no KV budget for gemma4-26b-a4b: weights unknown (no param_count) (add param_count "
        "to a spec YAML, or plan it with 'kvplan fit --weights-gib'); marked in its panel",
    )
    fig = figure(data)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title(loc="left") for ax in panels] == [
        "gemma4-26b-a4b: no KV budget: weights unknown (no param_count)",
        "llama3-8b: KV budget per GPU with bf16 weights",
    ]
    assert [t.get_text() for t in panels[0].texts] == ["h100-sxm-80gb: no KV budget: weights unknown (no param_count)"]
    assert not any("h100" in t.get_text() for t in panels[0].get_legend().get_texts())  # named once, above
    # one model alone, from a config.json kvplan does not count (a hybrid): still its own panel, marked
    config = Path(__file__).resolve().parent / "fixtures" / "hf_configs" / "jamba-1.5-mini.json"
    code, _, err = cli("plot", config, "--gpu", "h100", "--out", tmp_path / "k.png")
    assert code == 0 and "no KV budget for jamba-1.5-mini: weights unknown (no param_count)" in err


def test_tp_engine_and_weights_dtype_as_fit(cli, tmp_path):
    # 70B with fp8 weights at TP=2: 70.6e9 B + an fp32 scale per 128 × 128 block (4 × ceil(70.6e9 / 16,384) =
    # 17,236,332 B) = 70,617,236,332 B, / 2 = 35,308,618,166 B of weights per H100: it fits now
    seventy = load_bundled("llama3.1-70b")
    data = plot_data([seventy], [get_gpu("h100")], max_seq=8192, tensor_parallel_size=2, weights_dtype="fp8")
    (b,) = data.budgets
    assert b.fits and b.weights_bytes == 35_308_618_166 and b.tensor_parallel_size == 2
    assert b.budget_bytes == _fit_budget("llama3.1-70b", "h100", tensor_parallel_size=2, weights_dtype="fp8")
    # the curve is per GPU at TP=2: 4 of 8 KV heads, 80 layers × 2 × 4 × 128 × 2 B = 163,840 B per token
    at = dict(zip(data.points, data.curves[0].bytes, strict=True))
    assert at[4096] == 4096 * 163_840
    data = plot_data([seventy], [get_gpu("h200")], max_seq=8192, tensor_parallel_size=2, engine="sglang")
    assert data.budgets[0].budget_bytes == _fit_budget("llama3.1-70b", "h200", tensor_parallel_size=2, engine="sglang")
    assert data.budgets[0].engine == "sglang"
    out = tmp_path / "p.png"
    code, stdout, err = cli(
        "plot", "llama3.1-70b", "--gpu", "h100", "--tp", "2", "--weights-dtype", "fp8", "--kv-dtype", "fp8",
        "--engine", "vllm", "--max-seq", "32k", "--out", out,
    )  # fmt: skip
    assert (code, stdout, err) == (0, f"wrote {out}\n", "")
    code, stdout, err = cli("plot", "llama3-8b", "--tp", "3", "--out", tmp_path / "q.png")
    assert (code, stdout) == (2, "") and err.startswith("kvplan: error: --tp: 3 does not divide llama3-8b's heads")
    assert err.count("\n") == 1


def test_topologies_and_gpus_without_budget_give_notes():
    data = plot_data([load_bundled("llama3-8b")], [get_gpu("l4")], max_seq=8192, topologies=True, kv_dtype="fp8")
    labels = [c.label for c in data.curves]
    assert labels == ["llama3-8b (GQA, KV fp8_e4m3)", "llama3-8b as MHA (32 KV heads)", "llama3-8b as MQA (1 KV heads)"]
    own, mha, mqa = (dict(zip(data.points, c.bytes, strict=True))[4096] for c in data.curves)
    # fp8: 1 B per element; 2 × 32 layers × H_kv × 128 × 4096 tokens
    assert (own, mha, mqa) == (2 * 32 * 8 * 128 * 4096, 2 * 32 * 32 * 128 * 4096, 2 * 32 * 1 * 128 * 4096)
    data = plot_data([load_bundled("deepseek-v3")], [get_gpu("l4")], max_seq=4096, topologies=True)
    assert len(data.curves) == 1  # MLA layers cache one latent whatever H_kv is
    assert data.notes == (
        "--topologies: deepseek-v3 as MQA caches the same bytes (MLA layers do not depend on KV heads); not drawn",
        "--gpu l4-24gb: deepseek-v3 does not fit: its weights, activation and overhead leave no KV memory "
        "(vllm, TP=1); marked in its panel",
    )


def test_png_written_refused_without_force_then_forced(cli, tmp_path):
    out = tmp_path / "kv.png"
    code, stdout, err = cli("plot", "llama3-8b", "gemma3-27b", "--gpu", "h100", "--max-seq", "32k", "--out", out)
    assert (code, stdout, err) == (0, f"wrote {out}\n", "")
    first = out.read_bytes()
    assert first.startswith(PNG_SIGNATURE) and len(first) > 20_000

    code, stdout, err = cli("plot", "llama3-8b", "--out", out)
    assert (code, stdout) == (2, "")
    assert err == f"kvplan: error: --out: '{out}' exists; add --force to overwrite it\n"
    assert out.read_bytes() == first

    code, stdout, err = cli("plot", "deepseek-v3", "--topologies", "--gpu", "l4", "--out", out, "--force")
    assert code == 0
    assert err == (
        "kvplan: warning: --topologies: deepseek-v3 as MQA caches the same bytes (MLA layers do not depend on KV "
        "heads); not drawn\n"
        "kvplan: warning: --gpu l4-24gb: deepseek-v3 does not fit: its weights, activation and overhead leave "
        "no KV memory (vllm, TP=1); marked in its panel\n"
    )
    second = out.read_bytes()
    assert second.startswith(PNG_SIGNATURE) and second != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kv.png"]  # no temporary file left


def test_svg(cli, tmp_path):
    out = tmp_path / "kv.svg"
    code, _, err = cli("plot", "gpt-oss-20b", "--topologies", "--gpu", "h200", "--max-seq", "128k", "--out", out)
    assert code == 0, err
    text = out.read_text()
    assert text.startswith("<?xml") and "<svg" in text and text.rstrip().endswith("</svg>")


@pytest.mark.parametrize(
    "args, line",
    [
        (["--out", "plot.pdf"], "kvplan: error: --out: 'plot.pdf' must end in .png or .svg"),
        (["--out", "no/such/folder/p.png"], "kvplan: error: --out: folder 'no/such/folder' does not exist"),
        (
            ["--max-seq", "lots"],
            "kvplan: error: --max-seq: 'lots' is not a token count; use e.g. 4096, 32k or 128k (k = 1024)",
        ),
        # the axis starts at 512 tokens: 512 or less used to draw with matplotlib's two-line xlim warning
        *(
            (
                ["--max-seq", v],
                f"kvplan: error: --max-seq: {n} tokens is out of range; the axis starts at 512 tokens, "
                "so give 513 to 1,073,741,824 (1024m)",
            )
            for v, n in (("1", "1"), ("100", "100"), ("512", "512"), ("1025m", "1,074,790,400"))
        ),
        (
            ["--gpu", "h1000"],
            "kvplan: error: --gpu: unknown GPU 'h1000'; did you mean h100, h200, h100-nvl? "
            "(or give the CUDA-visible total, like 80GB or 79.2GiB)",
        ),
    ],
)
def test_bad_flags_one_line_exit_2(cli, tmp_path, monkeypatch, args, line):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("plot", "llama3-8b", *args)
    assert (code, out, err) == (2, "", line + "\n")
    assert list(tmp_path.iterdir()) == []


def test_without_matplotlib_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code, out, err = cli("plot", "llama3-8b", "--out", tmp_path / "p.png")
    from kvplan.install import extra_hint  # the install line depends on how kvplan was installed

    assert (code, out, err) == (2, "", f"kvplan: error: kvplan plot needs matplotlib: {extra_hint('plot')}\n")
    assert list(tmp_path.iterdir()) == []


def test_max_seq_range_checked_before_any_work():
    from kvplan.errors import UsageError
    from kvplan.plot import MAX_SEQ_LIMIT, check_max_seq

    spec = load_bundled("llama3-8b")
    # huge ints used to reach matplotlib's axis code: TypeError traceback
    for bad in (512, 0, MAX_SEQ_LIMIT + 1, 10**23, True):
        with pytest.raises(
            UsageError, match=r"^--max-seq: .* is out of range; .* give 513 to 1,073,741,824 \(1024m\)$"
        ):
            plot_data([spec], max_seq=bad)
    check_max_seq(513)
    check_max_seq(MAX_SEQ_LIMIT)
    data = plot_data([spec], max_seq=MAX_SEQ_LIMIT)
    assert data.points[0] == 512 and data.points[-1] == 1 << 30 and len(data.points) == 21 * 8 + 1


def test_shortest_and_longest_axis_draw_without_warnings(cli, tmp_path):
    import warnings

    for max_seq in ("513", "1024m"):
        out = tmp_path / f"p{max_seq}.svg"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # matplotlib's UserWarning (identical xlims) would fail the test
            code, stdout, err = cli("plot", "llama3-8b", "--max-seq", max_seq, "--out", out)
        assert (code, err) == (0, ""), err
        assert stdout == f"wrote {out}\n"


# --- fuzz findings: unusable --out paths, no clobber at the final write ---------------------------------------


@pytest.mark.parametrize("out", ["/tmp/" + "a" * 300 + ".png", "/proc/kvplan-x.png", "/sys/kvplan-x.png"])
def test_unusable_out_is_one_line(cli, out):
    code, _, err = cli("plot", "llama3-8b", "--out", out)
    assert code == 2 and err.count("\n") == 1 and err.startswith("kvplan: error: --out: ")


def test_dangling_symlink_is_not_followed(cli, tmp_path):
    link = tmp_path / "p.png"
    link.symlink_to(tmp_path / "target.png")
    code, _, err = cli("plot", "llama3-8b", "--out", link)
    assert code == 2 and "exists; add --force" in err and not (tmp_path / "target.png").exists()


def test_final_write_does_not_replace_a_file_that_appeared(tmp_path):
    pytest.importorskip("matplotlib")
    from kvplan.errors import UsageError
    from kvplan.plot import _write_atomic, figure

    out = tmp_path / "p.png"
    fig = figure(plot_data([load_bundled("llama3-8b")], [], 8192))
    out.write_bytes(b"mine")  # appeared after check_out
    with pytest.raises(UsageError, match="exists; add --force"):
        _write_atomic(fig, out)
    assert out.read_bytes() == b"mine" and sorted(p.name for p in tmp_path.iterdir()) == ["p.png"]
    _write_atomic(fig, out, force=True)
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_wrote_line_escapes_control_characters_in_the_path(cli, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "a\nb\x1b[31m.svg"  # a newline and an ESC colour code in the file name
    code, stdout, err = cli("plot", "llama3-8b", "--max-seq", "4k", "--out", out)
    assert (code, err) == (0, "")
    assert stdout == f"wrote {tmp_path}/a\\nb\\x1b[31m.svg\n" and out.is_file()  # one line, no colour


# --- the December 2026 trial's nits -----------------------------------------------------------------------


def test_a_panel_names_each_gpu_once_and_small_ticks_read_in_mib():
    from kvplan.gpus import get_gpu
    from kvplan.loader import load_bundled
    from kvplan.plot import figure, gib_tick, plot_data

    spec = load_bundled("llama3.1-8b")
    data = plot_data([spec], [get_gpu("h100")], max_seq=131072, kv_dtype="fp8", tensor_parallel_size=8)
    fig = figure(data)
    ax = next(a for a in fig.axes if a.get_visible())
    names = [t.get_text() for t in ax.texts] + [t.get_text() for t in ax.get_legend().get_texts()]
    assert not any("NVIDIA" in n for n in names)  # the catalog id, not the GPU's long name as well
    # once: on its line (it was on the line and again in the legend)
    assert sum("h100-sxm-80gb" in n for n in names) == 1
    assert [t.get_text() for t in ax.texts] == [f"h100-sxm-80gb: {data.budgets[0].budget_bytes / (1 << 30):,.1f} GiB"]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    # 512 tokens × 32 layers × 1 KV head × 128 × 2 × 1 B = 4 MiB per GPU at TP 8, fp8: ticks reach 2^-8 GiB
    assert "4 MiB" in labels and not any(label.startswith("0.00") for label in labels)
    assert [gib_tick(x) for x in (16, 1, 0.5, 2**-7, 2**-12)] == ["16", "1", "512 MiB", "8 MiB", "0.25 MiB"]


def test_throughput_limits_are_drawn_above_the_bounds_and_wall_labels_on_a_box(tmp_path, monkeypatch):
    from kvplan import plot as plotmod
    from kvplan.gpus import get_gpu
    from kvplan.loader import load_bundled

    captured = {}
    real = plotmod._write_atomic
    monkeypatch.setattr(
        plotmod,
        "_write_atomic",
        lambda fig, out, force=False: captured.setdefault("fig", fig) and real(fig, out, force),
    )
    gpus = [get_gpu("h100"), get_gpu("h200")]
    plotmod.plot_throughput(load_bundled("llama3.1-70b"), gpus, 8192, tmp_path / "t.png", tensor_parallel_size=4)
    ax = captured["fig"].axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    limit = lines["NVIDIA H100 80GB HBM3: physical limit"]
    bound = next(ln for label, ln in lines.items() if label.startswith("NVIDIA H200: estimate (MBU"))
    assert limit.get_zorder() > bound.get_zorder()  # H100's limit (3.35 TB/s) lies on H200's 4.8 × 0.7 line
    walls = [t for t in ax.texts if "requests fit" in t.get_text()]
    from kvplan.fit import plan_fit
    from kvplan.options import FitOptions

    fits = [plan_fit(load_bundled("llama3.1-70b"), g, FitOptions(tensor_parallel_size=4, max_model_len=8192))
            for g in gpus]  # fmt: skip
    assert [t.get_text() for t in walls] == [
        f"{g.id}: {f.max_concurrent_requests} requests fit" for g, f in zip(gpus, fits, strict=True)
    ]
    assert fits[0].max_concurrent_requests < fits[1].max_concurrent_requests
    assert all(t.get_bbox_patch() is not None for t in walls)


def test_plot_help_and_throughput_axis_say_what_is_drawn(cli, tmp_path, monkeypatch):
    # --mbu / --mfu said "(0.7)" / "(0.5)" while the estimate line uses the calibrated efficiencies (MBU 0.51, MFU
    # 0.28 for vLLM on an H100); the y axis said "upper bound" of the estimate line too
    from kvplan import perf
    from kvplan import plot as plotmod

    code, out, _ = cli("plot", "--help")
    flat = " ".join(out.split())
    assert code == 0 and "(0.7)" not in flat and "(0.5)" not in flat
    assert (
        "--mbu <float> With --throughput: the estimate's fraction of peak memory bandwidth (default: calibrated "
        in flat
    )
    eff = perf.estimate_efficiency("vllm", get_gpu("h100"))
    captured = {}
    real = plotmod._write_atomic
    monkeypatch.setattr(
        plotmod,
        "_write_atomic",
        lambda fig, out, force=False: captured.setdefault("fig", fig) and real(fig, out, force),
    )
    _, data = plotmod.plot_throughput(load_bundled("llama3.1-8b"), [get_gpu("h100")], 4096, tmp_path / "t.png")
    assert (data.mbu, data.mfu) == (eff.mbu, eff.mfu)  # the calibrated figures, not 0.7 / 0.5
    ax = captured["fig"].axes[0]
    assert "upper bound" not in ax.get_ylabel() and "estimate" in ax.get_ylabel() and "limit" in ax.get_ylabel()
    assert any(f"MBU {eff.mbu:.2g}, MFU {eff.mfu:.2g}" in t.get_text() for t in ax.get_legend().get_texts())


def test_without_tp_each_panel_takes_the_smallest_tp_that_leaves_kv_memory(cli, tmp_path):
    # llama3.1-70b: 141.2e9 B of bf16 weights = 131.5 GiB, more than an H100 or an H200 has at TP 1 (its panel was
    # "does not fit"); at TP 2, 65.7 GiB per GPU leaves KV memory on both. llama3.1-8b fits both at TP 1.
    pytest.importorskip("matplotlib")
    from kvplan.plot import figure

    models, gpus = ["llama3.1-8b", "llama3.1-70b"], ["h100", "h200"]
    data = plot_data([load_bundled(m) for m in models], [get_gpu(g) for g in gpus], max_seq=32768,
                     tensor_parallel_size=None)  # fmt: skip
    assert data.model_tp == (("llama3.1-8b", 1), ("llama3.1-70b", 2))
    for m, tp in data.model_tp:  # each budget as `kvplan fit --tp` gives it
        for g, b in zip(gpus, data.budgets_of(m), strict=True):
            assert b.fits and b.tensor_parallel_size == tp
            assert b.budget_bytes == _fit_budget(m, g, tensor_parallel_size=tp)
    # the 70B curve is per GPU at TP 2: 4 of 8 KV heads, 80 layers × 2 × 4 × 128 × 2 B = 163,840 B per token
    assert dict(zip(data.points, data.curves[1].bytes, strict=True))[4096] == 4096 * 163_840
    assert data.notes == ()
    panels = [ax for ax in figure(data).axes if ax.get_visible()]
    assert [ax.get_title(loc="left") for ax in panels] == [
        "llama3.1-8b: KV budget per GPU with bf16 weights",
        "llama3.1-70b at TP=2: KV budget per GPU with bf16 weights\n"
        "TP=2: the smallest TP with KV memory on each GPU (no --tp given)",
    ]
    # --tp given: every panel at it, as before (the 70B does not fit at TP 1)
    code, _, err = cli("plot", *models, "--gpu", "h100", "--tp", "1", "--max-seq", "32k", "--out", tmp_path / "a.png")
    assert code == 0 and "llama3.1-70b does not fit" in err
    code, _, err = cli("plot", *models, "--gpu", "h100", "--max-seq", "32k", "--out", tmp_path / "b.png")
    assert (code, err) == (0, "")
