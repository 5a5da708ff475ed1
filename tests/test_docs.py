"""The README stays a front page whose links reach the docs, and every docs page the code names exists.
(The site's own links and anchors are checked by `mkdocs build --strict`, in `make lint`.)"""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
# Where code and configuration may name a docs page.
SOURCES = ["databuild", "workflows", "activities", "worker", "examples", "bench", "tests", "docker"]


def test_readme_is_a_front_page_with_the_two_commands() -> None:
    """What it is, the two commands, a picture and a map of the docs; the manual is the site."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "make demo" in text
    assert "make test" in text  # the command .ci/run runs
    assert "## How it works" in text and "## The docs" in text


def test_every_link_of_the_readme_reaches_a_file() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    local = [link.split("#", 1)[0] for link in links if "://" not in link]
    assert local, "the README links the docs"
    missing = [link for link in local if not (ROOT / link).is_file()]
    assert not missing, f"README.md links files that do not exist: {missing}"


def test_every_docs_page_the_code_names_exists() -> None:
    """A docstring or comment that sends the reader to a page sends them somewhere."""
    named: dict[str, list[str]] = {}
    files = [
        path
        for source in SOURCES
        for path in (ROOT / source).rglob("*")
        if path.suffix in {".py", ".yml"} and path != Path(__file__)
    ]
    for path in [*files, ROOT / "docker-compose.yml", ROOT / "Makefile"]:
        for page in re.findall(r"\bdocs/[\w./-]+?\.md\b", path.read_text(errors="replace")):
            named.setdefault(page, []).append(str(path.relative_to(ROOT)))
    assert "docs/lineage.md" in named  # the views' docstring, at least
    missing = {page: where for page, where in named.items() if not (ROOT / page).is_file()}
    assert not missing, f"pages named in the code that do not exist: {missing}"
