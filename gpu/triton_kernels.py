"""Triton kernels after Triton's tutorials (vector add, fused softmax, layer norm, matmul, fused attention,
persistent TMA matmul) and a few more idioms Triton 3.6 emits for sm_90: the suite that flashsim.triton is
held to on the H100 (gpu/triton_suite.py runs them on both).

Each kernel is written for this suite; the shapes of the computations follow the tutorials so that the SASS
is the SASS a Triton user's code compiles to (wgmma with software pipelining, cp.async and TMA loads, host
and device tensor descriptors, persistent tiles, online softmax).
"""

import triton
import triton.language as tl


# ------------------------------------------------------------------------------------------------ elementwise
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK: tl.constexpr,
                   STAGES: tl.constexpr):
    # a persistent loop over rows, each row in one block of columns (tutorial 02)
    start = tl.program_id(0)
    step = tl.num_programs(0)
    for row in tl.range(start, n_rows, step, num_stages=STAGES):
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        y = num / tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, n, eps, BLOCK: tl.constexpr):
    # one row per program, the row in chunks of BLOCK (tutorial 05's forward pass)
    row = tl.program_id(0)
    x_ptr += row * stride
    y_ptr += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)
        d = tl.where(cols < n, x - mean, 0.0)
        acc += d * d
    var = tl.sum(acc, axis=0) / n
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < n
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_ptr + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


# ------------------------------------------------------------------------------------------------ matmul
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                  ACTIVATION: tl.constexpr):
    # grouped tile order for L2 reuse, K loop of tl.dot (wgmma on sm_90, pipelined by num_stages) (tutorial 03)
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    in_group = GROUP_M * num_n
    group = pid // in_group
    first_m = group * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % in_group) % size_m)
    pid_n = (pid % in_group) // size_m
    offs_m = (pid_m * BM + tl.arange(0, BM)) % M
    offs_n = (pid_n * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    if ACTIVATION == "leaky_relu":
        acc = tl.where(acc >= 0, acc, 0.01 * acc)
    c = acc.to(c_ptr.dtype.element_ty)
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + stride_cm * cm[:, None] + stride_cn * cn[None, :], c, mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def matmul_tma_persistent_kernel(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                                 BK: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                                 DEVICE_DESC: tl.constexpr):
    # persistent tiles over the SMs, TMA loads through tensor descriptors (host ones, or made on the device
    # from pointers), a flattened tile x K loop (tutorial 09)
    if DEVICE_DESC:
        a_desc = tl.make_tensor_descriptor(a_desc, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        b_desc = tl.make_tensor_descriptor(b_desc, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
        c_desc = tl.make_tensor_descriptor(c_desc, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    start = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    num_tiles = num_m * num_n
    in_group = GROUP_M * num_n
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True):
        group = tile // in_group
        first_m = group * GROUP_M
        size_m = min(num_m - first_m, GROUP_M)
        pid_m = first_m + (tile % size_m)
        pid_n = (tile % in_group) // size_m
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(k_tiles):
            a = a_desc.load([pid_m * BM, kk * BK])
            b = b_desc.load([pid_n * BN, kk * BK])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


# ------------------------------------------------------------------------------------------------ attention
@triton.jit
def _softmax_step(qk, m_i, qk_scale, start_n, offs_m, offs_n, STAGE: tl.constexpr):
    # one KV block of the online softmax in exp2: the block's probabilities, the rescale of what came before,
    # the new running maximum (STAGE 2, the diagonal block, masks the keys right of the query)
    if STAGE == 2:
        keep = offs_m[:, None] >= (start_n + offs_n[None, :])
        qk = qk * qk_scale + tl.where(keep, 0, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        qk -= m_ij[:, None]
    else:
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        qk = qk * qk_scale - m_ij[:, None]
    return tl.math.exp2(qk), tl.math.exp2(m_i - m_ij), m_ij


@triton.jit
def _attn_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, start_m, qk_scale, N_CTX,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr, offs_m, offs_n):
    # STAGE 1: the KV blocks left of the diagonal block (no mask); 2: the diagonal block (causal mask);
    # 3: every block (not causal)
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
    else:
        lo, hi = 0, N_CTX
    k_ptrs += lo * stride_kn
    v_ptrs += lo * stride_vn
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = tl.load(k_ptrs)
        qk = tl.dot(q, tl.trans(k))
        p, alpha, m_ij = _softmax_step(qk, m_i, qk_scale, start_n, offs_m, offs_n, STAGE)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptrs)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i


@triton.jit
def attn_fwd_pointers(Q, K, V, sm_scale, M, Out, stride_qz, stride_qh, stride_qm, stride_kz, stride_kh, stride_kn,
                      stride_vz, stride_vh, stride_vn, stride_oz, stride_oh, stride_om, H, N_CTX,
                      HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # fused attention forward with plain pointers: Q in registers, K and V blocks streamed, online softmax in
    # exp2 (tutorial 06's structure); head dim contiguous; N_CTX a multiple of BLOCK_M and BLOCK_N
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    k_ptrs = K + off_z * stride_kz + off_h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = V + off_z * stride_vz + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = tl.load(q_ptrs)
    if CAUSAL:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, start_m, qk_scale, N_CTX,
                                    BLOCK_M, BLOCK_N, 1, offs_m, offs_n)
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, start_m, qk_scale, N_CTX,
                                    BLOCK_M, BLOCK_N, 2, offs_m, offs_n)
    else:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn, start_m, qk_scale, N_CTX,
                                    BLOCK_M, BLOCK_N, 3, offs_m, offs_n)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    o_ptrs = Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, acc.to(Out.type.element_ty))


@triton.jit
def _attn_inner_desc(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype: tl.constexpr, start_m, qk_scale,
                     BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr,
                     offs_m, offs_n, N_CTX):
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    offsetk_y = offset_y + lo
    offsetv_y = offset_y + lo
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([offsetk_y, 0]).T
        qk = tl.dot(q, k)
        p, alpha, m_ij = _softmax_step(qk, m_i, qk_scale, start_n, offs_m, offs_n, STAGE)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([offsetv_y, 0])
        acc = tl.dot(p.to(dtype), v, acc)
        l_i = l_i * alpha + l_ij
        m_i = m_ij
        offsetk_y += BLOCK_N
        offsetv_y += BLOCK_N
    return acc, l_i, m_i


@triton.jit
def attn_fwd_descriptors(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX, HEAD_DIM: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                         DEVICE_DESC: tl.constexpr):
    # fused attention forward through tensor descriptors over (Z * H * N_CTX, HEAD_DIM) views of q, k, v and o:
    # host TensorDescriptors (TMA maps made by the launcher) or, with DEVICE_DESC, descriptors made on the
    # device from base pointers (tutorial 06's _maybe_make_tensor_desc)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    y_dim = Z * H * N_CTX
    if DEVICE_DESC:
        desc_q = tl.make_tensor_descriptor(desc_q, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
        desc_k = tl.make_tensor_descriptor(desc_k, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        desc_v = tl.make_tensor_descriptor(desc_v, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        desc_o = tl.make_tensor_descriptor(desc_o, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
    dtype = desc_o.dtype
    offset_y = off_hz * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = desc_q.load([qo_offset_y, 0])
    if CAUSAL:
        acc, l_i, m_i = _attn_inner_desc(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype, start_m, qk_scale,
                                         BLOCK_M, HEAD_DIM, BLOCK_N, 1, offs_m, offs_n, N_CTX)
        acc, l_i, m_i = _attn_inner_desc(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype, start_m, qk_scale,
                                         BLOCK_M, HEAD_DIM, BLOCK_N, 2, offs_m, offs_n, N_CTX)
    else:
        acc, l_i, m_i = _attn_inner_desc(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype, start_m, qk_scale,
                                         BLOCK_M, HEAD_DIM, BLOCK_N, 3, offs_m, offs_n, N_CTX)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(dtype))


# ------------------------------------------------------------------------------------------------ more idioms
@triton.jit
def histogram_kernel(x_ptr, bins_ptr, n, NBINS: tl.constexpr, BLOCK: tl.constexpr):
    # integer atomics from every lane (tl.atomic_add on global memory), data-dependent addresses
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(bins_ptr + (x % NBINS), 1, mask=mask)


@triton.jit
def cumsum_argmax_kernel(x_ptr, scan_ptr, arg_ptr, n_cols, BLOCK: tl.constexpr):
    # a scan and an index reduction along a row (tl.cumsum, tl.argmax): shuffles and uniform control
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(scan_ptr + row * n_cols + cols, tl.cumsum(x, axis=0), mask=mask)
    tl.store(arg_ptr + row, tl.argmax(tl.where(mask, x, -float("inf")), axis=0))


@triton.jit
def dropout_kernel(x_ptr, out_ptr, n, p, seed, BLOCK: tl.constexpr):
    # tl.rand (Philox in integer arithmetic) and a select (tutorial 04)
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    r = tl.rand(seed, offs)
    keep = r > p
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)


@triton.jit
def dot_small_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # one tl.dot of whole tiles: fp8 (e4m3) operands -> QGMMA, int8 -> IGMMA
    m = tl.arange(0, BM)
    n = tl.arange(0, BN)
    k = tl.arange(0, BK)
    x = tl.load(a_ptr + m[:, None] * BK + k[None, :])
    y = tl.load(b_ptr + k[:, None] * BN + n[None, :])
    tl.store(c_ptr + m[:, None] * BN + n[None, :], tl.dot(x, y))


@triton.jit
def sort_histogram_kernel(x_ptr, sorted_ptr, bins_ptr, N: tl.constexpr, NBINS: tl.constexpr):
    # tl.sort (a bitonic network of compares and shuffles) and tl.histogram
    i = tl.arange(0, N)
    x = tl.load(x_ptr + i)
    tl.store(sorted_ptr + i, tl.sort(x))
    tl.store(bins_ptr + tl.arange(0, NBINS), tl.histogram((x * 4).to(tl.int32) & (NBINS - 1), NBINS))


@triton.jit
def math_mix_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # libdevice and approximate math Triton lowers inline: sqrt, rsqrt, log, exp, sin, fma, erf, floor
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m, other=1.0)
    a = tl.abs(v)
    r = tl.sqrt(a) + tl.rsqrt(a + 1.0) + tl.log(a + 1.0) + tl.exp(v) + tl.math.fma(v, v, v)
    r += tl.sin(v) + tl.erf(v) + tl.floor(v * 3.0)
    tl.store(out_ptr + offs, r, mask=m)


@triton.jit
def int_mix_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # integer division and remainder by constants and variables, umulhi, shifts by variable amounts
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m, other=1)
    d = (v & 1023) + 1
    r = tl.umulhi(v, v + 12345) ^ (v // 7) ^ (v % 13) ^ (v // d) ^ ((v >> (v & 31)) + (v << 3))
    tl.store(out_ptr + offs, r, mask=m)
