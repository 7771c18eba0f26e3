"""Several supervised engines behind one llmd, on the simulator through a real `llmd serve`:
two models (one engine `solo`, a pool of two `pa` and `pb`), routing by model, least load and
prefix affinity in the pool, one engine killed, one drained, one given up."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import tomllib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import tomli_w
from prometheus_client.parser import text_string_to_metric_families

from llmd.daemon.daemon import EXIT_ENGINE_GAVE_UP
from tests.support.cli import llmd_verb
from tests.support.configs import multi_sim_config
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.waiting import wait_for

POOL = ("pa", "pb")
# Slow steps, so that concurrent requests overlap on the engines.
SLOW = ("--step-base-ms", "20")
# Each engine fails twice and is given up, quickly.
GIVE_UP_FAST = {"max_failed_boots": 2, "backoff_initial_s": 0.1, "backoff_max_s": 0.2}
PREFIX = "You are a terse assistant for the llmd fleet tests. " * 3  # past prefix_chars


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    config = multi_sim_config(
        ensure_tiny_model(),
        {"solo": ("solo", SLOW), "pa": ("tiny", SLOW), "pb": ("tiny", SLOW)},
        routing={"prefix_chars": 64},
    )
    process = LlmdProcess.start(config)
    try:
        process.wait_ready(timeout_s=60)
        # Ready comes with the first engine serving; the tests count on all three (pa booting
        # late on a loaded machine left pb every request of the pool).
        serving = lambda: {e["state"] for e in process.admin_status()["engines"]} == {"serving"}  # noqa: E731
        assert wait_for(serving, 60), process.log_tail()
        yield process
    finally:
        process.stop()


def chat(model: str, text: str = "Hi", max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        **extra,
    }


def served_by(llmd: LlmdProcess) -> dict[str, float]:
    """Requests each backend answered so far (llmd_backend_requests_total, outcome answered)."""
    text = httpx.get(llmd.base_url + "/metrics").text
    return {
        s.labels["engine"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "llmd_backend_requests_total" and s.labels["outcome"] == "answered"
    }


def moved_since(llmd: LlmdProcess, before: dict[str, float], total: int) -> dict[str, int]:
    """Requests each backend answered since `before`, once `total` of them are counted (a
    request is accounted just after its client has the last byte)."""
    moved: dict[str, int] = {}

    def counted() -> bool:
        after = served_by(llmd)
        moved.clear()
        moved.update({name: int(after[name] - before.get(name, 0)) for name in after})
        return sum(moved.values()) >= total

    assert wait_for(counted, 10), moved
    return moved


def post_all(llmd: LlmdProcess, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """The bodies sent at once (one thread each, its client ready, all let go together, so
    that they overlap at the engines however slowly the threads start); their responses in
    order."""
    url = llmd.base_url + "/v1/chat/completions"
    together = threading.Barrier(len(bodies))

    def post(body: dict[str, Any]) -> httpx.Response:
        with httpx.Client(timeout=60) as client:
            together.wait(timeout=30)
            return client.post(url, json=body)

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, bodies))


def engine_entry(llmd: LlmdProcess, name: str) -> dict[str, Any]:
    entry: dict[str, Any] = next(e for e in llmd.admin_status()["engines"] if e["name"] == name)
    return entry


def ready(llmd: LlmdProcess, query: str = "") -> int | None:
    """GET /ready's status (None: llmd does not answer yet)."""
    try:
        return httpx.get(llmd.base_url + "/ready" + query, timeout=5).status_code
    except httpx.TransportError:
        return None


def test_each_model_goes_to_its_own_pool(llmd: LlmdProcess) -> None:
    """`solo` runs only on engine solo, `tiny` only on pa and pb; /v1/models lists both; an
    unknown model is 404 naming the served ones."""
    before = served_by(llmd)
    for response in post_all(llmd, [chat("solo")] * 3 + [chat("tiny")] * 3):
        assert response.status_code == 200, response.text
    moved = moved_since(llmd, before, 6)
    assert moved.get("solo") == 3
    assert moved.get("pa", 0) + moved.get("pb", 0) == 3
    models = httpx.get(llmd.base_url + "/v1/models").json()
    assert sorted(card["id"] for card in models["data"]) == ["solo", "tiny"]
    assert all(card["max_model_len"] == 1024 for card in models["data"])  # the engines' cards
    assert ready(llmd, "?model=nope") == 404
    unknown = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("nope"))
    assert unknown.status_code == 404
    assert "solo" in unknown.json()["error"]["message"]


def test_llmd_status_shows_each_engine_and_model(llmd: LlmdProcess) -> None:
    """`llmd status` has a row per engine (its state and model) and per model (its pool)."""
    shown = llmd_verb(llmd, "status")
    assert shown.returncode == 0, shown.stderr
    rows = [line.split()[1:4] for line in shown.stdout.splitlines() if line.startswith("backend")]
    assert rows == [["solo", "serving", "model"], ["pa", "serving", "model"],
                    ["pb", "serving", "model"]]  # fmt: skip
    assert "model      solo  available  on solo" in shown.stdout
    assert "model      tiny  available  on pa, pb" in shown.stdout
    sockets = sorted(path.name for path in llmd.runtime_dir.glob("engine*.sock"))
    assert sockets == ["engine-pa.sock", "engine-pb.sock", "engine-solo.sock"]


def test_the_pool_spreads_load_and_keeps_a_shared_prefix_together(llmd: LlmdProcess) -> None:
    """Concurrent requests without a shared prefix go to both engines of the pool (least
    load); requests sharing a long prefix one after the other all go to one of them
    (affinity), and sent at once mostly there: only past the load bound ((1 + epsilon) x the
    mean fill + one request of slack) does one spill to the other."""
    before = served_by(llmd)
    spread = post_all(llmd, [chat("tiny", f"Q{i}", 40) for i in range(8)])
    assert all(r.status_code == 200 for r in spread)
    moved = moved_since(llmd, before, 8)
    assert moved.get("pa", 0) >= 2 and moved.get("pb", 0) >= 2, moved
    before = served_by(llmd)
    url = llmd.base_url + "/v1/chat/completions"
    for i in range(6):
        response = httpx.post(url, json=chat("tiny", PREFIX + f"question {i}"), timeout=60)
        assert response.status_code == 200
    moved = moved_since(llmd, before, 6)
    assert sorted(moved.get(name, 0) for name in POOL) == [0, 6], moved
    home = max(POOL, key=lambda name: moved.get(name, 0))
    before = served_by(llmd)
    shared = post_all(llmd, [chat("tiny", PREFIX + f"again {i}", 40) for i in range(6)])
    assert all(r.status_code == 200 for r in shared)
    moved = moved_since(llmd, before, 6)
    assert moved.get(home, 0) >= 4, moved


def test_a_killed_engine_restarts_while_the_other_serves_on(llmd: LlmdProcess) -> None:
    """SIGKILL of pa's process group: requests for `tiny` keep being answered (by pb), and
    pa is restarted and serves again; solo is untouched."""
    victim = engine_entry(llmd, "pa")
    restarts = victim["restarts"]
    os.killpg(victim["pid"], signal.SIGKILL)
    assert wait_for(lambda: engine_entry(llmd, "pa")["state"] != "serving", 10)
    for response in post_all(llmd, [chat("tiny")] * 4):
        assert response.status_code == 200, response.text
    assert wait_for(lambda: engine_entry(llmd, "pa")["state"] == "serving", 30), llmd.log_tail()
    after = engine_entry(llmd, "pa")
    assert after["restarts"] == restarts + 1 and after["pid"] != victim["pid"]
    assert engine_entry(llmd, "solo")["restarts"] == 0
    assert engine_entry(llmd, "pb")["restarts"] == 0


def test_a_drained_engine_takes_no_new_request(llmd: LlmdProcess) -> None:
    """`llmd drain --engine pb`: pb takes nothing new (pa takes the pool's requests), llmd
    itself still admits; `llmd resume --engine pb` gives it requests again. Draining the
    whole pool answers 503 with Retry-After."""
    assert wait_for(lambda: engine_entry(llmd, "pa")["state"] == "serving", 30)
    drained = llmd_verb(llmd, "drain", "--engine", "pb")
    assert drained.returncode == 0, drained.stderr
    assert engine_entry(llmd, "pb")["draining"] is True
    assert llmd.admin_status()["draining"] is False
    before = served_by(llmd)
    for response in post_all(llmd, [chat("tiny", f"D{i}") for i in range(6)]):
        assert response.status_code == 200
    moved = moved_since(llmd, before, 6)
    assert moved.get("pa") == 6 and moved.get("pb", 0) == 0, moved
    assert llmd_verb(llmd, "drain", "--engine", "pa").returncode == 0
    refused = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("tiny"))
    assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
    assert httpx.get(llmd.base_url + "/ready?model=tiny").status_code == 503
    assert httpx.get(llmd.base_url + "/ready?model=solo").status_code == 200
    for name in POOL:
        resumed = llmd_verb(llmd, "resume", "--engine", name)
        assert resumed.returncode == 0, resumed.stderr
    before = served_by(llmd)
    post_all(llmd, [chat("tiny", f"R{i}", 40) for i in range(8)])
    moved = moved_since(llmd, before, 8)
    assert moved.get("pa", 0) >= 1 and moved.get("pb", 0) >= 1, moved


def test_an_engine_that_gives_up_leaves_the_others_serving() -> None:
    """An engine that fails every boot is given up after supervisor.max_failed_boots; llmd
    stays up, its other engine serves, /ready is 503 for the lost model and 200 for the
    other."""
    config = multi_sim_config(
        ensure_tiny_model(),
        {"good": ("good", ()), "broken": ("broken", ("--fault-boot-exit", "3"))},
        supervisor=GIVE_UP_FAST,
    )
    llmd = LlmdProcess.start(config)
    try:
        assert wait_for(lambda: ready(llmd, "?model=good") == 200, 60, 0.2), llmd.log_tail()

        def gave_up() -> bool:
            return engine_entry(llmd, "broken")["state"] == "failed"

        assert wait_for(gave_up, 30, every_s=0.2), llmd.log_tail()
        assert llmd.process.poll() is None
        ok = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("good"), timeout=30)
        assert ok.status_code == 200
        lost = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("broken"))
        assert lost.status_code == 503 and "retry-after" in lost.headers
        assert ready(llmd) == 503 and ready(llmd, "?model=broken") == 503
    finally:
        code = llmd.stop()
    assert code == 0, llmd.log_tail()


def test_llmd_exits_79_only_when_every_engine_gave_up() -> None:
    """Two engines that both fail every boot, no upstream: once both have given up llmd
    exits 79 (EXIT_ENGINE_GAVE_UP, which the unit does not restart)."""
    broken = ("--fault-boot-exit", "3")
    config = multi_sim_config(
        ensure_tiny_model(),
        {"one": ("one", broken), "two": ("two", broken)},
        supervisor=GIVE_UP_FAST,
    )
    llmd = LlmdProcess.start(config)
    try:
        assert llmd.process.wait(timeout=60) == EXIT_ENGINE_GAVE_UP, llmd.log_tail()
    finally:
        llmd.stop()
    log = llmd.log_path.read_text()
    assert '"engine": "one"' in log and '"engine": "two"' in log


def test_an_upstream_keeps_llmd_up_when_every_engine_gave_up() -> None:
    """The only engine gives up, but an upstream is configured (here unreachable): llmd stays
    up, and a request for the upstream's model gets 503 with Retry-After."""
    socket = short_tmpdir("llmd-up-") / "missing.sock"
    config = multi_sim_config(
        ensure_tiny_model(),
        {"one": ("one", ("--fault-boot-exit", "3"))},
        supervisor=GIVE_UP_FAST,
        upstreams={"lab": {"url": f"unix:{socket}", "models": ["far"]}},
    )
    llmd = LlmdProcess.start(config)
    try:
        assert wait_for(lambda: ready(llmd) is not None, 60, 0.2), llmd.log_tail()
        assert wait_for(lambda: engine_entry(llmd, "one")["state"] == "failed", 30, 0.2)
        lost = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("far"))
        assert lost.status_code == 503 and int(lost.headers["retry-after"]) >= 1
        assert llmd.process.poll() is None
    finally:
        code = llmd.stop()
    assert code == 0, llmd.log_tail()


def test_reload_applies_upstreams_and_keeps_engines_for_their_restart() -> None:
    """A reload that adds an upstream and an engine: the upstream's model is served (routed) at
    once, the engine waits for `llmd restart --engine pb`, which the reload names and which
    boots it into the pool. A reload back: the upstream leaves at once, and `llmd restart
    --engine pb` stops the removed engine."""
    model = ensure_tiny_model()
    before = multi_sim_config(model, {"pa": ("tiny", ())})
    socket = short_tmpdir("llmd-up-") / "missing.sock"
    after = multi_sim_config(
        model,
        {"pa": ("tiny", ()), "pb": ("tiny", ())},
        upstreams={"lab": {"url": f"unix:{socket}", "models": ["far"]}},
    )
    llmd = LlmdProcess.start(before)
    config = llmd.runtime_dir.parent / "llmd.toml"
    try:
        llmd.wait_ready(timeout_s=60)
        config.write_text(after)
        reloaded = llmd_verb(llmd, "reload")
        assert reloaded.returncode == 0, reloaded.stderr
        assert "llmd restart --engine pb" in reloaded.stdout
        status = llmd.admin_status()
        assert [m["name"] for m in status["models"]] == ["tiny", "far"]
        assert [e["name"] for e in status["engines"]] == ["pa", "lab"]
        far = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("far"))
        assert far.status_code == 503 and "retry-after" in far.headers  # routed: not a 404
        restarted = llmd_verb(llmd, "restart", "--engine", "pb")
        assert restarted.returncode == 0, restarted.stderr
        assert "engine pb restarted; serving" in restarted.stdout
        status = llmd.admin_status()
        assert [e["name"] for e in status["engines"]] == ["pa", "pb", "lab"]
        assert status["models"][0] == {"name": "tiny", "backends": ["pa", "pb"], "available": True}
        config.write_text(before)
        assert llmd_verb(llmd, "reload").returncode == 0
        assert [m["name"] for m in llmd.admin_status()["models"]] == ["tiny"]
        removed = llmd_verb(llmd, "restart", "--engine", "pb")
        assert removed.returncode == 0 and "engine pb removed" in removed.stdout
        assert [e["name"] for e in llmd.admin_status()["engines"]] == ["pa"]
        ok = httpx.post(llmd.base_url + "/v1/chat/completions", json=chat("tiny"), timeout=30)
        assert ok.status_code == 200
    finally:
        code = llmd.stop()
    assert code == 0, llmd.log_tail()


def test_a_backend_failing_before_the_first_byte_is_retried_on_another() -> None:
    """In a pool of two, engine bad answers every request 500: each request is tried once more
    on good and answered 200; llmd_backend_requests_total counts bad's as retried."""
    raw = tomllib.loads(
        multi_sim_config(
            ensure_tiny_model(),
            {"bad": ("tiny", ("--fault-error-rate", "1.0")), "good": ("tiny", ())},
            routing={"prefix_chars": 0},
        )
    )
    # bad would fail its warm-up and never serve: it serves without one, as an engine that
    # breaks after its warm-up would.
    raw["engines"]["bad"]["warmup"] = False
    llmd = LlmdProcess.start(tomli_w.dumps(raw))
    try:
        llmd.wait_ready(timeout_s=60)
        # Both serving: a request bad fails is retried only on a backend that serves (ready
        # comes with the first engine; good booting slower left one 502 on a loaded machine).
        both = lambda: all(engine_entry(llmd, n)["state"] == "serving" for n in ("bad", "good"))  # noqa: E731
        assert wait_for(both, 30), llmd.log_tail()
        before = served_by(llmd)
        for response in post_all(llmd, [chat("tiny", f"T{i}") for i in range(6)]):
            assert response.status_code == 200, response.text
        assert moved_since(llmd, before, 6) == {"good": 6}
        text = httpx.get(llmd.base_url + "/metrics").text
        outcomes = {
            (s.labels["engine"], s.labels["outcome"]): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "llmd_backend_requests_total"
        }
        assert outcomes.get(("bad", "retried"), 0) >= 1
        assert ("bad", "answered") not in outcomes
    finally:
        llmd.stop()
