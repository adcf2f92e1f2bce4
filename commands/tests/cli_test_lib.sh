# Shared by the end-to-end tests of the meshtrain executable (sourced, after `set -u`): a scratch
# directory removed on exit, and checks that print "ok"/"FAIL" lines and count the failures.
# Optional before sourcing: run_timeout (seconds per command, default 120), mpiexec (for "np"),
# program (whose "PROGRAM: error:" lines expect_error looks for; default meshtrain), meshtrain (for
# prepare_corpus) and compare (compare_losses, for same_losses).
# A script may define extra_error_checks NAME to look further at an expected error's stderr.
failures=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$dir/stdout
err=$dir/stderr

fail() { echo "FAIL $1"; failures=$((failures + 1)); }
show() { echo "--- stdout:"; tail -40 "$out"; echo "--- stderr:"; tail -40 "$err"; }

# run COMMAND...: stdout and stderr to $out and $err, at most run_timeout seconds; sets rc.
# "run np N ARGS..." runs ARGS under mpirun with N ranks.
run() {
  [ "$1" = np ] && set -- "$mpiexec" -np "$2" --oversubscribe "${@:3}"
  timeout "${run_timeout:-120}" "$@" >"$out" 2>"$err"
  rc=$?
}

expect_ok() {  # expect_ok NAME COMMAND...
  local name=$1
  shift
  run "$@"
  if [ "$rc" -ne 0 ]; then fail "$name: exit code $rc, expected 0"; show; return 1; fi
  echo "ok   $name"
}

# expect_error NAME PATTERN COMMAND...: exits non-zero (not by the timeout), and stderr holds exactly
# one "meshtrain: error:" line over all ranks, which matches PATTERN (an extended regex).
expect_error() {
  local name=$1 pattern=$2
  shift 2
  run "$@"
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    fail "$name: exit code $rc, expected an error exit (124/137: hung and killed)"; show; return 1
  fi
  local lines
  local prefix="^${program:-meshtrain}: error: "
  lines=$(grep -c "$prefix" "$err")
  if [ "$lines" -ne 1 ]; then fail "$name: $lines '${program:-meshtrain}: error:' lines on stderr, expected 1"; show; return 1; fi
  if ! grep "$prefix" "$err" | grep -q -E -- "$pattern"; then
    fail "$name: the error lacks /$pattern/"; show; return 1
  fi
  echo "ok   $name (exit $rc): $(grep "$prefix" "$err")"
  if declare -F extra_error_checks >/dev/null; then extra_error_checks "$name"; fi
  return 0
}

# prepare_corpus SEED: token shards (bytes tokenizer, a tenth for validation) in $dir/data of a
# generated corpus, 60 fortune-format entries of 12 words, the same for the same seed. Needs
# $meshtrain.
prepare_corpus() {
  RANDOM=$1
  local words=(the a cat dog ran sat on under big small red house tree river quickly slowly) entry k
  for entry in $(seq 60); do
    for k in $(seq 12); do printf '%s ' "${words[RANDOM % 16]}"; done
    printf '.\n%%\n'
  done >"$dir/corpus"
  expect_ok "prepare" "$meshtrain" prepare --tokenizer bytes --input "$dir/corpus" --output "$dir/data" --val-fraction 0.1
}

# same_losses NAME A B FIRST LAST TOLERANCE: the losses of steps FIRST..LAST in metrics files A and B
# agree within TOLERANCE (relative; 0: bit for bit), by compare_losses; prints its report when not.
# Needs $compare.
same_losses() {
  local name=$1
  shift
  if "$compare" "$@" >"$dir/compare" 2>&1; then
    echo "ok   $name"
  else
    fail "$name"; cat "$dir/compare"
  fi
}

# expect_rank0_error NAME PATTERN NP COMMAND...: runs COMMAND under mpirun with NP ranks and output
# tagged by rank; passes when the job ends within run_timeout with a non-zero exit that is neither
# the timeout's (124/137: it hung) nor a crash's (134/139), and exactly one "PROGRAM: error:" line
# came over all ranks, from rank 0, matching PATTERN (an extended regex). Neither Open MPI's
# MPI_ABORT banner nor its notes of a core dump, a segfault or a signal may appear: every rank
# ends on its own. Prints "ok   NAME (exit N, S.S s): THE ERROR LINE".
expect_rank0_error() {
  local name=$1 pattern=$2 np=$3
  shift 3
  local start=$EPOCHREALTIME
  run "$mpiexec" -np "$np" --oversubscribe --tag-output "$@"
  local seconds
  seconds=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    fail "$name: exit code $rc after $seconds s, expected an error exit (124/137: hung and killed)"; show; return 1
  fi
  if [ "$rc" -eq 134 ] || [ "$rc" -eq 139 ]; then fail "$name: exit code $rc: a crash"; show; return 1; fi
  local prefix="${program:-meshtrain}: error: " lines line
  lines=$(cat "$out" "$err" | grep -c -F -- "$prefix")
  if [ "$lines" -ne 1 ]; then fail "$name: $lines '$prefix' lines over all ranks, expected 1"; show; return 1; fi
  line=$(cat "$out" "$err" | grep -F -- "$prefix")
  case "$line" in
    "[1,0]<stderr>:$prefix"*) ;;
    *) fail "$name: the error line does not come from rank 0's stderr: $line"; show; return 1 ;;
  esac
  line=${line#"[1,0]<stderr>:"}
  if ! printf '%s\n' "$line" | grep -q -E -- "$pattern"; then fail "$name: the error lacks /$pattern/: $line"; show; return 1; fi
  if cat "$out" "$err" | grep -q -E "MPI_ABORT was invoked|core dumped|Segmentation|[Ss]ignal "; then
    fail "$name: the job was aborted or crashed instead of every rank exiting"; show; return 1
  fi
  echo "ok   $name (exit $rc, $seconds s): $line"
  return 0
}
