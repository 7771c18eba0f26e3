"""The smoke gate run against the simulator engine on a Unix socket: a healthy release passes,
and each injected fault is caught by the check that names it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmd.releases.golden import BUILTIN_GOLDEN, GoldenPrompt
from llmd.releases.smoke import SmokeExpectations, SmokeReport
from llmd.releases.smoke_runner import run_smoke, wait_healthy
from llmd.validation.counter import LocalCounter
from tests.support.model import ensure_tiny_variant
from tests.support.sim_process import SimProcess


@pytest.fixture(scope="module")
def counter(tiny_model_dir: Path) -> Iterator[LocalCounter]:
    """llmd's local counter on the tiny model's tokenizer."""
    loaded = LocalCounter.load(str(tiny_model_dir))
    yield loaded
    loaded.close()


def expect(**fields: object) -> SmokeExpectations:
    values: dict[str, object] = {
        "served_model_name": "tiny",
        "max_model_len": None,
        "boot_timeout_s": 30.0,
        "latency_s": 10.0,
    }
    values.update(fields)
    return SmokeExpectations(**values)  # type: ignore[arg-type]


async def smoke_sim(
    model: Path,
    counter: LocalCounter,
    *sim_args: str,
    golden: tuple[GoldenPrompt, ...] = BUILTIN_GOLDEN,
    headers: dict[str, str] | None = None,
    stop_timeout_s: float = 10.0,
    **expected: object,
) -> SmokeReport:
    """Start the simulator with `sim_args`, wait for it, run the gate (its requests with
    `headers`), stop it (SIGKILL after `stop_timeout_s`)."""
    sim = SimProcess.start(model, *sim_args)
    try:
        expectations = expect(**expected)
        alive = lambda: sim.process.poll() is None  # noqa: E731
        boot_s = await wait_healthy(sim.socket, expectations.boot_timeout_s, alive)
        return await run_smoke(
            sim.socket,
            expectations,
            boot_s=boot_s,
            counter=counter,
            golden=golden,
            max_tokens=16,
            engine_log_tail=sim.log()[-500:],
            headers=headers,
        )
    finally:
        sim.stop(stop_timeout_s)


async def test_a_healthy_release_passes(tiny_model_dir: Path, counter: LocalCounter) -> None:
    """Boot, name, context, counts on five texts, three golden answers: all pass."""
    report = await smoke_sim(tiny_model_dir, counter, "--max-model-len", "1024", max_model_len=1024)
    assert report.passed, report.summary()
    assert "5 texts counted alike" in report.summary()


async def test_an_engine_behind_an_api_key_is_smoked_with_it(
    tiny_model_dir: Path, counter: LocalCounter
) -> None:
    """An engine run with --api-key passes the gate when its key goes with each request, and
    fails it without (vLLM answers 401 on /v1)."""
    key = ("--api-key", "release-key")
    passed = await smoke_sim(
        tiny_model_dir, counter, *key, headers={"Authorization": "Bearer release-key"}
    )
    assert passed.passed, passed.summary()
    refused = await smoke_sim(tiny_model_dir, counter, *key)
    assert not refused.passed and refused.failed_check == "model_name", refused.summary()


async def test_a_tokenizer_llmd_does_not_count_with_fails_token_count(
    counter: LocalCounter,
) -> None:
    """The engine serves a variant with another tokenizer; llmd counts with the tiny one."""
    report = await smoke_sim(ensure_tiny_variant(7), counter)
    assert report.failed_check == "token_count", report.summary()
    assert [c.name for c in report.checks if not c.passed] == ["token_count"]


async def test_another_served_name_fails_model_name(
    tiny_model_dir: Path, counter: LocalCounter
) -> None:
    """The release says `tiny-v2`, the engine serves `tiny`."""
    report = await smoke_sim(tiny_model_dir, counter, served_model_name="tiny-v2")
    assert report.failed_check == "model_name", report.summary()
    assert "serves tiny, not 'tiny-v2'" in report.summary()


async def test_another_context_length_fails_max_model_len(
    tiny_model_dir: Path, counter: LocalCounter
) -> None:
    """The release pins 1024, the engine runs with 512."""
    report = await smoke_sim(tiny_model_dir, counter, "--max-model-len", "512", max_model_len=1024)
    assert report.failed_check == "max_model_len", report.summary()


async def test_a_slow_release_fails_golden_on_latency(
    tiny_model_dir: Path, counter: LocalCounter
) -> None:
    """Each generation delayed 0.75 s against a 0.5 s bound."""
    report = await smoke_sim(
        tiny_model_dir, counter, "--fault-request", "delay:0.75", latency_s=0.5
    )
    assert report.failed_check == "golden", report.summary()
    assert "over 0.5 s" in report.summary()


async def test_an_erroring_release_fails_golden(
    tiny_model_dir: Path, counter: LocalCounter
) -> None:
    """Every generation answered 500."""
    report = await smoke_sim(tiny_model_dir, counter, "--fault-error-rate", "1.0")
    assert report.failed_check == "golden", report.summary()
    assert "HTTP 500" in report.summary()


async def test_a_hung_release_fails_golden_without_hanging_the_gate(
    tiny_model_dir: Path, counter: LocalCounter
) -> None:
    """A generation that never answers ends at twice the bound plus 5 s."""
    report = await smoke_sim(
        tiny_model_dir, counter, "--fault-request", "hang", latency_s=0.5,
        golden=BUILTIN_GOLDEN[:1],
        stop_timeout_s=1.0,  # a stop waits for the hung request (listen.py's STOP_GRACE_S)
    )  # fmt: skip
    assert report.failed_check == "golden", report.summary()
    assert "no answer within 6 s" in report.summary()


async def test_a_release_that_boots_too_slowly_fails_boot(
    tiny_model_dir: Path, counter: LocalCounter
) -> None:
    """Healthy only after 30 s against a 1 s boot timeout: judged on boot alone."""
    report = await smoke_sim(
        tiny_model_dir, counter, "--fault-boot-delay", "30", boot_timeout_s=1.0
    )
    assert [c.name for c in report.checks] == ["boot"] and not report.passed


async def test_a_release_that_exits_while_booting_fails_boot_at_once(
    tiny_model_dir: Path, counter: LocalCounter
) -> None:
    """The engine exits 3 during boot: the wait ends when the process does, with its log."""
    report = await smoke_sim(tiny_model_dir, counter, "--fault-boot-exit", "3")
    assert report.failed_check == "boot"
    assert "engine's last lines" in report.summary()
