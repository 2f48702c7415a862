#!/usr/bin/env python3
"""Prints the README's performance tables from the files scripts/bench.sh writes.

    bench-summary.py [DIR] [BYTES]

DIR (default bench/) holds results.json and, when present, scan.json. Prints the copy
ceilings of the adapter, GB/s and the ratio to the plain copy (the vec4 copy kernel on GPUs,
copy_buffer_to_buffer on CPU adapters; runs before 2026-11-24 used copy_buffer_to_buffer
everywhere) per element width for
inputs of BYTES (default 64 MiB), the lowest ratio from 16 MiB up per case (warm, and cold
where the file has cold measurements), the same against the fastest copy of the same bytes
anywhere in the run (the target's measure), and the Scan and RNN tables."""
import json
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else "bench"
size = int(sys.argv[2]) if len(sys.argv) > 2 else 64 << 20
data = json.load(open(os.path.join(folder, "results.json")))
print(f"Adapter: {data['adapter']} (workgroup size {data.get('workgroup_size', '?')}).\n")

ceilings = data.get("copy_ceilings")
if ceilings:
    mib = ceilings[0]["bytes"] >> 20
    print(f"Copy ceilings, {mib} MiB, GB/s read + written: " + ", ".join(
        f"{c['method']} {c['gb_per_s']:.{0 if c['gb_per_s'] >= 100 else 1}f}" for c in ceilings) + ".\n")

cases = []
cells = {}
lowest = {}
lowest_cold = {}
for r in data["results"]:
    if "gb_per_s" in r and r["input_bytes"] >= (16 << 20) * 99 // 100:
        key = (r["case"], r["width"])
        lowest[key] = min(lowest.get(key, 99.0), r["ratio_to_copy"])
        if "cold" in r:
            lowest_cold[key] = min(lowest_cold.get(key, 99.0), r["cold"]["ratio_to_copy"])
    # Shapes of 2- and 8-byte cases round their sizes a little.
    if abs(r.get("input_bytes", 0) - size) > size // 100:
        continue
    if r["case"] not in cases:
        cases.append(r["case"])
    if "gb_per_s" in r:
        cells[(r["case"], r["width"])] = f"{r['gb_per_s']:.2f} ({r['ratio_to_copy']:.2f})"
    else:
        cells[(r["case"], r["width"])] = "error"
# The fastest copy of each output size anywhere in the run (the copy beside each op, and in
# newer files the copies on the op's own buffers and on a pair made before the table): the
# adapter's best copy of those bytes, which the target measures against. The copy beside an op
# runs slower on some adapters than the same copy elsewhere in the run (the H200: 1.5 to 3.2
# TB/s at 256 MiB), so the ratio to it can flatter the op.
def fastest_copy(r):
    fastest = max(r["copy_gb_per_s"], r.get("own_copy_gb_per_s", 0), r.get("reference_copy_gb_per_s", 0))
    if r["case"].startswith("x[1:-1]"):
        fastest = max(fastest, r["gb_per_s"])  # that op is the copy kernel itself
    return fastest
measured = [r for r in data["results"] if "gb_per_s" in r]
def best_copy(r):
    # Output sizes within 1% (a row or two apart) are one size.
    return max(fastest_copy(o) for o in measured
               if abs(o["output_bytes"] - r["output_bytes"]) <= r["output_bytes"] // 100)
to_best = {}
lowest_best = {}
for r in data["results"]:
    if "gb_per_s" not in r:
        continue
    key = (r["case"], r["width"])
    ratio_best = r["gb_per_s"] / best_copy(r)
    if r["input_bytes"] >= (16 << 20) * 99 // 100:
        lowest_best[key] = min(lowest_best.get(key, 99.0), ratio_best)
    if abs(r["input_bytes"] - size) <= size // 100:
        to_best[key] = ratio_best


probes = [r["probe_us"] for r in data["results"] if "probe_us" in r]
if probes:
    # The launch-bound probe: a 4 KiB copy timed in every measurement's submissions. Where it
    # slows, the device ran slower (clocks), whatever the op.
    print(f"Probe (4 KiB copy, launch-bound): {data.get('probe_us_before_table', float('nan')):.2f} µs "
          f"before the table, {min(probes):.2f} to {max(probes):.2f} µs in its measurements.\n")


def width_table(title, cell):
    """A markdown table of `cell(case, width)` per case and element width, under `title`."""
    print(title + "\n")
    print("| case | 1-byte | 2-byte | 4-byte | 8-byte |")
    print("|---|---|---|---|---|")
    for c in cases:
        print(f"| {c} | " + " | ".join(cell(c, w) for w in (1, 2, 4, 8)) + " |")


def ratio(table):
    return lambda c, w: f"{table[(c, w)]:.2f}" if (c, w) in table else ""


width_table(f"GB/s and (ratio to the plain copy) for {size >> 20} MiB inputs:",
            lambda c, w: cells.get((c, w), ""))
width_table("\nLowest ratio to the plain copy from 16 MiB up:", ratio(lowest))
width_table(f"\nRatio to the fastest copy of the same bytes in the run, {size >> 20} MiB inputs:",
            ratio(to_best))
width_table("\nLowest ratio to the fastest copy of the same bytes in the run, from 16 MiB up:",
            ratio(lowest_best))
if lowest_cold:
    width_table("\nLowest cold ratio (buffers rotated past the caches, the copy too) from 16 MiB up:",
                ratio(lowest_cold))

scan_path = os.path.join(folder, "scan.json")
if os.path.exists(scan_path):
    scan = json.load(open(scan_path))
    print("\n| elements | iterations | body ops | Scan µs/iter | of which host | by hand µs/iter "
          "| Scan / by hand | naive / Scan |")
    print("|---|---|---|---|---|---|---|---|")
    for r in scan["results"]:
        host = r.get("scan_host_s_per_iter")
        print(f"| {r['elements']} | {r['iterations']} | {r['ops']} | {r['scan_s_per_iter'] * 1e6:.0f} "
              f"| {'' if host is None else f'{host * 1e6:.0f}'} | {r['by_hand_s_per_iter'] * 1e6:.0f} "
              f"| {r['scan_over_by_hand']:.2f} | {r['naive_over_scan']:.1f} |")
    def step_line(r):
        # Older files have one mode per batch; newer ones fused and node by node.
        modes = r.get("modes") or [dict(r, element_wise="")]
        return "; ".join(
            f"batch {r['batch']}{' ' + m['element_wise'] if m['element_wise'] else ''}: "
            f"{m['s_per_step'] * 1e6:.0f} µs per step"
            + (f" ({m['host_s_per_step'] * 1e6:.0f} of them host)" if "host_s_per_step" in m else "")
            + (f", {m['dispatches_per_step']:.0f} dispatches" if "dispatches_per_step" in m else "")
            for m in modes)
    print("\nRNN cell as a Scan (hidden 256, {} steps): ".format(scan["rnn"][0]["steps"]) + "; ".join(
        step_line(r) for r in scan["rnn"]) + ".")
    gpu = [r for r in scan["rnn"] if "gpu_s_per_command" in r]
    for r in gpu:
        print(f"  batch {r['batch']}, GPU µs per body command alone: " + ", ".join(
            f"{k} {v * 1e6:.1f}" for k, v in r["gpu_s_per_command"].items())
            + (f"; the same MatMul with the {'GPU' if r['cpu_kernels'] else 'CPU'} kernels "
               f"{r['gpu_s_matmul_other_kernels'] * 1e6:.1f}"
               if "gpu_s_matmul_other_kernels" in r else "")
            + (f"; MatMul of 16 rows ({'8 x 4 blocks' if r.get('cpu_kernels') else 'one row of tiles'}) "
               f"{r['gpu_s_matmul_16_rows'] * 1e6:.1f}"
               if "gpu_s_matmul_16_rows" in r else ""))
