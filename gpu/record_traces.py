"""Record the golden per-warp traces under traces/warp/ on the GPU (``pytest --gpu --update-traces`` runs it).

Each case is a small problem of one kernel, recorded from the CUDA kernel's traced build for a few CTAs
and all their warps. Before a file is written, the twin re-simulates it (``flashsim.session.replay``)
and the result is printed; CPU tests replay every file bit for bit.

    python -m flashsim.gpu.record_traces [--out traces/warp] [--force] [--only NAME]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flashsim import session

#: name -> (problem parameters for session.make_params, CTAs to record)
CASES: dict[str, tuple[dict, list[int]]] = {
    "fa2_hdim128_bf16_causal_gqa": (dict(kernel="fa2", seed=11, batch=1, heads=2, heads_k=1, seqlen_q=200,
                                         seqlen_k=100, headdim=128, dtype="bfloat16", causal=True), [0, 3]),
    "fa2_hdim64_f16_local_softcap": (dict(kernel="fa2", seed=12, seqlen_q=129, seqlen_k=100, headdim=40,
                                          window_size=(5, 3), softcap=30.0), [0, 1]),
    "fa2_hdim64_f16_empty_rows": (dict(kernel="fa2", seed=13, seqlen_q=256, seqlen_k=64, headdim=64, causal=True),
                                  [0, 1]),
    "fa2_hdim128_f16_nan_inf": (dict(kernel="fa2", seed=14, kind="nan_inf", seqlen_q=64, seqlen_k=40,
                                     headdim=128), [0]),
    "fa2_sm8x_hdim128_bf16_causal_gqa": (dict(kernel="fa2_sm8x", seed=15, batch=1, heads=2, heads_k=1, seqlen_q=200,
                                              seqlen_k=150, headdim=128, dtype="bfloat16", causal=True), [0, 3]),
    "fa2_sm8x_hdim128_f16_local": (dict(kernel="fa2_sm8x", seed=16, seqlen_q=100, seqlen_k=129, headdim=96,
                                        window_size=(7, 2)), [0, 1]),
    "fa2_chunked_hdim64_bf16_causal_chunk": (dict(kernel="fa2_chunked", seed=17, batch=1, heads=2, heads_k=1,
                                                  seqlen_q=200, seqlen_k=260, headdim=64, dtype="bfloat16",
                                                  causal=True, attention_chunk=100), [0, 1]),
    "kernel1_f16": (dict(kernel="kernel1", seed=21, seqlen_q=128, headdim=128), [0, 1]),
    "kernel1_bf16_large": (dict(kernel="kernel1", seed=22, kind="large", seqlen_q=128, headdim=128,
                                dtype="bfloat16"), [1]),
    "v5_d32": (dict(kernel="v5", seed=31, seqlen_q=64, seqlen_k=48, headdim=32), [0]),
    "v6_d64_large": (dict(kernel="v6", seed=32, kind="large", seqlen_q=128, seqlen_k=32, headdim=64), [0, 1]),
}

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "traces" / "warp"


def record_all(out: Path, *, force: bool = False, only: str | None = None) -> int:
    from flashsim.kernels.problems import make_case

    out.mkdir(parents=True, exist_ok=True)
    bad = 0
    for name, (params, ctas) in CASES.items():
        if only and name != only:
            continue
        case = make_case(session.make_params(**params))
        path = out / f"{name}.fstrace"
        run = session.record(case, path, backend="gpu", ctas=ctas, force=force)
        r = session.replay(run, name)
        status = "replays bit for bit" if r.clean else "DIFFERS from the twin"
        print(f"{path.name}: {len(run.events)} events, {path.stat().st_size:,} bytes; {status}")
        if not r.clean:
            print(r.diff.format(run.meta["kernel"], run.meta["instance_headdim"], params.get("dtype", "float16")))
            bad += 1
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--force", action="store_true", help="overwrite existing traces")
    p.add_argument("--only", choices=sorted(CASES))
    a = p.parse_args(argv)
    return record_all(a.out, force=a.force, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
