"""scripts/suite_cpu.py, which measures where the fast suite's CPU goes: its hook records each
Python's CPU and the test it ran for, whether it ends normally, by os._exit or by SIGTERM, and
hands over to another `sitecustomize`; the report sums the processes by kind and by module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.llmd_process import REPO

HOOK = REPO / "scripts" / "suite_cpu"
TEST = "tests/somewhere/test_thing.py::test_it (call)"
SLEEPER = "import time; print('up', flush=True); time.sleep(60)"


def test_the_hook_records_each_python_and_the_report_sums_them(tmp_path: Path) -> None:
    """Three Pythons (a normal end, os._exit, SIGTERM) are counted under the test that started
    them; another sitecustomize further down PYTHONPATH still runs."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import sys\nsys.stderr.write('other hook ran')\n")
    log = tmp_path / "cpu.jsonl"
    env = {
        **os.environ,
        "LLMD_SUITE_CPU_LOG": str(log),
        "PYTHONPATH": os.pathsep.join([str(HOOK), str(other)]),
        "PYTEST_CURRENT_TEST": TEST,
    }
    ended = subprocess.run(
        [sys.executable, "-c", "pass"], env=env, capture_output=True, text=True, check=True
    )
    assert ended.stderr == "other hook ran"
    subprocess.run([sys.executable, "-c", "import os; os._exit(0)"], env=env, check=True)
    with subprocess.Popen(
        [sys.executable, "-c", SLEEPER], env=env, stdout=subprocess.PIPE, text=True
    ) as sleeper:
        assert sleeper.stdout is not None and sleeper.stdout.readline() == "up\n"
        sleeper.terminate()
        assert sleeper.wait(timeout=30) == -15
    report = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "suite_cpu.py"), "report", str(log)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # Each row: CPU-s, processes, CPU-s each, processes without an exit record, seconds alive
    # (whole), kind.
    rows = [line.split(maxsplit=5) for line in report.splitlines()]
    kinds = {row[5]: (row[1], row[3]) for row in rows if len(row) == 6 and row[1].isdigit()}
    assert kinds["python -c pass"] == ("1", "0")
    assert kinds["python -c import os; os._exit(0)"] == ("1", "0")
    assert kinds["python -c " + SLEEPER[:40]] == ("1", "0")
    assert all(row[4].isdigit() for row in rows if len(row) == 6 and row[1].isdigit())
    (module,) = [line for line in report.splitlines() if "tests/somewhere/test_thing.py: " in line]
    assert "python -c pass 1 " in module and "python -c import os; os._exit(0) 1 " in module


def test_a_python_that_cannot_write_the_log_runs_and_exits_as_it_would(tmp_path: Path) -> None:
    """An unwritable log (as for a fork that dropped to another user) changes nothing: the
    process runs, says nothing more, and os._exit still exits with its code."""
    env = {
        **os.environ,
        "LLMD_SUITE_CPU_LOG": str(tmp_path / "missing" / "cpu.jsonl"),
        "PYTHONPATH": str(HOOK),
    }
    done = subprocess.run(
        [sys.executable, "-c", "import os; print('ran', flush=True); os._exit(3)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "ran\n", "")
