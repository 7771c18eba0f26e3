"""`llmd deploy` and `llmd rollback` (replace) on a real llmd over the simulator: requests in
flight wait and are all answered, a release that fails its boot or smoke gate never takes
traffic and the old one serves again, the status, /metrics and the history say what runs.
The tests that end with r1 serving again share one llmd; the others have one of their own."""

from __future__ import annotations

import contextlib
import functools
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmd.releases.store import ReleaseStore
from tests.support.cli import run_llmd
from tests.support.configs import shipped_config
from tests.support.deploys import Served, Traffic, record
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import TINY_MODEL, ensure_tiny_variant
from tests.support.waiting import wait_for


def config_text(state_dir: Path, model: Path, args: tuple[str, ...] = ()) -> str:
    """etc/sim.toml on `model`, counting prompts with the tiny model's tokenizer whatever
    the engine serves (so a release with another tokenizer disagrees with llmd's count)."""
    return shipped_config(
        "sim.toml",
        model,
        args,
        server={"state_dir": str(state_dir), "drain_timeout_s": 10.0},
        validation={"tokenizer_path": str(TINY_MODEL)},
        release={"golden_latency_s": 20.0},
    )


@contextlib.contextmanager
def serving_r1(model: Path) -> Iterator[Served]:
    """llmd on the simulator serving release r1 of `model`, with r2 (another seed) recorded;
    stopped when the block ends."""
    workdir = short_tmpdir("llmd-deploy-")
    store = ReleaseStore(workdir / "state")
    text = functools.partial(config_text, store.state_dir)
    record(store, "r1", text(model), workdir)
    with LlmdProcess.running(text(model), workdir=workdir) as llmd:
        serving = Served(llmd, store, workdir, text)
        serving.wait_tokenizer()
        serving.release("r2", model, "--seed", "7")
        yield serving


@pytest.fixture(scope="module")
def r1_llmd(tiny_model_dir: Path) -> Iterator[Served]:
    """One llmd for the module's tests that end with r1 serving again (rolled back, refused
    or aborted; each release under a name of its own)."""
    with serving_r1(tiny_model_dir) as serving:
        yield serving


@pytest.fixture
def served(r1_llmd: Served) -> Served:
    """The module's llmd, r1 serving and no deploy under way (what each test leaves)."""
    return r1_llmd.as_left()


@pytest.fixture
def fresh(tiny_model_dir: Path) -> Iterator[Served]:
    """An llmd of its own serving r1, for a test that stops it or leaves another table."""
    with serving_r1(tiny_model_dir) as serving:
        yield serving


def deploy_totals(llmd: LlmdProcess) -> dict[tuple[str, str], float]:
    """llmd_deploys_total by (strategy, outcome), every pair exported from zero."""
    metrics = text_string_to_metric_families(httpx.get(llmd.base_url + "/metrics").text)
    return {
        (s.labels["strategy"], s.labels["outcome"]): s.value
        for f in metrics
        if f.name == "llmd_deploys"
        for s in f.samples
        if s.name.endswith("_total")
    }


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
        # Its engine boots, but the warm-up before it serves fails: the boot does.
        ("erroring", ("--fault-request", "error:500"), "warm-up request"),
    ],
)
def test_a_failing_release_is_rolled_back_and_the_old_serves(
    served: Served, name: str, args: tuple[str, ...], check: str, tiny_model_dir: Path
) -> None:
    """A release that does not boot, or answers errors, fails; r1 boots again and serves."""
    served.release(name, tiny_model_dir, *args)
    before = deploy_totals(served.llmd)
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
    # Every strategy and outcome is exported (from zero): exactly one more deploy ended, a
    # replace rolled back (the module's llmd counts the other tests' deploys too).
    after = deploy_totals(served.llmd)
    assert set(after) == set(before) and len(after) > 1, after
    moved = {pair: after[pair] - before[pair] for pair in after if after[pair] != before[pair]}
    assert moved == {("replace", "rolled_back"): 1.0}, (before, after)
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
    fresh: Served, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The running release's files gone: the deploy is refused and says which file."""
    served = fresh
    copy = tmp_path / "tiny-copy"
    subprocess.run(["cp", "-r", str(tiny_model_dir), str(copy)], check=True)
    served.release("copy", copy)
    assert served.cli("deploy", "copy").returncode == 0
    (copy / "config.json").unlink()
    refused = served.cli("deploy", "r1")
    assert refused.returncode == 1
    assert "previous release cannot boot" in refused.stderr
    assert str(copy / "config.json") in refused.stderr
    assert served.release_of_main() == "copy"


def test_rollback_aborts_a_deploy_under_way(served: Served, tiny_model_dir: Path) -> None:
    """While a slow release boots: a second deploy is refused, a request past its deadline
    gets 503 queue_timeout with Retry-After, `llmd rollback` aborts and r1 serves again."""
    served.release("slow", tiny_model_dir, "--fault-boot-delay", "60")
    command = [sys.executable, "-m", "llmd.cli", "deploy", "slow", "--runtime-dir"]
    deploying = subprocess.Popen(
        [*command, str(served.llmd.runtime_dir)], stdout=subprocess.PIPE, text=True
    )

    def phase() -> str | None:
        deploys = served.llmd.admin_status()["deploys"]
        return deploys[0]["phase"] if deploys else None

    assert wait_for(lambda: phase() == "booting_new", 30), served.llmd.log_tail()
    second = served.cli("deploy", "r2")
    assert second.returncode == 1 and "a deploy is under way" in second.stderr
    late = httpx.post(
        served.llmd.base_url + "/v1/completions",
        json={"model": "tiny", "prompt": "hi", "max_tokens": 4},
        headers={"x-llmd-deadline-ms": "300"},
        timeout=30,
    )
    assert late.status_code == 503, late.text
    assert late.json()["error"]["code"] == "queue_timeout", late.text
    assert int(late.headers["retry-after"]) >= 1
    rolled = served.cli("rollback")
    assert rolled.returncode == 1 and "aborted: llmd rollback" in rolled.stdout, rolled.stdout
    out, _ = deploying.communicate(timeout=120)
    assert deploying.returncode == 1 and "rolled_back on engine main; r1 serves" in out
    assert served.release_of_main() == "r1"
    assert '"event": "deploy_rolled_back"' in served.llmd.log_path.read_text()


def test_a_deploy_cut_by_sigterm_ends_at_once_and_is_closed_in_the_history(
    fresh: Served, tiny_model_dir: Path
) -> None:
    """SIGTERM while a slow release boots: `llmd deploy` (waiting) is answered at once with
    'llmd is stopping' (exit 1, no 500), llmd stops cleanly well before the release's 60 s
    boot, the history closes the deploy `interrupted`, and gc no longer calls it in progress."""
    served = fresh
    served.release("slow", tiny_model_dir, "--fault-boot-delay", "60")
    command = [sys.executable, "-m", "llmd.cli", "deploy", "slow", "--runtime-dir"]
    deploying = subprocess.Popen(
        [*command, str(served.llmd.runtime_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def phase() -> str | None:
        deploys = served.llmd.admin_status()["deploys"]
        return deploys[0]["phase"] if deploys else None

    assert wait_for(lambda: phase() == "booting_new", 30), served.llmd.log_tail()
    served.llmd.process.send_signal(signal.SIGTERM)
    out, err = deploying.communicate(timeout=120)
    assert served.llmd.process.wait(timeout=50) == 0, served.llmd.log_tail()
    assert deploying.returncode == 1 and "deploy ended: llmd is stopping" in err, out + err
    log = served.llmd.log_path.read_text()
    assert "CancelledError" not in log and "Exception in ASGI" not in log, log[-3000:]
    history, _ = served.store.history()
    assert [h["event"] for h in history][-1] == "interrupted", history
    assert history[-1]["new"] == "slow" and history[-1]["old"] == "r1"
    gc = run_llmd("release", "gc", "--dry-run", "--state-dir", str(served.store.state_dir))
    assert gc.returncode == 0 and "in progress" not in gc.stdout, gc.stdout


def test_a_restart_and_a_reload_keep_the_release_an_edited_file_brings_its_table(
    fresh: Served, tiny_model_dir: Path
) -> None:
    """After a deploy of r2, `llmd restart` boots r2 again, and so does `llmd reload` then
    `llmd restart` while the file is unchanged; an edited file's table is pending after a
    reload and the next restart boots it."""
    served = fresh
    assert served.cli("deploy", "r2").returncode == 0
    assert served.cli("restart").returncode == 0
    assert served.release_of_main() == "r2"
    reloaded = served.cli("reload")
    assert reloaded.returncode == 0 and "llmd restart" not in reloaded.stdout, reloaded.stdout
    assert served.cli("restart").returncode == 0
    assert served.release_of_main() == "r2"
    config = served.workdir / "llmd.toml"
    config.write_text(served.config_text(tiny_model_dir, ()).replace("1024", "512", 1))
    reloaded = served.cli("reload")
    assert reloaded.returncode == 0 and "llmd restart" in reloaded.stdout, reloaded.stdout
    again = served.cli("reload")  # still pending: the file still says so
    assert again.returncode == 0 and "llmd restart" in again.stdout, again.stdout
    assert served.cli("restart").returncode == 0
    assert served.release_of_main() is None  # no release records the edited table


def test_a_new_llmd_boots_the_deployed_release(fresh: Served) -> None:
    """Deploy r2, stop llmd, start it again on the same state directory: engine main runs
    r2's table (its engine has r2's flags), the status and the log say it was restored, and
    requests are answered."""
    served = fresh
    assert served.cli("deploy", "r2").returncode == 0
    assert served.llmd.stop() == 0
    config = (served.workdir / "llmd.toml").read_text()
    with LlmdProcess.running(config, workdir=served.workdir) as again:
        engine = again.admin_status()["engines"][0]
        assert engine["release"] == "r2", again.log_tail()
        assert "release r2 restored from the state directory" in engine["release_note"]
        assert "--seed" in Path(f"/proc/{engine['pid']}/cmdline").read_text()
        assert '"event": "engine_release_restored"' in again.log_path.read_text()
        status = run_llmd("status", "--runtime-dir", str(again.runtime_dir))
        assert "release    main r2 (release r2 restored" in status.stdout, status.stdout
        answer = httpx.post(
            again.base_url + "/v1/completions",
            json={"model": "tiny", "prompt": "hi", "max_tokens": 4},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text


def test_deploy_refuses_another_model_name_and_an_unrecorded_engine(
    fresh: Served, tiny_model_dir: Path
) -> None:
    """A release serving another model name is refused; so is any deploy once the engine
    runs a table no release records (after a restart with an edited config file)."""
    served = fresh
    other = served.workdir / "other.toml"
    other.write_text(served.config_text(tiny_model_dir, ()).replace('"tiny"', '"other"', 1))
    record(served.store, "renamed", other.read_text(), served.workdir)
    refused = served.cli("deploy", "renamed")
    assert refused.returncode == 1 and "keeps the served model name" in refused.stderr
    config = served.workdir / "llmd.toml"
    config.write_text(served.config_text(tiny_model_dir, ("--seed", "3")))
    assert served.cli("reload").returncode == 0 and served.cli("restart").returncode == 0
    assert served.release_of_main() is None
    refused = served.cli("deploy", "r2")
    assert refused.returncode == 1 and "runs no recorded release" in refused.stderr
