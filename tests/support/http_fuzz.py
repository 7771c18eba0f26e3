"""The property every answer to a hostile request must hold (issue 14), and the loop that checks
it against a live llmd: `send` a `RawRequest` over a raw socket, `judge` the answer (no 5xx,
every error OpenAI-shaped, an answer at all), `fuzz` many with Hypothesis, /health in between.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import socket

import h11
import hypothesis
from hypothesis import HealthCheck, given, settings

from tests.support.hostile_http import RawRequest, hostile_requests


@dataclasses.dataclass(frozen=True)
class Answer:
    """What came back: the status (None: no complete answer), headers and body."""

    status: int | None
    headers: dict[bytes, bytes]
    body: bytes
    problem: str = ""


def send(port: int, request: RawRequest, timeout_s: float = 60.0) -> Answer:
    """Send `request` to 127.0.0.1:`port` and read the whole answer (the server closes)."""
    data = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            with contextlib.suppress(OSError):  # the server may answer and close first
                sock.sendall(request.wire())
            while chunk := sock.recv(65536):
                data += chunk
    except ConnectionResetError:
        pass
    except OSError as exc:
        return Answer(None, {}, data, f"no answer: {exc!r}")
    return parse_answer(data, head=request.method == b"HEAD")


def parse_answer(data: bytes, head: bool) -> Answer:
    """The response in `data` (read until the server closed), parsed by h11."""
    client = h11.Connection(h11.CLIENT)
    client.send(
        h11.Request(method=b"HEAD" if head else b"GET", target=b"/", headers=[(b"host", b"llmd")])
    )
    client.send(h11.EndOfMessage())
    client.receive_data(data)
    client.receive_data(b"")
    status, headers, body = None, {}, b""
    try:
        while True:
            event = client.next_event()
            if isinstance(event, h11.Response):
                status, headers = event.status_code, {k.lower(): v for k, v in event.headers}
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return Answer(status, headers, body)
            elif event in (h11.NEED_DATA, h11.PAUSED) or isinstance(event, h11.ConnectionClosed):
                return Answer(None, headers, body, f"incomplete answer ({len(data)} bytes)")
    except h11.RemoteProtocolError as exc:
        return Answer(None, headers, body, f"unreadable answer: {exc}")


def judge(request: RawRequest, answer: Answer) -> str | None:
    """What is wrong with `answer` (None: nothing): no complete answer, a 5xx, or an error that
    is not OpenAI-shaped JSON (`{"error": {"message", "type", "param", "code"}}`)."""
    if answer.status is None:
        return answer.problem
    if answer.status >= 500:
        return f"{answer.status}: {answer.body[:300]!r}"
    if answer.status < 400 or request.method == b"HEAD":
        return None
    if not answer.headers.get(b"content-type", b"").startswith(b"application/json"):
        return f"{answer.status} is not JSON: {answer.headers.get(b'content-type')!r}"
    try:
        error = json.loads(answer.body)["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert isinstance(error["message"], str) and error["message"]
    except (ValueError, KeyError, TypeError, AssertionError):
        return f"{answer.status} is not OpenAI-shaped: {answer.body[:300]!r}"
    return None


@dataclasses.dataclass
class Tally:
    """Examples run and their statuses, and the problems found (each with its request)."""

    statuses: collections.Counter[int | None] = dataclasses.field(
        default_factory=collections.Counter
    )
    problems: list[tuple[str, RawRequest]] = dataclasses.field(default_factory=list)
    health_checks: int = 0

    @property
    def examples(self) -> int:
        return sum(self.statuses.values())

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status is not None and status >= 500)


def health(port: int) -> bool:
    """Whether GET /health answers 200 now."""
    answer = send(port, RawRequest(b"GET", b"/health", (), b""), timeout_s=10)
    return answer.status == 200


def check(port: int, request: RawRequest, tally: Tally, health_every: int = 10) -> None:
    """Send `request`, record its status in `tally`, and raise AssertionError when the answer
    (or, every `health_every` examples, /health) breaks the property."""
    answer = send(port, request)
    tally.statuses[answer.status] += 1
    problem = judge(request, answer)
    if problem is None and tally.examples % health_every == 0:
        tally.health_checks += 1
        if not health(port):
            problem = "/health no longer answers 200"
    if problem is not None:
        tally.problems.append((problem, request))
        raise AssertionError(f"{problem}\nrequest: {request.wire()[:600]!r}")


def fuzz(port: int, examples: int, tally: Tally, seed: int | None = None) -> None:
    """Run `examples` generated requests against llmd on `port`, one at a time (`check`),
    recording them in `tally`; raises AssertionError (Hypothesis's shrunk example) at the
    first broken answer. `seed` fixes the draws."""

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(hostile_requests())
    def holds(request: RawRequest) -> None:
        check(port, request, tally)

    if seed is not None:
        holds = hypothesis.seed(seed)(holds)
    holds()
