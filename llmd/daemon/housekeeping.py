"""The main loop's tick, the one place for housekeeping: the service state and the watchdog
ping to systemd, the summaries of rate-limited log lines, and start-up's objects frozen once
loaded."""

from __future__ import annotations

import gc
import time

import structlog

from llmd.daemon.backends import Backends
from llmd.logs import line_limiter
from llmd.state import DaemonState
from llmd.systemd.reporter import ServiceReporter

log = structlog.get_logger("llmd.daemon.daemon")


class Housekeeping:
    """What the daemon's main loop does once a tick (`tick`), over `state`, the engines at
    work (`backends`) and systemd's `reporter`; `unfreeze` at shutdown gives start-up's objects
    back to the garbage collector."""

    def __init__(self, state: DaemonState, backends: Backends, reporter: ServiceReporter) -> None:
        self.state = state
        self.backends = backends
        self.reporter = reporter
        self.gc_frozen = False  # start-up's objects are out of the collector's generations

    def tick(self) -> None:
        """Housekeeping once a tick: the service state to systemd, the watchdog ping, the
        summaries of rate-limited log lines, start-up's objects frozen once loaded."""
        line_limiter().flush()
        self._freeze_start_up()
        running = self.backends.running()
        self.reporter.tick(
            self.state.fleet.engines,
            ready=self.backends.ready(),
            draining=self.state.draining,
            in_flight=len(self.state.inflight),
            making_progress=all(
                _age(s.last_progress) < s.engine.stop_timeout_s + 15.0 for s in running
            ),
        )

    def unfreeze(self) -> None:
        """Give start-up's objects back to the garbage collector (an llmd run in-process, as
        the tests do, leaves nothing frozen)."""
        if self.gc_frozen:
            gc.unfreeze()
            self.gc_frozen = False

    def _freeze_start_up(self) -> None:
        """Once, when the first tokenizers have loaded: move every object alive now (modules,
        config, tokenizers: about 85,000 with the tiny model's) out of the garbage collector's
        generations (`gc.freeze`, Python 3.7+), so that its full collections, which run while
        requests wait, walk only what requests and reloads made since."""
        if self.gc_frozen or not self.state.validators.loaded():
            return
        gc.collect()  # what start-up left as garbage goes now, not frozen with the rest
        gc.freeze()
        self.gc_frozen = True
        log.info("gc_frozen", objects=gc.get_freeze_count())


def _age(monotonic_s: float) -> float:
    return time.monotonic() - monotonic_s
