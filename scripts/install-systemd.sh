#!/usr/bin/env bash
# Install llmd as a systemd service on this host: unit, sysusers/tmpfiles snippets, config.
#   scripts/install-systemd.sh [--dry-run] [--root DIR] [--llmd PATH]
#   --dry-run   print what would be done, change nothing
#   --root DIR  install under DIR instead of / (for packaging and tests; runs no systemctl)
#   --llmd PATH the llmd executable the unit runs (default: this checkout's .venv/bin/llmd)
# The config is installed only if /etc/llmd/llmd.toml does not exist yet.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dry=0 root="" llmd="$here/.venv/bin/llmd"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --root) root=${2:?--root needs a directory}; shift ;;
    --llmd) llmd=${2:?--llmd needs a path}; shift ;;
    *) echo "usage: $0 [--dry-run] [--root DIR] [--llmd PATH]" >&2; exit 2 ;;
  esac
  shift
done

run() { if [ "$dry" = 1 ]; then echo "+ $*"; else "$@"; fi; }

[ -x "$llmd" ] || { echo "install-systemd: $llmd is not executable (run scripts/setup.sh)" >&2; exit 1; }
unit=$(mktemp); trap 'rm -f "$unit"' EXIT
sed "s|@LLMD@|$llmd|g" "$here/systemd/llmd.service" > "$unit"

run install -D -m 0644 "$unit" "$root/etc/systemd/system/llmd.service"
run install -D -m 0644 "$here/systemd/llmd.sysusers.conf" "$root/usr/lib/sysusers.d/llmd.conf"
run install -D -m 0644 "$here/systemd/llmd.tmpfiles.conf" "$root/usr/lib/tmpfiles.d/llmd.conf"
if [ ! -e "$root/etc/llmd/llmd.toml" ]; then
  run install -D -m 0640 "$here/etc/llmd.toml" "$root/etc/llmd/llmd.toml"
fi
if [ -z "$root" ]; then
  run systemd-sysusers /usr/lib/sysusers.d/llmd.conf
  run systemd-tmpfiles --create /usr/lib/tmpfiles.d/llmd.conf
  run chgrp llmd /etc/llmd/llmd.toml
  run systemctl daemon-reload
  echo "installed: edit /etc/llmd/llmd.toml (engine.model), then: systemctl enable --now llmd"
fi
