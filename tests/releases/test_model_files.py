"""Which files a release pins as weights, tokenizer and chat template, as vLLM would load them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from llmd.releases.digests import DigestCache, sha256_file
from llmd.releases.model_files import ModelFiles, model_files


def files_of(model: Path, args: tuple[str, ...], tmp_path: Path) -> ModelFiles:
    return model_files(str(model), args, DigestCache(tmp_path / "cache.json"))


def test_the_template_inside_tokenizer_config_is_pinned_by_its_text(
    model_dir: Path, tmp_path: Path
) -> None:
    """No template file: the digest is the SHA-256 of tokenizer_config's chat_template."""
    template = json.loads((model_dir / "tokenizer_config.json").read_text())["chat_template"]
    found = files_of(model_dir, (), tmp_path).chat_template
    assert found is not None
    assert found.sha256 == hashlib.sha256(template.encode()).hexdigest()


def test_a_template_file_wins_over_tokenizer_config(model_dir: Path, tmp_path: Path) -> None:
    """chat_template.jinja beside the tokenizer is what transformers loads first."""
    (model_dir / "chat_template.jinja").write_text("{{ messages }}")
    found = files_of(model_dir, (), tmp_path).chat_template
    assert found is not None and found.source == str(model_dir.resolve() / "chat_template.jinja")
    assert found.sha256 == sha256_file(model_dir / "chat_template.jinja")


def test_the_chat_template_flag_wins_over_the_model(model_dir: Path, tmp_path: Path) -> None:
    """`--chat-template FILE` pins that file; an inline template pins its text."""
    template = tmp_path / "custom.jinja"
    template.write_text("{{ bos_token }}")
    found = files_of(model_dir, ("--chat-template", str(template)), tmp_path).chat_template
    assert found is not None and found.source == str(template.resolve())
    inline = files_of(model_dir, ("--chat-template={{ x }}",), tmp_path).chat_template
    assert inline is not None and inline.source == "--chat-template (inline)"
    assert inline.sha256 == hashlib.sha256(b"{{ x }}").hexdigest()


def test_the_tokenizer_flag_moves_the_tokenizer_files(
    model_dir: Path, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """`--tokenizer DIR`: tokenizer files (and the template) come from DIR, weights do not."""
    files = files_of(model_dir, ("--tokenizer", str(tiny_model_dir)), tmp_path)
    assert files.tokenizer_dir == str(tiny_model_dir.resolve())
    assert files.model_dir == str(model_dir.resolve())
    assert str(tiny_model_dir.resolve() / "tokenizer.json") in files.paths()
    assert str(model_dir.resolve() / "tokenizer.json") not in files.paths()


def test_pickled_weights_count_only_without_safetensors(model_dir: Path, tmp_path: Path) -> None:
    """vLLM prefers safetensors: a stray .bin beside them is not a weight; alone it is."""
    (model_dir / "training_args.bin").write_bytes(b"\0" * 10)
    assert set(files_of(model_dir, (), tmp_path).weights) == {"model.safetensors"}
    (model_dir / "model.safetensors").unlink()
    assert set(files_of(model_dir, (), tmp_path).weights) == {"training_args.bin"}


def test_missing_lists_the_pinned_files_that_are_gone(model_dir: Path, tmp_path: Path) -> None:
    """A deleted weight file shows up in `missing()`."""
    files = files_of(model_dir, (), tmp_path)
    (model_dir / "model.safetensors").unlink()
    assert files.missing() == [str(model_dir.resolve() / "model.safetensors")]
