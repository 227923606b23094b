"""Insurance for a long run against a lost machine: the newest whole checkpoint's adapter, cast to bfloat16 (half
the size; what `lora.adapter=` needs to go on from it), with its config and trainer state, copied into a folder of
the tree for one commit of its own; the next commit takes the weights out again (.gitignore keeps *.safetensors out
unless added with -f). Never optimizer, scheduler or RNG state.

    DEST=benchmarks/gsm8k_learning/qwen2.5_coder_0.5b/d2/insurance
    python benchmarks/gsm8k_learning/insure_adapter.py ../runs/d2 $DEST
    git add -f $DEST && git commit -m "d2: step-N adapter (insurance)"
    git rm -q --cached $DEST/adapter_model.safetensors && git commit -m "d2: insurance adapter out of the tree"
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

from grpo_cli.runs.checkpoints import newest_complete


def main(run_dir: Path, dest: Path) -> None:
    checkpoint, _ = newest_complete(run_dir)
    if checkpoint is None:
        raise SystemExit(f"no whole checkpoint in {run_dir}")
    dest.mkdir(parents=True, exist_ok=True)
    tensors = load_file(checkpoint / "adapter_model.safetensors")
    save_file({name: t.bfloat16().contiguous() for name, t in tensors.items()}, dest / "adapter_model.safetensors")
    for name in ("adapter_config.json", "trainer_state.json"):
        shutil.copy(checkpoint / name, dest / name)
    (dest / "FROM").write_text(f"{checkpoint.name}\n")
    print(f"{checkpoint} -> {dest} ({(dest / 'adapter_model.safetensors').stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
