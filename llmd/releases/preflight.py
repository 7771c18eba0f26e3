"""Whether a deploy may start: the checks that refuse it, with the reason, before anything
changes (another deploy or operator action under way, the engine neither serving nor asleep
on demand, the release running already or unable to boot, a canary whose tokenizer differs from
the serving one, a canary of an asleep engine)."""

from __future__ import annotations

from llmd.errors import ActionRefused
from llmd.releases.deploy_events import Strategy
from llmd.releases.diff import tokenizer_changes
from llmd.releases.position import boot_table, cannot_boot
from llmd.releases.steps import DeployHost
from llmd.releases.store import ReleaseStore
from llmd.supervisor.state import EnginePhase


def check_deployable(
    host: DeployHost, store: ReleaseStore, name: str, old: str, new: str, strategy: Strategy
) -> None:
    """Refuse deploying release `new` over `old` on engine `name` by `strategy` when it
    cannot go well. Raises ActionRefused (the reason), ReleaseError (no such release, or one
    that cannot replace this engine's table: another served model name, a secret that
    differs).

    A canary needs the serving release's tokenizer: llmd counts both releases' prompts with
    its one tokenizer for the model (the context check must be exact on either), so a release
    whose tokenizer files or chat template differ goes by `replace`, after which llmd counts
    with the new tokenizer."""
    if host.actions.under_way is not None:
        raise ActionRefused(f"deploy refused: a {host.actions.under_way} is under way")
    engine = host.state.fleet.engines[name]
    asleep = engine.phase is EnginePhase.ASLEEP
    if asleep and strategy is Strategy.CANARY:
        raise ActionRefused(
            f"deploy refused: engine {name} is asleep, and a canary would boot beside it; "
            f"deploy by replace (it boots the release when next woken) or `llmd wake --engine "
            f"{name}` first"
        )
    if not engine.serving and not asleep:
        raise ActionRefused(
            f"deploy refused: engine {name} is {engine.phase.value}; deploy once it serves"
        )
    if old == new:
        raise ActionRefused(f"deploy refused: engine {name} runs {new} already")
    current = host.backends.supervisors[name].engine
    records = store.get(new), store.get(old)
    for release, role in zip(records, ("new", "previous"), strict=True):
        why = cannot_boot(release)
        if why is not None:
            raise ActionRefused(f"deploy refused: the {role} release cannot boot: {why}")
        boot_table(release, current)  # raises ReleaseError: it cannot replace this engine
    changed = tokenizer_changes(records[1], records[0])
    if strategy is Strategy.CANARY and changed:
        raise ActionRefused(
            f"deploy refused: a canary requires the same tokenizer as the serving release "
            f"({old}); {new} changes {', '.join(changed[:3])}. llmd counts both releases' "
            f"prompts with one tokenizer, so use replace: `llmd deploy {new}` without --canary"
        )
