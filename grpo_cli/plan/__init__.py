"""`grpo plan`: the memory model, architectures, the GPU table, the measurement harness, rendering."""
