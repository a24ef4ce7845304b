"""The timer the benchmark scripts share: the best wall time of repeated calls."""

import time


def best(fn, repeat: int, *, warmup: bool = False) -> float:
    """The fastest of ``repeat`` timed calls of ``fn`` (after one untimed call with ``warmup``)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
