"""Read and change vLLM flags in `engine.args` (`--flag V` or `--flag=V`), as vLLM parses them."""

from __future__ import annotations

from collections.abc import Sequence


def engine_flag(args: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in `args`, or None when absent. As argparse does, the last one wins."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.partition("=")[2]
    return value


def has_switch(args: Sequence[str], flag: str) -> bool:
    """Whether the valueless switch `flag` (e.g. `--enforce-eager`) is in `args`."""
    return flag in args


def without_flag(args: Sequence[str], flag: str, *, takes_value: bool = True) -> tuple[str, ...]:
    """`args` with every `flag` removed (with its value when `takes_value`)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = takes_value
            continue
        if takes_value and arg.startswith(flag + "="):
            continue
        kept.append(arg)
    return tuple(kept)


def with_flag(args: Sequence[str], flag: str, value: str | None = None) -> tuple[str, ...]:
    """`args` with `flag` set to `value` (appended after removing any earlier one); a switch when
    `value` is None."""
    if value is None:
        return (*without_flag(args, flag, takes_value=False), flag)
    return (*without_flag(args, flag), flag, value)


def float_flag(args: Sequence[str], flag: str, default: float) -> float:
    """`flag` as a number, `default` when absent. Raises ValueError when it is not a number."""
    value = engine_flag(args, flag)
    return default if value is None else float(value)


def int_flag(args: Sequence[str], flag: str) -> int | None:
    """`flag` as a whole number, None when absent. Raises ValueError when it is not one."""
    value = engine_flag(args, flag)
    return None if value is None else int(value)
