"""The speech simulator held to vLLM 0.32's own HTTP layer for audio (tests/data/
vllm_audio_http, recorded by tests/contract/record_vllm_audio.py: vLLM's routers, form models
and exception handlers over stub serving): each status and error body exactly, each answer's
keys and types."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.sim.conftest import SimFactory
from tests.engine.sim.recorded import fixtures, load, replay, same_shape

AUDIO = fixtures("vllm_audio_http")


@pytest.mark.parametrize("path", AUDIO, ids=[p.stem for p in AUDIO])
async def test_audio_answer_as_recorded(
    make_sim: SimFactory, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorded request gets the recorded status and body shape (errors word for word)."""
    record = load(path)
    for name, value in record.get("env", {}).items():
        monkeypatch.setenv(name, value)
    sim = await make_sim("--sim-asr")
    response = await replay(sim.client, record["request"])
    assert response.status_code == record["status"], response.text
    assert same_shape(response.json(), record["body"]) == []


def test_every_audio_case_is_recorded() -> None:
    """The recording exists (re-record with tests/contract/record_vllm_audio.py)."""
    assert len(AUDIO) >= 15
