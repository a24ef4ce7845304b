"""flashsim.testing.assert_matches_gpu: the interpreter against the GPU (--gpu) or the stored GPU results
(traces/golden/, recorded by pytest --gpu --update-golden), the first differing element and the
instruction that stored it."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flashsim.cuda as fc
from flashsim import testing
from flashsim.strategies import kernel_arrays

SRC = r'''
#include <cuda_fp16.h>
extern "C" __global__ void axpb(float* y, const float* x, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;                                   // LINE:store
}
extern "C" __global__ void hexp(__half* y, const __half* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = hexp(x[i]);
}
extern "C" __global__ void smem_atomics(unsigned* out, const unsigned* v, int generic_only) {
  __shared__ unsigned s[256];
  unsigned t = threadIdx.x;
  for (unsigned i = t; i < 256; i += blockDim.x) s[i] = i * 2654435761u;
  __syncthreads();
  unsigned* g = s;
  if (generic_only) asm volatile("mov.b64 %0, %0;" : "+l"(g));  // the compiler no longer knows it is shared
  unsigned a = atomicAdd(g + (t % 4) * 32, v[t]);          // 8 lanes per word, 4 words on one bank
  unsigned b = atomicMin(&s[64 + t % 16], v[t] >> 3);
  unsigned c = atomicOr(&s[128 + (t * 7) % 32], v[t]);
  unsigned d = atomicExch(&s[160 + t % 8], v[t] ^ t);
  unsigned e = atomicCAS(&s[192 + t % 2], s[192 + t % 2], v[t]);
  atomicAdd(&s[224], 1u);                                   // a reduction (no result)
  __syncthreads();
  out[6 * t + 0] = a; out[6 * t + 1] = b; out[6 * t + 2] = c; out[6 * t + 3] = d; out[6 * t + 4] = e;
  out[6 * t + 5] = s[(t * 8) % 256];                         // the words every atomic above touched
}
extern "C" __global__ void hcmp(__half2* out, const __half2* a, const __half2* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half2 x = a[i], y = b[i];
  out[12 * i + 0] = __heq2(x, y);   out[12 * i + 1] = __hne2(x, y);   out[12 * i + 2] = __hlt2(x, y);
  out[12 * i + 3] = __hle2(x, y);   out[12 * i + 4] = __hgt2(x, y);   out[12 * i + 5] = __hge2(x, y);
  out[12 * i + 6] = __hequ2(x, y);  out[12 * i + 7] = __hneu2(x, y);  out[12 * i + 8] = __hltu2(x, y);
  out[12 * i + 9] = __hleu2(x, y);  out[12 * i + 10] = __hgtu2(x, y); out[12 * i + 11] = __hgeu2(x, y);
}
'''
STORE_LINE = next(i + 1 for i, s in enumerate(SRC.splitlines()) if "LINE:store" in s)


@pytest.fixture(scope="module")
def mod():
    return fc.RawModule(code=SRC)


def _axpb_args(n=200):
    x = np.linspace(-3, 3, n, dtype=np.float32)
    return (np.zeros(n, np.float32), x, np.float32(1.5), np.float32(-0.25), np.int32(n))


def test_stored_gpu_result_replays(mod):
    """Recorded on the H100 by pytest --gpu --update-golden; without --gpu it is the reference."""
    out = testing.assert_matches_gpu(mod, "axpb", (2,), (128,), _axpb_args())
    x = _axpb_args()[1].astype(np.float64)
    np.testing.assert_array_equal(out[0], (1.5 * x - 0.25).astype(np.float32))  # one FFMA: exact, then rounded


@pytest.fixture
def golden_tmp(tmp_path):
    s = testing._SESSION
    saved = (s.gpu, s.update_golden, s.golden_dir, s.in_pytest)
    testing.configure(gpu=False, update_golden=False, golden_dir=tmp_path, in_pytest=False)
    yield tmp_path
    testing.configure(gpu=saved[0], update_golden=saved[1], golden_dir=saved[2], in_pytest=saved[3])


def _fake_golden(mod, args, outs, path_dir):
    key = testing.launch_key(testing.code_digest(mod, "axpb"), "axpb", (2, 1, 1), (128, 1, 1), 0, list(args))
    path = testing._golden_path("axpb", key)
    arrays = {f"out{i}": o for i, o in enumerate(outs) if o is not None}
    np.savez(path, provenance=np.array(json.dumps({"kernel": "axpb", "key": key})), **arrays)
    return path


def test_missing_golden_outside_pytest_fails_and_says_how_to_record(mod, golden_tmp):
    with pytest.raises(testing.GoldenMissing, match="--update-golden"):
        testing.assert_matches_gpu(mod, "axpb", (2,), (128,), _axpb_args(100))


def test_a_difference_names_the_element_and_the_store(mod, golden_tmp):
    args = _axpb_args()
    y = (1.5 * args[1].astype(np.float64) - 0.25).astype(np.float32)  # the kernel's FFMA: one rounding
    _fake_golden(mod, args, [y, args[1], None, None, None], golden_tmp)
    testing.assert_matches_gpu(mod, "axpb", (2,), (128,), args)  # equal: passes
    bad = y.copy()
    bad[137] = np.nextafter(bad[137], np.float32(9))
    _fake_golden(mod, args, [bad, args[1], None, None, None], golden_tmp)
    with pytest.raises(testing.KernelMismatch) as ei:
        testing.assert_matches_gpu(mod, "axpb", (2,), (128,), args)
    msg = str(ei.value)
    assert "args[0]" in msg and "index (137,)" in msg and "1 of 200 elements" in msg
    assert "STG" in msg and f":{STORE_LINE}" in msg and "cta=1 warp=0 lane=9" in msg


def test_the_key_ignores_where_the_source_was_compiled(mod):
    """The stored result of a launch is found again from another folder: the line table (which records the
    folder) differs, the machine code does not."""
    other = fc.RawModule(code=SRC, name="/elsewhere/kernel.cu")
    assert other.cubin != mod.cubin
    assert testing.code_digest(other, "axpb") == testing.code_digest(mod, "axpb")
    assert testing.code_digest(other, "axpb") != testing.code_digest(mod, "hexp")


def test_bad_arguments(mod, golden_tmp):
    from flashsim.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"args\[2\]"):
        testing.assert_matches_gpu(mod, "axpb", (1,), (32,), (np.zeros(4, np.float32), np.zeros(4, np.float32), 1.5,
                                                              np.float32(0), np.int32(4)))
    with pytest.raises(ArgumentError, match="module"):
        testing.assert_matches_gpu("not a module", "axpb", (1,), (32,), ())


@pytest.mark.gpu
@settings(max_examples=40, derandomize=True, deadline=None)
@given(x=kernel_arrays(np.float16, st.integers(1, 300).map(lambda n: (n,))))
def test_hexp_matches_gpu_on_bit_patterns(mod, x):
    import ml_dtypes  # noqa: F401  (float16 needs nothing more; the strategy covers bf16 too)

    n = x.shape[0]
    testing.assert_matches_gpu(mod, "hexp", ((n + 127) // 128,), (128,), (np.zeros(n, np.float16), x, np.int32(n)))


def test_hexp_on_every_f16_input_matches_the_gpu(mod):
    """HSET2 (the special cases of hexp) and the rest of h2exp's SASS on all 65,536 inputs: against the GPU
    under --gpu, else against its stored result."""
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    testing.assert_matches_gpu(mod, "hexp", (512,), (128,), (np.zeros(x.size, np.float16), x, np.int32(x.size)))


def test_half_compares_match_the_gpu(mod):
    """Every HSET2.BF form __heq2 ... __hgeu2 compile to, on pairs of special and random f16 bit patterns."""
    from flashsim.strategies import special_values

    sp = np.array(special_values("f16"), np.uint16)
    rng = np.random.default_rng(7)
    a = np.concatenate([np.repeat(sp, sp.size), rng.integers(0, 1 << 16, 2048, dtype=np.uint16)])
    b = np.concatenate([np.tile(sp, sp.size), rng.integers(0, 1 << 16, 2048, dtype=np.uint16)])
    b[-512:] = a[-512:]  # equal pairs
    a2, b2 = a.view(np.float16), b.view(np.float16)
    n = a.size // 2
    testing.assert_matches_gpu(mod, "hcmp", ((n + 127) // 128,), (128,),
                               (np.zeros(24 * n, np.float16), a2, b2, np.int32(n)))


@pytest.mark.parametrize("generic", [0, 1])
def test_shared_atomics_match_the_gpu(mod, generic):
    """ATOMS add/min/or/exch/CAS and a reduction with lanes of one warp on one word (applied in lane order),
    and with a generic pointer into shared memory (ATOM with a PT destination): results and final memory.
    One warp: between warps the H100 applies same-word atomics in its schedule's order (warps 6 and 7 of a
    256-thread block first, interleaved lane by lane), which the interpreter does not reproduce."""
    v = np.random.default_rng(3).integers(0, 1 << 32, 32, dtype=np.uint64).astype(np.uint32)
    testing.assert_matches_gpu(mod, "smem_atomics", (1,), (32,), (np.zeros(6 * 32, np.uint32), v, np.int32(generic)))


def test_kernel_arrays_cover_special_bit_patterns():
    from hypothesis import find

    a = find(kernel_arrays(np.float16, (8,)), lambda a: np.isnan(a).any() and np.signbit(a[a == 0]).any())
    assert a.dtype == np.float16
    ints = find(kernel_arrays(np.int32, (4,)), lambda a: (a < 0).any())
    assert ints.dtype == np.int32
