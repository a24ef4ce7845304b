// probe_mbarrier.cu: Hopper's mbarrier, bulk copy, elect, named barriers and setmaxnreg, one probe kernel
// each, to record on the H100 the exact behaviour of the SASS they compile to (SYNCS.*, UBLKCP, ELECT,
// BAR with register operands, USETMAXREG) and check flashsim's interpreter against it bit for bit (host
// side: gpu/validate_mbarrier.py; the interpreter: flashsim/sass/ops_sync.py, flashsim/smem/mbarrier.py).
//
// Built for sm_90a (setmaxnreg needs the architecture-specific target; built for plain sm_90 the
// setmaxnreg probe traps instead of running something else).
//
// mbar_script: one warp per case (blockIdx.x) runs a script of mbarrier operations on 4 mbarriers in its
// shared memory; after every step each of the 4 barrier words is read back with ld.volatile.shared.b64 (the
// barriers' shared-memory bytes, which on the H100 only an mbarrier.inval writes: flashsim/smem/mbarrier.py),
// and every lane's result (the state an arrive returns, a wait's predicate, a pending count). Step i: op =
// ops[i] (bits 0..4 the operation, bits 5..6 the barrier), arg = args[i], executed by the lanes of masks[i];
// a membar.cta after each step makes the fire-and-forget (.RED) updates visible to the read. The host builds
// scripts whose every result is deterministic: waits only on phases that have completed or cannot complete
// any more (a try_wait then returns false at its time limit), bulk copies only where their bytes complete
// the phase, which the script then waits for (result 1; 2 if it never completed). The barrier words start
// as zeros.

#include "mbarrier.cuh"

#define MB_STEPS_MAX 64

enum {
    OP_INIT = 0, OP_ARRIVE = 1, OP_ARRIVE_N = 2, OP_ARRIVE_TX = 3, OP_EXPECT_TX = 4, OP_COMPLETE_TX = 5,
    OP_DROP = 6, OP_DROP_N = 7, OP_TEST_PARITY = 8, OP_TRY_PARITY = 9, OP_TEST_STATE = 10, OP_TRY_STATE = 11,
    OP_PENDING = 12, OP_BULK = 13, OP_ARRIVE_TX_CLUSTER = 14, OP_ARRIVE_CLUSTER = 15, OP_INVAL = 16,
    OP_TEST_RAW = 17, OP_TRY_PARITY_HINT = 18,
};

extern "C" __global__ void __launch_bounds__(32) mbar_script(const unsigned* __restrict__ ops,
                                                             const unsigned* __restrict__ args,
                                                             const unsigned* __restrict__ masks,
                                                             const unsigned* __restrict__ src, int steps,
                                                             unsigned long long* __restrict__ words,
                                                             unsigned long long* __restrict__ res,
                                                             unsigned* __restrict__ buf_out) {
    __shared__ __align__(16) unsigned long long bars[4];  // two 16-byte blocks: {0, 1} and {2, 3}
    __shared__ __align__(128) unsigned buf[64];
    const int lane = threadIdx.x;
    const int c = blockIdx.x;
    buf[lane] = 0u;
    buf[32 + lane] = 0u;
    if (lane < 4) bars[lane] = 0ull;  // the words read before a barrier's first init
    __threadfence_block();
    __syncwarp();
    unsigned long long tok = 0ull;
    for (int i = 0; i < steps; ++i) {
        const int k = c * steps + i;
        const unsigned op = ops[k], arg = args[k], mask = masks[k];
        const unsigned b = mbar::smem(&bars[(op >> 5) & 3u]);
        unsigned long long r = 0ull;
        if ((mask >> lane) & 1u) {
            switch (op & 31u) {
                case OP_INIT: mbar::init(b, arg); break;
                case OP_ARRIVE: r = tok = mbar::arrive(b); break;
                case OP_ARRIVE_N: r = tok = mbar::arrive_n(b, arg); break;
                case OP_ARRIVE_TX: r = tok = mbar::arrive_expect_tx(b, arg); break;
                case OP_EXPECT_TX: mbar::expect_tx(b, arg); break;
                case OP_COMPLETE_TX: mbar::complete_tx(b, arg); break;
                case OP_DROP: r = tok = mbar::arrive_drop(b); break;
                case OP_DROP_N: r = tok = mbar::arrive_drop_n(b, arg); break;
                case OP_TEST_PARITY: r = mbar::test_parity(b, arg & 1u); break;
                case OP_TRY_PARITY: r = mbar::try_parity(b, arg & 1u); break;
                case OP_TEST_STATE: r = mbar::test_state(b, tok); break;
                case OP_TRY_STATE: r = mbar::try_state(b, tok); break;
                case OP_PENDING: r = mbar::pending_count(tok); break;
                case OP_BULK: {
                    // arg: bytes in bits 0..8, source offset / 16 in bits 16..19, destination offset / 16 in
                    // bits 20..23, the parity to wait for in bit 31
                    const unsigned bytes = arg & 0x1FFu;
                    const unsigned soff = ((arg >> 16) & 15u) * 16u, doff = ((arg >> 20) & 15u) * 16u;
                    mbar::bulk_g2s(mbar::smem(buf) + doff, (const char*)(src + c * 128) + soff, bytes, b);
                    // the copy completes the phase; a bounded loop (2: it never did) rather than a hang
                    unsigned ok = 0u;
                    for (int it = 0; it < 100000 && !ok; ++it) ok = mbar::try_parity(b, arg >> 31);
                    r = ok ? 1ull : 2ull;
                    break;
                }
                case OP_ARRIVE_TX_CLUSTER: mbar::arrive_expect_tx_cluster(b, arg); break;
                case OP_ARRIVE_CLUSTER: mbar::arrive_cluster(b); break;
                case OP_INVAL: mbar::inval(b); break;
                case OP_TEST_RAW: r = mbar::test_state(b, ((unsigned long long)arg << 32) | (unsigned)lane); break;
                case OP_TRY_PARITY_HINT: r = mbar::try_parity_hint(b, arg & 1u, 1000u); break;
                default: break;
            }
        }
        __threadfence_block();
        __syncwarp();
        res[(size_t)k * 32 + lane] = r;
        if (lane < 4) words[(size_t)k * 4 + lane] = mbar::load_word(mbar::smem(&bars[lane]));
        __syncwarp();
    }
    buf_out[c * 64 + lane] = buf[lane];
    buf_out[c * 64 + 32 + lane] = buf[32 + lane];
}

// Generic accesses of an mbarrier's bytes other than mbar::load_word (ld.volatile.shared.b64).
namespace word {
__device__ __forceinline__ unsigned long long ld_weak(unsigned a) {
    unsigned long long v;
    asm volatile("ld.shared.b64 %0, [%1];" : "=l"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long ld_relaxed(unsigned a) {
    unsigned long long v;
    asm volatile("ld.relaxed.cta.shared.b64 %0, [%1];" : "=l"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long ld_acquire(unsigned a) {
    unsigned long long v;
    asm volatile("ld.acquire.cta.shared.b64 %0, [%1];" : "=l"(v) : "r"(a) : "memory");
    return v;
}
// the 8 bytes by two 32-bit atom.or of 0 (64-bit shared atomics other than exch/cas become CAS loops)
__device__ __forceinline__ unsigned long long atom_or0(unsigned a) {
    unsigned lo, hi;
    asm volatile("atom.shared.or.b32 %0, [%1], 0;" : "=r"(lo) : "r"(a) : "memory");
    asm volatile("atom.shared.or.b32 %0, [%1], 0;" : "=r"(hi) : "r"(a + 4u) : "memory");
    return ((unsigned long long)hi << 32) | lo;
}
__device__ __forceinline__ void st(unsigned a, unsigned long long x) {
    asm volatile("st.shared.b64 [%0], %1;" ::"r"(a), "l"(x) : "memory");
}
}  // namespace word

// mbar_word_probe: what generic loads and stores see of, and do to, an mbarrier (one thread; each out[i] is
// named in gpu/validate_mbarrier.py, WORD_PROBE_OUTPUTS). The 8 slots hold pat + i before any init (not 0, so
// "not written" and "written with 0" differ); w7 is the state mbarrier.init of 7 arrivals makes.
//   A  a live barrier no inval touched (slot 0, init 3, one arrive): the returned state; the bytes by
//      ld.volatile / ld (weak) / ld.relaxed.cta / ld.acquire.cta, by ld.volatile after fence.proxy.async,
//      by atom.or of 0 on each half (which leaves them as they are); pending_count of the state
//   B  inval of slot 0, read with no fence in between, then after membar.cta; slot 1 (never initialised)
//   C  slot 2 initialised, invalidated, overwritten by a store; slot 3 initialised, arrived on, invalidated:
//      does the inval of slot 3 write its invalid neighbour? slot 2, slot 3
//   D  a store of w7 into a live barrier (slot 4, init 3): the state the next arrive returns, test_wait of
//      parity 0, the bytes, the bytes after inval
extern "C" __global__ void __launch_bounds__(32) mbar_word_probe(unsigned long long pat, unsigned long long w7,
                                                                 unsigned long long* __restrict__ out) {
    __shared__ __align__(16) unsigned long long s[8];
    if (threadIdx.x != 0) return;
    for (int i = 0; i < 8; ++i) s[i] = pat + (unsigned long long)i;
    __threadfence_block();
    unsigned b[8];
    for (int i = 0; i < 8; ++i) b[i] = mbar::smem(&s[i]);
    int k = 0;
    // A
    mbar::init(b[0], 3);
    const unsigned long long t = mbar::arrive(b[0]);
    out[k++] = t;
    __threadfence_block();
    out[k++] = mbar::load_word(b[0]);
    out[k++] = word::ld_weak(b[0]);
    out[k++] = word::ld_relaxed(b[0]);
    out[k++] = word::ld_acquire(b[0]);
    mbar::fence_proxy_async_shared();
    out[k++] = mbar::load_word(b[0]);
    out[k++] = word::atom_or0(b[0]);
    out[k++] = mbar::pending_count(t);
    // B
    mbar::inval(b[0]);
    out[k++] = mbar::load_word(b[0]);
    __threadfence_block();
    out[k++] = mbar::load_word(b[0]);
    out[k++] = mbar::load_word(b[1]);
    // C
    mbar::init(b[2], 5);
    mbar::inval(b[2]);
    __threadfence_block();
    word::st(b[2], pat ^ 0x5555555555555555ull);
    __threadfence_block();
    mbar::init(b[3], 4);
    mbar::arrive(b[3]);
    mbar::inval(b[3]);
    __threadfence_block();
    out[k++] = mbar::load_word(b[2]);
    out[k++] = mbar::load_word(b[3]);
    // D
    mbar::init(b[4], 3);
    __threadfence_block();
    word::st(b[4], w7);
    __threadfence_block();
    out[k++] = mbar::arrive(b[4]);
    out[k++] = mbar::test_parity(b[4], 0u);
    __threadfence_block();
    out[k++] = mbar::load_word(b[4]);
    mbar::inval(b[4]);
    __threadfence_block();
    out[k++] = mbar::load_word(b[4]);
}

// mbar_many_probe: n mbarriers per CTA (n <= 1024, a multiple of 32; many CTAs share an SM): do states reach
// the bytes without an inval (a finite store of barrier states writing back what it evicts)? After zeroing
// the bytes, init(2 + j % 7) and one arrive on each barrier j, out[cta][0][j] = the bytes; after an inval of
// each, out[cta][1][j].
extern "C" __global__ void __launch_bounds__(32) mbar_many_probe(int n, unsigned long long* __restrict__ out) {
    __shared__ __align__(16) unsigned long long s[1024];
    const int lane = threadIdx.x;
    unsigned long long* o = out + (size_t)blockIdx.x * 2 * n;
    for (int j = lane; j < n; j += 32) s[j] = 0ull;
    __threadfence_block();
    __syncwarp();
    for (int j = lane; j < n; j += 32) mbar::init(mbar::smem(&s[j]), 2u + (unsigned)(j % 7));
    for (int j = lane; j < n; j += 32) mbar::arrive(mbar::smem(&s[j]));
    __threadfence_block();
    __syncwarp();
    for (int j = lane; j < n; j += 32) o[j] = mbar::load_word(mbar::smem(&s[j]));
    __syncwarp();
    for (int j = lane; j < n; j += 32) mbar::inval(mbar::smem(&s[j]));
    __threadfence_block();
    __syncwarp();
    for (int j = lane; j < n; j += 32) o[n + j] = mbar::load_word(mbar::smem(&s[j]));
}

// elect_probe: the lanes of masks[case] execute elect.sync (membermask = those lanes); out[case][lane] =
// 0x10000 (executed) | leader << 8 | predicate, 0 for lanes that did not execute it.
extern "C" __global__ void __launch_bounds__(32) elect_probe(const unsigned* __restrict__ masks,
                                                             unsigned* __restrict__ out) {
    const unsigned m = masks[blockIdx.x];
    const int lane = threadIdx.x;
    unsigned v = 0u;
    if ((m >> lane) & 1u) {
        unsigned leader;
        const unsigned p = mbar::elect(m, &leader);
        v = 0x10000u | (leader << 8) | p;
    }
    out[blockIdx.x * 32 + lane] = v;
}

// namedbar_probe: 4 warps hand values on through named barriers with ids and thread counts in registers
// (ids[0..2], count = 64): warp 0 -> 1 (bar.arrive id, count / bar.sync imm, reg), warp 1 -> 2 (bar.arrive /
// bar.sync reg, reg: ptxas packs both into one register), warp 2 -> 3 (bar.arrive / barrier.sync reg, imm);
// each writes what it read, transformed, to out[warp][lane]; then all meet at bar.sync 0.
extern "C" __global__ void __launch_bounds__(128) namedbar_probe(const unsigned* __restrict__ in,
                                                                 const unsigned* __restrict__ ids, unsigned count,
                                                                 unsigned* __restrict__ out) {
    __shared__ unsigned x[32], y[32], z[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned id1 = ids[0], id2 = ids[1], id3 = ids[2];
    unsigned v = 0u;
    if (warp == 0) {
        x[lane] = in[blockIdx.x * 32 + lane] * 3u + 1u;
        asm volatile("bar.arrive %0, %1;" ::"r"(id1), "r"(count) : "memory");
        v = x[lane];
    } else if (warp == 1) {
        asm volatile("bar.sync 1, %0;" ::"r"(count) : "memory");
        v = x[(lane + 1) & 31] ^ 0x5A5A5A5Au;
        y[lane] = v;
        asm volatile("bar.arrive %0, %1;" ::"r"(id2), "r"(count) : "memory");
    } else if (warp == 2) {
        asm volatile("bar.sync %0, %1;" ::"r"(id2), "r"(count) : "memory");
        v = y[(lane + 7) & 31] + 0x01000193u;
        z[lane] = v;
        asm volatile("bar.arrive %0, %1;" ::"r"(id3), "r"(count) : "memory");
    } else {
        asm volatile("barrier.sync %0, 64;" ::"r"(id3) : "memory");
        v = z[31 - lane] * 0x9E3779B9u;
    }
    __syncthreads();
    out[(blockIdx.x * 4 + warp) * 32 + lane] = v;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MB_SETMAXNREG(kind, n) asm volatile("setmaxnreg." kind ".sync.aligned.u32 " #n ";" ::: "memory")
#else
#define MB_SETMAXNREG(kind, n) __trap()
#endif

// setmaxnreg_probe: 3 warpgroups (384 threads, 168 registers each, as ptxas allocates for a kernel that
// uses setmaxnreg with __launch_bounds__(384, 1)): warpgroup 0 gives registers back (dec to 40), 1 and 2
// take them (inc to 232: 40 + 2 * 232 = 3 * 168, the split FlashAttention-3 and CUTLASS use). Each thread
// writes a value that depends on its warpgroup's path; warpgroup 1 waits at a named barrier for warpgroup 0's
// shared-memory value, so the order of the register moves is exercised both ways.
extern "C" __global__ void __launch_bounds__(384, 1) setmaxnreg_probe(const unsigned* __restrict__ in,
                                                                      unsigned* __restrict__ out) {
    __shared__ unsigned s[128];
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    const unsigned x = in[blockIdx.x * 384 + threadIdx.x];
    unsigned v;
    if (wg == 0) {
        MB_SETMAXNREG("dec", 40);
        s[t] = x * 5u + 3u;
        asm volatile("bar.arrive 1, 256;" ::: "memory");
        v = x ^ 0xA5A5A5A5u;
    } else if (wg == 1) {
        MB_SETMAXNREG("inc", 232);
        asm volatile("bar.sync 1, 256;" ::: "memory");
        v = s[127 - t] + x;
    } else {
        MB_SETMAXNREG("inc", 232);
        v = x * x + 7u;
    }
    out[blockIdx.x * 384 + threadIdx.x] = v;
}
