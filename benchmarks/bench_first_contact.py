"""What a new user waits for: a fresh clone of this repository (no compiled caches beside the sources), a fresh
virtual environment and home (no cubin cache), the README's install command, then the first and second
``flashsim check`` and ``flashsim --version``, each timed from the outside (wall clock).

    python benchmarks/bench_first_contact.py [--keep DIR]

The first check pays the one-time numba / NVRTC warm-up (cached on disk for every later process); the second
shows what a check costs once the caches exist. Needs the package index the README's install uses."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    return time.perf_counter() - t, r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="make the environment here and keep it (default: a temporary one)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        env_dir = args.keep or Path(tmp) / "venv"
        home = Path(tmp) / "home"  # no numba / NVRTC cache of an earlier run
        home.mkdir()
        src = Path(tmp) / "flashsim"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(src)], check=True)
        t = time.perf_counter()
        venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
        py = str(env_dir / "bin" / "python")
        env = {"HOME": str(home), "PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "XDG_CACHE_HOME": str(home / ".cache")}
        r = subprocess.run([py, "-m", "pip", "install", "-q", "-e", f"{src}[test]"], capture_output=True, text=True,
                           env=env, cwd=tmp)
        if r.returncode:
            print(r.stdout[-2000:], r.stderr[-2000:], file=sys.stderr)
            return r.returncode
        rows = [("venv + pip install -e '.[test]'", time.perf_counter() - t)]
        fs = str(env_dir / "bin" / "flashsim")
        for label, cmd in (("first flashsim check", [fs, "check"]), ("second flashsim check", [fs, "check"]),
                           ("flashsim --version", [fs, "--version"])):
            dt, r = _timed(cmd, env=env, cwd=tmp)
            if r.returncode:
                print(r.stdout[-2000:], r.stderr[-2000:], file=sys.stderr)
                return r.returncode
            rows.append((label, dt))
    for label, dt in rows:
        print(f"{label:34s} {dt:8.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
