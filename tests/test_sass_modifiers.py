"""No silent wrong answers from a modifier the interpreter has never met: every modelled opcode lists the
modifiers its semantic reads (flashsim.sass.modifiers), and an instruction with any other refuses to run with
its PC, text and line. Also uniform votes in divergent code (VOTEU votes over the lanes executing it)."""

from __future__ import annotations

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.sass import modifiers, opcodes
from flashsim.sass.isa import parse_instruction
from flashsim.sass.program import Program


def test_every_modelled_opcode_lists_its_modifiers():
    missing = sorted(op for op, _ in opcodes.table() if op not in modifiers.MODIFIERS)
    assert not missing, f"opcodes without a modifier entry in flashsim.sass.modifiers: {missing}"
    stale = sorted(set(modifiers.MODIFIERS) - {op for op, _ in opcodes.table()})
    assert not stale, f"modifier entries of opcodes that are not modelled: {stale}"


def test_patterns_cover_shapes_and_ranks():
    assert modifiers.unmodelled("HGMMA", ("64x200x16", "F32", "BF16")) == []
    assert modifiers.unmodelled("UTMALDG", ("3D",)) == []
    assert modifiers.unmodelled("UTMALDG", ("6D",)) == ["6D"]
    assert modifiers.unmodelled("LDG", ("E", "EL", "128")) == []  # cache hints change no value


def _program_of(records):
    mod = fc.RawModule(code='extern "C" __global__ void k(int* p) { p[threadIdx.x] = 1; }')
    prog = mod.get_function("k")._prog()
    instrs = [parse_instruction(16 * i, rec) for i, rec in enumerate(records)]
    return Program(prog.kernel, instrs, {}, None)


@pytest.mark.parametrize("opcode,operands,odd", [
    ("IADD3.64", "R2, R2, 0x1, RZ", ".64"),          # a 64-bit add where only the uniform form is measured
    ("UIADD3.128", "UR4, UR4, 0x1, URZ", ".128"),
    ("FADD.FTZ.RNA", "R1, R2, R3", ".RNA"),
    ("LDS.U.256", "R4, [R2]", ".U, .256"),
])
def test_an_unknown_modifier_refuses_to_run(opcode, operands, odd):
    prog = _program_of([{"opcode": opcode, "operands": operands}, {"opcode": "EXIT", "operands": ""}])
    with pytest.raises(NotImplementedError, match=rf"SASS {opcode}: the modifiers? {odd} of {opcode.split('.')[0]} "
                                                  r"(is|are) not modelled: pc=0x0000"):
        prog.compiled[0](None, None)


AGGREGATE = r'''
extern "C" __global__ void agg(unsigned* ctr, unsigned* out, int k) {
    const unsigned lane = threadIdx.x & 31;
    if (lane < k) {                       // a divergent region: only lanes 0 .. k-1 execute the votes
        unsigned m = __activemask();
        unsigned leader = __ffs(m) - 1;
        unsigned b = __ballot_sync(m, 1);
        unsigned old = 0;
        if (lane == leader) old = atomicAdd(ctr, __popc(b));
        old = __shfl_sync(m, old, leader);
        out[threadIdx.x] = old + __popc(b & ((1u << lane) - 1));
    }
}'''


def _aggregate(k: int):
    mod = fc.RawModule(code=AGGREGATE, name="aggregate.cu")
    ctr, out = fc.zeros(1, np.uint32), fc.asarray(np.full(64, 0xFFFFFFFF, np.uint32))
    mod.get_function("agg")((1,), (64,), (ctr, out, np.int32(k)))
    return mod, int(ctr.get()[0]), out.get()


@pytest.mark.parametrize("k", [1, 3, 17, 31, 32])
def test_a_uniform_vote_in_divergent_code_sees_only_the_executing_lanes(k):
    mod, ctr, out = _aggregate(k)
    names = {ins.name for ins in mod.get_function("agg")._prog().instructions.values()}
    assert "VOTEU.ANY" in names  # ptxas's uniform vote inside the `lane < k` region
    assert ctr == 2 * k
    for w in range(2):
        first = w * k  # warp 0's leader adds first (warps run in order here)
        got = out[32 * w:32 * w + 32]
        assert list(got[:k]) == [first + i for i in range(k)] or list(got[:k]) == [k * (1 - w) + i for i in range(k)]
        assert (got[k:] == 0xFFFFFFFF).all()


@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 5, 32])
def test_the_gpu_agrees_on_the_divergent_aggregate(k):
    from flashsim.gpu import runtime

    cupy = runtime.require_gpu()
    mod, _, _ = _aggregate(k)
    f = runtime.load_cubin(mod.cubin).get_function("agg")
    ctr, out = cupy.zeros(1, cupy.uint32), cupy.full(64, 0xFFFFFFFF, cupy.uint32)
    f((1,), (64,), (ctr, out, np.int32(k)))
    cupy.cuda.Device().synchronize()
    got = cupy.asnumpy(out)
    assert int(ctr.get()[0]) == 2 * k
    for w in range(2):
        lo = sorted(got[32 * w:32 * w + k] - got[32 * w])
        assert lo == list(range(k)) and (got[32 * w + k:32 * w + 32] == 0xFFFFFFFF).all()


def test_padding_that_never_executes_parses_whatever_nvdisasm_prints():
    from flashsim.sass.isa import SassParseError, parse_instruction

    # CUDA 13.0's nvdisasm prints ptxas's `@!PT LDS RZ, [RZ]` padding as `RZ[RZ]`: kept, with no operands
    ins = parse_instruction(0x190, {"opcode": "LDS", "operands": "RZ[RZ]", "predicate": "@!PT"})
    assert ins.operands == () and ins.guard.invert
    with pytest.raises(SassParseError, match="pc=0x0190 `@P0 LDS RZ\\[RZ\\]`"):
        parse_instruction(0x190, {"opcode": "LDS", "operands": "RZ[RZ]", "predicate": "@P0"})
