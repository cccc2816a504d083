#!/usr/bin/env python3
"""Where a replayed graph's time goes: kernel time against idle gaps between its nodes.

Reads the CSV of dev/cuda/kernel_trace.c (Start (ns), Duration (ns), Stream, Graph, Node, Name).
Takes the graph with the most recorded nodes, cuts its records into replays (as many records
as it has distinct nodes), and for the median replay prints the span, the busy time (the union
of node intervals), the idle gaps inside it and the gap to the next replay; then per kernel
family the exclusive time (the part of a node not overlapped by the nodes before it, so the
time a programmatically launched kernel waits for its predecessor counts once) and the gaps
in front of that family's nodes.

Usage: timeline_gaps.py TRACE.csv [--top 25]
"""
import argparse
import collections
import csv
import re
import statistics


def demangle(name):
    """The function name of an Itanium-mangled symbol (_Z5k_fooPf -> k_foo,
    _ZN4cudnn3fooE... -> cudnn::foo); other names as they are."""
    if not name.startswith("_Z"):
        return name
    i, parts = 2, []
    nested = name[i:i + 1] == "N"
    i += nested
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        parts.append(name[j:j + n])
        i = j + n
        if not nested:
            break
    return "::".join(parts) or name


def family(name):
    """Library kernels by library, graphtrain's own by their function name."""
    if name.startswith("["):
        return name
    name = demangle(name)
    m = re.match(r"(?:void )?([A-Za-z_][A-Za-z0-9_:]*)", name)
    base = m.group(1) if m else name[:40]
    if base.startswith("k_"):
        return base
    if re.search(r"nvjet|gemm|cutlass|cublas|xmma|splitK", name, re.I):
        return "cuBLASLt GEMM"
    if re.search(r"cudnn|sdpa|fmha|flash", name, re.I):
        return "cuDNN attention"
    if "cub::" in name or "Radix" in name:
        return "CUB sort"
    return base[:40]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    by_graph = collections.defaultdict(list)
    with open(a.trace, errors="replace") as f:
        for d in csv.DictReader(f):
            try:
                s = int(d["Start (ns)"])
                e = s + int(d["Duration (ns)"])
                g = int(d["Graph"])
                node = int(d["Node"])
            except (KeyError, ValueError):
                continue
            if g:
                by_graph[g].append((s, e, node, d["Name"]))
    if not by_graph:
        print("timeline_gaps: no graph nodes in", a.trace)
        return
    g, recs = max(by_graph.items(), key=lambda kv: len(kv[1]))
    recs.sort()
    nodes = len({r[2] for r in recs})
    replays = [recs[i:i + nodes] for i in range(0, len(recs) - nodes + 1, nodes)]
    print(f"graph {g}: {nodes} nodes traced, {len(replays)} replays")
    if len(replays) < 3:
        return
    body = replays[1:-1]  # the first may warm caches; the last has no next replay
    spans = sorted((max(x[1] for x in r) - r[0][0], i) for i, r in enumerate(body))
    span, mi = spans[len(spans) // 2]
    rep = body[mi]
    nxt = replays[1 + mi + 1]
    between = nxt[0][0] - max(x[1] for x in rep)
    excl = collections.Counter()
    gaps = collections.Counter()
    count = collections.Counter()
    end = rep[0][0]
    busy = 0.0
    gap_list = []
    for s, e, _node, n in rep:
        fam = family(n)
        count[fam] += 1
        gp = max(0, s - end)
        x = max(0, e - max(s, end))
        gaps[fam] += gp
        excl[fam] += x
        busy += x
        if gp > 0:
            gap_list.append(gp)
        end = max(end, e)
    tg = sum(gaps.values())
    print(f"median replay: span {span/1e3:.1f} us, busy {busy/1e3:.1f} us, idle gaps inside "
          f"{tg/1e3:.1f} us ({100*tg/span:.1f}%), to the next replay {between/1e3:.1f} us; "
          f"spans of the {len(body)} replays {spans[0][0]/1e3:.1f}-{spans[-1][0]/1e3:.1f} us")
    print(f"{'family':40s} {'nodes':>5s} {'excl us':>9s} {'gap us':>8s} {'gap/node':>8s}")
    for fam, _ in sorted(excl.items(), key=lambda kv: -(kv[1] + gaps[kv[0]]))[: a.top]:
        print(f"{fam[:40]:40s} {count[fam]:5d} {excl[fam]/1e3:9.1f} {gaps[fam]/1e3:8.1f} "
              f"{gaps[fam]/1e3/count[fam]:8.2f}")
    if gap_list:
        gl = sorted(gap_list)
        print(f"gaps: {len(gl)}, median {statistics.median(gl)/1e3:.2f} us, "
              f"max {gl[-1]/1e3:.2f} us")


if __name__ == "__main__":
    main()
