"""The reload plan: what applies live, what needs llmd restarted, what waits for the engine;
and a revoked key refused at once on a live daemon."""

from __future__ import annotations

import dataclasses
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from llmd.admission.tenants import hash_key
from llmd.config import Config, EngineConfig, ServerConfig, SupervisorConfig, UpstreamConfig
from llmd.daemon.reload import plan_reload
from tests.support.cli import llmd_verb
from tests.support.clients import closed_after_test
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")


def test_limits_apply_and_listen_and_engine_changes_wait() -> None:
    """Server limits and policy apply at once; listen needs llmd restarted; the new engine
    table is kept for the next engine restart, the running one stays in the applied config."""
    current = Config(engine=EngineConfig(model="a", args=("--x",)))
    new = Config(
        server=ServerConfig(listen="127.0.0.1:9", max_body_bytes=10),
        engine=EngineConfig(model="b", args=("--x",)),
        supervisor=SupervisorConfig(max_failed_boots=9),
    )
    plan = plan_reload(current, new)
    assert plan.config.server.max_body_bytes == 10 and plan.config.supervisor.max_failed_boots == 9
    assert plan.config.engine == current.engine
    assert plan.config.server.listen == current.server.listen
    assert plan.llmd_restart == ["server.listen"] and plan.engine_keys == ["engine.model"]
    assert plan.engine == new.engine
    assert plan.needs_restart == ["server.listen", "engine.model"]


def test_engines_added_changed_or_removed_wait_and_upstreams_apply() -> None:
    """Per engine: a changed table names its keys (`engines.NAME.KEY`), an added or removed
    engine its table (`engines.NAME`), all kept for `llmd restart --engine NAME` while the
    applied config keeps the running engines; upstreams apply at once."""
    a, b = EngineConfig(model="a"), EngineConfig(model="b")
    current = Config(engine=None, engines={"pa": a, "pb": a})
    new = Config(
        engine=None,
        engines={"pa": dataclasses.replace(a, args=("--y",)), "pc": b},
        upstreams={"lab": UpstreamConfig(url="http://10.0.0.5:8000", models=("far",))},
    )
    plan = plan_reload(current, new)
    assert plan.engines == {"pa": new.engines["pa"], "pb": None, "pc": b}
    assert plan.engine_keys == ["engines.pa.args", "engines.pb", "engines.pc"]
    assert plan.config.engine_tables == {"pa": a, "pb": a}
    assert plan.config.upstreams == new.upstreams


def test_a_deployed_table_is_left_alone_until_the_file_changes() -> None:
    """The engine runs a deployed table (r2) beside a file still saying r1: reloading that
    file keeps nothing pending; an edited file's table is pending, its keys read against the
    file's previous table; an engine absent from `file_tables` compares its running table."""
    r1, r2 = EngineConfig(model="a"), EngineConfig(model="a", args=("--seed", "7"))
    running = Config(engine=r2)
    same = plan_reload(running, Config(engine=r1), {"main": r1})
    assert same.engines == {} and same.config.engine == r2
    edited = dataclasses.replace(r1, model="b")
    plan = plan_reload(running, Config(engine=edited), {"main": r1})
    assert plan.engines == {"main": edited} and plan.engine_keys == ["engine.model"]
    still = plan_reload(running, Config(engine=edited), {})
    assert still.engine_keys == ["engine.model", "engine.args"]


def test_a_send_buffer_back_to_zero_needs_new_sockets() -> None:
    """send_buffer_bytes may grow or shrink live; back to 0 (autotuning) needs llmd restarted."""
    current = Config(server=ServerConfig(send_buffer_bytes=65536))
    to_zero = plan_reload(current, Config(server=ServerConfig(send_buffer_bytes=0)))
    assert to_zero.llmd_restart == ["server.send_buffer_bytes"]
    assert to_zero.config.server.send_buffer_bytes == 65536
    larger = plan_reload(current, Config(server=ServerConfig(send_buffer_bytes=131072)))
    assert larger.llmd_restart == [] and larger.config.server.send_buffer_bytes == 131072


def test_unchanged_config_needs_nothing() -> None:
    """Reloading the same config changes nothing and needs no restart."""
    config = Config(engine=EngineConfig(model="a"))
    plan = plan_reload(config, dataclasses.replace(config))
    assert plan.config == config and plan.needs_restart == [] and plan.engine is None


def tenants_file(path: Path, **keys: str) -> None:
    """Write a tenants file at `path` with one tenant per name in `keys`, holding that key."""
    path.write_text(
        "".join(f'[tenants.{name}]\nkeys = ["{hash_key(key)}"]\n' for name, key in keys.items())
    )


def test_a_revoked_key_gets_401_within_a_second_of_a_reload() -> None:
    """A key removed from the tenants file: the official openai client gets 401 on its first
    request after `llmd reload` returns, and within a second of a SIGHUP (`systemctl reload`);
    the key that stays keeps working."""
    workdir = short_tmpdir("llmd-revoke-")
    tenants = workdir / "tenants.toml"
    tenants_file(tenants, alice="alice-key-1", bob="bob-key-1", carol="carol-key-1")
    config = sim_config(ensure_tiny_model(), admission={"tenants_file": str(tenants)})
    llmd = LlmdProcess.start(config, workdir=workdir)
    try:
        llmd.wait_ready(timeout_s=30)
        base = llmd.base_url + "/v1"
        alice, bob, carol = (
            closed_after_test(openai.OpenAI(base_url=base, api_key=key, max_retries=0))
            for key in ("alice-key-1", "bob-key-1", "carol-key-1")
        )
        for client in (alice, bob, carol):
            client.completions.create(model="tiny", prompt="hello", max_tokens=2)

        tenants_file(tenants, bob="bob-key-1", carol="carol-key-1")
        result = llmd_verb(llmd, "reload")
        reloaded = time.monotonic()
        assert result.returncode == 0, result.stderr
        with pytest.raises(openai.AuthenticationError) as refused:
            alice.completions.create(model="tiny", prompt="hello", max_tokens=2)
        assert time.monotonic() - reloaded < 1.0
        assert refused.value.status_code == 401
        assert refused.value.body["code"] == "invalid_api_key"  # type: ignore[index]

        tenants_file(tenants, bob="bob-key-1")
        llmd.process.send_signal(signal.SIGHUP)
        signalled = time.monotonic()
        refused_at = None
        for _ in range(200):  # bounded by count; each try is one request
            try:
                carol.completions.create(model="tiny", prompt="hello", max_tokens=2)
            except openai.AuthenticationError:
                refused_at = time.monotonic()
                break
        assert refused_at is not None and refused_at - signalled < 1.0
        bob.completions.create(model="tiny", prompt="hello", max_tokens=2)
    finally:
        llmd.stop()


def test_a_reload_that_changes_the_swap_groups_asks_for_llmd_restarted(tmp_path: Path) -> None:
    """The swap groups are built at start-up: a reload that changes them keeps the running ones
    and names `swap_groups` among the keys that need llmd restarted."""
    from llmd.config import load_config
    from llmd.daemon.reload import plan_reload

    tables = "".join(f'[engines.{n}]\nkind = "sim"\nmodel = "m"\non_demand = true\n' for n in "ab")
    text = '[swap_groups.g]\nengines = ["a", "b"]\nmax_resident = 1\n' + tables
    path = tmp_path / "llmd.toml"
    path.write_text(text)
    current = load_config(path)
    path.write_text(text.replace("[swap_groups.g]", "[swap_groups.h]"))
    changed = load_config(path)
    plan = plan_reload(current, changed)
    assert plan.llmd_restart == ["swap_groups"]
    assert plan.config.swap_groups == current.swap_groups
    assert plan_reload(current, current).llmd_restart == []
