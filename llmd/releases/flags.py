"""Engine arguments read as flags: `["--max-model-len", "1024", "--enforce-eager"]` becomes
`[("--max-model-len", "1024"), ("--enforce-eager", None)]`."""

from __future__ import annotations

from collections.abc import Sequence

from llmd.engine.args import flag_name


def parse_flags(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """Pair each `--flag` with its value: the next argument unless that is another `--flag`;
    `--flag=value` is split at the first `=`. A value with no flag before it (a positional)
    is kept as `("", value)`. Order and repeated flags are kept.

    As vLLM's argparse reads them, except that a flag taking no value followed by a positional
    would pair with it; vLLM's server takes no positional but the model (`vllm serve MODEL`),
    which llmd passes as `--model`.
    """
    pairs: list[tuple[str, str | None]] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg.startswith("--"):
            name, sep, value = arg.partition("=")
            if sep:
                pairs.append((name, value))
            elif index + 1 < len(args) and not args[index + 1].startswith("--"):
                pairs.append((arg, args[index + 1]))
                index += 1
            else:
                pairs.append((arg, None))
        else:
            pairs.append(("", arg))
        index += 1
    return pairs


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of the last `flag` (spelled with dashes; in `args` with dashes or underscores)
    in `args` (vLLM's argparse keeps the last), or None."""
    values = [value for name, value in parse_flags(args) if flag_name(name) == flag]
    return values[-1] if values else None
