"""The Responses API through a real `llmd serve` on the simulator, with the openai client:
create (streamed and not), retrieve, delete, cancel, input_tokens, previous_response_id; the
store per tenant; bad input answered with OpenAI's 4xx, never a 500 or a hung stream; an
error after the first byte as the stream's error event."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from llmd.admission.tenants import hash_key
from llmd.endpoints.store import FILE_NAME
from tests.support.clients import closed_after_test
from tests.support.fake_engine import ProxyStack
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

ALICE, BOB = "key-alice", "key-bob"


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd on the simulator with two tenants and a state directory of its own."""
    workdir = short_tmpdir("llmd-resp-")
    tenants = workdir / "tenants.toml"
    tenants.write_text(
        f'[tenants.alice]\nkeys = ["{hash_key(ALICE)}"]\n'
        f'[tenants.bob]\nkeys = ["{hash_key(BOB)}"]\n'
    )
    config = sim_config(
        ensure_tiny_model(),
        server={"state_dir": str(workdir / "state")},
        admission={"tenants_file": str(tenants)},
    )
    with LlmdProcess.running(config, workdir, timeout_s=30) as process:
        yield process


def client(llmd: LlmdProcess, key: str = ALICE) -> openai.OpenAI:
    return closed_after_test(
        openai.OpenAI(base_url=llmd.base_url + "/v1", api_key=key, max_retries=0)
    )


def post(llmd: LlmdProcess, path: str, body: Any, key: str = ALICE) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(llmd.base_url + path, json=body, headers=headers, timeout=60)


def input_tokens(llmd: LlmdProcess, **body: Any) -> int:
    answer = post(llmd, "/v1/responses/input_tokens", {"model": "tiny", **body})
    assert answer.status_code == 200, answer.text
    assert answer.json()["object"] == "response.input_tokens"
    count: int = answer.json()["input_tokens"]
    return count


def test_create_then_retrieve(llmd: LlmdProcess) -> None:
    """A response is answered with the engine's usage, its prompt counted as input_tokens
    counts it, and retrieved as it was answered."""
    api = client(llmd)
    created = api.responses.create(model="tiny", input="Hello there", max_output_tokens=4)
    assert created.object == "response" and created.status in ("completed", "incomplete")
    assert created.usage is not None and created.usage.output_tokens <= 4
    assert created.usage.input_tokens == input_tokens(llmd, input="Hello there")
    counted = api.responses.input_tokens.count(model="tiny", input="Hello there")
    assert counted.input_tokens == created.usage.input_tokens
    assert api.responses.retrieve(created.id).model_dump() == created.model_dump()


def test_a_stream_is_relayed_event_by_event_and_stored_from_its_last_event(
    llmd: LlmdProcess,
) -> None:
    """A streamed response's typed events in vLLM's order, ending with response.completed
    and its usage; the response retrieved is that event's."""
    api = client(llmd)
    events = list(api.responses.create(model="tiny", input="Hi", max_output_tokens=3, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
    assert [event.sequence_number for event in events] == list(range(len(events)))
    last = events[-1].response
    deltas = kinds.count("response.output_text.delta")  # a step may carry several tokens
    assert last.usage is not None and 1 <= deltas <= last.usage.output_tokens <= 3
    assert api.responses.retrieve(last.id).model_dump() == last.model_dump()


def test_previous_response_id_continues_the_stored_conversation(llmd: LlmdProcess) -> None:
    """A next turn gets the stored input and output before its own (counted so, and
    answered so by the engine); it is retrieved naming the response it continued."""
    api = client(llmd)
    first = api.responses.create(
        model="tiny", input="My name is Ada.", instructions="Be brief.", max_output_tokens=3
    )
    second = api.responses.create(
        model="tiny", input="What is my name?", previous_response_id=first.id, max_output_tokens=3
    )
    expected = input_tokens(llmd, input="What is my name?", previous_response_id=first.id)
    assert second.usage is not None and second.usage.input_tokens == expected
    assert first.usage is not None and expected > first.usage.input_tokens
    assert second.previous_response_id is None  # the engine never saw one
    assert api.responses.retrieve(second.id).previous_response_id == first.id
    third = api.responses.create(
        model="tiny", input="And again?", previous_response_id=second.id, max_output_tokens=3
    )
    assert third.usage is not None and third.usage.input_tokens > expected


def test_another_tenants_response_is_not_found(llmd: LlmdProcess) -> None:
    """Bob cannot retrieve, delete, cancel or continue Alice's response: 404, OpenAI-shaped."""
    mine = client(llmd).responses.create(model="tiny", input="secret", max_output_tokens=2)
    bob = client(llmd, BOB)
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.cancel(mine.id)
    refused = post(
        llmd, "/v1/responses", {"model": "tiny", "input": "x", "previous_response_id": mine.id}, BOB
    )
    assert refused.status_code == 404
    assert refused.json()["error"]["param"] == "previous_response_id"
    assert client(llmd).responses.retrieve(mine.id).id == mine.id
    anonymous = httpx.get(f"{llmd.base_url}/v1/responses/{mine.id}", timeout=10)
    assert anonymous.status_code == 401


def test_delete_and_store_false(llmd: LlmdProcess) -> None:
    """A deleted response is gone (404 after), and one sent with store false is never kept."""
    api = client(llmd)
    kept = api.responses.create(model="tiny", input="x", max_output_tokens=2)
    answer = httpx.delete(
        f"{llmd.base_url}/v1/responses/{kept.id}", headers={"authorization": f"Bearer {ALICE}"}
    )
    assert answer.json() == {"id": kept.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(kept.id)
    with pytest.raises(openai.NotFoundError):
        api.responses.delete(kept.id)
    unkept = api.responses.create(model="tiny", input="x", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(unkept.id)


def test_a_finished_response_cannot_be_cancelled(llmd: LlmdProcess) -> None:
    """Cancel of a finished response: 400, as vLLM 0.32 answers (only one running can be)."""
    done = client(llmd).responses.create(model="tiny", input="x", max_output_tokens=2)
    with pytest.raises(openai.BadRequestError, match="Cannot cancel a synchronous response"):
        client(llmd).responses.cancel(done.id)


def test_a_response_just_answered_is_not_cancelled(llmd: LlmdProcess) -> None:
    """Cancel of a stored response whose client has its whole answer (`response.completed`)
    but has not yet closed the stream, so its relay has not ended: 400 as for any finished
    response, never a 200 `cancelled` for a response the store keeps as finished."""
    headers = {"authorization": f"Bearer {ALICE}"}
    body = {"model": "tiny", "input": "x", "max_output_tokens": 2, "stream": True}
    with httpx.Client(base_url=llmd.base_url, headers=headers, timeout=30) as http:
        with http.stream("POST", "/v1/responses", json=body) as stream:
            for line in stream.iter_lines():  # up to its last event, the stream left open
                event = json.loads(line[5:]) if line.startswith("data:") else {}
                if event.get("type") == "response.completed":
                    break
            response_id = event["response"]["id"]
            cancel = http.post(f"/v1/responses/{response_id}/cancel")
        assert cancel.status_code == 400, cancel.text
        kept = http.get(f"/v1/responses/{response_id}").json()
        assert kept["status"] == event["response"]["status"] != "cancelled"


def test_a_running_response_is_cancelled_in_band(llmd: LlmdProcess) -> None:
    """Cancel of a response still streaming ends its stream with the error event `cancelled`
    (the stream does not hang)."""
    body = {
        "model": "tiny",
        "input": "x",
        "stream": True,
        "sim_fault": "hang",
        "request_id": "resp_hang1",
    }
    headers = {"authorization": f"Bearer {ALICE}"}
    with httpx.stream(
        "POST", llmd.base_url + "/v1/responses", json=body, headers=headers, timeout=60
    ) as stream:
        lines = stream.iter_lines()
        assert next(lines) == "event: response.created"
        cancelled = client(llmd).responses.cancel("resp_hang1")
        assert cancelled.status == "cancelled"
        rest = "\n".join(lines)
    events = [json.loads(line[6:]) for line in rest.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "error" and events[-1]["code"] == "cancelled"
    assert events[-1]["sequence_number"] == 2


def test_an_engine_failure_mid_stream_ends_with_the_error_event(llmd: LlmdProcess) -> None:
    """The engine dying after the first byte: the stream ends with the Responses `error`
    event (code engine_error), never silently."""
    body = {
        "model": "tiny",
        "input": "x",
        "stream": True,
        "max_output_tokens": 20,
        "sim_fault": "die-after:3",
    }
    answer = post(llmd, "/v1/responses", body)
    assert answer.status_code == 200
    blocks = answer.text.strip().split("\n\n")
    assert blocks[0].startswith("event: response.created")
    assert blocks[-1].startswith("event: error\ndata: ")
    error = json.loads(blocks[-1].split("data: ", 1)[1])
    assert error["type"] == "error" and error["code"] == "engine_error"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": 5}, "input"),
        ({"input": [{"type": "bogus"}]}, "input"),
        ({"input": [{"role": "user", "content": 3}]}, "input"),
        ({"input": "x", "max_output_tokens": "8"}, "max_output_tokens"),
        ({"input": "x", "stream": "yes"}, "stream"),
        ({"input": "x", "store": "no"}, "store"),
        ({"input": "x", "previous_response_id": 5}, "previous_response_id"),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "tools": [{"type": "function"}]}, "tools"),
    ],
)
def test_bad_input_is_an_openai_400(llmd: LlmdProcess, body: dict[str, Any], param: str) -> None:
    """Wrong types and unknown item kinds: 400 invalid_request naming the field, streamed or
    not (never a 500, never a stream that hangs)."""
    for stream in (False, True):
        answer = post(llmd, "/v1/responses", {"model": "tiny", "stream": stream, **body})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param


def test_a_10_mb_body_is_refused_with_413(llmd: LlmdProcess) -> None:
    """A body over server.max_body_bytes: 413 body_too_large before it is read."""
    answer = post(llmd, "/v1/responses", {"model": "tiny", "input": "x" * (10 * 1024 * 1024)})
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "body_too_large"


def test_the_window_is_checked_and_the_output_budget_clamped(llmd: LlmdProcess) -> None:
    """An input over the window: 400 context_length_exceeded; max_output_tokens past it is
    lowered to what fits, said in x-llmd-max-tokens-clamped."""
    over = post(llmd, "/v1/responses", {"model": "tiny", "input": "hello " * 2000})
    assert over.status_code == 400 and over.json()["error"]["code"] == "context_length_exceeded"
    big = post(
        llmd,
        "/v1/responses",
        {"model": "tiny", "input": "hi", "max_output_tokens": 10**6, "sim_fault": "empty"},
    )
    assert big.status_code == 200, big.text
    clamped = big.headers["x-llmd-max-tokens-clamped"]
    assert clamped.startswith("1000000->") and int(clamped.split("->")[1]) < 1024
    assert big.json()["max_output_tokens"] == int(clamped.split("->")[1])


def test_input_tokens_counts_through_the_engine_what_llmd_does_not_render(
    llmd: LlmdProcess,
) -> None:
    """With tools, input_tokens is the engine's own count of what it renders, and a response
    with the same input says the same usage."""
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]
    items = [
        {"role": "user", "content": "call f"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ]
    counted = input_tokens(llmd, input=items, tools=tools)
    answered = client(llmd).responses.create(
        model="tiny", input=items, tools=tools, max_output_tokens=2
    )
    assert answered.usage is not None and answered.usage.input_tokens == counted


def test_a_conversation_outlives_llmd_and_its_engine(tmp_path: Path) -> None:
    """Stored in the state directory: after llmd (and with it the engine) stops and starts
    again, a response is retrieved and continued; past max_bytes (a smaller bound, taken on a
    reload) the oldest is forgotten; past ttl_s they all are."""
    workdir = short_tmpdir("llmd-resp-restart-")
    state = workdir / "state"
    config = sim_config(ensure_tiny_model(), server={"state_dir": str(state)})
    with LlmdProcess.running(config, workdir, timeout_s=30) as first:
        turn = client(first).responses.create(
            model="tiny", input="Remember 7.", max_output_tokens=2
        )
    assert (state / FILE_NAME).exists()
    with LlmdProcess.running(config, short_tmpdir("llmd-resp-again-"), timeout_s=30) as second:
        api = client(second)
        assert api.responses.retrieve(turn.id).model_dump() == turn.model_dump()
        nxt = api.responses.create(
            model="tiny", input="Which number?", previous_response_id=turn.id, max_output_tokens=2
        )
        assert nxt.usage is not None and turn.usage is not None
        assert nxt.usage.input_tokens > turn.usage.input_tokens
        ids = [
            api.responses.create(model="tiny", input="x", max_output_tokens=1).id for _ in range(3)
        ]
        with sqlite3.connect(state / FILE_NAME) as db:
            sizes = [
                db.execute("SELECT bytes FROM responses WHERE id = ?", (i,)).fetchone()[0]
                for i in ids
            ]
        row = max(sizes)  # room for two rows of this size, not three, from the reload on
        reloaded = sim_config(
            ensure_tiny_model(),
            server={"state_dir": str(state)},
            responses={"max_bytes": 5 * row // 2, "ttl_s": 5.0},
        )
        (second.log_path.parent / "llmd.toml").write_text(reloaded)
        with second.admin() as admin:
            assert admin.post("/reload").status_code == 200
        latest = [
            api.responses.create(model="tiny", input="x", max_output_tokens=1).id for _ in range(3)
        ]
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve(latest[0])
        assert api.responses.retrieve(latest[2]).id == latest[2]

        def gone() -> bool:
            try:
                api.responses.retrieve(latest[2])
            except openai.NotFoundError:
                return True
            return False

        assert wait_for(gone, timeout_s=30, every_s=0.2)


def test_the_engine_is_sent_store_false_and_the_expanded_input(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """What the engine receives: `store: false` whatever the client asked, llmd's response id
    in `request_id`, and for a next turn no `previous_response_id` but the stored input and
    output before the turn's own (the engine keeps nothing)."""
    with ProxyStack.run(tiny_model_dir, tmp_path, 1024) as stack:
        url = stack.base_url + "/v1/responses"
        opening = {"model": "tiny", "input": "one", "store": True, "instructions": "Be brief."}
        first = httpx.post(url, json=opening, timeout=30)
        assert first.status_code == 200, first.text
        path, sent = stack.engine.received[-1]
        assert path == "/v1/responses" and sent["store"] is False
        assert sent["request_id"].startswith("resp_")
        turn = {"model": "tiny", "input": [{"role": "user", "content": "two"}]}
        nxt = httpx.post(url, json={**turn, "previous_response_id": sent["request_id"]}, timeout=30)
        assert nxt.status_code == 200, nxt.text
        _, again = stack.engine.received[-1]
        assert "previous_response_id" not in again and again["store"] is False
        assert "instructions" not in again  # each request's own apply (OpenAI)
        assert again["input"] == [{"role": "user", "content": "one"}, *turn["input"]]


def test_a_stream_the_engine_ends_early_ends_with_the_error_event(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """An engine stream that ends without response.completed (here chat's events and [DONE])
    reaches the client followed by the Responses error event, engine_error."""
    with ProxyStack.run(tiny_model_dir, tmp_path, 1024) as stack:
        body = {"model": "tiny", "input": "one", "stream": True}
        answer = httpx.post(stack.base_url + "/v1/responses", json=body, timeout=30)
    assert answer.status_code == 200
    last = answer.text.strip().split("\n\n")[-1]
    assert last.startswith("event: error\ndata: ")
    assert json.loads(last.split("data: ", 1)[1])["code"] == "engine_error"


def test_input_items_are_listed_in_openai_s_shape_per_tenant(llmd: LlmdProcess) -> None:
    """`responses.input_items.list`: the input a stored response answered (the turn it
    continued included), newest first by default, paged by `limit` and `after`; another
    tenant's is not found."""
    api = client(llmd)
    first = api.responses.create(model="tiny", input="My name is Ada.", max_output_tokens=2)
    second = api.responses.create(
        model="tiny", input="What is my name?", previous_response_id=first.id, max_output_tokens=2
    )

    def text(item: Any) -> str:
        return str(item.content[0].text)

    oldest = api.responses.input_items.list(second.id, order="asc")
    assert text(oldest.data[0]) == "My name is Ada." and text(oldest.data[-1]) == "What is my name?"
    newest = api.responses.input_items.list(second.id)
    assert [i.id for i in newest.data] == [i.id for i in reversed(oldest.data)]
    page = api.responses.input_items.list(second.id, order="asc", limit=1)
    assert page.has_more and page.first_id == page.last_id == oldest.data[0].id
    rest = api.responses.input_items.list(second.id, order="asc", after=page.data[0].id)
    assert [i.id for i in rest.data] == [i.id for i in oldest.data[1:]] and not rest.has_more
    with pytest.raises(openai.NotFoundError):
        client(llmd, BOB).responses.input_items.list(second.id)
