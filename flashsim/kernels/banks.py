"""Shared-memory bank report of the kernel1, fa2 and v5/v6 launches, by trace tag.

Every shared-memory warp instruction of kernel1.cu and fa2.cu is an explicit instruction of the source
(cp.async.cg 16 B, ldmatrix.x4 / .x4.trans, 32-bit STS of O, 128-bit LDS of O and 128-bit zero STS for rows
past the sequence end), with lane addresses that depend only on the launch shape. This module replays
those addresses for every CTA of a launch, per instruction, through ``flashsim.smem.wavefronts`` (the
bank model checked against Nsight Compute) and sums them per (tag, op) in a ``BankLedger``. The data
values never matter for banks, so no arithmetic runs here.

fa_v5.cu (v5/v6, ``v5_ledger``) also moves scalars through shared memory (16-bit scores and P, the MD_F
{m, l} records, O's staging tile); their widths and counts are those of the SASS that the kernels run
(cupy's NVRTC, CUDA 13.0, sm_90: Nsight Compute's source view of it, traces/banks/fa/README.md), e.g. an
MD_F read as one LDS.64 and the score re-read after each __syncwarp. The tags are the FS_TAG names of
the .cu files (``step:operand`` where a step touches several buffers). Nsight Compute's instruction-level
counters do not count cp.async.cg (L1 bypass) on sm_90 (traces/banks/banks.md), so its ldgsts rows have
no measured counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashsim.smem import BankLedger, wavefronts

LANE = np.arange(32)


@dataclass
class _Instr:
    tag: str
    op: str
    width: int
    addr: np.ndarray      # (32,) byte addresses
    active: np.ndarray    # (32,) bool
    count: int = 1        # times the CTA executes it


def _ledger(instrs: list[_Instr], ctas: int = 1) -> BankLedger:
    led = BankLedger()
    groups: dict = {}
    for ins in instrs:
        groups.setdefault((ins.tag, ins.op, ins.width), []).append(ins)
    for (tag, op, width), group in groups.items():
        addr = np.stack([g.addr for g in group]).astype(np.int64)
        act = np.stack([g.active for g in group])
        wf, ideal = wavefronts(addr, width=width, op=op, active=act, num=4)
        counts = np.array([g.count for g in group], np.int64) * ctas
        led.add(tag, op, np.repeat(wf, counts), np.repeat(ideal, counts))
    return led


# ------------------------------------------------------------------------------------------------ fa2

def _fa2_copy(tag, base, rows, d, valid, count):
    """copy_tile, executed ``count`` times: per warp and (i, j), cp.async for rows < valid, a 16-byte zero
    store for the others."""
    from flashsim.kernels.fa2 import smem_offset

    out = []
    if count == 0:
        return out
    for w in range(4):
        tid = 32 * w + LANE
        for i in range(rows // 16):
            for j in range(d // 64):
                r, c = tid // 8 + 16 * i, (tid % 8) * 8 + 64 * j
                addr = base + 2 * smem_offset(r, c, rows)
                ok = r < valid
                if ok.any():
                    out.append(_Instr(tag, "ldgsts", 16, addr, ok, count))
                if (~ok).any():
                    out.append(_Instr(tag, "st", 16, addr, ~ok, count))
    return out


def fa2_ledger(pb) -> BankLedger:
    """Bank report of one fa2.cu launch (``flashsim.kernels.fa2.Problem``), summed over its CTAs."""
    from flashsim.kernels.fa2 import BLOCK_M, smem_offset

    d, bn = pb.headdim, pb.block_n
    sq, sk, sv = 0, 2 * BLOCK_M * d, 2 * (BLOCK_M + bn) * d
    lo, hi = pb.n_block_range(np.arange(pb.m_blocks))
    per = pb.heads * pb.batch  # CTAs of one m_block
    ins = []
    for mb in range(pb.m_blocks):
        empty = hi[mb] <= lo[mb] if (pb.is_causal or pb.is_local or not pb.even_mn) else False
        if empty:
            continue  # writes O and lse to global memory only
        rows_left = pb.seqlen_q - mb * BLOCK_M
        steps = int(hi[mb] - lo[mb])
        last = int(hi[mb] - 1)
        ins += _fa2_copy("load_q", sq, BLOCK_M, d, rows_left, per)
        ins += _fa2_copy("load_k", sk, bn, d, pb.seqlen_k - last * bn, per)      # the prologue's K
        ins += _fa2_copy("load_k", sk, bn, d, bn, per * (steps - 1))            # next-K prefetches
        ins += _fa2_copy("load_v", sv, bn, d, pb.seqlen_k - last * bn, per)      # first step's V
        ins += _fa2_copy("load_v", sv, bn, d, bn, per * (steps - 1))
        full = np.ones(32, bool)
        for w in range(4):
            for ks in range(d // 16):
                for m in range(2):
                    r, c = w * 16 + m * 64 + LANE % 16, ks * 16 + (LANE // 16) * 8
                    ins.append(_Instr("mma_qk", "ldsm", 16, sq + 2 * smem_offset(r, c, BLOCK_M), full, per * steps))
                for n in range(0, bn // 8, 2):
                    r, c = n * 8 + LANE % 8 + (LANE // 16) * 8, ks * 16 + ((LANE // 8) % 2) * 8
                    ins.append(_Instr("mma_qk", "ldsm", 16, sk + 2 * smem_offset(r, c, bn), full, per * steps))
            for ks in range(bn // 16):
                for n in range(0, d // 8, 2):
                    r, c = ks * 16 + LANE % 16, n * 8 + (LANE // 16) * 8
                    ins.append(_Instr("mma_pv", "ldsm", 16, sv + 2 * smem_offset(r, c, bn), full, per * steps))
            g, t = LANE // 4, LANE % 4
            for m in range(2):
                for n in range(d // 8):
                    for dr in (0, 8):
                        r, c = w * 16 + m * 64 + g + dr, n * 8 + 2 * t
                        ins.append(_Instr("store_o", "st", 4, sq + 2 * smem_offset(r, c, BLOCK_M), full, per))
            tid = 32 * w + LANE
            for i in range(BLOCK_M // 16):
                for j in range(d // 64):
                    r, c = tid // 8 + 16 * i, (tid % 8) * 8 + 64 * j
                    ok = r < rows_left
                    if ok.any():
                        ins.append(_Instr("store_o", "ld", 16, sq + 2 * smem_offset(r, c, BLOCK_M), ok, per))
    return _ledger(ins)


# --------------------------------------------------------------------------------------------- kernel1

def kernel1_ledger(batch: int, heads: int, seqlen: int) -> BankLedger:
    """Bank report of one kernel1.cu launch (row-major, unswizzled 64 x 128 tiles)."""
    from flashsim.kernels.kernel1 import B_C, B_R, D_HEAD as D

    sq, sk, sv = 0, 2 * B_R * D, 4 * B_R * D
    n_kv = seqlen // B_C
    full = np.ones(32, bool)
    ins = []
    for w in range(4):
        def copy(tag, base, count):
            for r0 in range(0, 16, 4):
                for c0 in range(0, D, 64):
                    r, c = w * 16 + r0 + LANE // 8, c0 + (LANE % 8) * 8
                    ins.append(_Instr(tag, "ldgsts", 16, base + 2 * (r * D + c), full, count))
        copy("load_q", sq, 1)
        copy("load_k", sk, n_kv)
        copy("load_v", sv, n_kv)
        for k in range(D // 16):  # Q fragments, once
            r, c = w * 16 + LANE % 16, k * 16 + (LANE // 16) * 8
            ins.append(_Instr("load_q", "ldsm", 16, sq + 2 * (r * D + c), full))
        for k in range(D // 16):
            for n in range(0, B_C // 8, 2):
                r, c = n * 8 + LANE % 8 + (LANE // 16) * 8, k * 16 + ((LANE // 8) % 2) * 8
                ins.append(_Instr("mma_qk", "ldsm", 16, sk + 2 * (r * D + c), full, n_kv))
        for k in range(B_C // 16):
            for n in range(0, D // 8, 2):
                r, c = k * 16 + LANE % 16, n * 8 + (LANE // 16) * 8
                ins.append(_Instr("mma_pv", "ldsm", 16, sv + 2 * (r * D + c), full, n_kv))
        g, t = LANE // 4, LANE % 4
        for n in range(D // 8):
            for dr in (0, 8):
                r, c = w * 16 + g + dr, n * 8 + 2 * t
                ins.append(_Instr("store_o", "st", 4, sq + 2 * (r * D + c), full))
        for r0 in range(0, 16, 4):
            for c0 in range(0, D, 64):
                r, c = w * 16 + r0 + LANE // 8, c0 + (LANE % 8) * 8
                ins.append(_Instr("store_o", "ld", 16, sq + 2 * (r * D + c), full))
    return _ledger(ins, ctas=batch * heads * (seqlen // B_R))


# ------------------------------------------------------------------------------------------ v5 / v6

def _swz(off, b, m, s):
    return off ^ ((off >> s) & (((1 << b) - 1) << m))


def v5_ledger(batch: int, heads: int, seqlen_q: int, seqlen_k: int, d: int, swizzle: bool) -> BankLedger:
    """Bank report of one fa_v5.cu launch (v5, or v6 with ``swizzle``): every shared-memory instruction of
    the SASS that cupy's NVRTC builds (CUDA 13.0, sm_90, -ftz=true), per warp, in source order.

    Tags are the FS_TAG steps, ``step:operand`` where a step touches several buffers. What the SASS issues
    per warp (Nsight Compute's executed-instruction counts equal these; see traces/banks/fa/README.md):

    - init_ml: lanes 0-15 store {-1e20, 0} to w_prev[lane] and w_tile[lane]: 2 STS.64
    - load_q: STS.128 per 8 halves of the warp's 16 x d Q rows (d/16 per lane); load_kv: per KV step and
      per 1024 halves, one STS.128 to s_K and one to s_V (thread t copies halves 8t.., lanes past 16 d idle)
    - mma_qk / mma_pv: the ldmatrix.x4 of Q, K (per 16 of d), S (once) and V (.trans, per 16 of d)
    - store_s, store_o: 4 STS.32 of the C fragment to the 16-wide tile (store_o per 16 of d)
    - softmax, 8 passes of two rows (lanes 0-15 row 2p, 16-31 row 2p+1): LDS.U16 of the score; in lanes
      0 and 16 (lane % 16 == 0) LDS.64 of w_prev[row], STS.64 of w_tile[row] and of w_new[row]; the score
      is read again (LDS.U16: not kept across the __syncwarp), then LDS.32 of w_tile[row].m by every lane
      and STS.U16 of P to s_S
    - update_o, 8 passes per 16 of d: LDS.64 w_prev[row], LDS.32 w_tile[row].m, LDS.64 w_new[row] (all
      lanes: lanes 0-15 read one record, 16-31 the next) and LDS.U16 of s_O
    - next_ml: lanes 0-15 LDS.64 w_new[lane], STS.64 w_prev[lane]
    """
    qkv = (lambda o: _swz(o, 3, 3, 4)) if swizzle else (lambda o: o)
    tile = (lambda o: _swz(o, 1, 3, 3)) if swizzle else (lambda o: o)
    s_q, s_k = 0, 2 * 64 * d
    s_v = s_k + 2 * 16 * d
    s_qk = s_v + 2 * 16 * d
    s_s, s_o = s_qk + 2 * 64 * 16, s_qk + 2 * 2 * 64 * 16
    ml_prev = s_qk + 2 * 3 * 64 * 16                  # MD_F {float m, d}: 8 bytes, 16 per warp
    ml_tile, ml_new = ml_prev + 8 * 64, ml_prev + 2 * 8 * 64
    steps, slices = seqlen_k // 16, d // 16
    full = np.ones(32, bool)
    first16, heads16 = LANE < 16, LANE % 16 == 0
    g, c = LANE >> 2, (LANE & 3) * 2
    c16 = [g * 16 + c, (g + 8) * 16 + c, g * 16 + c + 8, (g + 8) * 16 + c + 8]  # store_c16's 4 stores
    ins = []

    def add(tag, op, width, addr, active=full, count=1):
        ins.append(_Instr(tag, op, width, np.asarray(addr, np.int64), active, count))

    for w in range(4):
        w_q, w_qk, w_s, w_o = s_q + 2 * w * 16 * d, s_qk + 2 * w * 256, s_s + 2 * w * 256, s_o + 2 * w * 256
        w_prev, w_tile, w_new = ml_prev + 8 * 16 * w, ml_tile + 8 * 16 * w, ml_new + 8 * 16 * w
        add("init_ml", "st", 8, w_prev + 8 * LANE, first16)
        add("init_ml", "st", 8, w_tile + 8 * LANE, first16)
        for i0 in range(0, 16 * d, 256):
            add("load_q", "st", 16, w_q + 2 * qkv(i0 + 8 * LANE))
        for i0 in range(0, 16 * d, 1024):
            i = i0 + 8 * (32 * w + LANE)
            ok = i < 16 * d
            if ok.any():
                add("load_kv:K", "st", 16, s_k + 2 * qkv(np.where(ok, i, 0)), ok, steps)
                add("load_kv:V", "st", 16, s_v + 2 * qkv(np.where(ok, i, 0)), ok, steps)
        for k in range(0, d, 16):
            add("mma_qk:Q", "ldsm", 16, w_q + 2 * qkv(k + (LANE % 16) * d + (LANE // 16) * 8), full, steps)
            add("mma_qk:K", "ldsm", 16, s_k + 2 * qkv(k + (LANE % 8) * d + ((LANE // 8) % 2) * 8
                                                      + (LANE // 16) * 8 * d), full, steps)
        for o in c16:
            add("store_s", "st", 4, w_qk + 2 * tile(o), full, steps)
        for p in range(8):
            row = 2 * p + LANE // 16
            at = tile(row * 16 + LANE % 16)
            add("softmax:QK", "ld", 2, w_qk + 2 * at, full, steps)
            add("softmax:ml", "ld", 8, w_prev + 8 * row, heads16, steps)
            add("softmax:ml", "st", 8, w_tile + 8 * row, heads16, steps)
            add("softmax:ml", "st", 8, w_new + 8 * row, heads16, steps)
            add("softmax:QK", "ld", 2, w_qk + 2 * at, full, steps)
            add("softmax:ml", "ld", 4, w_tile + 8 * row, full, steps)
            add("softmax:S", "st", 2, w_s + 2 * at, full, steps)
        add("mma_pv:S", "ldsm", 16, w_s + 2 * tile((LANE % 16) * 16 + (LANE // 16) * 8), full, steps)
        for k in range(0, d, 16):
            add("mma_pv:V", "ldsm", 16, s_v + 2 * qkv(k + (LANE % 16) * d + (LANE // 16) * 8), full, steps)
        for o in c16:
            add("store_o", "st", 4, w_o + 2 * tile(o), full, steps * slices)
        for p in range(8):
            row = 2 * p + LANE // 16
            add("update_o:ml", "ld", 8, w_prev + 8 * row, full, steps * slices)
            add("update_o:ml", "ld", 4, w_tile + 8 * row, full, steps * slices)
            add("update_o:ml", "ld", 8, w_new + 8 * row, full, steps * slices)
            add("update_o:O", "ld", 2, w_o + 2 * tile(row * 16 + LANE % 16), full, steps * slices)
        add("next_ml", "ld", 8, w_new + 8 * LANE, first16, steps)
        add("next_ml", "st", 8, w_prev + 8 * LANE, first16, steps)
    return _ledger(ins, ctas=batch * heads * (seqlen_q // 64))


def ledger_for(kernel: str, args) -> BankLedger | None:
    """The bank report of ``kernel`` on AttentionArgs ``args`` (None for a kernel with no replay)."""
    if kernel == "fa2":
        from flashsim.kernels.fa2 import problem_from_args

        return fa2_ledger(problem_from_args(args))
    if kernel == "kernel1":
        return kernel1_ledger(args.batch, args.heads, args.seqlen_q)
    if kernel in ("v5", "v6"):
        return v5_ledger(args.batch, args.heads, args.seqlen_q, args.seqlen_k, args.headdim, kernel == "v6")
    return None
