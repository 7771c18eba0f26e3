"""scripts/pertest_cpu.py: the plugin records each test's own CPU and times in the pytest
process that ran it, and the report lists them by test, module and worker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.llmd_process import REPO


def test_each_test_is_recorded_and_reported(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two tests, one spinning for 0.05 s of CPU: both recorded, the spinner first by CPU."""
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    monkeypatch.setenv("PERTEST_CPU_DIR", str(tmp_path / "cpu"))
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_two="""
        import time

        def test_spins():
            started = time.process_time()
            while time.process_time() - started < 0.05:
                pass

        def test_idles():
            pass
        """
    )
    pytester.runpytest("-p", "pertest_cpu").assert_outcomes(passed=2)
    import pertest_cpu

    text = pertest_cpu.report(tmp_path / "cpu", top=5)
    lines = text.splitlines()
    assert lines[0].startswith("CPU-s to the end of collection: main ")
    assert "main: 2 tests" in text
    spins, idles = (line for line in lines if line.split()[1:2] == ["CPU-s"] and "::" in line)
    assert spins.endswith("test_two.py::test_spins") and idles.endswith("::test_idles")
    assert float(spins.split()[0]) >= 0.05
    sys.modules.pop("pertest_cpu", None)
