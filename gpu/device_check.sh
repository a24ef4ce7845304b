#!/usr/bin/env bash
# On a GPU machine: install, validate the numerics models at scale, install the fresh golden data and
# validation records into the tree, then run the whole test suite with --gpu.
# Results go to $OUT: report.json, validation.json, the golden samples, logs. Commit them from there:
#   traces/numerics/{report.json,*.npz}  and  flashsim/data/validation.json
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
pip install -e . --no-deps --no-build-isolation -q 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -m gpu.validate --out "$OUT" "$@"
echo "validate exit: $?"
mkdir -p traces/numerics flashsim/data
cp "$OUT"/*.npz "$OUT"/report.json traces/numerics/ && cp "$OUT"/validation.json flashsim/data/
python -m pytest --gpu -q -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest_gpu.log" | tail -15
echo "pytest exit: ${PIPESTATUS[0]}"
