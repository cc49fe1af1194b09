"""Check that every relative link and #anchor in README.md, CONTRIBUTING.md and docs/**/*.md resolves.

Usage, from anywhere: python docs/check_links.py [FILE.md ...]
Prints one line per broken link (file:line: the link and why) and exits 1 if there is any, 0 otherwise.
Links to other sites (http:, https:, mailto:) are not fetched. Anchors follow GitHub's rules: a heading's
text in lower case, punctuation other than - and _ dropped, spaces turned into -, and -1, -2, ... added to
repeated headings. Links and headings inside code blocks and inline code are ignored.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+).+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def pages() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [page for page in found if page.exists()]


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading counts by its text
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every #anchor a link may name in `page`."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for _, line in prose_lines(page.read_text()):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path):
    """(line number, target) of every link in `page`'s prose."""
    for number, line in prose_lines(page.read_text()):
        line = INLINE_CODE.sub("", line)
        for target in LINK.findall(line):
            yield number, target
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            yield number, definition.group(1)


def problem(page: Path, target: str, cache: dict[Path, set[str]]) -> str | None:
    """Why `target`, linked from `page`, does not resolve; None when it does."""
    if EXTERNAL.match(target):
        return None
    path_part, _, anchor = target.partition("#")
    destination = (page.parent / unquote(path_part)).resolve() if path_part else page
    if not destination.exists():
        return f"no such file: {shown(destination)}"
    if anchor:
        if destination.suffix != ".md" or destination.is_dir():
            return f"an anchor into {destination.name}, which is not a Markdown page"
        if destination not in cache:
            cache[destination] = anchors(destination)
        if unquote(anchor) not in cache[destination]:
            return f"no heading with the anchor #{anchor} in {shown(destination)}"
    return None


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str]) -> int:
    checked = [Path(arg).resolve() for arg in argv] or pages()
    cache: dict[Path, set[str]] = {}
    broken = 0
    for page in checked:
        for number, target in links(page):
            why = problem(page, target, cache)
            if why:
                broken += 1
                print(f"{shown(page)}:{number}: ({target}): {why}")
    total = sum(1 for page in checked for _ in links(page))
    print(f"check_links: {len(checked)} pages, {total} links, {broken} broken", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
