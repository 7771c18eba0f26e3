"""Config loading: strict keys and types, defaults, overrides, clear messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmd.binding import key_line
from llmd.config import Config, config_path, load_config
from llmd.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llmd.toml"
    path.write_text(text)
    return path


def test_minimal_config_takes_defaults(tmp_path: Path) -> None:
    """Only engine.model is required; everything else has its documented default."""
    config = load_config(write(tmp_path, '[engine]\nmodel = "org/model"\n'))
    assert config.server.listen == "127.0.0.1:8000"
    assert config.engine.kind == "vllm"
    assert config.engine.model_name == "org/model"
    assert config.supervisor.max_failed_boots == 5


def test_example_config_documents_every_key() -> None:
    """etc/llmd.toml loads and sets every key of every section (it is the reference)."""
    config = load_config(REPO / "etc" / "llmd.toml")
    import dataclasses
    import tomllib

    raw = tomllib.loads((REPO / "etc" / "llmd.toml").read_text())
    for section in dataclasses.fields(Config):
        if section.name == "source":
            continue
        keys = {f.name for f in dataclasses.fields(getattr(config, section.name))}
        assert set(raw[section.name]) == keys, section.name


@pytest.mark.parametrize("name", ["llmd.toml", "demo.toml"])
def test_shipped_configs_are_valid(name: str) -> None:
    """Every config the repo ships passes validation."""
    load_config(REPO / "etc" / name)


def test_unknown_key_names_the_key_and_the_known_ones(tmp_path: Path) -> None:
    """A typo fails at load with the full key path and what keys exist."""
    path = write(tmp_path, '[engine]\nmodel = "m"\nstart_timout_s = 5\n')
    with pytest.raises(
        ConfigError, match=r"unknown key engine\.start_timout_s = 5.*start_timeout_s"
    ):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[engine]\nmodel = "m"\nstart_timeout_s = "ten"\n',
            r"engine.start_timeout_s = 'ten': expected a number",
        ),
        (
            '[engine]\nmodel = "m"\nkind = "tgi"\n',
            r"engine.kind = 'tgi': expected one of 'vllm', 'sim'",
        ),
        (
            '[engine]\nmodel = "m"\nargs = "--x"\n',
            r"llmd.toml:3: engine.args: expected a list of strings",
        ),
        (
            '[engine]\nmodel = "m"\n[supervisor]\nmax_failed_boots = 2.5\n',
            r"supervisor.max_failed_boots = 2.5: expected a whole number",
        ),
        (
            '[engine]\nmodel = "m"\n[supervisor]\nbackoff_max_s = -1\n',
            r"supervisor.backoff_max_s = -1: expected a number >= 0",
        ),
        (
            '[engine]\nmodel = "m"\n[server]\nlisten = "8000"\n',
            r"server.listen = '8000': expected HOST:PORT",
        ),
        (
            '[engine]\nmodel = "m"\nenv = { A = 1 }\n',
            r"llmd.toml:3: engine.env: expected a table of strings \(its value is not shown",
        ),
        ("engine = 3\n", r"engine: expected a table, got 3"),
        ("[server]\n", r"engine.model is required"),
        ("[engine\n", r"not valid TOML"),
    ],
)
def test_bad_values_name_key_value_and_expectation(tmp_path: Path, text: str, message: str) -> None:
    """Each wrong type or value names the key, the value given (unless it may be a secret:
    then the line) and what was expected."""
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_booleans_are_not_numbers(tmp_path: Path) -> None:
    """TOML true is not accepted where a number is expected."""
    with pytest.raises(ConfigError, match="expected a number"):
        load_config(write(tmp_path, '[engine]\nmodel = "m"\nstop_timeout_s = true\n'))


def test_cli_overrides_and_relative_model(tmp_path: Path) -> None:
    """--listen/--runtime-dir override the file; a relative model dir resolves from the file."""
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    path = write(tmp_path, '[engine]\nmodel = "models/tiny"\n')
    config = load_config(path, listen="127.0.0.1:9001", runtime_dir="/tmp/x")
    assert config.server.port == 9001
    assert config.server.runtime_dir == "/tmp/x"
    assert config.engine.model == str(tmp_path / "models" / "tiny")


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    """A missing file is reported as such, not as a traceback."""
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.toml")


def test_config_path_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    """--config beats $LLMD_CONFIG, which beats /etc/llmd/llmd.toml."""
    monkeypatch.delenv("LLMD_CONFIG", raising=False)
    assert config_path(None) == Path("/etc/llmd/llmd.toml")
    monkeypatch.setenv("LLMD_CONFIG", "/srv/a.toml")
    assert config_path(None) == Path("/srv/a.toml")
    assert config_path("/srv/b.toml") == Path("/srv/b.toml")


@pytest.mark.parametrize(
    "text",
    [
        '[engine]\nmodel = "m"\nenv = { VLLM_API_KEY = 12345678 }\n',
        '[engine]\nmodel = "m"\n\nargs = "--api-key 12345678"\n',
        '[engine]\nmodel = "m"\nargs = ["--api-key", 12345678]\n',
    ],
)
def test_engine_args_and_env_are_never_echoed(tmp_path: Path, text: str) -> None:
    """engine.args and engine.env may hold secrets (--api-key, VLLM_API_KEY): an error names
    the key and its line, never the value."""
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    message = str(caught.value)
    assert "12345678" not in message and "not shown" in message
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "12345678" in row)
    assert f"llmd.toml:{line}: engine." in message


def test_key_line_finds_keys_under_their_tables() -> None:
    """The line of a dotted key: `name = ...` under its [table] (quoted names too), a table
    by its header; None when the scan cannot tell."""
    text = '[a]\nx = 1\n[b."c d"]\n  x=2\n"y" = 3\n[e]\n'
    assert key_line(text, "a.x") == 2
    assert key_line(text, "b.c d.x") == 4
    assert key_line(text, "b.c d.y") == 5
    assert key_line(text, "e") == 6
    assert key_line(text, "a.zz") is None
