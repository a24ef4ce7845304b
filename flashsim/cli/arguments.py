"""Options that several commands share: the attention problem (``flashsim check``, ``flashsim trace record``),
the problem sizes a refused run names, and where the CTA batches run (``--workers`` / ``--scheduler`` of
``flashsim check`` and ``flashsim run``, on :mod:`flashsim.cluster`)."""

from __future__ import annotations

import contextlib
from typing import Callable

from flashsim import cluster
from flashsim.check import INPUT_DTYPES
from flashsim.errors import bad_argument
from flashsim.options import PROBLEM_DEFAULTS, non_negative_int, positive_int

__all__ = ["SIZE_OPTIONS", "add_cluster_arguments", "add_problem_arguments", "cluster_from_args", "size_options"]

#: the option of each problem size, in the order the error messages name them
SIZE_OPTIONS = (("batch", "--batch"), ("heads", "--heads"), ("heads_k", "--heads-k"), ("seqlen", "--seqlen"),
                ("seqlen_k", "--seqlen-k"), ("headdim", "--headdim"))


def add_problem_arguments(p) -> None:
    """The options that describe one attention problem (shared by ``check`` and ``trace record``), with the
    defaults of PROBLEM_DEFAULTS."""
    d = PROBLEM_DEFAULTS
    p.add_argument("--batch", type=positive_int, default=d["batch"], metavar="N",
                   help="batch size (default: %(default)s)")
    p.add_argument("--heads", type=positive_int, default=d["heads"], metavar="N",
                   help="query heads (default: %(default)s)")
    p.add_argument("--heads-k", type=positive_int, default=None, metavar="N",
                   help="key/value heads; fewer than --heads, dividing it, for GQA/MQA (default: --heads)")
    p.add_argument("--seqlen", type=positive_int, default=d["seqlen"], metavar="N",
                   help="query sequence length seqlen_q, and seqlen_k unless --seqlen-k (default: %(default)s)")
    p.add_argument("--seqlen-k", type=non_negative_int, default=None, metavar="N",
                   help="key/value sequence length seqlen_k (default: --seqlen)")
    p.add_argument("--headdim", type=positive_int, default=d["headdim"], metavar="N",
                   help="head dimension (default: %(default)s)")
    p.add_argument("--dtype", choices=sorted(INPUT_DTYPES), default=d["dtype"],
                   help="element type of q, k and v (default: %(default)s)")
    p.add_argument("--causal", action="store_true", help="causal mask, aligned to the bottom right as flash-attn does")
    p.add_argument("--window", type=int, nargs=2, metavar=("LEFT", "RIGHT"), default=(-1, -1),
                   help="local attention: keys at most LEFT before and RIGHT after the query's position, -1 for "
                        "no limit (default: -1 -1, no window)")
    p.add_argument("--softcap", type=float, default=0.0, metavar="CAP",
                   help="scores become CAP * tanh(scores / CAP); 0 turns it off (default: %(default)s)")
    p.add_argument("--scale", type=float, default=None, metavar="S",
                   help="softmax scale multiplying q.k (default: headdim^-0.5)")
    p.add_argument("--seed", type=non_negative_int, default=d["seed"],
                   help="seed of the random inputs, numpy.random.default_rng(SEED) (default: %(default)s)")


def size_options(args) -> str:
    """The problem-size options as given, e.g. '--batch=100000 --heads=1000': those that differ from the
    defaults (all of them when none does)."""
    given = [(flag, getattr(args, dest)) for dest, flag in SIZE_OPTIONS]
    changed = [(f, v) for (dest, f), (_, v) in zip(SIZE_OPTIONS, given)
               if v is not None and v != PROBLEM_DEFAULTS.get(dest)]
    return " ".join(f"{f}={v}" for f, v in (changed or [(f, v) for f, v in given if v is not None]))


def add_cluster_arguments(p) -> None:
    """``--workers N`` and ``--scheduler ADDR``, the options of every command that runs CTA batches."""
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="run the CTA batches on a local Dask cluster of N worker processes on this machine "
                        f"(default: threads of this process; needs {cluster.INSTALL})")
    p.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="run the CTA batches on the running Dask cluster whose scheduler is at ADDR "
                        "(tcp://HOST:PORT; its workers need flashsim installed; default: none)")


def cluster_from_args(args, notify: Callable[[str], None] | None = None):
    """The cluster ``--workers`` / ``--scheduler`` ask for (a context manager), or a null context."""
    workers, scheduler = getattr(args, "workers", None), getattr(args, "scheduler", None)
    if workers is not None and scheduler is not None:
        raise bad_argument("--scheduler", scheduler, "give --workers (a local cluster) or --scheduler (a running "
                                                     "one), not both")
    if workers is None and scheduler is None:
        return contextlib.nullcontext()
    cluster.require_dask()  # a missing extra is said before any work
    return cluster.Cluster(workers, scheduler=scheduler, notify=notify)
