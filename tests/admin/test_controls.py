"""Admin controls through the CLI verbs against a live daemon on the simulator: drain with
streams in flight, resume, cancel one request, restart the engine, reload the config."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.support.accounting import log_lines
from tests.support.cli import llmd_verb
from tests.support.clients import closed_after_test
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.streams import SLOW, STREAM, Stream
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    process = LlmdProcess.start(sim_config(ensure_tiny_model(), SLOW))
    process.wait_ready(timeout_s=30)
    yield process
    process.stop()


def test_drain_lets_streams_finish_refuses_new_and_resume_restores(llmd: LlmdProcess) -> None:
    """`llmd drain`: in-flight streams complete, new requests get 503 draining with
    Retry-After; `llmd resume` admits again."""
    streams = [Stream(llmd) for _ in range(5)]
    for stream in streams:
        stream.start()
    for stream in streams:
        assert stream.first.wait(10)
    drained = llmd_verb(llmd, "drain", "--wait", "--timeout", "60")
    refused = httpx.post(llmd.base_url + "/v1/completions", json={**STREAM, "stream": False})
    for stream in streams:
        stream.join(30)
    assert drained.returncode == 0 and "drained" in drained.stdout, drained.stderr
    assert all(s.last_event()["choices"][0]["finish_reason"] == "length" for s in streams)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
    assert int(refused.headers["retry-after"]) >= 1
    assert httpx.get(llmd.base_url + "/ready").status_code == 503
    assert llmd_verb(llmd, "resume").returncode == 0
    assert httpx.get(llmd.base_url + "/ready").status_code == 200


def test_one_engine_drained_by_name_shows_drained_everywhere_until_resumed(
    llmd: LlmdProcess,
) -> None:
    """`llmd drain --engine main` on llmd's only engine: requests get 503 naming it drained,
    and `llmd status` (text and JSON), /ready and /metrics all say it is drained; `llmd
    resume --engine main` shows it back everywhere."""
    drained = llmd_verb(llmd, "drain", "--engine", "main")
    assert drained.returncode == 0, drained.stderr
    try:
        refused = httpx.post(llmd.base_url + "/v1/completions", json={**STREAM, "stream": False})
        assert refused.status_code == 503 and "main drained" in refused.json()["error"]["message"]
        assert int(refused.headers["retry-after"]) >= 1
        text = llmd_verb(llmd, "status").stdout
        assert "serving, drained" in text and "admitting nothing (drained: main)" in text, text
        status = json.loads(llmd_verb(llmd, "status", "--json").stdout)
        assert status["engine"]["draining"] is True and status["engines"][0]["draining"] is True
        assert httpx.get(llmd.base_url + "/ready").status_code == 503
        metrics = httpx.get(llmd.base_url + "/metrics").text
        assert 'llmd_engine_draining{engine="main"} 1.0' in metrics
    finally:
        resumed = llmd_verb(llmd, "resume", "--engine", "main")
    assert resumed.returncode == 0 and "engine serving" in resumed.stdout, resumed.stdout
    text = llmd_verb(llmd, "status").stdout
    assert "drained" not in text and "draining no" in text, text
    assert llmd.admin_status()["engine"]["draining"] is False
    assert httpx.get(llmd.base_url + "/ready").status_code == 200
    assert 'llmd_engine_draining{engine="main"} 0.0' in httpx.get(llmd.base_url + "/metrics").text


def test_drain_deadline_ends_what_remains_in_band(llmd: LlmdProcess) -> None:
    """`llmd drain --timeout 0.5`: a stream still running then ends with an in-band error."""
    stream = Stream(llmd)
    stream.start()
    assert stream.first.wait(10)
    assert llmd_verb(llmd, "drain", "--timeout", "0.5").returncode == 0
    stream.join(30)
    assert stream.last_event()["error"]["code"] == "draining"
    assert llmd_verb(llmd, "resume").returncode == 0


def test_cancel_one_request_by_id(llmd: LlmdProcess) -> None:
    """POST /requests/{id}/cancel ends that stream in-band with code 'cancelled' only."""
    # The bystander, 150 tokens (3 s at SLOW), still streams when the victim is cancelled
    # (right after both started); the test waits for its end (300 tokens waited 6 s).
    victim = Stream(llmd, "victim-1")
    bystander = Stream(llmd, "bystander-1", {**STREAM, "max_tokens": 150})
    victim.start()
    bystander.start()
    assert victim.first.wait(10) and bystander.first.wait(10)
    transport = httpx.HTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
    with httpx.Client(transport=transport) as admin:
        assert admin.post("http://llmd/requests/victim-1/cancel").status_code == 200
        assert bystander.is_alive(), "the bystander ended before the victim was cancelled"
        missing = admin.post("http://llmd/requests/nobody/cancel")
    victim.join(30)
    bystander.join(30)
    assert victim.last_event()["error"]["code"] == "cancelled"
    assert bystander.last_event()["choices"][0]["finish_reason"] == "length"
    assert missing.status_code == 404


def test_a_cancelled_request_is_not_resent_by_the_openai_client(llmd: LlmdProcess) -> None:
    """A non-streamed completion cancelled by the operator reaches the official openai client
    (which retries any 5xx twice by default) as one 503 `cancelled` with `x-should-retry:
    false`: the client does not send it again, so llmd sees it once."""
    request_id = "cancel-once-1"
    client = closed_after_test(
        openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="unused", max_retries=2)
    )
    outcome: list[BaseException | object] = []

    def call() -> None:
        try:
            outcome.append(
                client.completions.create(
                    model="tiny",
                    prompt="Hello",
                    max_tokens=5,
                    extra_headers={"x-request-id": request_id},
                    extra_body={"sim_fault": "delay:20"},
                )
            )
        except openai.APIStatusError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    live = lambda: any(s["id"] == request_id for s in llmd.admin_status()["sequences"])  # noqa: E731
    assert wait_for(live, timeout_s=10)
    transport = httpx.HTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
    with httpx.Client(transport=transport) as admin:
        assert admin.post(f"http://llmd/requests/{request_id}/cancel").status_code == 200
    thread.join(30)
    (error,) = outcome
    assert isinstance(error, openai.InternalServerError), error
    assert error.response.headers["x-should-retry"] == "false"
    assert error.body is not None and error.body["code"] == "cancelled"  # type: ignore[index]

    def finished() -> list[dict[str, Any]]:
        return [r for r in log_lines(llmd, request_id) if r["event"] == "request_finished"]

    assert wait_for(lambda: bool(finished()), timeout_s=15)  # logged just after the answer
    assert len(finished()) == 1 and finished()[0]["outcome"] == "aborted"


def test_restart_drains_then_boots_a_new_engine(llmd: LlmdProcess) -> None:
    """`llmd restart`: the engine gets a new pid, no failure is counted, service resumes, and
    the exit it asked for is logged at info with its reason (no error)."""
    before = llmd.admin_status()["engine"]
    result = llmd_verb(llmd, "restart")
    assert result.returncode == 0 and "engine restarted" in result.stdout, result.stderr
    llmd.wait_ready(timeout_s=30)
    after = llmd.admin_status()["engine"]
    assert after["pid"] != before["pid"] and after["restarts"] == before["restarts"] + 1
    assert after["last_exit_reason"] == "restart_requested"
    exits = [r for r in llmd.log_records() if r["event"] == "engine_exited"]
    assert exits and exits[-1]["reason"] == "restart_requested", exits
    assert exits[-1]["level"] == "info" and exits[-1]["detail"] == "restarted by the operator"
    events = [e for e in llmd.admin_status()["events"] if e["event"] == "engine_exited"]
    assert events and events[-1]["level"] == "info"  # still on llmd-top's events panel
    short = {**STREAM, "stream": False, "max_tokens": 5}
    ok = httpx.post(llmd.base_url + "/v1/completions", json=short, timeout=30)
    assert ok.status_code == 200


def test_reload_reports_what_needs_a_restart(llmd: LlmdProcess) -> None:
    """`llmd reload` after an engine change: reported as needing a restart, not applied."""
    config = llmd.runtime_dir.parent / "llmd.toml"
    original = config.read_text()
    config.write_text(original.replace('served_model_name = "tiny"', 'served_model_name = "tiny2"'))
    try:
        result = llmd_verb(llmd, "reload")
    finally:
        config.write_text(original)
    assert result.returncode == 0 and "engine.served_model_name" in result.stdout
    assert llmd.admin_status()["engine"]["model"] == "tiny"


def test_reload_of_a_broken_config_is_refused(llmd: LlmdProcess) -> None:
    """A config that no longer validates is refused with its message; the old one stays."""
    config = llmd.runtime_dir.parent / "llmd.toml"
    original = config.read_text()
    config.write_text(original + "\n[nonsense]\nkey = 1\n")
    try:
        result = llmd_verb(llmd, "reload")
    finally:
        config.write_text(original)
    assert result.returncode == 1 and "unknown key nonsense" in result.stderr


def test_reload_of_a_config_not_utf8_is_refused_and_llmd_serves_on(llmd: LlmdProcess) -> None:
    """A config with a byte that is not UTF-8: `llmd reload` prints the reason (file and line)
    and exits 1, no traceback; SIGHUP logs the refusal; llmd serves on."""
    config = llmd.runtime_dir.parent / "llmd.toml"
    original = config.read_bytes()
    config.write_bytes(original + b"# caf\xe9\n")
    try:
        result = llmd_verb(llmd, "reload")
        llmd.process.send_signal(signal.SIGHUP)
        assert wait_for(lambda: llmd.log_path.read_text().count("not UTF-8") >= 2, timeout_s=30)
    finally:
        config.write_bytes(original)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = original.count(b"\n") + 1
    assert f"llmd: {config}:{line}: cannot read config: not UTF-8" in result.stderr
    assert llmd.process.poll() is None and llmd.admin_status()["engine"]["state"] == "serving"


def test_admin_bodies_have_the_public_limit_and_error_shape(llmd: LlmdProcess) -> None:
    """The admin API reads bodies with server.max_body_bytes (413 body_too_large past it) and
    answers bad JSON and unknown routes with OpenAI-shaped errors, as the public API does."""
    limit = 4 * 1024 * 1024  # server.max_body_bytes, its default
    transport = httpx.HTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
    with httpx.Client(transport=transport, timeout=30) as admin:
        too_large = admin.post("http://llmd/drain", content=b" " * (limit + 1))
        not_json = admin.post("http://llmd/drain", content=b"{nope")
        no_route = admin.post("http://llmd/nowhere")
        too_long = admin.post("http://llmd/drain", json={"deadline_s": 1e308})
    assert too_large.status_code == 413
    assert too_large.json()["error"]["code"] == "body_too_large"
    assert not_json.status_code == 400
    assert not_json.json()["error"]["code"] == "invalid_request"
    assert no_route.status_code == 404 and no_route.json()["error"]["type"]
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "deadline_s"
    assert llmd.admin_status()["draining"] is False
