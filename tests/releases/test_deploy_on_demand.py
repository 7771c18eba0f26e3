"""`llmd deploy` to an engine asleep on demand (on the simulator): the deploy does not wake it;
the release boots when its swap group next wakes it for a request, passes the smoke gate, and
that request is answered by it; a rollback meanwhile wakes it with the old release instead."""

from __future__ import annotations

import concurrent.futures
import functools
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import tomli_w

from llmd.releases.store import ReleaseStore
from tests.support.configs import multi_sim_config
from tests.support.deploys import record
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")


def group_config(state_dir: str, sleep: str, coder_args: tuple[str, ...] = ()) -> str:
    """Engines chat and coder, on demand in one swap group of one (chat boots awake, coder
    asleep), sleeping as `sleep` says; coder with `coder_args` too."""
    engines = {"chat": ("chat", ["--sim-wake-s", "0.2"])}
    engines["coder"] = ("coder", ["--sim-wake-s", "0.2", *coder_args])
    raw = tomllib.loads(
        multi_sim_config(ensure_tiny_model(), engines, server={"state_dir": state_dir})
    )
    for engine in raw["engines"].values():
        engine["on_demand"], engine["sleep"] = True, sleep
    raw["swap_groups"] = {
        "gpu0": {
            "engines": ["chat", "coder"],
            "max_resident": 1,
            "min_residence_s": 0.3,
            "max_wait_s": 0.2,
        }
    }
    return tomli_w.dumps(raw)


def engine_of(llmd: LlmdProcess, name: str) -> dict[str, object]:
    return next(e for e in llmd.admin_status()["engines"] if e["name"] == name)


def recorded(sleep: str) -> tuple[Path, str]:
    """A work directory whose state holds coder's releases r1 (as configured) and r2 (another
    seed), and the config that runs r1."""
    workdir = short_tmpdir("llmd-deploy-asleep-")
    store = ReleaseStore(workdir / "state")
    state_dir = str(store.state_dir)
    record(store, "r1", group_config(state_dir, sleep), workdir, engine="coder")
    record(store, "r2", group_config(state_dir, sleep, ("--seed", "7")), workdir, engine="coder")
    return workdir, group_config(state_dir, sleep)


def ask_coder(llmd: LlmdProcess) -> str:
    """One chat request for coder (it waits for the wake); the model that answered."""
    with openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="x", max_retries=0) as client:
        answer = client.chat.completions.create(
            model="coder", messages=[{"role": "user", "content": "hello"}], max_tokens=4, timeout=90
        )
    assert answer.choices[0].message.content
    return answer.model


@pytest.mark.parametrize("sleep", ["auto", "stop"])
def test_a_deploy_to_a_sleeping_engine_boots_the_release_when_it_next_wakes(sleep: str) -> None:
    """A canary to asleep coder is refused; deploying r2 by replace leaves it asleep while the
    deploy waits at its boot step; a request for coder wakes it with r2 (its argv carries r2's
    flag), the deploy is promoted, and the request is answered by coder."""
    workdir, text = recorded(sleep)
    with LlmdProcess.running(text, workdir=workdir) as llmd:
        assert wait_for(lambda: engine_of(llmd, "coder")["state"] == "asleep", 60)
        assert engine_of(llmd, "coder")["release"] == "r1"
        command = [sys.executable, "-m", "llmd.cli", "deploy", "r2", "--engine", "coder"]
        command += ["--runtime-dir", str(llmd.runtime_dir)]
        canary = subprocess.run([*command, "--canary", "50,100"], capture_output=True, text=True)
        assert canary.returncode != 0 and "is asleep" in canary.stdout + canary.stderr
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            deploying = pool.submit(
                subprocess.run, command, capture_output=True, text=True, timeout=120
            )
            booting = lambda: any(  # noqa: E731
                d["engine"] == "coder" and d["phase"] == "booting_new"
                for d in llmd.admin_status()["deploys"]
            )
            assert wait_for(booting, 30), llmd.log_tail()
            assert engine_of(llmd, "coder")["state"] == "asleep"  # the deploy did not wake it
            assert not deploying.done()
            assert ask_coder(llmd) == "coder"
            deployed = deploying.result()
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr + llmd.log_tail()
        assert "promoted on engine coder; r2 serves" in deployed.stdout
        assert engine_of(llmd, "coder")["release"] == "r2"
        started = [
            line for line in llmd.log_path.read_text().splitlines() if "engine_started" in line
        ]
        assert "--seed 7" in started[-1] and '"engine": "coder"' in started[-1], started[-1]


def test_a_rollback_while_the_deploy_waits_for_the_wake_wakes_the_old_release() -> None:
    """`llmd rollback` while a deploy to asleep coder waits for its wake: the engine stays
    asleep, and the next request wakes it with the old release; the deploy ends rolled back."""
    workdir, text = recorded("auto")
    with LlmdProcess.running(text, workdir=workdir) as llmd:
        assert wait_for(lambda: engine_of(llmd, "coder")["state"] == "asleep", 60)
        cli = [sys.executable, "-m", "llmd.cli"]
        where = ["--engine", "coder", "--runtime-dir", str(llmd.runtime_dir)]

        def phases() -> list[str]:
            return [d["phase"] for d in llmd.admin_status()["deploys"]]

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            run = functools.partial(subprocess.run, capture_output=True, text=True, timeout=120)
            deploying = pool.submit(run, [*cli, "deploy", "r2", *where])
            assert wait_for(lambda: phases() == ["booting_new"], 30), llmd.log_tail()
            rolling = pool.submit(run, [*cli, "rollback", *where])
            assert wait_for(lambda: phases() == ["booting_old"], 30), llmd.log_tail()
            assert engine_of(llmd, "coder")["state"] == "asleep"
            assert ask_coder(llmd) == "coder"
            for ended in (deploying.result(), rolling.result()):
                assert "rolled_back on engine coder; r1 serves" in ended.stdout, ended.stdout
        assert engine_of(llmd, "coder")["release"] == "r1"
