"""What the engine runs on: its Python's vLLM and torch (asked of that Python by
`engine_probe.py`), the NVIDIA driver's CUDA version (NVML) and the CPU's instruction set."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

PROBE = Path(__file__).with_name("engine_probe.py")


@dataclasses.dataclass(frozen=True)
class EngineEnvironment:
    """The engine's Python as the probe saw it. `architectures` None when vLLM's registry could
    not be read; `errors` the import failures (their text is diagnosed like engine output)."""

    python: str = ""
    vllm_dist: str | None = None
    vllm_version: str | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None
    cuda_available: bool = False
    torch_required: tuple[str, ...] = ()
    architectures: frozenset[str] | None = None
    errors: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineEnvironment:
        """From the probe's JSON object (unknown keys ignored)."""
        archs = data.get("architectures")
        return cls(
            python=str(data.get("python", "")),
            vllm_dist=data.get("vllm_dist"),
            vllm_version=data.get("vllm_version"),
            torch_version=data.get("torch_version"),
            torch_cuda=data.get("torch_cuda"),
            cuda_available=bool(data.get("cuda_available")),
            torch_required=tuple(data.get("torch_required") or ()),
            architectures=frozenset(archs) if archs is not None else None,
            errors=tuple(data.get("errors") or ()),
        )


def probe_engine(python: str, timeout_s: float = 180.0) -> EngineEnvironment:
    """Run the probe with the engine's `python` (importing vLLM takes 10-20 s on a small CPU).
    A probe that cannot run or print JSON gives an environment whose `errors` say why."""
    try:
        done = subprocess.run(
            [python, str(PROBE)], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return EngineEnvironment(errors=(f"cannot run {python}: {exc}",))
    last = done.stdout.strip().splitlines()[-1:] or [""]
    try:
        return EngineEnvironment.from_json(json.loads(last[0]))
    except ValueError:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return EngineEnvironment(
            errors=(f"{python} {PROBE.name} exited {done.returncode}: {tail}",)
        )


def driver_cuda_version(nvml: Any) -> str | None:
    """The highest CUDA version the NVIDIA driver supports ('12.4'), None without a driver."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        version = int(nvml.nvmlSystemGetCudaDriverVersion())
        return f"{version // 1000}.{version % 1000 // 10}"
    finally:
        nvml.nvmlShutdown()
