"""What an engine serves, from vLLM's own flags: a generate engine (chat, completions) or a
pooling engine (embeddings, pooling, classify, score, rerank); both serve tokenize."""

from __future__ import annotations

import enum
from collections.abc import Sequence

from llmd.engine.args import engine_flag


class EngineKind(enum.StrEnum):
    """GENERATE: vLLM's default runner; POOLING: `--runner pooling` (vLLM 0.32)."""

    GENERATE = "generate"
    POOLING = "pooling"


# `--convert` values that make a generative architecture a pooling model, and the tasks of
# vLLM's older `--task` flag that did (vllm/config/model.py, 0.10-0.32).
POOLING_CONVERTS = frozenset({"embed", "classify", "reward", "mm_encoder_only"})
POOLING_TASKS = frozenset({"embed", "embedding", "classify", "score", "reward"})


def engine_kind(args: Sequence[str]) -> EngineKind:
    """The kind of engine that `args` start: pooling with `--runner pooling`, a pooling
    `--convert` or `--task`; else generate (`--runner auto` on an encoder-only model also
    pools: llmd learns it when the engine answers chat with 404, and says so)."""
    runner = engine_flag(args, "--runner")
    if runner == "pooling":
        return EngineKind.POOLING
    if runner == "generate":
        return EngineKind.GENERATE
    if engine_flag(args, "--convert") in POOLING_CONVERTS:
        return EngineKind.POOLING
    if engine_flag(args, "--task") in POOLING_TASKS:
        return EngineKind.POOLING
    return EngineKind.GENERATE
