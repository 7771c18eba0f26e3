"""Chat messages turned into the conversation a chat template renders, as vLLM 0.32 does.

Ported from vLLM 0.32 `renderers/chat_utils.py` (`_parse_chat_message_content`) and
`renderers/hf.py` (content-format detection, developer-role conversion), for text content and
assistant tool calls (`_postprocess_messages`) only:
`fields.ChatPrompt.local` is False for anything else and the engine counts those requests.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from typing import Any, Literal

import jinja2
import jinja2.ext
import jinja2.nodes as nodes
import jinja2.parser

from llmd.validation.fields import TEXT_PARTS

ContentFormat = Literal["string", "openai"]
# vLLM drops this Claude Code attribution line from system text (it changes every request).
_BILLING_HEADER = "x-anthropic-billing-header"


def build_conversation(
    messages: list[dict[str, Any]], content_format: ContentFormat, template: str
) -> list[dict[str, Any]]:
    """The conversation vLLM passes to `apply_chat_template` for text-only `messages`.

    `content_format` "string" joins text parts with newlines; "openai" keeps them as
    `{"type": "text", "text": ...}` parts (vLLM's `wrap_dicts`).
    """
    conversation = [_message(m, content_format) for m in messages]
    if any(m["role"] == "developer" for m in conversation) and not _has_developer_role(template):
        conversation = _developer_to_system(conversation)
    return conversation


def _message(message: dict[str, Any], content_format: ContentFormat) -> dict[str, Any]:
    role = message["role"]
    content = message.get("content")
    parts: list[Any] = [content] if isinstance(content, str) else content or []
    if role == "system":
        parts = _strip_billing_header(parts)
    texts = [_part_text(p) for p in parts]
    result: dict[str, Any] = {"role": role}
    if content_format == "openai":
        result["content"] = [{"type": "text", "text": t} for t in texts]
        if role == "tool":
            result["content"] = "\n".join(texts)
    else:
        # vLLM keeps only truthy parsed parts: an empty text part adds no separator.
        result["content"] = "\n".join(t for t in texts if t)
    if role == "assistant" and message.get("tool_calls"):
        result["tool_calls"] = [_template_call(call) for call in message["tool_calls"]]
    if role == "tool" and "tool_call_id" in message:
        result["tool_call_id"] = message["tool_call_id"]
    for key in ("name", "task"):
        if isinstance(message.get(key), str):
            result[key] = message[key]
    if role == "developer":
        result["tools"] = message.get("tools")
    return result


def _template_call(call: dict[str, Any]) -> dict[str, Any]:
    """A function tool call (`id`, `type`, `function` with `name` and `arguments`) as vLLM 0.32
    gives it to the template: keys in the order its request model validates them into
    (openai's `ChatCompletionMessageToolCallParam`: id, function, type; function: arguments,
    name), the JSON `arguments` string parsed back to an object by `_postprocess_messages`
    ({} when empty, not JSON or not an object)."""
    arguments = call["function"].get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments else {}
        except json.JSONDecodeError:
            arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    function = {"arguments": arguments, "name": call["function"]["name"]}
    return {"id": call["id"], "function": function, "type": call["type"]}


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    text: str = part[TEXT_PARTS[part["type"]]]
    return text


def _strip_billing_header(parts: list[Any]) -> list[Any]:
    out: list[Any] = []
    for part in parts:
        text = part if isinstance(part, str) else part.get("text")
        if not (isinstance(text, str) and text.startswith(_BILLING_HEADER)):
            out.append(part)
            continue
        rest = text.partition("\n")[2]
        if rest:
            out.append(rest if isinstance(part, str) else {**part, "text": rest})
    return out


def _has_developer_role(template: str) -> bool:
    return '"developer"' in template or "'developer'" in template


def _developer_to_system(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM: developer messages become system ones, all merged into one at the front if needed."""
    converted = []
    for message in conversation:
        if message["role"] == "developer":
            message = {k: v for k, v in message.items() if k != "tools"} | {"role": "system"}
        converted.append(message)
    systems: list[str] = []
    others: list[dict[str, Any]] = []
    merge = False
    for index, message in enumerate(converted):
        if message["role"] != "system":
            others.append(message)
            continue
        merge = merge or index > 0 or bool(systems)
        content = message.get("content", "")
        if isinstance(content, list):
            content = "\n".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
        if content:
            systems.append(content)
    if not merge:
        return converted
    return [{"role": "system", "content": "\n\n".join(systems)}, *others]


def detect_content_format(ast: nodes.Template) -> ContentFormat:
    """'openai' when the template loops over a message's content, else 'string'.

    vLLM 0.32 `renderers/hf.py` `_detect_content_format`, including its macro handling.
    """
    return "openai" if next(_content_loops(ast), None) is not None else "string"


def parse_template(template: str) -> nodes.Template:
    """The Jinja AST of `template`, parsed with the extensions transformers compiles it with."""
    env = jinja2.Environment(extensions=[_GenerationTag, "jinja2.ext.loopcontrols"])
    return env.parse(template)


class _GenerationTag(jinja2.ext.Extension):
    """transformers' `{% generation %}` block, enough to parse templates that use it."""

    tags = {"generation"}  # noqa: RUF012 (jinja2's own attribute)

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _is_var(node: nodes.Node, name: str) -> bool:
    return isinstance(node, nodes.Name) and node.ctx == "load" and node.name == name


def _is_attr(node: nodes.Node, name: str, key: str) -> bool:
    if isinstance(node, nodes.Getitem):
        arg = node.arg
        return _is_var(node.node, name) and isinstance(arg, nodes.Const) and arg.value == key
    return isinstance(node, nodes.Getattr) and _is_var(node.node, name) and node.attr == key


def _is_var_or_elems(node: nodes.Node, name: str, key: str | None = None) -> bool:
    if isinstance(node, nodes.Filter):
        return node.node is not None and _is_var_or_elems(node.node, name, key)
    if isinstance(node, nodes.Test):
        return _is_var_or_elems(node.node, name, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _is_var_or_elems(node.node, name, key)
    return _is_attr(node, name, key) if key else _is_var(node, name)


def _aliases(root: nodes.Template, name: str) -> Iterator[str]:
    yield name
    pending = collections.deque([name])
    while pending:
        current = pending.popleft()
        for assign in root.find_all(nodes.Assign):
            if _is_var_or_elems(assign.node, current) and isinstance(assign.target, nodes.Name):
                yield assign.target.name
                if assign.target.name != current:
                    pending.append(assign.target.name)


def _message_names(root: nodes.Template) -> Iterator[str]:
    names = list(_aliases(root, "messages"))
    for loop in root.find_all(nodes.For):
        if any(_is_var_or_elems(loop.iter, n) for n in names) and isinstance(
            loop.target, nodes.Name
        ):
            yield loop.target.name


def _content_loops(root: nodes.Template) -> Iterator[nodes.For]:
    messages = list(_message_names(root))
    macro_params: dict[int, set[str]] = {}
    in_macros: set[int] = set()
    for macro in root.find_all(nodes.Macro):
        names = {arg.name for arg in macro.args}
        params: set[str] = set()
        for call in root.find_all(nodes.Call):
            if not (isinstance(call.node, nodes.Name) and call.node.name == macro.name):
                continue
            for i, arg in enumerate(call.args):
                if i < len(macro.args) and any(
                    _is_var_or_elems(arg, m, "content") for m in messages
                ):
                    params.add(macro.args[i].name)
            for kwarg in call.kwargs:
                if kwarg.key in names and any(
                    _is_var_or_elems(kwarg.value, m, "content") for m in messages
                ):
                    params.add(kwarg.key)
        for loop in macro.find_all(nodes.For):
            in_macros.add(id(loop))
            if params:
                macro_params[id(loop)] = params
    for loop in root.find_all(nodes.For):
        over_content = any(_is_var_or_elems(loop.iter, m, "content") for m in messages)
        over_param = isinstance(loop.iter, nodes.Name) and (
            loop.iter.name in macro_params.get(id(loop), set())
            or (id(loop) not in in_macros and loop.iter.name == "content")
        )
        if over_content or over_param:
            yield loop
