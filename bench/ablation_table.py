#!/usr/bin/env python3
"""The ablation's rows as JSON: for each run in the folders given (ablation_gpu.sh's OUT,
or quick-preset runs), its wall time, search and training seconds, the genotype's
parameter-free operations in the normal cell, and the held-out accuracy by epoch. The test
accuracy is listed only where the run printed it, and is never what a row is chosen by.

    ablation_table.py DIR... > table.json
"""
import json
import os
import re
import sys

FREE = ("max_pool_3x3", "avg_pool_3x3", "skip_connect", "none")


def records(path):
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def times(folder):
    t = {}
    path = os.path.join(folder, "times.txt")
    for line in open(path) if os.path.exists(path) else []:
        name, t0, t1 = line.split()
        t[name] = float(t1) - float(t0)
    return t


def row(folder, name, wall):
    run = os.path.join(folder, name)
    search = records(os.path.join(run, "metrics.jsonl"))
    train_log = os.path.join(run, "train", "metrics.jsonl")
    train = records(train_log) if os.path.exists(train_log) else search
    header = train[0] if train and train[0].get("type") == "header" else {}
    is_search = os.path.exists(train_log)
    epochs = [r for r in train if r.get("type") == "epoch"]
    genotype = ""
    gpath = os.path.join(run, "genotype.txt")
    if os.path.exists(gpath):
        genotype = open(gpath).read().strip()
    normal = re.search(r"normal=\[(.*?)\], normal_concat", genotype)
    free = None
    if normal:
        free = sum(op.strip("' ") in FREE for op in re.findall(r"\('(\w+)'", normal.group(1)))
    test = None
    log = os.path.join(folder, name + ".log")
    m = re.findall(r"test accuracy ([0-9.]+)%", open(log).read()) if os.path.exists(log) else []
    if m:
        test = float(m[-1]) / 100
    return {
        "row": name,
        "device": header.get("device"),
        "wall_s": wall,
        "search_s": sum(r["seconds"] for r in search if r.get("type") == "epoch") if is_search else 0,
        "train_s": sum(r["seconds"] for r in epochs),
        "param_free_normal": free,
        "genotype": genotype,
        "heldout_acc_by_epoch": [r["valid_acc"] for r in epochs],
        "test_acc_reported": test,
    }


def main():
    rows = []
    for folder in sys.argv[1:]:
        for name, wall in sorted(times(folder).items()):
            rows.append(row(folder, name, wall))
    json.dump(rows, sys.stdout, indent=1)
    print()
    for r in rows:
        acc = r["heldout_acc_by_epoch"][-1] if r["heldout_acc_by_epoch"] else float("nan")
        print(f"# {r['row']:16s} wall {r['wall_s']:7.1f} s  held-out {acc:.4f}  "
              f"free ops {r['param_free_normal']}", file=sys.stderr)


if __name__ == "__main__":
    main()
