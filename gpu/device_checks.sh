#!/usr/bin/env bash
# On a GPU machine: the hardware checks, each with its own time limit, their outputs packed into
# $OUT/results.tgz (reports, records, golden data, logs).
#   STAGES="validate sfu banks races fa fa_validate ncu_fa bench_fa traces bench_trace pytest" bash gpu/device_checks.sh [extra validate_sfu args]
# validate: numerics at scale (installs golden data when clean); sfu: special-function unit on all
# inputs; wgmma: wgmma.mma_async (sm_90a) against the model and its competing hypotheses (not in the
# default STAGES); banks: Nsight Compute comparison; races: racecheck comparison; fa: v5/v6 goldens; fa_validate:
# every FA kernel against its twin on 200 problems each (report and goldens into traces/fa); ncu_fa:
# Nsight Compute shared-memory counters of the FA kernels; bench_fa: GPU TFLOP/s next to torch SDPA;
# traces: the golden per-warp traces (traces/warp) and the traced-GPU-vs-twin tests; bench_trace: the cost
# of tracing on the GPU. sass_env: the toolchain the interpreter finds there; sass_validate: the four FA
# kernels on the GPU (running the interpreter's own cubins) against the interpreter and the twins;
# sass_probes: per-opcode probes, GPU vs interpreter; mbarrier: the mbarrier / bulk-copy / elect / setmaxnreg
# probes and the warp-specialised pipeline (sm_90a), recorded for traces/sass; sass_attn: the extra attention kernels; sass_pytest:
# pytest --gpu on the interpreter's test files; ncu_source: the interpreter's per-instruction bank counters
# against Nsight Compute's source counters; diagnostics: planted races, faults and uninitialised reads
# against compute-sanitizer; golden_user: pytest --gpu --update-golden of flashsim.testing's own test
# (the stored GPU results under traces/golden). tma: cuTensorMapEncodeTiled and TMA copies recorded for
# traces/tma; sass_wgmma: wgmma (HGMMA/QGMMA) on the GPU against the interpreter on the same cubins; hopper:
# the TMA pipeline and wgmma GEMM kernels and their planted bugs (GPU, racecheck, synccheck), for traces/hopper. With the cubin cache carried in .fscache, the GPU machine
# runs the very cubins built elsewhere by NVRTC 13.0.88 (FLASHSIM_CACHE_DIR).
set -u
OUT=${OUT:-out}; R=$OUT/r; mkdir -p "$R"
export PYTHONUNBUFFERED=1
python -m pip install -e . --no-deps --no-build-isolation -q 2>&1 | grep -v "Running pip as"
for stage in ${STAGES:-validate sfu banks races fa fa_validate ncu_fa bench_fa traces bench_trace pytest}; do
  case $stage in
    validate) timeout 300 python -m flashsim.gpu.validate --out "$R/validate" --install > "$R/validate.log" 2>&1 ;;
    fa)     timeout 60 python -m flashsim.gpu.record_fa_golden --out "$R/fa" > "$R/fa.log" 2>&1 ;;
    fa_validate) timeout 400 python -m flashsim.gpu.validate_fa --out "$R/fa_validate" --examples ${FA_EXAMPLES:-200} > "$R/fa_validate.log" 2>&1 ;;
    ncu_fa) timeout 200 python -m flashsim.gpu.ncu_fa --out "$R/ncu_fa" --timeout 190 > "$R/ncu_fa.log" 2>&1 ;;
    bench_fa) timeout 200 python benchmarks/bench_fa_gpu.py --json "$R/bench_fa.json" > "$R/bench_fa.log" 2>&1 ;;
    traces) (timeout 200 python -m flashsim.gpu.record_traces --out "$R/warp" && timeout 200 python -m pytest --gpu -q \
              -p no:cacheprovider tests/test_trace.py --deselect tests/test_trace.py::test_golden_traces_cover_every_kernel) \
              > "$R/traces.log" 2>&1 ;;
    bench_trace) timeout 200 python benchmarks/bench_trace_gpu.py --json "$R/bench_trace.json" > "$R/bench_trace.log" 2>&1 ;;
    sfu)    timeout 150 python -m flashsim.gpu.validate_sfu --out "$R/sfu" "$@" > "$R/sfu.log" 2>&1 ;;
    wgmma)  timeout 300 python -m flashsim.gpu.validate_wgmma --out "$R/wgmma" > "$R/wgmma.log" 2>&1 ;;
    locate) timeout 300 python -m flashsim.gpu.locate_check --out "$R/locate" > "$R/locate.log" 2>&1 ;;
    banks)  timeout 200 python -m flashsim.gpu.check_banks --out "$R/banks" --timeout 190 > "$R/banks.log" 2>&1 ;;
    races)  timeout 120 python -m flashsim.gpu.check_races --out "$R/races" --timeout 30 > "$R/races.log" 2>&1 ;;
    sass_env) python - > "$R/sass_env.log" 2>&1 <<'PY'
from flashsim.sass import toolchain
print("nvdisasm", toolchain.nvdisasm_path(), "cache", toolchain.cache_dir())
try:
    print("nvrtc", toolchain.nvrtc_version(), toolchain.versions())
except Exception as exc:
    print("no usable NVRTC here:", exc)
PY
    ;;
    sass_validate) timeout 420 python -m flashsim.gpu.validate_sass --out "$R/sass_validate" --examples ${SASS_EXAMPLES:-200} \
                     --workers ${SASS_WORKERS:-14} > "$R/sass_validate.log" 2>&1 ;;
    sass_probes) timeout 300 python -m flashsim.gpu.sass_probes --out "$R/sass_probes" > "$R/sass_probes.log" 2>&1 ;;
    mbarrier) timeout 400 python -m flashsim.gpu.validate_mbarrier --out "$R/mbarrier" --record > "$R/mbarrier.log" 2>&1 ;;
    sass_attn) timeout 300 python -m flashsim.gpu.attn_extra --out "$R/sass_attn" > "$R/sass_attn.log" 2>&1 ;;
    sass_pytest) timeout 400 python -m pytest --gpu -q -p no:cacheprovider -rs -n ${SASS_PYTEST_WORKERS:-8} \
                   ${SASS_PYTEST_FILES:-tests/test_cuda_interp.py tests/test_sass_*.py} > "$R/sass_pytest.log" 2>&1 ;;
    ncu_source) timeout 500 python -m flashsim.gpu.ncu_source --out "$R/ncu_source" --timeout 480 > "$R/ncu_source.log" 2>&1 ;;
    diagnostics) timeout 400 python -m flashsim.gpu.check_diagnostics --out "$R/diagnostics" --timeout 60 > "$R/diagnostics.log" 2>&1 ;;
    golden_user) timeout 200 python -m pytest --gpu --update-golden -q -p no:cacheprovider -m "not gpu" tests/test_testing_helper.py tests/test_checking_planted.py docs/examples/test_row_sums.py \
                   > "$R/golden_user.log" 2>&1; mkdir -p "$R/golden" && cp -r traces/golden/. "$R/golden/" ;;
    pytest) timeout 240 python -m pytest --gpu -q -p no:cacheprovider -rs ${PYTEST_ARGS:-} tests > "$R/pytest.log" 2>&1 ;;
    tma) timeout 200 python -m flashsim.gpu.validate_tma --out "$R/tma" --record > "$R/tma.log" 2>&1 ;;
    sass_wgmma) timeout 300 python -m flashsim.gpu.validate_sass_wgmma --out "$R/sass_wgmma" > "$R/sass_wgmma.log" 2>&1 ;;
    hopper) timeout 420 python -m flashsim.gpu.validate_hopper_kernels --out "$R/hopper" --record > "$R/hopper.log" 2>&1 ;;
  esac
  echo "stage $stage exit $?"; tail -4 "$R/$stage.log"
done
rm -f "$R"/sfu/*.cubin
tar czf "$OUT/results.tgz" -C "$OUT" r && rm -rf "$R"
