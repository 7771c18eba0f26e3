"""The engine's `system_fingerprint` as its answers carry it: vLLM 0.32 builds one string per
API server process at its start (`entrypoints/serve/utils/fingerprint.py`: `vllm-<version>-
<hash8>` by default, none with `--fingerprint-mode none`) and stamps it on every whole answer,
on a stream's finish events, or on its usage event when one was asked for.
"""

from __future__ import annotations

import re

# The member in compact or spaced JSON, its string with any escapes.
MEMBER = re.compile(rb'"system_fingerprint"\s*:\s*"(?:[^"\\]|\\.)*"')


def fingerprint_of(answer: bytes) -> bytes | None:
    """The `"system_fingerprint":"..."` member of the JSON text `answer`, as its bytes (what
    vLLM 0.32 puts last on a stream's finish events); b"" when `answer` has the key without a
    string (`null`: the engine stamps none); None when it has no such key."""
    found = MEMBER.search(answer)
    if found is not None:
        return found.group(0)
    return b"" if b'"system_fingerprint"' in answer else None
