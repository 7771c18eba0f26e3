#!/usr/bin/env bash
# Run the tests: set up if needed, then the fast suite (simulator, two workers, about a minute)
# and the end-to-end suite against a real vLLM child (one at a time: each boots the engine).
# With arguments, they go to one pytest run instead, e.g. `scripts/test.sh -m "not e2e" -n 2`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
.venv/bin/python -m pytest -m "not e2e" -n 2
exec .venv/bin/python -m pytest -m e2e
