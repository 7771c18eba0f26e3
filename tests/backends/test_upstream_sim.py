"""Upstreams through a real `llmd serve`: one is routed to only once a probe of it succeeded
(an unreachable one is never ready; its requests get 503 with Retry-After, not a failed
token count), drained and resumed by name like an engine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.configs import multi_sim_config
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import SimProcess
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def upstream() -> Iterator[SimProcess]:
    """A simulator serving `near`, run apart from llmd (an upstream llmd does not supervise)."""
    sim = SimProcess.start(ensure_tiny_model(), name="near")
    try:
        sim.wait_ready()
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def llmd(upstream: SimProcess) -> Iterator[LlmdProcess]:
    """llmd with engine `main` (tiny), upstream `live` (near) and upstream `dead` (far), whose
    socket nobody listens on."""
    missing = short_tmpdir("llmd-up-") / "missing.sock"
    config = multi_sim_config(
        ensure_tiny_model(),
        {"main": ("tiny", ())},
        upstreams={
            "live": {"url": f"unix:{upstream.socket}", "models": ["near"]},
            "dead": {"url": f"unix:{missing}", "models": ["far"]},
        },
    )
    process = LlmdProcess.start(config)
    try:
        assert wait_for(lambda: ready(process, "?model=tiny") == 200, 60, 0.1), process.log_tail()
        yield process
    finally:
        process.stop()


def ready(llmd: LlmdProcess, query: str = "") -> int | None:
    """GET /ready's status (None: llmd does not answer yet)."""
    try:
        return httpx.get(llmd.base_url + "/ready" + query, timeout=5).status_code
    except httpx.TransportError:
        return None


def chat(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


def entry(llmd: LlmdProcess, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(e for e in llmd.admin_status()["engines"] if e["name"] == name)
    return found


def test_an_upstream_no_probe_reached_is_not_ready_and_answers_503(llmd: LlmdProcess) -> None:
    """From llmd's start on, an upstream no probe has reached is not ready: its model's
    requests get 503 engine_unavailable with Retry-After (never a failed /tokenize), /ready
    is 503, and its state is not `serving`."""
    far = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("far"), timeout=30)
    assert far.status_code == 503, far.text
    error = far.json()["error"]
    assert error["code"] == "engine_unavailable" and "dead breaker" in error["message"], error
    assert int(far.headers["retry-after"]) >= 1
    assert ready(llmd, "?model=far") == 503 and ready(llmd) == 503
    assert entry(llmd, "dead")["state"] != "serving"
    models = {m["name"]: m["available"] for m in llmd.admin_status()["models"]}
    assert models["far"] is False and models["tiny"] is True


def test_an_upstream_serves_once_its_probe_succeeded(llmd: LlmdProcess) -> None:
    """An upstream that answers its probe serves: state `serving`, /ready?model= 200, its
    model's requests answered."""
    assert wait_for(lambda: entry(llmd, "live")["state"] == "serving", 30, 0.1)
    assert ready(llmd, "?model=near") == 200
    near = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("near"), timeout=30)
    assert near.status_code == 200, near.text


def test_an_upstream_is_drained_and_resumed_by_name_and_never_restarted(
    llmd: LlmdProcess,
) -> None:
    """`POST /drain {"engine": "live"}` stops routing to the upstream (its model's requests get
    503 naming it drained, with Retry-After; status and the answer's `engines` say draining)
    until `/resume`; a restart of it is refused 409 with the reason, an unknown name 404, each
    as a JSON error."""
    assert wait_for(lambda: entry(llmd, "live")["state"] == "serving", 30, 0.1)
    with llmd.admin() as admin:
        drained = admin.post("/drain", json={"engine": "live"})
        assert drained.status_code == 200
        # The answer lists the upstreams beside the engines, as `llmd drain` prints it.
        assert drained.json()["engines"]["live"] == {"state": "serving", "draining": True}
        assert drained.json()["engines"]["dead"]["draining"] is False
        try:
            near = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("near"))
            assert near.status_code == 503 and "live drained" in near.json()["error"]["message"]
            assert int(near.headers["retry-after"]) >= 1
            assert entry(llmd, "live")["draining"] is True
            restart = admin.post("/restart", json={"engine": "live"})
            assert restart.status_code == 409, restart.text
            error = restart.json()["error"]
            assert error["code"] == "action_refused" and "live is an upstream" in error["message"]
            unknown = admin.post("/drain", json={"engine": "nope"})
            assert unknown.status_code == 404 and "upstreams: live, dead" in unknown.text
        finally:
            resumed = admin.post("/resume", json={"engine": "live"})
            assert resumed.status_code == 200
            assert resumed.json()["engines"]["live"]["draining"] is False
    assert entry(llmd, "live")["draining"] is False
    near = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("near"), timeout=30)
    assert near.status_code == 200, near.text
