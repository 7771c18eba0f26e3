"""The OpenAI readers: the fields llmd reads of each endpoint's body (types, empty or missing
prompts, what is counted locally, pairs, outputs) into one Fields record."""

from __future__ import annotations

from typing import Any

import pytest

from llmd.endpoints.openai import (
    read_chat,
    read_cohere_embed,
    read_completions,
    read_detokenize,
    read_embeddings,
    read_rerank,
    read_score,
    read_tokenize,
)
from llmd.errors import InvalidRequest
from llmd.validation.fields import ChatPrompt, PairPrompt, TextPrompt

USER = [{"role": "user", "content": "hi"}]

BAD_CHAT: list[tuple[dict[str, Any], str]] = [
    ({}, "messages"),
    ({"messages": None}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": ["hi"]}, "messages"),
    ({"messages": [{"content": "hi"}]}, "messages"),
    ({"messages": [{"role": 1, "content": "hi"}]}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages"),
    ({"messages": [{"role": "user", "content": None}]}, "messages"),
    ({"messages": [{"role": "user", "content": ["a"]}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"text": "a"}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x", "name": 5}]}, "messages"),
    ({"messages": USER, "model": 5}, "model"),
    ({"messages": USER, "max_tokens": "10"}, "max_tokens"),
    ({"messages": USER, "max_tokens": 1.5}, "max_tokens"),
    ({"messages": USER, "max_tokens": True}, "max_tokens"),
    ({"messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"messages": USER, "max_tokens": -3}, "max_tokens"),
    ({"messages": USER, "max_completion_tokens": 0}, "max_completion_tokens"),
    ({"messages": USER, "n": 0}, "n"),
    ({"messages": USER, "n": "2"}, "n"),
    ({"messages": USER, "add_generation_prompt": "yes"}, "add_generation_prompt"),
    ({"messages": USER, "continue_final_message": True}, "continue_final_message"),
    ({"messages": USER, "chat_template_kwargs": []}, "chat_template_kwargs"),
    ({"messages": USER, "truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
]

BAD_COMPLETIONS: list[tuple[dict[str, Any], str]] = [
    ({}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": {"text": "a"}}, "prompt"),
    ({"prompt": [[]]}, "prompt"),
    ({"prompt": [1, -1]}, "prompt"),
    ({"prompt": [1, True]}, "prompt"),
    ({"prompt": [[1], "a"]}, "prompt"),
    ({"prompt": ["a", None]}, "prompt"),
    ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "a", "echo": "true"}, "echo"),
    ({"prompt": "a", "add_special_tokens": 1}, "add_special_tokens"),
]


@pytest.mark.parametrize(("body", "param"), BAD_CHAT)
def test_bad_chat_fields_are_400_with_param(body: dict[str, Any], param: str) -> None:
    """A chat body with a wrong type or an empty or missing field is refused, naming it."""
    with pytest.raises(InvalidRequest) as caught:
        read_chat(body)
    assert caught.value.param == param
    assert caught.value.status == 400


@pytest.mark.parametrize(("body", "param"), BAD_COMPLETIONS)
def test_bad_completions_fields_are_400_with_param(body: dict[str, Any], param: str) -> None:
    """A completions body with a wrong type or an empty or missing prompt is refused."""
    with pytest.raises(InvalidRequest) as caught:
        read_completions(body)
    assert caught.value.param == param


def test_completion_prompt_shapes() -> None:
    """A string, strings, token ids and lists of token ids each give one prompt per sequence."""
    shapes = {
        "a": ["a"],
        '["a", ""]': ["a", ""],
        "[1, 2]": [[1, 2]],
        "[[1], [2, 3]]": [[1], [2, 3]],
    }
    bodies = {"a": "a", '["a", ""]': ["a", ""], "[1, 2]": [1, 2], "[[1], [2, 3]]": [[1], [2, 3]]}
    for key, prompt in bodies.items():
        fields = read_completions({"prompt": prompt})
        assert isinstance(fields.prompt, TextPrompt)
        assert fields.prompt.prompts == shapes[key]
        assert fields.prompt.add_special_tokens is True


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    """As in vLLM 0.32, max_completion_tokens is the budget when both are given."""
    fields = read_chat({"messages": USER, "max_tokens": 50, "max_completion_tokens": 7})
    assert (fields.output.max_tokens, fields.output.field) == (7, "max_completion_tokens")


def test_null_max_tokens_and_n_mean_omitted() -> None:
    """`null` max_tokens is the same as omitting it; `null` n is 1."""
    fields = read_chat({"messages": USER, "max_tokens": None, "n": None})
    assert (fields.output.max_tokens, fields.output.n) == (None, 1)


def test_echo_allows_zero_max_tokens_for_completions() -> None:
    """vLLM accepts max_tokens=0 for completions that echo the prompt, so llmd does too."""
    fields = read_completions({"prompt": "a", "echo": True, "max_tokens": 0})
    assert fields.output.max_tokens == 0


def test_missing_content_and_assistant_null_content_are_accepted() -> None:
    """A message without content, and an assistant message with null content, are valid."""
    body = {"messages": [{"role": "user"}, {"role": "assistant", "content": None}]}
    assert isinstance(read_chat(body).prompt, ChatPrompt)


@pytest.mark.parametrize(
    "body",
    [
        {"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}]},
        {"messages": USER, "chat_template": "{{ messages }}"},
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "x": 1}]}]},
        {"messages": [{"role": "assistant", "content": None, "tool_calls": []}]},
        {"messages": USER, "chat_template_kwargs": {"tools": []}},
    ],
)
def test_what_llmd_does_not_render_is_counted_by_the_engine(body: dict[str, Any]) -> None:
    """Tools, request templates, non-text parts and tool calls are not rendered locally."""
    prompt = read_chat(body).prompt
    assert isinstance(prompt, ChatPrompt)
    assert not prompt.local


def test_an_unknown_content_part_type_is_one_sentence_listing_the_types() -> None:
    """A content part of a type vLLM 0.32 does not parse is a 400 naming the part and the types
    it takes (the engine's /tokenize answered an 8-error pydantic dump)."""
    part = {"type": "nope", "x": 1}
    with pytest.raises(InvalidRequest) as caught:
        read_chat({"messages": [{"role": "user", "content": ["a", part]}]})
    message = caught.value.message
    assert caught.value.param == "messages"
    assert message.startswith("messages[0].content[0] must be an object")  # "a": not a part
    with pytest.raises(InvalidRequest) as caught:
        read_chat({"messages": [{"role": "user", "content": [part]}]})
    message = caught.value.message
    assert message.startswith("messages[0].content[0].type must be one of text, input_text,")
    assert "image_url" in message and message.endswith("; got 'nope'")


def test_unknown_fields_are_ignored() -> None:
    """Fields llmd does not read are not checked (they pass through to the engine)."""
    fields = read_chat({"messages": USER, "temperature": "hot", "x": [1]})
    assert isinstance(fields.prompt, ChatPrompt) and fields.prompt.local


BAD_POOLING: list[tuple[Any, dict[str, Any], str]] = [
    (read_embeddings, {}, "input"),
    (read_embeddings, {"input": ""}, "input"),
    (read_embeddings, {"input": [[1], "a"]}, "input"),
    (read_embeddings, {"input": [1, -2]}, "input"),
    (read_embeddings, {"messages": []}, "messages"),
    (read_embeddings, {"input": "a", "truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
    (read_cohere_embed, {}, "texts"),
    (read_cohere_embed, {"texts": []}, "texts"),
    (read_cohere_embed, {"texts": ["a"], "images": ["x"]}, "texts"),
    (read_score, {"queries": ["a", "b"], "documents": ["c", "d", "e"]}, "documents"),
    (read_score, {"text_1": "a"}, "text_2"),
    (read_score, {"queries": [], "documents": ["c"]}, "queries"),
    (read_score, {}, "queries"),
    (read_rerank, {"documents": ["a"]}, "query"),
    (read_rerank, {"query": "q", "documents": [1]}, "documents"),
    (read_rerank, {"query": "q", "documents": ["a"], "top_n": -1}, "top_n"),
    (read_tokenize, {"prompt": 5}, "prompt"),
    (read_tokenize, {"prompt": "a", "return_token_strs": "yes"}, "return_token_strs"),
    (read_detokenize, {"tokens": [1, "2"]}, "tokens"),
    (read_detokenize, {"tokens": "12"}, "tokens"),
]


@pytest.mark.parametrize(("read", "body", "param"), BAD_POOLING)
def test_bad_pooling_scoring_and_tokenizer_bodies_name_the_field(
    read: Any, body: dict[str, Any], param: str
) -> None:
    """Each reader refuses a wrong shape with a 400 that names the field."""
    with pytest.raises(InvalidRequest) as caught:
        read(body)
    assert caught.value.param == param


def test_scored_pairs_follow_vllm_s_pairing() -> None:
    """1:N pairs the one query with each document, N:N each with its own; every field pair
    vLLM 0.32 takes is read; objects (images) are left to the engine to count."""
    one = read_score({"queries": "q", "documents": ["a", "b"]}).prompt
    assert isinstance(one, PairPrompt) and one.pairs == [(0, 1), (0, 2)] and one.local
    many = read_score({"text_1": ["q1", "q2"], "text_2": ["a", "b"]}).prompt
    assert isinstance(many, PairPrompt) and many.pairs == [(0, 2), (1, 3)]
    assert isinstance(read_score({"data_1": "q", "data_2": "a"}).prompt, PairPrompt)
    images = read_rerank({"query": "q", "documents": [{"content": []}]}).prompt
    assert isinstance(images, PairPrompt) and not images.local


def test_a_pooling_conversation_counts_without_a_generation_prompt() -> None:
    """Embeddings of `messages` (or a conversation in `input`) render without the generation
    prompt unless asked, as vLLM 0.32's pooling requests default."""
    for body in ({"messages": USER}, {"input": USER}):
        prompt = read_embeddings(body).prompt
        assert isinstance(prompt, ChatPrompt) and not prompt.add_generation_prompt
    assert read_embeddings({"input": "a"}).output.generates is False


def test_only_embeddings_answered_as_json_let_validation_bound_their_inputs() -> None:
    """`usage_counts_input` (the answer's usage.prompt_tokens counts the inputs): float and
    base64 answers, or the field omitted; not `bytes` or `bytes_only` (no usage in the body)."""
    for encoding, expected in [(None, True), ("float", True), ("base64", True), ("bytes", False),
                               ("bytes_only", False)]:  # fmt: skip
        body = {"model": "m", "input": ["a"], "encoding_format": encoding}
        if encoding is None:
            del body["encoding_format"]
        assert read_embeddings(body).usage_counts_input is expected, encoding
