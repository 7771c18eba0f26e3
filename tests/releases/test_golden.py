"""Golden prompts from a file, and the context length a release pins."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llmd.errors import ReleaseError
from llmd.releases.golden import (
    BUILTIN_GOLDEN,
    load_golden,
    pinned_max_model_len,
)
from llmd.releases.record import EngineTable, Release


def test_no_file_means_the_builtin_prompts() -> None:
    """`golden_prompts = ""`: the three built-in chats."""
    assert load_golden("") == BUILTIN_GOLDEN and len(BUILTIN_GOLDEN) == 3


def test_a_file_gives_one_prompt_a_line(tmp_path: Path) -> None:
    """JSON lines with messages, an optional max_tokens and label; blank lines skipped."""
    path = tmp_path / "golden.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "label": "hi"},
        {},
        {"messages": [{"role": "user", "content": "Bye"}]},
    ]
    path.write_text("\n".join(json.dumps(x) if x else "" for x in lines))
    prompts = load_golden(str(path))
    assert [(p.label, p.max_tokens) for p in prompts] == [("hi", 8), ("line 3", None)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "golden.jsonl:1: not JSON"),
        ('{"messages": []}', "golden.jsonl:1: expected"),
        ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "expected"),
        ("", "no golden prompt"),
    ],
)
def test_a_bad_file_names_the_line(tmp_path: Path, text: str, message: str) -> None:
    """Each malformed line is refused with its number."""
    path = tmp_path / "golden.jsonl"
    path.write_text(text)
    with pytest.raises(ReleaseError, match=message):
        load_golden(str(path))


def test_a_missing_file_is_a_release_error(tmp_path: Path) -> None:
    """The path and the OS's reason."""
    with pytest.raises(ReleaseError, match="cannot read golden prompts"):
        load_golden(str(tmp_path / "none.jsonl"))


def test_a_file_not_utf8_is_a_release_error(tmp_path: Path) -> None:
    """A byte that is not UTF-8 is a ReleaseError naming the file and its line, not
    UnicodeDecodeError."""
    path = tmp_path / "golden.jsonl"
    path.write_bytes(b'\n{"messages": [{"role": "user", "content": "caf\xe9"}]}\n')
    with pytest.raises(ReleaseError, match=r"golden.jsonl:2: cannot read golden prompts: not UTF"):
        load_golden(str(path))


def test_the_pinned_context_is_the_last_max_model_len_flag() -> None:
    """`--max-model-len` (or `--max-model-len=`, or `--max_model_len`), the last one wins, in
    vLLM's forms (2k, 1K); none pinned, -1 or a value vLLM refuses: None."""
    table = EngineTable("vllm", "m", "m", "", (), ("--max-model-len", "512"), {})
    release = Release("r", "main", "", "", table, None, None)  # type: ignore[arg-type]
    assert pinned_max_model_len(release) == 512
    table = dataclasses.replace(table, args=("--max-model-len", "512", "--max-model-len=2k"))
    assert pinned_max_model_len(dataclasses.replace(release, table=table)) == 2000
    table = dataclasses.replace(table, args=("--max_model_len", "1K"))  # as vLLM reads it
    assert pinned_max_model_len(dataclasses.replace(release, table=table)) == 1024
    for args in (("--enforce-eager",), ("--max-model-len", "-1"), ("--max-model-len", "x")):
        table = dataclasses.replace(table, args=args)
        assert pinned_max_model_len(dataclasses.replace(release, table=table)) is None
