#!/usr/bin/env python3
"""Import cycles among the modules under src/gateway (one module per file; `tests` modules and
`#[cfg(test)] mod tests` blocks left out): every strongly connected group of two or more, and
every pair that imports each other. A module's use of an enclosing module or of one of its
own children is not counted (a parent declares its children; a child sees its parent's
items); a `pub use` re-export counts as a use.

Usage: python3 scripts/module_cycles.py [--check] [ROOT]
ROOT is the repository (default: the current directory). With --check the exit status is 1
when there is any cycle (`tests/house.rs` runs it so); without, it only prints."""
import os
import re
import sys

args = [a for a in sys.argv[1:] if a != "--check"]
CHECK = "--check" in sys.argv[1:]
os.chdir(args[0] if args else ".")
mods = {}
for d, _, fs in os.walk("src/gateway"):
    for f in fs:
        if not f.endswith(".rs"): continue
        p = os.path.join(d, f)
        rel = os.path.relpath(p, "src")[:-3].split("/")
        if rel[-1] == "mod": rel = rel[:-1]
        if rel[-1] in ("tests",) or rel[-1].endswith("_tests"): continue
        mods["::".join(rel)] = p
def resolve(cur, path):
    parts = path.split("::")
    if parts[0] == "crate": base = []; parts = parts[1:]
    elif parts[0] == "super":
        base = cur.split("::")[:-1]
        parts = parts[1:]
        while parts and parts[0] == "super": base = base[:-1]; parts = parts[1:]
    elif parts[0] == "self": base = cur.split("::"); parts = parts[1:]
    else: return None
    full = base + parts
    for n in range(len(full), 0, -1):
        k = "::".join(full[:n])
        if k in mods: return k
    return None
edges = {m: set() for m in mods}
for m, p in mods.items():
    src = open(p).read()
    src = re.split(r"#\[cfg\(test\)\]\s*mod tests", src)[0]
    cur = m if not p.endswith("mod.rs") else m + "::_"
    for path in re.findall(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", src):
        t = resolve(cur, path)
        if t and t != m and not m.startswith(t + "::") and not t.startswith(m + "::"):
            edges[m].add(t)
# find 2-cycles and SCCs
sys.setrecursionlimit(10000)
idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in mods:
    if v not in idx: sc(v)
for comp in sccs: print(len(comp), sorted(comp))
pairs = [(a, b) for a in edges for b in edges[a] if a < b and a in edges.get(b, ())]
print("2-cycles:", pairs)
if CHECK and (sccs or pairs):
    sys.exit(1)
