"""Fault injection: what the command line arms for the whole process, and the per-request faults
named by the `x-sim-fault` header (or the body field `sim_fault`, which passes through proxies
that forward bodies untouched but not headers).

Request fault grammar, comma-separated: `hang` (accepted, never a token), `die-after:K` (the
connection is dropped after K tokens; 0: before the response starts), `error:STATUS` (answered
with that status), `crash` (the process exits non-zero at once), `dead` (the engine dies now:
/health 503, generation 500), `stall` (the engine core stalls now, as `--fault-stall-after-s`
does; this request with the others), `delay:S` (S more seconds before the request is scheduled),
`empty` (the answer has no text: its first token is an end of sequence that carries none, so
it ends at once with finish_reason `stop` and 1 completion token, as a model that emits EOS
first does in vLLM). On a pooling request (no tokens) `die-after:K` drops the connection once
its vectors are ready, and `empty` does nothing; on an audio one the body field is a form field.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

_N = TypeVar("_N", int, float)


class FaultSpecError(ValueError):
    """A request fault spec that does not parse; the message says which part."""


@dataclasses.dataclass(frozen=True)
class RequestFault:
    """The faults armed for one request; the defaults mean none."""

    hang: bool = False
    die_after: int | None = None
    error_status: int | None = None
    crash: bool = False
    dead: bool = False
    stall: bool = False
    delay_s: float = 0.0
    empty: bool = False

    @classmethod
    def parse(cls, spec: str) -> RequestFault:
        """Parse a spec such as `die-after:3` or `delay:0.5,hang`. Raises `FaultSpecError`."""
        fault = cls()
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, _, value = part.partition(":")
            try:
                if name == "hang" and not value:
                    fault = dataclasses.replace(fault, hang=True)
                elif name == "crash" and not value:
                    fault = dataclasses.replace(fault, crash=True)
                elif name == "dead" and not value:
                    fault = dataclasses.replace(fault, dead=True)
                elif name == "stall" and not value:
                    fault = dataclasses.replace(fault, stall=True)
                elif name == "empty" and not value:
                    fault = dataclasses.replace(fault, empty=True)
                elif name == "die-after":
                    fault = dataclasses.replace(fault, die_after=_non_negative(int(value)))
                elif name == "error":
                    status = int(value)
                    if not 400 <= status <= 599:
                        raise ValueError(value)
                    fault = dataclasses.replace(fault, error_status=status)
                elif name == "delay":
                    fault = dataclasses.replace(fault, delay_s=_non_negative(float(value)))
                else:
                    raise FaultSpecError(f"unknown fault {part!r}")
            except ValueError as exc:
                if isinstance(exc, FaultSpecError):
                    raise
                raise FaultSpecError(f"bad value in fault {part!r}") from exc
        return fault

    def merged(self, other: RequestFault) -> RequestFault:
        """This fault with `other`'s armed parts added (a header on top of `--fault-request`)."""
        defaults = RequestFault()
        changes = {
            field.name: getattr(other, field.name)
            for field in dataclasses.fields(other)
            if getattr(other, field.name) != getattr(defaults, field.name)
        }
        return dataclasses.replace(self, **changes)


def _non_negative(value: _N) -> _N:
    if value < 0:
        raise ValueError(value)
    return value


@dataclasses.dataclass(frozen=True)
class FaultOptions:
    """Process-wide faults from the command line; `None` and 0 mean off.

    `crash_after`/`dead_after` count engine requests (generation, pooling, audio) served before
    the fault strikes on the next one. `exit_on_death` is the delay after the engine dies
    before the process exits with status 0, as vLLM's API server does once its engine core is
    gone (vllm#48966). `error_rate` is the share of engine requests answered with
    `error_status`, `empty_rate` that of generation requests answered without text (`empty`),
    both drawn from a fixed seed. `stall_after_s`: that many seconds after boot the engine core
    stops producing tokens for good while `/health` and `/metrics` still answer (as vLLM's API
    server does with its EngineCore process stopped: ENGINE.md). `sse_layout`: streams are
    written in another layout the event-stream grammar allows (`sse_relayout`).
    """

    boot_delay_s: float = 0.0
    boot_exit_code: int | None = None
    crash_after: int | None = None
    crash_exit_code: int = 1
    dead_after: int | None = None
    exit_on_death: float | None = None
    request: str = ""
    error_rate: float = 0.0
    error_status: int = 500
    empty_rate: float = 0.0
    stall_after_s: float | None = None
    sse_layout: bool = False


def sse_relayout(chunk: bytes, first_id: int) -> bytes:
    """`chunk`'s events (vLLM's `data: X\n\n` each) as another valid event stream writes them
    (WHATWG HTML §9.2.6): CRLF line endings, a comment and an `id:` line before each event,
    `event: message`, `data:` without its space, and a JSON object's data over two lines (cut
    after its `{`: joined again with a LF, still the same JSON). `first_id` numbers the first
    event."""
    out = []
    for number, event in enumerate(chunk.split(b"\n\n")[:-1], start=first_id):
        data = event.removeprefix(b"data: ")
        lines = [b"{", data[1:]] if data.startswith(b"{") else [data]
        out.append(b": sim\r\nid: %d\r\nevent: message\r\n" % number)
        out.extend(b"data:" + line + b"\r\n" for line in lines)
        out.append(b"\r\n")
    return b"".join(out)
