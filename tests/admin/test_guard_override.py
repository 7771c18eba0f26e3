"""`llmd guard off|on|level N` against a live daemon on the simulator: each pinned level acts on
real requests (cap said in the header, 503 overloaded with Retry-After, interactive untouched),
`llmd status` and /metrics show it, a reload ends the override."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.support.cli import llmd_verb
from tests.support.clients import closed_after_test
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd on the simulator with a guard cap of 8 output tokens."""
    config = sim_config(ensure_tiny_model(), admission={"guard": {"max_tokens_cap": 8}})
    with LlmdProcess.running(config, short_tmpdir("llmd-guard-"), timeout_s=30) as process:
        yield process


@pytest.fixture
def client(llmd: LlmdProcess) -> Callable[[LlmdProcess, str], openai.OpenAI]:
    """Makes an openai client of `llmd` sending `x-llmd-priority`; each closed after the test."""

    def make(llmd: LlmdProcess, priority: str) -> openai.OpenAI:
        return closed_after_test(
            openai.OpenAI(
                base_url=llmd.base_url + "/v1",
                api_key="none",
                max_retries=0,
                default_headers={"x-llmd-priority": priority},
            )
        )

    return make


def test_pinned_levels_cap_and_shed_and_interactive_keeps_its_rights(
    llmd: LlmdProcess, client: Callable[[LlmdProcess, str], openai.OpenAI]
) -> None:
    """level 2: a normal request's max_tokens is capped (x-llmd-max-tokens-capped 40->8, 8
    tokens come back); level 4: new batch and normal get 503 overloaded with Retry-After while
    an interactive one is served uncapped; `on` returns to automatic at level 0."""
    pinned = llmd_verb(llmd, "guard", "level", "2")
    assert pinned.returncode == 0 and "level 2 cap_max_tokens (pinned)" in pinned.stdout
    raw = client(llmd, "normal").chat.completions.with_raw_response.create(
        model="tiny", messages=MESSAGES, max_tokens=40, extra_body={"ignore_eos": True}
    )
    assert raw.headers["x-llmd-max-tokens-capped"] == "40->8"
    assert raw.parse().usage is not None and raw.parse().usage.completion_tokens == 8

    assert llmd_verb(llmd, "guard", "level", "4").returncode == 0
    for priority in ("batch", "normal"):
        with pytest.raises(openai.InternalServerError) as caught:
            client(llmd, priority).chat.completions.create(
                model="tiny", messages=MESSAGES, max_tokens=4
            )
        assert caught.value.status_code == 503
        assert caught.value.response.json()["error"]["code"] == "overloaded"
        assert int(caught.value.response.headers["retry-after"]) >= 1
    raw = client(llmd, "interactive").chat.completions.with_raw_response.create(
        model="tiny", messages=MESSAGES, max_tokens=20, extra_body={"ignore_eos": True}
    )
    assert "x-llmd-max-tokens-capped" not in raw.headers
    assert raw.parse().usage is not None and raw.parse().usage.completion_tokens == 20
    streamed = client(llmd, "interactive").chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=2, stream=True
    )
    assert len(list(streamed)) >= 2  # a streamed answer: its TTFT counts for the guard

    status = llmd_verb(llmd, "status")
    assert "slo guard  level 4 shed_normal (pinned): pinned by the operator" in status.stdout
    assert "interactive " in status.stdout and "/1500 ms" in status.stdout
    metrics = httpx.get(llmd.base_url + "/metrics", timeout=10).text
    assert "llmd_slo_guard_level 4.0" in metrics
    assert 'llmd_class_ttft_p95_seconds{class="interactive"}' in metrics

    back = llmd_verb(llmd, "guard", "on")
    assert back.returncode == 0 and "level 0 normal (auto" in back.stdout
    client(llmd, "batch").chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4)


def test_a_reload_ends_the_override_and_bad_modes_are_refused(llmd: LlmdProcess) -> None:
    """`llmd guard off` holds until `llmd reload`; `level` without a number, or 5, is refused
    (exit 64, EX_USAGE); the admin API answers a bad mode 400 naming the modes."""
    assert llmd_verb(llmd, "guard", "off").returncode == 0
    assert llmd.admin_status()["guard"]["mode"] == "off"
    assert llmd_verb(llmd, "reload").returncode == 0
    guard = llmd.admin_status()["guard"]
    assert guard["mode"] == "auto" and "reset by a reload" in guard["reason"]
    assert llmd_verb(llmd, "guard", "level").returncode == 64
    assert llmd_verb(llmd, "guard", "level", "5").returncode == 64
    transport = httpx.HTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
    with httpx.Client(transport=transport, timeout=30) as admin:
        answer = admin.post("http://llmd/guard", json={"mode": "loud"})
    assert answer.status_code == 400 and "off, on or 'level N'" in answer.json()["error"]["message"]
