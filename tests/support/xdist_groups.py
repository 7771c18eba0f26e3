"""Which tests pytest-xdist keeps together (`--dist loadgroup`, scripts/test.sh), a plugin of
tests/conftest.py.

- End-to-end tests (marker `e2e`) form one group, run one after another by one worker: each
  boots a real vLLM (about 2 GB, both cores while it warms up), one at a time on this machine.
- A test that uses a module- or package-scoped fixture runs in the group of that module or
  package, so the fixture (often a live llmd) is set up once, in one worker.
- Every other test is a unit of its own, which any worker takes as it comes free.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_SHARED = {"module": 1, "class": 1, "package": 2}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _group(item: pytest.Item) -> str | None:
    if item.get_closest_marker("e2e") is not None:
        return "e2e"
    info = getattr(item, "_fixtureinfo", None)
    scopes = [
        _SHARED.get(definition.scope, 0)
        for definitions in (info.name2fixturedefs.values() if info else ())
        for definition in definitions[-1:]  # the definition this test gets
    ]
    widest = max(scopes, default=0)
    if widest == 0:
        return None
    module = Path(item.nodeid.split("::")[0])
    return str(module.parent) if widest == 2 else str(module)
