#!/usr/bin/env python3
"""Prints the README's performance table (GB/s and ratio to the copy, per element width) for
one input size from bench/results.json, which scripts/bench.sh writes."""
import json
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "bench/results.json"
size = int(sys.argv[2]) if len(sys.argv) > 2 else 64 << 20
data = json.load(open(path))
cases = []
cells = {}
for r in data["results"]:
    # Shapes of 2- and 8-byte cases round their sizes a little.
    if abs(r.get("input_bytes", 0) - size) > size // 100:
        continue
    if r["case"] not in cases:
        cases.append(r["case"])
    if "gb_per_s" in r:
        cells[(r["case"], r["width"])] = f"{r['gb_per_s']:.2f} ({r['ratio_to_copy']:.2f})"
    else:
        cells[(r["case"], r["width"])] = "error"
print(f"GB/s and (ratio to the copy) for {size >> 20} MiB inputs on {data['adapter']}:\n")
print("| case | 1-byte | 2-byte | 4-byte | 8-byte |")
print("|---|---|---|---|---|")
for c in cases:
    print(f"| {c} | " + " | ".join(cells.get((c, w), "") for w in (1, 2, 4, 8)) + " |")
