"""Schedule exploration: one launch under the deterministic default schedule and under ``schedules`` seeded
interleavings (``ExecOptions.schedule_seed``), for kernels whose result must not depend on the order in
which warps run: warp-specialised pipelines synchronised by mbarriers and named barriers, where each seed
also picks the order in which woken warps resume and the moment each bulk copy lands
(flashsim.sass.asyncstate).

    from flashsim.sass.schedules import explore, same_bits

    runs = explore(lambda opts: run_my_kernel(exec_options=opts), schedules=16, seed=0)
    assert same_bits(runs)

A deadlock (flashsim.cuda.BarrierDeadlock) under any schedule propagates with the seed in its message.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from flashsim.errors import bad_argument
from flashsim.sass.machine import BarrierDeadlock, ExecOptions

__all__ = ["explore", "same_bits"]


def explore(launch: Callable[[ExecOptions], Any], *, schedules: int = 8, seed: int = 0,
            options: ExecOptions | None = None) -> list[tuple[int | None, Any]]:
    """``launch(options)`` under the default schedule (seed None), then under seeds ``seed`` ..
    ``seed + schedules - 1``: a list of (seed, what launch returned)."""
    if not isinstance(schedules, int) or isinstance(schedules, bool) or schedules < 0:
        raise bad_argument("schedules", schedules, "expected a number of seeded schedules >= 0")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise bad_argument("seed", seed, "expected an int")
    base = options or ExecOptions()
    out = []
    for s in [None, *range(seed, seed + schedules)]:
        opts = dataclasses.replace(base, schedule_seed=s)
        try:
            out.append((s, launch(opts)))
        except BarrierDeadlock as exc:
            where = "the default schedule" if s is None else f"schedule seed {s}"
            exc.args = (f"under {where}: {exc.args[0] if exc.args else ''}",)
            raise
    return out


def _bits(x) -> list[bytes]:
    if isinstance(x, (tuple, list)):
        return [b for v in x for b in _bits(v)]
    a = np.ascontiguousarray(np.asarray(x))
    return [str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()]


def same_bits(runs: list[tuple[int | None, Any]]) -> bool:
    """Whether every run returned the same bits (arrays, or tuples / lists of them)."""
    ref = _bits(runs[0][1]) if runs else []
    return all(_bits(r) == ref for _, r in runs[1:])
