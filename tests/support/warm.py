"""What the test forkserver imports once (tests/support/forked.py): the modules `llmd serve`
imports at start (`llmd.cli.import_daemon_modules`, the cyclic collector off) and the
simulator's, then frozen out of the collector's passes, as `llmd serve` does after start-up."""

import gc

import llmd.cli

llmd.cli.import_daemon_modules()
gc.disable()
try:
    import llmd.engine.sim.__main__
    import llmd.engine.sim.app
finally:
    gc.enable()
gc.freeze()
