// trace.cuh: per-warp trace recording for the FlashAttention kernels, compiled away unless -DFS_TRACE_BUILD.
//
// A traced step ends with
//     FS_TRACE(tag, nregs, FS_PUT(x); FS_PUT(y); ...);
// (FS_PUT takes a float, an unsigned, an unsigned short (zero-extended) or an array of them in C order)
// which records, for each selected warp, one event: the tag, the warp's sequence number and `nregs`
// 32-bit registers of each of its 32 lanes, in the order the FS_PUTs give (flashsim/trace/spec.py lists
// them per kernel and tag; the twins in flashsim/kernels/ record the same registers at the same points).
// Without FS_TRACE_BUILD the macros expand to nothing: the untraced kernels are the kernels.
//
// Run-time filter: the host fills the device global `fs_trace_params` (gpu/trace_gpu.py): `slot[cta]` is
// the record slot of a CTA (linear id x + X (y + Y z)) or -1, `warp_mask` the warps recorded in each
// selected CTA. Each selected warp owns `cap_words` words of `buf`:
//     word 0: words used (header included), word 1: events dropped for lack of room, then records
//     record: tag | nregs << 16, seq, then nregs x 32 words (register r of lane l at 32 r + l)
// An event that does not fit is dropped and counted; the host reports any drop as an error (no silent
// truncation). Every lane of a warp executes each FS_TRACE (the steps are warp-uniform), so the cursor is
// the same in all lanes and no atomics are needed.

#pragma once

// Tag ids: the index in flashsim.trace.spec.TAGS (tests/test_trace_spec.py checks they agree).
enum FsTag {
    FS_TAG_empty = 0, FS_TAG_init_ml = 1, FS_TAG_load_q = 2, FS_TAG_load_k = 3, FS_TAG_load_v = 4,
    FS_TAG_load_kv = 5, FS_TAG_mma_qk = 6, FS_TAG_store_s = 7, FS_TAG_mask = 8, FS_TAG_softmax = 9,
    FS_TAG_mma_pv = 10, FS_TAG_store_o = 11, FS_TAG_update_o = 12, FS_TAG_next_ml = 13, FS_TAG_normalize = 14,
};

#ifdef FS_TRACE_BUILD

namespace fstrace {

struct Params {
    unsigned* buf;                 // slots x warps x cap_words
    const int* slot;               // per CTA: slot or -1
    unsigned long long cap_words;  // words per recorded warp
    unsigned warp_mask;            // recorded warps of a selected CTA
    int n_warps;                   // popcount of warp_mask
};

}  // namespace fstrace

__device__ fstrace::Params fs_trace_params;  // global-namespace name: the host finds it unmangled

namespace fstrace {

struct Tracer {
    unsigned* base;
    unsigned cursor, seq, r, lane, cap;
    bool on, ok;

    __device__ __forceinline__ void init() {
        const Params p = fs_trace_params;
        on = false;
        ok = false;
        lane = threadIdx.x & 31;
        cursor = 2;
        seq = 0;
        if (p.buf == nullptr) return;
        const unsigned warp = threadIdx.x >> 5;
        const long long cta = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
        const int slot = p.slot[cta];
        if (slot < 0 || warp >= 32 || !((p.warp_mask >> warp) & 1u)) return;
        const int wi = __popc(p.warp_mask & ((1u << warp) - 1u));
        base = p.buf + ((unsigned long long)slot * p.n_warps + wi) * p.cap_words;
        cap = (unsigned)p.cap_words;
        on = true;
        if (lane == 0) {
            base[0] = 2;
            base[1] = 0;
        }
    }
    __device__ __forceinline__ void begin(int tag, unsigned nregs) {
        ok = cursor + 2 + 32 * nregs <= cap;
        if (!ok) {
            if (lane == 0) base[1] += 1;
        } else if (lane == 0) {
            base[cursor] = (unsigned)tag | (nregs << 16);
            base[cursor + 1] = seq;
        }
        r = 0;
    }
    __device__ __forceinline__ void put(unsigned v) {
        if (ok) base[cursor + 2 + 32 * r + lane] = v;
        ++r;
    }
    __device__ __forceinline__ void put(float v) { put(__float_as_uint(v)); }
    __device__ __forceinline__ void put(unsigned short v) { put((unsigned)v); }
    // register arrays, in C order (unrolled: constant indices keep them in registers)
    template <typename T, int A>
    __device__ __forceinline__ void put(const T (&x)[A]) {
#pragma unroll
        for (int a = 0; a < A; ++a) put(x[a]);
    }
    template <typename T, int A, int B>
    __device__ __forceinline__ void put(const T (&x)[A][B]) {
#pragma unroll
        for (int a = 0; a < A; ++a) put(x[a]);
    }
    template <typename T, int A, int B, int C>
    __device__ __forceinline__ void put(const T (&x)[A][B][C]) {
#pragma unroll
        for (int a = 0; a < A; ++a) put(x[a]);
    }
    __device__ __forceinline__ void end() {
        if (ok) {
            cursor += 2 + 32 * r;
            if (lane == 0) base[0] = cursor;
        }
        ++seq;
    }
};

}  // namespace fstrace

#define FS_TRACE_INIT() \
    fstrace::Tracer fs_tr; \
    fs_tr.init()
#define FS_TRACE(tag, nregs, ...)              \
    do {                                       \
        if (fs_tr.on) {                        \
            fs_tr.begin(FS_TAG_##tag, (nregs)); \
            __VA_ARGS__;                       \
            fs_tr.end();                       \
        }                                      \
    } while (0)
#define FS_PUT(x) fs_tr.put(x)

#else

#define FS_TRACE_INIT() \
    do {                \
    } while (0)
#define FS_TRACE(tag, nregs, ...) \
    do {                          \
    } while (0)
#define FS_PUT(x)

#endif
