#!/usr/bin/env bash
# Run the tests: set up if needed, then the fast suite (the simulator and llmd daemons on it,
# 6-7 minutes on 2 cores) and the end-to-end suite against a real vLLM child (each boots the engine).
# Both run serially, one after the other.
# With arguments, they go to one pytest run instead, e.g. `scripts/test.sh -m "not e2e"`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
.venv/bin/python -m pytest -m "not e2e"
exec .venv/bin/python -m pytest -m e2e
