"""numba-cuda kernels for flashsim.numba's suite (gpu/numba_suite.py): shared memory, atomics, shuffles and a
tiled matmul, the idioms of numba-cuda's documentation examples, written for this suite."""

from numba import cuda, float32, int32

TILE = 16


@cuda.jit
def axpy(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def block_sum(x, out):
    # a shared-memory tree reduction per block, one atomic add per block into out[0]
    buf = cuda.shared.array(256, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    s = 128
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        cuda.atomic.add(out, 0, buf[0])


@cuda.jit
def histogram(x, bins):
    # integer atomics on global memory from every lane
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(bins, x[i] % bins.size, 1)


@cuda.jit
def warp_reduce(x, out):
    # a butterfly of shfl_xor_sync per warp, and a ballot of the lanes holding negative values
    i = cuda.grid(1)
    v = x[i] if i < x.size else float32(0)
    off = 16
    while off > 0:
        v += cuda.shfl_xor_sync(0xFFFFFFFF, v, off)
        off //= 2
    neg = cuda.ballot_sync(0xFFFFFFFF, i < x.size and x[i] < 0)
    lane = cuda.threadIdx.x % 32
    if lane == 0 and i < x.size:
        out[2 * (i // 32)] = v
        out[2 * (i // 32) + 1] = float32(cuda.popc(neg))


@cuda.jit
def matmul_tiled(a, b, c):
    # C = A @ B in 16x16 tiles through shared memory (numba's documentation example, re-written)
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = float32(0)
    for k0 in range((a.shape[1] + TILE - 1) // TILE):
        sa[ty, tx] = a[y, k0 * TILE + tx] if y < a.shape[0] and k0 * TILE + tx < a.shape[1] else float32(0)
        sb[ty, tx] = b[k0 * TILE + ty, x] if x < b.shape[1] and k0 * TILE + ty < b.shape[0] else float32(0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    if y < c.shape[0] and x < c.shape[1]:
        c[y, x] = acc


@cuda.jit
def scale_rows_dynamic(x, scale, out):
    # dynamic shared memory (the launch's fourth item) and an int32 scalar
    buf = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    row = cuda.blockIdx.x
    buf[t] = x[row, t] * float32(scale)
    cuda.syncthreads()
    out[row, t] = buf[(t + 1) % cuda.blockDim.x]
