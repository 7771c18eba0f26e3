"""Generated hostile HTTP requests (issue 14); `http_fuzz.py` sends them and judges the answers.

`hostile_requests()` is a Hypothesis strategy over raw HTTP/1.1 requests to llmd: the OpenAI
request schema with wrong types at every field, deep nesting, huge numbers, NaN/Infinity
literals, duplicate keys, a byte order mark, UTF-16 bodies, control characters, lone
surrogates, very long strings; odd content types and codings (gzip, deflate, mismatched,
unknown); odd methods, paths, header values and counts. Requests go over a raw socket (so
malformed ones are sent as they are) with `Connection: close`.

The strategies that other strategies use in every draw (`text`, `odd_values`, `content_type`,
`header_value`, `methods`, `targets`) are built once: built in each draw, Hypothesis validated
them again each time (`st.recursive` most), about half the fuzz test's CPU in the test process.
The same strategies draw the same requests either way.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import zlib
from typing import Any

from hypothesis import strategies as st

CHAT_PATH, COMPLETIONS_PATH = b"/v1/chat/completions", b"/v1/completions"
ORIGIN = b"http://localhost:3000"
# Fields of the chat and completions schemas (llmd reads some; the rest pass to the engine).
FIELDS = (
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "n", "stream",
    "stream_options", "temperature", "top_p", "top_k", "min_p", "stop", "seed", "logprobs",
    "top_logprobs", "echo", "add_generation_prompt", "continue_final_message",
    "add_special_tokens", "chat_template_kwargs", "truncate_prompt_tokens", "tools",
    "tool_choice", "response_format", "priority", "logit_bias", "user", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "ignore_eos", "min_tokens", "suffix",
    "best_of", "documents", "chat_template", "reasoning_effort", "x_unknown",
)  # fmt: skip
MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning")
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


def mostly(usual: Any, odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` four times in five, else a draw of `odd` (so most requests get deep enough to
    reach the engine, and the rest test one odd thing at a time)."""
    usual_first = st.sampled_from((True, True, True, True, False))
    return usual_first.flatmap(lambda use: st.just(usual) if use else odd)


CONTROL = st.characters(max_codepoint=0x1F)


@dataclasses.dataclass(frozen=True)
class RawRequest:
    """One request as bytes on the wire: method, target, headers (Content-Length and
    Connection: close are added when sent) and body."""

    method: bytes
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    def wire(self) -> bytes:
        lines = [self.method + b" " + self.target + b" HTTP/1.1", b"host: llmd"]
        lines += [name + b": " + value for name, value in self.headers]
        lines += [b"content-length: " + str(len(self.body)).encode(), b"connection: close"]
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body


@functools.cache  # built once (module docstring)
def text() -> st.SearchStrategy[str]:
    """Strings: ordinary, empty, control characters, lone surrogates, or very long."""
    return st.one_of(
        st.text(max_size=20),
        st.just(""),
        st.text(alphabet=CONTROL, min_size=1, max_size=5),
        st.builds(lambda a, s, b: a + s + b, st.text(max_size=5), SURROGATES, st.text(max_size=5)),
        st.integers(1_000, 100_000).map(lambda n: "word " * (n // 5)),
    )


@functools.cache  # built once (module docstring)
def odd_values() -> st.SearchStrategy[Any]:
    """A value of any JSON type, often the wrong one for its field."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.sampled_from([0, -1, 1, 2**31, 2**63, 10**400, -(10**30)]),
        st.floats(allow_nan=True, allow_infinity=True),
        text(),
    )
    nested = st.integers(1, 300).map(lambda depth: json.loads("[" * depth + "]" * depth))
    return st.one_of(
        scalars,
        nested,
        st.recursive(
            scalars,
            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text(), inner, max_size=4),
            max_leaves=8,
        ),
    )


@st.composite
def message(draw: st.DrawFn) -> Any:
    """A chat message, often wrong: odd role or content, extra or odd keys, not an object."""
    good = {"role": draw(st.sampled_from(["user", "system", "assistant", "developer", "tool"]))}
    good["content"] = draw(mostly("Hello", text()))
    if draw(mostly(True, st.just(False))):
        return good
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return {**good, draw(st.sampled_from(MESSAGE_KEYS)): draw(odd_values())}
    if kind == 1:
        parts = draw(
            st.lists(
                st.one_of(odd_values(), st.builds(dict, type=st.just("text"), text=text())),
                max_size=3,
            )
        )
        return {**good, "content": parts}
    if kind == 2:
        return draw(odd_values())
    return {**good, draw(text()): draw(odd_values())}


@st.composite
def request_object(draw: st.DrawFn, chat: bool) -> dict[str, Any]:
    """A chat or completions body: a valid one, with some fields set to odd values."""
    body: dict[str, Any] = {"model": "tiny", "max_tokens": draw(st.integers(1, 8))}
    if chat:
        body["messages"] = draw(st.lists(message(), min_size=1, max_size=4))
    else:
        body["prompt"] = draw(st.one_of(text(), st.lists(st.integers(0, 3000), max_size=5)))
    if draw(st.booleans()):
        body["stream"] = True
    for field in draw(mostly([], st.lists(st.sampled_from(FIELDS), max_size=3, unique=True))):
        body[field] = draw(odd_values())
    return body


@st.composite
def body_bytes(draw: st.DrawFn, chat: bool) -> bytes:
    """The body as bytes, often spoilt on its way to the wire."""
    obj = draw(request_object(chat))
    raw = json.dumps(obj, allow_nan=True).encode()  # NaN and Infinity as literals
    spoil = draw(mostly(-1, st.integers(0, 6)))
    if spoil == 0:
        return b"\xef\xbb\xbf" + raw  # a byte order mark
    if spoil == 1:
        return json.dumps(obj).encode("utf-16")
    if spoil == 2:
        return raw.replace(b"{", b'{"model": "x", ', 1)  # a duplicate key, or two
    if spoil == 3:
        return raw[: draw(st.integers(0, len(raw)))]  # cut short
    if spoil == 4:
        return draw(st.binary(max_size=200))
    if spoil == 5:
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + bytes([draw(st.integers(0, 31))]) + raw[at:]
    if spoil == 6:
        depth = draw(st.integers(50, 5000))
        return b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"
    return raw


@functools.cache  # built once (module docstring)
def content_type() -> st.SearchStrategy[bytes | None]:
    return mostly(
        b"application/json",
        st.sampled_from(
            [
                b"application/json; charset=utf-8",
                b"APPLICATION/JSON;charset=latin-1",
                b"text/plain",
                b"application/x-www-form-urlencoded",
                b"multipart/form-data",
                b"application/json-patch+json",
                b"",
                b";;;",
                b"application/json\x7f",
                None,
            ]
        ),
    )


@functools.cache  # built once (module docstring)
def header_value() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=30).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
        st.sampled_from([b"interactive", b"batch", b"-5", b"1e9", b"clamp", b"Bearer x"]),
        st.integers(1_000, 50_000).map(lambda n: b"v" * n),
    )


@functools.cache  # built once (module docstring)
def methods() -> st.SearchStrategy[bytes]:
    """POST mostly, else GET mostly, else another method or bytes."""
    return mostly(
        b"POST",
        mostly(
            b"GET",
            st.sampled_from([b"PUT", b"DELETE", b"PATCH", b"OPTIONS", b"HEAD", b"FOO"])
            | st.binary(min_size=1, max_size=8).filter(
                lambda b: b" " not in b and b"\r\n" not in b
            ),
        ),
    )


@functools.cache  # built once (module docstring), for chat and for completions
def targets(chat: bool) -> st.SearchStrategy[bytes]:
    """The generation path mostly, else /v1/models mostly, else another path or bytes."""
    return mostly(
        CHAT_PATH if chat else COMPLETIONS_PATH,
        mostly(
            b"/v1/models",
            st.sampled_from(
                [
                    b"/health",
                    b"/ready",
                    b"/metrics",
                    b"/",
                    b"/v1/chat/completions/",
                    b"//v1/completions",
                    b"/v1/../health",
                    b"/v1/chat/completions?x=%00",
                    b"/%ff%fe",
                    b"*",
                    b"http://llmd/v1/completions",
                ]
            )
            | st.binary(min_size=1, max_size=40).filter(
                lambda b: b" " not in b and b"\r" not in b and b"\n" not in b
            ),
        ),
    )


@st.composite
def hostile_requests(draw: st.DrawFn) -> RawRequest:
    """One raw request: mostly a generation request with a spoilt body or headers, sometimes
    another method or path, a preflight, or garbage."""
    chat = draw(st.booleans())
    method = draw(methods())
    target = draw(targets(chat))
    headers: list[tuple[bytes, bytes]] = []
    ctype = draw(content_type())
    if ctype is not None:
        headers.append((b"content-type", ctype))
    body = draw(body_bytes(chat)) if method != b"GET" or draw(st.booleans()) else b""
    coding = draw(
        st.sampled_from([None, None, None, b"gzip", b"deflate", b"br", b"gzip, gzip", b"identity"])
    )
    if coding is not None:
        headers.append((b"content-encoding", coding))
        if draw(st.integers(0, 4)):  # mostly encoded as declared, sometimes not
            if coding == b"gzip":
                body = gzip.compress(body)
            elif coding == b"deflate":
                body = zlib.compress(body)
    if method == b"OPTIONS" and draw(st.booleans()):
        headers.append(
            (b"origin", draw(st.sampled_from([ORIGIN, b"http://evil.example", b"null"])))
        )
        headers.append(
            (b"access-control-request-method", draw(st.sampled_from([b"POST", b"GET", b"PUT"])))
        )
    for name in draw(
        mostly(
            [],
            st.lists(
                st.sampled_from(
                    [
                        b"x-llmd-priority",
                        b"x-llmd-deadline-ms",
                        b"x-request-id",
                        b"authorization",
                        b"x-llmd-context-policy",
                        b"origin",
                        b"accept-encoding",
                        b"expect",
                        b"x-other",
                    ]
                ),
                max_size=4,
            ),
        )
    ):
        headers.append((name, draw(header_value())))
    extra = draw(mostly(0, st.sampled_from([5, 120])))
    headers += [(f"x-pad-{i}".encode(), b"p") for i in range(extra)]
    return RawRequest(method, target, tuple(headers), body)
