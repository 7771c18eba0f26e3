"""The xdist groups' plugin (tests/support/xdist_groups.py) on a small suite of its own: under
`-n 3 --dist loadgroup` the end-to-end modules run in the first two workers only, each module
(or the modules that share an engine) in one worker."""

from __future__ import annotations

import collections
import json
import types
from typing import cast

import pytest

from tests.support.llmd_process import REPO
from tests.support.xdist_groups import LONGEST_FIRST, _GroupScheduling, longest_first

MODULE = """
import os
import pytest

pytestmark = pytest.mark.e2e

@pytest.mark.parametrize("n", range(3))
def test_where(n, real_llmd):
    with open({out!r}, "a") as out:
        out.write(__name__ + " " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""

CONFTEST = """
import pytest

pytest_plugins = ["tests.support.shared_fixtures", "tests.support.xdist_groups"]

@pytest.fixture(scope="session")
def real_llmd():
    return "daemon"
"""


def test_end_to_end_groups_stay_in_two_workers(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five e2e modules, two of them sharing a fixture, and quick tests, on three workers: the
    e2e tests ran on gw0 and gw1 only; each module's tests in one worker, and the sharing
    modules in the same one."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    out = pytester.path / "where.txt"
    pytester.makeini(
        "[pytest]\nmarkers = e2e: end to end\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makeconftest(CONFTEST)
    modules = {f"test_e2e{i}": MODULE.format(out=str(out)) for i in range(5)}
    for i in range(3):  # modules 3 and 4 do not use the shared fixture
        modules[f"test_e2e{i}"] = modules[f"test_e2e{i}"].replace(", real_llmd", "")
    quick = "\n".join(f"def test_quick{i}():\n    pass\n" for i in range(30))
    pytester.makepyfile(test_quick=quick, **modules)
    result = pytester.runpytest_subprocess(
        "-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=45)
    ran: dict[str, set[str]] = {}
    for line in out.read_text().splitlines():
        module, worker = line.split()
        ran.setdefault(module, set()).add(worker)
    assert all(len(workers) == 1 for workers in ran.values()), json.dumps(
        sorted(ran.items(), key=str)
    )
    assert set().union(*ran.values()) <= {"gw0", "gw1"}, ran
    assert ran["test_e2e3"] == ran["test_e2e4"], ran


def test_the_longest_modules_are_collected_first() -> None:
    """`longest_first` moves the items of the modules it is given to the front, in the order
    given, and leaves the others in theirs; every module of `LONGEST_FIRST` exists."""
    ids = ["a.py::t1", "b.py::t1", "c.py::t1", "a.py::t2", "c.py::t2", "d.py::t1"]
    items = [cast(pytest.Item, types.SimpleNamespace(nodeid=nodeid)) for nodeid in ids]
    longest_first(items, ("c.py", "b.py"))
    assert [item.nodeid for item in items] == [
        "c.py::t1",
        "c.py::t2",
        "b.py::t1",
        "a.py::t1",
        "a.py::t2",
        "d.py::t1",
    ]
    assert [module for module in LONGEST_FIRST if not (REPO / module).is_file()] == []


class _Node:
    """A worker as the scheduler sees it: what it was sent, whether it was shut down."""

    shutting_down = False

    def __init__(self) -> None:
        self.workerinput = {"workerid": "gw0"}
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_a_worker_holds_one_unit_queued_behind_the_running_one() -> None:
    """With its running test and one queued, a worker is given no more (xdist gives a third);
    once only the running one is left it gets the next unit; with none left, it stops."""
    scheduler = object.__new__(_GroupScheduling)
    scheduler.log = lambda *args: None  # type: ignore[assignment]
    node = _Node()
    ids = [f"t.py::t{i}" for i in range(4)]
    scheduler.registered_collections = {node: ids}  # type: ignore[dict-item]
    scheduler.assigned_work = {node: {ids[0]: {ids[0]: False}, ids[1]: {ids[1]: False}}}  # type: ignore[dict-item]
    scheduler.workqueue = collections.OrderedDict({ids[2]: {ids[2]: False}})
    scheduler._reschedule(node)
    assert node.sent == [] and list(scheduler.workqueue) == [ids[2]]
    scheduler.assigned_work[node][ids[0]][ids[0]] = True  # type: ignore[index]
    scheduler._reschedule(node)
    assert node.sent == [[2]] and not scheduler.workqueue and not node.shutting_down
    scheduler._reschedule(node)
    assert node.shutting_down
