"""Record golden outputs of the FlashAttention kernels on a GPU for the CPU replay tests.

    python -m flashsim.gpu.record_fa_golden --out DIR     (writes DIR/fa_v5.npz: inputs, outputs, provenance)

Small seeded problems in the domain of the kernels of fa_v5.cu (v5 and v6), plus one with a NaN and large
logits; the CPU test tests/test_fa_twin.py replays them through the twin bit for bit.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from flashsim.kernels.spec import SPECS

#: the kernels of fa_v5.cu, whose golden outputs the file holds
KERNELS = tuple(name for name, spec in SPECS.items() if spec.source == "fa_v5.cu")
PROBLEMS = [  # (batch, seqlen_q, seqlen_k, heads, d, seed, scale of q/k)
    (1, 64, 16, 1, 16, 1, 1.0), (1, 64, 64, 2, 32, 2, 1.0), (2, 128, 48, 1, 64, 3, 1.0),
    (1, 64, 128, 1, 128, 4, 1.0), (1, 128, 64, 2, 32, 5, 8.0),
]


def problem(batch, sq, sk, heads, d, seed, mag):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((batch, sq, heads, d)) * mag).astype(np.float16)
    k = (rng.standard_normal((batch, sk, heads, d)) * mag).astype(np.float16)
    v = rng.standard_normal((batch, sk, heads, d)).astype(np.float16)
    if mag > 1:
        q[0, 5, heads - 1, 3] = np.nan
    return q, k, v


def main(argv=None):
    from flashsim.gpu.validate import provenance
    from flashsim.kernels.launch import run_fa

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for i, spec in enumerate(PROBLEMS):
        q, k, v = problem(*spec)
        arrays.update({f"{i}/q": q.view(np.uint16), f"{i}/k": k.view(np.uint16), f"{i}/v": v.view(np.uint16)})
        for kernel in KERNELS:
            arrays[f"{i}/out_{kernel}"] = run_fa(kernel, q, k, v).view(np.uint16)
    prov = dict(provenance(0), kernels=list(KERNELS), problems=PROBLEMS)
    np.savez_compressed(args.out / "fa_v5.npz", provenance=np.array(json.dumps(prov, sort_keys=True)), **arrays)
    print(f"recorded {len(PROBLEMS)} problems x {len(KERNELS)} kernels into {args.out / 'fa_v5.npz'}")


if __name__ == "__main__":
    main()
