"""Model shapes from three real config.json files: KV bytes per token and parameter counts,
against values computed by hand (tests/data/model_configs/README.md says where the files are from).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmd.errors import SizingError
from llmd.sizing.model import ModelShape, dtype_bytes, load_shape, weight_bytes

CONFIGS = Path(__file__).parent.parent / "data" / "model_configs"
LLAMA = CONFIGS / "llama-3.1-8b-instruct"
QWEN = CONFIGS / "qwen2.5-7b-instruct"
MISTRAL = CONFIGS / "mistral-7b-instruct-v0.3"


def test_llama_3_1_8b_kv_bytes_per_token() -> None:
    """2 (K and V) x 32 layers x 8 KV heads x 128 (4096 / 32 heads) x 2 bytes = 131,072."""
    shape = load_shape(LLAMA)
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.dtype) == (32, 8, 128, "bfloat16")
    assert shape.kv_bytes_per_token(2) == 131_072
    assert shape.max_positions == 131_072


def test_qwen2_5_7b_kv_bytes_per_token() -> None:
    """2 x 28 layers x 4 KV heads x 128 (3584 / 28 heads) x 2 bytes = 57,344."""
    shape = load_shape(QWEN)
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (28, 4, 128)
    assert shape.kv_bytes_per_token(2) == 57_344
    assert shape.max_positions == 32_768


def test_mistral_7b_v0_3_kv_bytes_per_token_in_fp8() -> None:
    """2 x 32 layers x 8 KV heads x 128 x 1 byte (an fp8 KV cache) = 65,536."""
    shape = load_shape(MISTRAL)
    assert shape.kv_bytes_per_token(dtype_bytes("fp8")) == 65_536
    assert shape.kv_bytes_per_token(dtype_bytes("bfloat16")) == 131_072


def test_parameter_counts_match_the_published_ones() -> None:
    """Embeddings + 32 x (q 4096x4096, k/v 4096x1024 each, o 4096x4096, MLP 3 x 4096x14336, two
    norms) + final norm: Llama-3.1-8B 8,030,261,248 (its published count); Mistral-7B-v0.3 the
    same layers with a 32,768 vocabulary, 7,248,023,552; Qwen2.5-7B with q/k/v biases
    7,615,616,512 (the Hub's safetensors count)."""
    # Llama: 2 x 128256 x 4096 = 1,050,673,152; per layer 16,777,216 + 8,388,608 + 16,777,216
    # + 176,160,768 + 8,192 = 218,112,000; x 32 = 6,979,584,000; + 4,096.
    assert load_shape(LLAMA).parameter_count() == 8_030_261_248
    # Mistral: 2 x 32768 x 4096 = 268,435,456 + 6,979,584,000 + 4,096.
    assert load_shape(MISTRAL).parameter_count() == 7_248_023_552
    # Qwen: 2 x 152064 x 3584 = 1,089,994,752; per layer 12,845,056 + 3,584 (q + bias)
    # + 2 x (1,835,008 + 512) (k, v + biases) + 12,845,056 (o) + 203,685,888 (MLP) + 7,168
    # = 233,057,792; x 28 = 6,525,618,176; + 3,584.
    assert load_shape(QWEN).parameter_count() == 7_615_616_512


def test_weights_come_from_safetensors_on_disk_first(tmp_path: Path) -> None:
    """With *.safetensors present their sizes count; without, parameters x dtype bytes."""
    shape = load_shape(LLAMA)
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 1000)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 24)
    on_disk = weight_bytes(tmp_path, shape, 2)
    assert on_disk is not None and (on_disk.bytes, on_disk.source) == (1024, "safetensors")
    estimated = weight_bytes(LLAMA, shape, 2)
    assert estimated is not None and (estimated.bytes, estimated.source) == (
        16_060_522_496,
        "parameters",
    )


def test_other_architectures_have_no_parameter_estimate() -> None:
    """A config outside the dense Llama/Mistral/Qwen2 family is sized for KV only."""
    config = json.loads((LLAMA / "config.json").read_text())
    config["architectures"] = ["MixtralForCausalLM"]
    shape = ModelShape.from_config(config)
    assert shape.parameter_count() is None
    assert shape.kv_bytes_per_token(2) == 131_072


def test_kv_heads_default_to_attention_heads_and_head_dim_to_hidden_over_heads() -> None:
    """No num_key_value_heads: multi-head attention (vLLM's get_total_num_kv_heads)."""
    shape = ModelShape.from_config(
        {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, "dtype": "float16"}
    )
    assert (shape.kv_heads, shape.head_dim, shape.dtype) == (4, 64, "float16")
    assert shape.kv_bytes_per_token(2) == 2 * 2 * 4 * 64 * 2


def test_a_config_without_layers_is_a_sizing_error(tmp_path: Path) -> None:
    """The message names the missing key; a missing file names the path."""
    (tmp_path / "config.json").write_text('{"hidden_size": 8, "num_attention_heads": 1}')
    with pytest.raises(SizingError, match="num_hidden_layers"):
        load_shape(tmp_path)
    with pytest.raises(SizingError, match="cannot read"):
        load_shape(tmp_path / "missing")
    with pytest.raises(SizingError, match="unknown dtype"):
        dtype_bytes("int3")
