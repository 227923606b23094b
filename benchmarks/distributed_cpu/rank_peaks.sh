#!/usr/bin/env bash
# Each rank's peak resident set (VmHWM) during a 2-process CPU run of the demo, beside `grpo plan`'s per-process figure.
#   bash benchmarks/distributed_cpu/rank_peaks.sh ddp|zero2|zero3|fsdp OUT_DIR
# ZeRO needs DeepSpeed (pip install deepspeed); its CPU accelerator and shared-memory communication run here.
set -uo pipefail
strategy=$1 out=$2
mkdir -p "$out"
grpo plan recipes/demo.yaml distributed.num_processes=2 "distributed.strategy=$strategy" > "$out/plan.txt" 2>&1
grpo train recipes/demo.yaml --num-processes 2 --strategy "$strategy" training.max_steps=2 \
    "training.output_dir=$out/run" > "$out/train.txt" 2>&1 &
launcher=$!
declare -A peak
while kill -0 "$launcher" 2>/dev/null; do
    for status in /proc/[0-9]*/status; do
        pid=${status#/proc/}; pid=${pid%/status}
        tr '\0' ' ' < "/proc/$pid/environ" 2>/dev/null | grep -q "GRPO_LAUNCHED=1" || continue
        tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-m grpo_cli train" || continue
        rank=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | sed -n 's/^RANK=//p')
        [ -n "$rank" ] || continue
        kb=$(sed -n 's/^VmHWM:\s*\([0-9]*\) kB/\1/p' "$status" 2>/dev/null)
        [ -n "$kb" ] && [ "$kb" -gt "${peak[$rank]:-0}" ] && peak[$rank]=$kb
    done
    sleep 0.5
done
wait "$launcher"; code=$?
{
    echo "strategy $strategy, exit $code"
    for rank in "${!peak[@]}"; do awk -v r="$rank" -v kb="${peak[$rank]}" 'BEGIN{printf "rank %s peak RSS %.2f GiB\n", r, kb/1048576}'; done
    grep -E "peak RSS|peak tensors|expected" "$out/plan.txt"
} | tee "$out/summary.txt"
