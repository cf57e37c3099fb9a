#!/usr/bin/env python3
"""Renders deploy/grafana/switchyard.json to a PNG from a live Prometheus, without Grafana.

Each panel's queries run through Prometheus's `query_range` API over the last `--minutes`, with
the dashboard's variables filled in (`$instance` = every replica, `$__rate_interval` = four
scrape intervals), and are drawn where the panel's `gridPos` puts them on Grafana's 24-column
grid: rows as headings, time series as lines with the panel's legend format, stat panels as
their last value. Used by scripts/dashboard-snapshot.sh for docs/img/dashboard.png.

Usage: render_dashboard.py --prometheus http://127.0.0.1:9090 --out docs/img/dashboard.png
"""

import argparse
import json
import re
import sys
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from datetime import datetime  # noqa: E402

BACKGROUND = "#111217"
PANEL = "#181b1f"
TEXT = "#ccccdc"
GRID = "#2c3235"
PALETTE = ["#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9",
           "#8ab8ff", "#ffb357", "#96d98d", "#ca95e5"]
UNIT_SCALE = {"percentunit": (100.0, "%"), "s": (1.0, "s"), "reqps": (1.0, "/s")}


def query_range(base, expr, start, end, step):
    params = urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{params}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"query failed: {expr}: {body}")
    return body["data"]["result"]


def legend(fmt, metric):
    if not fmt:
        labels = ",".join(f"{k}={v}" for k, v in sorted(metric.items()))
        return labels or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)


def fill(expr, rate_interval):
    return expr.replace("$__rate_interval", rate_interval).replace("$instance", ".*")


def draw_timeseries(ax, panel, series, unit):
    scale, suffix = UNIT_SCALE.get(unit, (1.0, ""))
    colour = 0
    for label, points in series:
        if not points:
            continue
        xs = [datetime.fromtimestamp(float(t)) for t, _ in points]
        ys = [float(v) * scale if v not in ("NaN", "+Inf", "-Inf") else float("nan")
              for _, v in points]
        ax.plot(xs, ys, linewidth=1.1, color=PALETTE[colour % len(PALETTE)], label=label)
        colour += 1
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=5))
    ax.grid(color=GRID, linewidth=0.5)
    if suffix:
        ax.yaxis.set_major_formatter(
            matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}{suffix}"))
    if colour == 0:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(0.5, 0.5, "No data", color=TEXT, ha="center", va="center",
                transform=ax.transAxes, fontsize=9)
    elif colour <= 8:
        ax.legend(loc="upper left", fontsize=5.5, frameon=False, labelcolor=TEXT,
                  ncol=2 if colour > 4 else 1)


def draw_stat(ax, series):
    ax.set_xticks([])
    ax.set_yticks([])
    values = [f"{label}: {float(points[-1][1]):g}" for label, points in series if points]
    text = "\n".join(values) if values else "No data"
    ax.text(0.5, 0.5, text, color="#73bf69", ha="center", va="center",
            transform=ax.transAxes, fontsize=9, fontweight="bold")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dashboard", default="deploy/grafana/switchyard.json")
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--step", type=float, default=5.0)
    parser.add_argument("--rate-interval", default="20s")
    parser.add_argument("--out", default="docs/img/dashboard.png")
    parser.add_argument("--subtitle", default="")
    args = parser.parse_args()

    with open(args.dashboard, encoding="utf-8") as f:
        dashboard = json.load(f)
    end = time.time()
    start = end - args.minutes * 60.0
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)

    unit_px = 0.42  # inches per grid row
    width_in = 24 * 0.9
    height_in = rows * unit_px + 1.0
    fig = plt.figure(figsize=(width_in, height_in), dpi=100, facecolor=BACKGROUND)
    fig.text(0.01, 1 - 0.35 / height_in, dashboard.get("title", "dashboard"), color=TEXT,
             fontsize=14, fontweight="bold", va="top")
    fig.text(0.99, 1 - 0.35 / height_in, args.subtitle, color=TEXT, fontsize=9, va="top",
             ha="right")
    top = 1 - 0.8 / height_in
    cell_h = (top - 0.01) / rows
    empty = []
    for panel in panels:
        pos = panel["gridPos"]
        x0 = 0.01 + 0.98 * pos["x"] / 24
        w = 0.98 * pos["w"] / 24
        y_top = top - pos["y"] * cell_h
        if panel["type"] == "row":
            fig.text(x0, y_top - cell_h * 0.5, panel["title"], color=TEXT, fontsize=11,
                     fontweight="bold", va="center")
            continue
        h = pos["h"] * cell_h
        ax = fig.add_axes([x0 + 0.004, y_top - h + 0.012, w - 0.012, h - 0.03],
                          facecolor=PANEL)
        for spine in ax.spines.values():
            spine.set_color(GRID)
        ax.tick_params(colors=TEXT, labelsize=6)
        ax.set_title(panel["title"], color=TEXT, fontsize=8, loc="left")
        series = []
        for target in panel.get("targets", []):
            expr = fill(target["expr"], args.rate_interval)
            for result in query_range(args.prometheus, expr, start, end, args.step):
                series.append((legend(target.get("legendFormat"), result["metric"]),
                               result["values"]))
        if not any(points for _, points in series):
            empty.append(panel["title"])
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        if panel["type"] == "stat":
            draw_stat(ax, series)
        else:
            draw_timeseries(ax, panel, series, unit)
    fig.savefig(args.out, facecolor=BACKGROUND)
    print(f"render_dashboard: wrote {args.out} ({len(panels)} panels; "
          f"{len(empty)} without data: {', '.join(empty) or 'none'})")


if __name__ == "__main__":
    sys.exit(main())
