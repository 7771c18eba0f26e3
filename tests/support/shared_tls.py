"""One TLS context for every httpx client the tests make (a plugin of tests/conftest.py).

Each httpx client loads certifi's CA bundle into a new SSL context: 22-35 ms of CPU, though
every test talks plain HTTP on a local port or a Unix socket. The suite makes thousands of
clients (`httpx.get` makes one per call, and tests poll with it), which cost more CPU than
some whole test modules. A context made with the default arguments is made once and shared:
httpx and `ssl` only read it once it is set up.
"""

from __future__ import annotations

import functools
from typing import Any

from httpx._transports import default as transports

_create = transports.create_ssl_context


@functools.cache
def _default_context() -> Any:
    return _create()


def _create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
    if verify is True and cert is None and trust_env:
        return _default_context()
    return _create(verify=verify, cert=cert, trust_env=trust_env)


transports.create_ssl_context = _create_ssl_context
