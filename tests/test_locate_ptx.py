"""flashsim.sass.ptxlog: the PTX rewriter that logs one thread's register writes, and the toolchain's PTX
and nvJitLink paths. Instrumented kernels run in the interpreter; the logged values are checked against
what each instruction computes."""

from pathlib import Path

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.errors import ArgumentError
from flashsim.locate import interpreter_runner
from flashsim.sass import ptxlog, toolchain

REPO = Path(__file__).resolve().parents[1]

# Hand-written PTX: a label before the first instruction, guarded writes both ways, a vector source and a
# vector destination, 64-bit and 16-bit registers, a scoped predicate declared inside { }.
HAND = r'''
.version 9.0
.target sm_90
.address_size 64

	.file	1 "hand.cu"

.visible .entry k(
	.param .u64 k_param_0,
	.param .u32 k_param_1
)
{
	.reg .pred 	%p<3>;
	.reg .b16 	%rs<3>;
	.reg .b32 	%r<10>;
	.reg .b64 	%rd<6>;

$L_top:
	.loc	1 3 0
	ld.param.u64 	%rd1, [k_param_0];
	ld.param.u32 	%r1, [k_param_1];
	cvta.to.global.u64 	%rd2, %rd1;
	.loc	1 4 0
	mov.u32 	%r2, %tid.x;
	setp.lt.u32 	%p1, %r2, %r1;
	@%p1 add.u32 	%r3, %r2, 100;   // taken when tid < n
	@!%p1 add.u32 	%r3, %r2, 200;
	.loc	1 5 0
	mov.b64 	%rd3, {%r2, %r3};
	mov.b64 	{%r4, %r5}, %rd3;
	cvt.u16.u32 	%rs1, %r5;
	{ .reg .pred q; setp.eq.u16 q, %rs1, 103; selp.b32 %r6, 1, 0, q; }
	mul.wide.u32 	%rd4, %r2, 4;
	add.s64 	%rd5, %rd2, %rd4;
	add.u32 	%r7, %r4, %r6;
	add.u32 	%r8, %r7, %r5;
	st.global.u32 	[%rd5], %r8;
	ret;
}
'''


@pytest.fixture(scope="module")
def hand():
    ins = ptxlog.instrument(HAND, "k")
    return ins, toolchain.link_ptx(ins.ptx)


def _log(cubin, tid, n=8, capacity=64):
    out = interpreter_runner("k", 1, 16)(cubin, [np.zeros(16, np.uint32), np.uint32(n),
                                                   ptxlog.log_buffer(capacity, 0, tid)])
    return out[0], ptxlog.read_log(out[2])


def test_site_table(hand):
    ins, _ = hand
    regs = [s.register for s in ins.sites]
    assert regs == ["%rd1", "%r1", "%rd2", "%r2", "%p1", "%r3", "%r3", "%rd3", "%r4", "%r5", "%rs1", "q", "%r6",
                    "%rd4", "%rd5", "%r7", "%r8"]
    s = {x.id: x for x in ins.sites}
    assert s[5].text == "@%p1 add.u32 %r3, %r2, 100" and s[6].text.startswith("@!%p1")
    assert s[8].text == s[9].text == "mov.b64 {%r4, %r5}, %rd3"
    assert [s[i].reg_type for i in (0, 4, 10, 11)] == ["b64", "pred", "b16", "pred"]
    assert s[4].source == "hand.cu:4" and s[7].line == 5 and s[0].ptx_line == HAND.splitlines().index(
        "\tld.param.u64 \t%rd1, [k_param_0];") + 1
    assert ins.params == 2 and ins.instructions == 18  # 17 writes, the store and ret (label not counted: 19 - 1)
    assert ".param .u64 k_param_flashsim_log" in ins.ptx


@pytest.mark.parametrize("tid, taken", [(3, 5), (10, 6)])
def test_guarded_writes_log_only_when_the_guard_holds(hand, tid, taken):
    ins, cubin = hand
    out, log = _log(cubin, tid)
    sites = log.sites.tolist()
    assert taken in sites and ({5, 6} - {taken}).isdisjoint(sites)
    r3 = tid + (100 if tid < 8 else 200)
    vals = dict(zip(sites, log.values.tolist()))
    assert vals[taken] == r3 and vals[4] == (tid < 8)
    assert vals[7] == (r3 << 32) | tid  # 64-bit: mov.b64 %rd3, {lo, hi}
    assert vals[8] == tid and vals[9] == r3  # the vector destination, element by element
    assert vals[10] == r3 & 0xFFFF and vals[11] == (r3 == 103) and vals[12] == (r3 == 103)
    assert vals[13] == 4 * tid and out[tid] == tid + (r3 == 103) + r3
    assert log.ctaid == (0, 0, 0) and log.tid == (tid, 0, 0) and not log.overflowed and len(log) == 16


def test_outputs_of_every_thread_are_unchanged(hand):
    _, cubin = hand
    plain = toolchain.link_ptx(HAND)
    want = interpreter_runner("k", 1, 16)(plain, [np.zeros(16, np.uint32), np.uint32(8)])[0]
    got, _ = _log(cubin, 0)
    np.testing.assert_array_equal(got, want)


def test_a_thread_outside_the_launch_logs_nothing(hand):
    _, cubin = hand
    _, log = _log(cubin, 40)
    assert log.produced == 0 and len(log) == 0


def test_overflow_keeps_the_first_entries_and_counts_the_rest(hand):
    _, cubin = hand
    _, full = _log(cubin, 3)
    _, small = _log(cubin, 3, capacity=5)
    assert small.overflowed and small.capacity == 5 and small.produced == len(full) == 16 and len(small) == 5
    np.testing.assert_array_equal(small.sites, full.sites[:5])
    keep = [1, 3, 4]  # entries 0 and 2 are pointers, which another run places elsewhere
    np.testing.assert_array_equal(small.values[keep], full.values[keep])


def test_read_log_and_log_buffer_check_their_arguments():
    with pytest.raises(ArgumentError, match="capacity"):
        ptxlog.log_buffer(0, 0, 0)
    with pytest.raises(ArgumentError, match="tid"):
        ptxlog.log_buffer(4, 0, (1, 2, 3, 4))
    with pytest.raises(ArgumentError, match="buf"):
        ptxlog.read_log(np.zeros(9, np.uint32))
    buf = ptxlog.log_buffer(2, (1, 2, 3), (4, 5, 6))
    assert buf[:8].tolist() == [1, 2, 3, 4, 5, 6, 2, 0] and len(buf) == 8 + 2 * 4


@pytest.mark.parametrize("body, what", [
    ("vadd.u32.u32.u32 %r1, %r0, %r0, %r0;", "'vadd.u32.u32.u32' is not known"),
    ("mov.u32 %x9, 1;", "destination '%x9' of mov.u32 is not a declared register"),
    (".reg .b128 %q; mov.b32 %r1, 0;", "type .b128"),
    (".maxnreg 32;", "directive"),
    ("@%r1 mov.u32 %r1, 0;", "not a declared predicate"),
])
def test_constructs_not_handled_are_named_with_their_line(body, what):
    ptx = (".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n.reg .b32 %r<4>;\n"
           f"{body}\nret;\n}}\n")
    with pytest.raises(NotImplementedError, match=what) as ei:
        ptxlog.instrument(ptx, "k")
    assert "PTX line 7" in str(ei.value)


def test_a_missing_kernel_is_an_argument_error():
    with pytest.raises(ArgumentError, match=r"kernel='nope'.*entries: \['k'\]"):
        ptxlog.instrument(HAND, "nope")
    with pytest.raises(ptxlog.PtxError, match="instrumented twice"):
        ptxlog.instrument(ptxlog.instrument(HAND, "k").ptx, "k")


CALLS = r'''
__device__ __noinline__ float twice(float x) { return 2.0f * x; }
extern "C" __global__ void calls(float* y, const float* x) {
    int i = threadIdx.x;
    float v = twice(x[i]);
    if (i & 1) v = -v;
    y[i] = v;
}
'''


def test_call_sequences_scoped_params_and_noinline_functions():
    ptx, _, _ = toolchain.compile_cuda_ptx(CALLS, name="calls.cu")
    assert "call.uni" in ptx and "// callseq" in ptx
    ins = ptxlog.instrument(ptx, "calls")
    assert not any(s.text.startswith("call") for s in ins.sites)
    assert any(s.text.startswith("ld.param.f32") and "retval0" in s.text for s in ins.sites)
    # the .func body is left as it is
    func = ptx[ptx.index(".func"):ptx.index(".visible .entry")]
    assert func in ins.ptx
    # it assembles; the interpreter does not run it (nvdisasm shows the linked call's return address as a
    # relocation expression, `MOV R20, 32@lo((calls + 0x5d0))`, which the SASS reader does not take)
    cubin = toolchain.link_ptx(ins.ptx)
    assert cubin[:4] == b"\x7fELF"
    with pytest.raises(NotImplementedError, match="calls a subroutine through a relocated absolute address"):
        interpreter_runner("calls", 1, 32)(cubin, [np.zeros(32, np.float32), np.zeros(32, np.float32),
                                                   ptxlog.log_buffer(8, 0, 0)])


def test_file_table_and_inlined_locations():
    src = '#include <cuda_fp16.h>\nextern "C" __global__ void h(__half2* y, const __half2* x) {\n' \
          '  y[threadIdx.x] = __hmul2(x[threadIdx.x], x[threadIdx.x]);\n}\n'
    ptx, _, _ = toolchain.compile_cuda_ptx(src, name="inl.cu")
    ins = ptxlog.instrument(ptx, "h")
    assert any(f.endswith("inl.cu") for f in ins.files.values())
    inlined = [s for s in ins.sites if s.inlined_at is not None]
    assert inlined and all(s.inlined_at[0].endswith("inl.cu") and s.inlined_at[1] == 3 for s in inlined)
    assert all(s.file.endswith("cuda_fp16.hpp") or s.file.endswith("cuda_fp16.h") for s in inlined)
    assert inlined[0].source.startswith(inlined[0].inlined_at[0] + ":3 (inlined ")
    assert inlined[0].user_line == inlined[0].inlined_at


def test_address_seeds_mark_window_and_stack_addresses():
    src = r'''
extern "C" __global__ void w(unsigned long long* out, int k) {
    __shared__ float s[32];
    float loc[8];
    for (int i = 0; i < 8; ++i) loc[i] = i * 1.5f;
    s[threadIdx.x] = loc[k & 7];
    out[threadIdx.x] = (unsigned long long)(&s[threadIdx.x]);   // a generic shared address
}
'''
    ptx, _, _ = toolchain.compile_cuda_ptx(src, name="w.cu")
    ins = ptxlog.instrument(ptx, "w")
    marked = {a for s in ins.sites for a in s.address}
    assert "shared window" in marked and "local stack" in marked
    seed = next(s for s in ins.sites if s.text.startswith("cvta.shared"))
    assert seed.address == ("shared window",)


# ----------------------------------------------------------------------------------------------- toolchain

def test_compile_cuda_ptx_is_the_ptx_of_the_cubin_build():
    src = (REPO / "docs/examples/row_sums_fixed.cu").read_text()
    ptx, log, lowered = toolchain.compile_cuda_ptx(src, name="row_sums_fixed.cu")
    assert ".entry row_sums(" in ptx and ".target sm_90" in ptx and "\t.loc\t1 " in ptx and ".file\t1" in ptx
    assert "add.ftz.f32" in ptx  # cupy's -ftz=true is among the options
    mod = fc.RawModule(code=src, name="row_sums_fixed.cu")
    b = mod.build
    assert b is not None and b.source == src and b.name == "row_sums_fixed.cu" and b.lineinfo
    assert fc.RawModule(cubin=mod.cubin).build is None
    # linked without instrumentation it runs like the NVRTC cubin
    cubin = toolchain.link_ptx(ptx)
    x = np.random.default_rng(3).standard_normal(2048).astype(np.float32)
    args = [x, np.zeros(64, np.float32), np.float32(0.5)]
    a = interpreter_runner("row_sums", 2, 64)(mod.cubin, [np.copy(v) if isinstance(v, np.ndarray) else v for v in args])
    b2 = interpreter_runner("row_sums", 2, 64)(cubin, args)
    np.testing.assert_array_equal(a[1], b2[1])


def test_link_errors_carry_the_log():
    with pytest.raises(toolchain.PtxLinkError, match="nvJitLink failed to assemble bad.ptx") as ei:
        toolchain.link_ptx(".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k() { frob; }\n",
                           name="bad.ptx")
    assert isinstance(ei.value, toolchain.CompileError) and ei.value.log


def test_the_nvjitlink_library_can_be_named(monkeypatch, tmp_path):
    toolchain._nvjitlink.cache_clear()
    try:
        monkeypatch.setenv("FLASHSIM_NVJITLINK", str(tmp_path / "missing.so"))
        with pytest.raises(toolchain.ToolchainError, match="FLASHSIM_NVJITLINK"):
            toolchain.link_ptx(HAND)
        monkeypatch.delenv("FLASHSIM_NVJITLINK")
        wheel = toolchain._nvidia_file("lib/libnvJitLink.so.13")
        monkeypatch.setenv("FLASHSIM_NVJITLINK", str(wheel))
        toolchain._nvjitlink.cache_clear()
        assert toolchain.nvjitlink_version() == "13.0"
    finally:
        toolchain._nvjitlink.cache_clear()



def test_contractible_products_are_left_out_unless_asked_for():
    """A product ptxas may fuse into the add that reads it (no rounding modifier) is not logged by default:
    a second reader would keep ptxas from fusing, and the build would round twice."""
    ptx = (".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .f32 k_param_0)\n{\n"
           ".reg .f32 %f<6>;\nld.param.f32 %f1, [k_param_0];\nmul.ftz.f32 %f2, %f1, %f1;\n"
           "add.ftz.f32 %f3, %f2, %f1;\nmul.rn.f32 %f4, %f3, %f3;\nmul.ftz.f16x2 %f5, %f4, %f4;\nret;\n}\n")
    ins = ptxlog.instrument(ptx, "k")
    assert [s.register for s in ins.sites] == ["%f1", "%f3", "%f4"]
    assert len(ins.not_logged) == 2 and "mul.ftz.f32 %f2" in ins.not_logged[0]
    every = ptxlog.instrument(ptx, "k", products=True)
    assert [s.register for s in every.sites] == ["%f1", "%f2", "%f3", "%f4", "%f5"] and not every.not_logged
