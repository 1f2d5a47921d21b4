"""GGUF files: the cache layout from the metadata (as llama.cpp's load_hparams reads it), weights from the
tensor infos. Every file is written here with gguf.GGUFWriter, with tiny tensors."""

from __future__ import annotations

import json
import time

import pytest

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

from kvplan import calc  # noqa: E402
from kvplan.errors import SpecError  # noqa: E402
from kvplan.loader import load_bundled, load_model  # noqa: E402
from kvplan.readers.gguf import load_gguf, read_gguf  # noqa: E402

Q = gguf.GGMLQuantizationType

# (name, ggml type, byte shape of the data written) -> elements, bytes
TINY_TENSORS = [
    ("token_embd.weight", Q.F16, (4, 8)),  # 32 elements, 64 B
    ("blk.0.attn_q.weight", Q.Q4_K, (1, 144)),  # one Q4_K block: 256 elements in 144 B
    ("blk.0.attn_k.weight", Q.Q8_0, (1, 34)),  # one Q8_0 block: 32 elements in 34 B
    ("output_norm.weight", Q.F32, (16,)),  # 16 elements, 64 B
]
TINY_ELEMENTS = 32 + 256 + 32 + 16
TINY_BYTES = 64 + 144 + 34 + 64


def write_gguf(path, arch: str, keys: dict, tensors=TINY_TENSORS, extra=None):
    """A GGUF with ``general.architecture`` = arch, ``{arch}.KEY`` = value for each of ``keys``, and tensors."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in keys.items():
        full = f"{arch}.{key}"
        if isinstance(value, list):
            w.add_array(full, value)
        elif isinstance(value, bool):
            w.add_bool(full, value)
        else:
            w.add_uint32(full, value)
    for key, value in (extra or {}).items():
        w.add_key_value(key, value[0], value[1])
    for name, qtype, shape in tensors:
        if qtype == Q.F16:
            data = np.zeros(shape, dtype=np.float16)
        elif qtype == Q.F32:
            data = np.zeros(shape, dtype=np.float32)
        else:
            data = np.zeros(shape, dtype=np.uint8)
        w.add_tensor(name, data, raw_dtype=None if qtype in (Q.F16, Q.F32) else qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


LLAMA3_8B = {
    "block_count": 32,
    "context_length": 8192,
    "embedding_length": 4096,
    "feed_forward_length": 14336,
    "attention.head_count": 32,
    "attention.head_count_kv": 8,
    "rope.dimension_count": 128,
}


@pytest.fixture
def llama_gguf(tmp_path):
    return write_gguf(tmp_path / "Meta-Llama-3-8B-Q4_K_M.gguf", "llama", LLAMA3_8B)


def test_llama3_8b_gives_536_870_912_bytes_at_4096_tokens_f16(llama_gguf):
    spec = load_model(str(llama_gguf))
    assert spec.name == "Meta-Llama-3-8B-Q4_K_M"  # the file's stem
    assert spec.dtype == "fp16"  # llama.cpp's default cache type
    assert spec.layer_kinds == ("full",) * 32 and spec.max_model_len == 8192
    est = calc.estimate(spec, 4096)
    assert est.kv_dtype == "fp16" and est.total_bytes == 536_870_912


def test_weight_bytes_are_the_tensor_infos(llama_gguf):
    spec = load_gguf(llama_gguf)
    assert spec.weights_bytes == TINY_BYTES  # quantized types at their block sizes
    assert spec.param_count == TINY_ELEMENTS
    _, tensors = read_gguf(llama_gguf)
    assert {t.type_name for t in tensors} == {"F16", "Q4_K", "Q8_0", "F32"}
    assert sum(t.n_bytes for t in tensors) == TINY_BYTES


def test_fit_takes_weights_from_the_tensor_infos(cli, llama_gguf):
    code, out, err = cli("fit", llama_gguf, "--gpu", "l4", "--engine", "llamacpp", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["weights_bytes"] == TINY_BYTES and r["weights_dtype"] == "checkpoint"
    code, out, _ = cli("fit", llama_gguf, "--gpu", "l4", "--tp", "2", "--json")
    assert json.loads(out)["weights_bytes"] == -(-TINY_BYTES // 2)
    # --weights-dtype overrides them with param_count x the dtype
    code, out, _ = cli("fit", llama_gguf, "--gpu", "l4", "--weights-dtype", "bf16", "--json")
    assert json.loads(out)["weights_bytes"] == 2 * TINY_ELEMENTS


def test_cli_estimate_names_the_file_stem(cli, llama_gguf):
    code, out, err = cli("estimate", llama_gguf, "--seq", "4096")
    assert code == 0, err
    assert out.startswith("Meta-Llama-3-8B-Q4_K_M: 4,096 tokens × 1 request(s), KV fp16")
    assert "KV cache: 536,870,912 B (0.5 GiB, 0.537 GB)" in out


def test_qwen3_explicit_key_length(tmp_path):
    # Qwen3-4B: hidden 2560 / 32 heads = 80, but key_length says 128
    keys = {
        "block_count": 36,
        "context_length": 40960,
        "embedding_length": 2560,
        "attention.head_count": 32,
        "attention.head_count_kv": 8,
        "attention.key_length": 128,
        "attention.value_length": 128,
    }
    spec = load_gguf(write_gguf(tmp_path / "qwen3-4b.gguf", "qwen3", keys))
    assert spec.head_dim == 128 and spec.num_kv_heads == 8 and spec.num_layers == 36
    assert calc.estimate(spec, 1).total_bytes == 36 * 8 * (128 + 128) * 2


GEMMA3_27B = {
    "block_count": 62,
    "context_length": 131072,
    "embedding_length": 5376,
    "attention.head_count": 32,
    "attention.head_count_kv": 16,
    "attention.key_length": 128,
    "attention.value_length": 128,
    "attention.sliding_window": 1024,
}


def test_gemma3_five_of_six_layers_slide(tmp_path):
    spec = load_gguf(write_gguf(tmp_path / "gemma-3-27b-it.gguf", "gemma3", GEMMA3_27B))
    kinds = spec.layer_kinds
    assert [i for i, k in enumerate(kinds) if k == "full"] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert kinds.count("sliding") == 52 and spec.sliding_window == 1024
    # the bundled spec (bf16: the same 2 bytes per value as llama.cpp's f16) gives the same bytes
    assert calc.estimate(spec, 131072).total_bytes == calc.estimate(load_bundled("gemma3-27b"), 131072).total_bytes
    assert calc.estimate(spec, 131072).total_bytes == 11_173_625_856


@pytest.mark.parametrize("window", [None, 0])
def test_gemma3_without_a_sliding_window_is_all_full_attention(tmp_path, window):
    # llama.cpp src/models/gemma3.cpp:4-12: SWA only when sliding_window > 0; else swa_type NONE, every layer
    # full (tests/fixtures/llamacpp_golden.json: gemma3_swa0/server-c8192 allocates one cache of 7 full layers)
    keys = {k: v for k, v in GEMMA3_27B.items() if k != "attention.sliding_window"}
    if window is not None:
        keys["attention.sliding_window"] = window
    spec = load_gguf(write_gguf(tmp_path / "g.gguf", "gemma3", keys))
    assert spec.layer_kinds == ("full",) * 62 and spec.sliding_window is None


def test_sliding_window_pattern_array_wins(tmp_path):
    pattern = [i % 2 == 0 for i in range(62)]  # every even layer slides
    keys = {**GEMMA3_27B, "attention.sliding_window_pattern": pattern}
    spec = load_gguf(write_gguf(tmp_path / "g.gguf", "gemma3", keys))
    assert spec.layer_kinds == tuple("sliding" if s else "full" for s in pattern)


def test_swa_head_dims(tmp_path):
    keys = {**GEMMA3_27B, "attention.key_length_swa": 64, "attention.value_length_swa": 64}
    spec = load_gguf(write_gguf(tmp_path / "g.gguf", "gemma3", keys))
    assert {(layer.kind, layer.head_dim, layer.v_head_dim) for layer in spec.layers} == {
        ("full", 128, 128),
        ("sliding", 64, 64),
    }


@pytest.mark.parametrize(
    "arch, keys, expect",
    [
        # gemma2: every other layer slides (layer 0 first), window 4096 unless the file says otherwise
        ("gemma2", {}, (("sliding", "full") * 2, 4096)),
        ("gpt-oss", {"attention.sliding_window": 128}, (("sliding", "full") * 2, 128)),
        ("cohere2", {"attention.sliding_window": 4096}, (("sliding",) * 3 + ("full",), 4096)),
        # olmo2 slides only with a window in the file
        ("olmo2", {}, (("full",) * 4, None)),
        ("olmo2", {"attention.sliding_window": 4096}, (("sliding",) * 3 + ("full",), 4096)),
        # phi3: llama.cpp switches SWA off
        ("phi3", {"attention.sliding_window": 2047}, (("full",) * 4, None)),
        # llama: a sliding_window key is not read by llama.cpp for this architecture
        ("llama", {"attention.sliding_window": 4096}, (("full",) * 4, None)),
    ],
)
def test_architecture_swa_periods(tmp_path, arch, keys, expect):
    base = {"block_count": 4, "context_length": 8192, "embedding_length": 512, "attention.head_count": 8}
    spec = load_gguf(write_gguf(tmp_path / "m.gguf", arch, {**base, "attention.head_count_kv": 2, **keys}))
    assert (spec.layer_kinds, spec.sliding_window) == expect


def test_llama4_chunked(tmp_path):
    base = {"block_count": 8, "context_length": 1 << 20, "embedding_length": 5120, "attention.head_count": 40}
    spec = load_gguf(write_gguf(tmp_path / "scout.gguf", "llama4", {**base, "attention.head_count_kv": 8}))
    assert spec.layer_kinds == ("chunked",) * 3 + ("full",) + ("chunked",) * 3 + ("full",)
    assert spec.attention_chunk_size == 8192
    spec = load_gguf(
        write_gguf(
            tmp_path / "nochunk.gguf", "llama4", {**base, "attention.head_count_kv": 8, "attention.sliding_window": 0}
        )
    )
    assert spec.layer_kinds == ("full",) * 8


DEEPSEEK_V3 = {
    "block_count": 61,
    "context_length": 163840,
    "embedding_length": 7168,
    "attention.head_count": 128,
    "attention.head_count_kv": 1,
    "attention.key_length": 576,
    "attention.value_length": 512,
    "attention.key_length_mla": 192,
    "attention.value_length_mla": 128,
    "attention.kv_lora_rank": 512,
    "attention.q_lora_rank": 1536,
    "rope.dimension_count": 64,
    "leading_dense_block_count": 3,
}


def test_deepseek2_mla_latent(tmp_path):
    spec = load_gguf(write_gguf(tmp_path / "DeepSeek-V3-Q4_K_M.gguf", "deepseek2", DEEPSEEK_V3))
    assert spec.layer_kinds == ("mla",) * 61
    assert (spec.mla.kv_lora_rank, spec.mla.qk_rope_head_dim) == (512, 64)
    assert calc.estimate(spec, 1).total_bytes == 61 * 576 * 2
    assert calc.estimate(spec, 4096).total_bytes == calc.estimate(load_bundled("deepseek-v3"), 4096).total_bytes


def test_deepseek2_without_mla_keys_caches_per_head(tmp_path):
    # GGUFs converted before llama.cpp's MLA cache: per-head K (192) and V (128), as llama.cpp then allocates
    keys = {k: v for k, v in DEEPSEEK_V3.items() if not k.endswith("_mla")}
    keys.update({"attention.head_count_kv": 128, "attention.key_length": 192, "attention.value_length": 128})
    spec = load_gguf(write_gguf(tmp_path / "old.gguf", "deepseek2", keys))
    assert spec.layer_kinds == ("full",) * 61
    assert calc.estimate(spec, 1).total_bytes == 61 * 128 * (192 + 128) * 2


JAMBA = {
    "block_count": 32,
    "context_length": 262144,
    "embedding_length": 4096,
    "attention.head_count": 32,
    "attention.head_count_kv": [8 if i % 8 == 4 else 0 for i in range(32)],
    "ssm.conv_kernel": 4,
    "ssm.inner_size": 8192,
    "ssm.state_size": 16,
    "ssm.time_step_rank": 256,
}


def test_jamba_hybrid(tmp_path):
    spec = load_gguf(write_gguf(tmp_path / "jamba.gguf", "jamba", JAMBA))
    bundled = load_bundled("jamba-v0.1")
    assert spec.layer_kinds == bundled.layer_kinds  # attention on layers 4, 12, 20, 28; Mamba elsewhere
    layer = spec.layers[0]
    assert layer.kind == "mamba" and (layer.state.d_inner, layer.state.d_conv, layer.state.d_state) == (8192, 4, 16)
    # llama.cpp keeps recurrent state in f32
    assert layer.state.conv_dtype == "fp32" and layer.state.ssm_dtype == "fp32"
    per_kind = {g.kind: g for g in calc.estimate(spec, 4096).groups}
    assert per_kind["full"].bytes == 4 * 8 * 256 * 2 * 4096
    assert per_kind["mamba"].bytes == 28 * (8192 * 3 + 8192 * 16) * 4


def test_granitehybrid_mamba2(tmp_path):
    keys = {
        "block_count": 4,
        "context_length": 131072,
        "embedding_length": 1536,
        "attention.head_count": 12,
        "attention.head_count_kv": [0, 0, 0, 4],
        "ssm.conv_kernel": 4,
        "ssm.inner_size": 3072,
        "ssm.state_size": 128,
        "ssm.time_step_rank": 48,
        "ssm.group_count": 1,
    }
    spec = load_gguf(write_gguf(tmp_path / "granite.gguf", "granitehybrid", keys))
    assert spec.layer_kinds == ("mamba2", "mamba2", "mamba2", "full")
    st = spec.layers[0].state
    assert (st.num_heads, st.head_dim, st.d_state, st.n_groups, st.d_conv) == (48, 64, 128, 1, 4)


def test_nemotron_h_mlp_only_layers_cache_nothing(tmp_path):
    keys = {
        "block_count": 4,
        "context_length": 8192,
        "embedding_length": 1024,
        "attention.head_count": 8,
        "attention.head_count_kv": [0, 2, 0, 0],
        "feed_forward_length": [0, 0, 4096, 0],
        "ssm.conv_kernel": 4,
        "ssm.inner_size": 2048,
        "ssm.state_size": 128,
        "ssm.time_step_rank": 32,
        "ssm.group_count": 8,
    }
    spec = load_gguf(write_gguf(tmp_path / "nemo.gguf", "nemotron_h", keys))
    assert spec.layer_kinds == ("mamba2", "full", "none", "mamba2")


def test_per_layer_kv_heads(tmp_path):
    keys = {**LLAMA3_8B, "block_count": 4, "attention.head_count_kv": [8, 4, 8, 2]}
    spec = load_gguf(write_gguf(tmp_path / "m.gguf", "llama", keys))
    assert [layer.num_kv_heads for layer in spec.layers] == [8, 4, 8, 2]


@pytest.mark.parametrize(
    "arch, message",
    [
        ("falcon-h1", r"'falcon-h1' runs attention and Mamba-2 in parallel"),
        ("mamba", r"m\.gguf: mamba\.ssm\.conv_kernel is missing"),  # read now, but it needs its ssm keys
        ("rwkv7", r"GGUF architecture 'rwkv7'.*will not guess; known: .*write a spec YAML instead"),
    ],
)
def test_unknown_or_unsupported_architectures_are_refused(tmp_path, arch, message):
    with pytest.raises(SpecError, match=message):
        load_gguf(write_gguf(tmp_path / "m.gguf", arch, LLAMA3_8B))


def test_missing_key_names_file_and_key(tmp_path):
    keys = {k: v for k, v in LLAMA3_8B.items() if k != "block_count"}
    path = write_gguf(tmp_path / "m.gguf", "llama", keys)
    with pytest.raises(SpecError, match=r"m\.gguf: llama\.block_count is missing$"):
        load_gguf(path)


@pytest.mark.parametrize(
    "content", [b"", b"GGUF", b"not a gguf at all, just text", b"GGUF\x03\x00\x00\x00" + b"\xff" * 40]
)
def test_unreadable_files_are_one_line_exit_2(cli, tmp_path, content):
    p = tmp_path / "broken.gguf"
    p.write_bytes(content)
    code, out, err = cli("estimate", p, "--seq", "1")
    assert (code, out) == (2, "")
    assert err.startswith(f"kvplan: error: {p}: not a readable GGUF file") and err.count("\n") == 1


def test_a_gguf_without_the_suffix_is_recognized(tmp_path, llama_gguf):
    blob = tmp_path / "sha256-abc"  # Ollama's blob store names files by digest
    blob.write_bytes(llama_gguf.read_bytes())
    assert calc.estimate(load_model(str(blob)), 4096).total_bytes == 536_870_912


def test_split_gguf_sums_every_shard(tmp_path):
    first = write_gguf(
        tmp_path / "big-00001-of-00002.gguf",
        "llama",
        LLAMA3_8B,
        extra={"split.count": (2, gguf.GGUFValueType.UINT16), "split.no": (0, gguf.GGUFValueType.UINT16)},
    )
    with pytest.raises(SpecError, match=r"split GGUF of 2 files but big-00002-of-00002\.gguf is missing"):
        load_gguf(first)
    second = [("blk.1.attn_q.weight", Q.F16, (4, 8))]  # 32 elements, 64 B: a tensor of its own
    write_gguf(tmp_path / "big-00002-of-00002.gguf", "llama", LLAMA3_8B, tensors=second)
    spec = load_gguf(first)
    assert spec.name == "big" and spec.weights_bytes == TINY_BYTES + 64


def test_a_split_gguf_shard_that_copies_another_is_refused(tmp_path, cli):
    # llama.cpp's llama_model_loader refuses a tensor found in two shards ("tensor '...' is duplicated"); summed,
    # the copy would count every weight twice
    extra = {"split.count": (2, gguf.GGUFValueType.UINT16), "split.no": (0, gguf.GGUFValueType.UINT16)}
    first = write_gguf(tmp_path / "big-00001-of-00002.gguf", "llama", LLAMA3_8B, extra=extra)
    (tmp_path / "big-00002-of-00002.gguf").write_bytes(first.read_bytes())
    code, out, err = cli("fit", first, "--gpu", "h100")
    assert (code, out) == (2, "")
    assert err == (
        f"kvplan: error: {tmp_path / 'big-00002-of-00002.gguf'}: tensor 'token_embd.weight' is in "
        'big-00001-of-00002.gguf too; each tensor of a split GGUF is in one shard (llama.cpp: "tensor is '
        'duplicated"): is a shard a copy of another?\n'
    )


def test_large_tokenizer_arrays_are_skipped_fast(tmp_path):
    import time

    p = tmp_path / "tok.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    for key, value in LLAMA3_8B.items():
        if key != "attention.head_count_kv":
            w.add_uint32(f"llama.{key}", value)
    w.add_array("llama.attention.head_count_kv", [8] * 32)  # a numeric array kvplan reads
    w.add_token_list([f"t{i}" for i in range(100_000)])
    w.add_token_types([1] * 100_000)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    t0 = time.perf_counter()
    meta, _ = read_gguf(p)
    assert time.perf_counter() - t0 < 3.0  # the stock reader takes ~6 s on these arrays
    assert meta["llama.attention.head_count_kv"] == [8] * 32
    assert not any(k.startswith("tokenizer.") for k in meta)


@pytest.mark.parametrize("blocks", [2**30, 2**40, 2**63])
def test_a_huge_block_count_is_refused_before_any_per_layer_list(cli, tmp_path, blocks):
    keys = {k: v for k, v in LLAMA3_8B.items() if k != "block_count"}
    extra = {"llama.block_count": (blocks, gguf.GGUFValueType.UINT64)}
    path = write_gguf(tmp_path / "m.gguf", "llama", keys, extra=extra)
    start = time.perf_counter()
    code, out, err = cli("estimate", path, "--seq", "4k")
    assert time.perf_counter() - start < 1
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert f"llama.block_count={blocks} is more layers than kvplan handles (100,000)" in err  # no stray space


def test_a_string_that_is_not_utf8_is_one_line(cli, tmp_path):
    extra = {"general.name": ("QQQQ", gguf.GGUFValueType.STRING)}
    path = write_gguf(tmp_path / "m.gguf", "llama", LLAMA3_8B, extra=extra)
    path.write_bytes(path.read_bytes().replace(b"QQQQ", b"\xff\xfeQQ"))
    code, out, err = cli("estimate", path, "--seq", "4k")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "GGUF metadata key 'general.name' is unreadable (UnicodeDecodeError" in err


@pytest.mark.parametrize(
    "arch, keys, key",
    [
        ("qwen3next", {"full_attention_interval": 8}, "qwen3next.full_attention_interval"),
        ("nemotron_h", {"attention.head_count_kv": [0, 0, 0, 0]}, "nemotron_h.attention.head_count_kv"),
    ],
)
def test_a_hybrid_without_an_attention_layer_is_refused(tmp_path, arch, keys, key):
    base = {
        "block_count": 4,
        "context_length": 8192,
        "embedding_length": 1024,
        "attention.head_count": 8,
        "attention.head_count_kv": 2,
        "feed_forward_length": [0, 0, 0, 0],
        "ssm.conv_kernel": 4,
        "ssm.inner_size": 2048,
        "ssm.state_size": 128,
        "ssm.time_step_rank": 32,
        "ssm.group_count": 8,
    }
    path = write_gguf(tmp_path / "m.gguf", arch, {**base, **keys})
    with pytest.raises(SpecError, match=rf"{key} leaves no attention layer among block_count=4 layers$"):
        load_gguf(path)


# llama.cpp keeps its input layer on the host (src/llama-model.cpp:1603-1605: "always keep it on the CPU"):
# token_embd is not in the GPU's model buffer, unless it also serves as the output (no output.weight).
TINY_LLAMA = {"block_count": 1, "context_length": 4096, "embedding_length": 8, "attention.head_count": 1}


@pytest.mark.parametrize("tied", [False, True])
def test_vocab_and_host_weights_from_the_tensor_infos(cli, tmp_path, tied):
    tensors = [("token_embd.weight", Q.F16, (5, 8)), ("blk.0.attn_q.weight", Q.F16, (8, 8))]
    if not tied:
        tensors.append(("output.weight", Q.F16, (5, 8)))
    spec = load_gguf(write_gguf(tmp_path / "t.gguf", "llama", TINY_LLAMA, tensors=tensors))
    embd = 5 * 8 * 2
    assert spec.vocab_size == 5  # token_embd {n_embd, n_vocab}: 40 elements / 8
    assert spec.weights_bytes == embd + 128 + (0 if tied else embd)
    assert spec.host_weights_bytes == (0 if tied else embd)
    code, out, err = cli("fit", str(tmp_path / "t.gguf"), "--gpu", "h100", "--engine", "llamacpp", "-c", "256", "--json")
    assert code == 0, err
    assert json.loads(out)["weights_bytes"] == spec.weights_bytes - spec.host_weights_bytes


def test_vocab_from_the_tokenizer_when_no_tensor_says_it(tmp_path):
    tokens = [f"t{i}" for i in range(7)]
    extra = {"tokenizer.ggml.tokens": (tokens, gguf.GGUFValueType.ARRAY)}
    spec = load_gguf(write_gguf(tmp_path / "t.gguf", "llama", TINY_LLAMA, tensors=[], extra=extra))
    assert spec.vocab_size == 7
# --- files that are not what they claim (issue 20): llama.cpp's own checks, costs bounded by the file -------
#
# GGUF v3 layout (ggml docs/gguf.md): "GGUF", u32 version, u64 tensor_count, u64 kv_count, then kv_count entries
# (string key, u32 type, value; a string is u64 length + bytes; an array u32 item type + u64 count + items),
# then tensor_count tensor infos (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset), then
# the data, aligned to 32 bytes. Little-endian.

import struct  # noqa: E402


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


LLAMA_KV = [
    _s("general.architecture") + struct.pack("<I", 8) + _s("llama"),
    *(_u32(f"llama.{k}", v) for k, v in LLAMA3_8B.items()),
]


def raw_gguf(kvs=(), tensors=(), tensor_count=None, kv_count=None, data=b"") -> bytes:
    """A GGUF v3 file of raw parts: tensors are (name, dims, ggml type, offset) infos."""
    kvs = [*LLAMA_KV, *kvs]
    infos = b"".join(
        _s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", t, off)
        for name, dims, t, off in tensors
    )
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if tensor_count is None else tensor_count,
                                 len(kvs) if kv_count is None else kv_count)  # fmt: skip
    body = head + b"".join(kvs) + infos
    return body + b"\0" * (-len(body) % 32) + data


def gguf_error(cli, tmp_path, content: bytes) -> str:
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    code, out, err = cli("estimate", p, "--seq", "4k")
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"kvplan: error: {p}: not a readable GGUF file (ValueError: ")
    return err


def test_metadata_arrays_nested_500_deep_are_one_line(cli, tmp_path):
    nested = _s("x.nested") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 500 + struct.pack("<IQI", 4, 1, 7)
    err = gguf_error(cli, tmp_path, raw_gguf([nested]))
    assert "a metadata array of arrays (llama.cpp refuses nested arrays)" in err  # gguf.cpp: invalid GGUF type


def test_2_63_tensors_over_zero_bytes_are_refused_before_any_is_read(cli, tmp_path):
    # the stock reader parsed one 24-byte tensor info of zeros after another (5 s and 200 MB per MiB) until it
    # ran off the end; a tensor info is at least 24 bytes, so the claim is refused from the file's size alone
    content = raw_gguf(tensor_count=2**63) + b"\0" * (1 << 20)
    err = gguf_error(cli, tmp_path, content)
    assert f"tensor_count 9,223,372,036,854,775,808 cannot fit in the file's {len(content):,} B" in err


def test_a_key_count_beyond_the_file_is_refused(cli, tmp_path):
    err = gguf_error(cli, tmp_path, raw_gguf(kv_count=2**63))
    assert "kv_count 9,223,372,036,854,775,808 cannot fit in the file's" in err


def test_zeros_read_as_tensor_infos_stop_at_the_second_one(cli, tmp_path):
    # 40,000 infos of zeros (each an unnamed F32 scalar at offset 0), read with one struct call each (no numpy
    # views); the second repeats the first's name, as llama.cpp's "duplicate tensor name" check sees
    err = gguf_error(cli, tmp_path, raw_gguf(tensor_count=40_000) + b"\0" * (40_000 * 24 + 64))
    assert "duplicate tensor name ''" in err


def test_a_string_claiming_2_63_bytes_at_the_end_is_refused(cli, tmp_path):
    name = _s("general.name") + struct.pack("<I", 8) + struct.pack("<Q", 2**63)  # the last key, no bytes after
    err = gguf_error(cli, tmp_path, raw_gguf([name]))
    assert "claims 9,223,372,036,854,775,808 B, past the end of the file" in err


def test_tensor_offsets_are_checked_as_llama_cpp_checks_them(cli, tmp_path):
    f32 = 0  # ggml type F32: 4 B per element
    # each tensor starts at the 32-byte-aligned end of the one before (gguf.cpp "has offset X, expected Y")
    ok = raw_gguf(tensors=[("a", [8], f32, 0), ("b", [4], f32, 32)], data=b"\0" * 48)
    (tmp_path / "ok.gguf").write_bytes(ok)
    spec = load_gguf(tmp_path / "ok.gguf")
    assert (spec.weights_bytes, spec.param_count) == (8 * 4 + 4 * 4, 12)
    overlap = raw_gguf(tensors=[("a", [8], f32, 0), ("b", [4], f32, 0)], data=b"\0" * 48)
    assert "tensor 'b' has offset 0, expected 32" in gguf_error(cli, tmp_path, overlap)
    short = raw_gguf(tensors=[("a", [8], f32, 0), ("b", [4], f32, 32)], data=b"\0" * 40)
    assert "tensor 'b' data (16 B at " in gguf_error(cli, tmp_path, short)
    assert "is not within the file" in gguf_error(cli, tmp_path, short)
    long_name = raw_gguf(tensors=[("n" * 64, [8], f32, 0)], data=b"\0" * 32)
    assert "tensor name 0 is 64 B long; llama.cpp allows at most 63" in gguf_error(cli, tmp_path, long_name)
    dims = raw_gguf(tensors=[("a", [1, 1, 1, 1, 1], f32, 0)], data=b"\0" * 32)
    assert "tensor 'a' has 5 dimensions; llama.cpp allows 4" in gguf_error(cli, tmp_path, dims)
    q4k = 12  # ggml type Q4_K: blocks of 256 elements
    rows = raw_gguf(tensors=[("a", [100], q4k, 0)], data=b"\0" * 256)
    assert "tensor 'a' (Q4_K) has rows of 100 elements, not whole blocks of 256" in gguf_error(cli, tmp_path, rows)
    unknown = raw_gguf(tensors=[("a", [8], 9999, 0)], data=b"\0" * 32)
    assert "tensor 'a' has an unknown ggml type 9999" in gguf_error(cli, tmp_path, unknown)


def test_a_gguf_without_tensor_infos_is_not_blamed_on_safetensors(cli, tmp_path):
    p = tmp_path / "meta-only.gguf"
    p.write_bytes(raw_gguf())
    assert cli("estimate", p, "--seq", "4k")[0] == 0
    code, out, err = cli("fit", p, "--gpu", "h100")
    assert (code, out) == (2, "")
    assert err == (
        f"kvplan: error: meta-only: {p} has no tensor infos (metadata only), so weights are unknown; "
        "give --weights-gib (weights per GPU)\n"
    )


@pytest.mark.parametrize("blocks, line", [(0, "llama.block_count=0 must be an integer >= 1")])
def test_a_gguf_value_error_names_the_key_with_no_stray_space(cli, tmp_path, blocks, line):
    keys = {k: v for k, v in LLAMA3_8B.items() if k != "block_count"}
    extra = {"llama.block_count": (blocks, gguf.GGUFValueType.UINT32)}
    path = write_gguf(tmp_path / "m.gguf", "llama", keys, extra=extra)
    code, out, err = cli("estimate", path, "--seq", "4k")
    assert (code, out, err) == (2, "", f"kvplan: error: {path}: {line}\n")
