"""The settings a tune tries and the engine args each boots with; the traffic's length mix."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from llmd.errors import TuneError
from llmd.tune.settings import Setting, parse_max_num_seqs, settings_for
from llmd.tune.traffic import read_traffic, traffic_from


def test_each_setting_replaces_the_configured_flags() -> None:
    """--max-num-seqs in engine.args is replaced, not doubled; prefix caching forced either way."""
    base = ("--max-model-len", "1024", "--max-num-seqs=256", "--no-enable-prefix-caching")
    assert Setting(8).engine_args(base) == (
        "--max-model-len", "1024", "--no-enable-prefix-caching", "--max-num-seqs", "8",
    )  # fmt: skip
    assert Setting(8, True).engine_args(base)[-1] == "--enable-prefix-caching"
    assert "--no-enable-prefix-caching" not in Setting(8, True).engine_args(base)
    assert Setting(8, False).engine_args(base).count("--no-enable-prefix-caching") == 1


def test_the_list_of_settings() -> None:
    """Sorted and distinct; the default 8,16,32,64; with the prefix comparison each twice."""
    assert parse_max_num_seqs("32,8,8") == (8, 32)
    assert parse_max_num_seqs(None) == (8, 16, 32, 64)
    with pytest.raises(TuneError):
        parse_max_num_seqs("8,many")
    with pytest.raises(TuneError):
        parse_max_num_seqs("0")
    assert settings_for((4, 8), compare_prefix_caching=True) == (
        Setting(4, True), Setting(4, False), Setting(8, True), Setting(8, False),
    )  # fmt: skip


def _finished(prompt: int, output: int, outcome: str = "ok") -> str:
    return json.dumps(
        {"event": "request_finished", "prompt_tokens": prompt, "output_tokens": output,
         "outcome": outcome, "level": "info"}
    )  # fmt: skip


def test_traffic_comes_from_llmds_request_lines() -> None:
    """Only finished, successful requests count; --max-model-len is their p99 of prompt +
    output rounded up to 256, never past the model's positions."""
    lines = [_finished(100 + i, 50) for i in range(99)] + [
        _finished(2000, 500),
        _finished(9000, 1, outcome="rejected"),
        json.dumps({"event": "engine_ready"}),
        "not json",
    ]
    traffic = read_traffic(lines)
    assert len(traffic.pairs) == 100
    # totals 150..248 and one 2,500: p99 is between the 99th and 100th = 248 + 0.01 x 2,252
    assert traffic.total_p99 == 271
    assert traffic.proposed_max_model_len == 512
    assert read_traffic(lines, max_positions=300).proposed_max_model_len == 300
    with pytest.raises(TuneError, match="no finished requests"):
        read_traffic([json.dumps({"event": "engine_ready"})])


def test_traffic_is_read_from_a_file_or_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--from-traffic FILE` or `-`; a file that cannot be read is a TuneError naming it; a
    line that is not UTF-8 is skipped, and the warning counts it and names the first."""
    log = tmp_path / "journal.log"
    log.write_bytes(f"{_finished(100, 28)}\n\xff\xfe garbage\n".encode("latin-1"))
    traffic, skipped = traffic_from(str(log))
    assert traffic.pairs == ((100, 28),)
    assert skipped == f"{log}: 1 line skipped: not UTF-8 text (the first: line 2)"
    stdin = io.TextIOWrapper(io.BytesIO(_finished(200, 56).encode() + b"\n"))
    monkeypatch.setattr("sys.stdin", stdin)
    assert traffic_from("-") == (read_traffic([_finished(200, 56)]), None)
    with pytest.raises(TuneError, match=r"--from-traffic .*missing"):
        traffic_from(str(tmp_path / "missing"))
