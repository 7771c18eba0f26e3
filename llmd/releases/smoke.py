"""The smoke gate's checks (pure): observations gathered from a freshly booted engine (by
llmd/releases/smoke_runner.py) judged against what the release says, into a report that names
the failed check.

Checks, in order (a release that did not boot is judged on `boot` alone):

    boot           healthy within the boot timeout
    model_name     the engine serves the release's served model name
    max_model_len  what the engine reports equals what the release pins: `--max-model-len` in
                   its args, else the model's `max_position_embeddings`
    token_count    llmd's local count equals the engine's `/tokenize` on fixed texts, so context
                   validation stays exact
    golden         each golden prompt answers without error, non-empty, not degenerate
                   (`degenerate`), within the latency bound
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

DEGENERATE_MIN_TOKENS = 8


@dataclasses.dataclass(frozen=True)
class TokenCount:
    """One fixed text counted by llmd (`local`: None when llmd would ask the engine itself,
    which is exact by construction) and by the engine's /tokenize; `error` if asking failed."""

    label: str
    local: int | None
    engine: int | None
    error: str = ""


@dataclasses.dataclass(frozen=True)
class GoldenAnswer:
    """One golden prompt's answer: its text, the engine's token ids of the text, how long the
    request took (s), its finish reason, and `error` when it failed."""

    label: str
    text: str
    token_ids: tuple[int, ...]
    latency_s: float
    finish_reason: str | None = None
    error: str = ""


@dataclasses.dataclass(frozen=True)
class SmokeObservations:
    """What the runner saw. `boot_s`: seconds from start to healthy (None: not healthy within
    the timeout, or exited); `served_models` and `max_model_len` from /v1/models."""

    boot_s: float | None
    served_models: tuple[str, ...] = ()
    max_model_len: int | None = None
    token_counts: tuple[TokenCount, ...] = ()
    golden: tuple[GoldenAnswer, ...] = ()
    boot_detail: str = ""


@dataclasses.dataclass(frozen=True)
class SmokeExpectations:
    """What the release says: its served name, its context length (None when it pins none),
    the boot timeout and golden latency bound (s), the degenerate share."""

    served_model_name: str
    max_model_len: int | None
    boot_timeout_s: float
    latency_s: float
    degenerate_share: float = 0.9


@dataclasses.dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    detail: str


@dataclasses.dataclass(frozen=True)
class SmokeReport:
    """Every check's result and the engine's last output lines (given by whoever ran it)."""

    checks: tuple[CheckResult, ...]
    engine_log_tail: str = ""

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def failed_check(self) -> str | None:
        """The first failed check's name, or None."""
        return next((c.name for c in self.checks if not c.passed), None)

    def summary(self) -> str:
        """One line per check, then the engine's last lines when a check failed."""
        lines = [f"{'ok  ' if c.passed else 'FAIL'} {c.name}: {c.detail}" for c in self.checks]
        if not self.passed and self.engine_log_tail:
            lines += ["engine's last lines:", self.engine_log_tail]
        return "\n".join(lines)


def judge(
    seen: SmokeObservations, expected: SmokeExpectations, engine_log_tail: str = ""
) -> SmokeReport:
    """The report of `seen` against `expected`."""
    boot = check_boot(seen, expected)
    if not boot.passed:
        return SmokeReport((boot,), engine_log_tail)
    checks = (
        boot,
        check_model_name(seen, expected),
        check_max_model_len(seen, expected),
        check_token_counts(seen.token_counts),
        check_golden(seen.golden, expected),
    )
    return SmokeReport(checks, engine_log_tail)


def check_boot(seen: SmokeObservations, expected: SmokeExpectations) -> CheckResult:
    limit = expected.boot_timeout_s
    if seen.boot_s is None:
        detail = seen.boot_detail or f"not healthy within {limit:g} s"
        return CheckResult("boot", False, detail)
    if seen.boot_s > limit:
        return CheckResult("boot", False, f"healthy after {seen.boot_s:.1f} s, over {limit:g} s")
    return CheckResult("boot", True, f"healthy after {seen.boot_s:.1f} s (limit {limit:g} s)")


def check_model_name(seen: SmokeObservations, expected: SmokeExpectations) -> CheckResult:
    name = expected.served_model_name
    served = ", ".join(seen.served_models) or "nothing"
    if name in seen.served_models:
        return CheckResult("model_name", True, f"serves {name!r}")
    return CheckResult("model_name", False, f"serves {served}, not {name!r}")


def check_max_model_len(seen: SmokeObservations, expected: SmokeExpectations) -> CheckResult:
    want, got = expected.max_model_len, seen.max_model_len
    if got is None:
        return CheckResult("max_model_len", False, "the engine reports no max_model_len")
    if want is None:
        return CheckResult("max_model_len", True, f"{got} (the release pins none)")
    if got != want:
        return CheckResult("max_model_len", False, f"the engine says {got}, the release {want}")
    return CheckResult("max_model_len", True, f"{got}")


def check_token_counts(counts: Sequence[TokenCount]) -> CheckResult:
    failures = []
    compared = 0
    for count in counts:
        if count.error:
            failures.append(f"{count.label}: {count.error}")
        elif count.local is not None:
            compared += 1
            if count.local != count.engine:
                failures.append(f"{count.label}: llmd counts {count.local}, engine {count.engine}")
    if failures:
        return CheckResult("token_count", False, "; ".join(failures))
    if not compared:
        return CheckResult(
            "token_count", True, "llmd counts through the engine's /tokenize (exact)"
        )
    return CheckResult("token_count", True, f"{compared} texts counted alike")


def check_golden(answers: Sequence[GoldenAnswer], expected: SmokeExpectations) -> CheckResult:
    failures = []
    for answer in answers:
        problem = golden_problem(answer, expected)
        if problem:
            failures.append(f"{answer.label}: {problem}")
    if not answers:
        return CheckResult("golden", False, "no golden prompt was run")
    if failures:
        return CheckResult("golden", False, "; ".join(failures))
    slowest = max(a.latency_s for a in answers)
    return CheckResult(
        "golden",
        True,
        f"{len(answers)} answers, slowest {slowest:.2f} s (bound {expected.latency_s:g} s)",
    )


def golden_problem(answer: GoldenAnswer, expected: SmokeExpectations) -> str | None:
    """What is wrong with one golden answer, or None."""
    if answer.error:
        return answer.error
    if answer.latency_s > expected.latency_s:
        return f"took {answer.latency_s:.2f} s, over {expected.latency_s:g} s"
    if not answer.text.strip():
        return f"empty answer (finish_reason {answer.finish_reason})"
    return degenerate(answer.token_ids, expected.degenerate_share)


def degenerate(token_ids: Sequence[int], share: float) -> str | None:
    """Why an answer is degenerate (one token over `share` of at least DEGENERATE_MIN_TOKENS),
    or None: a model stuck on one token, e.g. broken weights under greedy decoding. Token
    identity is the engine's own tokenization of the answer (`token_ids`)."""
    if len(token_ids) < DEGENERATE_MIN_TOKENS:
        return None
    token, count = Counter(token_ids).most_common(1)[0]
    if count / len(token_ids) > share:
        return f"degenerate: token {token} is {count} of {len(token_ids)} tokens"
    return None
