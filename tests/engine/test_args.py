"""Reading the engine's command line: one parser for every flag llmd looks at."""

from __future__ import annotations

from llmd.config import EngineConfig
from llmd.engine.args import (
    engine_api_key,
    engine_auth_headers,
    engine_flag,
    flags_given,
    without_secrets,
)


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


def test_the_engines_api_key_is_found_as_the_engine_finds_it() -> None:
    """--api-key in engine.args (its first value; the last flag wins), else VLLM_API_KEY from
    engine.env, else from llmd's environment; none: no Authorization header."""
    flagged = EngineConfig(args=("--api-key", "k1", "k2"), env={"VLLM_API_KEY": "e"})
    assert engine_api_key(flagged, {}) == "k1"
    assert engine_api_key(EngineConfig(args=("--api-key=k3",)), {}) == "k3"
    assert engine_api_key(EngineConfig(env={"VLLM_API_KEY": "e"}), {"VLLM_API_KEY": "o"}) == "e"
    assert engine_api_key(EngineConfig(), {"VLLM_API_KEY": "o"}) == "o"
    assert engine_api_key(EngineConfig(), {}) is None
    assert engine_auth_headers(flagged, {}) == {"Authorization": "Bearer k1"}
    assert engine_auth_headers(EngineConfig(), {}) == {}


def test_secrets_are_hidden_in_logged_command_lines() -> None:
    """--api-key (all its values) and --hf-token are masked, in either form; the rest stays."""
    argv = ["vllm", "--api-key", "a", "b", "--max-model-len", "5", "--hf-token=t", "--api-key=c"]
    assert without_secrets(argv) == [
        "vllm", "--api-key", "***", "***", "--max-model-len", "5", "--hf-token=***",
        "--api-key=***",
    ]  # fmt: skip
