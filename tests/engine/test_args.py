"""Reading the engine's command line: one parser for every flag llmd looks at, and changing it."""

from __future__ import annotations

import pytest

from llmd.engine.args import engine_flag, flags_given, float_flag, int_flag, with_flag, without_flag


def test_a_flag_in_either_form_and_the_last_one_wins() -> None:
    """`--flag V` and `--flag=V` both read; given twice, the last wins (as vLLM's argparse)."""
    args = ("--max-num-seqs", "8", "--enforce-eager", "--max-num-seqs=16")
    assert engine_flag(args, "--max-num-seqs") == "16"
    assert engine_flag(("--max-num-seqs", "8"), "--max-num-seqs") == "8"
    assert engine_flag(args, "--scheduling-policy") is None
    assert engine_flag(("--max-num-seqs",), "--max-num-seqs") is None


def test_numeric_flags_are_read_as_numbers() -> None:
    """int_flag and float_flag parse the value, give the default when absent, refuse non-numbers."""
    args = ("--max-num-seqs", "8", "--enforce-eager", "--max-num-seqs=16")
    assert int_flag(args, "--max-num-seqs") == 16
    assert int_flag(args, "--max-model-len") is None
    assert float_flag(args, "--gpu-memory-utilization", 0.9) == 0.9
    with pytest.raises(ValueError):
        int_flag(("--max-num-seqs", "many"), "--max-num-seqs")


def test_which_flags_are_given() -> None:
    """The flags of a set that the args give, in order, with or without `=`."""
    args = ("--chat-template=x.jinja", "--model", "m", "--tokenizer", "t")
    assert flags_given(args, ("--tokenizer", "--chat-template")) == [
        "--chat-template",
        "--tokenizer",
    ]


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
