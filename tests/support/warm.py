"""What the test forkserver imports once (tests/support/forked.py): the modules `llmd serve` and
the simulator import at start, with the cyclic collector off and the result frozen, as
`llmd serve` treats its own imports (llmd/cli.py `_serve`)."""

import gc

gc.disable()
try:
    import llmd.cli
    import llmd.engine.sim.__main__
    import llmd.engine.sim.app
    from llmd.console import import_structlog

    import_structlog()
    import llmd.admission.tenants
    import llmd.allocator
    import llmd.config
    import llmd.daemon.daemon
    import llmd.logs  # noqa: F401
finally:
    gc.enable()
gc.freeze()
