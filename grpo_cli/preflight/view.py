"""Rendering a preflight: lines and a reward table for people, JSON for scripts."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from grpo_cli.audit.view import audit_json, finding_lines
from grpo_cli.plan.memory import GIB
from grpo_cli.plan.view import override_args, sft_lines
from grpo_cli.preflight.run import Preflight


def preflight_json(result: Preflight) -> dict[str, Any]:
    s = result.groups
    return {
        "audit": None if result.audit is None else audit_json(result.audit),
        "device": result.measured.device,
        "measured_peak_gib": round(result.measured.peak_bytes / GIB, 4),
        "measured_peak_rss_gib": round(result.measured.rss_bytes / GIB, 4),
        "planned_peak_rss_gib": round(result.planned.peak_rss / GIB, 4),
        "measured_reserved_gib": None
        if result.measured.reserved_bytes is None
        else round(result.measured.reserved_bytes / GIB, 4),
        "planned_peak_gib": round(result.planned.peak_tensors / GIB, 4),
        "peak_error_pct": round(result.peak_error_pct, 2),
        "gpu": result.gpu_label,
        "gpu_gib": None if result.verdict.gpu_bytes is None else round(result.verdict.gpu_bytes / GIB, 2),
        "expected_nvidia_smi_gib": round(result.verdict_smi / GIB, 4),
        "fits": result.fits,
        "step_s": round(result.step_s, 3),
        "generation_s": round(result.generation_s, 3),
        "scoring_s": round(result.scoring_s, 3),  # reward models and judges, within generation_s
        "training_s": round(result.step_s - result.generation_s, 3),
        "generation_tokens_per_s": round(s.tokens_per_second, 1),
        "total_steps": result.total_steps,
        "eta_s": round(result.eta_s, 3),  # as precise as the step time it scales: a tiny model's is under 0.1 s
        "eta_worst_s": round(result.eta_worst_s, 3),
        "prompts": s.prompts,
        "completions": s.completions,
        "zero_variance_share": round(s.zero_variance_share, 4),
        "truncated_share": round(s.truncated_share, 4),
        "mean_completion_tokens": round(s.mean_completion_tokens, 1),
        "rewards": [
            {
                "name": r.name,
                "weight": r.weight,
                "mean": r.mean,
                "std": r.std,
                "min": r.min,
                "max": r.max,
                "failed": r.failed,
                "error": r.error,
            }
            for r in s.rewards
        ],
        "tools": s.tools,
        "advice": [{"reason": a.reason, "overrides": override_args(a.changes)} for a in result.advice],
        "seconds": round(result.seconds, 1),
        "sft": _sft_json(result),
        "constant_policies": _constants_json(result),
        "validation": None
        if result.validation is None
        else {
            "problems": result.validation.problems,
            "timed_problems": result.validation.timed,
            "pass_s": round(result.validation.pass_s, 3),
            "passes": result.validation.passes,
            "eta_s": round(result.validation.eta_s, 3),
        },
    }


def _constants_json(result: Preflight) -> dict[str, Any] | None:
    c = result.constants
    if c is None:
        return None
    return {
        "rows": c.rows,
        "base_reward": c.base_reward,
        "policies": [
            {"answer": p.answer, "completion": p.completion, "share": round(p.share, 4), "reward": p.reward}
            for p in c.policies
        ],
        "warning": c.warning,
    }


def constants_line(result: Preflight) -> str | None:
    """`constant answers: `yes` 0.53, `no` 0.47 (...); the base model 0.31`, for a recipe with reference answers and
    a verifier."""
    c = result.constants
    if c is None or not c.policies:
        return None
    earned = ", ".join(f"`{escape(p.answer)}` {'-' if p.reward is None else f'{p.reward:.2f}'}" for p in c.policies)
    base = "-" if c.base_reward is None else f"{c.base_reward:.2f}"
    return (
        f"[bold]constant[/] answers to every prompt earn {earned} (mean verifier reward on {c.rows} training rows); "
        f"the base model {base}"
    )


def _sft_json(result: Preflight) -> dict[str, Any] | None:
    w = result.sft
    if w is None:
        return None
    return {
        "examples": w.examples,
        "total_steps": w.total_steps,
        "step_s": round(w.step_s, 3),
        "eta_s": round(w.eta_s, 3),
        "note": w.note,
        "planned_peak_gib": round(result.verdict.sft_peak / GIB, 4),
    }


def print_preflight(console, result: Preflight, command: str) -> None:
    m, s = result.measured, result.groups
    if result.audit is not None:
        print_audit_lines(console, result.audit)
    kind = "torch.cuda.max_memory_allocated" if m.device == "cuda" else "live tensors on this CPU"
    console.print(
        f"[bold]fit[/]  measured peak {m.peak_bytes / GIB:.2f} GiB ({kind}) vs plan "
        f"{result.planned.peak_tensors / GIB:.2f} GiB: plan error {result.peak_error_pct:+.1f}%"
    )
    if m.device == "cpu":
        console.print(
            f"     peak RSS of this process {m.rss_bytes / GIB:.2f} GiB (sampling and steps, as the kernel "
            f"counts it) vs plan {result.planned.peak_rss / GIB:.2f} GiB"
        )
    source = "measured, plan error applied" if m.device == "cuda" else "planned; not measured on a GPU here"
    if result.fits is None:
        console.print(
            f"     expected in nvidia-smi on a GPU: {result.verdict_smi / GIB:.2f} GiB ({source}); "
            "no GPU given: add --gpu 24GB or a name"
        )
    else:
        verdict = "[green]fits[/]" if result.fits else "[red]does not fit[/]"
        console.print(
            f"     {verdict} {result.gpu_label} ({result.verdict.gpu_bytes / GIB:.0f} GiB): "
            f"{result.verdict_smi / GIB:.2f} GiB expected in nvidia-smi ({source})"
        )
    scoring = f" with {result.scoring_s:.1f} s of scoring by reward models and judges" if result.scoring_s else ""
    console.print(
        f"[bold]time[/] {result.step_s:.1f} s a step at full length (generation {result.generation_s:.1f} s{scoring}, "
        f"training {result.step_s - result.generation_s:.1f} s); generation {s.tokens_per_second:.0f} tokens/s"
    )
    console.print(
        f"     {result.total_steps} steps: about {_duration(result.eta_s)} at the sampled lengths, "
        f"at most {_duration(result.eta_worst_s)}"
    )
    if result.sft is not None:
        w = result.sft
        console.print(
            f"     SFT before them: {w.examples} examples, {w.total_steps} steps of {w.step_s:.1f} s, about "
            f"{_duration(w.eta_s)}" + (f" ({w.note})" if w.note else ""),
            soft_wrap=True,
        )
        for line in sft_lines(result.verdict):
            console.print(f"     {line}", soft_wrap=True, highlight=False)
    if result.validation is not None:
        v = result.validation
        console.print(
            f"     validation between them: {v.passes} passes over {v.problems} held-out problems, about "
            f"{_duration(v.pass_s)} each (one batch of {v.timed} timed on the untrained model), about "
            f"{_duration(v.eta_s)} in all",
            soft_wrap=True,
        )
    console.print(
        f"[bold]signal[/] {s.prompts} prompts x {result.recipe.grpo.num_generations} completions: "
        f"{s.zero_variance_share:.0%} of groups without reward variance, {s.truncated_share:.0%} cut at the "
        f"budget, mean length {s.mean_completion_tokens:.0f} tokens"
    )
    if s.tools is not None:
        t = s.tools
        console.print(
            f"[bold]tools[/]  {t['calls_per_completion']:.2f} calls per completion ({t['completions_with_calls']:.0%} "
            f"call), {t['failure_rate']:.0%} of calls failed, malformed attempts in "
            f"{t['completions_with_malformed']:.0%} of completions, {t['turns_per_completion']:.1f} turns each"
        )
    _print_rewards(console, result)
    if not result.advice:
        console.print("[green]no advice[/]: nothing measured calls for a change")
    for a in result.advice:
        line = f"  {command} {' '.join(override_args(a.changes))}" if a.changes else ""
        console.print(f"[yellow]advice[/] {escape(a.reason)}" + (f"\n{line}" if line else ""), soft_wrap=True)
    console.print(f"[dim]preflight took {result.seconds:.0f} s; nothing was written to {result.recipe.output_dir}[/]")


def _print_rewards(console, result: Preflight) -> None:
    """Each reward's figures on the sampled completions, then what constant answers earn (constant_policy.py)."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("reward", "weight", "mean", "std", "min", "max", "failed"):
        table.add_column(column, justify="left" if column == "reward" else "right")
    for r in result.groups.rewards:
        table.add_row(
            r.name,
            f"{r.weight:g}",
            *(("-" if v is None else f"{v:.3f}") for v in (r.mean, r.std, r.min, r.max)),
            str(r.failed),
        )
    console.print(table)
    line = constants_line(result)
    if line:
        console.print(line, soft_wrap=True, highlight=False)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def print_audit_lines(console, audit) -> None:
    """The reward audit's findings, one line each, as preflight's first section (the table: `grpo audit`)."""
    found = audit.findings
    head = f"[bold]rewards[/]  audit of {audit.prompts} training prompts: "
    console.print(head + (f"{len(found)} finding(s)" if found else "no finding"), highlight=False)
    for line in finding_lines(audit):
        console.print(f"     {line}", highlight=False)
