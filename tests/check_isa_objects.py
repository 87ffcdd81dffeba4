#!/usr/bin/env python3
"""Checks the ISA fence of the dispatched builtins (include/ascan/isa.hpp, config.hpp).

The library compiles src/builtin_scan.cpp and autodiff/scan_vjp_builtins.cpp once per ISA level
(objects named *_isa<level>.cpp.o). Only the kernels, in the level's inline namespace, may use the
level's wide registers: every other function in those objects (standard-library and Tensor
inlines, emitted as weak symbols the linker may pick for the whole program) must be baseline
code, or a CPU without AVX2 / AVX-512 could fault outside the dispatch. And no kernel may call a
function outside its level that takes or returns a vector by value: the two sides would pass it
with different conventions (the psABI differs with and without AVX). Also fails when an object
of a level is missing or its kernels do not use that level's registers (the pragma was lost).

With --all, the other objects of the libraries are held to the baseline too (a build without
ASCAN_NATIVE): only the dispatched kernels may use more.

usage: check_isa_objects.py [--all] OBJDUMP LIBRARY...
"""
import re
import subprocess
import sys

NAMESPACE = {"0": "isa_base", "2": "isa_avx2", "3": "isa_avx512"}
# Instructions a baseline x86-64 CPU lacks: VEX/EVEX encodings (AVX, AVX2, FMA, AVX-512: every
# mnemonic starting with v, and the mask registers) and BMI1/BMI2/LZCNT.
BEYOND_BASELINE = re.compile(r"^(v[a-z]\w*|k(and|andn|or|xor|xnor|not|mov|shift[lr]|test|ortest|add|unpck)[bwdq]?\w*|"
                             r"andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|tzcnt|lzcnt)$")
REQUIRED = {"2": re.compile(r"%ymm\d"), "3": re.compile(r"%zmm\d|%ymm(1[6-9]|2\d|3[01])|\{%k\d\}")}


def strip_templates(name):
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def vector_by_value(name):
    """A demangled function with a vector type as its return type or a by-value parameter."""
    bare = strip_templates(name)
    for m in re.finditer(r"__vector\(\d+\)( const)?", bare):
        if not bare[m.end():].lstrip().startswith(("&", "*")):
            return True
    return False


def main():
    args = [a for a in sys.argv[1:] if a]  # ctest passes an empty argument for an unset option
    strict = args[:1] == ["--all"]
    if strict:
        args = args[1:]
    objdump, libs = args[0], args[1:]
    errors, seen = [], set()
    for lib in libs:
        out = subprocess.run([objdump, "-dr", "-C", "--no-show-raw-insn", lib], check=True, capture_output=True,
                             text=True).stdout
        member = level = func = None
        used_level_regs = {}
        for line in out.splitlines():
            m = re.match(r"^(\S+\.o):\s+file format", line)
            if m:
                member = m.group(1)
                lm = re.search(r"_isa(\d)\.cpp\.o$", member)
                level = lm.group(1) if lm else ("0" if strict else None)
                if lm:
                    seen.add((member, level))
                    used_level_regs[member] = False
                continue
            m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
            if m:
                func = m.group(1)
                continue
            if not level or not func:
                continue
            in_kernels = level != "0" and f"::{NAMESPACE[level]}::" in func
            if level in REQUIRED and in_kernels and REQUIRED[level].search(line):
                used_level_regs[member] = True
            rel = re.match(r"^\s+[0-9a-f]+: R_X86_64_(PLT32|PC32)\s+(.*?)([-+]0x[0-9a-f]+)?$", line)
            if rel:
                target = rel.group(2)
                if (level != "0" and in_kernels and f"::{NAMESPACE[level]}::" not in target
                        and vector_by_value(target)):
                    errors.append(f"{lib}({member}): {func} calls {target}, outside {NAMESPACE[level]}, with a vector "
                                  "by value")
                continue
            parts = line.split("\t")
            mnemonic = parts[1].split()[0] if len(parts) > 1 and parts[1].split() else ""
            if not in_kernels and BEYOND_BASELINE.match(mnemonic):
                errors.append(f"{lib}({member}): {func} is outside {NAMESPACE[level]} and uses an instruction beyond "
                              f"the baseline: {line.strip()}")
        for member, used in used_level_regs.items():
            lvl = re.search(r"_isa(\d)\.cpp\.o$", member).group(1)
            if lvl in REQUIRED and not used:
                errors.append(f"{lib}({member}): no kernel uses the registers of level {lvl}")
    levels = {lvl for _, lvl in seen}
    if not levels:
        errors.append("no per-level objects (*_isa<level>.cpp.o) found")
    for e in dict.fromkeys(errors):
        print(e)
    print(f"checked {len(seen)} per-level objects, levels {sorted(levels)}: {len(set(errors))} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
