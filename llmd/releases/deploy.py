"""The deploy state machine (pure): `start` a plan, feed it events with `advance`, execute the
actions it returns. No clock, no I/O: the daemon executes; tests drive it directly.

    canary:  boot new -> smoke new -> share steps[0] .. steps[-1] (each held `step_s` and
             judged on every `Observed`) -> promoted (old stopped after its in-flight)
             any boot or smoke failure, broken figure, step without enough samples after
             `max_step_s`, or abort -> share 0, new stopped: rolled back
    replace: drain old -> stop old, boot new -> smoke new -> resume on new: promoted
             boot or smoke failure, or abort -> stop new, boot old -> smoke old -> resume on
             old: rolled back (old retried `old_boot_attempts` times, then failed)

Guarantees (property-tested in tests/releases/test_deploy.py):
- a deploy ends in promoted or rolled back whenever the old release boots again;
- on rollback the old release ends with all the traffic;
- the new release's share only rises until the end;
- nothing reaches the new release before its smoke gate passed.

Events that do not fit the phase (a late `Booted`, a stale `Observed`) are ignored. A step whose
work raised (`StepFailed`) is recorded with its error and taken as that step's failure: the same
way back to the old release.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeGuard

from llmd.releases.compare import Decision, Verdict, compare
from llmd.releases.deploy_events import (
    Abort,
    Action,
    Booted,
    BootEngine,
    DeployPhase,
    DeployPlan,
    DeployState,
    Drain,
    Drained,
    Event,
    Observed,
    RecordHistory,
    Resume,
    RunSmoke,
    SetShare,
    SmokeDone,
    StepFailed,
    StopEngine,
    Strategy,
)
from llmd.releases.figures import Figures

Transition = tuple[DeployState, list[Action]]


def start(plan: DeployPlan, at: float) -> Transition:
    """The first state and actions of `plan` at time `at`."""
    began = _history(plan, "deploy_started", steps=list(plan.steps))
    if plan.strategy is Strategy.CANARY:
        state = DeployState(plan, DeployPhase.BOOTING_NEW, serving=plan.old, step_began=at)
        return state, [began, BootEngine(plan.engine, plan.new)]
    state = DeployState(plan, DeployPhase.DRAINING_OLD, serving=None, step_began=at)
    return state, [began, Drain(plan.engine, plan.old)]


def advance(state: DeployState, event: Event) -> Transition:
    """The next state and the actions to execute after `event`."""
    plan = state.plan
    if state.done:
        return state, []
    if isinstance(event, Abort):
        return _abort(state, event)
    if isinstance(event, StepFailed):
        return _step_failed(state, event)
    if state.phase is DeployPhase.BOOTING_NEW and _booted(event, plan.new) and event.ok:
        return replace(state, phase=DeployPhase.SMOKING_NEW), [
            _history(plan, "booted", release=plan.new),
            RunSmoke(plan.engine, plan.new),
        ]
    if plan.strategy is Strategy.CANARY:
        return _canary(state, event)
    return _replace(state, event)


def _canary(state: DeployState, event: Event) -> Transition:
    plan = state.plan
    match event:
        case Booted(ok=False) if (
            state.phase is DeployPhase.BOOTING_NEW and event.release == plan.new
        ):
            return _canary_rollback(state, f"the new release did not boot: {event.detail}")
        case SmokeDone() if state.phase is DeployPhase.SMOKING_NEW and event.release == plan.new:
            if not event.passed:
                return _canary_rollback(state, _smoke_reason(event), smoke=event)
            return _enter_step(state, 0, event.at, baseline=None, passed=None)
        case Observed() if state.phase is DeployPhase.CANARY:
            return _judge(state, event)
    return state, []


def _judge(state: DeployState, event: Observed) -> Transition:
    """One comparison in a canary step: roll back on a broken figure; pass the step once it
    has been held `step_s` and the verdict promotes; roll back a step still unjudged after
    `max_step_s`."""
    plan = state.plan
    # At 100% the old release has no traffic: judge against its figures of the step before.
    baseline = event.old if state.share < 100 or state.baseline is None else state.baseline
    verdict = compare(baseline, event.new, plan.rules)
    state = replace(state, verdict=verdict)
    figures = {"old": baseline.to_dict(), "new": event.new.to_dict()}
    held = event.at - state.step_began
    if verdict.decision is Decision.ROLL_BACK:
        return _canary_rollback(state, verdict.reason, verdict=verdict, figures=figures)
    if verdict.decision is Decision.PROMOTE and held >= plan.step_s:
        return _enter_step(state, state.step + 1, event.at, baseline, (verdict, figures))
    if verdict.decision is Decision.HOLD and held >= plan.max_step_s:
        reason = f"step {state.step + 1} was not judged within {plan.max_step_s:g} s: "
        return _canary_rollback(state, reason + verdict.reason, verdict=verdict, figures=figures)
    return state, []


def _enter_step(
    state: DeployState,
    index: int,
    at: float,
    baseline: Figures | None,
    passed: tuple[Verdict, dict[str, Any]] | None,
) -> Transition:
    plan = state.plan
    actions: list[Action] = []
    if passed is None:
        actions.append(_history(plan, "smoke_passed", release=plan.new))
    else:
        verdict, figures = passed
        actions.append(
            _history(
                plan,
                "step_passed",
                step=state.step + 1,
                share=state.share,
                verdict=verdict.to_dict(),
                figures=figures,
            )
        )
    if index == len(plan.steps):
        promoted = replace(
            state, phase=DeployPhase.PROMOTED, serving=plan.new, reason="all steps held"
        )
        return promoted, [
            *actions,
            _history(plan, "promoted", reason=promoted.reason),
            StopEngine(plan.engine, plan.old, drain=True),
        ]
    share = plan.steps[index]
    stepped = replace(
        state, phase=DeployPhase.CANARY, step=index, share=share, step_began=at, baseline=baseline
    )
    return stepped, [
        *actions,
        SetShare(plan.engine, plan.new, share),
        _history(plan, "step_started", step=index + 1, share=share),
    ]


def _canary_rollback(
    state: DeployState,
    reason: str,
    *,
    smoke: SmokeDone | None = None,
    verdict: Verdict | None = None,
    figures: dict[str, Any] | None = None,
) -> Transition:
    plan = state.plan
    actions: list[Action] = []
    if smoke is not None:
        actions.append(_smoke_line(plan, smoke))
    if state.share:
        actions.append(SetShare(plan.engine, plan.new, 0))
    actions.append(StopEngine(plan.engine, plan.new, drain=state.share > 0))
    details: dict[str, Any] = {"reason": reason}
    if state.step >= 0:
        details.update(step=state.step + 1, share=state.share)
    if verdict is not None:
        details.update(verdict=verdict.to_dict(), figures=figures)
    actions.append(_history(plan, "rolled_back", **details))
    ended = replace(state, phase=DeployPhase.ROLLED_BACK, share=0, serving=plan.old, reason=reason)
    return ended, actions


def _replace(state: DeployState, event: Event) -> Transition:
    plan = state.plan
    phase = state.phase
    match event:
        case Drained() if phase is DeployPhase.DRAINING_OLD and event.release == plan.old:
            return replace(state, phase=DeployPhase.BOOTING_NEW), [
                _history(plan, "drained", release=plan.old),
                StopEngine(plan.engine, plan.old, drain=False),
                BootEngine(plan.engine, plan.new),
            ]
        case Booted(ok=False) if phase is DeployPhase.BOOTING_NEW and event.release == plan.new:
            return _restore_old(state, f"the new release did not boot: {event.detail}")
        case SmokeDone() if phase is DeployPhase.SMOKING_NEW and event.release == plan.new:
            if not event.passed:
                return _restore_old(state, _smoke_reason(event), smoke=event)
            promoted = replace(
                state,
                phase=DeployPhase.PROMOTED,
                share=100,
                serving=plan.new,
                reason="smoke gate passed",
            )
            return promoted, [
                _smoke_line(plan, event),
                Resume(plan.engine, plan.new),
                _history(plan, "promoted", reason=promoted.reason),
            ]
        case Booted() if phase is DeployPhase.BOOTING_OLD and event.release == plan.old:
            if not event.ok:
                return _retry_old(state, f"the old release did not boot again: {event.detail}")
            return replace(state, phase=DeployPhase.SMOKING_OLD), [RunSmoke(plan.engine, plan.old)]
        case SmokeDone() if phase is DeployPhase.SMOKING_OLD and event.release == plan.old:
            if not event.passed:
                return _retry_old(state, "the old release failed its smoke gate: " + event.detail)
            ended = replace(state, phase=DeployPhase.ROLLED_BACK, share=0, serving=plan.old)
            return ended, [
                Resume(plan.engine, plan.old),
                _history(plan, "rolled_back", reason=state.reason),
            ]
    return state, []


def _restore_old(state: DeployState, reason: str, *, smoke: SmokeDone | None = None) -> Transition:
    """Replace failed (or was aborted) after the old engine stopped: stop the new, boot the old."""
    plan = state.plan
    actions: list[Action] = [] if smoke is None else [_smoke_line(plan, smoke)]
    restoring = replace(state, phase=DeployPhase.BOOTING_OLD, old_boots=1, reason=reason)
    return restoring, [
        *actions,
        _history(plan, "restoring_old", reason=reason),
        StopEngine(plan.engine, plan.new, drain=False),
        BootEngine(plan.engine, plan.old),
    ]


def _retry_old(state: DeployState, why: str) -> Transition:
    plan = state.plan
    actions: list[Action] = [StopEngine(plan.engine, plan.old, drain=False)]
    if state.old_boots < plan.old_boot_attempts:
        retry = replace(state, phase=DeployPhase.BOOTING_OLD, old_boots=state.old_boots + 1)
        return retry, [*actions, BootEngine(plan.engine, plan.old)]
    reason = f"{state.reason}; then {why} ({state.old_boots} attempts)"
    failed = replace(state, phase=DeployPhase.FAILED, serving=None, reason=reason)
    return failed, [*actions, _history(plan, "failed", reason=reason)]


def _abort(state: DeployState, event: Abort) -> Transition:
    reason = f"aborted: {event.reason}"
    plan = state.plan
    if plan.strategy is Strategy.CANARY:
        return _canary_rollback(state, reason)
    if state.phase is DeployPhase.DRAINING_OLD:  # nothing changed yet: the old serves again
        ended = replace(state, phase=DeployPhase.ROLLED_BACK, serving=plan.old, reason=reason)
        return ended, [Resume(plan.engine, plan.old), _history(plan, "rolled_back", reason=reason)]
    if state.phase in (DeployPhase.BOOTING_NEW, DeployPhase.SMOKING_NEW):
        return _restore_old(state, reason)
    return state, []  # already bringing the old release back


def _step_failed(state: DeployState, event: StepFailed) -> Transition:
    """The executor's work for a step raised: recorded with the error, then the way back to
    the old release that a failure of that step takes. A failure of work the phase no longer
    waits for (a step of the other release) is ignored."""
    plan, phase = state.plan, state.phase
    on_new = phase in (DeployPhase.BOOTING_NEW, DeployPhase.SMOKING_NEW, DeployPhase.CANARY)
    if event.release != (plan.new if on_new else plan.old):
        return state, []
    why = f"the {event.step} step of release {event.release} raised: {event.error}"
    line = _history(
        plan, "step_failed", failed_step=event.step, release=event.release, error=event.error
    )
    if plan.strategy is Strategy.CANARY:
        ended, actions = _canary_rollback(state, why)
    elif phase is DeployPhase.DRAINING_OLD:  # nothing changed yet: the old serves again
        ended = replace(state, phase=DeployPhase.ROLLED_BACK, serving=plan.old, reason=why)
        actions = [Resume(plan.engine, plan.old), _history(plan, "rolled_back", reason=why)]
    elif on_new:
        ended, actions = _restore_old(state, why)
    else:
        ended, actions = _retry_old(state if state.reason else replace(state, reason=why), why)
    return ended, [line, *actions]


def _booted(event: Event, release: str) -> TypeGuard[Booted]:
    return isinstance(event, Booted) and event.release == release


def _smoke_reason(event: SmokeDone) -> str:
    return f"the new release failed its smoke gate ({event.failed_check}): {event.detail}"


def _smoke_line(plan: DeployPlan, event: SmokeDone) -> RecordHistory:
    kind = "smoke_passed" if event.passed else "smoke_failed"
    return _history(
        plan,
        kind,
        release=event.release,
        failed_check=event.failed_check or None,
        detail=event.detail or None,
    )


def _history(plan: DeployPlan, event: str, **details: Any) -> RecordHistory:
    return RecordHistory(plan.history_line(event, **details))
