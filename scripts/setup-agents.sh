#!/usr/bin/env bash
# Install the two coding-agent CLIs the end-to-end tests drive through llmd (tests/e2e/test_agents.py)
# into var/npm, never globally: Claude Code (`var/npm/node_modules/.bin/claude`) and Codex CLI
# (`var/npm/node_modules/.bin/codex`), at the versions pinned here. Needs Node 18+ and npm.
# Idempotent: a second run with the same versions does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=("@anthropic-ai/claude-code@2.1.332" "@openai/codex@0.171.0")
prefix=var/npm
stamp="$prefix/.llmd-agents"
if [ "$(cat "$stamp" 2>/dev/null)" = "${packages[*]}" ] \
  && [ -x "$prefix/node_modules/.bin/claude" ] && [ -x "$prefix/node_modules/.bin/codex" ]; then
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "setup-agents: npm not found (install Node 18+)" >&2; exit 1; }
echo "setup-agents: installing ${packages[*]} into $prefix"
mkdir -p "$prefix"
# --prefix keeps package.json, the lock file and node_modules in var/npm; no audit, no funding
# notice, no update notice: the install talks to the registry only for the packages themselves.
npm install --prefix "$prefix" --no-audit --no-fund --no-update-notifier --loglevel=error \
  --save-exact "${packages[@]}"
echo "${packages[*]}" > "$stamp"
