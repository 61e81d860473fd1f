#!/usr/bin/env python3
"""Figures of `ssmstate serve`, drawn from its --json output with matplotlib.

Usage:

    ssmstate serve examples/serve-tiny.ini --json serve.json
    python3 bench/plot_serve.py serve.json                 # writes serve.png
    python3 bench/plot_serve.py a.json b.json --svg        # a.png, a.svg, b.png, b.svg
    python3 bench/plot_serve.py a.json b.json -o all.png   # every table of both, one figure
    python3 bench/plot_serve.py serve.json --metric p99_ms --out-dir figures

Each JSON file becomes one figure (next to it, or in --out-dir; FILE.json gives FILE.png),
or with -o every file's tables go into one figure. A figure holds one chart per table of
the document (a config at a state dtype): a row per config, a column per state dtype. A chart
draws the metric (by default output tokens/s, from 0 up) against the concurrency cap (log 2
scale, ticks at powers of two), one line with markers per mode, a legend naming each mode
and how many requests its state budget holds, and a title naming the config, the model, its
layers, the state dtype and the device, with the budget and the activation dtype below.
--svg also writes an SVG beside each PNG. Files are the same for the same input (no dates).

Exit status: 0 when every figure was written; 2, with one line on stderr, when matplotlib
cannot be imported (Debian: python3-matplotlib), an input is not the JSON `ssmstate serve
--json` writes, there is nothing to draw, or a figure cannot be written. matplotlib is needed
only here: never to build, test or use the library or the command.
"""

import argparse
import json
import math
import os
import sys

PROG = "plot_serve.py"

# --metric: the point's key and the y axis label, with its unit; every y axis starts at 0.
METRICS = {
    "tokens_per_second": "output tokens/s",
    "p50_ms": "p50 step time (ms)",
    "p99_ms": "p99 step time (ms)",
    "device_p50_ms": "p50 device time of a step (ms)",
    "folds_per_second": "replay's folds/s",
    "mean_rows": "MTP rows per step",
}

# The built-in modes keep their colour and marker in every chart; others follow.
KNOWN_MODES = ("native", "compact", "replay")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

PANEL_INCHES = (6.4, 4.2)


class InputError(Exception):
    """Why an input cannot be drawn; printed as one line."""


def fail(message):
    """One line on stderr, exit 2."""
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(2)


def require(condition, path, what):
    if not condition:
        raise InputError(f"{path}: not the JSON of `ssmstate serve --json` ({what})")


def load_document(path, metric):
    """The document of one serve --json file, checked for what the figures read."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not the JSON of `ssmstate serve --json` "
                         f"(not JSON: {str(e).splitlines()[0]})") from None
    require(isinstance(doc, dict), path, "not a JSON object")
    require(doc.get("command") == "serve", path, 'no "command":"serve"')
    tables = doc.get("tables")
    require(isinstance(tables, list), path, 'no "tables" list')
    for i, t in enumerate(tables):
        where = f"table {i}"
        require(isinstance(t, dict), path, f"{where} is not an object")
        for key in ("config", "model", "state", "device"):
            require(isinstance(t.get(key), str), path, f'{where} has no "{key}" string')
        require(isinstance(t.get("layers"), int), path, f'{where} has no "layers" number')
        require(isinstance(t.get("modes"), list), path, f'{where} has no "modes" list')
        for m in t["modes"]:
            require(isinstance(m, dict) and isinstance(m.get("mode"), str), path,
                    f'{where}: a mode without a "mode" name')
            require(isinstance(m.get("points"), list), path,
                    f'{where}, mode {m["mode"]}: no "points" list')
            for p in m["points"]:
                require(isinstance(p, dict) and isinstance(p.get("concurrency"), int), path,
                        f'{where}, mode {m["mode"]}: a point without "concurrency"')
                require(metric in p, path, f'{where}, mode {m["mode"]}: a point without "{metric}"')
                v = p[metric]
                require(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
                        path, f'{where}, mode {m["mode"]}: "{metric}" is not a number')
    return doc


def size_text(n):
    """Bytes in powers of 1024, as the command prints them."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


def number_text(v):
    """A tick label: integers with thousands separators up to 99,999, then k and M."""
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g}M"
    if abs(v) >= 1e5:
        return f"{v / 1e3:.3g}k"
    if v == math.floor(v):
        return f"{v:,.0f}"
    return f"{v:.3g}"


def panel_title(table, source):
    line1 = (f"{os.path.basename(table['config'])}: {table['model']} x{table['layers']} layers, "
             f"{table['state']} state, {table['device']}")
    details = []
    if isinstance(table.get("budget_bytes"), int):
        details.append(f"state budget {size_text(table['budget_bytes'])}")
    if isinstance(table.get("activation"), str):
        details.append(f"{table['activation']} activations")
    if source:
        details.append(source)
    return line1 + ("\n" + ", ".join(details) if details else "")


def figure_title(doc):
    """The run's options, for a figure of one document."""
    o = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    parts = [f"ssmstate serve {doc.get('version', '')}".rstrip()]
    if "seed" in o:
        parts.append(f"seed {o['seed']}")
    if isinstance(o.get("accept"), (int, float)):
        parts.append(f"acceptance {o['accept']:.2g}")
    if "prompt_min" in o and "prompt_max" in o:
        parts.append(f"prompts {o['prompt_min']}..{o['prompt_max']}")
    if "output_min" in o and "output_max" in o:
        parts.append(f"outputs {o['output_min']}..{o['output_max']}")
    if "chunk" in o:
        parts.append(f"prefill {o['chunk']} tokens/step")
    if "steps" in o:
        parts.append(f"{o['steps']} measured steps a level")
    text = parts[0] + ": " + ", ".join(parts[1:]) if len(parts) > 1 else parts[0]
    if doc.get("interrupted"):
        text += " (interrupted: what was measured until then)"
    return text


def mode_style(name, others):
    """(colour, marker) of a mode: the built-in ones fixed, the rest in order seen."""
    if name in KNOWN_MODES:
        i = KNOWN_MODES.index(name)
    else:
        if name not in others:
            others.append(name)
        i = len(KNOWN_MODES) + others.index(name)
    return f"C{i % 10}", MARKERS[i % len(MARKERS)]


def draw_panel(ax, table, metric, source, others):
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    xs_all, ys_all = [], []
    for m in table["modes"]:
        points = sorted(m["points"], key=lambda p: p["concurrency"])
        xs = [p["concurrency"] for p in points]
        ys = [p[metric] if p[metric] is not None and math.isfinite(p[metric]) else math.nan
              for p in points]
        label = m["mode"]
        holds = m.get("max_concurrent")
        if m.get("error"):
            label += " (not run)"
        elif isinstance(holds, int):
            label += f" (budget holds {holds:,})"
        colour, marker = mode_style(m["mode"], others)
        ax.plot(xs, ys, color=colour, marker=marker, markersize=5, linewidth=1.8, label=label)
        xs_all += [x for x in xs if x > 0]
        ys_all += [y for y in ys if not math.isnan(y)]

    ax.set_xscale("log", base=2)
    if xs_all:
        lo, hi = math.floor(math.log2(min(xs_all))), math.ceil(math.log2(max(xs_all)))
    else:
        lo, hi = 0, 1
    step = 1
    while (hi - lo) / step > 12:
        step *= 2
    ticks = [2.0 ** e for e in range(lo, hi + 1, step)]
    left, right = (lo - 0.5, hi + 0.5) if hi == lo else (lo - 0.1, hi + 0.1)
    ax.set_xlim(2.0 ** left, 2.0 ** right)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}" if v >= 1 else f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: number_text(v)))
    ax.set_ylim(0, max(ys_all) * 1.05 if ys_all and max(ys_all) > 0 else 1.0)
    if not ys_all:
        ax.text(0.5, 0.5, f"no {metric} in this table", transform=ax.transAxes,
                ha="center", va="center", color="0.4")
    ax.grid(True, color="0.87", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.set_xlabel("concurrent requests (cap; log scale)")
    ax.set_ylabel(METRICS[metric])
    ax.set_title(panel_title(table, source), fontsize=9.5)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8.5, frameon=True,
              title="mode", title_fontsize=8.5)


def draw_figure(entries, metric, title):
    """entries: (table, source label or "") in document order. Returns the figure."""
    from matplotlib.figure import Figure

    # A row per (source, config), a column per state dtype; a config given twice
    # (the same file twice on serve's command line) takes a row of its own.
    columns = []
    for table, _ in entries:
        if table["state"] not in columns:
            columns.append(table["state"])
    rows, cells, used = [], [], set()
    for table, source in entries:
        c = columns.index(table["state"])
        k = 0
        while (source, table["config"], k) in rows and \
                (rows.index((source, table["config"], k)), c) in used:
            k += 1
        if (source, table["config"], k) not in rows:
            rows.append((source, table["config"], k))
        cell = (rows.index((source, table["config"], k)), c)
        used.add(cell)
        cells.append((cell, table, source))
    fig = Figure(figsize=(PANEL_INCHES[0] * len(columns), PANEL_INCHES[1] * len(rows)),
                 layout="constrained")
    axes = fig.subplots(len(rows), len(columns), squeeze=False)
    others = []
    for (r, c), table, source in cells:
        draw_panel(axes[r][c], table, metric, source, others)
    for r in range(len(rows)):
        for c in range(len(columns)):
            if (r, c) not in used:
                axes[r][c].set_axis_off()
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def save(fig, path, svg):
    """Writes path (PNG) and, when asked, the SVG beside it; returns the paths."""
    written = [path]
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
    if svg:
        svg_path = os.path.splitext(path)[0] + ".svg"
        fig.savefig(svg_path, format="svg", metadata={"Date": None, "Creator": None})
        written.append(svg_path)
    return written


def output_path(json_path, out_dir):
    stem = os.path.basename(json_path)
    if stem.endswith(".json"):
        stem = stem[: -len(".json")]
    return os.path.join(out_dir if out_dir else os.path.dirname(json_path), stem + ".png")


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog=PROG, description="Draws the figures of `ssmstate serve --json` files (PNG, "
        "and SVG with --svg) with matplotlib: the metric against the concurrency cap, a "
        "line per mode, a chart per config and state dtype.")
    parser.add_argument("inputs", nargs="+", metavar="JSON", help="files from serve --json")
    parser.add_argument("-o", "--output", metavar="FILE.png",
                        help="one figure of every input's tables (default: FILE.png per "
                        "FILE.json)")
    parser.add_argument("--out-dir", metavar="DIR",
                        help="where the per-input figures go (default: beside each input)")
    parser.add_argument("--svg", action="store_true", help="also write an SVG beside each PNG")
    parser.add_argument("--metric", choices=sorted(METRICS), default="tokens_per_second",
                        help="what the y axis shows (default tokens_per_second)")
    args = parser.parse_args(argv)
    if args.output and args.out_dir:
        parser.error("-o and --out-dir exclude each other")
    return args


def main(argv=None):
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        matplotlib.rcParams["svg.hashsalt"] = "ssmstate"
        from matplotlib.figure import Figure  # noqa: F401 (fails early where it is broken)
    except ImportError as e:
        fail(f"cannot import matplotlib ({e}); install it (Debian: apt-get install "
             "python3-matplotlib)")
    try:
        docs = [(path, load_document(path, args.metric)) for path in args.inputs]
        for path, doc in docs:
            if not doc["tables"]:
                raise InputError(f"{path}: no tables: nothing to draw")
        jobs = []  # (png path, entries, figure title)
        if args.output:
            several = len(docs) > 1
            entries = [(t, os.path.basename(path) if several else "")
                       for path, doc in docs for t in doc["tables"]]
            jobs.append((args.output, entries, None if several else figure_title(docs[0][1])))
        else:
            if args.out_dir:
                try:
                    os.makedirs(args.out_dir, exist_ok=True)
                except OSError as e:
                    raise InputError(f"{args.out_dir}: cannot create: {e.strerror or e}") from None
            for path, doc in docs:
                jobs.append((output_path(path, args.out_dir), [(t, "") for t in doc["tables"]],
                             figure_title(doc)))
        figures = [(png, draw_figure(entries, args.metric, title)) for png, entries, title in jobs]
    except InputError as e:
        fail(str(e))
    for png, fig in figures:
        try:
            for written in save(fig, png, args.svg):
                print(written)
        except OSError as e:
            fail(f"{e.filename or png}: cannot write: {e.strerror or e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
