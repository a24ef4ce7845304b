// When the GPU runs which path of a diverged warp: every kernel runs in one warp (one CTA of 32 threads) and
// logs, at each mark T(), the value of a shared step counter it then increments (a volatile read and write; the
// lanes of one path read and write the same values). out[k * 32 + lane] is the counter the lane saw at its k-th
// mark (0xffffffff: no k-th mark), out[32 * 32] the final count. Which path ran first, whether one path waits
// for another at a branch, a loop's back-edge or a barrier, is all in the log: gpu/path_probes.py runs the
// kernels on the GPU and in the interpreter, in two builds, and compares the logs bit for bit.
//
// a: a lane mask (lanes whose bit is set take the first side), b: a second mask or uniform flags, per kernel.

#define MARKS 32
#define PATHS_PRELUDE                                                                 \
    __shared__ volatile unsigned ctr[1];                                              \
    const unsigned lane = threadIdx.x & 31u;                                          \
    for (unsigned k_ = 0; k_ < MARKS; ++k_) out[k_ * 32u + lane] = 0xffffffffu;       \
    if (lane == 0) ctr[0] = 0u;                                                       \
    __syncwarp();                                                                     \
    unsigned n_ = 0;
#define T()                                                                           \
    do {                                                                              \
        const unsigned t_ = ctr[0];                                                   \
        out[(n_++ & (MARKS - 1u)) * 32u + lane] = t_;                                 \
        ctr[0] = t_ + 1u;                                                             \
    } while (0)
#define PATHS_END                                                                     \
    __syncwarp();                                                                     \
    if (lane == 0) out[MARKS * 32u] = ctr[0];

#define SIDE(m) (((m) >> lane) & 1u)

// if / else; inside each side a branch on a uniform flag of b (bits 0, 1) and a loop of b's bits 4..6 trips
extern "C" __global__ void paths_ifelse(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    if (SIDE(a)) {
        T(); T();
        if (b & 1u) { T(); T(); } else { T(); }
        for (unsigned i = 0; i < ((b >> 4) & 7u); ++i) T();
        T();
    } else {
        T(); T(); T();
        if (b & 2u) { T(); T(); }
        T();
    }
    T();
    PATHS_END
}

// an if with no else: the lanes that skip it
extern "C" __global__ void paths_ifonly(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    T();
    if (SIDE(a)) { T(); T(); if (b & 1u) { T(); } T(); }
    T(); T();
    PATHS_END
}

// a loop per side with a uniform trip count (b's bits 0..3 and 4..7): a back-edge every lane of the path takes
extern "C" __global__ void paths_loops(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    if (SIDE(a)) {
        for (unsigned i = 0; i < (b & 15u); ++i) { T(); T(); }
    } else {
        for (unsigned i = 0; i < ((b >> 4) & 15u); ++i) { T(); }
    }
    T();
    PATHS_END
}

// a loop whose trip count differs per lane (b's bits 0..2 for lanes in a, 4..6 for the others): lanes leave it
// at different back-edges
extern "C" __global__ void paths_divloop(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    const unsigned trips = SIDE(a) ? (b & 7u) : ((b >> 4) & 7u);
    for (unsigned i = 0; i < trips + (lane & 1u); ++i) { T(); T(); }
    T();
    PATHS_END
}

// if / else inside if / else: up to four paths at once
extern "C" __global__ void paths_nested(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    if (SIDE(a)) {
        T();
        if (SIDE(b)) { T(); T(); } else { T(); T(); T(); }
        T();
    } else {
        T();
        if (SIDE(b)) { T(); } else { T(); T(); }
        T(); T();
    }
    T();
    PATHS_END
}

// lanes in a return early; the rest diverge again on b
extern "C" __global__ void paths_exit(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    if (SIDE(a)) { T(); T(); return; }
    T();
    if (SIDE(b)) { T(); T(); }
    T();
    PATHS_END
}

// a break out of a loop whose lanes leave at different trips (bit (lane + i) of a)
extern "C" __global__ void paths_break(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    for (unsigned i = 0; i < 6u; ++i) {
        T();
        if ((a >> ((lane + i * (b & 7u)) & 31u)) & 1u) break;
        T();
    }
    T();
    PATHS_END
}

// the differential fuzzer's shape: a loop with a ballot, a break and a nested branch, the other side a shuffle
extern "C" __global__ void paths_ballot_loop(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    const unsigned t = __ballot_sync(0xffffffffu, SIDE(a));
    unsigned v = lane * 0x9e3779b9u;
    if (SIDE(a)) {
        T();
        v = __shfl_sync(t, v, __ffs(t) - 1);
        T();
        if (b & 1u) { T(); T(); }
        T();
    } else {
        unsigned ml = ~t;
        for (unsigned i = 0; i < 4u; ++i) {
            const bool go = ((b >> (8u + ((lane + i) & 15u))) & 1u) == 0u;
            ml = __ballot_sync(ml, go);
            if (!go) break;
            if (lane & 1u) { T(); T(); }
            T();
            v = __shfl_sync(ml, v + i, __ffs(ml) - 1);
            __syncwarp(ml);
        }
        T();
    }
    T();
    out[(MARKS - 1u) * 32u + lane] = v;
    PATHS_END
}

// __syncwarp(a) in the first side, the other side straight-line code
extern "C" __global__ void paths_syncwarp(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    if (SIDE(a)) {
        T();
        __syncwarp(a);
        T(); T();
    } else {
        T(); T();
        if (b & 1u) T();
        T();
    }
    T();
    PATHS_END
}

// marks inside the branch that breaks out of a loop (before the loop's reconvergence), lanes leaving at the trip
// given by bits of a
extern "C" __global__ void paths_break_marks(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    for (unsigned i = 0; i < 5u; ++i) {
        T();
        if ((a >> ((lane + i * (b & 7u)) & 31u)) & 1u) { T(); T(); break; }
        T();
    }
    T();
    PATHS_END
}

// __activemask() in divergent code and after an if with no warp-synchronous code to join it: the masks, not marks
extern "C" __global__ void paths_activemask(unsigned* out, unsigned a, unsigned b) {
    PATHS_PRELUDE
    unsigned k = 0;
    out[(k++) * 32u + lane] = __activemask();
    if (SIDE(a)) {
        T();
        out[(k++) * 32u + lane] = __activemask();
        if (SIDE(b)) { T(); out[(k++) * 32u + lane] = __activemask(); }
    } else {
        out[(k++) * 32u + lane] = __activemask();
        T(); T();
    }
    out[(k++) * 32u + lane] = __activemask();
    for (unsigned i = 0; i < ((a >> (lane & 3u)) & 3u); ++i) out[(k++) * 32u + lane] = __activemask();
    out[(k++) * 32u + lane] = __activemask();
    out[(MARKS - 1u) * 32u + lane] = n_;
    PATHS_END
}
