#!/usr/bin/env python3
"""Record tests/data/vllm_cpu_endpoints/: what a real vLLM answers on each inference endpoint.

Boots the tiny model (scripts/setup.sh makes it) as five engine kinds, one after the other,
sends each kind its cases and writes one JSON file per case: KIND/CASE.json holding the
engine's flags and vLLM version, the request, the status, the response headers (all but
`date`) and the body (JSON, else text, else base64). The contract tests hold llmd and the
simulator to these answers; re-record them to compare another vLLM version. The `messages`
kind (Anthropic Messages on a chat engine with the demo's tool flags) goes to
tests/data/vllm_cpu_messages/; a stream's answer is kept as text (`body_text`).

  .venv/bin/python scripts/record_engine_answers.py               # all kinds, ~5 min on 2 cores
  .venv/bin/python scripts/record_engine_answers.py --kinds embed,chat
  .venv/bin/python scripts/record_engine_answers.py --socket embed=/tmp/pool.sock  # running engine

Run from the repository root, under `flock /tmp/llmd-heavy.lock` on a shared host. Another
vLLM: `LLMD_TEST_VLLM_PYTHON=/path/to/venv/bin/python` (tests/support/vllm_python.py). A
given socket must serve the tiny model as `tiny` with the kind's flags (ENGINE_ARGS).
Volatile fields (`id`, `created`) change at each recording.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.audio import silence_wav  # noqa: E402
from tests.support.vllm_engine import VLLM_ARGS, vllm_engine  # noqa: E402
from tests.support.vllm_python import vllm_version  # noqa: E402

OUT = REPO / "tests" / "data" / "vllm_cpu_endpoints"
# Kinds recorded apart from the endpoint sweep (tests/engine/sim/test_endpoint_contract.py):
# Anthropic Messages, held to its recording by tests/contract/test_messages_recorded.py.
FOLDERS = {"messages": REPO / "tests" / "data" / "vllm_cpu_messages"}
MODEL = REPO / "var" / "models" / "tiny"

# Each kind's flags beside VLLM_ARGS (tests/support/vllm_engine.py); docs/engine-pooling.md
# gives the reason for each.
CLASSIFY_ARGS = ("--runner", "pooling", "--convert", "classify", "--dtype", "float32")
# The tiny checkpoint has no classifier weights: without a `method` vLLM leaves the head
# uninitialised (garbage, sometimes NaN). These build it from two lm_head rows ("he", "ll"),
# as vLLM does for LLM rerankers (model_executor/models/adapters.py, SEQ_CLS_LOAD_METHODS).
TWO_LABELS = '{"method": "no_post_processing", "classifier_from_token": ["he", "ll"]}'
# One label (the difference of the two rows): a cross-encoder, so vLLM serves score and rerank.
ONE_LABEL = '{"method": "from_2_way_softmax", "classifier_from_token": ["he", "ll"]}'
ENGINE_ARGS: dict[str, tuple[str, ...]] = {
    "embed": ("--runner", "pooling", "--convert", "embed", "--dtype", "float32"),
    "classify": (*CLASSIFY_ARGS, "--hf-overrides", TWO_LABELS),
    "cross_encoder": (*CLASSIFY_ARGS, "--hf-overrides", ONE_LABEL),
    "chat": (),
    # Anthropic Messages as the demo serves agents (etc/demo.toml's tool flags; the window stays
    # 1,024 so that an over-long prompt is a small request)
    "messages": ("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
}

# 1,202 tokens of the tiny tokenizer with BOS ("hello world " is 4): past max_model_len 1024.
LONG = "hello world " * 300
MESSAGES = [{"role": "user", "content": "hello"}]


@dataclass(frozen=True)
class Case:
    """One request: `json` for a JSON body, `form`/`files` for multipart, neither for GET.
    `routes_only`: keep only the routes of an OpenAPI answer ({path: [methods]})."""

    name: str
    path: str
    json: Any = None
    method: str = "POST"
    form: dict[str, str] = field(default_factory=dict)
    files: dict[str, tuple[str, bytes, str]] = field(default_factory=dict)
    routes_only: bool = False


def embeddings(name: str, **body: Any) -> Case:
    return Case(name, "/v1/embeddings", {"model": "tiny", **body})


def post(name: str, path: str, **body: Any) -> Case:
    return Case(name, path, {"model": "tiny", **body})


WAV = {"file": ("hello.wav", silence_wav(), "audio/wav")}  # 1 s of silence, 32 KB
# The routes the engine registered: what tells a pooling engine from a generate one.
OPENAPI = Case("openapi_routes", "/openapi.json", method="GET", routes_only=True)
SCORE = {"text_1": "hello", "text_2": ["world", "foo bar"]}
RERANK = {"query": "hello", "documents": ["world", "foo bar", "a longer document here"]}

POOLING_CASES = [
    embeddings("embeddings_string", input="hello world"),
    embeddings("embeddings_list", input=["hello world", "foo bar baz", "a"]),
    embeddings("embeddings_token_ids", input=[1, 265, 407]),
    embeddings("embeddings_token_id_lists", input=[[1, 265, 407], [1, 82]]),
    embeddings("embeddings_base64", input="hello world", encoding_format="base64"),
    embeddings("embeddings_bytes", input=["hello", "world"], encoding_format="bytes"),
    embeddings("embeddings_bytes_only", input=["hello", "world"], encoding_format="bytes_only"),
    embeddings("embeddings_dimensions", input="hello world", dimensions=16),
    embeddings("embeddings_messages", messages=MESSAGES),
    embeddings("embeddings_empty_string", input=""),
    embeddings("embeddings_empty_list", input=[]),
    embeddings("embeddings_too_long", input=LONG),
    embeddings("embeddings_too_long_in_list", input=["hello", LONG]),
    embeddings("embeddings_too_long_truncated", input=LONG, truncate_prompt_tokens=100),
    embeddings("embeddings_too_long_token_ids", input=[265] * 1100),
    # Past max_model_len x the longest vocabulary entry (36 characters): refused before tokenizing.
    embeddings("embeddings_too_many_chars", input="hello world " * 3100),
    embeddings("embeddings_token_id_past_vocab", input=[1, 5000]),
    embeddings("embeddings_token_id_at_vocab_size", input=[[1, 2], [2048]]),
    embeddings("embeddings_token_id_negative", input=[1, -1]),
    Case("embeddings_wrong_model", "/v1/embeddings", {"model": "nope", "input": "hi"}),
    embeddings("embeddings_no_input"),
    Case("embeddings_no_model", "/v1/embeddings", {"input": "hello world"}),
    post("pooling", "/pooling", input="hello world"),
    post("pooling_task_token_embed", "/pooling", input="hello world", task="token_embed"),
    post("classify", "/classify", input="hello world"),
    post("score_strings", "/score", text_1="hello", text_2="world"),
    post("score_text_list", "/score", **SCORE),
    post("v1_score_text_list", "/v1/score", **SCORE),
    post("score_lists", "/score", text_1=["hello", "foo"], text_2=["world", "bar"]),
    post("score_lists_unequal", "/score", text_1=["hello", "foo"], text_2=["a", "b", "c"]),
    post("score_queries_documents", "/v1/score", queries="hello", documents=["world", "foo"]),
    post("score_too_long", "/score", text_1="hello", text_2=[LONG]),
    Case("score_wrong_model", "/score", {"model": "nope", **SCORE}),
    post("rerank", "/rerank", **RERANK),
    post("v1_rerank_top_n", "/v1/rerank", **RERANK, top_n=1),
    post("v2_rerank", "/v2/rerank", **RERANK, top_n=2, return_documents=False),
    post("rerank_no_documents", "/rerank", query="hello", documents=[]),
    post("rerank_too_long", "/rerank", query="hello", documents=["world", LONG]),
    Case("rerank_wrong_model", "/rerank", {"model": "nope", **RERANK}),
    Case("rerank_no_model", "/rerank", RERANK),
    post("v2_embed", "/v2/embed", texts=["hello world", "foo"]),
    post("v2_embed_types", "/v2/embed", texts=["hello"], embedding_types=["float", "ubinary"]),
    post("v2_embed_input_type", "/v2/embed", texts=["hello"], input_type="search_document"),
    post("v2_embed_too_long", "/v2/embed", texts=[LONG]),
    post("v2_embed_too_long_no_truncate", "/v2/embed", texts=[LONG], truncate="NONE"),
    Case("models", "/v1/models", method="GET"),
    Case("model_by_id", "/v1/models/tiny", method="GET"),
    post("tokenize_prompt", "/tokenize", prompt="hello world"),
    post("tokenize_messages", "/tokenize", messages=MESSAGES),
    Case("tokenize_wrong_model", "/tokenize", {"model": "nope", "prompt": "hi"}),
    post("detokenize", "/detokenize", tokens=[1, 265, 407]),
    post("chat_completions", "/v1/chat/completions", messages=MESSAGES),
    post("completions", "/v1/completions", prompt="hello"),
    post("responses", "/v1/responses", input="hello"),
    post("messages", "/v1/messages", messages=MESSAGES, max_tokens=8),
    OPENAPI,
]

CHAT_CASES = [
    embeddings("embeddings", input="hello"),
    post("pooling", "/pooling", input="hello"),
    post("classify", "/classify", input="hello"),
    post("score", "/score", **SCORE),
    post("v1_score", "/v1/score", **SCORE),
    post("rerank", "/rerank", **RERANK),
    post("v1_rerank", "/v1/rerank", **RERANK),
    post("v2_rerank", "/v2/rerank", **RERANK),
    post("v2_embed", "/v2/embed", texts=["hello"]),
    post("tokenize_prompt", "/tokenize", prompt="hello world"),
    post("tokenize_prompt_no_special", "/tokenize", prompt="hello world", add_special_tokens=False),
    post("tokenize_prompt_token_strs", "/tokenize", prompt="hello world", return_token_strs=True),
    post("tokenize_messages", "/tokenize", messages=MESSAGES),
    post("tokenize_messages_prompt", "/tokenize", messages=MESSAGES, add_generation_prompt=True),
    post("tokenize_too_long", "/tokenize", prompt=LONG),
    Case("tokenize_wrong_model", "/tokenize", {"model": "nope", "prompt": "hi"}),
    post("detokenize", "/detokenize", tokens=[1, 265, 407]),
    post("detokenize_past_vocab", "/detokenize", tokens=[1, 5000]),
    post("detokenize_negative", "/detokenize", tokens=[-1]),
    Case("models", "/v1/models", method="GET"),
    Case("model_by_id", "/v1/models/tiny", method="GET"),
    Case("transcription", "/v1/audio/transcriptions", form={"model": "tiny"}, files=WAV),
    Case("transcription_no_file", "/v1/audio/transcriptions", form={"model": "tiny"}),
    Case("translation", "/v1/audio/translations", form={"model": "tiny"}, files=WAV),
    OPENAPI,
]

CLASSIFY_CASES = [
    post("classify", "/classify", input="hello world"),
    post("classify_list", "/classify", input=["hello world", "foo"]),
    post("classify_too_long", "/classify", input=LONG),
    post("pooling", "/pooling", input="hello world"),
    post("score", "/score", **SCORE),
    post("rerank", "/rerank", **RERANK),
    embeddings("embeddings", input="hello"),
    Case("models", "/v1/models", method="GET"),
    OPENAPI,
]

CROSS_ENCODER_CASES = [
    post("classify", "/classify", input="hello world"),
    post("score_text_list", "/score", **SCORE),
    post("score_lists", "/score", text_1=["hello", "foo"], text_2=["world", "bar"]),
    post("rerank", "/rerank", **RERANK),
    post("v2_rerank_top_n", "/v2/rerank", **RERANK, top_n=1),
    post("rerank_too_long", "/rerank", query="hello", documents=["world", LONG]),
    embeddings("embeddings", input="hello"),
    Case("models", "/v1/models", method="GET"),
    OPENAPI,
]


def messages(name: str, path: str = "/v1/messages", **body: Any) -> Case:
    """A Messages request: `hello` with max_tokens 8 unless `body` says otherwise."""
    return Case(name, path, {"model": "tiny", "max_tokens": 8, "messages": MESSAGES, **body})


def count_tokens(name: str, **body: Any) -> Case:
    return Case(name, "/v1/messages/count_tokens", {"model": "tiny", "messages": MESSAGES, **body})


TOOLS = [
    {
        "name": "Read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {"name": "Ls", "input_schema": {"properties": {}}},
]
TOOL_TURNS = [
    {"role": "user", "content": "read a"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}},
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a"}],
    },
]
SYSTEM_BLOCKS = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}]
TWO_BLOCKS = [
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
]
# 881 tokens with the chat template: max_tokens 500 does not fit the 1,024 window
NEARLY_FULL = [{"role": "user", "content": "hello world " * 219}]

MESSAGES_CASES = [
    messages("messages"),
    messages("messages_stream", stream=True),
    messages("messages_beta", "/v1/messages?beta=true"),
    messages("messages_system_blocks", system=SYSTEM_BLOCKS, messages=TWO_BLOCKS),
    messages("messages_system_string", system="Be brief."),
    messages("messages_tools", tools=TOOLS),
    messages("messages_tools_stream", tools=TOOLS, stream=True),
    messages("messages_tool_result", tools=TOOLS, messages=TOOL_TURNS),
    messages("messages_tool_choice_none", tools=TOOLS, tool_choice={"type": "none"}),
    messages("messages_stop_sequences", stop_sequences=["e", "a"], max_tokens=64),
    messages(
        "messages_stop_sequences_stream", stop_sequences=["e", "a"], max_tokens=64, stream=True
    ),
    messages("messages_clamped", messages=NEARLY_FULL, max_tokens=500),
    messages("messages_max_tokens_over_window", max_tokens=5000),
    messages("messages_too_long", messages=[{"role": "user", "content": LONG}]),
    messages("messages_too_long_stream", messages=[{"role": "user", "content": LONG}], stream=True),
    messages("messages_max_tokens_zero", max_tokens=0),
    messages("messages_max_tokens_string", max_tokens="eight"),
    messages(
        "messages_thinking_over_max_tokens", thinking={"type": "enabled", "budget_tokens": 1024}
    ),
    messages("messages_unknown_block", messages=[{"role": "user", "content": [{"type": "video"}]}]),
    messages("messages_bad_role", messages=[{"role": "robot", "content": "hi"}]),
    messages("messages_empty", messages=[]),
    Case("messages_no_max_tokens", "/v1/messages", {"model": "tiny", "messages": MESSAGES}),
    Case(
        "messages_wrong_model",
        "/v1/messages",
        {"model": "nope", "max_tokens": 8, "messages": MESSAGES},
    ),
    Case("messages_no_model", "/v1/messages", {"max_tokens": 8, "messages": MESSAGES}),
    count_tokens("count_tokens"),
    count_tokens("count_tokens_system_tools", system=SYSTEM_BLOCKS, tools=TOOLS),
    count_tokens("count_tokens_tool_result", tools=TOOLS, messages=TOOL_TURNS),
    count_tokens("count_tokens_too_long", messages=[{"role": "user", "content": LONG}]),
    Case(
        "count_tokens_wrong_model",
        "/v1/messages/count_tokens",
        {"model": "nope", "messages": MESSAGES},
    ),
    Case("count_tokens_no_messages", "/v1/messages/count_tokens", {"model": "tiny"}),
    post(
        "tokenize_messages_tools",
        "/tokenize",
        messages=MESSAGES,
        tools=[
            {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}
        ],
    ),
]

CASES = {
    "embed": POOLING_CASES,
    "classify": CLASSIFY_CASES,
    "cross_encoder": CROSS_ENCODER_CASES,
    "chat": CHAT_CASES,
    "messages": MESSAGES_CASES,
}


def answer(client: httpx.Client, case: Case) -> dict[str, Any]:
    """Send `case`; its request and the engine's answer as one fixture record."""
    request: dict[str, Any] = {"method": case.method, "path": case.path}
    if case.method == "GET":
        response = client.get(case.path)
    elif case.form or case.files:
        response = client.post(case.path, data=case.form, files=case.files or None)
        request["multipart"] = {
            "fields": case.form,
            "files": {
                part: {"filename": name, "content_type": kind, "bytes": len(data)}
                for part, (name, data, kind) in case.files.items()
            },
        }
    else:
        response = client.post(case.path, json=case.json)
        request["json"] = case.json
    headers = {k: v for k, v in response.headers.items() if k != "date"}
    record: dict[str, Any] = {"request": request, "status": response.status_code}
    record["headers"] = headers
    try:
        record["body"] = response.json()
        if case.routes_only and response.is_success:
            paths = record["body"]["paths"]
            record["body"] = {path: sorted(paths[path]) for path in sorted(paths)}
    except ValueError:
        try:
            record["body_text"] = response.content.decode()
        except UnicodeDecodeError:
            record["body_base64"] = base64.b64encode(response.content).decode()
    return record


def dump(record: dict[str, Any]) -> str:
    """JSON with two-space indents, but each list of numbers on one line (embedding vectors)."""
    text = json.dumps(record, indent=2, ensure_ascii=False)
    numbers = re.compile(r"\[\s*(-?[\d.e+-]+(?:,\s*-?[\d.e+-]+)*)\s*\]")
    return numbers.sub(lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text) + "\n"


@contextlib.contextmanager
def engine_socket(kind: str, given: dict[str, Path]) -> Iterator[Path]:
    """The socket of a `kind` engine: the one given, else a fresh boot stopped on exit."""
    if kind in given:
        yield given[kind]
        return
    with vllm_engine(MODEL, args=ENGINE_ARGS[kind]) as engine:
        yield engine.socket


def record(kind: str, socket: Path, out: Path | None) -> None:
    """Send every case of `kind` to the engine on `socket`, write OUT/KIND/CASE.json (out/KIND
    when `out` is given; FOLDERS[KIND] for a kind recorded apart)."""
    folder = out / kind if out is not None else FOLDERS.get(kind, OUT / kind)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):  # a case no longer sent leaves no stale answer
        old.unlink()
    meta = {
        "engine": kind,
        "vllm": vllm_version(),
        "engine_args": [*VLLM_ARGS, *ENGINE_ARGS[kind]],
        "served_model_name": "tiny",
    }
    transport = httpx.HTTPTransport(uds=str(socket))
    with httpx.Client(transport=transport, base_url="http://engine", timeout=120) as client:
        for case in CASES[kind]:
            fixture = {**meta, "case": case.name, **answer(client, case)}
            (folder / f"{case.name}.json").write_text(dump(fixture))
            print(f"{kind}/{case.name}: {fixture['status']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", default=",".join(CASES), help="comma-separated engine kinds")
    parser.add_argument(
        "--socket", action="append", default=[], metavar="KIND=PATH", help="a running engine"
    )
    parser.add_argument("--out", type=Path, default=None, help=f"default {OUT}")
    args = parser.parse_args()
    given = {k: Path(p) for k, _, p in (s.partition("=") for s in args.socket)}
    for kind in args.kinds.split(","):
        with engine_socket(kind, given) as socket:
            record(kind, socket, args.out)


if __name__ == "__main__":
    main()
