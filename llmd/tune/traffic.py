"""`--from-traffic`: the length mix of llmd's own recorded requests, and the --max-model-len
they call for.

llmd writes one `request_finished` line per finished request (README, "Logs"), with
`prompt_tokens` and `output_tokens`: `journalctl -u llmd -o cat` is that record. Requests that
ended in `ok` count; their (prompt, output) pairs become the bench's length mix.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable

from llmd.bench.lengths import LengthMix
from llmd.errors import TuneError
from llmd.telemetry.windows import percentile
from llmd.textfiles import log_lines

# The upper quantile --max-model-len is set from, and what it is rounded up to.
QUANTILE = 99.0
ROUND_TO = 256


@dataclasses.dataclass(frozen=True)
class Traffic:
    """Recorded request lengths: the pairs, the quantile of prompt + output, the proposal."""

    pairs: tuple[tuple[int, int], ...]
    total_p99: int
    proposed_max_model_len: int

    @property
    def mix(self) -> LengthMix:
        return LengthMix(pairs=self.pairs)


def read_traffic(lines: Iterable[str], max_positions: int | None = None) -> Traffic:
    """The traffic in llmd's JSON log `lines`. --max-model-len is proposed as the 99th
    percentile of prompt + output tokens rounded up to a multiple of 256, and never past the
    model's `max_positions`. Raises `TuneError` when no finished request is found."""
    pairs = []
    for line in lines:
        if '"request_finished"' not in line:
            continue
        try:
            event = json.loads(line)
            prompt, output = int(event["prompt_tokens"]), int(event["output_tokens"])
        except (ValueError, KeyError, TypeError):
            continue
        if event.get("outcome") == "ok" and prompt > 0 and output > 0:
            pairs.append((prompt, output))
    if not pairs:
        raise TuneError(
            "no finished requests in the traffic log: give llmd's JSON log with request lines "
            "(journalctl -u llmd -o cat; logging.requests = 'all')"
        )
    total = math.ceil(percentile([p + o for p, o in pairs], QUANTILE) or 0)
    proposed = max(ROUND_TO, math.ceil(total / ROUND_TO) * ROUND_TO)
    if max_positions:
        proposed = min(proposed, max_positions)
    return Traffic(tuple(pairs), total, proposed)


def traffic_from(source: str, max_positions: int | None = None) -> tuple[Traffic, str | None]:
    """`read_traffic` of the file `source` ('-': standard input), and the warning that says
    how many lines were skipped as not UTF-8 (None when none was). Raises `TuneError`."""
    try:
        with log_lines(source) as lines:
            return read_traffic(lines, max_positions), lines.warning()
    except OSError as exc:
        raise TuneError(f"--from-traffic {source}: {exc.strerror}") from None
