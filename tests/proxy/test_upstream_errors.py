"""What a client reads when the connection to a backend fails: an engine that ended the
connection mid-request is said plainly (never in the client library's words)."""

from __future__ import annotations

import pytest

from llmd.config import Config, EngineConfig
from llmd.engine.connection import ConnectFailed, ConnectionLost
from llmd.errors import EngineError, EngineUnavailable
from llmd.proxy.upstream import _connection_error
from llmd.supervisor.state import EnginePhase, EngineState
from tests.support.state import daemon_state

CUT_OFF = [
    ConnectionLost("the backend closed the connection", answered=False),
    ConnectionLost("the answer does not parse: 400 Invalid character", answered=True),
    ConnectionResetError(104, "Connection reset by peer"),
    BrokenPipeError(32, "Broken pipe"),
]


@pytest.mark.parametrize("exc", CUT_OFF, ids=lambda exc: type(exc).__name__)
def test_a_connection_the_engine_ended_mid_request_is_said_plainly(exc: Exception) -> None:
    """Reset, disconnected or cut short while serving: 502 engine_error saying the engine
    closed the connection and may have exited, without the library's detail."""
    state = daemon_state(Config(engine=EngineConfig(model="tiny")), EngineState())
    state.engine.phase = EnginePhase.SERVING
    error = _connection_error(state, "main", exc)
    assert isinstance(error, EngineError) and error.status == 502
    assert error.message.startswith("main closed the connection during the request")
    assert "may have exited" in error.message and "400" not in error.message


def test_a_refused_connection_is_a_503_to_retry() -> None:
    """A connection refused while the engine still counts as serving: 503 with Retry-After."""
    state = daemon_state(Config(engine=EngineConfig(model="tiny")), EngineState())
    state.engine.phase = EnginePhase.SERVING
    refused = ConnectFailed("ConnectionRefusedError: [Errno 111] Connection refused")
    error = _connection_error(state, "main", refused)
    assert isinstance(error, EngineUnavailable) and error.retry_after_s is not None
