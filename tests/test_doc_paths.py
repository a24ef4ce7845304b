"""Every repository path the documentation names exists: README.md, docs/, the reports under traces/ and
benchmarks/, and the docstrings and comments of the code (``flashsim/...``, ``gpu/...``, ``tests/...``,
``traces/...``, ``benchmarks/...``, ``docs/...``; a ``*`` must match a file; ``<name>`` and ``{a,b}`` are
placeholders; ``flashsim/gpu/...`` and ``flashsim/golden_data/...`` are the installed names of ``gpu/...``
and ``traces/numerics/...``)."""

from __future__ import annotations

import ast
import glob
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH = re.compile(r"(?<![\w./-])((?:flashsim|gpu|tests|traces|benchmarks|docs)/[\w./*{}<>-]*[\w*}>])")

#: (file, path) -> why the path may name something that is not there
KNOWN: dict[tuple[str, str], str] = {}


def _texts():
    for pattern in ("*.md", "docs/**/*.md", "traces/**/*.md", "benchmarks/**/*.md", "gpu/**/*.md"):
        for path in sorted(ROOT.glob(pattern)):
            yield path, path.read_text(encoding="utf-8")
    for top in ("flashsim", "gpu", "tests", "benchmarks", "docs"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            src = path.read_text(encoding="utf-8")
            docs = [ast.get_docstring(n, clean=False) or "" for n in ast.walk(ast.parse(src))
                    if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
            comments = [line.split("#", 1)[1] for line in src.splitlines() if "#" in line]
            yield path, "\n".join(docs + comments)


def _exists(ref: str) -> bool:
    if any(c in ref for c in "<>{}"):
        return True
    for installed, repo in (("flashsim/gpu", "gpu"), ("flashsim/golden_data", "traces/numerics")):
        if ref == installed or ref.startswith(installed + "/"):
            ref = repo + ref[len(installed):]
    if "*" in ref:
        return bool(glob.glob(str(ROOT / ref)))
    return (ROOT / ref).exists()


def test_documented_paths_exist():
    missing = set()
    for path, text in _texts():
        rel = path.relative_to(ROOT).as_posix()
        for m in PATH.finditer(text):
            ref = m.group(1).rstrip(".")
            if not _exists(ref):
                missing.add((rel, ref))
    assert missing <= set(KNOWN), "paths named in the documentation that do not exist:\n  " + "\n  ".join(
        f"{f}: {r}" for f, r in sorted(missing - set(KNOWN)))
    stale = set(KNOWN) - missing
    assert not stale, f"KNOWN entries whose path exists or is no longer named (remove them): {sorted(stale)}"
