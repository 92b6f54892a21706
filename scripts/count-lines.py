#!/usr/bin/env python3
"""Non-blank lines of a crate's sources outside tests.

Usage: scripts/count-lines.py crates/sonde/src [--files]

Counts the non-blank lines of every .rs under the directory, leaving out what
only a test build compiles: a file declared `#[cfg(test)] mod name;` (and the
files under it) and the body of an inline `#[cfg(test)] mod name { ... }`.
"""
import os
import re
import sys


def strip_test_mods(text):
    """The text without inline #[cfg(test)] modules; and the names of out-of-line ones."""
    lines = text.split("\n")
    out, external = [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines):
            nxt = lines[i + 1].strip()
            m = re.match(r"(pub(\([^)]*\))? )?mod (\w+);", nxt)
            if m:
                external.append(m.group(3))
                i += 2
                continue
            if re.match(r"(pub(\([^)]*\))? )?mod \w+ \{", nxt):
                depth = 0
                j = i + 1
                while j < len(lines):
                    depth += lines[j].count("{") - lines[j].count("}")
                    if depth <= 0 and "{" in "".join(lines[i + 1 : j + 1]):
                        break
                    j += 1
                i = j + 1
                continue
        out.append(line)
        i += 1
    return out, external


def count(root):
    per_file = {}
    skip = set()
    paths = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".rs"):
                paths.append(os.path.join(d, f))
    paths.sort()
    kept = {}
    for p in paths:
        with open(p) as fh:
            lines, external = strip_test_mods(fh.read())
        kept[p] = lines
        base = os.path.dirname(p)
        stem = os.path.splitext(os.path.basename(p))[0]
        sub = base if stem in ("mod", "main", "lib") else os.path.join(base, stem)
        for name in external:
            skip.add(os.path.join(sub, name + ".rs"))
            skip.add(os.path.join(sub, name))
    for p, lines in kept.items():
        if any(p == s or p.startswith(s + os.sep) for s in skip):
            continue
        per_file[p] = sum(1 for l in lines if l.strip())
    return per_file


if __name__ == "__main__":
    per_file = count(sys.argv[1])
    if "--files" in sys.argv:
        for p, n in sorted(per_file.items(), key=lambda kv: kv[1]):
            print(f"{n:6} {p}")
    print(sum(per_file.values()))
