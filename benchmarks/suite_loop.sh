#!/usr/bin/env bash
# README command 2 (install, then the test suite), word for word, in a fresh clone and a fresh virtual environment,
# then its test part again until N runs have passed in a row or one fails: flaky tests show up here, not in CI.
# One line per run is appended to benchmarks/suite_loop.txt (the commit, seconds, pytest's summary); a failing run's
# log is kept beside it as suite_loop_failure.log. Run it on an otherwise idle machine: the suite times its runs.
#   bash benchmarks/suite_loop.sh [N]        # N defaults to 10
set -euo pipefail
runs=${1:-10}
. "$(dirname "$0")/fresh_clone_env.sh"
out="$root/benchmarks/suite_loop.txt"
command=$(awk '/^```bash$/{n++} n==2{getline; print; exit}' README.md)
tests=${command##*&& }  # the test part of the command: "python -m pytest -q"
[[ $tests == *pytest* ]] || { echo "README command 2 has no pytest part: $command" >&2; exit 1; }
{
  echo "# bash benchmarks/suite_loop.sh $runs   ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD))"
  echo "# README command 2: $command"
  echo "# $(lscpu | awk -F: '/^Model name/{gsub(/^ +/, "", $2); print $2}'), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg) at start"
} >> "$out"
for i in $(seq 1 "$runs"); do
  step=$([[ $i == 1 ]] && echo "$command" || echo "$tests")
  start=$(date +%s)
  status=0
  bash -c "$step" > "$work/run.log" 2>&1 || status=$?
  seconds=$(( $(date +%s) - start ))
  summary=$(grep -E "^(=+ )?[0-9]+ (passed|failed)" "$work/run.log" | tail -1 | tr -d '=' | xargs || true)
  echo "run $i/$runs  exit $status  ${seconds} s  ${summary:-no pytest summary}$([[ $i == 1 ]] && echo '  (with the install)')" | tee -a "$out"
  if [[ $status != 0 ]]; then
    cp "$work/run.log" "$root/benchmarks/suite_loop_failure.log"
    echo "# stopped at the first failure: benchmarks/suite_loop_failure.log" >> "$out"
    exit 1
  fi
done
echo "# $runs runs in a row passed" >> "$out"
