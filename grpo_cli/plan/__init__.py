"""`grpo plan`: the analytical memory model (no weight loaded, no torch imported), architectures, GPUs, rendering."""
