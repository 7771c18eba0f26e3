"""The engine settings a tune run tries, and the engine args each one boots with."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from llmd.engine.args import with_flag, without_flag
from llmd.errors import TuneError

DEFAULT_MAX_NUM_SEQS = (8, 16, 32, 64)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One step's setting: `--max-num-seqs`, and prefix caching forced on or off (None: as the
    config has it)."""

    max_num_seqs: int
    prefix_caching: bool | None = None

    def engine_args(self, base: Sequence[str]) -> tuple[str, ...]:
        """`base` (engine.args) with this setting's flags in place of any given there."""
        args = with_flag(base, "--max-num-seqs", str(self.max_num_seqs))
        if self.prefix_caching is None:
            return args
        for flag in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
            args = without_flag(args, flag, takes_value=False)
        flag = "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching"
        return with_flag(args, flag)

    @property
    def label(self) -> str:
        """How the step is named in the progress lines: 'max-num-seqs 8, prefix cache off'."""
        text = f"max-num-seqs {self.max_num_seqs}"
        if self.prefix_caching is not None:
            text += f", prefix cache {'on' if self.prefix_caching else 'off'}"
        return text


def parse_max_num_seqs(text: str | None) -> tuple[int, ...]:
    """`--max-num-seqs 8,16,32` as sorted distinct values (default 8,16,32,64). Raises
    `TuneError`."""
    if not text:
        return DEFAULT_MAX_NUM_SEQS
    try:
        values = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise TuneError(f"--max-num-seqs {text!r}: expected comma-separated numbers") from None
    if not values or values[0] < 1:
        raise TuneError(f"--max-num-seqs {text!r}: each value must be >= 1")
    return tuple(values)


def settings_for(max_num_seqs: Sequence[int], compare_prefix_caching: bool) -> tuple[Setting, ...]:
    """Every value of --max-num-seqs; each with prefix caching on and then off when comparing."""
    if not compare_prefix_caching:
        return tuple(Setting(n) for n in max_num_seqs)
    return tuple(Setting(n, caching) for n in max_num_seqs for caching in (True, False))
