"""`llmd deploy` and `llmd rollback` (replace) on a real llmd over the simulator: requests in
flight wait and are all answered, a release that fails its boot or smoke gate never takes
traffic and the old one serves again, the status, /metrics and the history say what runs."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from llmd.config import load_config
from llmd.releases.store import ReleaseStore, create_release
from tests.releases.conftest import NoNvml
from tests.support.configs import shipped_config
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_variant
from tests.support.waiting import wait_for


class Served:
    """One llmd serving release r1 of the tiny model, with releases recorded beside it."""

    def __init__(self, llmd: LlmdProcess, store: ReleaseStore, workdir: Path) -> None:
        self.llmd, self.store, self.workdir = llmd, store, workdir

    def release(self, name: str, model: Path, *args: str) -> None:
        """Record release `name`: the served engine table with `model` and extra `args`."""
        path = self.workdir / f"{name}.toml"
        path.write_text(config_text(model, self.store.state_dir, args))
        create_release(self.store, name, "main", load_config(path).engine_tables["main"], NoNvml())

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """`llmd ARGV --runtime-dir RUN` against this llmd."""
        command = [sys.executable, "-m", "llmd.cli", *argv, "--runtime-dir"]
        return subprocess.run(
            [*command, str(self.llmd.runtime_dir)],
            capture_output=True,
            text=True,
            timeout=300,
        )

    def release_of_main(self) -> str | None:
        engine: dict[str, Any] = self.llmd.admin_status()["engines"][0]
        return engine["release"]


def config_text(model: Path, state_dir: Path, args: tuple[str, ...] = ()) -> str:
    """etc/sim.toml on `model`, counting prompts with the tiny model's tokenizer whatever
    the engine serves (so a release with another tokenizer disagrees with llmd's count)."""
    return shipped_config(
        "sim.toml",
        model,
        args,
        server={"state_dir": str(state_dir), "drain_timeout_s": 10.0},
        validation={"tokenizer_path": str(model)},
        release={"golden_latency_s": 20.0},
    )


@pytest.fixture
def served(tiny_model_dir: Path) -> Iterator[Served]:
    """llmd on the simulator serving release r1, with r2 (another seed) recorded."""
    workdir = short_tmpdir("llmd-deploy-")
    store = ReleaseStore(workdir / "state")
    text = config_text(tiny_model_dir, store.state_dir)
    (workdir / "r1.toml").write_text(text)
    create_release(
        store, "r1", "main", load_config(workdir / "r1.toml").engine_tables["main"], NoNvml()
    )
    with LlmdProcess.running(text, workdir=workdir) as llmd:
        serving = Served(llmd, store, workdir)
        serving.release("r2", tiny_model_dir, "--seed", "7")
        yield serving


class Traffic:
    """Chat requests through the openai client (no retries), one after another on `threads`
    threads, until stopped; every outcome kept."""

    def __init__(self, base_url: str, threads: int = 3) -> None:
        self.client = openai.OpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0)
        self.stop = threading.Event()
        self.outcomes: list[str] = []
        self.pool = concurrent.futures.ThreadPoolExecutor(threads)
        self.runs = [self.pool.submit(self._loop) for _ in range(threads)]

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                answer = self.client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8
                )
                self.outcomes.append("ok" if answer.choices else "empty")
            except openai.APIError as exc:
                self.outcomes.append(f"error: {exc}")

    def finish(self) -> list[str]:
        self.stop.set()
        for run in self.runs:
            run.result(timeout=120)
        self.pool.shutdown()
        return self.outcomes


def test_replace_deploy_and_rollback_lose_no_request(served: Served) -> None:
    """Deploy r2 then roll back to r1 under a request stream: every request is answered, the
    status and llmd_release_info follow, the history records both deploys promoted."""
    assert served.release_of_main() == "r1"
    traffic = Traffic(served.llmd.base_url)
    assert wait_for(lambda: len(traffic.outcomes) >= 3, 30)
    deployed = served.cli("deploy", "r2")
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr + served.llmd.log_tail()
    assert "promoted on engine main; r2 serves" in deployed.stdout
    assert served.release_of_main() == "r2"
    metrics = httpx.get(served.llmd.base_url + "/metrics").text
    assert 'llmd_release_info{engine="main",release="r2"} 1.0' in metrics
    rolled = served.cli("rollback")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert "r1 serves" in rolled.stdout
    count = len(traffic.outcomes)
    assert wait_for(lambda: len(traffic.outcomes) >= count + 3, 30)
    outcomes = traffic.finish()
    assert outcomes and set(outcomes) == {"ok"}, [o for o in outcomes if o != "ok"][:3]
    assert served.release_of_main() == "r1"
    events = [(e["new"], e["event"]) for e in served.store.history()[0]]
    assert ("r2", "promoted") in events and ("r1", "promoted") in events
    deploys = served.llmd.admin_status()["deploys"]
    assert [(d["new"], d["phase"]) for d in deploys] == [("r1", "promoted")]


@pytest.mark.parametrize(
    ("name", "args", "check"),
    [
        ("boots-not", ("--fault-boot-exit", "3"), "did not boot"),
        ("erroring", ("--fault-request", "error:500"), "golden"),
    ],
)
def test_a_failing_release_is_rolled_back_and_the_old_serves(
    served: Served, name: str, args: tuple[str, ...], check: str, tiny_model_dir: Path
) -> None:
    """A release that does not boot, or answers errors, fails; r1 boots again and serves."""
    served.release(name, tiny_model_dir, *args)
    deployed = served.cli("deploy", name)
    assert deployed.returncode == 1, deployed.stdout + deployed.stderr
    assert "rolled_back on engine main; r1 serves" in deployed.stdout
    assert check in deployed.stdout, deployed.stdout
    assert served.release_of_main() == "r1"
    answer = httpx.post(
        served.llmd.base_url + "/v1/completions",
        json={"model": "tiny", "prompt": "hi", "max_tokens": 4},
        timeout=30,
    )
    assert answer.status_code == 200
    kinds = [e["event"] for e in served.store.history()[0] if e["new"] == name]
    assert kinds[0] == "deploy_started" and kinds[-1] == "rolled_back"


def test_a_tokenizer_that_disagrees_fails_the_smoke_gate(served: Served) -> None:
    """A release whose tokenizer is not the one llmd counts with fails `token_count`."""
    served.release("other-tokenizer", ensure_tiny_variant(7))
    deployed = served.cli("deploy", "other-tokenizer")
    assert deployed.returncode == 1, deployed.stdout + deployed.stderr
    assert "token_count" in deployed.stdout
    assert served.release_of_main() == "r1"


def test_deploy_refuses_when_the_previous_release_files_are_gone(
    served: Served, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The running release's files gone: the deploy is refused and says which file."""
    copy = tmp_path / "tiny-copy"
    subprocess.run(["cp", "-r", str(tiny_model_dir), str(copy)], check=True)
    served.release("copy", copy)
    assert served.cli("deploy", "copy").returncode == 0
    (copy / "config.json").unlink()
    refused = served.cli("deploy", "r1")
    assert refused.returncode == 1
    assert "previous release cannot boot" in refused.stderr
    assert str(copy / "config.json") in refused.stderr
    assert json.loads(json.dumps(served.llmd.admin_status()["engines"][0]))["release"] == "copy"
