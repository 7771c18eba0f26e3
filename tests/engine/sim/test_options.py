"""The simulator's command line: timing flags reach the timing model in its units."""

from __future__ import annotations

import dataclasses

import pytest

from llmd.engine.sim.options import parse_options
from llmd.engine.sim.timing import TimingModel


def test_timing_flags_are_converted_to_seconds() -> None:
    """Each timing flag, given in ms or us as its name says, lands in the model in seconds."""
    options = parse_options(
        ["--model", "m", "--uds", "s.sock", "--step-base-ms", "3", "--prefill-token-us", "10",
         "--decode-seq-us", "80", "--decode-context-token-us", "0.5",
         "--request-overhead-ms", "1.5", "--output-token-us", "20", "--output-step-us", "300",
         "--prefill-seq-us", "900", "--stream-token-us", "140"]
    )  # fmt: skip
    expected = TimingModel(
        0.003, 0.00001, 0.00008, 0.0000005, 0.0015, 0.00002, 0.0003, 0.0009, 0.00014
    )
    assert dataclasses.astuple(options.timing) == pytest.approx(dataclasses.astuple(expected))


def test_defaults_are_the_fitted_model_and_zero_latency_zeroes_everything() -> None:
    """No timing flag: the fitted defaults; --zero-latency: no simulated time at all."""
    assert parse_options(["--model", "m", "--uds", "s.sock"]).timing == TimingModel()
    zero = parse_options(["--model", "m", "--uds", "s.sock", "--zero-latency"]).timing
    assert zero.is_zero and zero == TimingModel.zero()


def test_flags_spelled_with_underscores_read_as_vllm_reads_them() -> None:
    """`--max_num_seqs 7` and `--step_base_ms=3` are the dashed flags, as in vLLM."""
    options = parse_options(["--model", "m", "--uds", "s.sock", "--max_num_seqs", "7",
                             "--step_base_ms=3"])  # fmt: skip
    assert options.max_num_seqs == 7
    assert options.timing.step_base_s == pytest.approx(0.003)


def test_model_task_flags() -> None:
    """--runner, --convert, --hf-overrides and --sim-asr reach the options as given."""
    options = parse_options(
        ["--model", "m", "--uds", "s.sock", "--convert", "classify",
         "--hf-overrides", '{"num_labels": 1}']
    )  # fmt: skip
    assert (options.runner, options.convert) == ("auto", "classify")
    assert dict(options.hf_overrides) == {"num_labels": 1}
    assert parse_options(["--model", "m", "--uds", "s.sock", "--sim-asr"]).asr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--task", "embed"], "Hint: --task is not a vllm serve option"),
        (["--runner", "pooling", "--sim-asr"], "--sim-asr"),
        (["--runner", "generate", "--convert", "embed"], "--runner pooling"),
        (["--hf-overrides", "[1]"], "expected a JSON object"),
    ],
)
def test_model_task_flags_vllm_refuses(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What vLLM 0.32 refuses exits 2 with its reason (`--task` with vLLM's own hint)."""
    with pytest.raises(SystemExit) as exit_info:
        parse_options(["--model", "m", "--uds", "s.sock", *args])
    assert exit_info.value.code == 2 and said in capsys.readouterr().err
