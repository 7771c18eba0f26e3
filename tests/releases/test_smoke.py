"""The smoke gate's checks over observations: each failure is named by its check."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from llmd.releases.smoke import (
    DEGENERATE_MIN_TOKENS,
    GoldenAnswer,
    SmokeExpectations,
    SmokeObservations,
    TokenCount,
    degenerate,
    judge,
)

EXPECTED = SmokeExpectations("tiny", 1024, boot_timeout_s=60, latency_s=5)
GOOD = SmokeObservations(
    boot_s=3.0,
    served_models=("tiny",),
    max_model_len=1024,
    token_counts=(TokenCount("english", 19, 19), TokenCount("chat", 30, 30)),
    golden=(GoldenAnswer("hello", "Hello there, operator.", (5, 6, 7, 8), 0.4, "stop"),),
)


def failed(seen: SmokeObservations) -> str | None:
    return judge(seen, EXPECTED).failed_check


def test_a_healthy_engine_passes_every_check() -> None:
    """All five checks, in order, pass."""
    report = judge(GOOD, EXPECTED)
    assert report.passed and report.failed_check is None
    assert [c.name for c in report.checks] == [
        "boot", "model_name", "max_model_len", "token_count", "golden",
    ]  # fmt: skip


def test_an_engine_that_did_not_boot_is_judged_on_boot_alone() -> None:
    """Not healthy, or healthy past the timeout: only `boot`, failed, with the log tail."""
    report = judge(SmokeObservations(boot_s=None, boot_detail="exited 1"), EXPECTED, "OOM")
    assert [c.name for c in report.checks] == ["boot"] and report.failed_check == "boot"
    assert "exited 1" in report.summary() and "OOM" in report.summary()
    assert failed(dataclasses.replace(GOOD, boot_s=61.0)) == "boot"


def test_another_served_name_fails_model_name() -> None:
    """The engine serves `other`, the release says `tiny`."""
    assert failed(dataclasses.replace(GOOD, served_models=("other",))) == "model_name"


def test_another_context_length_fails_max_model_len() -> None:
    """The engine reports 2048, the release pins 1024; a release pinning none only reports."""
    assert failed(dataclasses.replace(GOOD, max_model_len=2048)) == "max_model_len"
    unpinned = dataclasses.replace(EXPECTED, max_model_len=None)
    assert judge(dataclasses.replace(GOOD, max_model_len=2048), unpinned).passed
    assert failed(dataclasses.replace(GOOD, max_model_len=None)) == "max_model_len"


def test_a_count_that_differs_fails_token_count() -> None:
    """One text counted 19 by llmd and 18 by the engine; a /tokenize error fails too."""
    counts = (TokenCount("english", 19, 18),)
    report = judge(dataclasses.replace(GOOD, token_counts=counts), EXPECTED)
    assert report.failed_check == "token_count"
    assert "english: llmd counts 19, engine 18" in report.summary()
    broken = (TokenCount("english", 19, None, "/tokenize failed: HTTP 500"),)
    assert failed(dataclasses.replace(GOOD, token_counts=broken)) == "token_count"


def test_counting_through_the_engine_passes_token_count() -> None:
    """No local tokenizer: llmd asks /tokenize itself, exact by construction."""
    counts = (TokenCount("english", None, 19),)
    report = judge(dataclasses.replace(GOOD, token_counts=counts), EXPECTED)
    assert report.passed and "through the engine" in report.checks[3].detail


def answer(**fields: object) -> SmokeObservations:
    return dataclasses.replace(GOOD, golden=(dataclasses.replace(GOOD.golden[0], **fields),))  # type: ignore[arg-type]


def test_golden_failures_name_the_prompt_and_the_cause() -> None:
    """Error, empty, whitespace, slow and degenerate answers each fail `golden`."""
    cases = {
        "HTTP 500": answer(error="HTTP 500: boom"),
        "empty answer": answer(text=""),
        "empty answer (finish_reason stop)": answer(text="  \n"),
        "over 5 s": answer(latency_s=5.5),
        "degenerate: token 9 is 10 of 10": answer(token_ids=(9,) * 10),
    }
    for expected_text, seen in cases.items():
        report = judge(seen, EXPECTED)
        assert report.failed_check == "golden", expected_text
        assert f"hello: {expected_text}" in report.summary() or expected_text in report.summary()
    assert failed(dataclasses.replace(GOOD, golden=())) == "golden"


@given(st.lists(st.integers(0, 50), max_size=40), st.floats(0.5, 0.99))
def test_degenerate_means_one_token_over_the_share_of_a_long_enough_answer(
    ids: list[int], share: float
) -> None:
    """Property: flagged exactly when >= 8 tokens and the most frequent one is over `share`."""
    top = max((ids.count(i) for i in set(ids)), default=0)
    expected = len(ids) >= DEGENERATE_MIN_TOKENS and top / len(ids) > share
    assert (degenerate(ids, share) is not None) == expected


def test_short_repetitive_answers_are_not_degenerate() -> None:
    """Seven copies of one token: too short to call (a real answer such as 'ok ok ok')."""
    assert degenerate([4] * (DEGENERATE_MIN_TOKENS - 1), 0.9) is None
