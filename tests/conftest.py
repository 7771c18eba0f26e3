"""Fixtures shared across the suite: `captured_logs` (llmd's logging into a buffer)."""

pytest_plugins = ["tests.support.log_capture"]
