"""The checkpoint the test set is run on, picked by validation alone: the highest flexible-extract on the held-out rows.

Reads every `checkpoint-N/comparison.json` under the validation folder (the `--output` folders of `grpo eval
--compare`, all on one base evaluation), prints the table to stderr and the picked step to stdout. A tie goes to the
earlier step: the same held-out accuracy with less drift from the base. The test set is never read here.

    STEP=$(python benchmarks/gsm8k_learning/pick_checkpoint.py ../runs/d2-val)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validation_curve import read_points, table  # noqa: E402

PICK_FILTER = "flexible-extract"  # the goal filter; strict-match is reported beside it, not picked on


def validated_steps(folder: Path) -> list[str]:
    """STEP=DIR for each checkpoint-N folder that holds a finished comparison."""
    specs = []
    for path in sorted(folder.glob("checkpoint-*/comparison.json")):
        match = re.fullmatch(r"checkpoint-(\d+)", path.parent.name)
        if match:
            specs.append(f"{match.group(1)}={path.parent}")
    return specs


def pick(points: list[tuple[int, dict]]) -> int:
    """The step with the highest trained accuracy; points come in step order, so max() keeps the earliest tie."""
    best = max(points, key=lambda point: point[1]["filters"][PICK_FILTER]["trained"])
    return best[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("validation", type=Path, help="folder of checkpoint-N comparison folders")
    args = parser.parse_args()
    specs = validated_steps(args.validation)
    if not specs:
        sys.exit(f"{args.validation}: no checkpoint-N/comparison.json; run the validations first")
    points = read_points(specs)
    step = pick(points)
    print(table(points), end="", file=sys.stderr)
    print(f"picked by validation {PICK_FILTER}: step {step}", file=sys.stderr)
    print(step)


if __name__ == "__main__":
    main()
