// Probes of the SASS forms that Triton's ptxas (12.8) and other compilers emit beside NVRTC 13.0's: sign and
// zero extension of a bit field (SGXT), bit masks (BMSK), f32 arithmetic and compares without flush-to-zero,
// votes in converged and divergent code, a wait on a set of scoreboards with a tensor-map
// fence (DEPBAR {5,4,3,2,1,0}; UTMACCTL.IV) over cp.async copies in flight (LDGSTS), f32 to f16 / bf16 in
// every rounding and saturation F2FP has, warp collectives where ptxas cannot prove the warp converged
// (BRA.DIV; WARPSYNC.COLLECTIVE ... ENDCOLLECTIVE; WARPSYNC.EXCLUSIVE), and the shared atomics ptxas builds
// from compare-and-store loops (ATOMS.CAST.SPIN[.64]) with many lanes on one word. gpu/form_probes.py holds
// the table (inputs, the forms each kernel must contain, numpy references) and builds this file twice: with
// NVRTC 13.0, and as NVRTC's PTX assembled by Triton's ptxas 12.8, so that both compilers' SASS is probed.
// Conventions as gpu/kernels/sass_probes.cu: (inputs..., outputs..., int n), thread i < n handles element i.
// No CUDA headers: intrinsics are builtins, the rest is inline PTX.

typedef unsigned int u32;
typedef unsigned long long u64;

#define TID ((int)(blockIdx.x * blockDim.x + threadIdx.x))
#define GUARD        \
    const int i = TID; \
    if (i >= n) return;

// szext.{clamp,wrap}.{u32,s32} with a register and an immediate width, and bfe, which ptxas builds from a
// shift and SGXT: SGXT, SGXT.W, SGXT.U32, SGXT.W.U32
extern "C" __global__ void probe_szext(const u32* a, const u32* s, u32* out, int n) {
    GUARD
    u32 x = a[i], k = s[i], r[10];
    asm("szext.clamp.u32 %0, %1, %2;" : "=r"(r[0]) : "r"(x), "r"(k));
    asm("szext.wrap.u32 %0, %1, %2;" : "=r"(r[1]) : "r"(x), "r"(k));
    asm("szext.clamp.s32 %0, %1, %2;" : "=r"(r[2]) : "r"(x), "r"(k));
    asm("szext.wrap.s32 %0, %1, %2;" : "=r"(r[3]) : "r"(x), "r"(k));
    asm("szext.clamp.u32 %0, %1, 5;" : "=r"(r[4]) : "r"(x));
    asm("szext.wrap.s32 %0, %1, 7;" : "=r"(r[5]) : "r"(x));
    asm("szext.clamp.s32 %0, %1, 31;" : "=r"(r[6]) : "r"(x));
    asm("bfe.u32 %0, %1, 3, %2;" : "=r"(r[7]) : "r"(x), "r"(k & 31));
    asm("bfe.s32 %0, %1, %2, 5;" : "=r"(r[8]) : "r"(x), "r"(k & 31));
    asm("bfe.u32 %0, %1, 0, %2;" : "=r"(r[9]) : "r"(x), "r"(k));
    for (int j = 0; j < 10; j++) out[10 * i + j] = r[j];
}

// bmsk.{clamp,wrap}.b32 with register and immediate operands: BMSK, BMSK.W
extern "C" __global__ void probe_bmsk(const u32* a, const u32* s, u32* out, int n) {
    GUARD
    u32 x = a[i] & 63u, k = s[i], r[4];
    asm("bmsk.clamp.b32 %0, %1, %2;" : "=r"(r[0]) : "r"(x), "r"(k));
    asm("bmsk.wrap.b32 %0, %1, %2;" : "=r"(r[1]) : "r"(x), "r"(k));
    asm("bmsk.clamp.b32 %0, %1, %2;" : "=r"(r[2]) : "r"(a[i]), "r"(k));
    asm("bmsk.wrap.b32 %0, 3, %1;" : "=r"(r[3]) : "r"(k));
    for (int j = 0; j < 4; j++) out[4 * i + j] = r[j];
}

// f32 add, sub, mul and fma rounding to nearest without flush-to-zero, and compares combined with AND and OR
// (Triton builds without -ftz): FADD, FMUL, FFMA, FSETP.GT.OR, FSETP.LT.AND
extern "C" __global__ void probe_f32_noftz(const u32* a, const u32* bb, const u32* c, u32* out, int n) {
    GUARD
    u32 x = a[i], y = bb[i], z = c[i], r[6];
    asm("add.rn.f32 %0, %1, %2;" : "=r"(r[0]) : "r"(x), "r"(y));
    asm("sub.rn.f32 %0, %1, %2;" : "=r"(r[1]) : "r"(x), "r"(z));
    asm("mul.rn.f32 %0, %1, %2;" : "=r"(r[2]) : "r"(x), "r"(y));
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=r"(r[3]) : "r"(x), "r"(y), "r"(z));
    asm("{ .reg .pred p, q; setp.eq.f32 p, %1, %2; setp.gt.or.f32 q, %1, %3, p; selp.u32 %0, 1, 0, q; }"
        : "=r"(r[4]) : "r"(x), "r"(y), "r"(z));
    asm("{ .reg .pred p, q; setp.eq.f32 p, %1, %2; setp.lt.and.f32 q, %3, %1, p; selp.u32 %0, 1, 0, q; }"
        : "=r"(r[5]) : "r"(x), "r"(y), "r"(z));
    for (int j = 0; j < 6; j++) out[6 * i + j] = r[j];
}

// votes of a predicate that is the same in every lane (a kernel parameter's bit chosen by blockIdx), in
// converged code and in a region only lanes 0 .. p & 31 of the warp execute, where the vote must see only them
// and the ballot only their bits: VOTE.ALL, VOTE.ANY (ptxas's VOTEU, which turns a lane predicate into a
// uniform one for the uniform datapath, shows in the Triton suite's TMA kernels)
extern "C" __global__ void probe_vote_partial(u32* out, u32 p, u32 q) {
    const u32 lane = threadIdx.x & 31u;
    const u32 base = 4u * (blockIdx.x * blockDim.x + threadIdx.x);
    const bool u = (p >> (blockIdx.x & 31u)) & 1u;
    u32 all0 = __all_sync(0xffffffffu, u);
    u32 any0 = __any_sync(0xffffffffu, (q >> (blockIdx.x & 31u)) & 1u);
    u32 all1 = 7u, bal1 = 7u;
    if (lane < (p & 31u) + 1u) {
        const u32 m = __activemask();
        all1 = __all_sync(m, u);
        bal1 = __ballot_sync(m, (q >> (blockIdx.x & 7u)) & 1u);
    }
    out[base + 0] = all0;
    out[base + 1] = any0;
    out[base + 2] = all1;
    out[base + 3] = bal1;
}

// cp.async copies of 4 and 16 bytes (LDGSTS.E, LDGSTS.E.BYPASS.128) still in flight when a tensor-map fence
// waits on every scoreboard (fence.proxy.tensormap: DEPBAR {5,4,3,2,1,0}; UTMACCTL.IV), then read back
extern "C" __global__ void probe_depbar_set(const u32* src, const u32* map, u32* out, int n) {
    __shared__ __align__(16) u32 buf[128 * 5];
    const int t = threadIdx.x;
    const int i = TID;
    const u32 s4 = (u32)__cvta_generic_to_shared(&buf[t]);
    const u32 s16 = (u32)__cvta_generic_to_shared(&buf[128 + 4 * t]);
    const u32 base = blockIdx.x * blockDim.x * 5u;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s4), "l"(src + base + t) : "memory");
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s16), "l"(src + base + 128 + 4 * t) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(map) : "memory");
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    if (i < n) {
        out[5 * i + 0] = buf[(t + 5) & 127];
        for (int j = 0; j < 4; j++) out[5 * i + 1 + j] = buf[128 + 4 * ((t + 3) & 127) + j];
    }
}

// %dynamic_smem_size (numba-cuda reads it for a dynamic shared array's extent): c[0x0][0x2c] on sm_90
extern "C" __global__ void probe_smem_size(u32* out) {
    u32 d;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(d));
    out[blockIdx.x * blockDim.x + threadIdx.x] = d;
}

// conversions from 8- and 16-bit integers (Triton's int8 / uint16 scalars and tensors): I2F.S8, I2F.U8,
// I2F.S16, I2F.U16, each reading the low bits of a 32-bit register
extern "C" __global__ void probe_i2f_sub(const u32* a, u32* out, int n) {
    GUARD
    u32 x = a[i], r[4];
    asm("{ .reg .s8 t; cvt.s8.s32 t, %1; cvt.rn.f32.s8 %0, t; }" : "=r"(r[0]) : "r"(x));
    asm("{ .reg .u8 t; cvt.u8.u32 t, %1; cvt.rn.f32.u8 %0, t; }" : "=r"(r[1]) : "r"(x));
    asm("{ .reg .s16 t; cvt.s16.s32 t, %1; cvt.rn.f32.s16 %0, t; }" : "=r"(r[2]) : "r"(x));
    asm("{ .reg .u16 t; cvt.u16.u32 t, %1; cvt.rn.f32.u16 %0, t; }" : "=r"(r[3]) : "r"(x));
    for (int j = 0; j < 4; j++) out[4 * i + j] = r[j];
}

// f32 to f16 / bf16 in both roundings ptxas packs (cvt.{rn,rz}{.relu}{.satfinite}): pairs into f16x2 / bf16x2
// (F2FP[.SATFINITE][.RELU].{F16,BF16}.F32.PACK_AB[.RZ]) and single values zero-extended (F2FP...MERGE_C[.RZ],
// F2F.{F16,BF16}.F32[.RZ]); column 2k is the pair of x (upper half) and y, column 2k+1 the single x, for k over
// f16 then bf16, rn then rz, then {plain, relu, satfinite, relu.satfinite}
#define CVT_PAIR(rnd, mods, t, k)                                                                          \
    asm("cvt." #rnd mods "." #t "x2.f32 %0, %1, %2;" : "=r"(r[2 * (k)]) : "r"(x), "r"(y));                 \
    asm("{ .reg .b16 h; cvt." #rnd mods "." #t ".f32 h, %1; cvt.u32.u16 %0, h; }" : "=r"(r[2 * (k) + 1]) : "r"(x));
#define CVT_MODS(rnd, t, k)         \
    CVT_PAIR(rnd, "", t, k)         \
    CVT_PAIR(rnd, ".relu", t, k + 1) \
    CVT_PAIR(rnd, ".satfinite", t, k + 2) \
    CVT_PAIR(rnd, ".relu.satfinite", t, k + 3)
extern "C" __global__ void probe_f2fp(const u32* a, const u32* b, u32* out, int n) {
    GUARD
    const u32 x = a[i], y = b[i];
    u32 r[32];
    CVT_MODS(rn, f16, 0)
    CVT_MODS(rz, f16, 4)
    CVT_MODS(rn, bf16, 8)
    CVT_MODS(rz, bf16, 12)
    for (int j = 0; j < 32; j++) out[32 * i + j] = r[j];
}

// ---- warp collectives where ptxas cannot prove the warp converged on the mask. A lane whose element is past
// n, or who is told to, exits first; the masks still name it (the PTX ISA's "non-exited threads in membermask"
// then take part); shuffles read only lanes that take part.

// the k-th (from 0) lane of a set of lanes
__device__ __forceinline__ u32 nth_lane(u32 set, u32 k) {
    for (u32 j = 0; j < k; j++) set &= set - 1u;
    return (u32)__ffs((int)set) - 1u;
}

// the lanes of this thread's warp that stay: element < n and bit 0 of ex clear, read at lane (j & ~pair) so
// that with pair = 1 both lanes of an even-odd pair stay or go together (a pair that n cuts goes)
__device__ __forceinline__ u32 staying_lanes(const u32* ex, int n, u32 pair) {
    const int base = (int)(blockIdx.x * blockDim.x + (threadIdx.x & ~31u));
    u32 live = 0;
    for (int j = 0; j < 32; j++)
        if (base + (j | (int)pair) < n && !(ex[base + (j & ~(int)pair)] & 1u)) live |= 1u << j;
    return live;
}

// each half-warp's collectives under its constant mask (0x0000ffff / 0xffff0000), in divergent code, with
// exited lanes in the mask: ptxas's BRA.DIV to a slow path of WARPSYNC.COLLECTIVE ... ENDCOLLECTIVE regions
// (shfl idx / bfly / down, a 64-bit shfl as two, ballot, redux, match.any, match.all, bar.warp.sync); the
// shuffled value comes from either side of a data-dependent branch
#define COLL_HALF(M)                                                      \
    {                                                                     \
        const u32 src = nth_lane(live & (M), x % __popc(live & (M)));     \
        r[0] = __shfl_sync((M), x, src);                                  \
        r[1] = __shfl_xor_sync((M), y, 1);                                \
        r[2] = __ballot_sync((M), x & 1u);                                \
        r[3] = __reduce_add_sync((M), x);                                 \
        r[4] = __match_any_sync((M), x & 3u);                             \
        int p;                                                            \
        r[5] = __match_all_sync((M), v, &p);                              \
        r[6] = (u32)p;                                                    \
        __syncwarp((M));                                                  \
        const u64 w64 = __shfl_sync((M), ((u64)y << 32) | x, src);        \
        r[7] = (u32)w64;                                                  \
        r[8] = (u32)(w64 >> 32);                                          \
        r[9] = __shfl_down_sync((M), x, 1, 2);                            \
    }
extern "C" __global__ void probe_coll_half(const u32* a, const u32* ex, u32* out, int n) {
    const int i = TID;
    const u32 lane = threadIdx.x & 31u;
    const u32 live = staying_lanes(ex, n, 1u);
    if (!((live >> lane) & 1u)) {
        if (i < n)
            for (int j = 0; j < 10; j++) out[10 * i + j] = 0xdeadu;
        return;
    }
    const u32 x = a[i];
    const u32 y = (x & 4u) ? x * 3u + 1u : (x >> 1) ^ 0x55u;
    const u32 v = (ex[i & ~31] & 2u) ? (x & 1u) : 7u;
    u32 r[10];
    if (lane < 16u) COLL_HALF(0x0000ffffu) else COLL_HALF(0xffff0000u)
    for (int j = 0; j < 10; j++) out[10 * i + j] = r[j];
}

// collectives whose mask is a register each lane holds (its group of a partition of the warp, exited lanes
// included): redux, ballot and match under WARPSYNC.EXCLUSIVE (each group alone, so the uniform result and the
// ballot are its own), shfl and vote under WARPSYNC
extern "C" __global__ void probe_coll_excl(const u32* a, const u32* gm, const u32* ex, u32* out, int n) {
    const int i = TID;
    const u32 live = staying_lanes(ex, n, 0u);
    if (!((live >> (threadIdx.x & 31u)) & 1u)) {
        if (i < n)
            for (int j = 0; j < 12; j++) out[12 * i + j] = 0xdeadu;
        return;
    }
    const u32 x = a[i], m = gm[i];
    const u32 src = nth_lane(live & m, (x >> 5) % __popc(live & m));
    u32 r[12];
    r[0] = __reduce_add_sync(m, x);
    r[1] = __reduce_min_sync(m, x);
    r[2] = (u32)__reduce_max_sync(m, (int)x);
    r[3] = __reduce_and_sync(m, x | 0x10001u);
    r[4] = __reduce_or_sync(m, x & 0xff0u);
    r[5] = __reduce_xor_sync(m, x);
    r[6] = __ballot_sync(m, x & 1u);
    r[7] = __match_any_sync(m, x & 3u);
    int p;
    r[8] = __match_all_sync(m, x >> 30, &p);
    r[9] = (u32)p;
    r[10] = __shfl_sync(m, x, src);
    r[11] = (u32)__all_sync(m, x & 2u) | ((u32)__any_sync(m, x & 8u) << 1);
    for (int j = 0; j < 12; j++) out[12 * i + j] = r[j];
}

// collectives in a loop whose lanes leave it (and the kernel) after c & 7 trips: every trip's collectives see
// the lanes still there; half-warp masks (the slow path once lanes have gone) and whole-warp ones; a lane
// writes its sums so far before each exit test
extern "C" __global__ void probe_coll_loop(const u32* a, const u32* c, u32* out, int n) {
    const int i = TID;
    if (i >= n) return;
    const u32 lane = threadIdx.x & 31u;
    const int base = i - (int)lane;
    const u32 x = a[i], cnt = c[i] & 7u;
    u32 best = lane, most = cnt;  // the lane of this half that stays longest (the first of them)
    for (u32 j = lane & 16u; j < (lane & 16u) + 16u; j++) {
        const int k = base + (int)j;
        if (k < n && (c[k] & 7u) > most) { best = j; most = c[k] & 7u; }
        else if (k < n && (c[k] & 7u) == most && j < best) best = j;
    }
    u32 acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
    for (u32 k = 0;; k++) {
        out[4 * i] = acc0;
        out[4 * i + 1] = acc1;
        out[4 * i + 2] = acc2;
        out[4 * i + 3] = acc3;
        if (k >= cnt) return;
        const u32 v = x + k * 0x9E3779B9u;
        if (lane < 16u) {
            acc0 += __reduce_add_sync(0x0000ffffu, v);
            acc2 += __shfl_sync(0x0000ffffu, v, best);
        } else {
            acc0 += __reduce_add_sync(0xffff0000u, v ^ 0x5555u);
            acc2 += __shfl_sync(0xffff0000u, v * 3u, best);
        }
        acc1 ^= __ballot_sync(0xffffffffu, v & 1u);
        acc3 += __match_any_sync(0xffffffffu, v & 3u);
    }
}

// the lanes of one constant mask at two collective sites (the two sides of a data-dependent branch, which the
// PTX ISA allows from sm_70 on: d is the source lane's operand at its own shfl.sync): the interpreter refuses
// this; the GPU's answer is recorded (in a child process with a time limit, in case the warp never goes on)
extern "C" __global__ void probe_coll_cross(const u32* a, u32* out, int n) {
    GUARD
    const u32 lane = threadIdx.x & 31u;
    const u32 x = a[i];
    u32 r0 = 0, r1 = 0;
    if (lane < 16u) {
        const u32 src = (x >> 8) & 15u;
        if (x & 1u) {
            r0 = __shfl_sync(0x0000ffffu, x, src);
            r1 = __reduce_add_sync(0x0000ffffu, x);
        } else {
            r0 = __shfl_sync(0x0000ffffu, ~x, src);
            r1 = __reduce_add_sync(0x0000ffffu, x * 3u);
        }
    }
    out[2 * i] = r0;
    out[2 * i + 1] = r1;
}

// shuffles reading a lane outside their mask (the other half-warp, running its own collective): undefined by
// the PTX ISA; the interpreter refuses it, the GPU's answer is recorded
extern "C" __global__ void probe_coll_foreign(const u32* a, u32* out, int n) {
    GUARD
    const u32 lane = threadIdx.x & 31u;
    const u32 x = a[i];
    u32 r;
    if (lane < 16u) r = __shfl_sync(0x0000ffffu, x + 1u, 16u + (x & 15u));
    else r = __shfl_sync(0xffff0000u, x * 5u, x & 15u);
    out[i] = r;
}

// ---- shared-memory atomics with many lanes of a warp on one word (each warp on words of its own). sm_90 has
// no shared f32 / f64 add, nor 64-bit add, min, max, and, or, xor: ptxas loops on a compare-and-store (LDS;
// compute; ATOMS.CAST.SPIN[.64] writes 1 where it stored; branch back unless so), so the order in which the
// lanes of one execution take the word decides each lane's old value and the float sum. Native beside them:
// ATOMS.CAS (a float max written as a CAS loop), ATOMS.EXCH, ATOMS.INC, ATOMS.DEC, ATOMS.CAS.64,
// ATOMS.EXCH.64. Inputs: the f32 and u64 values, a lane's words (bits 0-4: F, 8-11: the 32-bit arrays,
// 16-19: the 64-bit ones; bits 24, 25: compare with the word's initial value), the words' initial values.
extern "C" __global__ void probe_atoms_cast(const u32* fv, const u32* map, const u64* uv, const u32* init32,
                                            const u64* init64, u32* old32, u64* old64, u32* fin32, u64* fin64,
                                            int n) {
    __shared__ float F[128];
    __shared__ u32 G[64], X[64], C[64], I[64], D[64];
    __shared__ u64 U[64], M[64], N[64], O[64], Q[64], A[64], E[64], S[64];
    const int t = threadIdx.x, w = t >> 5, i = TID;
    const u32* i32 = init32 + blockIdx.x * 448;
    const u64* i64 = init64 + blockIdx.x * 512;
    F[t] = __uint_as_float(i32[t]);
    if (t < 64) {
        G[t] = i32[128 + t]; X[t] = i32[192 + t]; C[t] = i32[256 + t]; I[t] = i32[320 + t]; D[t] = i32[384 + t];
        U[t] = i64[t]; M[t] = i64[64 + t]; N[t] = i64[128 + t]; O[t] = i64[192 + t];
        Q[t] = i64[256 + t]; A[t] = i64[320 + t]; E[t] = i64[384 + t]; S[t] = i64[448 + t];
    }
    __syncthreads();
    if (i < n) {
        const u32 mp = map[i];
        const u32 f = 32 * w + (mp & 31u), k = 16 * w + ((mp >> 8) & 15u), q = 16 * w + ((mp >> 16) & 15u);
        const u32 v = fv[i];
        const u64 u = uv[i];
        u32* o = old32 + 6 * i;
        u64* p = old64 + 8 * i;
        o[0] = __float_as_uint(atomicAdd(&F[f], __uint_as_float(v)));
        u32 cur = G[k], as;
        do {
            as = cur;
            cur = atomicCAS(&G[k], as, __float_as_uint(fmaxf(__uint_as_float(as), __uint_as_float(v))));
        } while (cur != as);
        o[1] = cur;
        o[2] = atomicExch(&X[k], v);
        o[3] = atomicCAS(&C[k], ((mp >> 24) & 1u) ? i32[256 + k] : v ^ 1u, v);
        o[4] = atomicInc(&I[k], 5u);
        o[5] = atomicDec(&D[k], 6u);
        p[0] = atomicAdd(&U[q], u);
        p[1] = atomicMax(&M[q], u);
        p[2] = (u64)atomicMin((long long*)&N[q], (long long)u);
        p[3] = atomicOr(&O[q], u);
        p[4] = atomicXor(&Q[q], u);
        p[5] = atomicAnd(&A[q], u | (u << 1) | (u >> 1));
        p[6] = atomicExch(&E[q], u);
        p[7] = atomicCAS(&S[q], ((mp >> 25) & 1u) ? i64[448 + q] : u, u ^ 0x5555u);
    }
    __syncthreads();
    u32* f32o = fin32 + blockIdx.x * 448;
    u64* f64o = fin64 + blockIdx.x * 512;
    f32o[t] = __float_as_uint(F[t]);
    if (t < 64) {
        f32o[128 + t] = G[t]; f32o[192 + t] = X[t]; f32o[256 + t] = C[t]; f32o[320 + t] = I[t]; f32o[384 + t] = D[t];
        f64o[t] = U[t]; f64o[64 + t] = M[t]; f64o[128 + t] = N[t]; f64o[192 + t] = O[t];
        f64o[256 + t] = Q[t]; f64o[320 + t] = A[t]; f64o[384 + t] = E[t]; f64o[448 + t] = S[t];
    }
}

// f64 atomicAdd on shared memory (DADD in the compare-and-store loop), lanes on words as probe_atoms_cast's F
extern "C" __global__ void probe_atoms_f64(const u64* dv, const u32* map, const u64* init, u64* old, u64* fin,
                                           int n) {
    __shared__ double Dd[128];
    const int t = threadIdx.x, i = TID;
    Dd[t] = __longlong_as_double((long long)init[blockIdx.x * 128 + t]);
    __syncthreads();
    if (i < n)
        old[i] = (u64)__double_as_longlong(atomicAdd(&Dd[32 * (t >> 5) + (map[i] & 31u)],
                                                     __longlong_as_double((long long)dv[i])));
    __syncthreads();
    fin[blockIdx.x * 128 + t] = (u64)__double_as_longlong(Dd[t]);
}
