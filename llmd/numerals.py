"""Whole numbers as configs, headers and command lines write them: ASCII digits only.

`str.isdigit` is also true for '²' (which `int` then refuses: a ValueError where a clean
refusal was meant) and for other scripts' digits such as '٨٣٠١' (which `int` reads as 8301), and
`int` refuses more than 4,300 digits (Python 3.11's int_max_str_digits). Every whole number llmd
reads from outside goes through `ascii_int`, or through `human_readable_int` where vLLM takes
'64M' or '32k' for the same flag.
"""

from __future__ import annotations

import re

# Longer than any number llmd reads (ports, pids, byte counts, milliseconds), and far under
# Python's 4,300-digit limit on int(str).
MAX_DIGITS = 30

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])", re.ASCII)
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def ascii_int(text: str | bytes) -> int | None:
    """`text` as a non-negative whole number when it is 1 to MAX_DIGITS ASCII digits 0-9 (no
    sign, no spaces, no underscores); None otherwise."""
    if not text or len(text) > MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def human_readable_int(text: str) -> int:
    """`text` as vLLM 0.32 reads a human-readable integer flag (`human_readable_int` in
    vllm/utils/argparse_utils.py, used for --kv-cache-memory-bytes, --max-num-batched-tokens
    and --max-model-len): ASCII digits, or a number with a decimal suffix k/m/g/t (x1000...)
    or a binary one K/M/G/T (x1024..., whole numbers only): '64M' is 67,108,864, '25.6k' is
    25,600. Raises ValueError for anything else."""
    text = text.strip()
    whole = ascii_int(text)
    if whole is not None:
        return whole
    match = _HUMAN.fullmatch(text) if len(text) <= MAX_DIGITS else None
    if match is None:
        raise ValueError("expected a whole number, optionally with a k/m/g/t or K/M/G/T suffix")
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise ValueError(f"decimals are not allowed with the binary suffix {suffix}")
    return int(number) * _BINARY[suffix]
