"""Evaluates numpy basic-indexing expressions for tests/numpy_rules.rs.

stdin: JSON list of cases {"shape": [...], "items": [...]}, items being
{"t": "range", "b": int|null, "e": int|null, "s": int}, {"t": "index", "i": int},
{"t": "newaxis"} or {"t": "ellipsis"}.
stdout: JSON list of {"shape": [...], "values": [...]} or {"error": "..."} for each case,
computed on np.arange(prod(shape)).reshape(shape).
"""
import json
import sys

import numpy as np


def to_index(item):
    t = item["t"]
    if t == "range":
        return slice(item["b"], item["e"], item["s"])
    if t == "index":
        return item["i"]
    if t == "newaxis":
        return np.newaxis
    return Ellipsis


def main():
    cases = json.load(sys.stdin)
    results = []
    for case in cases:
        shape = case["shape"]
        a = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
        try:
            y = a[tuple(to_index(i) for i in case["items"])]
            results.append({"shape": list(y.shape), "values": np.asarray(y).ravel().tolist()})
        except (IndexError, ValueError) as e:
            results.append({"error": str(e)})
    json.dump(results, sys.stdout)


main()
