#!/usr/bin/env bash
# Whether the memory mimalloc gives back with MADV_FREE (grpo_cli/process/allocator.py) is memory a run needs: one
# benchmarks/plan_for_data.py case run inside a memory cgroup (v1, as root) capped at a number of GiB. Pages given back
# with MADV_FREE count in the process's RSS until the kernel needs them: whether the kernel takes them back before it
# kills the run for memory is the question. One line per run is appended to benchmarks/allocator_purge_cgroup.txt: the cap,
# the case, the exit status, the cgroup's own peak usage, how many processes the kernel killed for memory, and the run's peak RSS.
#   bash benchmarks/allocator_purge_cgroup.sh 3.05 full_gc_c128                               # MADV_DONTNEED
#   bash benchmarks/allocator_purge_cgroup.sh 3.05 full_gc_c128 MIMALLOC_PURGE_DECOMMITS=0    # MADV_FREE
# (the cap in GiB; plan_for_data.py runs with MIMALLOC_PURGE_DECOMMITS=1 unless told otherwise)
set -euo pipefail
limit=$(awk -v g="${1:?"the cap in GiB"}" 'BEGIN {printf "%.0f", g * 2^30}')
case=${2:?"a benchmarks/plan_for_data.py case"}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/benchmarks/allocator_purge_cgroup.txt"
rows=$(mktemp)
wrapper=$(mktemp -d)
cgroup=/sys/fs/cgroup/memory/grpo-purge-$$
mkdir "$cgroup"
trap 'rmdir "$cgroup"; rm -rf "$rows" "$wrapper"' EXIT
echo "$limit" > "$cgroup/memory.limit_in_bytes"
echo "$limit" > "$cgroup/memory.memsw.limit_in_bytes" 2>/dev/null || true  # no swapping out instead
# Only `grpo train` joins the cgroup (not plan_for_data.py, which holds a tokenizer): a `grpo` first on PATH that
# moves itself in, then runs the real one.
printf '#!/usr/bin/env bash\necho $$ > %s/cgroup.procs\nexec %s "$@"\n' "$cgroup" "$(command -v grpo)" > "$wrapper/grpo"
chmod +x "$wrapper/grpo"
export PATH="$wrapper:$PATH"
status=0
env "$@" python "$root/benchmarks/plan_for_data.py" --case "$case" --results "$rows" > /dev/null 2>&1 || status=$?
peak=$(awk '{printf "%.3f", $1 / 2^30}' "$cgroup/memory.max_usage_in_bytes")
limit_gib=$(awk '{printf "%.3f", $1 / 2^30}' "$cgroup/memory.limit_in_bytes")
kills=$(awk '/^oom_kill /{print $2}' "$cgroup/memory.oom_control")
rss=$(python -c "import json, sys; rows = open(sys.argv[1]).read().splitlines(); print(json.loads(rows[-1])['measured_peak_rss_gib'] if rows else 'none')" "$rows")
line="$(date -u +%Y-%m-%dT%H:%MZ)  commit $(git -C "$root" rev-parse --short HEAD)  $case  env [${*:-}]  cap $limit_gib GiB  exit $status  cgroup peak $peak GiB  processes killed by the kernel $kills  run's peak RSS $rss GiB"
echo "$line" | tee -a "$out"
