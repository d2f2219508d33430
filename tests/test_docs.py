"""The README is a front door and docs/ the house (issue 37): the README short, saying first
what agentops is, its first commands the two that matter; every link in it and in docs/ leads
somewhere; every page of docs/ in the site's nav; and the site builds with --strict, which
fails on a broken link or anchor."""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor, as Python-Markdown's toc extension (MkDocs) makes it."""
    text = re.sub(r"[`*_]", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    """A page's headings' anchors: their slugs, or the ids they are given (``{#id}``)."""
    text = FENCE.sub("", page.read_text())
    found = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        given = re.search(r"\s\{#([\w-]+)\}$", m.group(1))
        found.add(given.group(1) if given else slug(m.group(1)))
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        goes_to = (page.parent / path).resolve() if path else page
        if not goes_to.exists():
            broken.append(f"{target}: no such file")
        elif anchor and goes_to.suffix == ".md" and anchor not in anchors(goes_to):
            broken.append(f"{target}: no such heading")
    return broken


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250, "the README is a front door: move the rest to docs/"
    title, rest = text.split("\n", 1)
    assert title == "# agentops"
    first = rest.strip().split("\n\n", 1)[0]
    assert first.startswith("agentops is a Django app that runs AI agents"), first
    for promise in ("no effect happens twice", "none is lost", '"unknown"'):
        assert promise in first, promise
    for reader in ("operators", "customers", "agent builders"):
        assert reader in first, reader


def test_the_readmes_first_code_block_is_the_two_commands_with_what_they_need() -> None:
    text = README.read_text()
    block = re.search(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)
    assert block is not None
    assert block.group(1).splitlines() == ["make run", "make test"]
    needs = text[block.end() :].split("\n## ", 1)[0]
    for need in ("`python3`", "3.11", "`venv`", "`make`", "`chromium`", "`promtool`"):
        assert need in needs, need
    assert "`prometheus`" in needs and "root" in needs  # the package; installed only as root
    assert "http://127.0.0.1:8000/login/" in text  # the tour starts where one logs in


def test_every_relative_link_leads_to_a_file_and_heading_that_exist() -> None:
    broken = {
        str(page.relative_to(REPO)): found
        for page in [README, *pages()]
        if (found := broken_links(page))
    }
    assert broken == {}


def test_the_link_checker_finds_a_broken_link_and_anchor(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# There\n\n## A §4 heading, `with code`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-4-heading-with-code) [web](https://example.com/x.md)\n"
        "`[in code](nowhere.md)`\n\n```md\n[in a block](nowhere.md)\n```\n"
        "[gone](nowhere.md) [no heading](there.md#nope) ![img](img.png) [here](#there)\n"
    )
    assert broken_links(page) == [
        "nowhere.md: no such file",
        "there.md#nope: no such heading",
        "img.png: no such file",
        "#there: no such heading",
    ]


def test_every_page_is_in_the_sites_nav() -> None:
    config = (REPO / "mkdocs.yml").read_text()
    nav = config.split("\nnav:\n", 1)[1]
    listed = set(re.findall(r":\s+(\S+\.md)\s*$", nav, re.M))
    on_disk = {str(page.relative_to(DOCS)) for page in pages()}
    assert on_disk - listed == set(), "pages left out of mkdocs.yml's nav"
    assert listed - on_disk == set(), "nav entries with no page"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """mkdocs build --strict: a broken link or anchor, or a page left out of the nav, fails."""
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run(  # noqa: S603 - our own tool, our own arguments
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "screenshots" / "task-every-state.png").exists()
