#!/usr/bin/env python3
"""Side-by-side medians of several builds from `ssmstate bench --json` files.

    python3 bench/compare_runs.py main=a1.json,a2.json next=b1.json,b2.json

Each argument names a build and its JSON files (one per repetition, taken in
the same device call, the builds alternating). Prints one markdown row per
(model, op, batch, mode) measured by every build: each build's medians in
microseconds, repetition by repetition, and from the second build on the
mean of its medians over the first build's (below 1: faster). Copy rows are
kept, so a table shows whether the device itself moved between runs.
"""
import json
import sys


def read_rows(path):
    """The measurements of one file, keyed by what they measure."""
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if r.get("error") or r.get("median_us") is None:
                continue
            op = r["op"] if r.get("accepted") is None else "%s a=%d" % (r["op"], r["accepted"])
            key = (r["model"], op, r["batch"], r["mode"])
            rows[key] = r["median_us"]
    return rows


def parse(argv):
    builds = []
    for arg in argv:
        name, sep, files = arg.partition("=")
        if not sep or not files:
            raise SystemExit("usage: compare_runs.py NAME=FILE.json[,FILE.json...] ...")
        builds.append((name, [read_rows(p) for p in files.split(",")]))
    return builds


def main():
    builds = parse(sys.argv[1:])
    if not builds:
        raise SystemExit("usage: compare_runs.py NAME=FILE.json[,FILE.json...] ...")
    keys = [k for k in builds[0][1][0] if all(k in run for _, runs in builds for run in runs)]
    head = ["model", "op", "B", "mode"] + [name for name, _ in builds]
    head += ["%s / %s" % (name, builds[0][0]) for name, _ in builds[1:]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for key in keys:
        means, cells = [], []
        for _, runs in builds:
            values = [run[key] for run in runs]
            means.append(sum(values) / len(values))
            cells.append(" ".join("%.2f" % v for v in values))
        ratios = ["%.3f" % (m / means[0]) for m in means[1:]]
        print("| %s | %s | %d | %s | " % key + " | ".join(cells + ratios) + " |")


if __name__ == "__main__":
    main()
