"""Arithmetic twin of gpu/kernels/fa_v5.cu (seed 001's v5/v6): the same floating-point instructions,
in the same order, on the same values, for every warp of the grid at once.

Each floating-point step below names the SASS that nvcc (CUDA 13.0, sm_90, -ftz=true as cupy's NVRTC
compiles it) emits for it, read with ``cuobjdump -sass``; the f32 values are
:class:`flashsim.numerics.cfloat.Float` under ``-ftz=true``, so each line reads as fa_v5.cu's. v6 differs
from v5 only in shared-memory addresses, so both kernels have this one twin. The state is batched by warp
tile ((warp tiles, 16 rows, ...) arrays, 4 consecutive tiles per CTA); the values ldmatrix, the smem
staging tiles and the shuffles move are taken from those arrays in the order the instructions combine
them, and ``flashsim.trace.record`` reads each lane's registers out of them at every FS_TRACE point of
fa_v5.cu (the same events the traced CUDA build records). The bank report comes from running the kernel's
own cubin in the SASS interpreter (``flashsim check``). The CTA (4 warps of 16 query rows) and the 16-key KV
tile come from the kernels' specs (flashsim.kernels.spec).
"""

from __future__ import annotations

import numpy as np

from flashsim.errors import bad_argument
from flashsim.kernels.spec import get
from flashsim.numerics import cvt
from flashsim.numerics.cfloat import FTZ as F  # fa_v5.cu: cupy's NVRTC -ftz=true, no fast math
from flashsim.numerics.cfloat import __expf, fmaxf, where
from flashsim.numerics.mma import mma_m16n8k16
from flashsim.trace.record import active, reg_index, tiled_index
from flashsim.trace.spec import array_names
from flashsim.warp.fragments import fragment

_INIT_M = np.float32(-1e20)


def _maps(d: int):
    """Where each traced register lives in this twin's per-CTA arrays (4 warp tiles each)."""

    def group(w, lane, r):  # pass r of the softmax: row 2r + lane / 16, column lane % 16 of a (16, 16) tile
        return w * 256 + (2 * (r % 8) + lane // 16) * 16 + lane % 16

    def ml(w, lane, r):  # lane < 16 holds row lane's {m, l}
        return np.where(lane < 16, w * 16 + lane, -1) + 0 * r

    # rc: the 16x16 f16 C tile (two n-tiles of the m16n8 C .f16 table) of warp w, as uint32 pairs (16, 8)
    out = dict(rc=tiled_index(fragment("mma.m16n8k16", "C", "f16"), 0, 1, 2, 8, per=2), md=reg_index(8, group),
               ml=reg_index(1, ml))
    for kk in range(0, d, 16):
        out[kk] = reg_index(8, lambda w, lane, r, kk=kk: w * 16 * d + (2 * r + lane // 16) * d + kk + lane % 16)
    return out


def forward(q, k, v, softmax_scale, rec=None, progress=None, kernel: str = "v5") -> np.ndarray:
    """O for q (batch, heads, N, d), k/v (batch, heads, M, d) as float16 bit patterns (uint16), with
    ``softmax_scale`` the float32 the kernel receives. Returns O (uint16, the layout of q). ``rec`` (a
    flashsim.trace.record.Recorder) gets the events fa_v5.cu's FS_TRACE marks. Every warp tile of the grid
    steps through the KV tiles together: ``progress(done, total)`` is called after each KV tile."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if np.asarray(x).dtype != np.uint16 or np.asarray(x).ndim != 4:
            raise bad_argument(name, getattr(x, "shape", x), "expected uint16 f16 bit patterns (batch, heads, seq, d)")
    b, h, n, d = q.shape
    m = k.shape[2]
    inst = get(kernel).instance(d)
    rows, kv = inst.block_m, inst.block_n  # 4 warps x 16 rows, 16 keys: the 16 x 16 tiles below
    if n % rows or m % kv:
        raise bad_argument("q.shape", q.shape, f"{kernel} needs N % {rows} and M % {kv} == 0")
    scale = np.float32(softmax_scale)
    t = b * h * (n // 16)                                   # one 16-row warp tile each
    qt = q.reshape(b, h, n // 16, 16, d).reshape(t, 16, d)
    kt = np.repeat(k.reshape(b * h, m, d), n // 16, axis=0)  # the (batch, head) K of each warp tile
    vt = np.repeat(v.reshape(b * h, m, d), n // 16, axis=0)
    o = np.zeros((t, 16, d), np.uint16)                     # O starts at zero in global memory
    prev_m = F.full((t, 16), _INIT_M)                       # init_ml: {m, l} = {-1e20, 0}
    prev_l = F.full((t, 16), 0.0)
    lane = np.arange(16)
    ctas = np.arange(t // 4)
    rec = active(rec, ctas)
    mp = _maps(d) if rec is not None else None

    def event(tag, *variables):  # per CTA: the 4 warp tiles of a CTA are consecutive
        rec.event(tag, ctas, *[(x.reshape(t // 4, -1), ix) for x, ix in variables])

    if rec is not None:
        event("init_ml")
        event("load_q")
    for j in range(0, m, 16):
        # mma_qk: S (16x16, f16 accumulator) over the d slices, n 0-7 then 8-15 per slice
        s = np.zeros((t, 16, 16), np.uint16)
        kj = kt[:, j:j + 16, :]
        for kk in range(0, d, 16):
            a = qt[:, :, kk:kk + 16]
            bt = np.ascontiguousarray(kj[:, :, kk:kk + 16].transpose(0, 2, 1))  # B = K^T (K x N)
            s[:, :, 0:8] = mma_m16n8k16(a, np.ascontiguousarray(bt[:, :, 0:8]), s[:, :, 0:8].copy(), atype="f16", ctype="f16")
            s[:, :, 8:16] = mma_m16n8k16(a, np.ascontiguousarray(bt[:, :, 8:16]), s[:, :, 8:16].copy(), atype="f16", ctype="f16")
        if rec is not None:
            event("load_kv")
            event("mma_qk", (s.view(np.uint32), mp["rc"]))
            event("store_s")
        # softmax: {m, d} = {h2f(S) * scale, 1} (HADD2.F32 is exact; FMUL.FTZ), md_allreduce16 over 16 lanes
        sf = F(cvt.cvt("cvt.f32.f16", s))
        vm, vd = sf * scale, F.full(sf.shape, 1.0)
        for mask in (8, 4, 2, 1):
            om, od = vm[..., lane ^ mask], vd[..., lane ^ mask]             # SHFL.BFLY
            mm = fmaxf(vm, om)
            vd = vd * __expf(vm - mm) + od * __expf(om - mm)                # FMUL.FTZ od, e ; FFMA.FTZ vd, e, t
            vm = mm
        # P = f2h(__expf(h2f(S) * scale - tile.m)): FFMA.FTZ, then __expf (FMUL.FTZ, MUFU.EX2), F2FP.F16 (rn)
        p = cvt.cvt("cvt.rn.f16.f32", __expf(sf * scale - vm[..., :1]).bits)
        if rec is not None:
            event("softmax", (vm.bits, mp["md"]), (vd.bits, mp["md"]), (p, mp["md"]))
        tile_m, tile_l = vm[..., 0], vd[..., 0]                              # lane 0 of each group stores
        # md_merge(prev, tile): FSETP.GT.FTZ, FSELs, big.d + small.d * __expf(small.m - big.m) (FFMA.FTZ)
        prev_wins = prev_m > tile_m
        big_m, small_m = where(prev_wins, prev_m, tile_m), where(prev_wins, tile_m, prev_m)
        big_l, small_l = where(prev_wins, prev_l, tile_l), where(prev_wins, tile_l, prev_l)
        new_m, new_l = big_m, big_l + small_l * __expf(small_m - big_m)
        # update_o per 16-wide slice of d: f2h(inv_l * (prev.d * e_prev * h2f(O) + e_tile * h2f(PV)))
        e_prev = __expf(prev_m - new_m)[..., None]
        e_tile = __expf(tile_m - new_m)[..., None]
        inv_l = (1.0 / new_l)[..., None]                                     # rcp.rn.ftz (l >= 1: never flushed)
        prev_d = prev_l[..., None] * e_prev                                  # FMUL.FTZ, once per step
        vj = vt[:, j:j + 16, :]
        for kk in range(0, d, 16):
            pv = np.empty((t, 16, 16), np.uint16)
            zero = np.zeros((t, 16, 8), np.uint16)
            pv[:, :, 0:8] = mma_m16n8k16(p, np.ascontiguousarray(vj[:, :, kk:kk + 8]), zero, atype="f16", ctype="f16")
            pv[:, :, 8:16] = mma_m16n8k16(p, np.ascontiguousarray(vj[:, :, kk + 8:kk + 16]), zero, atype="f16", ctype="f16")
            if rec is not None:
                event("mma_pv", (pv.view(np.uint32), mp["rc"]))
                event("store_o")
            old, new = F(cvt.cvt("cvt.f32.f16", o[:, :, kk:kk + 16])), F(cvt.cvt("cvt.f32.f16", pv))
            o[:, :, kk:kk + 16] = cvt.cvt("cvt.rn.f16.f32", (inv_l * (prev_d * old + e_tile * new)).bits)
            if rec is not None:
                event("update_o", (o, mp[kk]))
        if rec is not None:
            event("next_ml", (new_m.bits, mp["ml"]), (new_l.bits, mp["ml"]))
        prev_m, prev_l = new_m, new_l                                        # next_ml
        if progress is not None:
            progress(j // kv + 1, m // kv)
    return o.reshape(b, h, n, d)


def check(q, k, v, softmax_scale=None, kernel: str = "v5", **kw):
    """flash_attn_func's checks, the features ``kernel`` lacks (masks, softcap, GQA/MQA, bf16) and the
    v5/v6 preconditions (seed 001): N a multiple of the CTA's rows, M of the KV tile, d of 16. Returns
    the AttentionArgs; each failure names its precondition."""
    from flashsim.attention import check_args

    spec = get(kernel)
    args = check_args(q, k, v, softmax_scale=softmax_scale, **kw)
    spec.check_supported(args)
    inst = spec.instance_for(args)
    if args.seqlen_q % inst.block_m:
        raise bad_argument("q.shape", q.shape, f"kernel {kernel!r} needs seqlen_q % {inst.block_m} == 0 (N % (4*Br))")
    if args.seqlen_k % inst.block_n:
        raise bad_argument("k.shape", k.shape, f"kernel {kernel!r} needs seqlen_k % {inst.block_n} == 0 (M % Bc)")
    return args


def run(q, k, v, softmax_scale=None, *, kernel: str = "v5", rec=None, progress=None, threads: int | None = None,
        workers: int | None = None, scheduler: str | None = None, client=None, **kw) -> np.ndarray:
    """The twin with flash_attn_func's conventions: float16 (batch, seqlen, heads, d) in and out (no LSE).
    ``progress(done, total)`` counts KV tiles: every CTA of the grid steps through them together, in this
    process (``threads``, ``workers``, ``scheduler``, ``client`` and an enclosing cluster are noted and
    left unused)."""
    from flashsim.cluster import current, note

    args = check(q, k, v, softmax_scale, kernel, **kw)
    if workers is not None or scheduler is not None or client is not None or current() is not None:
        note(f"the {kernel} twin runs in this process: it steps every CTA of the grid together through the KV tiles")
    bits = [np.ascontiguousarray(np.asarray(x).transpose(0, 2, 1, 3)).view(np.uint16) for x in (q, k, v)]
    o = forward(*bits, np.float32(args.softmax_scale_f32), rec=rec, progress=progress, kernel=kernel)
    return np.ascontiguousarray(o.transpose(0, 2, 1, 3)).view(np.float16)


# ---------------------------------------------------------------------------------------------- the kernel


def launch_args(inst, args, q, k, v, xp):
    """fa_v5.cu's parameters on the array module ``xp``: Q, K, V, O as f16 patterns (batch, heads, seqlen,
    d), N, M, d, softmax_scale. The kernel reads O back at every KV step: ``reset()`` zeroes it."""
    d_q, d_k, d_v = (xp.asarray(np.ascontiguousarray(np.swapaxes(x, 1, 2)).view(np.uint16)) for x in (q, k, v))
    d_o = xp.zeros(d_q.shape, d_q.dtype)

    def fetch():
        out = xp.asnumpy(d_o).view(np.float16)
        return np.ascontiguousarray(np.swapaxes(out, 1, 2)), None

    params = (d_q, d_k, d_v, d_o, np.int32(args.seqlen_q), np.int32(args.seqlen_k), np.int32(args.headdim),
              np.float32(args.softmax_scale_f32))
    return params, fetch, lambda: d_o.fill(0)


#: the S and PV tiles as f16 pairs (mma C fragments), P and O as single f16; the {m, d} statistics f32
REGISTER_FORMATS = {"rc": "f16x2", "p": "f16", "o": "f16"}


def trace_registers(inst, tag: str) -> list[str]:
    """What fa_v5.cu's FS_TRACE points record: the f16 C fragment rc[4], the softmax passes' md_m[p], md_d[p]
    and p[p] (8 passes of two rows), the updated O o[p], and the running {m, l} of row ``lane``."""
    return {
        "mma_qk": array_names("rc", 4),
        "softmax": array_names("md_m", 8) + array_names("md_d", 8) + array_names("p", 8),
        "mma_pv": array_names("rc", 4),
        "update_o": array_names("o", 8),
        "next_ml": ["new_m", "new_l"],
    }.get(tag, [])


def trace_program(inst, steps: int) -> list[str]:
    """The tags a warp records for ``steps`` KV steps (a mma_pv, store_o, update_o per 16-wide slice of d)."""
    step = ["load_kv", "mma_qk", "store_s", "softmax"] + ["mma_pv", "store_o", "update_o"] * (inst.headdim // 16)
    return ["init_ml", "load_q"] + (step + ["next_ml"]) * steps


def tile_steps(inst, args) -> int:
    """CTAs x KV tiles of a launch."""
    return inst.ctas(args) * inst.kv_blocks(args)


def memory(inst, args, workers: int = 1) -> int:
    """Bytes a twin run allocates beyond the inputs: every 16-row warp tile at once, each with its own copy
    of its head's K and V (``workers`` does not matter: the twin runs in this process)."""
    nq = args.batch * args.seqlen_q * args.heads * args.headdim
    nk = args.batch * args.seqlen_k * args.heads_k * args.headdim
    tiles = args.batch * args.heads * (args.seqlen_q // 16)
    io = 2 * (nq + 2 * nk) + 6 * nq + 2 * 2 * tiles * args.seqlen_k * args.headdim
    return io + 4 * (16 * 16 * 4 * 12 + 16 * args.headdim * 4 * 4) * (tiles // 4)
