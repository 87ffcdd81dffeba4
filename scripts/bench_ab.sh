#!/usr/bin/env bash
# bench_ab.sh OLD_BENCH_DIR NEW_BENCH_DIR OUT_DIR [ROUNDS] — A/B of two builds' benchmarks, run alternately
# (old, new, old, new, ...), medians of repetitions, JSON into OUT_DIR; summarise with
#   python3 scripts/bench_ab_table.py OUT_DIR
# Run it on an otherwise idle machine: the two builds share it.
set -u
A=$1; B=$2; OUT=$3; ROUNDS=${4:-2}
mkdir -p $OUT
for r in $(seq 1 $ROUNDS); do
  for side in A B; do
    dir=$A; [[ $side == B ]] && dir=$B
    $dir/bench_scan_host --benchmark_filter='/ascan/|/copy/' --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_format=json --benchmark_out=$OUT/host_${side}_$r.json --benchmark_out_format=json > /dev/null 2>&1
    $dir/bench_autodiff --benchmark_filter='forward|scan_grad' --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_out=$OUT/ad_${side}_$r.json --benchmark_out_format=json > /dev/null 2>&1
    $dir/bench_generic --benchmark_filter='tree_all|batched_all|batched_1t' --benchmark_out=$OUT/gen_${side}_$r.json --benchmark_out_format=json > /dev/null 2>&1
  done
done
