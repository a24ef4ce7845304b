"""Differential tests of a user's kernel: the same cubin bytes on the GPU and in the SASS interpreter.

    import numpy as np, flashsim.cuda as fc
    from flashsim.testing import assert_matches_gpu

    def test_saxpy():
        mod = fc.RawModule(code=SRC)
        x = np.arange(256, dtype=np.float32)
        y = np.zeros(256, np.float32)
        assert_matches_gpu(mod, "saxpy", (2,), (128,), (y, x, np.float32(3), np.int32(256)))

Arguments: numpy arrays (each copied to the device and passed as a pointer; every array is compared
after the launch, so outputs and in-place buffers are checked alike) and numpy scalars (passed by value).

- Under ``pytest --gpu``: the module's cubin runs on the GPU (cupy, loaded from exactly these bytes) and in
  the interpreter on the same inputs; every array must be bit-identical. ``--update-golden`` also stores
  the GPU's results under ``traces/golden/`` (one npz per launch, named by the kernel and a hash of its
  machine code, launch shape and argument bytes, with provenance).
- Without ``--gpu``: the interpreter's results must equal the stored GPU results for the same launch, kept
  in the ``traces/golden`` folder nearest above the test file. A launch with no stored result is skipped
  in a pytest session (GoldenMissing outside one) with the command that records one (hypothesis-drawn
  inputs need ``@settings(derandomize=True)`` to find their records again).

On a difference the error names the array and the first differing element (index, both values as numbers
and bit patterns) and, from the interpreter re-run with a watch on that element, the instruction that
stored it: PC, SASS, source line, CTA, warp, lane, the register and the value it stored. Under ``--gpu``,
for a module built from CUDA source, it also names where the kernel's arithmetic first left the GPU's
path in the thread that stored that element (:mod:`flashsim.locate`: an instrumented build that logs the
thread's register writes runs on both sides): the PTX instruction, its source line, the thread, the
how-many-th execution of that instruction it was in the thread, and both values. The exception's
``divergence`` attribute holds the whole comparison (``.text()``, ``.logs``), or None.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flashsim import device
from flashsim.errors import FlashsimError, bad_argument
from flashsim.golden import load as load_golden
from flashsim.locate import Thread, locate_first_divergence

__all__ = ["GoldenMissing", "KernelMismatch", "assert_matches_gpu", "code_digest", "configure", "launch_key"]


class KernelMismatch(FlashsimError, AssertionError):
    """The interpreter's results differ from the GPU's (or from the stored GPU results). ``divergence``:
    the located first divergent instruction (a :class:`flashsim.locate.Divergence`), or None."""

    divergence = None


class GoldenMissing(FlashsimError, AssertionError):
    """No stored GPU result for this launch and no GPU to make one."""


@dataclass
class _Session:
    gpu: bool = False
    update_golden: bool = False
    golden_dir: Path | None = None  # None: found from the test file (golden_dir())
    in_pytest: bool = False
    test_file: Path | None = None


_SESSION = _Session()
GOLDEN = Path("traces") / "golden"


def configure(*, gpu: bool, update_golden: bool, golden_dir: Path | str | None = None,
              in_pytest: bool | None = None) -> None:
    """Set the mode (the pytest plugin calls this from ``--gpu`` / ``--update-golden``). ``golden_dir``
    fixes where stored results live; None finds them from the running test's file (:func:`golden_dir`)."""
    _SESSION.gpu, _SESSION.update_golden = bool(gpu), bool(update_golden)
    _SESSION.golden_dir = None if golden_dir is None else Path(golden_dir)
    if in_pytest is not None:  # in a pytest session a missing stored result skips the test
        _SESSION.in_pytest = bool(in_pytest)


def set_test_file(path) -> None:
    """The file of the test now running (the pytest plugin sets it before each test)."""
    _SESSION.test_file = None if path is None else Path(path).resolve()


def golden_dir() -> Path:
    """Where stored GPU results are read and written: the ``traces/golden`` folder nearest above the running
    test's file (that folder beside the test file when none exists yet), whatever the working directory;
    ``./traces/golden`` outside a test; or what :func:`configure` fixed."""
    if _SESSION.golden_dir is not None:
        return _SESSION.golden_dir
    f = _SESSION.test_file
    if f is None:
        return GOLDEN
    for d in f.parents:
        if (d / GOLDEN).is_dir():
            return d / GOLDEN
    return f.parent / GOLDEN


def _module(module) -> Any:
    import flashsim.cuda as fc  # numba: imported on first use, so that the pytest plugin loads light

    if isinstance(module, fc.RawModule):
        return module
    if isinstance(module, (bytes, bytearray)):
        return fc.RawModule(cubin=bytes(module))
    raise bad_argument("module", type(module).__name__, "expected a flashsim.cuda.RawModule or cubin bytes")


def _check_args(args) -> list:
    if not isinstance(args, (tuple, list)):
        raise bad_argument("args", type(args).__name__, "expected a tuple of numpy arrays and numpy scalars")
    out = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray) and a.dtype.names is None:
            if a.dtype.hasobject:
                raise bad_argument(f"args[{i}]", a.dtype, "object arrays cannot go to a device")
            out.append(np.ascontiguousarray(a))
        elif isinstance(a, (np.generic, np.void)) or (isinstance(a, np.ndarray) and a.dtype.names is not None):
            out.append(a)
        else:
            raise bad_argument(f"args[{i}]", type(a).__name__,
                               "expected a numpy array (passed as a device pointer) or a numpy scalar such as "
                               "np.int32(n) (a Python int or float has no fixed width)")
    return out


def code_digest(module, name: str) -> bytes:
    """The sha256 of what a launch of kernel ``name`` executes: its machine code, its constant bank 0
    image, and the module constant banks its code reads (with the module's globals, which are reached
    through them); not the line table, which records the folder the source was compiled in, nor what only
    other kernels of the module use."""
    elf = module._elf
    k = elf.kernels[name]
    h = hashlib.sha256(k.code)
    h.update(k.constant0)
    texts = (ins.text for ins in module.get_function(name)._prog().instructions.values())
    banks = {int(b, 16) for t in texts for b in re.findall(r"c\[(0x[0-9a-f]+)\]", t)} - {0}
    for bank, data in sorted(elf.constant_banks().items()):
        if bank in banks:
            h.update(str(bank).encode() + bytes(data))
    if banks:
        for sec, data in sorted(elf.data_sections().items()):
            h.update(sec.encode() + bytes(data))
    return h.digest()


def launch_key(code: bytes, name: str, grid, block, shared_mem: int, args: Sequence[Any]) -> str:
    """The hash that names a launch's stored GPU result: the kernel's code (:func:`code_digest`), its
    name, the launch shape and the argument bytes."""
    h = hashlib.sha256()
    h.update(code)
    h.update(json.dumps([name, list(grid), list(block), int(shared_mem)]).encode())
    for a in args:
        arr = np.asarray(a)
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def _dims(name, v):
    v = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(v) <= 3 or not all(isinstance(x, (int, np.integer)) and x >= 1 for x in v):
        raise bad_argument(name, v, "expected a positive int or 1 to 3 positive ints")
    return tuple(int(x) for x in v) + (1,) * (3 - len(v))


def _run_interp(mod, name, grid, block, args, shared_mem, exec_options, watch=None):
    import flashsim.cuda as fc

    f = mod.get_function(name)
    if shared_mem > f.max_dynamic_shared_size_bytes:
        f.max_dynamic_shared_size_bytes = shared_mem
    dev = [fc.asarray(a) if isinstance(a, np.ndarray) and a.dtype.names is None else a for a in args]
    report = None
    if watch is None:
        f(grid, block, tuple(dev), shared_mem=shared_mem, exec_options=exec_options)
    else:
        i, flat = watch
        d = dev[i]
        lo = d.data.ptr + flat * d.itemsize
        with fc.checking(banks=False) as report:
            report.watch_global = (lo, lo + d.itemsize)
            f(grid, block, tuple(dev), shared_mem=shared_mem, exec_options=exec_options)
    outs = [d.get() if isinstance(a, np.ndarray) and a.dtype.names is None else None for d, a in zip(dev, args)]
    return outs, report


def _run_gpu(cubin, name, grid, block, args, shared_mem):
    cupy = device.require_gpu()
    f = device.load_cubin(cubin).get_function(name)
    if shared_mem > 48 * 1024:
        f.max_dynamic_shared_size_bytes = shared_mem
    dev = [cupy.asarray(a) if isinstance(a, np.ndarray) and a.dtype.names is None else a for a in args]
    device.launch(f, grid, block, tuple(dev), shared_mem=shared_mem)
    return [cupy.asnumpy(d) if isinstance(a, np.ndarray) and a.dtype.names is None else None
            for d, a in zip(dev, args)]


def _bits(a: np.ndarray) -> np.ndarray:
    item = a.dtype.itemsize
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(item)
    return a.view(view) if view is not None else a.view(np.uint8).reshape(a.shape + (item,))


def _first_diff(want: np.ndarray, got: np.ndarray):
    bw, bg = _bits(want), _bits(got)
    neq = bw != bg
    if neq.ndim > want.ndim:
        neq = neq.any(axis=-1)
    if not neq.any():
        return None
    flat = int(np.flatnonzero(neq.reshape(-1))[0])
    return flat, int(neq.sum())


def _fmt(a: np.ndarray, flat: int) -> str:
    v = a.reshape(-1)[flat]
    bits = _bits(a.reshape(-1)[flat:flat + 1])
    hexs = bits.tobytes()[::-1].hex() if bits.dtype == np.uint8 else f"{int(bits[0]):#0{2 + 2 * a.itemsize}x}"
    return f"{v!r} ({hexs})"


def _locate_lines(mod, name, grid, block, args, shared_mem, exec_options, access, gpu: bool):
    """The located first divergence, in a few lines (and the Divergence, or None)."""
    if not gpu:
        return ["  locating the first divergent instruction needs the GPU (pytest --gpu): an instrumented build "
                "of the kernel runs on both sides"], None
    build = mod.build
    if build is None:
        return ["  locating the first divergent instruction needs the kernel's CUDA source (a module built with "
                "flashsim.cuda.RawModule(code=...)); this one came from cubin bytes"], None
    if access is None:
        return ["  no thread to log (no store of the interpreter wrote the element): the first divergent "
                "instruction is not located"], None
    try:
        thread = Thread.of(grid, block, ctaid=access.ctaid, warp=access.warp, lane=access.lane)
        d = locate_first_divergence(build, name, grid, block, args, thread=thread, shared_mem=shared_mem,
                                    exec_options=exec_options, plain_outputs_differ=True)
    except (FlashsimError, NotImplementedError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [f"  locating the first divergent instruction failed: {type(exc).__name__}: {first}"], None
    return ["  " + line for line in d.summary()], d


def _compare(mod, name, grid, block, args, shared_mem, exec_options, want: list, got: list, what: str,
             gpu: bool = False) -> None:
    for i, (w, g) in enumerate(zip(want, got)):
        if w is None:
            continue
        d = _first_diff(w, g)
        if d is None:
            continue
        flat, count = d
        idx = np.unravel_index(flat, w.shape) if w.ndim else ()
        msg = [f"kernel {name!r}: args[{i}] ({w.dtype}{list(w.shape)}) differs from {what} in {count} of {w.size} "
               f"elements; first at index {tuple(int(x) for x in idx)}: {what} {_fmt(w, flat)}, interpreter "
               f"{_fmt(g, flat)}"]
        _, report = _run_interp(mod, name, grid, block, args, shared_mem, exec_options, watch=(i, flat))
        access = None
        if report is not None and report.writes:
            last = report.writes[-1]
            acc = access = last["access"]
            words = ", ".join(f"{x:#010x}" for x in last["words"])
            msg.append(f"  the interpreter stored it last at pc={acc.pc:#06x} `{acc.sass}` {acc.location} "
                       f"cta={acc.cta} warp={acc.warp} lane={acc.lane}: {last['register'] or 'a constant'} = {words} "
                       f"({last['nbytes']} bytes at {last['addr']:#x}); {len(report.writes)} stores touched it")
        else:
            msg.append("  no STG/ST of the interpreter touched that element (written by an atomic, or never "
                       "written by the kernel)")
        lines, divergence = _locate_lines(mod, name, grid, block, args, shared_mem, exec_options, access, gpu)
        msg.extend(lines)
        exc = KernelMismatch("\n".join(msg))
        exc.divergence = divergence
        raise exc


def _golden_path(name: str, key: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:60]
    return golden_dir() / f"{safe}-{key[:16]}.npz"


def _save_golden(path: Path, key: str, cubin: bytes, name, grid, block, shared_mem, args, outs) -> None:
    prov = {"kernel": name, "grid": list(grid), "block": list(block), "shared_mem": shared_mem, "key": key,
            "cubin_sha256": hashlib.sha256(cubin).hexdigest(), "device": device.device_info(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    arrays = {f"out{i}": o for i, o in enumerate(outs) if o is not None}
    arrays.update({f"in{i}": np.asarray(a) for i, a in enumerate(args)})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, provenance=np.array(json.dumps(prov)), **arrays)
    tmp.replace(path)


def _load_golden(path: Path, n: int) -> list:
    arrays, prov = load_golden(path)
    return [arrays.get(f"out{i}") for i in range(n)]


def assert_matches_gpu(module, name: str, grid, block, args: Sequence[Any], *, shared_mem: int = 0,
                       exec_options=None) -> list:
    """Run ``name`` of ``module`` (a flashsim.cuda.RawModule, or cubin bytes) on the GPU and in the
    interpreter (or against the stored GPU results without ``--gpu``) and require bit-identical arrays.
    Returns the interpreter's arrays after the launch (None for scalar arguments)."""
    mod = _module(module)
    if not isinstance(name, str):
        raise bad_argument("name", name, "expected the kernel's name")
    grid, block = _dims("grid", grid), _dims("block", block)
    if not isinstance(shared_mem, (int, np.integer)) or shared_mem < 0:
        raise bad_argument("shared_mem", shared_mem, "expected a non-negative int")
    args = _check_args(args)
    if name not in mod.kernels:
        raise bad_argument("name", name, f"no kernel of that name in the module (kernels: {mod.kernels})")
    key = launch_key(code_digest(mod, name), name, grid, block, shared_mem, args)
    path = _golden_path(name, key)
    got, _ = _run_interp(mod, name, grid, block, args, int(shared_mem), exec_options)
    if _SESSION.gpu:
        want = _run_gpu(mod.cubin, name, grid, block, args, int(shared_mem))
        if _SESSION.update_golden:
            _save_golden(path, key, mod.cubin, name, grid, block, int(shared_mem), args, want)
        what = "the GPU"
    else:
        if not path.is_file():
            msg = (f"kernel {name!r}: no stored GPU result for this launch ({path}); record one with "
                   "pytest --gpu --update-golden on a GPU machine (hypothesis-drawn inputs need "
                   "@settings(derandomize=True) to be drawn again the same way)")
            if _SESSION.in_pytest:
                import pytest

                pytest.skip(msg)
            raise GoldenMissing(msg)
        want = _load_golden(path, len(args))
        what = f"the stored GPU result ({path.name})"
    _compare(mod, name, grid, block, args, int(shared_mem), exec_options, want, got, what, gpu=_SESSION.gpu)
    return got
