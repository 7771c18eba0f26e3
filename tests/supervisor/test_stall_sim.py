"""The stall watchdog through a real `llmd serve` on the simulator's stall fault: streams end with
an in-band `engine_stalled` error and `[DONE]` within stall_timeout_s + 5 s of their last token,
a non-streamed request gets 503 with Retry-After, the engine's group is killed and restarted
(exit `stalled`), nothing of it is left, and the next request is served; a stream written in
another valid layout is relayed whole, with nothing appended."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import psutil
import pytest

from tests.support.clients import closed_after_test
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

STALL_TIMEOUT_S = 1.0
# A stream of 1,000 tokens at one step of 10 ms each (10 s) runs until the core stalls.
LONG = {"model": "tiny", "prompt": "Go", "max_tokens": 1000, "ignore_eos": True}
SHORT = {"model": "tiny", "prompt": "Go", "max_tokens": 4}


class TimedStream(threading.Thread):
    """A streamed completion of `max_tokens` read in a thread: its SSE lines and when the last
    token came."""

    def __init__(self, url: str, max_tokens: int = 1000) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.body = {**LONG, "max_tokens": max_tokens, "stream": True}
        self.lines: list[str] = []
        self.status = 0
        self.last_token_at = 0.0
        self.ended_at = 0.0
        self.first = threading.Event()

    def run(self) -> None:
        with httpx.stream("POST", self.url, json=self.body, timeout=60) as r:
            self.status = r.status_code
            for line in r.iter_lines():
                if line:
                    self.lines.append(line)
                    if '"text"' in line:
                        self.last_token_at = time.monotonic()
                    self.first.set()
        self.ended_at = time.monotonic()


@pytest.fixture
def stalling() -> Iterator[LlmdProcess]:
    """llmd on a slow simulator with a 1 s stall timeout. A request with the simulator's
    `stall` fault stalls its core once the test's streams run (a stall 8 s after each boot
    made the test wait out a window wide enough for a loaded machine to start them in)."""
    config = sim_config(
        ensure_tiny_model(),
        ("--step-base-ms", "10"),
        engine={"stall_timeout_s": STALL_TIMEOUT_S},
        supervisor={"backoff_initial_s": 0.1, "backoff_max_s": 0.5},
    )
    llmd = LlmdProcess.start(config)
    yield llmd
    llmd.stop()


def test_a_stalled_engine_ends_its_streams_and_restarts(stalling: LlmdProcess) -> None:
    """Streams running when the core stalls end with the in-band error and [DONE] within
    stall_timeout_s + 5 s of their last token; a non-streamed request gets 503
    engine_stalled with Retry-After; the engine restarts with exit reason `stalled`, its old
    process is gone, and the next request is served."""
    llmd = stalling
    llmd.wait_ready(timeout_s=30)
    old_pid = llmd.admin_status()["engine"]["pid"]
    streams = [TimedStream(llmd.base_url + "/v1/completions") for _ in range(3)]
    for stream in streams:
        stream.start()
    whole: dict[str, Any] = {}

    def post_whole() -> None:
        answer = httpx.post(llmd.base_url + "/v1/completions", json=LONG, timeout=60)
        whole.update(status=answer.status_code, headers=answer.headers, body=answer.json())

    poster = threading.Thread(target=post_whole, daemon=True)
    poster.start()
    for stream in streams:
        assert stream.first.wait(20)
    assert wait_for(lambda: llmd.admin_status()["engine"]["running"] == 4, 20)  # and whole's
    stall = httpx.post(
        llmd.base_url + "/v1/completions", json={**SHORT, "sim_fault": "stall"}, timeout=60
    )  # the core stalls as it arrives; it ends as the others do
    assert stall.status_code == 503 and stall.json()["error"]["code"] == "engine_stalled"
    for stream in streams:
        stream.join(40)
        assert not stream.is_alive()
        assert stream.status == 200
        assert stream.lines[-1] == "data: [DONE]", stream.lines[-3:]
        error = json.loads(stream.lines[-2].removeprefix("data: "))["error"]
        assert error["code"] == "engine_stalled", error
        assert stream.ended_at - stream.last_token_at <= STALL_TIMEOUT_S + 5.0
    poster.join(40)
    assert whole["status"] == 503 and whole["body"]["error"]["code"] == "engine_stalled"
    assert int(whole["headers"]["retry-after"]) >= 1
    assert wait_for(lambda: llmd.admin_status()["engine"]["state"] == "serving", 30)
    served = httpx.post(llmd.base_url + "/v1/completions", json=SHORT, timeout=30)
    assert served.status_code == 200, served.text
    engine = llmd.admin_status()["engine"]
    assert engine["last_exit_reason"] == "stalled"
    assert engine["exits_by_reason"].get("stalled", 0) >= 1
    assert engine["pid"] != old_pid and not psutil.pid_exists(old_pid)
    assert "engine_stalled" in llmd.log_tail(200)
    metrics = httpx.get(llmd.base_url + "/metrics").text
    assert 'llmd_engine_restarts_total{engine="main",reason="stalled"} 1.0' in metrics


@pytest.fixture
def relaid() -> Iterator[LlmdProcess]:
    """llmd on a simulator that writes its streams in another valid layout."""
    llmd = LlmdProcess.start(sim_config(ensure_tiny_model(), ("--fault-sse-layout",)))
    yield llmd
    llmd.stop()


def test_a_stream_in_another_layout_is_relayed_and_counted(relaid: LlmdProcess) -> None:
    """CRLF, comments, id: and event: fields, `data:` unspaced, data over two lines: the
    openai client reads it through llmd, llmd appends nothing, and counts it answered with
    the engine's own token count."""
    llmd = relaid
    llmd.wait_ready(timeout_s=30)
    client = closed_after_test(
        openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="unused", max_retries=0)
    )
    stream = client.chat.completions.create(
        model="tiny", max_tokens=7, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Hi"}],
    )  # fmt: skip
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
    body = {"model": "tiny", "prompt": "Hi", "max_tokens": 5, "stream": True}
    raw = httpx.post(llmd.base_url + "/v1/completions", json=body, timeout=30).content
    assert raw.endswith(b"data:[DONE]\r\n\r\n") and b"engine_error" not in raw

    def counted() -> bool:
        counts = llmd.admin_status()["counts"]
        return counts["requests"] >= 2 and counts["requests"] == counts["answered"]

    assert wait_for(counted, 10), llmd.admin_status()["counts"]


@pytest.fixture(scope="module")
def idling() -> Iterator[LlmdProcess]:
    """llmd on a slow simulator with a 1 s request idle timeout (and a long stall timeout),
    shared by the tests of requests that idle: neither restarts the engine."""
    config = sim_config(
        ensure_tiny_model(),
        ("--step-base-ms", "10"),
        engine={"stall_timeout_s": 30.0, "request_idle_timeout_s": 1.0},
    )
    llmd = LlmdProcess.start(config)
    yield llmd
    llmd.stop()


def test_a_request_idle_alone_ends_while_the_engine_serves(idling: LlmdProcess) -> None:
    """While the engine serves others, a request it never answers (the simulator's `hang`)
    ends with 503 engine_stalled and Retry-After after its idle timeout, streamed or not (a
    non-streamed one once its output budget had time; on /v1/messages Anthropic's
    overloaded_error), and the engine is not restarted."""
    llmd = idling
    llmd.wait_ready(timeout_s=30)
    # 500 tokens (5 s) outlast the three hung requests, sent together (about 1.5 s; one after
    # another they took 4 s beside 1,000 tokens).
    busy = TimedStream(llmd.base_url + "/v1/completions", max_tokens=500)
    busy.start()
    assert busy.first.wait(20)

    def hang(path: str, body: dict[str, Any]) -> tuple[httpx.Response, float]:
        """`body` with the hang fault posted to `path`: the answer and the seconds it took."""
        began = time.monotonic()
        answer = httpx.post(llmd.base_url + path, json={**body, "sim_fault": "hang"}, timeout=30)
        return answer, time.monotonic() - began

    message = {"model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        streamed, whole, on_messages = pool.map(
            hang,
            ("/v1/completions", "/v1/completions", "/v1/messages"),
            ({**SHORT, "stream": True}, SHORT, {**message, "stream": True}),
        )
    for hung, took in (streamed, whole):
        assert hung.status_code == 503 and hung.json()["error"]["code"] == "engine_stalled"
        assert "retry-after" in hung.headers and took < 8
    hung, _ = on_messages  # on a Messages path in Anthropic's shape
    assert hung.status_code == 503 and "retry-after" in hung.headers
    assert hung.json()["error"]["message"].startswith("no output from")  # engine_stalled
    assert hung.json() == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": hung.json()["error"]["message"]},
    }
    busy.join(40)
    assert busy.lines[-1] == "data: [DONE]" and "error" not in busy.lines[-2]
    engine = llmd.admin_status()["engine"]
    assert engine["restarts"] == 0 and engine["state"] == "serving"
    assert "request_stalled" in llmd.log_tail(100)


def test_a_responses_stream_idle_past_its_timeout_ends_with_the_error_event(
    idling: LlmdProcess,
) -> None:
    """A Responses stream the engine stops answering after its first events ends with the
    Responses `error` event, code engine_stalled, numbered after the last event sent (no
    chat-shaped error, no `[DONE]`), after its idle timeout."""
    llmd = idling
    llmd.wait_ready(timeout_s=30)
    body = {"model": "tiny", "input": "Go", "stream": True, "store": False, "sim_fault": "hang"}
    answer = httpx.post(llmd.base_url + "/v1/responses", json=body, timeout=30)
    assert answer.status_code == 200
    blocks = answer.text.strip().split("\n\n")
    assert blocks[0].startswith("event: response.created") and "[DONE]" not in answer.text
    head, _, data = blocks[-1].partition("\ndata: ")
    error = json.loads(data)
    assert head == "event: error" and error["type"] == "error"
    assert error["code"] == "engine_stalled" and error["sequence_number"] == len(blocks) - 1
