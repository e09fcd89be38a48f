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
# process jobs of a root agent run in a bubblewrap sandbox (docs/security.md)
command -v bwrap >/dev/null || need+=(bubblewrap)
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
  # a one-node Slurm cluster for the Slurm backend's tests (tests/services/slurm.py)
  command -v slurmctld >/dev/null || need+=(slurmctld)
  command -v slurmd >/dev/null || need+=(slurmd)
  command -v sinfo >/dev/null || need+=(slurm-client)
  command -v munged >/dev/null || need+=(munge)
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

# The Python side installs exactly what the lock names (requirements/*.txt, hashed; made by
# scripts/lock.sh from pyproject.toml's ranges), so a fresh machine gets what CI tested.
# The runtime lock is a subset of the dev lock (compiled with it as a constraint), so a venv
# made for the tests also serves the quick start. When the lock changes the venv is made
# anew: nothing stays from an older install.
lock=requirements/runtime.txt
[ "$dev" = 1 ] && lock=requirements/dev.txt
# what the venv was made from: the locks (pyproject's ranges are not read: --no-deps)
digest() { cat requirements/build.txt requirements/lock-tools.txt "$1" | sha256sum | cut -d' ' -f1; }
stamp=.venv/.dockyard-lock
have=$(cat "$stamp" 2>/dev/null || true)
want="$(basename "$lock"):$(digest "$lock")"
if [ "$dev" = 0 ] && [ "$have" = "dev.txt:$(digest requirements/dev.txt)" ]; then
  want=$have  # the dev lock holds the runtime's pins
fi
if [ "$have" != "$want" ]; then
  [ -e .venv ] && { echo "setup: the lock changed; making .venv anew"; rm -rf .venv; }
  echo "setup: installing $lock into .venv"
  python3 -m venv .venv
  # pip's and uv's own chatter (this machine's index settings, setuptools' notes) goes to a
  # log that is shown only when a step fails
  log=$(mktemp "${TMPDIR:-/tmp}/dockyard-setup.XXXXXX")
  pip() { .venv/bin/python -m pip --disable-pip-version-check "$@" >>"$log" 2>&1 \
    || { cat "$log" >&2; echo "setup: pip $* failed (log above)" >&2; exit 1; }; }
  # uv (itself pinned and hashed in requirements/lock-tools.txt) installs the same hashed
  # pins as pip would, about ten times faster (≈10 s against ≈140 s for the dev lock on a
  # 2-core machine); where uv cannot reach an index, pip installs them instead.
  pip install -q --require-hashes --no-deps -r requirements/lock-tools.txt
  # --compile-bytecode: pip compiles what it installs, uv only when asked; where
  # PYTHONDONTWRITEBYTECODE is set (CI images often set it) nothing is ever compiled later,
  # and every process (each server, agent and CLI a test starts) would compile its imports
  # anew: about twice the CPU per start.
  uvi() { .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "$@" \
    >>"$log" 2>&1; }
  if uvi --require-hashes --no-deps -r requirements/build.txt \
    && uvi --require-hashes --no-deps -r "$lock" \
    && uvi --no-deps --no-build-isolation -e .; then
    :
  else
    echo "setup: uv could not install the lock; installing it with pip" >&2
    pip install -q --require-hashes --no-deps -r requirements/build.txt
    pip install -q --require-hashes --no-deps -r "$lock"
    pip install -q --no-deps --no-build-isolation -e .
  fi
  pip check
  rm -f "$log"
  echo "$want" >"$stamp"
fi
# Our own modules compiled too (only what changed since the last run), for the same reason.
.venv/bin/python -m compileall -q -j 0 agent reconciler schemas stacks >/dev/null
