#!/usr/bin/env bash
# recipes/demo_judge.yaml for 2 real steps on this CPU: the process's peak RSS (GNU time) beside the plan's CPU
# figure for the same recipe (`grpo plan --device cpu`), into benchmarks/judge_run.txt. The run folder is a
# temporary one and is removed.
#   bash benchmarks/judge_run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/judge_run.txt
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
planned=$(grpo plan recipes/demo_judge.yaml --device cpu --json | python3 -c 'import json, sys; p = json.load(sys.stdin); print(json.dumps({k: p[k] for k in ("peak_rss_gib", "peak_tensors_gib", "prompt_tokens", "completion_tokens")}))')
/usr/bin/time -f "%M %e" -o "$run/time" grpo train recipes/demo_judge.yaml training.max_steps=2 training.save_steps=100 \
  "training.output_dir=$run/out" > "$run/log" 2>&1
read -r kib seconds < "$run/time"
{
  echo "# bash benchmarks/judge_run.sh, $(date -u +%F), commit $(git rev-parse --short HEAD), $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p')"
  echo "# grpo train recipes/demo_judge.yaml training.max_steps=2 (SmolLM2-135M-Instruct, Q4_1 .gguf dequantized, float32;"
  echo "# the policy is its own yes/no judge), peak RSS by GNU time (ru_maxrss of the process, mimalloc as grpo runs it)"
  echo "measured peak RSS: $(python3 -c "print(f'{$kib / 1024**2:.3f}')") GiB; wall ${seconds} s (loading, 2 steps, saving)"
  echo "planned (grpo plan recipes/demo_judge.yaml --device cpu --json): $planned"
  python3 -c "import json; p = json.loads('$planned')['peak_rss_gib']; m = $kib / 1024**2; print(f'plan error: {100 * (p - m) / m:+.1f}% (planned {p:.3f} GiB against measured {m:.3f} GiB)')"
  python3 - "$run/out" <<'PY'
import json, sys
from pathlib import Path
rows = [json.loads(line) for line in (Path(sys.argv[1]) / "metrics.jsonl").read_text().splitlines()]
for row in rows:
    keep = {k: row[k] for k in row if k in ("step", "loss", "reward") or k.startswith(("rewards/", "scoring/")) or "rss" in k}
    print("step", json.dumps(keep))
PY
} > "$out"
cat "$out"
