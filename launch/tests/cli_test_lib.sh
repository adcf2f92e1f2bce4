# Shared by the end-to-end tests of the meshtrain executable (sourced, after `set -u`): a scratch
# directory removed on exit, and checks that print "ok"/"FAIL" lines and count the failures.
# Optional before sourcing: run_timeout (seconds per command, default 120), mpiexec (for "np") and
# program (whose "PROGRAM: error:" lines expect_error looks for; default meshtrain).
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
