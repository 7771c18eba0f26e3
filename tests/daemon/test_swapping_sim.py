"""llmd on the simulator with three on-demand engines in a swap group of one: requests
alternating between their models all complete (none lost), each waiting in llmd's queue while
its engine is woken; the states and counters say what happened."""

from __future__ import annotations

import concurrent.futures
import tomllib
from typing import Any

import httpx
import openai
import tomli_w

from tests.support.configs import multi_sim_config
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model

MODELS = ("chat", "coder", "small")


def swap_config(**group: Any) -> str:
    """Three simulator engines, each on demand with a 0.2 s wake, in one group of one."""
    text = multi_sim_config(ensure_tiny_model(), {m: (m, ["--sim-wake-s", "0.2"]) for m in MODELS})
    raw = tomllib.loads(text)
    for engine in raw["engines"].values():
        engine["on_demand"] = True
    raw["swap_groups"] = {
        "gpu0": {
            "engines": list(MODELS),
            "max_resident": 1,
            "min_residence_s": 0.3,
            "max_wait_s": 0.2,
            **group,
        }
    }
    return tomli_w.dumps(raw)


def ask(client: openai.OpenAI, model: str) -> str:
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )
    choice = answer.choices[0]
    assert choice.finish_reason in ("length", "stop") and choice.message.content is not None
    return answer.model


def test_alternating_models_on_a_group_of_one_lose_nothing() -> None:
    """Two clients alternating over three models whose engines take turns being awake: every
    request is answered in full by its own model; /ready was 200 with two engines asleep;
    wakes and evictions are counted; `llmd status` shows one engine serving, two asleep."""
    with LlmdProcess.running(swap_config(), "llmd-swap-") as llmd:
        status = llmd.admin_status()
        states = sorted(e["state"] for e in status["engines"])
        assert states == ["asleep", "asleep", "serving"], states
        client = openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="x", max_retries=0)
        order = [MODELS[i % 3] for i in range(12)]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answered = list(pool.map(lambda m: ask(client, m), order + order[::-1]))
        assert answered == order + order[::-1]
        metrics = httpx.get(llmd.base_url + "/metrics").text
        wakes = [x for x in metrics.splitlines() if x.startswith("llmd_engine_wakes_total{")]
        assert sum(float(x.split()[-1]) for x in wakes) >= 2
        assert 'mechanism="level1"' in "".join(wakes)
        assert "llmd_engine_evictions_total{" in metrics
        assert "llmd_engine_wake_seconds_count{" in metrics
        serving = [e for e in llmd.admin_status()["engines"] if e["state"] == "serving"]
        assert len(serving) <= 1
