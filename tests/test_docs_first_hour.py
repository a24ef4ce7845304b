"""docs/first-hour.md, run as a new user would: every `$` command of its console blocks, from a directory that
holds the repository's tests/, docs/ and traces/ (so the files it writes land in a temporary directory), each
output checked against the lines the page quotes under the command, in order (`...` stands for lines left out,
a line ending in `...` for the rest of that line), and the exit status where the page gives one."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "first-hour.md"
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _steps(text: str) -> list[tuple[str, list[str], int | None]]:
    """(command, expected lines, exit status or None) for every `$` command of the page's console blocks."""
    steps = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
            lines = chunk.rstrip("\n").split("\n")
            cmd = lines.pop(0)
            while cmd.endswith("\\"):
                cmd = cmd[:-1] + lines.pop(0)
            status = None
            if lines and re.fullmatch(r"\(exit status \d+\)", lines[-1]):
                status = int(lines.pop()[13:-1])
            steps.append((cmd, lines, status))
    return steps


def _shows(expected: list[str], got: list[str]) -> str | None:
    """None when ``got`` shows the ``expected`` lines in order, else the first line it does not show."""
    i = 0
    anchored = True  # the first line, and a line right after another quoted line, must come next
    for want in expected:
        if want == "...":
            anchored = False
            continue
        prefix = want.endswith("...")
        match = (lambda g: g.rstrip().startswith(want[:-3].rstrip())) if prefix else (lambda g: g.rstrip() == want.rstrip())
        if anchored and i > 0:
            if i >= len(got) or not match(got[i]):
                return want
            i += 1
        else:
            while i < len(got) and not match(got[i]):
                i += 1
            if i == len(got):
                return want
            i += 1
        anchored = True
    return None


STEPS = _steps(PAGE.read_text(encoding="utf-8"))


def test_the_page_has_the_walk():
    assert len(STEPS) >= 8
    assert all(cmd.split()[0] in ("flashsim", "python") for cmd, _, _ in STEPS)
    # its install command is the README's
    install = re.search(r"```bash\n(pip install [^\n]+)\n```", PAGE.read_text(encoding="utf-8")).group(1)
    assert install in README


def test_matching_rule():
    got = ["a", "b", "c d e", "f"]
    assert _shows(["a", "...", "c d...", "f"], got) is None
    assert _shows(["a", "c d e"], got) == "c d e"  # not next: needs '...'
    assert _shows(["...", "x"], got) == "x"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("first-hour")
    for name in ("tests", "docs", "traces"):
        (d / name).symlink_to(ROOT / name, target_is_directory=True)
    return d


def test_every_command_shows_what_the_page_says(workdir):
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "COLUMNS": "200", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    for cmd, expected, status in STEPS:
        if cmd.startswith("python "):
            cmd = f"{sys.executable} {cmd[len('python '):]}"
        r = subprocess.run(["bash", "-c", cmd], cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
        out = r.stdout.splitlines()
        missing = _shows(expected, out)
        assert missing is None, f"$ {cmd}\nexit {r.returncode}\ndoes not show: {missing!r}\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"
        if status is not None:
            assert r.returncode == status, f"$ {cmd}: exit {r.returncode}, the page says {status}\n{r.stderr[-2000:]}"
        else:
            assert r.returncode == 0, f"$ {cmd}: exit {r.returncode}\n{r.stderr[-2000:]}"
