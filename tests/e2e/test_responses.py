"""The Responses API end to end: the openai client through llmd to a real vLLM (CPU build),
streamed and not, retrieved from llmd's store, counted exactly, and continued with
`previous_response_id` after llmd and its engine have stopped and started again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.support.clients import closed_after_test
from tests.support.configs import demo_config
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

pytestmark = pytest.mark.e2e

TOOLS: Any = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]
ITEMS: Any = [
    {"role": "user", "content": "call f"},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "42"},
]


def client(llmd: LlmdProcess) -> openai.OpenAI:
    return closed_after_test(
        openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="unused", max_retries=0)
    )


def input_tokens(llmd: LlmdProcess, **body: Any) -> int:
    answer = httpx.post(
        llmd.base_url + "/v1/responses/input_tokens", json={"model": "tiny", **body}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    count: int = answer.json()["input_tokens"]
    return count


def test_responses_through_llmd_to_vllm_and_across_a_restart() -> None:
    """create (streamed and not) and retrieve through llmd; input_tokens equals the engine's
    usage, for text and for a tool conversation the engine counts; after llmd and vLLM stop
    and start again the stored response is retrieved and continued."""
    workdir = short_tmpdir("llmd-e2e-resp-")
    config = demo_config(ensure_tiny_model(), server={"state_dir": str(workdir / "state")})
    with LlmdProcess.running(config, workdir, timeout_s=400) as llmd:
        api = client(llmd)
        first = api.responses.create(model="tiny", input="Hello there", max_output_tokens=4)
        assert first.usage is not None and first.usage.output_tokens <= 4
        assert first.usage.input_tokens == input_tokens(llmd, input="Hello there")
        assert api.responses.retrieve(first.id).model_dump() == first.model_dump()
        events = list(
            api.responses.create(model="tiny", input="Hi", max_output_tokens=3, stream=True)
        )
        kinds = [event.type for event in events]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        last = events[-1].response  # type: ignore[union-attr]
        deltas = kinds.count("response.output_text.delta")  # a step may carry several tokens
        assert last.usage is not None and 1 <= deltas <= last.usage.output_tokens <= 3
        assert api.responses.retrieve(last.id).model_dump() == last.model_dump()
        tools = api.responses.create(model="tiny", input=ITEMS, tools=TOOLS, max_output_tokens=2)
        assert tools.usage is not None
        assert tools.usage.input_tokens == input_tokens(llmd, input=ITEMS, tools=TOOLS)
    with LlmdProcess.running(config, short_tmpdir("llmd-e2e-resp2-"), timeout_s=400) as again:
        api = client(again)
        assert api.responses.retrieve(first.id).model_dump() == first.model_dump()
        nxt = api.responses.create(
            model="tiny", input="And then?", previous_response_id=first.id, max_output_tokens=2
        )
        expected = input_tokens(again, input="And then?", previous_response_id=first.id)
        assert nxt.usage is not None and nxt.usage.input_tokens == expected
        assert expected > first.usage.input_tokens
        assert api.responses.retrieve(nxt.id).previous_response_id == first.id
