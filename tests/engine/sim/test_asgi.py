"""The simulator's route table answers as FastAPI does (vLLM 0.32 serves on it): unknown paths,
wrong methods, HEAD on GET routes."""

from __future__ import annotations

from tests.engine.sim.conftest import RunningSim


async def test_unknown_path_and_method_are_answered_as_fastapi(sim: RunningSim) -> None:
    """An unknown path is 404 `{"detail": "Not Found"}`; a known path with another method is
    405 `{"detail": "Method Not Allowed"}` naming the allowed ones; GET routes answer HEAD."""
    missing = await sim.client.post("/v1/nothing", json={})
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
    wrong = await sim.client.get("/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.json() == {"detail": "Method Not Allowed"}
    assert wrong.headers["allow"] == "POST"
    assert (await sim.client.post("/health")).headers["allow"] == "GET, HEAD"
    head = await sim.client.head("/health")
    assert head.status_code == 200 and head.content == b""
