"""The front door holds: README.md opens with the demo and test commands (CI runs the latter verbatim), every recipe
the README and docs/ quote exists and validates, and every relative link in them leads to a file (and heading)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS, ROOT / "benchmarks" / "README.md"]
# A repository-relative recipe path as the docs quote it: recipes/gsm8k/smollm2_135m_cpu.yaml
RECIPE_PATH = re.compile(r"(?<![\w./-])recipes/[\w.-]+(?:/[\w.-]+)*\.yaml")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
EXTERNAL = ("http://", "https://", "mailto:")


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    blocks = [b.split("```")[0].strip() for b in readme.split("```bash\n")[1:3]]
    assert "grpo train recipes/demo.yaml" in blocks[0]
    assert "pytest" in blocks[1]
    assert blocks[1] in (ROOT / ".ci" / "run").read_text().splitlines()


# One line of benchmarks/fresh_clone.txt: which run (README's demo, its tests, or the edit-test loop `-m "not slow"`),
# the instruction-set caps, the wall time as m:ss.
FRESH_CLONE_RUN = re.compile(r"commit \w+\s+(tests|demo|inner)\s.*?caps (\w+)\s+wall \d+ s \((\d+:\d\d)\).*?exit 0\s")
MINUTES = re.compile(r"(?<![\d:])\d+:\d\d(?![\d:])")


def command_intro(readme: str, number: int) -> str:
    """What README says just before its `number`-th bash block: the sentence that introduces that command."""
    return readme.split("```bash\n")[number - 1].split("```")[-1]


def newest_fresh_clone_times() -> dict[tuple[str, str], str]:
    """(command, caps) -> m:ss of the newest run of it that passed, in benchmarks/fresh_clone.txt."""
    newest = {}
    for line in (ROOT / "benchmarks" / "fresh_clone.txt").read_text().splitlines():
        run = FRESH_CLONE_RUN.search(line)
        if run and not line.startswith("#"):
            newest[run[1], run[2]] = run[3]
    return newest


def test_the_readme_times_are_the_newest_fresh_clone_runs():
    """README's times for its two commands are the newest passing runs of benchmarks/fresh_clone.sh, and no other."""
    readme = (ROOT / "README.md").read_text()
    newest = newest_fresh_clone_times()
    assert {("tests", "none"), ("tests", "avx2"), ("inner", "none")} <= set(newest), newest
    for number, runs in ((1, {"demo"}), (2, {"tests", "inner"})):
        measured = {time for (which, _), time in newest.items() if which in runs}
        intro = command_intro(readme, number)
        claimed = set(MINUTES.findall(intro))
        assert claimed == measured, f"README command {number} should say {sorted(measured)}, says {sorted(claimed)}"
        assert not measured or "benchmarks/fresh_clone.txt" in intro


def test_the_readme_stays_short_and_the_docs_have_a_page_per_concern():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 160
    pages = {p.stem for p in DOCS}
    assert {
        "recipes",
        "plan",
        "preflight",
        "train-and-runs",
        "eval",
        "rewards",
        "tools",
        "cpu-training",
        "multi-gpu",
        "layout",
    } <= pages, pages


def prose(page: Path) -> str:
    """The page without its fenced code blocks (a `# comment` in a YAML block is not a heading)."""
    return re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)


def quoted_recipes() -> list[str]:
    return sorted({m for page in [ROOT / "README.md", *DOCS] for m in RECIPE_PATH.findall(page.read_text())})


def test_the_docs_quote_recipes():
    assert "recipes/demo.yaml" in quoted_recipes()
    assert "recipes/gsm8k/qwen2.5_coder_0.5b_calculator_cpu.yaml" in quoted_recipes()


@pytest.mark.parametrize("recipe", quoted_recipes())
def test_every_recipe_quoted_in_the_docs_exists_and_validates(recipe, monkeypatch):
    from grpo_cli.recipe.validation import load_recipe

    monkeypatch.chdir(ROOT)  # recipes name files relative to the repository root, as the docs run them
    assert (ROOT / recipe).is_file(), recipe
    load_recipe(ROOT / recipe)  # raises UserError listing every problem


def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", prose(page), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def relative_links() -> list[tuple[str, str]]:
    return [
        (str(page.relative_to(ROOT)), target)
        for page in PAGES
        for target in LINK.findall(prose(page))
        if not target.startswith(EXTERNAL)
    ]


def test_the_pages_link_to_each_other():
    assert len(relative_links()) >= 20


@pytest.mark.parametrize("page, target", relative_links())
def test_every_relative_link_resolves(page, target):
    path, _, anchor = target.partition("#")
    file = (ROOT / page).parent / path if path else ROOT / page
    assert file.resolve().is_file(), f"{page}: {target} does not lead to a file"
    if anchor and file.suffix == ".md":
        assert anchor in heading_anchors(file), f"{page}: {target}: no such heading in {path or page}"
