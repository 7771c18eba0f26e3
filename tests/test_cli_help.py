"""Every option and argument of every llmd verb, and of llmd-top, has a help text (what
`--help` shows an operator)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from llmd import cli
from llmd.tui import cli as top_cli


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    """(verb path, action) for every action of `parser` and of its sub-parsers, at any depth."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_option_of_every_verb_has_a_help_text() -> None:
    """No option or positional argument of `llmd ...` or `llmd-top` goes without a help text."""
    actions = [*_walk(cli._parser(), "llmd"), *_walk(top_cli._parser(), "llmd-top")]
    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, action in actions
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert len(actions) > 50  # the walk reached the verbs
    assert missing == []


def test_the_walk_finds_an_option_without_help() -> None:
    """The check above fails on a parser with an option that has no help text."""
    parser = argparse.ArgumentParser()
    verbs = parser.add_subparsers()
    verbs.add_parser("status").add_argument("--runtime-dir")
    (found,) = [action for _, action in _walk(parser, "x")]
    assert found.option_strings == ["--runtime-dir"] and found.help is None


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser` and every sub-parser under it, at any depth."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_no_help_joins_two_example_lines() -> None:
    """No verb's --help prints two lines of an example as one (a `\\` and a newline in a
    non-raw string join them: `--concurrency 16       --slo-ttft-p95-ms 500`)."""
    joined = [
        f"{parser.prog}: {match.group(0)}"
        for root in (cli._parser(), top_cli._parser())
        for parser in _parsers(root)
        for match in re.finditer(r"\S {3,}--\S+", parser.format_help())
    ]
    assert joined == []
