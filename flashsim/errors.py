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


def location(*, cta: int | None = None, warp: int | None = None, lane: int | None = None,
             addr: int | None = None) -> str:
    """Where something happened, in the one wording every message uses: ``cta=1 warp=2 lane=3 addr=0x40``
    (the fields given, in that order; the address in hex)."""
    parts = []
    for name, v in (("cta", cta), ("warp", warp), ("lane", lane)):
        if v is not None:
            parts.append(f"{name}={int(v)}")
    if addr is not None:
        parts.append(f"addr={int(addr):#x}")
    if not parts:
        raise bad_argument("location", None, "expected at least one of cta, warp, lane, addr")
    return " ".join(parts)


class SimulatedFault(FlashsimError):
    """A fault the GPU would raise (misaligned or out-of-bounds access), located by cta/warp/lane/address."""

    def __init__(self, kind: str, *, cta: int, warp: int, lane: int, addr: int, detail: str = ""):
        self.kind, self.cta, self.warp, self.lane, self.addr, self.detail = kind, cta, warp, lane, addr, detail
        msg = f"{kind}: {location(cta=cta, warp=warp, lane=lane, addr=addr)}"
        super().__init__(msg + (f" ({detail})" if detail else ""))

    def __reduce__(self):
        # keyword-only fields, and the pc/sass/line the interpreter adds: a fault raised in a worker process
        # arrives as the same fault
        fields = dict(cta=self.cta, warp=self.warp, lane=self.lane, addr=self.addr, detail=self.detail)
        return _rebuild_fault, (type(self), self.kind, fields, self.__dict__.copy())


def _rebuild_fault(cls, kind, fields, state):
    exc = cls(kind, **fields)
    exc.__dict__.update(state)
    return exc


class TraceError(FlashsimError):
    """A trace or golden-data file is unreadable, corrupt or from an unknown format version."""


class GpuUnavailable(FlashsimError):
    """No usable GPU toolchain: cupy missing or broken, no CUDA device, or nvcc not on PATH."""


class CompileError(FlashsimError):
    """A kernel source did not compile; ``.filename`` is the source, ``.log`` the compiler's full log."""

    def __init__(self, filename, log: str, *, compiler: str = "nvrtc"):
        self.filename = str(filename)
        self.log = log
        self.compiler = compiler
        super().__init__(f"{compiler} failed to compile {self.filename}:\n{log.rstrip()}")


class CheckError(FlashsimError):
    """A hardware check could not run (no ncu or compute-sanitizer, no permission, no metric, a timeout);
    the message says what to do."""


class LaunchError(FlashsimError):
    """A kernel launch or the synchronisation after it returned a CUDA error; ``.kernel`` names it."""

    def __init__(self, kernel: str, detail: str):
        self.kernel = kernel
        super().__init__(f"kernel {kernel!r} failed: {detail}")


def ranges(values) -> str:
    """Numbers as ranges, sorted and without repeats: [5, 0, 1, 2] -> '0-2,5' ('' for none)."""
    vs = sorted(set(int(v) for v in values))
    out, i = [], 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        out.append(str(vs[i]) if i == j else f"{vs[i]}-{vs[j]}")
        i = j + 1
    return ",".join(out)
