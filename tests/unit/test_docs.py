"""The README, the docs/ pages and the editors' READMEs link to files and headings that exist
(the README's sections moved to docs/ in issue #34; a moved heading must not leave a dead link)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
         *sorted((ROOT / "editors").glob("*/README.md"))]


def anchor(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(anchor(line.lstrip("#")))
    return found


def local_links(page: Path) -> list[str]:
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def test_anchor_follows_github():
    assert anchor(" Switching to a real model") == "switching-to-a-real-model"
    assert anchor("What the real models need: `dg-engine plan`") == \
        "what-the-real-models-need-dg-engine-plan"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_local_link_resolves(page):
    dead = []
    for target in local_links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (fragment and fragment not in anchors(dest)):
            dead.append(target)
    assert dead == []
