#!/usr/bin/env bash
# Prepares this machine for Dockyard: system packages (when root and missing) and .venv.
#   scripts/setup.sh          runtime only (the quick start)
#   scripts/setup.sh --dev    also the test tools, the pulumi extra and the test services' packages
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[ "${1:-}" = "--dev" ] && dev=1

need=()
command -v git >/dev/null || need+=(git)
if [ "$dev" = 1 ]; then
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
  command -v ssh >/dev/null || need+=(openssh-client)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  command -v chromium >/dev/null || need+=(chromium)
  command -v firefox-esr >/dev/null || need+=(firefox-esr)  # the console's tests drive both browsers
  command -v ip >/dev/null || need+=(iproute2)
  [ -x /bin/busybox ] || need+=(busybox-static)  # the Docker test image is made from it
  command -v wrk >/dev/null || need+=(wrk)  # bench/proxy*.py: a load generator in C
fi
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "setup: missing system packages (${need[*]}); tests that need them will be skipped" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q -U pip
fi
extras="."
[ "$dev" = 1 ] && extras=".[dev,pulumi]"
.venv/bin/pip install -q -e "$extras"
