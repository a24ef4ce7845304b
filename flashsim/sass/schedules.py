"""Schedule exploration: one launch under the deterministic default schedule, under adversarial schedules
built from the kernel's warp roles, and under ``schedules`` seeded interleavings
(``ExecOptions.schedule_seed``), for kernels whose result must not depend on the order in which warps run:
warp-specialised pipelines synchronised by mbarriers and named barriers, where each seed also picks the order
in which woken warps resume and the moment each bulk copy lands (flashsim.sass.asyncstate).

    from flashsim.sass.schedules import explore, same_bits

    runs = explore(lambda opts: run_my_kernel(exec_options=opts), schedules=16, seed=0,
                   roles={"producer": [0], "consumer": [1, 2]})
    assert same_bits(runs)

The adversarial schedules (:func:`adversarial`, :class:`flashsim.sass.machine.SchedulePolicy`): each role
first whenever it can run, each role held back for k scheduling steps, bulk copies landing at once and only
when nothing else can run. A deadlock (flashsim.cuda.BarrierDeadlock) under any schedule propagates with the
schedule's name in its message.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from flashsim.errors import bad_argument
from flashsim.sass.machine import BarrierDeadlock, ExecOptions, SchedulePolicy

__all__ = ["DELAYS", "SchedulePolicy", "adversarial", "describe", "explore", "schedule_options", "same_bits"]

#: the scheduling steps a held-back role waits in the adversarial schedules
DELAYS = (64, 1024)
#: a copy delay beyond any launch: copies land only when no lane can run
LAST = 1 << 40


def adversarial(roles: Mapping[str, Sequence[int]], *, delays: Sequence[int] = DELAYS) -> list[SchedulePolicy]:
    """The adversarial schedules of a kernel whose roles are ``roles`` ({role: warp indices in the CTA}): every
    role first, every role delayed by each of ``delays`` steps, copies landing at once, copies landing last."""
    if not isinstance(roles, Mapping) or not roles:
        raise bad_argument("roles", roles, "expected {role name: warp indices within the CTA}")
    out = [SchedulePolicy(f"{r} first", first=tuple(w)) for r, w in roles.items()]
    out += [SchedulePolicy(f"{r} delayed by {k} steps", delay=tuple(w), delay_steps=int(k))
            for r, w in roles.items() for k in delays]
    out += [SchedulePolicy("copies land at once", copy_delay=0), SchedulePolicy("copies land last", copy_delay=LAST)]
    return out


def schedule_options(label, base: ExecOptions | None = None) -> ExecOptions:
    """The options of one schedule: None (the default), a seed (int) or a SchedulePolicy."""
    base = base or ExecOptions()
    if isinstance(label, SchedulePolicy):
        return dataclasses.replace(base, schedule_seed=None, schedule_policy=label)
    return dataclasses.replace(base, schedule_seed=label, schedule_policy=None)


def explore(launch: Callable[[ExecOptions], Any], *, schedules: int = 8, seed: int = 0,
            options: ExecOptions | None = None, roles: Mapping[str, Sequence[int]] | None = None
            ) -> list[tuple[Any, Any]]:
    """``launch(options)`` under the default schedule (label None), the adversarial schedules of ``roles`` if
    given (label: the SchedulePolicy), then seeds ``seed`` .. ``seed + schedules - 1`` (label: the seed): a
    list of (label, what launch returned)."""
    if not isinstance(schedules, int) or isinstance(schedules, bool) or schedules < 0:
        raise bad_argument("schedules", schedules, "expected a number of seeded schedules >= 0")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise bad_argument("seed", seed, "expected an int")
    labels: list = [None, *(adversarial(roles) if roles is not None else ()), *range(seed, seed + schedules)]
    out = []
    for label in labels:
        try:
            out.append((label, launch(schedule_options(label, options))))
        except BarrierDeadlock as exc:
            exc.args = (f"under {describe(label)}: {exc.args[0] if exc.args else ''}",)
            raise
    return out


def describe(label) -> str:
    """A schedule's name: 'the default schedule', 'schedule seed 7', 'the adversarial schedule "..."'."""
    if label is None:
        return "the default schedule"
    if isinstance(label, SchedulePolicy):
        return f'the adversarial schedule "{label.name}"'
    return f"schedule seed {label}"


def _bits(x) -> list[bytes]:
    if isinstance(x, (tuple, list)):
        return [b for v in x for b in _bits(v)]
    a = np.ascontiguousarray(np.asarray(x))
    return [str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()]


def same_bits(runs: list[tuple[int | None, Any]]) -> bool:
    """Whether every run returned the same bits (arrays, or tuples / lists of them)."""
    ref = _bits(runs[0][1]) if runs else []
    return all(_bits(r) == ref for _, r in runs[1:])
