"""What measures a step's memory: live tensor bytes on a CPU (LiveTensorBytes), the allocator's peak per phase on
CUDA (PhasePeaks with CudaPeaks). preflight/measure.py runs the steps."""

from __future__ import annotations

from collections.abc import Callable

from grpo_cli.train.phases import PhaseListener


class LiveTensorBytes:
    """Peak bytes of live tensor storages while active: every op's outputs are counted once per storage,
    until that storage is freed. Storages that exist before (the model) are counted with `add_existing`."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tracker._track_all(out)
                return out

        self._mode = _Mode()
        self._sizes: dict[int, int] = {}
        self.current = 0
        self.peak = 0
        self.phase = "training"
        self.phase_peaks: dict[str, int] = {}

    def add_existing(self, tensors) -> None:
        for t in tensors:
            self._track_all(t)

    def _track_all(self, out) -> None:
        import torch
        from torch.utils._pytree import tree_leaves

        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self._track(t.untyped_storage())

    def _track(self, storage) -> None:
        import weakref

        key = storage._cdata
        size = storage.nbytes()
        known = self._sizes.get(key)
        if known is None:
            weakref.finalize(storage, self._free, key)
        self.current += size - (known or 0)
        self._sizes[key] = size
        self.peak = max(self.peak, self.current)
        self.phase_peaks[self.phase] = max(self.phase_peaks.get(self.phase, 0), self.current)

    def _free(self, key: int) -> None:
        self.current -= self._sizes.pop(key, 0)

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)


class PhasePeaks(PhaseListener):
    """The allocator's peak in each phase of a step, for CUDA where no tracker sees tensors: `generation` (generate
    and score), `training` (forward and backward of the micro-batches) and `optimizer` (clipping and the update).
    At each boundary `read_and_reset()` gives the peak since the last boundary (torch.cuda's max_memory_allocated,
    then reset_peak_memory_stats), which belongs to the phase that just ended. The H100 calibration found the plan
    7-21% under the peak; these phases say which term is short."""

    def __init__(self, read_and_reset: Callable[[], int]):
        self.read_and_reset = read_and_reset
        self.phase = "training"
        self.peaks: dict[str, int] = {}

    def switch(self, phase: str) -> None:
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), self.read_and_reset())
        self.phase = phase

    def generation_started(self) -> None:
        self.switch("generation")

    def generation_ended(self) -> None:
        self.switch("training")

    def install(self, trainer) -> None:
        from transformers import TrainerCallback

        peaks = self

        class _OptimizerStep(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                peaks.switch("optimizer")

            def on_optimizer_step(self, args, state, control, **kwargs):
                peaks.switch("training")

        trainer.add_phase_listener(self)
        trainer.add_callback(_OptimizerStep())


class CudaPeaks:
    """`read_and_reset` for PhasePeaks on CUDA; resetting clears the reserved peak too, so it is kept here."""

    def __init__(self):
        self.reserved = 0

    def read_and_reset(self) -> int:
        import torch

        peak = torch.cuda.max_memory_allocated()
        self.reserved = max(self.reserved, torch.cuda.max_memory_reserved())
        torch.cuda.reset_peak_memory_stats()
        return peak
