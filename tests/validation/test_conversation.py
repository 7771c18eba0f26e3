"""Messages become the conversation vLLM 0.32 renders: content format, parts, developer role."""

from __future__ import annotations

import pytest

from llmd.validation.conversation import build_conversation, detect_content_format, parse_template
from tests.validation.conftest import PARTS_TEMPLATE, STRING_TEMPLATE

MACRO_TEMPLATE = (
    "{% macro render(c) %}{% for p in c %}{{ p.text }}{% endfor %}{% endmacro %}"
    "{% for m in messages %}{{ render(m.content) }}{% endfor %}"
)
ALIAS_TEMPLATE = (
    "{% set msgs = messages %}{% for m in msgs %}"
    "{% for p in m['content'] | list %}{{ p }}{% endfor %}{% endfor %}"
)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (STRING_TEMPLATE, "string"),
        (PARTS_TEMPLATE, "openai"),
        (MACRO_TEMPLATE, "openai"),
        (ALIAS_TEMPLATE, "openai"),
        ("{% for m in messages %}{% for x in m.tool_calls %}{% endfor %}{% endfor %}", "string"),
    ],
)
def test_content_format_detection(template: str, expected: str) -> None:
    """Templates that loop over a message's content get 'openai' parts, as vLLM detects."""
    assert detect_content_format(parse_template(template)) == expected


def test_string_format_joins_text_parts_with_newlines() -> None:
    """Text parts (text, input_text, refusal) are joined with '\\n' for string templates."""
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "input_text", "text": "b"},
                {"type": "refusal", "refusal": "c"},
            ],
        },
        {"role": "assistant", "content": None},
        {"role": "user"},
    ]
    conversation = build_conversation(messages, "string", STRING_TEMPLATE)
    assert [m["content"] for m in conversation] == ["a\nb\nc", "", ""]


def test_openai_format_wraps_strings_as_text_parts() -> None:
    """For part-looping templates, even string content becomes one text part (vLLM wrap_dicts)."""
    conversation = build_conversation([{"role": "user", "content": "hi"}], "openai", PARTS_TEMPLATE)
    assert conversation == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_tool_content_is_a_string_in_openai_format() -> None:
    """Tool results with only text parts are joined into a string, keeping tool_call_id."""
    message = {
        "role": "tool",
        "tool_call_id": "t1",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    (converted,) = build_conversation([message], "openai", PARTS_TEMPLATE)
    assert converted == {"role": "tool", "content": "a\nb", "tool_call_id": "t1"}


def test_developer_becomes_system_when_the_template_lacks_it() -> None:
    """Developer messages turn into one leading system message, as vLLM 0.32 converts them."""
    messages = [
        {"role": "user", "content": "u"},
        {"role": "developer", "content": "d"},
        {"role": "system", "content": "s"},
    ]
    conversation = build_conversation(messages, "string", STRING_TEMPLATE)
    assert conversation == [
        {"role": "system", "content": "d\n\ns"},
        {"role": "user", "content": "u"},
    ]


def test_developer_kept_when_the_template_knows_it() -> None:
    """A template mentioning 'developer' sees the role unchanged."""
    template = STRING_TEMPLATE + "{# 'developer' #}"
    (message,) = build_conversation([{"role": "developer", "content": "d"}], "string", template)
    assert message["role"] == "developer"


def test_name_is_kept_and_billing_header_dropped() -> None:
    """`name` reaches the template; Claude Code's billing header line leaves system text."""
    messages = [
        {"role": "system", "content": "x-anthropic-billing-header: cch=1\nbe brief"},
        {"role": "user", "content": "hi", "name": "ann"},
    ]
    conversation = build_conversation(messages, "string", STRING_TEMPLATE)
    assert conversation[0]["content"] == "be brief"
    assert conversation[1]["name"] == "ann"


def test_empty_text_parts_add_no_separator_in_string_format() -> None:
    """vLLM drops empty parsed parts before joining: ['', 'a'] renders as 'a', not '\\na'."""
    parts = [{"type": "text", "text": ""}, {"type": "text", "text": "a"}]
    (message,) = build_conversation([{"role": "user", "content": parts}], "string", STRING_TEMPLATE)
    assert message["content"] == "a"
