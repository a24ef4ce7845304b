// mbarrier.cuh: inline-PTX wrappers for Hopper's mbarrier, bulk copy, elect and fence instructions, as the
// probes (probe_mbarrier.cu) and the warp-specialised pipeline (ws_pipeline.cu) use them.
//
// PTX ISA 8.x: "Parallel Synchronization and Communication Instructions: mbarrier" (init, arrive,
// arrive_drop, expect_tx, complete_tx, test_wait, try_wait, pending_count, inval), "cp.async.bulk",
// "elect.sync", "membar/fence" (fence.proxy.async, fence.mbarrier_init). Addresses are 32-bit shared::cta
// addresses (__cvta_generic_to_shared); within a cluster of one CTA they are also its shared::cluster
// addresses. No CUDA headers are used.

#pragma once

#define MB_DEV __device__ __forceinline__

namespace mbar {

MB_DEV unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

MB_DEV void init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

MB_DEV void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

MB_DEV unsigned long long arrive(unsigned bar) {
    unsigned long long s;
    asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(s) : "r"(bar) : "memory");
    return s;
}

MB_DEV unsigned long long arrive_n(unsigned bar, unsigned n) {
    unsigned long long s;
    asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1], %2;" : "=l"(s) : "r"(bar), "r"(n) : "memory");
    return s;
}

MB_DEV unsigned long long arrive_expect_tx(unsigned bar, unsigned bytes) {
    unsigned long long s;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;" : "=l"(s) : "r"(bar), "r"(bytes) : "memory");
    return s;
}

MB_DEV void expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

MB_DEV void complete_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

MB_DEV unsigned long long arrive_drop(unsigned bar) {
    unsigned long long s;
    asm volatile("mbarrier.arrive_drop.shared::cta.b64 %0, [%1];" : "=l"(s) : "r"(bar) : "memory");
    return s;
}

MB_DEV unsigned long long arrive_drop_n(unsigned bar, unsigned n) {
    unsigned long long s;
    asm volatile("mbarrier.arrive_drop.shared::cta.b64 %0, [%1], %2;" : "=l"(s) : "r"(bar), "r"(n) : "memory");
    return s;
}

// the release.cluster forms on a shared::cluster address return no state (SYNCS.ARRIVE.TRANS64.RED)
MB_DEV void arrive_cluster(unsigned bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}

MB_DEV void arrive_expect_tx_cluster(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}

MB_DEV void inval(unsigned bar) { asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar) : "memory"); }

MB_DEV unsigned test_parity(unsigned bar, unsigned parity) {
    unsigned r;
    asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(r) : "r"(bar), "r"(parity) : "memory");
    return r;
}

MB_DEV unsigned try_parity(unsigned bar, unsigned parity) {
    unsigned r;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(r) : "r"(bar), "r"(parity) : "memory");
    return r;
}

MB_DEV unsigned try_parity_hint(unsigned bar, unsigned parity, unsigned ns) {
    unsigned r;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3; selp.u32 %0, 1, 0, p; }"
                 : "=r"(r) : "r"(bar), "r"(parity), "r"(ns) : "memory");
    return r;
}

MB_DEV unsigned test_state(unsigned bar, unsigned long long state) {
    unsigned r;
    asm volatile("{ .reg .pred p; mbarrier.test_wait.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(r) : "r"(bar), "l"(state) : "memory");
    return r;
}

MB_DEV unsigned try_state(unsigned bar, unsigned long long state) {
    unsigned r;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(r) : "r"(bar), "l"(state) : "memory");
    return r;
}

MB_DEV unsigned pending_count(unsigned long long state) {
    unsigned r;
    asm volatile("mbarrier.pending_count.b64 %0, %1;" : "=r"(r) : "l"(state));
    return r;
}

// wait until the phase of `parity` has completed (the loop every pipeline writes)
MB_DEV void wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{ .reg .pred p;\n"
        "MB_WAIT_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra MB_WAIT_%=; }" ::"r"(bar),
        "r"(parity)
        : "memory");
}

// the word itself, read as plain shared memory
MB_DEV unsigned long long load_word(unsigned bar) {
    unsigned long long v;
    asm volatile("ld.volatile.shared.b64 %0, [%1];" : "=l"(v) : "r"(bar) : "memory");
    return v;
}

// cp.async.bulk global -> shared, completing `bytes` transactions on `bar` when the bytes have landed
// (bytes and both addresses multiples of 16)
MB_DEV void bulk_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

MB_DEV unsigned elect(unsigned membermask, unsigned* leader) {
    unsigned r, l;
    asm volatile("{ .reg .pred p; elect.sync %1|p, %2; selp.u32 %0, 1, 0, p; }" : "=r"(r), "=r"(l) : "r"(membermask));
    *leader = l;
    return r;
}

MB_DEV void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

}  // namespace mbar
