"""Each request is accounted under its endpoint, in llmd's proxy before a fake (generate)
engine: refused ones (the relay's `refuse`) as well as those answered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.fake_engine import ProxyStack
from tests.support.waiting import wait_for
from tests.validation.conftest import STRING_TEMPLATE, make_tokenizer_dir


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyStack]:
    model = make_tokenizer_dir(tmp_path_factory.mktemp("model"), STRING_TEMPLATE)
    with ProxyStack.run(model, Path(tmp_path_factory.mktemp("run")), 64) as running:
        yield running


def counted(stack: ProxyStack, endpoint: str, status: str, outcome: str, code: str) -> float:
    labels = {"tenant": "anonymous", "class": "normal", "status": status, "model": "tiny",
              "endpoint": endpoint, "outcome": outcome, "code": code}  # fmt: skip
    registry = stack.ctx.observer.metrics.registry
    return registry.get_sample_value("llmd_requests_total", labels) or 0.0


def test_refused_and_answered_requests_carry_their_endpoint(stack: ProxyStack) -> None:
    """Embeddings of a generate engine's model are refused under `embeddings` (400
    unsupported_endpoint), a tokenize llmd answers itself is counted under `tokenize`; both
    are in the Status's `endpoints`."""
    embeddings = httpx.post(f"{stack.base_url}/v1/embeddings", json={"model": "tiny", "input": "x"})
    assert embeddings.status_code == 400, embeddings.text
    assert counted(stack, "embeddings", "400", "rejected", "unsupported_endpoint") == 1
    tokenize = httpx.post(f"{stack.base_url}/tokenize", json={"model": "tiny", "prompt": "hi"})
    assert tokenize.status_code == 200, tokenize.text
    assert wait_for(lambda: counted(stack, "tokenize", "200", "ok", "") == 1, 10)
    ended = {e.name: (e.rejected, e.answered) for e in stack.ctx.snapshot().endpoints}
    assert ended == {"embeddings": (1, 0), "tokenize": (0, 1)}
