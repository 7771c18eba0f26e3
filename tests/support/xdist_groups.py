"""Which tests pytest-xdist keeps in one worker under `--dist loadgroup` (scripts/test.sh), a
plugin of tests/conftest.py.

- The end-to-end tests (marker `e2e`) form a group per module, or one for all the modules that
  share an engine (tests/support/shared_fixtures.py). Each boots a real vLLM (about 2 GB), so
  only the first `E2E_WORKERS` workers take them: at most that many engines at once.
- A test that uses a module- or package-scoped fixture runs in the group of that module or
  package, so the fixture (often a live llmd) is set up once, in one worker.
- A test marked `xdist_group(NAME)` runs in group NAME (tests that share a costly import):
  "transformers" holds the modules that import transformers in the test process (its
  import costs about 2.3 s of CPU in each worker that runs one, torch left out:
  tests/support/transformers_reference.py); "anthropic" those that use the anthropic client.
- Every other test is a unit of its own, which any worker takes as it comes free.
- A worker holds one unit queued behind the running one (xdist: two), so fewer are held by
  busy workers when the queue runs dry.
- Units go out largest first, and units of one size in collection order: the modules of
  `LONGEST_FIRST` (a test of 10 s or more) are collected first, so that none of them starts
  last and leaves one worker running alone at the end (measured: a 13.6 s tune test started
  at 216.6 s of 233.9, two more queued behind it on its worker, the others done by 228). A
  module of a package's group stays out of it: its group's modules run together.

xdist's own loadgroup reads `xdist_group` marks through a suffix it appends to each test's
nodeid, which pytest 9.2 ignores (`Node.nodeid` comes from `_id`): the marked tests ran apart.
So the groups travel another way: the first worker writes them (nodeid -> group) to a file
the controller names, and the controller's scheduler reads it once every worker has collected.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from tests.support.shared_fixtures import SHARED, uses

_KEY = "llmd_xdist_groups"
# Workers that run end-to-end groups (2 cores, about 2 GB an engine: ENGINE.md).
E2E_WORKERS = 2
_E2E = "e2e "
_SHARED = {"module": 1, "class": 1, "package": 2}


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") == "loadgroup":
        config.pluginmanager.register(_Controller(config), "llmd-xdist-groups")


# The modules with a test of 10 s or more (wall time; scripts/pertest_cpu.py, six workers,
# 2026-12-07 16:39, load 3-5; * one worker, `pytest -n 0 --durations=0`, median of 3,
# 2026-12-07 20:19-20:40, load under 1), its longest first.
LONGEST_FIRST = (
    "tests/admission/test_shares_sim.py",  # 21.3 *
    "tests/proxy/test_keepalive.py",  # 21.0
    "tests/proxy/test_endpoints.py",  # 18.6
    "tests/proxy/test_validation_properties.py",  # 17.1
    "tests/admission/test_scheduler.py",  # 16.3
    "tests/tune/test_tune_sim.py",  # 13.6
    "tests/proxy/test_messages_sim.py",  # 13.4
    "tests/tui/test_app.py",  # 12.4
    "tests/admin/test_controls.py",  # 10.6
    "tests/releases/test_orchestrator_failures.py",  # 10.4
    # The held-stream tests at an 8 s send timeout, kept last: 9.7 and 9.4 s alone (-n 0,
    # 20:41, load 0.5); they wait, so a run adds little (21.6 s alone, 21.9 in a run, at 20 s).
    "tests/backends/test_upstream_stall.py",  # 9.7
    "tests/proxy/test_slow_consumer.py",  # 9.4
)


def longest_first(items: list[pytest.Item], modules: tuple[str, ...] = LONGEST_FIRST) -> None:
    """Move the items of `modules` (paths from the repository root, as in a nodeid) to the
    front of `items`, in the order of `modules`; the others keep their order."""
    rank = {module: index for index, module in enumerate(modules)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    longest_first(items)
    workerinput: dict[str, Any] = getattr(config, "workerinput", {})
    if _KEY in workerinput and workerinput["workerid"] == "gw0":
        groups = {item.nodeid: _group(item) for item in items}
        partial = Path(workerinput[_KEY] + ".partial")
        partial.write_text(json.dumps(groups))
        partial.replace(workerinput[_KEY])


def _group(item: pytest.Item) -> str:
    """The group of `item`: "e2e " and its shared fixture or module, its mark's, its module's or
    package's path, or its own nodeid."""
    if item.get_closest_marker("e2e") is not None:
        shared = [name for name in SHARED if uses(item, name)]
        return _E2E + (shared[0] if shared else item.nodeid.split("::")[0])
    if (marked := item.get_closest_marker("xdist_group")) is not None:
        return str(marked.args[0] if marked.args else marked.kwargs["name"])
    info = getattr(item, "_fixtureinfo", None)
    widest = max(
        (
            _SHARED.get(definitions[-1].scope, 0)  # the definition this test gets
            for definitions in (info.name2fixturedefs.values() if info else ())
        ),
        default=0,
    )
    module = Path(item.nodeid.split("::")[0])
    return {0: item.nodeid, 1: str(module), 2: str(module.parent)}[widest]


class _Controller:
    """The controller's side: names the file, hands its path to each worker, schedules."""

    def __init__(self, config: pytest.Config) -> None:
        descriptor, name = tempfile.mkstemp(prefix="llmd-xdist-groups-", suffix=".json")
        os.close(descriptor)
        self.path = Path(name)
        config.add_cleanup(lambda: self.path.unlink(missing_ok=True))

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[_KEY] = str(self.path)

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        return _GroupScheduling(config, log, self.path)


class _GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling (each scope a unit, the largest first), scopes our groups."""

    def __init__(self, config: pytest.Config, log: Any, path: Path) -> None:
        super().__init__(config, log)
        self._path = path
        self._groups: dict[str, str] | None = None

    def _assign_work_unit(self, node: Any) -> None:
        """Give `node` the next group, the next that is not end-to-end past `E2E_WORKERS`
        workers; stop it when only end-to-end groups are left for it."""
        if int(node.workerinput["workerid"].removeprefix("gw")) >= E2E_WORKERS:
            other = next((scope for scope in self.workqueue if not scope.startswith(_E2E)), None)
            if other is None:
                node.shutdown()
                return
            self.workqueue.move_to_end(other, last=False)
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        """xdist's, but a worker gets its next unit once at most one of its tests is left to
        run (xdist: two), so it holds one unit queued behind the running one, not two: the
        units held by busy workers at the end, which an idle one cannot take, are halved
        (measured: one worker idle from 193 s of 234 while the others held theirs)."""
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) <= 1:
            self._assign_work_unit(node)

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # every worker has collected: the first has written them
            self._groups = json.loads(self._path.read_text() or "{}")
        return self._groups.get(nodeid, nodeid)
