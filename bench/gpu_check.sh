#!/usr/bin/env bash
# The checks that need a GPU, prepared as one run: a lent device machine has minutes, not
# hours. Builds with CUDA, runs the GPU tests (then again under compute-sanitizer's memcheck
# where it is installed), the staging benchmark on synthetic batches (H2D through the ring
# vs a plain pinned copy, pageable copy, consumer stream wait) and through the loader, the
# CUDA example trainer, and the Python staged-path tests (device="cuda") when that
# interpreter's torch sees the GPU. Figures land in $STOKER_OUT/gpu (default out/gpu); the
# summary goes to stdout. Each step's failure is reported and the next step still runs;
# the exit code is the number of failed steps.
#   STOKER_GPU_IMAGES    sample images for the loader-fed runs (default 1024)
#   STOKER_BUILD         the build folder (default build)
#   STOKER_GPU_PREBUILT  1: use STOKER_BUILD as it is (a bench/gpu_bundle.sh tarball
#                        unpacked there, on a machine without the build dependencies)
#   STOKER_PYTHON        the interpreter with torch (default /usr/bin/python3)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${STOKER_OUT:-out}/gpu
images=${STOKER_GPU_IMAGES:-1024}
build=${STOKER_BUILD:-build}
python=${STOKER_PYTHON:-/usr/bin/python3}
mkdir -p "$out"
if [[ -d $build/bundled-libs ]]; then
  export LD_LIBRARY_PATH=$PWD/$build/bundled-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
failed=0
step() {  # step NAME COMMAND...: runs it, output to $out/NAME.txt, tail on failure
  local name=$1
  shift
  local t0=$SECONDS
  if "$@" >"$out/$name.txt" 2>&1; then
    echo "ok    $name ($((SECONDS - t0)) s)"
  else
    echo "FAIL  $name ($((SECONDS - t0)) s): tail of $out/$name.txt"
    tail -20 "$out/$name.txt" | sed 's/^/      /'
    failed=$((failed + 1))
  fi
}

gpu_tests() {  # every GPU test binary of the build, each run whole; $1: a wrapper or ""
  local t rc=0
  for t in "$build"/*gpu_test; do
    echo "== $t"
    $1 "$t" || rc=1
  done
  return $rc
}

step nvidia-smi nvidia-smi
if [[ ${STOKER_GPU_PREBUILT:-0} != 1 ]]; then
  step build bash -c "cmake -S . -B '$build' -DCMAKE_BUILD_TYPE=Release && cmake --build '$build' -j$(nproc)"
fi
step gpu-tests gpu_tests ""
step stage-synthetic "$build/stoker" bench stage --json
step sample bash -c "'$build/stoker' sample imagefolder '$out/imgs' --images $images --classes 10 --seed 1 &&
  '$build/stoker' pack imagefolder '$out/imgs' '$out/ds' --overwrite &&
  '$build/stoker' sample tokens '$out/tokens.bin' --tokens 20000000 --seed 1 &&
  '$build/stoker' pack tokens '$out/tokens.bin' '$out/tokens' --dtype uint16 --seq-len 1024 --zstd 3 --overwrite"
# A consumer slower than the loader: the stream should wait on input < 1 % of its time.
step stage-loader-consumer "$build/stoker" bench stage --dataset "$out/ds" --batch 32 --iters 100 --consumer-us 20000 --json
step stage-loader-tokens "$build/stoker" bench stage --dataset "$out/tokens" --batch 64 --iters 200 --consumer-us 2000 --json
step cuda-trainer "$build/examples/cuda_trainer" "$out/ds" --batch 64 --epochs 1
if "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  # The staged path with device="cuda" (the `staged` fixture's CUDA half), pinned slots,
  # and the refusals that change once a GPU is there.
  step python-cuda env PYTHONPATH="$build/python" "$python" -m pytest -q -p no:cacheprovider \
    python/tests/test_staged.py python/tests/test_buckets.py python/tests/test_traps.py python/tests/test_loader.py
else
  echo "skip  python-cuda: $python's torch sees no CUDA device"
fi
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [[ -x $sanitizer ]]; then
  step gpu-tests-memcheck gpu_tests "$sanitizer --tool memcheck --error-exitcode 1"
else
  echo "skip  gpu-tests-memcheck: compute-sanitizer is not installed"
fi

echo "== figures"
grep -h -E "^h2d through|^consumer|^copy stream|^verdict" "$out"/stage-*.txt 2>/dev/null
echo "$failed step(s) failed"
exit "$failed"
