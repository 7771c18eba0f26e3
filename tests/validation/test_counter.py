"""Prompt token counts: locally with the model's tokenizer, or through the engine's /tokenize."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from llmd.endpoints.openai import read_chat, read_completions
from llmd.engine.client import EngineClient
from llmd.errors import InvalidRequest
from llmd.validation.context import AtLeast
from llmd.validation.counter import (
    CountUnsupported,
    EngineCounter,
    LocalCounter,
    TokenizerUnavailable,
)
from llmd.validation.fields import Counted as Prompt
from tests.support.log_capture import Captured
from tests.validation.conftest import tokenizer_threads, transformers_loaded

# The worker of the tests that import transformers (tests/support/xdist_groups.py): two tests
# here load with it (about 2.3 s of CPU, without torch, in each worker that imports it first).
pytestmark = pytest.mark.xdist_group("transformers")


def chat(messages: list[dict[str, Any]], **extra: Any) -> Prompt:
    return read_chat({"messages": messages, **extra}).prompt


def completion(prompt: Any, **extra: Any) -> Prompt:
    return read_completions({"prompt": prompt, **extra}).prompt


def test_chat_count_is_the_rendered_template_tokenized(counter: LocalCounter) -> None:
    """Chat: the template's text (BOS included by it) tokenized without adding special tokens."""
    tokenizer = counter._tokenizer
    text = "<s><|user|>\nhello 😀 你好</s>\n<|assistant|>\n"
    expected = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert counter.count_now(chat([{"role": "user", "content": "hello 😀 你好"}])) == [expected]


async def test_a_closed_counter_still_counts_for_requests_that_took_it(
    tiny_model_dir: Path,
) -> None:
    """A reload or deploy closes the counter a request already took: its count still comes
    (it was a 500, 'cannot schedule new futures after shutdown', found by a deploy test)."""
    replaced = await asyncio.to_thread(LocalCounter.load, str(tiny_model_dir))
    prompt = completion("hello there")
    before = await replaced.count(prompt)
    replaced.close()
    assert await replaced.count(prompt) == before


def test_chat_add_special_tokens_adds_bos(counter: LocalCounter) -> None:
    """add_special_tokens=true on chat adds the tokenizer's own BOS on top of the template's."""
    messages = [{"role": "user", "content": "hi"}]
    plain = counter.count_now(chat(messages))[0]
    assert counter.count_now(chat(messages, add_special_tokens=True)) == [plain + 1]


def test_generation_prompt_is_counted(counter: LocalCounter) -> None:
    """add_generation_prompt=false leaves the assistant header out of the count."""
    messages = [{"role": "user", "content": "hi"}]
    with_prompt = counter.count_now(chat(messages))[0]
    assert counter.count_now(chat(messages, add_generation_prompt=False))[0] < with_prompt


def test_completions_count_each_prompt_with_bos(counter: LocalCounter) -> None:
    """Completions: one count per prompt, BOS added by default; token ids count as given."""
    tokenizer = counter._tokenizer
    a = len(tokenizer("fox", add_special_tokens=True)["input_ids"])
    assert counter.count_now(completion(["fox", "fox"])) == [a, a]
    assert counter.count_now(completion("fox", add_special_tokens=False)) == [a - 1]
    assert counter.count_now(completion([[5, 6, 7], [8]])) == [3, 1]


def test_overlong_text_is_not_tokenized(counter: LocalCounter) -> None:
    """Text longer than `limit` tokens could be counts, untokenized, as AtLeast a true bound."""
    text = "x" * (counter.max_chars_per_token * 300 + 1)
    (count,) = counter.count_now(completion(text), limit=100)
    assert isinstance(count, AtLeast) and count == 301
    assert counter.count_now(completion(text)) >= [301]  # tokenized in full: the bound holds


def test_openai_format_template_sees_parts(parts_tokenizer_dir: Path) -> None:
    """A part-looping template renders each text part on its own."""
    counter = LocalCounter.load(str(parts_tokenizer_dir))
    prompt = chat(
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ]
    )
    assert counter.render(prompt) == "<s><|user|>\n[a][b]</s>\n<|assistant|>\n"  # type: ignore[arg-type]


def test_template_errors_are_400(counter: LocalCounter) -> None:
    """A template that raises on the input is the client's error, as in vLLM."""
    failing = LocalCounter(counter._tokenizer, "{{ raise_exception('no system role') }}", 10)
    with pytest.raises(InvalidRequest, match="no system role"):
        failing.count_now(chat([{"role": "system", "content": "x"}]))


def test_no_tokenizer_is_reported(tmp_path: Path) -> None:
    """A directory without a tokenizer raises TokenizerUnavailable (llmd falls back)."""
    with pytest.raises(TokenizerUnavailable):
        LocalCounter.load(str(tmp_path))


async def test_counting_runs_off_the_event_loop(
    counter: LocalCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """count() runs the tokenizer on its own thread, not the loop's."""
    seen = tokenizer_threads(counter, monkeypatch)
    await counter.count(completion("fox"))
    assert seen and all(name.startswith("llmd-tokenizer") for name in seen)


def test_an_inline_count_gives_way_while_another_thread_counts(counter: LocalCounter) -> None:
    """count_inline counts on the calling thread, or answers None at once while the tokenizer is
    in use on another thread (a fast tokenizer is not safe to share: "Already borrowed")."""
    prompt = completion("fox")
    assert counter.count_inline(prompt) == counter.count_now(prompt)
    inside, release = threading.Event(), threading.Event()
    original = counter._encode

    def held(*args: Any) -> int:
        inside.set()
        release.wait(30)
        return original(*args)

    counter._encode = held  # type: ignore[method-assign]
    try:
        other = threading.Thread(target=counter.count_now, args=(prompt,))
        other.start()
        assert inside.wait(30)
        assert counter.count_inline(prompt) is None
        release.set()
        other.join(30)
    finally:
        release.set()
        del counter._encode
    assert counter.count_inline(prompt) == counter.count_now(prompt)


@pytest.fixture
async def tokenize_engine(tmp_path: Path) -> AsyncIterator[tuple[EngineClient, list[Any]]]:
    """A fake engine whose /tokenize counts characters, on a Unix socket; records bodies."""
    bodies: list[Any] = []

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        if "messages" in body and body["messages"][0].get("role") == "bad":
            return web.json_response({"error": {"message": "bad role", "code": 400}}, status=400)
        if "messages" in body and body["messages"][0].get("role") == "dump":
            error = {"message": body["messages"][0]["content"]}
            return web.json_response({"error": error}, status=400)
        text = body.get("prompt") or json.dumps(body["messages"])
        return web.json_response({"count": len(text), "max_model_len": 1024, "tokens": []})

    app = web.Application()
    app.router.add_post("/tokenize", tokenize)
    runner = web.AppRunner(app)
    await runner.setup()
    socket = str(tmp_path / "e.sock")
    await web.UnixSite(runner, socket).start()
    client = EngineClient(Path(socket))
    yield client, bodies
    await client.close()
    await runner.cleanup()


async def test_engine_counter_asks_tokenize(tokenize_engine: Any) -> None:
    """The engine counter sends each text prompt to /tokenize; token ids are counted locally."""
    client, bodies = tokenize_engine
    engine = EngineCounter(lambda: client)
    assert await engine.count(completion(["abc", "de"]), "tiny") == [3, 2]
    assert await engine.count(completion([1, 2, 3]), None) == [3]
    assert bodies == [
        {"prompt": "abc", "add_special_tokens": True, "model": "tiny"},
        {"prompt": "de", "add_special_tokens": True, "model": "tiny"},
    ]


async def test_engine_counter_sends_chat_fields_and_tools(tokenize_engine: Any) -> None:
    """Chat requests go to /tokenize with the fields that change the rendering."""
    client, bodies = tokenize_engine
    tools = [{"type": "function", "function": {"name": "f"}}]
    await EngineCounter(lambda: client).count(
        chat([{"role": "user", "content": "x"}], tools=tools), None
    )
    assert bodies[0]["tools"] == tools
    assert bodies[0]["add_generation_prompt"] is True


async def test_engine_counter_relays_engine_400(tokenize_engine: Any) -> None:
    """An engine 400 on /tokenize becomes the client's 400 with the engine's message."""
    client, _ = tokenize_engine
    with pytest.raises(InvalidRequest, match="bad role"):
        await EngineCounter(lambda: client).count(chat([{"role": "bad", "content": "x"}]), None)


# vLLM 0.32's /tokenize answers a chat body its models refuse with every arm of its
# TokenizeRequest union, the completion arm's missing `prompt` first.
VLLM_DUMP = (
    "2 validation errors:\n  {'type': 'missing', 'loc': 'body.prompt', 'msg': 'Field required', "
    "'input': '<dict of 7 items>'}\n  {'type': 'list_type', 'loc': 'body.messages.0.content', "
    "'msg': 'Input should be a valid list', 'input': 'x'}"
)
PYDANTIC_DUMP = "8 validation errors for ValidatorIterator\n0.Param.text\n  Field required"


@pytest.mark.parametrize(
    ("dump", "param", "message"),
    [
        (VLLM_DUMP, "messages", "'messages.0.content' is not valid: Input should be a valid list"),
        (PYDANTIC_DUMP, None, "the engine could not read this request's messages to count"),
    ],
)
async def test_an_engine_validation_dump_names_only_what_the_client_sent(
    tokenize_engine: Any, dump: str, param: str | None, message: str
) -> None:
    """A pydantic dump from /tokenize becomes one sentence about a field the client sent (never
    `body.prompt`, which llmd's /tokenize body lacks on purpose), else a generic one."""
    client, _ = tokenize_engine
    with pytest.raises(InvalidRequest) as caught:
        await EngineCounter(lambda: client).count(chat([{"role": "dump", "content": dump}]), None)
    assert caught.value.message.startswith(message)
    assert caught.value.param == param
    assert "prompt" not in caught.value.message.replace("prompt tokens", "")


async def test_engine_counter_unreachable_is_503(tmp_path: Path) -> None:
    """No engine on the socket: 503 engine_unavailable (retry), never a 500; its message is
    the connection's error in words, not a Python repr."""
    client = EngineClient(tmp_path / "missing.sock")
    async with client.open():
        with pytest.raises(Exception) as caught:
            await EngineCounter(lambda: client).count(completion("abc"), None)
    assert getattr(caught.value, "status", None) == 503
    assert "Error(" not in str(caught.value) and "No such file" in str(caught.value)
    await asyncio.sleep(0)


async def test_a_backend_without_tokenize_is_count_unsupported(tmp_path: Path) -> None:
    """/tokenize answered 404 (a router in front of vLLM): CountUnsupported, so validation
    skips its context check rather than refusing the request."""
    app = web.Application()  # no routes: every path is 404
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(tmp_path / "router.sock")).start()
    client = EngineClient(tmp_path / "router.sock")
    try:
        with pytest.raises(CountUnsupported, match="404"):
            await EngineCounter(lambda: client).count(completion("abc"), "m")
    finally:
        await client.close()
        await runner.cleanup()


def test_transformers_warnings_take_llmds_log_pipeline(
    tokenizer_dir: Path, captured_logs: Captured
) -> None:
    """Once a tokenizer is loaded with transformers, transformers' own warnings (written to
    stderr by its own handler otherwise) are llmd's library_logged lines."""
    from transformers.utils import logging as transformers_logging

    transformers_loaded(tokenizer_dir)
    transformers_logging.get_logger("transformers.tokenization_utils_base").warning("careful")
    (line,) = [
        line for line in captured_logs.lines() if line.get("logger", "").startswith("transformers")
    ]
    assert line["event"] == "library_logged" and line["message"] == "careful"


def in_a_fresh_python(
    script: str, tokenizer_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`script` run by a new Python (no transformers or torch imported yet) with the tokenizer
    directory and `args` as its arguments; its output as text. Raises CalledProcessError when
    it fails."""
    return subprocess.run(
        [sys.executable, "-c", script, str(tokenizer_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


# With "files" as second argument, LocalCounter.load as it is; else with transformers (as for a
# tokenizer its files alone may not give).
_LOAD_IN_A_FRESH_PYTHON = """
import json, sys
import llmd.validation.counter as module
from llmd.validation.counter import LocalCounter
from llmd.endpoints.openai import read_chat, read_completions
if sys.argv[2:] != ["files"]:
    module._load_from_files = lambda path: None
counter = LocalCounter.load(sys.argv[1])
prompt = read_chat({"messages": [{"role": "user", "content": "Hello"}]}).prompt
count = counter.count_now(prompt)
torch_hidden = "torch" not in sys.modules
transformers = "transformers" in sys.modules
try:
    import torch  # noqa: F401
    later = "imported"
except ImportError:
    later = "not installed"
print(json.dumps({"count": count, "torch_hidden": torch_hidden, "later": later,
                  "transformers": transformers}))
"""


def test_a_tokenizer_loads_without_importing_torch(
    tokenizer_dir: Path, counter: LocalCounter
) -> None:
    """transformers 5 imports torch when it is installed (seconds and ~330 MiB in llmd): loading
    a tokenizer with transformers in a Python that has not imported either leaves torch out,
    counts as usual, keeps stderr free of transformers' advisory line, and a later
    `import torch` still works."""
    done = in_a_fresh_python(_LOAD_IN_A_FRESH_PYTHON, tokenizer_dir)
    report = json.loads(done.stdout)
    assert report["transformers"] is True and report["torch_hidden"] is True
    assert report["count"] == counter.count_now(chat([{"role": "user", "content": "Hello"}]))
    assert report["later"] in ("imported", "not installed")
    assert "PyTorch was not found" not in done.stderr


_THREE_LOADS_AT_ONCE = """
import json, sys, threading
import llmd.validation.counter as module
from llmd.validation.counter import LocalCounter
module._load_from_files = lambda path: None
results = []
def load():
    try:
        LocalCounter.load(sys.argv[1])
        results.append("loaded")
    except Exception as exc:
        results.append(f"{type(exc).__name__}: {exc}")
threads = [threading.Thread(target=load) for _ in range(3)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(results))
"""


def test_tokenizers_loading_on_several_threads_at_once_all_load(tokenizer_dir: Path) -> None:
    """Several models' validators (or a reload during a load) load tokenizers on threads of
    their own: in a fresh Python, three loads with transformers at once all succeed
    (transformers' first import, run twice at once, answered "cannot import name
    'AutoTokenizer'")."""
    done = in_a_fresh_python(_THREE_LOADS_AT_ONCE, tokenizer_dir)
    assert json.loads(done.stdout) == ["loaded"] * 3
