#!/usr/bin/env bash
# Screenshots of what a user sees of gated runs in the Temporal Web UI, for the README:
#   docs/webui-awaiting.png   the workflow list filtered by FlotillaAwaiting
#   docs/webui-run.png        a run at the push gate: summary, details and the command that passes it
#   docs/webui-search-attributes.png   that run's search attributes
#
#   scripts/webui-screenshots.sh            (needs Debian's chromium; not run in CI)
#
# Starts its own worker, with an embedded Temporal dev server on a free port and a throwaway
# FLOTILLA_HOME, runs three small scripted runs through the CLI (one at the plan gate, one at the
# push gate, one finished), takes the screenshots with headless Chromium, and stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/docs}
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[ -n "$CHROMIUM" ] || { echo "needs chromium (apt-get install chromium)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/flotilla-screenshots-XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1] % 20000 + 20000)')
export FLOTILLA_HOME=$WORK/home FLOTILLA_TEMPORAL_PORT=$PORT FLOTILLA_TASK_QUEUE=screenshots TEMPORAL_ADDRESS=
UI=http://127.0.0.1:$((PORT + 1000))
TSX=(node --require "$ROOT/node_modules/tsx/dist/cjs/index.cjs")
flotilla() { "${TSX[@]}" "$ROOT/src/cli/index.ts" "$@"; }

WORKER_PID=
cleanup() {
  # The worker stops the embedded server it started when it exits.
  [ -n "$WORKER_PID" ] && kill "$WORKER_PID" 2>/dev/null && wait "$WORKER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- A small repository and its "remote" ----
git init -q -b main "$WORK/project"
git -C "$WORK/project" -c user.name=demo -c user.email=demo@example.com commit -q --allow-empty -m initial
git clone -q --bare "$WORK/project" "$WORK/shop.git"

request() { # id objective plan-gate push-gate
  cat > "$WORK/$1.yaml" <<EOF
objective: $2
repo: { url: "$WORK/shop.git", baseRef: main, targetRef: flotilla/$1 }
testCmd: test -f api/orders.js
gates: { plan: { mode: $3 }, push: { mode: $4 } }
subTasks:
  - id: api
    prompt: Validate the body of POST /orders.
    ownedPaths: [api]
    agent: { kind: shell, command: "mkdir -p api && echo 'module.exports = {}' > api/orders.js && git add -A && git commit -qm orders && echo '::flotilla {\"costUsd\": 0.42}'" }
  - id: web
    prompt: Show validation errors on the order form.
    ownedPaths: [web]
    agent: { kind: shell, command: "mkdir -p web && echo '<form></form>' > web/form.html && git add -A && git commit -qm form && echo '::flotilla {\"costUsd\": 0.31}'" }
EOF
}

# The worker itself, not a wrapper: on SIGTERM it stops, and stops the embedded server it started.
"${TSX[@]}" "$ROOT/src/worker.ts" > "$WORK/worker.log" 2>&1 &
WORKER_PID=$!
until grep -qs 'worker polling' "$WORK/worker.log"; do
  kill -0 "$WORKER_PID" 2>/dev/null || { cat "$WORK/worker.log" >&2; exit 1; }
  sleep 1
done

wait_phase() { # id phase
  until [ "$(flotilla status "$1" --json 2>/dev/null | jq -r .phase)" = "$2" ]; do sleep 1; done
}

request validation 'Add input validation to the order API and form' manual manual
request receipts 'Email a receipt after checkout' manual manual
request discounts 'Apply discount codes at checkout' auto auto
flotilla start "$WORK/discounts.yaml" --id shop-discounts --wait > /dev/null
flotilla start "$WORK/validation.yaml" --id shop-validation > /dev/null
flotilla start "$WORK/receipts.yaml" --id shop-receipts > /dev/null
wait_phase shop-validation awaiting-plan-approval
flotilla approve shop-validation --gate plan --comment "split looks right" > /dev/null
wait_phase shop-validation awaiting-push-approval
wait_phase shop-receipts awaiting-plan-approval
# Visibility lags a moment behind the runs.
until [ "$(flotilla list --awaiting --json | jq length)" = 2 ]; do sleep 1; done

shoot() { # file url text-it-must-show...
  node --experimental-websocket "$ROOT/scripts/screenshot.mjs" "$CHROMIUM" "$2" "$1" "${@:3}"
}
mkdir -p "$OUT"
QUERY=$(jq -rn --arg q "FlotillaAwaiting IN ('plan', 'push', 'answer')" '$q|@uri')
shoot "$OUT/webui-awaiting.png" "$UI/namespaces/default/workflows?query=$QUERY" shop-validation shop-receipts
RUN_ID=$(temporal workflow describe --address "127.0.0.1:$PORT" -w shop-validation -o json | jq -r .workflowExecutionInfo.execution.runId)
RUN=$UI/namespaces/default/workflows/shop-validation/$RUN_ID
shoot "$OUT/webui-run.png" "$RUN/history" --click 'User Metadata' 'Waiting for a person at the push gate'
shoot "$OUT/webui-search-attributes.png" "$RUN/history" --click 'Search Attributes' FlotillaAwaiting awaiting-push-approval
