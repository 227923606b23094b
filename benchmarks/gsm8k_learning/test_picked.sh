#!/bin/bash
# The test set once, on the checkpoint validation picked (pick_checkpoint.py: the highest held-out flexible-extract):
# base and trained on every problem of TEST with the validation's settings (greedy, 512 new tokens, the recipe's
# precision and engine), then lm-eval's two regexes over the same predictions (the judge). Both evaluations
# resume their folders when run again. BASE, optional, is a base evaluation made beforehand with the same settings
# (`grpo eval` refuses one that differs); without it the base is evaluated here, in OUT/checkpoint-N/base.
#
#   KEEP=../runs/d2-keep VAL_OUT=../runs/d2-val BASE=../runs/d2-test/base OUT=../runs/d2-test \
#   TEST=../shared/data/gsm8k/test.jsonl M=$(bash benchmarks/models/qwen2.5_coder_0.5b.sh) \
#   benchmarks/gsm8k_learning/test_picked.sh
#
# Its own lines go to stdout, with times; the picked checkpoint's comparison lands in OUT/checkpoint-N.
set -euo pipefail
: "${KEEP:?} ${VAL_OUT:?} ${OUT:?} ${TEST:?} ${M:?}"
say() { echo "$(date -u +%H:%M:%S) $*"; }
HERE=$(dirname "$0")

STEP=$(python "$HERE/pick_checkpoint.py" "$VAL_OUT")
RESULT=$OUT/checkpoint-$STEP
BASE_ARGS=() BASE_DIR=$RESULT/base
if [ -n "${BASE:-}" ]; then BASE_ARGS=(--base "$BASE") BASE_DIR=$BASE; fi
say "validation picked checkpoint-$STEP; testing it on $TEST"
grpo eval compare "$KEEP/checkpoint-$STEP" model.name="$M" "${BASE_ARGS[@]}" --data "$TEST" \
    eval.max_new_tokens=512 --output "$RESULT"
say "lm-eval's regexes on the same predictions"
python "$HERE/../lm_eval_rescore.py" "$BASE_DIR" "$RESULT/trained" --json "$RESULT/lm_eval_rescore.json"
say "done"
