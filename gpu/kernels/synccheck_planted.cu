// Planted barrier misuse for synccheck: flashsim's interpreter (flashsim.cuda.checking(synccheck=True)) against
// compute-sanitizer --tool synccheck on the H100 (gpu/synccheck_cases.py runs every kernel, with the launch
// configuration of its table, under the tool, plainly, and in the interpreter).
//
// One kernel per planted pattern; each writes `out` (at least 4 * blockDim.x ints, zeroed by the host) so that
// nothing is compiled away. `n` is a run-time value (the case table passes it) wherever a constant would let
// the compiler fold the pattern. Markers `// SYNC:<name>` sit on the line of the barrier a case plants, so the
// tests and the script can check the line a report names.
//
// Cases that may hang on the GPU (a barrier waiting for threads that never come) are marked may_hang in the
// script's table: the runner kills them after its timeout.

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

// control: every thread of the CTA reaches the one __syncthreads (clean)
extern "C" __global__ void sync_ctrl(int* out) {
    __shared__ int s[1024];
    int t = threadIdx.x;
    s[t] = t + 1;
    __syncthreads();  // SYNC:ctrl
    out[t] = s[(t + 1) % blockDim.x];
}

// if (threadIdx.x < n) __syncthreads(); with n a multiple of 32 below blockDim.x: the warps past n skip the
// barrier, write and exit while the first warps wait at it (launched with 64 threads and n = 32)
extern "C" __global__ void sync_div_block_exit(int* out, int n) {
    int t = threadIdx.x;
    if (t < n) {
        out[t] = 1;
        __syncthreads();  // SYNC:div_block_exit
    }
    out[blockDim.x + t] = 2;
}

// the warps below n wait at one __syncthreads, the others at a later one: both sides reach *different* barrier
// instructions of barrier 0 (the hardware counts arrivals per barrier, not per instruction), then the first
// warps go on to the later barrier alone (launched with 64 threads and n = 32)
extern "C" __global__ void sync_div_block_two_sites(int* out, int n) {
    int t = threadIdx.x;
    if (t < n) {
        out[t] = 1;
        __syncthreads();  // SYNC:two_sites_first
    }
    out[blockDim.x + t] = 2;
    __syncthreads();  // SYNC:two_sites_second
    out[2 * blockDim.x + t] = 3;
}

// intra-warp divergence: only the lanes below n (n = 16) reach the __syncthreads; their warp-mates skip it
// (launched with 32 threads: one warp; and with 64: the second warp skips it whole)
extern "C" __global__ void sync_div_warp(int* out, int n) {
    int t = threadIdx.x;
    if (t < n) {
        out[t] = 1;
        __syncthreads();  // SYNC:div_warp
    }
    out[blockDim.x + t] = 2;
}

// threads at or past n return before the __syncthreads the others reach (64 threads; n = 32: warp 1 exits
// whole; n = 48: lanes 16..31 of warp 1 exit)
extern "C" __global__ void sync_early_return(int* out, int n) {
    int t = threadIdx.x;
    out[t] = 1;
    if (t >= n) return;
    __syncthreads();  // SYNC:early_return
    out[blockDim.x + t] = 2;
}

// bar.sync 1, 64 by every thread of the CTA (64 threads: control; 96 threads: more threads arrive than the
// count, the third warp waits for a second generation nobody completes; 32 threads: fewer threads than the
// count, it waits for ever)
extern "C" __global__ void bar_sync_64(int* out) {
    int t = threadIdx.x;
    out[t] = 1;
    asm volatile("bar.sync 1, 64;" ::: "memory");  // SYNC:bar_sync_64
    out[blockDim.x + t] = 2;
}

// bar.sync 1, n with n from the host: a thread count that is not a multiple of the warp size (n = 48, 64
// threads; the PTX ISA requires a multiple of 32, the register operand keeps ptxas from checking it)
extern "C" __global__ void bar_sync_n(int* out, int n) {
    int t = threadIdx.x;
    out[t] = 1;
    asm volatile("bar.sync 1, %0;" ::"r"(n) : "memory");  // SYNC:bar_sync_n
    out[blockDim.x + t] = 2;
}

// __syncwarp(0xffffffff) after the lanes at or past n (n = 16) returned: the mask names exited lanes (one warp).
// In converged code ptxas proves every live lane is there and compiles the __syncwarp to a NOP (listed in
// EIATTR_COOP_GROUP_INSTR_OFFSETS), so this one sits in a branch all the remaining lanes take (k = 32): a real
// WARPSYNC 0xffffffff
extern "C" __global__ void syncwarp_exited(int* out, int n, int k) {
    __shared__ int s[32];
    int t = threadIdx.x;
    if (t >= n) return;
    s[t] = t;
    if (t < k) {
        __syncwarp(0xffffffffu);  // SYNC:syncwarp_exited
        out[t] = s[(t + 1) % n];
    }
    out[32 + t] = 7;
}

// the same in converged code: the __syncwarp is a NOP in the SASS (nothing there to check, for the
// interpreter as for a tool that instruments SASS)
extern "C" __global__ void syncwarp_exited_nop(int* out, int n) {
    __shared__ int s[32];
    int t = threadIdx.x;
    if (t >= n) return;
    s[t] = t;
    __syncwarp(0xffffffffu);  // SYNC:syncwarp_exited_nop
    out[t] = s[(t + 1) % n];
}

// __syncwarp(0x0000ffff) executed by all 32 lanes: lanes 16..31 are not in the mask they execute (in a branch
// every lane takes, k = 32, so that ptxas keeps the WARPSYNC)
extern "C" __global__ void syncwarp_not_in_mask(int* out, int k) {
    __shared__ int s[32];
    int t = threadIdx.x;
    s[t] = t;
    if (t < k) {
        __syncwarp(0x0000ffffu);  // SYNC:syncwarp_not_in_mask
        out[t] = s[t ^ 1];
    }
    out[32 + t] = 7;
}

// compute-sanitizer's own sample (compute-sanitizer-samples Synccheck/illegal_syncwarp.cu): the mask is the
// ballot of the lanes below n (n = 16: 0x0000ffff), the lanes up to n (0..16) execute it: lane 16 is not in it
extern "C" __global__ void syncwarp_sample(int* out, int n) {
    __shared__ int s[32];
    int t = threadIdx.x;
    unsigned mask = __ballot_sync(0xffffffffu, t < n);
    if (t <= n) {
        s[t] = t;
        __syncwarp(mask);  // SYNC:syncwarp_sample
        out[t] = s[t ^ 1];
    }
    __syncthreads();
    out[32 + t] = 7;
}

// control: the two halves of the warp, each in its own branch, sync with a mask naming exactly their own
// lanes (legal: every lane is in its mask, every lane of a mask executes it)
extern "C" __global__ void syncwarp_split_masks(int* out, int n) {
    __shared__ int s[32];
    int t = threadIdx.x;
    s[t] = t;
    if (t < n) {
        __syncwarp(0x0000ffffu);  // SYNC:split_low
        out[t] = s[t ^ 1];
    } else {
        __syncwarp(0xffff0000u);  // SYNC:split_high
        out[t] = s[t ^ 1] + 100;
    }
}

// lanes of one warp at one __syncwarp with different masks: lanes below n (16) pass 0x0000ffff, the others
// 0xffffffff (which names lanes 0..15, whose own mask leaves the others out)
extern "C" __global__ void syncwarp_mixed_masks(int* out, int n) {
    __shared__ int s[32];
    int t = threadIdx.x;
    unsigned mask = t < n ? 0x0000ffffu : 0xffffffffu;
    s[t] = t;
    __syncwarp(mask);  // SYNC:syncwarp_mixed_masks
    out[t] = s[t ^ 1];
}

// cooperative groups: this_thread_block().sync() in a branch only the warps below n take (64 threads, n = 32)
extern "C" __global__ void cg_sync_divergent(int* out, int n) {
    cg::thread_block block = cg::this_thread_block();
    int t = threadIdx.x;
    if (t < n) {
        out[t] = 1;
        block.sync();  // SYNC:cg_sync
    }
    out[blockDim.x + t] = 2;
}

// __syncthreads_count / _and / _or in a branch only the warps below n take (64 threads, n = 32)
extern "C" __global__ void sync_count_divergent(int* out, int n) {
    int t = threadIdx.x;
    int r = -1;
    if (t < n) r = __syncthreads_count(t & 1);  // SYNC:sync_count
    out[t] = r;
}

extern "C" __global__ void sync_and_divergent(int* out, int n) {
    int t = threadIdx.x;
    int r = -1;
    if (t < n) r = __syncthreads_and(t < 1000);  // SYNC:sync_and
    out[t] = r;
}

extern "C" __global__ void sync_or_divergent(int* out, int n) {
    int t = threadIdx.x;
    int r = -1;
    if (t < n) r = __syncthreads_or(t == 3);  // SYNC:sync_or
    out[t] = r;
}
