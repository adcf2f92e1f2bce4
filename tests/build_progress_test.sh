#!/usr/bin/env bash
# scripts/setup.sh's meshtrain_build, as ./run and ./test run it, on a stand-in for cmake that
# prints what make prints: the build gets the machine's job count (CMAKE_BUILD_PARALLEL_LEVEL when
# set), shows plain progress lines (at each tenth, and while a step is slow), keeps the whole output
# in build/PRESET/build.log, says nothing for a build with nothing to do, and still fails when the
# build fails. And the presets pin no job count. About 5 s.
#   tests/build_progress_test.sh REPOSITORY_ROOT
set -uo pipefail
root=${1:?usage: build_progress_test.sh REPOSITORY_ROOT}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }

# The lines a make build of a few targets prints, a slow compile among them, then its exit status.
make_output() {
  echo "[  2%] Building CXX object runtime/CMakeFiles/meshtrain_runtime.dir/error.cpp.o"
  echo "[  5%] Building CXX object runtime/CMakeFiles/meshtrain_runtime.dir/dtype.cpp.o"
  echo "[ 12%] Building CXX object models/CMakeFiles/meshtrain_models.dir/gpt.cpp.o"
  sleep 3
  echo "/src/models/gpt.cpp:10:7: warning: unused variable 'x' [-Wunused-variable]"
  echo "[ 13%] Built target meshtrain_models"
  echo "[100%] Linking CXX executable ../bin/meshtrain"
  echo "[100%] Built target meshtrain"
}
# The stand-in: configuring makes the cache; building prints $fake_build's lines, exits $fake_status.
cmake() {
  echo "cmake $*" >>"$scratch/calls"
  case $1 in
    --preset) mkdir -p "build/$2" && touch "build/$2/CMakeCache.txt" ;;
    --build) "$fake_build"; return "$fake_status" ;;
  esac
}

# shellcheck source=../scripts/setup.sh
. "$root/scripts/setup.sh"
set +e  # setup.sh's errexit would end this script at the first failing check
cd "$scratch" || exit 1
export MESHTRAIN_PROGRESS_EVERY=1

# --- a build that works, with a job count from the environment.
fake_build=make_output fake_status=0
CMAKE_BUILD_PARALLEL_LEVEL=3 meshtrain_build default >out 2>err
status=$?
[ "$status" -eq 0 ] && ok "a build that works: exit 0" || fail "a build that works: exit $status"
grep -q -- "--build --preset default --parallel 3" calls && ok "CMAKE_BUILD_PARALLEL_LEVEL=3 builds with 3 jobs" ||
  fail "the build was not given CMAKE_BUILD_PARALLEL_LEVEL's 3 jobs: $(cat calls)"
grep -q "^==> building (preset default, 3 jobs; log build/default/build.log)$" out && ok "the start line" ||
  fail "the start line: $(head -3 out)"
progress() { grep -c -E "^==> build +$1% \(0m[0-9]{2}s\): $2$" out; }
[ "$(progress 2 "compiling runtime/error.cpp")" -eq 1 ] && ok "a line at the first step" || fail "no line at the first step"
[ "$(progress 5 "compiling runtime/dtype.cpp")" -eq 0 ] && ok "no line within the same tenth" ||
  fail "a line for 5%, in the tenth already shown"
[ "$(progress 12 "compiling models/gpt.cpp")" -ge 3 ] && ok "the slow compile: a line at 12% and more while it runs" ||
  fail "the slow compile (3 s at 1 s intervals): $(progress 12 "compiling models/gpt.cpp") lines"
[ "$(progress 100 "linking meshtrain")" -eq 1 ] && ok "a line at 100%" || fail "no line at 100%"
grep -q -E "^==> build ended after 0m0[3-9]s$" out && ok "the last line" || fail "no last line"
if grep -q $'\r' out; then fail "carriage returns in the progress"; else ok "plain lines (no carriage returns)"; fi
if grep -v "^==> " out | grep -q .; then fail "other lines than progress on stdout: $(grep -v '^==> ' out)"; fi
make_output >expected_log
cmp -s build/default/build.log expected_log && ok "build.log holds the build's whole output" ||
  { fail "build.log differs from the build's output"; diff build/default/build.log expected_log; }
grep -q "warning: unused variable" err && ok "warnings go to stderr" || fail "the warning is not on stderr"

# --- nothing to do: no progress lines.
nothing() { echo "[ 50%] Built target meshtrain_runtime"; echo "[100%] Built target meshtrain"; }
fake_build=nothing
meshtrain_build default >out 2>err
[ "$(grep -c '^==> build ' out)" -eq 0 ] && ok "nothing to build: no progress lines" || fail "nothing to build: $(cat out)"

# --- a build that fails: its status, not the progress filter's, decides.
broken() { echo "[ 10%] Building CXX object io/CMakeFiles/meshtrain_io.dir/atomic_file.cpp.o"; echo "x.cpp:1:1: error: bad"; }
fake_build=broken fake_status=2
(meshtrain_build default) >out 2>err
status=$?
[ "$status" -eq 1 ] && ok "a failed build: exit 1" || fail "a failed build: exit $status"
grep -q "^build failed; the whole log is build/default/build.log$" err && grep -q "error: bad" err &&
  ok "a failed build: its error and the log's place on stderr" || fail "a failed build's stderr: $(cat err)"

# --- the job counts without the environment: the machine's, at least 1.
unset CMAKE_BUILD_PARALLEL_LEVEL CTEST_PARALLEL_LEVEL
jobs=$(meshtrain_build_jobs)
[ "$jobs" -ge 1 ] && [ "$jobs" -le "$(nproc)" ] && ok "build jobs: $jobs of $(nproc) cores" ||
  fail "build jobs: $jobs, expected 1..$(nproc)"
[ "$(meshtrain_test_jobs)" -eq "$(nproc)" ] && ok "test jobs: one per core" || fail "test jobs: $(meshtrain_test_jobs)"
[ "$(CTEST_PARALLEL_LEVEL=7 meshtrain_test_jobs)" -eq 7 ] && ok "CTEST_PARALLEL_LEVEL wins" || fail "CTEST_PARALLEL_LEVEL ignored"

# --- the presets leave the job count to the caller: a number there fits one size of machine.
if grep -q '"jobs"' "$root/CMakePresets.json"; then fail "CMakePresets.json pins a job count"; else ok "the presets pin no job count"; fi

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
