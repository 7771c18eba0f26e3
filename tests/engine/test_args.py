"""Reading the engine's command line: one parser for every flag llmd looks at, and changing it."""

from __future__ import annotations

import pytest

from llmd.config import EngineConfig
from llmd.engine.args import (
    engine_api_key,
    engine_auth_headers,
    engine_flag,
    flags_given,
    float_flag,
    has_switch,
    int_flag,
    parse_flags,
    with_flag,
    without_flag,
    without_secrets,
)


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


def test_a_flag_spelled_with_underscores_is_the_same_flag() -> None:
    """vLLM reads `--max_num_seqs` as `--max-num-seqs` (FlexibleArgumentParser), so every
    lookup does too: values, switches, removal, the flags given, secrets and the API key."""
    args = ("--max_num_seqs", "16", "--enforce_eager", "--kv_cache_memory_bytes=64M")
    assert engine_flag(args, "--max-num-seqs") == "16"
    assert int_flag(args, "--max-num-seqs") == 16
    assert int_flag(args, "--kv-cache-memory-bytes") == 64 * 2**20
    assert has_switch(args, "--enforce-eager")
    assert without_flag(args, "--max-num-seqs") == (
        "--enforce_eager",
        "--kv_cache_memory_bytes=64M",
    )
    assert without_flag(args, "--kv-cache-memory-bytes") == args[:3]
    assert with_flag(args, "--max-num-seqs", "8")[-2:] == ("--max-num-seqs", "8")
    assert flags_given(("--chat_template", "x"), ("--chat-template",)) == ["--chat-template"]
    hidden = without_secrets(("--api_key", "s1", "--api_key=s2", "--hf_token", "t"))
    assert hidden == ["--api_key", "***", "--api_key=***", "--hf_token", "***"]
    assert engine_api_key(EngineConfig(args=("--api_key", "k")), {}) == "k"
    assert engine_flag(("--a_b.c_d", "1"), "--a-b.c_d") == "1"  # only before the first dot


def test_number_flags_read_as_vllm_reads_them() -> None:
    """ASCII digits only ('²' is refused, not a crash); vLLM's '64M'/'32k' forms for the flags
    it reads that way; `auto` or -1 for --max-model-len is the model's own (None)."""
    for value in ("²", "٨", "-1", "1e3"):
        with pytest.raises(ValueError, match="--max-num-seqs"):
            int_flag(("--max-num-seqs", value), "--max-num-seqs")
    assert int_flag(("--max-model-len", "32k"), "--max-model-len") == 32_000
    assert int_flag(("--max-model-len=auto",), "--max-model-len") is None
    assert int_flag(("--max-model-len", "-1"), "--max-model-len") is None
    with pytest.raises(ValueError, match="--kv-cache-memory-bytes"):
        int_flag(("--kv-cache-memory-bytes", "1.5M"), "--kv-cache-memory-bytes")


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


def test_a_flag_followed_by_another_flag_has_no_value() -> None:
    """One reader of engine flags, as argparse reads them: a flag followed by an option has no
    value (it is not the next flag's name), a negative number is a value, and removing such a
    flag keeps the option after it."""
    args = ["--tokenizer", "--enforce-eager", "--seed", "-1", "--max-model-len=512"]
    assert engine_flag(args, "--tokenizer") is None
    assert engine_flag(args, "--seed") == "-1"
    assert engine_flag(args, "--max-model-len") == "512"
    assert parse_flags(args) == [
        ("--tokenizer", None),
        ("--enforce-eager", None),
        ("--seed", "-1"),
        ("--max-model-len", "512"),
    ]
    assert without_flag(args, "--tokenizer") == tuple(args[1:])
