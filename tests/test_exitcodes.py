"""Exit statuses and `--version`: one table (llmd/exitcodes.py) that `llmd --help` prints and
the README lists; the daemon's and the console's codes are that table's."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from llmd import __version__, console, exitcodes
from llmd.cli import main
from llmd.daemon import daemon
from llmd.engine.launch import installed_engine_build
from tests.support.llmd_process import REPO


def test_the_readme_lists_every_status_the_table_has() -> None:
    """The README's exit-status table has exactly the codes of exitcodes.STATUSES, in order."""
    readme = (REPO / "README.md").read_text()
    table = readme.split("| status | when |", 1)[1].split("\n\n", 1)[0]
    listed = [int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)]
    assert listed == [code for code, _ in exitcodes.STATUSES]


def test_help_lists_every_status(capsys: pytest.CaptureFixture[str]) -> None:
    """`llmd --help` ends with the exit-status block: every code with its meaning."""
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(exitcodes.epilog())
    for code, when in exitcodes.STATUSES:
        assert f"  {code:<4} {when}" in out


def test_sysexits_codes_and_llmds_own() -> None:
    """The sysexits(3) values, llmd's 79, 141 for SIGPIPE; serve's and the console's are these."""
    assert (exitcodes.USAGE, exitcodes.NO_INPUT, exitcodes.UNAVAILABLE) == (64, 66, 69)
    assert (exitcodes.NO_PERMISSION, exitcodes.CONFIG, exitcodes.ENGINE_GAVE_UP) == (77, 78, 79)
    assert exitcodes.BROKEN_PIPE == console.EXIT_BROKEN_PIPE == 141
    assert (daemon.EXIT_CONFIG, daemon.EXIT_ENGINE_GAVE_UP) == (78, 79)


@pytest.mark.parametrize("module", ["llmd.cli", "llmd.tui.cli"])
def test_version_names_llmd_then_the_installed_vllm_without_importing_it(module: str) -> None:
    """`llmd --version` and `llmd-top --version`: llmd's version, then vLLM's distribution and
    version as installed, exit 0, and neither vLLM nor torch imported to find it."""
    script = (
        "import sys\n"
        f"from {module} import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit as exc:\n    code = exc.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch'))\n"
        "print('exit', code, 'imported', heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    lines = done.stdout.splitlines()
    assert lines[0] == f"llmd {__version__}"
    assert lines[1] == (installed_engine_build() or "vllm not installed (pip install 'llmd[vllm]')")
    assert lines[2] == "exit 0 imported []"
