"""The end of a relayed request: a client that closes right after `data: [DONE]` has not
cancelled anything, and a request's body leaves llmd's body budget once sent to the engine.
Against a fake engine that keeps its stream open after `[DONE]`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.support.clients import closed_after_test
from tests.support.fake_engine import FakeEngine, ProxyStack
from tests.support.lazy_import import lazy_module
from tests.support.waiting import wait_for
from tests.validation.conftest import STRING_TEMPLATE, make_tokenizer_dir

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyStack]:
    """The proxy before an engine that closes its streams 3 s after their `[DONE]`."""
    model = make_tokenizer_dir(tmp_path_factory.mktemp("model"), STRING_TEMPLATE)
    runtime = Path(tmp_path_factory.mktemp("run"))
    with ProxyStack.run(model, runtime, 4096, engine=FakeEngine(linger_s=3.0)) as stack:
        yield stack


def test_a_client_closing_after_done_is_not_a_cancellation(running: ProxyStack) -> None:
    """The official openai client closes its stream as soon as it reads `[DONE]`, before the
    engine closes its side: the request is accounted as a success, not a cancellation."""
    tallies = running.ctx.observer.tallies
    before = tallies.requests, sum(tallies.cancellations.values()), sum(tallies.errors.values())
    client = closed_after_test(
        openai.OpenAI(base_url=running.base_url + "/v1", api_key="unused", max_retries=0)
    )
    with client.chat.completions.create(
        model="tiny",
        messages=USER,  # type: ignore[arg-type]
        max_tokens=5,
        stream=True,
    ) as stream:
        chunks = list(stream)
    assert len(chunks) == 1  # the fake engine's one event, then [DONE]
    assert wait_for(lambda: tallies.requests == before[0] + 1, timeout_s=10)
    assert (sum(tallies.cancellations.values()), sum(tallies.errors.values())) == before[1:]
    assert running.ctx.observer.windows.e2e.percentiles(60).count >= 1


def test_a_body_leaves_the_budget_once_sent_to_the_engine(running: ProxyStack) -> None:
    """While the engine still streams a request (held before its last byte), its body no
    longer counts in the body budget; nothing is held once it has ended."""
    budget = running.ctx.admission.bodies
    body = {"model": "tiny", "messages": USER, "max_tokens": 5, "stream": True,
            "blob": "x" * 100_000, "hold_tail": True}  # fmt: skip
    with httpx.stream("POST", running.base_url + "/v1/chat/completions", json=body) as answer:
        chunks = answer.iter_raw()
        received = next(chunks)  # the engine answers: it has the whole body
        # llmd lets the body go a moment after the engine has read it: wait for that, the
        # stream still open (it was asserted at once, and lost that race on a loaded machine).
        assert wait_for(lambda: budget.held == 0, timeout_s=10), budget.held
        running.release_tail()
        received += b"".join(chunks)
    assert received.endswith(b"data: [DONE]\n\n")
    assert budget.held == 0
