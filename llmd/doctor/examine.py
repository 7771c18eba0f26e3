"""What `llmd doctor` examines: the pre-deployment checks of a config, and the engine's recent exits
as the running daemon diagnosed them or as a saved log shows them."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from llmd.config import Config
from llmd.doctor.checks import (
    check_architecture,
    check_cpu,
    check_memory,
    check_model_dir,
    check_tokenizer,
    check_versions,
)
from llmd.doctor.environment import EngineEnvironment, driver_cuda_version, probe_engine
from llmd.engine.amx import cpu_flags
from llmd.errors import SizingError
from llmd.gpu.nvml import GpuReader
from llmd.runtime import RuntimePaths
from llmd.sizing.engine import plan_engine
from llmd.sizing.model import load_shape
from llmd.supervisor.diagnosis import diagnose
from llmd.supervisor.findings import Finding

Probe = Callable[[str], EngineEnvironment]


@dataclasses.dataclass(frozen=True)
class Boundaries:
    """What the checks read from outside llmd: the engine probe, NVML, /proc files."""

    probe: Probe = probe_engine
    nvml: Any = None
    cpuinfo: Path = Path("/proc/cpuinfo")
    meminfo: Path = Path("/proc/meminfo")

    def nvml_module(self) -> Any:
        if self.nvml is not None:
            return self.nvml
        import pynvml

        return pynvml


def pre_deployment(
    config: Config, boundaries: Boundaries, planned_gib: float | None = None
) -> list[Finding]:
    """The four checks (architecture, tokenizer, memory, versions; on the CPU build its
    instruction set) for `config.engine`. The simulator needs no vLLM: only the model's
    directory and tokenizer are checked for it."""
    engine = config.engine
    model = check_model_dir(engine.model)
    findings = [model]
    if model.severity == "error":
        return findings
    model_dir = Path(engine.model)
    try:
        shape = load_shape(model_dir)
    except SizingError as exc:
        return [*findings, Finding("model", "error", str(exc), "fix the model's config.json")]
    findings += check_tokenizer(model_dir, shape)
    if engine.kind == "sim":
        return [*findings, Finding("versions", "ok", "the simulator needs no vLLM and no GPU")]
    env = boundaries.probe(engine.python or sys.executable)
    findings.append(check_architecture(shape, env))
    cpu_build = (env.vllm_dist or "").endswith("-cpu")
    build = f"{env.vllm_dist} {env.vllm_version}" if env.vllm_dist else ""
    nvml = boundaries.nvml_module()
    try:
        plan, memory = plan_engine(
            engine, planned_gib=planned_gib, reader=GpuReader(nvml), engine_build=build
        )
        findings.append(check_memory(plan, memory, _available(boundaries.meminfo)))
    except SizingError as exc:
        findings.append(Finding("memory", "warning", f"not sized: {exc}", "fix engine.args"))
    findings.append(check_versions(env, driver_cuda_version(nvml), cpu_build))
    findings += [f for f in diagnose(env.errors) if f.severity == "error"]
    if cpu_build:
        findings += check_cpu(cpu_flags(boundaries.cpuinfo))
    return findings


def _available(meminfo: Path) -> int | None:
    try:
        match = re.search(r"MemAvailable:\s+(\d+) kB", meminfo.read_text())
    except OSError:
        return None
    return int(match[1]) * 1024 if match else None


@dataclasses.dataclass(frozen=True)
class ExitsReport:
    """The engine's recent exits: `source` (where they were read), the engine's state and last
    exit as the daemon reports them, and the diagnosis."""

    source: str
    state: str | None
    last_exit: str | None
    diagnosis: tuple[Finding, ...]


def from_daemon(runtime_dir: Path) -> ExitsReport:
    """The running daemon's last exit and diagnosis (its status `engine` object); a report saying
    so when no daemon answers."""
    from llmd.admin.client import AdminRefused, AdminUnreachable, admin_request

    socket = RuntimePaths(runtime_dir).admin_socket
    try:
        status = asyncio.run(admin_request(socket, "GET", "/status", timeout_s=5.0))
    except (AdminUnreachable, AdminRefused, TimeoutError) as exc:
        return ExitsReport(f"no daemon: {exc}", None, None, ())
    engine = status.get("engine") or {}
    last = engine.get("last_exit_reason")
    detail = engine.get("last_exit_detail")
    findings = tuple(Finding(**item) for item in engine.get("diagnosis") or ())
    return ExitsReport(
        f"the daemon at {socket}",
        engine.get("state"),
        f"{last}: {detail}" if last else None,
        findings,
    )


def from_log(lines: Iterable[str], name: str) -> ExitsReport:
    """Diagnose saved output: raw engine lines, or llmd's JSON log lines (`journalctl -u llmd
    -o cat`), whose `engine_output` events carry the engine's lines and whose last
    `engine_exited` event gives the exit."""
    engine_lines: list[str] = []
    kind: str | None = None
    detail = ""
    for line in lines:
        event = _json_event(line)
        if event is None:
            engine_lines.append(line.rstrip("\n"))
        elif event.get("event") == "engine_output":
            engine_lines.append(str(event.get("line", "")))
        elif event.get("event") == "engine_exited":
            kind, detail = str(event.get("reason")), str(event.get("detail", ""))
    findings = diagnose(engine_lines, kind, detail)
    return ExitsReport(name, None, f"{kind}: {detail}" if kind else None, findings)


def _json_event(line: str) -> dict[str, Any] | None:
    if not line.lstrip().startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "event" in event else None
