"""Three attention forward kernels written to test the SASS interpreter on structures the seed kernels do
not have, with numpy-in, numpy-out host wrappers that run them in the interpreter or on a GPU.

- ``attn_regs`` (gpu/kernels/attn_regs.cu): B_r = B_c = 64, mma.m16n8k16, P kept in registers, V by
  ldmatrix.trans, K/V double-buffered with cp.async groups (zero-filling tails), causal option, O and LSE.
- ``attn_spill`` (gpu/kernels/attn_spill.cu): one query row per thread in f32 FMA arithmetic, capped at 64
  registers so the SASS spills (STL/LDL) and keeps a dynamically indexed score array in local memory.
- ``attn_varlen`` (gpu/kernels/attn_varlen.cu): packed variable-length sequences (cu_seqlens); a
  data-dependent search for the CTA's sequence, warps that exit early, data-dependent loop trip counts,
  warp-shuffle reductions and no block-wide barrier.

``run(kernel, q, k, v, ...)`` lays the inputs out, launches through ``flashsim.cuda`` (``backend="interp"``,
the cubin that ``flashsim.kernels.sources.interpreted_module`` builds) or on the GPU through
:mod:`flashsim.device` (``backend="gpu"``: the very same cubin bytes, loaded with ``cupy.RawModule(path=...)``
after a sha256 check), and returns numpy (out, lse). Each kernel is one :class:`ExtraKernel` of
``EXTRA_KERNELS``, whose ``params`` list its parameters as the .cu declares them.
Outputs start filled with NaN, so an element a kernel forgets to write cannot pass for a result.
``random_problem(kernel, seed)`` draws a seeded problem in a kernel's domain (``draw_params``, through the
``pick`` interface of flashsim.kernels.problems); ``reference(problem)`` gives
the float64 truth and flash-attn's low-precision comparison output (``flashsim.attention``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashsim.attention import DTYPES, attention_lowp, attention_reference, check_args
from flashsim.errors import bad_argument
from flashsim.kernels.problems import Pick, rng_pick
from flashsim.kernels.sources import interpreted_module

__all__ = ["BACKENDS", "EXTRA_KERNELS", "ExtraKernel", "Problem", "cubin_sha256", "draw_params", "function_names",
           "make_problem", "module", "random_problem", "reference", "run"]

BACKENDS = ("interp", "gpu")
_DEFAULT_SMEM = 48 * 1024  # dynamic smem usable without opting in
_NAN16 = 0x7FFF  # a NaN in both float16 and bfloat16


#: what a kernel parameter of :attr:`ExtraKernel.params` names: the device arrays q, k, v, o, lse (and
#: cu_seqlens_q, cu_seqlens_k of a varlen kernel), the int32 seqlen_q, seqlen_k, heads, batch, total_q,
#: causal, and the float32 scale (softmax_scale) and scale_log2 (its product with log2(e), as FA2 has it)
PARAMS = ("q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_k", "seqlen_q", "seqlen_k", "heads", "batch",
          "total_q", "causal", "scale", "scale_log2")


@dataclass(frozen=True)
class ExtraKernel:
    """One kernel: its source file, entry points per (dtype, headdim), launch shape, parameter list and build
    options."""

    file: str
    entry_points: tuple[tuple[tuple[str, int], str], ...]  # ((dtype, headdim), extern "C" name)
    threads: int  # threads per CTA
    rows_per_cta: int  # query rows per CTA (a packed block of one sequence for varlen)
    smem: tuple[tuple[int, int], ...]  # (headdim, dynamic smem bytes)
    params: tuple[str, ...]  # the kernel's parameters in order, named from PARAMS
    options: tuple[str, ...] = ()  # NVRTC options (cupy's -ftz=true and -arch=sm_90 are added)
    varlen: bool = False  # inputs packed (total, heads, d) with cu_seqlens
    causal: bool = True  # supports the causal mask
    max_random_seqlen_k: int | None = None  # random_problem draws seqlen_k up to this (the interpreter's time)

    def __post_init__(self) -> None:
        unknown = [p for p in self.params if p not in PARAMS]
        if unknown:
            raise bad_argument("params", self.params, f"{self.file}: unknown parameters {unknown} (expected names "
                                                      f"from {PARAMS})")

    def function(self, dtype: str, headdim: int) -> str:
        for key, name in self.entry_points:
            if key == (dtype, headdim):
                return name
        raise bad_argument("q", f"{dtype} with headdim {headdim}",
                           f"{self.file} has entry points for {sorted(k for k, _ in self.entry_points)} only")

    def smem_bytes(self, headdim: int) -> int:
        return dict(self.smem)[headdim]

    @property
    def headdims(self) -> tuple[int, ...]:
        return tuple(sorted({d for (_, d), _ in self.entry_points}))

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(sorted({t for (t, _), _ in self.entry_points}))


def _entries(stem: str, headdims: tuple[int, ...], with_hdim: bool) -> tuple[tuple[tuple[str, int], str], ...]:
    out = []
    for d in headdims:
        for dtype, sfx in (("float16", "f16"), ("bfloat16", "bf16")):
            out.append(((dtype, d), f"{stem}_hdim{d}_{sfx}" if with_hdim else f"{stem}_{sfx}"))
    return tuple(out)


#: The kernels, by name.
EXTRA_KERNELS: dict[str, ExtraKernel] = {
    # sQ + 2 sK + 2 sV, 64 x d 16-bit each
    "attn_regs": ExtraKernel("attn_regs.cu", _entries("attn_regs", (64, 128), True), threads=128, rows_per_cta=64,
                             smem=((64, 5 * 64 * 64 * 2), (128, 5 * 64 * 128 * 2)),
                             params=("q", "k", "v", "o", "lse", "seqlen_q", "seqlen_k", "heads", "scale", "scale_log2",
                                     "causal")),
    # static smem only (sK, sV: 32 x 64 f32); the register cap is the kernel's __launch_bounds__(128, 8); its
    # per-key loop through local memory is the slowest to interpret, so random problems keep seqlen_k short
    "attn_spill": ExtraKernel("attn_spill.cu", _entries("attn_spill", (64,), False), threads=128, rows_per_cta=128,
                              smem=((64, 0),), params=("q", "k", "v", "o", "lse", "seqlen_q", "seqlen_k", "heads",
                                                       "scale_log2", "causal"), max_random_seqlen_k=80),
    # static smem only (per-warp Q rows, f32)
    "attn_varlen": ExtraKernel("attn_varlen.cu", _entries("attn_varlen", (64,), False), threads=128,
                               rows_per_cta=64, smem=((64, 0),), varlen=True,
                               params=("q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_k", "batch", "heads",
                                       "total_q", "scale", "scale_log2", "causal")),
}


def function_names(kernel: str) -> list[str]:
    """Every ``extern "C"`` entry point of a kernel."""
    return [name for _, name in _spec(kernel).entry_points]


def _spec(kernel: str) -> ExtraKernel:
    if not isinstance(kernel, str) or kernel not in EXTRA_KERNELS:
        raise bad_argument("kernel", kernel, f"expected one of {sorted(EXTRA_KERNELS)}")
    return EXTRA_KERNELS[kernel]


def module(kernel: str):
    """The kernel's source compiled for sm_90 (NVRTC, cupy's options) as a ``flashsim.cuda.RawModule``:
    the interpreter's module, whose ``.cubin`` the GPU backend loads."""
    spec = _spec(kernel)
    return interpreted_module(spec.file, options=spec.options)


def cubin_sha256(kernel: str) -> str:
    """sha256 (hex) of the cubin both backends run."""
    return module(kernel).sha256


# ---------------------------------------------------------------------------------------------- GPU side

def _gpu_function(kernel: str, name: str):
    """``name`` from the interpreter module's very cubin, loaded by cupy (flashsim.device.load_cubin)."""
    from flashsim import device

    cupy = device.require_gpu()
    gmod = device.load_cubin(module(kernel).cubin)
    try:
        return gmod.get_function(name)
    except cupy.cuda.driver.CUDADriverError as exc:
        raise bad_argument("function", name, f"no such kernel in the cubin of {kernel} ({exc})") from None


# ---------------------------------------------------------------------------------------------- checks


def _dtype_name(x: np.ndarray, name: str) -> str:
    for dname, dt in DTYPES.items():
        if x.dtype == dt:
            return dname
    raise bad_argument(name, f"array of {x.dtype}", f"expected one of {sorted(DTYPES)}")


def _as_array(x: Any, name: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise bad_argument(name, type(x).__name__, "expected a numpy array")
    return np.ascontiguousarray(x)


def _cu_seqlens(x: Any, name: str, total: int) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.ndim != 1 or x.dtype.kind not in "iu" or len(x) < 2:
        raise bad_argument(name, x, "expected a 1-d integer numpy array of batch + 1 offsets")
    a = x.astype(np.int64)
    if a[0] != 0 or (np.diff(a) < 0).any() or a[-1] != total:
        raise bad_argument(name, x.tolist(), f"expected offsets from 0, non-decreasing, ending at {total}")
    return a.astype(np.int32)


# ---------------------------------------------------------------------------------------------- launching


def _backend(backend: str):
    if backend == "interp":
        import flashsim.cuda as fc

        return fc
    if backend == "gpu":
        from flashsim import device

        return device.require_gpu()
    raise bad_argument("backend", backend, f"expected one of {BACKENDS}")


def _launch(kernel: str, name: str, smem: int, grid, threads: int, params: tuple, backend: str, exec_options):
    if backend == "interp":
        func = module(kernel).get_function(name)
        if smem > _DEFAULT_SMEM:
            func.max_dynamic_shared_size_bytes = smem
        return func(grid, (threads,), params, shared_mem=smem, exec_options=exec_options)
    from flashsim import device

    func = _gpu_function(kernel, name)
    if smem > _DEFAULT_SMEM:
        func.max_dynamic_shared_size_bytes = smem
    device.launch(func, grid, threads, params, shared_mem=smem)
    return None


def run(kernel: str, q, k, v, *, causal: bool = False, softmax_scale: float | None = None, cu_seqlens_q=None,
        cu_seqlens_k=None, backend: str = "interp", exec_options=None) -> tuple[np.ndarray, np.ndarray]:
    """Run ``kernel`` on numpy inputs and return (out, lse) as numpy.

    Dense kernels: q (batch, seqlen_q, heads, d), k and v (batch, seqlen_k, heads, d) of float16 or bfloat16;
    out like q, lse (batch, heads, seqlen_q) float32. ``attn_varlen``: q (total_q, heads, d), k and v
    (total_k, heads, d) with ``cu_seqlens_q`` / ``cu_seqlens_k`` (batch + 1 offsets); out like q, lse
    (heads, total_q). ``softmax_scale`` defaults to d ** -0.5; the kernels get its float32 value and its
    float32 product with log2(e) as FA2 computes them. ``exec_options``: the interpreter's
    ``flashsim.cuda.ExecOptions`` (e.g. a ``schedule_seed``).
    """
    spec = _spec(kernel)
    if backend not in BACKENDS:
        raise bad_argument("backend", backend, f"expected one of {BACKENDS}")
    if exec_options is not None and backend != "interp":
        raise bad_argument("exec_options", exec_options, "interpreter options: only with backend='interp'")
    q, k, v = (_as_array(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    dtype = _dtype_name(q, "q")
    for x, n in ((k, "k"), (v, "v")):
        if _dtype_name(x, n) != dtype:
            raise bad_argument(n, f"array of {x.dtype}", f"must have q's dtype ({dtype})")
    if causal and not spec.causal:
        raise NotImplementedError(f"kernel {kernel!r} has no causal mask")

    if spec.varlen:
        if q.ndim != 3 or k.ndim != 3 or k.shape != v.shape or k.shape[1:] != q.shape[1:]:
            raise bad_argument("q", q.shape, "expected q (total_q, heads, d), k and v (total_k, heads, d)")
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise bad_argument("cu_seqlens_q", cu_seqlens_q, f"{kernel} needs cu_seqlens_q and cu_seqlens_k")
        total_q, heads, d = q.shape
        cq = _cu_seqlens(cu_seqlens_q, "cu_seqlens_q", total_q)
        ck = _cu_seqlens(cu_seqlens_k, "cu_seqlens_k", k.shape[0])
        if len(cq) != len(ck):
            raise bad_argument("cu_seqlens_k", cu_seqlens_k, "must have as many offsets as cu_seqlens_q")
        # the kernel's scalars as FA2 computes them (one sequence stands for all: the scale is per call)
        args = check_args(q[None, :1], k[None, :1], v[None, :1], softmax_scale=softmax_scale)
        lse_shape, batch = (heads, total_q), len(cq) - 1
    else:
        if cu_seqlens_q is not None or cu_seqlens_k is not None:
            raise bad_argument("cu_seqlens_q", cu_seqlens_q, f"{kernel} takes padded (batch, seqlen, heads, d) inputs")
        args = check_args(q, k, v, softmax_scale=softmax_scale, causal=causal)
        if args.heads_k != args.heads:
            raise NotImplementedError(f"kernel {kernel!r} does not model GQA/MQA (heads_k != heads)")
        batch, _, heads, d = q.shape
        lse_shape = (batch, heads, q.shape[1])
    if d not in spec.headdims:
        raise bad_argument("q", q.shape, f"{kernel} supports head dims {spec.headdims}")
    name = spec.function(dtype, d)
    smem = spec.smem_bytes(d)

    out = np.full(q.shape, _NAN16, np.uint16)
    lse = np.full(lse_shape, np.nan, np.float32)
    if q.shape[0] == 0 or (not spec.varlen and q.shape[1] == 0):
        return out.view(q.dtype), lse
    xp = _backend(backend)
    d_q, d_k, d_v = (xp.asarray(x.view(np.uint16)) for x in (q, k, v))
    d_o, d_lse = xp.asarray(out), xp.asarray(lse)
    values = dict(q=d_q, k=d_k, v=d_v, o=d_o, lse=d_lse, heads=np.int32(heads), batch=np.int32(batch),
                  causal=np.int32(causal), scale=np.float32(args.softmax_scale_f32),
                  scale_log2=np.float32(args.scale_log2_f32))
    if spec.varlen:
        values.update(cu_seqlens_q=xp.asarray(cq), cu_seqlens_k=xp.asarray(ck), total_q=np.int32(total_q))
        # an upper bound on sum(ceil(len_q / rows)); the CTAs past the last block return at once
        grid = (math.ceil(total_q / spec.rows_per_cta) + batch, heads)
    else:
        values.update(seqlen_q=np.int32(q.shape[1]), seqlen_k=np.int32(k.shape[1]))
        grid = (math.ceil(q.shape[1] / spec.rows_per_cta), heads, batch)
    params = tuple(values[p] for p in spec.params)
    _launch(kernel, name, smem, grid, spec.threads, params, backend, exec_options)
    return xp.asnumpy(d_o).view(q.dtype), xp.asnumpy(d_lse)


# ---------------------------------------------------------------------------------------------- problems


@dataclass(frozen=True, eq=False)
class Problem:
    """One seeded problem for a kernel: the arguments of :func:`run` (``cu_seqlens_*`` for varlen only)."""

    kernel: str
    seed: int
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    causal: bool
    cu_seqlens_q: np.ndarray | None = None
    cu_seqlens_k: np.ndarray | None = None
    softmax_scale: float | None = None

    def run(self, backend: str = "interp", **kw) -> tuple[np.ndarray, np.ndarray]:
        return run(self.kernel, self.q, self.k, self.v, causal=self.causal, softmax_scale=self.softmax_scale,
                   cu_seqlens_q=self.cu_seqlens_q, cu_seqlens_k=self.cu_seqlens_k, backend=backend, **kw)

    def describe(self) -> str:
        dt = "f16" if self.q.dtype == np.float16 else "bf16"
        if self.cu_seqlens_q is not None:
            lq, lk = np.diff(self.cu_seqlens_q).tolist(), np.diff(self.cu_seqlens_k).tolist()
            shape = f"len_q={lq} len_k={lk} h={self.q.shape[1]} d={self.q.shape[2]}"
        else:
            b, sq, h, d = self.q.shape
            shape = f"b={b} sq={sq} sk={self.k.shape[1]} h={h} d={d}"
        return f"{self.kernel}[seed {self.seed}: {shape} {dt}{' causal' if self.causal else ''}]"


def _normal(rng, shape, dtype) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def make_problem(kernel: str, seed: int, *, seqlens_q, seqlens_k, heads: int = 1, headdim: int = 64,
                 dtype: str = "float16", causal: bool = False) -> Problem:
    """A problem of given shapes with seeded standard-normal values. Dense kernels: ``seqlens_q`` and
    ``seqlens_k`` are ints (batch 1) or lists with one length per batch entry, all equal (the inputs are
    padded tensors); ``attn_varlen``: lists of per-sequence lengths, zeros allowed."""
    spec = _spec(kernel)
    if dtype not in DTYPES:
        raise bad_argument("dtype", dtype, f"expected one of {sorted(DTYPES)}")
    dt = DTYPES[dtype]
    rng = np.random.default_rng([seed, sorted(EXTRA_KERNELS).index(kernel), 1])
    if spec.varlen:
        lq, lk = list(seqlens_q), list(seqlens_k)
        if len(lq) != len(lk) or not lq:
            raise bad_argument("seqlens_k", seqlens_k, "expected one length per sequence of seqlens_q")
        cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
        ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
        q = _normal(rng, (int(cq[-1]), heads, headdim), dt)
        k = _normal(rng, (int(ck[-1]), heads, headdim), dt)
        v = _normal(rng, (int(ck[-1]), heads, headdim), dt)
        return Problem(kernel, seed, q, k, v, bool(causal), cq, ck)
    lq = [seqlens_q] if isinstance(seqlens_q, (int, np.integer)) else list(seqlens_q)
    lk = [seqlens_k] if isinstance(seqlens_k, (int, np.integer)) else list(seqlens_k)
    if len(set(lq)) != 1 or len(set(lk)) != 1 or len(lq) != len(lk):
        raise bad_argument("seqlens_q", seqlens_q, f"{kernel} takes padded batches: one seqlen_q and one seqlen_k")
    batch = len(lq)
    q = _normal(rng, (batch, int(lq[0]), heads, headdim), dt)
    k = _normal(rng, (batch, int(lk[0]), heads, headdim), dt)
    v = _normal(rng, (batch, int(lk[0]), heads, headdim), dt)
    return Problem(kernel, seed, q, k, v, bool(causal))


def draw_params(pick: Pick, kernel: str, *, max_seqlen: int | None = None, dtype: str | None = None,
                headdim: int | None = None, causal: bool | None = None) -> dict:
    """The keyword arguments of :func:`make_problem` (all but the seed) for one problem in ``kernel``'s
    domain, every choice made through ``pick(name, options)``: the interface of
    ``flashsim.kernels.problems.draw_params``, so one definition serves a seeded generator
    (``problems.rng_pick``) and hypothesis (``flashsim.strategies.extra_cases``, which shrinks).

    attn_regs: batch 1-2, heads 1-2, seqlens 1..max_seqlen (default 150), d 64 or 128. attn_spill: batch 1-2,
    heads 1-2, seqlen_q 1..max_seqlen (default 150), seqlen_k 1..min(max_seqlen, 80), d 64. attn_varlen:
    1-4 sequences of len_q and len_k 0..max_seqlen (default 100; zero lengths included), heads 1-2, d 64.
    dtype, headdim and causal are drawn unless given."""
    spec = _spec(kernel)
    p = dict(dtype=dtype or pick("dtype", spec.dtypes), headdim=headdim or pick("headdim", spec.headdims),
             causal=pick("causal", (False, True)) if causal is None else bool(causal), heads=pick("heads", (1, 2)))
    if spec.varlen:
        top = max_seqlen or 100
        n = pick("sequences", range(1, 5))
        p["seqlens_q"] = [pick(f"len_q{i}", range(top + 1)) for i in range(n)]
        p["seqlens_k"] = [pick(f"len_k{i}", range(top + 1)) for i in range(n)]
        return p
    top = max_seqlen or 150
    batch = pick("batch", (1, 2))
    sq = pick("seqlen_q", range(1, top + 1))
    sk = pick("seqlen_k", range(1, min(top, spec.max_random_seqlen_k or top) + 1))
    p["seqlens_q"], p["seqlens_k"] = [sq] * batch, [sk] * batch
    return p


def random_problem(kernel: str, seed: int, *, max_seqlen: int | None = None, dtype: str | None = None,
                   headdim: int | None = None, causal: bool | None = None) -> Problem:
    """A seeded random problem in ``kernel``'s domain (:func:`draw_params` on a generator seeded by ``seed``
    and the kernel); seqlens are mostly not multiples of the tiles. Values are standard normal."""
    _spec(kernel)
    pick = rng_pick(np.random.default_rng([seed, sorted(EXTRA_KERNELS).index(kernel)]))
    return make_problem(kernel, seed, **draw_params(pick, kernel, max_seqlen=max_seqlen, dtype=dtype,
                                                    headdim=headdim, causal=causal))


def reference(p: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out_ref float64, lse_ref float64, out_lowp) in the kernel's layout: the float64 truth
    (``attention_reference``) and the plain low-precision attention (``attention_lowp``, f32 accumulation)
    that flash-attn's acceptance rule compares against. Varlen problems are computed sequence by sequence."""
    if p.cu_seqlens_q is None:
        args = check_args(p.q, p.k, p.v, softmax_scale=p.softmax_scale, causal=p.causal)
        ref, lse = attention_reference(p.q, p.k, p.v, args)
        lowp, _ = attention_lowp(p.q, p.k, p.v, args)
        return ref, lse, lowp
    total_q, heads, d = p.q.shape
    ref = np.zeros((total_q, heads, d), np.float64)
    lse = np.full((heads, total_q), np.inf, np.float64)
    lowp = np.zeros((total_q, heads, d), p.q.dtype)
    for b in range(len(p.cu_seqlens_q) - 1):
        q0, q1 = int(p.cu_seqlens_q[b]), int(p.cu_seqlens_q[b + 1])
        k0, k1 = int(p.cu_seqlens_k[b]), int(p.cu_seqlens_k[b + 1])
        if q1 == q0:
            continue
        qs, ks, vs = p.q[None, q0:q1], p.k[None, k0:k1], p.v[None, k0:k1]
        args = check_args(qs, ks, vs, softmax_scale=p.softmax_scale, causal=p.causal)
        r, l = attention_reference(qs, ks, vs, args)
        lp, _ = attention_lowp(qs, ks, vs, args)
        ref[q0:q1], lse[:, q0:q1], lowp[q0:q1] = r[0], l[0], lp[0]
    return ref, lse, lowp
