// planted.cu: small kernels with ONE planted bug each, and race-free controls, for comparing flashsim's
// diagnostics (flashsim.cuda.checking: races, initcheck; SimulatedFault) with compute-sanitizer
// (racecheck, memcheck, initcheck). gpu/check_diagnostics.py runs them; tests/test_checking_planted.py
// checks the interpreter's answers on the CPU.
//
// Markers: a line that is one side of a planted race ends in `// SIDE:<race>:first`, `second` or `both`
// (a race between two executions of the same line); the line of a planted memory error or uninitialised read
// ends in `// SIDE:<bug>:first`. The tests read the line numbers from these markers, so keep each marked
// access on the marked line.
//
// Conventions: one block; race_* / ctrl_* kernels take (in, out) with `in` 4096 initialised words and
// `out` 4096 words; block 64 threads (two warps) unless the kernel says otherwise. Shared accesses go
// through volatile pointers or asm volatile so that the compiler keeps each one, in program order.
// No CUDA headers: cp.async, ldmatrix and 128-bit shared stores are inline PTX (macros, so that the
// instruction's source line is the line that uses the macro).

#define PLANT(NAME) extern "C" __global__ void NAME(const unsigned* __restrict__ in, unsigned* __restrict__ out)

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

#define CP_ASYNC16(dst, src) \
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"(smem_u32(dst)), "l"(src) : "memory")
#define CP_ASYNC_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define CP_ASYNC_WAIT0() asm volatile("cp.async.wait_group 0;" ::: "memory")
#define CP_ASYNC_WAIT_ALL() asm volatile("cp.async.wait_all;" ::: "memory")
#define LDMATRIX_X4(r0, r1, r2, r3, addr)                                                        \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"              \
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory")
#define ST_SHARED_V4(addr, a, b, c, d) \
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory")

// =============================================================================== planted races

// Double-buffered loop without the __syncthreads that ends each stage: iteration it+1 reads the stage the
// other warp filled in iteration it (RAW) and overwrites the stage the other warp read in iteration it (WAR).
PLANT(race_double_buffer) {
    __shared__ unsigned stage[2][64];
    volatile unsigned* vs = &stage[0][0];
    const unsigned tid = threadIdx.x;
    unsigned acc = 0;
    vs[tid] = in[tid];
    __syncthreads();
    for (int it = 0; it < 4; ++it) {
        const unsigned cur = it & 1;
        if (it + 1 < 4) vs[(cur ^ 1u) * 64u + tid] = in[(it + 1) * 64 + tid];  // SIDE:double_buffer:first
        acc += vs[cur * 64u + (tid ^ 32u)];  // SIDE:double_buffer:second
    }
    out[tid] = acc;
}
// control: the same loop with the barrier
PLANT(ctrl_double_buffer) {
    __shared__ unsigned stage[2][64];
    volatile unsigned* vs = &stage[0][0];
    const unsigned tid = threadIdx.x;
    unsigned acc = 0;
    vs[tid] = in[tid];
    __syncthreads();
    for (int it = 0; it < 4; ++it) {
        const unsigned cur = it & 1;
        if (it + 1 < 4) vs[(cur ^ 1u) * 64u + tid] = in[(it + 1) * 64 + tid];
        acc += vs[cur * 64u + (tid ^ 32u)];
        __syncthreads();
    }
    out[tid] = acc;
}

// Single buffer, the trailing __syncthreads of the loop is missing: the next iteration's store overwrites
// the word the other warp is still reading (WAR).
PLANT(race_loop_war) {
    __shared__ unsigned tile[64];
    volatile unsigned* vt = tile;
    const unsigned tid = threadIdx.x;
    unsigned acc = 0;
    for (int it = 0; it < 4; ++it) {
        vt[tid] = in[it * 64 + tid];  // SIDE:loop_war:second
        __syncthreads();
        acc += vt[tid ^ 32u];  // SIDE:loop_war:first
    }
    out[tid] = acc;
}
// control: with the trailing barrier
PLANT(ctrl_loop_war) {
    __shared__ unsigned tile[64];
    volatile unsigned* vt = tile;
    const unsigned tid = threadIdx.x;
    unsigned acc = 0;
    for (int it = 0; it < 4; ++it) {
        vt[tid] = in[it * 64 + tid];
        __syncthreads();
        acc += vt[tid ^ 32u];
        __syncthreads();
    }
    out[tid] = acc;
}

// cp.async by warp 0, __syncthreads, warp 1 reads, and only then does warp 0 wait: the read comes before the
// copy is complete (a barrier does not complete a cp.async).
PLANT(race_cp_async_before_wait) {
    __shared__ __align__(16) unsigned buf[128];
    volatile unsigned* vb = buf;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) {
        CP_ASYNC16(buf + 4u * lane, in + 4u * lane);  // SIDE:cp_async_before_wait:first
        CP_ASYNC_COMMIT();
    }
    __syncthreads();
    if (warp == 1) out[lane] = vb[4u * lane + 1u];  // SIDE:cp_async_before_wait:second
    if (warp == 0) CP_ASYNC_WAIT0();
}

// cp.async waited for by the copying thread, but no __syncthreads before another warp reads (RAW).
PLANT(race_cp_async_no_barrier) {
    __shared__ __align__(16) unsigned buf[128];
    volatile unsigned* vb = buf;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) {
        CP_ASYNC16(buf + 4u * lane, in + 4u * lane);  // SIDE:cp_async_no_barrier:first
        CP_ASYNC_WAIT_ALL();
    }
    if (warp == 1) out[lane] = vb[4u * lane + 2u];  // SIDE:cp_async_no_barrier:second
}
// control: commit, wait_group 0, __syncthreads, then the other warp reads
PLANT(ctrl_cp_async) {
    __shared__ __align__(16) unsigned buf[128];
    volatile unsigned* vb = buf;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) {
        CP_ASYNC16(buf + 4u * lane, in + 4u * lane);
        CP_ASYNC_COMMIT();
        CP_ASYNC_WAIT0();
    }
    __syncthreads();
    if (warp == 1) out[lane] = vb[4u * lane + 2u];
}

// 4 warps (block 128): each warp fills its tile and reads the next warp's tile with no barrier between.
PLANT(race_early_tile) {
    __shared__ unsigned tiles[4][32];
    volatile unsigned* vt = &tiles[0][0];
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    vt[warp * 32u + lane] = in[tid] * 3u;  // SIDE:early_tile:first
    out[tid] = vt[((warp + 1u) & 3u) * 32u + lane];  // SIDE:early_tile:second
}
// control (block 128): the barrier between
PLANT(ctrl_early_tile) {
    __shared__ unsigned tiles[4][32];
    volatile unsigned* vt = &tiles[0][0];
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    vt[warp * 32u + lane] = in[tid] * 3u;
    __syncthreads();
    out[tid] = vt[((warp + 1u) & 3u) * 32u + lane];
}

// Within one warp: lane i writes its word, lane i^1 reads it, no __syncwarp between.
PLANT(race_intra_warp) {
    __shared__ unsigned s[32];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) {
        vs[lane] = in[lane] + 1u;  // SIDE:intra_warp:first
        out[lane] = vs[lane ^ 1u];  // SIDE:intra_warp:second
    }
}
// control: __syncwarp between. ptxas (NVRTC 13.0, sm_90) compiles this __syncwarp() to a NOP (the warp is
// converged there) and lists the NOP's offset in the kernel's EIATTR_COOP_GROUP_INSTR_OFFSETS; apart from that
// the SASS equals race_intra_warp's.
PLANT(ctrl_intra_warp) {
    __shared__ unsigned s[32];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) {
        vs[lane] = in[lane] + 1u;
        __syncwarp();
        out[lane] = vs[lane ^ 1u];
    }
}
// Within one warp, in a loop whose trip count differs between lane pairs (in[lane] = lane: lanes 2j and 2j+1
// run 16-j iterations), two buffers used in turn:
// lane i writes, lane i^1 reads, no __syncwarp between.
PLANT(race_intra_warp_loop) {
    __shared__ unsigned s[64];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    unsigned acc = 0;
    if (warp == 0) {
        for (unsigned k = 0; k <= ((31u - in[lane]) >> 1); ++k) {
            vs[(k & 1u) * 32u + lane] = k + acc;  // SIDE:intra_warp_loop:first
            acc += vs[(k & 1u) * 32u + (lane ^ 1u)];  // SIDE:intra_warp_loop:second
        }
        out[lane] = acc;
    }
}
// control: __syncwarp(__activemask()) between; in this divergent loop ptxas keeps it (VOTE.ANY R, then
// WARPSYNC R). One sync per iteration suffices: iteration k+2 rewrites a buffer only after the sync of
// iteration k+1.
PLANT(ctrl_intra_warp_loop) {
    __shared__ unsigned s[64];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    unsigned acc = 0;
    if (warp == 0) {
        for (unsigned k = 0; k <= ((31u - in[lane]) >> 1); ++k) {
            vs[(k & 1u) * 32u + lane] = k + acc;
            __syncwarp(__activemask());
            acc += vs[(k & 1u) * 32u + (lane ^ 1u)];
        }
        out[lane] = acc;
    }
}
// the same control with the trip counts reversed (lanes 2j and 2j+1 run j+1 iterations: lanes 0 and 1 leave
// the loop first, so later WARPSYNCs run without lane 0): also race-free
PLANT(ctrl_intra_warp_loop_rev) {
    __shared__ unsigned s[64];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    unsigned acc = 0;
    if (warp == 0) {
        for (unsigned k = 0; k <= (in[lane] >> 1); ++k) {
            vs[(k & 1u) * 32u + lane] = k + acc;
            __syncwarp(__activemask());
            acc += vs[(k & 1u) * 32u + (lane ^ 1u)];
        }
        out[lane] = acc;
    }
}

// WAW: both warps write the same word, no barrier between the two stores.
PLANT(race_waw) {
    __shared__ unsigned s[32];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) vs[lane] = in[tid] + 1u;  // SIDE:waw:first
    if (warp == 1) vs[lane] = in[tid] + 2u;  // SIDE:waw:second
    __syncthreads();
    out[tid] = vs[lane];
}

// WAR: warp 1 reads words that warp 0 then overwrites, no barrier between.
PLANT(race_war) {
    __shared__ unsigned s[64];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    vs[tid] = in[tid];
    __syncthreads();
    if (warp == 1) out[lane] = vs[lane];  // SIDE:war:first
    if (warp == 0) vs[lane] = lane + 100u;  // SIDE:war:second
}

// ldmatrix.x4 by warp 1 of a 16x16 b16 tile that warp 0 stored, no barrier between.
PLANT(race_ldmatrix) {
    __shared__ __align__(16) unsigned tile[128];  // 16 rows of 16 b16 values (32 bytes)
    volatile unsigned* vt = tile;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) for (int k = 0; k < 4; ++k) vt[k * 32 + lane] = in[k * 32 + lane];  // SIDE:ldmatrix:first
    if (warp == 1) {
        unsigned r0, r1, r2, r3;
        const unsigned row = smem_u32(tile) + (lane & 15u) * 32u + (lane >> 4) * 16u;
        LDMATRIX_X4(r0, r1, r2, r3, row);  // SIDE:ldmatrix:second
        out[4 * lane] = r0; out[4 * lane + 1] = r1; out[4 * lane + 2] = r2; out[4 * lane + 3] = r3;
    }
}
// control: __syncthreads between the stores and the ldmatrix
PLANT(ctrl_ldmatrix) {
    __shared__ __align__(16) unsigned tile[128];
    volatile unsigned* vt = tile;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) for (int k = 0; k < 4; ++k) vt[k * 32 + lane] = in[k * 32 + lane];
    __syncthreads();
    if (warp == 1) {
        unsigned r0, r1, r2, r3;
        const unsigned row = smem_u32(tile) + (lane & 15u) * 32u + (lane >> 4) * 16u;
        LDMATRIX_X4(r0, r1, r2, r3, row);
        out[4 * lane] = r0; out[4 * lane + 1] = r1; out[4 * lane + 2] = r2; out[4 * lane + 3] = r3;
    }
}

// A 128-bit store by warp 0, a 32-bit load of one of its words by warp 1, no barrier between.
PLANT(race_vec128) {
    __shared__ __align__(16) unsigned s[128];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) ST_SHARED_V4(smem_u32(s) + 16u * lane, in[lane], lane, 2u * lane, 3u * lane);  // SIDE:vec128:first
    if (warp == 1) out[lane] = vs[4u * ((lane + 7u) & 31u) + 3u];  // SIDE:vec128:second
}
// control: __syncthreads between
PLANT(ctrl_vec128) {
    __shared__ __align__(16) unsigned s[128];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) ST_SHARED_V4(smem_u32(s) + 16u * lane, in[lane], lane, 2u * lane, 3u * lane);
    __syncthreads();
    if (warp == 1) out[lane] = vs[4u * ((lane + 7u) & 31u) + 3u];
}

// A race inside divergent code: warp 0 writes in the if, warp 1 reads in the else.
PLANT(race_divergent) {
    __shared__ unsigned s[32];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u;
    if (tid < 32u) {
        vs[lane] = in[lane] * 7u;  // SIDE:divergent:first
    } else {
        out[lane] = vs[lane];  // SIDE:divergent:second
    }
}
// control: the write in an if, __syncthreads where every thread reaches it, the read in an if
PLANT(ctrl_divergent) {
    __shared__ unsigned s[32];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x, lane = tid & 31u;
    if (tid < 32u) vs[lane] = in[lane] * 7u;
    __syncthreads();
    if (tid >= 32u) out[lane] = vs[lane];
}

// 16-bit stores of two warps to the same two bytes, no barrier between (WAW).
PLANT(race_u16_same) {
    __shared__ unsigned short h[64];
    volatile unsigned short* vh = h;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) vh[lane] = (unsigned short)(in[tid] + 1u);  // SIDE:u16_same:first
    if (warp == 1) vh[lane] = (unsigned short)(in[tid] + 2u);  // SIDE:u16_same:second
    __syncthreads();
    out[tid] = vh[lane];
}
// control: 16-bit stores of two warps to the two halves of one word (different bytes: not a race)
PLANT(ctrl_u16_distinct) {
    __shared__ unsigned short h[64];
    volatile unsigned short* vh = h;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    if (warp == 0) vh[2u * lane] = (unsigned short)(in[tid] + 1u);
    if (warp == 1) vh[2u * lane + 1u] = (unsigned short)(in[tid] + 2u);
    __syncthreads();
    out[tid] = vh[tid];
}
// control (block 128): 8-bit stores of four warps to the four bytes of one word (not a race)
PLANT(ctrl_u8_distinct) {
    __shared__ unsigned char b[128];
    volatile unsigned char* vb = b;
    const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    vb[4u * lane + warp] = (unsigned char)(in[tid] + warp);
    __syncthreads();
    out[tid] = vb[tid];
}

// 4 warps (block 128): a tree reduction without the __syncthreads inside its loop; the stride-32 step of
// warp 0 reads what warp 1 wrote in the stride-64 step.
PLANT(race_reduce) {
    __shared__ unsigned s[128];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x;
    vs[tid] = in[tid];
    __syncthreads();
    for (unsigned stride = 64; stride >= 32; stride >>= 1) {
        if (tid < stride) vs[tid] = vs[tid] + vs[tid + stride];  // SIDE:reduce:both
    }
    if (tid < 32u) out[tid] = vs[tid];
}
// control (block 128): the barrier inside the loop
PLANT(ctrl_reduce) {
    __shared__ unsigned s[128];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x;
    vs[tid] = in[tid];
    __syncthreads();
    for (unsigned stride = 64; stride >= 32; stride >>= 1) {
        if (tid < stride) vs[tid] = vs[tid] + vs[tid + stride];
        __syncthreads();
    }
    if (tid < 32u) out[tid] = vs[tid];
}

// Thread 0 publishes a value, every thread reads it with no barrier between.
PLANT(race_broadcast) {
    __shared__ unsigned v;
    volatile unsigned* vv = &v;
    const unsigned tid = threadIdx.x;
    if (tid == 0) *vv = in[0] * 5u;  // SIDE:broadcast:first
    out[tid] = *vv + tid;  // SIDE:broadcast:second
}
// control: the barrier between
PLANT(ctrl_broadcast) {
    __shared__ unsigned v;
    volatile unsigned* vv = &v;
    const unsigned tid = threadIdx.x;
    if (tid == 0) *vv = in[0] * 5u;
    __syncthreads();
    out[tid] = *vv + tid;
}

// =============================================================================== memory errors (memcheck)

// block 64, `in` holds n = 64 floats: each thread reads 4 elements further, the last 4 read past the end
extern "C" __global__ void mem_oob_read(const float* __restrict__ in, float* __restrict__ out, int n) {
    const int t = threadIdx.x;
    out[t] = in[t + 4] * 2.f;  // SIDE:oob_read:first
    (void)n;
}
// block 64, `out` holds n = 64 floats: the store runs 3 elements past the end
extern "C" __global__ void mem_oob_write(float* __restrict__ out, int n) {
    const int t = threadIdx.x;
    out[t + 3] = (float)(t + n);  // SIDE:oob_write:first
}
// control: the same copy, in bounds
extern "C" __global__ void ctrl_mem_inbounds(const float* __restrict__ in, float* __restrict__ out, int n) {
    const int t = threadIdx.x;
    if (t + 4 < n) out[t] = in[t + 4] * 2.f;
}
// an 8-byte load from an address that is 4 bytes off 8-byte alignment
extern "C" __global__ void mem_misaligned_global(const unsigned char* __restrict__ in, double* __restrict__ out) {
    const int t = threadIdx.x;
    const double* p = reinterpret_cast<const double*>(in + 4);
    out[t] = p[t];  // SIDE:misaligned_global:first
}
// dynamic shared memory of `words` 32-bit words; the store index runs far past its end
extern "C" __global__ void mem_shared_oob(unsigned* __restrict__ out, int words) {
    extern __shared__ unsigned dyn[];
    volatile unsigned* vd = dyn;
    const unsigned t = threadIdx.x;
    vd[t + 64u * (unsigned)words] = t;  // SIDE:shared_oob:first
    __syncthreads();
    out[t] = vd[t];
}
// a 4-byte shared store at an address 2 bytes off 4-byte alignment
extern "C" __global__ void mem_shared_misaligned(unsigned* __restrict__ out, int off) {
    __shared__ __align__(16) unsigned char raw[512];
    const unsigned t = threadIdx.x;
    volatile unsigned* p = reinterpret_cast<volatile unsigned*>(raw + off + 4u * t);
    *p = t;  // SIDE:shared_misaligned:first
    __syncthreads();
    out[t] = raw[t];
}

// =============================================================================== uninitialised reads (initcheck)

// a copy of n floats: launched on an empty (never written) buffer, a half-written one, and a written one
extern "C" __global__ void init_copy(const float* __restrict__ in, float* __restrict__ out, int n) {
    const int t = threadIdx.x;
    if (t < n) out[t] = in[t] + 1.f;  // SIDE:init_copy:first
}
// shared memory: warp 0 writes its half of the buffer, every thread reads a word of the whole buffer
// (warp 1 reads words nothing wrote; compute-sanitizer's initcheck does not track shared memory)
extern "C" __global__ void init_shared_uninit(const unsigned* __restrict__ in, unsigned* __restrict__ out) {
    __shared__ unsigned s[64];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x;
    if (tid < 32u) vs[tid] = in[tid];
    __syncthreads();
    out[tid] = vs[tid];  // SIDE:init_shared:first
}
// control: every thread writes its word first
extern "C" __global__ void ctrl_init_shared(const unsigned* __restrict__ in, unsigned* __restrict__ out) {
    __shared__ unsigned s[64];
    volatile unsigned* vs = s;
    const unsigned tid = threadIdx.x;
    vs[tid] = in[tid];
    __syncthreads();
    out[tid] = vs[tid ^ 32u];
}
