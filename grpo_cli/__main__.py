"""`python -m grpo_cli`: how `accelerate launch` starts each rank of a multi-process run."""

import os
import sys

# `python -m` puts the working folder first on sys.path, where a user's own `rewards/` (or `trl/`) folder would
# shadow the packages grpo runs on. Keep the folder, after them: dotted reward modules beside the recipe still import.
if sys.path and sys.path[0] in ("", ".", os.getcwd()):
    sys.path.append(sys.path.pop(0))

from grpo_cli.cli import entry  # noqa: E402

entry()
