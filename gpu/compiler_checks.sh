#!/usr/bin/env bash
# On a GPU machine: the other compilers' code on the H100 (form probes of NVRTC 13.0 / ptxas 13.0 / Triton's
# ptxas 12.8, the Triton suite through Triton's JIT, the numba suite from its recorded cubins), each stage's
# results packed into $OUT/<stage>.tgz as soon as it ends. Wheels missing there travel in .whl; the NVRTC cache
# in .fscache (FLASHSIM_CACHE_DIR).
#   bash gpu/compiler_checks.sh [stage ...]     stages: env forms triton numba pytest
set -u
OUT=${OUT:-out}; R=$OUT/c; mkdir -p "$R"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
python -m pip install -e . --no-deps --no-build-isolation -q 2>&1 | grep -v "Running pip as"
export FLASHSIM_CACHE_DIR=${FLASHSIM_CACHE_DIR:-$PWD/.fscache}
export FLASHSIM_PTXAS=${FLASHSIM_PTXAS:-$(command -v ptxas)}
for stage in ${@:-env forms triton numba}; do
  case $stage in
    env) (nvidia-smi --query-gpu=name,driver_version --format=csv; python -c "import triton, torch, cupy, numpy; print(triton.__version__, torch.__version__, cupy.__version__, numpy.__version__)"; \
          python -c "import numba, numba.cuda; print('numba', numba.__version__)"; ptxas --version | tail -1; \
          python -c "from flashsim.sass import toolchain as t; print(t.versions()); print(t.ptxas_path(), t.ptxas_version(), t.cuobjdump_path())") > "$R/env.log" 2>&1 ;;
    forms) timeout 240 python -m flashsim.gpu.form_probes --out "$R/forms" > "$R/forms.log" 2>&1 ;;
    triton) timeout 360 python -m flashsim.gpu.triton_suite --out "$R/triton" > "$R/triton.log" 2>&1 ;;
    numba) timeout 150 python -m flashsim.gpu.numba_suite --cubins traces/numba/numba_cubins.npz --out "$R/numba" > "$R/numba.log" 2>&1 ;;
    pytest) timeout ${PYTEST_TIMEOUT:-480} python -m pytest --gpu -q -p no:cacheprovider -rs ${PYTEST_ARGS:-tests} > "$R/pytest.log" 2>&1 ;;
  esac
  echo "stage $stage exit $?"; tail -6 "$R/$stage.log"
  (cd "$R" && tar czf "$OUT/$stage.tgz" $stage.log $( [ -d $stage ] && echo $stage )) && rm -rf "$R/$stage" "$R/$stage.log"
done
