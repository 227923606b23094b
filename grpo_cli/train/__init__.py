"""Training: recipe -> GRPOConfig + GRPOTrainer, callbacks, progress, distributed launch, the generation seams."""
