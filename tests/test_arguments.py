"""Numeric command-line options: every one is checked by argparse (exit 64, EX_USAGE, naming
the option), NaN, infinity and out-of-range values included."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from llmd import arguments
from llmd.cli import _parser as llmd_parser
from llmd.tui.cli import _parser as top_parser

# Options whose value any whole number suits (a random seed; the simulator is not a command).
FREE = {"--seed"}


def _options(parser: argparse.ArgumentParser, where: str) -> Iterator[tuple[str, argparse.Action]]:
    """Every option of `parser` and its subcommands, as ('llmd drain --timeout', action)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{where} {name}")
        elif action.option_strings:
            yield f"{where} {action.option_strings[-1]}", action


def test_no_numeric_option_takes_a_bare_float_or_int() -> None:
    """Every numeric option of `llmd` (every verb) and `llmd-top` has a checked type (finite,
    in range), not float or int, which take nan, inf and negatives."""
    options = [*_options(llmd_parser(), "llmd"), *_options(top_parser(), "llmd-top")]
    bare = [
        name
        for name, action in options
        if action.type in (float, int) and name.rpartition(" ")[2] not in FREE
    ]
    assert bare == []
    checked = [name for name, action in options if action.type is not None]
    assert "llmd drain --timeout" in checked and "llmd-top --interval" in checked


def test_good_numbers_are_taken() -> None:
    """Finite numbers in range pass unchanged: seconds from 0, counts from 0 or 1, shares."""
    assert arguments.seconds("0") == 0.0 and arguments.positive_seconds("2592000") == 2592000.0
    assert arguments.positive("80") == 80.0 and arguments.share("1") == 1.0
    assert arguments.count("0") == 0 and arguments.positive_count("7") == 7
    args = llmd_parser().parse_args(["drain", "--timeout", "2.5"])
    assert args.timeout == 2.5


def test_a_duration_takes_a_unit_and_refuses_nonsense() -> None:
    """`llmd usage --since`: 90s, 30m, 24h, 7d or bare seconds; none, 0, negative, nan, inf,
    an unknown unit or past 10 years is a usage error."""
    assert [arguments.duration(t) for t in ("90s", "30m", "24h", "7d", "5")] == [
        90.0, 1800.0, 86400.0, 604800.0, 5.0,
    ]  # fmt: skip
    for text in ("", "0", "-1h", "nanh", "infd", "3w", "3651d", "h"):
        try:
            arguments.duration(text)
        except argparse.ArgumentTypeError:
            continue
        raise AssertionError(f"{text!r} was taken")
