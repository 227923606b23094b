"""The one trainer class: TRL's GRPOTrainer with each seam grpo needs overridden once, here, in plain sight.

- `_generate_single_turn` (one generation round): runs inside the generation context chosen at construction (frozen
  weights under autocast, or the LoRA adapter merged, or nothing), pushes trained weights into a CPU vLLM engine once
  per step, and tells the phase listeners when the round starts and ends.
- `_generate_and_score_completions` (the step's generation phase): tells the listeners, counts the groups whose
  completions all scored the same, and skips or resamples them (`grpo.zero_variance_groups`).
- `_calculate_rewards`: keeps the gathered rewards for that decision.
- `_get_per_token_logps_and_entropies`: each distinct prompt runs once, its key/value cache shared by its rows
  (shared_prompts.py), where the model allows it; generation's prefill likewise, within `_generate_single_turn`,
  where on a CPU each sampled token also takes torch.multinomial's own draw at a fraction of its cost (torch_draws.py).
- `_compute_loss` and `_get_per_token_logps_and_entropies`: on-policy with vLLM, TRL's importance-sampling correction
  takes the trainer's log-probs from the loss's own forward pass instead of an extra one (vllm_correction.py).
The loss, the optimizer and every log-prob stay TRL's. The private names used are listed and checked in
libraries/seams.py; build_trainer (trainer.py) is the only place that constructs this class.
"""

from __future__ import annotations

from contextlib import nullcontext

from trl import GRPOTrainer

from grpo_cli.generation import torch_draws
from grpo_cli.libraries import seams
from grpo_cli.train import shared_prompts, vllm_correction, zero_variance
from grpo_cli.train.phases import PhaseListener


class RecipeTrainer(GRPOTrainer):
    """GRPOTrainer for one recipe. Extra options: `mixed_precision` (the recipe's, resolved for this machine: picks
    the generation context), `zero_variance_mode` (keep | skip | resample) and `zero_variance_rounds`."""

    def __init__(
        self,
        *args,
        mixed_precision: str = "no",
        zero_variance_mode: str = "keep",
        zero_variance_rounds: int = 2,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        seams.check_instance(self)
        self.zero_variance_mode = zero_variance_mode
        self.zero_variance_rounds = zero_variance_rounds
        self.phase_listeners: list[PhaseListener] = []
        self._gathered_rewards = None
        self.inference_context = nullcontext
        self.generation_context = self._choose_generation_context(mixed_precision)
        self._cpu_vllm = self.use_vllm and self.accelerator.device.type == "cpu"
        self.correct_from_loss_pass = vllm_correction.applies(self)
        self._correction_diagnostics = vllm_correction.Diagnostics()
        self._loss_inputs = None  # the micro-batch whose loss forward is running, while it needs correcting
        self.share_prompts = shared_prompts.applies(self)  # in the loss pass and in sampling's prefill

    def add_phase_listener(self, listener: PhaseListener) -> None:
        self.phase_listeners.append(listener)

    def _choose_generation_context(self, mixed_precision: str):
        """A factory of the context each generation round runs in: frozen weights cast once to the autocast dtype
        and generation under autocast (frozen_weights.py), on a CPU with a merged copy of each adapted weight; else,
        in float32, the adapter merged while sampling (merged_generation.py); else nothing. Casting happens here,
        once."""
        from grpo_cli.train import frozen_weights, merged_generation

        model = self.accelerator.unwrap_model(self.model)
        dtype = frozen_weights.narrow(self, mixed_precision)
        if dtype is not None:
            # Anything else that runs the model outside TRL's steps (validation) needs the same autocast; it does
            # not take the merge below, which would leave the base weights a rounding away from a run without it.
            self.inference_context = lambda: frozen_weights.generating_under_autocast(model, dtype)
            if self.accelerator.device.type == "cpu":  # merged copies: CPU memory, not the GPU's planned budget
                return lambda: merged_generation.merged_copies_under_autocast(model, dtype)
            return self.inference_context
        if merged_generation.can_merge(self):
            return lambda: merged_generation.adapter_merged(model)
        return nullcontext

    def _generate_single_turn(self, *args, **kwargs):
        for listener in self.phase_listeners:
            listener.round_started()
        try:
            if self._cpu_vllm and self.state.global_step != self._last_loaded_step:
                from grpo_cli.train.vllm_cpu import sync_cpu_engine

                sync_cpu_engine(self.vllm_generation)
                self._last_loaded_step = self.state.global_step  # TRL's own sync then sees nothing to do
            with self.generation_context(), self._prefill_context(), self._draws_context():
                return super()._generate_single_turn(*args, **kwargs)
        finally:
            for listener in self.phase_listeners:
                listener.round_ended()

    def _prefill_context(self):
        if not self.share_prompts:
            return nullcontext()
        return shared_prompts.prompts_prefilled_once(self.accelerator.unwrap_model(self.model))

    def _draws_context(self):
        """On a CPU, transformers' sampling takes torch.multinomial's own draws at a fraction of their cost."""
        if self.use_vllm or self.accelerator.device.type != "cpu":
            return nullcontext()
        return torch_draws.drawn_in_bulk()

    def _calculate_rewards(self, *args, **kwargs):
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        self._gathered_rewards = rewards_per_func  # every process's rows, in the order advantages are computed
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        for listener in self.phase_listeners:
            listener.generation_started()
        try:
            output = self._generate_and_score(inputs)
            if not self.model.training:
                return output
            if self.zero_variance_mode != "keep":
                zero_variance.check_output(output)
            # Counted in every mode: TRL's `frac_reward_zero_std` tests the batch's deviation, not each group's,
            # under scale_rewards: batch, and reads 0 there however many groups are flat.
            keep, flat_groups = self._informative_rows(output)
            self._metrics["train"]["zero_variance/groups_flat"].append(float(flat_groups))
            if self.zero_variance_mode == "keep":
                return output
            return self._without_flat_groups(output, keep)
        finally:
            for listener in self.phase_listeners:
                listener.generation_ended()

    def _without_flat_groups(self, output: dict, keep) -> dict:
        """Skip, or first resample, the groups whose completions all scored the same (zero_variance.py); `keep`:
        one bool per row, its group informative."""
        rounds = 0
        resample = self.zero_variance_mode == "resample"
        while (
            resample
            and not keep.all()
            and rounds < self.zero_variance_rounds
            and zero_variance.can_replace_rows(output)
        ):
            rounds += 1
            output, keep = self._replace_flat_groups(output, keep)
        if resample and not keep.all() and rounds == self.zero_variance_rounds:
            print(
                f"zero-variance groups: {int((~keep).sum()) // self.num_generations} still flat after "
                f"{rounds} extra generation round(s) (grpo.zero_variance_rounds); skipping them",
                flush=True,
            )
        metrics = self._metrics["train"]
        metrics["zero_variance/groups_skipped"].append(float((~keep).sum()) / self.num_generations)
        metrics["zero_variance/extra_rounds"].append(float(rounds))
        if keep.all():
            return output
        return zero_variance.skip_rows(output, keep, self.args.steps_per_generation == 1, self.accelerator.gather)

    def _informative_rows(self, output: dict):
        advantages = output["advantages"]
        return zero_variance.informative_rows(
            self._gathered_rewards,
            self.reward_weights,
            self.num_generations,
            len(advantages),
            self.accelerator.process_index,
            advantages.device,
        )

    def _replace_flat_groups(self, output: dict, keep):
        """Generate groups for as many fresh prompts as there are flat groups; their informative groups replace
        flat ones (one process only: the recipe refuses resample with several)."""
        import torch

        g = self.num_generations
        prompts = torch.randint(len(self.train_dataset), (int((~keep).sum()) // g,)).tolist()
        fresh = self._generate_and_score([self.train_dataset[i] for i in prompts for _ in range(g)])
        fresh_keep, _ = self._informative_rows(fresh)
        return zero_variance.replace_rows(output, fresh, keep, fresh_keep, self.processing_class.pad_token_id)

    def _generate_and_score(self, inputs):
        if not self.correct_from_loss_pass:
            return super()._generate_and_score_completions(inputs)
        self._correction_diagnostics.reset()  # a new generation batch
        # TRL's correction off while it generates and scores: no extra pass, no weights; vLLM's log-probs still come
        # back (`sampling_per_token_logps`: TRL always asks vLLM for them). On again for the loss, which reads them.
        self.vllm_importance_sampling_correction = False
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self.vllm_importance_sampling_correction = True

    def _compute_loss(self, model, inputs):
        if self.correct_from_loss_pass and vllm_correction.RATIO_KEY not in inputs:
            self._loss_inputs = inputs
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._loss_inputs = None

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        result = None
        text_only = all(value is None or value is False for value in kwargs.values())  # no images, no MoE aux loss
        if self.share_prompts and text_only:
            result = shared_prompts.per_token_logps(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, self.accelerator.autocast
            )
        if result is None:
            result = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, **kwargs
            )
        if self._loss_inputs is not None:  # the loss's forward pass: its log-probs give the correction weights
            inputs, self._loss_inputs = self._loss_inputs, None
            vllm_correction.attach(self, inputs, result[0], self._correction_diagnostics)
        return result
