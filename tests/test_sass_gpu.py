"""The interpreter against the GPU on the same cubin (``pytest --gpu``): the kernels of
tests/test_cuda_interp.py and the four FlashAttention kernels, every output bit compared. The GPU loads
the interpreter's ``module.cubin`` (gpu.runtime.load_cubin checks its sha256)."""

from __future__ import annotations

import numpy as np
import pytest

import flashsim.cuda as fc
from tests.test_cuda_interp import (BASIC, FOUND, GENERIC, GENERIC_S8, HALF_SEL, HEADERS, HEADERS_CCCL, IDIOMS, MATRIX, ROOTS,
                                    ROUNDING, SPIN_WAIT, found_inputs, half_sel_inputs, headers_cccl_inputs, roots_inputs,
                                    rounding_inputs)

gpu = pytest.mark.gpu


def _both(src: str, name: str, grid, block, make_args, shared_mem: int = 0, name_expressions=None):
    """Run kernel ``name`` in the interpreter and on the GPU on fresh copies of the same inputs; return
    (interpreter outputs, GPU outputs) as lists of numpy arrays (the device arrays after the launch)."""
    import cupy

    from flashsim.gpu import runtime

    mod = fc.RawModule(code=src, name_expressions=name_expressions)
    host = make_args()
    i_args = [fc.asarray(a) if isinstance(a, np.ndarray) and a.dtype.names is None else a for a in host]
    mod.get_function(name)(grid, block, tuple(i_args), shared_mem=shared_mem)
    g_mod = runtime.load_cubin(mod.cubin)
    g_args = [cupy.asarray(a) if isinstance(a, np.ndarray) and a.dtype.names is None else a for a in host]
    runtime.launch(g_mod.get_function(mod._lowered.get(name, name)), grid, block, tuple(g_args), shared_mem=shared_mem)
    i_out = [a.get() for a in i_args if isinstance(a, fc.ndarray)]
    g_out = [cupy.asnumpy(a) for a in g_args if isinstance(a, cupy.ndarray)]
    return i_out, g_out


def _assert_same(i_out, g_out):
    for i, (a, b) in enumerate(zip(i_out, g_out)):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8), err_msg=f"output array {i}")


@gpu
@pytest.mark.parametrize("seed", range(3))
def test_basic_kernel_on_gpu(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(256).astype(np.float32)
    x[rng.integers(256, size=8)] = np.array([0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-42, 3e38], np.float32)
    _assert_same(*_both(BASIC, "basic", (1,), (256,), lambda: [x.copy(), np.int32(rng.integers(-9, 9))], 1024))


@gpu
def test_divergence_exit_generic_and_reductions_on_gpu():
    _assert_same(*_both(BASIC, "divergent_shfl", (1,), (32,), lambda: [np.zeros(32, np.int32)]))
    _assert_same(*_both(BASIC, "early_exit", (1,), (64,), lambda: [np.zeros(64, np.int32)]))
    _assert_same(*_both(GENERIC, "gen", (1,), (64,), lambda: [np.zeros(64, np.float32), np.zeros(64, np.int32)]))
    _assert_same(*_both(SPIN_WAIT, "producer_consumer", (1,), (64,), lambda: [np.zeros(64, np.int32)]))
    g = (np.arange(64) * 29 - 900).astype(np.int8)
    _assert_same(*_both(GENERIC_S8, "generic_s8", (1,), (64,), lambda: [g.copy(), np.zeros(64, np.int32)]))


@gpu
@pytest.mark.parametrize("n", [0, 3, 5, 22, 63, 64])
def test_cp_async_zero_fill_on_gpu(n):
    x = np.arange(1, 65, dtype=np.float32)
    _assert_same(*_both(IDIOMS, "idioms", (1,), (64,), lambda: [x.copy(), np.zeros(256, np.float32), np.int32(n)]))


@gpu
@pytest.mark.parametrize("seed", range(3))
def test_rounding_and_clamps_on_gpu(seed):
    x = rounding_inputs(seed)
    _assert_same(*_both(ROUNDING, "rounding", (1,), (64,), lambda: [x.copy(), np.zeros(320, np.float32),
                                                                    np.zeros(64, np.int32), np.zeros(64, np.uint8)]))


@gpu
@pytest.mark.parametrize("seed", range(2))
def test_square_roots_on_gpu(seed):
    x = roots_inputs(seed)
    _assert_same(*_both(ROOTS, "roots", (32,), (128,), lambda: [x.copy(), np.zeros(3 * 4096, np.float32)]))


@gpu
def test_matrix_load_store_move_on_gpu():
    a = np.random.default_rng(5).integers(0, 1 << 16, 128, dtype=np.uint16)
    _assert_same(*_both(MATRIX, "matrix_ops", (1,), (32,),
                        lambda: [a.copy(), np.zeros(128, np.uint16), np.zeros(128, np.uint32)]))


@gpu
def test_header_intrinsics_on_gpu():
    x = (np.random.default_rng(2).standard_normal(64) * 3).astype(np.float16)
    _assert_same(*_both(HEADERS, "halves", (1,), (64,), lambda: [x.copy(), np.zeros(64, np.uint16),
                                                                  np.zeros(64, np.float32)]))


@gpu
def test_template_kernel_on_gpu():
    x = np.arange(32, dtype=np.float32) * np.float32(0.37)
    _assert_same(*_both(BASIC, "scale<float>", (1,), (32,), lambda: [x.copy(), np.float32(1.7)],
                        name_expressions=("scale<float>", "scale<int>")))


@gpu
@pytest.mark.parametrize("kernel", ["v5", "v6", "kernel1", "fa2"])
def test_fa_kernels_interpreter_equals_gpu_on_the_same_cubin(kernel):
    from flashsim.kernels import problems
    from flashsim.gpu.fa_kernels import run_kernel

    rng = np.random.default_rng(11)
    for _ in range(4):
        case = problems.random_case(rng, kernel)
        g = run_kernel(kernel, case.q, case.k, case.v, backend="gpu-cubin", **case.kwargs)
        i = run_kernel(kernel, case.q, case.k, case.v, backend="interp", **case.kwargs)
        assert len(g) == len(i), case.describe()
        for a, b in zip(g, i):  # out, LSE (or None) and, with dropout and return_attn_probs, the probabilities
            if a is not None:
                np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8), err_msg=case.describe())


@gpu
@pytest.mark.parametrize("seed", range(4))
def test_indexed_sub_word_constants_lop3_predicate_input_and_fset_on_gpu(seed):
    words, f = found_inputs(seed)
    _assert_same(*_both(FOUND, "subword", (1,), (32,), lambda: [words[:32].copy(), np.zeros(32, np.uint32)]))
    _assert_same(*_both(FOUND, "lop3p", (1,), (32,), lambda: [words.copy(), np.zeros(64, np.uint32)]))
    _assert_same(*_both(FOUND, "fset", (1,), (32,), lambda: [f.copy(), np.zeros(96, np.float32)]))


@gpu
@pytest.mark.parametrize("seed", range(2))
def test_double_division_and_square_root_on_gpu(seed):
    from tests.test_fp64 import DIV_SRC, div_inputs

    a, b = div_inputs(seed)
    n = len(a)
    _assert_same(*_both(DIV_SRC, "dd", ((n + 127) // 128,), (128,),
                        lambda: [a.copy(), b.copy(), *(np.zeros(n, np.float64) for _ in range(3)), np.int32(n)]))


@gpu
def test_wmma_cooperative_groups_and_cuda_pipeline_on_gpu():
    a, b, x, s = headers_cccl_inputs(1)
    _assert_same(*_both(HEADERS_CCCL, "wmma16", (1,), (32,),
                        lambda: [a.copy(), b.T.copy(), np.zeros((16, 16), np.float32)]))
    _assert_same(*_both(HEADERS_CCCL, "cgsum", (1,), (128,), lambda: [x.copy(), np.zeros(4, np.int32)]))
    _assert_same(*_both(HEADERS_CCCL, "pipecopy", (1,), (128,), lambda: [s.copy(), np.zeros(128, np.float32)]))


@gpu
@pytest.mark.parametrize("seed", range(4))
def test_hfma2_h0_nh1_selector_on_gpu(seed):
    a, b, c = half_sel_inputs(seed)
    _assert_same(*_both(HALF_SEL, "nh1", (1,), (32,), lambda: [a.copy(), b.copy(), c.copy(), np.zeros(96, np.uint32)]))


@gpu
@pytest.mark.parametrize("seed", range(3))
def test_fast_math_sin_cos_sincos_on_gpu(seed):
    from tests.test_sfu_trig import FAST_TRIG, trig_inputs

    x = trig_inputs(seed)
    n = x.size
    _assert_same(*_both(FAST_TRIG, "trig", (n // 128,), (128,), lambda: [x.copy(), np.zeros(5 * n, np.float32), np.int32(n)]))
