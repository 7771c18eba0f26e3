"""Which of a model's files a release pins, by role: weights, tokenizer, model config,
generation config and the chat template, each with its SHA-256.

Roles follow what vLLM 0.32 loads from a Hugging Face model directory: weights from the top-level
`*.safetensors` (else `*.bin`, `*.pt`, `*.pth`, `*.gguf`) and their index files; the tokenizer
from `--tokenizer DIR` when the engine args give one, else from the model directory; the chat
template from `--chat-template` (a file or an inline template), else the tokenizer's
`chat_template.jinja`, `chat_template.json` or `tokenizer_config.json`'s `chat_template` key
(transformers' own order).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmd.engine.args import engine_flag
from llmd.releases.digests import DigestCache

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "tekken.json",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """Where the engine's chat template comes from (`source`: a path, `--chat-template`
    inline, or `tokenizer_config.json:chat_template`) and the SHA-256 of its text or file."""

    source: str
    sha256: str


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """The digests (hex SHA-256) of a model's files by role, each a map from the file's name
    in its directory to its digest. `reason` is set, and the maps are empty, when the model is
    not a local directory (a hub name resolved by the engine: nothing here to pin)."""

    model_dir: str
    tokenizer_dir: str
    weights: dict[str, str]
    tokenizer: dict[str, str]
    config: dict[str, str]
    generation_config: dict[str, str]
    chat_template: ChatTemplate | None
    reason: str | None = None

    def paths(self) -> set[str]:
        """Every file path this record pins (for the digest cache's pruning)."""
        model, tokenizer = Path(self.model_dir), Path(self.tokenizer_dir)
        found = {str(model / n) for n in (*self.weights, *self.config, *self.generation_config)}
        found |= {str(tokenizer / name) for name in self.tokenizer}
        if self.chat_template is not None and Path(self.chat_template.source).is_absolute():
            found.add(self.chat_template.source)
        return found

    def missing(self) -> list[str]:
        """The pinned files that are gone now (a rollback to this release cannot boot)."""
        return sorted(path for path in self.paths() if not Path(path).is_file())


def model_files(model: str, args: Sequence[str], cache: DigestCache) -> ModelFiles:
    """Inventory and hash the files of `model` (a directory) as an engine started with `args`
    would load them. Raises OSError when a file cannot be read."""
    model_dir = Path(model).expanduser()
    if not model_dir.is_dir():
        reason = f"{model} is not a local directory (the engine resolves it; nothing to pin)"
        return ModelFiles(model, model, {}, {}, {}, {}, None, reason)
    model_dir = model_dir.resolve()
    tokenizer_arg = engine_flag(args, "--tokenizer")
    tokenizer_dir = (
        Path(tokenizer_arg).expanduser().resolve()
        if tokenizer_arg and Path(tokenizer_arg).expanduser().is_dir()
        else model_dir
    )
    names = sorted(p.name for p in model_dir.iterdir() if p.is_file())
    has_safetensors = any(name.endswith(".safetensors") for name in names)
    weights = [
        name
        for name in names
        if (name.endswith(".safetensors") or name.endswith(".index.json"))
        or (not has_safetensors and name.endswith(WEIGHT_SUFFIXES))
    ]

    def digests(directory: Path, wanted: Sequence[str]) -> dict[str, str]:
        return {
            name: cache.digest(directory / name) for name in wanted if (directory / name).is_file()
        }

    return ModelFiles(
        model_dir=str(model_dir),
        tokenizer_dir=str(tokenizer_dir),
        weights=digests(model_dir, weights),
        tokenizer=digests(tokenizer_dir, TOKENIZER_FILES),
        config=digests(model_dir, ("config.json",)),
        generation_config=digests(model_dir, ("generation_config.json",)),
        chat_template=_chat_template(tokenizer_dir, engine_flag(args, "--chat-template"), cache),
    )


def _chat_template(
    tokenizer_dir: Path, argument: str | None, cache: DigestCache
) -> ChatTemplate | None:
    if argument is not None:
        path = Path(argument).expanduser()
        if path.is_file():
            return ChatTemplate(str(path.resolve()), cache.digest(path.resolve()))
        return ChatTemplate("--chat-template (inline)", _text_digest(argument))
    for name in ("chat_template.jinja", "chat_template.json"):
        if (tokenizer_dir / name).is_file():
            return ChatTemplate(str(tokenizer_dir / name), cache.digest(tokenizer_dir / name))
    try:
        config: Any = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if template is None:
        return None
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return ChatTemplate("tokenizer_config.json:chat_template", _text_digest(text))


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
