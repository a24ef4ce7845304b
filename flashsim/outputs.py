"""Writing an output file (an SVG, a trace page): one policy for every command.

The text goes to a temporary file beside the target, which then replaces it (a reader never sees half a
file); the result gets the usual mode (0666 less the umask, as ``open`` gives, not mkstemp's 0600); a
missing folder or an unwritable place is an ArgumentError naming the option and the path.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from flashsim.errors import bad_argument

__all__ = ["write_text"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path, text: str, *, option: str = "-o") -> Path:
    """Write ``text`` to ``path`` atomically; ``option`` names the flag the path came from (for errors)."""
    out = Path(path)
    if out.is_dir():
        raise bad_argument(option, str(path), "is a directory: give a file name")
    if not out.parent.is_dir():
        raise bad_argument(option, str(path), f"the folder {out.parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    except OSError as exc:
        raise bad_argument(option, str(path), f"cannot write there ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
