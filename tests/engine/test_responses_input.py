"""A Responses request's input and tools turned into chat messages and chat tools as vLLM 0.32
turns them: each case run through vLLM's own conversion (`VLLM_PYTHON`) and llmd's.

The comparisons with vLLM are in the end-to-end half (marker `e2e`), as the other parity tests
against vLLM are: the Python that runs vLLM's conversion imports vLLM and torch, about 11 s of
CPU, the costliest process the fast suite had. llmd's own refusals stay in the fast half."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from llmd.engine.responses_input import (
    InputError,
    chat_messages,
    chat_tools,
    continues_final,
    input_items,
    tokenize_messages,
)
from tests.support.vllm_python import VLLM_PYTHON

FUNCTION = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}
CASES: list[dict[str, Any]] = [
    {"input": "Hello"},
    {"input": "Hello", "instructions": "Be brief."},
    {"input": "Hello", "instructions": ""},
    {
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Hi"}], "type": "message"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Yo"}],
            },
            {"role": "user", "content": "again", "extra": 1},
        ],
    },
    {"input": [{"role": "developer", "content": "d"}, {"role": "system", "content": "s"}]},
    {"input": [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]},
    {"input": [{"role": "assistant", "content": [{"type": "input_text", "text": "t"}]}]},
    {
        "input": [
            {"role": "user", "content": "call it"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {
                "type": "function_call",
                "call_id": "c2",
                "name": "g",
                "arguments": "{}",
                "namespace": "ns",
            },
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "r"}],
            },
        ],
        "tools": [FUNCTION],
    },
    {
        "input": [
            {"role": "user", "content": "q"},
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "hm"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "A"}],
                "id": "msg_1",
                "status": "completed",
            },
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"x": 1}'},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]},
            {"role": "user", "content": "more"},
        ],
    },
    {
        "input": [
            {"type": "custom_tool_call", "call_id": "c", "name": "patch", "input": "diff é"},
            {"type": "custom_tool_call_output", "call_id": "c", "output": "ok"},
        ],
        "tools": [{"type": "custom", "name": "patch", "description": "apply a patch"}],
    },
    {
        "input": "x",
        "tools": [
            {**FUNCTION, "strict": True},
            {"type": "function", "name": "bare"},
            {
                "type": "namespace",
                "name": "ns",
                "description": "n",
                "tools": [{"type": "function", "name": "g", "parameters": {"type": "object"}}],
            },
            {"type": "web_search_preview"},
        ],
        "tool_choice": "none",
    },
    {"input": "x", "tools": [{"type": "web_search_preview"}]},
    {
        "input": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "par"}],
                "status": "incomplete",
            }
        ]
    },
    {"input": [{"type": "message", "role": "user", "content": "x", "status": "in_progress"}]},
    {
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": "http://x/i.png", "detail": "auto"}
                ],
            }
        ]
    },
]
# Inputs vLLM 0.32 refuses with a sentence of its own, which llmd gives too.
ENCRYPTED = {"type": "reasoning", "summary": [], "encrypted_content": "zz"}
REFUSED = [
    ({"input": [ENCRYPTED]}, "Encrypted content is not supported."),
    (
        {"input": [{"type": "item_reference", "id": "x"}]},
        "Unsupported input item type: item_reference",
    ),
]

_VLLM_SIDE = """
import json, sys
from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
from vllm.entrypoints.openai.responses import utils
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam as Tool
out = []
for case, ours in json.load(sys.stdin):
    try:
        r = ResponsesRequest.model_validate({"model": "m", **case})
        messages = utils.construct_input_messages(
            request_instructions=r.instructions, request_input=r.input
        )
        tools = utils.construct_tool_dicts(r.tools, r.tool_choice)
        dumped = None if ours is None else [Tool.model_validate(t).model_dump() for t in ours]
        out.append({"messages": messages, "tools": tools, "ours": dumped})
    except Exception as exc:
        out.append({"error": str(exc)})
print(json.dumps(out, default=lambda o: o.model_dump()))
"""


def ours(case: dict[str, Any]) -> dict[str, Any]:
    items = input_items(case["input"])
    return {
        "messages": chat_messages(case.get("instructions"), items),
        "tools": chat_tools(case.get("tools")),
        "continue": continues_final(items),
    }


def vllm_side(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each case through vLLM's conversion (and our chat tools through its tool model)."""
    stdin = json.dumps([[case, chat_tools(case.get("tools"))] for case in cases])
    done = subprocess.run(
        [VLLM_PYTHON, "-c", _VLLM_SIDE], input=stdin, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def vllm_answers() -> list[dict[str, Any]]:
    return vllm_side(CASES + [case for case, _ in REFUSED])


@pytest.mark.e2e
@pytest.mark.parametrize("index", range(len(CASES)))
def test_messages_and_tools_are_vllms(index: int, vllm_answers: list[dict[str, Any]]) -> None:
    """The chat messages and the tools the template sees are the ones vLLM 0.32 builds."""
    answer, mine = vllm_answers[index], ours(CASES[index])
    assert "error" not in answer, answer
    assert mine["messages"] == answer["messages"]
    assert answer["ours"] == answer["tools"]


@pytest.mark.e2e
@pytest.mark.parametrize("index", range(len(REFUSED)))
def test_refused_as_vllm_refuses(index: int, vllm_answers: list[dict[str, Any]]) -> None:
    """An input vLLM 0.32 refuses with a sentence of its own is refused with that sentence."""
    case, sentence = REFUSED[index]
    assert sentence in vllm_answers[len(CASES) + index]["error"]
    with pytest.raises(InputError, match=sentence):
        ours(case)


def test_the_last_unfinished_item_is_continued() -> None:
    """A last message or reasoning item left in_progress or incomplete is continued; a
    finished one, or an unfinished one before the last, is answered after."""
    unfinished = {"type": "message", "role": "assistant", "content": "x", "status": "incomplete"}
    assert continues_final([{"role": "user", "content": "a"}, unfinished])
    assert not continues_final([unfinished, {"role": "user", "content": "a"}])
    assert not continues_final([{**unfinished, "status": "completed"}])
    assert not continues_final([])


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (5, "'input' must be a string"),
        ([1], "input[0] must be an object"),
        ([{"type": "message", "role": "tool", "content": "x"}], "input[0].role"),
        ([{"role": "user"}], "input[0].content"),
        ([{"role": "assistant", "content": []}], "input[0].content[0]"),
        ([{"role": "user", "content": ["x"]}], "input[0].content[0]"),
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0].call_id"),
        ([{"type": "function_call_output", "call_id": "c", "output": 3}], "input[0].output"),
        ([{"type": "reasoning"}], "input[0].summary"),
        ([{"type": "bogus"}], "Unsupported input item type: bogus"),
        ([{"content": "no role"}], "Unsupported input item type: None"),
    ],
)
def test_bad_input_is_refused_naming_the_item(value: object, where: str) -> None:
    """Input of the wrong shape is refused with one sentence naming the item and field."""
    with pytest.raises(InputError, match=where.replace("[", r"\[").replace("]", r"\]")):
        chat_messages(None, input_items(value))


@pytest.mark.parametrize(
    "tools",
    [{"type": "function"}, [3], [{"name": "f"}], [{"type": "function"}], [{"type": "namespace"}]],
)
def test_bad_tools_are_refused(tools: object) -> None:
    """Tools of the wrong shape are refused naming `tools`."""
    with pytest.raises(InputError) as caught:
        chat_tools(tools)
    assert caught.value.param == "tools"


def test_tokenize_gets_chat_part_types() -> None:
    """The messages sent to /tokenize carry chat's part types (text, image_url), which vLLM
    0.32's /tokenize takes; other parts and string contents go as they are, the messages
    unchanged."""
    messages = [
        {"role": "system", "content": "s"},
        {
            "role": "user",
            "type": "message",
            "content": [
                {"type": "input_text", "text": "a"},
                {"type": "input_image", "image_url": "data:x", "detail": "low"},
                {"type": "input_file", "file_id": "f"},
            ],
        },
        {"role": "tool", "content": [{"type": "output_text", "text": "42"}], "tool_call_id": "c"},
    ]
    before = json.dumps(messages)
    assert tokenize_messages(messages) == [
        {"role": "system", "content": "s"},
        {
            "role": "user",
            "type": "message",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "image_url", "image_url": {"url": "data:x", "detail": "low"}},
                {"type": "input_file", "file_id": "f"},
            ],
        },
        {"role": "tool", "content": [{"type": "text", "text": "42"}], "tool_call_id": "c"},
    ]
    assert json.dumps(messages) == before
