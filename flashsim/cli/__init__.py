"""flashsim command line: the FlashAttention kernels checked end to end, what is modelled and verified, replaying
GPU golden data on the CPU, your own kernel on the CPU, per-warp traces, and the warp/layout debugging tools."""

# Every command's parser and printing lives in this package: info and verify (info.py), check (check.py), run
# (run.py, run_report.py, launchargs.py), trace (trace.py, traceshow.py), fragment / ldmatrix / banks
# (warp.py), layout (layout.py); options several commands share in arguments.py. The library they drive
# (flashsim.check, flashsim.run, flashsim.session, ...) never imports this package (tests/test_layering.py).

from __future__ import annotations

import argparse
import os
import re
import sys

from flashsim._version import __version__
from flashsim.errors import FlashsimError

__all__ = ["build_parser", "main", "parsers", "plain"]


# ----------------------------------------------------------------------------------------------------
# The parser
# ----------------------------------------------------------------------------------------------------

_MARKUP = [(re.compile(r":[a-z]+:`~?([^`]+)`"), r"\1"),  # :class:`x`, :func:`~a.b`
           (re.compile(r"``([^`]+)``"), r"\1"),            # ``literal``
           (re.compile(r"`([^`]+)`"), r"\1")]              # `x`


def plain(text):
    """Help text without reStructuredText markup (``literal``, :class:`x`, `x`)."""
    if not isinstance(text, str):
        return text
    for pat, rep in _MARKUP:
        text = pat.sub(rep, text)
    return text


def parsers(parser: argparse.ArgumentParser):
    """Every parser of the tree, depth first: the top level, each subcommand, each sub-subcommand."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from parsers(sub)


def _plain_help(parser: argparse.ArgumentParser) -> None:
    for p in parsers(parser):
        p.description, p.epilog = plain(p.description), plain(p.epilog)
        for action in p._actions:
            action.help = plain(action.help)
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    choice.help = plain(choice.help)


#: every command and its one-line help, for ``flashsim``, ``--help`` and ``--version`` without importing the
#: commands (and numpy, numba, the interpreter behind them): tests/test_cli_help.py checks it against the
#: commands' own parsers
COMMANDS = (
    ("info", "list what is modelled (instruction families, every instruction form, the FA kernels, SASS opcodes) "
             "and how each was verified on hardware"),
    ("verify", "replay the committed GPU golden data on the CPU simulator, bit for bit"),
    ("check", "run the FlashAttention kernels' twins on random inputs: error vs float64, bank conflicts per source "
              "line, time; --gpu: bit-identity with the CUDA kernels"),
    ("run", "run your own kernel (.cu or .cubin) once on generated inputs on the CPU: banks per source line, races, "
            "faults, uninitialised reads, executed instructions"),
    ("trace", "per-warp traces: record (GPU, simulator or SASS interpreter), diff, replay, show, html"),
    ("fragment", "which lane/register/half owns every element of an mma or ldmatrix fragment"),
    ("ldmatrix", "what each lane receives from an ldmatrix address expression, and its banks"),
    ("banks", "wavefronts and bank conflicts of one ld/st.shared or cp.async warp instruction"),
    ("layout", "evaluate a CuTe layout expression; print it exactly as CuTe does; draw it as SVG"),
    ("pipeline", "fa4h's load and consumer schedule from a simulated run, against the plan"),
)


def _top(p: argparse.ArgumentParser) -> argparse._SubParsersAction:
    p.add_argument("--version", action="version", version=f"flashsim {__version__}")
    return p.add_subparsers(dest="command", required=True, metavar="COMMAND")


def summary_parser() -> argparse.ArgumentParser:
    """The top level alone (each command a name and its help): what ``flashsim``, ``flashsim --help`` and
    ``--version`` need, built without importing any command."""
    p = argparse.ArgumentParser(prog="flashsim", description=__doc__)
    sub = _top(p)
    for name, text in COMMANDS:
        sub.add_parser(name, help=text)
    _plain_help(p)
    return p


def build_parser() -> argparse.ArgumentParser:
    from flashsim.cli import check, info, layout, pipeline, run, trace, warp

    p = argparse.ArgumentParser(prog="flashsim", description=__doc__)
    sub = _top(p)
    info.add_parsers(sub)
    check.add_parser(sub)
    run.add_parser(sub)
    trace.add_parser(sub)
    warp.add_parsers(sub)
    layout.add_parser(sub)
    pipeline.add_parser(sub)
    _plain_help(p)
    return p


def main(argv=None) -> int:
    """Run a subcommand; every failure it meets ends as one line ``flashsim: error: ...`` (exit 2), Ctrl-C
    as ``interrupted`` (exit 130): never a Python traceback."""
    words = sys.argv[1:] if argv is None else list(argv)
    if not any(w in dict(COMMANDS) for w in words):  # no command: the top level's help, usage or version
        summary_parser().parse_args(words)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.: stop quietly
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

