#!/usr/bin/env bash
# On a GPU machine: install, validate the numerics models at scale (writing the fresh golden data and
# validation records into the tree when the run is clean), then run the whole test suite with --gpu.
# Everything lands in $OUT too (report.json, validation.json, golden samples, logs) to be committed as
#   traces/numerics/{report.json,validate.log,*.npz}  and  flashsim/data/validation.json
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
pip install -e . --no-deps --no-build-isolation -q 2>&1 | grep -v "^WARNING: Running pip as"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ "${SKIP_VALIDATE:-0}" != 1 ]; then
  python -m gpu.validate --out "$OUT" --install "$@"
  echo "validate exit: $?"
fi
python -m pytest --gpu -q -p no:cacheprovider -rs tests 2>&1 | tee "$OUT/pytest_gpu.log" | tail -15
echo "pytest exit: ${PIPESTATUS[0]}"
