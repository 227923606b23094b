#!/bin/bash
# A long run's validation at one step, unattended: wait until checkpoint-STEP is whole (the run's log shows the next
# step begun), stop the run (SIGKILL right after a checkpoint loses nothing), keep the checkpoint whole beside the run
# (its save_total_limit would delete it: validation picks the test's checkpoint from these), compare it with the
# shared base evaluation on the held-out rows, then start the training command again (it should say --resume).
#
#   RUN=../runs/d2 KEEP=../runs/d2-keep OUT=../runs/d2-val VAL=val300.jsonl BASE=../runs/d2-val/checkpoint-25/base \
#   M=$(bash benchmarks/models/qwen2.5_coder_0.5b.sh) \
#   benchmarks/gsm8k_learning/validate_at.sh 50 ../runs/d2.log ../runs/d2.after50.log -- grpo train RECIPE ... --resume
#
# At the run's last step (max_steps) it waits for the run to end instead, and the command after `--` is left out.
#
# DRY=1 prints what it would stop, evaluate and start instead of doing it. Its own lines go to stdout, with times.
set -euo pipefail
STEP=$1 LOG=$2 NEXT_LOG=$3
shift 3
[ "${1:-}" = "--" ] && shift
: "${RUN:?} ${KEEP:?} ${OUT:?} ${VAL:?} ${BASE:?} ${M:?}"
say() { echo "$(date -u +%H:%M:%S) $*"; }
run() { if [ "${DRY:-0}" = 1 ]; then say "would run: $*"; else "$@"; fi; }

training_pid() { pgrep -f -- "grpo_cli train .*training.output_dir=$RUN( |$)" | head -1 || true; }

# The last step has no next step to wait for: there the run's own exit, with the checkpoint saved, says it is whole.
say "waiting for checkpoint-$STEP of $RUN (step $((STEP + 1)) in $LOG, or the run ended)"
until grep -q "step $((STEP + 1))/" "$LOG" || { [ -z "$(training_pid)" ] && [ -d "$RUN/checkpoint-$STEP" ]; }; do
    sleep 20
done
PID=$(training_pid)
if [ -n "$PID" ]; then
    say "stopping the run (pid $PID) after checkpoint-$STEP"
    run pkill -9 -P "$PID" || true
    run kill -9 "$PID"
    sleep 5
elif [ ! -d "$RUN/checkpoint-$STEP" ]; then
    say "no training process for $RUN and no checkpoint-$STEP; stopping here"
    exit 1
else
    say "the run has ended; checkpoint-$STEP is its last"
fi
run mkdir -p "$KEEP"
run cp -r "$RUN/checkpoint-$STEP" "$RUN/recipe.yaml" "$KEEP/"  # with the recipe KEEP reads as a run folder
say "validating checkpoint-$STEP"
run grpo eval compare "$RUN/checkpoint-$STEP" model.name="$M" --base "$BASE" --data "$VAL" --limit 300 \
    eval.max_new_tokens=512 --output "$OUT/checkpoint-$STEP"
if [ $# -eq 0 ]; then say "done (no command to start after it)"; exit 0; fi
say "starting the run again: $*"
if [ "${DRY:-0}" = 1 ]; then say "would run: $* > $NEXT_LOG"; else nohup "$@" > "$NEXT_LOG" 2>&1 & fi
say "done"
