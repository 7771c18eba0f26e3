"""Recorded vLLM answers (tests/data/vllm_cpu_endpoints, tests/data/vllm_audio_http) replayed
against the simulator: send the recorded request, compare the answer's shape.

`same_shape` holds an answer to a recording: the same keys in the same order, the same JSON
types, lists of the same length, and equal values except where a value is the model's own
(floats, made-up text, base64 vectors: same length) or a moment's (`id` past its prefix,
`created`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from llmd.endpoints.table import ENDPOINTS
from tests.support.audio import silence_wav

DATA = Path(__file__).resolve().parents[2] / "data"
# How the values under some keys are compared: `prefix` (ids: up to the first '-'), `any`
# (a moment's or a place's: the type only), `length` (vectors in base64: their length),
# `loose` (the model's own numbers, rerank results in the order of its scores: structure and
# types).
VOLATILE = {
    "id": "prefix",
    "created": "any",
    "root": "any",  # the model's directory
    "text": "any",  # made-up text (a rerank document's is compared with its index)
    "embedding": "length",
    "data": "length",
    "binary": "loose",
    "ubinary": "loose",
    "results": "loose",
}


def fixtures(folder: str) -> list[Path]:
    """The recorded answers of one folder under tests/data (recursively), sorted."""
    return sorted((DATA / folder).rglob("*.json"))


def load(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text())
    return record


async def replay(client: httpx.AsyncClient, request: dict[str, Any]) -> httpx.Response:
    """Send a recorded request (JSON, multipart with files of the recorded sizes, or raw)."""
    path = request["path"]
    if request["method"] == "GET":
        return await client.get(path)
    if "json" in request:
        return await client.post(path, json=request["json"])
    if "raw" in request:
        raw = request["raw"]
        headers = {"content-type": raw["content_type"]}
        return await client.post(path, content=raw["body"].encode(), headers=headers)
    multipart = request["multipart"]
    files = {
        part: (f["filename"], _upload(f["bytes"]), f["content_type"])
        for part, f in multipart["files"].items()
    }
    return await client.post(path, data=multipart["fields"], files=files or None)


# The paths the simulator can serve: llmd's endpoint table, generation, audio, the plumbing.
# vLLM's others (/v1/messages, /invocations, /ping, ...) are not simulated.
SIMULATED = {path for endpoint in ENDPOINTS for path in endpoint.paths} | {
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
    "/v1/models",
    "/health",
    "/metrics",
    "/version",
}


async def served_paths(client: httpx.AsyncClient, paths: set[str]) -> set[str]:
    """Which of `paths` an engine has a route for: any answer to an empty POST but FastAPI's
    404 (a GET-only route answers 405)."""
    served = set()
    for path in paths:
        response = await client.post(path, json={})
        if response.status_code != 404 or response.json() != {"detail": "Not Found"}:
            served.add(path)
    return served


def _upload(size: int) -> bytes:
    wav = silence_wav()
    return wav if size == len(wav) else b"\0" * size


def same_shape(got: Any, want: Any, where: str = "body", *, loose: bool = False) -> list[str]:
    """The differences between an answer and a recording, as 'where: what' lines; `loose`
    (a generated answer) compares strings and numbers by type only."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: {type(got).__name__} instead of an object"]
        if list(got) != list(want):
            return [f"{where}: keys {list(got)} instead of {list(want)}"]
        return [
            line
            for key in want
            for line in _field(got[key], want[key], f"{where}.{key}", key, loose)
        ]
    if isinstance(want, list):
        if not isinstance(got, list) or (len(got) != len(want) and not loose):
            return [f"{where}: {_brief(got)} instead of a list of {len(want)}"]
        pairs = zip(got, want, strict=False)
        return [
            line
            for i, (g, w) in enumerate(pairs)
            for line in same_shape(g, w, f"{where}[{i}]", loose=loose)
        ]
    if isinstance(want, float) or (isinstance(want, int) and isinstance(got, float)):
        ok = isinstance(got, int | float) and not isinstance(got, bool)
        return [] if ok else [f"{where}: {got!r} is not a number"]
    if loose and want is not None and not isinstance(want, bool):
        ok = type(got) is type(want)
        return [] if ok else [f"{where}: {got!r} is not a {type(want).__name__}"]
    same = got == want and type(got) is type(want)
    return [] if same else [f"{where}: {got!r} instead of {want!r}"]


def _field(got: Any, want: Any, where: str, key: str, loose: bool) -> list[str]:
    rule = VOLATILE.get(key)
    if rule == "loose":
        return same_shape(got, want, where, loose=True)
    if rule is None or not isinstance(want, str | int) or isinstance(want, bool):
        return same_shape(got, want, where, loose=loose)
    if type(got) is not type(want):
        return [f"{where}: {got!r} is not a {type(want).__name__}"]
    if rule == "prefix" and str(got).split("-")[0] != str(want).split("-")[0]:
        return [f"{where}: {got!r} does not start as {want!r}"]
    if rule == "length" and len(str(got)) != len(str(want)):
        return [f"{where}: {len(str(got))} characters instead of {len(str(want))}"]
    return []


def _brief(value: Any) -> str:
    return f"a list of {len(value)}" if isinstance(value, list) else repr(value)[:80]
