#!/usr/bin/env bash
# Generate the tiny test model: scripts/make-tiny-model.sh OUT_DIR [--force]
# Runs scripts/make_tiny_model.py with the repository's .venv Python.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$repo_root/.venv/bin/python" "$repo_root/scripts/make_tiny_model.py" "$@"
