"""llmd's modules import each other without cycles, type-only imports included; `llmd serve`
imports no aiohttp."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "llmd"


def module_name(path: Path) -> str:
    """`llmd/admission/tenants.py` → `llmd.admission.tenants`; a package's `__init__.py` is
    the package itself."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, this: str, is_package: bool, known: set[str]) -> set[str]:
    """The llmd modules that module `this` (its text `source`) imports anywhere in its body:
    at the top, inside functions, under `if TYPE_CHECKING:`. `from pkg import name` counts as
    importing `pkg.name` when that is a module, else `pkg`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = this.split(".") if is_package else this.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {name for name in found if name in known and name != this}


def import_graph() -> dict[str, set[str]]:
    """Every llmd module and the llmd modules it imports."""
    paths = sorted(PACKAGE.rglob("*.py"))
    known = {module_name(path) for path in paths}
    return {
        module_name(path): imported_modules(
            path.read_text(), module_name(path), path.name == "__init__.py", known
        )
        for path in paths
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_between_llmd_modules() -> None:
    """No two llmd modules import each other, directly or through others (TYPE_CHECKING and
    function-level imports count: they are cycles a refactor would trip over)."""
    assert cycles(import_graph()) == []


def test_the_check_sees_type_only_and_function_level_imports() -> None:
    """A cycle closed only by an `if TYPE_CHECKING:` import and an import inside a function is
    found, and the real graph has the edges the check depends on."""
    known = {"llmd", "llmd.a", "llmd.b", "llmd.c"}
    sources = {
        "llmd.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from llmd.b import B\n",
        "llmd.b": "def f():\n    from llmd import c\n",
        "llmd.c": "from . import a\n",
    }
    graph = {name: imported_modules(text, name, False, known) for name, text in sources.items()}
    assert graph == {"llmd.a": {"llmd.b"}, "llmd.b": {"llmd.c"}, "llmd.c": {"llmd.a"}}
    assert cycles(graph) == [["llmd.a", "llmd.b", "llmd.c"]]
    real = import_graph()
    assert "llmd.config.backends" in real["llmd.config.tables"]
    assert "llmd.status" in real["llmd.telemetry.status_metrics"]


def test_the_daemon_imports_no_aiohttp() -> None:
    """`llmd serve`'s import chain (llmd.cli, llmd.daemon.daemon) loads none of aiohttp, yarl
    or multidict: every engine call goes through llmd's own client (llmd/engine/wire.py), and
    aiohttp's import (two TLS contexts, the system CAs loaded) cost each daemon ~0.1 CPU-s."""
    script = (
        "import sys, llmd.cli, llmd.daemon.daemon\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'aiohttp', 'yarl', 'multidict'}), 'uvicorn' in loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["[]", "True"]  # and the daemon's own server was imported
