"""The deploy state machine, driven by random executors (property tests) and by hand."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.releases.deploy import advance, start
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
from llmd.releases.figures import Figures, LatencyBucket

OLD, NEW = "r1", "r2"


def figures(answered: int = 200, errors: int = 0) -> Figures:
    return Figures(
        answered=answered,
        errors=errors,
        ttft={"<=512": LatencyBucket(answered, 0.2)},
        output_tokens={16: answered - errors},
    )


HEALTHY, BROKEN, FEW = figures(), figures(errors=40), figures(answered=5)


def plan(strategy: Strategy, **fields: object) -> DeployPlan:
    values: dict[str, object] = {"step_s": 10.0, "max_step_s": 60.0}
    values.update(fields)
    return DeployPlan("d1", "main", OLD, NEW, strategy, **values)  # type: ignore[arg-type]


Trace = list[tuple[Event | None, list[Action]]]
# The strategies of every step, built once: built in each draw, Hypothesis made and checked
# them again each time (about a sixth of the module's CPU; the draws are the same).
STRATEGIES = st.sampled_from(Strategy)
STEPS = st.sets(st.integers(1, 99), min_size=1, max_size=4)
GAP_S = st.floats(0.5, 30.0)
ATTEMPTS = st.integers(1, 3)
ONE_IN = {n: st.integers(0, n - 1) for n in (4, 5, 10, 30)}  # 0 to n - 1
# Late, stray or mistaken events, made at a clock.
NOISE: st.SearchStrategy[Callable[[float], Event]] = st.sampled_from(
    [
        lambda clock: Abort(clock, "operator"),
        lambda clock: Booted(OLD, True, clock),
        lambda clock: Booted(NEW, True, clock),
        lambda clock: SmokeDone(NEW, True, clock),
        lambda clock: Drained(NEW, clock),
        lambda clock: Observed(clock, HEALTHY, HEALTHY),
        lambda clock: StepFailed("boot", NEW, clock, "late"),
    ]
)
NEW_FIGURES = st.sampled_from([*[HEALTHY] * 12, FEW, BROKEN])
OLD_FIGURES = st.sampled_from([HEALTHY, HEALTHY, HEALTHY, FEW])


@st.composite
def deploys(draw: st.DrawFn) -> tuple[DeployState, Trace, bool]:
    """A deploy run to its end by a random executor: outcomes of boots, smokes and canary
    figures drawn at random (a step's work may raise), with aborts and stray events mixed in.
    Also returns whether the old release was ever refused a boot or smoke, or its step raised
    (then `failed` is a possible end)."""
    strategy = draw(STRATEGIES)
    steps = (*tuple(sorted(draw(STEPS))), 100)
    attempts = draw(ATTEMPTS)
    the_plan = plan(strategy, steps=steps, old_boot_attempts=attempts)
    state, actions = start(the_plan, 0.0)
    trace: Trace = [(None, actions)]
    clock = 0.0
    old_failed = False
    for _ in range(2000):
        if state.done:
            break
        clock += draw(GAP_S)
        if draw(ONE_IN[30]) == 0:  # noise: late, stray or mistaken events
            event: Event = draw(NOISE)(clock)
        else:
            event = expected_event(draw, state, clock)
        if (
            isinstance(event, Booted | SmokeDone)
            and event.release == OLD
            and not (event.ok if isinstance(event, Booted) else event.passed)
        ) or (
            isinstance(event, StepFailed)
            and event.release == OLD
            and state.phase in (DeployPhase.BOOTING_OLD, DeployPhase.SMOKING_OLD)
        ):
            old_failed = True
        state, actions = advance(state, event)
        trace.append((event, actions))
    return state, trace, old_failed


def expected_event(draw: st.DrawFn, state: DeployState, clock: float) -> Event:
    """What an executor would report next in this phase, its outcome drawn."""
    phase = state.phase
    if phase is not DeployPhase.CANARY and draw(ONE_IN[10]) == 0:  # the step's work raised
        on_new = phase in (DeployPhase.BOOTING_NEW, DeployPhase.SMOKING_NEW)
        return StepFailed("boot", NEW if on_new else OLD, clock, "RuntimeError('boom')")
    if phase is DeployPhase.BOOTING_NEW:
        return Booted(NEW, draw(ONE_IN[5]) > 0, clock, "exit 1")
    if phase is DeployPhase.SMOKING_NEW:
        return SmokeDone(NEW, draw(ONE_IN[5]) > 0, clock, "golden", "empty answer")
    if phase is DeployPhase.DRAINING_OLD:
        return Drained(OLD, clock)
    if phase is DeployPhase.BOOTING_OLD:
        return Booted(OLD, draw(ONE_IN[4]) > 0, clock)
    if phase is DeployPhase.SMOKING_OLD:
        return SmokeDone(OLD, draw(ONE_IN[4]) > 0, clock)
    new = draw(NEW_FIGURES)
    return Observed(clock, draw(OLD_FIGURES), new)


def actions_of(trace: Trace) -> list[Action]:
    return [action for _, actions in trace for action in actions]


@settings(max_examples=300)
@given(deploys())
def test_a_deploy_always_ends_promoted_or_rolled_back(run: tuple[DeployState, Trace, bool]) -> None:
    """Property: it ends; in promoted or rolled back unless the old release itself failed to
    come back (only `replace` stops it); exactly one final history line, the last one."""
    state, trace, old_failed = run
    assert state.done
    allowed = {DeployPhase.PROMOTED, DeployPhase.ROLLED_BACK} | (
        {DeployPhase.FAILED} if old_failed else set()
    )
    assert state.phase in allowed
    lines = [a.line["event"] for a in actions_of(trace) if isinstance(a, RecordHistory)]
    assert lines[0] == "deploy_started"
    finals = [e for e in lines if e in ("promoted", "rolled_back", "failed")]
    assert finals == [str(state.phase)] and lines[-1] == str(state.phase)


@settings(max_examples=300)
@given(deploys())
def test_on_rollback_the_old_release_ends_with_all_traffic(
    run: tuple[DeployState, Trace, bool],
) -> None:
    """Property: rolled back means share 0 and the old release serving; the last traffic
    action gives everything back to the old release; the new engine is stopped."""
    state, trace, _ = run
    if state.phase is not DeployPhase.ROLLED_BACK:
        return
    assert state.share == 0 and state.serving == OLD
    actions = actions_of(trace)
    traffic = [a for a in actions if isinstance(a, SetShare | Resume)]
    if traffic:
        last = traffic[-1]
        assert last == SetShare("main", NEW, 0) or last == Resume("main", OLD)
    assert Resume("main", NEW) not in actions
    if any(isinstance(a, BootEngine) and a.release == NEW for a in actions):
        stops = [a for a in actions if isinstance(a, StopEngine) and a.release == NEW]
        boots = [i for i, a in enumerate(actions) if a == BootEngine("main", NEW)]
        assert stops and actions.index(stops[-1]) > boots[-1]


@settings(max_examples=300)
@given(deploys())
def test_shares_only_step_up_until_the_end(run: tuple[DeployState, Trace, bool]) -> None:
    """Property: the new release's shares rise step by step; only a rollback sets 0, last."""
    state, trace, _ = run
    shares = [a.percent for a in actions_of(trace) if isinstance(a, SetShare)]
    if shares and shares[-1] == 0:
        assert state.phase is DeployPhase.ROLLED_BACK
        shares = shares[:-1]
    assert all(b > a for a, b in itertools.pairwise(shares))
    assert set(shares) <= set(state.plan.steps)
    if state.phase is DeployPhase.PROMOTED and state.plan.strategy is Strategy.CANARY:
        assert shares == list(state.plan.steps)


@settings(max_examples=300)
@given(deploys())
def test_nothing_reaches_the_new_release_before_its_smoke_gate_passed(
    run: tuple[DeployState, Trace, bool],
) -> None:
    """Property: no positive share and no resume on the new release until SmokeDone(passed)
    for it; a failed smoke gate gives it no traffic at all."""
    _, trace, _ = run
    passed = False
    for event, actions in trace:
        if isinstance(event, SmokeDone) and event.release == NEW and event.passed:
            passed = True
        for action in actions:
            if (isinstance(action, SetShare) and action.percent > 0) or action == Resume(
                "main", NEW
            ):
                assert passed


@settings(max_examples=200)
@given(deploys())
def test_a_broken_figure_rolls_back_at_once(run: tuple[DeployState, Trace, bool]) -> None:
    """Property: an Observed whose new figures break a threshold ends the deploy right there."""
    _, trace, _ = run
    for index, (event, actions) in enumerate(trace):
        if isinstance(event, Observed) and event.new is BROKEN and actions:
            assert any(
                isinstance(a, RecordHistory) and a.line["event"] == "rolled_back" for a in actions
            )
            assert index == len(trace) - 1


def test_a_healthy_canary_walks_every_step_and_stops_the_old() -> None:
    """Boot, smoke, 5 -> 25 -> 50 -> 100 (each held 10 s), then promoted; the 100% step is
    judged against the old release's figures from the 50% step."""
    state, actions = start(plan(Strategy.CANARY), 0.0)
    assert actions[1:] == [BootEngine("main", NEW)]
    state, actions = advance(state, Booted(NEW, True, 1.0))
    assert actions[1:] == [RunSmoke("main", NEW)]
    state, actions = advance(state, SmokeDone(NEW, True, 2.0))
    assert SetShare("main", NEW, 5) in actions and state.share == 5
    state, actions = advance(state, Observed(5.0, HEALTHY, HEALTHY))
    assert actions == [] and state.verdict is not None  # promote, but held only 3 s
    for at, share in ((12.0, 25), (22.0, 50), (32.0, 100)):
        state, actions = advance(state, Observed(at, HEALTHY, HEALTHY))
        assert SetShare("main", NEW, share) in actions
    assert state.baseline == HEALTHY
    empty = Figures()  # the old release has no traffic at 100%
    state, actions = advance(state, Observed(43.0, empty, HEALTHY))
    assert state.phase is DeployPhase.PROMOTED and state.serving == NEW
    assert actions[-1] == StopEngine("main", OLD, drain=True)
    step_lines = [a.line for a in actions if isinstance(a, RecordHistory)]
    assert step_lines[0]["event"] == "step_passed" and step_lines[0]["share"] == 100
    assert step_lines[0]["figures"]["old"]["answered"] == 200


def test_a_canary_step_without_enough_samples_rolls_back_after_max_step_s() -> None:
    """Too little traffic to judge: hold, then roll back at max_step_s with the reason."""
    state, _ = start(plan(Strategy.CANARY), 0.0)
    state, _ = advance(state, Booted(NEW, True, 1.0))
    state, _ = advance(state, SmokeDone(NEW, True, 2.0))
    state, actions = advance(state, Observed(50.0, HEALTHY, FEW))
    assert actions == []
    state, actions = advance(state, Observed(63.0, HEALTHY, FEW))
    assert state.phase is DeployPhase.ROLLED_BACK
    assert "was not judged within 60 s" in state.reason
    assert actions[:2] == [SetShare("main", NEW, 0), StopEngine("main", NEW, drain=True)]


def test_a_replace_whose_smoke_gate_fails_boots_the_old_again() -> None:
    """Drain, stop old, boot new, smoke fails: stop new, boot old, smoke old, resume old."""
    state, actions = start(plan(Strategy.REPLACE), 0.0)
    assert actions[1:] == [Drain("main", OLD)] and state.serving is None
    state, actions = advance(state, Drained(OLD, 1.0))
    assert actions[1:] == [StopEngine("main", OLD, drain=False), BootEngine("main", NEW)]
    state, _ = advance(state, Booted(NEW, True, 2.0))
    state, actions = advance(state, SmokeDone(NEW, False, 3.0, "token_count", "llmd 19, engine 18"))
    assert actions[-2:] == [StopEngine("main", NEW, drain=False), BootEngine("main", OLD)]
    assert actions[0].line["failed_check"] == "token_count"  # type: ignore[union-attr]
    state, actions = advance(state, Booted(OLD, True, 4.0))
    assert actions == [RunSmoke("main", OLD)]
    state, actions = advance(state, SmokeDone(OLD, True, 5.0))
    assert state.phase is DeployPhase.ROLLED_BACK and actions[0] == Resume("main", OLD)
    assert "token_count" in actions[1].line["reason"]  # type: ignore[union-attr]


def test_a_replace_gives_up_after_the_old_release_fails_its_attempts() -> None:
    """The old release refuses to boot 3 times: failed, with both reasons."""
    state, _ = start(plan(Strategy.REPLACE), 0.0)
    state, _ = advance(state, Drained(OLD, 1.0))
    state, _ = advance(state, Booted(NEW, False, 2.0, "CUDA out of memory"))
    for at in (3.0, 4.0, 5.0):
        assert state.phase is DeployPhase.BOOTING_OLD
        state, _actions = advance(state, Booted(OLD, False, at, "exit 1"))
    assert state.phase is DeployPhase.FAILED and state.serving is None
    assert "CUDA out of memory" in state.reason and "3 attempts" in state.reason


def test_an_abort_while_draining_resumes_the_old_release() -> None:
    """Nothing was stopped yet: resume the old engine, rolled back."""
    state, _ = start(plan(Strategy.REPLACE), 0.0)
    state, actions = advance(state, Abort(1.0, "operator"))
    assert state.phase is DeployPhase.ROLLED_BACK and actions[0] == Resume("main", OLD)


def test_the_snapshot_shows_step_share_and_verdict() -> None:
    """What status and llmd-top read of a deploy in progress."""
    state, _ = start(plan(Strategy.CANARY), 0.0)
    state, _ = advance(state, Booted(NEW, True, 1.0))
    state, _ = advance(state, SmokeDone(NEW, True, 2.0))
    state, _ = advance(state, Observed(3.0, HEALTHY, HEALTHY))
    snapshot = state.as_snapshot()
    assert (snapshot["phase"], snapshot["step"], snapshot["share"]) == ("canary", 1, 5)
    assert snapshot["verdict"]["decision"] == "promote"  # type: ignore[index]
    assert dataclasses.replace(state, phase=DeployPhase.PROMOTED).done


def test_a_replace_step_that_raised_restores_the_old_release_and_records_the_error() -> None:
    """A boot of the new release that raised: `step_failed` with the error is recorded, the
    old release boots again and serves; one that raised while draining resumes the old."""
    state, _ = start(plan(Strategy.REPLACE), 0.0)
    state, _ = advance(state, Drained(OLD, 1.0))
    state, actions = advance(state, StepFailed("boot", NEW, 2.0, "OSError('disk')"))
    line = actions[0].line  # type: ignore[union-attr]
    assert (line["event"], line["failed_step"], line["error"]) == (
        "step_failed",
        "boot",
        "OSError('disk')",
    )
    assert actions[-1] == BootEngine("main", OLD) and state.phase is DeployPhase.BOOTING_OLD
    assert "raised: OSError('disk')" in state.reason
    state, _ = start(plan(Strategy.REPLACE), 0.0)
    state, actions = advance(state, StepFailed("drain", OLD, 1.0, "boom"))
    assert state.phase is DeployPhase.ROLLED_BACK and Resume("main", OLD) in actions


def test_a_canary_step_that_raised_rolls_back_and_a_stale_failure_is_ignored() -> None:
    """The canary's smoke raised: rolled back with the error; a failure of the old release's
    step while the new one boots is not this phase's and changes nothing."""
    state, _ = start(plan(Strategy.CANARY), 0.0)
    same, actions = advance(state, StepFailed("drain", OLD, 0.5, "stale"))
    assert same == state and actions == []
    state, _ = advance(state, Booted(NEW, True, 1.0))
    state, actions = advance(state, StepFailed("smoke", NEW, 2.0, "KeyError('x')"))
    assert (
        state.phase is DeployPhase.ROLLED_BACK and StopEngine("main", NEW, drain=False) in actions
    )
    events = [a.line["event"] for a in actions if isinstance(a, RecordHistory)]
    assert events == ["step_failed", "rolled_back"]
