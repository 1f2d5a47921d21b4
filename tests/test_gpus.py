"""The GPU catalog: every entry loads, real memory totals, sizes, names, validation, `kvplan gpus`."""

from __future__ import annotations

import json
from io import StringIO

import pytest

from kvplan import render
from kvplan.errors import UsageError
from kvplan.gpus import GPU, CatalogError, build_catalog, get_gpu, load_catalog, load_catalog_file

MIB = 1 << 20


def _raw_catalog() -> dict:
    """The catalog file as written (kvplan/data/gpus.yaml), by id, read without kvplan.gpus."""
    import yaml

    from .conftest import ROOT

    entries = yaml.safe_load((ROOT / "kvplan" / "data" / "gpus.yaml").read_text())
    entries = entries["gpus"] if isinstance(entries, dict) else entries
    return {e["id"]: e for e in entries}


RAW_CATALOG = _raw_catalog()

# nvidia-smi / rocm-smi totals in MiB, copied from ../shared/reference/gpus.yaml (each seen verbatim in
# public nvidia-smi output, e.g. H100 '0MiB / 81559MiB' in NVIDIA/nccl#1264; H200 '0MiB / 143771MiB';
# A100-SXM4-80GB '71458MiB / 81920MiB'; L4 '70MiB / 23034MiB'); the first four are also quoted in
# ../shared/reference/ENGINES.md, "GPU memory totals".
SMI_TOTAL_MIB = {
    "h100": 81559,
    "h200": 143771,
    "a100-80gb": 81920,
    "l4": 23034,
    "a100-40gb": 40960,
    "b200": 183359,
    "rtx4090": 24564,
    "mi300x": 196592,  # rocm-smi 'VRAM Total Memory (B): 206141652992' / 2^20
}

# CUDA-visible totals observed in logs (same reference file): exact bytes where printed in bytes,
# else the printed GiB to the nearest MiB.
CUDA_TOTAL_BYTES = {
    "a100-40gb": 42_298_834_944,  # deviceQuery '40339 MBytes (42298834944 bytes)'
    "rtx6000-ada": 50_865_307_648,  # torch capacity APIs
    "h100": 81121 * MIB,  # vLLM 'total_gpu_memory 79.22GiB' = 81,121.28 MiB
    "h200": 143165 * MIB,  # vLLM 'total_gpu_memory (139.81GiB)' = 143,165.44 MiB
    "b200": 182630 * MIB,  # totalGlobalMem 178.35 GiB = 182,630.4 MiB
    "rtx5090": 32123 * MIB,  # vLLM 'total_gpu_memory (31.37GiB)' = 32,122.88 MiB
    "rtx3090": 24146 * MIB,  # vLLM 'total_gpu_memory=23.58GiB' = 24,145.92 MiB (engine_calibration vllm-01)
}

# The GPUs the `kvplan fit` issue names, by alias, with the catalog id each must resolve to.
REQUIRED = {
    "a100-40gb": "a100-sxm-40gb",
    "a100-80gb": "a100-sxm-80gb",
    "a100": "a100-sxm-80gb",
    "a100-pcie-40gb": "a100-pcie-40gb",
    "a100-pcie-80gb": "a100-pcie-80gb",
    "h100": "h100-sxm-80gb",
    "h100-pcie": "h100-pcie-80gb",
    "h100-nvl": "h100-nvl-94gb",
    "h200": "h200-sxm-141gb",
    "h200-nvl": "h200-nvl-141gb",
    "h20": "h20-96gb",
    "gh200": "gh200-96gb",
    "b200": "b200-180gb",
    "b300": "b300-288gb",
    "l4": "l4-24gb",
    "l40s": "l40s-48gb",
    "a10g": "a10g-24gb",
    "t4": "t4-16gb",
    "v100": "v100-16gb",  # the 16 GB part most clouds rent; v100-32gb by id
    "rtx3090": "rtx3090-24gb",
    "rtx4090": "rtx4090-24gb",
    "rtx5090": "rtx5090-32gb",
    "rtx6000-ada": "rtx6000-ada-48gb",
    "rtx-pro-6000": "rtx-pro-6000-blackwell-96gb",
    "mi300x": "mi300x-192gb",
    "mi325x": "mi325x-256gb",
    "mi355x": "mi355x-288gb",
}

# All 33 ids of ../shared/reference/gpus.yaml.
REFERENCE_IDS = {
    "a100-sxm-40gb", "a100-pcie-40gb", "a100-sxm-80gb", "a100-pcie-80gb", "h100-sxm-80gb", "h100-pcie-80gb",
    "h100-nvl-94gb", "h200-sxm-141gb", "h200-nvl-141gb", "h20-96gb", "gh200-96gb", "gh200-144gb", "b200-180gb",
    "b300-288gb", "gb300-288gb", "gb200-186gb", "l4-24gb", "l40s-48gb", "l40-48gb", "a10g-24gb", "a10-24gb",
    "t4-16gb", "v100-16gb", "v100-32gb", "rtx3090-24gb", "rtx4090-24gb", "rtx5090-32gb", "rtx6000-ada-48gb",
    "rtx-pro-6000-blackwell-96gb", "mi250x-128gb", "mi300x-192gb", "mi325x-256gb", "mi355x-288gb",
}  # fmt: skip
# Added after the December 2026 trial (users own them and found them missing), each with its nvidia-smi /
# HIP totals from public output: (id, smi MiB, CUDA/HIP-visible total in bytes, ECC-off smi MiB or None).
ADDED = {
    "rtx-a6000-48gb": (49140, 48676 << 20, None),  # ECC off is the workstation default; on: 46068
    "a40-48gb": (46068, 45416 << 20, 49140),
    "l20-48gb": (46068, None, 49140),
    "mi210-64gb": (65520, 68_702_699_520, None),
}


# --- the bundled catalog --------------------------------------------------------------------------


def test_catalog_holds_every_reference_gpu():
    assert {g.id for g in load_catalog()} == REFERENCE_IDS | set(ADDED)


@pytest.mark.parametrize("gpu_id", sorted(ADDED))
def test_the_added_gpus_carry_their_driver_totals(gpu_id):
    smi, cuda, ecc_off = ADDED[gpu_id]
    g = get_gpu(gpu_id)
    assert g.smi_total_mib == smi and g.status in ("confirmed", "corroborated") and g.source
    if cuda is None:  # estimated: smi total less the family's reserve (Ada: 631 MiB)
        assert (g.cuda_total_is_observed, g.cuda_total_bytes) == (False, (smi - 631) << 20)
    else:
        assert (g.cuda_total_is_observed, g.cuda_total_bytes) == (True, cuda) and g.cuda_total_source
    if ecc_off is not None:
        assert f"{ecc_off} MiB" in g.notes


@pytest.mark.parametrize(
    "typed, gpu_id",
    [("RTX A6000", "rtx-a6000-48gb"), ("NVIDIA RTX A6000", "rtx-a6000-48gb"), ("a6000", "rtx-a6000-48gb"),
     ("A40", "a40-48gb"), ("NVIDIA A40", "a40-48gb"), ("L20", "l20-48gb"), ("NVIDIA L20", "l20-48gb"),
     ("MI210", "mi210-64gb"), ("AMD Instinct MI210", "mi210-64gb")],
)  # fmt: skip
def test_the_added_gpus_resolve_by_the_names_users_type(typed, gpu_id):
    assert get_gpu(typed).id == gpu_id


@pytest.mark.parametrize("gpu", load_catalog(), ids=lambda g: g.id)
def test_every_entry_is_consistent(gpu: GPU):
    # Checked against the catalog file's own numbers (read here with yaml, in MiB and bytes as written),
    # not against the GPU class's definitions: a wrong unit or a dropped reserve shows.
    raw = RAW_CATALOG[gpu.id]
    assert get_gpu(gpu.id) is gpu
    for alias in gpu.aliases:
        assert get_gpu(alias) is gpu
    assert gpu.vendor in ("nvidia", "amd")
    assert gpu.smi_total_bytes == raw["smi_total_mib"] * 1_048_576
    assert isinstance(gpu.cuda_total_bytes, int)
    if raw["cuda_total_bytes"] is not None:  # seen in a log: taken verbatim, with its source
        assert gpu.cuda_total_is_observed and gpu.cuda_total_source
        assert gpu.cuda_total_bytes == raw["cuda_total_bytes"]
        # the reserve recorded is the observed gap, to the MiB
        gap_mib = raw["smi_total_mib"] - raw["cuda_total_bytes"] / 1_048_576
        assert abs(gap_mib - raw["reserve_mib"]) < 1
    else:  # estimated: nvidia-smi's total less the reserve, both whole MiB in the file
        assert not gpu.cuda_total_is_observed
        assert gpu.cuda_total_bytes == (raw["smi_total_mib"] - raw["reserve_mib"]) * 1_048_576
    # the driver keeps less than 1 GiB (NVIDIA: 0.4-0.75 GiB, ROCm: nothing)
    assert 0 <= raw["smi_total_mib"] * 1_048_576 - gpu.cuda_total_bytes < 1_073_741_824
    if gpu.vendor == "amd":
        assert raw["reserve_mib"] == 0 and gpu.cuda_total_bytes == gpu.smi_total_bytes
    # the smi total is at most the marketed size read as GiB and within 10% of it (GDDR ECC costs 1/16)
    assert 0.9 <= raw["smi_total_mib"] / (raw["marketed_gb"] * 1024) <= 1.0


@pytest.mark.parametrize("alias, smi_mib", sorted(SMI_TOTAL_MIB.items()))
def test_real_smi_totals(alias, smi_mib):
    g = get_gpu(alias)
    assert g.smi_total_mib == smi_mib
    assert g.smi_total_bytes == smi_mib * MIB


@pytest.mark.parametrize("alias, cuda_bytes", sorted(CUDA_TOTAL_BYTES.items()))
def test_observed_cuda_totals(alias, cuda_bytes):
    g = get_gpu(alias)
    assert g.cuda_total_is_observed
    assert g.cuda_total_bytes == cuda_bytes


def test_estimated_cuda_total_is_smi_total_less_reserve():
    # A100-SXM4-80GB: 81,920 MiB − 621 MiB reserve (the gap observed on A100-SXM4-40GB) = 81,299 MiB
    g = get_gpu("a100-80gb")
    assert not g.cuda_total_is_observed
    assert g.cuda_total_bytes == (81920 - 621) * MIB == 85_248_180_224
    # MI300X: no reserve on AMD parts → the rocm-smi total, 206,141,652,992 B
    assert get_gpu("mi300x").cuda_total_bytes == 206_141_652_992


@pytest.mark.parametrize("alias, gid", sorted(REQUIRED.items()))
def test_required_aliases(alias, gid):
    assert get_gpu(alias).id == gid


@pytest.mark.parametrize("text", ["H100", "h100", " H100 ", "H100-SXM-80GB", "h100_sxm", "H100 SXM"])
def test_names_ignore_case_and_separators(text):
    assert get_gpu(text).id == "h100-sxm-80gb"


def test_bare_numbers_are_names_not_sizes():
    assert get_gpu("4090").id == "rtx4090-24gb"
    assert get_gpu("RTX 4090").id == "rtx4090-24gb"


# --- sizes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, size",
    [
        ("80GB", 80_000_000_000),  # 80 × 10^9
        ("80GiB", 85_899_345_920),  # 80 × 2^30
        ("81559MiB", 85_520_809_984),  # 81,559 × 2^20
        ("80 gb", 80_000_000_000),
        ("23.5GiB", 25_232_932_864),  # 23.5 × 2^30
    ],
)
def test_size_is_the_cuda_visible_total(text, size):
    g = get_gpu(text)
    assert g.is_custom
    assert g.name == f"custom {text.strip()}"
    assert g.cuda_total_bytes == size
    assert g.cuda_total_is_observed
    assert g.smi_total_bytes is None
    assert g.reserve_bytes == 0


# --- errors ---------------------------------------------------------------------------------------

SIZE_HINT = "(or give the CUDA-visible total, like 80GB or 79.2GiB)"


@pytest.mark.parametrize(
    "text, message",
    [
        ("h1000", f"--gpu: unknown GPU 'h1000'; did you mean h100, h200, h100-nvl? {SIZE_HINT}"),
        ("mi300", f"--gpu: unknown GPU 'mi300'; did you mean mi300x? {SIZE_HINT}"),
        ("tpu-v5", f"--gpu: unknown GPU 'tpu-v5'; run 'kvplan gpus' for the list {SIZE_HINT}"),
        ("80", f"--gpu: unknown GPU '80'; run 'kvplan gpus' for the list {SIZE_HINT}"),
        ("80G", "--gpu: '80G' is not a size; use bytes or a unit: GB (10^9), GiB (2^30), MB, MiB, TB, TiB"),
    ],
)
def test_unknown_gpu_messages(text, message):
    with pytest.raises(UsageError) as e:
        get_gpu(text)
    assert str(e.value) == message


def test_flag_name_is_used_in_messages():
    with pytest.raises(UsageError, match=r"^--gpus: unknown GPU 'x100'"):
        get_gpu("x100", flag="--gpus")


# --- validation of a catalog file ----------------------------------------------------------------

GOOD = {
    "id": "test-80gb",
    "name": "Test GPU",
    "vendor": "nvidia",
    "marketed_gb": 80,
    "smi_total_mib": 81559,
    "cuda_total_bytes": None,
    "reserve_mib": 512,
    "bandwidth_tbs": 3.35,
    "bf16_dense_tflops": 989,
    "fp8": True,
    "price_usd_per_hour": None,
    "source": "test",
    "status": "confirmed",
    "aliases": ["t80"],
}


def _entry(**changes):
    e = dict(GOOD, **changes)
    return {k: v for k, v in e.items() if v != "DROP"}


def test_good_entry_builds():
    (g,) = build_catalog({"gpus": [_entry()]}, "cat.yaml")
    assert g.cuda_total_bytes == (81559 - 512) * MIB


@pytest.mark.parametrize(
    "entry, message",
    [
        (_entry(smi_total_mb=1), "cat.yaml: test-80gb: unknown field 'smi_total_mb' (did you mean smi_total_mib?); "),
        (_entry(reserve_mib="DROP"), "cat.yaml: test-80gb: missing field reserve_mib (write null when unknown"),
        (_entry(vendor="intel"), "cat.yaml: test-80gb: vendor='intel'; allowed: nvidia, amd"),
        (_entry(status="sure"), "cat.yaml: test-80gb: status='sure'; allowed: confirmed, corroborated, unconfirmed"),
        (_entry(fp8="yes"), "cat.yaml: test-80gb: fp8='yes' must be true or false"),
        (_entry(smi_total_mib=81559.5), "cat.yaml: test-80gb: smi_total_mib=81559.5 must be an integer >= 1"),
        (_entry(reserve_mib=90000), "cat.yaml: test-80gb: reserve_mib=90000 must be below smi_total_mib=81559"),
        (_entry(bandwidth_tbs=0), "cat.yaml: test-80gb: bandwidth_tbs=0 must be a number > 0 or null"),
        (_entry(cuda_total_bytes=85_000_000_000), "cat.yaml: test-80gb: cuda_total_source must be a non-empty"),
        (
            _entry(cuda_total_bytes=90_000_000_000, cuda_total_source="log"),
            "cat.yaml: test-80gb: cuda_total_bytes=90,000,000,000 exceeds smi_total_mib=81559",
        ),
        (_entry(cuda_total_source="log"), "cat.yaml: test-80gb: cuda_total_source is given but cuda_total_bytes"),
        (_entry(aliases="t80"), "cat.yaml: test-80gb: aliases must be a list of names"),
        (_entry(aliases=["80gb"]), "cat.yaml: test-80gb: alias '80gb' reads as a size"),
        (_entry(aliases=["T80"]), "cat.yaml: test-80gb: alias 'T80' must be lower-case letters, digits and '-'"),
        (_entry(aliases=[4090]), "cat.yaml: test-80gb: alias 4090 must be lower-case letters, digits and '-'"),
        (_entry(id="Test 80"), "cat.yaml: gpus[0]: id='Test 80' must be lower-case letters, digits and '-'"),
        ("h100", "cat.yaml: gpus[0] must be a mapping of fields, got str"),
    ],
)
def test_bad_entries_name_file_id_and_field(entry, message):
    with pytest.raises(CatalogError) as e:
        build_catalog({"gpus": [entry]}, "cat.yaml")
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_duplicate_names_are_rejected_ignoring_separators():
    other = _entry(id="other-80gb", aliases=["t-80"])
    with pytest.raises(CatalogError, match=r"^cat\.yaml: other-80gb: name 't-80' is already used by test-80gb$"):
        build_catalog({"gpus": [_entry(), other]}, "cat.yaml")


def test_catalog_file_errors(tmp_path):
    bad = tmp_path / "gpus.yaml"
    bad.write_text("gpus: [\n")
    with pytest.raises(CatalogError, match=r"gpus\.yaml: malformed YAML at line"):
        load_catalog_file(bad)
    bad.write_text("- id: x\n")
    with pytest.raises(CatalogError, match=r"a GPU catalog must be a mapping with one key, gpus"):
        load_catalog_file(bad)
    with pytest.raises(CatalogError, match=r"nope\.yaml: no such file"):
        load_catalog_file(tmp_path / "nope.yaml")


# --- the CLI --------------------------------------------------------------------------------------


def test_cli_gpus_json(cli):
    code, out, err = cli("gpus", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert len(rows) >= 22
    by_id = {r["id"]: r for r in rows}
    assert set(REQUIRED.values()) <= set(by_id)
    h100 = by_id["h100-sxm-80gb"]
    assert h100["smi_total_mib"] == 81559
    assert h100["smi_total_bytes"] == 81559 * MIB
    assert h100["cuda_total_bytes"] == 81121 * MIB
    assert h100["cuda_total_observed"] is True
    assert "h100" in h100["aliases"]
    assert by_id["l4-24gb"]["cuda_total_observed"] is False
    assert all(isinstance(r["cuda_total_bytes"], int) for r in rows)


def test_cli_gpus_table(cli):
    code, out, _ = cli("gpus")
    assert code == 0
    assert "h100-sxm-80gb" in out and "81,559" in out and "79.22 obs" in out
    assert "mi355x-288gb" in out


def test_gpus_table_at_fixed_width():
    buf = StringIO()
    con = render.console(file=buf, width=120)
    render.gpus_table(load_catalog(), con)
    lines = buf.getvalue().splitlines()
    assert all(len(line) <= 120 for line in lines)
    row = next(line for line in lines if line.startswith("h200-sxm-141gb "))
    # 143,771 MiB nvidia-smi; 139.81 GiB CUDA total observed; 4.8 TB/s; 989 TFLOP/s BF16; FP8
    assert row.split() == [
        "h200-sxm-141gb", "NVIDIA", "H200", "141", "143,771", "139.81", "obs", "4.8", "989", "yes", "h200,", "h200-sxm",
    ]  # fmt: skip
    assert "No prices bundled" in buf.getvalue()


def test_cli_unknown_gpu_is_one_line_exit_2(cli):
    """`kvplan fit --gpu h1000`: the UsageError from the catalog becomes one line, exit 2."""
    code, out, err = cli("fit", "llama3-8b", "--gpu", "h1000")
    assert code == 2
    assert out == ""
    assert err == f"kvplan: error: --gpu: unknown GPU 'h1000'; did you mean h100, h200, h100-nvl? {SIZE_HINT}\n"


def test_generated_catalog_matches_yaml():
    """kvplan loads data/gpus_catalog.py; it must hold exactly what data/gpus.yaml says
    (regenerate with `python scripts/build_gpu_catalog.py`)."""
    import yaml

    from kvplan.data.gpus_catalog import CATALOG
    from kvplan.gpus import catalog_path

    assert CATALOG == yaml.safe_load(catalog_path().read_text())


# --- names as drivers print them ------------------------------------------------------------------


@pytest.mark.parametrize("gpu", load_catalog(), ids=lambda g: g.id)
def test_every_product_name_resolves(gpu):
    # the name nvidia-smi, rocm-smi and torch.cuda.get_device_name() print, as the catalog records it
    assert get_gpu(gpu.name) is gpu
    assert get_gpu(f"  {gpu.name.upper()}  ") is gpu
    assert get_gpu(gpu.name.lower().replace(" ", "  ")) is gpu


@pytest.mark.parametrize(
    "text, gid",
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb"),  # nvidia-smi and torch on an H100 SXM
        ("NVIDIA L4", "l4-24gb"),
        ("nvidia l4", "l4-24gb"),
        ("NVIDIA GeForce RTX 4090", "rtx4090-24gb"),
        ("GeForce RTX 4090", "rtx4090-24gb"),
        ("Tesla T4", "t4-16gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA H200", "h200-sxm-141gb"),
        ("AMD Instinct MI300X", "mi300x-192gb"),
        ("AMD Instinct MI300X OAM", "mi300x-192gb"),
        ("Instinct MI325X", "mi325x-256gb"),
        ("H100 80GB HBM3", "h100-sxm-80gb"),  # without the vendor word
        ("A100-SXM4-80GB", "a100-sxm-80gb"),
    ],
)
def test_driver_names(text, gid):
    assert get_gpu(text).id == gid


def test_cli_takes_the_name_fit_prints(cli):
    code, out, err = cli("fit", "llama3-8b", "--gpu", "NVIDIA H100 80GB HBM3", "--json")
    assert code == 0, err
    assert json.loads(out)["gpu"] == "h100-sxm-80gb"


@pytest.mark.parametrize(
    "text, first",
    [
        ("h100-80gb", "h100-sxm-80gb"),  # not a100-80gb, one letter away but another GPU
        ("H100 80GB", "h100-sxm-80gb"),
        ("a100-sxm4-40", "a100-sxm-40gb"),
        ("h200-141", "h200"),
        ("NVIDIA H100 94GB", "h100-nvl"),
    ],
)
def test_suggestions_rank_by_similarity(text, first):
    with pytest.raises(UsageError) as e:
        get_gpu(text)
    assert str(e.value).startswith(f"--gpu: unknown GPU {text!r}; did you mean {first}")


# --- which card, which total (the December 2026 trial: `--gpu a100`, `--gpu 81559MiB`) ----------------


def test_an_alias_that_also_names_another_memory_size_says_which_card_was_used():
    from kvplan.gpus import gpu_notes

    g = get_gpu("a100")
    assert g.id == "a100-sxm-80gb"
    assert gpu_notes("a100", g) == (
        "--gpu a100 is the NVIDIA A100-SXM4-80GB (a100-sxm-80gb, CUDA total 79.39 GiB, estimated); the 40 GB cards "
        "are a100-sxm-40gb, a100-pcie-40gb: give that id if yours is one",
    )
    assert "the 32 GB card is v100-32gb" in gpu_notes("v100", get_gpu("v100"))[0]
    # one size only (h100: SXM and PCIe are both 80 GB; the NVL is another product), an id, a product name
    for typed in ("h100", "h200", "a100-80gb", "a100-sxm-80gb", "NVIDIA A100-SXM4-80GB", "l40", "rtx4090"):
        assert gpu_notes(typed, get_gpu(typed)) == (), typed


def test_a_size_equal_to_an_nvidia_smi_total_says_cuda_sees_less():
    from kvplan.gpus import gpu_notes

    g = get_gpu("81559MiB")  # the H100's nvidia-smi total (NVIDIA/nccl#1264): planned as given
    assert g.cuda_total_bytes == 81559 * MIB
    assert gpu_notes("81559MiB", g) == (
        "--gpu 81559MiB is the nvidia-smi total of h100-sxm-80gb, h100-pcie-80gb, but CUDA sees less (the driver's "
        "reserve): 79.22 GiB on h100-sxm-80gb (observed); planned with 79.65 GiB as given; give the card's id (one "
        "of h100-sxm-80gb, h100-pcie-80gb) or the CUDA-visible total (torch.cuda.mem_get_info()[1])",
    )
    # 80GiB is 81,920 MiB, the A100 80GB's nvidia-smi total
    assert (
        "--gpu 80GiB is the nvidia-smi total of a100-sxm-80gb, a100-pcie-80gb"
        in gpu_notes("80GiB", get_gpu("80GiB"))[0]
    )
    # the H100's CUDA-visible total (vLLM's 79.22 GiB), a decimal size, and an AMD total with no reserve: no note
    for typed in ("81121MiB", "80GB", "65520MiB"):
        assert gpu_notes(typed, get_gpu(typed)) == (), typed


def test_fit_and_fleet_say_which_card_and_total_in_text_and_json(cli):
    code, out, err = cli("fit", "llama3-8b", "--gpu", "a100", "--max-model-len", "8k", "--json")
    assert code == 0
    r = json.loads(out)
    assert (r["gpu"], r["gpu_total_bytes"]) == ("a100-sxm-80gb", (81920 - 621) * MIB)
    assert r["gpu_total_basis"] == "estimated: nvidia-smi 81,920 MiB − reserve 621 MiB"
    assert len(r["gpu_notes"]) == 1 and r["gpu_notes"][0].startswith("--gpu a100 is the NVIDIA A100-SXM4-80GB")
    assert err == f"kvplan: warning: {r['gpu_notes'][0]}\n"
    code, out, err = cli("fit", "llama3-8b", "--gpu", "81559MiB", "--max-model-len", "8k")
    assert code == 0 and "--gpu 81559MiB is the nvidia-smi total of h100-sxm-80gb" in err
    assert "│ --gpu 81559MiB, taken as the CUDA-visible total" in out
    code, out, err = cli("fit", "llama3-8b", "--gpu", "h100", "--max-model-len", "8k")
    assert (code, err) == (0, "") and "│ observed in a log" in out
    code, out, err = cli("fleet", "llama3-8b", "--concurrency", "10", "--seq", "8k", "--gpu", "a100", "--json")
    assert code == 0
    assert json.loads(out)["gpu_notes"] == r["gpu_notes"]
