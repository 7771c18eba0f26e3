"""llmd on the simulator with three on-demand engines in a swap group of one: requests
alternating between their models all complete (none lost), each waiting in llmd's queue while
its engine is woken; the states and counters say what happened. The operators' tests share
one llmd for each way of sleeping."""

from __future__ import annotations

import concurrent.futures
import tomllib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import tomli_w

from tests.support.cli import llmd_verb
from tests.support.clients import closed_after_test
from tests.support.configs import multi_sim_config
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

MODELS = ("chat", "coder", "small")


def swap_config(sleep: str = "auto", args: tuple[str, ...] = (), **sections: dict[str, Any]) -> str:
    """Three simulator engines, each on demand with a 0.2 s wake (and `args`) and sleeping as
    `sleep` says, in one group of one; `sections` merged over the config."""
    engines = {m: (m, ["--sim-wake-s", "0.2", *args]) for m in MODELS}
    raw = tomllib.loads(multi_sim_config(ensure_tiny_model(), engines, **sections))
    for engine in raw["engines"].values():
        engine["on_demand"] = True
        engine["sleep"] = sleep
    raw["swap_groups"] = {
        "gpu0": {
            "engines": list(MODELS),
            "max_resident": 1,
            "min_residence_s": 0.3,
            "max_wait_s": 0.2,
        }
    }
    return tomli_w.dumps(raw)


def start_up_boots(llmd: LlmdProcess) -> int:
    """How many engines booted before the first request, checking that each boot began only
    after the one before it was asleep or serving."""
    boots, busy = 0, False
    for record in llmd.log_records():
        event = record.get("event")
        if event == "engine_started":
            assert not busy, "two engines of the group booted at once"
            boots, busy = boots + 1, True
        elif event in ("engine_asleep", "engine_ready"):
            busy = False
    return boots


def ask(client: openai.OpenAI, model: str) -> str:
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )
    choice = answer.choices[0]
    assert choice.finish_reason in ("length", "stop") and choice.message.content is not None
    return answer.model


@pytest.mark.parametrize(("sleep", "mechanism"), [("auto", "level1"), ("stop", "stop")])
def test_alternating_models_on_a_group_of_one_lose_nothing(sleep: str, mechanism: str) -> None:
    """Two clients alternating over three models whose engines take turns being awake (by
    vLLM's sleep mode, or stopped and booted again): every request is answered in full by its
    own model; /ready was 200 with two engines asleep; wakes are counted by mechanism, and
    evictions; `llmd status` shows at most one engine serving."""
    with LlmdProcess.running(swap_config(sleep), "llmd-swap-") as llmd:
        status = llmd.admin_status()
        states = sorted(e["state"] for e in status["engines"])
        assert states == ["asleep", "asleep", "serving"], states
        assert start_up_boots(llmd) == 3  # one at a time, those starting asleep first
        ready = httpx.get(llmd.base_url + "/ready")
        assert ready.status_code == 200 and len(ready.json()["asleep"]) == 2
        listed = httpx.get(llmd.base_url + "/v1/models").json()["data"]
        assert sorted(card["id"] for card in listed) == sorted(MODELS)
        text = llmd_verb(llmd, "status").stdout
        assert text.count("asleep") >= 2, text
        client = closed_after_test(
            openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="x", max_retries=0)
        )
        # Each model twice, then back: every change of model, both ways, from two clients
        # (about 10 wakes; 12 rounds made about 21, each a boot of its own in `stop`).
        order = [MODELS[i % 3] for i in range(6)]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answered = list(pool.map(lambda m: ask(client, m), order + order[::-1]))
        assert answered == order + order[::-1]
        metrics = httpx.get(llmd.base_url + "/metrics").text
        wakes = [x for x in metrics.splitlines() if x.startswith("llmd_engine_wakes_total{")]
        assert sum(float(x.split()[-1]) for x in wakes) >= 2
        assert f'mechanism="{mechanism}"' in "".join(wakes)
        assert "llmd_engine_evictions_total{" in metrics
        assert "llmd_engine_wake_seconds_count{" in metrics
        assert "llmd_wake_wait_seconds_count{" in metrics
        serving = [e for e in llmd.admin_status()["engines"] if e["state"] == "serving"]
        assert len(serving) <= 1


def test_a_wake_longer_than_the_class_budget_is_refused_with_retry_after() -> None:
    """With the interactive queue's timeout below the predicted wake, an interactive request
    for an asleep model gets 503 with Retry-After at once; a normal one waits and is served."""
    interactive = {"interactive": {"queue_timeout_s": 0.5}}
    with LlmdProcess.running(swap_config(admission=interactive), "llmd-swap-") as llmd:
        body = {"model": "coder", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        url = llmd.base_url + "/v1/chat/completions"
        refused = httpx.post(url, json=body, headers={"x-llmd-priority": "interactive"})
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert "asleep" in refused.json()["error"]["message"]
        served = httpx.post(url, json=body, headers={"x-llmd-priority": "normal"}, timeout=30)
        assert served.status_code == 200 and served.json()["model"] == "coder"


def engine_state(llmd: LlmdProcess, name: str) -> str:
    engines = llmd.admin_status()["engines"]
    return str(next(e["state"] for e in engines if e["name"] == name))


@pytest.fixture(scope="module", params=["auto", "stop"])
def group(request: pytest.FixtureRequest) -> Iterator[LlmdProcess]:
    """llmd on `swap_config(sleep)`, one for each way of sleeping, shared by the tests that
    leave one engine serving and the others asleep, none drained."""
    with LlmdProcess.running(swap_config(request.param), "llmd-swap-") as llmd:
        yield llmd


def test_operators_wake_and_sleep_engines_by_name(group: LlmdProcess) -> None:
    """`llmd sleep --engine` puts the resident engine to sleep; `llmd wake --engine` wakes
    another while the group has room (not cancelled for want of requests) and is refused,
    saying why, while it is full; an unknown engine is refused too. An asleep engine an
    operator drained is not woken: its model answers 503 with Retry-After."""
    llmd = group
    awake = next(e["name"] for e in llmd.admin_status()["engines"] if e["state"] == "serving")
    other = next(m for m in MODELS if m != awake)
    third = next(m for m in MODELS if m not in (awake, other))
    done = llmd_verb(llmd, "sleep", "--engine", awake)
    assert done.returncode == 0, done.stderr
    assert wait_for(lambda: engine_state(llmd, awake) == "asleep", 10)
    done = llmd_verb(llmd, "wake", "--engine", other)
    assert done.returncode == 0 and "a wake takes about" in done.stdout, done.stderr
    assert wait_for(lambda: engine_state(llmd, other) == "serving", 10)
    refused = llmd_verb(llmd, "wake", "--engine", third)
    assert refused.returncode == 1 and "put one to sleep first" in refused.stderr
    unknown = llmd_verb(llmd, "wake", "--engine", "nope")
    assert unknown.returncode == 1 and "no engine 'nope'" in unknown.stderr
    assert llmd_verb(llmd, "drain", "--engine", third).returncode == 0
    body = {"model": third, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    drained = httpx.post(llmd.base_url + "/v1/chat/completions", json=body, timeout=30)
    assert drained.status_code == 503 and "retry-after" in drained.headers
    assert engine_state(llmd, third) == "asleep"  # a drained engine is not woken
    assert llmd_verb(llmd, "resume", "--engine", third).returncode == 0  # as it was


def test_a_wake_nobody_waits_for_is_cancelled() -> None:
    """A request for an asleep model whose client leaves while its engine boots (the stop
    mechanism, a slow boot): the boot is stopped and the engine is asleep again."""
    raw = tomllib.loads(swap_config("stop"))
    # Only `small` (asleep after start-up) boots slowly: each start-up boot of the three,
    # one at a time, took the 3 s.
    raw["engines"]["small"]["args"] += ["--fault-boot-delay", "3"]
    with LlmdProcess.running(tomli_w.dumps(raw), "llmd-swap-") as llmd:
        assert engine_state(llmd, "small") == "asleep"
        body = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
        with pytest.raises(httpx.TimeoutException):
            httpx.post(llmd.base_url + "/v1/chat/completions", json=body, timeout=1.5)
        log = llmd.log_path
        assert wait_for(lambda: "engine_wake_cancel_decided" in log.read_text(), 15)
        assert wait_for(lambda: engine_state(llmd, "small") == "asleep", 15)


def test_an_idle_engine_sleeps_and_a_request_wakes_it() -> None:
    """An on-demand engine in no swap group sleeps after idle_sleep_s without requests
    (counted as an `idle` eviction) and is woken by the next request for its model, which is
    answered in full."""
    raw = tomllib.loads(
        multi_sim_config(ensure_tiny_model(), {"solo": ("solo", ["--sim-wake-s", "0.2"])})
    )
    raw["engines"]["solo"].update(on_demand=True, idle_sleep_s=1.0)
    with LlmdProcess.running(tomli_w.dumps(raw), "llmd-swap-") as llmd:
        client = closed_after_test(
            openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="x", max_retries=0)
        )
        # It may sleep a first time before the first request (idle 1 s from its boot); the
        # counts are read while it sleeps (counted at the decision), where they are exact.
        assert wait_for(lambda: engine_state(llmd, "solo") == "asleep", 15)
        before = idle_evictions(llmd)
        assert ask(client, "solo") == "solo"
        assert wait_for(lambda: engine_state(llmd, "solo") == "asleep", 15)
        assert httpx.get(llmd.base_url + "/ready").json()["asleep"] == ["solo"]
        assert idle_evictions(llmd) == before + 1
        assert ask(client, "solo") == "solo"


def idle_evictions(llmd: LlmdProcess) -> float:
    """llmd_engine_evictions_total of engine `solo` for reason `idle` (0 before the first)."""
    prefix = 'llmd_engine_evictions_total{engine="solo",reason="idle"} '
    lines = httpx.get(llmd.base_url + "/metrics").text.splitlines()
    return sum(float(line.removeprefix(prefix)) for line in lines if line.startswith(prefix))


def boots(llmd: LlmdProcess, name: str) -> int:
    """How many times engine `name`'s process was started (its `engine_started` lines)."""
    return sum(
        1 for e in llmd.log_records() if e.get("event") == "engine_started" and e["engine"] == name
    )


def test_a_restart_of_an_asleep_engine_does_not_wake_it(group: LlmdProcess) -> None:
    """`llmd restart --engine` on an asleep engine answers at once, saying so, and leaves it
    asleep with no new process; the next request for its model wakes it by booting a fresh
    process (also where it sleeps in vLLM's sleep mode) and is answered. `llmd restart` of all
    restarts the awake engine and leaves the asleep ones asleep, named in its answer."""
    llmd = group
    awake = next(e["name"] for e in llmd.admin_status()["engines"] if e["state"] == "serving")
    asleep = [m for m in MODELS if m != awake]
    before = boots(llmd, asleep[0])
    done = llmd_verb(llmd, "restart", "--engine", asleep[0])
    assert done.returncode == 0, done.stderr
    assert "is asleep: not woken; its next wake boots a fresh process" in done.stdout
    assert engine_state(llmd, asleep[0]) == "asleep"
    assert boots(llmd, asleep[0]) == before
    client = closed_after_test(
        openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="x", max_retries=0)
    )
    assert ask(client, asleep[0]) == asleep[0]
    assert boots(llmd, asleep[0]) == before + 1  # a fresh process, not the sleeping one
    # Now asleep[0] serves: a restart of all restarts it and leaves the others asleep.
    others = sorted(m for m in MODELS if m != asleep[0])
    started = {m: boots(llmd, m) for m in MODELS}
    done = llmd_verb(llmd, "restart")
    assert done.returncode == 0, done.stderr
    assert f"asleep, not woken: {', '.join(others)} boot afresh when woken" in done.stdout
    assert [engine_state(llmd, m) for m in others] == ["asleep", "asleep"]
    assert engine_state(llmd, asleep[0]) == "serving"
    assert {m: boots(llmd, m) for m in MODELS} == {**started, asleep[0]: started[asleep[0]] + 1}
