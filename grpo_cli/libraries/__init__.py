"""What grpo relies on in the libraries below it: the private TRL and vLLM names, checked (seams.py), and the one set
of settings every vLLM engine starts with (vllm_settings.py)."""
