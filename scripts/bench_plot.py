#!/usr/bin/env python3
"""bench_plot.py — plots scan throughput against size (bench_scan_sweep) with gnuplot.

Runs build/bench/bench_scan_sweep (or reads a JSON file it wrote), takes the MEDIAN of each
benchmark over the repetitions, writes one data file per layout (rows: log2 elements; columns:
GB/s of each implementation) and draws them, with the copy roof, into one PNG:

  python3 scripts/bench_plot.py                               # runs the sweep, writes docs/scan_throughput.png
  python3 scripts/bench_plot.py --json sweep.json --out x.png  # from a saved run

GB/s counts the bytes read + written by a call (2 x 4 bytes per element). Python 3 standard
library and gnuplot only.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

IMPLS = ("ascan", "ascan_t1", "copy", "copy_mt", "copy_stream", "seq", "std_par")
TITLES = {
    "ascan": "ascan (all threads)",
    "ascan_t1": "ascan (1 thread)",
    "copy": "copy, 1 thread (roof)",
    "copy_mt": "copy, all threads (roof)",
    "copy_stream": "copy with streaming stores, all threads",
    "seq": "sequential loop",
    "std_par": "std::inclusive\\_scan par",
}
LAYOUTS = (("1d", "1-D [n]"), ("T_inner256", "[n / 256, 256] along dim 0"))


def load(args):
    if args.json:
        with open(args.json) as f:
            return json.load(f)
    cmd = [args.binary, "--benchmark_format=json", "--benchmark_report_aggregates_only=true",
           "--benchmark_repetitions=%d" % args.repetitions, "--benchmark_min_time=%s" % args.min_time]
    print("running: " + " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    if args.save_json:
        with open(args.save_json, "w") as f:
            f.write(out)
    return json.loads(out)


def medians(report):
    """{(layout, impl, log2n): GB/s} from the median aggregates."""
    out = {}
    have_aggregates = any(b.get("run_type") == "aggregate" for b in report["benchmarks"])
    for b in report["benchmarks"]:
        if "error_occurred" in b:
            continue
        if have_aggregates and b.get("aggregate_name") != "median":
            continue  # (one repetition reports no aggregates: take the runs themselves)
        parts = b["run_name"].split("/")  # sweep/<layout>/<impl>/<lg>/real_time
        if len(parts) < 4 or parts[0] != "sweep":
            continue
        out[(parts[1], parts[2], int(parts[3]))] = b["bytes_per_second"] / 1e9
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default="build/bench/bench_scan_sweep")
    p.add_argument("--json", help="read this JSON instead of running the benchmark")
    p.add_argument("--save-json", help="also save the benchmark's JSON here")
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--min-time", default="0.1")
    p.add_argument("--out", default="docs/scan_throughput.png")
    args = p.parse_args()
    if not shutil.which("gnuplot"):
        sys.exit("bench_plot: gnuplot not found (apt-get install gnuplot-nox)")
    report = load(args)
    data = medians(report)
    if not data:
        sys.exit("bench_plot: no sweep results found")
    context = report.get("context", {})
    tmp = tempfile.mkdtemp(prefix="ascan_plot_")
    plots = []
    for layout, title in LAYOUTS:
        sizes = sorted({lg for (l, _, lg) in data if l == layout})
        impls = [i for i in IMPLS if any((layout, i, lg) in data for lg in sizes)]
        if not sizes:
            continue
        path = os.path.join(tmp, layout + ".dat")
        with open(path, "w") as f:
            f.write("# log2n " + " ".join(impls) + "\n")
            for lg in sizes:
                f.write("%d %s\n" % (lg, " ".join("%.4f" % data.get((layout, i, lg), float("nan")) for i in impls)))
        lines = []
        for k, impl in enumerate(impls):
            style = "dt 2 lw 2" if impl.startswith("copy") else ("lw 3" if impl == "ascan" else "lw 2")
            lines.append("'%s' using 1:%d with linespoints %s title '%s'" % (path, k + 2, style, TITLES[impl]))
        plots.append((title, lines))
        print("%s (GB/s, medians):" % title)
        print("  log2n " + " ".join("%10s" % i for i in impls))
        for lg in sizes:
            print("  %5d " % lg + " ".join("%10.2f" % data.get((layout, i, lg), float("nan")) for i in impls))
    script = os.path.join(tmp, "plot.gp")
    with open(script, "w") as f:
        f.write("set terminal pngcairo size 1200,500 font 'sans,10'\n")
        f.write("set output '%s'\n" % os.path.abspath(args.out))
        f.write("set multiplot layout 1,%d title 'float32 add scan throughput vs size (%s threads, %s)'\n"
                % (len(plots), context.get("ascan_threads", "?"), context.get("host_name", "host")))
        f.write("set grid\nset key top right font ',9'\nset xlabel 'log2(elements)'\n"
                "set ylabel 'GB/s (read + written)'\nset logscale y 2\nset yrange [1:*]\n")
        for title, lines in plots:
            f.write("set title '%s'\n" % title)
            f.write("plot " + ", \\\n     ".join(lines) + "\n")
        f.write("unset multiplot\n")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    subprocess.run(["gnuplot", script], check=True)
    print("wrote " + args.out)


if __name__ == "__main__":
    main()
