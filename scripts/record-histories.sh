#!/bin/sh
# Regenerates the replay fixtures in test/history/ from fresh runs of this release's workflows.
# Run it only after a deliberate change to workflow code (guarded with patched() for runs in
# flight), and commit the result with that change.
set -e
cd "$(dirname "$0")/.."
RECORD_HISTORIES=1 npx vitest run test/replay.test.ts
