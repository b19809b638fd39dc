#!/usr/bin/env python3
"""Draws one training step of a cppgrad trace (runtime/profile.h) as an SVG picture.

    scripts/trace_svg.py step.trace.json docs/img/trace_step.svg [--step "step 3"]

A lane per thread (the main thread first, then cppgrad's workers), the spans nested inside it as
rows (the step, a backward function, the kernels it called), each kernel coloured by its name
(the kinds with the most time get their own colours, the rest share grey), a time axis in ms,
and a legend with each coloured kind's share of the step. Reads the trace-event JSON only: what
ui.perfetto.dev shows, drawn without a browser (docs/profiling.md).
"""
import argparse
import json
import math
import sys
from collections import defaultdict
from xml.sax.saxutils import escape

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#86bcb6"]
OTHER = "#e3d3b5"  # the kernels without a colour of their own
BACKWARD = "#ffffff"  # a backward function of the engine: outlined, its kernels inside it
PHASE = "#9a9a9a"  # the step, and spans a program marks itself
WIDTH, LEFT, RIGHT = 1200, 150, 20
ROW, LANE_GAP = 18, 14


def load(path):
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    names, spans = {}, defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
            spans[e["tid"]].append(e)
    return names, spans


def pick_step(spans, wanted):
    steps = [e for lane in spans.values() for e in lane if e.get("cat") == "step"]
    if not steps:
        sys.exit("trace_svg: the trace has no span of category 'step' (a training program's --trace writes them)")
    if wanted is None:
        return steps[len(steps) // 2]  # a middle one: neither the first nor the last of the traced steps
    for e in steps:
        if e["name"] == wanted:
            return e
    sys.exit(f"trace_svg: no step span named {wanted!r}; the trace has {', '.join(e['name'] for e in steps)}")


def rows_of(lane):
    """Each span's depth within its lane: spans sorted by start, outer ones first."""
    lane = sorted(lane, key=lambda e: (e["ts"], -e["dur"]))
    open_ends, placed = [], []
    for e in lane:
        while open_ends and e["ts"] >= open_ends[-1]:
            open_ends.pop()
        placed.append((len(open_ends), e))
        open_ends.append(e["ts"] + e["dur"])
    return placed


def nice_step(span):
    """A tick spacing of 1, 2 or 5 times a power of ten giving about 8 ticks over `span`."""
    raw = span / 8
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def self_times(lane):
    """Each kernel's exclusive time in the lane: its span less the kernel spans directly inside."""
    totals = defaultdict(float)
    stack = []
    for _, e in rows_of(lane):
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
            stack.pop()
        if e.get("cat", "").startswith("kernel"):
            totals[e["name"]] += e["dur"]
            for outer in reversed(stack):
                if outer.get("cat", "").startswith("kernel"):
                    totals[outer["name"]] -= e["dur"]
                    break
        stack.append(e)
    return totals


def draw(names, spans, step, title):
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    scale = (WIDTH - LEFT - RIGHT) / (t1 - t0)
    x = lambda t: LEFT + (t - t0) * scale

    # Only what falls inside the step; the main thread first, then the others by id.
    main = step_tid = next(tid for tid, lane in spans.items() if step in lane)
    lanes = [(tid, [e for e in spans[tid] if e["ts"] >= t0 and e["ts"] + e["dur"] <= t1])
             for tid in [main] + sorted(t for t in spans if t != main)]
    lanes = [(tid, lane) for tid, lane in lanes if lane]

    totals = self_times(lanes[0][1])
    kinds = sorted(totals, key=totals.get, reverse=True)[:len(PALETTE)]
    colour = {name: PALETTE[i] for i, name in enumerate(kinds)}

    out, y = [], 64
    for tid, lane in lanes:
        placed = rows_of(lane)
        depth = max(d for d, _ in placed) + 1
        height = depth * ROW
        out.append(f'<rect x="{LEFT}" y="{y}" width="{WIDTH - LEFT - RIGHT}" height="{height}" fill="#f7f7f7"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + 13}" text-anchor="end" font-size="12">{escape(names.get(tid, str(tid)))}</text>')
        for d, e in placed:
            cat = e.get("cat", "")
            if cat.startswith("kernel") or cat == "worker":
                fill = colour.get(e["name"], OTHER)
            elif cat == "backward":
                fill = BACKWARD
            else:
                fill = PHASE
            left, w = x(e["ts"]), max(e["dur"] * scale, 0.5)
            tip = f'{e["name"]} ({cat}) {e["dur"] / 1000:.3f} ms'
            if "args" in e and "inputs" in e["args"]:
                tip += " · " + e["args"]["inputs"]
            out.append(f'<rect x="{left:.2f}" y="{y + d * ROW + 1}" width="{w:.2f}" height="{ROW - 2}" fill="{fill}"'
                       + (' stroke="#808080" stroke-width="0.8">' if cat == "backward" else '>')
                       + f'<title>{escape(tip)}</title></rect>')
            label = e["name"]
            if w > 7 * len(label) + 6:  # the name only where it fits
                out.append(f'<text x="{left + 3:.2f}" y="{y + d * ROW + 13}" font-size="11" fill="#202020">{escape(label)}</text>')
        y += height + LANE_GAP

    # The time axis, in ms from the step's start.
    tick = nice_step((t1 - t0) / 1000)
    out.append(f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}" stroke="#404040"/>')
    k = 0
    while k * tick <= (t1 - t0) / 1000 + 1e-9:
        tx = x(t0 + k * tick * 1000)
        out.append(f'<line x1="{tx:.2f}" y1="{y}" x2="{tx:.2f}" y2="{y + 5}" stroke="#404040"/>')
        out.append(f'<text x="{tx:.2f}" y="{y + 18}" text-anchor="middle" font-size="11">{k * tick:g}</text>')
        k += 1
    out.append(f'<text x="{LEFT - 8}" y="{y + 18}" text-anchor="end" font-size="11">ms</text>')
    y += 36

    # The legend: each coloured kind with its share of the step (the main thread's exclusive time).
    per_row = 4
    others = sum(v for k, v in totals.items() if k not in colour)
    entries = [(colour[k], f"{k} {100 * totals[k] / (t1 - t0):.1f}%") for k in kinds]
    entries += [(OTHER, f"other kernels {100 * others / (t1 - t0):.1f}%"), (BACKWARD, "a backward function"),
                (PHASE, "the step")]
    for i, (fill, text) in enumerate(entries):
        lx, ly = LEFT + (i % per_row) * 260, y + (i // per_row) * 20
        out.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{fill}" stroke="#808080" stroke-width="0.5"/>')
        out.append(f'<text x="{lx + 18}" y="{ly + 11}" font-size="12">{escape(text)}</text>')
    y += 20 * math.ceil(len(entries) / per_row) + 10

    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y}" viewBox="0 0 {WIDTH} {y}" '
            f'font-family="DejaVu Sans, sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
            f'<text x="{LEFT}" y="24" font-size="15">{escape(title)}</text>\n'
            f'<text x="{LEFT}" y="40" font-size="11" fill="#505050">{escape(step["name"])}: {step["dur"] / 1000:.1f} ms. '
            f'The main thread\'s spans nest downwards (step, backward function, kernel, the kernel it called);</text>\n'
            f'<text x="{LEFT}" y="54" font-size="11" fill="#505050">a worker\'s lane holds its shares of parallel loops, coloured as their kernel; legend: each kernel\'s own share of the step</text>\n')
    return head + "\n".join(out) + "\n</svg>\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="a trace written by profile::write_trace or --trace")
    parser.add_argument("svg", help="the picture to write")
    parser.add_argument("--step", help='the step span to draw ("step 3"; default: the middle one traced)')
    parser.add_argument("--title", default="One training step, as cppgrad's trace records it")
    args = parser.parse_args()
    names, spans = load(args.trace)
    svg = draw(names, spans, pick_step(spans, args.step), args.title)
    with open(args.svg, "w", encoding="utf-8") as f:
        f.write(svg)


if __name__ == "__main__":
    main()
