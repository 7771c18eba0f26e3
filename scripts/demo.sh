#!/usr/bin/env bash
# The demo: set up if needed, then run llmd in the foreground serving the tiny model through a
# real vLLM (CPU build) child on 127.0.0.1:8000. Ctrl-C drains and stops it (engine included).
# Its arguments go to `llmd serve`: `scripts/demo.sh --listen 127.0.0.1:8100` for another port.
# Its sockets are in var/run (etc/demo.toml's server.runtime_dir).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p var/run
exec .venv/bin/llmd serve --config etc/demo.toml "$@"
