"""Thread-value partitions: ``TiledCopy`` (make_tiled_copy) and ``TiledMMA``, as in cute/atom/*_atom.hpp.

A TiledCopy is a copy atom plus a (thread, value) -> tile-coordinate layout ``layout_tv`` and the tile
shape ``tiler_mn``; ``get_thread_slice(t).partition_S(tensor)`` is the part of a tensor thread t copies,
shaped ``(CPY, CPY_M, CPY_N, ...)``. A TiledMMA replicates an MMA atom over a layout of atoms (warps)
and ``partition_A/B/C`` give each thread its ``(MMA, MMA_M, MMA_K)`` fragments.
"""

from __future__ import annotations

from flashsim.errors import bad_argument
from flashsim.layout import inttuple as it
from flashsim.layout import layout as L
from flashsim.layout.atoms import CopyAtom, MMAAtom
from flashsim.layout.inttuple import C, _, fmt
from flashsim.layout.layout import Layout
from flashsim.layout.tensor import Pointer, Tensor, _as_tensor


def _rep(n):
    return _ if n == 1 else tuple([_] * n)


def _thr_idx(t, n=None):
    if not it.is_int(t):
        raise bad_argument("thr_idx", t, "expected an integer thread index")
    if n is not None and not 0 <= int(t) < int(n):
        raise bad_argument("thr_idx", t, f"outside the {int(n)} threads of this tiled operation")
    return t


class TiledCopy:
    """``TiledCopy<Copy_Atom, LayoutCopy_TV, Tiler_MN>``."""

    def __init__(self, atom: CopyAtom, layout_tv: Layout, tiler_mn):
        if not isinstance(atom, CopyAtom):
            raise bad_argument("copy_atom", atom, "expected Copy_Atom(op, value_type)")
        self.atom, self.layout_tv, self.tiler_mn = atom, layout_tv, tiler_mn
        self.atom_num_thr = L.size(atom.val_ref, 0)
        self.atom_num_val = L.size(atom.val_ref, 1)
        self.num_thr = L.size(layout_tv, 0)
        self.num_val = L.size(layout_tv, 1)
        if int(self.num_thr) % int(self.atom_num_thr):
            raise bad_argument("thr_layout", str(layout_tv), f"uses too few threads for {atom.op.name}")
        if int(self.num_val) % int(self.atom_num_val):
            raise bad_argument("val_layout", str(layout_tv),
                               f"gives {int(self.num_val)} values per thread; {atom.op.name} moves "
                               f"{int(self.atom_num_val)} {atom.value_type} per thread")

    def _size(self, *idx):
        return self.num_thr

    def __str__(self):
        return ("TiledCopy\n"
                f"  Tiler_MN:       {_tfmt(self.tiler_mn)}\n"
                f"  TiledLayout_TV: {self.layout_tv}\n" + str(self.atom))

    __repr__ = __str__

    def _ref2trg(self, side):
        trg = self.atom.val_src if side == "S" else self.atom.val_dst
        return L.right_inverse(self.atom.val_ref).compose(trg)

    def tile2thrfrg(self, layout, ref2trg):
        atom_tv = L.zipped_divide(self.layout_tv, (self.atom_num_thr, self.atom_num_val))
        trg_tv = atom_tv.compose(ref2trg, _)
        thrval2mn = L.coalesce(L.zip_layout(trg_tv), (C(1), (C(1), C(1))))
        tv = layout.compose(thrval2mn, _)
        return tv((_, _), _)

    def tidfrg_S(self, layout):
        return self.tile2thrfrg(self._divide(layout), self._ref2trg("S"))

    def tidfrg_D(self, layout):
        return self.tile2thrfrg(self._divide(layout), self._ref2trg("D"))

    def _divide(self, layout):
        if int(L.rank(layout)) < len(it.wrap(self.tiler_mn)):
            raise bad_argument("tensor", str(layout), f"has fewer modes than the copy tile {_tfmt(self.tiler_mn)}")
        return L.zipped_divide(layout, self.tiler_mn)

    def retile(self, layout):
        R = int(L.rank(layout))
        V = L.size(layout, 0)
        inv = L.right_inverse(self.layout_tv).with_shape(_shape_of(self.tiler_mn))
        frg_mn = L.upcast(int(self.num_thr) * int(V), inv)
        frg_v = L.zipped_divide(L.logical_product(L.make_layout(V), L.right_inverse(frg_mn)),
                                L.make_layout(self.atom_num_val))
        t_layout = L.zipped_divide(layout, it.prepend(it.product_each(frg_mn.shape), V))
        v_layout = t_layout.compose(frg_v, _)
        return v_layout(_, it.append(C(0), _, R))

    def get_layoutS_TV(self):
        ref = L.make_layout((_shape_of(self.tiler_mn), C(1)))
        return self.tile2thrfrg(ref, self._ref2trg("S"))(_, _, C(0))

    def get_layoutD_TV(self):
        ref = L.make_layout((_shape_of(self.tiler_mn), C(1)))
        return self.tile2thrfrg(ref, self._ref2trg("D"))(_, _, C(0))

    def get_slice(self, thr_idx):
        return ThrCopy(self, _thr_idx(thr_idx, self.num_thr))

    get_thread_slice = get_slice


def _shape_of(tiler):
    if isinstance(tiler, tuple):
        return tuple(_shape_of(t) for t in tiler)
    if L.is_layout(tiler):
        return L.shape(tiler)
    return tiler


def _tfmt(t):
    return fmt(t)


class ThrCopy:
    """One thread's view of a TiledCopy."""

    def __init__(self, tiled: TiledCopy, thr_idx):
        self.tiled, self.thr_idx = tiled, thr_idx

    def partition_S(self, tensor):
        t = _as_tensor(tensor)
        thr = Tensor(t.data, self.tiled.tidfrg_S(t.layout()))
        return thr(self.thr_idx, _, _rep(int(t.rank)))

    def partition_D(self, tensor):
        t = _as_tensor(tensor)
        thr = Tensor(t.data, self.tiled.tidfrg_D(t.layout()))
        return thr(self.thr_idx, _, _rep(int(t.rank)))

    def retile_S(self, tensor):
        t = _as_tensor(tensor)
        return Tensor(t.data, self.tiled.retile(t.layout()))

    retile_D = retile_S

    def retile(self, tensor):
        return self.retile_S(tensor)

    def __str__(self):
        return f"ThrCopy\n  ThrIdx: {fmt(self.thr_idx)}\n" + str(self.tiled)


def make_tiled_copy(copy_atom, thr_layout=None, val_layout=None):
    """A TiledCopy whose threads are laid out by thr_layout ((m,n) -> thread) and each thread's values by
    val_layout ((m,n) -> value): the tile is their raked product."""
    if thr_layout is None:
        thr_layout = Layout(C(1))
    if val_layout is None:
        val_layout = Layout(C(1))
    for nm, lay in (("thr_layout", thr_layout), ("val_layout", val_layout)):
        if not isinstance(lay, Layout):
            raise bad_argument(nm, lay, "expected a Layout")
    layout_mn = L.raked_product(thr_layout, val_layout)
    layout_tv = L.right_inverse(layout_mn).with_shape((L.size(thr_layout), L.size(val_layout)))
    tiler = it.product_each(layout_mn.shape)
    return TiledCopy(copy_atom, layout_tv, tiler)


# ---------------------------------------------------------------------------------------------
# TiledMMA
# ---------------------------------------------------------------------------------------------


class TiledMMA:
    """``TiledMMA<MMA_Atom, AtomLayoutMNK, PermutationMNK>``: atoms laid out over (M,N,K) by ``thr_layout``."""

    def __init__(self, atom: MMAAtom, thr_layout=None, permutations=None):
        if not isinstance(atom, MMAAtom):
            raise bad_argument("atom", atom, "expected an MMA atom such as SM80_16x8x16_F32F16F16F32_TN")
        if thr_layout is None:
            thr_layout = Layout((C(1), C(1), C(1)))
        if not isinstance(thr_layout, Layout):
            raise bad_argument("thr_layout", thr_layout, "expected a Layout of atoms")
        if int(L.rank(thr_layout)) > 3:
            raise bad_argument("thr_layout", str(thr_layout), "a TiledMMA takes at most 3 modes (M,N,K)")
        if permutations is None:
            permutations = (_, _, _)
        permutations = tuple(permutations) if isinstance(permutations, (tuple, list)) else (permutations,)
        if len(permutations) > 3:
            raise bad_argument("permutations", permutations, "at most 3 modes (M,N,K)")
        for p in permutations:
            if not (p is _ or it.is_int(p) or isinstance(p, Layout)):
                raise bad_argument("permutations", p, "each mode must be _, an integer or a Layout")
            if p is not _ and not it.is_static(p if it.is_int(p) else (p.shape, p.stride)):
                raise bad_argument("permutations", str(p), "permutations must be static (CuTe requires it)")
        self.atom = atom
        self.thr_layout_mnk = L.append(thr_layout, n=3)
        self.permutation_mnk = it.append(permutations, _, 3)
        self.thr_layout_vmnk = L.tiled_product(atom.thr_id, self.thr_layout_mnk)

    def _size(self, *idx):
        return L.size(self.thr_layout_vmnk, *idx)

    def __str__(self):
        return ("TiledMMA\n"
                f"  ThrLayoutVMNK:  {self.thr_layout_vmnk}\n"
                f"  PermutationMNK: {fmt(self.permutation_mnk)}\n" + str(self.atom))

    __repr__ = __str__

    def permutation(self, i):
        p = self.permutation_mnk[i]
        if p is _:
            return self.atom.shape_mnk[i] * L.size(self.thr_layout_vmnk, i + 1)
        return p

    def tile_size_mnk(self, i):
        p = self.permutation(i)
        return L.size(p) if L.is_layout(p) else p

    def _thrfrg(self, layout, mi, ki, atom_layout, ti, tj):
        t_tensor = L.logical_divide(layout, (self.permutation(mi), self.permutation(ki)))
        a_tile = (L.make_layout(self.atom.shape_mnk[mi]), L.make_layout(self.atom.shape_mnk[ki]))
        a_tensor = L.zipped_divide(t_tensor, a_tile)
        tv = a_tensor.compose(atom_layout, _)
        v = self.thr_layout_vmnk
        thr_tile = (_, (L.make_layout(L.size(v, ti)), L.make_layout(L.size(v, tj))))
        return L.zipped_divide(tv, thr_tile)

    def thrfrg_C(self, layout):
        return self._thrfrg(layout, 0, 1, self.atom.layout_c, 1, 2)

    def thrfrg_A(self, layout):
        return self._thrfrg(layout, 0, 2, self.atom.layout_a, 1, 3)

    def thrfrg_B(self, layout):
        return self._thrfrg(layout, 1, 2, self.atom.layout_b, 2, 3)

    def _thridx_2_thrid(self):
        v = self.thr_layout_vmnk
        return L.composition(Layout._make((L.size(v), C(1)), (C(1), C(0))),
                             L.right_inverse(L.make_layout(v, L.complement(v))))

    def get_layoutC_TV(self):
        ref = L.make_layout((self.tile_size_mnk(0), self.tile_size_mnk(1)))
        return self.thrfrg_C(ref).compose(self._thridx_2_thrid(), _)

    def get_layoutA_TV(self):
        v = self.thr_layout_vmnk
        ref = L.make_layout((self.tile_size_mnk(0), self.tile_size_mnk(2)))
        atile = (_, (Layout._make((L.size(v, 1), L.size(v, 2)), (C(1), C(0))), _))
        return self.thrfrg_A(ref).compose(atile, _).compose(self._thridx_2_thrid(), _)

    def get_layoutB_TV(self):
        v = self.thr_layout_vmnk
        ref = L.make_layout((self.tile_size_mnk(1), self.tile_size_mnk(2)))
        btile = (_, (Layout._make((L.size(v, 1), L.size(v, 2)), (C(0), C(1))), _))
        return self.thrfrg_B(ref).compose(btile, _).compose(self._thridx_2_thrid(), _)

    def get_slice(self, thr_idx):
        _thr_idx(thr_idx, L.size(self.thr_layout_vmnk))
        return ThrMMA(self, self.thr_layout_vmnk.get_flat_coord(thr_idx))

    get_thread_slice = get_slice


def make_tiled_mma(atom, thr_layout=None, permutations=None):
    """``make_tiled_mma(atom, atom_layout_MNK, Tile<PermM,PermN,PermK>)``."""
    return TiledMMA(atom, thr_layout, permutations)


def tile_size(mma, i):
    if isinstance(mma, TiledMMA):
        return mma.tile_size_mnk(i)
    if isinstance(mma, TiledCopy):
        return L.size(it.get(mma.tiler_mn, i)) if L.is_layout(it.get(mma.tiler_mn, i)) else it.get(mma.tiler_mn, i)
    raise bad_argument("mma", mma, "expected a TiledMMA or TiledCopy")


class ThrMMA:
    """One thread's view of a TiledMMA: ``thr_vmnk`` is its (V, M, N, K) coordinate among the atoms."""

    def __init__(self, tiled: TiledMMA, thr_vmnk):
        self.tiled, self.thr_vmnk = tiled, thr_vmnk

    def _part(self, tensor, frg, i, j):
        t = _as_tensor(tensor)
        thr = Tensor(t.data, frg(t.layout()))
        v = self.thr_vmnk
        rest = int(L.rank(thr.layout(), 1, 1))
        return thr((v[0], (v[i], v[j])), (_, _rep(rest)))

    def partition_C(self, tensor):
        return self._part(tensor, self.tiled.thrfrg_C, 1, 2)

    def partition_A(self, tensor):
        return self._part(tensor, self.tiled.thrfrg_A, 1, 3)

    def partition_B(self, tensor):
        return self._part(tensor, self.tiled.thrfrg_B, 2, 3)

    def partition_fragment_C(self, tensor):
        p = self.partition_C(tensor)
        return Tensor(Pointer("ptr", self.tiled.atom.type_c), L.make_layout(p.shape))

    def partition_fragment_A(self, tensor):
        p = self.partition_A(tensor)
        return Tensor(Pointer("ptr", self.tiled.atom.type_a), L.make_fragment_like(p.layout()))

    def partition_fragment_B(self, tensor):
        p = self.partition_B(tensor)
        return Tensor(Pointer("ptr", self.tiled.atom.type_b), L.make_fragment_like(p.layout()))

    def __str__(self):
        return f"ThrMMA\n  Thr VMNK: {fmt(self.thr_vmnk)}\n" + str(self.tiled)


def _partition_shape(mma, shp, frg):
    dummy = L.make_layout(L.shape(shp))
    tv = frg(dummy)
    r = int(L.rank(dummy))
    return L.shape(tv(C(0), (_, _rep(r))))


def partition_shape_C(mma, shape_mn):
    return _partition_shape(mma, shape_mn, mma.thrfrg_C)


def partition_shape_A(mma, shape_mk):
    return _partition_shape(mma, shape_mk, mma.thrfrg_A)


def partition_shape_B(mma, shape_nk):
    return _partition_shape(mma, shape_nk, mma.thrfrg_B)


def partition_fragment_C(mma, shape_mn):
    return Tensor(Pointer("ptr", mma.atom.type_c), L.make_layout(partition_shape_C(mma, shape_mn)))


def make_tiled_copy_A(copy_atom, mma: TiledMMA):
    """The TiledCopy that loads A fragments exactly as ``mma`` consumes them (e.g. with ldmatrix)."""
    return TiledCopy(copy_atom, mma.get_layoutA_TV(), (mma.tile_size_mnk(0), mma.tile_size_mnk(2)))


def make_tiled_copy_B(copy_atom, mma: TiledMMA):
    return TiledCopy(copy_atom, mma.get_layoutB_TV(), (mma.tile_size_mnk(1), mma.tile_size_mnk(2)))


def make_tiled_copy_C(copy_atom, mma: TiledMMA):
    return TiledCopy(copy_atom, mma.get_layoutC_TV(), (mma.tile_size_mnk(0), mma.tile_size_mnk(1)))
