"""The validator's tokenizer load runs on a daemon thread of its own: a stop never waits for it;
a short prompt is counted on the event loop while the tokenizer thread is free, the rest on it;
pooling inputs whose byte bound fits the window are not tokenized when the caller allows it."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from llmd.config import Config, EngineConfig
from llmd.endpoints.openai import read_completions, read_embeddings
from llmd.errors import ContextLengthExceeded
from llmd.supervisor.state import EngineState
from llmd.validation.counter import LocalCounter
from llmd.validation.fields import Counted as Prompt
from llmd.validation.fields import TextPrompt
from llmd.validation.validator import INLINE_COUNT_BYTES, Validated, Validator, _on_daemon_thread
from tests.validation.conftest import tokenizer_threads


async def test_the_call_runs_on_a_daemon_thread_and_its_outcome_comes_back() -> None:
    """The result comes back to the awaiting task; so does an exception."""
    threads: list[threading.Thread] = []

    def shout(text: str) -> str:
        threads.append(threading.current_thread())
        return text.upper()

    assert await _on_daemon_thread(shout, "tiny") == "TINY"
    assert threads[0].daemon and threads[0] is not threading.main_thread()
    with pytest.raises(ValueError):
        await _on_daemon_thread(int, "not a number")


async def test_a_cancelled_wait_lets_the_thread_finish_alone() -> None:
    """The awaiting task is cancelled (llmd stops) while the call runs: the call's end later
    changes nothing and raises nowhere."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    release = threading.Event()
    # Another test's call may still be ending on its own thread of the same name.
    others = {t for t in threading.enumerate() if t.name == "tokenizer-load"}
    waiting = asyncio.create_task(_on_daemon_thread(lambda _: release.wait(30), "x"))
    await asyncio.sleep(0)
    (thread,) = [t for t in threading.enumerate() if t.name == "tokenizer-load" and t not in others]
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await asyncio.to_thread(thread.join, 30)
    for _ in range(3):  # let the thread's hand-over to the loop run
        await asyncio.sleep(0)
    assert not thread.is_alive() and errors == []


@pytest.fixture
def validator(
    tokenizer_dir: Path, counter: LocalCounter, monkeypatch: pytest.MonkeyPatch
) -> tuple[Validator, list[str]]:
    """A validator counting with `counter`; the list names the thread of each tokenizer call."""
    engine = EngineConfig(model=str(tokenizer_dir))
    made = Validator(Config(engine=engine), EngineState(), client=lambda: None)  # type: ignore[arg-type,return-value]
    made.local = counter
    return made, tokenizer_threads(counter, monkeypatch)


async def check(validator: Validator, prompt: str, rank: int = 0) -> tuple[int, ...]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 1}
    raw = json.dumps(body).encode()
    valid = await validator.check(read_completions(body), body, raw, [], rank)
    return valid.prompt_counts


async def test_a_short_prompt_is_counted_on_the_loop_a_long_one_on_the_thread(
    validator: tuple[Validator, list[str]], counter: LocalCounter
) -> None:
    """A body of at most INLINE_COUNT_BYTES is counted on the event loop's thread, a longer one
    on the tokenizer thread; both counts are the tokenizer's."""
    checker, threads = validator
    short, long = "fox " * 10, "fox " * (INLINE_COUNT_BYTES // 4)
    expected = [counter.count_now(completion_of(text))[0] for text in (short, long)]
    threads.clear()
    assert [(await check(checker, text))[0] for text in (short, long)] == expected
    assert threads[0] == threading.current_thread().name
    assert threads[1].startswith("llmd-tokenizer")


async def test_a_short_prompt_waits_its_turn_while_the_tokenizer_thread_is_taken(
    validator: tuple[Validator, list[str]],
) -> None:
    """While a count holds the tokenizer's turn, a short prompt takes its place in the line
    (interactive first still holds) and is counted on the tokenizer thread."""
    checker, threads = validator
    async with checker.local_turns.turn(0):
        waiting = asyncio.create_task(check(checker, "fox"))
        await asyncio.sleep(0)
        assert checker.local_turns.waiting == 1 and not threads
    await waiting
    assert threads == [threads[0]] and threads[0].startswith("llmd-tokenizer")


def completion_of(text: str) -> Prompt:
    return read_completions({"prompt": text}).prompt


async def check_embeddings(
    validator: Validator, inputs: list[str], bounded: bool = True, **more: object
) -> Validated:
    body = {"model": "tiny", "input": inputs, **more}
    raw = json.dumps(body).encode()
    return await validator.check(read_embeddings(body), body, raw, [], bounded=bounded)


async def test_bounded_inputs_that_fit_are_not_tokenized(
    validator: tuple[Validator, list[str]],
) -> None:
    """With `bounded`, embeddings inputs whose byte bounds fit the window go without a
    tokenizer call: their counts are the bounds (bytes + BOS), marked not exact."""
    checker, threads = validator
    checker.engine.max_model_len = 1024  # type: ignore[misc]
    inputs = ["The quick brown fox", "héllo " * 50]
    valid = await check_embeddings(checker, inputs)
    assert threads == [] and not valid.exact
    assert valid.prompt_counts == tuple(len(text.encode()) + 1 for text in inputs)


async def test_inputs_are_counted_when_a_bound_does_not_fit_or_is_not_asked(
    validator: tuple[Validator, list[str]], counter: LocalCounter
) -> None:
    """An input whose bound is past the window is counted (and refused, by index, only when
    its count is); without `bounded`, or with truncate_prompt_tokens, inputs are counted."""
    checker, threads = validator
    checker.engine.max_model_len = 64  # type: ignore[misc]
    long = "fox " * 20  # 80 bytes: the bound does not fit 64, its ~21 tokens do
    valid = await check_embeddings(checker, ["a", long])
    assert valid.exact and len(threads) == 2
    assert valid.prompt_counts == (2, counter.count_now(TextPrompt([long], True, "input"))[0])
    with pytest.raises(ContextLengthExceeded, match=r"input\[1\]"):
        await check_embeddings(checker, ["a", "fox " * 100])
    threads.clear()
    assert (await check_embeddings(checker, ["a"], bounded=False)).exact and threads
    threads.clear()
    truncated = await check_embeddings(checker, ["a"], truncate_prompt_tokens=8)
    assert truncated.exact and threads
