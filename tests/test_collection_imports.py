"""What collecting the suite imports: no module of tests/ imports, at its top level, a library
that costs most of a second of CPU or more to import. Every pytest-xdist worker collects every test
module (tests/e2e too: `-m "not e2e"` deselects after collecting), so such an import is paid
once per worker (six in scripts/test.sh); the test that needs it imports it in its body or
through `tests.support.lazy_import.lazy_module`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# CPU-s to import, measured alone on a 2-core host (2026-12-07): openai 0.7 (its types; 22
# modules used it, 4 s of CPU at the start of a six-worker run), anthropic 1.2 after openai,
# transformers 4.3 (it imports torch), torch and vllm more.
HEAVY = {"anthropic", "openai", "transformers", "torch", "vllm"}


def top_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported: its body's, and those under `if`, `try`
    and `with` at that level, except under `if TYPE_CHECKING:`."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            checking = isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            pending.extend(node.orelse if checking else [*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            pending.extend([*node.body, *node.orelse, *node.finalbody])
            pending.extend(s for handler in node.handlers for s in handler.body)
        elif isinstance(node, ast.With):
            pending.extend(node.body)


def heavy_imports(source: str) -> set[str]:
    """The libraries of `HEAVY` that a module's text `source` imports at its top level."""
    found = set()
    for node in top_level_imports(ast.parse(source)):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        found.update(name.split(".")[0] for name in names)
    return found & HEAVY


def test_heavy_imports_are_found_at_the_top_only() -> None:
    """An import at the top, under `if` or `try`, counts; one in a function, or under `if
    TYPE_CHECKING:` (with an `else:` that imports nothing heavy), does not."""
    source = (
        "import anthropic.types\n"
        "if TYPE_CHECKING:\n    import transformers\nelse:\n    x = 1\n"
        "try:\n    from torch import nn\nexcept ImportError:\n    pass\n"
        "def f():\n    import vllm\n"
    )
    assert heavy_imports(source) == {"anthropic", "torch"}


def test_no_test_module_imports_a_heavy_library_at_collection() -> None:
    """Each module of tests/ (conftests and tests/support included) imports none of anthropic,
    openai, transformers, torch and vllm at its top level."""
    found = {
        str(path.relative_to(TESTS)): heavy
        for path in sorted(TESTS.rglob("*.py"))
        if (heavy := heavy_imports(path.read_text()))
    }
    assert found == {}
