"""Reading the engine's command line: one parser for every flag llmd looks at."""

from __future__ import annotations

from llmd.engine.args import engine_flag, flags_given


def test_a_flag_in_either_form_and_the_last_one_wins() -> None:
    """`--flag V` and `--flag=V` both read; given twice, the last wins (as vLLM's argparse)."""
    args = ("--max-num-seqs", "8", "--enforce-eager", "--max-num-seqs=16")
    assert engine_flag(args, "--max-num-seqs") == "16"
    assert engine_flag(("--max-num-seqs", "8"), "--max-num-seqs") == "8"
    assert engine_flag(args, "--scheduling-policy") is None
    assert engine_flag(("--max-num-seqs",), "--max-num-seqs") is None


def test_which_flags_are_given() -> None:
    """The flags of a set that the args give, in order, with or without `=`."""
    args = ("--chat-template=x.jinja", "--model", "m", "--tokenizer", "t")
    assert flags_given(args, ("--tokenizer", "--chat-template")) == [
        "--chat-template",
        "--tokenizer",
    ]
