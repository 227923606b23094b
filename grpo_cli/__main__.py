from grpo_cli.cli import app

app(prog_name="grpo")
