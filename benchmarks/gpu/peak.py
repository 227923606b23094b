"""Run a Python module or script in this process and write its peak memory to a JSON file when it ends.

    python benchmarks/gpu/peak.py RESULT.json -m grpo_cli train recipe.yaml
    python benchmarks/gpu/peak.py RESULT.json benchmarks/plain_trl.py MODEL 5 OUT

CUDA: `torch.cuda.max_memory_allocated` / `max_memory_reserved`; everywhere: the process's peak RSS.
"""

import json
import os
import resource
import runpy
import sys

# The command runs inside this process, which must live on to write its peak: grpo's CPU re-execution with mimalloc
# (grpo_cli/process/allocator.py) would replace it. Both sides of a comparison then use the same malloc.
os.environ.setdefault("GRPO_ALLOCATOR", "system")

result_file, *command = sys.argv[1:]
code = 0
try:
    if command[0] == "-m":
        sys.argv = [command[1], *command[2:]]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = command
        runpy.run_path(command[0], run_name="__main__")
except SystemExit as stop:  # typer ends every command with SystemExit
    code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
finally:
    peaks = {"rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        peaks.update(
            cuda_allocated_gib=torch.cuda.max_memory_allocated() / 2**30,
            cuda_reserved_gib=torch.cuda.max_memory_reserved() / 2**30,
        )
    with open(result_file, "w") as fh:
        json.dump(peaks, fh)
sys.exit(code)
