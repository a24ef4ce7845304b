"""The modifiers each modelled SASS opcode may carry: any other makes the instruction refuse to run
(NotImplementedError with its PC, text and line) instead of running with the modifier ignored.

A semantic reads the modifiers it knows; one it has never met (UIADD3.64 before it was modelled: a 64-bit add
taken for a 32-bit one) would otherwise be dropped in silence. The sets are the modifiers of every form that
flashsim's kernels, probes and recorded cubins contain (NVRTC 13.0, ptxas 13.0 and 12.8, Triton, numba-cuda),
and the differential fuzzer's programs compile to (the SIMD and DPX integer intrinsics, bf16x2 arithmetic:
tests/test_sass_video.py), each read by its semantic, plus the memory instructions' ordering and cache hints (:data:`HINTS`), which
change no value in this in-order model. Shape modifiers (wgmma's m64nNkK, a tensor copy's rank) are patterns.
"""

from __future__ import annotations

import re

__all__ = ["HINTS", "MODIFIERS", "unmodelled"]

#: memory-ordering scopes, cache and eviction hints of loads, stores and atomics
HINTS = frozenset({"STRONG", "WEAK", "GPU", "SYS", "CTA", "SM", "CONSTANT", "LU", "BYPASS", "EL", "EF", "EN", "NA",
                   "LTC64B", "LTC128B", "LTC256B", "PRIVATE"})
#: the compares and the predicate combinations of FSETP / HSET2 (every one the semantics read) and ISETP
FCMP = frozenset({'LTU', 'EQU', 'LEU', 'GTU', 'NEU', 'GEU', 'NUM', 'NAN', 'LT', 'EQ', 'LE', 'GT', 'NE', 'GE', 'T', 'F'})
ICMP = frozenset({'EQ', 'NE', 'LT', 'LE', 'GT', 'GE'})
BOPS = frozenset({'AND', 'OR', 'XOR'})
SHAPE = frozenset({re.compile(r"64x\d+x(8|16|32)")})
DIMS = frozenset({re.compile(r"[1-5]D")})
#: the packed 16-bit lanes of the integer min/max forms (__vmaxu2, __vimax3_s16x2, __viaddmin_u16x2, ...)
SIMD16 = frozenset({'U16x2', 'S16x2'})

MODIFIERS: dict[str, frozenset] = {
    "ATOM": frozenset({'32', '64', 'ADD', 'AND', 'CAS', 'DEC', 'E', 'EXCH', 'F32', 'FTZ', 'INC', 'MAX', 'MIN', 'OR', 'POPC', 'RN', 'S32', 'S64', 'SAFEADD', 'U32', 'U64', 'XOR'}) | HINTS,
    "ATOMG": frozenset({'32', '64', 'ADD', 'AND', 'CAS', 'DEC', 'E', 'EXCH', 'F32', 'FTZ', 'INC', 'MAX', 'MIN', 'OR', 'RN', 'S32', 'S64', 'SAFEADD', 'U32', 'U64', 'XOR'}) | HINTS,
    "ATOMS": frozenset({'32', '64', 'ADD', 'AND', 'CAS', 'CAST', 'DEC', 'EXCH', 'INC', 'MAX', 'MIN', 'OR', 'POPC', 'S32', 'S64', 'SAFEADD', 'SPIN', 'U32', 'U64', 'XOR'}),
    "B2R": frozenset({'RESULT'}),
    "BAR": frozenset({'AND', 'ARV', 'DEFER_BLOCKING', 'OR', 'POPC', 'RED', 'SYNC'}),
    "BMOV": frozenset({'32'}),
    "BMSK": frozenset({'W'}),
    "BPT": frozenset({'TRAP'}),
    "BRA": frozenset({'ANY', 'CONV', 'DIV', 'U'}),
    "BREAK": frozenset(),
    "BREV": frozenset(),
    "BRX": frozenset(),
    "BSSY": frozenset(),
    "BSYNC": frozenset(),
    "CALL": frozenset({'NOINC', 'REL'}),
    "CCTL": frozenset({'IVALL'}),
    "CCTLL": frozenset({'IVALL'}),
    "CGAERRBAR": frozenset(),
    "CS2R": frozenset(),
    "DADD": frozenset({'RM', 'RP', 'RZ'}),
    "DEPBAR": frozenset({'LE'}),
    "DFMA": frozenset({'RM', 'RP', 'RZ'}),
    "DMUL": frozenset({'RM', 'RP', 'RZ'}),
    "DSETP": FCMP | BOPS | frozenset({'MAX', 'MIN'}),
    "ELECT": frozenset(),
    "ENDCOLLECTIVE": frozenset(),
    "ERRBAR": frozenset(),
    "EXIT": frozenset(),
    "F2F": frozenset({'BF16', 'F16', 'F32', 'F64', 'FTZ', 'RM', 'RP', 'RZ'}),
    "F2FP": frozenset({'BF16', 'F16', 'F32', 'MERGE_C', 'PACK_AB', 'RELU', 'RZ', 'SATFINITE'}),
    "F2I": frozenset({'CEIL', 'F64', 'FLOOR', 'FTZ', 'NTZ', 'S64', 'TRUNC', 'U32', 'U64'}),
    "FADD": frozenset({'FTZ', 'RM', 'RP', 'RZ', 'SAT'}),
    "FCHK": frozenset(),
    "FENCE": frozenset({'ASYNC', 'S', 'VIEW'}),
    "FFMA": frozenset({'FTZ', 'RM', 'RP', 'RZ', 'SAT'}),
    "FLO": frozenset({'SH', 'U32'}),
    "FMNMX": frozenset({'FTZ', 'NAN'}),
    "FMUL": frozenset({'FTZ', 'RM', 'RP', 'RZ', 'SAT'}),
    "FRND": frozenset({'CEIL', 'F32', 'F64', 'FLOOR', 'FTZ', 'TRUNC'}),
    "FSEL": frozenset(),
    "FSET": FCMP | BOPS | frozenset({'BF', 'FTZ'}),
    "FSETP": FCMP | BOPS | frozenset({'FTZ'}),
    "HADD2": frozenset({'F32', 'BF16_V2'}),
    "HFMA2": frozenset({'MMA', 'BF16_V2'}),
    "HGMMA": frozenset({'BF16', 'F16', 'F32', 'TF32'}) | SHAPE,
    "HMMA": frozenset({'16816', '1688', 'BF16', 'F16', 'F32'}),
    "HMUL2": frozenset({'BF16_V2'}),
    "HSET2": FCMP | BOPS | frozenset({'BF', 'FTZ', 'BF16_V2'}),
    "I2F": frozenset({'F64', 'RM', 'RP', 'RZ', 'S64', 'U32', 'U64', 'S8', 'U8', 'S16', 'U16'}),
    "I2FP": frozenset({'F32', 'RZ', 'S32', 'U32'}),
    "IABS": frozenset(),
    "IADD3": frozenset({'X'}),
    "IMAD": frozenset({'HI', 'IADD', 'MOV', 'SHL', 'U32', 'WIDE', 'X'}),
    "IMNMX": frozenset({'RELU', 'U32'}),
    "ISETP": ICMP | BOPS | frozenset({'U32', 'EX'}),
    "JMP": frozenset({'U'}),
    "JMX": frozenset(),
    "LD": frozenset({'128', '32', '64', 'E', 'S16', 'S8', 'U16', 'U8'}) | HINTS,
    "LDC": frozenset({'64', 'U8', 'S8', 'U16', 'S16'}),
    "LDG": frozenset({'128', '32', '64', 'E', 'S16', 'S8', 'U16', 'U8'}) | HINTS,
    "LDGDEPBAR": frozenset(),
    "LDGSTS": frozenset({'128', '64', 'E', 'ZFILL'}) | HINTS,
    "LDL": frozenset({'128', '32', '64', 'S16', 'S8', 'U16', 'U8'}) | HINTS,
    "LDS": frozenset({'128', '32', '64', 'S16', 'S8', 'U16', 'U8'}) | HINTS,
    "LDSM": frozenset({'16', '2', '4', 'M88', 'MT88'}),
    "LEA": frozenset({'HI', 'SX32', 'X'}),
    "LOP3": frozenset({'LUT'}),
    "MATCH": frozenset({'ALL', 'ANY', 'U64'}),
    "MEMBAR": frozenset({'ALL', 'CTA', 'GPU', 'SC'}),
    "MOV": frozenset(),
    "MOVM": frozenset({'16', 'MT88'}),
    "MUFU": frozenset({'BF16', 'COS', 'EX2', 'F16', 'LG2', 'RCP', 'RCP64H', 'RSQ', 'RSQ64H', 'SIN', 'SQRT', 'TANH'}),
    "NANOSLEEP": frozenset({'SYNCS'}),
    "NOP": frozenset(),
    "P2R": frozenset(),
    "PLOP3": frozenset({'LUT'}),
    "PMTRIG": frozenset(),
    "POPC": frozenset(),
    "PRMT": frozenset({'B4E', 'ECL', 'ECR', 'F4E', 'RC16', 'RC8'}),
    "QGMMA": frozenset({'E4M3', 'E5M2', 'F16', 'F32'}) | SHAPE,
    "R2P": frozenset(),
    "R2UR": frozenset({'OR'}),
    "RED": frozenset({'32', '64', 'ADD', 'AND', 'CAS', 'DEC', 'E', 'EXCH', 'F32', 'FTZ', 'INC', 'MAX', 'MIN', 'OR', 'RN', 'S32', 'S64', 'SAFEADD', 'U32', 'U64', 'XOR'}) | HINTS,
    "REDG": frozenset({'32', '64', 'ADD', 'AND', 'CAS', 'DEC', 'E', 'EXCH', 'F32', 'FTZ', 'INC', 'MAX', 'MIN', 'OR', 'RN', 'S32', 'S64', 'SAFEADD', 'U32', 'U64', 'XOR'}) | HINTS,
    "REDUX": frozenset({'MAX', 'MIN', 'OR', 'S32', 'SUM', 'XOR'}),
    "RET": frozenset({'NODEC', 'REL'}),
    "S2R": frozenset(),
    "S2UR": frozenset(),
    "SEL": frozenset(),
    "SGXT": frozenset({'U32', 'W'}),
    "SHF": frozenset({'HI', 'L', 'R', 'S32', 'S64', 'U32', 'U64', 'W'}),
    "SHFL": frozenset({'BFLY', 'DOWN', 'IDX', 'UP'}),
    "ST": frozenset({'128', '32', '64', 'E', 'S16', 'S8', 'U16', 'U8'}) | HINTS,
    "STG": frozenset({'128', '32', '64', 'E', 'S16', 'S8', 'U16', 'U8'}) | HINTS,
    "STL": frozenset({'128', '32', '64', 'S16', 'S8', 'U16', 'U8'}) | HINTS,
    "STS": frozenset({'128', '32', '64', 'S16', 'S8', 'U16', 'U8'}) | HINTS,
    "STSM": frozenset({'16', '2', '4', 'M88', 'MT88'}),
    "SYNCS": frozenset({'64', 'A0TR', 'A0TX', 'A1T0', 'ARRIVE', 'ART0', 'CCTL', 'EXCH', 'IV', 'OPTOUT', 'PHASECHK', 'RED', 'TRANS64', 'TRYWAIT'}),
    "UBLKCP": frozenset({'G', 'S'}),
    "UBMSK": frozenset({'W'}),
    "UBREV": frozenset(),
    "UFLO": frozenset({'SH', 'U32'}),
    "UIABS": frozenset(),
    "UIADD3": frozenset({'64', 'X'}),
    "UIMAD": frozenset({'U32', 'WIDE', 'X'}),
    "UIMNMX": frozenset({'RELU', 'U32'}),
    "UISETP": ICMP | BOPS | frozenset({'U32', 'EX'}),
    "ULDC": frozenset({'64', 'U8', 'S8', 'U16', 'S16'}),
    "ULEA": frozenset({'HI', 'SX32', 'X'}),
    "ULOP3": frozenset({'LUT'}),
    "UMOV": frozenset(),
    "UP2UR": frozenset(),
    "UPLOP3": frozenset({'LUT'}),
    "UPOPC": frozenset(),
    "UPRMT": frozenset(),
    "USEL": frozenset(),
    "USETMAXREG": frozenset({'CTAPOOL', 'DEALLOC', 'TRY_ALLOC'}),
    "USGXT": frozenset({'U32'}),
    "USHF": frozenset({'HI', 'L', 'R', 'S32', 'S64', 'U32', 'U64', 'W'}),
    "UTMACCTL": frozenset({'IV', 'PF'}),
    "UTMACMDFLUSH": frozenset(),
    "UTMALDG": frozenset() | DIMS,
    "UTMAPF": frozenset({'L2'}) | DIMS,
    "UTMAREDG": frozenset({'ADD', 'AND', 'DEC', 'INC', 'MAX', 'MIN', 'OR', 'XOR'}) | DIMS,
    "UTMASTG": frozenset() | DIMS,
    "VABSDIFF": frozenset({'U32'}),
    "VABSDIFF4": frozenset({'U8', 'ACC'}),
    "VIADD": frozenset({'16x2'}),
    "VIADDMNMX": SIMD16 | frozenset({'RELU', 'U32'}),
    "VIMNMX": SIMD16 | frozenset({'RELU', 'U32'}),
    "VIMNMX3": SIMD16 | frozenset({'RELU', 'U32'}),
    "VOTE": frozenset({'ALL', 'ANY'}),
    "VOTEU": frozenset({'ALL', 'ANY'}),
    "WARPGROUP": frozenset({'ARRIVE', 'DEPBAR', 'LE'}),
    "WARPSYNC": frozenset({'ALL', 'COLLECTIVE', 'EXCLUSIVE'}),
    "YIELD": frozenset(),
}


def unmodelled(opcode: str, mods) -> list[str]:
    """The modifiers of ``opcode`` that no semantic reads (empty: the form may run)."""
    allowed = MODIFIERS.get(opcode)
    if allowed is None:
        return list(mods)
    bad = []
    for m in mods:
        if m in allowed:
            continue
        if any(isinstance(a, re.Pattern) and a.fullmatch(m) for a in allowed):
            continue
        bad.append(m)
    return bad

