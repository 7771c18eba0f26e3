"""`llmd tune` on the simulator: the optimum its timing model implies is the one tune finds; the
refusal to share the engine with a serving llmd; an engine that does not boot; the outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmd.bench.lengths import mix_of
from llmd.bench.scenarios import scenario
from llmd.cli import main
from llmd.config import load_config
from llmd.engine.sim.timing import TimingModel
from llmd.gpu.nvml import GpuReader
from llmd.tune.runner import TuneOptions, run_tune
from llmd.tune.settings import Setting
from tests.support.configs import multi_sim_config
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.nvml import fake_nvml
from tests.support.sim_process import sim_config

# The simulator's cost of a step (llmd.engine.sim.timing): slow enough that a step's length
# dwarfs the scheduling noise of a loaded test machine.
TIMING = TimingModel(step_base_s=0.100, prefill_token_s=0.000012, decode_seq_s=0.005)
PROMPT, OUTPUT = 16, 8
# 16 KV blocks of 128 tokens; a request (16 + 8 tokens) takes one: at most 16 run at once.
KV_SEATS = 16
SETTINGS = (2, 8, 32)
# What a loaded machine may add to a TTFT beyond the model: HTTP, event loops, tokenizing.
JITTER_S = 0.150


def longest_step_s(seqs: int) -> float:
    """A step with every one of `seqs` sequences prefilling its prompt and decoding."""
    return TIMING.step_s(PROMPT * seqs, seqs, prefill_seqs=seqs)


def ttft_bound_within_seats_s(seqs: int) -> float:
    """With no more users than KV seats nobody waits for a seat: TTFT is at most the API
    overhead, the rest of the step under way and the step computing its prefill."""
    return TIMING.request_overhead_s + 2 * longest_step_s(seqs) + JITTER_S


def ttft_floor_past_seats_s() -> float:
    """With more users than seats, (users - seats) / users of the first wave (half of them at 32
    users: far over 5%) wait until a running request has made all its OUTPUT steps, each at
    least the step's fixed cost: the p95 is at least this."""
    return OUTPUT * TIMING.step_base_s


def modelled_tokens_per_s(seqs: int) -> float:
    """Decoding `min(seqs, seats)` sequences a step, one token each."""
    running = min(seqs, KV_SEATS)
    return running / TIMING.step_s(0, running)


def sim_args() -> list[str]:
    return [
        "--step-base-ms", str(TIMING.step_base_s * 1000),
        "--prefill-token-us", str(TIMING.prefill_token_s * 1e6),
        "--decode-seq-us", str(TIMING.decode_seq_s * 1e6),
        "--num-gpu-blocks", str(KV_SEATS),
    ]  # fmt: skip


async def test_tune_finds_the_optimum_of_the_timing_model(tiny_model_dir: Path) -> None:
    """The SLO sits between the TTFT bound of every setting within the KV seats and the TTFT
    floor past them; of the settings within, the model gives the most tokens/s to the largest.
    Tune, measuring, must recommend exactly that one, and find the setting past the seats over
    the SLO with a full KV cache."""
    within = [s for s in SETTINGS if s <= KV_SEATS]
    past = [s for s in SETTINGS if s > KV_SEATS]
    ceiling = max(ttft_bound_within_seats_s(s) for s in within)
    floor = ttft_floor_past_seats_s()
    assert ceiling < floor, "the timing model must separate the settings"
    slo_ms = 1000 * (ceiling + floor) / 2
    expected = max(within, key=modelled_tokens_per_s)
    assert modelled_tokens_per_s(expected) > 1.5 * max(
        modelled_tokens_per_s(s) for s in within if s != expected
    )

    workdir = short_tmpdir("llmd-tune-sim-")
    path = workdir / "llmd.toml"
    path.write_text(sim_config(tiny_model_dir, sim_args()))
    fixed = scenario("B", mix=mix_of([("fixed", 1.0, str(PROMPT), str(OUTPUT))]))
    options = TuneOptions(
        config=load_config(path),
        engine="main",
        settings=tuple(Setting(s) for s in SETTINGS),
        scenario=fixed,
        slo_ttft_p95_ms=slo_ms,
        duration_s=2.0,
        timeout_s=60.0,
        warmup=0,
    )
    report = await run_tune(options, GpuReader(fake_nvml(present=False)))
    by_seqs = {step.setting.max_num_seqs: step for step in report.steps}
    assert report.recommendation.setting == Setting(expected), report.recommendation.reason
    for seqs in within:
        p95 = by_seqs[seqs].summary.ttft_ms["p95"]
        assert p95 is not None and p95 <= 1000 * ttft_bound_within_seats_s(seqs)
    for seqs in past:
        step = by_seqs[seqs]
        assert not step.within_slo and step.verdict.word == "near full"
        assert step.summary.peak_kv_usage == 1.0
    assert report.gpu_note == "no NVIDIA GPU: NVML Shared Library Not Found"
    assert report.recommended_args is not None
    assert report.recommended_args[-2:] == ("--max-num-seqs", str(expected))


def _tune(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(["tune", *argv])
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


def _beside(llmd: LlmdProcess) -> tuple[Path, Path, list[str]]:
    """The config of a running `llmd`, an output file beside it, and a short tune's argv for
    its runtime directory."""
    config = llmd.runtime_dir.parent / "llmd.toml"
    output = llmd.runtime_dir.parent / "tune.json"
    argv = [
        "--config", str(config), "--runtime-dir", str(llmd.runtime_dir), "--max-num-seqs", "2",
        "--duration", "0.3", "--slo-ttft-p95-ms", "5000", "--output", str(output), "--quiet",
    ]  # fmt: skip
    return config, output, argv


def test_the_cli_writes_the_table_json_plot_and_args_from_traffic(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`llmd tune` with lengths from llmd's request log: the table, the recommendation and its
    engine args with --max-model-len from the traffic's p99, the JSON and the PNG."""
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(tiny_model_dir, ("--zero-latency",)))
    traffic = tmp_path / "journal.log"
    lines = [
        {"event": "request_finished", "prompt_tokens": 40 + i, "output_tokens": 20,
         "outcome": "ok"}
        for i in range(50)
    ]  # fmt: skip
    traffic.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    output = tmp_path / "tune.json"
    argv = [
        "--config", str(config), "--runtime-dir", str(tmp_path), "--max-num-seqs", "2,4",
        "--duration", "0.5", "--slo-ttft-p95-ms", "5000", "--from-traffic", str(traffic),
        "--output", str(output), "--quiet",
    ]  # fmt: skip
    code, out, err = _tune(argv, capsys)
    assert code == 0, err
    document = json.loads(output.read_text())
    chosen = document["recommendation"]["setting"]["max_num_seqs"]  # the faster of 2 and 4
    assert f"recommended: max-num-seqs {chosen} (" in out
    assert f"--max-num-seqs {chosen} --max-model-len 256" in out  # p99 of 60..109, up to 256
    assert "from 50 recorded requests" in out
    assert [s["setting"]["max_num_seqs"] for s in document["steps"]] == [2, 4]
    assert document["recommendation"]["engine_args"][-4:] == [
        "--max-num-seqs", str(chosen), "--max-model-len", "256",
    ]  # fmt: skip
    assert document["traffic"]["proposed_max_model_len"] == 256
    assert all(s["verdict"] in ("stable", "near full", "timeouts") for s in document["steps"])
    assert output.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_an_engine_that_does_not_boot_is_diagnosed(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A setting whose engine exits while booting stops the run (exit 1) with the cause."""
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(tiny_model_dir, ("--fault-boot-exit", "3")))
    argv = [
        "--config", str(config), "--runtime-dir", str(tmp_path), "--max-num-seqs", "2",
        "--slo-ttft-p95-ms", "500", "--output", str(tmp_path / "t.json"), "--quiet",
    ]  # fmt: skip
    code, _, err = _tune(argv, capsys)
    assert code == 1
    assert "the engine exited while booting (exit status 3: " in err
    assert "Simulated boot failure" in err
    assert not (tmp_path / "t.json").exists()


def test_tune_refuses_while_llmd_serves_unless_its_engine_is_drained(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A serving daemon on --runtime-dir: exit 1, naming the way out. Drained, with --engine
    main, tune runs; an engine the config does not have is a usage error (64) naming the ones
    it has."""
    llmd = LlmdProcess.start(sim_config(tiny_model_dir, ("--zero-latency",)))
    try:
        llmd.wait_ready(timeout_s=60)
        config, output, argv = _beside(llmd)
        code, _, err = _tune(argv, capsys)
        assert code == 1 and "llmd serves engine main on" in err
        assert f"llmd drain --engine main --wait --runtime-dir {llmd.runtime_dir}" in err
        code, _, err = _tune([*argv, "--engine", "other"], capsys)
        assert code == 64 and f"no engine 'other' in {config}: its engines are main" in err
        with pytest.raises(SystemExit):
            main(["drain", "--wait", "--runtime-dir", str(llmd.runtime_dir)])
        code, _, err = _tune([*argv, "--engine", "main"], capsys)
        assert code == 0, err
        assert output.exists()
    finally:
        llmd.stop()


def test_scenario_g_compares_prefix_caching_on_and_off(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a shared system prompt each value runs twice; with caching on the engine serves the
    prompt's shared blocks from its cache, with it off nothing; the table shows both."""
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(tiny_model_dir, ("--zero-latency",)))
    output = tmp_path / "tune.json"
    argv = [
        "--config", str(config), "--runtime-dir", str(tmp_path), "--max-num-seqs", "2",
        "--scenario", "G", "--max-requests", "12", "--slo-ttft-p95-ms", "5000",
        "--output", str(output), "--quiet",
    ]  # fmt: skip
    code, out, err = _tune(argv, capsys)
    assert code == 0, err
    on, off = json.loads(output.read_text())["steps"]
    assert (on["setting"]["prefix_caching"], off["setting"]["prefix_caching"]) == (True, False)
    assert "--no-enable-prefix-caching" in off["engine_args"]
    assert on["prefix_cache_hit_rate"] > 0.5 and off["prefix_cache_hit_rate"] is None  # no lookups
    assert "prefix hits" in out and "prefix cache" in out


def test_release_records_the_recommended_args(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--release NAME: the recommendation becomes an immutable release whose engine args are
    the recommended ones; the same name again is refused before any engine boots."""
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(tiny_model_dir, ("--zero-latency",)))
    state = tmp_path / "state"
    argv = [
        "--config", str(config), "--runtime-dir", str(tmp_path), "--max-num-seqs", "2",
        "--max-requests", "4", "--slo-ttft-p95-ms", "5000", "--output", str(tmp_path / "t.json"),
        "--release", "tuned-1", "--state-dir", str(state), "--quiet",
    ]  # fmt: skip
    code, out, err = _tune(argv, capsys)
    assert code == 0, err
    assert f"release tuned-1 recorded in {state / 'releases' / 'tuned-1.json'}" in out
    record = json.loads((state / "releases" / "tuned-1.json").read_text())
    recommended = json.loads((tmp_path / "t.json").read_text())["recommendation"]
    assert record["table"]["args"] == recommended["engine_args"]
    assert record["table"]["args"][-2:] == ["--max-num-seqs", "2"]
    code, _, err = _tune(argv, capsys)
    assert code == 1 and "release 'tuned-1' exists" in err


def test_tune_on_a_config_of_several_engines(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[engines.*]: no --engine asks for one, an unknown name lists those there are (both 64);
    --engine b tunes b with its own args. Beside an llmd serving that config, --sharing drain
    drains b (the daemon's copy) for the run and resumes it after; a, on no GPU of b's, is
    never drained."""
    text = multi_sim_config(
        tiny_model_dir, {"a": ("tiny-a", ("--zero-latency",)), "b": ("tiny-b", ("--zero-latency",))}
    )
    llmd = LlmdProcess.start(text)
    try:
        config, output, argv = _beside(llmd)
        code, _, err = _tune(argv, capsys)
        assert code == 64
        assert f"{config} has 2 engines (a, b): name the one to tune with --engine NAME" in err
        code, _, err = _tune([*argv, "--engine", "c"], capsys)
        assert code == 64 and f"no engine 'c' in {config}: its engines are a, b" in err
        llmd.wait_ready(timeout_s=60)
        code, _, err = _tune([*argv, "--engine", "b"], capsys)
        assert code == 1 and "llmd serves engine b on" in err
        code, _, err = _tune([*argv, "--engine", "b", "--sharing", "drain"], capsys)
        assert code == 0, err
        engine = json.loads(output.read_text())["engine"]
        assert (engine["name"], engine["model"]) == ("b", "tiny-b")
        assert "--zero-latency" in engine["args"]
        records = llmd.log_records()
        drains = [r for r in records if r["event"] == "drain_started"]
        resumes = [r for r in records if r["event"] == "drain_ended"]
        assert [r["engine"] for r in drains] == ["b"] and [r["engine"] for r in resumes] == ["b"]
        engines = {e["name"]: e for e in llmd.admin_status()["engines"]}
        assert not engines["a"]["draining"] and not engines["b"]["draining"]
    finally:
        llmd.stop()
