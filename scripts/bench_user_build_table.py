#!/usr/bin/env python3
"""Table of scripts/bench_user_build.sh's runs: medians over every repetition of every round.

usage: bench_user_build_table.py WORK_DIR
"""
import glob
import json
import re
import statistics
import sys


def load(work, kind):
    times, context = {}, {}
    for path in sorted(glob.glob(f"{work}/run-{kind}-*.json")):
        data = json.load(open(path))
        context = data["context"]
        for b in data["benchmarks"]:
            if b.get("run_type") == "aggregate":
                continue
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
            times.setdefault(b["run_name"], []).append(b["real_time"] * scale)
    return {k: statistics.median(v) for k, v in times.items()}, context


def main():
    work = sys.argv[1]
    default, ctx = load(work, "default")
    native, nctx = load(work, "native")
    print(f"CPU: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}, "
          f"{ctx.get('num_cpus')} CPUs; builtins at {ctx.get('ascan_isa')} (default) / {nctx.get('ascan_isa')} (native)")
    roof_d, roof_n = default.get("copy/roof"), native.get("copy/roof")
    print(f"copy of 2^24 floats in + out (the roof): default {roof_d:.2f} ms, native {roof_n:.2f} ms\n")
    print("| case | default build ms | native build ms | default / native speed | default: copy / scan |")
    print("|---|---|---|---|---|")
    for name in default:
        if name == "copy/roof" or name not in native:
            continue
        d, n = default[name], native[name]
        print(f"| {name} | {d:.2f} | {n:.2f} | {n / d:.2f} | {roof_d / d:.2f} |")
    print("\n| default / native speed | builtins | user lambdas |")
    print("|---|---|---|")
    for direction, dname in (("fwd", "forward"), ("bwd", "backward")):
        for shape, sname in (("1d", "one sequence"), ("T7", "[T, 7]"), ("T256", "[T, 256]")):
            cells = []
            for kind in ("builtin", "lambda"):
                r = [native[k] / default[k] for k in default
                     if k.startswith(direction + "/") and k.endswith(f"/{kind}/{shape}") and k in native]
                cells.append(f"{min(r):.2f}–{max(r):.2f}" if r else "-")
            print(f"| {dname}, {sname} | {cells[0]} | {cells[1]} |")
    for kind, t, roof in (("default", default, roof_d), ("native", native, roof_n)):
        for shape in ("1d", "T7", "T256"):
            key = f"fwd/logaddexp/builtin/{shape}"
            if key in t:
                print(f"\nlogaddexp forward {shape}, {kind} build: {t[key] * 1e6 / 2**24:.2f} ns per element, "
                      f"the copy {roof * 1e6 / 2**24:.2f} ns per element")


if __name__ == "__main__":
    main()
