"""A module imported on its first attribute access, for a test module whose client library costs
seconds of CPU to import: every pytest-xdist worker collects every test module, and only the
worker that runs its tests should pay."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any


class _Lazy(ModuleType):
    """Stands for module `__name__` until a public attribute is read, then hands out the real
    module's. Private and dunder names it lacks raise AttributeError without importing: pytest's
    collection probes every module-level object for such names (`_fixture_function_marker`,
    `__test__`), which loaded the stdlib's `LazyLoader` module in every worker (anthropic: about
    1.5 s of CPU each)."""

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self.__name__), attribute)


def lazy_module(name: str) -> ModuleType:
    """Module `name`, imported when a public attribute is first read; the module itself when
    already imported. Raises ModuleNotFoundError at once when it is not installed."""
    if name in sys.modules:
        return sys.modules[name]
    if importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return _Lazy(name)
