"""[swap_groups.NAME]: engines that cannot all be resident at once, woken on demand and put to
sleep to make room (llmd/admission/swap.py decides which), and the checks that say when a plan
cannot work."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from llmd.config.backends import EngineConfig
from llmd.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class SwapGroupConfig:
    """Engines of which at most `max_resident` are awake at once (0, the key left out: as many
    as fit in their GPU's memory by their measured footprints, a GPU only). An engine woken
    stays awake
    at least `min_residence_s` (no thrash) unless idle for its predicted wake. When another
    model's requests wait, the engine to evict still takes new requests for `max_wait_s`, then
    none until it has drained (an engine with requests in flight is never evicted)."""

    engines: tuple[str, ...] = ()
    max_resident: int = 0  # 0: fit by memory (llmd/gpu/footprint.py)
    min_residence_s: float = 20.0
    max_wait_s: float = 2.0


def check_swap_groups(
    engines: Mapping[str, EngineConfig], groups: Mapping[str, SwapGroupConfig]
) -> None:
    """The swap plan can work. Raises ConfigError naming the key: a group naming an unknown
    engine or one already in another group, or none; an engine of a group without
    `on_demand = true`; a group fit by memory (no `max_resident`) with a simulator engine (no
    GPU memory to fit by); more pinned engines than `max_resident`, or as many while the group
    has others (they could never wake). Whether a group fit by memory fits its GPU is checked
    where NVML answers (the daemon's start, `llmd check-config`). `pin` and `idle_sleep_s` of an
    engine not on demand are ignored: it never sleeps."""
    owner: dict[str, str] = {}
    for group_name, group in groups.items():
        key = f"swap_groups.{group_name}"
        if not group.engines:
            raise ConfigError(f"{key}.engines is empty: name the engines that take turns")
        for name in group.engines:
            if name not in engines:
                known = ", ".join(engines) or "none"
                raise ConfigError(f"{key}.engines: no engine {name!r} (engines: {known})")
            if name in owner:
                raise ConfigError(
                    f"{key}.engines: {name!r} is already in swap_groups.{owner[name]}; "
                    "an engine belongs to one group"
                )
            owner[name] = group_name
            if not engines[name].on_demand:
                raise ConfigError(
                    f"{key}.engines: engines.{name}.on_demand is false: an engine of a swap "
                    "group must be on demand (set pin = true to keep it awake)"
                )
        if not group.max_resident:
            simulated = [name for name in group.engines if engines[name].kind == "sim"]
            if simulated:
                raise ConfigError(
                    f"{key}.max_resident is required without a GPU: {', '.join(simulated)} "
                    "run on the simulator, which has no GPU memory to fit the group by (set "
                    "max_resident, the engines awake at once)"
                )
            continue
        pinned = [name for name in group.engines if engines[name].pin]
        if len(pinned) > group.max_resident:
            raise ConfigError(
                f"{key}: {len(pinned)} pinned engines ({', '.join(pinned)}) but max_resident = "
                f"{group.max_resident}: pinned engines are never evicted, so they cannot all "
                "be awake; unpin some or raise max_resident"
            )
        if len(pinned) == group.max_resident and len(group.engines) > len(pinned):
            others = [name for name in group.engines if name not in pinned]
            raise ConfigError(
                f"{key}: the pinned engines ({', '.join(pinned)}) fill max_resident = "
                f"{group.max_resident}, so {', '.join(others)} could never wake; unpin one or "
                "raise max_resident"
            )


def group_of(groups: Mapping[str, SwapGroupConfig], engine: str) -> str | None:
    """The name of the swap group engine `engine` is in, or None."""
    return next((name for name, group in groups.items() if engine in group.engines), None)
