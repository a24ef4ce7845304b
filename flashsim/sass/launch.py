"""A kernel launch in the interpreter: constant bank 0 (driver words + parameters), shared and local memory
sizes, and the CTAs run in batches through :class:`flashsim.sass.machine.Machine`.

Constant bank 0 on sm_90, as the kernels read it (offsets in bytes)::

    0x000 ntid.x   0x004 ntid.y   0x008 ntid.z   0x00c nctaid.x   0x010 nctaid.y   0x014 nctaid.z
    0x020 the local window's generic base (64-bit): generic address = base + local offset
    0x028 the local stack pointer's start (the top of each thread's local memory)
    0x02c the launch's dynamic shared memory in bytes (%dynamic_smem_size)
    0x198 the generic address of the parameters (64-bit): ``&param`` of a __grid_constant__ parameter is
          c[0x0][0x198] + (its offset in the bank - 0x210); here the parameter window + 0x210
    0x208 the 64-bit global memory descriptor (desc[URx] of LDG/STG; it carries cache policy only)
    0x210 the kernel's parameters (EIATTR_PARAM_CBANK), laid out as EIATTR_KPARAM_INFO says

Shared memory: each CTA's window starts with a reserved 1 KiB (0x000-0x3ff); the kernel's static
``__shared__`` data follow (its .nv.shared section, whose size includes the reserved KiB), then the
dynamic shared memory. Addresses are byte offsets in that window.

Generic addresses (LD/ST/ATOM without a state space): the shared window is the 4 GiB at
``SR_SWINHI << 32`` and the local window the 4 GiB at c[0x0][0x20]; anything else is global memory,
except the parameter window: ``PARAM_WINDOW + o`` reads byte ``o`` of constant bank 0 where ``o`` lies among
the kernel's parameters (generic loads through ``&param``; the tensor map a TMA instruction names). On the
H100 c[0x0][0x198] is the global address of a copy of the launch's parameters (0x...280240, 0x...290240,
0x...2a0240 for &param at bank offset 0x240 in three launches: a new 64 KiB slot per launch), and generic loads
through it read the parameters (traces/tma/tma_probes.npz, param_probe); flashsim gives the copy a window of
its own.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from flashsim import cluster
from flashsim.sass import checking, spread
from flashsim.sass.machine import ExecOptions, Machine, fault
from flashsim.smem import MAX_PER_CTA as MAX_SMEM_PER_CTA  # cudaDevAttrMaxSharedMemoryPerBlockOptin
from flashsim.smem import RESERVED as RESERVED_SMEM  # reservedSharedMemPerBlock, at 0x000-0x3ff
from flashsim.smem import SharedMemory

__all__ = ["Launch", "RESERVED_SMEM", "MAX_SMEM_PER_CTA", "DRIVER_WORDS", "PARAM_WINDOW"]

DEFAULT_DYNAMIC_LIMIT = 48 * 1024  # above this a kernel must opt in (cudaFuncAttributeMaxDynamicSharedMemorySize)
SHARED_WINDOW = 0x7FFF_0000_0000  # generic base of shared memory (SR_SWINHI = 0x7fff)
LOCAL_WINDOW = 0x7FFE_0000_0000  # generic base of local memory (c[0x0][0x20])
PARAM_WINDOW = 0x7FFD_0000_0000  # generic base of constant bank 0 as the parameter window (c[0x0][0x198] - 0x210)
WINDOW_SIZE = 1 << 32
DRIVER_WORDS = {0x00: "ntid.x", 0x04: "ntid.y", 0x08: "ntid.z", 0x0C: "nctaid.x", 0x10: "nctaid.y",
                0x14: "nctaid.z", 0x20: "local window (low)", 0x24: "local window (high)", 0x28: "local stack pointer",
                0x2C: "dynamic shared memory bytes",
                0x198: "parameter window (low)", 0x19C: "parameter window (high)",
                0x208: "global memory descriptor (low)",
                0x20C: "global memory descriptor (high)"}


def cluster_dims(kernel) -> tuple[int, int, int] | None:
    """The cluster shape a kernel was built for (``__cluster_dims__``: the cubin's EIATTR_CTA_PER_CLUSTER,
    attribute 0x3d), or None."""
    attrs = getattr(kernel, "attributes", {}) or {}
    for label in ("EIATTR_CTA_PER_CLUSTER", "0x3d"):
        for payload in attrs.get(label, []):
            if len(payload) >= 12:
                return tuple(int.from_bytes(payload[4 * i:4 * i + 4], "little") for i in range(3))
    return None


class CtaBatches(Sequence):
    """The grid-linear CTA ids of a launch in batches of ``per`` (the last one shorter), made when asked for:
    a grid of 2^31 CTAs costs nothing until its batches run."""

    def __init__(self, total: int, per: int):
        self.total, self.per = int(total), int(per)

    def __len__(self) -> int:
        return (self.total + self.per - 1) // self.per

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        start = i * self.per
        return np.arange(start, min(self.total, start + self.per))


class Launch:
    """Everything the CTAs of one launch share."""

    def __init__(self, program, grid, block, params: bytes, dynamic_shared: int, memory, banks: dict,
                 options: ExecOptions, races: bool = False, name: str = ""):
        k = program.kernel
        cl = cluster_dims(k)
        if cl is not None and math.prod(cl) > 1:
            raise NotImplementedError(
                f"kernel {name or k.name!r} is built for clusters of {cl[0]}x{cl[1]}x{cl[2]} CTAs (__cluster_dims__): "
                "clusters of more than one CTA (distributed shared memory, remote mbarriers, multicast) are not "
                "modelled; every CTA runs as the only CTA of its cluster")
        self.program = program
        self.grid, self.block = grid, block
        self.dynamic_shared = dynamic_shared
        self.name = name or k.name
        report = checking.current()
        self.probe = report.begin(self, name or "kernel") if report is not None else None
        self.memory = memory
        self.options = options
        self.races = races
        self.static_shared = max(k.static_shared, RESERVED_SMEM)
        self.dynamic_shared = dynamic_shared
        self.shared_size = (self.static_shared + dynamic_shared + 15) // 16 * 16
        self.local_size = (max(k.frame_size, k.min_stack) + 15) // 16 * 16
        c0 = bytearray(k.constant0)
        need = k.param_base + max(k.param_bytes, len(params))
        if len(c0) < need:
            c0.extend(b"\0" * (need - len(c0)))
        words = np.frombuffer(bytes(c0[:0x18]), np.uint32).copy()
        words[:6] = [*block, *grid]
        c0[:0x18] = words.tobytes()
        c0[0x20:0x28] = np.uint64(LOCAL_WINDOW).tobytes()
        c0[0x28:0x2C] = np.uint32(self.local_size).tobytes()
        c0[0x2C:0x30] = np.uint32(dynamic_shared).tobytes()  # %dynamic_smem_size (form_probes: smem_sizes)
        c0[0x198:0x1A0] = np.uint64(PARAM_WINDOW + k.param_base).tobytes()
        c0[k.param_base:k.param_base + len(params)] = params
        self.banks = dict(banks)
        self.banks[0] = np.frombuffer(bytes(c0), np.uint8)
        self._param_base = k.param_base

    def param_read(self, off: int, n: int) -> bytes | None:
        """``n`` bytes at offset ``off`` of constant bank 0 (the parameter window's generic address minus
        PARAM_WINDOW), or None unless they lie among the kernel's parameters."""
        lo, hi = self._param_base, self._param_base + self.program.kernel.param_bytes
        if off < lo or off + n > hi:
            return None
        return bytes(self.banks[0][off:off + n])

    @property
    def constants(self):
        return self.banks

    def const_word(self, bank: int, off: int, width: int):
        data = self.banks.get(bank)
        if data is None:
            raise NotImplementedError(f"constant bank {bank} is not in this module (c[{bank:#x}][{off:#x}])")
        if bank == 0 and off < self._param_base:
            for o in range(off, off + width, 4):
                if o not in DRIVER_WORDS:
                    raise NotImplementedError(
                        f"c[0x0][{o:#x}] is a driver-supplied constant flashsim does not model "
                        f"(modelled: {', '.join(f'{k:#x} {v}' for k, v in DRIVER_WORDS.items())})")
        if off < 0 or off + width > len(data):
            raise NotImplementedError(f"c[{bank:#x}][{off:#x}] lies outside the bank ({len(data)} bytes)")
        raw = bytes(data[off:off + width]).ljust(max(width, 4), b"\0")  # a byte or half: zero-extended
        return np.frombuffer(raw, np.uint64 if width == 8 else np.uint32)[0]

    def const_gather(self, bank: int, idx: np.ndarray, width: int, ins, m, lanes=None):
        """The ``width``-byte constants (1, 2, 4 or 8, little-endian, zero-extended) at the byte addresses
        ``idx`` of ``bank``; only ``lanes`` read (and can fault)."""
        data = self.banks.get(bank)
        if data is None:
            raise NotImplementedError(f"constant bank {bank} is not in this module: {ins.where()}")
        idx = np.asarray(idx, np.int64)
        lanes = (m.st == 0) if lanes is None else np.asarray(lanes, bool)
        lanes = np.broadcast_to(lanes, idx.shape) if idx.shape == lanes.shape else np.ones(idx.shape, bool)
        outside = lanes & ((idx < 0) | (idx + width > len(data)))
        if outside.any():
            if outside.shape == m.st.shape:
                raise fault("out-of-bounds constant address", m, ins, outside, idx, f"bank {bank} has {len(data)} bytes")
            raise NotImplementedError(f"uniform constant read at c[{bank:#x}][{int(idx.flat[0]):#x}] outside the "
                                      f"bank ({len(data)} bytes) is not modelled: {ins.where()}")
        odd = lanes & (idx % width != 0)
        if odd.any():
            raise NotImplementedError(f"misaligned {width}-byte constant read at c[{bank:#x}]"
                                      f"[{int(idx[odd].flat[0]):#x}] is not modelled: {ins.where()}")
        safe = np.where(lanes, idx, 0)
        if width >= 4:
            words = np.frombuffer(bytes(data[: len(data) // 4 * 4]), np.uint32)
            lo = words[safe >> 2]
            if width == 4:
                return lo
            return lo.astype(np.uint64) | (words[(safe >> 2) + 1].astype(np.uint64) << np.uint64(32))
        raw = np.frombuffer(bytes(data), np.uint8)
        out = np.zeros(safe.shape, np.uint64)
        for k in range(width):
            out |= raw[safe + k].astype(np.uint64) << np.uint64(8 * k)
        return out.astype(np.uint32)

    def new_shared(self, ctas: int, warps: int) -> SharedMemory:
        opts = {"banks": False, "races": self.races}
        if self.probe is not None:
            opts = self.probe.shared_options
            opts["races"] = opts["races"] or self.races
        sm = SharedMemory(ctas, self.shared_size, warps=warps, reserved=RESERVED_SMEM, **opts)
        if self.probe is not None:
            sm.observer = self.probe.smem_observer
        return sm

    def detached(self) -> "Launch":
        """A copy to send to a worker process (flashsim.sass.spread): no global memory (each batch gets its
        own view of a snapshot), no probe (``worker_checks`` says which diagnostics to collect), no callbacks."""
        out = copy.copy(self)
        out.memory = None
        out.probe = None
        out.options = dataclasses.replace(self.options, progress=None, cluster=None)
        p = self.probe
        out.worker_checks = None if p is None else (p.report.banks, p.report.races, p.report.initcheck,
                                                    p.report.max_records, p.name, p.report.timeline,
                                                    p.report.synccheck)
        return out

    def run(self) -> dict:
        """Run every CTA; returns counters: scheduling steps (one instruction for a group of warps) and
        warp-instructions (the instructions each warp executed, summed).

        The CTAs run in batches of ``options.ctas_per_batch``, in this process or as tasks on a Dask cluster
        (``options.cluster``, else the enclosing ``with flashsim.cluster.Cluster(...)``): the batches are the
        same, and so are the bits, the counts and the report (flashsim.sass.spread)."""
        total = math.prod(self.grid)
        per = max(1, int(self.options.ctas_per_batch))
        batches = CtaBatches(total, per)
        steps = warp_steps = 0
        first = 0
        try:
            cl = self.options.cluster if self.options.cluster is not None else cluster.current()
            if cl is not None and len(batches) > 1:
                why = spread.local_reason(self)
                if why is not None:
                    cl.note(f"kernel {self.name!r} runs in this process: {why}")
                else:
                    first, steps, warp_steps = spread.run_on(cl, self, batches)
            for k in range(first, len(batches)):
                ids = batches[k]
                m = Machine(self.program, self, ids)
                try:
                    m.run()
                finally:
                    if self.probe is not None:
                        self.probe.batch(m)
                steps += m.steps
                warp_steps += m.warp_steps
                if self.options.progress is not None:
                    self.options.progress(int(ids[-1]) + 1, total)
        finally:
            if self.probe is not None:
                self.probe.end()
        return {"steps": steps, "warp_instructions": warp_steps, "ctas": total}
