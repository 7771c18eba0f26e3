#!/usr/bin/env bash
# Run the tests: set up if needed, then pytest (all tests, the real-vLLM end-to-end ones too).
# Pass pytest arguments through, e.g. `scripts/test.sh -m "not e2e"` for the fast suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
