"""The synchronisation timeline of an interpreted launch (flashsim.sass.timeline): the warp-specialised
pipeline of gpu/kernels/ws_pipeline.cu, its events in protocol order, and the HTML page drawing them."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import flashsim.cuda as fc
from flashsim.gpu import validate_mbarrier as V


@pytest.fixture(scope="module")
def pipeline_report():
    x = V.pipeline_inputs(7, ctas=1, tiles=6)
    f = V.pipeline_build(2).module.get_function("ws_pipeline")
    out = fc.zeros((x.size,), np.float32)
    with fc.checking(timeline=True, races=True) as report:
        f((1,), (96,), (fc.asarray(x.reshape(-1)), out, np.int32(6)))
    assert (out.get().view(np.uint32) == V.pipeline_reference(x).reshape(-1).view(np.uint32)).all()
    return report


def test_the_pipeline_protocol_is_in_the_events(pipeline_report):
    ev = pipeline_report.events
    kinds = Counter(e.kind for e in ev)
    # 2 stages x (full, empty) initialised; 6 tiles copied and landed, each as two bulk copies of half a tile
    assert kinds["init"] == 4 and kinds["copy"] == 12 and kinds["land"] == 12
    # every tile: one expect_tx arrival by the producer, two consumer arrivals on empty
    assert kinds["arrive"] == 6 + 12
    # full barriers complete once per tile, empty barriers once per tile
    assert kinds["phase"] == 12
    assert {e.warp for e in ev if e.kind == "copy"} == {0}
    assert {e.warp for e in ev if e.kind in ("pass", "resume") and e.barrier in {x.barrier for x in ev if x.kind == "copy"}} == {1, 2}
    # per barrier, events are in step order and phases never go backwards
    for bar in {e.barrier for e in ev if e.barrier >= 0}:
        phases = [e.phase for e in ev if e.barrier == bar and e.phase >= 0]
        assert phases == sorted(phases)
    assert pipeline_report.event_count == len(ev)
    land = next(e for e in ev if e.kind == "land")
    assert land.pc == -1 and "issued at pc=" in land.detail
    arrive = next(e for e in ev if e.kind == "arrive")
    assert arrive.sass.startswith("SYNCS.ARRIVE") and "mbarrier.cuh:" in arrive.line  # the inlined helper's line


def test_timeline_html_is_one_page(pipeline_report):
    page = pipeline_report.timeline_html()
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "cta=0 warp=0" in page and "cta=0 warp=2" in page and "<svg" in page
    assert page.count("<title>") >= len(pipeline_report.events)


def test_timeline_needs_to_be_asked_for():
    with fc.checking() as report:
        pass
    with pytest.raises(ValueError, match="timeline"):
        report.timeline_html()
