"""docs/adding-a-kernel.md quotes the real files: every fenced block after a ``<!-- excerpt: PATH -->`` line is
made of lines of PATH, in the file's order (a ``...`` line stands for lines left out), so the walk cannot drift
from the code it walks; and the entry points, kernel and commands it names exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adding-a-kernel.md"
EXCERPT = re.compile(r"<!-- excerpt: (\S+) -->\n```\w*\n(.*?)```", re.S)


def _excerpts():
    return [(m.group(1), m.group(2).rstrip("\n").split("\n")) for m in EXCERPT.finditer(PAGE.read_text("utf-8"))]


def test_the_page_has_excerpts():
    assert len(_excerpts()) >= 10


@pytest.mark.parametrize("path,lines", _excerpts(), ids=lambda x: x if isinstance(x, str) else "")
def test_each_excerpt_is_in_its_file_in_order(path, lines):
    text = (ROOT / path).read_text("utf-8").split("\n")
    i = 0
    for want in lines:
        if want.strip() == "...":
            continue
        while i < len(text) and text[i].rstrip() != want.rstrip():
            i += 1
        assert i < len(text), f"{path} has no line {want!r} (after the excerpt's earlier lines)"
        i += 1


def test_the_page_names_what_exists():
    from flashsim.kernels.spec import get

    page = PAGE.read_text("utf-8")
    spec = get("fa2_chunked")
    for name in spec.function_names:
        assert name in (ROOT / "gpu" / "kernels" / spec.source).read_text("utf-8")
    for module in re.findall(r"python -m (flashsim\.gpu\.\w+)", page):
        assert (ROOT / "gpu" / (module.split(".")[-1] + ".py")).is_file(), module
    assert "GPU result (" in page and "200/200 problems bit-identical" in page
