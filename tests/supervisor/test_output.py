"""Engine output filtering: WARNING and above forwarded, stats and access lines dropped."""

from __future__ import annotations

from llmd.supervisor.output import EngineOutput

LINES = [
    "(APIServer pid=42) INFO 11-29 17:10:01 [api_server.py:1000] Starting vLLM API server",
    "(APIServer pid=42) WARNING 11-29 17:10:02 [config.py:12] Casting torch.bfloat16 to float16",
    "(APIServer pid=42) INFO 11-29 17:10:12 [loggers.py:123] Engine 000: "
    "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s",
    'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "ERROR 11-29 17:10:13 [core.py:9] EngineCore failed to start.",
    "Traceback (most recent call last):",
    '  File "x.py", line 1, in <module>',
    "RuntimeError: boom",
]


def test_forwards_warnings_errors_and_their_tracebacks() -> None:
    """Only WARNING+ lines are forwarded; traceback lines inherit ERROR."""
    forwarded = EngineOutput().feed_all(LINES)
    assert forwarded == [
        ("WARNING", "Casting torch.bfloat16 to float16"),
        ("ERROR", "EngineCore failed to start."),
        ("ERROR", "Traceback (most recent call last):"),
        ("ERROR", '  File "x.py", line 1, in <module>'),
        ("ERROR", "RuntimeError: boom"),
    ]


def test_stats_line_dropped_even_at_warning() -> None:
    """The periodic stats line never reaches llmd's log, whatever its level."""
    line = "WARNING 11-29 17:10:12 [loggers.py:1] Avg prompt throughput: 1.0 tokens/s"
    assert EngineOutput().feed(line) is None


def test_recent_lines_are_kept_for_classification() -> None:
    """Every line, forwarded or not, is kept (bounded) for exit classification."""
    output = EngineOutput(keep=3)
    output.feed_all(LINES)
    assert list(output.recent) == LINES[-3:]
