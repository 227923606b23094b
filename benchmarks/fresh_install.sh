#!/usr/bin/env bash
# README command 1, word for word, in a fresh clone and a fresh virtual environment with an empty model cache:
# seconds until pip is done and until the demo's first training step; then the run is stopped.
#   bash benchmarks/fresh_install.sh
set -euo pipefail
. "$(dirname "$0")/fresh_clone_env.sh"
command=$(awk '/^```bash$/{getline; print; exit}' README.md)
echo "README command 1: $command"
start=$(date +%s.%N)
: > "$work/out.log"
setsid bash -c "$command" > "$work/out.log" 2>&1 &
pid=$!
first_step=""
installed=""
while kill -0 "$pid" 2>/dev/null; do
  if [[ -z $installed ]] && grep -q "^grpo train" "$work/out.log"; then
    installed=$(echo "$(date +%s.%N) - $start" | bc)
  fi
  if grep -q "^step 1/" "$work/out.log"; then
    first_step=$(echo "$(date +%s.%N) - $start" | bc)
    kill -- -"$pid" 2>/dev/null || true
    break
  fi
  sleep 0.5
done
wait "$pid" 2>/dev/null || true
echo "--- first lines the user sees after pip:"
sed -n '/^grpo train/,$p' "$work/out.log" | head -5
echo "--- compiled packages in the environment: $(pip list 2>/dev/null | grep -ci llama || true) llama* package(s)"
printf "install done (first line of grpo train): %.0f s\n" "${installed:-nan}"
printf "first training step reached:            %.0f s\n" "${first_step:-nan}"
[[ -n $first_step ]]
