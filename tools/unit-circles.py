#!/usr/bin/env python3
"""Finds circles of units: object files that use each other's functions or data, directly or
through a chain (a -> b -> ... -> a), read from the symbols the built objects define and use (nm).
A circle means no file of it can be read, tested or replaced without the others.

    tools/unit-circles.py BUILD_DIR [DIR ...]

Checks the objects built from the source folders named (default: codegen runtime); exits 1 and
lists each circle when there is one. flex and bison's lexer-parser pair is the one allowed."""
import os
import subprocess
import sys

ALLOWED = [{"lexer.c", "parser.c"}]


def objects(build, dirs):
    out = []
    for d in dirs:
        for root, _, files in os.walk(os.path.join(build, d)):
            out += [os.path.join(root, f) for f in files if f.endswith(".o")]
    return sorted(out)


def symbols(obj):
    r = subprocess.run(["nm", obj], capture_output=True, text=True, check=True)
    defined, used = set(), set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRVWC":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
    return defined, used


def unit(obj):
    return os.path.basename(obj).removesuffix(".o")  # kir_lower.c


def circles(graph):
    """strongly connected components of two units or more (Tarjan, iterative)"""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = n[0]
        n[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.add(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
            elif w not in index:
                index[w] = low[w] = n[0]
                n[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def main():
    build = sys.argv[1]
    dirs = sys.argv[2:] or ["codegen", "runtime"]
    objs = objects(build, dirs)
    if not objs:
        print(f"unit-circles: no objects under {build} for {' '.join(dirs)}", file=sys.stderr)
        return 2
    syms = {o: symbols(o) for o in objs}
    owner = {}
    for o, (defined, _) in syms.items():
        for s in defined:
            owner.setdefault(s, o)
    graph = {unit(o): set() for o in objs}
    why = {}
    for o, (_, used) in syms.items():
        for s in used:
            if s in owner and owner[s] != o:
                a, b = unit(o), unit(owner[s])
                graph[a].add(b)
                why.setdefault((a, b), s)
    found = [c for c in circles(graph) if c not in ALLOWED]
    for c in found:
        names = sorted(c)
        print("unit-circles: a circle of units: " + ", ".join(names))
        for a in names:
            for b in names:
                if (a, b) in why:
                    print(f"  {a} uses {b} ({why[(a, b)]})")
    print(f"unit-circles: {len(objs)} objects in {' '.join(dirs)}, {len(found)} circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
