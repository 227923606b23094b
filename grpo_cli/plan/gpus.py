"""GPU names -> memory (GiB, as the vendors' data sheets give it) for `grpo plan --gpu NAME`; the RAM a CPU run has."""

from __future__ import annotations

import re

from grpo_cli.errors import UserError
from grpo_cli.recipe.machine import HardwareSection

GPUS: dict[str, float] = {
    "RTX 3060": 12,
    "RTX 3080": 10,
    "RTX 3090": 24,
    "RTX 4060 Ti": 16,
    "RTX 4070": 12,
    "RTX 4080": 16,
    "RTX 4090": 24,
    "RTX 5090": 32,
    "RTX A6000": 48,
    "T4": 16,
    "V100": 32,
    "L4": 24,
    "A10G": 24,
    "L40S": 48,
    "A100-40GB": 40,
    "A100-80GB": 80,
    "H100": 80,
    "H200": 141,
    "B200": 180,
    "MI300X": 192,
}


# What `grpo plan --device` plans for: CUDA memory against the GPU's, or peak RSS against RAM.
DEVICES = ("cuda", "cpu")


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def gpu_memory_bytes(spec: str) -> tuple[str, float]:
    """`16GB`, `24 GiB`, `80` or a name from the table -> (label, bytes)."""
    number = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(gib|gb|g)?\s*", spec.lower())
    if number and float(number.group(1)) > 0:
        return f"{number.group(1)} GiB", float(number.group(1)) * 2**30
    if number:
        raise UserError(
            f"GPU memory `{spec}` is zero; give the GPU's memory (e.g. --gpu 24GB) or its name", path="hardware.gpu"
        )
    wanted = _key(spec)
    for name, gib in GPUS.items():
        if (
            _key(name) == wanted
            or _key(name).removeprefix("rtx") == wanted
            or _key(name).removeprefix("nvidia") == wanted
        ):
            return name, gib * 2**30
    raise UserError(
        f"unknown GPU `{spec}`; give its memory (e.g. --gpu 24GB) or one of: {', '.join(GPUS)}", path="hardware.gpu"
    )


def gpu_for(hardware: HardwareSection, flag: str | None) -> tuple[str | None, float | None]:
    """The GPU a command is asked about: its `--gpu` flag, else the recipe's hardware section, else none."""
    spec = flag or hardware.gpu or (f"{hardware.gpu_memory_gb}GB" if hardware.gpu_memory_gb else None)
    return gpu_memory_bytes(spec) if spec else (None, None)


def plan_device(device: str | None, gpu_flag: str | None, ram_flag: str | None) -> str | None:
    """The device `--device` names, checked against `--gpu` and `--ram` (one of them would be dropped silently);
    None: decide by the GPU (given or present)."""
    if device is not None and device.lower() not in DEVICES:
        raise UserError(f"--device {device!r}: give one of {', '.join(DEVICES)}")
    device = device.lower() if device else ("cpu" if ram_flag and not gpu_flag else None)
    if device == "cpu" and gpu_flag:
        raise UserError(
            "--gpu and --device cpu disagree: a CPU run is planned against RAM (--ram); drop --gpu for the CPU plan, "
            "or --device cpu for the GPU's"
        )
    if ram_flag and (device == "cuda" or gpu_flag):
        raise UserError(
            "--ram is for a CPU plan (--device cpu, without --gpu); a GPU plan is checked against the GPU's memory: "
            "drop --ram"
        )
    return device


def has_nvidia_gpu() -> bool:
    """A CUDA GPU on this machine, told without importing torch (plan stays light): its driver is loaded."""
    import os

    return os.path.exists("/proc/driver/nvidia/version")


def ram_for(flag: str | None) -> tuple[str, float]:
    """`--ram 24GB`, or this machine's physical memory."""
    import os

    if flag:
        number = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(gib|gb|g)?\s*", flag.lower())
        if not number or float(number.group(1)) <= 0:
            raise UserError(f"--ram {flag!r}: give the memory as a number of GiB, e.g. --ram 24GB")
        return f"{number.group(1)} GiB of RAM", float(number.group(1)) * 2**30
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"this machine's {total / 2**30:.0f} GiB of RAM", float(total)


def available_ram() -> float | None:
    """Bytes the kernel says a new allocation can still get (MemAvailable), or None where it does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        return None
    return None
