"""A chat template rendered to text as transformers 5.19 renders it (`render_jinja_template`
and the Jinja environment of `_compile_jinja_template`), without importing transformers."""

from __future__ import annotations

import copy
import datetime
import functools
import json
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

# transformers' marker for the point where a continued final message ends.
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def render(
    conversations: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    documents: None,
    chat_template: str,
    continue_final_message: bool,
    add_generation_prompt: bool,
    **kwargs: Any,
) -> str:
    """transformers 5.19 `render_jinja_template` for one conversation (same parameters, so that
    template variables that clash with them fail alike): tools as JSON schemas (dicts), no
    documents."""
    compiled = _compiled(chat_template)
    chat, final = conversations, ""  # final: the text continued
    if continue_final_message:
        chat = copy.deepcopy(chat)
        content = chat[-1].get("content")
        if content is None:
            raise ValueError(
                'continue_final_message is set but the final message has no "content" to continue!'
            )
        if "content" not in chat_template:
            raise ValueError(
                'continue_final_message is set to "content" but this is not an accepted field in '
                "the chat_template"
            )
        if isinstance(content, (list, tuple)):
            for block in reversed(content):
                if "text" in block:
                    final = block["text"]
                    block["text"] = block["text"] + _CONTINUE_TAG
                    break
            else:
                raise ValueError(
                    "continue_final_message is set but we could not find any text to continue in "
                    "the final message!"
                )
        else:
            final = content
            chat[-1]["content"] = content + _CONTINUE_TAG
    rendered: str = compiled.render(
        messages=chat,
        tools=tools,
        documents=documents,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )
    if continue_final_message:
        if final.strip() not in rendered or _CONTINUE_TAG.strip() not in rendered:
            raise ValueError(
                "continue_final_message is set but the final message does not appear in the chat "
                "after applying the chat template! This can happen if the chat template deletes "
                "portions of the final message. Please verify the chat template and final message "
                "in your chat to ensure they are compatible."
                f"Final message to continue: {final.strip()}\nRendered chat:\n{rendered}"
            )
        at = rendered.rindex(_CONTINUE_TAG.strip())
        if rendered[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
            rendered = rendered[:at]  # the template keeps spacing
        else:
            rendered = rendered[:at].rstrip()  # it trimmed the message's trailing spacing
    return rendered


class _GenerationTag(jinja2.ext.Extension):
    """transformers' `{% generation %}` block as it renders when assistant masks are not asked
    for: a call block whose body is output as it is."""

    tags = {"generation"}  # noqa: RUF012 (jinja2's own attribute)

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> Any:
        return caller()


@functools.lru_cache(maxsize=8)
def _compiled(template: str) -> Any:
    """`template` compiled in an environment set up as transformers 5.19
    `_compile_jinja_template` sets it up (its `{% generation %}` tag renders its body)."""

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
            sort_keys=sort_keys,
        )  # fmt: skip

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template)
