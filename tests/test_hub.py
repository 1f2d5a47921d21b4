"""Hugging Face repo ids as MODEL: bundled hf_repo, then the local cache, then the Hub. No network: every
cache is built here in the Hub's layout (models--ORG--NAME/{refs,snapshots}), with HF_HUB_OFFLINE=1 unless
a test stands in for huggingface_hub's download functions."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kvplan import calc
from kvplan.errors import SpecError
from kvplan.loader import load_model
from kvplan.readers import hub

from .conftest import FIXTURES

LLAMA31_8B = json.loads((FIXTURES / "hf_configs" / "llama3.1-8b.json").read_text())
JAMBA = json.loads((FIXTURES / "hf_configs" / "jamba-1.5-mini.json").read_text())
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def add_to_cache(cache, repo: str, files: dict[str, bytes | str], revision: str = "main", commit: str = COMMIT):
    """Put ``files`` in ``cache`` as huggingface_hub lays a download out."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / revision).write_text(commit)
    snap = folder / "snapshots" / commit
    for name, content in files.items():
        path = snap / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)
    return snap


def safetensors(tensors: dict[str, tuple[str, list[int], int]]) -> bytes:
    """A safetensors file: header {name: dtype, shape, data_offsets} and zero bytes of data."""
    header, offset = {}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * offset


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "hf-cache"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return root


# --- parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref, ok",
    [
        ("meta-llama/Llama-3.1-8B", True),
        ("acme/my-llama@v1.0", True),
        ("acme/my-llama@0123456789abcdef0123456789abcdef01234567", True),
        ("Qwen/Qwen2.5-7B", True),
        ("llama3-8b", False),
        ("models/config.json", False),
        ("specs/my-model.yaml", False),
        ("weights/model.gguf", False),
        ("a/b/c", False),
        ("/abs/path", False),
        ("./rel/path", False),
        ("org/..", False),
        ("org/name with space", False),
    ],
)
def test_is_repo_id(ref, ok):
    assert hub.is_repo_id(ref) is ok


def test_parse_revision():
    assert hub.parse_repo_id("acme/my-llama@v1") == ("acme/my-llama", "v1")
    assert hub.parse_repo_id("acme/my-llama") == ("acme/my-llama", None)


# --- resolution order -----------------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["meta-llama/Llama-3.1-8B", "META-LLAMA/llama-3.1-8b"])
def test_bundled_hf_repo_resolves_without_the_hub(cache, monkeypatch, ref):
    monkeypatch.setattr(hub, "_hub", lambda: pytest.fail("huggingface_hub must not be needed"))
    spec = load_model(ref)
    assert spec.name == "llama3.1-8b"


def test_cached_config_is_read_offline(cli, cache):
    add_to_cache(cache, "acme/my-llama", {"config.json": json.dumps(LLAMA31_8B)})
    code, out, err = cli("estimate", "acme/my-llama", "--seq", "4096")
    assert code == 0, err
    assert out.startswith("acme/my-llama: 4,096 tokens × 1 request(s), KV bf16")
    assert "KV cache: 536,870,912 B (0.5 GiB, 0.537 GB)" in out
    spec = load_model("acme/my-llama")
    assert spec.hf_repo == "acme/my-llama"
    assert spec.source == "https://huggingface.co/acme/my-llama/blob/main/config.json"


def test_revision_reads_that_ref(cache):
    add_to_cache(cache, "acme/my-llama", {"config.json": json.dumps(LLAMA31_8B)})
    other = {**LLAMA31_8B, "num_hidden_layers": 16}
    add_to_cache(cache, "acme/my-llama", {"config.json": json.dumps(other)}, revision="v2", commit="f" * 40)
    assert load_model("acme/my-llama").num_layers == 32
    spec = load_model("acme/my-llama@v2")
    assert spec.num_layers == 16 and spec.name == "acme/my-llama@v2"


def test_a_revision_of_a_bundled_repo_reads_that_revision(cache):
    add_to_cache(
        cache,
        "meta-llama/Llama-3.1-8B",
        {"config.json": json.dumps({**LLAMA31_8B, "num_hidden_layers": 2})},
        revision="v9",
    )
    assert load_model("meta-llama/Llama-3.1-8B@v9").num_layers == 2


def test_hf_home_is_honoured(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    add_to_cache(tmp_path / "home" / "hub", "acme/my-llama", {"config.json": json.dumps(LLAMA31_8B)})
    assert hub.hub_cache_dir() == tmp_path / "home" / "hub"
    assert load_model("acme/my-llama").num_layers == 32


def test_offline_and_not_cached_is_one_line_with_the_download_command(cli, cache):
    # (Llama-3.1-70B-Instruct, a known tune of a bundled base, now gets the base's geometry: tests/test_cmdline.py)
    code, out, err = cli("estimate", "meta-llama/Llama-3.3-70B-Instruct", "--seq", "4k")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith("kvplan: error: meta-llama/Llama-3.3-70B-Instruct: not a bundled model, and its config.json")
    assert "HF_HUB_OFFLINE is set; download it with: hf download meta-llama/Llama-3.3-70B-Instruct config.json" in err
    assert "close bundled models: meta-llama/Llama-3.1-70B (bundled as llama3.1-70b)" in err


def test_offline_revision_in_the_download_command(cache):
    with pytest.raises(SpecError, match=r"hf download acme/x config\.json --revision v3"):
        load_model("acme/x@v3")


def test_invalid_cached_config_names_the_hub_url(cache):
    add_to_cache(cache, "acme/broken", {"config.json": "{not json"})
    with pytest.raises(SpecError, match=r"^https://huggingface\.co/acme/broken/blob/main/config\.json: malformed JSON"):
        load_model("acme/broken")


def test_existing_paths_win_over_repo_ids(tmp_path, monkeypatch, cache):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "acme" / "local"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(LLAMA31_8B))
    spec = load_model("acme/local")  # a folder holding config.json, not a repo id
    assert spec.name == "local"


def test_config_file_stem_is_the_display_name(tmp_path):
    p = tmp_path / "my-model.json"
    p.write_text(json.dumps(LLAMA31_8B))
    assert load_model(str(p)).name == "my-model"


# --- weights from safetensors headers -------------------------------------------------------------

SHARD1 = {"model.embed_tokens.weight": ("BF16", [128, 64], 128 * 64 * 2), "lm_head.weight": ("BF16", [128, 64], 16384)}
SHARD2 = {"model.layers.0.mlp.weight": ("F8_E4M3", [64, 64], 4096), "model.norm.weight": ("F32", [64], 256)}


def test_weights_from_cached_shard_headers(cli, cache):
    index = {
        "metadata": {"total_size": 999},
        "weight_map": {
            **{k: "model-00001-of-00002.safetensors" for k in SHARD1},
            **{k: "model-00002-of-00002.safetensors" for k in SHARD2},
        },
    }
    add_to_cache(
        cache,
        "acme/sharded",
        {
            "config.json": json.dumps(LLAMA31_8B),
            "model.safetensors.index.json": json.dumps(index),
            "model-00001-of-00002.safetensors": safetensors(SHARD1),
            "model-00002-of-00002.safetensors": safetensors(SHARD2),
        },
    )
    spec = load_model("acme/sharded")
    assert spec.weights_bytes == 16384 + 16384 + 4096 + 256  # the headers, not the index's total_size
    assert spec.param_count == 128 * 64 * 2 + 64 * 64 + 64
    code, out, err = cli("fit", "acme/sharded", "--gpu", "h100", "--tp", "2", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["weights_bytes"] == (16384 + 16384 + 4096 + 256) // 2 and r["weights_dtype"] == "checkpoint"


def test_weights_from_the_index_when_shards_are_not_cached(cache):
    index = {"metadata": {"total_size": 16_060_522_496}, "weight_map": {"a": "model-00001-of-00004.safetensors"}}
    add_to_cache(
        cache, "acme/idx", {"config.json": json.dumps(LLAMA31_8B), "model.safetensors.index.json": json.dumps(index)}
    )
    spec = load_model("acme/idx")
    # no total_parameters: an unquantized bf16 config (no quantization_config) has 2 B per parameter
    assert spec.weights_bytes == 16_060_522_496 and spec.param_count == 16_060_522_496 // 2 == 8_030_261_248
    assert "derived from model.safetensors.index.json total_size 16,060,522,496 B / 2 B (bfloat16" in spec.notes


def test_index_total_parameters_lets_weights_dtype_re_size_the_weights(cli, cache):
    index = {
        "metadata": {"total_parameters": 8_030_261_248, "total_size": 16_060_522_496},
        "weight_map": {"a": "model-00001-of-00004.safetensors"},
    }
    files = {"config.json": json.dumps(LLAMA31_8B), "model.safetensors.index.json": json.dumps(index)}
    add_to_cache(cache, "acme/idx-params", files)
    spec = load_model("acme/idx-params")
    assert (spec.weights_bytes, spec.param_count) == (16_060_522_496, 8_030_261_248)
    r = json.loads(cli("fit", "acme/idx-params", "--gpu", "h100", "--json")[1])
    assert (r["weights_bytes"], r["weights_dtype"]) == (16_060_522_496, "checkpoint")
    for flag in (["--weights-dtype", "fp8"], ["--quantization", "fp8"]):
        code, out, err = cli("fit", "acme/idx-params", "--gpu", "h100", *flag, "--json")
        assert code == 0, err
        r = json.loads(out)
        # 1 B per parameter and one fp32 scale per 128 × 128 block (the block FP8 checkpoints' weight_block_size
        # [128, 128]) for the linear layers; the embedding and the untied lm_head (2 × 128,256 × 4,096 =
        # 1,050,673,152, counted from config.json) stay in bf16: vLLM's Fp8Config quantizes linear layers only.
        # (8,030,261,248 − 1,050,673,152) + 4 × ceil(6,979,588,096 / 16,384) + 2 × 1,050,673,152
        embedding = 2 * 128_256 * 4_096
        linear = 8_030_261_248 - embedding
        assert (r["weights_bytes"], r["weights_dtype"]) == (linear + 4 * -(-linear // 16_384) + 2 * embedding, "fp8")


def test_a_quantized_index_without_parameters_says_why_weights_dtype_cannot_apply(cli, cache):
    # Jamba (a hybrid): kvplan does not count its parameters from config.json (kvplan.readers.params)
    config = {**JAMBA, "quantization_config": {"quant_method": "awq", "bits": 4}}
    index = {"metadata": {"total_size": 5_700_000_000}, "weight_map": {"a": "model-00001-of-00002.safetensors"}}
    files = {"config.json": json.dumps(config), "model.safetensors.index.json": json.dumps(index)}
    add_to_cache(cache, "acme/awq-idx", files)
    assert load_model("acme/awq-idx").param_count is None
    code, out, err = cli("fit", "acme/awq-idx", "--gpu", "h100", "--weights-dtype", "fp8")
    assert (code, out) == (2, "")
    assert err == (
        "kvplan: error: acme/awq-idx: the checkpoint's weights are known in bytes (5,700,000,000 B) but not in "
        "parameters, so --weights-dtype fp8 cannot re-size them; drop --weights-dtype, or give --weights-gib "
        "(weights per GPU)\n"
    )


def test_a_quantized_index_of_a_counted_family_re_sizes_from_the_config_count(cli, cache):
    # quantization_config changes bytes, not parameters: Llama-3.1-8B has 8,030,261,248 whatever the format
    config = {**LLAMA31_8B, "quantization_config": {"quant_method": "awq", "bits": 4}}
    index = {"metadata": {"total_size": 5_700_000_000}, "weight_map": {"a": "model-00001-of-00002.safetensors"}}
    files = {"config.json": json.dumps(config), "model.safetensors.index.json": json.dumps(index)}
    add_to_cache(cache, "acme/awq-idx8b", files)
    spec = load_model("acme/awq-idx8b")
    assert (spec.weights_bytes, spec.param_count) == (5_700_000_000, 8_030_261_248)
    code, out, err = cli("fit", "acme/awq-idx8b", "--gpu", "h100", "--weights-dtype", "fp8", "--json")
    assert code == 0, err
    # the linear layers in FP8 with an fp32 scale per 128 × 128 block, the embedding and lm_head in bf16
    embedding = 2 * 128_256 * 4_096
    linear = 8_030_261_248 - embedding
    assert json.loads(out)["weights_bytes"] == linear + 4 * -(-linear // 16_384) + 2 * embedding


@pytest.mark.parametrize("shards_present", [True, False])
def test_a_local_checkpoint_folder_reads_its_safetensors(cli, tmp_path, shards_present):
    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA31_8B))
    index = {
        "metadata": {"total_parameters": 123, "total_size": 999},
        "weight_map": {
            **{k: "model-00001-of-00002.safetensors" for k in SHARD1},
            **{k: "model-00002-of-00002.safetensors" for k in SHARD2},
        },
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    if shards_present:  # the headers win over the index's metadata
        (folder / "model-00001-of-00002.safetensors").write_bytes(safetensors(SHARD1))
        (folder / "model-00002-of-00002.safetensors").write_bytes(safetensors(SHARD2))
        expected = (16384 + 16384 + 4096 + 256, 128 * 64 * 2 + 64 * 64 + 64)
    else:
        expected = (999, 123)
    for ref in (folder, folder / "config.json"):
        spec = load_model(str(ref))
        assert (spec.weights_bytes, spec.param_count) == expected
        assert spec.param_count_unquantized == 0  # the config's embedding count is not of these toy tensors
    code, out, err = cli("fit", folder, "--gpu", "h100", "--json")
    assert code == 0, err
    assert json.loads(out)["weights_bytes"] == expected[0]
    code, out, err = cli("fit", folder, "--gpu", "h100", "--weights-dtype", "fp8", "--json")
    assert code == 0, err
    # FP8: 1 B per parameter + an fp32 scale per 128 × 128 block (4 × ceil(params / 16,384))
    assert json.loads(out)["weights_bytes"] == expected[1] + 4 * -(-expected[1] // 16_384)


def test_weights_from_a_single_cached_file(cache):
    add_to_cache(
        cache, "acme/single", {"config.json": json.dumps(LLAMA31_8B), "model.safetensors": safetensors(SHARD2)}
    )
    assert load_model("acme/single").weights_bytes == 4096 + 256


def test_packed_integer_weights_give_no_param_count(cache):
    packed = {"q.qweight": ("I32", [64, 8], 2048), "q.scales": ("F16", [4, 64], 512)}
    add_to_cache(cache, "acme/awq", {"config.json": json.dumps(LLAMA31_8B), "model.safetensors": safetensors(packed)})
    spec = load_model("acme/awq")
    # the headers give bytes only; the parameters are the config's count (packing changes bytes, not weights)
    assert (spec.weights_bytes, spec.param_count) == (2560, 8_030_261_248)
    add_to_cache(cache, "acme/awq-jamba", {"config.json": json.dumps(JAMBA), "model.safetensors": safetensors(packed)})
    spec = load_model("acme/awq-jamba")  # a family kvplan does not count: no parameters at all
    assert spec.weights_bytes == 2560 and spec.param_count is None


def test_without_weights_fit_asks_for_weights_gib(cli, cache):
    add_to_cache(cache, "acme/noweights", {"config.json": json.dumps(JAMBA)})
    code, out, err = cli("fit", "acme/noweights", "--gpu", "h100")
    assert code == 2 and "--weights-gib" in err


def test_without_weights_a_counted_config_sizes_the_weights_from_its_parameters(cli, cache):
    add_to_cache(cache, "acme/noweights8b", {"config.json": json.dumps(LLAMA31_8B)})
    code, out, err = cli("fit", "acme/noweights8b", "--gpu", "h100", "--json")
    assert code == 0, err
    # Meta-Llama-3.1-8B's model.safetensors.index.json: total_size 16,060,522,496 = 2 B x 8,030,261,248
    assert (json.loads(out)["weights_bytes"], json.loads(out)["weights_dtype"]) == (16_060_522_496, "bf16")


# --- online (huggingface_hub's functions stood in for) --------------------------------------------


class GatedRepoError(Exception):
    pass


class RepositoryNotFoundError(Exception):
    pass


class EntryNotFoundError(Exception):
    pass


@pytest.fixture
def online(cache, monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub, "hub_reachable", lambda: True)
    calls = []

    def fake_download(repo, filename, revision=None, cache_dir=None, token=None):
        calls.append((repo, filename, revision, token))
        if repo == "acme/gated":
            raise GatedRepoError("401")
        if repo == "acme/missing":
            raise RepositoryNotFoundError("404")
        if filename != "config.json":
            raise EntryNotFoundError("no index")
        snap = add_to_cache(cache, repo, {filename: json.dumps(LLAMA31_8B)})
        return str(snap / filename)

    def no_metadata(*args, **kwargs):
        raise OSError("no safetensors here")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", no_metadata)
    return calls


def test_online_downloads_config_json_only(online, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    spec = load_model("acme/new-model")
    assert spec.name == "acme/new-model" and calc.estimate(spec, 4096).total_bytes == 536_870_912
    assert online[0] == ("acme/new-model", "config.json", None, "hf_test")
    assert {f for _, f, _, _ in online} <= {"config.json", "model.safetensors.index.json"}


def test_gated_repo_says_how_to_get_access(online):
    with pytest.raises(
        SpecError,
        match=r"^acme/gated is gated: accept its license on https://huggingface\.co/acme/gated and set HF_TOKEN",
    ):
        load_model("acme/gated")


def test_missing_repo_suggests_bundled_ids(online):
    with pytest.raises(
        SpecError, match=r"acme/missing: no such repo on the Hugging Face Hub \(or it is private: set HF_TOKEN\)"
    ):
        load_model("acme/missing")


def test_unreachable_hub_is_one_line(cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    with pytest.raises(
        SpecError,
        match=r"the Hub cannot be reached \(no name resolution\); download it with: hf download acme/x config\.json",
    ):
        load_model("acme/x")


@pytest.mark.parametrize("offsets", [[100, 0], [-4, 8]])
def test_safetensors_offsets_ending_before_they_begin_are_refused(cli, cache, offsets):
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2], "data_offsets": offsets}}).encode()
    blob = struct.pack("<Q", len(header)) + header + b"\0" * 100
    add_to_cache(cache, "acme/negative", {"config.json": json.dumps(LLAMA31_8B), "model.safetensors": blob})
    with pytest.raises(SpecError, match="data_offsets"):
        load_model("acme/negative")
    code, _, err = cli("estimate", "acme/negative", "--seq", "4k")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "data_offsets" in err


# --- headers and indexes that are not what they claim (issue 20) ------------------------------------


def raw_safetensors(header: bytes, data: int = 0) -> bytes:
    """A safetensors file of a raw header (any bytes) and ``data`` zero bytes after it."""
    return struct.pack("<Q", len(header)) + header + b"\0" * data


def one_line_error(cli, model) -> str:
    code, out, err = cli("fit", model, "--gpu", "h100")
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith("kvplan: error: ") and "Traceback" not in err
    return err


@pytest.mark.parametrize(
    "header, message",
    [
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "JSON kvplan cannot read (RecursionError"),
        (b'{"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,Infinity]}}', "Infinity is not a JSON number"),
        (b'{"w":{"dtype":"BF16","shape":[NaN],"data_offsets":[0,4]}}', "NaN is not a JSON number"),
        (b'{"w":{"dtype":"BF16","shape":[1e400],"data_offsets":[0,4]}}', "shape and data_offsets must be integers"),
        (b'{"w":{"dtype":"BF16","shape":[2.0],"data_offsets":[0,4]}}', "shape and data_offsets must be integers"),
        (
            json.dumps({"w": {"dtype": "BF16", "shape": [10**18] * 300, "data_offsets": [0, 4]}}).encode(),
            "tensor 'w' has 2^64 elements or more (shape of 300 dimensions)",
        ),
        (b'{"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,4]}}', "tensor 'w' has dtype 'Q4_K'; safetensors dtypes"),
    ],
)
def test_a_hostile_safetensors_header_is_one_line(cli, tmp_path, header, message):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA31_8B))
    (folder / "model.safetensors").write_bytes(raw_safetensors(header, 4))
    assert message in one_line_error(cli, folder)


def test_tensors_sharing_one_region_are_refused_not_counted_twice(cli, tmp_path):
    # 1,000 tensors of 16 BF16 values = 32 B each, all at data_offsets [0, 32]: safetensors refuses the file
    # (Metadata::validate, InvalidOffset); counted, it would be 32,000 B of weights in a 32-byte region
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA31_8B))
    header = {f"t{i:04d}": {"dtype": "BF16", "shape": [16], "data_offsets": [0, 32]} for i in range(1000)}
    (folder / "model.safetensors").write_bytes(raw_safetensors(json.dumps(header).encode(), 32))
    err = one_line_error(cli, folder)
    assert err == (
        f"kvplan: error: {folder / 'model.safetensors'}: tensor 't0001' starts at data byte 0, expected 32: it "
        "overlaps the tensor before it (safetensors: InvalidOffset)\n"
    )


@pytest.mark.parametrize("flags", [[], ["--weights-dtype", "fp8"]])
def test_a_tensor_claiming_its_shape_in_two_bytes_is_refused(cli, tmp_path, flags):
    # a 4096 × 4096 BF16 tensor is 4096 × 4096 × 2 = 33,554,432 B; a header giving it data_offsets [0, 2]
    # would count 2 B of weights (16,777,216 params → 16.8 MB at fp8); safetensors: TensorInvalidInfo
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA31_8B))
    header = {"w": {"dtype": "BF16", "shape": [4096, 4096], "data_offsets": [0, 2]}}
    (folder / "model.safetensors").write_bytes(raw_safetensors(json.dumps(header).encode(), 2))
    code, out, err = cli("fit", folder, "--gpu", "h100", *flags)
    assert (code, out) == (2, "")
    assert err == (
        f"kvplan: error: {folder / 'model.safetensors'}: tensor 'w' is BF16 of shape [4096, 4096]: 33,554,432 B, "
        "but its data_offsets [0, 2] span 2 B (safetensors: TensorInvalidInfo)\n"
    )


@pytest.mark.parametrize(
    "data, message",
    [
        (100, "the tensors cover 128 B of data but the file holds 100 B after its header"),  # truncated download
        (200, "the tensors cover 128 B of data but the file holds 200 B after its header"),
    ],
)
def test_tensors_must_cover_the_file_exactly(tmp_path, data, message):
    # safetensors' SafeTensors::deserialize: the last offset is the end of the file (MetadataIncompleteBuffer)
    p = tmp_path / "model.safetensors"
    header = {"a": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]},
              "b": {"dtype": "F16", "shape": [32], "data_offsets": [64, 128]}}  # fmt: skip
    p.write_bytes(raw_safetensors(json.dumps(header).encode(), data))
    with pytest.raises(SpecError, match=message):
        hub.folder_weight_bytes(tmp_path)
    p.write_bytes(raw_safetensors(json.dumps(header).encode(), 128))
    assert hub.folder_weight_bytes(tmp_path) == hub.CheckpointWeights(128, 16 + 32)


def test_a_gap_between_tensors_is_refused(tmp_path):
    p = tmp_path / "model.safetensors"
    header = {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
              "b": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]}}  # fmt: skip
    p.write_bytes(raw_safetensors(json.dumps(header).encode(), 12))
    with pytest.raises(SpecError, match=r"tensor 'b' starts at data byte 8, expected 4: it leaves a gap"):
        hub.folder_weight_bytes(tmp_path)


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({"total_size": 10**4000}, "metadata.total_size is a 4,001-digit number, beyond kvplan's bound of "
                                   "9,007,199,254,740,992"),
        ({"total_size": 16_060_522_496, "total_parameters": 10**4000}, "metadata.total_parameters is a 4,001-digit"),
    ],
)  # fmt: skip
def test_index_counts_beyond_any_checkpoint_are_one_line(cli, tmp_path, metadata, message):
    folder = tmp_path / "idx"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA31_8B))
    index = {"metadata": metadata, "weight_map": {"a": "model-00001-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert message in one_line_error(cli, folder)


@pytest.mark.parametrize("shard", ["../x.safetensors", "/etc/passwd", "..\\x.safetensors", "C:\\x.safetensors"])
def test_a_cached_index_naming_a_shard_outside_the_repo_is_one_line(cli, cache, shard):
    # huggingface_hub's try_to_load_from_cache raises ValueError for such a name: estimate used to crash on it
    index = {"metadata": {"total_size": 999}, "weight_map": {"a": shard}}
    files = {"config.json": json.dumps(LLAMA31_8B), "model.safetensors.index.json": json.dumps(index)}
    add_to_cache(cache, "acme/escape", files)
    code, out, err = cli("estimate", "acme/escape", "--seq", "4k")
    assert (code, out) == (2, "")
    assert err.endswith(
        f"model.safetensors.index.json: weight_map names the shard {shard!r}, which is not a file inside the "
        "checkpoint; shard names are file names beside the index\n"
    )
    assert err.count("\n") == 1


def test_a_tensor_in_two_shards_is_refused(tmp_path):
    shard = safetensors(SHARD2)
    (tmp_path / "a.safetensors").write_bytes(shard)
    (tmp_path / "b.safetensors").write_bytes(shard)  # a copy: its weights would count twice
    index = {"weight_map": {"model.norm.weight": "a.safetensors", "model.layers.0.mlp.weight": "b.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(
        SpecError, match=r"b\.safetensors: tensor 'model\.layers\.0\.mlp\.weight' is in a\.safetensors too"
    ):
        hub.folder_weight_bytes(tmp_path)


@pytest.mark.parametrize(
    "index, why",
    [
        ([], "model.safetensors.index.json is not a JSON object (weight_map and metadata)"),
        ({"metadata": {}, "weight_map": {}}, "model.safetensors.index.json has no metadata.total_size and it names no shard"),
        (
            {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors"}},
            "model.safetensors.index.json has no metadata.total_size and its shards are not all beside it",
        ),
    ],
)  # fmt: skip
def test_an_unusable_index_is_named_not_blamed_on_missing_safetensors(cli, tmp_path, index, why):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA31_8B))
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert cli("estimate", folder, "--seq", "4k")[0] == 0  # estimate needs no weights
    # Llama's parameters are counted from config.json (8,030,261,248): fit plans with them, and says the index
    # was not used and why
    code, out, err = cli("fit", folder, "--gpu", "h100", "--json")
    assert code == 0 and json.loads(out)["weights_bytes"] == 2 * 8_030_261_248
    where = f"{folder / why.split(' ', 1)[0]} {why.split(' ', 1)[1]}"
    assert f"kvplan: warning: ckpt: {where}; the weights are sized from the param_count counted from config.json" in err
    # a config whose parameters kvplan does not count: the index's problem is the error, not "no safetensors"
    gptj = (Path(__file__).resolve().parent / "fixtures" / "hf_configs" / "gpt-j-6b.json").read_text()
    (folder / "config.json").write_text(gptj)  # gptj: a type kvplan.readers.params does not count
    assert load_model(str(folder)).param_count is None
    code, out, err = cli("fit", folder, "--gpu", "h100")
    assert (code, out) == (2, "")
    assert err == (
        f"kvplan: error: ckpt: {where}, so weights are unknown; "
        "give --weights-gib (weights per GPU), or write a spec YAML with param_count\n"
    )
# --- a cache folder given as a path (the December trial: models--RekaAI--reka-flash-3 was not followed) ----


def test_a_cache_repo_folder_is_followed_through_refs_main(cli, cache):
    index = {"metadata": {"total_size": 16_060_522_496}, "weight_map": {"a": "model-00001-of-00004.safetensors"}}
    files = {"config.json": json.dumps(LLAMA31_8B), "model.safetensors.index.json": json.dumps(index)}
    snap = add_to_cache(cache, "acme/Llama-Local", files)
    folder = cache / "models--acme--Llama-Local"
    for ref in (folder, snap, snap / "config.json"):
        spec = load_model(str(ref))
        assert (spec.name, spec.weights_bytes, spec.num_layers) == ("acme/Llama-Local", 16_060_522_496, 32)
    code, out, err = cli("fit", folder, "--gpu", "h100", "--json")
    assert code == 0, err
    assert json.loads(out)["model"] == "acme/Llama-Local"
    # another snapshot than refs/main's is named with its commit
    other = "fedcba9876543210fedcba9876543210fedcba98"
    add_to_cache(cache, "acme/Llama-Local", files, revision="dev", commit=other)
    assert load_model(str(folder / "snapshots" / other)).name == f"acme/Llama-Local@{other}"
    assert load_model(str(folder)).name == "acme/Llama-Local"  # still refs/main's


def test_a_cache_repo_folder_without_refs_main_needs_one_snapshot(cli, cache):
    add_to_cache(cache, "acme/two", {"config.json": json.dumps(LLAMA31_8B)}, revision="v1")
    folder = cache / "models--acme--two"
    assert load_model(str(folder)).name == "acme/two"  # one snapshot: that one
    add_to_cache(cache, "acme/two", {"config.json": json.dumps(LLAMA31_8B)}, revision="v2", commit="f" * 40)
    code, out, err = cli("estimate", folder, "--seq", "4k")
    assert (code, out) == (2, "")
    assert err == (
        f"kvplan: error: {folder}: a Hugging Face cache folder without refs/main and with 2 snapshots "
        f"({COMMIT}, {'f' * 40}); give the snapshot folder (snapshots/<commit>)\n"
    )
    (folder / "refs" / "main").write_text("e" * 40)
    code, out, err = cli("estimate", folder, "--seq", "4k")
    assert code == 2
    ref = folder / "refs" / "main"
    assert err == f"kvplan: error: {ref}: names snapshot {'e' * 40!r}, which is not in {folder / 'snapshots'}\n"
