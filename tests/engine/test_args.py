"""Reading and changing vLLM flags in engine.args."""

from __future__ import annotations

import pytest

from llmd.engine.args import engine_flag, float_flag, int_flag, with_flag, without_flag


def test_a_flag_is_read_in_both_spellings_and_the_last_one_wins() -> None:
    """`--flag V` and `--flag=V`, as argparse reads them."""
    args = ("--max-num-seqs", "8", "--enforce-eager", "--max-num-seqs=16")
    assert engine_flag(args, "--max-num-seqs") == "16"
    assert engine_flag(args, "--max-model-len") is None
    assert int_flag(args, "--max-num-seqs") == 16
    assert float_flag(args, "--gpu-memory-utilization", 0.9) == 0.9
    with pytest.raises(ValueError):
        int_flag(("--max-num-seqs", "many"), "--max-num-seqs")


def test_with_flag_replaces_every_earlier_value() -> None:
    """Both spellings go; the new value is appended; other args keep their order."""
    args = ("--max-num-seqs", "8", "--enforce-eager", "--max-num-seqs=16", "--dtype", "half")
    assert with_flag(args, "--max-num-seqs", "32") == (
        "--enforce-eager",
        "--dtype",
        "half",
        "--max-num-seqs",
        "32",
    )
    assert without_flag(args, "--enforce-eager", takes_value=False) == (
        "--max-num-seqs",
        "8",
        "--max-num-seqs=16",
        "--dtype",
        "half",
    )
    assert with_flag(("--x",), "--no-enable-prefix-caching") == (
        "--x",
        "--no-enable-prefix-caching",
    )
