"""SASS instructions as data: nvdisasm's JSON (opcode, operands, predicate, source line) parsed into
:class:`Instr` with typed :class:`Operand` s.

Operand syntax (as nvdisasm prints sm_90 SASS)::

    R7  RZ  UR4  URZ  P0  PT  UP1  UPT  B1  SR_TID.X        registers (RZ/URZ read 0, PT/UPT read true)
    -R7  |R7|  -|R7|  ~R7  !P0                               negate, absolute value, invert, not
    R7.H1_H1  R7.64  R4.reuse  R3.X4                          suffixes (halves, pairs, reuse hint, scale)
    0x1f  -0x1  1.4426950216293334961  +INF  -QNAN            immediates (integer bits or float values)
    c[0x0][0x210]  c[0x3][R12]  c[0x0][R2+0x10]               constant bank, offset (or register + offset)
    [R2.64+UR4+0x10]  desc[UR8][R2.64+-0x400]                 memory: register(s) + uniform + offset
    gdesc[UR4]  gdesc[UR8].tnspB  gdesc[URZ]                  wgmma matrix descriptors (HGMMA/QGMMA): A in
                                                              URn:URn+1, B in URn+2:URn+3; .tnspA/.tnspB/
                                                              .negA/.negB suffixes
    0x2c0  $symbol                                            branch / call targets (section offsets)
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace

import numpy as np

from flashsim.errors import FlashsimError

__all__ = ["Instr", "Operand", "SassParseError", "f64_immediate", "parse_instruction", "parse_operand", "RZ", "URZ",
           "PT"]

RZ = 255
URZ = 63
PT = 7


class SassParseError(FlashsimError):
    """nvdisasm printed an operand flashsim cannot read; the message shows the instruction."""


@dataclass(frozen=True)
class Operand:
    """One operand. ``kind``: r ur p up b sb (scoreboard) sr imm fimm c mem gdesc target."""

    kind: str
    index: int = 0  # register number (RZ 255, URZ 63, PT/UPT 7); constant bank for 'c'
    neg: bool = False  # '-'
    absolute: bool = False  # '|x|'
    invert: bool = False  # '~' (bitwise) or '!' (predicate)
    suffix: tuple[str, ...] = ()
    value: int = 0  # integer immediate, f32 bits for fimm, constant offset, branch target, memory offset
    name: str = ""  # special register name, call symbol
    # memory / indexed constant: the register parts
    reg: int = RZ  # base R register (RZ = none)
    reg64: bool = False  # base is a 64-bit pair (R2.64)
    ureg: int = URZ  # uniform register part (URZ = none)
    ureg64: bool = False
    desc: int = -1  # desc[URx] memory descriptor register (-1 = none)
    text: str = ""

    @property
    def is_zero_reg(self) -> bool:
        return (self.kind == "r" and self.index == RZ) or (self.kind == "ur" and self.index == URZ)


_REG = re.compile(r"^(R|UR|UP|P|SB|B)(\d+|Z|T)$")
_HEX = re.compile(r"^-?0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(\d+(\.\d*)?([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?)$")
_CONST = re.compile(r"^c\[(0x[0-9a-fA-F]+)\]\[(.+)\]$")
_MEM = re.compile(r"^(?:desc\[(UR\d+)\])?\[(.*)\]$")
_GDESC = re.compile(r"^gdesc\[UR(\d+|Z)\]((?:\.\w+)*)$")
# nvdisasm prints a NaN immediate without its payload (QNAN, SNAN): the text stands for a class; the bits are in
# the encoding, and encoded_nan_immediates reads them there (FSEL R17, R0, -QNAN, P0 selects 0xfffffdd8 on the
# H200: a select passes a payload through; campaign seed 6). The values below are placeholders until then.
_SPECIAL_FLOATS = {"+INF": 0x7F800000, "INF": 0x7F800000, "-INF": 0xFF800000, "+QNAN": 0x7FFFFFFF,
                   "QNAN": 0x7FFFFFFF, "-QNAN": 0xFFFFFFFF, "+SNAN": 0x7F800001, "SNAN": 0x7F800001,
                   "-SNAN": 0xFF800001}


_NAN_TEXTS = frozenset(k for k in _SPECIAL_FLOATS if "NAN" in k)


_SPECIAL_F64 = {"+INF": 0x7FF0000000000000, "INF": 0x7FF0000000000000, "-INF": 0xFFF0000000000000}


def f64_immediate(text: str) -> int | None:
    """The binary64 bits of a double-precision instruction's immediate (DADD R2, R4, 1.5): the instruction
    encodes the double's high word (its low word is zero) and nvdisasm prints that double's value in
    decimal, so the text is read as a float64 (an ``fimm`` Operand's ``value`` holds f32 bits instead).
    None when the text names no such double: a NaN (nvdisasm prints no payload), or a value whose low word
    is not zero."""
    t = text.strip()
    if t in _SPECIAL_F64:
        return _SPECIAL_F64[t]
    if not _FLOAT.match(t):
        return None
    bits = int(np.array(float(t), np.float64).view(np.uint64))
    return bits if bits & 0xFFFFFFFF == 0 else None


def _reg_number(kind: str, num: str) -> int:
    if num == "Z":
        return RZ if kind == "R" else URZ
    if num == "T":
        return PT
    return int(num)


def _f32_bits(text: str) -> int:
    # nvdisasm prints f32 immediates with enough digits to round-trip; converting through float64 then
    # float32 (round to nearest) restores the encoded bits. (A double-precision instruction's immediate may
    # lie beyond f32's range: its bits are read from the text again, f64_immediate.)
    with np.errstate(over="ignore"):
        return int(np.array(float(text), np.float64).astype(np.float32).view(np.uint32))


def _mem_parts(inner: str, full: str) -> dict:
    out: dict = {"reg": RZ, "reg64": False, "ureg": URZ, "ureg64": False, "value": 0, "suffix": ()}
    if inner.strip() == "":
        return out
    parts = re.split(r"\+(?=[^+])", inner.replace("+-", "+~NEG~"))
    offset = 0
    suffix: list[str] = []
    for raw in parts:
        p = raw.replace("~NEG~", "-").strip()
        if not p:
            continue
        if _HEX.match(p):
            offset += int(p, 16)
            continue
        if p.lstrip("-").isdigit():
            offset += int(p)
            continue
        base, *sfx = p.split(".")
        m = _REG.match(base)
        if m is None:
            raise SassParseError(f"unreadable address part {p!r} in {full!r}")
        kind, n = m.group(1), _reg_number(m.group(1), m.group(2))
        if kind == "R":
            out["reg"], out["reg64"] = n, "64" in sfx
            suffix += [s for s in sfx if s != "64"]
        elif kind == "UR":
            out["ureg"], out["ureg64"] = n, "64" in sfx
            suffix += [s for s in sfx if s != "64"]
        else:
            raise SassParseError(f"unexpected register {p!r} in address {full!r}")
    out["value"] = offset
    out["suffix"] = tuple(suffix)
    return out


@functools.lru_cache(maxsize=1 << 16)
def parse_operand(text: str) -> Operand:
    """Parse one operand as nvdisasm prints it (operands are immutable: a text parses once per process)."""
    t = text.strip()
    full = t
    if t in _SPECIAL_FLOATS:
        return Operand("fimm", value=_SPECIAL_FLOATS[t], text=full)
    m = _CONST.match(t)
    if m:
        bank = int(m.group(1), 16)
        inner = m.group(2)
        if _HEX.match(inner):
            return Operand("c", index=bank, value=int(inner, 16), text=full)
        parts = _mem_parts(inner, full)
        return Operand("c", index=bank, value=parts["value"], reg=parts["reg"], ureg=parts["ureg"], text=full)
    m = _GDESC.match(t)
    if m:  # index: the first uniform register of the descriptor pair(s); suffix: its modifiers
        mods = tuple(x for x in m.group(2).split(".") if x)
        return Operand("gdesc", index=_reg_number("UR", m.group(1)), suffix=mods, text=full)
    m = _MEM.match(t)
    if m:
        parts = _mem_parts(m.group(2), full)
        desc = int(m.group(1)[2:]) if m.group(1) else -1
        return Operand("mem", desc=desc, text=full, **parts)
    neg = absolute = invert = False
    if t.startswith("!"):
        invert, t = True, t[1:]
    if t.startswith("-") and not _HEX.match(t) and not _FLOAT.match(t):
        neg, t = True, t[1:]
    if t.startswith("~"):
        invert, t = True, t[1:]
    if t.startswith("|") and t.count("|") == 2:
        end = t.index("|", 1)
        absolute = True
        t = t[1:end] + t[end + 1:]
    if t.startswith("SR_") or t == "SRZ":
        return Operand("sr", name=t, text=full)
    if re.match(r"^\{\s*\d+(\s*,\s*\d+)*\s*\}$", t):  # DEPBAR {5,4,3,2,1,0}: a set of scoreboards (bit mask)
        return Operand("sblist", value=sum(1 << int(x) for x in t.strip("{}").split(",")), text=full)
    if t.startswith("$") or t.startswith("`("):
        return Operand("target", name=t.strip("`()"), value=-1, text=full)
    if _HEX.match(t):
        v = int(t, 16)
        return Operand("imm", value=v, neg=neg, text=full)
    if _FLOAT.match(t):
        v = _f32_bits(t)
        if neg:
            v ^= 0x80000000
        return Operand("fimm", value=v, text=full)
    base, *sfx = t.split(".")
    m = _REG.match(base)
    if m:
        kind = {"R": "r", "UR": "ur", "P": "p", "UP": "up", "B": "b", "SB": "sb"}[m.group(1)]
        sfx = tuple(s for s in sfx if s != "reuse")
        return Operand(kind, index=_reg_number(m.group(1), m.group(2)), neg=neg, absolute=absolute,
                       invert=invert, suffix=sfx, text=full)
    if re.match(r"^[A-Za-z_$][\w$.]*$", t):  # a symbol (RET's function, a label)
        return Operand("target", name=t, value=-1, text=full)
    raise SassParseError(f"unreadable operand {full!r}")


def split_operands(text: str) -> list[str]:
    """Split at top-level commas: not inside brackets, nor inside a scoreboard set ``{5,4,3,2,1,0}``."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return [o.strip() for o in out if o.strip()]


@dataclass(frozen=True)
class Instr:
    """One SASS instruction at byte offset ``pc`` of its .text section."""

    pc: int
    opcode: str  # the base opcode, e.g. 'IMAD'
    mods: tuple[str, ...]  # modifiers in order, e.g. ('WIDE', 'U32')
    operands: tuple[Operand, ...]
    guard: Operand | None  # @P0 / @!UP1, or None
    text: str  # as nvdisasm prints it
    line: tuple[str, int] | None = None  # (source file, line) from the line table
    attrs: dict = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        """Opcode with modifiers, e.g. 'IMAD.WIDE.U32'."""
        return ".".join((self.opcode, *self.mods))

    def where(self) -> str:
        loc = f" ({self.line[0]}:{self.line[1]})" if self.line else ""
        return f"pc={self.pc:#06x} `{self.text}`{loc}"


#: texture and surface instructions: not modelled, so their operands (``1D``, ``ARRAY_2D``, ...) are kept as text
#: only, and the instruction refuses when it runs (a kernel with an unexecuted texture path still loads)
TEXTURE_OPCODES = frozenset({"TEX", "TLD", "TLD4", "TMML", "TXD", "TXQ", "SULD", "SUST", "SURED", "SUATOM", "SUQUERY"})


def encoded_nan_immediates(ins: Instr, word: int) -> Instr:
    """``ins`` with each NaN immediate (nvdisasm prints +QNAN, -SNAN, ... without the payload) holding the f32 bits
    of its encoding ``word`` (the 128-bit instruction, little-endian): bits 32..63, where sm_90 puts a 32-bit
    immediate (not the packed-half instructions: ops_half reads their two halves from the text). Bits there that
    are not a NaN of the printed sign and class leave the operand unknown: the
    instruction refuses when it runs (``attrs["nan_immediate"]``)."""
    if ins.opcode.startswith("H"):  # HADD2, HFMA2, ...: two f16 immediates, read from the text (ops_half)
        return ins
    ops = list(ins.operands)
    changed = False
    for i, op in enumerate(ops):
        if op.kind != "fimm" or op.text not in _NAN_TEXTS:
            continue
        bits = (word >> 32) & 0xFFFFFFFF
        neg = op.text.startswith("-")
        quiet = "QNAN" in op.text
        if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF and bool(bits >> 31) == neg \
                and bool(bits & 0x400000) == quiet:
            ops[i] = replace(op, value=bits)
        else:
            return replace(ins, attrs={**ins.attrs, "nan_immediate": f"{op.text} (encoding bits 32..63: {bits:#010x})"})
        changed = True
    return replace(ins, operands=tuple(ops)) if changed else ins


def parse_instruction(pc: int, rec: dict, files: list[str] | None = None) -> Instr:
    """An :class:`Instr` from one record of nvdisasm's JSON ``sass-instructions``."""
    op_full = rec["opcode"]
    opcode, *mods = op_full.split(".")
    ops_text = rec.get("operands", "")
    pred = rec.get("predicate")
    parts = split_operands(ops_text)
    if pred and not pred.startswith("@"):
        # nvdisasm's JSON files P2R's / R2P's predicate-register operand PR under "predicate": it is an
        # operand (P2R d, PR, a, mask; R2P PR, a, mask), not a guard
        parts.insert(1 if opcode == "P2R" else 0, pred)
        pred = None
    text = (f"{pred} " if pred else "") + op_full + (" " + ", ".join(parts) if parts else "")
    try:
        guard = parse_operand(pred[1:]) if pred else None
        operands = tuple(parse_operand(o) for o in parts)
    except SassParseError as exc:
        if pred in ("@!PT", "@!UPT") or opcode in TEXTURE_OPCODES:
            # ptxas's padding never executes; some nvdisasm releases print its operands unreadably
            # (CUDA 13.0's `@!PT LDS RZ[RZ]`): keep the instruction without them
            operands = ()
        else:
            raise SassParseError(f"pc={pc:#06x} `{text}`: {exc}") from None
    line = None
    if "source-line" in rec:
        fid = rec.get("source-file-id", 0)
        fname = files[fid] if files and 0 <= fid < len(files) else f"file{fid}"
        line = (fname, int(rec["source-line"]))
    return Instr(pc, opcode, tuple(mods), operands, guard, text, line, dict(rec.get("other-attributes", {})))
