"""flash_attn_func's arguments: the checks and normalisations FlashAttention-2 applies before it launches.

``check_args`` takes the arguments of ``flash_attn_func`` and returns one frozen :class:`AttentionArgs`
holding the shapes and the scalars exactly as the FA2 forward kernel receives them (``Flash_fwd_params``).
It reads shapes, dtypes and devices only: no data is copied (``to_numpy`` does that when it is needed).

Facts taken from Dao-AILab/flash-attention (FA2, ``csrc/flash_attn``), not from its code:

- ``flash_attn/flash_attn_interface.py`` (``FlashAttnFunc.forward``): ``softmax_scale`` defaults to
  ``q.shape[-1] ** -0.5`` on the head dim as given (before padding); the head dim is zero-padded to a
  multiple of 8 and the output cropped back; ``return_attn_probs`` returns ``(out, softmax_lse, S_dmask)``.
- ``csrc/flash_attn/flash_api.cpp`` (``mha_fwd``): q/k/v are fp16 or bf16 of one dtype, on one device;
  ``batch_size > 0``; padded ``head_size <= 256``; ``num_heads % num_heads_k == 0`` (GQA/MQA: q head h reads
  kv head ``h // (num_heads // num_heads_k)``); ``p_dropout < 1``; a window side ``>= seqlen_k`` becomes -1;
  ``seqlen_q == 1`` (no alibi) turns causal off; causal sets ``window_size_right = 0`` (the left side is
  kept, so ``causal=True, window_size=(L, -1)`` is the local window (L, 0)); LSE is float32 of shape
  (batch, heads, seqlen_q); ``head_size_rounded`` is a multiple of 32 (<= 128) or 64; ``seqlen_k == 0`` gives
  out 0 and LSE +inf without a launch.
- ``set_params_fprop`` (same file): the kernel's floats. Python's float ``softmax_scale`` arrives as a C
  ``float`` (one round-to-nearest); ``scale_softmax_log2 = softmax_scale * M_LOG2E`` multiplies that float by
  the double ``M_LOG2E`` in double and stores the product in a float (a second rounding). With
  ``softcap > 0``: ``params.softcap = softmax_scale / softcap`` (a float division),
  ``scale_softmax = softcap`` and ``scale_softmax_log2 = softcap * M_LOG2E``; otherwise ``params.softcap = 0``.
  ``is_causal = left < 0 && right == 0``; then an unbounded side (< 0) facing a bounded one is replaced by
  ``seqlen_k`` (``params_window_size`` below).
"""

from __future__ import annotations

import numbers
import sys
from dataclasses import dataclass, field, replace

import ml_dtypes
import numpy as np

from flashsim.errors import bad_argument

# M_LOG2E from <math.h>: the decimal literal parsed to the nearest double, as the C compiler does
LOG2E = 1.44269504088896340736
MAX_HEADDIM = 256  # mha_fwd: "FlashAttention forward only supports head dimension at most 256"
HEADDIM_MULTIPLE = 8  # FlashAttnFunc.forward pads the head dim to a multiple of 8
DTYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
_TORCH_DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16"}
_INT32_MAX = 2**31 - 1  # the C++ side takes the window sizes as int
_SOFTCAP_WHY = "expected 0 (off) or a number > 0 that stays > 0 and finite as float32, also times log2(e)"
#: torch's default seed of a CUDA generator (c10's default_rng_seed_val): flashsim's default philox generator
#: starts there, with offset 0
DEFAULT_SEED = 67280421310721
_U64_MAX = 2**64 - 1
MAX_SPLITS = 128  # set_params_splitkv: "num_splits > 128 not supported"
_CHUNK_WHY = ("expected an int in [0, 2**31 - 1]: 0 (off) or the chunk length in keys (FlashAttention-3's "
              "attention_chunk)")


def _f32(x: float) -> np.float32:
    """A double rounded to float32 (nearest even), as a C ``(float)`` cast; overflow gives inf quietly."""
    with np.errstate(over="ignore"):
        return np.float32(x)


def _times_log2e(x32: np.float32) -> np.float32:
    """``float * M_LOG2E`` stored in a float: the product is taken in double (M_LOG2E is a double
    constant), then rounded to float32; two roundings, which differ from one float32 multiply for some
    scales (default scale of headdim 7: 0x3f0b97f6, one float32 multiply 0x3f0b97f5)."""
    return _f32(np.float64(x32) * LOG2E)


def _finite_log2(x: float) -> bool:
    """True when x and x * log2(e) are finite once rounded to float32 as set_params_fprop does."""
    return bool(np.isfinite(_f32(x)) and np.isfinite(_times_log2e(_f32(x))))


def _softcap_ok(x: float) -> bool:
    """0, or positive with a positive float32 value (FA2 tests the float ``softcap > 0``, so a cap that
    rounds to 0 would silently switch softcapping off) and finite also times log2(e)."""
    return x == 0.0 or (x > 0.0 and _f32(x) > 0 and _finite_log2(x))


def _rng_ok(state) -> bool:
    return (isinstance(state, tuple) and len(state) == 2
            and all(_is_int(x) and 0 <= int(x) <= _U64_MAX for x in state))


class PhiloxGenerator:
    """A philox state as torch's CUDA generator keeps it for flash-attn: a 64-bit ``seed`` and an ``offset``
    that each call with dropout advances by ``batch * heads * 32`` (rounded up to a multiple of 4, as
    ``philox_cuda_state`` rounds its increment). Pass one as ``generator=`` for reproducible runs, or pass the
    (seed, offset) of one call as ``rng_state=``."""

    def __init__(self, seed: int = DEFAULT_SEED, offset: int = 0):
        for name, x in (("seed", seed), ("offset", offset)):
            if not _is_int(x) or not 0 <= int(x) <= _U64_MAX:
                raise bad_argument(name, x, "expected an int in [0, 2**64)")
        self.seed, self.offset = int(seed), int(offset)

    def manual_seed(self, seed: int) -> "PhiloxGenerator":
        """Restart at ``seed`` with offset 0."""
        self.__init__(seed)
        return self

    def philox_state(self, increment: int) -> tuple[int, int]:
        """(seed, offset) for a call that takes ``increment`` numbers per thread; advances the offset."""
        state = (self.seed, self.offset)
        self.offset = (self.offset + (increment + 3) // 4 * 4) & _U64_MAX
        return state

    def __repr__(self):
        return f"PhiloxGenerator(seed={self.seed}, offset={self.offset})"



def _slopes(alibi_slopes, batch: int, heads: int) -> tuple[tuple[float, ...], ...]:
    """set_params_alibi's checks: float32, shape (heads,) or (batch, heads), on q's device; the values as
    float rows."""
    x = alibi_slopes
    if _is_torch(x):
        if str(x.dtype) != "torch.float32":
            raise bad_argument("alibi_slopes", _Summary(x), "ALiBi slopes must have dtype float32")
        a = x.detach().to("cpu").numpy()
    elif isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise bad_argument("alibi_slopes", _Summary(x), "ALiBi slopes must have dtype float32")
        a = x
    else:
        raise bad_argument("alibi_slopes", x, "expected a float32 numpy array or torch tensor of shape (heads,) "
                                              "or (batch, heads)")
    if tuple(a.shape) not in ((heads,), (batch, heads)):
        raise bad_argument("alibi_slopes", _Summary(x), f"expected shape (heads,) = ({heads},) or (batch, heads) "
                                                        f"= ({batch}, {heads})")
    rows = a.reshape(-1, heads)
    return tuple(tuple(float(v) for v in row) for row in rows)


def round_multiple(x: int, m: int) -> int:
    """Round ``x`` up to a multiple of ``m`` (flash_api.cpp's ``round_multiple``)."""
    return (x + m - 1) // m * m


@dataclass(frozen=True)
class AttentionArgs:
    """One flash_attn_func call, normalised as FA2 normalises it; validates itself on construction.

    ``window_size`` is (left, right) after ``mha_fwd``: -1 means unbounded, otherwise ``0 <= side < seqlen_k``.
    Causal is the window (-1, 0). The remaining fields are derived: the float32 scalars and the window the
    kernel masks with, named after their ``Flash_fwd_params`` fields.
    """

    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    heads_k: int
    headdim: int
    dtype: str
    softmax_scale: float
    window_size: tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    deterministic: bool = False
    device: str = "cpu"
    attention_chunk: int = 0
    #: V's (and O's) head dim; None: the same as Q's and K's (FA2 requires it, FA3/FA4 kernels take qk 192 / v 128)
    headdim_v: int | None = None
    #: the probability to drop an attention weight, in [0, 1)
    dropout_p: float = 0.0
    #: the philox (seed, offset) of a call with dropout (None without)
    rng_state: tuple[int, int] | None = None
    #: ALiBi slopes as float32 values, one row of ``heads`` per batch entry, or one row for every batch entry
    alibi_slopes: tuple[tuple[float, ...], ...] | None = None
    #: return the attention probabilities with the dropped ones negated (return_attn_probs with dropout)
    return_softmax: bool = False
    #: split-KV: the KV blocks of each query block are shared by this many CTAs whose partial outputs a combine
    #: kernel merges (flash-attn's num_splits; 1: one kernel)
    num_splits: int = 1
    #: packed sequences (flash_attn_varlen_func): batch + 1 non-decreasing row offsets into q's and k's rows;
    #: seqlen_q and seqlen_k are then max_seqlen_q and max_seqlen_k, total_q and total_k the packed rows
    cu_seqlens_q: tuple[int, ...] | None = None
    cu_seqlens_k: tuple[int, ...] | None = None
    total_q: int = 0
    total_k: int = 0
    #: one sequence of a packed call (``sequence(b)``): its batch index in the launch (the philox offsets) and
    #: the launch's seqlen_k, which set_params_fprop puts in an unbounded window side facing a bounded one
    batch_offset: int = 0
    window_fill: int | None = None
    #: flash_attn_with_kvcache: the cache (flashsim.attention.kvcache.KVCache); seqlen_k is then the cache's
    kvcache: object | None = None
    # derived in __post_init__
    softmax_scale_f32: np.float32 = field(init=False)
    scale_log2_f32: np.float32 = field(init=False)
    params_scale_softmax: np.float32 = field(init=False)
    params_scale_softmax_log2: np.float32 = field(init=False)
    params_softcap: np.float32 = field(init=False)
    params_window_size: tuple[int, int] = field(init=False)
    params_p_dropout: np.float32 = field(init=False)
    params_p_dropout_in_uint8_t: int = field(init=False)
    params_rp_dropout: np.float32 = field(init=False)

    def __post_init__(self):
        for name in ("batch", "heads", "heads_k", "headdim"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise bad_argument(name, getattr(self, name), "expected a positive int")
        for name in ("seqlen_q", "seqlen_k"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 0:
                raise bad_argument(name, getattr(self, name), "expected a non-negative int")
        if self.headdim_v is None:
            object.__setattr__(self, "headdim_v", self.headdim)
        if not _is_int(self.headdim_v) or self.headdim_v < 1:
            raise bad_argument("headdim_v", self.headdim_v, "expected a positive int")
        if self.heads % self.heads_k:
            raise bad_argument("heads_k", self.heads_k, f"must divide heads={self.heads} (GQA/MQA)")
        if self.headdim_padded > MAX_HEADDIM:
            raise bad_argument("headdim", self.headdim, f"padded to {self.headdim_padded}, above {MAX_HEADDIM}")
        if self.dtype not in DTYPES:
            raise bad_argument("dtype", self.dtype, f"expected one of {sorted(DTYPES)}")
        if not isinstance(self.softmax_scale, float) or not _finite_log2(self.softmax_scale):
            raise bad_argument("softmax_scale", self.softmax_scale, "expected a float; it and its product "
                                                                    "with log2(e) must be finite as float32")
        if not isinstance(self.softcap, float) or not _softcap_ok(self.softcap):
            raise bad_argument("softcap", self.softcap, _SOFTCAP_WHY)
        if self.window_fill is not None and (not _is_int(self.window_fill) or self.window_fill < self.seqlen_k):
            raise bad_argument("window_fill", self.window_fill, f"expected None or an int >= seqlen_k={self.seqlen_k}")
        fill = self.seqlen_k if self.window_fill is None else self.window_fill
        ws = self.window_size
        if (not isinstance(ws, tuple) or len(ws) != 2 or not all(_is_int(w) for w in ws)
                or not all(w == -1 or 0 <= w < max(fill, 1) for w in ws)):
            raise bad_argument("window_size", ws, f"expected a normalised (left, right): each -1 (unbounded) "
                                                  f"or in [0, seqlen_k={self.seqlen_k}); use check_args")
        if not isinstance(self.deterministic, bool):
            raise bad_argument("deterministic", self.deterministic, "expected a bool")
        if not isinstance(self.device, str):
            raise bad_argument("device", self.device, "expected a str")
        if not _is_int(self.attention_chunk) or not 0 <= self.attention_chunk <= _INT32_MAX:
            raise bad_argument("attention_chunk", self.attention_chunk, _CHUNK_WHY)
        if not isinstance(self.dropout_p, float) or not 0.0 <= self.dropout_p < 1.0:
            raise bad_argument("dropout_p", self.dropout_p, "expected a probability in [0, 1)")
        if self.dropout_p > 0.0 and self.softcap > 0.0:
            raise bad_argument("dropout_p", self.dropout_p, "softcap does not support dropout (flash-attn: "
                                                            "\"Softcapping does not support dropout for now\")")
        if (self.rng_state is None) != (self.dropout_p == 0.0) or (self.rng_state is not None and not _rng_ok(self.rng_state)):
            raise bad_argument("rng_state", self.rng_state, "expected (seed, offset), ints in [0, 2**64), exactly "
                                                            "when dropout_p > 0")
        if not isinstance(self.return_softmax, bool) or (self.return_softmax and self.dropout_p == 0.0):
            raise bad_argument("return_softmax", self.return_softmax, "expected a bool, True only with dropout "
                                                                      "(flash-attn returns probabilities only then)")
        if not _is_int(self.num_splits) or not 1 <= self.num_splits <= MAX_SPLITS:
            raise bad_argument("num_splits", self.num_splits, f"expected an int in [1, {MAX_SPLITS}]")
        if self.num_splits > 1 and self.dropout_p > 0.0:
            raise bad_argument("num_splits", self.num_splits, "split-KV has no dropout (flash-attn: \"SplitKV is "
                                                              "not implemented for dropout\")")
        self._check_packed()
        if not _is_int(self.batch_offset) or self.batch_offset < 0:
            raise bad_argument("batch_offset", self.batch_offset, "expected a non-negative int")
        sl = self.alibi_slopes
        if sl is not None and (not isinstance(sl, tuple) or len(sl) not in (1, self.batch) or not all(
                isinstance(row, tuple) and len(row) == self.heads and all(isinstance(x, float) for x in row)
                for row in sl)):
            raise bad_argument("alibi_slopes", sl, f"expected one or batch={self.batch} rows of heads={self.heads} "
                                                   f"floats")

        # set_params_fprop: the C float parameter is the Python double rounded to nearest once
        scale_f32 = _f32(self.softmax_scale)
        log2 = _times_log2e(scale_f32)
        if self.softcap > 0.0:
            cap = _f32(self.softcap)
            # float / float: one float32 division (round to nearest); the kernel then computes
            # tanh(qk * params.softcap) and uses scale_softmax(_log2) = softcap(* log2 e) on it
            with np.errstate(over="ignore", under="ignore"):
                p_softcap = scale_f32 / cap
            p_scale, p_log2 = cap, _times_log2e(cap)
        else:
            p_softcap, p_scale, p_log2 = np.float32(0.0), scale_f32, log2
        left, right = ws
        # set_params_fprop: an unbounded side facing a bounded one becomes seqlen_k (after is_causal is
        # taken, so causal's left becomes seqlen_k too; the causal mask never reads it)
        if left < 0 and right >= 0:
            left = fill
        if left >= 0 and right < 0:
            right = fill
        for name, value in (("softmax_scale_f32", scale_f32), ("scale_log2_f32", log2),
                            ("params_scale_softmax", p_scale), ("params_scale_softmax_log2", p_log2),
                            ("params_softcap", np.float32(p_softcap)), ("params_window_size", (left, right))):
            object.__setattr__(self, name, value)
        from flashsim.numerics.philox import dropout_scalars

        keep, keep_u8, rp = dropout_scalars(self.dropout_p)
        for name, value in (("params_p_dropout", keep), ("params_p_dropout_in_uint8_t", keep_u8),
                            ("params_rp_dropout", rp)):
            object.__setattr__(self, name, value)

    def _check_packed(self) -> None:
        cq, ck = self.cu_seqlens_q, self.cu_seqlens_k
        if (cq is None) != (ck is None):
            raise bad_argument("cu_seqlens_k" if ck is None else "cu_seqlens_q", None, "packed sequences need both "
                                                                                      "cu_seqlens_q and cu_seqlens_k")
        if cq is None:
            return
        for name, cu, total, longest in (("cu_seqlens_q", cq, self.total_q, self.seqlen_q),
                                         ("cu_seqlens_k", ck, self.total_k, self.seqlen_k)):
            if not isinstance(cu, tuple) or len(cu) != self.batch + 1 or not all(_is_int(x) for x in cu):
                raise bad_argument(name, cu, f"expected batch + 1 = {self.batch + 1} ints")
            check_cu_seqlens(name, np.asarray(cu, np.int64), total, longest)

    @property
    def launches_nothing(self) -> bool:
        """No kernel runs: seqlen_k == 0 (mha_fwd, and mha_varlen_fwd with max_seqlen_k == 0), or packed
        sequences with no query row (an empty grid); out is 0 and the LSE +inf."""
        return self.seqlen_k == 0 or (self.varlen and self.seqlen_q == 0)

    @property
    def varlen(self) -> bool:
        """Packed sequences (flash_attn_varlen_func)."""
        return self.cu_seqlens_q is not None

    def seqlens(self) -> tuple[np.ndarray, np.ndarray]:
        """(seqlen_q, seqlen_k) of every batch entry, int64 (batch,) (a KV cache's: its keys after the append)."""
        if self.kvcache is not None:
            kv = self.kvcache
            return (np.full(self.batch, self.seqlen_q, np.int64),
                    np.asarray(kv.seqlens, np.int64) + kv.seqlen_knew)
        if not self.varlen:
            return np.full(self.batch, self.seqlen_q, np.int64), np.full(self.batch, self.seqlen_k, np.int64)
        return np.diff(np.asarray(self.cu_seqlens_q, np.int64)), np.diff(np.asarray(self.cu_seqlens_k, np.int64))

    def sequence(self, b: int) -> "AttentionArgs":
        """Batch entry ``b`` of a packed call as a call of its own (batch 1, its seqlens), which the kernel
        computes with the launch's window, philox offsets and ALiBi row (flash-attn's BlockInfo)."""
        sq, sk = (int(x[b]) for x in self.seqlens())
        al = self.alibi_slopes
        return replace(self, batch=1, seqlen_q=sq, seqlen_k=sk, cu_seqlens_q=None, cu_seqlens_k=None, total_q=0,
                       total_k=0, kvcache=None, batch_offset=self.batch_offset + b, window_fill=max(self.seqlen_k, sk),
                       alibi_slopes=None if al is None else (al[b if len(al) > 1 else 0],))

    # ---- shapes ----
    @property
    def headdim_padded(self) -> int:
        """The head dim the kernel sees: zero-padded to a multiple of 8 (FlashAttnFunc.forward)."""
        return round_multiple(self.headdim, HEADDIM_MULTIPLE)

    @property
    def headdim_rounded(self) -> int:
        """mha_fwd's ``head_size_rounded``: the padded head dim up to a multiple of 32 (<= 128) or 64."""
        d = self.headdim_padded
        return round_multiple(d, 32 if d <= 128 else 64)

    @property
    def ngroups(self) -> int:
        """Query heads per kv head (1: MHA, heads: MQA); q head h reads kv head ``h // ngroups``."""
        return self.heads // self.heads_k

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def q_shape(self) -> tuple[int, ...]:
        """(batch, seqlen_q, heads, headdim), or (total_q, heads, headdim) for packed sequences."""
        return (self.total_q, self.heads, self.headdim) if self.varlen else (self.batch, self.seqlen_q, self.heads,
                                                                              self.headdim)

    @property
    def kv_shape(self) -> tuple[int, ...]:
        """k's shape."""
        return (self.total_k, self.heads_k, self.headdim) if self.varlen else (self.batch, self.seqlen_k,
                                                                                self.heads_k, self.headdim)

    @property
    def v_shape(self) -> tuple[int, ...]:
        return self.kv_shape[:-1] + (self.headdim_v,)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.q_shape[:-1] + (self.headdim_v,)

    @property
    def lse_shape(self) -> tuple[int, ...]:
        """softmax_lse: float32, (batch, heads, seqlen_q), or (heads, total_q) for packed sequences (flash-attn's
        unpadded_lse)."""
        return (self.heads, self.total_q) if self.varlen else (self.batch, self.heads, self.seqlen_q)

    @property
    def alibi_array(self) -> np.ndarray | None:
        """The ALiBi slopes as float32 (batch, heads) (one row repeated for 1-D slopes), or None."""
        if self.alibi_slopes is None:
            return None
        a = np.array(self.alibi_slopes, np.float32)
        return np.broadcast_to(a, (self.batch, self.heads)).copy()

    @property
    def seqlen_q_rounded(self) -> int:
        """mha_fwd's ``seqlen_q_rounded``: seqlen_q up to a multiple of 128 (the rows of S_dmask)."""
        return round_multiple(self.seqlen_q, 128)

    @property
    def seqlen_k_rounded(self) -> int:
        """mha_fwd's ``seqlen_k_rounded``: seqlen_k up to a multiple of 128 (the columns of S_dmask)."""
        return round_multiple(self.seqlen_k, 128)

    @property
    def s_dmask_shape(self) -> tuple[int, int, int, int]:
        """The shape of the probabilities return_attn_probs returns with dropout."""
        return (self.batch, self.heads, self.seqlen_q_rounded, self.seqlen_k_rounded)

    def keep_mask(self, rows: slice = slice(None)) -> np.ndarray | None:
        """The dropout's keep decisions of query ``rows``, bool (batch, heads, rows, seqlen_k), or None without
        dropout (flashsim.numerics.philox)."""
        if self.dropout_p == 0.0:
            return None
        from flashsim.numerics.philox import keep_mask

        seed, offset = self.rng_state
        return keep_mask(seed, offset, self.params_p_dropout_in_uint8_t, self.batch, self.heads, self.seqlen_q,
                         self.seqlen_k, rows, batch_offset=self.batch_offset)

    def alibi_bias(self, rows: slice = slice(None)) -> np.ndarray | None:
        """The ALiBi bias the kernel adds, in float64, (batch, heads, rows, seqlen_k), or None: ``-slope * |i +
        seqlen_k - seqlen_q - j|``, and with causal ``slope * j`` (mask.h: on the keys a causal row attends the
        two differ by a constant per row, so out is the same; the LSE is that of these scores. flash-attn's
        test_flash_attn.py uses ``slope * (j - seqlen_k + 1)`` for causal and compares out only)."""
        if self.alibi_slopes is None:
            return None
        sl = self.alibi_array.astype(np.float64)[:, :, None, None]
        i = np.arange(self.seqlen_q, dtype=np.int64)[rows, None]
        j = np.arange(self.seqlen_k, dtype=np.int64)[None, :]
        if self.is_causal:
            return sl * j.astype(np.float64)[None, None]
        return -sl * np.abs(i + self.seqlen_k - self.seqlen_q - j).astype(np.float64)[None, None]

    # ---- masking ----
    @property
    def is_causal(self) -> bool:
        """``params.is_causal``: the window (-1, 0)."""
        return self.window_size[0] < 0 and self.window_size[1] == 0

    @property
    def is_local(self) -> bool:
        """The kernel's ``Is_local``: some side bounded and not causal."""
        return (self.window_size[0] >= 0 or self.window_size[1] >= 0) and not self.is_causal

    def key_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi), int64 of length seqlen_q: query row i attends keys lo[i] <= j <= hi[i] (empty if lo > hi).

        The mask is aligned to the bottom-right corner: row i sits on key ``i + seqlen_k - seqlen_q``
        (flash_attn_func's docstring); bounds come from ``params_window_size`` as mask.h's
        ``apply_mask_local`` uses them. Consequence of FA2's substitution: with a bounded left side and an
        unbounded right side, the right side is seqlen_k, which masks keys when seqlen_q > seqlen_k + 1.
        ``attention_chunk`` C > 0 (FlashAttention-3, hopper/mask.h and test_util.py's construct_chunk_mask)
        keeps a row to the keys of its chunk [floor(diag / C) C, floor(diag / C) C + C) too.
        """
        sq, sk = self.seqlen_q, self.seqlen_k
        diag = np.arange(sq, dtype=np.int64) + (sk - sq)
        left, right = self.params_window_size
        lo = np.maximum(diag - left, 0) if left >= 0 else np.zeros(sq, np.int64)
        hi = np.minimum(diag + right, sk - 1) if right >= 0 else np.full(sq, sk - 1, np.int64)
        if self.attention_chunk > 0:
            start = diag // self.attention_chunk * self.attention_chunk  # floor division, negative rows too
            lo, hi = np.maximum(lo, start), np.minimum(hi, start + self.attention_chunk - 1)
        return lo, hi

    def key_mask(self, rows: slice = slice(None)) -> np.ndarray:
        """Boolean (rows, seqlen_k): True where a query row attends a key (``key_bounds`` as a matrix)."""
        lo, hi = self.key_bounds()
        j = np.arange(self.seqlen_k, dtype=np.int64)
        return (j >= lo[rows, None]) & (j <= hi[rows, None])


# ---------------------------------------------------------------------------------------------------
# inputs


class _Summary:
    """Stands for an array in error messages: its type, shape, dtype and device, never its values."""

    def __init__(self, x):
        self.text = (f"{type(x).__name__}(shape={tuple(getattr(x, 'shape', ()))}, "
                     f"dtype={_dtype_text(x)}" + (f", device={_device(x)}" if _is_torch(x) else "") + ")")

    def __repr__(self):
        return self.text


def _torch_module():
    """The torch module if the caller has imported it; flashsim never imports torch itself."""
    return sys.modules.get("torch")


def _is_torch(x) -> bool:
    torch = _torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def _dtype_text(x) -> str:
    dt = getattr(x, "dtype", None)
    return str(dt) if _is_torch(x) else getattr(dt, "name", str(dt))


def _device(x) -> str:
    return str(x.device) if _is_torch(x) else "cpu"


def _dtype_name(x, name: str) -> str:
    """'float16' or 'bfloat16' for a numpy array or torch tensor, else an ArgumentError naming ``name``."""
    if isinstance(x, np.ndarray):
        for key, dt in DTYPES.items():
            if x.dtype == dt:
                return key
        hint = (" (uint16 bit patterns are ambiguous: view them as np.float16 or ml_dtypes.bfloat16)"
                if x.dtype == np.uint16 else "")
        raise bad_argument(name, _Summary(x), f"FlashAttention supports only float16 and bfloat16{hint}")
    if _is_torch(x):
        if str(x.dtype) in _TORCH_DTYPES:
            return _TORCH_DTYPES[str(x.dtype)]
        raise bad_argument(name, _Summary(x), "FlashAttention supports only torch.float16 and torch.bfloat16")
    raise bad_argument(name, _Summary(x) if hasattr(x, "shape") else x,
                       "expected a numpy array (float16 or ml_dtypes.bfloat16) or a torch tensor")


def to_numpy(x, name: str = "x") -> np.ndarray:
    """A float16 / bfloat16 numpy array with the bits of ``x`` (a numpy array is returned as is).

    A torch tensor is detached and copied to the CPU (a copy only if it is elsewhere); bfloat16 goes
    through an int16 view because numpy has no bfloat16 of torch's: every bit pattern is kept.
    """
    dtype = _dtype_name(x, name)
    if isinstance(x, np.ndarray):
        return x
    torch = _torch_module()
    t = x.detach().to("cpu")
    if dtype == "bfloat16":
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _real(name: str, value) -> float:
    """A Python float from an int/float (numpy scalars too, bools not), else an ArgumentError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise bad_argument(name, value, "expected a real number")
    return float(value)


def _is_int(value) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def _flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise bad_argument(name, value, "expected a bool")
    return bool(value)


def _window(value) -> tuple[int, int]:
    """(left, right) as ints; any negative side means unbounded and becomes -1."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise bad_argument("window_size", value, "expected a pair (left, right) of ints, -1 for unbounded")
    out = []
    for side in value:
        if not _is_int(side) or not -_INT32_MAX - 1 <= int(side) <= _INT32_MAX:
            raise bad_argument("window_size", value, "expected a pair (left, right) of 32-bit ints, "
                                                     "-1 for unbounded")
        out.append(max(int(side), -1))
    return out[0], out[1]


def check_cu_seqlens(name: str, cu: np.ndarray, total: int, longest: int) -> None:
    """The row offsets of packed sequences (int64 (batch + 1,)): from >= 0, non-decreasing (a zero-length
    sequence repeats an offset), within the ``total`` rows of the packed tensor, no sequence longer than
    ``longest`` (max_seqlen_q or max_seqlen_k)."""
    side = name[-1]
    if cu[0] < 0:
        raise bad_argument(name, cu.tolist(), f"offsets must be >= 0, the first is {int(cu[0])}")
    steps = np.diff(cu)
    if (steps < 0).any():
        i = int(np.argmax(steps < 0))
        raise bad_argument(name, cu.tolist(), f"offsets must not decrease: [{i}] = {int(cu[i])} > [{i + 1}] = "
                                              f"{int(cu[i + 1])}")
    if cu[-1] > total:
        raise bad_argument(name, cu.tolist(), f"past the tensor: the last offset {int(cu[-1])} is beyond its "
                                              f"{total} rows ({'q' if side == 'q' else 'k and v'})")
    if steps.size and steps.max() > longest:
        i = int(np.argmax(steps))
        raise bad_argument(f"max_seqlen_{side}", longest, f"sequence {i} has {int(steps[i])} rows ({name}), more "
                                                         f"than max_seqlen_{side}")


def int32_array(name: str, x, ndim: int, shape_why: str) -> np.ndarray:
    """An int32 index argument, numpy or torch (flash-attn: \"must have dtype int32\"), of rank ``ndim``, as int64
    values."""
    if _is_torch(x):
        if str(x.dtype) != "torch.int32":
            raise bad_argument(name, _Summary(x), "must have dtype int32")
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray) or x.dtype != np.int32:
        raise bad_argument(name, _Summary(x) if hasattr(x, "shape") else x, f"expected an int32 array {shape_why}")
    if x.ndim != ndim:
        raise bad_argument(name, _Summary(x), f"expected a rank-{ndim} array {shape_why}")
    return x.astype(np.int64)


def _packed(name: str, cu, n: int | None) -> np.ndarray:
    """cu_seqlens as int64 values: int32 numpy or torch, (batch + 1,) (``n`` rows when given)."""
    cu = int32_array(name, cu, 1, "of shape (batch + 1,)")
    if cu.shape[0] < 2 or (n is not None and cu.shape[0] != n):
        raise bad_argument(name, _Summary(cu), "expected shape (batch + 1,) with batch >= 1"
                           + (f", the length of cu_seqlens_q ({n})" if n is not None else ""))
    return cu


def check_args(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
               alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
               attention_chunk=0, rng_state=None, generator=None, num_splits=1, num_sms=None, cu_seqlens_q=None,
               cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, k_new=None, v_new=None, cache_seqlens=None,
               cache_batch_idx=None, cache_leftpad=None, block_table=None, rotary_cos=None, rotary_sin=None,
               rotary_interleaved=True) -> AttentionArgs:
    """Check flash_attn_func's arguments as FA2 does and normalise them into an :class:`AttentionArgs`.

    Bad arguments raise ``ArgumentError`` (``name=<value!r>: why``). With dropout, ``rng_state=(seed, offset)``
    fixes the philox state, else ``generator`` (a :class:`PhiloxGenerator`, by default
    :data:`default_generator`) gives it and advances by ``batch * heads * 32``.

    ``num_splits``: 1 (one kernel), n > 1 (split-KV over n CTAs per query block), or 0: flash-attn's choice,
    ``flashsim.attention.dispatch.num_splits`` on ``num_sms`` SMs (default 132, an H100 SXM).
    ``cu_seqlens_q``/``cu_seqlens_k`` (int32 (batch + 1,)) with ``max_seqlen_q``/``max_seqlen_k``: packed
    sequences as flash_attn_varlen_func takes them, q (total_q, heads, headdim), k and v (total_k, heads_k, ...).
    ``k_new``, ``v_new``, ``cache_seqlens``, ``cache_batch_idx``, ``block_table``, ``rotary_cos``, ``rotary_sin``,
    ``rotary_interleaved`` (``cache_leftpad`` is not modelled): flash_attn_with_kvcache's call, k and v the
    caches (flashsim.attention.kvcache.check_cache).
    """
    kvc = None
    if any(x is not None for x in (k_new, v_new, cache_seqlens, cache_batch_idx, cache_leftpad, block_table,
                                   rotary_cos, rotary_sin)):
        from flashsim.attention.kvcache import check_cache

        if cu_seqlens_q is not None or cu_seqlens_k is not None:
            raise NotImplementedError("a KV cache with packed sequences (cu_seqlens) is not modelled")
        kvc, k, v = check_cache(q, k, v, k_new, v_new, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                cache_leftpad, block_table, rotary_interleaved)
    # the tensors: dtype, rank, then one device and dtype for all three (mha_fwd's order)
    dtype = _dtype_name(q, "q")
    for name, x in (("k", k), ("v", v)):
        if _dtype_name(x, name) != dtype:
            raise bad_argument(name, _Summary(x), f"must have the same dtype as q ({dtype})")
    packed = cu_seqlens_q is not None or cu_seqlens_k is not None
    rank, dims = (3, "(total, heads, headdim)") if packed else (4, "(batch, seqlen, heads, headdim)")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if len(x.shape) != rank:
            raise bad_argument(name, _Summary(x), f"expected rank {rank} {dims}, got rank {len(x.shape)}")
        if _device(x) != _device(q):
            raise bad_argument(name, _Summary(x), f"must be on the same device as q ({_device(q)})")
    if packed:
        cq = _packed("cu_seqlens_q", cu_seqlens_q, None)
        ck = _packed("cu_seqlens_k", cu_seqlens_k, cq.shape[0])
        for name, x in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if _is_torch(x) and _device(x) != _device(q):
                raise bad_argument(name, _Summary(x), f"must be on the same device as q ({_device(q)})")
        for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            if not _is_int(m) or not 0 <= int(m) <= _INT32_MAX:
                raise bad_argument(name, m, "expected an int >= 0 (the longest sequence)")
        total_q, total_k = int(q.shape[0]), int(k.shape[0])
        batch, seqlen_q, seqlen_k = cq.shape[0] - 1, int(max_seqlen_q), int(max_seqlen_k)
        heads, headdim, heads_k = int(q.shape[1]), int(q.shape[2]), int(k.shape[1])
        check_cu_seqlens("cu_seqlens_q", cq, total_q, seqlen_q)
        check_cu_seqlens("cu_seqlens_k", ck, total_k, seqlen_k)
        expect_kv, kv_dims = (total_k, heads_k, headdim), "(total_k, heads_k, headdim)"
        got_k, got_v = tuple(int(n) for n in k.shape), tuple(int(n) for n in v.shape[:2])
        packed_fields = dict(cu_seqlens_q=tuple(int(x) for x in cq), cu_seqlens_k=tuple(int(x) for x in ck),
                             total_q=total_q, total_k=total_k)
    else:
        for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            if m is not None:
                raise bad_argument(name, m, "only with packed sequences (cu_seqlens_q and cu_seqlens_k)")
        batch, seqlen_q, heads, headdim = (int(n) for n in q.shape)
        seqlen_k, heads_k = int(k.shape[1]), int(k.shape[2])
        expect_kv, kv_dims = (batch, seqlen_k, heads_k, headdim), "(batch, seqlen_k, heads_k, headdim)"
        got_k, got_v = tuple(int(n) for n in k.shape), tuple(int(n) for n in v.shape[:3])
        packed_fields = {}
    if batch < 1:
        raise bad_argument("q", _Summary(q), "batch size must be positive")
    if headdim < 1:
        raise bad_argument("q", _Summary(q), "head dimension must be positive")
    if got_k != expect_kv:
        raise bad_argument("k", _Summary(k), f"expected shape {kv_dims} = {expect_kv}, from q's batch and headdim "
                                             f"and k's seqlen_k and heads_k")
    headdim_v = int(v.shape[-1])
    if got_v != expect_kv[:-1] or headdim_v < 1:
        raise bad_argument("v", _Summary(v), f"expected shape {kv_dims[:-8]}headdim_v) = "
                                             f"{(*expect_kv[:-1], 'headdim_v')}, from q's batch and k's seqlen_k "
                                             f"and heads_k, headdim_v >= 1 (the same as q's but for the kernels "
                                             f"that take another)")
    if heads_k < 1:
        raise bad_argument("k", _Summary(k), "number of heads in key/value must be positive")
    if heads % heads_k:
        raise bad_argument("k", _Summary(k), f"number of heads in key/value ({heads_k}) must divide number "
                                             f"of heads in query ({heads}) (GQA/MQA)")
    padded = round_multiple(headdim, HEADDIM_MULTIPLE)
    if padded > MAX_HEADDIM:
        raise bad_argument("q", _Summary(q), f"head dimension {headdim} (padded to {padded}) is above "
                                             f"{MAX_HEADDIM}, the most FlashAttention supports")

    # the scalars
    p = _real("dropout_p", dropout_p)
    if not 0.0 <= p < 1.0:
        raise bad_argument("dropout_p", dropout_p, "expected a probability in [0, 1)")
    if softmax_scale is None:
        scale = headdim ** -0.5  # on the head dim as given, before padding (FlashAttnFunc.forward)
    else:
        scale = _real("softmax_scale", softmax_scale)
        if not _finite_log2(scale):
            raise bad_argument("softmax_scale", softmax_scale, "it and its product with log2(e) must be "
                                                               "finite as float32")
    causal = _flag("causal", causal)
    left, right = _window(window_size)
    cap = _real("softcap", softcap)
    if not _softcap_ok(cap):
        raise bad_argument("softcap", softcap, _SOFTCAP_WHY)
    deterministic = _flag("deterministic", deterministic)
    return_attn_probs = _flag("return_attn_probs", return_attn_probs)
    # FlashAttention-3's attention_chunk (flash_attn_interface.py; FA2 has none): 0 is off
    if not _is_int(attention_chunk) or not 0 <= int(attention_chunk) <= _INT32_MAX:
        raise bad_argument("attention_chunk", attention_chunk, _CHUNK_WHY)

    # refused here as well as by AttentionArgs: before the generator below hands out (and loses) a state
    if p > 0.0 and cap > 0.0:
        raise bad_argument("dropout_p", dropout_p, "softcap does not support dropout (flash-attn: \"Softcapping "
                                                   "does not support dropout for now\")")
    slopes = None
    if alibi_slopes is not None:
        slopes = _slopes(alibi_slopes, batch, heads)
        if _is_torch(alibi_slopes) and _device(alibi_slopes) != _device(q):
            raise bad_argument("alibi_slopes", _Summary(alibi_slopes), f"must be on the same device as q "
                                                                       f"({_device(q)})")
    # the philox state: given, or taken from the generator (which advances) for a call with dropout
    if rng_state is not None:
        if not (isinstance(rng_state, (tuple, list)) and _rng_ok(tuple(rng_state))):
            raise bad_argument("rng_state", rng_state, "expected (seed, offset), ints in [0, 2**64)")
        if generator is not None:
            raise bad_argument("generator", generator, "give a generator or rng_state, not both")
    if generator is not None and not isinstance(generator, PhiloxGenerator):
        raise bad_argument("generator", generator, "expected a flashsim.attention.PhiloxGenerator or None")
    if not _is_int(num_splits) or not 0 <= int(num_splits) <= MAX_SPLITS:
        raise bad_argument("num_splits", num_splits, f"expected an int in [0, {MAX_SPLITS}]: 0 (flash-attn's "
                                                     "heuristic), 1 (no split) or the number of splits")
    if num_sms is not None and (not _is_int(num_sms) or int(num_sms) < 1):
        raise bad_argument("num_sms", num_sms, "expected None or a positive int (the GPU's SMs)")
    if int(num_splits) > 1 and p > 0.0:
        raise bad_argument("num_splits", num_splits, "split-KV has no dropout (flash-attn: \"SplitKV is not "
                                                     "implemented for dropout\")")
    if kvc is not None and p > 0.0:
        raise bad_argument("dropout_p", dropout_p, "flash_attn_with_kvcache has no dropout")
    if int(num_splits) != 1 and packed:
        raise NotImplementedError("split-KV of packed sequences (num_splits with cu_seqlens) is not modelled")
    state = None
    if p > 0.0:
        state = (tuple(int(x) for x in rng_state) if rng_state is not None
                 else (generator or default_generator).philox_state(batch * heads * 32))

    # mha_fwd's window normalisation
    if left >= seqlen_k:
        left = -1
    if right >= seqlen_k:
        right = -1
    if seqlen_q == 1 and slopes is None:  # "causal=true is the same as causal=false in this case"
        causal = False
    if causal:
        right = 0
    if kvc is not None:
        kvc.check_rotary_rows(seqlen_q, causal or left >= 0 or right >= 0)
    splits = int(num_splits)
    if splits == 0:
        from flashsim.attention.dispatch import num_splits as heuristic

        splits = heuristic(batch, heads, heads_k, seqlen_q, seqlen_k, round_multiple(headdim, HEADDIM_MULTIPLE),
                           window=(left, right), dropout_p=p, alibi=slopes is not None, num_sms=num_sms)
    return AttentionArgs(batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads=heads, heads_k=heads_k,
                         headdim=headdim, dtype=dtype, softmax_scale=float(scale), window_size=(left, right),
                         softcap=cap, deterministic=deterministic, device=_device(q),
                         attention_chunk=int(attention_chunk), headdim_v=headdim_v, dropout_p=p, rng_state=state,
                         alibi_slopes=slopes, return_softmax=bool(return_attn_probs and p > 0.0), num_splits=splits,
                         kvcache=kvc, **packed_fields)


#: the generator a call with dropout uses when given neither ``generator`` nor ``rng_state``
default_generator = PhiloxGenerator()
