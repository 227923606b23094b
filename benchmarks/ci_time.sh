#!/usr/bin/env bash
# CI's own time: .ci/run (both virtual environments, lint, the whole suite, the vLLM leg) in a fresh clone of HEAD,
# pip's download cache as it is. One line is appended to benchmarks/ci_time.txt: date, commit, CPU, seconds, exit
# status and the two pytest summary lines. Run it with nothing else on the machine.
#   bash benchmarks/ci_time.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/grpo"
cd "$work/grpo"
start=$(date +%s)
status=0
.ci/run > "$work/ci.log" 2>&1 || status=$?
seconds=$(( $(date +%s) - start ))
summaries=$(grep -E "^(=+ )?[0-9]+ (passed|failed)" "$work/ci.log" | tr -d '=' | sed 's/^ *//; s/ *$//' | paste -sd ';' - || true)
cpu=$(lscpu | awk -F: '/^Model name/{gsub(/^ +/, "", $2); print $2}')
printf "%s  commit %s  %s, %s cores  %d s (%d:%02d)  exit %d  %s\n" "$(date -u +%Y-%m-%dT%H:%MZ)" \
  "$(git rev-parse --short HEAD)" "$cpu" "$(nproc)" "$seconds" $((seconds / 60)) $((seconds % 60)) "$status" \
  "${summaries:-no pytest summary}" | tee -a "$root/benchmarks/ci_time.txt"
[[ $status == 0 ]] || { tail -40 "$work/ci.log" >&2; exit "$status"; }
