# Sourced by tests/run.sh, tests/sanitize.sh and tests/fuzz/run.sh: the one place where
# each build variant is configured and each sanitizer or fuzz step written, and the
# stage timer whose lines CI prints.
#   STOKER_JOBS   parallel jobs (default: nproc)

jobs=${STOKER_JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# A fresh clone in another folder still hits the cache: paths under the checkout are
# hashed relative to it.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}

# Sanitizer builds: the library at -O1 (ASan's recommended level), the tests' and the
# tool's own code at -O0 (instrumented all the same; their optimisation is most of their
# compile time), line tables for the reports; CUDA, Python and benchmarks off.
sanitizer_common=(-DSTOKER_TOOL_OPT=-O0 -DSTOKER_TEST_OPT=-O0
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG"
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG" -DSTOKER_ENABLE_CUDA=OFF -DSTOKER_BUILD_PYTHON=OFF
  -DSTOKER_BUILD_BENCH=OFF)

configure_release() {  # $1 build dir
  cmake -S . -B "$1" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
}

# ASan+UBSan with clang and libFuzzer's coverage instrumentation: one instrumented
# library serves both the test suites and every fuzz target.
configure_asan() {  # $1 build dir
  CC=clang CXX=clang++ cmake -S . -B "$1" "${generator[@]}" "${sanitizer_common[@]}" \
    -DSTOKER_SANITIZE=address,undefined -DSTOKER_BUILD_FUZZ=ON >/dev/null
}

configure_tsan() {  # $1 build dir
  CC=clang CXX=clang++ cmake -S . -B "$1" "${generator[@]}" "${sanitizer_common[@]}" \
    -DSTOKER_SANITIZE=thread >/dev/null
}

# stage NAME: starts a timed stage; the previous one (if any) is closed and its time
# printed. stage_summary prints every stage's time.
stage_names=(); stage_secs=(); stage_open=""; stage_t0=0
stage() {
  stage_close
  stage_open=$1; stage_t0=$(date +%s)
  echo "== $1"
}
stage_close() {
  [ -n "$stage_open" ] || return 0
  local dt=$(( $(date +%s) - stage_t0 ))
  echo "-- $stage_open: ${dt}s"
  stage_names+=("$stage_open"); stage_secs+=("$dt"); stage_open=""
}
stage_summary() {
  stage_close
  local i total=0
  echo "== stage times"
  for i in "${!stage_names[@]}"; do
    printf '  %-34s %5ss\n' "${stage_names[$i]}" "${stage_secs[$i]}"
    total=$(( total + stage_secs[i] ))
  done
  printf '  %-34s %5ss\n' total "$total"
}

# --- the steps ------------------------------------------------------------------------
# quiet CMD...: runs a build quietly; on failure prints the end of what it said.
quiet() {
  local log rc=0; log=$(mktemp)
  "$@" >"$log" 2>&1 || rc=$?
  [ $rc -eq 0 ] || { tail -80 "$log"; echo "failed ($rc): $*"; }
  rm -f "$log"
  return $rc
}

asan_dir=build-asan
tsan_dir=build-tsan
# The concurrent suites: the loader's image path, token workers and kept windows, the
# skip policy, stats() read from another thread while epochs run, the IO engines, a
# remote dataset's shards held and released across threads and records fetched by the
# ranged-GET engine's workers, staging, decode threads the auto-tuner parks and wakes, and
# text loaders opening at once that count their documents' tokens once between them, and
# packed samples' rows filled by decoders that take several records from the queue at once.
tsan_tests=(loader_test loader_tokens_test loader_skip_test loader_report_test io_test
  remote_loader_test stage_test autotune_test token_counts_test mapped_shards_test loader_lm_test)

fuzz_targets() { ls tests/fuzz/*_fuzz.cc | xargs -n1 basename | sed 's/\.cc$//'; }

step_asan_build() {
  if ! command -v clang++ >/dev/null; then echo "asan: SKIPPED (clang++ not installed)"; return 0; fi
  configure_asan "$asan_dir"
  # shellcheck disable=SC2046
  quiet cmake --build "$asan_dir" -j"$jobs" --target all $(fuzz_targets)
}

step_asan_tests() {
  [ -d "$asan_dir" ] || return 0
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir "$asan_dir" --output-on-failure -j"$jobs" --timeout 900 -L cpu
}

step_tsan_build() {
  if ! command -v clang++ >/dev/null; then echo "tsan: SKIPPED (clang++ not installed)"; return 0; fi
  configure_tsan "$tsan_dir"
  quiet cmake --build "$tsan_dir" -j"$jobs" --target "${tsan_tests[@]}"
}

# Two suites at a time: each is mostly waiting on its own few threads.
step_tsan_tests() {
  [ -d "$tsan_dir" ] || return 0
  local logs rc=0; logs=$(mktemp -d)
  printf '%s\n' "${tsan_tests[@]}" | xargs -P "$jobs" -I{} bash -c '
    if TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 STOKER_TEST_TMP="$PWD/'"$tsan_dir"'/test-tmp" \
         "./'"$tsan_dir"'/{}" --gtest_brief=1 >"'"$logs"'/{}.log" 2>&1; then
      echo "tsan {}: $(grep -Eo "[0-9]+ tests? from [0-9]+ test suites? ran" "'"$logs"'/{}.log" | tail -1), no report"
    else
      echo "tsan {}: FAILED"; tail -60 "'"$logs"'/{}.log"; exit 255
    fi' || rc=$?
  rm -rf "$logs"
  return $rc
}

# Each target runs STOKER_FUZZ_SECONDS (default 20) on a copy of its checked-in seed
# corpus, two at a time. A crash fails the step; the crashing input is left in
# $STOKER_FUZZ_OUT for turning into a regression test.
step_fuzz() {
  [ -d "$asan_dir" ] || return 0
  local secs=${STOKER_FUZZ_SECONDS:-20} out=${STOKER_FUZZ_OUT:-$asan_dir/findings}
  mkdir -p "$out"
  fuzz_targets | SECS=$secs OUT=$out DIR=$asan_dir xargs -P "$jobs" -I{} bash -c '
    t={}; name=${t%_fuzz}; work=$(mktemp -d); log="$OUT/$t.log"
    [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/"
    if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1 \
       "./$DIR/$t" -max_total_time="$SECS" -rss_limit_mb=2048 -timeout=20 -max_len=262144 \
       -artifact_prefix="$OUT/$t-" "$work" >"$log" 2>&1; then
      echo "fuzz $t: $(grep -Eo "Done [0-9]+ runs" "$log" | tail -1) in ${SECS}s, no crash"; rm -rf "$work"
    else
      echo "fuzz $t: FAILED — see $log"; tail -30 "$log"; rm -rf "$work"; exit 255
    fi'
}
