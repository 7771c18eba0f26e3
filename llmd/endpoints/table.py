"""The endpoint table: every path llmd answers for a backend, one `Endpoint` entry each, and
the only list of those paths (`ENDPOINTS`). The relay (llmd/proxy/relay.py) runs the same
named stages for each, reading the entry: how the body is read, whether prompt lengths are
checked here, what a request costs, which engine kinds serve it, how its answer is read.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from typing import Any

from llmd.admission.cost import Cost, pair_cost, pooling_cost, request_cost
from llmd.endpoints import anthropic, audio, openai, responses
from llmd.endpoints.dialects import ANTHROPIC, OPENAI, Dialect
from llmd.endpoints.responses_stream import RESPONSES
from llmd.engine.runner import EngineKind
from llmd.telemetry.metrics import OTHER_ENDPOINT
from llmd.validation.fields import Fields, PairPrompt
from llmd.validation.validator import Validated


class BodyKind(enum.Enum):
    """JSON: one object; MULTIPART: a `multipart/form-data` upload (audio)."""

    JSON = "json"
    MULTIPART = "multipart"


class Answer(enum.Enum):
    """Who answers: a backend (RELAY); llmd's own tokenizer when it has the model's and
    renders the prompt as the engine would (TOKENIZE, DETOKENIZE: they then cost the engine
    nothing; else relayed); or llmd with the prompt's tokens (COUNT: counted as for
    validation, by the local tokenizer or else by the engine, with no backend free needed
    when the local one can; `Endpoint.counted` shapes the answer)."""

    RELAY = "relay"
    TOKENIZE = "tokenize"
    DETOKENIZE = "detokenize"
    COUNT = "count"


Cost_ = Callable[[Fields, Validated, int | None], Cost]


def generation(fields: Fields, valid: Validated, max_model_len: int | None) -> Cost:
    """Chat and completions: `n` sequences per prompt, each its prompt plus its output."""
    return request_cost(
        valid.prompt_counts,
        valid.max_tokens,
        fields.output.n,
        rest_of_context=fields.output.rest_of_context,
        max_model_len=max_model_len,
    )


def pooling(fields: Fields, valid: Validated, max_model_len: int | None) -> Cost:
    """Embeddings, pooling, classify: one sequence per input, its prompt only."""
    return pooling_cost(valid.prompt_counts)


def pairs(fields: Fields, valid: Validated, max_model_len: int | None) -> Cost:
    """Score and rerank: one sequence per pair (query x documents), both texts' tokens."""
    prompt = fields.prompt
    assert isinstance(prompt, PairPrompt)
    return pair_cost(valid.prompt_counts, prompt.pairs)


def transcription(fields: Fields, valid: Validated, max_model_len: int | None) -> Cost:
    """An audio upload: one sequence per 30 s window it can hold (its size at the lowest
    bitrate, llmd/endpoints/audio.py), each up to the model's context (448 for Whisper).
    Nothing is reserved from token budgets (the tokens are not known before): the output it
    produced is charged when it ends."""
    windows = audio.audio_windows(fields.audio_bytes)
    return Cost(seats=windows, tokens=windows * (max_model_len or WHISPER_CONTEXT))


# Whisper's decoder context (`max_target_positions`), when the engine has not said its own.
WHISPER_CONTEXT = 448


def one_seat(fields: Fields, valid: Validated, max_model_len: int | None) -> Cost:
    """A tokenizer request sent to a backend: one seat for a moment, its prompt's tokens
    (charged to no token budget: nothing is generated or pooled)."""
    tokens = pooling_cost(valid.prompt_counts[:1] or (1,)).tokens
    return Cost(seats=1, tokens=tokens)


GENERATE = frozenset({EngineKind.GENERATE})
POOL = frozenset({EngineKind.POOLING})
ANY = frozenset(EngineKind)
# What serves an endpoint, by its engine kinds (vLLM 0.32's runners), unless its entry says.
NEEDS = {
    GENERATE: "a generating model, an engine run without --runner pooling,",
    POOL: "a pooling model, an engine run with --runner pooling,",
}
# vLLM registers /classify for a classification model (`--convert classify`, or a model whose
# architecture classifies), and the audio routes for a speech-to-text model (Whisper, Voxtral).
CLASSIFIER = "a classification model, an engine run with --runner pooling --convert classify,"
SPEECH = "a speech-to-text model (Whisper, Voxtral) on a generating engine"


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One API endpoint.

    `name` labels its metrics and log lines (bounded: the table's names); `read` checks the
    body's fields into a `Fields` record (raises InvalidRequest); `validate` counts prompt
    tokens and checks them against the context here (False: the engine does); `cost` prices
    a request for admission; `engine_kinds` are the engines that serve it (an upstream is
    assumed to serve every endpoint); `dialect` reads its answers; `stored`: it reads llmd's
    Responses store (`previous_response_id`, llmd/proxy/responses.py); `counted` shapes the
    answer of a COUNT endpoint from the prompt's tokens (`validate`: a count past the window
    is refused, as vLLM refuses it); `needs` what model an engine must run to serve it, for
    a refusal when no model here does (by default, by its engine kinds: `needs_of`).
    """

    name: str
    paths: tuple[str, ...]
    read: Callable[[dict[str, Any]], Fields]
    cost: Cost_
    engine_kinds: frozenset[EngineKind]
    validate: bool = True
    body: BodyKind = BodyKind.JSON
    answer: Answer = Answer.RELAY
    dialect: Dialect = OPENAI
    streams: bool = False  # a `stream` field may ask for server-sent events
    stored: bool = False
    counted: Callable[[int], dict[str, Any]] | None = None
    needs: str = ""

    def __str__(self) -> str:
        return self.name


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "chat", ("/v1/chat/completions",), openai.read_chat, generation, GENERATE, streams=True
    ),
    Endpoint(
        "completions", ("/v1/completions",), openai.read_completions, generation, GENERATE,
        streams=True,
    ),
    Endpoint(
        "messages", ("/v1/messages",), anthropic.read_messages, generation, GENERATE,
        streams=True, dialect=ANTHROPIC,
    ),
    Endpoint(
        "count_tokens", ("/v1/messages/count_tokens",), anthropic.read_count_tokens, one_seat,
        GENERATE, answer=Answer.COUNT, dialect=ANTHROPIC, counted=anthropic.count_answer,
    ),
    Endpoint(
        "responses", ("/v1/responses",), responses.read_responses, generation, GENERATE,
        dialect=RESPONSES, streams=True, stored=True,
    ),
    Endpoint(
        "responses_input_tokens", ("/v1/responses/input_tokens",), responses.read_input_tokens,
        one_seat, GENERATE, validate=False, answer=Answer.COUNT, stored=True,
        counted=responses.input_tokens_answer,
    ),
    Endpoint("embeddings", ("/v1/embeddings",), openai.read_embeddings, pooling, POOL),
    Endpoint("pooling", ("/pooling",), openai.read_embeddings, pooling, POOL),
    Endpoint(
        "classify", ("/classify",), openai.read_embeddings, pooling, POOL, needs=CLASSIFIER
    ),
    Endpoint("embed_v2", ("/v2/embed",), openai.read_cohere_embed, pooling, POOL),
    Endpoint("score", ("/score", "/v1/score"), openai.read_score, pairs, POOL),
    Endpoint("rerank", ("/rerank", "/v1/rerank", "/v2/rerank"), openai.read_rerank, pairs, POOL),
    Endpoint(
        "transcriptions", ("/v1/audio/transcriptions",), audio.read_transcription, transcription,
        GENERATE, validate=False, body=BodyKind.MULTIPART, streams=True, needs=SPEECH,
    ),
    Endpoint(
        "translations", ("/v1/audio/translations",), audio.read_transcription, transcription,
        GENERATE, validate=False, body=BodyKind.MULTIPART, streams=True, needs=SPEECH,
    ),
    Endpoint(
        "tokenize", ("/tokenize",), openai.read_tokenize, one_seat, ANY, validate=False,
        answer=Answer.TOKENIZE,
    ),
    Endpoint(
        "detokenize", ("/detokenize",), openai.read_detokenize, one_seat, ANY, validate=False,
        answer=Answer.DETOKENIZE,
    ),
)  # fmt: skip


def by_path() -> dict[str, Endpoint]:
    """Every endpoint by each of its paths."""
    return {path: endpoint for endpoint in ENDPOINTS for path in endpoint.paths}


def label_of(path: str) -> str:
    """The `endpoint` label of a request at `path` (its metrics and log line): its entry's
    name, or `other` for a path no entry has."""
    return next((e.name for e in ENDPOINTS if path in e.paths), OTHER_ENDPOINT)


def dialect_of(path: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> Dialect:
    """The dialect of a request at `path` with ASGI `headers` (its errors' shape): its
    entry's; for a path no entry has, that of the longest entry path it lies under
    (`/v1/messages/` is Anthropic's), else Anthropic's for a request with `anthropic-version`
    (the anthropic client sends it on every request: `/v1/models` as Claude Code lists
    models, where the answer itself is Anthropic's then), else OpenAI's."""
    exact = next((e.dialect for e in ENDPOINTS if path in e.paths), None)
    if exact is not None:
        return exact
    under = [(p, e.dialect) for e in ENDPOINTS for p in e.paths if path.startswith(p + "/")]
    if under:
        return max(under, key=lambda pair: len(pair[0]))[1]
    return ANTHROPIC if any(name == ANTHROPIC_VERSION for name, _ in headers) else OPENAI


# The header the anthropic client sends with every request (its API's version).
ANTHROPIC_VERSION = b"anthropic-version"


def needs_of(endpoint: Endpoint) -> str:
    """What model an engine must run to serve `endpoint`, in words for a refusal."""
    return endpoint.needs or NEEDS.get(endpoint.engine_kinds, "any model")


def serving(endpoint: Endpoint, kinds: frozenset[EngineKind] | None) -> bool:
    """Whether backends of `kinds` serve `endpoint` (None: unknown, an upstream: yes)."""
    return kinds is None or bool(kinds & endpoint.engine_kinds)
