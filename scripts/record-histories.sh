#!/bin/sh
# Records replay fixtures into test/history/<release>/ from fresh runs of the current workflows.
# Record a new release directory when workflow code changes (guarding the change with patched()),
# keep the older directories while runs of those releases may be in flight, and commit them all.
set -e
[ -n "$1" ] || { echo "usage: $0 <release, e.g. v3>" >&2; exit 2; }
cd "$(dirname "$0")/.."
RECORD_HISTORIES="$1" npx vitest run test/e2e/replay.test.ts
