"""What validation reads of a request, whatever its endpoint: the `Fields` record (model,
prompt, output budget, stream) that each endpoint's reader (llmd/endpoints/) fills once.

    ChatPrompt   messages a chat template renders
    TextPrompt   one or more prompts or inputs, each text or token ids
    PairPrompt   texts scored in pairs (score, rerank)
"""

from __future__ import annotations

import dataclasses
from typing import Any

# Text content part types and the key that holds their text (vLLM 0.32 chat_utils MM_PARSER_MAP).
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}


@dataclasses.dataclass(frozen=True)
class OutputRequest:
    """The output a request asks for, per sequence."""

    max_tokens: int | None  # None: omitted or null
    field: str  # the request field that holds it (max_completion_tokens wins over max_tokens)
    n: int  # sequences per prompt
    omitted: bool = False  # the field was absent (not null)
    # The engine's max_tokens when none is given: None is the rest of the context (chat, and
    # completions with an explicit null in vLLM 0.32); completions that omit it get 16.
    engine_default: int | None = None
    # Whether `validation.default_max_tokens` bounds an omitted limit where the engine would
    # give the rest of the context: chat and completions, not Responses (coding agents such as
    # Codex CLI send no limit and expect OpenAI's and vLLM's: the rest of the context).
    configured_default: bool = True
    generates: bool = True  # False: a pooling request (no output; the prompt alone must fit)

    @property
    def rest_of_context(self) -> bool:
        """Whether the engine gives this request the rest of the context as its output."""
        return self.generates and self.max_tokens is None and self.engine_default is None


# A pooling request's output: none.
NO_OUTPUT = OutputRequest(max_tokens=0, field="", n=1, generates=False)


@dataclasses.dataclass(frozen=True)
class ChatPrompt:
    """A chat prompt as the template will see it.

    `local` is False when the request uses something llmd does not render (tools, a request
    chat template, non-text content, tool calls): then the engine counts it, and
    `engine_extras` holds the fields its /tokenize needs for that (tools, chat_template).
    `tools`: the tools the template is given, as vLLM hands them to it (a protocol whose
    tools llmd renders: Anthropic Messages; an OpenAI chat's, whose count stays the engine's).
    `rendered_here`: llmd renders this prompt, which the engine counts, as the engine renders
    it (the tools in their place, not held to the engine's count by the parity tests): the
    rendered text's length bounds its tokens from below (`LocalCounter.rendered_at_least`).
    """

    messages: list[dict[str, Any]]
    add_generation_prompt: bool
    continue_final_message: bool
    add_special_tokens: bool
    template_kwargs: dict[str, Any]
    local: bool
    engine_extras: dict[str, Any] = dataclasses.field(default_factory=dict)
    param: str = "messages"  # the request field that holds it
    tools: list[dict[str, Any]] | None = None
    rendered_here: bool = False


@dataclasses.dataclass(frozen=True)
class TextPrompt:
    """One or more prompts (completions) or inputs (embeddings, pooling): each a string or a
    list of token ids, under request field `param`."""

    prompts: list[str | list[int]]
    add_special_tokens: bool
    param: str = "prompt"
    local: bool = True  # False: inputs llmd does not count (images): the engine checks them


@dataclasses.dataclass(frozen=True)
class PairPrompt:
    """Texts scored in pairs (score, rerank): `texts` each counted alone (a bi-encoder embeds
    each; a cross-encoder's pair is checked by the engine itself), `pairs` the indexes of the
    two texts of each pair the engine scores."""

    texts: list[str | list[int]]
    pairs: list[tuple[int, int]]
    add_special_tokens: bool
    param: str = "documents"
    local: bool = True  # False: content objects (images) the engine renders and checks


@dataclasses.dataclass(frozen=True)
class EnginePrompt:
    """A prompt the engine counts (a protocol it converts itself, such as Anthropic Messages
    with tools): `body` sent to its `path`, the count read from the answer's `count_field`;
    or, when it has `rendered` (the same prompt as llmd's tokenizer renders it exactly) and
    the engine was started with the `requires` flags (without them it refuses the request),
    by llmd's tokenizer."""

    path: str
    body: dict[str, Any]
    count_field: str
    param: str = "messages"
    rendered: ChatPrompt | None = None
    requires: tuple[str, ...] = ()


Prompt = ChatPrompt | TextPrompt | PairPrompt | EnginePrompt
# What a counter counts: a chat rendered by its template, texts each on its own, or a request
# for the engine's own count.
Counted = ChatPrompt | TextPrompt | EnginePrompt
# What llmd's own tokenizer counts.
Renderable = ChatPrompt | TextPrompt


def messages_of(prompt: Prompt) -> list[dict[str, Any]] | None:
    """A conversation's messages (a chat's, or those of a request only the engine counts, in
    its protocol's shape); None for prompts of texts."""
    if isinstance(prompt, ChatPrompt):
        return prompt.messages
    if isinstance(prompt, EnginePrompt):
        messages = prompt.body.get("messages")
        return messages if isinstance(messages, list) else []
    return None


def first_text(prompt: TextPrompt | PairPrompt) -> str | list[int]:
    """The first prompt or text ("" when there is none)."""
    texts = prompt.prompts if isinstance(prompt, TextPrompt) else prompt.texts
    return texts[0] if texts else ""


def as_counted(prompt: Prompt) -> Counted:
    """What a counter counts of `prompt`: a pair prompt's texts, each alone."""
    if isinstance(prompt, PairPrompt):
        return TextPrompt(prompt.texts, prompt.add_special_tokens, prompt.param, prompt.local)
    return prompt


@dataclasses.dataclass(frozen=True)
class Fields:
    """What llmd reads of one request (type-checked once by its endpoint's reader): the
    `model` it names (None: omitted), its prompt, the output it asks for, vLLM's
    `truncate_prompt_tokens`, and whether it streams."""

    model: str | None
    prompt: Prompt
    output: OutputRequest
    truncate_prompt_tokens: int | None = None
    stream: bool = False
    token_strs: bool = False  # /tokenize's return_token_strs
    audio_bytes: int = 0  # an audio upload's size (transcriptions), what bounds its cost
    clamp: bool = False  # an output budget past the window is lowered, whatever the policy
    # The engine's JSON answer gives the inputs' tokens in `usage.prompt_tokens` (a pooling
    # request answered as JSON): validation may then bound them rather than count them.
    usage_counts_input: bool = False

    @property
    def texts(self) -> list[str | list[int]]:
        """Every prompt text or token-id list, in order (a chat's: none)."""
        if isinstance(self.prompt, TextPrompt):
            return self.prompt.prompts
        if isinstance(self.prompt, PairPrompt):
            return self.prompt.texts
        return []
