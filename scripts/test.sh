#!/usr/bin/env bash
# Run the tests: set up if needed, then the fast suite (the simulator and llmd daemons on it,
# 3 to 5 minutes on 2 cores, by host: docs/bench/fast-suite.md) and the end-to-end suite
# against a real vLLM child (each boots the engine; two tests at a time, 14-23 minutes by host).
# The fast suite runs six tests at a time (pytest-xdist): it is mostly CPU (starting daemons,
# simulators and commands), but its tests also wait on them, and six keep 2 cores busy
# meanwhile. Measured one after the other on an idle machine, 2026-12-07 12:05-12:27, with the
# test daemons forked from a warm interpreter (tests/support/forked.py): four workers 279 s at
# 368 CPU-s, six 237 s and 229 s at 383 CPU-s, eight 262 s and 240 s at 452 CPU-s (each worker
# collects every test, and more of them contend for the 2 cores). The host's CPU time for the
# same run moves by a sixth from hour to hour: docs/bench/fast-suite.md. `--dist loadgroup`
# with the groups of tests/support/xdist_groups.py keeps the tests that share a module's llmd in
# one worker and all end-to-end tests in one worker.
# With arguments, they go to one pytest run instead, six at a time too (`-n 0`: one at a time),
# e.g. `scripts/test.sh -m "not e2e"`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Compiled modules are cached, in .venv rather than beside the sources, even where the
# environment says not to write them (PYTHONDONTWRITEBYTECODE): the suite starts about 450
# Pythons (the simulators llmd's daemons start, CLIs; the daemons and simulators the tests start
# themselves fork from a warm interpreter, tests/support/forked.py) and six workers that each
# collect every test, and compiling llmd and the tests afresh in each cost about 7 s of CPU per
# worker.
export PYTHONPYCACHEPREFIX="$PWD/.venv/pycache"
unset PYTHONDONTWRITEBYTECODE
parallel=(-n 6 --dist loadgroup)
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "${parallel[@]}" "$@"
fi
.venv/bin/python -m pytest "${parallel[@]}" -m "not e2e"
# The end-to-end half runs two tests at a time (two engines, about 2 GB each: ENGINE.md): an
# engine's boot is mostly one process importing, so one test at a time left about 40 % of the
# 2 cores idle. Measured back to back on a clean clone, 2026-12-07: 846 s against 2,035 s one
# at a time (that one with helper sessions' tests beside it, load 4-7), and 997 s against 1,515 s the
# session before (docs/bench/fast-suite.md). The slowest are listed at the end.
exec .venv/bin/python -m pytest -n 2 --dist loadgroup -m e2e --durations=20
