#!/usr/bin/env bash
# End-to-end checks of `meshtrain plot` on generated metrics files: a PNG comes out, a resumed run's
# repeated steps resolve to their last record, and each kind of bad input gets one clear error
# (no hang). Usage: plot_test.sh MESHTRAIN
set -u
meshtrain=$1
run_timeout=60
. "$(dirname "$0")/cli_test_lib.sh"

# --- metrics files as `meshtrain train --metrics` writes them.
header() {  # header DP TP PP
  printf '{"run":{"model":"layers=4 heads=4 channels=64","parameters":220544,"global_batch":8,'
  printf '"layout":{"dp":%d,"tp":%d,"pp":%d,"zero":0}}}\n' "$1" "$2" "$3"
}
step() {  # step S LOSS_SCALE: one step record, val_loss every 10 steps
  awk -v s="$1" -v k="$2" 'BEGIN {
    loss = 2 + k * exp(-s / 8) + 0.05 * sin(s * 1.7)
    printf "{\"step\":%d,\"loss\":%.4f,", s, loss
    if (s % 10 == 0) printf "\"val_loss\":%.4f,", loss + 0.1
    printf "\"lr\":0.0006,\"grad_norm\":%.4f,\"tokens_per_s\":%d,\"step_ms\":80.5,\"mfu\":0.12}\n",
           1.5 / sqrt(s), s == 1 ? 900 : 12000 + (s * 37) % 500 }'
}
{
  header 2 2 2
  for s in $(seq 30); do step "$s" 3.5; done
  echo '{"timing":{"forward_ms":10.5}}'
} >"$dir/a.jsonl"
# b: crashed after step 7, resumed from the checkpoint of step 4 (steps 5-7 again, loss 9 marks the
# first attempt's records, which must lose), with a new header.
{
  header 4 1 2
  for s in $(seq 4); do step "$s" 4; done
  for s in 5 6 7; do
    printf '{"step":%d,"loss":9,"lr":0.0006,"grad_norm":1,"tokens_per_s":12000,"step_ms":80,"mfu":0.1}\n' "$s"
  done
  header 4 1 2
  for s in $(seq 5 30); do step "$s" 4; done
} >"$dir/b.jsonl"

png=$dir/x.png
if expect_ok "plot two runs" "$meshtrain" plot "$dir/a.jsonl" "$dir/b.jsonl" --out "$png" --label A --label B \
     --title "plot test" --keep-files "$dir/kept"; then
  grep -q -x "wrote $png (2 runs, 60 steps)" "$out" || { fail "plot: summary line (steps 5-7 of b once)"; show; }
fi
if [ -f "$png" ]; then
  signature=$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')
  [ "$signature" = "89504e470d0a1a0a" ] || fail "plot: $png does not start with the PNG signature ($signature)"
  size=$(stat -c %s "$png")
  if [ "$size" -gt 5120 ]; then echo "ok   PNG file ($size bytes)"; else fail "plot: $png has only $size bytes"; fi
else
  fail "plot: $png not written"
fi
kept=$dir/kept
if [ -f "$kept/plot.gp" ]; then
  grep -q "title 'A (dp2 tp2 pp2) train'" "$kept/plot.gp" || fail "plot: label 'A (dp2 tp2 pp2)' not in the key"
  grep -q "title 'B (dp4 tp1 pp2) val'" "$kept/plot.gp" || fail "plot: label 'B (dp4 tp1 pp2)' not in the key"
  points() { wc -l <"$kept/run1_$1.dat"; }
  [ "$(points loss)" -eq 30 ] || fail "plot: run B's loss has $(points loss) points, expected 30"
  grep -q -E '^(5|6|7) 9$' "$kept/run1_loss.dat" && fail "plot: a repeated step kept its first record, not its last"
  [ "$(points val_loss)" -eq 3 ] || fail "plot: run B's val_loss has $(points val_loss) points, expected 3"
  # Throughput leaves out the first step after each start: step 1, and step 5 after the resume.
  grep -q -E '^(1|5) ' "$kept/run1_tokens_per_s.dat" && fail "plot: warm-up steps 1 and 5 in B's throughput"
  [ "$(points tokens_per_s)" -eq 28 ] || fail "plot: run B's throughput has $(points tokens_per_s) points, expected 28"
  echo "ok   data files checked"
else
  fail "plot: --keep-files left no script"
fi
# The temporary directory goes when --keep-files is not given.
export TMPDIR=$dir/tmp
mkdir -p "$TMPDIR"
if expect_ok "plot one run, default labels" "$meshtrain" plot "$dir/a.jsonl" --out "$dir/one.png" --size 640x480; then
  grep -q -x "wrote $dir/one.png (1 run, 30 steps)" "$out" || { fail "plot one run: summary line"; show; }
fi
left=$(find "$TMPDIR" -maxdepth 1 -name 'meshtrain-plot-*')
[ -z "$left" ] || fail "plot: left its temporary directory: $left"
unset TMPDIR

# --- errors: non-zero exit, one clear message, no hang.
expect_error "missing metrics file" "--metrics '$dir/none.jsonl' does not exist" \
  "$meshtrain" plot "$dir/a.jsonl" "$dir/none.jsonl" --out "$dir/e.png"
{ head -3 "$dir/a.jsonl"; echo '{"step":3,"loss":4.1'; } >"$dir/bad.jsonl"
expect_error "a line that is not JSON" "$dir/bad.jsonl:4: not a JSON line" \
  "$meshtrain" plot "$dir/bad.jsonl" --out "$dir/e.png"
{ header 1 1 1; echo '{"timing":{}}'; } >"$dir/nosteps.jsonl"
expect_error "no step records" "metrics file $dir/nosteps.jsonl has no step records" \
  "$meshtrain" plot "$dir/nosteps.jsonl" --out "$dir/e.png"
expect_error "missing --out" "the option '--out' is required" "$meshtrain" plot "$dir/a.jsonl"
expect_error "no metrics files" "no metrics files given" "$meshtrain" plot --out "$dir/e.png"
expect_error "bad --size" "--size must be WIDTHxHEIGHT" "$meshtrain" plot "$dir/a.jsonl" --out "$dir/e.png" --size 800
# gnuplot not on PATH: a PATH of links to everything in /usr/bin but gnuplot (Open MPI's singleton
# start needs its orted there).
if command -v gnuplot >/dev/null && [ "$(dirname "$(command -v gnuplot)")" = /usr/bin ]; then
  mkdir "$dir/bin"
  for f in /usr/bin/*; do case ${f##*/} in gnuplot*) ;; *) ln -s "$f" "$dir/bin/" ;; esac; done
  expect_error "gnuplot not on PATH" "meshtrain plot needs gnuplot \(Debian: apt-get install gnuplot-nox\)" \
    env PATH="$dir/bin" "$meshtrain" plot "$dir/a.jsonl" --out "$dir/e.png"
fi
[ -e "$dir/e.png" ] && fail "errors: a PNG was written anyway"

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
