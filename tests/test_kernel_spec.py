"""The kernel registry (flashsim.kernels.spec): each spec validates itself with errors naming the field, its
entry points exist in the cubin of its source, its shared-memory layouts are the offsets the kernels and the
twins compute, its trace register lists have the lengths the FS_TRACE points of the .cu record, the
configurations of fa2 agree, and no module branches on a kernel's name."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from flashsim.attention import attention_lowp, attention_reference, check_args, passes_flash_attn_rule
from flashsim.errors import ArgumentError
from flashsim.kernels import fa2, problems, run_twin
from flashsim.kernels.spec import SMEM_LIMIT, SPECS, Domain, KernelSpec, Tiles, get, register
from flashsim.swizzle import seed_swizzle
from flashsim import session
from flashsim.trace import spec as trace_spec

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(("change", "match"), [
    (dict(threads=96), r"^threads=96: kernel 'fa2': expected 32 \* warps = 128"),
    (dict(warps=0, threads=0), r"^warps=0: kernel 'fa2': expected 1..32 warps per CTA"),
    (dict(warps=33, threads=33 * 32), r"^warps=33: kernel 'fa2': expected 1..32 warps per CTA \(1024 threads\)"),
    (dict(tiles=(Tiles(64, 96, 64),)), r"^block_m=96: kernel 'fa2' at head dim 64: expected a multiple of 16 \* warps = 64"),
    (dict(tiles=(Tiles(64, 128, 24),)), r"^block_n=24: kernel 'fa2' at head dim 64: expected a positive multiple of 16"),
    (dict(tiles=(Tiles(40, 128, 64),)), r"^headdim=40: kernel 'fa2' at head dim 40: expected a positive multiple of 16"),
    (dict(tiles=(Tiles(64, 128, 64), Tiles(64, 64, 64))), r"^tiles=\[64, 64\]: kernel 'fa2': one Tiles per head dim"),
    (dict(tiles=()), r"^tiles=\(\): kernel 'fa2': expected a non-empty tuple of Tiles"),
    (dict(dtypes=("float32",)), r"^dtypes=\('float32',\): kernel 'fa2': expected element types"),
    (dict(features=frozenset({"rotary"})), r"^features=.*kernel 'fa2': expected a frozenset of \('masks', 'softcap', 'gqa', 'chunk', 'hdim_v', 'dropout', 'alibi', 'varlen', 'splitkv', 'kvcache', 'kvappend'\)"),
    (dict(ext_entry=None), r"^ext_entry=None: kernel 'fa2': an entry point of the second build exactly when the kernel "
                           r"models one of \['alibi', 'dropout', 'kvcache', 'varlen'\]"),
    (dict(ext_entry="fa2_{x}"), r"^ext_entry='fa2_\{x\}': kernel 'fa2': expected a format of \{hdim\} and \{dtype\}"),
    (dict(acc="f64"), r"^acc='f64': kernel 'fa2': expected one of \('f32', 'f16'\)"),
    (dict(source="fa2.cuh"), r"^source='fa2.cuh': kernel 'fa2': expected a bare .cu file name"),
    (dict(name="FA2"), r"^name='FA2': expected a lower-case identifier"),
    (dict(options=("-arch=sm_80",)), r"^options=.*set by gpu.runtime and flashsim.kernels.sources"),
    (dict(entry="fa2_{dtype}"), r"^entry='fa2_\{dtype\}': kernel 'fa2' has 5 instances: the entry point must name \{hdim\}"),
    (dict(entry="fa2_hdim{hdim}"), r"^entry='fa2_hdim\{hdim\}': kernel 'fa2' has 2 element types"),
    (dict(entry="fa2_{tiles}"), r"^entry='fa2_\{tiles\}': kernel 'fa2': expected a format of \{hdim\} and \{dtype\}"),
    (dict(tiles=(Tiles(64, 128, 64, warps=0),)), r"^warps=0: kernel 'fa2' at head dim 64: expected None or 1..32 warps"),
    (dict(tiles=(Tiles(64, 64, 64, warps=8),)), r"^block_m=64: kernel 'fa2' at head dim 64: expected a multiple of "
                                                r"16 \* warps = 128"),
    (dict(tiles=(Tiles(64, 128, 64, dropout=True),)), r"^tiles=\[64\]: kernel 'fa2': one Tiles per head dim \(or one "
                                                      r"with dropout=True and one with dropout=False\)"),
    (dict(tiles=(Tiles(64, 128, 64, dropout=True), Tiles(64, 128, 64))), r"^tiles=\[64, 64\]: kernel 'fa2': one Tiles"),
    (dict(tiles=(Tiles(128, 1024, 64), Tiles(64, 128, 64)), domain=dataclasses.replace(get("fa2").domain, headdim=(64,))),
     r"^smem=.*instance hdim 128 needs more shared memory than "
                                                              r"an sm_90 CTA has \(232448 bytes\)"),
    (dict(domain=dataclasses.replace(get("fa2").domain, group=None)), r"^domain=.*draw a GQA group .* exactly when"),
    (dict(domain=dataclasses.replace(get("fa2").domain, headdim=(264,))), r"^domain=.*head dim 264 of the domain runs "
                                                                           r"on no instance .*head dims up to 256"),
])
def test_a_spec_names_the_field_it_refuses(change, match):
    with pytest.raises(ArgumentError, match=match):
        dataclasses.replace(get("fa2"), **change)


def test_instances_for_calls_with_and_without_dropout_need_a_kernel_with_dropout():
    with pytest.raises(ArgumentError, match=r"^dropout=True: kernel 'fa2_sm8x' at head dim 64: an instance for the calls "
                                            r"with or without dropout \(True or False\) needs a kernel that models"):
        dataclasses.replace(get("fa2_sm8x"), tiles=(Tiles(64, 128, 64, dropout=True), Tiles(64, 128, 64, dropout=False)))


def test_a_kernel_taking_the_head_dim_has_one_tiles_and_no_hdim_in_its_entry():
    with pytest.raises(ArgumentError, match=r"^entry='fa_v5_\{hdim\}': kernel 'v5' takes the head dim as a parameter"):
        dataclasses.replace(get("v5"), entry="fa_v5_{hdim}")
    with pytest.raises(ArgumentError, match=r"^tiles=\[None, 64\]: kernel 'v5': one Tiles per head dim"):
        dataclasses.replace(get("v5"), tiles=(Tiles(None, 64, 16), Tiles(64, 64, 16)))


def test_the_registry_holds_each_name_once_and_configurations_of_registered_kernels():
    with pytest.raises(ArgumentError, match=r"^name='fa2': a kernel of this name is registered already"):
        register(get("fa2"))
    with pytest.raises(ArgumentError, match=r"^config_of='fa3': kernel 'fa2_x'"):
        register(dataclasses.replace(get("fa2_sm8x"), name="fa2_x", config_of="fa3"))
    with pytest.raises(ArgumentError, match=r"^config_of='fa2_sm8x': kernel 'fa2_x': expected a registered kernel that is "
                                            r"not itself a configuration"):
        register(dataclasses.replace(get("fa2_sm8x"), name="fa2_x", config_of="fa2_sm8x"))
    with pytest.raises(ArgumentError, match=r"^config_of='kernel1': kernel 'fa2_x': another configuration has the same "
                                            r"source and twin"):
        register(dataclasses.replace(get("fa2_sm8x"), name="fa2_x", config_of="kernel1"))
    assert "fa2_x" not in SPECS
    with pytest.raises(ArgumentError, match=r"^kernel='fa3': expected one of \('fa2', 'kernel1', 'v5', 'v6', 'fa2_sm8x', 'fa4h', 'fa2_chunked', 'fa2_splitkv', 'fa2_splitkv1'\)"):
        get("fa3")


# ------------------------------------------------------------------------------------------------ instances


def test_instances_follow_each_kernels_head_dim_rule():
    # fa2: the head dim padded to a multiple of 8, then the smallest instance that holds it
    assert [get("fa2").instance_for_headdim(d).headdim for d in (8, 60, 64, 65, 100, 128)] == [64] * 3 + [128] * 3
    # above 128 as flash-attn's head_size_rounded: 136-192 on 192, 200-256 on 256
    assert [get("fa2").instance_for_headdim(d).headdim for d in (130, 160, 192, 193, 224, 256)] == [192] * 3 + [256] * 3
    with pytest.raises(ArgumentError, match=r"^headdim=136: kernel 'fa2_sm8x' is built for head dims up to 128 "
                                            r"\(instances 64 and 128\)"):
        get("fa2_sm8x").instance_for_headdim(130)
    with pytest.raises(ArgumentError, match=r"^headdim=64: kernel 'kernel1' is built for headdim 128 only"):
        get("kernel1").instance_for_headdim(64)
    with pytest.raises(ArgumentError, match=r"^headdim=24: kernel 'v5' needs headdim % 16 == 0"):
        get("v5").instance_for_headdim(24)
    big = (SMEM_LIMIT - 1536 - 6 * 1024) // 192 // 16 * 16 + 16  # the first multiple of 16 past the limit
    assert get("v6").instance(big - 16).smem_bytes <= SMEM_LIMIT
    with pytest.raises(ArgumentError, match=rf"^headdim={big}: kernel 'v6' at this head dim needs \d+ bytes of shared "
                                            "memory, more than an sm_90 CTA has"):
        get("v6").instance(big)
    with pytest.raises(ArgumentError, match=r"^headdim=96: kernel 'fa2' instances have head dim 64 or 128 or 192 or 256"):
        get("fa2").instance(96)


def test_the_fa2_configurations_are_the_lead_contract():
    """fa2 (seed 000's tiles) and fa2_sm8x (flash-attn's sm8x tiles): 4 warps, the same parameters, smem
    2 d (block_m + 2 block_n) bytes, grid (ceil(seqlen_q / block_m), heads, batch)."""
    tiles = {k: {d: (get(k).instance(d).block_m, get(k).instance(d).block_n) for d in (64, 128)}
             for k in ("fa2", "fa2_sm8x")}
    assert tiles == {"fa2": {64: (128, 64), 128: (128, 32)}, "fa2_sm8x": {64: (128, 64), 128: (64, 64)}}
    # a dropout instance has only the ext build, named _dropout after the head dim
    assert get("fa2").function_names == [f"fa2{x}_hdim{d}_{t}" for x in ("", "_ext")
                                         for d in (64, 128, 192) + (("192_dropout",) if x else ()) + (256,)
                                         for t in ("f16", "bf16")]
    # flash-attn's sm80 traits on sm90 (run_mha_fwd_hdim192's DROPOUT_SWITCH, run_mha_fwd_hdim256 on the H100)
    tiles = {(d, dropout): (i.block_m, i.block_n, i.warps, i.threads, i.rows_per_m, i.m_tiles)
             for d in (192, 256) for dropout in (False, True) for i in [get("fa2").instance(d, dropout)]}
    assert tiles == {(192, False): (128, 64, 8, 256, 128, 1), (192, True): (64, 64, 4, 128, 64, 1),
                     (256, False): (64, 64, 4, 128, 64, 1), (256, True): (64, 64, 4, 128, 64, 1)}
    assert [(i.headdim, i.dropout) for i in get("fa2").instances] == [(64, None), (128, None), (192, False),
                                                                     (192, True), (256, None)]
    assert get("fa2_sm8x").function_names == ["fa2_sm8x_hdim64_f16", "fa2_sm8x_hdim64_bf16", "fa2_sm8x_hdim128_f16",
                                              "fa2_sm8x_hdim128_bf16"]
    a = check_args(*(np.zeros((2, 200, 3, 100), np.float16),) * 3)
    for k in ("fa2", "fa2_sm8x"):
        s = get(k)
        assert (s.warps, s.threads, s.options, s.writes_lse, s.config_of) == (4, 128, ("--use_fast_math",), True,
                                                                             None if k == "fa2" else "fa2")
        inst = s.instance_for(a)
        assert inst.grid(a) == (-(-200 // inst.block_m), 3, 2)
        assert inst.m_tiles == inst.block_m // 64 and inst.rows_per_m == 64
        for d in (64, 128):
            i = s.instance(d)
            assert i.smem_bytes == 2 * d * (i.block_m + 2 * i.block_n)


def test_unsupported_names_every_missing_feature_in_order():
    a = check_args(*(np.zeros((1, 64, 2, 16), np.float16),), np.zeros((1, 64, 1, 16), np.float16),
                   np.zeros((1, 64, 1, 16), np.float16), causal=True, softcap=5.0)
    assert get("v5").unsupported(a) == ["causal or local masks", "softcap", "GQA/MQA"]
    assert get("fa2").unsupported(a) == [] and get("fa2_sm8x").unsupported(a) == []
    with pytest.raises(NotImplementedError, match=r"^kernel 'kernel1' does not model causal or local masks, softcap, "
                                                  r"GQA/MQA$"):
        get("kernel1").check_supported(a)


# ------------------------------------------------------------------------------------------------ entry points


@pytest.mark.parametrize("trace", [False, True], ids=["build", "traced"])
@pytest.mark.parametrize("kernel", sorted(SPECS))
def test_every_entry_point_is_in_the_cubin_of_the_source(kernel, trace):
    """NVRTC (the wheel, no GPU) builds each source as the launches do; every entry point of the spec is a
    kernel of the cubin."""
    from flashsim.kernels.sources import interpreted_module

    s = get(kernel)
    if trace and not s.traceable:
        pytest.skip(f"{kernel} has no traced build")
    mod = interpreted_module(s.source, options=s.build_options(trace))
    missing = [f for f in s.function_names if f not in mod.kernels]
    assert not missing, f"{s.source} lacks the entry points {missing} of kernel {kernel!r} (it has {mod.kernels})"
    alibi = check_args(*(np.zeros((1, 64, 2, 16), np.float16),) * 3, alibi_slopes=np.zeros(2, np.float32))
    for inst in s.instances or (s.instance(64),):  # each build of each instance takes the instance's threads
        for f in {inst.function(d, a) for d in s.dtypes for a in (None, alibi)}:
            assert mod.get_function(f).attributes["max_threads_per_block"] >= inst.threads, f


# ------------------------------------------------------------------------------------------------ shared memory


def _coords(rows, cols, step=5):
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return r.ravel()[::step], c.ravel()[::step]


def _layout_offsets(layout, r, c):
    return np.array([int(layout((int(a), int(b)))) for a, b in zip(r, c)])


@pytest.mark.parametrize("kernel", ["fa2", "fa2_sm8x"])
@pytest.mark.parametrize("d", [64, 128])
def test_fa2_smem_is_the_swizzled_tiling_smem_off_computes(kernel, d):
    inst = get(kernel).instance(d)
    rows = {"sQ": inst.block_m, "sK": inst.block_n, "sV": inst.block_n}
    assert [b.name for b in inst.smem_buffers] == list(rows)
    for b in inst.smem_buffers:
        r, c = _coords(rows[b.name], d)
        assert np.array_equal(_layout_offsets(b.layout, r, c), fa2.smem_offset(r, c, rows[b.name])), b.name
        assert b.tile_elements == rows[b.name] * d and b.elem_bytes == 2
    # fa2.cu: sK = sQ + kBlockM * kHeadDim, sV = sK + kBlockN * kHeadDim (16-bit elements)
    assert inst.smem_offset("sK") == 2 * inst.block_m * d and inst.smem_offset("sV") == 2 * (inst.block_m + inst.block_n) * d


def test_kernel1_smem_is_three_row_major_tiles():
    inst = get("kernel1").instance(128)
    for b in inst.smem_buffers:
        r, c = _coords(64, 128)
        assert np.array_equal(_layout_offsets(b.layout, r, c), r * 128 + c), b.name  # kernel1.cu: row * kD + col
    assert [inst.smem_offset(n) for n in ("s_Q", "s_K", "s_V")] == [0, 64 * 128 * 2, 2 * 64 * 128 * 2]
    assert inst.smem_bytes == 48 * 1024


@pytest.mark.parametrize("kernel", ["v5", "v6"])
@pytest.mark.parametrize("d", [16, 48, 128])
def test_v5_v6_smem_is_what_fa_v5_cu_addresses(kernel, d):
    """fa_v5.cu: qkv_addr<kSwizzle>(row * d + col) within each 16 x d tile of s_Q (per warp), s_K, s_V, and
    tile_addr<kSwizzle>(row * 16 + col) within each warp's 16 x 16 tile of s_QK, s_S, s_O (swizzle<3,3,4> and
    swizzle<1,3,3> of the seed in v6); the MD_F arrays {m, d} per row; the buffers one after the other."""
    inst = get(kernel).instance(d)
    swz = kernel == "v6"
    want = {"s_Q": (16, d, 4, 3, 4), "s_K": (16, d, 1, 3, 4), "s_V": (16, d, 1, 3, 4), "s_QK": (16, 16, 4, 1, 3),
            "s_S": (16, 16, 4, 1, 3), "s_O": (16, 16, 4, 1, 3)}
    off = 0
    for b in inst.smem_buffers:
        assert inst.smem_offset(b.name) == off
        if b.name in want:
            rows, cols, copies, bits, shift = want[b.name]
            r, c = _coords(rows, cols, 3)
            x = r * cols + c
            expect = seed_swizzle(x, bits, 3, shift) if swz else x
            assert np.array_equal(_layout_offsets(b.layout, r, c), expect), b.name
            assert (b.copies, b.elem_bytes, b.tile_elements) == (copies, 2, rows * cols)
        else:  # MD_F ml_prev, ml_tile, ml_new: 4 warps x 16 rows x {float m, float d}
            assert (b.copies, b.elem_bytes, b.tile_elements) == (4, 4, 32)
        off += b.bytes
    assert [b.name for b in inst.smem_buffers][6:] == ["ml_prev", "ml_tile", "ml_new"]
    assert inst.smem_bytes == off == 2 * (64 * d + 2 * 16 * d + 3 * 64 * 16) + 3 * 64 * 8


# ------------------------------------------------------------------------------------------------ traces


def _tile_constants(inst) -> dict:
    """The .cu files' tile constants of an instance (fa2.cu, kernel1.cu, fa_v5.cu name them so)."""
    return dict(kMT=inst.m_tiles, kNT=inst.block_n // 8, kDT=inst.headdim // 8, kKS=inst.headdim // 16,
                kKQ=inst.headdim // 16, kKP=inst.block_n // 16, kBr=inst.block_m // inst.spec.warps)


@pytest.mark.parametrize("kernel", trace_spec.KERNELS)
def test_trace_register_lists_have_the_lengths_fs_trace_records(kernel):
    """Each ``FS_TRACE(tag, nregs, ...)`` of the source records ``nregs`` registers: spec.registers lists
    as many for every instance."""
    s = get(kernel)
    text = (ROOT / "gpu" / "kernels" / s.source).read_text()
    points = re.findall(r"FS_TRACE\((\w+),\s*([^,]+),", text)
    assert points
    for d in s.headdims or (16, 64, 128):
        inst = s.instance(d)
        for tag, expr in points:
            nregs = eval(expr.replace("/", "//"), {}, _tile_constants(inst))  # noqa: S307 (the .cu's arithmetic)
            assert len(trace_spec.registers(kernel, tag, d)) == nregs, (kernel, d, tag, expr)


def test_register_names_keep_every_declared_dimension():
    """A warp with one m-tile (fa2_sm8x at head dim 128: 64 x 64 tiles) records acc_s[0][n][e]: the names are
    the .cu's array elements, with the dimension of size 1."""
    regs = trace_spec.registers("fa2_sm8x", "softmax", 128)
    assert regs[:4] == ["row_max[0][0]", "row_max[0][1]", "row_sum[0][0]", "row_sum[0][1]"]
    assert regs[4:6] == ["acc_s[0][0][0]", "acc_s[0][0][1]"] and regs[-1] == "acc_o[0][15][3]"
    assert len(regs) == 4 + 8 * 4 + 16 * 4
    assert trace_spec.registers("fa2", "mma_qk", 128)[-1] == "acc_s[1][3][3]"
    assert trace_spec.registers("kernel1", "mma_qk")[:2] == ["s[0][0]", "s[0][1]"]  # kernel1.cu: float s[kNT][4]
    assert trace_spec.register_format("kernel1", "softmax", "pf[0][1]", "bfloat16") == "bf16x2"
    assert trace_spec.register_format("v6", "softmax", "p[3]") == "f16"


def test_fa2_sm8x_twin_records_its_program():
    case = problems.make_case(session.make_params("fa2_sm8x", seed=2, heads=2, heads_k=1, seqlen_q=130, seqlen_k=70,
                                                  headdim=72, causal=True))
    run = session.run_case(case, backend="sim", ctas=[0, 1, 2])
    hd = run.meta["instance_headdim"]
    assert (hd, run.meta["grid_ctas"]) == (128, 3 * 2)  # 64-row CTAs
    for cta in (0, 1, 2):
        evs = sorted((e for e in run.events if e.cta == cta and e.warp == 3), key=lambda e: e.seq)
        tags = [e.tag for e in evs]
        assert tags[:2] == ["load_q", "load_k"] and tags[-2:] == ["normalize", "store_o"]
        assert len(tags) <= len(trace_spec.program("fa2_sm8x", hd, run.meta["kv_steps"]))
        for e in evs:
            assert e.regs.shape == (32, len(trace_spec.registers("fa2_sm8x", e.tag, hd)))
    out, _ = run_twin("fa2_sm8x", case.q, case.k, case.v, **case.kwargs)
    assert np.array_equal(np.ascontiguousarray(out).view(np.uint16), run.arrays["out"])


@pytest.mark.parametrize("headdim", [128, 64])
def test_fa2_sm8x_traced_build_in_the_interpreter_diffs_clean_against_the_twin(headdim):
    """The FS_TRACE build of fa2.cu's fa2_sm8x entry points, run in the interpreter, records at every event the
    registers trace.spec lists (one m-tile per warp at head dim 128: acc_s[0][n][e]), with the twin's values."""
    case = problems.make_case(session.make_params("fa2_sm8x", seed=4, heads=2, heads_k=1, seqlen_q=100, seqlen_k=90,
                                                  headdim=headdim, dtype="bfloat16", causal=True))
    # hdim 128: m_block 1 of head 0; hdim 64: m_block 0 of head 1
    interp = session.run_case(case, backend="interp", ctas=[1])
    twin = session.run_case(case, backend="sim", ctas=[1])
    d = session.diff_runs(interp, twin, "interpreter", "twin")
    assert d.clean, d.format("fa2_sm8x", interp.meta["instance_headdim"], "bfloat16")
    assert d.compared == len(twin.events) and np.array_equal(interp.arrays["out"], twin.arrays["out"])


# ------------------------------------------------------------------------------------------------ fa2_sm8x


def test_fa2_sm8x_equals_fa2_where_the_tiles_are_the_same_and_passes_the_rule_elsewhere():
    from flashsim.api import flash_attn_func

    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 150, 2, s)).astype(np.float16) for s in (48, 48, 48))
    a = flash_attn_func(q, k, v, causal=True, return_attn_probs=True, kernel="fa2")
    b = flash_attn_func(q, k, v, causal=True, return_attn_probs=True, kernel="fa2_sm8x")
    assert np.array_equal(a[0].view(np.uint16), b[0].view(np.uint16)) and np.array_equal(a[1], b[1])
    for seed in range(3):
        case = problems.random_case(np.random.default_rng([seed, 9]), "fa2_sm8x")
        out, lse = run_twin("fa2_sm8x", case.q, case.k, case.v, **case.kwargs)
        args = check_args(case.q, case.k, case.v, **case.kwargs)
        ref, ref_lse = attention_reference(case.q, case.k, case.v, args)
        lowp, _ = attention_lowp(case.q, case.k, case.v, args)
        assert passes_flash_attn_rule(out, ref, lowp), case.describe()
        fin = np.isfinite(ref_lse)
        assert np.allclose(lse[fin], ref_lse[fin], atol=1e-4, rtol=1e-5)


def test_fa2_sm8x_masks_more_steps_at_head_dim_128():
    """n_masking_steps = ceil(block_m / block_n) (+1 when the seqlens are not multiples of the blocks)."""
    a = check_args(*(np.zeros((1, 100, 1, 128), np.float16),) * 3, causal=True)
    assert fa2.problem_from_args(a, "fa2").n_masking_steps == 4 + 1
    assert fa2.problem_from_args(a, "fa2_sm8x").n_masking_steps == 1 + 1


@pytest.mark.parametrize("over", [
    dict(headdim=128, seqlen_q=100, seqlen_k=90, dtype="bfloat16", causal=True),
    dict(headdim=96, seqlen_q=129, seqlen_k=200, dtype="float16", window_size=(20, 7), softcap=30.0, kind="large"),
    dict(headdim=64, seqlen_q=70, seqlen_k=90, dtype="bfloat16", causal=True),
    dict(headdim=40, seqlen_q=33, seqlen_k=130, dtype="float16", kind="nan_inf"),
], ids=lambda o: f"d{o['headdim']}")
def test_fa2_sm8x_in_the_interpreter_equals_its_twin(over):
    """The fa2_sm8x entry points of fa2.cu in the SASS interpreter, bit for bit against the twin with its tiles
    (at head dim 128 with the uncontracted rescale of its SASS, ``fma_rescale=False``)."""
    from flashsim.kernels.launch import run_kernel

    p = problems.draw_params(problems.rng_pick(np.random.default_rng(0)), "fa2_sm8x")
    p.update(batch=1, heads=2, heads_k=1, kind="normal", causal=False, window_size=(-1, -1), softcap=0.0,
             softmax_scale=None, seed=3)
    p.update(over)
    case = problems.make_case(p)
    i_out, i_lse = run_kernel("fa2_sm8x", case.q, case.k, case.v, backend="interp", **case.kwargs)
    t_out, t_lse = run_twin("fa2_sm8x", case.q, case.k, case.v, **case.kwargs)
    np.testing.assert_array_equal(i_out.view(np.uint16), t_out.view(np.uint16), err_msg=case.describe())
    np.testing.assert_array_equal(i_lse.view(np.uint32), t_lse.view(np.uint32), err_msg=case.describe())


# ------------------------------------------------------------------------------------------------ no branches

def test_no_module_branches_on_a_kernels_name():
    """A kernel's behaviour is a field of its spec: no ``kernel == "fa2"``, ``kernel in ("v5", "v6")`` or
    comparison with a registered kernel's name anywhere in flashsim/ or gpu/."""
    from flashsim.kernels.extra import EXTRA_KERNELS

    names = "|".join(sorted(map(re.escape, [*SPECS, *EXTRA_KERNELS]), key=len, reverse=True))
    patterns = [
        re.compile(r"""\bkernel\w*(?:\[["']\w+["']\])?\s*(?:==|!=)\s*[rbuf]?["']"""),
        re.compile(r"""\bkernel\w*(?:\[["']\w+["']\])?\s+(?:not\s+)?in\s+[(\[{]\s*["']"""),
        re.compile(rf"""(?:==|!=)\s*["'](?:{names})["']|["'](?:{names})["']\s*(?:==|!=)"""),
        re.compile(rf"""\bin\s+[(\[{{][^)\]}}]*["'](?:{names})["']"""),
        re.compile(rf"""\{{\s*["'](?:{names})["']\s*:[^}}]*\}}\s*(?:\.get\(|\[)"""),
    ]
    hits = []
    for top in ("flashsim", "gpu"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if any(p.search(line) for p in patterns):
                    hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, "branches on a kernel's name (make it a field of the kernel's spec):\n" + "\n".join(hits)


def test_the_domain_of_every_kernel_is_drawn_from_its_spec():
    for kernel, s in SPECS.items():
        seen = {problems.draw_params(problems.rng_pick(np.random.default_rng(i)), kernel)["headdim"] for i in range(60)}
        assert seen <= set(s.domain.headdim) and isinstance(s.domain, Domain) and isinstance(s, KernelSpec)
        for i in range(5):
            case = problems.random_case(np.random.default_rng(i), kernel)
            s.check(case.q, case.k, case.v, **case.kwargs)  # every drawn problem is in the kernel's domain
