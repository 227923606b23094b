#!/usr/bin/env bash
# The shipped demo with an absurd learning rate and the health watch's halt set: which signature stops it, at which
# step, what is saved; then `--resume` from what was saved with a sane learning rate. Appends the console's health
# lines, exit codes and checkpoints to benchmarks/health_halt_demo.txt. Run folders are temporary.
#   bash benchmarks/health_halt_demo.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$root/benchmarks/health_halt_demo.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
halt=(recipes/demo.yaml training.learning_rate=1000 training.save_steps=1 training.max_steps=8
  "training.health.halt_on=[nan,no_signal,collapse,divergence]" "training.output_dir=$work/run")
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD), $(lscpu | awk -F: '/^Model name/{gsub(/^ +/, "", $2); print $2}'), $(nproc) cores"
  echo "\$ grpo train ${halt[*]/$work/\$TMP}"
} >> "$out"
grpo train "${halt[@]}" > "$work/first.log" 2>&1
echo "exit $?" >> "$out"
grep -E "^health:|^halted|Traceback|Error" "$work/first.log" | sed "s#$work#\$TMP#g" >> "$out"
echo "saved: $(cd "$work/run" && ls -d checkpoint-* 2>/dev/null | xargs)" >> "$out"
resume=("${halt[@]}" --resume training.learning_rate=1e-5)
echo "\$ grpo train ${resume[*]/$work/\$TMP}" >> "$out"
grpo train "${resume[@]}" > "$work/resume.log" 2>&1
echo "exit $?" >> "$out"
grep -E "^resuming|^health:|^halted|^saved|Traceback|Error" "$work/resume.log" | sed "s#$work#\$TMP#g" >> "$out"
echo "saved: $(cd "$work/run" && ls -d checkpoint-* final 2>/dev/null | xargs)" >> "$out"
tail -n 20 "$out"
