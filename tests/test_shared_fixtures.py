"""The shared fixtures' plugin (tests/support/shared_fixtures.py) on a small suite of its own:
the modules that use a shared fixture run together, it is set up once, and it is torn down
right after its last user, before the next module runs."""

from __future__ import annotations

import pytest

CONFTEST = """
import pytest

EVENTS = []

@pytest.fixture(scope="session")
def real_llmd():
    EVENTS.append("up")
    yield "daemon"
    EVENTS.append("down")

@pytest.fixture(scope="session")
def vllm_engine():
    EVENTS.append("engine up")
    yield "engine"
    EVENTS.append("engine down")

@pytest.fixture
def dynamic(request):
    return request.getfixturevalue("vllm_engine")
"""


def events_test(name: str, fixture: str = "") -> str:
    return f"""
from conftest import EVENTS

def test_{name}({fixture}):
    EVENTS.append("{name}")
"""


def test_users_run_together_and_the_fixture_stops_after_the_last(
    pytester: pytest.Pytester,
) -> None:
    """a and c use the daemon, b does not: a, c, then b; one set-up; torn down before b; a test
    that names the engine by `uses_fixture` counts as its user."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_a=events_test("a", "real_llmd"),
        test_b=events_test("b"),
        test_c=events_test("c", "real_llmd"),
        test_d="""
import pytest
from conftest import EVENTS

@pytest.mark.uses_fixture("vllm_engine")
def test_d(dynamic):
    EVENTS.append("d")
""",
        test_z="""
from conftest import EVENTS

def test_z():
    EVENTS.append("z")
    assert EVENTS == ["up", "a", "c", "down", "b", "engine up", "d", "engine down", "z"]
""",
    )
    result = pytester.runpytest("-p", "tests.support.shared_fixtures")
    result.assert_outcomes(passed=5)
