"""What a traced kernel records: the tag table and, per kernel and tag, the registers each lane writes.

A traced step ends with ``FS_TRACE(tag, nregs, ...)`` in the .cu file (gpu/kernels/trace.cuh) and with
``rec.event(tag, ...)`` at the same point of the twin (flashsim/kernels/). Both record, for every lane of
the warp, the registers listed here in this order, as 32-bit patterns (a 16-bit value is zero-extended,
a pair packed by ``cvt_pair`` or an mma f16 fragment is one 32-bit register with the lower column in the
low half). The register sets are chosen so that every value a later step reads is recorded by the last
step that wrote it: replacing the twin's registers by a recording at every event up to one event is a
complete restart point (``flashsim.trace.replay``).

The tag table is the one ``trace.cuh`` numbers (``FS_TAG_<name>``); ``tests/test_trace_spec.py`` checks
the two agree.
"""

from __future__ import annotations

from flashsim.errors import bad_argument

#: tag ids are the indices; gpu/kernels/trace.cuh has the same enum (FS_TAG_<name> = index)
TAGS: tuple[str, ...] = (
    "empty", "init_ml", "load_q", "load_k", "load_v", "load_kv", "mma_qk", "store_s", "mask", "softmax",
    "mma_pv", "store_o", "update_o", "next_ml", "normalize",
)
TAG_ID = {t: i for i, t in enumerate(TAGS)}

#: kernels that can be traced (v6 shares v5's program)
KERNELS = ("v5", "v6", "kernel1", "fa2")


def _acc(name: str, mt: int, nt: int) -> list[str]:
    """An f32 accumulator ``name[m][n][e]`` (mt m-tiles, nt n-tiles, 4 registers each)."""
    if mt == 1:
        return [f"{name}[{n}][{e}]" for n in range(nt) for e in range(4)]
    return [f"{name}[{m}][{n}][{e}]" for m in range(mt) for n in range(nt) for e in range(4)]


def _pairs(name: str, *dims: int) -> list[str]:
    out = [name]
    for d in dims:
        out = [f"{x}[{i}]" for x in out for i in range(d)]
    return out


def registers(kernel: str, tag: str, headdim: int = 128) -> list[str]:
    """The register names lane by lane that ``kernel`` records at ``tag`` (empty for a tag without values).

    ``headdim`` is the instance's head dim (fa2: 64 or 128; kernel1: 128; v5/v6: any multiple of 16)."""
    if tag not in TAG_ID:
        raise bad_argument("tag", tag, f"expected one of {TAGS}")
    if kernel in ("v5", "v6"):
        return {
            "mma_qk": _pairs("rc", 4),
            "softmax": _pairs("md_m", 8) + _pairs("md_d", 8) + _pairs("p", 8),
            "mma_pv": _pairs("rc", 4),
            "update_o": _pairs("o", 8),
            "next_ml": ["new_m", "new_l"],
        }.get(tag, [])
    if kernel == "kernel1":
        return {
            "load_q": _pairs("qf", 8, 4),
            "mma_qk": _acc("s", 1, 8),
            "softmax": _pairs("m", 2) + _pairs("l", 2) + _acc("s", 1, 8) + _acc("o", 1, 16) + _pairs("pf", 4, 4),
            "mma_pv": _acc("o", 1, 16),
            "normalize": _pairs("l", 2) + _acc("o", 1, 16),
        }.get(tag, [])
    if kernel == "fa2":
        if headdim not in (64, 128):
            raise bad_argument("headdim", headdim, "fa2 instances have head dim 64 or 128")
        nt = {64: 8, 128: 4}[headdim]    # kBlockN / 8
        dt = headdim // 8
        return {
            "mma_qk": _acc("acc_s", 2, nt),
            "mask": _acc("acc_s", 2, nt),
            "softmax": _pairs("row_max", 2, 2) + _pairs("row_sum", 2, 2) + _acc("acc_s", 2, nt) + _acc("acc_o", 2, dt),
            "mma_pv": _acc("acc_o", 2, dt),
            "normalize": _pairs("lse", 2, 2) + _acc("acc_o", 2, dt),
        }.get(tag, [])
    raise bad_argument("kernel", kernel, f"expected one of {KERNELS}")


#: how a register's 32 bits read as numbers: 'f32', 'f16x2'/'bf16x2' (a packed pair), 'f16' (low half)
def register_format(kernel: str, tag: str, name: str, dtype: str = "float16") -> str:
    half = "bf16" if dtype == "bfloat16" else "f16"
    base = name.split("[")[0]
    if kernel in ("v5", "v6"):
        if base == "rc":
            return "f16x2"
        if base in ("p", "o"):
            return "f16"
        return "f32"
    if base in ("qf", "pf"):
        return f"{half}x2"
    return "f32"


def program(kernel: str, headdim: int, steps: int) -> list[str]:
    """The tags one warp records, in order, for a CTA that runs ``steps`` KV steps (fa2: the longest
    path, with the next-K prefetch in every step). Sizes the GPU trace buffers."""
    if kernel in ("v5", "v6"):
        step = ["load_kv", "mma_qk", "store_s", "softmax"] + ["mma_pv", "store_o", "update_o"] * (headdim // 16)
        return ["init_ml", "load_q"] + (step + ["next_ml"]) * steps
    if kernel == "kernel1":
        return ["load_q"] + ["load_k", "mma_qk", "softmax", "load_v", "mma_pv"] * steps + ["normalize", "store_o"]
    if kernel == "fa2":
        return (["load_q", "load_k"] + ["load_v", "mma_qk", "mask", "load_k", "softmax", "mma_pv"] * steps
                + ["normalize", "store_o"])
    raise bad_argument("kernel", kernel, f"expected one of {KERNELS}")


def event_words(kernel: str, tag: str, headdim: int = 128) -> int:
    """32-bit words one event takes in a GPU trace buffer: 2 header words + 32 per register."""
    return 2 + 32 * len(registers(kernel, tag, headdim))


def warp_words(kernel: str, headdim: int, steps: int) -> int:
    """Buffer words one recorded warp needs for ``steps`` KV steps (2 words of counters included)."""
    return 2 + sum(event_words(kernel, t, headdim) for t in program(kernel, headdim, steps))


def instance(kernel: str, args) -> tuple[int, int, int]:
    """(head dim of the instance, most KV steps of a CTA, CTAs in the grid) of a call (``AttentionArgs``)."""
    if kernel == "fa2":
        from flashsim.kernels import fa2

        pb = fa2.problem_from_args(args)
        return pb.headdim, -(-args.seqlen_k // pb.block_n), pb.m_blocks * args.heads * args.batch
    if kernel == "kernel1":
        from flashsim.kernels import kernel1

        return kernel1.D_HEAD, args.seqlen_k // kernel1.B_C, (args.seqlen_q // kernel1.B_R) * args.heads * args.batch
    if kernel in ("v5", "v6"):
        from flashsim.kernels import fa_v5

        return (args.headdim, args.seqlen_k // fa_v5.KV_TILE,
                (args.seqlen_q // fa_v5.ROWS_PER_CTA) * args.heads * args.batch)
    raise bad_argument("kernel", kernel, f"expected one of {KERNELS}")
