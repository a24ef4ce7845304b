"""Twin of gpu/kernels/kernel1.cu (seed 002's "Kernel 1"): the same floating-point instructions in the same
order on the same values, for a batch of CTAs at once.

Each step names the SASS nvcc 13.0 emits for it (sm_90, -ftz=true as cupy's NVRTC compiles; read with
``cuobjdump -sass``):

- S = Q K^T: mma.m16n8k16 f32, chained over the eight 16-wide slices of d from +0 (``mma.gemm``).
- ``S *= scale``: FMUL.FTZ.
- row max: FMNMX.FTZ from the running m over the lane's 16 values in register order, then with the
  lanes xor 1 and xor 2 (SHFL.BFLY).
- ``c = expf(m - m_new)``: FADD.FTZ then expf's accurate sequence, all .FTZ (``cuda_math.expf(ftz=True)``).
- ``l *= c; l += P...``: the multiply is contracted into the first add: FFMA.FTZ l, c, l, P0, then
  FADD.FTZ for the lane's 15 other values in register order.
- ``O *= c``: FMUL.FTZ; ``P = expf(S - m_new)``: FADD.FTZ + expf; P -> 16 bits: F2FP (cvt.rn pairs).
- O += P V: mma f32 chained over the four 16-key slices.
- epilogue: l + shfl_xor(l, 1), then + shfl_xor(l, 2) (FADD.FTZ); ``1.0f / l``: rcp.rn.ftz.f32;
  ``O *= inv``: FMUL.FTZ; O -> 16 bits (F2FP).

With a recorder (``flashsim.trace.record``) the twin records, at every FS_TRACE point of kernel1.cu,
each lane's registers read out of its (rows, columns) tiles through the fragment layouts.
"""

from __future__ import annotations

import functools

import numpy as np

from flashsim.errors import bad_argument
from flashsim.kernels.common import MMA_TYPE, NEG_INF, SIGN, XOR, CtaJob, f32, narrow, quad_merge, quad_split, run_job
from flashsim.numerics import cuda_math, fp32, sfu
from flashsim.numerics.mma import gemm
from flashsim.trace.record import acc_index, active, afrag_index, quad_index

B_R = B_C = 64
D_HEAD = 128
DTYPES = ("float16", "bfloat16")


def check(q, k, v, softmax_scale=None, kernel: str = "kernel1"):
    """flash_attn_func's checks plus seed 002's configuration: fp16/bf16, d_head 128, seqlen_q == seqlen_k,
    seqlen % 64, no GQA/MQA. Returns the AttentionArgs; each failure names its precondition."""
    from flashsim.attention import check_args

    args = check_args(q, k, v, softmax_scale=softmax_scale)
    if args.headdim != D_HEAD:
        raise bad_argument("q.shape", q.shape, f"kernel {kernel!r} is built for headdim {D_HEAD} only (d_head = 128)")
    if args.seqlen_q != args.seqlen_k:
        raise bad_argument("k.shape", k.shape, f"kernel {kernel!r} needs seqlen_q == seqlen_k "
                                               f"({args.seqlen_q} != {args.seqlen_k})")
    if args.seqlen_q % B_R:
        raise bad_argument("q.shape", q.shape, f"kernel {kernel!r} needs seqlen % {B_R} == 0 (B_r = B_c = 64)")
    if args.heads_k != args.heads:
        raise bad_argument("k.shape", k.shape,
                           f"kernel {kernel!r} needs as many kv heads as query heads ({args.heads}): no GQA/MQA")
    return args


def _maps():
    """Where each traced register lives in this twin's arrays (flashsim.trace.record)."""

    return dict(qf=afrag_index(0, 1, D_HEAD // 2, D_HEAD // 16), s=acc_index(0, 1, B_C, B_C // 8),
                p=quad_index(0, 1, B_C // 4), row=quad_index(0, 1, 0, 4), o=acc_index(0, 1, D_HEAD, D_HEAD // 8),
                pf=afrag_index(0, 1, B_C // 2, B_C // 16))


def _ctas(q, k, v, scale, dtype, idx, rec=None, hook=None):
    """CTAs ``idx`` of the grid (q_block fastest, then head, then batch): their O tiles (g, 64, 128) uint16.
    ``rec`` (a
    flashsim.trace.record.Recorder) gets the events kernel1.cu's FS_TRACE marks; ``hook(idx, step, steps)`` (a
    flashsim.kernels.common.StepHook) is called before each KV step (progress, cancellation)."""
    rec = active(rec, idx)
    mp = _maps() if rec is not None else None
    b, n, h, d = q.shape
    nq = n // B_R
    qb, head, sample = idx % nq, (idx // nq) % h, idx // (nq * h)
    g = idx.size
    rows = qb[:, None] * B_R + np.arange(B_R)[None, :]                          # (g, 64)
    qt = q[sample[:, None], rows, head[:, None], :]                             # (g, 64, 128)
    if rec is not None:
        rec.event("load_q", idx, (qt.view(np.uint32), mp["qf"]))
    mt = MMA_TYPE[dtype]
    acc = np.zeros((g, B_R, D_HEAD), np.uint32)
    m = np.full((g, B_R, 4), NEG_INF, np.uint32)
    l = np.zeros((g, B_R, 4), np.uint32)
    scale = f32(scale, (g, B_R, B_C))
    for j in range(n // B_C):
        if hook is not None:
            hook(idx, j, n // B_C)
        keys = j * B_C + np.arange(B_C)[None, :]
        kj = k[sample[:, None], keys, head[:, None], :]                             # (g, 64, 128)
        vj = v[sample[:, None], keys, head[:, None], :]
        if rec is not None:
            rec.event("load_k", idx)
        s = gemm(qt, np.ascontiguousarray(kj.transpose(0, 2, 1)), np.zeros((g, B_R, B_C), np.uint32), atype=mt)
        if rec is not None:
            rec.event("mma_qk", idx, (s, mp["s"]))
        s = quad_split(fp32.mul(s, scale, ftz=True))                            # (g, 64, 4, 16)
        m_new = m
        for c in range(s.shape[-1]):
            m_new = fp32.fmax(m_new, s[..., c], ftz=True)
        for x in (1, 2):
            m_new = fp32.fmax(m_new, m_new[..., XOR[x]], ftz=True)
        c_ = cuda_math.expf(fp32.add(m, m_new ^ SIGN, ftz=True), ftz=True)        # (g, 64, 4): equal over the quad
        acc = fp32.mul(acc, np.repeat(c_[..., :1], D_HEAD, axis=-1), ftz=True)
        p = cuda_math.expf(fp32.add(s, np.broadcast_to((m_new ^ SIGN)[..., None], s.shape).copy(), ftz=True), ftz=True)
        l = fp32.fma(c_, l, np.ascontiguousarray(p[..., 0]), ftz=True)
        for c in range(1, p.shape[-1]):
            l = fp32.add(l, np.ascontiguousarray(p[..., c]), ftz=True)
        m = m_new
        pf = narrow(quad_merge(p), dtype)
        if rec is not None:
            rec.event("softmax", idx, (m, mp["row"]), (l, mp["row"]), (p, mp["p"]), (acc, mp["o"]),
                      (pf.view(np.uint32), mp["pf"]))
            rec.event("load_v", idx)
        acc = gemm(pf, vj, acc, atype=mt)
        if rec is not None:
            rec.event("mma_pv", idx, (acc, mp["o"]))
    for x in (1, 2):
        l = fp32.add(l, l[..., XOR[x]], ftz=True)
    inv = sfu.rcp_rn_ftz_f32(np.ascontiguousarray(l[..., 0]))
    acc = fp32.mul(acc, np.repeat(inv[..., None], D_HEAD, axis=-1), ftz=True)
    if rec is not None:
        rec.event("normalize", idx, (l, mp["row"]), (acc, mp["o"]))
        rec.event("store_o", idx)
    return narrow(acc, dtype)


def cta_batch(params, inputs: dict, idx: np.ndarray, hook=None, rec=None) -> np.ndarray:
    """The O tiles of the CTAs ``idx``; ``params`` = (softmax_scale as float32, dtype): what a batch computes
    wherever it runs (flashsim.kernels.common.CtaJob)."""
    scale, dtype = params
    return _ctas(inputs["q"], inputs["k"], inputs["v"], scale, dtype, idx, rec, hook)


def _store(o: np.ndarray, idx: np.ndarray, tiles: np.ndarray) -> None:
    """Write a batch's O tiles into ``o`` (batch, seqlen, heads, 128)."""
    b, n, h, d = o.shape
    nq = n // B_R
    qb, head, sample = idx % nq, (idx // nq) % h, idx // (nq * h)
    rows = qb[:, None] * B_R + np.arange(B_R)[None, :]
    o[sample[:, None], rows, head[:, None], :] = tiles


def forward(q, k, v, softmax_scale, *, dtype: str = "float16", batch: int = 32, threads: int | None = None,
            progress=None, rec=None, cluster=None) -> np.ndarray:
    """O for q, k, v (batch, seqlen, heads, 128) as 16-bit patterns (uint16) of ``dtype``, with
    ``softmax_scale`` the float32 the kernel receives. The CTAs run in batches on ``threads`` threads, or on the
    workers of ``cluster`` (or of an enclosing ``with flashsim.cluster.Cluster(...)``): the same bits."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if np.asarray(x).dtype != np.uint16 or np.asarray(x).ndim != 4:
            raise bad_argument(name, getattr(x, "shape", x), "expected uint16 bit patterns (batch, seqlen, heads, 128)")
    if dtype not in DTYPES:
        raise bad_argument("dtype", dtype, f"expected one of {DTYPES}")
    b, n, h, d = q.shape
    if d != D_HEAD or n % B_R or k.shape != q.shape or v.shape != q.shape:
        raise bad_argument("q.shape", q.shape, "kernel1 needs q, k, v of one shape with d = 128 and seqlen % 64 == 0")
    o = np.zeros_like(q)
    job = CtaJob(cta_batch if rec is None else functools.partial(cta_batch, rec=rec),
                 (np.float32(softmax_scale), dtype), {"q": q, "k": k, "v": v},
                 lambda idx, tiles: _store(o, idx, tiles), b * h * (n // B_R), batch,
                 local_only=None if rec is None else "a trace recorder sees the CTAs in order, one batch at a time")
    run_job(job, threads=threads, progress=progress, cluster=cluster)
    return o


def run(q, k, v, softmax_scale=None, *, kernel: str = "kernel1", rec=None, progress=None, threads: int | None = None,
        workers: int | None = None, scheduler: str | None = None, client=None) -> np.ndarray:
    """The twin with gpu.fa_kernels' conventions: (batch, seqlen, heads, 128) float16 or bfloat16 in and out.
    ``progress(done, total)`` is called as CTAs finish (fractions while a batch runs). Where the CTAs run:
    ``threads``, ``workers``, ``scheduler`` and ``client`` as in :func:`flashsim.kernels.fa2.run`."""
    from flashsim.cluster import using

    args = check(q, k, v, softmax_scale, kernel)
    bits = [np.ascontiguousarray(np.asarray(x)).view(np.uint16) for x in (q, k, v)]
    with using(workers=workers, scheduler=scheduler, client=client) as cl:
        o = forward(*bits, np.float32(args.softmax_scale_f32), dtype=args.dtype, rec=rec, progress=progress,
                    threads=threads, cluster=cl)
    return o.view(np.asarray(q).dtype)
