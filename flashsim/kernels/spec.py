"""Every FlashAttention kernel flashsim models, described once: ``SPECS`` (name -> frozen :class:`KernelSpec`).

A kernel is a CUDA source in gpu/kernels with one ``extern "C"`` entry point per compiled instance and
element type; the CTA it launches (warps, and per instance the tiles: block_m query rows per CTA, block_n
keys per KV step); its shared memory as CuTe layouts (flashsim.layout), one buffer after the other as the
.cu carves its dynamic smem; what of flash_attn_func it models; how NVRTC builds it; and the Python twin
that restates its arithmetic. Every consumer (flash_attn_func, the launches on the GPU and in the SASS
interpreter, the random problems, the trace tables, ``flashsim check``) reads this table: a kernel or a
tile configuration is added by registering one more spec, never by a branch on a kernel's name.

The twin module a spec names (``twin``) provides, as module-level functions (``kernel`` names the spec):

- ``check(q, k, v, softmax_scale=None, kernel=..., **kw)``: flash_attn_func's checks, the features the
  kernel lacks (``spec.check_supported``) and its preconditions; returns the ``AttentionArgs``;
- ``run(q, k, v, softmax_scale=None, *, kernel=..., rec, progress, threads, workers, scheduler, client,
  **kw)``: the twin with flash_attn_func's conventions: (out, lse) for a kernel that writes LSE, else out;
- ``launch_args(inst, args, q, k, v, xp)``: the kernel's parameter tuple on the array module ``xp`` (cupy,
  or flashsim.cuda for the interpreter), ``fetch()`` giving (out, lse or None) and ``reset()`` (or None:
  clears outputs the kernel accumulates into);
- ``trace_registers(inst, tag)``, ``trace_program(inst, steps)`` and ``REGISTER_FORMATS``: what its FS_TRACE
  points record (:mod:`flashsim.trace.spec`);
- ``tile_steps(inst, args)`` and ``memory(inst, args, workers)``: the work and the bytes of a twin run.
"""

from __future__ import annotations

import importlib
import math
import re
import string
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Callable

from flashsim.attention.dispatch import H100_SMS
from flashsim.errors import bad_argument
from flashsim.trace import spec as trace_spec
from flashsim.trace.record import MAX_WARPS

__all__ = ["DTYPE_SUFFIX", "EXT_FEATURES", "FEATURES", "SMEM_LIMIT", "SPECS", "Domain", "Instance", "KernelSpec", "SmemBuffer",
           "Tiles", "fa2_smem_layout", "get", "register"]

#: the element types a kernel may take, and the suffix its entry points give them
DTYPE_SUFFIX = {"float16": "f16", "bfloat16": "bf16"}
#: what a flash_attn_func call may ask for beyond plain attention: the words ``unsupported`` names it with,
#: and whether a call (AttentionArgs) asks for it
FEATURES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "masks": ("causal or local masks", lambda a: a.is_causal or a.is_local),
    "softcap": ("softcap", lambda a: a.softcap > 0),
    "gqa": ("GQA/MQA", lambda a: a.heads != a.heads_k),
    "chunk": ("chunked attention (attention_chunk)", lambda a: a.attention_chunk > 0),
    "hdim_v": ("a V head dim other than Q's", lambda a: a.headdim_v != a.headdim),
    "dropout": ("dropout", lambda a: a.dropout_p > 0),
    "alibi": ("ALiBi (alibi_slopes)", lambda a: a.alibi_slopes is not None),
    "varlen": ("packed sequences (cu_seqlens)", lambda a: a.varlen),
    "splitkv": ("split-KV (num_splits > 1)", lambda a: a.num_splits > 1),
    "kvcache": ("a KV cache (flash_attn_with_kvcache)", lambda a: a.kvcache is not None),
    "kvappend": ("appending to a KV cache, cache_batch_idx or a paged KV cache",
                 lambda a: a.kvcache is not None and a.kvcache.forces_split_kernel),
}
#: the features a kernel runs on the second build of its instances (``KernelSpec.ext_entry``)
EXT_FEATURES = frozenset({"dropout", "alibi", "varlen", "kvcache"})
#: sm_90: the most shared memory one CTA may have (227 KiB, after opting in above the 48 KiB default)
SMEM_LIMIT = 227 * 1024
#: a persistent kernel's CTAs: the SMs of an H100 SXM (and H200); the bits do not depend on it
PERSISTENT_CTAS = H100_SMS
#: the accumulator precisions flashsim.attention.attention_lowp models
ACCUMULATORS = ("f32", "f16")

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_SOURCE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\.cu$")
_ENTRY_FIELDS = {"hdim", "dtype"}


@dataclass(frozen=True)
class Tiles:
    """One compiled instance: ``block_m`` query rows per CTA and ``block_n`` keys per KV step at head dim
    ``headdim`` (the instance's kHeadDim), or, with ``headdim`` None, for every head dim a kernel that takes
    d as a launch parameter accepts.

    ``fma_rescale``: what nvcc made of the online softmax's ``l *= c; l = l + P[0]`` in this instance's SASS
    (with --use_fast_math it may contract): True, one ``FFMA.FTZ l, c, l, P0``; False, ``FMUL.FTZ l, c, l``
    then ``FADD.FTZ l, P0, l`` (the multiply stays in the rescale's branch, the add in the joined block).
    The twins round as the instance does.

    ``headdim_v``: an instance whose V (and O) head dim differs from Q's and K's (fa4h's qk 192 / v 128).

    ``warps``: the instance's warps per CTA when not the kernel's (``KernelSpec.warps``): flash-attn's traits
    at head dim 192 without dropout have 8.

    ``dropout``: None, the instance runs every call at its head dim; True or False, only the calls with (or
    without) dropout, flash-attn's DROPOUT_SWITCH choosing between two traits at one head dim (the kernel then has
    one of each). A dropout instance runs only the ext build (``KernelSpec.ext_entry``), and its entry points
    carry ``_dropout`` after the head dim."""

    headdim: int | None
    block_m: int
    block_n: int
    fma_rescale: bool = True
    headdim_v: int | None = None  # V's and O's head dim when it is not ``headdim`` (a kernel with "hdim_v")
    warps: int | None = None
    dropout: bool | None = None


@dataclass(frozen=True)
class SmemBuffer:
    """One buffer of a kernel's dynamic shared memory: ``copies`` consecutive tiles (one per warp for a
    warp's private tile) of ``layout``, which maps a (row, column) coordinate to the element offset within
    one tile, of ``elem_bytes``-byte elements."""

    name: str
    layout: Any
    elem_bytes: int
    copies: int = 1

    @property
    def tile_elements(self) -> int:
        from flashsim.layout import cosize

        return int(cosize(self.layout))

    @property
    def bytes(self) -> int:
        return self.copies * self.tile_elements * self.elem_bytes


@dataclass(frozen=True)
class Domain:
    """The random problems of ``flashsim.kernels.problems.draw_params``: the values each drawn parameter
    takes. ``heads``: the kv heads, and with ``group`` (a kernel with GQA/MQA) the query heads per kv head
    (drawn after); without it heads == heads_k, drawn as 'heads'. ``seqlen_k`` None: seqlen_k == seqlen_q,
    drawn as 'seqlen'. Masks and softcap are drawn for a kernel that models them; a parameter with one
    value is not drawn. ``attention_chunk``: the chunk lengths drawn for a kernel with chunked attention
    (0: off), None for every other kernel."""

    heads: tuple[int, ...]
    seqlen_q: tuple[int, ...]
    headdim: tuple[int, ...]
    group: tuple[int, ...] | None = None
    seqlen_k: tuple[int, ...] | None = None
    attention_chunk: tuple[int, ...] | None = None


@dataclass(frozen=True)
class KernelSpec:
    """A FlashAttention kernel: the CUDA source and its entry points, the CTA and its tiles, its shared
    memory, what it models and its twin (the module docstring lists what the twin module provides).

    - ``entry``: the ``extern "C"`` name of an instance, a format of ``{hdim}`` (the instance's head dim)
      and ``{dtype}`` (f16 or bf16);
    - ``pad_headdim``: inputs are zero-padded up to the smallest instance that holds the call's head dim
      (FA2's predicated copy); else the call's head dim must be an instance's (or, for a ``Tiles`` with
      headdim None, a multiple of 16, passed to the kernel);
    - ``smem(inst)``: the instance's dynamic smem buffers, in the order the .cu carves them;
    - ``features``: of :data:`FEATURES`, what the kernel models (a call asking for another is refused with
      NotImplementedError naming it, as is an element type not in ``dtypes``); a kernel with "chunk" takes
      ``attention_chunk`` as its last launch parameter and its ``domain`` draws it;
    - ``acc``: the precision of its accumulators (flash-attn's acceptance rule compares against
      ``attention_lowp`` at it);
    - ``options``: NVRTC options of its build (cupy appends -ftz=true after any of them, so C++ float
      arithmetic is flushed to zero whatever they say);
    - ``progress_unit``: what the twin's ``progress(done, total)`` counts;
    - ``traceable``: its source has FS_TRACE points (gpu/kernels/trace.cuh) and its twin records them;
    - ``config_of``: the kernel this spec is another tile configuration of (same source and twin);
      ``flashsim check`` runs one configuration per kernel unless named;
    - ``arch``: the NVRTC target, sm_90 or sm_90a (wgmma, setmaxnreg);
    - ``row_warps``: the warps that own query rows (16 each per m-tile), when not every warp does (a
      warp-specialised kernel's producer warps own none);
    - ``persistent``: the grid is one CTA per SM (:data:`PERSISTENT_CTAS`, or one per work tile when there are
      fewer), each walking work tiles of (m_block, head, batch) as its kernel's header says;
    - ``ext_entry``: for a kernel with features of :data:`EXT_FEATURES` (dropout, ALiBi), the entry point format
      of the instances' second build, which takes them as launch parameters (fa2.cu's kExt); a call asking
      for one of them runs it, every other call the plain entry point;
    - ``combine_entry``: a split-KV kernel (with "splitkv": grid (query blocks, num_splits, batch * heads)) has
      a second kernel that merges the splits (flash-attn's combine kernel), launched after it when
      num_splits > 1.
    """

    name: str
    doc: str
    source: str
    entry: str
    twin: str
    tiles: tuple[Tiles, ...]
    smem: Callable[["Instance"], tuple[SmemBuffer, ...]]
    domain: Domain
    warps: int = 4
    threads: int = 128
    pad_headdim: bool = False
    dtypes: tuple[str, ...] = ("float16", "bfloat16")
    features: frozenset[str] = frozenset()
    writes_lse: bool = False
    acc: str = "f32"
    options: tuple[str, ...] = ()
    progress_unit: str = "CTA"
    traceable: bool = True
    config_of: str | None = None
    arch: str = "sm_90"
    row_warps: int | None = None
    persistent: bool = False
    ext_entry: str | None = None
    combine_entry: str | None = None

    def __post_init__(self) -> None:
        from flashsim.kernels.sources import check_options

        def fail(name, value, why):
            raise bad_argument(name, value, f"kernel {self.name!r}: {why}")

        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise bad_argument("name", self.name, "expected a lower-case identifier, e.g. 'fa2'")
        if not isinstance(self.source, str) or not _SOURCE_RE.match(self.source):
            fail("source", self.source, "expected a bare .cu file name in gpu/kernels, e.g. 'fa2.cu'")
        if not isinstance(self.warps, int) or not 0 < self.warps <= MAX_WARPS:
            fail("warps", self.warps, f"expected 1..{MAX_WARPS} warps per CTA (1024 threads)")
        if self.threads != 32 * self.warps:
            fail("threads", self.threads, f"expected 32 * warps = {32 * self.warps} threads per CTA")
        if self.arch not in ("sm_90", "sm_90a"):
            fail("arch", self.arch, "expected 'sm_90' or 'sm_90a'")
        if self.row_warps is not None and (not isinstance(self.row_warps, int) or not 0 < self.row_warps <= self.warps):
            fail("row_warps", self.row_warps, f"expected None or 1..warps ({self.warps})")
        if any(t.headdim_v is not None for t in self.tiles) != ("hdim_v" in self.features):
            fail("features", self.features, "an instance with its own headdim_v exactly when the kernel models "
                                            "'hdim_v'")
        if not self.dtypes or any(d not in DTYPE_SUFFIX for d in self.dtypes):
            fail("dtypes", self.dtypes, f"expected element types from {tuple(DTYPE_SUFFIX)}")
        unknown = set(self.features) - set(FEATURES)
        if not isinstance(self.features, frozenset) or unknown:
            fail("features", self.features, f"expected a frozenset of {tuple(FEATURES)}")
        if (self.ext_entry is not None) != bool(EXT_FEATURES & set(self.features)):
            fail("ext_entry", self.ext_entry, f"an entry point of the second build exactly when the kernel models "
                                              f"one of {sorted(EXT_FEATURES)}")
        if (self.combine_entry is not None) != ("splitkv" in self.features or "kvappend" in self.features):
            fail("combine_entry", self.combine_entry, "a combine kernel exactly when the kernel is a split-KV kernel "
                                                      "('splitkv' or 'kvappend')")
        if self.acc not in ACCUMULATORS:
            fail("acc", self.acc, f"expected one of {ACCUMULATORS}")
        check_options(self.options)
        self._check_tiles()
        self._check_entry()
        self._check_domain()
        for t in self.tiles:
            if t.headdim is not None:
                b = self.instance(t.headdim).smem_bytes
                if b > SMEM_LIMIT:
                    fail("smem", b, f"instance hdim {t.headdim} needs more shared memory than an sm_90 CTA "
                                    f"has ({SMEM_LIMIT} bytes)")

    @property
    def split_kernel(self) -> bool:
        """A split-KV kernel (fa2.cu's kSplit): grid (query blocks, num_splits, batch * heads), a combine kernel."""
        return self.combine_entry is not None

    @property
    def compute_warps(self) -> int:
        """The warps that own query rows (``row_warps``, else every warp) of an instance with the kernel's warps."""
        return self.row_warps or self.warps

    def _check_tiles(self) -> None:
        if not isinstance(self.tiles, tuple) or not self.tiles or not all(isinstance(t, Tiles) for t in self.tiles):
            raise bad_argument("tiles", self.tiles, f"kernel {self.name!r}: expected a non-empty tuple of Tiles")
        dims = [t.headdim for t in self.tiles]
        for d in set(dims):
            choice = sorted(str(t.dropout) for t in self.tiles if t.headdim == d)
            if choice not in (["None"], ["False", "True"]) or (d is None and len(dims) > 1):
                raise bad_argument("tiles", dims, f"kernel {self.name!r}: one Tiles per head dim (or one with "
                                                  "dropout=True and one with dropout=False), and a Tiles for every "
                                                  "head dim (headdim None) alone")
        for t in self.tiles:
            at = f"kernel {self.name!r} at head dim {t.headdim}"
            if t.warps is not None and (not isinstance(t.warps, int) or not 0 < t.warps <= MAX_WARPS
                                        or self.row_warps is not None):
                raise bad_argument("warps", t.warps, f"{at}: expected None or 1..{MAX_WARPS} warps (1024 threads; "
                                                     "of a kernel whose every warp owns query rows)")
            if t.dropout is not None and (t.dropout not in (True, False) or self.ext_entry is None
                                          or "dropout" not in self.features):
                raise bad_argument("dropout", t.dropout, f"{at}: an instance for the calls with or without dropout "
                                                         "(True or False) needs a kernel that models dropout")
            rows = 16 * (self.row_warps or t.warps or self.warps)
            if t.headdim is not None and (not isinstance(t.headdim, int) or t.headdim < 16 or t.headdim % 16):
                raise bad_argument("headdim", t.headdim, f"{at}: expected a positive multiple of 16 (mma k slices)")
            if not isinstance(t.block_m, int) or t.block_m < rows or t.block_m % rows:
                raise bad_argument("block_m", t.block_m, f"{at}: expected a multiple of 16 * warps = {rows} (each "
                                                         "warp owns 16-row m-tiles)")
            if t.headdim_v is not None and (not isinstance(t.headdim_v, int) or t.headdim_v < 16 or t.headdim_v % 16
                                            or t.headdim is None):
                raise bad_argument("headdim_v", t.headdim_v, f"{at}: expected a positive multiple of 16 of an "
                                                             "instance with a fixed head dim")
            if not isinstance(t.block_n, int) or t.block_n < 16 or t.block_n % 16:
                raise bad_argument("block_n", t.block_n, f"{at}: expected a positive multiple of 16 (16-key "
                                                         "slices of P V)")

    def _check_entry(self) -> None:
        for name, entry in (("ext_entry", self.ext_entry), ("entry", self.entry), ("combine_entry", self.combine_entry)):
            if entry is not None:
                self._check_entry_format(name, entry)

    def _check_entry_format(self, what: str, entry: str) -> None:
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(entry) if f is not None}
        except (ValueError, TypeError):
            fields = None
        if not isinstance(entry, str) or fields is None or fields - _ENTRY_FIELDS:
            raise bad_argument(what, entry, f"kernel {self.name!r}: expected a format of {{hdim}} and "
                                            "{dtype}, e.g. 'fa2_hdim{hdim}_{dtype}'")
        if len(self.tiles) > 1 and "hdim" not in fields:
            raise bad_argument(what, entry, f"kernel {self.name!r} has {len(self.tiles)} instances: "
                                                    "the entry point must name {hdim}")
        if self.tiles[0].headdim is None and "hdim" in fields:
            raise bad_argument(what, entry, f"kernel {self.name!r} takes the head dim as a parameter: "
                                                    "its entry point cannot name {hdim}")
        if len(self.dtypes) > 1 and "dtype" not in fields:
            raise bad_argument(what, entry, f"kernel {self.name!r} has {len(self.dtypes)} element "
                                                    "types: the entry point must name {dtype}")
        names = [entry.format(hdim=_entry_hdim(t.headdim, t.dropout), dtype=DTYPE_SUFFIX[d]) for t in self.tiles
                 for d in self.dtypes]
        if any(not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) for n in names):
            raise bad_argument(what, entry, f"kernel {self.name!r}: entry points {names} are not C names")

    def _check_domain(self) -> None:
        d = self.domain
        if not isinstance(d, Domain):
            raise bad_argument("domain", d, f"kernel {self.name!r}: expected a Domain")
        if (d.group is not None) != ("gqa" in self.features):
            raise bad_argument("domain", d, f"kernel {self.name!r}: draw a GQA group (group=...) exactly when "
                                            "the kernel models GQA/MQA")
        if (d.attention_chunk is not None) != ("chunk" in self.features) or not all(
                isinstance(c, int) and c >= 0 for c in d.attention_chunk or ()):
            raise bad_argument("domain", d, f"kernel {self.name!r}: draw chunk lengths >= 0 (attention_chunk=...) "
                                            "exactly when the kernel models chunked attention")
        for hd in d.headdim:
            try:
                self.instance_for_headdim(hd)
            except ValueError as exc:
                raise bad_argument("domain", d, f"kernel {self.name!r}: head dim {hd} of the domain runs on no "
                                                f"instance ({exc})") from None

    # ------------------------------------------------------------------------------------------ the twin

    @property
    def twin_module(self):
        """The twin (flashsim.kernels.fa2, kernel1 or fa_v5): see the module docstring for what it provides."""
        return importlib.import_module(self.twin)

    def check(self, q, k, v, softmax_scale=None, **kw):
        """The twin's check: flash_attn_func's checks, the features and the kernel's preconditions."""
        return self.twin_module.check(q, k, v, softmax_scale, kernel=self.name, **kw)

    # ------------------------------------------------------------------------------------------ features

    def unsupported(self, args) -> list[str]:
        """The features of a call (``AttentionArgs``) that this kernel does not model, in FEATURES order
        and then the element type."""
        out = [words for key, (words, asks) in FEATURES.items() if key not in self.features and asks(args)]
        if args.dtype not in self.dtypes:
            out.append(DTYPE_SUFFIX[args.dtype])
        return out

    def check_supported(self, args) -> None:
        """NotImplementedError naming every feature of the call that this kernel does not model."""
        missing = self.unsupported(args)
        if missing:
            raise NotImplementedError(f"kernel {self.name!r} does not model {', '.join(missing)}")

    # ------------------------------------------------------------------------------------------ instances

    @property
    def headdims(self) -> tuple[int, ...]:
        """The head dims of the compiled instances (empty for a kernel that takes d as a parameter)."""
        return tuple(sorted({t.headdim for t in self.tiles if t.headdim is not None}))

    @property
    def instances(self) -> tuple["Instance", ...]:
        """Every compiled instance (by head dim, the one without dropout first); none for a kernel that takes d
        as a parameter."""
        return tuple(self.instance(d, dropout) for d in self.headdims for dropout in (False, True)
                     if dropout is False or any(t.headdim == d and t.dropout for t in self.tiles))

    def instance(self, headdim: int, dropout: bool = False) -> "Instance":
        """The instance of head dim ``headdim`` that runs the calls with (``dropout``) or without dropout (of a
        kernel taking d as a parameter: any multiple of 16 whose smem fits a CTA)."""
        for t in self.tiles:
            if t.headdim is None:
                if not isinstance(headdim, int) or headdim < 16 or headdim % 16:
                    raise bad_argument("headdim", headdim, f"kernel {self.name!r} needs headdim % 16 == 0 (it "
                                                           "steps through d in 16-wide mma slices)")
                inst = Instance(self, headdim, t.block_m, t.block_n, t.fma_rescale, headdim, t.warps or self.warps)
                if inst.smem_bytes > SMEM_LIMIT:
                    raise bad_argument("headdim", headdim, f"kernel {self.name!r} at this head dim needs "
                                                           f"{inst.smem_bytes} bytes of shared memory, more than "
                                                           f"an sm_90 CTA has ({SMEM_LIMIT})")
                return inst
            if t.headdim == headdim and t.dropout in (None, bool(dropout)):
                return Instance(self, headdim, t.block_m, t.block_n, t.fma_rescale, t.headdim_v or headdim,
                                t.warps or self.warps, t.dropout)
        raise bad_argument("headdim", headdim, f"kernel {self.name!r} instances have head dim "
                                               f"{' or '.join(map(str, self.headdims))}")

    def instance_for_headdim(self, headdim: int, dropout: bool = False) -> "Instance":
        """The instance that runs a call of head dim ``headdim`` (with or without ``dropout``): for a padding
        kernel the smallest instance that holds it padded to a multiple of 8 (as flash_attn_func pads it), else
        its own."""
        fixed = self.headdims
        if self.pad_headdim:
            headdim = -(-headdim // 8) * 8
            for h in fixed:
                if headdim <= h:
                    return self.instance(h, dropout)
            raise bad_argument("headdim", headdim, f"kernel {self.name!r} is built for head dims up to {fixed[-1]} "
                                                   f"(instances {' and '.join(map(str, fixed))})")
        if fixed and headdim not in fixed:
            raise bad_argument("headdim", headdim, f"kernel {self.name!r} is built for headdim "
                                                   f"{' or '.join(map(str, fixed))} only")
        return self.instance(headdim, dropout)

    def instance_for(self, args) -> "Instance":
        """The instance that runs a call (``AttentionArgs``): by Q's head dim and whether it asks for dropout (V's
        head dim must be the instance's)."""
        inst = self.instance_for_headdim(args.headdim, args.dropout_p > 0)
        if "hdim_v" in self.features and args.headdim_v != inst.headdim_v:
            raise bad_argument("v", args.v_shape, f"kernel {self.name!r} at head dim {inst.headdim} takes v of head "
                                                  f"dim {inst.headdim_v}")
        return inst

    def headdim_v(self, headdim: int) -> int:
        """V's head dim of the instance of head dim ``headdim``."""
        return self.instance(headdim).headdim_v

    @property
    def function_names(self) -> list[str]:
        """Every ``extern "C"`` entry point of the kernel (instances by head dim, then element types; then those
        of ``ext_entry``; a dropout instance has only the latter)."""
        tiles = sorted(self.tiles, key=lambda t: (t.headdim or 0, bool(t.dropout)))
        names = [e.format(hdim=_entry_hdim(t.headdim, t.dropout), dtype=DTYPE_SUFFIX[d])
                 for e in (self.entry, self.ext_entry, self.combine_entry) if e
                 for t in tiles if e != self.entry or not t.dropout for d in self.dtypes]
        return list(dict.fromkeys(names))

    def build_options(self, trace: bool = False) -> tuple[str, ...]:
        """NVRTC options of the kernel's build; ``trace`` adds -DFS_TRACE_BUILD (gpu/kernels/trace.cuh)."""
        return self.options + (("-DFS_TRACE_BUILD",) if trace else ())


@dataclass(frozen=True)
class Instance:
    """A launchable configuration: ``spec`` at ``headdim`` (the compiled instance's kHeadDim, or the call's
    d for a kernel that takes it as a parameter) with its tiles. Warp w owns the rows 16 w + rows_per_m m +
    (0..15) of the CTA's block_m rows, for the m_tiles m-tiles m."""

    spec: KernelSpec
    headdim: int
    block_m: int
    block_n: int
    fma_rescale: bool = True
    headdim_v: int | None = None  # V's and O's head dim (None: headdim)
    warps: int | None = None      # warps per CTA (None: the kernel's)
    dropout: bool | None = None   # the calls it runs: with dropout only (True), without (False), all (None)

    def __post_init__(self):
        if self.headdim_v is None:
            object.__setattr__(self, "headdim_v", self.headdim)
        if self.warps is None:
            object.__setattr__(self, "warps", self.spec.warps)

    @property
    def threads(self) -> int:
        """Threads per CTA."""
        return 32 * self.warps

    @property
    def compute_warps(self) -> int:
        """The warps that own query rows (the kernel's ``row_warps``, else every warp)."""
        return self.spec.row_warps or self.warps

    @property
    def rows_per_m(self) -> int:
        """Rows between a warp's consecutive m-tiles: 16 per row-owning warp of the CTA."""
        return 16 * self.compute_warps

    @property
    def m_tiles(self) -> int:
        """m-tiles of 16 rows per warp."""
        return self.block_m // self.rows_per_m

    def uses_ext(self, args=None) -> bool:
        """Whether a call (AttentionArgs; None: any) runs the ``ext_entry`` build: always on a dropout instance,
        else when it asks for one of EXT_FEATURES."""
        return bool(self.dropout) or (self.spec.ext_entry is not None and args is not None
                                      and any(FEATURES[f][1](args) for f in EXT_FEATURES))

    def combine_function(self, dtype: str) -> str:
        """The entry point of the combine kernel of a split-KV instance."""
        return self.spec.combine_entry.format(hdim=self.headdim, dtype=DTYPE_SUFFIX[dtype])

    def function(self, dtype: str, args=None) -> str:
        """The entry point of this instance for element type ``dtype`` (for the call ``args``: the ext build
        when it asks for one of EXT_FEATURES; a dropout instance's always)."""
        entry = self.spec.ext_entry if self.uses_ext(args) else self.spec.entry
        return entry.format(hdim=_entry_hdim(self.headdim, self.dropout), dtype=DTYPE_SUFFIX[dtype])

    @cached_property
    def smem_buffers(self) -> tuple[SmemBuffer, ...]:
        return tuple(self.spec.smem(self))

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of a CTA: every buffer, one after the other."""
        return sum(b.bytes for b in self.smem_buffers)

    def smem_offset(self, name: str) -> int:
        """Byte offset of buffer ``name`` in the CTA's dynamic shared memory."""
        off = 0
        for b in self.smem_buffers:
            if b.name == name:
                return off
            off += b.bytes
        raise bad_argument("name", name, f"expected one of {[b.name for b in self.smem_buffers]}")

    def work_tiles(self, args) -> int:
        """(m_block, head, batch) work tiles of a call."""
        return -(-args.seqlen_q // self.block_m) * args.heads * args.batch

    def grid(self, args) -> tuple[int, int, int]:
        """(x, y, z) CTAs of a call: (query blocks, heads, batch), or for a persistent kernel
        (min(work tiles, PERSISTENT_CTAS), 1, 1)."""
        if self.spec.persistent:
            return (max(1, min(self.work_tiles(args), PERSISTENT_CTAS)), 1, 1)
        if self.spec.split_kernel:
            return (-(-args.seqlen_q // self.block_m), args.num_splits, args.batch * args.heads)
        return (-(-args.seqlen_q // self.block_m), args.heads, args.batch)

    def ctas(self, args) -> int:
        return math.prod(self.grid(args))

    def kv_blocks(self, args) -> int:
        """KV steps of a CTA that sees every key: ceil(seqlen_k / block_n)."""
        return -(-args.seqlen_k // self.block_n)


def _entry_hdim(headdim: int | None, dropout: bool | None) -> str:
    """What an instance's entry points have for ``{hdim}``: its head dim, with ``_dropout`` for a dropout instance."""
    return f"{headdim}_dropout" if dropout else str(headdim)


# ---------------------------------------------------------------------------------------------- shared memory


def fa2_smem_layout(rows: int, headdim: int):
    """The smem layout of fa2.cu's sQ/sK/sV: tile_to_shape(Swizzle<3,3,3> o (8,64):(64,1), (rows, headdim)),
    the layout its ``smem_off<rows>(r, c)`` computes."""
    from flashsim.layout import ComposedLayout, S, Swizzle, make_layout, tile_to_shape

    atom = ComposedLayout(Swizzle(3, 3, 3), 0, make_layout((S(8), S(64)), (S(64), S(1))))
    return tile_to_shape(atom, (S(rows), S(headdim)))


def _fa2_smem(inst: Instance) -> tuple[SmemBuffer, ...]:
    """fa2.cu: sQ (block_m x d), then sK and sV (block_n x d), 16-bit, each the Swizzle<3,3,3> tiling
    (sO reuses sQ)."""
    d = inst.headdim
    return (SmemBuffer("sQ", fa2_smem_layout(inst.block_m, d), 2),
            SmemBuffer("sK", fa2_smem_layout(inst.block_n, d), 2),
            SmemBuffer("sV", fa2_smem_layout(inst.block_n, d), 2))


def _row_major_smem(inst: Instance) -> tuple[SmemBuffer, ...]:
    """kernel1.cu: s_Q (block_m x d), then s_K and s_V (block_n x d), 16-bit, row-major and unswizzled
    (s_O reuses s_Q)."""
    from flashsim.layout import S, make_layout

    d = inst.headdim

    def tile(rows):
        return make_layout((S(rows), S(d)), (S(d), S(1)))
    return SmemBuffer("s_Q", tile(inst.block_m), 2), SmemBuffer("s_K", tile(inst.block_n), 2), \
        SmemBuffer("s_V", tile(inst.block_n), 2)


def _v5_smem(inst: Instance, swizzle: bool = False) -> tuple[SmemBuffer, ...]:
    """fa_v5.cu: per warp a 16 x d s_Q tile, then the CTA's s_K and s_V (block_n x d), then per warp the
    16 x 16 f16 tiles s_QK, s_S, s_O and the {m, l} pairs (f32) ml_prev, ml_tile, ml_new of its 16 rows.
    v6 (``swizzle``) addresses each s_Q/s_K/s_V tile through swizzle<3,3,4> of the element offset within
    the tile and each 16 x 16 tile through swizzle<1,3,3> (the seed's ``swizzle`` helper, which is CuTe's
    Swizzle with the same parameters, flashsim.swizzle)."""
    from flashsim.layout import ComposedLayout, S, Swizzle, make_layout

    w, d, bn = inst.spec.warps, inst.headdim, inst.block_n
    rows = inst.block_m // w  # query rows per warp

    def swz(layout, b, m, s):
        return ComposedLayout(Swizzle(b, m, s), 0, layout) if swizzle else layout

    def qkv(r):  # d is the kernel's parameter: a dynamic integer
        return swz(make_layout((S(r), d), (d, S(1))), 3, 3, 4)

    tile = swz(make_layout((S(rows), S(bn)), (S(bn), S(1))), 1, 3, 3)
    md = make_layout((S(rows), S(2)), (S(2), S(1)))  # struct MD_F {float m, d}
    return (SmemBuffer("s_Q", qkv(rows), 2, w), SmemBuffer("s_K", qkv(bn), 2), SmemBuffer("s_V", qkv(bn), 2),
            SmemBuffer("s_QK", tile, 2, w), SmemBuffer("s_S", tile, 2, w), SmemBuffer("s_O", tile, 2, w),
            SmemBuffer("ml_prev", md, 4, w), SmemBuffer("ml_tile", md, 4, w), SmemBuffer("ml_new", md, 4, w))


def _v6_smem(inst: Instance) -> tuple[SmemBuffer, ...]:
    return _v5_smem(inst, swizzle=True)


def _fa4h_smem(inst: Instance) -> tuple[SmemBuffer, ...]:
    """fa4h.cu: sQ (two stages of 64 x d: boxes of 64 columns with the 128-byte swizzle, which is fa2's
    Swizzle<3,3,3> tiling), the K/V region (three stages, uneven for qk 192 / v 128:
    flashsim.attention.ws_plan.KVLayout), ten mbarriers and the 1024 bytes the kernel may skip to align its
    tiles."""
    from flashsim.attention.ws_plan import KVLayout
    from flashsim.layout import S, make_layout

    kv = KVLayout(inst.headdim, inst.headdim_v, inst.block_n)
    return (SmemBuffer("sQ", fa2_smem_layout(64, inst.headdim), 2, 2),
            SmemBuffer("sKV", make_layout(S(kv.total_bytes // 2)), 2),
            SmemBuffer("mbarriers", make_layout(S(10)), 8), SmemBuffer("align", make_layout(S(1024)), 1))


# ---------------------------------------------------------------------------------------------- the registry

#: Every kernel, by name.
SPECS: dict[str, KernelSpec] = {}


def register(spec: KernelSpec) -> KernelSpec:
    """Add ``spec`` to :data:`SPECS` (a name is registered once; ``config_of`` names a registered kernel
    with the same source and twin)."""
    if not isinstance(spec, KernelSpec):
        raise bad_argument("spec", spec, "expected a KernelSpec")
    if spec.name in SPECS:
        raise bad_argument("name", spec.name, "a kernel of this name is registered already")
    if spec.config_of is not None:
        base = SPECS.get(spec.config_of)
        if base is None or base.config_of is not None:
            raise bad_argument("config_of", spec.config_of, f"kernel {spec.name!r}: expected a registered kernel "
                                                            f"that is not itself a configuration ({sorted(SPECS)})")
        if (base.source, base.twin) != (spec.source, spec.twin):
            raise bad_argument("config_of", spec.config_of, f"kernel {spec.name!r}: another configuration has "
                                                            "the same source and twin")
    SPECS[spec.name] = spec
    if spec.traceable:
        trace_spec.register_traced(spec.name, spec)
    return spec


def get(name: str) -> KernelSpec:
    """The spec of kernel ``name``; ArgumentError naming the registered kernels otherwise."""
    spec = SPECS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise bad_argument("kernel", name, f"expected one of {tuple(SPECS)}")
    return spec


_FA2_DOMAIN = Domain(heads=(1, 2), group=(1, 2, 3), seqlen_q=(1, 7, 64, 100, 128, 129, 200, 256, 300),
                     seqlen_k=(1, 5, 32, 33, 64, 100, 128, 160, 257, 300), headdim=(8, 20, 32, 40, 64, 72, 96, 100, 128))
_FA2 = dict(source="fa2.cu", twin="flashsim.kernels.fa2", smem=_fa2_smem, domain=_FA2_DOMAIN, pad_headdim=True,
            features=frozenset({"masks", "softcap", "gqa"}), writes_lse=True, options=("--use_fast_math",))

# head dims above 128: flash-attn's sm80 traits on sm90, as its DROPOUT_SWITCH picks them (192: 128 x 64 with 8
# warps without dropout, 64 x 64 with 4 with it; 256: 64 x 64, 4 warps); the ext build (fa2.cu's kExt) runs
# dropout, ALiBi, packed sequences and per-entry KV lengths
register(KernelSpec(
    name="fa2", entry="fa2_hdim{hdim}_{dtype}", ext_entry="fa2_ext_hdim{hdim}_{dtype}",
    tiles=(Tiles(64, 128, 64), Tiles(128, 128, 32), Tiles(192, 128, 64, fma_rescale=False, warps=8, dropout=False),
           Tiles(192, 64, 64, fma_rescale=False, dropout=True), Tiles(256, 64, 64, fma_rescale=False)),
    **{**_FA2, "features": _FA2["features"] | EXT_FEATURES,
       "domain": replace(_FA2_DOMAIN, headdim=_FA2_DOMAIN.headdim + (136, 160, 192, 224, 256))},
    doc="seed 000: the FlashAttention-2 forward (flash_fwd_kernel.h written out without CuTe) with the tiles "
        "flash-attn's traits pick on sm_90 with dropout up to head dim 128 (seed 000's), above it those it picks for "
        "the call (192: 128 x 64 with 8 warps without dropout): causal/local masks, softcap, GQA/MQA, dropout (with "
        "the probabilities), ALiBi, fp16/bf16, head dims up to 256, LSE"))
register(KernelSpec(
    name="kernel1", source="kernel1.cu", entry="kernel1_{dtype}", twin="flashsim.kernels.kernel1",
    tiles=(Tiles(128, 64, 64),), smem=_row_major_smem,
    domain=Domain(heads=(1, 2), seqlen_q=(64, 128, 192, 256), headdim=(128,)),
    doc="seed 002's Kernel 1: cp.async, ldmatrix.x4, mma f32; d = 128, seqlen_q == seqlen_k, multiples of 64, "
        "fp16/bf16"))
_V5 = dict(source="fa_v5.cu", twin="flashsim.kernels.fa_v5", tiles=(Tiles(None, 64, 16),), dtypes=("float16",),
           acc="f16", progress_unit="KV tile",
           domain=Domain(heads=(1, 2), seqlen_q=(64, 128, 192), seqlen_k=(16, 48, 64, 128, 192),
                         headdim=(16, 32, 48, 64, 128)))
register(KernelSpec(
    name="v5", entry="fa_v5", smem=_v5_smem, **_V5,
    doc="seed 001's v5: ldmatrix + mma.m16n8k16 with f16 accumulation, the softmax through shared memory; fp16, "
        "seqlen_q % 64, seqlen_k % 16, d % 16"))
register(KernelSpec(
    name="v6", entry="fa_v6", smem=_v6_smem, **_V5,
    doc="seed 001's v6: v5 with swizzled shared memory (bit-identical results)"))
# at head dim 128 (one m-tile per warp) NVRTC 13.0 leaves the row sum's rescale uncontracted: FMUL.FTZ
# l, c, l, then FADD.FTZ l, P0, l (the interpreter's disassembly of the cubin; the other instances have FFMA)
register(KernelSpec(
    name="fa2_sm8x", entry="fa2_sm8x_hdim{hdim}_{dtype}",
    tiles=(Tiles(64, 128, 64), Tiles(128, 64, 64, fma_rescale=False)),
    config_of="fa2", **_FA2,
    doc="fa2 with flash-attn's sm8x tiles (Flash_fwd_kernel_traits of sm86/sm89: 64 x 64 at head dim 128, "
        "square for causal)"))
# seed 004's warp-specialised pipeline on sm_90 (fa4h.cu): row arithmetic of fa2.cu at 128 x 128 (its twin),
# NVRTC 13.0 leaves the row sum's rescale uncontracted in every instance (FMUL.FTZ then FADD.FTZ)
register(KernelSpec(
    name="fa4h", source="fa4h.cu", entry="fa4h_hdim{hdim}_{dtype}", twin="flashsim.kernels.fa4h",
    tiles=(Tiles(64, 128, 128, fma_rescale=False), Tiles(128, 128, 128, fma_rescale=False),
           Tiles(192, 128, 128, fma_rescale=False, headdim_v=128)),
    smem=_fa4h_smem, warps=12, threads=384, row_warps=8, arch="sm_90a", persistent=True, traceable=False,
    features=frozenset({"masks", "softcap", "gqa", "hdim_v"}), writes_lse=True, options=("--use_fast_math",),
    progress_unit="work tile",
    domain=Domain(heads=(1, 2), group=(1, 2, 3), seqlen_q=(1, 7, 64, 100, 128, 129, 200, 256, 300),
                  seqlen_k=(1, 5, 64, 100, 128, 129, 257, 300), headdim=(64, 128, 192)),
    doc="seed 004's warp-specialised pipeline (FA4's sm100 forward) on sm_90: a TMA producer warp, Q in 2 stages, "
        "K/V in 3 (uneven for qk 192 / v 128), two wgmma consumer warpgroups with the s0/s1 ordering barrier, "
        "persistent; masks, softcap, GQA/MQA, fp16/bf16, head dims 64, 128 and 192 (v 128), LSE"))
# chunked attention (FA3's attention_chunk) in fa2.cu's kChunked instances, which take attention_chunk after
# is_local; the tiles of flash-attn's sm80 traits without dropout (flash_fwd_launch_template.h:
# run_mha_fwd_hdim64 and run_mha_fwd_hdim128 off sm8x)
register(KernelSpec(
    name="fa2_chunked", entry="fa2_chunked_hdim{hdim}_{dtype}",
    tiles=(Tiles(64, 128, 128), Tiles(128, 128, 64)), config_of="fa2",
    **{**_FA2, "features": _FA2["features"] | {"chunk"},
       "domain": replace(_FA2_DOMAIN, attention_chunk=(0, 1, 7, 32, 48, 64, 100, 128, 200, 512))},
    doc="fa2 with chunked attention (FlashAttention-3's attention_chunk: a query attends only the keys of its "
        "chunk, with any causal/local window) and the tiles of flash-attn's sm80 traits (128 x 128 at head dim 64, "
        "128 x 64 at 128)"))
# split-KV (flash-attn's compute_attn_1rowblock_splitkv and combine_attn_seqk_parallel) in fa2.cu's kSplit
# instances: entry and ext_entry are the one build (every feature a launch parameter), the combine kernel after
# it, not traced (the recorder has no combine kernel). NVRTC 13.0 leaves the row sum's rescale uncontracted in
# every instance (the interpreter against the twin showed it).
_SPLIT = {**_FA2, "traceable": False, "combine_entry": "fa2_combine_hdim{hdim}_{dtype}", "config_of": "fa2",
          "domain": replace(_FA2_DOMAIN, headdim=_FA2_DOMAIN.headdim + (136, 160, 192, 224, 256))}


def _split_tiles(block_n_64: int, block_n_128: int) -> tuple[Tiles, ...]:
    """64-row tiles of kBlockN block_n_64 at head dim 64, block_n_128 at 128 and 64 above."""
    return tuple(Tiles(d, 64, n, fma_rescale=False) for d, n in ((64, block_n_64), (128, block_n_128), (192, 64),
                                                                 (256, 64)))


# the tiles of run_mha_fwd_splitkv_dispatch for more than one split (64 x 256, 64 x 128, 64 x 64);
# flash_attn_func(num_splits=...) runs it when the count is above 1
register(KernelSpec(
    name="fa2_splitkv", entry="fa2_splitkv_hdim{hdim}_{dtype}", ext_entry="fa2_splitkv_hdim{hdim}_{dtype}",
    tiles=_split_tiles(256, 128),
    **{**_SPLIT, "features": _FA2["features"] | {"alibi", "splitkv", "kvcache", "kvappend"}},
    doc="fa2's split-KV kernel and its combine kernel (flash-attn's num_splits: each query block's KV blocks "
        "shared by num_splits CTAs writing f32 partial outputs and LSEs, merged by the combine kernel): masks, "
        "softcap, GQA/MQA, ALiBi, the KV cache (appending, cache_batch_idx, paged, rotary), fp16/bf16, head dims "
        "up to 256, LSE; not traced (the recorder has no combine kernel)"))
# the split-KV kernel with one split (run_mha_fwd_splitkv_align: 64 x 128 at head dim 64, else 64 x 64), which
# flash_attn_with_kvcache runs when it appends, indexes the cache or pages it without splitting
register(KernelSpec(
    name="fa2_splitkv1", entry="fa2_splitkv1_hdim{hdim}_{dtype}", ext_entry="fa2_splitkv1_hdim{hdim}_{dtype}",
    tiles=_split_tiles(128, 64),
    **{**_SPLIT, "features": _FA2["features"] | {"alibi", "kvcache", "kvappend"}},
    doc="fa2's split-KV kernel with one split (flash-attn's run_mha_fwd_splitkv_align tiles): what "
        "flash_attn_with_kvcache runs to append to the cache, index it (cache_batch_idx) or page it without "
        "splitting; masks, softcap, GQA/MQA, ALiBi, rotary, fp16/bf16, head dims up to 256, LSE"))
