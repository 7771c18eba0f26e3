"""The engine's vLLM release from its /version, and what llmd mirrors of each release (also
through a real llmd in front of the simulator answering as 0.31)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from llmd.engine.versions import ASSUMED, EngineApi
from llmd.errors import ModelNotFound
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config


def test_release_is_read_from_the_version_string() -> None:
    """'0.31.0' and local builds ('0.32.1.dev3+cpu') give (major, minor); junk is a ValueError;
    until the engine says, 0.32 is assumed."""
    assert EngineApi.parse("0.31.0").release == (0, 31)
    assert EngineApi.parse("0.32.1.dev3+cpu").release == (0, 32)
    assert ASSUMED.release == (0, 32)
    with pytest.raises(ValueError):
        EngineApi.parse("sim")


def test_what_differs_between_0_31_and_0_32() -> None:
    """0.32 names the served models in an unknown model's 404 and bounds truncation by the
    context; 0.31 does neither."""
    old, new = EngineApi((0, 31)), EngineApi((0, 32))
    assert (new.names_models_when_not_found, old.names_models_when_not_found) == (True, False)
    assert old.truncation_keeps_room_for_output and not new.truncation_keeps_room_for_output
    assert ModelNotFound("x", ["tiny"], name_served=False).message == (
        "The model `x` does not exist."
    )
    assert ModelNotFound("x", ["tiny"]).message == (
        "The model `x` does not exist. Valid aliases: tiny."
    )


@pytest.fixture(scope="module")
def llmd_on_0_31() -> Iterator[LlmdProcess]:
    """llmd in front of the simulator answering as vLLM 0.31."""
    process = LlmdProcess.start(sim_config(ensure_tiny_model(), ("--vllm-version", "0.31.0")))
    try:
        process.wait_ready(timeout_s=60)
        yield process
    finally:
        process.stop()


def test_llmd_reads_the_release_and_answers_as_it(llmd_on_0_31: LlmdProcess) -> None:
    """In front of 0.31: an unknown model's 404 is 0.31's; prompt + max_tokens over the
    context, which 0.31 alone refuses, is clamped by llmd (x-llmd-context-policy: clamp) and
    served, or refused by llmd's own 400 (reject)."""
    url = llmd_on_0_31.base_url + "/v1/completions"
    unknown = httpx.post(url, json={"model": "nope", "prompt": "x"}, timeout=30)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"] == "The model `nope` does not exist."
    body = {"model": "tiny", "prompt": " a" * 1000, "max_tokens": 500, "ignore_eos": True}
    clamped = httpx.post(url, json=body, headers={"x-llmd-context-policy": "clamp"}, timeout=30)
    assert clamped.status_code == 200, clamped.text
    assert clamped.headers["x-llmd-max-tokens-clamped"].startswith("500->")
    refused = httpx.post(url, json=body, timeout=30)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
