#!/usr/bin/env bash
# How long the built CLI takes to answer commands that need no server, against the floor of
# starting Node at all. Target: help and validate under 300 ms here.
#   npm run build && bench/cli.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
[ -f dist/cli/index.js ] || { echo "bench: run \`npm run build\` first" >&2; exit 2; }

# Median wall time of a command in milliseconds, over $runs runs.
median_ms() {
  local times=()
  for _ in $(seq "$runs"); do
    local start end
    start=$(date +%s%N)
    "$@" >/dev/null 2>&1 || true
    end=$(date +%s%N)
    times+=($(( (end - start) / 1000000 )))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

printf '%-40s %6s\n' command 'ms'
printf '%-40s %6s\n' 'node -e 0' "$(median_ms node -e 0)"
printf '%-40s %6s\n' 'flotilla help' "$(median_ms node bin/flotilla help)"
printf '%-40s %6s\n' 'flotilla start --help' "$(median_ms node bin/flotilla start --help)"
printf '%-40s %6s\n' 'flotilla validate examples/request.yaml' "$(median_ms node bin/flotilla validate examples/request.yaml)"
printf '%-40s %6s\n' 'flotilla schema' "$(median_ms node bin/flotilla schema)"
