"""Command-line options, defined once as data and shared by the CLI (argparse) and the pytest plugin.

``add_options(addoption, prefix="")`` works with ``argparse.ArgumentParser.add_argument`` and with
pytest's ``parser.getgroup(...).addoption`` alike (pytest-benchmark's pattern). ``RunOptions`` is the one
frozen dataclass that carries run-time options through the code; it validates itself.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Any, Callable

from flashsim.errors import bad_argument

__all__ = ["GPU", "OPTIONS", "Option", "PROBLEM_DEFAULTS", "RunOptions", "UPDATE_GOLDEN", "UPDATE_TRACES",
           "add_options", "id_list", "non_negative_int", "positive_int"]


@dataclass(frozen=True)
class Option:
    """One command-line flag: its long name (without the leading dashes), help text and default."""

    name: str
    help: str
    default: Any = False
    action: str = "store_true"

    def __post_init__(self) -> None:
        if not self.name or self.name.startswith("-") or " " in self.name:
            raise bad_argument("name", self.name, "expected a bare long-option name such as 'gpu'")

    def flag(self, prefix: str = "") -> str:
        """The flag as typed: ``--<prefix><name>``."""
        return f"--{prefix}{self.name}"

    def dest(self, prefix: str = "") -> str:
        """The attribute name argparse and pytest store it under."""
        return f"{prefix}{self.name}".replace("-", "_")


GPU = Option("gpu", "run the tests marked gpu on a real GPU (needs cupy and a CUDA device)")
UPDATE_GOLDEN = Option("update-golden", "rewrite the golden data under traces/ from the GPU (only with --gpu)")
UPDATE_TRACES = Option("update-traces", "re-record the golden per-warp traces under traces/warp/ on the GPU "
                                        "(only with --gpu)")

#: Every option, in the order they are shown in --help.
OPTIONS: tuple[Option, ...] = (GPU, UPDATE_GOLDEN, UPDATE_TRACES)


def add_options(addoption: Callable[..., Any], prefix: str = "") -> None:
    """Register every option with ``addoption`` (argparse's add_argument or pytest's addoption)."""
    for opt in OPTIONS:
        addoption(opt.flag(prefix), action=opt.action, default=opt.default, dest=opt.dest(prefix), help=opt.help)


@dataclass(frozen=True)
class RunOptions:
    """Run-time options, fixed for a run. Build from parsed flags with ``from_getoption``."""

    gpu: bool = False
    update_golden: bool = False
    update_traces: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            if not isinstance(getattr(self, f.name), bool):
                raise bad_argument(f.name, getattr(self, f.name), "expected a bool")
        for opt in (UPDATE_GOLDEN, UPDATE_TRACES):
            if getattr(self, opt.dest()) and not self.gpu:
                raise bad_argument(opt.dest(), True, f"{opt.flag()} needs {GPU.flag()}: golden data is recorded "
                                                     "on a real GPU")

    @classmethod
    def from_getoption(cls, getoption: Callable[[str], Any], prefix: str = "") -> "RunOptions":
        """From a ``getoption(dest)`` callable (pytest's ``config.getoption``): every OPTIONS entry that
        is a field here is read; other fields keep their defaults."""
        names = {f.name for f in fields(cls)}
        return cls(**{o.dest(): getoption(o.dest(prefix)) for o in OPTIONS if o.dest() in names})


def _int_type(minimum: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value
    parse.__name__ = what  # argparse names the type in its messages
    return parse


#: the attention problem that ``flashsim check`` and ``flashsim trace record`` run unless told otherwise (the one
#: place that defines it; flashsim.cli.arguments.add_problem_arguments turns it into options)
PROBLEM_DEFAULTS = {"batch": 1, "heads": 2, "seqlen": 256, "headdim": 128, "dtype": "float16", "seed": 0}


#: argparse ``type=`` for counts and sizes (>= 1) and for indices and seeds (>= 0): a bad value is refused
#: with a message naming the option, before any work starts
positive_int = _int_type(1, "a positive integer")
non_negative_int = _int_type(0, "a non-negative integer")


def id_list(option: str, text: str) -> list[int]:
    """'0,3,5-7' -> [0, 3, 5, 6, 7] (CTA and warp ids of ``--cta`` / ``--warp``); anything else is an
    ArgumentError naming ``option``."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise bad_argument(option, text, "expected ids and ranges such as '0,3,5-7'") from None
    if not out:
        raise bad_argument(option, text, "expected at least one id, e.g. '0' or '0-3'")
    return out
