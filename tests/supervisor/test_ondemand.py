"""The on-demand part of the supervisor: its hooks are abstract, so a supervisor without one
cannot be made, and the Supervisor implements both."""

from __future__ import annotations

import pytest

from llmd.supervisor.ondemand import OnDemand
from llmd.supervisor.supervisor import Supervisor


class Unserving(OnDemand):
    """Implements `_started` only."""

    def _started(self) -> None:
        pass


def test_a_class_without_a_hook_cannot_be_made() -> None:
    """A subclass that lacks `_serve` is refused when made (TypeError naming it), never left to
    fail when an engine first sleeps or wakes; the Supervisor lacks none."""
    with pytest.raises(TypeError, match="_serve"):
        Unserving()  # type: ignore[abstract]
    assert not Supervisor.__abstractmethods__
