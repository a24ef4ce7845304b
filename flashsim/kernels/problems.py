"""Random attention problems in each kernel's domain, for the differential tests, the validation run and
``flashsim check``.

``draw_params(pick, kernel)`` chooses every parameter through ``pick(name, options)``, so one definition
serves a seeded numpy generator (``rng_pick``) and hypothesis (``flashsim.strategies.fa_cases``, which
shrinks); the values each parameter takes are the kernel's ``Domain`` (flashsim.kernels.spec).
``make_case(params)`` builds the arrays. Value kinds:

- ``normal``: N(0, 1) entries;
- ``large``: q and k times 4 to 16 (logits in the hundreds: the max subtraction and exp2 underflow matter);
- ``identical``: every key row equal (uniform attention) and every value row equal;
- ``subnormal``: q, k, v scaled into the 16-bit format's subnormal range;
- ``nan_inf``: one NaN in q, one +Inf in k and one -Inf in v (propagation as the hardware does it).
Fully masked rows come from the masks: causal with seqlen_q > seqlen_k, local windows, and chunks (a kernel
with chunked attention also draws ``attention_chunk``, from its Domain). A kernel with dropout draws
``dropout_p`` (not with softcap) and ``return_attn_probs``, its philox state following from the seed; one with
ALiBi draws slopes per head or per (batch, head) (uniform in [0, 0.3) as flash-attn's tests draw them).
``draw_params(..., force={name: options})`` draws a parameter from other options (a feature's validation
forces it on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import ml_dtypes
import numpy as np

from flashsim.kernels.spec import SPECS, get

#: the kernels problems are drawn for: every registered one
KERNELS = tuple(SPECS)
KINDS = ("normal", "large", "identical", "subnormal", "nan_inf")
#: the masks a kernel that models them is drawn with (none twice as often as each mask)
MASKS = ("none", "none", "causal", "local")
#: the softcaps a kernel that models softcap is drawn with (0: off)
SOFTCAPS = (0.0, 0.0, 0.0, 5.0, 30.0)
#: the dropout probabilities, return_attn_probs and ALiBi slopes' shapes of a kernel that models them
DROPOUTS = (0.0, 0.0, 0.17, 0.5)
ALIBIS = ("none", "none", "heads", "batch")
#: split counts a split-KV kernel's problems draw (many beyond the KV blocks: empty splits)
SPLITS = (2, 3, 4, 5, 8, 16, 128)
#: batch sizes of packed problems (flash_attn_varlen_func), each sequence's lengths drawn of its own
VARLEN_BATCH = (1, 2, 3, 5)
#: a KV cache problem (flash_attn_with_kvcache): its layout, capacity, appended keys, rotary and split count
KV_LAYOUTS = ("plain", "batch_idx", "paged")
KV_CAPACITY = (100, 256, 300, 512)
KV_NEW = (0, 1, 5, 40)
KV_ROTARY = ("none", "interleaved", "halves")
KV_SPLITS = (1, 1, 2, 3, 5)
_NP = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
# scale that puts N(0, 1) entries into the subnormal range of each format (f16 below 2^-14, bf16 below 2^-126)
_SUBNORMAL = {"float16": 2.0**-17, "bfloat16": 2.0**-129}

Pick = Callable[[str, Any], Any]


def rng_pick(rng: np.random.Generator) -> Pick:
    """``pick`` over a numpy generator: a uniform choice among ``options`` (a sequence or a range)."""
    def pick(name, options):
        options = list(options)
        return options[int(rng.integers(len(options)))]
    return pick


def _draw(pick: Pick, name: str, options: tuple):
    """``pick(name, options)``, or the one option without a draw."""
    return options[0] if len(options) == 1 else pick(name, options)


def draw_params(pick: Pick, kernel: str, force: dict | None = None) -> dict:
    """One problem's parameters (plain ints, floats, strings and tuples) in ``kernel``'s domain; ``force`` maps a
    parameter's name to the options it is drawn from instead."""
    if force:
        pick = _forced(pick, force)
    spec = get(kernel)
    dom = spec.domain
    p: dict = {"kernel": kernel, "seed": pick("seed", range(2**16)), "kind": pick("kind", KINDS)}
    p["batch"] = pick("batch", (1, 2))
    if dom.group is not None:
        p["heads_k"] = pick("heads_k", dom.heads)
        p["heads"] = p["heads_k"] * pick("group", dom.group)
    else:
        p["heads"] = p["heads_k"] = pick("heads", dom.heads)
    if dom.seqlen_k is None:
        p["seqlen_q"] = p["seqlen_k"] = pick("seqlen", dom.seqlen_q)
    else:
        p["seqlen_q"] = pick("seqlen_q", dom.seqlen_q)
        p["seqlen_k"] = pick("seqlen_k", dom.seqlen_k)
    p["headdim"] = _draw(pick, "headdim", dom.headdim)
    p["dtype"] = _draw(pick, "dtype", spec.dtypes)
    mask = pick("mask", MASKS) if "masks" in spec.features else "none"
    p["causal"] = mask == "causal"
    if mask == "local":
        sk = p["seqlen_k"]
        p["window_size"] = (pick("left", (-1, 0, min(3, sk - 1), sk // 2, sk - 1)),
                            pick("right", (-1, 0, min(5, sk - 1), sk // 3)))
    else:
        p["window_size"] = (-1, -1)
    p["softcap"] = pick("softcap", SOFTCAPS) if "softcap" in spec.features else 0.0
    p["softmax_scale"] = pick("softmax_scale", (None, None, 0.05, 0.3))
    if "chunk" in spec.features:  # drawn last: the other kernels' draws stay as they were
        p["attention_chunk"] = _draw(pick, "attention_chunk", dom.attention_chunk)
    if "dropout" in spec.features:
        p["dropout_p"] = 0.0 if p["softcap"] else pick("dropout_p", DROPOUTS)
        p["return_attn_probs"] = bool(p["dropout_p"]) and pick("return_attn_probs", (False, True))
    if "alibi" in spec.features:
        p["alibi"] = pick("alibi", ALIBIS)
    if "splitkv" in spec.features:
        p["num_splits"] = pick("num_splits", SPLITS)
    if "varlen" in spec.features and pick("varlen", (False,)):  # packed sequences only when forced
        b = p["batch"] = pick("varlen_batch", VARLEN_BATCH)
        p["seqlens_q"] = tuple(pick("seqlen_q", dom.seqlen_q + (0,)) for _ in range(b))
        p["seqlens_k"] = tuple(pick("seqlen_k", (dom.seqlen_k or dom.seqlen_q) + (0,)) for _ in range(b))
        p["seqlen_q"], p["seqlen_k"] = max(p["seqlens_q"]), max(p["seqlens_k"])
        p["varlen"] = True
    if "kvappend" in spec.features and pick("kvcache", (False,)):  # a KV cache only when forced
        _draw_kvcache(pick, p)
    return p


def _draw_kvcache(pick: Pick, p: dict) -> None:
    """A flash_attn_with_kvcache problem: the cache layout, capacity (paged: pages of 256 rows), each entry's
    cache length, the appended keys, rotary, the split count, and the kernel flash-attn runs for it (the split
    kernel when it appends, indexes or pages the cache or splits, else fa2 with per-entry lengths)."""
    p.pop("dropout_p", None), p.pop("return_attn_probs", None)
    p["kind"] = "large" if p["kind"] == "large" else "normal"
    layout = p["kv_layout"] = pick("kv_layout", KV_LAYOUTS)
    cap = 256 * pick("kv_pages", (1, 2)) if layout == "paged" else pick("kv_capacity", KV_CAPACITY)
    p["seqlen_k"] = cap
    knew = p["kv_new"] = pick("kv_new", KV_NEW)
    p["seqlen_q"] = min(p["seqlen_q"], cap)
    room = cap - knew  # keys that fit before the appended ones
    p["kv_seqlens"] = tuple(pick("kv_seqlen", (0, 1, room // 3, max(room - 1, 0), room)) for _ in range(p["batch"]))
    p["kv_rotary"] = pick("kv_rotary", KV_ROTARY) if knew and p["headdim"] >= 16 else "none"
    p["kv_rotary_dim"] = pick("kv_rotary_dim", (16, 32, 64)) if p["kv_rotary"] != "none" else 0
    p["num_splits"] = pick("num_splits", KV_SPLITS)
    forced = knew > 0 or layout != "plain"
    p["kernel"] = "fa2_splitkv" if p["num_splits"] > 1 else ("fa2_splitkv1" if forced else "fa2")
    p["kvcache"] = True


def _forced(pick: Pick, force: dict) -> Pick:
    def forced(name, options):
        return pick(name, force[name]) if name in force else pick(name, options)
    return forced


@dataclass
class Case:
    params: dict
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    kwargs: dict = field(default_factory=dict)  # flash_attn_func's keyword arguments (scale, masks, softcap)

    def describe(self) -> str:
        p = self.params
        mask = "causal" if p["causal"] else (f"local{p['window_size']}" if p["window_size"] != (-1, -1) else "")
        extra = " ".join(x for x in (mask, f"softcap={p['softcap']}" if p["softcap"] else "",
                                     f"scale={p['softmax_scale']}" if p["softmax_scale"] is not None else "",
                                     f"chunk={p['attention_chunk']}" if p.get("attention_chunk") else "",
                                     f"dropout={p['dropout_p']}" if p.get("dropout_p") else "",
                                     "probs" if p.get("return_attn_probs") else "",
                                     f"alibi={p['alibi']}" if p.get("alibi", "none") != "none" else "",
                                     f"splits={p['num_splits']}" if p.get("num_splits") else "",
                                     (f"kv={p['kv_layout']} lens={p['kv_seqlens']} new={p['kv_new']} "
                                      f"rotary={p['kv_rotary']}") if p.get("kvcache") else "") if x)
        sq, sk = (p["seqlens_q"], p["seqlens_k"]) if p.get("varlen") else (p["seqlen_q"], p["seqlen_k"])
        return (f"{p['kernel']} {p['dtype']} b={p['batch']} h={p['heads']}/{p['heads_k']} sq={sq} "
                f"sk={sk} d={p['headdim']} {p['kind']} seed={p['seed']} {extra}").rstrip()


def make_case(params: dict) -> Case:
    p = params
    rng = np.random.default_rng(p["seed"])
    dt = _NP[p["dtype"]]
    if p.get("kvcache"):
        return _kv_case(p)
    if p.get("varlen"):  # packed: every sequence's rows, then one row of no sequence
        qs = (sum(p["seqlens_q"]) + 1, p["heads"], p["headdim"])
        ks = (sum(p["seqlens_k"]) + 1, p["heads_k"], p["headdim"])
    else:
        qs = (p["batch"], p["seqlen_q"], p["heads"], p["headdim"])
        ks = (p["batch"], p["seqlen_k"], p["heads_k"], p["headdim"])
    spec = get(p["kernel"])
    vs = ks[:-1] + (spec.headdim_v(p["headdim"]) if "hdim_v" in spec.features else p["headdim"],)
    q, k, v = rng.standard_normal(qs), rng.standard_normal(ks), rng.standard_normal(vs)
    kind = p["kind"]
    if kind == "large":
        f = float(rng.uniform(4, 16))
        q, k = q * f, k * f
    elif kind == "identical":
        k[:] = k[:1] if p.get("varlen") else k[:, :1]
        v[:] = v[:1] if p.get("varlen") else v[:, :1]
    elif kind == "subnormal":
        s = _SUBNORMAL[p["dtype"]]
        q, k, v = q * s * 64, k * s * 64, v * s
    elif kind == "nan_inf":
        def at(x):
            return tuple(int(rng.integers(n)) for n in x.shape)
        q[at(q)] = np.nan
        k[at(k)] = np.inf
        v[at(v)] = -np.inf
    q, k, v = (x.astype(np.float32).astype(dt) for x in (q, k, v))
    return Case(params, q, k, v, call_kwargs(params))


def _kv_case(p: dict) -> Case:
    """The arrays of a KV-cache problem: q, the caches (entries, or pages in a shuffled block table), k and v to
    append, the rotary tables (angles in [0, 6), q's dtype), from its seed."""
    rng = np.random.default_rng(p["seed"])
    dt = _NP[p["dtype"]]
    b, hk, d, cap = p["batch"], p["heads_k"], p["headdim"], p["seqlen_k"]
    scale = float(rng.uniform(4, 16)) if p["kind"] == "large" else 1.0
    q = rng.standard_normal((b, p["seqlen_q"], p["heads"], d)) * scale
    kw = {}
    if p["kv_layout"] == "paged":
        pages = cap // 256
        n = b * pages + 1
        shape = (n, 256, hk, d)
        kw["block_table"] = rng.permutation(n)[:b * pages].reshape(b, pages).astype(np.int32)
    else:
        entries = b + (p["kv_layout"] == "batch_idx")
        shape = (entries, cap, hk, d)
        if p["kv_layout"] == "batch_idx":
            kw["cache_batch_idx"] = rng.permutation(entries)[:b].astype(np.int32)
    kc, vc = rng.standard_normal(shape) * scale, rng.standard_normal(shape)
    kw["cache_seqlens"] = np.asarray(p["kv_seqlens"], np.int32)
    if p["kv_new"]:
        kw["k_new"] = (rng.standard_normal((b, p["kv_new"], hk, d)) * scale).astype(np.float32).astype(dt)
        kw["v_new"] = rng.standard_normal((b, p["kv_new"], hk, d)).astype(np.float32).astype(dt)
    if p["kv_rotary"] != "none":
        rd = min(p["kv_rotary_dim"], d // 16 * 16)
        ang = rng.uniform(0, 6, (cap + p["seqlen_q"], rd // 2))
        kw.update(rotary_cos=np.cos(ang).astype(np.float32).astype(dt), rotary_sin=np.sin(ang).astype(np.float32).astype(dt),
                  rotary_interleaved=p["kv_rotary"] == "interleaved")
    q, kc, vc = (x.astype(np.float32).astype(dt) for x in (q, kc, vc))
    kwargs = {**call_kwargs(p), **kw}
    return Case(p, q, kc, vc, kwargs)


def alibi_slopes(p: dict) -> np.ndarray | None:
    """The ALiBi slopes of a problem: float32 (heads,) or (batch, heads), uniform in [0, 0.3), from a stream of
    their own (the inputs' stream stays as it was)."""
    shape = {"none": None, "heads": (p["heads"],), "batch": (p["batch"], p["heads"])}[p.get("alibi", "none")]
    if shape is None:
        return None
    return (np.random.default_rng([p["seed"], 19]).random(shape) * 0.3).astype(np.float32)


def rng_state(p: dict) -> tuple[int, int]:
    """The philox (seed, offset) of a problem with dropout: from its seed, offsets multiples of 4."""
    return (p["seed"] * 0x9E3779B97F4A7C15 % 2**64, 4 * p["seed"] * 1009)


def call_kwargs(p: dict) -> dict:
    """flash_attn_func's keyword arguments of a problem's parameters: the scale, and of the masks, softcap,
    chunk, dropout and ALiBi those the kernel models (its spec's features)."""
    kwargs = {"softmax_scale": p["softmax_scale"]}
    features = get(p["kernel"]).features
    if "masks" in features:
        kwargs.update(causal=p["causal"], window_size=tuple(p["window_size"]))
    if "softcap" in features:
        kwargs["softcap"] = p["softcap"]
    if "chunk" in features:
        kwargs["attention_chunk"] = p.get("attention_chunk", 0)
    if p.get("dropout_p"):
        kwargs.update(dropout_p=p["dropout_p"], rng_state=rng_state(p),
                      return_attn_probs=bool(p.get("return_attn_probs")))
    if p.get("alibi", "none") != "none":
        kwargs["alibi_slopes"] = alibi_slopes(p)
    if p.get("num_splits") and (p.get("num_splits") != 1 or p.get("kvcache")):
        kwargs["num_splits"] = p["num_splits"]
    if p.get("varlen"):
        kwargs.update(cu_seqlens_q=np.cumsum((0,) + tuple(p["seqlens_q"])).astype(np.int32),
                      cu_seqlens_k=np.cumsum((0,) + tuple(p["seqlens_k"])).astype(np.int32),
                      max_seqlen_q=p["seqlen_q"], max_seqlen_k=p["seqlen_k"])
    return kwargs


def random_case(rng: np.random.Generator, kernel: str, force: dict | None = None) -> Case:
    return make_case(draw_params(rng_pick(rng), kernel, force))


def inputs_digest(case: Case) -> str:
    """sha256 of q, k, v's bytes: golden data stores it to detect a generator that no longer reproduces them."""
    import hashlib

    h = hashlib.sha256()
    for x in (case.q, case.k, case.v):
        h.update(np.ascontiguousarray(x).view(np.uint8).tobytes())
    return h.hexdigest()
