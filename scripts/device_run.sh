#!/usr/bin/env bash
# On a lent GPU machine, from the repository root: unpacks .device/bundle.tar.xz (made by
# scripts/device_bundle.sh) as build/cuda unless build/cuda holds that very bundle already
# (scripts/device_unpack.sh compares checksums), points /work/main at this checkout (the CTest
# files name absolute paths of the machine that built them), and runs what is asked:
#   scripts/device_run.sh ctest [CTEST ARGS...]    the test suite (minus the tests needing namespaces,
#                                                  SLURM or gnuplot)
#   scripts/device_run.sh exec COMMAND...          any command with the bundle's libraries found
set -euo pipefail
root=$(pwd)
"$root/scripts/device_unpack.sh" .device/bundle.tar.xz build/cuda >&2
export LD_LIBRARY_PATH=$root/build/cuda/device-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ "$root" != /work/main ]; then mkdir -p /work && ln -sfn "$root" /work/main; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
what=${1:-ctest}
shift || true
case "$what" in
  ctest) cd /work/main/build/cuda && exec ctest --output-on-failure -LE 'slurm|hosts' -E 'meshtrain_plot|meshbench_scaling' "$@" ;;
  exec) exec "$@" ;;
  *) sed -n 2,8p "$0" >&2; exit 2 ;;
esac
