"""A model's shape from its `config.json`, and the memory that shape implies: KV-cache bytes per
token, parameter count and weight bytes."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmd.errors import SizingError

# Bytes per element of the dtypes configs and vLLM's --dtype / --kv-cache-dtype name.
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
# Dense decoders whose weights are embedding + layers of (q, k, v, o, gated MLP, two RMSNorms) +
# final norm + lm_head (transformers' modeling_llama.py, modeling_mistral.py, modeling_qwen2.py).
# Qwen2 alone gives q/k/v a bias (Qwen2Attention: `bias=True`); Llama's says `attention_bias`.
GATED_DECODERS = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"})
QKV_BIAS_ARCHITECTURES = frozenset({"Qwen2ForCausalLM"})


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """The figures of `config.json` that size a deployment.

    `head_dim` is `head_dim` when given, else `hidden_size // num_attention_heads`; `kv_heads` is
    `num_key_value_heads`, else `num_attention_heads` (no grouped-query attention): vLLM 0.32's
    `ModelArchConfigConvertor.get_head_size` / `get_total_num_kv_heads`. `dtype` is
    `torch_dtype` (`dtype` in transformers 5 configs). `max_positions` is
    `max_position_embeddings` (None when absent).
    """

    architecture: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    dtype: str
    max_positions: int | None
    vocab_size: int | None
    intermediate_size: int | None
    tie_word_embeddings: bool
    qkv_bias: bool

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelShape:
        """The shape of a decoded `config.json`; a multimodal config's `text_config` holds the
        language model (vLLM's `hf_text_config`). Raises `SizingError` for a missing key."""
        text = config.get("text_config") or config
        architecture = str((config.get("architectures") or ["?"])[0])
        try:
            layers = int(text["num_hidden_layers"])
            heads = int(text["num_attention_heads"])
            hidden = int(text["hidden_size"])
        except KeyError as exc:
            raise SizingError(f"config.json has no {exc.args[0]}: cannot size this model") from None
        head_dim = text.get("head_dim") or hidden // heads
        dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype")
                    or config.get("dtype") or "float32")  # fmt: skip
        return cls(
            architecture=architecture,
            layers=layers,
            attention_heads=heads,
            kv_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(head_dim),
            hidden_size=hidden,
            dtype=dtype,
            max_positions=_int_or_none(text.get("max_position_embeddings")),
            vocab_size=_int_or_none(text.get("vocab_size")),
            intermediate_size=_int_or_none(text.get("intermediate_size")),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=bool(text.get("attention_bias", architecture in QKV_BIAS_ARCHITECTURES)),
        )

    def kv_bytes_per_token(self, kv_dtype_bytes: int) -> int:
        """KV-cache bytes one token takes in every layer: 2 (a key and a value) x layers x KV heads
        x head size x bytes per element.

        Source: vLLM 0.32 `AttentionSpec.page_size_bytes` (vllm/v1/kv_cache_interface.py) is
        `num_kv_heads x (head_size + head_size_v) x dtype size` per token of a block, one spec
        per attention layer; with head_size_v = head_size that is the standard formula above.
        """
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_dtype_bytes

    def parameter_count(self) -> int | None:
        """Parameters of a dense gated decoder (`GATED_DECODERS`), None for other architectures:
        embedding + lm_head (unless tied) + per layer q, k, v, o projections (with q/k/v biases
        where the architecture has them), gate/up/down MLP and two RMSNorm weights + final norm.
        """
        if self.architecture not in GATED_DECODERS or not (
            self.vocab_size and self.intermediate_size
        ):
            return None
        hidden, q_width = self.hidden_size, self.attention_heads * self.head_dim
        kv_width = self.kv_heads * self.head_dim
        attention = hidden * q_width + 2 * hidden * kv_width + q_width * hidden
        if self.qkv_bias:
            attention += q_width + 2 * kv_width
        per_layer = attention + 3 * hidden * self.intermediate_size + 2 * hidden
        embeddings = self.vocab_size * hidden * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.layers * per_layer + hidden


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of `dtype` (a config or vLLM dtype name). Raises `SizingError`."""
    size = DTYPE_BYTES.get(dtype.removeprefix("torch."))
    if size is None:
        raise SizingError(f"unknown dtype {dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
    return size


def load_shape(model_dir: Path) -> ModelShape:
    """The shape from `model_dir/config.json`. Raises `SizingError` when it is missing or bad."""
    path = model_dir / "config.json"
    try:
        config = json.loads(path.read_text())
    except OSError as exc:
        raise SizingError(f"{path}: cannot read: {exc.strerror}") from exc
    except ValueError as exc:
        raise SizingError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise SizingError(f"{path}: expected a JSON object")
    return ModelShape.from_config(config)


@dataclasses.dataclass(frozen=True)
class Weights:
    """Weight bytes and where the figure comes from: `safetensors` (file sizes on disk, which
    include each file's small JSON header) or `parameters` (count x dtype bytes)."""

    bytes: int
    source: str


def weight_bytes(model_dir: Path, shape: ModelShape, dtype_size: int) -> Weights | None:
    """The weights of the model in `model_dir`: the sizes of its `*.safetensors` files, else the
    parameter count x `dtype_size`; None when neither is known."""
    files = sorted(model_dir.glob("*.safetensors")) if model_dir.is_dir() else []
    if files:
        return Weights(sum(f.stat().st_size for f in files), "safetensors")
    count = shape.parameter_count()
    return Weights(count * dtype_size, "parameters") if count is not None else None
