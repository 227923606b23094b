from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    blocks = [b.split("```")[0].strip() for b in readme.split("```bash\n")[1:3]]
    assert "grpo train recipes/demo.yaml" in blocks[0]
    assert "pytest" in blocks[1]
    assert blocks[1] in (ROOT / ".ci" / "run").read_text().splitlines()
