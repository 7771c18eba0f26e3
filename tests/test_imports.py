"""llmd's modules import each other without cycles, type-only imports included; `llmd serve`
and the client verbs import no aiohttp, and a verb imports no other verb's module."""

from __future__ import annotations

import argparse
import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

from llmd import cli

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "llmd"


def module_name(path: Path) -> str:
    """`llmd/admission/tenants.py` → `llmd.admission.tenants`; a package's `__init__.py` is
    the package itself."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def sources() -> dict[str, tuple[Path, ast.Module]]:
    """Every llmd module: its path and parsed text, parsed once in a process for the import
    graph's tests and tests/test_layers.py (about 1 CPU-s each time; the tests only read it)."""
    return {
        module_name(path): (path, ast.parse(path.read_text()))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def imported_modules(tree: ast.Module, this: str, is_package: bool, known: set[str]) -> set[str]:
    """The llmd modules that module `this` (its parsed text `tree`) imports anywhere in its
    body: at the top, inside functions, under `if TYPE_CHECKING:`. `from pkg import name`
    counts as importing `pkg.name` when that is a module, else `pkg`."""
    found: set[str] = set()
    for node in ast.walk(tree):
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
    parsed = sources()
    return {
        name: imported_modules(tree, name, path.name == "__init__.py", set(parsed))
        for name, (path, tree) in parsed.items()
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


# The worker of tests/test_layers.py runs the tests that read the graph: `sources` parsed once.
@pytest.mark.xdist_group("layers")
def test_no_import_cycles_between_llmd_modules() -> None:
    """No two llmd modules import each other, directly or through others (TYPE_CHECKING and
    function-level imports count: they are cycles a refactor would trip over)."""
    assert cycles(import_graph()) == []


@pytest.mark.xdist_group("layers")
def test_the_check_sees_type_only_and_function_level_imports() -> None:
    """A cycle closed only by an `if TYPE_CHECKING:` import and an import inside a function is
    found, and the real graph has the edges the check depends on."""
    known = {"llmd", "llmd.a", "llmd.b", "llmd.c"}
    texts = {
        "llmd.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from llmd.b import B\n",
        "llmd.b": "def f():\n    from llmd import c\n",
        "llmd.c": "from . import a\n",
    }
    graph = {
        name: imported_modules(ast.parse(text), name, False, known) for name, text in texts.items()
    }
    assert graph == {"llmd.a": {"llmd.b"}, "llmd.b": {"llmd.c"}, "llmd.c": {"llmd.a"}}
    assert cycles(graph) == [["llmd.a", "llmd.b", "llmd.c"]]
    real = import_graph()
    assert "llmd.config.backends" in real["llmd.config.tables"]
    assert "llmd.status" in real["llmd.telemetry.status_metrics"]


def loaded_by(argv: list[str]) -> set[str]:
    """The top-level packages and the llmd modules a fresh interpreter has loaded after
    `llmd ARGV` ran in it (and exited, whatever its status)."""
    script = (
        "import sys\n"
        "from llmd import cli\n"
        "try:\n"
        f"    cli.main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "tops = {m.split('.')[0] for m in sys.modules}\n"
        "print(' '.join(tops | {m for m in sys.modules if m.startswith('llmd.')}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return set(done.stdout.split())


# Imports a verb has no use for: aiohttp and multidict (~0.3 CPU-s), rich (structlog's pretty
# tracebacks, ~0.08), uvicorn's command line (click and its reload supervisors' watchfiles,
# ~0.03: llmd.console.import_uvicorn), the other verbs' modules.
UNUSED = {
    "aiohttp",
    "click",
    "watchfiles",
    "yarl",
    "multidict",
    "rich",
    "llmd.bench.command",
    "llmd.tune.command",
    "llmd.check_config",
    "llmd.releases.command",
    "llmd.usage.command",
    "llmd.admin.tenant_command",
    "llmd.doctor.command",
}


def test_serve_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    """`llmd serve` (stopped by a config it cannot read, after its imports) loads none of
    UNUSED: every engine call goes through llmd's own client (llmd/engine/wire.py)."""
    loaded = loaded_by(["serve", "--config", str(tmp_path / "absent.toml")])
    assert {"llmd.daemon.daemon", "uvicorn", "structlog"} <= loaded  # it got that far
    assert loaded & UNUSED == set()


def test_a_client_verb_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    """`llmd status` (what a person types most; no daemon here) loads none of UNUSED: its
    start was 0.4 CPU-s, mostly those imports."""
    loaded = loaded_by(["status", "--runtime-dir", str(tmp_path)])
    assert {"llmd.admin.client", "structlog"} <= loaded
    assert loaded & UNUSED == set()


def test_the_verbs_are_all_of_the_parsers_verbs() -> None:
    """`llmd.cli.VERBS`, which picks the one verb module a call imports, names every verb of
    the whole parser, and a parser for one named verb still has that verb."""
    full = _verb_choices(cli._parser())
    assert sorted(full) == sorted(cli.VERBS)
    for verb in cli.VERBS:
        assert verb in _verb_choices(cli._parser(cli._named_verb([verb, "--help"])))
    assert cli._named_verb(["--version"]) is None
    assert cli._named_verb(["-h", "serve"]) is None  # the help of every verb
    assert cli._named_verb(["nonsense"]) is None


def _verb_choices(parser: argparse.ArgumentParser) -> list[str]:
    (verbs,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(verbs.choices)
