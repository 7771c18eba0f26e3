"""A module imported on its first attribute access, for a test module whose client library costs
seconds of CPU to import: every pytest-xdist worker collects every test module, and only the
worker that runs its tests should pay."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """Module `name`, loaded on first use (the stdlib's `importlib.util.LazyLoader` recipe);
    the module itself when already imported. Raises ModuleNotFoundError at once when it is not
    installed."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
