"""The CUtensorMap byte layout and the driver's acceptance rules (flashsim/sass/cutensormap.py), checked against
every cuTensorMapEncodeTiled call recorded on an H100: the bytes of every accepted call, the return code of every
call, and the bytes every call left at its output. The rules were derived from the first record
(traces/tma/tma_probes_run1.npz, keys ``encode/*``, whose counts the tests below pin); the third run's 14,670
calls (traces/tma/tma_probes.npz, drawn by the version-2 generator) are held out: the rules reproduce them too."""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from flashsim.errors import ArgumentError
from flashsim.sass import cutensormap as C
from flashsim.sass.cutensormap import BadTensorMapBytes, Rejected, TiledFields

TMA = Path(__file__).resolve().parents[1] / "traces" / "tma"
NPZ = TMA / "tma_probes_run1.npz"
HELD_OUT = TMA / "tma_probes.npz"
FILL = b"\xcd" * 128  # what the recording put in the output buffer before each call


def _load(path=NPZ):
    z = np.load(path)
    e = {k[len("encode/"):]: z[k] for k in z.files if k.startswith("encode/")}
    out = []
    for i in range(len(e["rc"])):
        r = int(e["rank"][i])
        n = min(r, 7)  # rank 6 and 7 calls passed arrays of 7 entries
        f = TiledFields(int(e["dtype"][i]), r, int(e["addr"][i]), tuple(int(x) for x in e["dims"][i][:n]),
                        tuple(int(x) for x in e["strides"][i][:max(n - 1, 0)]),
                        tuple(int(x) for x in e["box"][i][:n]), tuple(int(x) for x in e["estr"][i][:n]),
                        int(e["interleave"][i]), int(e["swizzle"][i]), int(e["l2"][i]), int(e["oob"][i]))
        out.append(SimpleNamespace(i=i, fields=f, rc=int(e["rc"][i]), data=bytes(e["bytes"][i]),
                                   group=str(e["group"][i]), label=str(e["label"][i]),
                                   doc_valid=bool(e["doc_valid"][i])))
    im2col = [(int(rc), bytes(b), json.loads(str(a)))
              for rc, b, a in zip(e["im2col_rc"], e["im2col_bytes"], e["im2col_args"])]
    return out, im2col


RECORDS, IM2COL = _load()
ACCEPTED = [r for r in RECORDS if r.rc == 0]
REFUSED = [r for r in RECORDS if r.rc != 0]

#: calls whose return code the rules do not explain: none (listed here, with why, if one ever is)
UNEXPLAINED: dict[int, str] = {}


def test_the_rules_reproduce_every_held_out_call():
    held, _ = _load(HELD_OUT)
    assert len(held) == 14670
    acc = [r for r in held if r.rc == 0]
    assert len(acc) == 9979 and all(r.rc == 1 for r in held if r.rc)
    assert [r.i for r in acc if C.encode(r.fields) != r.data] == []
    assert [r.i for r in held if C.driver_accepts(r.fields)[0] != (r.rc == 0)] == []
    assert [r.i for r in held if C.driver_output(r.fields, FILL) != r.data] == []
    assert [r.i for r in acc if C.decode(r.data) != r.fields] == []


def test_record_counts():
    assert len(RECORDS) == 14670
    assert len(ACCEPTED) == 8390 and len(REFUSED) == 6280
    assert all(r.rc == 1 for r in REFUSED)  # CUDA_ERROR_INVALID_VALUE


def test_encode_reproduces_every_accepted_call():
    bad = [r.i for r in ACCEPTED if C.encode(r.fields) != r.data]
    assert bad == []


def test_decode_inverts_every_accepted_call():
    bad = [r.i for r in ACCEPTED if C.decode(r.data) != r.fields]
    assert bad == []
    # a uint8 array and a memoryview decode the same
    r = ACCEPTED[0]
    assert C.decode(np.frombuffer(r.data, np.uint8)) == C.decode(memoryview(r.data)) == r.fields


def test_driver_accepts_matches_every_return_code():
    wrong = []
    for r in RECORDS:
        ok, why = C.driver_accepts(r.fields)
        assert ok == (why == "")
        if ok != (r.rc == 0) and r.i not in UNEXPLAINED:
            wrong.append((r.i, r.group, r.label, why))
    assert wrong == []
    n_ok = sum(C.driver_accepts(r.fields)[0] for r in RECORDS)
    assert n_ok == 8390 and len(RECORDS) - n_ok == 6280


def test_driver_output_reproduces_every_buffer():
    # refused calls too: untouched, or zeroed with the fields checked before the failing rule written; this is
    # what fixes the order in which the driver checks its rules
    wrong = [r.i for r in RECORDS if C.driver_output(r.fields, FILL) != r.data]
    assert wrong == []
    untouched = sum(r.data == FILL for r in REFUSED)
    assert untouched == 179
    assert all(r.data[72:80] == bytes(8) for r in REFUSED if r.data != FILL)  # word 9 written last


def test_decode_refuses_every_refused_calls_leftovers():
    fields = collections.Counter()
    for r in REFUSED:
        with pytest.raises(BadTensorMapBytes) as exc:
            C.decode(r.data)
        fields[exc.value.field] += 1
    assert fields == {"word 9 (the swizzle's repeat)": 6280}


def _kind(reason: str) -> str:
    if "the box holds" in reason:
        return "shared memory"
    if "inner box dimension" in reason and "multiple of 16" in reason:
        return "inner box bytes"
    if "below 2^57" in reason:
        return "address bits 57-63"
    return reason


def test_where_the_documentation_is_wrong():
    # the 2,859 calls valid by the documentation that the driver refused, by the rule that refuses them
    refused = collections.Counter(_kind(C.driver_accepts(r.fields)[1]) for r in REFUSED if r.doc_valid)
    assert refused == {"shared memory": 2186, "inner box bytes": 326, "address bits 57-63": 347}
    assert all(r.fields.interleave for r in REFUSED if r.doc_valid
               and _kind(C.driver_accepts(r.fields)[1]) == "inner box bytes")
    # the 77 calls the documentation forbids that the driver accepted: an output 8..48 bytes past a 64-byte
    # boundary (41), a zero stride (28), interleave 32B without swizzle 32B (8)
    accepted = [r for r in ACCEPTED if not r.doc_valid]
    assert len(accepted) == 77
    kinds = collections.Counter(
        "tensorMap alignment" if "tensorMap" in r.label or "misaligned" in r.label
        else "zero stride" if 0 in r.fields.global_strides
        else "interleave 32B" if r.fields.interleave == 2 and r.fields.swizzle != 1 else r.label
        for r in accepted)
    assert kinds == {"tensorMap alignment": 41, "zero stride": 28, "interleave 32B": 8}


SWEPT = {"dtype": "tensorDataType", "addr": "globalAddress", "interleave": "interleave", "swizzle": "swizzle",
         "l2": "l2Promotion", "oob": "oobFill"}


def test_sweep_reasons_name_the_swept_parameter():
    for r in REFUSED:
        if r.group != "sweep":
            continue
        label = r.label.split(" bit ")[0]
        if label.startswith(("dims[", "strides[", "estr[")):
            i = label[label.index("["):]
            name = {"dims": "globalDim", "strides": "globalStrides", "estr": "elementStrides"}[label.split("[")[0]]
            want = name + i
        elif label.startswith("box["):
            want = "boxDim"
        else:
            want = SWEPT[label]
        why = C.driver_accepts(r.fields)[1]
        assert want in why, (r.i, r.label, why)


def test_im2col_maps_are_not_tiled_maps():
    assert len(IM2COL) == 12 and all(rc == 0 for rc, _, _ in IM2COL)
    for _, data, args in IM2COL:
        with pytest.raises(BadTensorMapBytes, match="im2col") as exc:
            C.decode(data)
        assert exc.value.field == "word 1 bit 0"
        assert int.from_bytes(data[0:8], "little") == args["addr"]


# ------------------------------------------------------------------------------------------------ by hand
def plain(**changes) -> TiledFields:
    """A valid rank-3 FLOAT16 map, 64 x 32 x 4, box 64 x 8 x 2, 128B swizzle."""
    f = TiledFields(6, 3, 0x7F00_0000_1000, (64, 32, 4), (128, 4096), (64, 8, 2), (1, 1, 1), swizzle=3)
    return f.replace(**changes)


@pytest.mark.parametrize("changes, field, text", [
    (dict(box_dim=(64, 8, 300)), "boxDim[2]", "boxDim[2] = 300 exceeds 256"),
    (dict(global_strides=(128, 200)), "globalStrides[1]", "globalStrides[1] = 200 is not a multiple of 16"),
    (dict(global_strides=(1 << 40, 4096)), "globalStrides[0]", "globalStrides[0] = 1099511627776 is not below 2^40"),
    (dict(data_type=7), "boxDim[0]", "the inner box dimension in bytes (boxDim[0] = 64 x 4 bytes of tensorDataType "
                                     "FLOAT32 = 256) exceeds the 128B swizzle span (swizzle = 3 (B128))"),
    (dict(box_dim=(4, 8, 2), swizzle=0), "boxDim[0]", "(boxDim[0] = 4 x 2 bytes of tensorDataType FLOAT16 = 8) is "
                                                      "not a multiple of 16"),
    (dict(box_dim=(64, 256, 256), global_dim=(64, 256, 256), global_strides=(128, 32768)), "boxDim",
     "the box holds 8388608 bytes (the product of boxDim[i] // elementStrides[i], times the element size 2), more "
     "than the 233472 bytes (228 KiB) of an SM's shared memory"),
    (dict(global_address=0x7F00_0000_1008), "globalAddress", "globalAddress = 0x7f0000001008 is not a multiple of 16"),
    (dict(global_address=1 << 57), "globalAddress", "is not below 2^57"),
    (dict(global_dim=(64, 0, 4)), "globalDim[1]", "globalDim[1] = 0 is zero"),
    (dict(global_dim=(64, 32, (1 << 32) + 1)), "globalDim[2]", "globalDim[2] = 4294967297 exceeds 2^32"),
    (dict(element_strides=(1, 9, 1)), "elementStrides[1]", "elementStrides[1] = 9 exceeds 8"),
    (dict(data_type=13), "tensorDataType", "tensorDataType = 13 (U4x16_ALIGN8B): the packed 4- and 6-bit types are "
                                           "refused on sm_90"),
    (dict(data_type=16), "tensorDataType", "tensorDataType = 16 is not a CUtensorMapDataType"),
    (dict(swizzle=4), "swizzle", "swizzle = 4 (B128_ATOM_32B) is refused on sm_90"),
    (dict(oob_fill=1, data_type=3, box_dim=(32, 8, 2)), "oobFill", "needs a floating-point tensorDataType, not "
                                                                   "3 (INT32)"),
    (dict(l2_promotion=4), "l2Promotion", "l2Promotion = 4 is not a CUtensorMapL2promotion"),
    (dict(rank=2, global_dim=(64, 32), global_strides=(128,), box_dim=(64, 8), element_strides=(1, 1),
          interleave=1), "interleave", "interleave = 1 (B16) needs tensorRank >= 3, not 2"),
    (dict(interleave=2, global_strides=(128, 4112)), "globalStrides[1]", "globalStrides[1] = 4112 is not a "
                                                                         "multiple of 32 (interleave 32B)"),
])
def test_reasons_name_the_rule_and_the_field(changes, field, text):
    f = plain(**changes)
    ok, why = C.driver_accepts(f)
    assert not ok and text in why
    with pytest.raises(Rejected) as exc:
        C.encode(f)
    assert exc.value.field == field and text in str(exc.value) and exc.value.reason == why
    assert isinstance(exc.value, ArgumentError)


def test_the_found_rules_by_hand():
    assert C.driver_accepts(plain())[0]
    assert C.driver_accepts(plain(global_strides=(0, 0)))[0]  # zero strides are accepted
    assert C.driver_accepts(plain(global_address=0))[0]
    assert C.driver_accepts(plain(global_address=(1 << 57) - 16))[0]
    assert C.driver_accepts(plain(box_dim=(64, 256, 256), global_dim=(4, 4, 4)))[0] is False  # too many bytes
    assert C.driver_accepts(plain(box_dim=(64, 8, 100)))[0]  # a box larger than the tensor (4) is fine
    # interleave 32B with any swizzle, and no span bound with interleave
    assert C.driver_accepts(plain(interleave=2, swizzle=0))[0]
    assert C.driver_accepts(plain(interleave=1, swizzle=1, box_dim=(128, 8, 2)))[0]
    # the shared-memory bound rounds boxDim / elementStrides down, elementStrides[0] included
    big = plain(swizzle=0, data_type=0, box_dim=(240, 243, 4), global_strides=(240, 240 * 243))
    assert C.box_bytes(big) == 233280 and C.driver_accepts(big)[0]
    assert not C.driver_accepts(big.replace(box_dim=(240, 244, 4)))[0]
    assert C.box_bytes(big.replace(element_strides=(7, 1, 1))) == 34 * 243 * 4
    assert C.box_bytes(big.replace(element_strides=(1, 1, 5))) == 0  # 4 // 5: word 8 holds 0


def test_encode_fields_by_hand():
    f = TiledFields(11, 2, 0x1230, (100, 7), ((1 << 39) + 16,), (8, 3), (1, 2), interleave=0, swizzle=1,
                    l2_promotion=2, oob_fill=1)
    w = [int.from_bytes(C.encode(f)[8 * k:8 * k + 8], "little") for k in range(16)]
    assert w[0] == 0x1230
    assert w[1] & 0xFFFFFFFF == (1 << 4) | (7 << 7) | (1 << 13) | (1 << 15) | (1 << 16) | (2 << 17)
    assert w[1] >> 32 == 1 and (w[3] >> 32) & 0xF == 8  # (2^39 + 16) >> 4 = 2^35 + 1
    assert w[4] == 99 | (6 << 32)
    assert w[6] == (1 << 35) | (7 << 56) and w[7] == 2
    assert w[8] == 8 * (3 // 2) * 4 and w[9] == 256
    assert w[2] == w[5] == 0 and not any(w[10:])
    assert C.decode(C.encode(f)) == f


def _word(data: bytes, k: int, value: int) -> bytes:
    return data[:8 * k] + value.to_bytes(8, "little") + data[8 * k + 8:]


def test_decode_names_the_field_of_bad_bytes():
    good = C.encode(plain())
    w = [int.from_bytes(good[8 * k:8 * k + 8], "little") for k in range(16)]
    cases = [
        (FILL, "word 9 (the swizzle's repeat)", "all 128 bytes are 0xcd"),
        (bytes(128), "word 9 (the swizzle's repeat)", "a refused call leaves them 0"),
        (_word(good, 0, w[0] | 8), "globalAddress", "multiple of 16"),
        (_word(good, 1, w[1] | 1 << 20), "word 1 bits 19-31", "0 in every map"),
        (_word(good, 1, w[1] | 2), "word 1 bits 1-3", "0 in every map"),
        (_word(good, 1, (w[1] & ~(0xF << 7)) | 11 << 7), "tensorDataType", "no data type has this code"),
        (_word(good, 1, (w[1] & ~(0xF << 7)) | 6 << 7 | 1 << 16), "tensorDataType", "no data type has this code"),
        (_word(good, 1, w[1] | 3 << 11), "interleave", "not an interleave"),
        (_word(good, 1, w[1] | 7 << 4), "tensorRank", "rank 8 exceeds 5"),
        (_word(good, 3, w[3] | 5), "globalStrides[3]", "slot of a dimension"),
        (_word(good, 5, w[5] | 9 << 32), "globalDim[3]", "slot of a dimension"),
        (_word(good, 7, w[7] | 1 << 16), "boxDim[3]", "slot of a dimension"),
        (_word(good, 6, w[6] | 1 << 47), "word 6 bits 47-55", "0 in every map"),
        (_word(good, 7, w[7] | 1 << 40), "word 7 bits 32-63", "0 in every map"),
        (_word(good, 8, w[8] + 2), "word 8 (the bytes of one box)", "the fields give"),
        (_word(good, 9, 16), "word 9 (the swizzle's repeat)", "swizzle B128 gives 1024"),
        (_word(good, 12, 1), "word 12", "0 in every map"),
        (_word(good, 6, (w[6] & ~(0xFF << 56)) | 95 << 56), "boxDim[0]", "= 192) exceeds the 128B swizzle span"),
    ]
    for data, field, text in cases:
        with pytest.raises(BadTensorMapBytes) as exc:
            C.decode(data)
        assert exc.value.field == field and text in str(exc.value), (field, str(exc.value))
    with pytest.raises(ArgumentError, match="expected the 128 bytes"):
        C.decode(good[:64])


def test_fields_are_checked_as_c_arguments():
    with pytest.raises(ArgumentError, match="global_dim=.*expected 3 entries for rank 3"):
        plain(global_dim=(64, 32))
    with pytest.raises(ArgumentError, match="global_strides=.*expected 2 entries"):
        plain(global_strides=(128,))
    with pytest.raises(ArgumentError, match=r"box_dim\[0\]=-1: not representable"):
        plain(box_dim=(-1, 8, 2))
    with pytest.raises(ArgumentError, match="rank=True: expected an int"):
        plain(rank=True)
    with pytest.raises(ArgumentError, match="swizzle=1.5: expected an int"):
        plain(swizzle=1.5)
    # rank 0 / 6 / 7 calls carry any number of entries: the driver refuses the rank first
    assert C.driver_accepts(plain(rank=6))[1] == "tensorRank = 6 exceeds 5"
    assert C.driver_accepts(plain(rank=0))[1] == "tensorRank = 0 is zero"
    # numpy integers and int enums are ints; TiledFields.of reads any object with the parameter names
    import enum

    class Sw(enum.IntEnum):
        B128 = 3

    f = plain(swizzle=Sw.B128, global_address=np.uint64(0x7F00_0000_1000))
    assert f == plain() and type(f.swizzle) is int
    obj = SimpleNamespace(**{k: getattr(f, k) for k in f.__dataclass_fields__})
    assert TiledFields.of(obj) == f
    with pytest.raises(ArgumentError, match="expected 128 bytes"):
        C.driver_output(f, b"")


def _random_valid(rng: random.Random) -> TiledFields:
    """A random map the rules accept (the shape of a generator for the next recording)."""
    while True:
        r = rng.randint(1, 5)
        dt = rng.randint(0, 12)
        es = C.element_size(dt)
        il = rng.choice([0, 0, 0, 1, 2]) if r >= 3 else 0
        sw = rng.randint(0, 3)
        unit = 32 if il == 2 else 16
        inner_max = min(256 * es, {0: 4096, 1: 32, 2: 64, 3: 128}[sw] if il == 0 else 4096)
        inner = rng.randrange(16, inner_max + 1, 16) if inner_max >= 16 else 0
        if not inner or inner % es or inner // es > 256:
            continue
        box = [inner // es] + [rng.randint(1, 256) for _ in range(r - 1)]
        est = [rng.randint(1, 8) for _ in range(r)]
        f = TiledFields(dt, r, rng.randrange(0, 1 << 57, unit), tuple(rng.randint(1, 1 << 32) for _ in range(r)),
                        tuple(rng.randrange(0, 1 << 40, unit) for _ in range(r - 1)), tuple(box), tuple(est), il, sw,
                        rng.randint(0, 3), rng.randint(0, 1) if dt >= 6 else 0)
        if C.box_bytes(f) <= C.SHARED_BOX_LIMIT:
            return f


def test_random_valid_maps_round_trip():
    rng = random.Random(7)
    for _ in range(2000):
        f = _random_valid(rng)
        ok, why = C.driver_accepts(f)
        assert ok, (f, why)
        data = C.encode(f)
        assert C.decode(data) == f and C.driver_output(f, FILL) == data


def test_the_maps_of_the_copy_cases():
    # the maps the load / reduce / risky cases of the same recording encoded for their TMA copies (cases whose
    # encoding was not reached hold no map): accepted ones decode to the case's arguments, the refused one is
    # the driver's leftovers
    z = np.load(NPZ)
    seen = collections.Counter()
    for phase in ("load", "reduce", "risky"):
        def g(key):
            return z[f"{phase}/{key}"]

        for i in range(len(g("rc"))):
            rc, data, r = int(g("rc")[i]), bytes(g("map")[i]), int(g("rank")[i])
            if rc not in (0, 1):
                continue
            f = TiledFields(int(g("dtype")[i]), r, int(g("gaddr")[i]) + int(g("addr_off")[i]),
                            tuple(int(x) for x in g("dims")[i][:r]), tuple(int(x) for x in g("strides")[i][:r - 1]),
                            tuple(int(x) for x in g("box")[i][:r]), tuple(int(x) for x in g("estr")[i][:r]),
                            int(g("interleave")[i]), int(g("swizzle")[i]), int(g("l2")[i]), int(g("oob")[i]))
            assert C.driver_accepts(f)[0] == (rc == 0), (phase, i)
            assert C.driver_output(f, data) == data, (phase, i)
            if rc == 0:
                assert C.decode(data) == f and C.encode(f) == data
            seen[rc] += 1
    assert seen == {0: 27, 1: 1}
