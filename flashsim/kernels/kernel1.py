"""Twin of gpu/kernels/kernel1.cu (seed 002's "Kernel 1"): the same floating-point instructions in the same
order on the same values, for a batch of CTAs at once.

Each step names the SASS nvcc 13.0 emits for it (sm_90, -ftz=true as cupy's NVRTC compiles; read with
``cuobjdump -sass``):

- S = Q K^T: mma.m16n8k16 f32, chained over the eight 16-wide slices of d from +0 (``mma.gemm``).
- ``S *= scale``: FMUL.FTZ.
- row max: FMNMX.FTZ from the running m over the lane's 16 values in register order, then with the
  lanes xor 1 and xor 2 (SHFL.BFLY).
- ``c = expf(m - m_new)``: FADD.FTZ then expf's accurate sequence, all .FTZ.
- ``l *= c; l += P...``: the multiply is contracted into the first add: FFMA.FTZ l, c, l, P0 (the spec's
  ``fma_rescale``; False: FMUL.FTZ then FADD.FTZ), then
  FADD.FTZ for the lane's 15 other values in register order.
- ``O *= c``: FMUL.FTZ; ``P = expf(S - m_new)``: FADD.FTZ + expf; P -> 16 bits: F2FP (cvt.rn pairs).
- O += P V: mma f32 chained over the four 16-key slices.
- epilogue: l + shfl_xor(l, 1), then + shfl_xor(l, 2) (FADD.FTZ); ``1.0f / l``: rcp.rn.ftz.f32;
  ``O *= inv``: FMUL.FTZ; O -> 16 bits (F2FP).

The f32 values are :class:`flashsim.numerics.cfloat.Float` under cupy's ``-ftz=true``, so each line of
the arithmetic reads as kernel1.cu's and runs the instructions listed. With a recorder
(``flashsim.trace.record``) the twin records, at every FS_TRACE point of kernel1.cu, each lane's registers
read out of its (rows, columns) tiles through the fragment layouts. The tiles (B_r query rows, B_c keys)
and d come from the kernel's spec (flashsim.kernels.spec).
"""

from __future__ import annotations

import functools

import numpy as np

from flashsim.errors import bad_argument
from flashsim.kernels.common import MMA_TYPE, XOR, CtaJob, narrow, quad_merge, quad_split, run_job
from flashsim.kernels.spec import get
from flashsim.numerics.cfloat import FTZ as F  # kernel1.cu: cupy's NVRTC -ftz=true, no fast math
from flashsim.numerics.cfloat import expf, fmaxf, fmul_rn
from flashsim.numerics.mma import gemm
from flashsim.trace.record import acc_index, active, afrag_index, quad_index
from flashsim.trace.spec import array_names


def check(q, k, v, softmax_scale=None, kernel: str = "kernel1", **kw):
    """flash_attn_func's checks, the features ``kernel`` lacks (masks, softcap, GQA/MQA) and seed 002's
    configuration: its head dim, seqlen_q == seqlen_k, seqlen a multiple of B_r. Returns the AttentionArgs;
    each failure names its precondition."""
    from flashsim.attention import check_args

    spec = get(kernel)
    args = check_args(q, k, v, softmax_scale=softmax_scale, **kw)
    spec.check_supported(args)
    inst = spec.instance_for(args)
    if args.seqlen_q != args.seqlen_k:
        raise bad_argument("k.shape", k.shape, f"kernel {kernel!r} needs seqlen_q == seqlen_k "
                                               f"({args.seqlen_q} != {args.seqlen_k})")
    if args.seqlen_q % inst.block_m:
        raise bad_argument("q.shape", q.shape, f"kernel {kernel!r} needs seqlen % {inst.block_m} == 0 (B_r = "
                                               f"{inst.block_m} query rows per CTA)")
    return args


def _maps(bc: int, d: int):
    """Where each traced register lives in this twin's arrays (flashsim.trace.record): warp w holds rows
    16 w + (0..15), one m-tile."""

    return dict(qf=afrag_index(0, 1, d // 2, d // 16), s=acc_index(0, 1, bc, bc // 8), p=quad_index(0, 1, bc // 4),
                row=quad_index(0, 1, 0, 4), o=acc_index(0, 1, d, d // 8), pf=afrag_index(0, 1, bc // 2, bc // 16))


def _ctas(q, k, v, scale, dtype, tiles, idx, rec=None, hook=None):
    """CTAs ``idx`` of the grid (q_block fastest, then head, then batch): their O tiles (g, B_r, d) uint16;
    ``tiles`` = (B_r, B_c, fma_rescale: l *= c contracted into the first add). ``rec`` (a
    flashsim.trace.record.Recorder) gets the events kernel1.cu's FS_TRACE marks; ``hook(idx, step, steps)``
    (a flashsim.kernels.common.StepHook) is called before each KV step (progress, cancellation)."""
    br, bc, fma_rescale = tiles
    b, n, h, d = q.shape
    rec = active(rec, idx)
    mp = _maps(bc, d) if rec is not None else None
    nq = n // br
    qb, head, sample = idx % nq, (idx // nq) % h, idx // (nq * h)
    g = idx.size
    rows = qb[:, None] * br + np.arange(br)[None, :]                          # (g, B_r)
    qt = q[sample[:, None], rows, head[:, None], :]                             # (g, B_r, d)
    if rec is not None:
        rec.event("load_q", idx, (qt.view(np.uint32), mp["qf"]))
    mt = MMA_TYPE[dtype]
    acc = F(np.zeros((g, br, d), np.uint32))
    m = F.full((g, br, 4), -np.inf)                                             # (g, B_r, 4): a quad's copies
    l = F.full((g, br, 4), 0.0)
    for j in range(n // bc):
        if hook is not None:
            hook(idx, j, n // bc)
        keys = j * bc + np.arange(bc)[None, :]
        kj = k[sample[:, None], keys, head[:, None], :]                             # (g, B_c, d)
        vj = v[sample[:, None], keys, head[:, None], :]
        if rec is not None:
            rec.event("load_k", idx)
        s = gemm(qt, np.ascontiguousarray(kj.transpose(0, 2, 1)), np.zeros((g, br, bc), np.uint32), atype=mt)
        if rec is not None:
            rec.event("mma_qk", idx, (s, mp["s"]))
        s = F(quad_split(s)) * scale                                             # (g, B_r, 4, B_c / 4)
        m_new = m
        for i in range(bc // 4):                                                # the lane's values in order
            m_new = fmaxf(m_new, s[..., i])
        for x in (1, 2):
            m_new = fmaxf(m_new, m_new[..., XOR[x]])
        c = expf(m - m_new)                                                     # equal over the quad
        acc = acc * c[..., :1]
        p = expf(s - m_new[..., None])
        l = (c * l if fma_rescale else fmul_rn(c, l)) + p[..., 0]
        for i in range(1, bc // 4):
            l = l + p[..., i]
        m = m_new
        pf = narrow(quad_merge(p.bits), dtype)
        if rec is not None:
            rec.event("softmax", idx, (m.bits, mp["row"]), (l.bits, mp["row"]), (p.bits, mp["p"]),
                      (acc.bits, mp["o"]), (pf.view(np.uint32), mp["pf"]))
            rec.event("load_v", idx)
        acc = F(gemm(pf, vj, acc.bits, atype=mt))
        if rec is not None:
            rec.event("mma_pv", idx, (acc.bits, mp["o"]))
    for x in (1, 2):
        l = l + l[..., XOR[x]]
    acc = acc * (1.0 / l[..., :1])
    if rec is not None:
        rec.event("normalize", idx, (l.bits, mp["row"]), (acc.bits, mp["o"]))
        rec.event("store_o", idx)
    return narrow(acc.bits, dtype)


def cta_batch(params, inputs: dict, idx: np.ndarray, hook=None, rec=None) -> np.ndarray:
    """The O tiles of the CTAs ``idx``; ``params`` = (softmax_scale as float32, dtype, (B_r, B_c, fma_rescale)):
    what a batch computes wherever it runs (flashsim.kernels.common.CtaJob)."""
    scale, dtype, tiles = params
    return _ctas(inputs["q"], inputs["k"], inputs["v"], scale, dtype, tiles, idx, rec, hook)


def _store(o: np.ndarray, b_r: int, idx: np.ndarray, tiles: np.ndarray) -> None:
    """Write a batch's O tiles (B_r rows each) into ``o`` (batch, seqlen, heads, d)."""
    b, n, h, d = o.shape
    nq = n // b_r
    qb, head, sample = idx % nq, (idx // nq) % h, idx // (nq * h)
    rows = qb[:, None] * b_r + np.arange(b_r)[None, :]
    o[sample[:, None], rows, head[:, None], :] = tiles


def forward(q, k, v, softmax_scale, *, kernel: str = "kernel1", dtype: str = "float16", batch: int = 32,
            threads: int | None = None, progress=None, rec=None, cluster=None) -> np.ndarray:
    """O for q, k, v (batch, seqlen, heads, d) as 16-bit patterns (uint16) of ``dtype``, with
    ``softmax_scale`` the float32 the kernel receives. The CTAs run in batches on ``threads`` threads, or on the
    workers of ``cluster`` (or of an enclosing ``with flashsim.cluster.Cluster(...)``): the same bits."""
    spec = get(kernel)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if np.asarray(x).dtype != np.uint16 or np.asarray(x).ndim != 4:
            raise bad_argument(name, getattr(x, "shape", x), "expected uint16 bit patterns (batch, seqlen, heads, d)")
    if dtype not in spec.dtypes:
        raise bad_argument("dtype", dtype, f"expected one of {spec.dtypes}")
    b, n, h, d = q.shape
    inst = spec.instance(d)
    if n % inst.block_m or k.shape != q.shape or v.shape != q.shape:
        raise bad_argument("q.shape", q.shape, f"{kernel} needs q, k, v of one shape with seqlen % {inst.block_m} == 0")
    o = np.zeros_like(q)
    job = CtaJob(cta_batch if rec is None else functools.partial(cta_batch, rec=rec),
                 (np.float32(softmax_scale), dtype, (inst.block_m, inst.block_n, inst.fma_rescale)),
                 {"q": q, "k": k, "v": v},
                 lambda idx, tiles: _store(o, inst.block_m, idx, tiles), b * h * (n // inst.block_m), batch,
                 local_only=None if rec is None else "a trace recorder sees the CTAs in order, one batch at a time")
    run_job(job, threads=threads, progress=progress, cluster=cluster)
    return o


def run(q, k, v, softmax_scale=None, *, kernel: str = "kernel1", rec=None, progress=None, threads: int | None = None,
        workers: int | None = None, scheduler: str | None = None, client=None, **kw) -> np.ndarray:
    """The twin with flash_attn_func's conventions: (batch, seqlen, heads, d) float16 or bfloat16 in and out
    (no LSE). ``progress(done, total)`` is called as CTAs finish (fractions while a batch runs). Where the CTAs
    run: ``threads``, ``workers``, ``scheduler`` and ``client`` as in :func:`flashsim.kernels.fa2.run`."""
    from flashsim.cluster import using

    args = check(q, k, v, softmax_scale, kernel, **kw)
    bits = [np.ascontiguousarray(np.asarray(x)).view(np.uint16) for x in (q, k, v)]
    with using(workers=workers, scheduler=scheduler, client=client) as cl:
        o = forward(*bits, np.float32(args.softmax_scale_f32), kernel=kernel, dtype=args.dtype, rec=rec,
                    progress=progress, threads=threads, cluster=cl)
    return o.view(np.asarray(q).dtype)


# ---------------------------------------------------------------------------------------------- the kernel


def launch_args(inst, args, q, k, v, xp):
    """kernel1.cu's parameters on the array module ``xp``: Q, K, V, O as 16-bit patterns (batch, seqlen,
    heads, d), seq_len, n_heads, softmax_scale; ``fetch()`` gives (out, None)."""
    d_q, d_k, d_v = (xp.asarray(np.ascontiguousarray(x).view(np.uint16)) for x in (q, k, v))
    d_o = xp.zeros(d_q.shape, d_q.dtype)
    params = (d_q, d_k, d_v, d_o, np.int32(args.seqlen_q), np.int32(args.heads), np.float32(args.softmax_scale_f32))
    return params, lambda: (xp.asnumpy(d_o).view(q.dtype), None), None


#: the packed 16-bit pairs (A fragments of Q and P); every other register is an f32
REGISTER_FORMATS = {"qf": "{half}x2", "pf": "{half}x2"}


def trace_registers(inst, tag: str) -> list[str]:
    """What kernel1.cu's FS_TRACE points record: Q's A fragments qf[k][r] (d / 16 slices), S s[n][e] (B_c / 8
    n-tiles), O o[n][e] (d / 8 n-tiles), the row statistics m[i], l[i] and P's A fragments pf[k][r]."""
    nt, dt = inst.block_n // 8, inst.headdim // 8
    s, o = array_names("s", nt, 4), array_names("o", dt, 4)
    return {
        "load_q": array_names("qf", inst.headdim // 16, 4),
        "mma_qk": s,
        "softmax": array_names("m", 2) + array_names("l", 2) + s + o + array_names("pf", inst.block_n // 16, 4),
        "mma_pv": o,
        "normalize": array_names("l", 2) + o,
    }.get(tag, [])


def trace_program(inst, steps: int) -> list[str]:
    """The tags a warp records for ``steps`` KV steps."""
    return ["load_q"] + ["load_k", "mma_qk", "softmax", "load_v", "mma_pv"] * steps + ["normalize", "store_o"]


def tile_steps(inst, args) -> int:
    """CTAs x KV blocks of a launch."""
    return inst.ctas(args) * inst.kv_blocks(args)


def memory(inst, args, workers: int = 1) -> int:
    """Bytes a twin run allocates beyond the inputs: bit copies, the output and the working arrays of about
    32 CTAs per thread (or worker) in flight."""
    nq = args.batch * args.seqlen_q * args.heads * args.headdim
    nk = args.batch * args.seqlen_k * args.heads_k * args.headdim
    bm, bn, d = inst.block_m, inst.block_n, inst.headdim
    per_cta = bm * d * 18 + bm * bn * 32 + bm * d * 8
    return 2 * (nq + 2 * nk) + 4 * nq + per_cta * min(32 * workers, inst.ctas(args))
