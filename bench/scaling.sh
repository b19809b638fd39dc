#!/usr/bin/env bash
# What the second core buys (issue 26, item 3): gpt-M's training step (bench_gpt) and the
# copy-task step (suite's copy-step) at 1 and at 2 threads, under both OpenBLAS kernels. Runs
# take turns within each round (row, kernel, then 1 and 2 threads), so that a neighbour's
# burst of load falls on both thread counts alike; every run is a fresh process. Prints each
# run's line, then per row and kernel the median over the rounds at 1 and 2 threads and their
# ratio (2-thread speed over 1-thread speed), beside the load average before and after.
#
#   bash bench/scaling.sh BENCH_DIR [ROUNDS] [GPT_STEPS]     # scripts/bench --scaling runs it
#
# scripts/bench prints the date, commit, load and the CPU's flags first (its header()).
#
# The figure asked for is a quiet machine's: on a loaded one the load back-off runs the
# regions on one thread, and the ratio falls towards 1 by design.
set -euo pipefail
bench="${1:?usage: bench/scaling.sh BENCH_DIR [ROUNDS] [GPT_STEPS]}"
rounds="${2:-3}" gpt_steps="${3:-5}"
[[ "$rounds" =~ ^[1-9][0-9]*$ && "$gpt_steps" =~ ^[1-9][0-9]*$ ]] ||
  { echo "bench/scaling.sh: ROUNDS and GPT_STEPS must be positive counts" >&2; exit 2; }

echo "start: $(date -u '+%H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
results="$(mktemp)"
trap 'rm -f "$results"' EXIT
for round in $(seq "$rounds"); do
  for kernel in own Haswell; do
    kernel_env=(env -u OPENBLAS_CORETYPE)
    [ "$kernel" = Haswell ] && kernel_env=(env OPENBLAS_CORETYPE=Haswell)
    for threads in 1 2; do
      line="$("${kernel_env[@]}" "$bench/bench_gpt" --model gpt-M --threads "$threads" --steps "$gpt_steps" | tail -1)"
      echo "$line"
      # "gpt-M  cppgrad fp32  N threads  KERNEL  MS ms ...": the median step is the 5th field
      echo "gpt-M $kernel $threads $(echo "$line" | cut -f5 | cut -d' ' -f1)" >>"$results"
    done
    for threads in 1 2; do
      line="$("${kernel_env[@]}" "$bench/suite" --only copy-step --threads "$threads" --tsv | tail -1)"
      echo "$line"
      echo "copy-step $kernel $threads $(echo "$line" | cut -f3)" >>"$results"  # median_ms
    done
  done
done
echo "end: $(date -u '+%H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf '%-10s %-8s %14s %14s %16s  %s\n' row kernel "1 thread ms" "2 threads ms" "2 over 1 thread" "each round's ratio"
for row in gpt-M copy-step; do
  for kernel in own Haswell; do
    awk -v row="$row" -v kernel="$kernel" '
      function median(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      $1 == row && $2 == kernel && $3 == 1 { one[++n1] = $4; first[n1] = $4 }
      $1 == row && $2 == kernel && $3 == 2 { two[++n2] = $4; second[n2] = $4 }
      END {
        rounds = ""
        for (i = 1; i <= n1 && i <= n2; i++) rounds = rounds sprintf(" %.2f", first[i] / second[i])
        m1 = median(one, n1); m2 = median(two, n2)
        printf "%-10s %-8s %14.1f %14.1f %16.2f  %s\n", row, kernel, m1, m2, m1 / m2, rounds
      }' "$results"
  done
done
