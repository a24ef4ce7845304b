// Probes of the SASS forms that Triton's ptxas (12.8) and other compilers emit beside NVRTC 13.0's: sign and
// zero extension of a bit field (SGXT), bit masks (BMSK), f32 arithmetic and compares without flush-to-zero,
// votes in converged and divergent code, a wait on a set of scoreboards with a tensor-map
// fence (DEPBAR {5,4,3,2,1,0}; UTMACCTL.IV) over cp.async copies in flight (LDGSTS). gpu/form_probes.py holds
// the table (inputs, the forms each kernel must contain, numpy references) and builds this file twice: with
// NVRTC 13.0, and as NVRTC's PTX assembled by Triton's ptxas 12.8, so that both compilers' SASS is probed.
// Conventions as gpu/kernels/sass_probes.cu: (inputs..., outputs..., int n), thread i < n handles element i.
// No CUDA headers: intrinsics are builtins, the rest is inline PTX.

typedef unsigned int u32;

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
