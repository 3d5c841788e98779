#!/usr/bin/env bash
# Installs Gantry's daemons as systemd units on this host (root; idempotent).
#   deploy/systemd/install.sh [--build DIR] [--prefix /usr/local] ROLE...
# ROLE: coordinator, shardserver, worker (any of them). Copies the binaries to PREFIX/bin,
# the units and gantry.target to /etc/systemd/system, writes /etc/gantry/ROLE.env from the
# unit's defaults when it does not exist yet (edit it: addresses, device), then enables
# and starts gantry.target with the roles' units.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$ROOT/build"; PREFIX=/usr/local; ROLES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --prefix) PREFIX="$2"; shift 2 ;;
    coordinator|shardserver|worker) ROLES+=("$1"); shift ;;
    *) echo "install.sh: unknown argument '$1' (roles: coordinator, shardserver, worker)" >&2; exit 2 ;;
  esac
done
[ ${#ROLES[@]} -gt 0 ] || { echo "install.sh: name at least one role: coordinator, shardserver, worker" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "install.sh: run as root (it writes /etc/systemd/system)" >&2; exit 1; }
install -d "$PREFIX/bin" /etc/gantry
install -m 0644 "$ROOT/deploy/systemd/gantry.target" /etc/systemd/system/gantry.target
for role in "${ROLES[@]}"; do
  bin="$BUILD/$role/gantry-$role"
  [ -x "$bin" ] || { echo "install.sh: $bin is missing: build first (scripts/build.sh)" >&2; exit 1; }
  install -m 0755 "$bin" "$PREFIX/bin/gantry-$role"
  sed "s|/usr/local/bin/|$PREFIX/bin/|" "$ROOT/deploy/systemd/gantry-$role.service" >"/etc/systemd/system/gantry-$role.service"
  env="/etc/gantry/$role.env"
  if [ ! -f "$env" ]; then  # the unit's defaults, one per line, to edit
    { echo "# gantry-$role: settings read by its unit (systemctl restart gantry-$role after a change)"
      sed -n 's/^Environment=//p' "$ROOT/deploy/systemd/gantry-$role.service" | tr ' ' '\n'; } >"$env"
  fi
done
install -m 0755 "$BUILD/cli/gantry" "$PREFIX/bin/gantry"
systemctl daemon-reload
systemctl enable gantry.target "${ROLES[@]/#/gantry-}"
systemctl restart gantry.target "${ROLES[@]/#/gantry-}"
echo "installed: ${ROLES[*]}; systemctl status 'gantry-*' shows them; settings in /etc/gantry/"
