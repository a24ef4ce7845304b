"""Golden .npz records of GPU runs that CPU tests replay: their problem keys and their arrays."""

from pathlib import Path

import numpy as np
import pytest


def problem_keys(path: Path) -> list[str]:
    """The problem numbers of a record whose arrays are named ``<n>/<what>`` (none when it is absent)."""
    if not path.is_file():
        return []
    with np.load(path) as z:
        return sorted({k.split("/")[0] for k in z.files if "/" in k}, key=int)


def load(path: Path, command: str) -> dict:
    """Every array of the record; a missing record fails the test, naming the ``command`` that records it."""
    if not path.is_file():
        pytest.fail(f"{path} is missing: record it with {command} on a GPU")
    with np.load(path) as z:
        return {k: z[k] for k in z.files}
