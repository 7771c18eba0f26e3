"""The device hold through a real `llmd serve` over a chat simulator and two pooling simulators:
a batch embeddings request for an engine on the chat's device waits in llmd while an interactive
chat waits for its first token, and goes at that first byte, or once it has waited the bound;
one for an engine on no shared device is never held; while the chat runs, batch runs one at a
time on its device (the seat limit). Seen in `llmd status` and /metrics."""

from __future__ import annotations

import concurrent.futures
import tomllib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import tomli_w

from llmd.admin.status_text import format_status
from tests.support.configs import multi_sim_config
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.waiting import wait_for

CHAT, EMBED, APART = "tiny", "tiny-embed", "tiny-apart"
POOLING = ["--runner", "pooling", "--convert", "embed"]
# One engine step takes 3 s: the chat's first token comes 3 s after it starts.
SLOW_CHAT = ["--step-base-ms", "3000"]
# Each test starts its own llmd (a fixture of its own: the tests spread over the workers, no
# more daemons than one module-scoped fixture each). The chat's warm-up is off: its four
# tokens took 12 s of each start at 3 s a step, and no test here is about it.


def config(
    bound_ms: float, embed_args: tuple[str, ...] = (), pause: bool = False, apart: bool = True
) -> str:
    """Engines `chat` (no warm-up) and `embed` (with `embed_args`) on device `dev0`, and
    `apart` on none where a test asks it (one simulator less to start where none does); the
    device hold's bound `bound_ms` (the interactive budget 10 s, the ratio bound_ms / 10 s);
    `pause`: admission.device_pause."""
    engines = {
        "chat": (CHAT, SLOW_CHAT),
        "embed": (EMBED, [*POOLING, *embed_args]),
    }
    if apart:
        engines["apart"] = (APART, POOLING)
    admission = {
        "device_hold_ratio": bound_ms / 10_000,
        "interactive": {"ttft_p95_budget_ms": 10_000.0},
        "device_pause": pause,
    }
    raw = tomllib.loads(multi_sim_config(ensure_tiny_model(), engines, admission=admission))
    raw["engines"]["chat"]["device"] = raw["engines"]["embed"]["device"] = "dev0"
    raw["engines"]["chat"]["warmup"] = False
    return tomli_w.dumps(raw)


@pytest.fixture
def long_bound() -> Iterator[LlmdProcess]:
    with LlmdProcess.running(config(bound_ms=8000, apart=False), "llmd-hold-") as process:
        yield process


@pytest.fixture
def short_bound() -> Iterator[LlmdProcess]:
    with LlmdProcess.running(config(bound_ms=200), "llmd-hold-") as process:
        yield process


@pytest.fixture
def slow_embed() -> Iterator[LlmdProcess]:
    slow = config(200, ("--step-base-ms", "1000"), apart=False)
    with LlmdProcess.running(slow, "llmd-hold-") as process:
        yield process


@pytest.fixture
def pausing() -> Iterator[LlmdProcess]:
    with LlmdProcess.running(config(bound_ms=4000, pause=True), "llmd-hold-") as process:
        yield process


def chat(llmd: LlmdProcess) -> int:
    """A streamed interactive chat of two tokens, read to its end; its status."""
    body = {"model": CHAT, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    headers = {"x-llmd-priority": "interactive"}
    url = llmd.base_url + "/v1/chat/completions"
    with httpx.stream("POST", url, json={**body, "stream": True}, headers=headers, timeout=60) as r:
        r.read()
        return r.status_code


def embed(llmd: LlmdProcess, model: str) -> httpx.Response:
    """A batch embeddings request of two documents."""
    body = {"model": model, "input": ["a ledger", "a poem"]}
    headers = {"x-llmd-priority": "batch"}
    return httpx.post(llmd.base_url + "/v1/embeddings", json=body, headers=headers, timeout=60)


def hold_of(llmd: LlmdProcess) -> dict[str, Any]:
    hold: dict[str, Any] = llmd.admin_status()["device_hold"]
    return hold


def test_batch_waits_for_the_first_token_of_an_interactive_request_on_its_device(
    long_bound: LlmdProcess,
) -> None:
    """While the chat waits for its first token, the embeddings request for `embed` (same
    device) waits in llmd's batch queue, `llmd status` says why and /metrics counts it; it is
    answered once the chat's first byte came, well before its 8 s bound."""
    llmd = long_bound
    hold = hold_of(llmd)
    assert hold["groups"] == [["chat", "embed"]] and hold["bound_ms"] == 8000
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        chatted = pool.submit(chat, llmd)
        assert wait_for(lambda: hold_of(llmd)["held"] == ["embed"], timeout_s=10)
        embedded = pool.submit(embed, llmd, EMBED)
        assert wait_for(lambda: hold_of(llmd)["holds"] == 1, timeout_s=10)
        assert llmd.queue_depth("batch") == 1 and not chatted.done()
        text = format_status(llmd.admin_status())  # what `llmd status` prints
        why = "holding batch off embed: an interactive request waits for its first token on chat"
        assert why in text and "groups chat+embed; bound 8000 ms; 1 held" in text
        assert chatted.result() == 200
        answer = embedded.result()
    assert answer.status_code == 200, answer.text
    assert float(answer.headers["x-llmd-queue-ms"]) < 8000  # the first byte let it go
    metrics = httpx.get(llmd.base_url + "/metrics").text
    assert "llmd_device_holds_total 1.0" in metrics
    assert wait_for(lambda: hold_of(llmd)["held"] == [], timeout_s=10)


def test_the_bound_lets_batch_go_and_other_devices_are_never_held(
    short_bound: LlmdProcess,
) -> None:
    """With a 200 ms bound, the request for `embed` waits at least the bound and is answered
    while the chat still waits for its first token; the one for `apart`, on no shared device,
    is never held (one hold counted in all)."""
    llmd = short_bound
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        chatted = pool.submit(chat, llmd)
        assert wait_for(lambda: hold_of(llmd)["held"] == ["embed"], timeout_s=10)
        apart = pool.submit(embed, llmd, APART).result()
        held = pool.submit(embed, llmd, EMBED).result()
        assert not chatted.done()  # both answered before the chat's first token
        assert chatted.result() == 200
    assert apart.status_code == held.status_code == 200
    assert float(held.headers["x-llmd-queue-ms"]) >= 200
    assert hold_of(llmd)["holds"] == 1


def test_beside_a_running_chat_batch_runs_one_at_a_time_on_its_device(
    slow_embed: LlmdProcess,
) -> None:
    """Three batch embeddings for `embed` (1 s a step) sent while an interactive chat (3 s a
    step) runs on `chat` (same device): past the 200 ms bound, one runs and two wait in llmd's
    batch queue (admission.device_batch_seats = 1), so they are answered one after another,
    not together; `llmd status` says why."""
    llmd = slow_embed
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        chatted = pool.submit(chat, llmd)
        assert wait_for(lambda: hold_of(llmd)["held"] == ["embed"], timeout_s=10)
        embedded = [pool.submit(embed, llmd, EMBED) for _ in range(3)]
        assert wait_for(lambda: llmd.queue_depth("batch") == 2, timeout_s=10)
        hold = hold_of(llmd)
        assert hold["limited"] == ["embed"] and hold["batch_seats"] == 1
        text = format_status(llmd.admin_status())
        assert "batch 1 at a time on embed: interactive work on chat" in text
        assert chatted.result() == 200
        answers = [future.result() for future in embedded]
    assert [a.status_code for a in answers] == [200, 200, 200]
    waits = sorted(float(a.headers["x-llmd-queue-ms"]) for a in answers)
    assert waits[0] >= 200 and waits[1] >= 1000 and waits[2] >= 2000  # each for the one before


def engine_state(llmd: LlmdProcess, name: str) -> str:
    """The /proc state letter of engine `name`'s leader (T: stopped)."""
    pid = next(e["pid"] for e in llmd.admin_status()["engines"] if e["name"] == name)
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_the_device_pause_stops_the_other_engine_until_the_first_token(
    pausing: LlmdProcess,
) -> None:
    """With admission.device_pause, while the interactive chat waits for its first token
    `embed` (same device, no request of another class there) is stopped, `apart` (no shared
    device) never; at the first token `embed` goes on and answers the batch request held.
    `llmd status` says which engine is stopped, then how many pauses there were and how long
    they lasted, as the metrics do."""
    llmd = pausing
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        chatted = pool.submit(chat, llmd)
        assert wait_for(lambda: engine_state(llmd, "embed") == "T", timeout_s=10)
        assert engine_state(llmd, "apart") != "T" and engine_state(llmd, "chat") != "T"
        during = hold_of(llmd)
        assert during["paused"] == ["embed"] and during["pauses"] == 1, during
        assert "embed stopped (device pause)" in format_status(llmd.admin_status())
        embedded = pool.submit(embed, llmd, EMBED)
        assert chatted.result() == 200
        assert embedded.result().status_code == 200
    assert engine_state(llmd, "embed") != "T"
    after = hold_of(llmd)
    assert after["paused"] == [] and after["pauses"] >= 1 and after["paused_s"] > 0, after
    text = format_status(llmd.admin_status())
    assert "stopped (device pause)" not in text
    assert f"; {after['pauses']} pause" in text and " s stopped" in text, text
    metrics = httpx.get(llmd.base_url + "/metrics").text
    assert f"llmd_device_pauses_total {float(after['pauses'])}" in metrics, metrics
    assert "llmd_device_paused_seconds_total" in metrics
