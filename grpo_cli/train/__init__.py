"""Training: recipe -> GRPOConfig + GRPOTrainer, callbacks, the run directory, distributed launch, export, report."""
