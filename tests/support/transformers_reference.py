"""transformers, the reference the tokenizer tests hold llmd to, imported as llmd imports it:
without torch (`llmd.validation.counter`). No tokenizer uses torch, and importing it beside
transformers cost the worker of the "transformers" group (tests/support/xdist_groups.py) about
4 CPU-s: importing AutoTokenizer and loading the tiny model's took 6.3-6.8 CPU-s with torch,
2.3-2.4 without (3 rounds each, 2026-12-07)."""

from __future__ import annotations

from types import ModuleType

from llmd.validation import counter


def transformers() -> ModuleType:
    """The transformers package, imported without torch where neither is imported yet (a later
    `import torch` still works); as it is where one of them is."""
    with counter._torch_hidden():
        import transformers

    return transformers
