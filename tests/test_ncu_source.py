"""gpu.ncu_source without a GPU: the parser of Nsight Compute's source page (CSV), the per-PC comparison
with the interpreter, the probe kernel's one-instruction-per-line layout, and dry runs of the probe cases
through the interpreter (plus a comparison against CSVs written from the interpreter's own numbers)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from flashsim.gpu import ncu_source as ns
from flashsim.gpu.ncu_source import NcuSourceError, compare_case, parse_source_csv, table_for

# the columns ncu 2025.3.1 prints on the source page (SASS view), cut after the first L2 column
COLUMNS = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
           "# Samples", "Instructions Executed", "Thread Instructions Executed",
           "Predicated-On Thread Instructions Executed", "Avg. Threads Executed",
           "Avg. Predicated-On Threads Executed", "Avg. Predicated-On Threads Unexecuted", "Address Space",
           "Access Operation", "Access Size", "L1 Tag Requests Global", "L1 Conflicts Shared N-Way",
           "L1 Wavefronts Shared Excessive", "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal",
           "L2 Theoretical Sectors Global Excessive", "stall_barrier"]
BASE = 0x7F4EB57AC200


def _line(cells) -> str:
    return ",".join(f'"{c}"' for c in cells)


def _row(pc: int, sass: str, executed="0", wf="0", ideal="0", space="-", size="-", nway="0", base=BASE):
    cells = dict.fromkeys(COLUMNS, "0")
    cells.update({"Address": f"{base + pc:#x}", "Source": f"      {sass}", "Instructions Executed": str(executed),
                  "L1 Wavefronts Shared": str(wf), "L1 Wavefronts Shared Ideal": str(ideal),
                  "L1 Conflicts Shared N-Way": str(nway), "Address Space": space, "Access Size": size,
                  "Access Operation": "-" if space == "-" else "Load"})
    try:
        cells["L1 Wavefronts Shared Excessive"] = str(int(str(wf).replace(",", "")) - int(str(ideal).replace(",", "")))
    except ValueError:
        cells["L1 Wavefronts Shared Excessive"] = "-"
    return _line(cells[c] for c in COLUMNS)


def _csv(kernels) -> str:
    """ncu's page: per kernel a 'Kernel Name' line (with the trailing comma ncu prints), the header, the rows."""
    out = []
    for name, rows in kernels:
        out.append(f'"Kernel Name","{name}",')
        out.append(_line(COLUMNS))
        out += rows
        out.append("")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------ the parser


def test_parse_several_kernels_dashes_and_thousands_separators():
    text = "==PROF== a note ncu prints before the tables\n" + _csv([
        ("first_kernel", [_row(0, "LDC R1, c[0x0][0x28]", 4), _row(16, "LDS.U.128 R4, [R2]", "1,234", "4,936", "4,936",
                                                                  "Shared", "128"),
                          _row(32, "EXIT", 4, "-", "-"), _row(48, "BRA 0x30", 0), _row(64, "NOP", 0)]),
        ("second_kernel(int, float*)", [_row(0, "S2R R0, SR_TID.X", 2, base=0x7F0000001000),
                                        _row(16, "STS [R0], R0", 2, 16, 2, "Shared", base=0x7F0000001000)]),
    ])
    tables = parse_source_csv(text)
    assert [t.kernel for t in tables] == ["first_kernel", "second_kernel"]
    rows = tables[0].by_pc()
    assert sorted(rows) == [0, 16, 32, 48, 64]
    assert rows[16].executed == 1234 and rows[16].wavefronts == 4936 and rows[16].ideal == 4936
    assert rows[16].space == "Shared" and rows[16].size == "128" and rows[16].sass.strip() == "LDS.U.128 R4, [R2]"
    assert rows[32].wavefronts is None and rows[32].ideal is None and rows[32].excessive is None
    assert rows[0].address == BASE and rows[64].address == BASE + 64
    second = table_for(tables, "second_kernel").by_pc()
    assert second[16].executed == 2 and second[16].wavefronts == 16 and second[16].excessive == 14
    with pytest.raises(NcuSourceError, match="no source table for kernel 'third'"):
        table_for(tables, "third")


def test_a_table_without_kernel_name_stands_for_the_only_kernel():
    text = _line(COLUMNS) + "\n" + _row(0, "EXIT", 1) + "\n"
    (t,) = parse_source_csv(text)
    assert t.kernel == "" and table_for([t], "anything") is t


def _bad_header():
    return _line([c for c in COLUMNS if c != "L1 Wavefronts Shared Ideal"])


@pytest.mark.parametrize(("text", "match"), [
    ("", "no SASS source table"),
    ('"Kernel Name","k",\n"ID","Metric Name"\n"1","x"\n', "no SASS source table"),
    ('"Kernel Name","k",\n' + _bad_header() + "\n", "no column \\['L1 Wavefronts Shared Ideal'\\]"),
    (_line(COLUMNS) + '\n"0x7f0000000000","EXIT","0"\n', "line 2: 3 cells for 21 columns"),
    (_line(COLUMNS) + "\n" + _row(0, "EXIT", "many"), "'Instructions Executed' holds 'many', not a number"),
    (_line(COLUMNS) + "\n" + _row(0, "LDS R1, [R2]", 1, "2.5", 1), "'L1 Wavefronts Shared' holds '2.5', not a whole"),
    (_line(COLUMNS) + "\n" + _row(16, "EXIT", 1) + "\n" + _row(0, "NOP", 0), "does not follow"),
    (_line(COLUMNS) + "\n" + _row(0, "EXIT", 1) + "\n" + _row(24, "NOP", 0), "by a multiple of 16"),
    ('"Kernel Name",\n' + _line(COLUMNS) + "\n" + _row(0, "EXIT", 1), "'Kernel Name' line without a name"),
])
def test_parse_rejects_bad_input_with_the_line(text, match):
    with pytest.raises(NcuSourceError, match=match):
        parse_source_csv(text)


def test_parse_rejects_what_is_not_text():
    with pytest.raises(NcuSourceError, match="expected the CSV text as a str"):
        parse_source_csv(b"bytes")


# ------------------------------------------------------------------------------------------ comparing

PROGRAM = [(0, "LDC R1, c[0x0][0x28]"), (16, "LDS.U.128 R4, [R2]"), (32, "@!P0 STS [R3], R5"),
           (48, "ATOMS.CAST.SPIN R7, [R2], R5, R7"), (64, "BSYNC B0"), (80, "EXIT"), (96, "BRA 0x60")]


def _interp(**kw):
    d = {"case": "t", "kernel": "k", "problem": "p", "cubin_sha256": "0" * 64, "error": None, "error_kind": None,
         "seconds": 0.1, "instructions": [{"pc": pc, "sass": s, "line": 7, "probe": None} for pc, s in PROGRAM],
         "executed": [[0, 4], [16, 4], [32, 4], [48, 4], [64, 4], [80, 4]],
         "banks": [{"pc": 16, "sass": "LDS.U.128 R4, [R2]", "op": "ld", "executions": 4, "wavefronts": 16,
                    "ideal": 16, "line": 7},
                   {"pc": 32, "sass": "@!P0 STS [R3], R5", "op": "st", "executions": 2, "wavefronts": 8, "ideal": 2,
                    "line": 7}],
         "totals": {"executions": 6, "wavefronts": 24, "ideal": 18, "conflicts": 6}}
    d.update(kw)
    return d


def _table(changes=None, drop_first=False):
    vals = {0: (4, "-", "-"), 16: (4, 16, 16), 32: (4, 8, 2), 48: (4, 32, 1), 64: (4, "-", "-"), 80: (4, "-", "-"),
            96: (0, "-", "-"), 112: (0, "-", "-"), 128: (0, "-", "-")}  # 112, 128: padding NOPs
    vals.update(changes or {})
    sass = dict(PROGRAM) | {112: "NOP", 128: "NOP"}
    rows = [_row(pc, sass[pc], *vals[pc]) for pc in sorted(vals) if not (drop_first and pc == 0)]
    return table_for(parse_source_csv(_csv([("k", rows)])), "k")


def test_compare_agrees_pc_by_pc_with_padding_and_an_unmodelled_atomic():
    r = compare_case(_interp(), _table())
    assert r["status"] == "agree", r
    assert r["counts"] == {"agree": 2, "DIFFER": 0, "not modelled": 1, "not measured": 0}
    assert r["mapping"] == {"compared": 7, "opcode_mismatches": 0, "examples": [], "text_differs": 0, "only_ncu": 2,
                            "only_interp": 0, "broken": False}
    assert r["executed"]["compared"] == 9 and r["executed"]["differ"] == 0
    atom = next(x for x in r["shared"] if x["pc"] == 48)
    assert atom["status"] == "not modelled" and atom["ncu"]["wavefronts"] == 32 and atom["interp"]["wavefronts"] == 0
    sts = next(x for x in r["shared"] if x["pc"] == 32)
    assert sts["form"] == "STS"
    assert sts["interp"] == {"executed": 4, "wavefronts": 8, "ideal": 2, "active_executions": 2}


@pytest.mark.parametrize(("changes", "pc", "what"), [
    ({32: (4, 9, 2)}, 32, "wavefronts"),
    ({16: (4, 16, 12)}, 16, "ideal"),
    ({16: (3, 16, 16)}, 16, "executed"),
])
def test_compare_finds_a_shared_memory_difference(changes, pc, what):
    r = compare_case(_interp(), _table(changes))
    assert r["status"] == "DIFFER"
    (bad,) = [x for x in r["shared"] if x["status"] == "DIFFER"]
    assert bad["pc"] == pc and bad["ncu"][what] != bad["interp"][what]
    assert r["counts"]["DIFFER"] == 1


def test_compare_finds_an_execution_count_difference_outside_shared_memory():
    r = compare_case(_interp(), _table({80: (8, "-", "-")}))
    assert r["status"] == "DIFFER" and r["counts"]["DIFFER"] == 0
    assert r["executed"]["rows"] == [{"pc": 80, "sass": "EXIT", "interp": 4, "ncu": 8, "line": 7}]
    assert r["executed"]["by_opcode"] == {"EXIT": {"pcs": 1, "ncu": 8, "interp": 4}}
    # a convergence barrier's count (one per arriving group on the GPU) is listed apart, not a difference
    r = compare_case(_interp(), _table({64: (8, "-", "-")}))
    assert r["status"] == "agree" and r["executed"]["differ"] == 0
    assert r["executed"]["convergence_rows"] == [{"pc": 64, "sass": "BSYNC B0", "interp": 4, "ncu": 8, "line": 7}]


def test_compare_catches_an_offset_between_the_pcs():
    r = compare_case(_interp(), _table(drop_first=True))  # ncu's first row would be the LDS: every PC shifted
    assert r["mapping"]["broken"] and r["status"] == "PC mapping broken"
    assert r["mapping"]["examples"][0] == {"pc": 0, "interp": "LDC R1, c[0x0][0x28]", "ncu": "LDS.U.128 R4, [R2]"}


def test_compare_when_the_interpreter_cannot_run_or_nothing_was_measured():
    unsupported = _interp(error="atomic ATOMS.CAST.SPIN is not modelled", error_kind="unsupported", executed=[],
                          banks=[])
    r = compare_case(unsupported, _table())
    assert r["status"] == "not modelled" and r["mapping"]["opcode_mismatches"] == 0
    assert r["executed"]["compared"] == 0
    failed = _interp(error="SimulatedFault: out of bounds", error_kind="failed", executed=[], banks=[])
    assert compare_case(failed, _table())["status"] == "interpreter error"
    dry = compare_case(_interp(), None)
    assert dry["status"] == "not measured" and dry["counts"]["not measured"] == 2
    assert "interpreter 6 shared executions, 24 wavefronts, 18 ideal, 6 conflicts" in ns.case_line(dry)


def test_sass_forms_ignore_guards_and_spacing():
    assert ns.sass_form("  @!P0   LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;") == "LDGSTS.E.BYPASS.128"
    assert ns.base_opcode("@P1 ATOMS.CAST.SPIN R5, [R3], R4, R5") == "ATOMS"
    assert ns.base_opcode("NOP") == "NOP"


# ------------------------------------------------------------------------------------------ the probe kernel


def test_every_probe_line_is_one_shared_memory_instruction():
    lines = ns.probe_lines()
    names = list(lines.values())
    assert len(names) == len(set(names)) and len(names) >= 100
    seen: dict[str, list[str]] = {n: [] for n in names}
    for case in (c for c in ns.CASES.values() if c.probe and c.file == ns.PROBE_FILE):
        _, prog = ns._program(case)
        for ins in prog.instructions.values():
            never = ins.text.startswith("@!PT ")  # ptxas's padding before LDGSTS: never executes
            if ins.line and ins.line[1] in lines and ins.opcode in ns.SHARED_OPCODES | ns.GENERIC_OPCODES and not never:
                seen[lines[ins.line[1]]].append(ins.text)
    missing = [n for n, v in seen.items() if not v]
    assert not missing, f"probe lines with no shared-memory instruction (ptxas folded them): {missing}"
    # loops (zero fills) and compare-and-swap loops have several; every plain probe has exactly one
    several = {n: v for n, v in seen.items() if len(v) > 1 and not n.endswith("zero_fill")
               and not n.startswith(("atoms_add_f32", "atoms_add_u64", "atoms_add_u32_one_word"))}
    assert not several, several


LDGSTS_CASES = ("probe_ldgsts", "probe_ldgsts_warps")


def _ldgsts_probes() -> dict[str, list[tuple[str, int, str]]]:
    """{probe name: [(kernel, pc, SASS), ...]} of the LDGSTS instructions on the lines of probe_ldgsts.cu
    (ptxas's never-executed @!PT padding left out)."""
    from flashsim.gpu import runtime

    lines = ns.probe_lines(runtime.kernel_path(ns.LDGSTS_PROBE_FILE))
    seen: dict[str, list[tuple[str, int, str]]] = {n: [] for n in lines.values()}
    for name in LDGSTS_CASES:
        case = ns.CASES[name]
        _, prog = ns._program(case)
        for ins in prog.instructions.values():
            if ins.opcode != "LDGSTS" or ins.text.startswith("@!PT "):
                continue
            assert ins.line and ins.line[1] in lines, f"{case.function}: {ins.text} is on no probe line ({ins.line})"
            seen[lines[ins.line[1]]].append((case.function, ins.pc, ins.text))
    return seen


def test_every_ldgsts_probe_line_is_one_cp_async_at_its_own_pc():
    from flashsim.gpu import runtime

    lines = ns.probe_lines(runtime.kernel_path(ns.LDGSTS_PROBE_FILE))
    names = list(lines.values())
    assert len(names) == len(set(names)) and len(names) >= 150
    seen = _ldgsts_probes()
    bad = {n: v for n, v in seen.items() if len(v) != 1}
    assert not bad, f"probe lines that are not exactly one LDGSTS (ptxas folded, merged or split them): {bad}"
    texts = [v[0][2] for v in seen.values()]
    # the forms the sweep is about: .ca 4/8/16, .cg 16, zero fill, ignore-src, guards in P0 and elsewhere
    forms = {ns.sass_form(t) for t in texts}
    assert {"LDGSTS.E", "LDGSTS.E.64", "LDGSTS.E.128", "LDGSTS.E.BYPASS.128", "LDGSTS.E.BYPASS.128.ZFILL",
            "LDGSTS.E.ZFILL"} <= forms, forms
    assert any(re.search(r", !?P\d$", t) and "ZFILL" not in t for t in texts)  # the ignore-src form
    guards = {t.split()[0] for t in texts if t.startswith("@")}
    assert {"@P0", "@!P0"} <= guards and len(guards) >= 4, guards


def test_the_ldgsts_probes_run_in_the_interpreter(tmp_path):
    rc = ns.main(["--out", str(tmp_path), "--dry-run", "--cases", ",".join(LDGSTS_CASES), "--workers", "1"])
    assert rc == 0
    report = json.loads((tmp_path / "ncu_source.json").read_text())
    rows = {x["probe"]: x for c in report["cases"] for x in c["shared"]
            if x["probe"] and ns.base_opcode(x["sass"]) == "LDGSTS"}
    assert set(rows) == set(_ldgsts_probes())
    for c in report["cases"]:
        assert c["interp_error"] is None, c["interp_error"]
    for name, x in rows.items():
        assert x["interp"]["executed"] == (2 if name.startswith(("w_", "fa_w_")) else 1), (name, x["interp"])
        assert x["status"] == "not measured" and x["ncu"] is None
    # counts the H100 gave (traces/sass/ncu_source/raw/probe_ldgsts*.csv.gz), by the cp.async rule of flashsim.smem
    expect = {"cg16_stride16": (4, 4), "ca4_stride128": (32, 1), "ca8_stride8": (4, 2), "cg16_stride16_guard_none": (0, 0),
              "w_cg16_stride16_both_warps": (8, 8), "w_cg16_stride16_warp1_off": (4, 4),
              "cg16_stride32": (32, 4), "cg16_one_dst": (1, 1), "cg16_lane1_on_lane8": (7, 4), "cg16_shift64": (8, 4),
              "ca16_one_dst": (32, 4), "ca4_lines_interleaved": (7, 1), "ca8_pairs": (6, 2),
              "ca4_stride4_src_one": (32, 1), "cg16_stride16_sz0_lanes16to31": (6, 6), "cg16_stride16_sz16_all": (8, 8),
              "ca8_stride8_sz0_lanes16to31": (3, 2), "cg16_stride32_guard_lanes0to15_ign_odd": (12, 3),
              "fa_first_cg16_stride16_lanes0to7": (25, 4), "first_cg16_stride32_guard_lanes0to15": (0, 0),
              "w_cg16_stride32_sz0_warp1": (80, 16)}
    for name, (wf, ideal) in expect.items():
        assert (rows[name]["interp"]["wavefronts"], rows[name]["interp"]["ideal"]) == (wf, ideal), name


def test_the_zfill_probes_are_one_cp_async_each_in_the_predicate_register_of_their_section(tmp_path):
    """probe_ldgsts_zfill.cu: every probe line is exactly one unguarded LDGSTS.BYPASS.128 at its own PC, of
    the form its name says (c_: no operand, z_ / z0_: .ZFILL, i_ / ih_ / i0_: ignore-src `, !Pn`), with its
    predicate in P0 exactly for i0_ / z0_ and as the table at the top of the file lists it; the case runs
    in the interpreter, one execution per probe."""
    from flashsim.gpu import runtime

    path = runtime.kernel_path(ns.ZFILL_PROBE_FILE)
    lines = ns.probe_lines(path)
    names = list(lines.values())
    assert len(names) == len(set(names)) and len(names) >= 50
    _, prog = ns._program(ns.CASES["probe_ldgsts_zfill"])
    seen: dict[str, list[tuple[int, str]]] = {n: [] for n in names}
    for ins in prog.instructions.values():
        if ins.opcode != "LDGSTS" or ins.text.startswith("@!PT "):
            continue
        assert ins.line and ins.line[1] in lines, f"{ins.text} is on no probe line ({ins.line})"
        seen[lines[ins.line[1]]].append((ins.pc, ins.text))
    bad = {n: v for n, v in seen.items() if len(v) != 1}
    assert not bad, f"probe lines that are not exactly one LDGSTS (ptxas folded, merged or split them): {bad}"
    operand = {}
    for name, [(_, text)] in seen.items():
        assert not text.startswith("@"), (name, text)
        m = re.search(r", (!?P\d)$", text)
        form = ns.sass_form(text)
        if name.startswith("c_"):
            assert form == "LDGSTS.E.BYPASS.128" and m is None, (name, text)
        elif name.startswith(("z_", "z0_")):
            assert form == "LDGSTS.E.BYPASS.128.ZFILL" and m and not m.group(1).startswith("!"), (name, text)
        else:
            assert name.startswith(("i_", "ih_", "i0_")), name
            assert form == "LDGSTS.E.BYPASS.128" and m and m.group(1).startswith("!"), (name, text)
        if m:
            assert (m.group(1).lstrip("!") == "P0") == name.startswith(("i0_", "z0_")), (name, text)
        operand[name] = m.group(1) if m else "-"
    table = {int(ln): (name, op) for ln, name, op in
             re.findall(r"^//\s+(\d+) (\w+)\s+(-|!?P\d)\s+\d+/\d+$", path.read_text(), re.MULTILINE)}
    assert table == {ln: (name, operand[name]) for ln, name in lines.items()}
    rc = ns.main(["--out", str(tmp_path), "--dry-run", "--cases", "probe_ldgsts_zfill", "--workers", "1"])
    assert rc == 0
    report = json.loads((tmp_path / "ncu_source.json").read_text())
    assert report["cases"][0]["interp_error"] is None
    rows = {x["probe"]: x for x in report["cases"][0]["shared"]
            if x["probe"] and ns.base_opcode(x["sass"]) == "LDGSTS" and not x["sass"].startswith("@!PT")}
    assert set(rows) == set(names)
    assert all(x["interp"]["executed"] == 1 and x["status"] == "not measured" for x in rows.values())


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    out = tmp_path_factory.mktemp("dry")
    rc = ns.main(["--out", str(out), "--dry-run", "--cases", "probe_ldst,probe_matrix", "--workers", "1"])
    return rc, out, json.loads((out / "ncu_source.json").read_text())


def test_dry_run_of_the_probes_through_the_interpreter(dry, capsys):
    rc, out, report = dry
    assert rc == 0
    by_probe = {(c["case"], x["probe"]): x for c in report["cases"] for x in c["shared"] if x["probe"]}
    expect = {("probe_ldst", "ld32_stride2"): (2, 1), ("probe_ldst", "ld128_linear"): (4, 4),
              ("probe_ldst", "st32_same_word"): (1, 1), ("probe_ldst", "ld128_quarter0_conflicts"): (11, 4),
              ("probe_ldst", "gld128_stride128"): (32, 4), ("probe_matrix", "ldsm_x4_rows_stride256"): (32, 4),
              ("probe_matrix", "stsm_x1_rows_stride256"): (8, 1), ("probe_matrix", "ldgsts_ca4_linear"): (4, 1)}
    for key, (wf, ideal) in expect.items():
        x = by_probe[key]
        assert (x["interp"]["wavefronts"], x["interp"]["ideal"], x["interp"]["executed"]) == (wf, ideal, 1), key
        assert x["status"] == "not measured" and x["ncu"] is None
    md = (out / "ncu_source.md").read_text()
    assert "## Probe instructions" in md and "| probe_ldst | ld32_stride2 |" in md
    assert report["summary"] == "ncu_source: 2 cases interpreted (dry run: nothing measured)"


def _csv_from_interpreter(case: dict, change_pc: int | None = None) -> str:
    """The source page ncu would print if it counted exactly as the interpreter does."""
    ex = dict(case["executed"])
    banks = {b["pc"]: b for b in case["banks"]}
    rows = []
    for d in case["instructions"]:
        b = banks.get(d["pc"])
        wf, ideal = (b["wavefronts"], b["ideal"]) if b else ("-", "-")
        if d["pc"] == change_pc:
            wf += 1
        rows.append(_row(d["pc"], d["sass"], ex.get(d["pc"], 0), wf, ideal))
    return _csv([(case["kernel"], rows)])


def test_comparison_against_csvs_finds_agreement_and_one_planted_difference(dry, tmp_path, capsys):
    interp = ns.interpret_case("probe_ldst")
    raw = tmp_path / "given" / "raw"
    raw.mkdir(parents=True)
    (raw / "probe_ldst.csv").write_text(_csv_from_interpreter(interp), encoding="utf-8")
    assert ns.main(["--out", str(tmp_path / "a"), "--csv-dir", str(tmp_path / "given"), "--cases", "probe_ldst",
                    "--workers", "1"]) == 0
    assert "probe_ldst: probe_banks_ldst:" in capsys.readouterr().out
    st = next(b for b in interp["banks"] if b["sass"].startswith("STS.128"))
    (raw / "probe_ldst.csv").write_text(_csv_from_interpreter(interp, st["pc"]), encoding="utf-8")
    assert ns.main(["--out", str(tmp_path / "b"), "--csv-dir", str(tmp_path / "given"), "--cases", "probe_ldst",
                    "--workers", "1"]) == 1
    md = (tmp_path / "b" / "ncu_source.md").read_text()
    assert re.search(rf"\| {st['pc']:#06x} \| `STS\.128 [^|]*` \| \w+ \| DIFFER \| 1 \| 1 \| {st['wavefronts'] + 1} \| "
                     rf"{st['wavefronts']} \|", md), md
    assert "1 differ" in capsys.readouterr().out


def test_main_reports_when_ncu_cannot_run(tmp_path, capsys):
    rc = ns.main(["--out", str(tmp_path), "--cases", "probe_matrix", "--ncu", str(tmp_path / "no-ncu"),
                  "--workers", "1"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "not found: install Nsight Compute or pass --ncu PATH" in err
    report = json.loads((tmp_path / "ncu_source.json").read_text())
    assert report["cases"][0]["status"] == "not measured"


def test_main_rejects_unknown_cases(tmp_path):
    with pytest.raises(SystemExit, match="unknown case\\(s\\) \\['nope'\\]"):
        ns.main(["--out", str(tmp_path), "--dry-run", "--cases", "probe_ldst,nope"])


def test_every_case_names_a_kernel_of_its_cubin():
    for case in ns.CASES.values():
        assert case.function in ns._program(case)[0].kernels, case.name


def test_csv_writer_of_these_tests_matches_the_parser():
    # the synthetic page is valid CSV with every row as wide as the header
    rows = list(csv.reader(io.StringIO(_csv([("k", [_row(0, "EXIT", 1)])]))))
    assert rows[0][:2] == ["Kernel Name", "k"] and len(rows[1]) == len(rows[2]) == len(COLUMNS)


class _Metric:
    def __init__(self, values: dict[int, int]):
        self._items = sorted(values.items())

    def num_instances(self):
        return len(self._items)

    def correlation_ids(self):
        items = self._items

        class _Ids:
            def as_uint64(self, i):
                return items[i][0]
        return _Ids()

    def as_uint64(self, i):
        return self._items[i][1]


class _Action:
    def __init__(self, metrics, sass):
        self._metrics, self._sass = metrics, sass

    def metric_by_name(self, name):
        return self._metrics.get(name)

    def name(self):
        return "k(int, float*)"

    def sass_by_pc(self, address):
        return self._sass.get(address, "")


def test_the_ncu_report_fallback_reads_the_same_numbers(monkeypatch, tmp_path):
    base = 0x7F00_0000_0000
    act = _Action({"inst_executed": _Metric({base: 4, base + 16: 4, base + 32: 0}),
                   "memory_l1_wavefronts_shared": _Metric({base + 16: 16}),
                   "memory_l1_wavefronts_shared_ideal": _Metric({base + 16: 4})},
                  {base: "LDC R1, c[0x0][0x28]", base + 16: "LDS.U.128 R4, [R2]", base + 32: "NOP"})

    class _Range:
        def num_actions(self):
            return 1

        def action_by_idx(self, i):
            return act

    class _Context:
        def num_ranges(self):
            return 1

        def range_by_idx(self, i):
            return _Range()

    fake = type("ncu_report", (), {"load_report": staticmethod(lambda path: _Context())})
    monkeypatch.setitem(__import__("sys").modules, "ncu_report", fake)
    (t,) = ns.tables_from_report(tmp_path / "r.ncu-rep", "ncu")
    assert t.kernel == "k"
    rows = t.by_pc()
    assert sorted(rows) == [0, 16, 32] and rows[16].wavefronts == 16 and rows[16].ideal == 4
    assert rows[0].wavefronts is None and rows[32].executed == 0 and rows[16].sass == "LDS.U.128 R4, [R2]"


# ------------------------------------------------------------------------------------------ the H100 record

H100 = Path(__file__).resolve().parents[1] / "traces" / "sass" / "ncu_source"
#: the shared-memory instructions whose counts the bank model does not give: (case, pc). The cp.async rule
#: (flashsim.smem.cp_async_wavefronts) was fitted to every LDGSTS of the other cases and then, for .ca, to
#: the drawn patterns of probe_ldgsts_random (seed 2026) and probe_ldgsts_random2 (seed 2027), and to the
#: designed src-size and ignore-src patterns of probe_ldgsts_zfill (56 of 56 agree): it gives 39 and 40 of the
#: 48 drawn rows of each right, and 38 of the 48 of probe_ldgsts_random3 (seed 2028; 29 with the rule its counts
#: were written down with, before the H100 ran it). The rest are .ca counts the H100 makes higher, cg16 .ZFILL
#: with mixed src-sizes (the H100 1 to 3 higher) and one cg16 ignore-src held in P0 (seed 2026 r46: 25, the rule
#: 32) (traces/sass/ncu_source/README.md). Held out from all of that, probe_ldgsts_random4 (seed 2029, recorded
#: after the rule was committed): 41 of 48 agree, the rest .ca (6) and one mixed src-size
KNOWN_DIFFERENCES: set[tuple[str, int]] = {("probe_ldgsts_random", pc) for pc in (
    0x0d60, 0x0f00, 0x1520, 0x15e0, 0x1840, 0x1b40, 0x2180, 0x2300, 0x2550,
)} | {("probe_ldgsts_random2", pc) for pc in (
    0x0be0, 0x1080, 0x1140, 0x1840, 0x1a80, 0x1e60, 0x1f20, 0x2180,
)} | {("probe_ldgsts_random3", pc) for pc in (
    0x02c0, 0x05e0, 0x0a60, 0x0d60, 0x15e0, 0x1a80, 0x1e60, 0x1f20, 0x1fe0, 0x2180,
)} | {("probe_ldgsts_random4", pc) for pc in (
    0x0420, 0x08c0, 0x15e0, 0x16a0, 0x1fe0, 0x2300, 0x2620,
)} | {("fa2_sm8x_causal", pc) for pc in (
    # fa2's 64 x 64 configuration: three zero-filling copies guarded by @!P0 (the predicate the rule reads
    # differently, README "P0"), where the interpreter counts 176, 56, 240 wavefronts against 112, 52, 224
    0x1730, 0x17c0, 0x4de0,
)}


#: cases added after the H100 record was taken: no source page yet (python -m flashsim.gpu.ncu_source --out DIR
#: --cases NAMES on the GPU records them)
AWAITING_H100: set[str] = set()


#: cases whose ATOMS.CAST.SPIN loops the H100 ran once more than the interpreter: the loops' instructions
SPIN_LOOPS = {"probe_atomics_more": 12}


def test_the_interpreter_against_the_recorded_h100_source_counters():
    """The committed Nsight Compute source pages (H100) against the interpreter run now on the same cubins:
    every shared-memory instruction of the 7 kernels and the probes agrees (2,239 of them) but the
    KNOWN_DIFFERENCES of the held-out cp.async patterns, and every instruction's execution count agrees (convergence barriers listed
    apart). Cases without a recorded page must be listed in AWAITING_H100; a recorded one is compared
    whether listed or not."""
    import gzip

    recorded = [n for n in ns.CASES if (H100 / "raw" / f"{n}.csv.gz").is_file()]
    assert set(ns.CASES) - set(recorded) <= AWAITING_H100, "a case lost its recorded page"
    differ, checked = set(), 0
    for name in recorded:
        text = gzip.decompress((H100 / "raw" / f"{name}.csv.gz").read_bytes()).decode()
        table = table_for(parse_source_csv(text), ns.CASES[name].function)
        r = compare_case(ns.interpret_case(name), table)
        assert not r["mapping"]["broken"] and r["mapping"]["opcode_mismatches"] == 0, name
        if r["status"] == "not modelled":  # the interpreter cannot run it
            continue
        rows = r["executed"]["rows"]
        if name in SPIN_LOOPS:
            # the H100 went round each ATOMS.CAST.SPIN[.64] loop twice where the interpreter's compare-and-store
            # succeeds at once (one lane, no contention): the retry is the hardware's, not modelled; the values
            # agree (traces/triton/form_probes.json, probe_atoms_cast's 32-bit outputs)
            assert {(x["interp"], x["ncu"]) for x in rows} == {(1, 2)}, (name, rows[:3])
            assert len(rows) == SPIN_LOOPS[name] and any("ATOMS.CAST.SPIN" in x["sass"] for x in rows), rows
        loop = {x["pc"] for x in rows} if name in SPIN_LOOPS else set()  # (their shared accesses twice too)
        rows = [x for x in rows if x["pc"] not in loop]
        assert not rows, (name, rows[:3])
        for row in r["shared"]:
            checked += row["status"] == "agree"
            if row["status"] == "DIFFER" and row["pc"] not in loop:
                differ.add((name, row["pc"]))
    assert differ == KNOWN_DIFFERENCES
    assert checked >= 2239
