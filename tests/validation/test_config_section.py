"""The [validation] config section: documented defaults load, wrong values name the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from llmd.config import ValidationConfig, load_config
from llmd.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_example_config_documents_the_defaults() -> None:
    """etc/llmd.toml's [validation] holds every key with its default value."""
    documented = tomllib.loads((REPO / "etc" / "llmd.toml").read_text())["validation"]
    assert documented == {
        "context_policy": "reject",
        "default_max_tokens": 2048,
        "max_tokens_limit": 0,
        "max_n": 16,
        "max_prompts": 64,
        "tokenizer": "auto",
        "tokenizer_path": "",
        "max_tokenize_calls": 8,
    }
    assert ValidationConfig(**documented) == ValidationConfig()


def test_validation_section_loads(tmp_path: Path) -> None:
    """Values in [validation] reach the frozen config."""
    path = tmp_path / "llmd.toml"
    path.write_text(
        '[engine]\nmodel = "m"\n[validation]\ncontext_policy = "clamp"\ndefault_max_tokens = 512\n'
    )
    config = load_config(path)
    assert (config.validation.context_policy, config.validation.default_max_tokens) == (
        "clamp",
        512,
    )


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('context_policy = "truncate"', "validation.context_policy"),
        ("default_max_tokens = -1", "validation.default_max_tokens"),
        ('tokenizer = "remote"', "validation.tokenizer"),
        ("max_tokens = 5", "validation.max_tokens"),
    ],
)
def test_bad_validation_values_name_the_key(tmp_path: Path, line: str, key: str) -> None:
    """A wrong value or unknown key in [validation] fails at load, naming the key."""
    path = tmp_path / "llmd.toml"
    path.write_text(f'[engine]\nmodel = "m"\n[validation]\n{line}\n')
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(path)


async def test_engine_rendering_args_make_llmd_count_through_the_engine(
    tokenizer_dir: Path,
) -> None:
    """With --chat-template (or --tokenizer...) in engine.args, no local tokenizer is loaded."""
    from llmd.config import Config, EngineConfig
    from llmd.supervisor.state import EngineState
    from llmd.validation.validator import Validator

    engine = EngineConfig(model=str(tokenizer_dir), args=("--chat-template=/t.jinja",))
    validator = Validator(Config(engine=engine), EngineState(), client=lambda: None)  # type: ignore[arg-type,return-value]
    await validator.load_tokenizer()
    assert validator.local is None
