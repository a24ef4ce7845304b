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
from flashsim.cli import check, info, layout, pipeline, run, trace, warp
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashsim", description=__doc__)
    p.add_argument("--version", action="version", version=f"flashsim {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
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

