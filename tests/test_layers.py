"""llmd's folders are layers: a module imports its own folder and the layers below it; an import
up the layers names only leaf types (enums, frozen dataclasses, protocols); each folder's
`__init__` docstring names the units it may import, and they are below it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.test_imports import PACKAGE, module_name, sources

# One worker runs the three tests and the import graph's (tests/test_imports.py), so the
# sources are parsed once (`sources`).
pytestmark = pytest.mark.xdist_group("layers")

# Top first. A unit is a folder or a top-level module; units of one layer do not import each
# other. The README's "How a request flows, how the daemon lives" names these layers.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("llmd.cli", "llmd.tui"),  # what a person runs
    ("llmd.check_config",),
    ("llmd.tune",),
    ("llmd.doctor",),
    ("llmd.bench", "llmd.admin"),  # a load generator; the admin API's client
    ("llmd.daemon",),  # lifecycle, operator actions, reload, the backends at work, telemetry task
    ("llmd.systemd",),
    ("llmd.releases", "llmd.proxy"),  # deploys (run by the daemon); the public HTTP app
    ("llmd.state", "llmd.endpoints"),  # the daemon's shared state; the endpoint table
    ("llmd.inflight",),  # the live requests
    ("llmd.backends",),  # the fleet: engines' and upstreams' states and clients
    ("llmd.admission",),
    ("llmd.routing",),
    ("llmd.validation", "llmd.telemetry"),
    ("llmd.usage",),  # usage and the budgets' state, kept in the state directory
    ("llmd.supervisor",),
    ("llmd.sizing",),
    ("llmd.gpu",),
    ("llmd.logs",),
    ("llmd.events",),
    ("llmd.runtime", "llmd.arguments"),
    ("llmd.config",),  # the contract every layer reads
    ("llmd.engine",),  # the engine adapter: launch, flags, client, metrics
    ("llmd.status",),  # the Status contract
    ("llmd.embedded",),  # uvicorn as the daemon and the simulator run it
    ("llmd.binding", "llmd.console", "llmd.allocator"),
    ("llmd.errors", "llmd.textfiles"),
    ("llmd.numerals", "llmd.quoting"),
    ("llmd",),
)
# Units a folder's docstring need not name: the base every layer may use.
BASE = {
    "embedded",
    "binding",
    "console",
    "allocator",
    "errors",
    "textfiles",
    "numerals",
    "quoting",
    "llmd",
}
MAY_IMPORT = re.compile(r"May import:\s*(.*?)\.(?:\s|$)", re.S)  # "the base modules only": none


def unit_of(module: str) -> tuple[str, int] | None:
    """The unit `module` belongs to (the longest matching name) and its layer's index."""
    found: tuple[str, int] | None = None
    for index, layer in enumerate(LAYERS):
        for unit in layer:
            if (module == unit or module.startswith(unit + ".")) and (
                found is None or len(unit) > len(found[0])
            ):
                found = (unit, index)
    return found


def leaf_types(module: str, parsed: dict[str, tuple[Path, ast.Module]]) -> set[str]:
    """The names in `module` that are leaf types: enums, frozen dataclasses and protocols
    defined there, or imported there from a module where they are one (a re-export)."""
    found: set[str] = set()
    _, tree = parsed[module]
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(base) for base in node.bases]
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if any("frozen=True" in d for d in decorators) or any(
                b.endswith("Enum") or b in ("Protocol", "enum.IntEnum") for b in bases
            ):
                found.add(node.name)
        elif isinstance(node, ast.ImportFrom) and node.module in parsed and node.level == 0:
            names = {alias.name for alias in node.names}
            found |= names & leaf_types(node.module, parsed)
    return found


def imports(
    module: str, path: Path, tree: ast.Module, parsed: dict[str, tuple[Path, ast.Module]]
) -> list[tuple[str, str | None]]:
    """Each llmd module `module` imports anywhere in its body, with the name it takes from it
    (None: the module itself)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name in parsed]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if candidate in parsed:
                    found.append((candidate, None))
                elif base in parsed:
                    found.append((base, alias.name))
    return found


def violations() -> list[str]:
    """Every import that breaks the layers, as `importer -> imported (name): why`."""
    parsed = sources()
    found: list[str] = []
    for module, (path, tree) in parsed.items():
        here = unit_of(module)
        if here is None:
            found.append(f"{module}: in no layer (add its folder to LAYERS)")
            continue
        for target, name in imports(module, path, tree, parsed):
            there = unit_of(target)
            assert there is not None
            if there[0] == here[0] or there[1] > here[1]:
                continue
            if name is not None and name in leaf_types(target, parsed):
                continue
            why = "same layer" if there[1] == here[1] else "up the layers"
            found.append(f"{module} -> {target} ({name or 'module'}): {why}")
    return found


def test_imports_follow_the_layers() -> None:
    """No module imports a unit of its own layer or above it, except leaf types."""
    assert violations() == []


def test_each_folder_says_what_it_may_import() -> None:
    """Each folder's `__init__` docstring has a "May import:" list that names every unit below
    it that the folder imports (the base modules aside), and only units below it."""
    parsed = sources()
    short = {unit: unit.rsplit(".", 1)[-1] for layer in LAYERS for unit in layer}
    problems: list[str] = []
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        folder = module_name(init)
        here = unit_of(folder)
        assert here is not None
        match = MAY_IMPORT.search(ast.get_docstring(parsed[folder][1]) or "")
        if match is None:
            problems.append(f"{folder}: no 'May import:' line")
            continue
        text = re.sub(r"\(.*?\)|the base modules only", "", match.group(1))
        listed = {name.strip(" `\n") for name in re.split(r",|\band\b", text)} - {""}
        below = {short[u] for layer in LAYERS[here[1] + 1 :] for u in layer}
        for name in sorted(listed - below):
            problems.append(f"{folder}: names {name}, which is not below it")
        used = set()
        for module, (path, tree) in parsed.items():
            if unit_of(module) == here:
                for target, _ in imports(module, path, tree, parsed):
                    there = unit_of(target)
                    if there is not None and there[1] > here[1]:
                        used.add(short[there[0]])
        for name in sorted(used - listed - BASE):
            problems.append(f"{folder}: imports {name} but its docstring does not name it")
    assert problems == []


def test_the_check_finds_an_upward_import_and_allows_a_leaf_type() -> None:
    """The rule bites on the real graph's shape: the proxy imports admission (below), config
    imports no layer above it, and an upward import of a frozen record counts as a leaf type."""
    parsed = sources()
    proxy = unit_of("llmd.proxy.relay")
    admission = unit_of("llmd.admission.control")
    assert proxy is not None and admission is not None and proxy[1] < admission[1]
    assert "EngineConfig" in leaf_types("llmd.config", parsed)  # re-exported, frozen
    assert "Priority" in leaf_types("llmd.admission.classes", parsed)  # an enum
    assert "Admission" not in leaf_types("llmd.admission.control", parsed)
