"""Deploys whose own steps go wrong, on a real llmd over the simulator: a step that raises ends
the deploy with the error recorded and the old release serving, and a promoted canary's engine
that does not boot the new release is shown in the status and history while the canary serves
and the engine's supervisor restarts it."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import tomli_w

from llmd.admission.tenants import hash_key
from llmd.releases.store import ReleaseStore
from tests.releases.test_canary import config_text as canary_config
from tests.releases.test_orchestrator import config_text as replace_config
from tests.support.deploys import Served, Traffic, record
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.waiting import wait_for


def deploy_of_main(served: Served) -> dict[str, object]:
    """The status's deploy of engine main (empty before any)."""
    deploys = served.llmd.admin_status()["deploys"]
    return deploys[0] if deploys else {}


def test_a_deploy_step_that_raises_ends_the_deploy_and_the_old_release_serves(
    tiny_model_dir: Path,
) -> None:
    """The tenants file broken after start-up makes booting a release raise: the deploy does
    not hang with the engine held; it fails with the error in the status, the history and
    the log, r1 serves again and the request stream through it is all answered."""
    workdir = short_tmpdir("llmd-deploy-raise-")
    tenants = workdir / "tenants.toml"
    tenants.write_text(f'[tenants.t]\nkeys = ["{hash_key("x")}"]\n')
    store = ReleaseStore(workdir / "state")

    def text(model: Path, args: tuple[str, ...] = ()) -> str:
        raw = tomllib.loads(replace_config(store.state_dir, model, args))
        raw["admission"] = {"tenants_file": str(tenants)}
        return tomli_w.dumps(raw)

    record(store, "r1", text(tiny_model_dir), workdir)
    with LlmdProcess.running(text(tiny_model_dir), workdir=workdir) as llmd:
        served = Served(llmd, store, workdir, text)
        served.wait_tokenizer()
        served.release("r2", tiny_model_dir, "--seed", "7")
        traffic = Traffic(llmd.base_url)
        assert wait_for(lambda: len(traffic.outcomes) >= 3, 30)
        tenants.write_text("[tenants.t\n")  # no longer TOML
        deployed = served.cli("deploy", "r2")
        outcomes = traffic.finish()
        out = deployed.stdout + deployed.stderr
        assert deployed.returncode == 1, out + llmd.log_tail()
        assert "raised: ConfigError" in out, out
        assert outcomes and set(outcomes) == {"ok"}, [o for o in outcomes if o != "ok"][:3]
        deploy = deploy_of_main(served)
        assert deploy["phase"] == "failed" and "raised: ConfigError" in str(deploy["reason"])
        raised = [e for e in store.history()[0] if e["event"] == "step_failed"]
        assert raised and raised[0]["failed_step"] == "boot" and "ConfigError" in raised[0]["error"]
        assert '"event": "deploy_step_raised"' in llmd.log_path.read_text()
        answer = httpx.post(
            llmd.base_url + "/v1/completions",
            json={"model": "tiny", "prompt": "hi", "max_tokens": 4},
            headers={"Authorization": "Bearer x"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert served.release_of_main() == "r1"


def adopt_setup(tiny_model_dir: Path, max_failed_boots: int) -> tuple[Path, str, Path]:
    """A state directory with r1 and r2, where r2's engine refuses to boot while a marker
    file exists (a wrapper command around the simulator): the working directory, the
    config text (supervisor restarts slow enough to watch, giving up after
    `max_failed_boots`) and the marker's path."""
    workdir = short_tmpdir("llmd-adopt-")
    store = ReleaseStore(workdir / "state")
    text = functools.partial(canary_config, store.state_dir)

    def with_supervisor(config: str) -> str:
        raw = tomllib.loads(config)
        raw["supervisor"] = {"backoff_initial_s": 1.0, "max_failed_boots": max_failed_boots}
        return tomli_w.dumps(raw)

    record(store, "r1", with_supervisor(text(tiny_model_dir)), workdir)
    marker = workdir / "refuse-boot"
    wrapper = workdir / "engine.sh"
    wrapper.write_text(
        f'#!/bin/sh\nif [ -e "{marker}" ]; then echo "refusing to boot" >&2; exit 3; fi\n'
        f'exec "{sys.executable}" -m llmd.engine.sim "$@"\n'
    )
    os.chmod(wrapper, 0o755)
    raw = tomllib.loads(with_supervisor(text(tiny_model_dir, ("--seed", "7"))))
    raw["engine"]["command"] = [str(wrapper)]
    record(store, "r2", tomli_w.dumps(raw), workdir)
    return workdir, with_supervisor(text(tiny_model_dir)), marker


@contextlib.contextmanager
def adopting(
    tiny_model_dir: Path, max_failed_boots: int
) -> Iterator[tuple[Served, Traffic, Path, subprocess.Popen[str]]]:
    """llmd serving r1 (`adopt_setup`) with four clients sending requests, and a canary deploy
    of r2 under way that shows `adopting`: the served llmd, the traffic, the marker that keeps
    r2's engine from booting, and the deploy command's process."""
    workdir, config, marker = adopt_setup(tiny_model_dir, max_failed_boots)
    store = ReleaseStore(workdir / "state")
    with LlmdProcess.running(config, workdir=workdir) as llmd:
        served = Served(llmd, store, workdir, lambda model, args: config)
        served.wait_tokenizer()
        traffic = Traffic(llmd.base_url, threads=4)
        assert wait_for(lambda: len(traffic.outcomes) >= 4, 30)
        yield served, traffic, marker, deploy_until_adopting(served, marker)


def deploy_until_adopting(served: Served, marker: Path) -> subprocess.Popen[str]:
    """`llmd deploy r2 --canary 20,50,100 --step-s 1` started; the marker made once the
    canary takes traffic; returns when the deploy shows `adopting`."""
    command = [sys.executable, "-m", "llmd.cli", "deploy", "r2", "--canary", "20,50,100"]
    deploying = subprocess.Popen(
        [*command, "--step-s", "1", "--runtime-dir", str(served.llmd.runtime_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert wait_for(lambda: deploy_of_main(served).get("phase") == "canary", 60)
    marker.touch()
    adopting = wait_for(lambda: deploy_of_main(served).get("phase") == "adopting", 90)
    assert adopting, served.llmd.log_tail()
    return deploying


def test_a_promoted_engine_that_does_not_boot_is_shown_and_the_canary_serves_meanwhile(
    tiny_model_dir: Path,
) -> None:
    """A release whose engine refuses to boot once it is promoted (a marker file, made after
    its canary booted): `llmd status` and the history show it (`adopting`, `adopt_failed`),
    `llmd rollback` is refused meanwhile, the canary serves every request while the engine's
    supervisor restarts it; once it boots
    the engine serves r2, the canary goes and the deploy says promoted."""
    with adopting(tiny_model_dir, max_failed_boots=20) as (served, traffic, marker, deploying):
        llmd, store = served.llmd, served.store
        status = served.cli("status")
        assert "adopting: promoted, but engine main did not boot r2" in status.stdout, status
        refused = served.cli("rollback")
        assert refused.returncode == 1 and "roll back once it serves" in refused.stderr
        # The status shows `adopting` a moment before the history has the line (orchestrator.py
        # marks, then records): the verbs above no longer take a Python start each to run.
        assert wait_for(lambda: any(e["event"] == "adopt_failed" for e in store.history()[0]), 30)
        assert wait_for(lambda: llmd.admin_status()["engines"][0]["restarts"] >= 1, 30)
        marker.unlink()
        out, _ = deploying.communicate(timeout=120)
        outcomes = traffic.finish()
        assert deploying.returncode == 0, out + llmd.log_tail()
        assert set(outcomes) == {"ok"}, [o for o in outcomes if o != "ok"][:3]
        status_json = llmd.admin_status()
        assert [e["name"] for e in status_json["engines"]] == ["main"]
        assert status_json["engines"][0]["release"] == "r2"
        deploy = deploy_of_main(served)
        assert deploy["phase"] == "promoted" and "booted r2 again" in str(deploy["reason"])
        assert [e["event"] for e in store.history()[0]][-1] == "adopted"


def test_a_promoted_engine_whose_supervisor_gives_up_fails_the_deploy_the_canary_serves_on(
    tiny_model_dir: Path,
) -> None:
    """The engine never boots r2: once its supervisor gives up the deploy ends `failed`
    with what to do, and every request is still answered (by the canary); `llmd restart
    --engine main` then boots it again."""
    with adopting(tiny_model_dir, max_failed_boots=2) as (served, traffic, marker, deploying):
        llmd, store = served.llmd, served.store
        out, _ = deploying.communicate(timeout=120)
        outcomes = traffic.finish()
        assert set(outcomes) == {"ok"}, [o for o in outcomes if o != "ok"][:3]
        assert deploying.returncode == 1, out
        assert "gave up booting r2" in out and "llmd restart --engine main" in out, out
        assert deploy_of_main(served)["phase"] == "failed"
        assert [e["event"] for e in store.history()[0]][-1] == "failed"
        answer = httpx.post(
            llmd.base_url + "/v1/completions",
            json={"model": "tiny", "prompt": "hi", "max_tokens": 4},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        engines = {e["name"]: e for e in llmd.admin_status()["engines"]}
        assert engines["main"]["state"] == "failed" and engines["main.canary"]["release"] == "r2"
        marker.unlink()
        restarted = served.cli("restart", "--engine", "main")
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        serving = lambda: llmd.admin_status()["engines"][0]["state"] == "serving"  # noqa: E731
        assert wait_for(serving, 60), llmd.log_tail()
