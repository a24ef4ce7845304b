"""Progress of long runs on stderr, and the estimate of a run's size that comes before it.

- :class:`Progress`: the one progress display of the command line. On a terminal it is a tqdm bar with the
  rate and the time left; otherwise (a file, a pipe, a CI log) a plain line, with no carriage return, each
  time another 10% is done, with the elapsed time and the ETA. Call it as ``progress(done, total)``: it is the
  ``progress=`` callback the twins (``flashsim.kernels``) and the SASS interpreter (``ExecOptions``) take.
- :class:`Estimate` and :func:`refuse_if_too_large`: the work (tile-steps: CTAs x KV blocks) and the memory
  (bytes of the arrays a run allocates) of a run, and the refusal, before anything is allocated, of a run
  that would not finish in reasonable time or not fit in this machine's memory.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

from flashsim.errors import ArgumentError

__all__ = ["Estimate", "MAX_TILE_STEPS", "Progress", "TooLarge", "format_bytes", "physical_memory",
           "refuse_if_too_large"]

#: tile-steps (a CTA's pass over one KV block) beyond which a run is refused: at the speeds of the twins
#: (about 1,000 to 2,000 tile-steps per second on two cores) and of the SASS interpreter (about 100 per
#: second), 1e8 tile-steps are a day of CPU time or more
MAX_TILE_STEPS = 10**8


class Progress:
    """Progress of ``total`` units (CTAs, KV tiles, events) of one job, on stderr.

    ``enabled=False`` shows nothing. ``delay``: seconds before anything is shown (a short run stays quiet).
    ``done`` may be fractional (a batch of CTAs half way through its KV blocks counts half).
    """

    def __init__(self, label: str, total: int, *, unit: str = "CTA", enabled: bool = True, delay: float = 0.0,
                 file=None):
        self.label, self.total, self.unit = label, int(total), unit
        self.enabled = bool(enabled) and self.total > 0
        self.delay = float(delay)
        self.file = file if file is not None else sys.stderr
        self.t0 = time.perf_counter()
        self.bar = None
        self.next_pct = 10
        self.shown = False
        if self.enabled and _isatty(self.file):
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit=unit, desc=label, file=self.file, dynamic_ncols=True,
                            leave=False, delay=self.delay,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total_fmt} " + unit
                                       + "s [{elapsed}<{remaining}, {rate_fmt}]")

    def __call__(self, done: float, total: int | None = None) -> None:
        if not self.enabled:
            return
        if total is not None and int(total) != self.total:
            self.total = int(total)
            if self.bar is not None:
                self.bar.total = self.total
        done = min(float(done), float(self.total))
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            return
        pct = int(100 * done // max(self.total, 1))
        if pct < self.next_pct and done < self.total:
            return
        while self.next_pct <= pct:
            self.next_pct += 10
        el = time.perf_counter() - self.t0
        if el < self.delay and done < self.total:
            return
        if done >= self.total and not self.shown and el < self.delay:
            return  # finished before anything was worth showing
        eta = el * (self.total - done) / done if done else 0.0
        self.shown = True
        print(f"{self.label}: {done:.0f}/{self.total} {self.unit}s ({pct}%), {el:.1f} s, ETA {eta:.1f} s",
              file=self.file, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _isatty(f) -> bool:
    try:
        return bool(f.isatty())
    except (AttributeError, ValueError):
        return False


# ----------------------------------------------------------------------------------------------------
# Estimates and refusals
# ----------------------------------------------------------------------------------------------------


class TooLarge(ArgumentError):
    """A run refused before it started: its estimated work or memory is beyond this machine."""


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine (None where the system does not say)."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
    if pages <= 0 or size <= 0:
        return None
    return int(pages) * int(size)


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    n = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


def format_count(n: float) -> str:
    """12345 -> '12,345'; 3.2e12 -> '3.2e12'; 1e8 -> '1e8'."""
    if n < 1e7:
        return f"{int(n):,}"
    mantissa, exponent = f"{n:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


@dataclass
class Estimate:
    """The size of a run before it starts: ``work`` (label -> tile-steps) and ``memory`` (label -> bytes of
    the arrays alive at the peak)."""

    work: dict[str, int] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)

    @property
    def tile_steps(self) -> int:
        return int(sum(self.work.values()))

    @property
    def nbytes(self) -> int:
        return int(sum(self.memory.values()))

    def describe(self) -> str:
        """One line: the work per part and the memory."""
        memory = f"about {format_bytes(self.nbytes)} of arrays"
        if not self.work:
            return memory
        work = ", ".join(f"{k} {format_count(v)}" for k, v in self.work.items())
        return f"{format_count(self.tile_steps)} tile-steps (CTAs x KV blocks: {work}); {memory}"


def refuse_if_too_large(est: Estimate, options: str, advice: str, *, max_tile_steps: int | None = None,
                        memory: int | None = None) -> None:
    """Raise :class:`TooLarge` (``flashsim: error: ...``, exit 2) naming ``options`` when ``est`` has more than
    ``max_tile_steps`` (default MAX_TILE_STEPS) of work or needs more memory than the machine has."""
    limit = MAX_TILE_STEPS if max_tile_steps is None else max_tile_steps
    have = physical_memory() if memory is None else memory
    why = []
    if est.tile_steps > limit:
        why.append(f"about {format_count(est.tile_steps)} tile-steps of simulation (CTAs x KV blocks; the limit is "
                   f"{format_count(limit)}, a day or more of CPU time)")
    if have is not None and est.nbytes > have:
        why.append(f"about {format_bytes(est.nbytes)} of arrays (this machine has {format_bytes(have)} of memory)")
    if why:
        raise TooLarge(f"{options}: too large to simulate here: " + " and ".join(why) + f"; {advice}")
