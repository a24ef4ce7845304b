"""flashsim.cuda: the cupy-shaped face of the SASS interpreter (CPU only; the GPU comparisons are in
tests/test_sass_gpu.py)."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.errors import ArgumentError, SimulatedFault
from flashsim.sass import toolchain
from flashsim.sass.toolchain import CompileError
from flashsim.sass.cubin import CubinError

BASIC = r"""
__device__ int gcount;
__constant__ float cscale[4] = {1.f, 2.f, 3.f, 4.f};
extern "C" __global__ void basic(float* x, int n) {
    __shared__ float buf[256];
    extern __shared__ float dyn[];
    int t = threadIdx.x;
    buf[t] = x[t] * cscale[t & 3];
    dyn[t] = 2.f;
    __syncthreads();
    x[t] = buf[255 - t] + dyn[t ^ 1] + (float)n / (float)t;
    atomicAdd(&gcount, 1);
}
struct Params { float* p; int n; float s; };
extern "C" __global__ void by_value(Params p) { int i = threadIdx.x; if (i < p.n) p.p[i] *= p.s; }
extern "C" __global__ void oob(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; x[i + n] = 1.f; }
extern "C" __global__ void misaligned(float* x) { ((float*)((char*)x + 2))[threadIdx.x] = 1.f; }
extern "C" __global__ void spin(volatile int* x) { while (x[0] == 0) { } }
extern "C" __global__ void deadlock(int* x) {
    if (threadIdx.x < 32) asm volatile("bar.sync 1, 64;"); else asm volatile("bar.sync 2, 64;");
    x[threadIdx.x] = 1;
}
extern "C" __global__ void early_exit(int* x) {
    if (threadIdx.x < 32) return;
    __syncthreads();
    x[threadIdx.x] = (int)threadIdx.x;
}
extern "C" __global__ void divergent_shfl(int* x) {
    int v = threadIdx.x;
    if (threadIdx.x & 1) v += __shfl_xor_sync(0xaaaaaaaau, v, 2); else v -= 1;
    x[threadIdx.x] = v;
}
extern "C" __global__ void texfetch(cudaTextureObject_t t, float* x) { x[threadIdx.x] = tex1Dfetch<float>(t, threadIdx.x); }
template <typename T> __global__ void scale(T* x, T s) { x[threadIdx.x] *= s; }
"""


@functools.lru_cache(maxsize=None)
def basic_module() -> fc.RawModule:
    return fc.RawModule(code=BASIC, name_expressions=("scale<float>", "scale<int>"))


def test_basic_kernel_bit_exact():
    mod = basic_module()
    x0 = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    x = fc.asarray(x0)
    before = int(np.frombuffer(mod.get_global("gcount").get().tobytes(), np.int32)[0])
    mod.get_function("basic")((1,), (256,), (x, np.int32(7)), shared_mem=1024)
    t = np.arange(256)
    buf = x0 * np.array([1, 2, 3, 4], np.float32)[t & 3]
    with np.errstate(divide="ignore"):
        ref = (buf[255 - t] + np.float32(2)) + (np.float32(7) / t.astype(np.float32))  # IEEE f32, as div.rn
    np.testing.assert_array_equal(x.get().view(np.uint32), ref.astype(np.float32).view(np.uint32))
    after = int(np.frombuffer(mod.get_global("gcount").get().tobytes(), np.int32)[0])
    assert after - before == 256


def test_struct_by_value_and_pointer_inside():
    mod = basic_module()
    dt = np.dtype([("p", np.uint64), ("n", np.int32), ("s", np.float32)])
    y = fc.asarray(np.arange(8, dtype=np.float32))
    rec = np.zeros((), dt)
    rec["p"], rec["n"], rec["s"] = y.data.ptr, 8, 2.5
    mod.get_function("by_value")((1,), (32,), (rec,))
    np.testing.assert_array_equal(y.get(), np.arange(8, dtype=np.float32) * np.float32(2.5))
    one = np.zeros(1, dt)
    one[0] = rec
    mod.get_function("by_value")((1,), (32,), (one,))  # a one-element structured array works too
    np.testing.assert_array_equal(y.get(), np.arange(8, dtype=np.float32) * np.float32(6.25))


def test_name_expressions_and_raw_kernel():
    mod = basic_module()
    x = fc.asarray(np.arange(4, dtype=np.int32))
    mod.get_function("scale<int>")((1,), (4,), (x, np.int32(3)))
    np.testing.assert_array_equal(x.get(), np.arange(4) * 3)
    k = fc.RawKernel(BASIC, "by_value")
    assert k.cubin[:4] == b"\x7fELF"
    with pytest.raises(fc.LaunchError, match=r"kernel 'by_value' takes 1 arguments"):
        k((1,), (1,), ())


def test_divergent_shuffle_and_early_exit():
    mod = basic_module()
    x = fc.zeros((32,), np.int32)
    mod.get_function("divergent_shfl")((1,), (32,), (x,))
    lane = np.arange(32)
    np.testing.assert_array_equal(x.get(), np.where(lane & 1, lane + (lane ^ 2), lane - 1))
    y = fc.zeros((64,), np.int32)
    mod.get_function("early_exit")((1,), (64,), (y,))  # the exited warp does not hold up the barrier
    np.testing.assert_array_equal(y.get(), np.where(np.arange(64) >= 32, np.arange(64), 0))


def test_schedule_seed_does_not_change_a_race_free_result():
    mod = basic_module()
    outs = []
    for seed in (None, 1, 2):
        x = fc.asarray(np.arange(256, dtype=np.float32))
        mod.get_function("basic")((1,), (256,), (x, np.int32(3)), shared_mem=1024,
                                  exec_options=fc.ExecOptions(schedule_seed=seed))
        outs.append(x.get())
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


# ---------------------------------------------------------------------------------------------- bad input
def test_argument_errors_name_the_position_and_the_parameters():
    f = basic_module().get_function("oob")
    x = fc.zeros((64,), np.float32)
    sig = re.escape("(#0: 8 bytes at 0x0, #1: 4 bytes at 0x8)")
    with pytest.raises(fc.LaunchError, match=r"takes 2 arguments " + sig + ", got 1"):
        f((1,), (64,), (x,))
    with pytest.raises(fc.LaunchError, match=r"argument 1 of kernel 'oob'.*Python int is passed as 8 bytes"):
        f((1,), (64,), (x, 3))
    with pytest.raises(fc.LaunchError, match=r"argument 1 .*int64 is 8 bytes, the parameter has 4"):
        f((1,), (64,), (x, np.int64(3)))
    with pytest.raises(fc.LaunchError, match=r"argument 0 .*numpy array is host memory"):
        f((1,), (64,), (np.zeros(4, np.float32), np.int32(3)))
    with pytest.raises(fc.LaunchError, match=r"argument 0 .*cannot pass 'str'"):
        f((1,), (64,), ("x", np.int32(3)))


@pytest.mark.parametrize("grid, block, match", [
    ((0,), (64,), r"grid=\(0,\)"),
    ((1,), (2048,), r"block=\(2048,\): dimension x = 2048 exceeds the sm_90 limit 1024"),
    ((1,), (32, 32, 2), r"at most 1024 threads per block"),
    ((1, 70000), (32,), r"dimension y = 70000 exceeds the sm_90 limit 65535"),
    ((1,), (1, 1, 65), r"dimension z = 65 exceeds"),
])
def test_launch_shape_errors(grid, block, match):
    f = basic_module().get_function("oob")
    with pytest.raises(ValueError, match=match):
        f(grid, block, (fc.zeros((64,), np.float32), np.int32(0)))


def test_shared_memory_limits():
    f = basic_module().get_function("basic")
    x = fc.zeros((256,), np.float32)
    with pytest.raises(Exception, match=r"shared_mem=232449: 1024 static \+ 232449 dynamic bytes exceed the 232448"):
        f((1,), (256,), (x, np.int32(1)), shared_mem=232449)
    with pytest.raises(Exception, match=r"max_dynamic_shared_size_bytes \(49152\)"):
        f((1,), (256,), (x, np.int32(1)), shared_mem=60000)
    f.max_dynamic_shared_size_bytes = 231424
    f((1,), (256,), (x, np.int32(1)), shared_mem=231424)  # 1 KiB static + 226 KiB dynamic: allowed


def test_out_of_bounds_global_access_is_a_fault_with_location():
    f = basic_module().get_function("oob")
    with pytest.raises(SimulatedFault) as info:
        f((1,), (64,), (fc.zeros((64,), np.float32), np.int32(1)))
    msg = str(info.value)
    assert re.search(r"out-of-bounds global address: cta=0 warp=1 lane=31 addr=0x[0-9a-f]+", msg), msg
    assert "0 bytes past the end of allocation" in msg and "STG.E" in msg and "pc=0x" in msg
    assert info.value.pc > 0 and "STG" in info.value.sass


def test_misaligned_global_access_is_a_fault():
    with pytest.raises(SimulatedFault, match=r"misaligned global address: cta=0 warp=0 lane=0 addr=0x[0-9a-f]+2 "):
        basic_module().get_function("misaligned")((1,), (32,), (fc.zeros((64,), np.float32),))


def test_infinite_loop_hits_the_step_budget_with_the_pc():
    with pytest.raises(fc.StepBudgetExceeded, match=r"step budget of 5000 steps .*cta=0 warp=0 at pc=0x[0-9a-f]+ `"):
        basic_module().get_function("spin")((1,), (32,), (fc.zeros((1,), np.int32),),
                                            exec_options=fc.ExecOptions(max_steps=5000))


def test_barrier_deadlock_says_who_waits_where():
    with pytest.raises(fc.BarrierDeadlock) as info:
        basic_module().get_function("deadlock")((1,), (64,), (fc.zeros((64,), np.int32),))
    msg = str(info.value)
    assert "cta=0 warp=0: waits at pc=" in msg and "BAR.SYNC.DEFER_BLOCKING 0x1, 0x40" in msg
    assert "cta=0 warp=1: waits at pc=" in msg and "BAR.SYNC.DEFER_BLOCKING 0x2, 0x40" in msg


def test_unmodelled_instruction_is_named_with_pc_and_sass():
    with pytest.raises(NotImplementedError, match=r"SASS opcode TLD\.LZ is not modelled: pc=0x[0-9a-f]+ `TLD\.LZ .*1D"):
        basic_module().get_function("texfetch")((1,), (32,), (np.uint64(1), fc.zeros((32,), np.float32)))


def test_unknown_kernel_and_global_names():
    mod = basic_module()
    with pytest.raises(Exception, match=r"name='nope': no kernel of that name .*'basic'"):
        mod.get_function("nope")
    with pytest.raises(Exception, match=r"name='nope': no global of that name .*gcount"):
        mod.get_global("nope")


def test_compile_error_carries_the_nvrtc_log():
    with pytest.raises(toolchain.CompileError, match=r"(?s)nvrtc failed to compile kernel.cu:.*identifier \"undefined_fn\" is undefined"):
        fc.RawModule(code='extern "C" __global__ void k() { undefined_fn(); }')


def test_cubins_of_other_architectures_and_other_formats_are_refused(tmp_path):
    src = 'extern "C" __global__ void k(int* x) { x[0] = 1; }'
    for arch in ("sm_80", "sm_100"):
        cub = _compile_for(src, arch)
        with pytest.raises(CubinError, match=rf"a cubin for {arch}; flashsim interprets sm_90 SASS only"):
            fc.RawModule(cubin=cub)
    # PTX, fatbins and host binaries load (tests/test_binaries.py); broken ones are refused with the reason
    with pytest.raises(CubinError, match=r"<cubin>: not a readable fatbin: .*Invalid fatbin header in '<cubin>'"):
        fc.RawModule(cubin=b"\x50\xed\x55\xba" + b"\0" * 60)
    with pytest.raises(CubinError, match=r"not a CUDA binary"):
        fc.RawModule(cubin=b"hello world")
    p = tmp_path / "k.ptx"
    p.write_text(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { bogus; }\n")
    with pytest.raises(CompileError, match=r"k.ptx"):
        fc.RawModule(path=str(p))


def _compile_for(src: str, arch: str) -> bytes:
    # cupy's -arch=sm_90 comes last (NVRTC keeps the last): build the other architecture directly
    import ctypes

    lib = toolchain._nvrtc()
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None)
    opts = [f"-arch={arch}".encode()]
    assert lib.nvrtcCompileProgram(prog, 1, (ctypes.c_char_p * 1)(*opts)) == 0
    out = toolchain._get(lib, prog, "nvrtcGetCUBINSize", "nvrtcGetCUBIN")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return out


def test_lineinfo_does_not_change_the_sass():
    def listing(cubin):
        doc = toolchain.disassemble(cubin)
        return [[(i["opcode"], i.get("operands", ""), i.get("predicate", "")) for i in f["sass-instructions"]]
                for f in doc[1]]

    with_lines, _, _ = toolchain.compile_cuda(BASIC, lineinfo=True)
    without, _, _ = toolchain.compile_cuda(BASIC, lineinfo=False)
    assert with_lines != without  # the line tables are there
    assert listing(with_lines) == listing(without)


def test_device_arrays_behave_like_cupys():
    a = fc.asarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    assert a.shape == (3, 4) and a.dtype == np.int16 and a.nbytes == 24 and a.size == 12
    assert a.data.ptr % 512 == 0 and fc.asnumpy(a).tolist() == np.arange(12).reshape(3, 4).tolist()
    assert fc.asarray(a) is a
    b = fc.zeros((2, 2), np.float32)
    b.set(np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(b.get(), 1)
    with pytest.raises(TypeError, match="use .get()"):
        np.asarray(b)
    with pytest.raises(Exception, match=r"expected float32\[2, 2\]"):
        b.set(np.ones(3))


SPIN_WAIT = r"""
extern "C" __global__ void producer_consumer(int* out) {
    __shared__ volatile int flag;
    __shared__ volatile int data;
    int warp = threadIdx.x / 32;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    if (warp == 0) {
        if (threadIdx.x == 0) { data = 42; __threadfence_block(); flag = 1; }
        out[threadIdx.x] = -1;
    } else {
        while (flag == 0) { }           // ptxas places the consumer's loop first, at the lower PCs
        out[threadIdx.x] = data;
    }
}
"""


def test_a_spinning_consumer_does_not_starve_its_producer():
    mod = fc.RawModule(code=SPIN_WAIT)
    out = fc.zeros((64,), np.int32)
    f = mod.get_function("producer_consumer")
    f((1,), (64,), (out,))
    np.testing.assert_array_equal(out.get(), np.r_[np.full(32, -1), np.full(32, 42)])
    # without the forward-progress rule, lowest-PC-first would spin forever: the test does exercise it
    with pytest.raises(fc.StepBudgetExceeded):
        f((1,), (64,), (out,), exec_options=fc.ExecOptions(starve_steps=10**9, max_steps=20_000))


INTRA_WARP_SPIN = r"""
extern "C" __global__ void lane_waits_for_its_warp(int* out, int n) {
    __shared__ volatile int flag;
    const int lane = threadIdx.x;
    if (lane == 0) flag = 0;
    __syncwarp();
    if (lane < 2) {
        while (flag == 0) { }           // the smaller path, first, spins for the larger one of its warp
        out[lane] = flag;
    } else {
        int acc = 0;
        for (int i = 0; i < n; ++i) acc += lane;  // (a loop: the side is a branch, not predicated code)
        out[lane] = acc;
        flag = 7;
    }
}
"""


def test_a_small_path_spinning_for_its_warp_lets_the_larger_path_run_at_the_back_edge():
    f = fc.RawModule(code=INTRA_WARP_SPIN).get_function("lane_waits_for_its_warp")
    out = fc.zeros((32,), np.int32)
    f((1,), (32,), (out, np.int32(3)))
    np.testing.assert_array_equal(out.get(), np.r_[7, 7, 3 * np.arange(2, 32)])
    # the 2 lanes run first (the smaller path); without the forward-progress rule they would spin forever
    with pytest.raises(fc.StepBudgetExceeded):
        f((1,), (32,), (out, np.int32(3)), exec_options=fc.ExecOptions(starve_steps=10**9, max_steps=20_000))


GENERIC = r"""
__device__ __noinline__ float load_generic(const float* p, int i) { return p[i]; }
extern "C" __global__ void gen(float* out, int* iout) {
    __shared__ float s[64];
    float loc[8];
    int t = threadIdx.x;
    s[t] = t; for (int j = 0; j < 8; j++) loc[j] = t * j;
    __syncthreads();
    const float* p = (t & 1) ? s : out;                // shared for odd lanes, global for even ones
    out[t] = load_generic(p, t ^ 1) + load_generic(loc, t & 7);   // and a local array, all through LD.E
    int c = __syncthreads_count(t > 10);
    int a = __syncthreads_and(t > 10);
    int o = __syncthreads_or(t > 60);
    unsigned r = __reduce_add_sync(0xffffffffu, t);
    unsigned mx = __reduce_max_sync(0xffffffffu, (unsigned)t * 7u % 13u);
    unsigned m = __match_any_sync(0xffffffffu, t & 3);
    iout[t] = c + 100 * a + 1000 * o + (int)r * 7 + (int)mx + (int)m;
}
"""


def test_generic_addresses_barrier_reductions_redux_match():
    mod = fc.RawModule(code=GENERIC)
    sass = {i["opcode"] for f in toolchain.disassemble(mod.cubin)[1] for i in f["sass-instructions"]}
    assert {"LD.E", "BAR.RED.POPC.DEFER_BLOCKING", "B2R.RESULT", "REDUX.SUM.S32", "MATCH.ANY"} <= sass
    out, iout = fc.zeros((64,), np.float32), fc.zeros((64,), np.int32)
    mod.get_function("gen")((1,), (64,), (out, iout))
    t = np.arange(64)
    want = np.where(t & 1, (t ^ 1).astype(np.float32), 0.0).astype(np.float32) + (t * (t & 7)).astype(np.float32)
    np.testing.assert_array_equal(out.get(), want)
    w = t // 32
    red = np.array([t[w == k].sum() for k in range(2)])[w]
    mx = np.array([((t[w == k] * 7) % 13).max() for k in range(2)])[w]
    match = np.array([sum(1 << l for l in range(32) if l % 4 == x % 4) for x in t], np.int64)
    want_i = (int((t > 10).sum()) + 100 * 0 + 1000 * 1 + red * 7 + mx + match) & 0xFFFFFFFF
    np.testing.assert_array_equal(iout.get().astype(np.int64) & 0xFFFFFFFF, want_i)


IDIOMS = r"""
extern "C" __global__ void idioms(const float* __restrict__ x, float* y, int n) {
    __shared__ __align__(16) float s[256];
    int t = threadIdx.x;
    unsigned sa = (unsigned)__cvta_generic_to_shared(&s[(t * 4) & 255]);
    int bytes = (n - t * 4) * 4;
    bytes = bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes);             // a src-size known at run time only
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" :: "r"(sa), "l"(x + 4 * (t % 16)), "r"(bytes));
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    y[t] = s[t];
}
"""


def test_cp_async_with_a_run_time_src_size_zero_fills():
    mod = fc.RawModule(code=IDIOMS)
    sass = {i["opcode"] for f in toolchain.disassemble(mod.cubin)[1] for i in f["sass-instructions"]}
    assert "LDGSTS.E.128.ZFILL" in sass
    x = np.arange(1, 65, dtype=np.float32)
    for n in (0, 5, 22, 64):
        y = fc.zeros((256,), np.float32)
        mod.get_function("idioms")((1,), (64,), (fc.asarray(x), y, np.int32(n)))
        t = np.arange(64)
        want = np.zeros(256, np.float32)
        for lane in t:  # lane copies x[4 (lane % 16) ...] (src-size bytes of 16) to s[4 lane ...]
            k = max(0, min(4, n - 4 * lane))
            want[4 * lane:4 * lane + k] = x[4 * (lane % 16):4 * (lane % 16) + k]
        np.testing.assert_array_equal(y.get()[:64], want[:64], err_msg=f"n={n}")


ROUNDING = r"""
extern "C" __global__ void rounding(const float* x, float* y, int* iy, unsigned char* cy) {
    int t = threadIdx.x;
    float v = x[t];
    y[5 * t + 0] = floorf(v); y[5 * t + 1] = ceilf(v * 3.f); y[5 * t + 2] = truncf(v);
    y[5 * t + 3] = rintf(v); y[5 * t + 4] = roundf(v * 7.f);
    iy[t] = __sad(t * 37 - 600, 7, 3u) + min(max(t * 3 - 50, 0), 100);
    cy[t] = (unsigned char)min(max((int)(v * 100.f), 0), 255);
}
"""


def rounding_inputs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(64) * 4).astype(np.float32)
    x[:12] = [0.5, -0.5, 1.5, 2.5, -2.5, -0.0, 0.0, np.inf, -np.inf, np.nan, 1e-42, -3.4e38]
    return x


def test_frnd_vabsdiff_and_clamps():
    mod = fc.RawModule(code=ROUNDING)
    sass = {i["opcode"] for f in toolchain.disassemble(mod.cubin)[1] for i in f["sass-instructions"]}
    assert {"FRND.FTZ.FLOOR", "FRND.FTZ.CEIL", "FRND.TRUNC", "FRND", "VABSDIFF"} <= sass
    x = rounding_inputs(0)
    y, iy, cy = fc.zeros((320,), np.float32), fc.zeros((64,), np.int32), fc.zeros((64,), np.uint8)
    mod.get_function("rounding")((1,), (64,), (fc.asarray(x), y, iy, cy))
    xf = np.where(np.abs(x) < np.float32(2.0**-126), np.copysign(np.float32(0), x), x)  # -ftz=true flushes inputs
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.stack([np.floor(xf), np.ceil(xf * np.float32(3)), np.trunc(x), np.rint(x),
                         np.copysign(np.floor(np.abs(xf * np.float32(7)) + np.float32(0.5)), xf * np.float32(7))], 1)
    got = y.get().reshape(64, 5)
    ok = (got.view(np.uint32) == want.astype(np.float32).view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert ok.all(), (np.argwhere(~ok)[:5], got[~ok][:5], want[~ok][:5])
    t = np.arange(64)
    np.testing.assert_array_equal(iy.get(), np.abs(t * 37 - 600 - 7) + 3 + np.clip(t * 3 - 50, 0, 100))
    with np.errstate(invalid="ignore", over="ignore"):
        want_c = np.clip(np.nan_to_num((xf * np.float32(100)).astype(np.float64), nan=0.0, posinf=2**31 - 1,
                                       neginf=-2**31), -2**31, 2**31 - 1).astype(np.int64)
    np.testing.assert_array_equal(cy.get(), np.clip(np.trunc(want_c), 0, 255).astype(np.uint8))


GENERIC_S8 = r"""
__device__ __noinline__ int load_s8(const signed char* p, int i) { return p[i]; }
extern "C" __global__ void generic_s8(const signed char* g, int* out) {
    __shared__ signed char s[64];
    signed char loc[4];
    int t = threadIdx.x;
    s[t] = (signed char)(t * 37);
    for (int j = 0; j < 4; j++) loc[j] = (signed char)(t * j * 50);
    __syncthreads();
    const signed char* p = (t % 3 == 0) ? g : (t % 3 == 1) ? s : loc;   // global, shared, local by lane
    out[t] = load_s8(p, (t % 3 == 2) ? (t & 3) : t);
}
"""


def test_generic_signed_byte_loads_from_every_space():
    mod = fc.RawModule(code=GENERIC_S8)
    sass = {i["opcode"] for f in toolchain.disassemble(mod.cubin)[1] for i in f["sass-instructions"]}
    assert "LD.E.S8" in sass
    g = (np.arange(64) * 29 - 900).astype(np.int8)
    out = fc.zeros((64,), np.int32)
    mod.get_function("generic_s8")((1,), (64,), (fc.asarray(g), out))
    t = np.arange(64)
    want = np.where(t % 3 == 0, g[t].astype(np.int32),
                    np.where(t % 3 == 1, (t * 37).astype(np.int8), (t * (t & 3) * 50).astype(np.int8)))
    np.testing.assert_array_equal(out.get(), want)


ROOTS = r"""
extern "C" __global__ void roots(const float* x, float* y) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    y[3 * t] = rsqrtf(x[t]); y[3 * t + 1] = sqrtf(x[t]); y[3 * t + 2] = __fsqrt_rn(x[t] * 3.f);
}
"""


def roots_inputs(seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x[:8] = [0, -0.0, 1e-40, np.inf, -1, 4, 2, np.nan]
    return x


def test_square_roots_run_on_mufu_rsq():
    from flashsim.numerics import sfu

    mod = fc.RawModule(code=ROOTS)
    x = roots_inputs(0)
    y = fc.zeros((3 * 4096,), np.float32)
    mod.get_function("roots")((32,), (128,), (fc.asarray(x), y))
    g = y.get().reshape(-1, 3)
    np.testing.assert_array_equal(g[:, 0].view(np.uint32), sfu.rsqrt_approx_f32(x.view(np.uint32), ftz=True))
    xf = np.where(np.abs(x) < 2.0**-126, np.copysign(np.float32(0), x), x).astype(np.float32)
    with np.errstate(invalid="ignore"):
        want = np.sqrt(xf)  # sqrtf is IEEE (round to nearest) under -ftz=true: MUFU.RSQ, FFMA, slow path
    same = (g[:, 1].view(np.uint32) == want.view(np.uint32)) | (np.isnan(g[:, 1]) & np.isnan(want))
    assert same.all()


MATRIX = r"""
extern "C" __global__ void matrix_ops(const unsigned short* in, unsigned short* out, unsigned* regs) {
    __shared__ __align__(16) unsigned short a[16 * 8], b[16 * 8];
    int lane = threadIdx.x;
    for (int i = lane; i < 128; i += 32) a[i] = in[i];
    __syncwarp();
    unsigned r0, r1, r2, t0, m0;
    unsigned row = (unsigned)__cvta_generic_to_shared(&a[(lane % 16) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r2) : "r"(row));
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(m0) : "r"(r0));
    t0 = r1 ^ 0x80008000u;
    unsigned dst = (unsigned)__cvta_generic_to_shared(&b[(lane % 16) * 8]);
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};" :: "r"(dst), "r"(m0), "r"(t0));
    __syncwarp();
    for (int i = lane; i < 128; i += 32) out[i] = b[i];
    regs[4 * lane] = r0; regs[4 * lane + 1] = r1; regs[4 * lane + 2] = r2; regs[4 * lane + 3] = m0;
}
"""


def test_ldmatrix_stmatrix_movmatrix_in_the_interpreter():
    from flashsim.warp.fragments import FRAGMENTS

    mod = fc.RawModule(code=MATRIX)
    sass = {i["opcode"] for f in toolchain.disassemble(mod.cubin)[1] for i in f["sass-instructions"]}
    assert {"LDSM.16.M88.2", "LDSM.16.MT88", "MOVM.16.MT88", "STSM.16.MT88.2"} <= sass
    a = np.random.default_rng(3).integers(0, 1 << 16, 128, dtype=np.uint16)
    out, regs = fc.zeros((128,), np.uint16), fc.zeros((128,), np.uint32)
    mod.get_function("matrix_ops")((1,), (32,), (fc.asarray(a), out, regs))
    frag = FRAGMENTS[("ldmatrix.m8n8", "M")]
    tiles = a.reshape(2, 8, 8)  # matrix j = rows 8j..8j+7 of the 16 x 8 tile

    def reg_of(tile):  # the fragment: lane T holds row T/4, columns 2(T%4), 2(T%4)+1
        r, c = frag.row[:, 0, :], frag.col[:, 0, :]
        return tile[r[:, 0], c[:, 0]].astype(np.uint32) | (tile[r[:, 1], c[:, 1]].astype(np.uint32) << 16)

    got = regs.get().reshape(32, 4)
    np.testing.assert_array_equal(got[:, 0], reg_of(tiles[0]))
    np.testing.assert_array_equal(got[:, 1], reg_of(tiles[1]))
    np.testing.assert_array_equal(got[:, 2], reg_of(tiles[0].T))       # x1.trans: matrix 0 transposed
    np.testing.assert_array_equal(got[:, 3], reg_of(tiles[0].T))       # movmatrix.trans of matrix 0
    # stmatrix.trans stores each fragment's matrix transposed: m0 holds matrix 0 transposed (so it lands as
    # matrix 0), t0 holds matrix 1 with its sign bits flipped
    want = np.stack([tiles[0], (tiles[1] ^ np.uint16(0x8000)).T])
    np.testing.assert_array_equal(out.get().reshape(2, 8, 8), want)


HEADERS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void halves(const __half* x, __nv_bfloat16* y, float* z) {
    int i = threadIdx.x;
    __half2 h = __halves2half2(x[i], x[i]);
    h = __hfma2(h, h, h);
    y[i] = __float2bfloat16(__low2float(h) * 3.0f);
    z[i] = __half2float(__hmul(x[i], x[i])) + __bfloat162float(y[i]);
}
"""


def test_kernels_using_the_cuda_fp16_and_bf16_headers():
    import ml_dtypes

    mod = fc.RawModule(code=HEADERS)  # the headers come from the nvidia-cuda-runtime wheel
    x = (np.arange(64, dtype=np.float32) / 7 - 3).astype(np.float16)
    y, z = fc.zeros((64,), np.uint16), fc.zeros((64,), np.float32)
    mod.get_function("halves")((1,), (64,), (fc.asarray(x), y, z))
    xd = x.astype(np.float64)
    h = (xd * xd + xd).astype(np.float16)  # one rounding: the f64 sum is exact for these inputs
    yw = (h.astype(np.float32) * np.float32(3)).astype(ml_dtypes.bfloat16)
    zw = (xd * xd).astype(np.float16).astype(np.float32) + yw.astype(np.float32)
    np.testing.assert_array_equal(y.get(), yw.view(np.uint16))
    np.testing.assert_array_equal(z.get(), zw)


ZFILL_SRC = r'''
extern "C" __global__ void zfill(const unsigned char* g, unsigned* out, unsigned n) {
    __shared__ __align__(16) unsigned char s[512];
    unsigned t = threadIdx.x;
    unsigned dst = (unsigned)__cvta_generic_to_shared(s + 16 * t);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(g + 16 * t), "r"(n) : "memory");
    asm volatile("cp.async.wait_all;" ::: "memory");
    out[t] = reinterpret_cast<unsigned*>(s)[4 * t + 1];
}'''


def test_a_zero_filling_cp_async_reads_only_its_src_size_bytes():
    """cp.async with a src-size: only the bytes read must lie in an allocation (lane 31 of a 504-byte array
    may read 8 bytes at offset 496, not 12), the rest of the 16 land as zeros; a read past the end is a
    fault naming the lane and the bytes."""
    import flashsim.cuda as fc

    k = fc.RawModule(code=ZFILL_SRC).get_function("zfill")
    g = fc.asarray(np.arange(504, dtype=np.uint32).astype(np.uint8))
    out = fc.zeros(32, np.uint32)
    k((1,), (32,), (g, out, np.uint32(8)))
    want = np.arange(504, dtype=np.uint32).astype(np.uint8)
    assert np.array_equal(out.get(), np.array([int.from_bytes(bytes(want[16 * t + 4:16 * t + 8]), "little")
                                              for t in range(32)], np.uint32))
    with pytest.raises(Exception, match=r"out-of-bounds global address.*lane=31.*cp.async reads 12 bytes"):
        k((1,), (32,), (g, out, np.uint32(12)))


# forms the differential fuzzer met refused: register-indexed byte and half constants, LOP3 with a predicate
# input, FSET (the GPU side is tests/test_sass_gpu.py)
FOUND = r"""
__constant__ unsigned char T8[64] = {0, 1, 2, 3, 250, 251, 252, 253, 128, 127, 129, 126, 7, 8, 9, 10, 11, 12, 13,
  14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211,
  212, 213, 214, 215, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 255};
__constant__ short T16[32] = {-1, 2, -3, 4, -32768, 32767, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, -17, 18, 19, 20, 21,
  22, 23, 24, 25, 26, 27, 28, 29, 30, 31, -32};
__constant__ signed char TS8[32] = {-1, 2, -3, 4, -128, 127, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, -17, 18, 19, 20,
  21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, -32};
extern "C" __global__ void subword(const unsigned* in, unsigned* out) {
  unsigned t = threadIdx.x, x = in[t];
  unsigned r;
  if (x & 1) r = T8[x & 63] + 1000u * (unsigned)(int)T16[(x >> 6) & 31];  // divergent: each side its own LDC
  else r = (unsigned)(int)TS8[(x >> 11) & 31];
  out[t] = r;
}
extern "C" __global__ void lop3p(const unsigned* in, unsigned* out) {
  unsigned t = threadIdx.x, a = in[t], b = in[t + 32], c = in[t + 64], d, p;
  asm("{ .reg .pred q, r; setp.ne.u32 q, %4, 0; lop3.or.b32 %0|r, %2, %3, %5, 0x96, q; selp.u32 %1, 1, 0, r; }"
      : "=r"(d), "=r"(p) : "r"(a), "r"(b), "r"(t & 3), "r"(c));
  out[t] = d; out[t + 32] = p;
}
extern "C" __global__ void fset(const float* in, float* out) {
  unsigned t = threadIdx.x; float a = in[t], b = in[t + 32], r, s; unsigned u;
  asm("set.gtu.f32.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  asm("set.lt.ftz.f32.f32 %0, %1, %2;" : "=f"(s) : "f"(a), "f"(b));
  asm("set.neu.u32.f32 %0, %1, %2;" : "=r"(u) : "f"(a), "f"(b));
  out[t] = r; out[t + 32] = s; out[t + 64] = __uint_as_float(u);
}
"""


def found_inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    words = rng.integers(0, 2**32, size=96, dtype=np.uint64).astype(np.uint32)
    words[:4] = [0, 1, 0xFFFFFFFF, 0x80000000]
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1.0, -1.0, 2.5], np.float32)
    f = rng.standard_normal(64).astype(np.float32)
    f[rng.integers(64, size=24)] = specials[rng.integers(len(specials), size=24)]
    return words, f


def _found_module():
    return fc.RawModule(code=FOUND)


def test_indexed_sub_word_constants_lop3_predicate_input_and_fset():
    mod = _found_module()
    forms = {n: [i.text for i in mod.get_function(n)._prog().instructions.values()] for n in ("subword", "lop3p", "fset")}
    assert {"LDC.U8", "LDC.S16", "LDC.S8"} <= {t.split()[1] if t.startswith("@") else t.split()[0]
                                               for t in forms["subword"]}
    assert any(t.startswith("LOP3.LUT P") and not t.endswith("!PT") for t in forms["lop3p"])
    assert any(t.startswith("FSET.BF.") for t in forms["fset"])
    cmod = re.search(r"T8\[64\] = \{([^}]*)\}", FOUND)
    t8 = np.array([int(v) for v in cmod.group(1).split(",")], np.uint8)
    t16 = np.array([int(v) for v in re.search(r"T16\[32\] = \{([^}]*)\}", FOUND).group(1).split(",")], np.int16)
    ts8 = np.array([int(v) for v in re.search(r"TS8\[32\] = \{([^}]*)\}", FOUND).group(1).split(",")], np.int8)
    for seed in range(3):
        words, f = found_inputs(seed)
        x = words[:32]
        out = fc.zeros((32,), np.uint32)
        mod.get_function("subword")((1,), (32,), (fc.asarray(x), out))
        odd = t8[x & 63].astype(np.int64) + 1000 * t16[(x >> 6) & 31].astype(np.int64)
        ref = np.where(x & 1, odd, ts8[(x >> 11) & 31].astype(np.int64)).astype(np.int64) & 0xFFFFFFFF
        np.testing.assert_array_equal(out.get(), ref.astype(np.uint32))

        out = fc.zeros((64,), np.uint32)
        mod.get_function("lop3p")((1,), (32,), (fc.asarray(words), out))
        a, b, c = words[:32], words[32:64], words[64:]
        d = a ^ b ^ c  # LUT 0x96
        np.testing.assert_array_equal(out.get()[:32], d)
        np.testing.assert_array_equal(out.get()[32:], ((d != 0) | (np.arange(32) & 3 != 0)).astype(np.uint32))

        out = fc.zeros((96,), np.float32)
        mod.get_function("fset")((1,), (32,), (fc.asarray(f), out))
        a, b = f[:32], f[32:]
        flush = lambda v: np.where(np.abs(v) < np.float32(2.0**-126), np.float32(0) * np.sign(v), v)  # noqa: E731
        with np.errstate(invalid="ignore"):
            gtu = ~(a <= b)
            lt = flush(a) < flush(b)
            neu = ~(a == b)
        got = out.get().view(np.uint32)
        np.testing.assert_array_equal(got[:32], np.where(gtu, 0x3F800000, 0).astype(np.uint32))
        np.testing.assert_array_equal(got[32:64], np.where(lt, 0x3F800000, 0).astype(np.uint32))
        np.testing.assert_array_equal(got[64:], np.where(neu, 0xFFFFFFFF, 0).astype(np.uint32))


HALF_SEL = r"""
#include <cuda_fp16.h>
// ptxas builds __halves2half2(lo, -hi) and friends into HFMA2's .H0_NH1 operand selector, after a PRMT
extern "C" __global__ void nh1(const __half2* a, const __half2* b, const __half2* c, __half2* o) {
  int i = threadIdx.x;
  __half2 bb = b[i];
  o[i] = __hfma2(a[i], __halves2half2(__low2half(bb), __hneg(__high2half(bb))), c[i]);
  o[i + 32] = __hfma2(a[i], __halves2half2(__hneg(__low2half(bb)), __high2half(bb)), c[i]);
  o[i + 64] = __hfma2(a[i], __halves2half2(__low2half(bb), __hneg(__low2half(bb))), c[i]);
}
// the same three products with the second operand built on the host
extern "C" __global__ void plain(const __half2* a, const __half2* b, const __half2* c, __half2* o) {
  int i = threadIdx.x;
  o[i] = __hfma2(a[i], b[i], c[i]);
}
"""


def half_sel_inputs(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """f16 pairs (as uint32) with NaNs (two payloads and signs), infinities, zeros of both signs and subnormals."""
    rng = np.random.default_rng(seed)
    specials = np.array([0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFD01, 0x0001, 0x83FF, 0x3C00, 0xBC00, 0x7BFF],
                        np.uint32)

    def pairs():
        h = np.frombuffer(rng.standard_normal(64).astype(np.float16).tobytes(), np.uint16).astype(np.uint32)
        h[rng.integers(64, size=24)] = specials[rng.integers(len(specials), size=24)]
        return h[:32] | (h[32:] << np.uint32(16))
    return pairs(), pairs(), pairs()


def test_hfma2_h0_nh1_selector_equals_the_operand_built_on_the_host():
    mod = fc.RawModule(code=HALF_SEL)
    texts = [i.text for i in mod.get_function("nh1")._prog().instructions.values()]
    assert sum(".H0_NH1" in t for t in texts) == 3, texts
    for seed in range(3):
        a, b, c = half_sel_inputs(seed)
        out = fc.zeros((96,), np.uint32)
        mod.get_function("nh1")((1,), (32,), (fc.asarray(a), fc.asarray(b), fc.asarray(c), out))
        lo, hi = b & np.uint32(0xFFFF), b >> np.uint32(16)
        built = [lo | ((hi ^ np.uint32(0x8000)) << np.uint32(16)), (lo ^ np.uint32(0x8000)) | (hi << np.uint32(16)),
                 lo | ((lo ^ np.uint32(0x8000)) << np.uint32(16))]
        for k, nb in enumerate(built):
            ref = fc.zeros((32,), np.uint32)
            mod.get_function("plain")((1,), (32,), (fc.asarray(a), fc.asarray(nb), fc.asarray(c), ref))
            np.testing.assert_array_equal(out.get()[32 * k:32 * (k + 1)], ref.get(), err_msg=f"pattern {k}")


@pytest.mark.parametrize("name", ["naïve.cu", "dïr/ü k.cu", "a\\b.cu", 'q"uote.cu', "日本/カーネル.cu", "plain.cu"])
def test_any_file_name_compiles_and_a_fault_names_it(tmp_path, name, monkeypatch):
    # nvdisasm garbles bytes past ASCII and backslashes in a file name and ptxas rejects a quote; NVRTC puts a
    # relative name in the directory it ran in. The fault names the file as the user named it
    monkeypatch.chdir(tmp_path)
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x + 1000000] = 1.f; }\n'
    for full in (name, str(tmp_path / name)):
        mod = fc.RawModule(code=src, name=full)
        with pytest.raises(SimulatedFault, match=re.escape(f"at {full}:1)")):
            mod.get_function("k")((1,), (32,), (fc.zeros(32, np.float32),))


def test_headers_beside_a_source_with_an_awkward_name_are_found(tmp_path):
    d = tmp_path / "dïr"
    d.mkdir()
    (d / "h.cuh").write_text("#define VAL 4.f\n")
    src = '#include "h.cuh"\nextern "C" __global__ void k(float* x) { x[threadIdx.x] = VAL; }\n'
    x = fc.zeros(32, np.float32)
    fc.RawModule(code=src, name=str(d / "kü.cu")).get_function("k")((1,), (32,), (x,))
    assert (x.get() == 4).all()
    with pytest.raises(CompileError, match=re.escape(f"{d / 'bäd.cu'}(1): error")):
        fc.RawModule(code="xx", name=str(d / "bäd.cu"))


def test_nvdisasm_json_with_octal_escapes_and_bare_backslashes():
    raw = b'[{"a": 1}, [], {"directories": ["/t/d\\303\\257r", "/t/a\\"], "files": [{"file": "k.cu"}]}]'
    doc = toolchain.nvdisasm_json(raw)
    assert doc[2]["directories"] == ["/t/dïr", "/t/a\\"]
    assert toolchain.nvdisasm_json(b'{"x": "ok \\"q\\""}') == {"x": 'ok "q"'}  # valid JSON is read as is


def test_cupy_array_creation_functions():
    np.testing.assert_array_equal(fc.ones((2, 3), np.int32).get(), np.ones((2, 3), np.int32))
    np.testing.assert_array_equal(fc.full(4, 2.5).get(), np.full(4, 2.5))
    assert fc.full(4, 2.5).dtype == np.float64 and fc.full(3, 7, np.uint8).dtype == np.uint8
    np.testing.assert_array_equal(fc.arange(5).get(), np.arange(5))
    np.testing.assert_array_equal(fc.arange(1, 10, 3, dtype=np.float32).get(), np.arange(1, 10, 3, dtype=np.float32))
    base = fc.asarray(np.arange(6, dtype=np.float16).reshape(2, 3))
    for f, want in ((fc.zeros_like, 0), (fc.ones_like, 1)):
        r = f(base)
        assert r.shape == (2, 3) and r.dtype == np.float16 and (r.get() == want).all()
    assert fc.empty_like(base, dtype=np.int8).dtype == np.int8
    assert (fc.full_like(np.zeros(3, np.int64), 9).get() == 9).all()
    with pytest.raises(ArgumentError, match=r"^a='list': expected"):
        fc.zeros_like([1, 2])


@pytest.mark.parametrize("dtype", ["float128", "complex256", "U4", "datetime64[s]", "V8"])
def test_dtypes_with_no_cuda_counterpart_are_refused(dtype):
    if not hasattr(np, dtype.split("[")[0]) and dtype in ("float128", "complex256"):
        pytest.skip(f"numpy has no {dtype} on this platform")
    with pytest.raises(ArgumentError, match=r"^dtype=.*no CUDA counterpart"):
        fc.zeros(4, dtype)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_ml_dtypes_narrow_floats_live_in_device_memory(name):
    import ml_dtypes
    dt = np.dtype(getattr(ml_dtypes, name))
    host = np.arange(-3, 5, dtype=np.float32).astype(dt)
    dev = fc.asarray(host)
    assert dev.dtype == dt and dev.get().view(np.uint8).tobytes() == host.view(np.uint8).tobytes()


@pytest.mark.parametrize("kw, match", [
    ({"ctas_per_batch": 0}, r"^ctas_per_batch="), ({"max_steps": -1}, r"^max_steps="),
    ({"max_steps": 1.5}, r"^max_steps="), ({"schedule_seed": "x"}, r"^schedule_seed="),
    ({"schedule_seed": -3}, r"^schedule_seed="), ({"progress": 3}, r"^progress="),
])
def test_exec_options_are_checked(kw, match):
    with pytest.raises(ArgumentError, match=match):
        fc.ExecOptions(**kw)


def test_the_dynamic_shared_memory_limit_is_checked_when_set():
    f = basic_module().get_function("basic")
    f.max_dynamic_shared_size_bytes = 100_000
    assert f.attributes["max_dynamic_shared_size_bytes"] == 100_000
    for bad in (10**6, -1, 2.0, True):
        with pytest.raises(ArgumentError, match=r"^max_dynamic_shared_size_bytes=.*expected an int from 0 to"):
            f.max_dynamic_shared_size_bytes = bad


# the headers cupy users include: WMMA (<mma.h>, the CRT wheel's), cooperative groups and CCCL's cuda/std and
# cuda::pipeline (the CCCL wheel's); the GPU side is tests/test_sass_gpu.py
HEADERS_CCCL = r"""
#include <mma.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda/pipeline>
#include <cuda/std/cstdint>
using namespace nvcuda;
namespace cg = cooperative_groups;
extern "C" __global__ void wmma16(const half* a, const half* b, float* c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
extern "C" __global__ void cgsum(const cuda::std::int32_t* x, cuda::std::int32_t* out) {
  cg::thread_block blk = cg::this_thread_block();
  cg::thread_block_tile<32> w = cg::tiled_partition<32>(blk);
  int v = x[blk.thread_rank()];
  int s = cg::reduce(w, v, cg::plus<int>());
  if (w.thread_rank() == 0) out[blk.thread_rank() / 32] = s;
}
extern "C" __global__ void pipecopy(const float* src, float* dst) {
  __shared__ float buf[128];
  auto pipe = cuda::make_pipeline();
  pipe.producer_acquire();
  cuda::memcpy_async(&buf[threadIdx.x], &src[threadIdx.x], sizeof(float), pipe);
  pipe.producer_commit();
  pipe.consumer_wait();
  __syncthreads();
  dst[threadIdx.x] = buf[127 - threadIdx.x] * 2.f;
  pipe.consumer_release();
}
"""


def headers_cccl_inputs(seed: int):
    rng = np.random.default_rng(seed)
    a = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    b = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    return a, b, rng.integers(-1000, 1000, 128).astype(np.int32), rng.standard_normal(128).astype(np.float32)


def test_wmma_cooperative_groups_and_cuda_pipeline_compile_and_run():
    mod = fc.RawModule(code=HEADERS_CCCL)
    a, b, x, s = headers_cccl_inputs(0)
    c = fc.zeros((16, 16), np.float32)
    mod.get_function("wmma16")((1,), (32,), (fc.asarray(a), fc.asarray(b.T.copy()), c))
    np.testing.assert_array_equal(c.get(), a.astype(np.float32) @ b.astype(np.float32))  # small integers: exact
    o = fc.zeros(4, np.int32)
    mod.get_function("cgsum")((1,), (128,), (fc.asarray(x), o))
    np.testing.assert_array_equal(o.get(), x.reshape(4, 32).sum(1))
    d = fc.zeros(128, np.float32)
    f = mod.get_function("pipecopy")
    f((1,), (128,), (fc.asarray(s), d))
    np.testing.assert_array_equal(d.get(), s[::-1] * np.float32(2))
    assert {"LDGSTS", "DEPBAR"} <= {i.opcode for i in f._prog().instructions.values()}
    assert "HMMA" in {i.opcode for i in mod.get_function("wmma16")._prog().instructions.values()}


def test_a_spin_on_a_flag_nothing_writes_is_reported_within_seconds():
    import time

    f = basic_module().get_function("spin")
    t0 = time.perf_counter()
    with pytest.raises(fc.SpinDetected, match=r"the launch spins: its state \(every register, PC and byte of memory\) "
                                              r"came back exactly.*cta=0 warp=0; over 3 instructions: pc=0x"):
        f((1,), (32,), (fc.zeros((1,), np.int32),))
    assert time.perf_counter() - t0 < 30  # the default step budget would take about 40 minutes
    # a loop that changes a register each time round (a long computation) is not a spin
    mod = fc.RawModule(code='extern "C" __global__ void count(int* x, int n) { int s = 0; '
                            'for (int i = 0; i < n; i++) s += i ^ x[1]; x[0] = s; }')
    x = fc.zeros((2,), np.int32)
    n = 60_000  # some 300,000 steps: the detector looks several times
    mod.get_function("count")((1,), (1,), (x, np.int32(n)))
    assert int(x.get()[0]) == sum(range(n)) - 2**32 * (sum(range(n)) >= 2**31)


UNDEFINED_SHFL = r"""
extern "C" __global__ void read_outside(unsigned* out) {
  unsigned v = threadIdx.x;
  if (blockIdx.x == 3 && threadIdx.x < 16)
    v = __shfl_sync(0x0000ffffu, v, 20);  // lane 20 is not in the mask
  out[blockIdx.x * 32 + threadIdx.x] = v;
}
"""


def test_an_undefined_shuffle_names_the_grid_cta_the_pc_and_the_line():
    from flashsim.warp import UndefinedResult

    f = fc.RawModule(code=UNDEFINED_SHFL).get_function("read_outside")
    out = fc.zeros((4 * 32,), np.uint32)
    with pytest.raises(UndefinedResult) as e:  # batches of 2 CTAs: CTA 3 is the second of its batch
        f((4,), (32,), (out,), exec_options=fc.ExecOptions(ctas_per_batch=2))
    msg = str(e.value)
    assert "cta=3 warp=0 lane=0 reads source lane=20" in msg, msg
    assert "pc=0x" in msg and "SHFL.IDX" in msg and "kernel.cu:5" in msg, msg
