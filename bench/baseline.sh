#!/bin/bash
# The job Flotilla does, as the shortest honest bash script: clone, one `git worktree add` per
# sub-task, the agents in parallel, `git merge` of each branch in turn, the tests, `git push`.
# No isolation, no durability, no checks: the floor Flotilla's overhead is measured against.
#
#   baseline.sh REMOTE WORKDIR N AGENT_SECONDS
# Prints "phase <name> <seconds>" lines for the table: seed (the first worktree), integrate (all
# merges), total, and the parts of the physical limit of a fan-out (the longest agent, one merge,
# one test, one push): agent, merge, test, push.
set -euo pipefail
remote=$1 work=$2 n=$3 secs=$4
now() { date +%s.%N; }
phase() { awk -v a="$(now)" -v b="$2" -v n="$1" 'BEGIN { printf "phase %s %.3f\n", n, a - b }'; }
t0=$(now)
git clone -q "$remote" "$work/main"
cd "$work/main"
git config user.name bench && git config user.email bench@localhost
for i in $(seq 1 "$n"); do
  t=$(now)
  git worktree add -q -b "task$i" "$work/wt$i" HEAD
  [ "$i" = 1 ] && phase seed "$t"
done
for i in $(seq 1 "$n"); do
  ( t=$(now) && cd "$work/wt$i" && sleep "$secs" && mkdir -p "t$i" && echo "hello from $i" > "t$i/out.txt" &&
    git add -A && git commit -qm "task $i" && phase agent "$t" > "$work/agent$i" ) &
done
wait
sort -k3 -g "$work"/agent* | tail -1
t=$(now)
for i in $(seq 1 "$n"); do
  m=$(now)
  git merge -q --no-edit "task$i"
  [ "$i" = 1 ] && phase merge "$m"
done
phase integrate "$t"
t=$(now)
true   # the test command Flotilla runs too
phase test "$t"
t=$(now)
git push -q origin HEAD:refs/heads/bench-$$
phase push "$t"
phase total "$t0"
