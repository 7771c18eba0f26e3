"""One TLS context for every httpx client the tests make (a plugin of tests/conftest.py).

Each httpx client loads certifi's CA bundle into a new SSL context: 22-35 ms of CPU, though
every test talks plain HTTP on a local port or a Unix socket. The suite makes thousands of
clients (`httpx.get` makes one per call, and tests poll with it), which cost more CPU than
some whole test modules. A context made with the default arguments is made once and shared:
httpx and `ssl` only read it once it is set up.

The openai and anthropic clients run on httpx2, their own fork of httpx, whose default context
loads the system's CA file the same way: 52 ms of CPU in each client (2026-12-07; the context
is nearly all of it). Its contexts are shared the same way; importing it costs about 30 ms
beside httpx, and a worker without it (an older openai) shares httpx's alone.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

from httpx._transports import default as transports


def share_default_context(module: ModuleType) -> None:
    """Make `module.create_ssl_context` (an httpx transport module's) hand out one context for
    the default arguments, made at the first call; other arguments get a new one as before."""
    create: Callable[..., Any] = module.create_ssl_context

    @functools.cache
    def default_context() -> Any:
        return create()

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is True and cert is None and trust_env:
            return default_context()
        return create(verify=verify, cert=cert, trust_env=trust_env)

    module.create_ssl_context = create_ssl_context


share_default_context(transports)
if importlib.util.find_spec("httpx2") is not None:
    from httpx2._transports import default as transports2

    share_default_context(transports2)
