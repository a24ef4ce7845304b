"""The opcode table: every modelled SASS opcode, its semantic family and module (importing this module
registers them all with :data:`flashsim.sass.program.SEMANTICS`)."""

from __future__ import annotations

from flashsim.sass import ops_ctrl, ops_float, ops_gmma, ops_half, ops_int, ops_mem, ops_sync, ops_warp  # noqa: F401
from flashsim.sass import ops_tma  # noqa: F401
from flashsim.sass import ops_double  # noqa: F401
from flashsim.sass.program import SEMANTICS

__all__ = ["table"]


def table() -> list[tuple[str, str]]:
    """(opcode, family) for every modelled opcode, sorted."""
    return sorted((op, fam) for op, (_, fam) in SEMANTICS.items())
