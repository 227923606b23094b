"""`grpo preflight`: will the recipe fit, how long will it take, can it learn? Measured on this machine, in about a
minute, before the real run. Works in a temporary directory: the recipe's run directory is never touched."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grpo_cli.audit.run import Audit
from grpo_cli.plan.memory import Plan, memory_plan
from grpo_cli.preflight.advice import Advice, advise, fits_on_gpu
from grpo_cli.preflight.constant_policy import ConstantPolicies, constant_policies, verifier_reward
from grpo_cli.preflight.measure import StepMeasurement, measure_steps
from grpo_cli.preflight.sampling import SampledGroups, default_prompt_count, sample_groups
from grpo_cli.preflight.sft_steps import SftTiming, time_sft
from grpo_cli.preflight.validation_time import ValidationTiming, time_validation
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.schema import GRPOSection, Recipe


@dataclass
class Preflight:
    recipe: Recipe
    measured: StepMeasurement
    planned: Plan  # the plan for exactly the steps that ran (same prompt length, same device)
    verdict: Plan  # the plan for the recipe as written, on the GPU
    verdict_smi: float  # bytes expected in nvidia-smi for the recipe as written (measured error applied on CUDA)
    gpu_label: str | None
    groups: SampledGroups
    total_steps: int
    step_s: float
    generation_s: float
    eta_s: float  # at the sampled completion lengths
    eta_worst_s: float  # every completion at the budget
    advice: list[Advice]
    seconds: float
    sft: SftTiming | None = None  # the SFT stage's timed steps, when the recipe has one
    validation: ValidationTiming | None = None  # one timed batch of validation, when the recipe validates
    constants: ConstantPolicies | None = None  # the most common reference answers as constant completions
    audit: Audit | None = None  # what the rewards pay known-good and known-bad replies (grpo audit), set by the command

    @property
    def peak_error_pct(self) -> float:
        return 100 * (self.planned.peak_tensors - self.measured.peak_bytes) / self.measured.peak_bytes

    @property
    def fits(self) -> bool | None:
        return fits_on_gpu(self.verdict, self.verdict_smi)

    @property
    def scoring_s(self) -> float:
        """The timed step's scoring by reward models and judges: part of its generation phase (0 without any)."""
        return min(self.measured.scoring_seconds[-1], self.generation_s) if self.measured.scoring_seconds else 0.0


def run_preflight(
    recipe: Recipe,
    steps: int,
    prompts: int | None,
    gpu_spec: str | None,
    hours: float,
    show=lambda text, new_phase=False: None,
    own_process: bool = False,
) -> Preflight:
    """Sample groups, run `steps` real steps, plan the same steps, and advise. Checks that need no model (the GPU
    name, the architecture) come first, so a typo is refused before a minute of measuring. `show` hears where it is."""
    from grpo_cli.process.optional_libraries import skip_unused_bitsandbytes

    # before torch and the libraries below decide whether it is installed
    skip_unused_bitsandbytes(recipe.quantization, recipe.training.optim, own_process)
    import torch

    from grpo_cli.errors import UserError
    from grpo_cli.model_rewards.build import reward_functions
    from grpo_cli.plan import architectures
    from grpo_cli.plan.gpus import gpu_for
    from grpo_cli.tools.guard import EnvironmentFailure

    gpu_label, gpu_bytes = gpu_for(recipe.hardware, gpu_spec)
    architectures.check_context(recipe.data, recipe.grpo, arch := architectures.resolve(recipe.model))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo-preflight-") as tmp:
        work = Path(tmp)
        training = recipe.training.model_copy(update={"output_dir": str(work / "run"), "report_to": ["none"]})
        isolated = recipe.model_copy(update={"training": training})
        sft = time_sft(isolated, work, steps, show) if recipe.sft is not None else None
        count = prompts or default_prompt_count(recipe.grpo.num_generations)
        groups = sample_groups(isolated, count, show)  # from the model as it starts
        show("scoring constant answers with the verifier rewards", new_phase=True)
        base = verifier_reward(recipe.rewards, [r.mean for r in groups.rewards])
        funcs = reward_functions(recipe.rewards, recipe.model)
        constants = constant_policies(recipe.data, recipe.rewards, funcs, recipe.training.seed, base)
        try:
            measured = measure_steps(isolated, work, steps, show)
        except EnvironmentFailure as failure:  # the run would stop on it too (train/run.py)
            raise UserError(f"{failure}; fix the environment and run the same command again", "environment") from None

    planned = memory_plan(measured.recipe, arch, measured.device)
    if gpu_bytes is None and measured.device == "cuda":
        gpu_label, gpu_bytes = torch.cuda.get_device_name(0), float(torch.cuda.get_device_properties(0).total_memory)
    verdict = memory_plan(recipe, arch, "cuda", gpu_bytes)
    verdict_smi = _corrected_smi(verdict, planned, measured)

    step_s = measured.step_seconds[-1]
    generation_s = min(measured.generation_seconds[-1], step_s)
    total_steps = recipe.total_steps(groups.dataset_rows)
    validation = None
    if recipe.validation is not None:
        from grpo_cli.eval.training_validation import held_out_validation

        held_out = held_out_validation(isolated, warn=lambda line: None)  # the run itself warns about overlap
        passes = recipe.validation.passes(total_steps)
        validation = time_validation(held_out, recipe.model, recipe.quantization, passes, show)
    expected_step, worst_step = expected_step_seconds(recipe.data, recipe.grpo, measured, groups, step_s, generation_s)
    eta_s = total_steps * expected_step
    advice = advise(recipe, groups, verdict, verdict_smi, eta_s, total_steps, arch, hours, validation, constants)
    return Preflight(
        recipe,
        measured,
        planned,
        verdict,
        verdict_smi,
        gpu_label,
        groups,
        total_steps,
        step_s,
        generation_s,
        eta_s,
        total_steps * worst_step,
        advice,
        time.perf_counter() - started,
        sft,
        validation,
        constants,
    )


def _corrected_smi(verdict: Plan, planned: Plan, measured: StepMeasurement) -> float:
    """The bytes expected in nvidia-smi for the recipe as written. Measured on a GPU, the plan's error there is
    known: apply it. On a CPU the CUDA figure stays the plan's."""
    correction = measured.peak_bytes / planned.peak_tensors if measured.device == "cuda" else 1.0
    return verdict.peak_smi * correction


def expected_step_seconds(
    data: DataSection,
    grpo: GRPOSection,
    measured: StepMeasurement,
    groups: SampledGroups,
    step_s: float,
    generation_s: float,
) -> tuple[float, float]:
    """A step of the run, at the sampled completion lengths and with every completion at the budget, scaled from
    the measured step (every prompt the calibration prompt, every completion at the budget).

    Training scales with sequence length: the run's prompts (the data's longest, as the plan counts them; the
    recipe's limit or the calibration prompt where the data gave none) plus its completions. Generation runs until
    the longest completion of its batch ends, and at least one token: each batch's prompts pass through the model."""
    measured_prompt = measured.recipe.data.max_prompt_length or 0
    prompt = groups.longest_prompt_tokens or data.max_prompt_length or measured_prompt
    budget = grpo.max_completion_length
    training_s = (step_s - generation_s) / (measured_prompt + budget)
    share = max(groups.batch_length_share, 1 / budget)
    return (
        generation_s * share + training_s * (prompt + groups.mean_completion_tokens),
        generation_s + training_s * (prompt + budget),
    )
