"""torch_python_check.py — the LibTorch bridge from Python (scripts/torch-check.sh runs it).

Compiles torch/python/ascan_torch_ext.cpp with torch.utils.cpp_extension against an ascan build
made with the same torch (argument: that build directory), then checks the op against
torch._higher_order_ops.associative_scan (combine_mode="generic", eager) on values and
gradients with random cotangents, with torch.autograd.gradcheck, and that bad input raises a
RuntimeError naming the function. Prints one line per check; exits 1 on any failure.
"""
import os
import sys

import torch
from torch.utils import cpp_extension
from torch._higher_order_ops.associative_scan import associative_scan as torch_scan

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = os.path.abspath(sys.argv[1])
ext_dir = os.path.join(build, "python_ext")
os.makedirs(ext_dir, exist_ok=True)
ext = cpp_extension.load(
    name="ascan_torch_ext",
    sources=[os.path.join(root, "torch/python/ascan_torch_ext.cpp"), os.path.join(root, "torch/bridge.cpp")],
    extra_include_paths=[os.path.join(root, "include")],
    extra_cflags=["-O2", "-std=c++20"],
    extra_ldflags=[os.path.join(build, "libascan_autodiff.a"), os.path.join(build, "libascan_core.a"), "-lfmt"],
    build_directory=ext_dir,
    verbose=False)

failures = 0


def report(ok, what):
    global failures
    failures += not ok
    print(("ok   " if ok else "FAIL ") + what)


def combines():
    def linrec(l, r):
        a1, b1 = l
        a2, b2 = r
        return (a1 * a2, a2 * b1 + b2)

    def complex_diagonal(l, r):
        ar1, ai1, br1, bi1 = l
        ar2, ai2, br2, bi2 = r
        return (ar1 * ar2 - ai1 * ai2, ar1 * ai2 + ai1 * ar2, ar2 * br1 - ai2 * bi1 + br2, ar2 * bi1 + ai2 * br1 + bi2)

    g = torch.Generator().manual_seed(3)
    d = dict(dtype=torch.float64, generator=g)
    shape = (3, 33, 4)
    radius, angle = torch.rand(shape, **d) * 0.5 + 0.45, torch.rand(shape, **d) * 6.28
    nan_max = lambda a, b: torch.where((a > b) | torch.isnan(a), a, b)
    nan_min = lambda a, b: torch.where((a < b) | torch.isnan(a), a, b)
    return [
        ("add", lambda a, b: a + b, [torch.randn(shape, **d)]),
        ("mul", lambda a, b: a * b, [torch.rand(shape, **d) + 0.5]),
        ("max", nan_max, [torch.randn(shape, **d)]),
        ("min", nan_min, [torch.randn(shape, **d)]),
        ("logaddexp", torch.logaddexp, [torch.randn(shape, **d) * 3]),
        ("linear_recurrence", linrec, [torch.rand(shape, **d) * 0.6 + 0.4, torch.randn(shape, **d)]),
        ("complex_diagonal", complex_diagonal,
         [radius * torch.cos(angle), radius * torch.sin(angle), torch.randn(shape, **d), torch.randn(shape, **d)]),
    ]


for name, fn, xs in combines():
    for dim, reverse in [(1, False), (-2, True), (0, False)]:
        case = f"{name} dim {dim}{' reverse' if reverse else ''}"
        a = [x.clone().requires_grad_(True) for x in xs]
        b = [x.clone().requires_grad_(True) for x in xs]
        ys = ext.associative_scan(name, a, dim, reverse)
        ref = torch_scan(fn, tuple(b) if len(xs) > 1 else b[0], dim, reverse=reverse, combine_mode="generic")
        ref = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        values_ok = all(torch.allclose(y, r, rtol=1e-12, atol=1e-12) for y, r in zip(ys, ref))
        ws = [torch.randn(y.shape, dtype=torch.float64) for y in ys]
        ga = torch.autograd.grad(sum((y * w).sum() for y, w in zip(ys, ws)), a)
        gb = torch.autograd.grad(sum((r * w).sum() for r, w in zip(ref, ws)), b)
        grads_ok = all(torch.allclose(x, y, rtol=1e-9, atol=1e-10) for x, y in zip(ga, gb))
        report(values_ok and grads_ok, f"{case}: values and gradients equal torch associative_scan's")
    small = [x[:, :9].clone().requires_grad_(True) for x in xs]
    ok = torch.autograd.gradcheck(lambda *t: tuple(ext.associative_scan(name, list(t), 1, False)), tuple(small),
                                  eps=1e-6, atol=1e-7, rtol=1e-5)
    report(ok, f"{name}: torch.autograd.gradcheck")

try:
    ext.associative_scan("add", [torch.randn(3, 4)], 5, False)
    report(False, "a bad dim raises RuntimeError")
except RuntimeError as e:
    report("ascan::torch::associative_scan()" in str(e) and "dim 5" in str(e), "a bad dim raises RuntimeError naming it")
try:
    ext.associative_scan("add", [torch.randn(3, 4).half()], 0, False)
    report(False, "float16 raises RuntimeError")
except RuntimeError as e:
    report("Half" in str(e), "float16 raises RuntimeError naming the dtype")

if "--bench" in sys.argv:
    # Forward + backward of h_t = a_t h_{t-1} + b_t at [T, D] = [4096, 1024], float32, the
    # upstream gradient on h: the bridge's op, PyTorch's associative_scan (generic, eager) and a
    # loop of torch ops (unbind; select's backward writes a whole zero tensor per step).
    import statistics
    import time

    T, D = 4096, 1024
    g0 = torch.Generator().manual_seed(5)
    a = torch.rand(T, D, generator=g0) * 0.6 + 0.4
    b = torch.randn(T, D, generator=g0)
    gh = torch.randn(T, D, generator=g0)

    def linrec(l, r):
        return (l[0] * r[0], r[0] * l[1] + r[1])

    def bridge(a_, b_):
        return ext.associative_scan("linear_recurrence", [a_, b_], 0, False)[1]

    def torch_associative_scan(a_, b_):
        return torch_scan(linrec, (a_, b_), 0, combine_mode="generic")[1]

    def loop(a_, b_):
        as_, bs_ = a_.unbind(0), b_.unbind(0)
        h = bs_[0]
        hs = [h]
        for t in range(1, T):
            h = as_[t] * h + bs_[t]
            hs.append(h)
        return torch.stack(hs, 0)

    times = {}
    for name, fn, reps in [("bridge", bridge, 7), ("torch associative_scan", torch_associative_scan, 5), ("torch loop", loop, 5)]:
        runs = []
        for r in range(reps + 1):
            a_, b_ = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
            t0 = time.perf_counter()
            h = fn(a_, b_)
            torch.autograd.backward([h], [gh])
            if r:  # the first run warms up
                runs.append(time.perf_counter() - t0)
        times[name] = statistics.median(runs)
        print(f"bench {name}: {1e3 * times[name]:.1f} ms (median of {reps}, forward + backward, {torch.get_num_threads()} threads)")
    for name in ("torch associative_scan", "torch loop"):
        print(f"bench {name} / bridge: {times[name] / times['bridge']:.1f}x")

print(f"torch {torch.__version__}: {'all checks passed' if failures == 0 else f'{failures} check(s) FAILED'}")
sys.exit(1 if failures else 0)
