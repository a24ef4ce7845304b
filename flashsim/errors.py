"""One exception tree for the whole package, so callers can catch ``FlashsimError``."""

from __future__ import annotations


class FlashsimError(Exception):
    """Root of every error flashsim raises on purpose."""


class ArgumentError(FlashsimError, ValueError):
    """A caller passed a bad argument; the message names it and shows its value with ``!r``."""


def bad_argument(name: str, value: object, why: str) -> ArgumentError:
    """Build the standard argument error: ``name=<value!r>: why``."""
    text = repr(value)
    if len(text) > 200:
        text = text[:200] + "..."
    return ArgumentError(f"{name}={text}: {why}")


class SimulatedFault(FlashsimError):
    """A fault the GPU would raise (misaligned or out-of-bounds access), located by cta/warp/lane/address."""

    def __init__(self, kind: str, *, cta: int, warp: int, lane: int, addr: int, detail: str = ""):
        self.kind, self.cta, self.warp, self.lane, self.addr, self.detail = kind, cta, warp, lane, addr, detail
        msg = f"{kind}: cta={cta} warp={warp} lane={lane} addr={addr:#x}"
        super().__init__(msg + (f" ({detail})" if detail else ""))


class TraceError(FlashsimError):
    """A trace or golden-data file is unreadable, corrupt or from an unknown format version."""
