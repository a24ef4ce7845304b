"""One wording for where things happen (``cta=.. warp=.. lane=.. addr=0x..``) and one exception tree."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from flashsim.errors import ArgumentError, FlashsimError, SimulatedFault, TraceError, location

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("flashsim", "gpu")

#: the wordings location() replaced: "CTA 3 warp 1", "lane 5 (cta=0 warp=2)", "warp 2 lane 7", "(cta=0, warp=2)"
#: (a constructor-style repr such as "Event(cta=0, warp=2, ...)" is not a location message)
OLD_FORMAT = re.compile(r"\bCTA \{|\bcta \{|\bwarp \{|\blane \{|[^A-Za-z_]\(cta=\{[^}]*\}, warp=")
#: exception classes that are not errors flashsim reports: private signals caught inside their module, and
#: a cancellation signal
NOT_ERRORS = {"flashsim.layout.layout.composition._Undefined", "flashsim.cluster.Cancelled", "flashsim.kernels.common.Cancelled"}


def _sources():
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            yield p.relative_to(ROOT).as_posix(), p


def test_location_wording():
    assert location(cta=1, warp=2, lane=3, addr=0x40) == "cta=1 warp=2 lane=3 addr=0x40"
    assert location(cta=np.int64(0), warp=np.int32(3)) == "cta=0 warp=3"
    assert location(lane=31) == "lane=31"
    assert location(addr=np.uint64(2**64 - 1)) == "addr=0xffffffffffffffff"
    assert location(warp=0, cta=5) == "cta=5 warp=0"  # always in cta, warp, lane, addr order
    with pytest.raises(ArgumentError, match="at least one of cta, warp, lane, addr"):
        location()


def test_simulated_fault_uses_location():
    e = SimulatedFault("misaligned shared address", cta=2, warp=1, lane=7, addr=0x1F, detail="4-byte access")
    assert str(e) == "misaligned shared address: cta=2 warp=1 lane=7 addr=0x1f (4-byte access)"
    assert str(e).split(": ", 1)[1].startswith(location(cta=2, warp=1, lane=7, addr=0x1F))


def test_no_old_location_wording_in_the_package():
    offenders = {}
    for rel, path in _sources():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OLD_FORMAT.search(line):
                offenders.setdefault(rel, []).append(f"{n}: {line.strip()}")
    assert not offenders, f"use flashsim.errors.location(cta=, warp=, lane=, addr=): {offenders}"
    assert all(not OLD_FORMAT.search(s) for s in ("cta=0 warp=1 lane=2 addr=0x4", location(cta=0, warp=1)))
    assert all(OLD_FORMAT.search(s) for s in ('f"CTA {c} warp {w}"', 'f"lane {l} (cta={c} warp={w})"',
                                              'f"chunk #{i} (cta={c}, warp={w})"'))
    assert not OLD_FORMAT.search('f"Event(cta={self.cta}, warp={self.warp}, seq={self.seq})"')


def test_converted_messages():
    from flashsim.warp import UndefinedResult, shfl_sync

    with pytest.raises(UndefinedResult, match=r"^shfl\.sync\.idx: cta=0 warp=0 lane=16 executes it"):
        shfl_sync("idx", np.arange(32, dtype=np.uint32), 0, 0x1F, 0xFFFF)
    from flashsim.gpu.trace_gpu import decode

    words = np.zeros(8, np.uint32)
    words[0] = 100  # more words used than the buffer holds
    with pytest.raises(TraceError, match=r"^trace buffer of cta=3 warp=1 is corrupt"):
        decode(words, 3, 1, "fa2", 64)
    words[0], words[2] = 4, 0xFFFF  # an unknown tag id
    with pytest.raises(TraceError, match=r"^cta=3 warp=1: unknown tag id 65535 at word 2"):
        decode(words, 3, 1, "fa2", 64)


def _exception_classes():
    out = {}
    for rel, path in _sources():
        name = rel[:-3].replace("/", ".")
        if name.endswith("__main__"):
            continue
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        mod = importlib.import_module(name)
        for attr, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == mod.__name__:
                out[f"{mod.__name__}.{attr}"] = obj
    return out


def test_every_error_class_is_a_flashsim_error():
    classes = _exception_classes()
    outside = {k for k, c in classes.items() if not issubclass(c, FlashsimError)}
    assert outside <= NOT_ERRORS, sorted(outside - NOT_ERRORS)
    # the ones named in the trace, GPU-runtime and hardware-check modules, by their MROs
    from flashsim.gpu import ncu_source, runtime, trace_gpu

    for cls in (trace_gpu.TraceOverflow, runtime.CheckError, ncu_source.NcuSourceError, runtime.GpuUnavailable,
                runtime.CompileError, runtime.LaunchError):
        assert FlashsimError in cls.__mro__, cls
    assert runtime.CheckError in ncu_source.NcuSourceError.__mro__
    assert RuntimeError in trace_gpu.TraceOverflow.__mro__  # still caught as before
    for mod in ("flashsim.gpu.check_banks", "flashsim.gpu.check_races"):
        assert importlib.import_module(mod).CheckError is runtime.CheckError
    assert len(classes) >= 20


def test_check_banks_pattern_errors_are_argument_errors():
    from flashsim.gpu import check_banks

    ok = tuple(range(0, 128, 4))
    check_banks.Pattern("ok", "bank_ld32", ok)
    with pytest.raises(ArgumentError, match=r"^kernel='bank_nope': pattern p: not a kernel of probe_smem.cu"):
        check_banks.Pattern("p", "bank_nope", ok)
    with pytest.raises(ArgumentError, match=r"^offs=.*pattern p: expected 32 offsets"):
        check_banks.Pattern("p", "bank_ld32", ok[:8])
    with pytest.raises(ValueError, match=r"pattern p: offsets must be 4-byte aligned"):  # still a ValueError
        check_banks.Pattern("p", "bank_ld32", tuple(range(1, 129, 4)))
