"""Odd and hostile HTTP input through a real `llmd serve` on the simulator (issue 14): each is a
clear 4xx before it costs anything, with the headers the status calls for, and llmd's log
holds nothing but the request's own line."""

from __future__ import annotations

import gzip
import json
import tomllib
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomli_w

from tests.support.engine_metrics import engine_gauge
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.transformers_reference import transformers
from tests.support.waiting import wait_for

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
ORIGIN = "http://localhost:3000"
# The worker of the tests that import transformers (tests/support/xdist_groups.py): one
# test here checks against it.
pytestmark = pytest.mark.xdist_group("transformers")


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd on the simulator (max_model_len 1024), no CORS origins configured."""
    with LlmdProcess.running(sim_config(ensure_tiny_model()), "llmd-h-") as process:
        # The local tokenizer counts from here on (before, the engine's /tokenize does).
        assert wait_for(lambda: "tokenizer_loaded" in process.log_path.read_text(), 120)
        yield process


@pytest.fixture
def client(llmd: LlmdProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=llmd.base_url, timeout=60) as http:
        yield http


def log_lines(llmd: LlmdProcess) -> list[dict[str, Any]]:
    return llmd.log_records()


def lines_about(llmd: LlmdProcess, request_id: str) -> list[dict[str, Any]]:
    """The log lines that name `request_id`, and every library line or unexpected error
    logged from the first of them on (where a traceback would be)."""
    lines = log_lines(llmd)
    first = next(i for i, line in enumerate(lines) if line.get("request_id") == request_id)
    return [
        line
        for line in lines[first:]
        if line.get("request_id") == request_id
        or line["event"] in ("library_logged", "unexpected_error")
    ]


def engine_prompts(llmd: LlmdProcess) -> float:
    """Prompt tokens the simulator has been given so far (what reached the engine)."""
    return engine_gauge(llmd.engine_socket, "vllm:prompt_tokens_total")


def assert_openai_error(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    error: dict[str, Any] = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    return error


def test_a_lone_surrogate_is_a_400_naming_the_field_and_logs_one_line(
    llmd: LlmdProcess, client: httpx.Client
) -> None:
    """`"emoji \\ud83d"` (valid JSON, no Unicode character) is 400 invalid_request naming
    messages[0].content; the engine never sees it and the log has only the request's line."""
    before = engine_prompts(llmd)
    body = b'{"model": "tiny", "messages": [{"role": "user", "content": "emoji \\ud83d"}]}'
    answer = client.post(
        "/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json", "x-request-id": "lone-surrogate"},
    )
    error = assert_openai_error(answer, 400, "invalid_request")
    assert error["param"] == "messages" and "messages[0].content" in error["message"]
    assert answer.headers["x-request-id"] == "lone-surrogate"
    assert engine_prompts(llmd) == before
    lines = lines_about(llmd, "lone-surrogate")
    assert [(line["event"], line.get("outcome")) for line in lines] == [
        ("request_finished", "rejected")
    ]


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "tiny", "\\udc00": 1, "messages": [{"role": "user", "content": "Hi"}]}',
        b'{"model": "tiny", "messages": [{"role": "user", "content": "Hi", "\\udc00x": 1}]}',
        b'{"model": "tiny", "messages": [{"role": "user", "content": ["\\ud800"]}]}',
    ],
)
def test_an_error_about_a_lone_surrogate_is_strict_json(client: httpx.Client, body: bytes) -> None:
    """A lone surrogate in a key or a value is a 400 whose message and param show it escaped
    (`\\udc00`): the answer parses as JSON and its text encodes as UTF-8 (what a strict
    parser requires, RFC 8259 §8.2)."""
    answer = client.post(
        "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    error = assert_openai_error(answer, 400, "invalid_request")
    json.dumps(error, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    assert "\\ud" in error["message"] and "surrogate" in error["message"]


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("x-llmd-priority", ("batch", "bogus")),
        ("x-llmd-priority", ("interactive", "interactive")),
        ("x-llmd-deadline-ms", ("5000", "-1")),
        ("x-llmd-context-policy", ("reject", "clamp")),
    ],
)
def test_a_repeated_control_header_is_refused_naming_it(
    llmd: LlmdProcess, client: httpx.Client, name: str, values: tuple[str, str]
) -> None:
    """An llmd control header sent twice (even with the same value twice) is 400
    invalid_request naming it, before the engine sees anything; sent once it is served."""
    before = engine_prompts(llmd)
    headers = [("content-type", "application/json"), *((name, value) for value in values)]
    answer = client.post("/v1/chat/completions", content=json.dumps(CHAT), headers=headers)
    error = assert_openai_error(answer, 400, "invalid_request")
    assert error["param"] == name and name in error["message"]
    assert engine_prompts(llmd) == before
    once = client.post("/v1/chat/completions", json=CHAT, headers={name: values[0]})
    assert once.status_code == 200, once.text


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("my request 1", True),
        ('"quoted" id', True),
        ("a" * 128, True),
        ("a" * 129, False),
        ("caf\u00e9", False),
    ],
)
def test_a_request_id_of_printable_ascii_is_kept(
    client: httpx.Client, given: str, kept: bool
) -> None:
    """`x-request-id` of 1-128 printable ASCII characters, spaces and quotes included, is
    echoed as sent; a longer or non-ASCII one is replaced by 32 hex digits."""
    answer = client.post(
        "/v1/chat/completions", json=CHAT, headers={"x-request-id": given.encode("utf-8")}
    )
    assert answer.status_code == 200, answer.text
    echoed = answer.headers["x-request-id"]
    if kept:
        assert echoed == given
    else:
        assert len(echoed) == 32 and int(echoed, 16) >= 0


def test_an_overlong_prompt_is_refused_with_a_true_count(
    llmd: LlmdProcess, client: httpx.Client, tiny_model_dir: Path
) -> None:
    """A 3 MB prompt on a 1,024-token model: counting stops early and the refusal says
    "at least N" with N a true lower bound (checked by tokenizing it all here)."""
    words = ("the quick brown fox jumps over the lazy dog " * 70_000)[:3_000_000]
    answer = client.post("/v1/completions", json={"model": "tiny", "prompt": words})
    error = assert_openai_error(answer, 400, "context_length_exceeded")
    assert "is at least " in error["message"]
    bound = int(error["message"].split("is at least ")[1].split()[0])
    tokenizer = transformers().AutoTokenizer.from_pretrained(tiny_model_dir)
    assert 1024 < bound <= len(tokenizer(words)["input_ids"])


def test_a_prompt_counted_in_full_is_named_exactly(client: httpx.Client) -> None:
    """A prompt just over the context is counted in full: its exact count, no "at least"."""
    answer = client.post("/v1/completions", json={"model": "tiny", "prompt": "fox " * 1100})
    error = assert_openai_error(answer, 400, "context_length_exceeded")
    assert "is at least" not in error["message"] and "your prompt is " in error["message"]


@pytest.mark.parametrize(
    ("coding", "encode"),
    [("gzip", gzip.compress), ("x-gzip", gzip.compress), ("deflate", zlib.compress)],
)
def test_compressed_bodies_are_decoded(client: httpx.Client, coding: str, encode: Any) -> None:
    """Content-Encoding gzip (x-gzip) and deflate bodies are decoded and relayed."""
    answer = client.post(
        "/v1/chat/completions",
        content=encode(json.dumps(CHAT).encode()),
        headers={"content-type": "application/json", "content-encoding": coding},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 4


def test_a_bomb_or_an_unknown_coding_is_refused(client: httpx.Client) -> None:
    """A gzip body decoding past server.max_body_bytes is 413; Brotli is 415 with
    Accept-Encoding naming what llmd reads."""
    bomb = gzip.compress(b'{"a": "' + b"x" * (64 << 20) + b'"}')
    answer = client.post(
        "/v1/chat/completions",
        content=bomb,
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    assert "once decoded" in assert_openai_error(answer, 413, "body_too_large")["message"]
    answer = client.post(
        "/v1/chat/completions",
        content=b"...",
        headers={"content-type": "application/json", "content-encoding": "br"},
    )
    assert assert_openai_error(answer, 415, "invalid_request")["param"] == "content-encoding"
    assert answer.headers["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize("content_type", ["text/plain", None, "application/x-www-form-urlencoded"])
def test_a_json_body_under_another_type_is_415(
    llmd: LlmdProcess, client: httpx.Client, content_type: str | None
) -> None:
    """A JSON body sent as text/plain, as a form, or with no Content-Type is 415
    invalid_request (a web page can send those cross-origin without a preflight) and never
    reaches the engine."""
    before = engine_prompts(llmd)
    headers = {} if content_type is None else {"content-type": content_type}
    answer = client.post("/v1/chat/completions", content=json.dumps(CHAT), headers=headers)
    assert assert_openai_error(answer, 415, "invalid_request")["param"] == "content-type"
    assert engine_prompts(llmd) == before
    ok = client.post(
        "/v1/chat/completions",
        content=json.dumps(CHAT),
        headers={"content-type": "application/json; charset=UTF-8"},
    )
    assert ok.status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/chat/completions", "POST"),
        ("PUT", "/v1/completions", "POST"),
        ("DELETE", "/v1/models", "GET, HEAD"),
        ("POST", "/health", "GET, HEAD"),
        ("OPTIONS", "/v1/chat/completions", "POST"),
    ],
)
def test_every_405_says_what_is_allowed(
    client: httpx.Client, method: str, path: str, allow: str
) -> None:
    """A route asked with the wrong method is 405 with `Allow` (RFC 9110 §15.5.6)."""
    answer = client.request(method, path)
    assert_openai_error(answer, 405, "method_not_allowed")
    assert sorted(answer.headers["allow"].split(", ")) == sorted(allow.split(", "))


def test_every_v1_answer_says_its_queue_time(client: httpx.Client) -> None:
    """x-llmd-queue-ms is on every /v1 answer: relayed, refused (400, 404, 415) or not."""
    answers = [
        client.post("/v1/chat/completions", json=CHAT),
        client.post("/v1/chat/completions", json={"messages": []}),
        client.post("/v1/chat/completions", json={**CHAT, "model": "nope"}),
        client.post("/v1/chat/completions", content=b"{}", headers={"content-type": "x/y"}),
        client.get("/v1/models"),
    ]
    assert [a.status_code for a in answers] == [200, 400, 404, 415, 200]
    assert all(a.headers["x-llmd-queue-ms"].isdigit() for a in answers)


def set_cors(llmd: LlmdProcess, origins: list[str]) -> None:
    """Write `origins` into the daemon's config file and reload it (admin API)."""
    path = llmd.runtime_dir.parent / "llmd.toml"
    raw = tomllib.loads(path.read_text())
    raw["server"]["cors_allowed_origins"] = origins
    path.write_text(tomli_w.dumps(raw))
    transport = httpx.HTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
    with httpx.Client(transport=transport, timeout=10) as admin:
        assert admin.post("http://llmd/reload").status_code == 200


def preflight(client: httpx.Client, origin: str, **headers: str) -> httpx.Response:
    return client.options(
        "/v1/chat/completions",
        headers={"origin": origin, "access-control-request-method": "POST", **headers},
    )


def test_cors_by_config(llmd: LlmdProcess, client: httpx.Client) -> None:
    """Without origins a preflight is 405 with Allow and no CORS header (the browser refuses
    the call); with `server.cors_allowed_origins` (applied by a reload) the preflight of an
    allowed origin passes per the Fetch standard, its responses (streams too) carry
    Access-Control-Allow-Origin, and another origin's preflight is an OpenAI-shaped 400."""
    refused = preflight(client, ORIGIN, **{"access-control-request-headers": "authorization"})
    assert refused.status_code == 405 and refused.headers["allow"] == "POST"
    assert not any(h.startswith("access-control-") for h in refused.headers)
    set_cors(llmd, [ORIGIN])
    try:
        asked = "authorization, content-type, x-stainless-os"
        ok = preflight(client, ORIGIN, **{"access-control-request-headers": asked})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == ORIGIN
        assert ok.headers["access-control-allow-methods"] == "GET, POST"
        assert ok.headers["access-control-allow-headers"] == asked
        assert ok.headers["access-control-max-age"] == "600"
        other = preflight(client, "http://evil.example")
        assert assert_openai_error(other, 400, "invalid_request")["param"] == "origin"
        assert "access-control-allow-origin" not in other.headers
        plain = client.post("/v1/chat/completions", json=CHAT, headers={"origin": ORIGIN})
        assert plain.headers["access-control-allow-origin"] == ORIGIN
        exposed = plain.headers["access-control-expose-headers"].split(", ")
        assert sorted(exposed) == sorted(
            [
                "x-request-id",
                "x-llmd-queue-ms",
                "x-llmd-max-tokens-clamped",
                "x-llmd-max-tokens-capped",
                "retry-after",
            ]
        )
        with client.stream(
            "POST",
            "/v1/chat/completions",
            json={**CHAT, "stream": True},
            headers={"origin": ORIGIN},
        ) as stream:
            assert stream.headers["access-control-allow-origin"] == ORIGIN
            assert stream.read().endswith(b"data: [DONE]\n\n")
        refused = client.post("/v1/chat/completions", json={}, headers={"origin": ORIGIN})
        assert refused.status_code == 400
        assert refused.headers["access-control-allow-origin"] == ORIGIN
        elsewhere = client.post("/v1/chat/completions", json=CHAT, headers={"origin": "http://x.y"})
        assert "access-control-allow-origin" not in elsewhere.headers
    finally:
        set_cors(llmd, [])
    assert preflight(client, ORIGIN).status_code == 405


@pytest.mark.parametrize(
    ("content", "headers", "words"),
    [
        ("null", {}, "request body must be a JSON object, got null"),
        ("[1]", {}, "request body must be a JSON object, got array"),
        ('"hi"', {}, "request body must be a JSON object, got string"),
        ("true", {}, "request body must be a JSON object, got boolean"),
        (json.dumps(CHAT), {"x-llmd-priority": "bogus"}, "or batch, got 'bogus'"),
        (json.dumps(CHAT), {"x-llmd-context-policy": "bogus"}, "or 'clamp', got 'bogus'"),
        (json.dumps(CHAT), {"x-llmd-deadline-ms": "-5"}, "in 1..86400000, got '-5'"),
        (json.dumps({**CHAT, "tools": "x"}), {}, "'tools' must be an array of tool objects"),
        (json.dumps({**CHAT, "tools": [{"function": {"name": 1}}]}), {}, "name must be a string"),
    ],
)
def test_an_error_shows_what_the_client_sent_in_its_own_terms(
    client: httpx.Client, content: str, headers: dict[str, str], words: str
) -> None:
    """Error messages name JSON types and header text, never a Python type or bytes repr, and
    a bad `tools` is llmd's 400 on `tools`, not the engine's /tokenize error on `body.prompt`."""
    sent = headers
    headers = {"content-type": "application/json", **headers}
    answer = client.post("/v1/chat/completions", content=content, headers=headers)
    error = assert_openai_error(answer, 400, "invalid_request")
    assert words in error["message"]
    assert "b'" not in error["message"] and "prompt" not in error["message"]
    named = next(iter(sent), None)  # a header error names its header
    assert error["param"] == ("tools" if "tools" in content else named)
