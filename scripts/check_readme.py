#!/usr/bin/env python3
"""Checks the README's quick start against what the main job printed (CI runs
scripts/setup.sh into a log, then this): every line of the sample output appears in the
log, in order, with the same figures except those of time and speed (seconds, images/s,
ETA); and the test accuracy the prose and the preset table state is the one printed.

usage: check_readme.py README.md SETUP_LOG
"""
import re
import sys

TIMING = [
    (r"done\\ in\\ \d+\\ s", r"done in \d+ s"),
    (r"\d+(?:\\\.\d+)?\\ img/s", r"[\d.]+ img/s"),
    (r"ETA\\ \d+m\d+s", r"ETA \d+m\d+s"),
]


def sample_block(readme):
    """The fenced block after the quick start's "ends like this"."""
    start = readme.index("ends like this")
    fence = readme.index("```\n", start)
    end = readme.index("```\n", fence + 4)
    return [l for l in readme[fence + 4:end].splitlines() if l.strip()]


def line_pattern(line):
    p = re.escape(line)
    for figure, wildcard in TIMING:
        p = re.sub(figure, lambda _m, w=wildcard: w, p)
    # the sample shortens long genotypes as reduce=[...] and names the device in brackets
    p = p.replace(re.escape("[...]"), r"\[.*?\]")
    p = re.sub(r"on\\ cpu\\ \\\(.*\\\)$", r"on cpu \\(.*\\)", p)
    return re.compile(p + "$")


def main():
    readme_path, log_path = sys.argv[1:3]
    readme = open(readme_path, encoding="utf-8").read()
    log = open(log_path, encoding="utf-8", errors="replace").read().splitlines()
    problems = []
    at = 0
    for line in sample_block(readme):
        if line.strip() == "...":
            continue
        pat = line_pattern(line)
        hit = next((i for i in range(at, len(log)) if pat.match(log[i])), None)
        if hit is None:
            problems.append("sample line not printed (in this order): " + line)
        else:
            at = hit + 1
    acc = re.findall(r"test accuracy ([\d.]+)%", "\n".join(log))
    if not acc:
        problems.append("the log holds no test accuracy")
    else:
        printed = acc[-1]
        for claim in re.findall(r"reached ([\d.]+) % test accuracy", readme):
            if claim != printed:
                problems.append(f"the prose says {claim} %, the job printed {printed} %")
        for claim in re.findall(r"\| `quick` \|[^\n]*\| ([\d.]+) % \|", readme):
            if claim != printed:
                problems.append(f"the preset table says {claim} %, the job printed {printed} %")
    for p in problems:
        print("README:", p)
    if problems:
        return 1
    print("README: the quick start's sample output and figures match the main job's log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
