"""Register-write logging at the PTX level: one kernel's PTX rewritten so that one chosen thread appends
(site, value bits) to a buffer after every instruction that writes a register.

The GPU's registers cannot be read from outside a running kernel, so the kernel reports them itself. The
instrumented PTX is linked by nvJitLink (:func:`flashsim.sass.toolchain.link_ptx`) and the same cubin runs
on the GPU and in the interpreter; the two logs, compared entry by entry, give the first instruction where
they part (:mod:`flashsim.locate`).

The log buffer (uint32 words; the host writes the header, the kernel the rest)::

    word 0..2   ctaid x, y, z of the thread to log        (host)
    word 3..5   tid x, y, z of the thread to log          (host)
    word 6      capacity: entries the buffer holds        (host)
    word 7      entries the thread produced (may exceed the capacity: then the log overflowed)
    entry k, at word 8 + 4k:
      +0  site id (an index into Instrumented.sites)
      +1  0
      +2  value bits 0..31  (a predicate: 0 or 1; an 8/16-bit register: its bits, zero-extended)
      +3  value bits 32..63 (64-bit registers)

What is logged: the destination registers (vector destinations ``{%r1, %r2}`` element by element,
``%p|%q`` pairs both) of every instruction of the kernel's ``.entry`` body, including those of inline asm
and of its scoped ``{ .reg ... }`` blocks. A guarded instruction (``@%p`` / ``@!%p``) logs only when its
guard holds (the guard is read before the instruction runs). Not logged: instructions with no register
destination (stores, branches, barriers, calls), ``wgmma.mma_async`` accumulators (written asynchronously;
reading them before ``wgmma.wait_group`` would change the program), floating-point products without a
rounding modifier (unless asked for: logging one keeps ptxas from fusing it into an FFMA), and the bodies
of ``.func`` functions the kernel calls. A PTX instruction or register kind the rewriter does not know raises NotImplementedError
naming it and its line.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np

from flashsim.errors import FlashsimError, bad_argument

__all__ = ["ADDRESS_SEEDS", "ENTRY_WORDS", "HEADER_WORDS", "Instrumented", "PtxError", "Site", "ThreadLog",
           "instrument", "log_buffer", "read_log"]

HEADER_WORDS = 8
ENTRY_WORDS = 4
PREFIX = "%__fsl_"  # the rewriter's own registers (a name no compiler emits)


class PtxError(FlashsimError):
    """The PTX text is not what the rewriter can read (no such kernel, unbalanced braces)."""


@dataclass(frozen=True)
class Site:
    """One logged register write: an instruction's destination (one element of a vector destination)."""

    id: int
    ordinal: int  # the instruction's index among the kernel's instructions (0-based)
    ptx_line: int  # 1-based line of the instruction in the original PTX text
    text: str  # the instruction, whitespace collapsed
    register: str  # the destination register
    reg_type: str  # its declared type: pred, b16, f32, b64, ...
    file: str | None  # source file of the instruction's .loc (None: no line info)
    line: int | None
    column: int | None
    inlined_at: tuple[str, int] | None = None  # the user's line an inlined header function was called from
    sources: tuple[str, ...] = ()  # the registers the instruction reads (not those inside [address] operands)
    #: the address spaces whose run-dependent base the value may carry (:data:`ADDRESS_SEEDS`): the two runs'
    #: values are then compared relative to that base
    address: tuple[str, ...] = ()

    @property
    def width(self) -> int:
        """Bits of the register (1 for a predicate)."""
        return _WIDTH[self.reg_type]

    @property
    def source(self) -> str:
        """``file:line`` of the instruction (where an inlined header function was called from, too)."""
        if self.file is None or not self.line:
            return "(no line info)"
        here = f"{self.file}:{self.line}"
        if self.inlined_at is not None:
            return f"{self.inlined_at[0]}:{self.inlined_at[1]} (inlined {here})"
        return here

    @property
    def user_line(self) -> tuple[str, int] | None:
        """(file, line) in the user's code: the outermost call site of an inlined function, else the .loc."""
        if self.inlined_at is not None:
            return self.inlined_at
        if self.file is None or not self.line:
            return None
        return self.file, self.line


@dataclass(frozen=True)
class Instrumented:
    """The rewritten PTX of one kernel, its site table and what else the rewriting found."""

    ptx: str
    kernel: str
    sites: tuple[Site, ...]
    files: dict[int, str]
    instructions: int  # instructions in the kernel's body
    params: int  # the kernel's parameters before the log pointer was appended
    not_logged: tuple[str, ...] = field(default=())  # instructions with destinations deliberately not logged


@dataclass(frozen=True)
class ThreadLog:
    """A log buffer read back: ``sites[k]``, ``values[k]`` (uint64 bits) for the entries kept."""

    ctaid: tuple[int, int, int]
    tid: tuple[int, int, int]
    capacity: int
    produced: int  # entries the thread produced (kept ones and those past the capacity)
    sites: np.ndarray
    values: np.ndarray

    @property
    def overflowed(self) -> bool:
        return self.produced > self.capacity

    def __len__(self) -> int:
        return len(self.sites)


def log_buffer(capacity: int, ctaid, tid) -> np.ndarray:
    """A zeroed log buffer of ``capacity`` entries that selects the thread (ctaid, tid)."""
    if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or not 1 <= capacity < 2**28:
        raise bad_argument("capacity", capacity, "expected a positive int below 2**28 (entries of 16 bytes)")
    c, t = _xyz("ctaid", ctaid), _xyz("tid", tid)
    buf = np.zeros(HEADER_WORDS + ENTRY_WORDS * int(capacity), np.uint32)
    buf[0:3], buf[3:6], buf[6] = c, t, capacity
    return buf


def read_log(buf: np.ndarray) -> ThreadLog:
    """The entries of a log buffer after a launch."""
    buf = np.asarray(buf)
    if buf.dtype != np.uint32 or buf.ndim != 1 or len(buf) < HEADER_WORDS or (len(buf) - HEADER_WORDS) % ENTRY_WORDS:
        raise bad_argument("buf", f"{buf.dtype}{list(buf.shape)}", "expected a log buffer made by log_buffer()")
    capacity, produced = int(buf[6]), int(buf[7])
    kept = min(capacity, produced)
    e = buf[HEADER_WORDS:HEADER_WORDS + ENTRY_WORDS * kept].reshape(kept, ENTRY_WORDS)
    values = e[:, 2].astype(np.uint64) | (e[:, 3].astype(np.uint64) << np.uint64(32))
    return ThreadLog(tuple(int(x) for x in buf[0:3]), tuple(int(x) for x in buf[3:6]), capacity, produced,
                     e[:, 0].copy(), values)


def _xyz(name, v) -> tuple[int, int, int]:
    v = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(v) <= 3 or not all(isinstance(x, (int, np.integer)) and 0 <= x < 2**31 for x in v):
        raise bad_argument(name, v, "expected 1 to 3 non-negative ints (x, y, z)")
    return tuple(int(x) for x in v) + (0,) * (3 - len(v))  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------------
# Registers and instructions
# ------------------------------------------------------------------------------------------------------

#: declared register type -> width in bits (PTX ISA "Fundamental types"; .f16/.bf16 live in 16-bit
#: registers, .f16x2/.bf16x2 in 32-bit ones)
_WIDTH = {"pred": 1, "b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
          "b32": 32, "u32": 32, "s32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32,
          "b64": 64, "u64": 64, "s64": 64, "f64": 64}
#: how a register of each width is stored into the log's value word
_STORE = {1: None, 8: "st.global.b8", 16: "st.global.b16", 32: "st.global.b32", 64: "st.global.b64"}

#: instructions whose first operand, when it is a register, is written (PTX ISA chapter 9, by section)
_DEST_FIRST = frozenset("""
add sub mul mad mul24 mad24 sad div rem abs neg min max popc clz bfind fns brev bfe bfi szext bmsk dp4a dp2a
addc subc madc testp copysign rcp sqrt rsqrt sin cos lg2 ex2 tanh fma set setp selp slct and or xor not cnot
lop3 shf shl shr mov shfl prmt ld ldu cvt cvta isspacep mapa getctarank ldmatrix movmatrix alloca stacksave
tex tld4 txq suld suq istypep atom vote match activemask redux elect mbarrier mma wmma
""".split())
#: instructions that write no register (their register operands, if any, are all read)
_NO_DEST = frozenset("""
st stmatrix red bar barrier bra brx call ret exit membar fence prefetch prefetchu cp trap brkpt nanosleep
pmevent stackrestore griddepcontrol setmaxnreg discard applypriority sust sured tensormap multimem
""".split())
#: instructions whose destinations are deliberately not logged (see the module docstring)
_UNLOGGED = frozenset({"wgmma"})
#: floating-point products the code generator may contract with a following add (PTX ISA, mul: "mul/add
#: sequences with no rounding modifiers may be optimized to use fused-multiply-add instructions")
_CONTRACTIBLE = re.compile(r"^mul(\.ftz)?(\.sat)?\.(f32|f64|f16|f16x2|bf16|bf16x2)$")

_REG_DECL = re.compile(r"^\.reg\s*\.(\w+)\s+(.*)$", re.S)
_LOC = re.compile(r"^\.loc\s+(\d+)\s+(\d+)\s+(\d+)(.*)$")
_INLINED = re.compile(r"inlined_at\s+(\d+)\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_IDENT = r"[A-Za-z_$%][\w$]*"
_LABEL = re.compile(rf"({_IDENT})\s*:")
_GUARD = re.compile(rf"^@(!?)\s*({_IDENT})\s+")


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _split_operands(s: str) -> list[str]:
    """Top-level comma split (braces, brackets and parentheses keep their commas)."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


class _Scopes:
    """Registers declared in the nested ``{ }`` scopes of the body: name -> type."""

    def __init__(self):
        self.stack: list[dict[str, str]] = [{}]
        self.ranges: list[list[tuple[str, int, str]]] = [[]]  # (prefix, count, type) of %r<57>-style declarations

    def push(self):
        self.stack.append({})
        self.ranges.append([])

    def pop(self, where: str):
        if len(self.stack) == 1:
            raise PtxError(f"unbalanced '}}' in the kernel body ({where})")
        self.stack.pop()
        self.ranges.pop()

    def declare(self, decl: str, where: str):
        m = _REG_DECL.match(decl)
        if m is None:
            raise NotImplementedError(f"PTX register declaration {decl!r} ({where}) is not read by the log rewriter")
        rtype, names = m.group(1), m.group(2)
        if rtype not in _WIDTH:
            raise NotImplementedError(f"PTX registers of type .{rtype} ({where}: {_collapse(decl)}) are not logged "
                                      "by the rewriter")
        for item in _split_operands(names):
            r = re.fullmatch(rf"({_IDENT})\s*<\s*(\d+)\s*>", item)
            if r:
                self.ranges[-1].append((r.group(1), int(r.group(2)), rtype))
            elif re.fullmatch(_IDENT, item):
                self.stack[-1][item] = rtype
            else:
                raise NotImplementedError(f"PTX register declaration item {item!r} ({where})")

    def type_of(self, name: str) -> str | None:
        for level in range(len(self.stack) - 1, -1, -1):
            t = self.stack[level].get(name)
            if t is not None:
                return t
            for prefix, count, rtype in self.ranges[level]:
                if name.startswith(prefix) and name[len(prefix):].isdigit() and int(name[len(prefix):]) < count:
                    return rtype
        return None


# ------------------------------------------------------------------------------------------------------
# Reading the body: statements, labels, braces, .loc
# ------------------------------------------------------------------------------------------------------

@dataclass
class _Tok:
    kind: str  # "open", "close", "label", "loc", "stmt"
    start: int
    end: int  # exclusive; for a statement just past its ';'
    text: str


def _tokens(body: str, line_of) -> list[_Tok]:
    toks, i, n = [], 0, len(body)
    while i < n:
        c = body[i]
        if c.isspace():
            i += 1
        elif body.startswith("//", i):
            j = body.find("\n", i)
            i = n if j < 0 else j
        elif body.startswith("/*", i):
            j = body.find("*/", i + 2)
            if j < 0:
                raise PtxError(f"unterminated comment at PTX line {line_of(i)}")
            i = j + 2
        elif c == "{":
            toks.append(_Tok("open", i, i + 1, c))
            i += 1
        elif c == "}":
            toks.append(_Tok("close", i, i + 1, c))
            i += 1
        elif body.startswith(".loc", i) and (i + 4 < n and body[i + 4] in " \t"):
            j = body.find("\n", i)
            j = n if j < 0 else j
            toks.append(_Tok("loc", i, j, body[i:j].strip()))
            i = j
        else:
            m = _LABEL.match(body, i)
            if m is not None and not body.startswith("@", i):
                toks.append(_Tok("label", i, m.end(), m.group(1)))
                i = m.end()
                continue
            j, in_str = i, False
            while j < n:
                ch = body[j]
                if ch == '"':
                    in_str = not in_str
                elif not in_str and ch == ";":
                    break
                elif not in_str and body.startswith("//", j):  # a comment inside a multi-line statement
                    k = body.find("\n", j)
                    j = n if k < 0 else k
                    continue
                j += 1
            if j >= n:
                raise PtxError(f"PTX statement without ';' at line {line_of(i)}: {_collapse(body[i:i + 80])!r}")
            text = re.sub(r"//[^\n]*", "", body[i:j])
            toks.append(_Tok("stmt", i, j + 1, text.strip()))
            i = j + 1
    return toks


def _entry_span(ptx: str, kernel: str) -> tuple[int, int, int, int]:
    """(start of the parameter list '(', its ')' , the body's '{', just past the body's '}') of the entry."""
    m = re.search(rf"\.entry\s+{re.escape(kernel)}\s*\(", ptx)
    if m is None:
        found = re.findall(rf"\.entry\s+({_IDENT})", ptx)
        raise bad_argument("kernel", kernel, f"no .entry of that name in the PTX (entries: {found})")
    p_open = m.end() - 1
    p_close = ptx.find(")", p_open)
    b_open = ptx.find("{", p_close)
    if p_close < 0 or b_open < 0:
        raise PtxError(f"the .entry {kernel} has no parameter list or body")
    depth, i = 0, b_open
    n = len(ptx)
    while i < n:
        if ptx.startswith("//", i):
            j = ptx.find("\n", i)
            i = n if j < 0 else j
            continue
        if ptx.startswith("/*", i):
            j = ptx.find("*/", i)
            if j < 0:
                break
            i = j + 2
            continue
        ch = ptx[i]
        if ch == '"':
            j = ptx.find('"', i + 1)
            if j < 0:
                break
            i = j + 1
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return p_open, p_close, b_open, i + 1
        i += 1
    raise PtxError(f"the body of .entry {kernel} has no closing brace")


def _dests(op: str, where: str, scopes: _Scopes) -> list[str] | None:
    """The registers a first operand names (None: not a register operand)."""
    op = op.strip()
    if op.startswith("{"):
        if not op.endswith("}"):
            raise NotImplementedError(f"vector operand {op!r} ({where})")
        items = [x.strip() for x in op[1:-1].split(",")]
    elif "|" in op:
        items = [x.strip() for x in op.split("|")]
    else:
        items = [op]
    out = []
    for it in items:
        if it == "_":
            continue
        if not re.fullmatch(_IDENT, it) or scopes.type_of(it) is None:
            if len(items) == 1:
                return None  # an address, an immediate, a label: the caller decides
            raise NotImplementedError(f"destination {it!r} of {op!r} is not a declared register ({where})")
        out.append(it)
    return out


# ------------------------------------------------------------------------------------------------------
# The rewriting
# ------------------------------------------------------------------------------------------------------

def instrument(ptx: str, kernel: str, *, products: bool = False) -> Instrumented:
    """Rewrite ``.entry kernel`` of ``ptx`` to log its register writes for one thread (module docstring).

    The kernel gains a trailing ``.param .u64`` parameter: the log buffer's address (see
    :func:`log_buffer`). Every other function of the module is left as it is.

    ``products``: also log floating-point products written without a rounding modifier (``mul.f32``,
    ``mul.ftz.f16x2``, ...). ptxas may fuse such a product into the add that consumes it (one FFMA); a
    second reader (the log) keeps it from doing so, and the instrumented build would then round twice where
    the kernel rounds once. Left out by default: the add that consumes the product is logged."""
    if not isinstance(ptx, str):
        raise bad_argument("ptx", type(ptx).__name__, "expected the PTX text as a str")
    if PREFIX in ptx:
        raise PtxError(f"the PTX already uses registers named {PREFIX}* (instrumented twice?)")
    files = {int(k): v for k, v in _FILE.findall(ptx)}
    p_open, p_close, b_open, b_end = _entry_span(ptx, kernel)
    line_starts = np.cumsum([0] + [len(s) + 1 for s in ptx.split("\n")])

    def line_of(pos: int) -> int:
        return int(np.searchsorted(line_starts, pos, side="right"))

    params_text = ptx[p_open + 1:p_close]
    nparams = len([p for p in _split_operands(params_text) if p.strip()])
    log_param = f"{kernel}_param_flashsim_log"
    new_params = (params_text.rstrip() + ("," if nparams else "") + f"\n\t.param .u64 {log_param}\n")

    body_start = b_open + 1
    body = ptx[body_start:b_end - 1]
    toks = _tokens(body, lambda i: line_of(body_start + i))
    scopes = _Scopes()
    loc: tuple[int, int, int, tuple[str, int] | None] | None = None
    before: dict[int, str] = {}  # body offset -> text inserted there
    after: dict[int, str] = {}
    sites: list[Site] = []
    not_logged: list[str] = []
    ordinal = 0
    prologue_at = None
    depth = 0
    for tok in toks:
        where = f"PTX line {line_of(body_start + tok.start)}"
        if tok.kind == "open":
            if prologue_at is None and depth == 0:
                prologue_at = tok.start
            scopes.push()
            depth += 1
            continue
        if tok.kind == "close":
            scopes.pop(where)
            depth -= 1
            continue
        if tok.kind == "loc":
            m = _LOC.match(tok.text)
            if m is None:
                raise NotImplementedError(f".loc directive {tok.text!r} ({where})")
            inl = None
            chain = _INLINED.findall(m.group(4))
            if chain:
                f_idx, ln = int(chain[-1][0]), int(chain[-1][1])
                inl = (files.get(f_idx, f"<file {f_idx}>"), ln)
            loc = (int(m.group(1)), int(m.group(2)), int(m.group(3)), inl)
            continue
        if tok.kind == "label":
            if prologue_at is None and depth == 0:
                prologue_at = tok.start
            continue
        text = tok.text
        if text.startswith("."):
            if re.match(r"^\.reg\b", text):
                scopes.declare(text, where)
            elif re.match(r"^\.(shared|local|param|const|global|pragma)\b", text):
                pass
            else:
                raise NotImplementedError(f"PTX directive {_collapse(text)!r} inside the kernel body ({where})")
            continue
        # an instruction
        if prologue_at is None:
            prologue_at = tok.start
        ordinal += 1
        guard = None
        rest = text
        g = _GUARD.match(rest)
        if g is not None:
            guard = (g.group(1) == "!", g.group(2))
            rest = rest[g.end():]
            if scopes.type_of(guard[1]) != "pred":
                raise NotImplementedError(f"guard {g.group(0).strip()!r} is not a declared predicate ({where})")
        parts = rest.split(None, 1)
        opcode = parts[0]
        base = opcode.split(".")[0]
        operands = _split_operands(parts[1]) if len(parts) > 1 else []
        if base in _NO_DEST:
            if base == "call" and operands and operands[0].startswith("(") and any(
                    scopes.type_of(x.strip()) for x in operands[0].strip("()").split(",") if x.strip()):
                raise NotImplementedError(f"a call returning into a register ({where}: {_collapse(text)})")
            continue
        if base in _UNLOGGED:
            if operands and operands[0].startswith("{"):
                not_logged.append(f"{where}: {_collapse(text)}")
            continue
        if not products and _CONTRACTIBLE.match(opcode):
            not_logged.append(f"{where}: {_collapse(text)}")
            continue
        if base not in _DEST_FIRST:
            raise NotImplementedError(f"PTX instruction {opcode!r} is not known to the log rewriter ({where}: "
                                      f"{_collapse(text)})")
        if not operands:
            continue
        dests = _dests(operands[0], f"{where}: {_collapse(text)}", scopes)
        if dests is None:
            if re.fullmatch(_IDENT, operands[0].strip()) and not operands[0].startswith("$"):
                raise NotImplementedError(f"the destination {operands[0]!r} of {opcode} is not a declared register "
                                          f"({where}: {_collapse(text)})")
            continue
        if not dests:
            continue
        srcs = tuple(dict.fromkeys(
            r for o in operands[1:] for r in re.findall(_IDENT, re.sub(r"\[[^\]]*\]", "", o))
            if scopes.type_of(r) is not None))
        code = []
        if guard is not None:
            neg, gp = guard
            if neg:
                before[tok.start] = (f"not.pred \t{PREFIX}g, {gp};\n\tand.pred \t{PREFIX}g, {PREFIX}g, {PREFIX}p;\n\t")
            else:
                before[tok.start] = f"and.pred \t{PREFIX}g, {gp}, {PREFIX}p;\n\t"
            cond = f"{PREFIX}g"
        else:
            cond = f"{PREFIX}p"
        for d in dests:
            rtype = scopes.type_of(d)
            width = _WIDTH[rtype]
            site = Site(id=len(sites), ordinal=ordinal - 1, ptx_line=line_of(body_start + tok.start),
                        text=_collapse(text), register=d, reg_type=rtype,
                        file=files.get(loc[0], f"<file {loc[0]}>") if loc and loc[1] else None,
                        line=loc[1] if loc and loc[1] else None, column=loc[2] if loc and loc[1] else None,
                        inlined_at=loc[3] if loc and loc[1] else None, sources=srcs)
            sites.append(site)
            code.append(f"setp.lt.and.u32 \t{PREFIX}q, {PREFIX}n, {PREFIX}cap, {cond};")
            code.append(f"mul.wide.u32 \t{PREFIX}a, {PREFIX}n, {ENTRY_WORDS * 4};")
            code.append(f"add.s64 \t{PREFIX}a, {PREFIX}a, {PREFIX}base;")
            code.append(f"@{PREFIX}q st.global.u32 \t[{PREFIX}a+{HEADER_WORDS * 4}], {site.id};")
            if width == 1:
                code.append(f"selp.u32 \t{PREFIX}t, 1, 0, {d};")
                code.append(f"@{PREFIX}q st.global.u32 \t[{PREFIX}a+{HEADER_WORDS * 4 + 8}], {PREFIX}t;")
            else:
                code.append(f"@{PREFIX}q {_STORE[width]} \t[{PREFIX}a+{HEADER_WORDS * 4 + 8}], {d};")
            code.append(f"@{cond} add.u32 \t{PREFIX}n, {PREFIX}n, 1;")
        code.append(f"@{cond} st.global.u32 \t[{PREFIX}base+28], {PREFIX}n;")
        after[tok.end] = "\n\t" + "\n\t".join(code)
    if scopes.stack and len(scopes.stack) != 1:
        raise PtxError(f"unbalanced braces in the body of .entry {kernel}")
    if prologue_at is None:
        prologue_at = len(body)

    decls = "\n".join([
        f"\t.reg .pred \t{PREFIX}p, {PREFIX}q, {PREFIX}g;",
        f"\t.reg .b32 \t{PREFIX}n, {PREFIX}cap, {PREFIX}t, {PREFIX}s;",
        f"\t.reg .b64 \t{PREFIX}base, {PREFIX}a;",
    ])
    pro = [f"ld.param.u64 \t{PREFIX}base, [{log_param}];",
           f"cvta.to.global.u64 \t{PREFIX}base, {PREFIX}base;"]
    for k, sreg in enumerate(("%ctaid.x", "%ctaid.y", "%ctaid.z", "%tid.x", "%tid.y", "%tid.z")):
        pro.append(f"ld.global.u32 \t{PREFIX}t, [{PREFIX}base+{4 * k}];")
        pro.append(f"mov.u32 \t{PREFIX}s, {sreg};")
        if k == 0:
            pro.append(f"setp.eq.u32 \t{PREFIX}p, {PREFIX}s, {PREFIX}t;")
        else:
            pro.append(f"setp.eq.and.u32 \t{PREFIX}p, {PREFIX}s, {PREFIX}t, {PREFIX}p;")
    pro.append(f"ld.global.u32 \t{PREFIX}cap, [{PREFIX}base+24];")
    pro.append(f"mov.u32 \t{PREFIX}n, 0;")
    prologue = "// flashsim register-write log: select the thread\n\t" + "\n\t".join(pro) + "\n\t"

    out = [ptx[:p_open + 1], new_params, ptx[p_close:body_start], "\n", decls, "\n"]
    pos = 0
    inserts = sorted({*before, *after, prologue_at})
    for at in inserts:
        out.append(body[pos:at])
        if at in after:
            out.append(after[at])
        if at == prologue_at:
            out.append(prologue)
        if at in before:
            out.append(before[at])
        pos = at
    out.append(body[pos:])
    out.append(ptx[b_end - 1:])
    return Instrumented("".join(out), kernel, _address_taint(sites), files, ordinal, nparams, tuple(not_logged))


#: instructions whose result is an address with a base that differs between a GPU and the interpreter
#: (a generic window, the local stack), by the PTX they are written as
ADDRESS_SEEDS = (
    ("shared window", re.compile(r"^cvta\.shared(?:::\w+)?\.u64 ")),
    ("local window", re.compile(r"^cvta\.local\.u64 ")),
    ("const window", re.compile(r"^cvta\.const\.u64 ")),
    ("param window", re.compile(r"^cvta\.param(?:::\w+)?\.u64 ")),
    ("local stack", re.compile(r"^mov\.[ub]64 \S+, __local_depot\d+$")),
)


def _address_taint(sites: list[Site]) -> tuple[Site, ...]:
    """Mark the sites whose values derive from an address seed (flow-insensitive, by register name: a
    register is an address of a space if any instruction writing it reads one)."""
    kinds: list[set[str]] = [set() for _ in sites]
    tainted: dict[str, set[str]] = {}
    for i, st in enumerate(sites):
        for kind, pat in ADDRESS_SEEDS:
            if pat.match(st.text):
                kinds[i].add(kind)
                tainted.setdefault(st.register, set()).add(kind)
    changed = True
    while changed:
        changed = False
        for i, st in enumerate(sites):
            if any(pat.match(st.text) for _, pat in ADDRESS_SEEDS):
                continue
            got = set().union(*(tainted.get(r, set()) for r in st.sources)) if st.sources else set()
            if not got <= kinds[i]:
                kinds[i] |= got
                tainted.setdefault(st.register, set()).update(got)
                changed = True
    return tuple(dataclasses.replace(st, address=tuple(sorted(k))) if k else st for st, k in zip(sites, kinds))
