"""An engine secured as usual (`--api-key`, or VLLM_API_KEY) and serving several names, behind
a real `llmd serve` on the simulator: llmd authenticates everywhere it talks to the engine
(relay, readiness and model probes, metrics scraper, /tokenize) and accepts every name the
engine serves."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for

KEY = "engine-secret-8c1f"
MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def secured() -> Iterator[LlmdProcess]:
    """The engine with --api-key, served as `a` and `b` with a LoRA adapter `x` (and adapters
    loadable at run time); prompts counted by the engine's /tokenize (validation.tokenizer =
    engine)."""
    args = ["--api-key", KEY, "--served-model-name", "a", "b"]
    args += ["--enable-lora", "--lora-modules", "x=/adapters/x"]
    config = sim_config(
        ensure_tiny_model(),
        args,
        engine={"env": {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}},
        validation={"tokenizer": "engine"},
    )
    with LlmdProcess.running(config, "llmd-auth-") as process:
        yield process


def chat(llmd: LlmdProcess, model: str, max_tokens: int = 4) -> httpx.Response:
    body = {"model": model, "messages": MESSAGES, "max_tokens": max_tokens}
    return httpx.post(llmd.base_url + "/v1/chat/completions", json=body, timeout=30)


def test_requests_reach_a_secured_engine(secured: LlmdProcess) -> None:
    """Relayed requests carry the engine's key (no 401 from the engine), /v1/models too."""
    assert chat(secured, "a").status_code == 200
    models = httpx.get(secured.base_url + "/v1/models", timeout=10)
    assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == [
        "a",
        "b",
        "x",
    ]


def test_the_probes_and_the_scraper_authenticate(secured: LlmdProcess) -> None:
    """The model probe read max_model_len (the context check runs: llmd's own 400, counted
    through the engine's /tokenize) and the scraper reads the engine's metrics."""
    over = chat(secured, "a", max_tokens=5000)
    assert over.status_code == 400
    error = over.json()["error"]
    assert error["code"] == "context_length_exceeded" and "1024" in error["message"]
    assert wait_for(lambda: secured.admin_status()["engine"]["running"] is not None, 30)
    assert secured.admin_status()["engine"]["max_model_len"] == 1024


def test_every_served_name_and_adapter_is_accepted(secured: LlmdProcess) -> None:
    """`--served-model-name a b` and `--lora-modules x=...`: a, b and x are served; any other
    name is llmd's 404 listing them."""
    for name in ("a", "b", "x"):
        assert chat(secured, name).status_code == 200, name
    missing = chat(secured, "tiny")
    assert missing.status_code == 404
    assert "Valid aliases: a, b, x." in missing.json()["error"]["message"]


def test_an_adapter_loaded_at_run_time_is_served(secured: LlmdProcess) -> None:
    """An adapter the engine loads while it runs (POST /v1/load_lora_adapter, vLLM 0.32 with
    VLLM_ALLOW_RUNTIME_LORA_UPDATING) is served through llmd from then on: a name no pool holds
    makes llmd read the engine's /v1/models again (at most once a second)."""
    assert chat(secured, "late").status_code == 404
    engine = httpx.HTTPTransport(uds=str(secured.engine_socket))
    with httpx.Client(transport=engine, timeout=10) as direct:
        loaded = direct.post(
            "http://engine/v1/load_lora_adapter",
            json={"lora_name": "late", "lora_path": "/adapters/late"},
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert loaded.status_code == 200, loaded.text
    assert wait_for(lambda: chat(secured, "late").status_code == 200, 30)
    listed = httpx.get(secured.base_url + "/v1/models", timeout=10).json()["data"]
    assert "late" in [model["id"] for model in listed]


def test_the_key_is_never_logged(secured: LlmdProcess) -> None:
    """The engine's command line is logged with its key masked."""
    log = secured.log_path.read_text()
    assert "engine_started" in log and "--api-key ***" in log and KEY not in log


def test_a_key_from_engine_env_is_used_too() -> None:
    """VLLM_API_KEY in engine.env secures the engine as --api-key does; llmd sends it."""
    config = sim_config(
        ensure_tiny_model(),
        engine={"env": {"VLLM_API_KEY": KEY}},
        validation={"tokenizer": "engine"},
    )
    with LlmdProcess.running(config, "llmd-auth-env-") as llmd:
        engine = httpx.HTTPTransport(uds=str(llmd.engine_socket))
        with httpx.Client(transport=engine, timeout=10) as direct:
            assert direct.get("http://engine/v1/models").status_code == 401
        assert chat(llmd, "tiny").status_code == 200
        assert wait_for(lambda: llmd.admin_status()["engine"]["running"] is not None, 30)
