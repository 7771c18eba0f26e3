"""`llmd check-config` prints the sizing plan after validating the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmd.cli import main

CONFIGS = Path(__file__).parent.parent / "data" / "model_configs"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return int(exited.value.code or 0), capsys.readouterr().out


def test_check_config_sizes_a_real_model_for_a_planned_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Qwen2.5-7B's config for an 80 GiB card: 57,344 bytes a token, 1,082,557 tokens, and the
    warning about vLLM's default 1,024 sequences with its hint."""
    model = tmp_path / "qwen"
    model.mkdir()
    shutil.copy(CONFIGS / "qwen2.5-7b-instruct" / "config.json", model / "config.json")
    config = tmp_path / "llmd.toml"
    config.write_text(f'[engine]\nmodel = "{model}"\n')
    code, out = _run(["check-config", str(config), "--gpu-memory-gib", "80"], capsys)
    assert code == 0, out
    assert "57,344 bytes per token (2 x 28 layers x 4 KV heads x 128 x 2 bytes)" in out
    assert "14.2 GiB (parameters)" in out  # 15,231,233,024 bytes
    assert "1,082,557 tokens" in out
    assert "warning: --max-num-seqs 1024 x 2,048 typical tokens" in out
    assert "hint: lower --max-num-seqs to 528 in engine.args" in out  # 1,082,557 // 2,048


def test_check_config_says_why_it_cannot_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model name that is not a local directory: the config is still ok (exit 0), the sizing
    is skipped with the reason."""
    config = tmp_path / "llmd.toml"
    config.write_text('[engine]\nmodel = "org/not-here"\n')
    code, out = _run(["check-config", str(config)], capsys)
    assert code == 0
    assert "sizing: skipped: engine.model 'org/not-here' is not a local directory" in out


def test_check_config_json_gives_the_documented_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json`: the file, listen, each engine with its plan's figures (the same as the text:
    57,344 bytes a token, 1,082,557 tokens) or why it was not sized, each upstream; the keys
    the README lists."""
    model = tmp_path / "qwen"
    model.mkdir()
    shutil.copy(CONFIGS / "qwen2.5-7b-instruct" / "config.json", model / "config.json")
    config = tmp_path / "llmd.toml"
    config.write_text(
        f'[engines.qwen]\nmodel = "{model}"\ngpus = ["0"]\n'
        '[engines.away]\nmodel = "org/not-here"\ngpus = ["1"]\n'
        '[upstreams.lab]\nurl = "http://10.0.0.5:8000"\nmodels = ["m"]\n'
    )
    code, out = _run(["check-config", str(config), "--gpu-memory-gib", "80", "--json"], capsys)
    assert code == 0, out
    document = json.loads(out)
    assert set(document) == {"config", "listen", "engines", "upstreams"}
    assert document["config"] == str(config) and document["listen"] == "127.0.0.1:8000"
    qwen, away = document["engines"]["qwen"], document["engines"]["away"]
    assert set(qwen) == {"kind", "model", "served_model_name", "gpus", "sizing", "sizing_skipped"}
    assert qwen["gpus"] == ["0"] and qwen["sizing_skipped"] is None
    sizing = qwen["sizing"]
    assert set(sizing) == {
        "model", "kv_bytes_per_token", "weights_bytes", "memory_bytes", "memory",
        "kv_cache_bytes", "kv_tokens", "kv_source", "max_model_len", "max_num_seqs",
        "typical_tokens", "sequences_at_max_model_len", "sequences_at_typical", "warnings",
    }  # fmt: skip
    assert sizing["kv_bytes_per_token"] == 57_344 and sizing["kv_tokens"] == 1_082_557
    assert sizing["warnings"][0]["hint"].startswith("lower --max-num-seqs to 528 in engine.args")
    assert away["sizing"] is None and "not a local directory" in away["sizing_skipped"]
    assert document["upstreams"] == {"lab": {"url": "http://10.0.0.5:8000", "models": ["m"]}}
