"""The GPU records the suites write: one compressed npz whose keys are ``<case>::<what>``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["by_case"]


def by_case(path: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """{case name: {what: array}} of a record written with keys ``<case>::<what>``."""
    data = np.load(Path(path))
    out: dict[str, dict] = {}
    for key in data.files:
        name, _, rest = key.partition("::")
        out.setdefault(name, {})[rest] = data[key]
    return out
