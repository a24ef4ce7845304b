"""``flashsim`` command line: the FlashAttention kernels checked end to end, what is modelled and verified, replaying
GPU golden data on the CPU, and the warp/layout debugging tools."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flashsim import __version__
from flashsim.errors import FlashsimError


def _table(rows, headers) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def cmd_info(args) -> int:
    from flashsim.validation import status_table

    rows = status_table()
    if args.arch:
        rows = [r for r in rows if r[1] == args.arch]
    print(f"flashsim {__version__}: modelled instructions and their verification on hardware\n")
    print(_table(rows, ("instruction", "arch", "SASS", "verification")))
    if args.arch in (None, "sm_90"):
        from flashsim.sass.evidence import rows as sass_rows

        print("\nSASS interpreter (flashsim.cuda): every opcode with a semantic, and what the H100 showed of "
              "each instruction form\n")
        print(_table(sass_rows(), ("opcode", "family", "evidence")))
    return 0


def cmd_verify(args) -> int:
    from flashsim.golden import default_dir, replay_all

    if args.golden is None:
        args.golden = default_dir()
    results = replay_all(args.golden)
    rows = [(r.instruction, f"{r.cases:,}", r.mismatches, Path(r.source).name) for r in results]
    print(f"Replaying GPU golden data from {args.golden} on the CPU simulator\n")
    print(_table(rows, ("instruction", "cases", "mismatches", "file")))
    bad = [r for r in results if r.mismatches]
    for r in bad:
        print(f"\n{r.instruction}: {r.mismatches} of {r.cases} differ; first ones:")
        for ex in r.examples:
            print("   ", ex)
    total = sum(r.cases for r in results)
    print(f"\n{len(results)} instructions, {total:,} recorded outputs, "
          f"{sum(r.mismatches for r in results)} mismatches")
    return 1 if bad else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashsim", description=__doc__)
    p.add_argument("--version", action="version", version=f"flashsim {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="list modelled instructions and their hardware verification status")
    info.add_argument("--arch", choices=["sm_90", "sm_80"], help="only this architecture")
    info.set_defaults(func=cmd_info)
    ver = sub.add_parser("verify", help="replay the committed GPU golden data on the CPU simulator, bit for bit")
    ver.add_argument("--golden", type=Path, default=None,
                     help="folder of golden .npz files (default: ./traces/numerics, else the repository's)")
    ver.set_defaults(func=cmd_verify)
    from flashsim.check import add_parser as add_check_parser

    add_check_parser(sub)
    from flashsim.run import add_parser as add_run_parser

    add_run_parser(sub)
    from flashsim.trace.cli import add_parser as add_trace_parser

    add_trace_parser(sub)
    from flashsim.warp.cli import add_parsers as add_warp_parsers

    add_warp_parsers(sub)
    try:
        from flashsim.layout.cli import add_parser as add_layout_parser
    except ImportError:  # pragma: no cover - the layout package is optional while it is being built
        add_layout_parser = None
    if add_layout_parser is not None:
        add_layout_parser(sub)
    return p


def main(argv=None) -> int:
    """Run a subcommand; every failure it meets ends as one line ``flashsim: error: ...`` (exit 2), Ctrl-C
    as ``interrupted`` (exit 130): never a Python traceback."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.: stop quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except NotImplementedError as e:
        return _fail(f"not modelled: {e}")
    except MemoryError:
        return _fail("out of memory: the request is too large for this machine (use smaller shapes)")
    except RecursionError:
        return _fail("the expression is nested too deeply to evaluate")
    except (FlashsimError, OSError, ValueError) as e:
        return _fail(str(e))


def _fail(message: str) -> int:
    print(f"flashsim: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
