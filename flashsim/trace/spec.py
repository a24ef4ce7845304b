"""What a traced kernel records: the tag table and, per kernel and tag, the registers each lane writes.

A traced step ends with ``FS_TRACE(tag, nregs, ...)`` in the .cu file (gpu/kernels/trace.cuh) and with
``rec.event(tag, ...)`` at the same point of the twin (flashsim/kernels/). Both record, for every lane of
the warp, the registers listed here in this order, as 32-bit patterns (a 16-bit value is zero-extended,
a pair packed by ``cvt_pair`` or an mma f16 fragment is one 32-bit register with the lower column in the
low half). The register sets are chosen so that every value a later step reads is recorded by the last
step that wrote it: replacing the twin's registers by a recording at every event up to one event is a
complete restart point (``flashsim.session.force``).

The tag table is the one ``trace.cuh`` numbers (``FS_TAG_<name>``); ``tests/test_trace.py`` checks
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

#: the kernels that can be traced, by name: flashsim.kernels.spec registers every spec with ``traceable`` here
#: (``register_traced``) as it registers the spec, so this layer needs nothing of the kernel layer; each
#: entry provides ``instance(headdim)``, ``instance_for(args)`` and ``twin_module`` (trace_registers,
#: trace_program, REGISTER_FORMATS)
_TRACED: dict = {}


def register_traced(name: str, kernel) -> None:
    """Make ``kernel`` (a flashsim.kernels.spec.KernelSpec) traceable under ``name``."""
    _TRACED[name] = kernel


def __getattr__(name: str):
    if name == "KERNELS":  # the traceable kernels' names, in registration order
        return tuple(_TRACED)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def array_names(name: str, *dims: int) -> list[str]:
    """The registers of a C array ``name[d0][d1]...`` in C order, each named by its element's expression
    (``array_names("acc_s", 1, 2, 4)`` is acc_s[0][0][0] ... acc_s[0][1][3]). The rule every twin follows:
    a recorded register is named by the C expression of its element in the .cu's array, with every
    declared dimension, one of size 1 included, so a kernel whose tiles give a warp one m-tile records
    ``acc_s[0][n][e]``; FS_PUT records the array in that same C order."""
    out = [name]
    for d in dims:
        out = [f"{x}[{i}]" for x in out for i in range(d)]
    return out


def _traced(kernel: str):
    spec = _TRACED.get(kernel) if isinstance(kernel, str) else None
    if spec is None:
        raise bad_argument("kernel", kernel, f"expected one of the traced kernels {tuple(_TRACED)} (registered by "
                                             "flashsim.kernels)")
    return spec


def registers(kernel: str, tag: str, headdim: int = 128) -> list[str]:
    """The register names lane by lane that ``kernel`` records at ``tag`` (empty for a tag without values).

    ``headdim`` is the instance's head dim (fa2: 64 or 128; kernel1: 128; v5/v6: any multiple of 16)."""
    if tag not in TAG_ID:
        raise bad_argument("tag", tag, f"expected one of {TAGS}")
    spec = _traced(kernel)
    return spec.twin_module.trace_registers(spec.instance(headdim), tag)


def register_format(kernel: str, tag: str, name: str, dtype: str = "float16") -> str:
    """How a register's 32 bits read as numbers: 'f32', 'f16x2'/'bf16x2' (a packed pair), 'f16' (low half)."""
    half = "bf16" if dtype == "bfloat16" else "f16"
    fmt = _traced(kernel).twin_module.REGISTER_FORMATS.get(name.split("[")[0], "f32")
    return fmt.format(half=half)


def program(kernel: str, headdim: int, steps: int) -> list[str]:
    """The tags one warp records, in order, for a CTA that runs ``steps`` KV steps (fa2: the longest
    path, with the next-K prefetch in every step). Sizes the GPU trace buffers."""
    spec = _traced(kernel)
    return spec.twin_module.trace_program(spec.instance(headdim), steps)


def event_words(kernel: str, tag: str, headdim: int = 128) -> int:
    """32-bit words one event takes in a GPU trace buffer: 2 header words + 32 per register."""
    return 2 + 32 * len(registers(kernel, tag, headdim))


def warp_words(kernel: str, headdim: int, steps: int) -> int:
    """Buffer words one recorded warp needs for ``steps`` KV steps (2 words of counters included)."""
    return 2 + sum(event_words(kernel, t, headdim) for t in program(kernel, headdim, steps))


def instance(kernel: str, args) -> tuple[int, int, int, int]:
    """(head dim of the instance, most KV steps of a CTA, CTAs in the grid, warps of a CTA) of a call
    (``AttentionArgs``)."""
    inst = _traced(kernel).instance_for(args)
    return inst.headdim, inst.kv_blocks(args), inst.ctas(args), inst.warps
