#!/usr/bin/env bash
# On a GPU machine: install, validate the numerics models at scale, run the GPU test suite.
# Results go to $OUT (report.json, validation.json, golden samples, logs).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
pip install -e . --no-deps --no-build-isolation -q 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python -m gpu.validate --out "$OUT" "$@"
echo "validate exit: $?"
python -m pytest --gpu -q -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest_gpu.log" | tail -25
echo "pytest exit: ${PIPESTATUS[0]}"
