"""A tenant whose output budget is smaller than what a coding agent asks for (Claude Code sends
max_tokens 32000 on every request), through a real `llmd serve` on the simulator: the Messages
and Responses APIs, whose engine lowers an output limit past the window, and a request that
left its limit to llmd, get their limit lowered to the budget's size and are served, saying
so in x-llmd-max-tokens-clamped; a chat that asks for more under the `reject` policy is still
refused, 400."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from llmd.admission.tenants import hash_key
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

if TYPE_CHECKING:
    import anthropic
else:  # 1.2 s of CPU in each worker that collects it (tests/test_collection_imports.py)
    anthropic = lazy_module("anthropic")

# One worker runs the modules that use the anthropic client (tests/support/xdist_groups.py):
# its import is 2.1-2.6 CPU-s (its types are pydantic models), paid in each worker using it.
pytestmark = pytest.mark.xdist_group("anthropic")
OUTPUT_BUDGET = 300
# A tenant per test (each spends its whole budget): its key.
KEYS = [f"key-agent-{i}" for i in range(5)]
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def llmd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmdProcess]:
    tenants = Path(tmp_path_factory.mktemp("tenants")) / "tenants.toml"
    tenants.write_text(
        "".join(
            f'[tenants.agent{i}]\nkeys = ["{hash_key(key)}"]\n'
            f"output_tokens_per_minute = {OUTPUT_BUDGET}\ntokens_per_day = 1000000\n"
            for i, key in enumerate(KEYS)
        )
    )
    config = sim_config(ensure_tiny_model(), admission={"tenants_file": str(tenants)})
    with LlmdProcess.running(config, "llmd-budget-") as running:
        yield running


def post(llmd: LlmdProcess, key: str, path: str, body: dict[str, object]) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(llmd.base_url + path, json=body, headers=headers, timeout=60)


def test_claude_code_s_output_limit_is_lowered_to_the_budget(llmd: LlmdProcess) -> None:
    """The anthropic client's message with max_tokens 32000: 200, at most the budget's tokens
    produced, the clamp said."""
    with anthropic.Anthropic(base_url=llmd.base_url, api_key=KEYS[0], max_retries=0) as api:
        raw = api.messages.with_raw_response.create(
            model="tiny", max_tokens=32000, messages=HELLO, timeout=60
        )
    assert raw.headers["x-llmd-max-tokens-clamped"] == f"32000->{OUTPUT_BUDGET}"
    assert raw.parse().usage.output_tokens <= OUTPUT_BUDGET


@pytest.mark.parametrize(
    ("key", "path", "body"),
    [
        (KEYS[1], "/v1/responses", {"input": "hello", "max_output_tokens": 5000, "store": False}),
        (KEYS[2], "/v1/responses", {"input": "hello", "store": False}),
        (KEYS[3], "/v1/chat/completions", {"messages": HELLO}),
    ],
)
def test_a_limit_that_may_be_lowered_is_served(
    llmd: LlmdProcess, key: str, path: str, body: dict[str, object]
) -> None:
    """A Responses request past the budget, or one that sent no limit (Codex sends none), and a
    chat that sent none: 200 within the budget, not a 400 asking to lower max_tokens."""
    answer = post(llmd, key, path, {"model": "tiny", **body})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-llmd-max-tokens-clamped"].endswith(f"->{OUTPUT_BUDGET}")


def test_a_chat_that_asks_past_the_budget_is_still_refused(llmd: LlmdProcess) -> None:
    """A chat with max_tokens over the whole budget, under the default `reject` policy: 400
    invalid_request naming the budget, as before."""
    body = {"model": "tiny", "messages": HELLO, "max_tokens": 400}
    answer = post(llmd, KEYS[4], "/v1/chat/completions", body)
    assert answer.status_code == 400, answer.text
    assert "output_tokens_per_minute" in answer.json()["error"]["message"]
