"""The differential fuzzing campaign: random programs (flashsim.fuzz) on the GPU and in the interpreter.

    python -m flashsim.gpu.fuzz --programs N --seed S --out DIR [--workers K] [--time-limit SECONDS]
    python -m flashsim.gpu.fuzz --record --programs N --seed S --out DIR [--workers K] [--time-limit SECONDS]
    python -m flashsim.gpu.fuzz --replay RECORD --out DIR [--chunks A:B] [--workers K] [--time-limit SECONDS]
    python -m flashsim.gpu.fuzz --merge DIR1 DIR2 ... --out DIR

The programs are drawn in chunks (chunk c from seed S and c, so the chunks are drawn in parallel and the
campaign is the same whatever the number of workers); each chunk is compiled into one module per build
(NVRTC 13.0, and NVRTC's PTX through Triton's ptxas 12.8) and run in the interpreter by worker processes,
while the main process runs the same cubins on the GPU, twice (a program whose two GPU runs differ is
reported as undefined, never compared). Every program's whole output (each lane's values, the global
atomics) is compared bit for bit. A program whose outputs differ is shrunk (flashsim.fuzz.shrink, on the GPU
and in the interpreter) to a minimal program that still differs, kept with the GPU's outputs as a
regression probe.

Writes DIR/fuzz_report.json (counts, forms executed, refusals, differences), DIR/fuzz_report.md,
DIR/corpus.jsonl.xz (every compared program with the GPU's output digest per build, and under "gpu_only" the
digests of the programs the interpreter refused or failed on) and
DIR/regressions.json (the shrunk programs with their GPU outputs), and the rows to commit under traces/fuzz:
DIR/sample.jsonl.xz (every 60th compared program) and DIR/gpu_only.jsonl.xz (the programs the interpreter
refused or failed on). tests/test_fuzz.py replays both in the interpreter.

The interpreter is most of a campaign's cost, so a campaign also splits in two:

- ``--record`` (on the GPU machine): the workers only draw and compile; the main process runs each program on
  the GPU twice and writes DIR/record.jsonl.xz, one row per chunk: for each build the sha256 of the chunk's
  cubin, each program's output digest (``"undefined"`` where the two runs differ, null where it did not
  compile) and the compile errors; and DIR/record_meta.json (seed, chunk size, builds, chunks done, seconds,
  provenance), both written every 10 chunks (a run killed midway keeps them). No program or cubin is kept:
  a replay draws and builds them again (about 40 bytes a program in both builds, 2.7 MB for 70,000).
- ``--replay RECORD`` (on any machine, no GPU): each recorded chunk drawn and built again, with the same
  compilers; a build whose cubin is not the recorded one is not compared (counted under "build_differs"),
  the others run in the interpreter and each program's output digest is compared with the GPU's. Writes the
  campaign's files, with the record's provenance and under "replay" where it came from. A difference cannot
  be shrunk without the GPU: it keeps its chunk, program and build in fuzz_report.json, to shrink on the GPU.
  ``--chunks A:B`` replays the record's chunks A to B-1 only, so a replay splits across runs or machines;
- ``--merge DIR1 DIR2 ...`` adds up such replays of one record: counts, forms, refusals and error groups
  summed, differences and corpus rows concatenated in chunk order, and the samples drawn again from the merged
  corpus, as one replay of all the chunks would have drawn them.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import lzma
import multiprocessing as mp
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from flashsim import fuzz as fz
from flashsim.errors import bad_argument

__all__ = ["GpuAnswer", "campaign", "chunk_programs", "main", "merge", "read_record", "record", "replay", "run_gpu",
           "write_report"]

PER_CHUNK = 40
RECORD_VERSION = 1  # the format of record.jsonl.xz
UNDEFINED = "undefined"  # a recorded program whose two GPU runs differ


def chunk_programs(seed: int, chunk: int, per: int = PER_CHUNK, version: int | None = None) -> list[dict]:
    """The programs of one chunk of a campaign, as generator ``version`` (default: the current one) renders
    them (the draws do not depend on the version)."""
    v = fz.GENERATOR_VERSION if version is None else int(version)
    return [{**p, "v": v} for p in fz.draw_programs(per, seed * 100_003 + chunk)]


def _compile(progs: list[dict], which: str) -> tuple[fz.Batch | None, list[int], list[tuple[int, str]]]:
    """One module of the chunk's programs; a program that does not compile is left out (and reported:
    the generator must only make programs that compile)."""
    from flashsim.sass.toolchain import CompileError

    try:
        return fz.compile_batch(progs, which), list(range(len(progs))), []
    except CompileError:
        pass
    good, bad = [], []
    for i, p in enumerate(progs):
        try:
            fz.build(fz.render_module([p]), which)
            good.append(i)
        except CompileError as e:
            bad.append((i, str(e)[-800:]))
    return (fz.compile_batch([progs[i] for i in good], which) if good else None), good, bad


def _chunk_job(job: tuple) -> dict:
    """Worker: draw and compile (every build) one chunk, and interpret each build if ``interp``, but not one
    whose cubin is not the one expected (``expect``: the sha256 of each build's cubin in a record)."""
    seed, chunk, per, builds, interp, expect, version = job
    t0 = time.time()
    progs = chunk_programs(seed, chunk, per, version)
    res = {"chunk": chunk, "progs": progs, "builds": {}}
    for which in builds:
        batch, index, bad = _compile(progs, which)
        entry = {"compile_errors": bad, "cubin": None, "sha256": None, "index": [], "outcomes": []}
        if batch is not None:
            entry["cubin"] = batch.cubin
            entry["sha256"] = hashlib.sha256(batch.cubin).hexdigest()
            entry["index"] = index
            if interp and (expect is None or expect.get(which) == entry["sha256"]):
                entry["outcomes"] = fz.run_interp(batch)
        res["builds"][which] = entry
    res["seconds"] = time.time() - t0
    return res


def _chunks(jobs: Iterable[tuple], workers: int, t0: float, time_limit: float | None) -> Iterator[tuple[dict, bool]]:
    """The workers' results (:func:`_chunk_job`) in the order of ``jobs``, each with whether it is the last;
    no new chunk is started once ``time_limit`` seconds have passed since ``t0``."""
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=ctx) as pool:
        it = iter(jobs)
        pending = []
        for _ in range(max(1, workers) * 2):
            j = next(it, None)
            if j is not None:
                pending.append(pool.submit(_chunk_job, j))
        while pending:
            res = pending.pop(0).result()
            if time_limit is not None and time.time() - t0 > time_limit:
                for p in pending:
                    p.cancel()
                pending = [p for p in pending if not p.cancelled()]
            else:
                j = next(it, None)
                if j is not None:
                    pending.append(pool.submit(_chunk_job, j))
            yield res, not pending


def run_gpu(cubin: bytes, progs: Sequence[dict], names: Sequence[str], repeats: int = 2) -> list[list[np.ndarray]]:
    """Each program of a module on the GPU, ``repeats`` times: [[out, out], ...]."""
    from flashsim.gpu import runtime

    cp = runtime.require_gpu()
    mod = runtime.load_cubin(cubin)
    res = []
    for prog, name in zip(progs, names):
        table, out0, (s0, s1) = fz.inputs(prog)
        f = mod.get_function(name)
        runs = []
        for _ in range(repeats):
            d_in, d_out = cp.asarray(table), cp.asarray(out0)
            f((int(prog["grid"]),), (int(prog["block"]),), (d_in, d_out, np.uint32(s0), np.uint32(s1)))
            runs.append(cp.asnumpy(d_out))
        res.append(runs)
    cp.cuda.Device().synchronize()
    return res


@dataclass
class GpuAnswer:
    """The GPU's answer for one program: its output digest (None where its two runs differ), and the outputs
    themselves where the GPU ran in this process (a replay has the recorded digest only)."""

    digest: str | None
    out: np.ndarray | None = None


def _gpu_answers(gpu: Callable, res: dict) -> dict[str, list[GpuAnswer]]:
    """Each build of a chunk on the GPU (``gpu``: a function as :func:`run_gpu`), twice."""
    answers = {}
    for which, entry in res["builds"].items():
        if entry["cubin"] is None:
            continue
        names = [f"fz{k}" for k in range(len(entry["index"]))]
        runs = gpu(entry["cubin"], [res["progs"][i] for i in entry["index"]], names)
        answers[which] = [GpuAnswer(None if _differs(g0, g1) else fz.digest(g0), g0) for g0, g1 in runs]
    return answers


_FORM = re.compile(r"`(?:@!?U?P\w+ )?([A-Z0-9_]+(?:\.[A-Z0-9_]+)*)")


def refusal_key(msg: str) -> str:
    """A refusal or error message grouped by what is not modelled or what went wrong (the SASS form, without
    PC, line, lanes, addresses or other numbers)."""
    m = _FORM.search(msg)
    head = re.sub(r"0x[0-9a-fA-F]+|\d+", "N", msg.split(": pc=")[0].split("`")[0])
    return f"{head} [{m.group(1)}]" if m else head


def _differs(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape != b.shape or not np.array_equal(a, b)


def _first_difference(sim: np.ndarray, gpu: np.ndarray, prog: dict) -> dict:
    idx = int(np.flatnonzero(sim != gpu)[0])
    n = int(prog["grid"]) * int(prog["block"]) * fz.NV
    if idx >= n:
        return {"where": f"global atomic accumulator {idx - n}", "gpu": f"{int(gpu[idx]):#010x}",
                "interp": f"{int(sim[idx]):#010x}", "count": int((sim != gpu).sum())}
    thread, var = divmod(idx, fz.NV)
    cta, tid = divmod(thread, int(prog["block"]))
    return {"where": f"cta={cta} warp={tid // 32} lane={tid % 32} v{var}", "gpu": f"{int(gpu[idx]):#010x}",
            "interp": f"{int(sim[idx]):#010x}", "count": int((sim != gpu).sum())}


class _Tally:
    """The accounting of a campaign, a replay or a merge: counts per build, the forms executed by compared
    programs, refusals, differences, and errors grouped by message (a few programs kept per group, so the
    report stays small)."""

    def __init__(self, builds: Sequence[str], log=print, replay: bool = False):
        self.builds = list(builds)
        self.stats = {w: {"compared": 0, "equal": 0, "refused": 0, "interp_errors": 0, "compile_errors": 0,
                          "gpu_undefined": 0, "order_dependent": 0, "address_dependent": 0,
                          **({"build_differs": 0} if replay else {})}
                      for w in builds}
        self.forms: dict[str, dict[str, int]] = {}
        self.refusals: dict[str, int] = {}
        self.diffs, self.errors, self.undefined, self.shrunk = [], [], [], []
        self.error_counts: dict[str, int] = {}
        self._kept: dict[str, int] = {}
        self.log = log

    @staticmethod
    def _key(entry: dict) -> str:
        return f"{entry['kind']}: {refusal_key(entry['message'])[:300]}"

    def _keep(self, entry: dict) -> None:
        key = self._key(entry)
        if self._kept.get(key, 0) < 3:
            self._kept[key] = self._kept.get(key, 0) + 1
            self.errors.append(entry)

    def error(self, entry: dict) -> None:
        # grouped by message (without PC and line)
        key = self._key(entry)
        self.error_counts[key] = self.error_counts.get(key, 0) + 1
        self._keep(entry)

    def chunk(self, res: dict, answers: dict[str, list[GpuAnswer] | None]) -> list[dict]:
        """Account a worker's chunk (:func:`_chunk_job`) against the GPU's answers of each build (aligned with
        the build's compiled programs; None: a build not compared). Returns the chunk's corpus rows."""
        progs, chunk = res["progs"], res["chunk"]
        # "gpu": the GPU's output digest of each build compared; "gpu_only": of each build the interpreter
        # refused or failed (a hardware answer for whoever models that form next: tests/test_fuzz.py)
        rows = [{"chunk": chunk, "i": i, "prog": p, "gpu": {}, "gpu_only": {}} for i, p in enumerate(progs)]
        for which, entry in res["builds"].items():
            st = self.stats[which]
            ans = answers.get(which, [])
            if ans is None:
                st["build_differs"] += len(progs)
                continue
            st["compile_errors"] += len(entry["compile_errors"])
            for i, msg in entry["compile_errors"]:
                self.error({"kind": "compile", "build": which, "chunk": chunk, "i": i, "prog": progs[i],
                            "message": msg})
            for i, o, g in zip(entry["index"], entry["outcomes"], ans):
                self.program(which, chunk, i, progs[i], o, g, rows[i])
        return [r for r in rows if r["gpu"] or r["gpu_only"]]

    def program(self, which: str, chunk: int, i: int, prog: dict, o: fz.Outcome, g: GpuAnswer, row: dict) -> None:
        """One program of one build: the interpreter's outcome ``o`` against the GPU's answer ``g``."""
        st = self.stats[which]
        if (o.refused or o.error) and g.digest is not None:
            row["gpu_only"][which] = g.digest
        if o.refused:
            st["refused"] += 1
            key = refusal_key(o.refused)
            self.refusals[key] = self.refusals.get(key, 0) + 1
            return
        if o.error:
            st["interp_errors"] += 1
            self.error({"kind": "interp", "build": which, "chunk": chunk, "i": i, "prog": prog,
                        "message": o.error[-800:]})
            return
        if g.digest is None:
            st["gpu_undefined"] += 1
            if len(self.undefined) < 20:
                self.undefined.append({"build": which, "chunk": chunk, "i": i, "prog": prog})
            return
        if fz.order_dependent(prog):  # outputs the program leaves to the order of arrival: not compared
            st["order_dependent"] += 1
            return
        differs = _differs(o.out, g.out) if g.out is not None else fz.digest(o.out) != g.digest
        if differs and fz.address_dependent(prog, which):
            # its outputs move with its arrays' addresses (the GPU's are not the interpreter's): not compared
            st["address_dependent"] = st.get("address_dependent", 0) + 1
            self.log(f"ADDRESS-DEPENDENT chunk {chunk} program {i} ({which}): its outputs change with the "
                     "addresses of its arrays; not compared")
            return
        st["compared"] += 1
        row["gpu"][which] = g.digest
        for form, cnt in o.forms.items():
            f = self.forms.setdefault(form, {"programs": 0, "executions": 0})
            f["programs"] += 1
            f["executions"] += int(cnt)
        if differs:
            first = (_first_difference(o.out, g.out, prog) if g.out is not None else
                     {"where": "output digest (a replay: the GPU's outputs are not recorded)", "gpu": g.digest,
                      "interp": fz.digest(o.out), "count": None})
            self.diffs.append({"build": which, "chunk": chunk, "i": i, "prog": prog, "first": first})
            self.log(f"DIFFERENCE chunk {chunk} program {i} ({which}): {first}")
        else:
            st["equal"] += 1

    def add(self, rep: dict) -> None:
        """A whole report's counts, forms, refusals, error groups, differences (a merge)."""
        for w, st in rep["stats"].items():
            mine = self.stats.setdefault(w, {})
            for k, v in st.items():
                mine[k] = mine.get(k, 0) + v
        for form, f in rep["forms"].items():
            mine = self.forms.setdefault(form, {"programs": 0, "executions": 0})
            mine["programs"] += f["programs"]
            mine["executions"] += f["executions"]
        for key, n in rep["refusals"].items():
            self.refusals[key] = self.refusals.get(key, 0) + n
        for key, n in rep.get("error_counts", {}).items():
            self.error_counts[key] = self.error_counts.get(key, 0) + n
        for entry in rep["errors"]:
            self._keep(entry)
        self.diffs += rep["differences"]
        self.undefined += rep["gpu_undefined"][:max(0, 20 - len(self.undefined))]
        self.shrunk += rep["shrunk"]

    def report(self, chunks_done: int, seed: int, per: int, seconds: float) -> dict:
        return {"programs": chunks_done * per, "chunks_done": chunks_done, "seed": seed, "per_chunk": per,
                "builds": self.builds, "stats": self.stats, "forms": dict(sorted(self.forms.items())),
                "refusals": dict(sorted(self.refusals.items(), key=lambda t: -t[1])), "differences": self.diffs,
                "shrunk": self.shrunk, "errors": self.errors, "error_counts": self.error_counts,
                "gpu_undefined": self.undefined, "seconds": round(seconds, 1)}

    def progress(self, done: int, chunks: int, per: int, t0: float) -> str:
        cmp_ = sum(s["compared"] for s in self.stats.values())
        bd = sum(s.get("build_differs", 0) for s in self.stats.values())
        return (f"{done}/{chunks} chunks, {done * per} programs, {cmp_} compared, {len(self.diffs)} differ, "
                + (f"{bd} not compared (build differs), " if bd else "") + f"{time.time() - t0:.0f} s")


def _compare(chunks: Sequence[int], seed: int, per: int, builds: Sequence[str], answers: Callable[[dict], dict],
             tally: _Tally, *, workers: int, time_limit: float | None, t0: float, corpus: Path | None,
             expect: Callable[[int], dict] | None = None, version: int | None = None, log=print) -> list[int]:
    """The chunks ``chunks`` drawn, compiled and interpreted by the workers, each accounted against
    ``answers(result)`` (the GPU's answers of each build), the corpus rows written to ``corpus``. Returns the
    chunks done."""
    jobs = ((seed, c, per, tuple(builds), True, expect(c) if expect else None, version) for c in chunks)
    done = []
    sink = lzma.open(corpus, "wt", encoding="utf-8") if corpus else None
    try:
        for res, last in _chunks(jobs, workers, t0, time_limit):
            rows = tally.chunk(res, answers(res))
            if sink:
                for r in rows:
                    sink.write(json.dumps(r, separators=(",", ":")) + "\n")
            done.append(res["chunk"])
            if len(done) % 10 == 0 or last:
                log(tally.progress(len(done), len(chunks), per, t0))
    finally:
        if sink:
            sink.close()
    return done


def _still_differs(which: str, gpu: Callable) -> Callable[[dict], bool]:
    def check(prog: dict) -> bool:
        try:
            batch = fz.compile_batch([prog], which)
        except Exception:
            return False
        (o,) = fz.run_interp(batch)
        if o.out is None:
            return False
        runs = gpu(batch.cubin, [prog], batch.names)[0]
        return not _differs(runs[0], runs[1]) and _differs(o.out, runs[0])
    return check


def campaign(n: int, seed: int, *, builds: Sequence[str] = fz.BUILDS, workers: int = 2, per: int = PER_CHUNK,
             gpu: Callable = run_gpu, time_limit: float | None = None, shrink_budget: int = 300,
             shrink_seconds: float = 120.0, corpus: Path | None = None, log=print) -> dict:
    """Run ``n`` programs (rounded up to whole chunks) on the GPU (``gpu``: a function as :func:`run_gpu`)
    and in the interpreter. Returns the report (see :func:`write_report`)."""
    if n < 1:
        raise ValueError(f"--programs must be at least 1, got {n}")
    t0 = time.time()
    tally = _Tally(builds, log)
    done = _compare(range((n + per - 1) // per), seed, per, builds, lambda res: _gpu_answers(gpu, res), tally,
                    workers=workers, time_limit=time_limit, t0=t0, corpus=corpus, log=log)
    # shrink each difference (a bounded time overall)
    t_shrink = time.time()
    for d in tally.diffs:
        if time.time() - t_shrink > shrink_seconds:
            break
        small, tries = fz.shrink(d["prog"], _still_differs(d["build"], gpu), budget=shrink_budget)
        batch = fz.compile_batch([small], d["build"])
        (o,) = fz.run_interp(batch)
        g = gpu(batch.cubin, [small], batch.names)[0][0]
        tally.shrunk.append({"build": d["build"], "prog": small, "tries": tries, "source": fz.render(small),
                             "gpu_out": [int(x) for x in g], "interp_out": None if o.out is None else
                             [int(x) for x in o.out], "first": _first_difference(o.out, g, small)
                             if o.out is not None and _differs(o.out, g) else None})
    return tally.report(len(done), seed, per, time.time() - t0)


# ---------------------------------------------------------------------------------------------- record, replay
def record(n: int, seed: int, out: Path, *, builds: Sequence[str] = fz.BUILDS, workers: int = 2,
           per: int = PER_CHUNK, gpu: Callable = run_gpu, time_limit: float | None = None,
           provenance: dict | None = None, log=print) -> dict:
    """Draw and compile ``n`` programs (whole chunks) and run each on the GPU (``gpu``: as :func:`run_gpu`)
    twice, without the interpreter: writes ``out/record.jsonl.xz`` (a row per chunk: for each build the
    cubin's sha256, the GPU's output digest of each program, "undefined" where its two runs differ or null
    where it did not compile, and the compile errors) and ``out/record_meta.json``, both rewritten every 10
    chunks (a run killed midway keeps the chunks written). Returns the meta."""
    if n < 1:
        raise ValueError(f"--programs must be at least 1, got {n}")
    t0 = time.time()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "record.jsonl.xz"
    path.unlink(missing_ok=True)
    chunks = (n + per - 1) // per
    stats = {w: {"recorded": 0, "gpu_undefined": 0, "compile_errors": 0} for w in builds}
    # NVRTC writes the directory it runs in into the cubin's line table: a replay must build from the same one
    meta = {"record": RECORD_VERSION, "seed": seed, "per_chunk": per, "builds": list(builds), "chunks_done": 0,
            "programs": 0, "stats": stats, "seconds": 0.0, "cwd": os.getcwd(),
            # the programs are drawn by this generator (a replay draws them again with it; without it, 2)
            "provenance": {"generator_version": fz.GENERATOR_VERSION, **(provenance or {})}}
    rows: list[str] = []

    def flush() -> None:
        if rows:
            with lzma.open(path, "at", encoding="utf-8") as fh:  # one more xz stream
                fh.writelines(rows)
            rows.clear()
        meta.update(programs=meta["chunks_done"] * per, seconds=round(time.time() - t0, 1))
        (out / "record_meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")

    jobs = ((seed, c, per, tuple(builds), False, None, None) for c in range(chunks))
    try:
        for res, last in _chunks(jobs, workers, t0, time_limit):
            answers = _gpu_answers(gpu, res)
            row = {"chunk": res["chunk"], "builds": {}}
            for which, entry in res["builds"].items():
                digests: list[str | None] = [None] * len(res["progs"])
                for i, g in zip(entry["index"], answers.get(which, [])):
                    digests[i] = UNDEFINED if g.digest is None else g.digest
                    stats[which]["recorded"] += 1
                    stats[which]["gpu_undefined"] += g.digest is None
                stats[which]["compile_errors"] += len(entry["compile_errors"])
                row["builds"][which] = {"sha256": entry["sha256"], "gpu": digests,
                                        "compile_errors": entry["compile_errors"]}
            rows.append(json.dumps(row, separators=(",", ":")) + "\n")
            meta["chunks_done"] += 1
            done = meta["chunks_done"]
            if done % 10 == 0 or last:
                flush()
                rec = sum(s["recorded"] for s in stats.values())
                und = sum(s["gpu_undefined"] for s in stats.values())
                log(f"{done}/{chunks} chunks, {done * per} programs, {rec} recorded, {und} GPU undefined, "
                    f"{time.time() - t0:.0f} s")
    finally:
        flush()
    return meta


def read_record(path: Path) -> tuple[dict, dict[int, dict]]:
    """A record's meta and its rows by chunk (of a record cut short, the rows written)."""
    path = Path(path)
    for name in ("record.jsonl.xz", "record_meta.json"):
        if not (path / name).is_file():
            raise bad_argument("record", str(path), f"has no {name} (python -m flashsim.gpu.fuzz --record)")
    meta = json.loads((path / "record_meta.json").read_text())
    if meta.get("record") != RECORD_VERSION:
        raise bad_argument("record", str(path), f"record format {meta.get('record')!r}, expected {RECORD_VERSION}")
    rows: dict[int, dict] = {}
    try:
        with lzma.open(path / "record.jsonl.xz", "rt", encoding="utf-8") as fh:
            for line in fh:
                if line.endswith("\n"):
                    r = json.loads(line)
                    rows[int(r["chunk"])] = r
    except (EOFError, lzma.LZMAError):
        pass  # the last stream cut short: the rows before it
    return meta, rows


def _ranges(chunks: Iterable[int]) -> list[list[int]]:
    """Chunk numbers as ranges [a, b)."""
    out: list[list[int]] = []
    for c in sorted(chunks):
        if out and out[-1][1] == c:
            out[-1][1] = c + 1
        else:
            out.append([c, c + 1])
    return out


def replay(path: Path, *, chunks: tuple[int | None, int | None] | None = None, builds: Sequence[str] | None = None,
           workers: int = 2, time_limit: float | None = None, corpus: Path | None = None, log=print) -> dict:
    """Compare the interpreter with a GPU record (:func:`record`): each recorded chunk (of ``chunks``, a range
    [a, b), None for either end: all) drawn and built again and run in the interpreter, each program's output
    digest against the GPU's. A build whose cubin is not the recorded one is not compared (counted under
    "build_differs"). Returns the report (:func:`campaign`'s, with the record's provenance and "replay")."""
    t0 = time.time()
    meta, rows = read_record(path)
    seed, per = int(meta["seed"]), int(meta["per_chunk"])
    builds = list(meta["builds"]) if builds is None else list(builds)
    for b in builds:
        if b not in meta["builds"]:
            raise bad_argument("builds", b, f"not in the record (it has {', '.join(meta['builds'])})")
    a, b = chunks or (None, None)
    sel = [c for c in sorted(rows) if (a is None or c >= a) and (b is None or c < b)]
    if not sel:
        have = ", ".join(f"{x}:{y}" for x, y in _ranges(rows)) or "none"
        raise bad_argument("chunks", f"{'' if a is None else a}:{'' if b is None else b}",
                           f"no chunk of the record in this range (it has chunks {have})")
    if len(rows) < int(meta["chunks_done"]):
        log(f"the record has {len(rows)} of the {meta['chunks_done']} chunks its meta counts (cut short)")
    prov = meta.get("provenance", {})
    tally = _Tally(builds, log, replay=True)
    differ = []

    def answers(res: dict) -> dict:
        out = {}
        for which, entry in res["builds"].items():
            rec = rows[res["chunk"]]["builds"][which]
            index = [i for i, d in enumerate(rec["gpu"]) if d is not None]
            if rec["sha256"] != entry["sha256"] or index != entry["index"]:
                out[which] = None
                differ.append({"chunk": res["chunk"], "build": which, "record": rec["sha256"],
                               "rebuilt": entry["sha256"]})
                log(f"BUILD DIFFERS chunk {res['chunk']} ({which}): cubin sha256 {entry['sha256']}, recorded "
                    f"{rec['sha256']}: not compared")
                continue
            out[which] = [GpuAnswer(None if rec["gpu"][i] == UNDEFINED else rec["gpu"][i]) for i in index]
        return out

    done = _compare(sel, seed, per, builds, answers, tally, workers=workers, time_limit=time_limit, t0=t0,
                    corpus=corpus, expect=lambda c: {w: rows[c]["builds"][w]["sha256"] for w in builds},
                    version=prov.get("generator_version", 2), log=log)
    rep = tally.report(len(done), seed, per, time.time() - t0)
    rep["provenance"] = prov
    rep["replay"] = {"record": str(path), "record_chunks": len(rows), "record_seconds": meta.get("seconds"),
                     "chunks": _ranges(done), "build_differs": differ}
    return rep


def merge(dirs: Sequence[Path], out: Path, *, sample_every: int = 60, log=print) -> dict:
    """One report of several replays of one record over distinct chunks (:func:`replay`'s ``--out``), written
    to ``out`` with its corpus and samples. Returns the report."""
    dirs, out = [Path(d) for d in dirs], Path(out)
    reps = []
    for d in dirs:
        for name in ("fuzz_report.json", "corpus.jsonl.xz"):
            if not (d / name).is_file():
                raise bad_argument("merge", str(d), f"has no {name} (expected the --out of a replay)")
        if d.resolve() == out.resolve():
            raise bad_argument("merge", str(d), "is the output directory")
        rep = json.loads((d / "fuzz_report.json").read_text())
        if "replay" not in rep:
            raise bad_argument("merge", str(d), "is not a replay (a campaign covers its chunks from 0)")
        reps.append((rep, d))
    reps.sort(key=lambda t: t[0]["replay"]["chunks"][0] if t[0]["replay"]["chunks"] else [0, 0])
    first, d0 = reps[0]
    seen: dict[int, Path] = {}
    for rep, d in reps:
        for key in ("seed", "per_chunk", "builds", "provenance"):
            if rep.get(key) != first.get(key):
                raise bad_argument("merge", str(d), f"its {key} is not {d0}'s (expected replays of one record)")
        for a, b in rep["replay"]["chunks"]:
            for c in range(a, b):
                if c in seen:
                    raise bad_argument("merge", str(d), f"chunk {c} is also in {seen[c]}")
                seen[c] = d
    tally = _Tally(first["builds"], log, replay=True)
    for rep, _ in reps:
        tally.add(rep)
    merged = tally.report(sum(r["chunks_done"] for r, _ in reps), first["seed"], first["per_chunk"],
                          sum(r["seconds"] for r, _ in reps))
    merged["provenance"] = first["provenance"]
    merged["replay"] = {**first["replay"], "chunks": _ranges(seen),
                        "build_differs": [x for r, _ in reps for x in r["replay"]["build_differs"]],
                        "merged_from": [str(d) for _, d in reps]}
    out.mkdir(parents=True, exist_ok=True)
    with lzma.open(out / "corpus.jsonl.xz", "wt", encoding="utf-8") as sink:
        for _, d in reps:
            with lzma.open(d / "corpus.jsonl.xz", "rt", encoding="utf-8") as src:
                for line in src:
                    sink.write(line)
    write_report(merged, out)
    n_sample, n_only = write_samples(out / "corpus.jsonl.xz", merged, out, every=sample_every)
    log(f"merged {len(reps)} replays: {merged['programs']} programs, samples: {n_sample} compared programs "
        f"(sample.jsonl.xz), {n_only} answered by the GPU alone (gpu_only.jsonl.xz)")
    return merged


def provenance() -> dict:
    import hypothesis

    from flashsim._version import __version__
    from flashsim.gpu import runtime
    from flashsim.sass.toolchain import versions

    try:
        dev = runtime.device_info()
    except Exception as exc:  # recorded for provenance only
        dev = {"error": str(exc)}
    try:
        import flashsim.triton as ft
        from flashsim.sass.toolchain import ptxas_version
        ptxas128 = ptxas_version(ft.bundled_ptxas())
    except Exception as exc:
        ptxas128 = f"unavailable: {exc}"
    return {**dev, "date": _dt.date.today().isoformat(), "flashsim": __version__, "python": sys.version.split()[0],
            "hypothesis": hypothesis.__version__, "generator_version": fz.GENERATOR_VERSION,
            "toolchain": versions(), "ptxas128": ptxas128}


def write_report(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "fuzz_report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    regs = [{"build": s["build"], "prog": s["prog"], "gpu_out": s["gpu_out"], "source": s["source"]}
            for s in report["shrunk"]]
    (out / "regressions.json").write_text(json.dumps(regs, indent=1) + "\n")
    st = report["stats"]
    prov, rp = report.get("provenance", {}), report.get("replay")
    lines = [f"# Differential fuzzing: {report['programs']:,} programs, seed {report['seed']}", ""]
    if rp:
        host = rp.get("host", {})
        chunks = ", ".join(f"{a}:{b}" for a, b in rp["chunks"])
        lines += [f"{prov.get('name', 'GPU')}, {prov.get('date', '')}: a replay of its record `{rp['record']}` "
                  f"(chunks {chunks} of {rp['record_chunks']}) in the interpreter, flashsim "
                  f"{host.get('flashsim', '')}, {host.get('date', '')}; {report['seconds']} s. The GPU's outputs "
                  "are the recorded digests: a difference is not shrunk (that needs the GPU), it keeps its chunk, "
                  "program and build in fuzz_report.json.", ""]
    else:
        lines += [f"{prov.get('name', 'GPU')}, {prov.get('date', '')}; {report['seconds']} s", ""]
    extra = " build differs |" if rp else ""
    lines += ["| build | compared | equal | differ | refused | interpreter errors | compile errors | GPU undefined | "
              "order-dependent | address-dependent |" + extra,
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if rp else "")]
    for w, s in st.items():
        nd = sum(1 for d in report["differences"] if d["build"] == w)
        lines.append(f"| {w} | {s['compared']:,} | {s['equal']:,} | {nd} | {s['refused']:,} | {s['interp_errors']} | "
                     f"{s['compile_errors']} | {s['gpu_undefined']} | {s.get('order_dependent', 0):,} | "
                     f"{s.get('address_dependent', 0):,} |"
                     + (f" {s['build_differs']:,} |" if rp else ""))
    lines += ["", "Not compared: GPU undefined (the GPU's two runs differ), order-dependent (a generator version 2 "
              "program whose outputs the order of atomics decides: flashsim.fuzz.order_dependent), "
              "address-dependent (outputs that change in the interpreter when the program's arrays move: "
              "flashsim.fuzz.address_dependent, checked only for a program that differs).",
              "", f"{len(report['forms'])} SASS forms executed in compared programs.", "", "## Refusals", ""]
    lines += [f"- {n:,} x {k}" for k, n in report["refusals"].items()] or ["none"]
    lines += ["", "## Interpreter and compile errors", ""]
    lines += [f"- {n:,} x {k}" for k, n in sorted(report.get("error_counts", {}).items(), key=lambda t: -t[1])] or \
        ["none"]
    if rp:
        lines += ["", "## Builds that differ from the record (not compared)", ""]
        lines += [f"- chunk {d['chunk']} ({d['build']}): cubin sha256 {d['rebuilt']}, recorded {d['record']}"
                  for d in rp["build_differs"]] or ["none"]
        lines += ["", "## Differences (not shrunk: a replay has no GPU)", ""]
        for d in report["differences"][:50]:
            f = d["first"]
            lines += [f"### {d['build']}: chunk {d['chunk']} program {d['i']}: GPU {f['gpu']}, interpreter "
                      f"{f['interp']} ({f['where']})", ""]
            if d.get("fixed_by"):
                lines += [f"Fixed since: {d['fixed_by']}", ""]
            elif d.get("open"):
                lines += [f"Open: {d['open']}", ""]
            lines += ["```cuda", fz.render(d["prog"]), "```", ""]
        if not report["differences"]:
            lines.append("none")
    else:
        lines += ["", "## Differences (shrunk)", ""]
        for s in report["shrunk"]:
            lines += [f"### {s['build']}: {s['first']}", "", "```cuda", s["source"], "```", ""]
        if not report["shrunk"]:
            lines.append("none")
    (out / "fuzz_report.md").write_text("\n".join(lines) + "\n")


def write_samples(corpus: Path, report: dict, out: Path, every: int = 60) -> tuple[int, int]:
    """From a campaign's corpus, the rows to commit: ``sample.jsonl.xz``, every ``every``-th compared program
    (differences left out) with the GPU's digests, and ``gpu_only.jsonl.xz``, every program the interpreter
    refused or failed on with the GPU's digest of those builds. Returns the two row counts."""
    differ = {(d["chunk"], d["i"]) for d in report["differences"]}
    n_sample = n_only = k = 0
    with lzma.open(corpus, "rt", encoding="utf-8") as src, \
            lzma.open(out / "sample.jsonl.xz", "wt", encoding="utf-8") as sample, \
            lzma.open(out / "gpu_only.jsonl.xz", "wt", encoding="utf-8") as only:
        for line in src:
            r = json.loads(line)
            if r.get("gpu_only"):
                only.write(json.dumps({**r, "gpu": {}}, separators=(",", ":")) + "\n")
                n_only += 1
            if r["gpu"] and (r["chunk"], r["i"]) not in differ:
                if k % every == 0:
                    sample.write(json.dumps({**r, "gpu_only": {}}, separators=(",", ":")) + "\n")
                    n_sample += 1
                k += 1
    return n_sample, n_only


# the options each mode takes besides --out (and why it refuses the others)
_MODES = {
    "campaign": ({"programs", "seed", "workers", "per_chunk", "builds", "time_limit", "shrink_seconds",
                  "sample_every"}, "a campaign (without --record, --replay or --merge)"),
    "record": ({"record", "programs", "seed", "workers", "per_chunk", "builds", "time_limit"},
               "--record (it runs no interpreter: nothing to shrink or sample)"),
    "replay": ({"replay", "chunks", "workers", "builds", "time_limit", "sample_every"},
               "--replay (the record fixes the seed, the chunk size and the programs, and without the GPU "
               "nothing is shrunk)"),
    "merge": ({"merge", "sample_every"}, "--merge (it adds up the reports as they are)"),
}


def _parse_chunks(text: str) -> tuple[int | None, int | None] | None:
    m = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", text)
    if not m:
        return None
    a, b = (int(x) if x else None for x in m.groups())
    return None if a is not None and b is not None and a >= b else (a, b)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashsim.gpu.fuzz", description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--record", action="store_true",
                      help="GPU only: record each program's GPU output digest (DIR/record.jsonl.xz) to replay")
    mode.add_argument("--replay", type=Path, metavar="RECORD",
                      help="compare the interpreter with the record in RECORD (a --record's --out), no GPU")
    mode.add_argument("--merge", type=Path, nargs="+", metavar="DIR",
                      help="add up the replays in DIR ... (chunk ranges of one record) into --out")
    ap.add_argument("--chunks", metavar="A:B", help="with --replay: the record's chunks A to B-1 only (A: or :B)")
    ap.add_argument("--programs", type=int, help="programs to draw (whole chunks; default 1000)")
    ap.add_argument("--seed", type=int, help="default 0")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, help="worker processes (default: the cores but one)")
    ap.add_argument("--per-chunk", type=int, help=f"programs per chunk (default {PER_CHUNK})")
    ap.add_argument("--builds", help=f"default {','.join(fz.BUILDS)} (a replay: the record's)")
    ap.add_argument("--time-limit", type=float, help="stop drawing new chunks after this many seconds")
    ap.add_argument("--shrink-seconds", type=float, help="default 120")
    ap.add_argument("--sample-every", type=int, help="keep every N-th compared program in sample.jsonl.xz "
                    "(default 60)")
    args = ap.parse_args(argv)
    name = "record" if args.record else "replay" if args.replay else "merge" if args.merge else "campaign"
    allowed, what = _MODES[name]
    for dest in ("chunks", "programs", "seed", "workers", "per_chunk", "builds", "time_limit", "shrink_seconds",
                 "sample_every"):
        if getattr(args, dest) is not None and dest not in allowed:
            ap.error(f"--{dest.replace('_', '-')}: not with {what}")
    workers = args.workers if args.workers is not None else max(1, (os.cpu_count() or 2) - 1)
    sample_every = 60 if args.sample_every is None else args.sample_every
    if sample_every < 1:
        ap.error(f"--sample-every: expected at least 1, got {sample_every}")
    builds = None if args.builds is None else [b for b in args.builds.split(",") if b]
    for b in builds or ():
        if b not in fz.BUILDS:
            ap.error(f"--builds: unknown build {b!r} (expected {', '.join(fz.BUILDS)})")
    chunks = None
    if name == "replay":
        for f in ("record.jsonl.xz", "record_meta.json"):
            if not (args.replay / f).is_file():
                ap.error(f"--replay: {args.replay} has no {f} (expected the --out of a --record run)")
        if args.chunks is not None:
            chunks = _parse_chunks(args.chunks)
            if chunks is None:
                ap.error(f"--chunks: expected A:B with A < B (the record's chunks A to B-1; A: or :B for the "
                         f"rest), got {args.chunks!r}")
        meta, rows = read_record(args.replay)
        for b in builds or ():
            if b not in meta["builds"]:
                ap.error(f"--builds: {b!r} is not in the record (it has {', '.join(meta['builds'])})")
        a, b = chunks or (None, None)
        if not any((a is None or c >= a) and (b is None or c < b) for c in rows):
            ap.error(f"--chunks: no chunk of the record in {args.chunks} (it has chunks "
                     f"{', '.join(f'{x}:{y}' for x, y in _ranges(rows)) or 'none'})")
    if name == "merge":
        for d in args.merge:
            for f in ("fuzz_report.json", "corpus.jsonl.xz"):
                if not (d / f).is_file():
                    ap.error(f"--merge: {d} has no {f} (expected the --out of a replay)")
            if d.resolve() == args.out.resolve():
                ap.error(f"--merge: {d} is also --out")
    n = 1000 if args.programs is None else args.programs
    if n < 1:
        ap.error(f"--programs: expected at least 1, got {n}")
    args.out.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(msg, flush=True)
        with open(args.out / "fuzz.log", "a") as fh:
            fh.write(msg + "\n")

    seed = 0 if args.seed is None else args.seed
    per = PER_CHUNK if args.per_chunk is None else args.per_chunk
    if name == "record":
        meta = record(n, seed, args.out, builds=builds or fz.BUILDS, workers=workers, per=per,
                      time_limit=args.time_limit, provenance=provenance(), log=log)
        size = (args.out / "record.jsonl.xz").stat().st_size
        log(f"done: {meta['programs']} programs recorded in {args.out / 'record.jsonl.xz'} ({size:,} bytes), "
            f"replay with: python -m flashsim.gpu.fuzz --replay {args.out} --out DIR")
        return 0
    if name == "merge":
        report = merge(args.merge, args.out, sample_every=sample_every, log=log)
    else:
        if name == "replay":
            host, rec = provenance(), meta.get("provenance", {})
            # what the programs and cubins are made with (the cubins' sha256 decide)
            if meta.get("cwd", os.getcwd()) != os.getcwd():
                log(f"the record was built in {meta['cwd']}, this replay runs in {os.getcwd()}: NVRTC writes that "
                    "directory into each cubin, so every build will differ; run it from there")
            for key in ("generator_version", "nvrtc", "ptxas128"):
                a, b = (p.get("toolchain", {}).get(key) if key == "nvrtc" else p.get(key) for p in (rec, host))
                if a is not None and a != b:
                    log(f"the record's {key} is {a}, here {b}: its builds may differ")
            report = replay(args.replay, chunks=chunks, builds=builds, workers=workers, time_limit=args.time_limit,
                            corpus=args.out / "corpus.jsonl.xz", log=log)
            report["replay"]["host"] = host
        else:
            report = campaign(n, seed, builds=builds or fz.BUILDS, workers=workers, per=per,
                              time_limit=args.time_limit,
                              shrink_seconds=120.0 if args.shrink_seconds is None else args.shrink_seconds,
                              corpus=args.out / "corpus.jsonl.xz", log=log)
            report["provenance"] = provenance()
        write_report(report, args.out)
        n_sample, n_only = write_samples(args.out / "corpus.jsonl.xz", report, args.out, every=sample_every)
        log(f"samples: {n_sample} compared programs (sample.jsonl.xz), {n_only} answered by the GPU alone "
            f"(gpu_only.jsonl.xz)")
    bd = sum(s.get("build_differs", 0) for s in report["stats"].values())
    log(f"done: {report['programs']} programs, {len(report['differences'])} differences, "
        f"{sum(s['refused'] for s in report['stats'].values())} refused, {len(report['errors'])} errors"
        + (f", {bd} not compared (build differs)" if "replay" in report else ""))
    return 1 if report["differences"] or report["errors"] or bd else 0


if __name__ == "__main__":
    sys.exit(main())
