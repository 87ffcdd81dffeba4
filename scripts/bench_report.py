#!/usr/bin/env python3
"""bench_report.py — medians of bench_scan_host as markdown: ascan vs the copy roof and the best peer.

Runs the benchmark binary (or reads a JSON file it wrote) with repetitions and aggregates only,
takes the MEDIAN of each benchmark and prints:
  * one row per scan case "<op>/<layout>/<dir>": ascan GB/s, the copy roof (the faster of the
    one-thread and the multi-thread memcpy of the same bytes), ascan/copy, ascan against the
    same bytes copied with streaming stores (copy_stream: the machine's real roof for a large
    output), the best peer (any implementation other than ascan and the copies) and
    ascan/best-peer;
  * with --details, a table per case with every implementation;
  * the small benchmarks (threads, incache, rowcombine) as a table per group.
GB/s is 1e9 bytes per second of bytes read + written by the scan (2 * leaves * N * 4 per call).

Usage:
  scripts/bench_report.py                         # runs build-bench/bench/bench_scan_host
  scripts/bench_report.py --binary PATH --min-time 0.2 --save-json out.json
  scripts/bench_report.py --json out.json --details
Python 3 standard library only.
"""
import argparse
import json
import os
import subprocess
import sys

COPIES = ("copy", "copy_mt")
STREAM_COPY = "copy_stream"
# Baseline of the small benchmark groups (ratios are relative to it), by preference.
BASELINES = ("seq", "loop", "ascan_t1")


def run_benchmark(binary, repetitions, min_time, bench_filter):
    cmd = [binary, "--benchmark_repetitions=%d" % repetitions,
           "--benchmark_report_aggregates_only=true", "--benchmark_format=json",
           "--benchmark_min_time=%s" % min_time]
    if bench_filter:
        cmd.append("--benchmark_filter=%s" % bench_filter)
    print("running: " + " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    report = json.loads(out)
    try:
        with open("/proc/loadavg") as f:
            report.setdefault("context", {})["load_avg_end"] = [float(x) for x in f.read().split()[:3]]
    except OSError:
        pass
    return report


def medians(report):
    """{name: entry} of the median aggregates (plain runs when there are no aggregates)."""
    result, plain = {}, {}
    for b in report.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        if name.endswith("/real_time"):
            name = name[: -len("/real_time")]
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                result[name] = b
            elif b.get("aggregate_name") == "cv":
                result.setdefault(name + "#cv", b)
        else:
            plain.setdefault(name, b)  # repetitions == 1: the run itself
    for name, b in plain.items():
        result.setdefault(name, b)
    return result


def gbps(entry):
    if entry is None or entry.get("error_occurred"):
        return None
    bps = entry.get("bytes_per_second")
    return None if bps is None else bps / 1e9


def cv_of(med, name):
    """Coefficient of variation (real time) of a benchmark's repetitions, if reported."""
    e = med.get(name + "#cv")
    return None if e is None else e.get("real_time")


def fmt(x, digits=2):
    return "—" if x is None else ("%.*f" % (digits, x))


def group_by_case(med):
    groups = {}
    for name, entry in med.items():
        if "#" in name:
            continue
        parts = name.split("/")
        group, impl = "/".join(parts[:-1]), parts[-1]
        groups.setdefault(group, {})[impl] = entry
    return groups


def error_text(entry):
    return "ERROR: " + entry.get("error_message", "?") if entry and entry.get("error_occurred") else None


def summary_table(groups, med):
    lines = ["| case | ascan GB/s | cv | copy GB/s (which) | ascan/copy | ascan/stream copy | best peer | peer GB/s "
             "| ascan/best peer |",
             "|---|---:|---:|---|---:|---:|---|---:|---:|"]
    for group in sorted(g for g in groups if any(c in groups[g] for c in COPIES)):
        impls = groups[group]
        err = error_text(impls["ascan"]) if "ascan" in impls else "missing"
        a = gbps(impls.get("ascan"))
        copies = [(gbps(impls.get(c)), c) for c in COPIES if gbps(impls.get(c)) is not None]
        roof, roof_name = max(copies) if copies else (None, "—")
        stream = gbps(impls.get(STREAM_COPY))
        peers = [(gbps(e), i) for i, e in impls.items()
                 if i not in ("ascan", STREAM_COPY) and i not in COPIES and gbps(e) is not None]
        best, best_name = max(peers) if peers else (None, "—")
        cv = cv_of(med, group + "/ascan")
        lines.append("| %s | %s | %s | %s (%s) | %s | %s | %s | %s | %s |" % (
            group, err or fmt(a), fmt(cv * 100 if cv is not None else None, 0) + ("%" if cv is not None else ""),
            fmt(roof), roof_name, fmt(a / roof if a and roof else None), fmt(a / stream if a and stream else None),
            best_name, fmt(best), fmt(a / best if a and best else None)))
    return "\n".join(lines)


def detail_tables(groups):
    out = []
    for group in sorted(g for g in groups if any(c in groups[g] for c in COPIES)):
        impls = groups[group]
        roof = max([gbps(impls.get(c)) for c in COPIES if gbps(impls.get(c)) is not None] or [None])
        out.append("#### %s\n\n| impl | GB/s | x roof | ms/call |\n|---|---:|---:|---:|" % group)
        for impl, e in sorted(impls.items(), key=lambda kv: -(gbps(kv[1]) or 0)):
            g = gbps(e)
            ms = e.get("real_time", 0) * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[e.get("time_unit", "ns")]
            out.append("| %s | %s | %s | %s |" % (impl, error_text(e) or fmt(g), fmt(g / roof if g and roof else None),
                                                 fmt(ms, 3)))
        out.append("")
    return "\n".join(out)


def extra_tables(groups):
    """Groups without a copy roof: threads, incache, rowcombine."""
    out = []
    for group in sorted(g for g in groups if not any(c in groups[g] for c in COPIES)):
        impls = groups[group]
        base_name = next((b for b in BASELINES if b in impls), sorted(impls)[0])
        base = gbps(impls[base_name])
        out.append("#### %s\n\n| impl | GB/s | Gitems/s | x %s |\n|---|---:|---:|---:|" % (group, base_name))
        for impl, e in sorted(impls.items()):
            g = gbps(e)
            items = e.get("items_per_second")
            out.append("| %s | %s | %s | %s |" % (impl, error_text(e) or fmt(g), fmt(items / 1e9 if items else None),
                                                 fmt(g / base if g and base else None)))
        out.append("")
    return "\n".join(out)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", default=os.path.join(root, "build-bench", "bench", "bench_scan_host"))
    p.add_argument("--json", help="read this JSON (from --benchmark_format=json) instead of running")
    p.add_argument("--save-json", help="also write the raw JSON of the run here")
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--min-time", default="0.2", help="--benchmark_min_time per benchmark (seconds)")
    p.add_argument("--filter", default="", help="--benchmark_filter regex")
    p.add_argument("--details", action="store_true", help="a table of every implementation per case")
    args = p.parse_args()

    if args.json:
        with open(args.json) as f:
            report = json.load(f)
    else:
        report = run_benchmark(args.binary, args.repetitions, args.min_time, args.filter)
        if args.save_json:
            with open(args.save_json, "w") as f:
                json.dump(report, f, indent=1)
    med = medians(report)
    groups = group_by_case(med)
    ctx = report.get("context", {})
    # The load average matters: on a shared machine a busy core stalls multi-threaded scans.
    def loads(key):
        return "/".join("%.2f" % x for x in ctx[key]) if ctx.get(key) else "?"
    print("Medians of %s repetitions; %s CPUs at %s MHz; load average at start %s, at end %s; ascan threads: %s; "
          "GB/s = 1e9 B/s read + written.\n" % (
              args.repetitions if not args.json else "the", ctx.get("num_cpus", "?"), ctx.get("mhz_per_cpu", "?"),
              loads("load_avg"), loads("load_avg_end"), ctx.get("ascan_threads", "?")))
    print(summary_table(groups, med))
    print()
    if args.details:
        print(detail_tables(groups))
    print(extra_tables(groups))


if __name__ == "__main__":
    main()
