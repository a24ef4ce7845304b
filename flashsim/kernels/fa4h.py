"""gpu/kernels/fa4h.cu (seed 004's warp-specialised pipeline on sm_90) from the host: its tensor maps, launch
parameters and grid, and its twin.

The twin is :mod:`flashsim.kernels.fa2`'s: fa4h.cu computes every row with fa2.cu's instructions (S and P V
chained over 16-wide k-steps, each wgmma m64nNk16 step the mma.m16n8k16 rule; the same softmax_rescale_o and
normalize), with kBlockM = kBlockN = 128, which fix the KV range of a work tile and its masked steps. What
differs is the machinery (TMA, mbarriers, wgmma, warp specialisation), which only the interpreter runs.

Tensor maps (rank 4, dims {d, heads, seqlen, batch} innermost first, 16-bit elements, boxes of 64 columns with
the 128-byte swizzle, out-of-bounds elements zero): q and o boxes of 64 rows (one consumer warpgroup), k and v
of 128 (a KV block). They are encoded on the arrays' device addresses: by the driver on a GPU, by
:class:`flashsim.sass.tensormap.TensorMap` (the driver's encoding, measured) for the interpreter.
"""

from __future__ import annotations

import numpy as np

from flashsim.kernels import fa2

__all__ = ["BARRIERS", "REGISTER_FORMATS", "check", "launch_args", "map_specs", "memory", "problem", "run",
           "tile_steps", "trace_program", "trace_registers"]

#: fa4h.cu's mbarriers, eight bytes each from the first, in shared-memory order
BARRIERS = ("q_full[0]", "q_full[1]", "q_empty[0]", "q_empty[1]", "kv_full[0]", "kv_full[1]", "kv_full[2]",
            "kv_empty[0]", "kv_empty[1]", "kv_empty[2]")
#: cuTensorMapEncodeTiled's data types of the 16-bit elements (cuda.h CUtensorMapDataType)
_TMAP_DTYPE = {"float16": 6, "bfloat16": 9}
_SWIZZLE_128B = 3


#: the twin's launch: fa2's Problem at the instance's 128 x 128 tiles and V head dim
problem = fa2.problem


def check(q, k, v, softmax_scale=None, kernel: str = "fa4h", **kw):
    """flash_attn_func's checks, the features and head dims of ``kernel``; returns the AttentionArgs."""
    return fa2.check(q, k, v, softmax_scale, kernel, **kw)


def run(q, k, v, softmax_scale=None, *, kernel: str = "fa4h", **kw):
    """The twin (fa2's at this kernel's tiles) with flash_attn_func's conventions: (out, lse)."""
    return fa2.run(q, k, v, softmax_scale, kernel=kernel, **kw)


#: fa4h.cu has no FS_TRACE points (the spec says traceable=False)
REGISTER_FORMATS: dict[str, str] = {}


def trace_registers(inst, tag: str) -> list[str]:
    return []


def trace_program(inst, steps: int) -> list[str]:
    raise NotImplementedError("fa4h.cu has no FS_TRACE points: record it in the interpreter (flashsim trace "
                              "--interp) instead")


tile_steps = fa2.tile_steps
memory = fa2.memory


def map_specs(args, hdim_qk: int, hdim_v: int) -> dict[str, tuple]:
    """cuTensorMapEncodeTiled's arguments but the address, per tensor (q, k, v, o): (data type, rank, dims,
    strides in bytes, box, element strides, interleave, swizzle, L2 promotion, OOB fill)."""
    dt = _TMAP_DTYPE[args.dtype]

    def spec(seqlen, heads, d, rows):
        dims = (d, heads, seqlen, args.batch)
        strides = (d * 2, heads * d * 2, seqlen * heads * d * 2)
        return (dt, 4, dims, strides, (64, 1, rows, 1), (1, 1, 1, 1), 0, _SWIZZLE_128B, 0, 0)

    return {"q": spec(args.seqlen_q, args.heads, hdim_qk, 64), "k": spec(args.seqlen_k, args.heads_k, hdim_qk, 128),
            "v": spec(args.seqlen_k, args.heads_k, hdim_v, 128), "o": spec(args.seqlen_q, args.heads, hdim_v, 64)}


def _encode(xp, spec: tuple, address: int) -> np.ndarray:
    """One tensor map's 128 bytes as a by-value kernel argument: the driver's encoding on a GPU (cupy), the
    measured model of it for the interpreter (flashsim.cuda)."""
    dt, rank, dims, strides, box, estr, il, sw, l2, oob = spec
    if xp.__name__.startswith("flashsim"):
        from flashsim.sass.tensormap import TensorMap

        raw = TensorMap.encode_tiled(dt, rank, address, dims, strides, box, estr, il, sw, l2, oob).to_bytes()
    else:
        from flashsim.device import encode_tensor_map

        raw = encode_tensor_map(spec, address)
    return np.frombuffer(bytes(raw), dtype=np.dtype((np.void, 128))).copy()


def launch_args(inst, args, q, k, v, xp):
    """fa4h.cu's parameters on the array module ``xp``: the tensor maps of q, k, v and o (encoded on the
    device arrays), lse, then the scalars; ``fetch()`` gives (out, lse)."""
    pb = problem(inst, args)  # inst = spec.instance_for(args): q, k and v have the instance's head dims
    dv = pb.dv
    d_q, d_k, d_v = (xp.asarray(np.ascontiguousarray(np.asarray(x)).view(np.uint16)) for x in (q, k, v))
    d_o = xp.zeros((args.batch, args.seqlen_q, args.heads, dv), np.uint16)
    d_lse = xp.zeros(args.lse_shape, np.float32)
    specs = map_specs(args, inst.headdim, dv)
    maps = [_encode(xp, specs[n], int(a.data.ptr)) for n, a in (("q", d_q), ("k", d_k), ("v", d_v), ("o", d_o))]
    params = (*maps, d_lse, np.int32(pb.seqlen_q), np.int32(pb.seqlen_k), np.int32(pb.heads), np.int32(pb.heads_k),
              np.float32(pb.scale_softmax), np.float32(pb.scale_softmax_log2), np.float32(pb.softcap),
              np.int32(pb.window_left), np.int32(pb.window_right), np.int32(pb.is_causal), np.int32(pb.is_local),
              np.int32(pb.m_blocks), np.int32(inst.work_tiles(args)))

    def fetch():
        return np.ascontiguousarray(xp.asnumpy(d_o)).view(args.np_dtype), xp.asnumpy(d_lse)

    return params, fetch, None
