"""The pooling model's numbers, derived from token ids alone (pure Python, no torch): an
embedding, class probabilities and pair scores, deterministic for a prompt and a size.

Each token id has a fixed unit vector (seeded by the id); a prompt's embedding is the mean of its
tokens' vectors, L2-normalised as vLLM's embed pooler normalises (`use_activation`). Bi-encoder
scores are cosine similarities of two embeddings (pooling/scoring/io_processor.py
`BiEncoderIOProcessor`); class probabilities a softmax (or, with one label, a sigmoid: vLLM's
default classify activation) over fixed label directions.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import random
import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

EncodingFormat = Literal["float", "base64", "bytes", "bytes_only"]


@dataclasses.dataclass(frozen=True)
class Encoding:
    """How vectors are written (vLLM 0.32's `encoding_format`, `embed_dtype`, `endianness`;
    `native` is little-endian, as on x86)."""

    format: EncodingFormat = "float"
    dtype: str = "float32"
    endianness: str = "native"


@lru_cache(maxsize=8192)
def _token_vector(token_id: int, size: int) -> tuple[float, ...]:
    rng = random.Random(f"llmd-sim-token-{token_id}")
    return _unit([rng.gauss(0.0, 1.0) for _ in range(size)])


def embed(token_ids: Sequence[int], size: int) -> list[float]:
    """A unit vector of `size` floats for a prompt of `token_ids` (mean-pooled, normalised);
    all zeros for an empty prompt."""
    total = [0.0] * size
    for token_id in token_ids:
        for i, value in enumerate(_token_vector(token_id, size)):
            total[i] += value
    return list(_unit(total))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (0.0 when either is all zeros)."""
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0


def class_probs(vector: Sequence[float], num_labels: int) -> list[float]:
    """Probabilities of `num_labels` classes for an embedding: a softmax of its dot products
    with each label's fixed direction (scaled by 4 so they are not all near uniform), or the
    sigmoid of the one logit."""
    logits = [
        4.0
        * sum(x * y for x, y in zip(vector, _token_vector(-1 - label, len(vector)), strict=True))
        for label in range(num_labels)
    ]
    if num_labels == 1:
        return [1.0 / (1.0 + math.exp(-logits[0]))]
    top = max(logits)
    exps = [math.exp(logit - top) for logit in logits]
    return [e / sum(exps) for e in exps]


def encoded(vector: list[float], encoding: Encoding) -> list[float] | str:
    """A vector as `encoding_format` float (the list itself) or base64 (its bytes)."""
    if encoding.format == "float":
        return vector
    return base64.b64encode(vector_bytes(vector, encoding)).decode()


def vector_bytes(vector: Sequence[float], encoding: Encoding) -> bytes:
    """The vector's bytes in `embed_dtype` (float32, float16, or bfloat16: the high half of
    each float32) and `endianness`."""
    order = ">" if encoding.endianness == "big" else "<"
    if encoding.dtype == "float16":
        return struct.pack(f"{order}{len(vector)}e", *vector)
    packed = struct.pack(f"{order}{len(vector)}f", *vector)
    if encoding.dtype != "bfloat16":
        return packed
    high = slice(2, 4) if order == "<" else slice(0, 2)
    return b"".join(packed[i : i + 4][high] for i in range(0, len(packed), 4))


def float32_base64(vector: Sequence[float]) -> str:
    """The vector as little-endian float32 bytes in base64 (vLLM's `encoding_format: base64`
    with its defaults `embed_dtype: float32`, `endianness: native` on x86)."""
    return base64.b64encode(float32_bytes(vector)).decode()


def float32_bytes(vector: Sequence[float]) -> bytes:
    """The vector as little-endian float32 bytes."""
    return struct.pack(f"<{len(vector)}f", *vector)


def packed_bits(vectors: Sequence[Sequence[float]], *, signed: bool) -> list[list[int]]:
    """Cohere's `binary`/`ubinary` embeddings: one bit per dimension (>= 0 is 1), packed
    eight to a byte most significant first, minus 128 when `signed` (embed/protocol.py
    `_pack_binary_embeddings`). Raises ValueError when the size is not a multiple of 8."""
    packed = []
    for vector in vectors:
        if len(vector) % 8:
            raise ValueError(
                "Embedding dimension must be a multiple of 8 for binary embedding types, "
                f"but got {len(vector)}."
            )
        row = []
        for start in range(0, len(vector), 8):
            byte = 0
            for value in vector[start : start + 8]:
                byte = (byte << 1) | (value >= 0)
            row.append(byte - 128 if signed else byte)
        packed.append(row)
    return packed


def _unit(values: list[float]) -> tuple[float, ...]:
    norm = math.sqrt(sum(v * v for v in values))
    return tuple(v / norm for v in values) if norm else tuple(values)
