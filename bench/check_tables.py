#!/usr/bin/env python3
"""Checks the ratio tables that `ringbench --summary --summary_md=FILE` generated.

usage: check_tables.py FILE...                   every ratio adds up (exit 0) or not (exit 1)
       check_tables.py --update SUMMARY FILE...  put SUMMARY's tables into each FILE first (its
                                                 growth block into each FILE that has one)

A generated block lies between the markers below, each on a line of its own. In it, every table whose header reads
`| ratio | numerator | U | denominator | U | ratio |` lists two values and their ratio per row;
the ratio must be numerator / denominator rounded to two decimals ("1.62x"), or say why there is
none ("not compared (oversubscribed)", "n/a (...)"). A file without a block, or a block without
a single ratio row, fails too: the check must have something to check.

A growth block (between GROWTH_BEGIN and GROWTH_END; optional) holds tables of
`| x | benchmark | value |` rows, each followed by a line `Verdict: WORD (...)`. The verdict must be
the one the rows give (summary_growth.cpp): the least-squares slope of log(cost) against log(x),
cost = value, or 1 / value when the value's header says "higher is better"; "flat" when the fitted
growth (x_last / x_first)^slope is at most 1.5, "linear" when the slope is at most 1.25, "worse"
otherwise, "n/a" with fewer than two values.
"""
import math
import re
import sys

BEGIN = "<!-- ringbench-summary:begin -->"
END = "<!-- ringbench-summary:end -->"
GROWTH_BEGIN = "<!-- ringbench-growth:begin -->"
GROWTH_END = "<!-- ringbench-growth:end -->"
VERDICT = re.compile(r"^Verdict: \*{0,2}(flat|linear|worse|n/a)\b")
RATIO = re.compile(r"^(\d+(?:\.\d+)?)x$")
NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def marker_at(text, marker, start):
    """Offset of the next line that is exactly `marker` (a mention in prose does not count)."""
    m = re.compile(r"^" + re.escape(marker) + r"[ \t]*$", re.M).search(text, start)
    return m.start() if m else -1


def blocks(text, path, begin=BEGIN, end=END):
    out, start = [], 0
    while True:
        b = marker_at(text, begin, start)
        if b < 0:
            return out
        e = marker_at(text, end, b)
        if e < 0:
            raise ValueError(f"{path}: {begin} without {end}")
        out.append((text.count("\n", 0, b) + 1, text[b:e]))
        start = e


def listed_values(block):
    """(benchmark, column) -> value of the tables whose first column is `benchmark`."""
    values, header = {}, None
    for line in block.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        c = cells(line)
        if c and c[0] == "benchmark":
            header = c
            continue
        if header is None or set(line) <= set("|-: ") or len(c) != len(header):
            continue
        for column, value in zip(header[1:], c[1:]):
            values[(c[0].strip("`"), column)] = value
    return values


def check_block(path, first_line, block):
    errors, rows = [], 0
    in_ratio_table = False
    unit = None
    listed = listed_values(block)
    for offset, line in enumerate(block.splitlines()):
        where = f"{path}:{first_line + offset}"
        if not line.startswith("|"):
            in_ratio_table = False
            continue
        c = cells(line)
        if len(c) == 6 and c[0] == "ratio" and c[1] == "numerator" and c[3] == "denominator":
            in_ratio_table = True
            unit = c[2]
            continue
        if not in_ratio_table or set(line) <= set("|-: "):
            continue
        if len(c) == 6:
            # A value quoted in a ratio row is the one the benchmark's own row lists, if any.
            for name_cell, value in ((c[1], c[2]), (c[3], c[4])):
                key = (name_cell.strip("`"), unit)
                if name_cell.startswith("`") and key in listed and listed[key] != value:
                    errors.append(f"{where}: '{c[0]}': {key[0]} is {value} here but "
                                  f"{listed[key]} in its own row")
        if len(c) != 6:
            errors.append(f"{where}: a ratio row needs 6 cells, has {len(c)}: {line}")
            continue
        rows += 1
        what, num, den, ratio = c[0], c[2], c[4], c[5]
        m = RATIO.match(ratio)
        if not m:
            if not (ratio.startswith("not compared") or ratio.startswith("n/a")):
                errors.append(f"{where}: '{what}': ratio '{ratio}' is neither N.NNx nor a reason")
            continue
        if not (NUMBER.match(num) and NUMBER.match(den)) or float(den) == 0:
            errors.append(f"{where}: '{what}': ratio {ratio} but the values are '{num}', '{den}'")
            continue
        expected = float(num) / float(den)
        if abs(float(m.group(1)) - expected) > 0.005 + 1e-9:
            errors.append(f"{where}: '{what}': ratio {ratio} disagrees with {num} / {den} = "
                          f"{expected:.2f}x")
    return rows, errors


def growth_verdict(points, higher_is_better):
    pts = [(math.log(x), math.log(1 / y if higher_is_better else y)) for x, y in points
           if x > 0 and y > 0]
    if len(pts) < 2:
        return "n/a"
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
    growth = math.exp(slope * (pts[-1][0] - pts[0][0]))
    return "flat" if growth <= 1.5 else "linear" if slope <= 1.25 else "worse"


def check_growth_block(path, first_line, block):
    """(tables checked, errors) of one growth block."""
    errors, tables = [], 0
    header, points, higher = None, [], False
    for offset, line in enumerate(block.splitlines()):
        where = f"{path}:{first_line + offset}"
        if line.startswith("|"):
            c = cells(line)
            if set(line) <= set("|-: "):
                continue
            if header is None:
                header, points = c, []
                higher = len(c) == 3 and "higher is better" in c[2]
                continue
            if len(c) != 3 or not NUMBER.match(c[0]):
                errors.append(f"{where}: a growth row needs 3 cells and a number first: {line}")
                continue
            if NUMBER.match(c[2]):
                points.append((float(c[0]), float(c[2])))
            elif not (c[2].startswith("n/a") or c[2].startswith("not compared")):
                errors.append(f"{where}: value '{c[2]}' is neither a number nor a reason")
            continue
        m = VERDICT.match(line)
        if m:
            if header is None:
                errors.append(f"{where}: a verdict without a table")
                continue
            tables += 1
            expected = growth_verdict(points, higher)
            if m.group(1) != expected:
                errors.append(f"{where}: verdict '{m.group(1)}' but the rows give '{expected}'")
            header = None
        elif line.strip() and header is not None and not line.startswith("|"):
            errors.append(f"{where}: a growth table without its verdict line")
            header = None
    if header is not None:
        errors.append(f"{path}: the last growth table has no verdict line")
    if tables == 0:
        errors.append(f"{path}:{first_line}: the growth block holds no table with a verdict")
    return tables, errors


def check(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = blocks(text, path)
    if not found:
        return [f"{path}: no generated table ({BEGIN} ... {END})"]
    errors, rows = [], 0
    for first_line, block in found:
        n, e = check_block(path, first_line, block)
        rows += n
        errors += e
    if rows == 0:
        errors.append(f"{path}: the generated block holds no ratio row")
    for first_line, block in blocks(text, path, GROWTH_BEGIN, GROWTH_END):
        errors += check_growth_block(path, first_line, block)[1]
    return errors


def update(summary_path, paths):
    with open(summary_path, encoding="utf-8") as f:
        summary = f.read()
    found = blocks(summary, summary_path)
    if len(found) != 1:
        raise ValueError(f"{summary_path}: expected one generated block, found {len(found)}")
    new = found[0][1]
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        b = marker_at(text, BEGIN, 0)
        e = marker_at(text, END, b) if b >= 0 else -1
        if b < 0 or e < 0:
            raise ValueError(f"{path}: no {BEGIN} ... {END} to replace")
        if marker_at(text, BEGIN, e) >= 0:
            raise ValueError(f"{path}: more than one generated block")
        text = text[:b] + new + text[e:]
        # The growth block too, into the files that hold one (docs/benchmarks.md; not the README).
        growth = blocks(summary, summary_path, GROWTH_BEGIN, GROWTH_END)
        gb = marker_at(text, GROWTH_BEGIN, 0)
        ge = marker_at(text, GROWTH_END, gb) if gb >= 0 else -1
        if growth and gb >= 0 and ge >= 0:
            text = text[:gb] + growth[0][1] + text[ge:]
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def main(argv):
    args = argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    try:
        if args[0] == "--update":
            if len(args) < 3:
                print("check_tables.py: --update SUMMARY FILE...", file=sys.stderr)
                return 2
            update(args[1], args[2:])
            args = args[2:]
        errors = [e for path in args for e in check(path)]
    except (OSError, ValueError) as e:
        print(f"check_tables.py: {e}", file=sys.stderr)
        return 1
    for e in errors:
        print(e)
    if errors:
        print(f"check_tables.py: {len(errors)} inconsistent entr{'y' if len(errors) == 1 else 'ies'}")
        return 1
    print(f"check_tables.py: every ratio adds up in {', '.join(args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
