"""The endpoint table: one entry per path (the only list of paths), names fit for a metrics
label, and each entry's cost rule."""

from __future__ import annotations

from llmd.admission.cost import Cost
from llmd.endpoints.audio import AUDIO_BYTES_PER_S, WINDOW_S
from llmd.endpoints.openai import read_chat, read_completions, read_embeddings, read_rerank
from llmd.endpoints.table import ENDPOINTS, WHISPER_CONTEXT, by_path, transcription
from llmd.validation.fields import NO_OUTPUT, Fields, TextPrompt
from llmd.validation.validator import Validated


def valid(*counts: int, max_tokens: int | None = None, n: int = 1) -> Validated:
    return Validated(b"", counts, max_tokens, n, [])


def test_every_path_is_listed_once_with_a_short_name() -> None:
    """No path in two entries; names are unique lowercase words (a bounded metrics label)."""
    paths = [path for endpoint in ENDPOINTS for path in endpoint.paths]
    assert len(paths) == len(set(paths)) == len(by_path())
    names = [endpoint.name for endpoint in ENDPOINTS]
    assert len(names) == len(set(names))
    assert all(name.replace("_", "").isalnum() and name.islower() for name in names)


def test_each_entry_prices_what_the_engine_runs() -> None:
    """Chat: n sequences of prompt + output; completions omitted max_tokens: 16; embeddings:
    one sequence per input, no output; rerank: one per document, query + document;
    transcription: a window per 30 s the upload may hold, each up to the context. Budgets are
    charged each prompt once and every sequence's output (pooling and scoring: none)."""
    entry = {e.name: e for e in ENDPOINTS}
    chat = read_chat({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "n": 2})
    assert entry["chat"].cost(chat, valid(5, max_tokens=10, n=2), 1024) == Cost(2, 30, 5, 20)
    omitted = read_completions({"prompt": "hi"})
    assert entry["completions"].cost(omitted, valid(5), 1024) == Cost(1, 21, 5, 16)
    inputs = read_embeddings({"input": ["a", "b", "c"]})
    assert entry["embeddings"].cost(inputs, valid(4, 5, 6), 1024) == Cost(3, 15, 15)
    pairs = read_rerank({"query": "q", "documents": ["d1", "d2"]})
    assert entry["rerank"].cost(pairs, valid(3, 10, 20), 1024) == Cost(2, 36, 36)
    minute = Fields(None, TextPrompt([], False), NO_OUTPUT, audio_bytes=AUDIO_BYTES_PER_S * 60)
    windows = 60 // WINDOW_S
    assert transcription(minute, valid(0), None) == Cost(windows, windows * WHISPER_CONTEXT)
    assert transcription(minute, valid(0), 448).seats == 2


def test_a_path_under_an_entry_takes_its_dialect() -> None:
    """`/v1/messages/` (no route) answers in Anthropic's shape, `/v1/chat/completions/` OpenAI's."""
    from llmd.endpoints.dialects import ANTHROPIC, OPENAI
    from llmd.endpoints.table import dialect_of

    assert dialect_of("/v1/messages/") is ANTHROPIC
    assert dialect_of("/v1/chat/completions/") is OPENAI
