"""`release diff`: field by field, flags by name, digests by file."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from llmd.releases.diff import Change, diff_releases, tokenizer_changes
from llmd.releases.record import Release
from llmd.releases.store import ReleaseStore, create_release
from tests.releases.conftest import NoNvml, engine
from tests.support.model import ensure_tiny_variant


def paths(changes: list[Change]) -> dict[str, Change]:
    return {c.path: c for c in changes}


def test_two_releases_of_the_same_engine_differ_only_in_identity(
    store: ReleaseStore, model_dir: Path
) -> None:
    """Name and created-at change; nothing else is reported."""
    a, _ = create_release(store, "a", "main", engine(model_dir), NoNvml())
    b, _ = create_release(store, "b", "main", engine(model_dir), NoNvml())
    assert set(paths(diff_releases(a, b))) == {"name", "created_at"}


def test_args_show_each_added_removed_and_changed_flag(
    store: ReleaseStore, model_dir: Path
) -> None:
    """--max-model-len 1024 -> 2048, --enforce-eager gone, --max-num-seqs 8 new."""
    a, _ = create_release(store, "a", "main", engine(model_dir), NoNvml())
    args = ("--max-model-len", "2048", "--max-num-seqs=8")
    b, _ = create_release(store, "b", "main", engine(model_dir, args=args), NoNvml())
    changes = paths(diff_releases(a, b))
    assert (
        changes["table.args --max-model-len"].line() == "table.args --max-model-len: 1024 -> 2048"
    )
    assert (
        changes["table.args --enforce-eager"].line()
        == "table.args --enforce-eager: - --enforce-eager"
    )
    assert (
        changes["table.args --max-num-seqs"].line()
        == "table.args --max-num-seqs: + --max-num-seqs 8"
    )


def test_reordered_args_are_reported_as_an_order_change(
    store: ReleaseStore, model_dir: Path
) -> None:
    """Same flags, another order: one change, not a false all-clear."""
    a, _ = create_release(store, "a", "main", engine(model_dir), NoNvml())
    flipped = ("--enforce-eager", "--max-model-len", "1024")
    b, _ = create_release(store, "b", "main", engine(model_dir, args=flipped), NoNvml())
    assert "table.args (order)" in paths(diff_releases(a, b))


def test_another_model_names_the_files_that_changed(store: ReleaseStore, model_dir: Path) -> None:
    """A variant model (seed 7): weights, tokenizer.json and the model dir differ; the chat
    template and generation config do not."""
    a, _ = create_release(store, "a", "main", engine(model_dir), NoNvml())
    b, _ = create_release(store, "b", "main", engine(ensure_tiny_variant(7)), NoNvml())
    changes = paths(diff_releases(a, b))
    assert "files.weights.model.safetensors" in changes
    assert "files.tokenizer.tokenizer.json" in changes
    assert "files.tokenizer.tokenizer_config.json" not in changes
    assert "files.generation_config.generation_config.json" not in changes
    assert not any(p.startswith("files.chat_template") for p in changes)
    line = changes["files.weights.model.safetensors"].line()
    assert line.startswith("files.weights.model.safetensors: ") and "… -> " in line


def test_nested_values_added_removed_and_changed(store: ReleaseStore, model_dir: Path) -> None:
    """env keys and versions compare key by key; a file that appears is `added`."""
    a, _ = create_release(store, "a", "main", engine(model_dir, env={"X": "1", "Y": "1"}), NoNvml())
    b: Release = dataclasses.replace(
        a,
        table=dataclasses.replace(a.table, env={"X": "2", "Z": "1"}),
        versions=dataclasses.replace(a.versions, vllm="9.9.9"),
        files=dataclasses.replace(
            a.files, generation_config={**a.files.generation_config, "extra.json": "ab" * 32}
        ),
    )
    changes = paths(diff_releases(a, b))
    assert (changes["table.env.X"].old, changes["table.env.X"].new) == ("1", "2")
    assert changes["table.env.Y"].kind == "removed" and changes["table.env.Z"].kind == "added"
    assert changes["versions.vllm"].new == "9.9.9"
    assert changes["files.generation_config.extra.json"].kind == "added"


def test_tokenizer_changes_name_the_tokenizer_files_and_template_not_their_place(
    store: ReleaseStore, model_dir: Path, tmp_path: Path
) -> None:
    """A copy of the same model elsewhere and other engine args: no tokenizer change; a
    changed chat template in tokenizer_config.json is one (the canary's rule)."""
    a, _ = create_release(store, "a", "main", engine(model_dir), NoNvml())
    copy = tmp_path / "copy"
    shutil.copytree(model_dir, copy)
    b, _ = create_release(store, "b", "main", engine(copy, ("--seed", "3")), NoNvml())
    assert tokenizer_changes(a, b) == []
    config_path = copy / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = "{{ messages[0]['content'] }}"
    config_path.write_text(json.dumps(config))
    c, _ = create_release(store, "c", "main", engine(copy), NoNvml())
    changed = tokenizer_changes(a, c)
    assert "files.tokenizer.tokenizer_config.json" in changed
    assert "files.chat_template.sha256" in changed
