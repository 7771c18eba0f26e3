"""Token budgets and KV shares at admission: a request over budget is a 429 with Retry-After
and OpenAI's x-ratelimit headers, tokens come back when a request never ran or used less, a
request that could never fit its share or a budget is a 400; the tenants file is read again
alone."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from llmd.admission.classes import Priority
from llmd.admission.control import Admission
from llmd.admission.cost import Cost
from llmd.admission.requests import AdmissionRequest
from llmd.admission.tenants import hash_key
from llmd.config import AdmissionConfig, Config, EngineConfig
from llmd.errors import BudgetExceeded, InvalidApiKey, InvalidRequest, QueueTimeout
from llmd.supervisor.state import EnginePhase, EngineState

AGENT = (
    f'[tenants.agent]\nkeys = ["{hash_key("agent-key")}"]\n'
    "input_tokens_per_minute = 600\noutput_tokens_per_minute = 300\nmax_kv_tokens = 2000\n"
)


def admission(tmp_path: Path, text: str = AGENT) -> Admission:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(text)
    config = Config(
        engine=EngineConfig(model="m"),
        admission=AdmissionConfig(max_in_flight=1, tenants_file=str(tenants)),
    )
    return Admission(config, {"main": EngineState(phase=EnginePhase.SERVING, max_model_len=1024)})


def request(adm: Admission, prompt: int, output: int) -> AdmissionRequest:
    cost = Cost(seats=1, tokens=prompt + output, input_tokens=prompt, output_tokens=output)
    return AdmissionRequest(adm.tenants.tenants()[0], Priority.NORMAL, cost, model="m")


def left(adm: Admission) -> dict[str, int]:
    (row,) = adm.as_snapshot(0.0, {}).tenants
    return {budget.name: budget.remaining for budget in row.budgets}


async def test_over_budget_is_a_429_with_the_headers_openai_sends(tmp_path: Path) -> None:
    """The first request takes its prompt and max_tokens; the second, needing more output than
    is left, gets BudgetExceeded: Retry-After from the refill (5 tokens/s), and the
    x-ratelimit-*-tokens headers of that budget. The admitted one's ticket carries them."""
    adm = admission(tmp_path)
    ticket = await adm.admit(request(adm, 100, 250))
    assert dict(ticket.ratelimit) == {
        b"x-ratelimit-limit-tokens": b"300",
        b"x-ratelimit-remaining-tokens": b"50",
        b"x-ratelimit-reset-tokens": b"50s",
    }
    with pytest.raises(BudgetExceeded) as caught:
        await adm.admit(request(adm, 100, 100))
    error = caught.value
    assert (error.status, error.code) == (429, "budget_exceeded")
    assert error.retry_after_s == pytest.approx(10.0, abs=0.1)
    headers = dict(error.headers())
    assert headers[b"retry-after"] in (b"10", b"11")
    assert headers[b"x-ratelimit-remaining-tokens"] == b"50"
    assert headers[b"x-ratelimit-limit-tokens"] == b"300"
    assert "output_tokens_per_minute" in error.message
    assert left(adm)["input_tokens_per_minute"] == 500  # the refused one took nothing


async def test_tokens_come_back_when_a_request_never_ran_or_used_less(tmp_path: Path) -> None:
    """A request whose client left while it was queued gets all its tokens back; one that ran
    gets back the output it did not use."""
    adm = admission(tmp_path)
    ticket = await adm.admit(request(adm, 100, 100))
    waiter = asyncio.create_task(adm.admit(request(adm, 100, 100)))
    while adm.scheduler.queued() == 0:
        await asyncio.sleep(0)
    assert left(adm) == {"input_tokens_per_minute": 400, "output_tokens_per_minute": 100}
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert left(adm) == {"input_tokens_per_minute": 500, "output_tokens_per_minute": 200}
    adm.finish(ticket, output_tokens=30)
    assert left(adm) == {"input_tokens_per_minute": 500, "output_tokens_per_minute": 270}


async def test_a_request_over_a_whole_budget_or_share_is_a_400(tmp_path: Path) -> None:
    """Needing more than a budget's whole size, or more KV tokens than the tenant's share,
    is refused with a 400 saying so, before it waits for anything."""
    adm = admission(tmp_path)
    with pytest.raises(InvalidRequest, match="more than its whole 300"):
        await adm.admit(request(adm, 10, 301))
    tenant = adm.tenants.tenants()[0]
    with pytest.raises(InvalidRequest, match="more than tenant agent's share of 2,000"):
        adm.check_share(tenant, Cost(seats=1, tokens=2001), "m")
    adm.check_share(tenant, Cost(seats=1, tokens=2000), "m")


async def test_the_tenants_file_is_read_again_alone(tmp_path: Path) -> None:
    """reload_tenants applies a revoked key from the next request and keeps what the budgets
    spent; a file left with no key at all still requires one."""
    adm = admission(tmp_path)
    key = [(b"authorization", b"Bearer agent-key")]
    assert adm.authenticate(key).name == "agent"
    await adm.admit(request(adm, 100, 0))
    (tmp_path / "tenants.toml").write_text(AGENT.replace(hash_key("agent-key"), hash_key("new")))
    assert adm.reload_tenants() == ["agent"]
    with pytest.raises(InvalidApiKey):
        adm.authenticate(key)
    assert left(adm)["input_tokens_per_minute"] == 500
    (tmp_path / "tenants.toml").write_text("[tenants.agent]\nkeys = []\n")
    adm.reload_tenants()
    with pytest.raises(InvalidApiKey):
        adm.authenticate([])
    assert [tenant.name for tenant in adm.tenants.tenants()] == ["agent"]


async def test_a_queue_timeout_refunds_the_budgets(tmp_path: Path) -> None:
    """A request that times out in the queue (QueueTimeout) gives its tokens back."""
    adm = admission(tmp_path)
    await adm.admit(request(adm, 100, 0))
    timed = request(adm, 100, 100)
    timed = dataclasses.replace(timed, deadline=0.0)  # already past
    with pytest.raises(QueueTimeout):
        await adm.admit(timed)
    assert left(adm) == {"input_tokens_per_minute": 500, "output_tokens_per_minute": 300}
