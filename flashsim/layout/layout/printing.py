"""``print_layout``: CuTe's console table of a rank-2 layout, byte for byte."""

from __future__ import annotations

from flashsim.errors import bad_argument
from flashsim.layout.layout.modes import cosize, rank, size


def _num_digits(x: int) -> int:
    for k in range(1, 10):
        if x < 10 ** k:
            return k
    return 10


def print_layout(x) -> str:
    """CuTe's ``print_layout`` of a rank-2 layout (or composed layout), as a string, byte for byte."""
    if int(rank(x)) != 2:
        raise bad_argument("layout", str(x), "print_layout needs a rank-2 layout")
    M, N = int(size(x, 0)), int(size(x, 1))
    w = _num_digits(int(cosize(x))) + 2
    vals = _table(x, M, N)
    out = [str(x) + "\n", "    "]
    out += [f"  {n:{w - 2}d} " for n in range(N)]
    out.append("\n")
    sep = "    " + ("+" + "-" * w) * N + "+\n"
    for m in range(M):
        out.append(sep)
        out.append(f"{m:2d}  ")
        out += [f"| {int(v):{w - 2}d} " for v in vals[m]]
        out.append("|\n")
    out.append(sep)
    return "".join(out)


def _table(x, M, N):
    from flashsim.layout.evaluate import evaluate

    flat = evaluate(x)
    return flat.reshape(N, M).T.tolist()
