#!/usr/bin/python3
"""Plots and report.html of an atoll sweep directory (called by `atoll report` / `atoll sweep`).

    /usr/bin/python3 scripts/report.py sweeps/<name>

Reads the tables `atoll report` writes (summary.csv, aggregate.csv, curves.csv; columns in
src/sweep/results.h) and each run's resolved config (runs/<id>/config.yaml, else
configs/<id>.yaml). Writes:
  plots/loss_vs_steps.png   validation loss vs inner steps
  plots/loss_vs_bytes.png   validation loss vs bytes sent (log scale)
  plots/loss_vs_time.png    validation loss vs simulated time (when the runs recorded it)
  plots/final_bars.png      final validation loss and bytes sent per configuration
  report.html               self-contained: the plots, the tables, each run's config
One line per configuration (the runs that differ only by seed): the mean over its seeds that
have a value, with a band of +-1 standard deviation when there are several.
Needs Debian's python3-matplotlib (scripts/setup.sh installs it).
"""
import base64
import csv
import html
import math
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
except ImportError:
    sys.stderr.write("atoll report: python3-matplotlib is not installed "
                     "(apt-get install python3-matplotlib, or run scripts/setup.sh)\n")
    sys.exit(3)

PLOTS = "plots"


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(text):
    """A table cell as a float; NaN for an empty cell."""
    return float(text) if text not in ("", None) else math.nan


def finite(values):
    return [v for v in values if not math.isnan(v)]


def mean_std(values):
    vals = finite(values)
    if not vals:
        return math.nan, math.nan
    m = sum(vals) / len(vals)
    if len(vals) < 2:
        return m, math.nan
    return m, math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


def human_bytes(b, _pos=None):
    if math.isnan(b):
        return ""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(b) < 1000 or unit == "TB":
            return f"{b:.0f} {unit}" if unit == "B" or b == int(b) else f"{b:.1f} {unit}"
        b /= 1000
    return ""


class Sweep:
    def __init__(self, root):
        self.root = root
        self.name = os.path.basename(os.path.normpath(root))
        self.runs = read_csv(os.path.join(root, "summary.csv"))
        self.aggregate = read_csv(os.path.join(root, "aggregate.csv"))
        self.curves = read_csv(os.path.join(root, "curves.csv"))
        header = list(self.runs[0].keys()) if self.runs else []
        # summary.csv: run, group, seed, status, <swept keys>, steps, metrics...
        self.keys = header[4:header.index("steps")] if "steps" in header else []
        self.groups = []
        for r in self.runs:
            if r["group"] not in self.groups:
                self.groups.append(r["group"])

    def group_runs(self, group):
        return [r for r in self.runs if r["group"] == group]

    def label(self, group):
        """Legend text: the group's values, plus how many of its runs did not end ok."""
        runs = self.group_runs(group)
        bad = {}
        for r in runs:
            if r["status"] != "ok":
                bad[r["status"]] = bad.get(r["status"], 0) + 1
        text = group.replace(",", ", ")
        if bad:
            text += " [" + ", ".join(f"{n}/{len(runs)} {s}" for s, n in sorted(bad.items())) + "]"
        return text

    def curve(self, group, x_field):
        """(x, mean loss, std loss) over the group's seeds.

        Seeds that evaluated at the same x values are averaged point by point. Otherwise (an
        asynchronous schedule that depends on the seed) each seed's loss is interpolated
        linearly onto the union of their x values, within the range they all cover.
        """
        series = {}
        for c in self.curves:
            x = num(c["step"]) if x_field == "step" else num(c[x_field])
            y = num(c["val_loss"])
            if c["group"] == group and not math.isnan(x) and not math.isnan(y):
                series.setdefault(c["run"], []).append((x, y))
        runs = [sorted(points) for points in series.values()]
        if not runs:
            return [], [], []
        if all([x for x, _ in r] == [x for x, _ in runs[0]] for r in runs):
            xs = [x for x, _ in runs[0]]
            columns = [[r[i][1] for r in runs] for i in range(len(xs))]
        else:
            lo, hi = max(r[0][0] for r in runs), min(r[-1][0] for r in runs)
            xs = sorted({x for r in runs for x, _ in r if lo <= x <= hi})
            interpolated = [numpy.interp(xs, [x for x, _ in r], [y for _, y in r]) for r in runs]
            columns = [[float(v[i]) for v in interpolated] for i in range(len(xs))]
        ms, ss = [], []
        for values in columns:
            m, s = mean_std(values)
            ms.append(m)
            ss.append(0.0 if math.isnan(s) else s)
        return xs, ms, ss

    def has(self, field):
        return any(not math.isnan(num(c[field])) for c in self.curves)


def bytes_axis(axis):
    """Log scale in B/kB/MB/GB; 2x and 5x ticks labelled too when the range spans < 2 decades."""
    axis.axes.set_xscale("log")
    axis.set_major_formatter(FuncFormatter(human_bytes))
    lo, hi = axis.axes.get_xlim()
    axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    axis.set_minor_formatter(FuncFormatter(human_bytes) if hi < 100 * lo else NullFormatter())


def colors(n):
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def loss_plot(sweep, x_field, xlabel, title, path, log_x=False):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    drawn = False
    for group, color in zip(sweep.groups, colors(len(sweep.groups))):
        xs, ms, ss = sweep.curve(group, x_field)
        if log_x:  # the first evaluation, before any exchange, sits at 0 bytes
            keep = [i for i, x in enumerate(xs) if x > 0]
            xs, ms, ss = [xs[i] for i in keep], [ms[i] for i in keep], [ss[i] for i in keep]
        if not xs:
            continue
        ax.plot(xs, ms, color=color, marker="o", markersize=3, linewidth=1.6, label=sweep.label(group))
        lo = [m - s for m, s in zip(ms, ss)]
        hi = [m + s for m, s in zip(ms, ss)]
        ax.fill_between(xs, lo, hi, color=color, alpha=0.18, linewidth=0)
        drawn = True
    if log_x:
        bytes_axis(ax.xaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("validation loss (cross-entropy, nats)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    if drawn:
        ax.legend(fontsize=8, loc="upper right", title="configuration (band: ±1 std over seeds)",
                  title_fontsize=8)
    else:
        ax.text(0.5, 0.5, "no evaluations recorded", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bar_plot(sweep, path):
    groups = sweep.groups
    agg = {a["group"]: a for a in sweep.aggregate}
    fig, (ax_loss, ax_bytes) = plt.subplots(1, 2, figsize=(12, max(3.5, 0.45 * len(groups) + 1.5)))
    ys = list(range(len(groups)))
    cs = colors(len(groups))
    for ax, field, xlabel in ((ax_loss, "final_val_loss", "final validation loss (nats), mean ± std over seeds"),
                              (ax_bytes, "bytes_sent", "bytes sent, all islands (log scale), mean over seeds")):
        for y, g, c in zip(ys, groups, cs):
            a = agg.get(g, {})
            m, s = num(a.get(field + "_mean", "")), num(a.get(field + "_std", ""))
            if math.isnan(m):
                states = sorted({r["status"] for r in sweep.group_runs(g)} - {"ok"})
                ax.text(0.02, y, "no ok run: " + ", ".join(states), va="center", color="firebrick",
                        transform=ax.get_yaxis_transform(), fontsize=8)
                continue
            loss = field == "final_val_loss"
            err = s if loss and not math.isnan(s) else 0.0
            ax.barh(y, m, color=c, xerr=err if err else None, capsize=3)
            ax.text(m + err, y, "  " + (f"{m:.4f}" + (f" ± {s:.4f}" if err else "") if loss else human_bytes(m)),
                    va="center", fontsize=8)
        ax.set_xlabel(xlabel)
        ax.set_yticks(ys)
        ax.set_ylim(len(groups) - 0.5, -0.5)  # first configuration on top, every row shown
        ax.grid(True, axis="x", alpha=0.3)
    ax_loss.set_yticklabels([sweep.label(g) for g in groups], fontsize=8)
    ax_bytes.set_yticklabels([])
    sent = finite([num(agg.get(g, {}).get("bytes_sent_mean", "")) for g in groups])
    if sent and min(sent) > 0:  # log-scale bars need a left edge below the smallest
        ax_bytes.set_xlim(left=min(sent) / 4, right=max(sent) * 4)
    bytes_axis(ax_bytes.xaxis)
    ax_loss.set_xlim(right=ax_loss.get_xlim()[1] * 1.25)  # room for the value labels
    fig.suptitle(f"{sweep.name}: final validation loss and bytes sent per configuration")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fmt(value, kind):
    v = num(value)
    if math.isnan(v):
        return ""
    if kind == "bytes":
        return human_bytes(v)
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "s":
        return f"{v:.1f} s"
    return f"{v:.4f}"


METRICS = [("final_val_loss", "final val loss", "loss"), ("best_val_loss", "best val loss", "loss"),
           ("final_val_accuracy", "final accuracy", "loss"), ("best_val_accuracy", "best accuracy", "loss"),
           ("bytes_sent", "bytes sent", "bytes"), ("sim_time_s", "sim time", "s"),
           ("compute_utilization", "compute util.", "pct"), ("time_to_target_s", "time to target", "s"),
           ("wall_time_s", "wall time", "s")]


def used_metrics(rows, suffix=""):
    return [m for m in METRICS if any(r.get(m[0] + suffix, "") != "" for r in rows)]


def table(head, rows, classes=None):
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>")
    return "\n".join(out) + "</table>"


def run_config(sweep, run_id):
    for path in (os.path.join(sweep.root, "runs", run_id, "config.yaml"),
                 os.path.join(sweep.root, "configs", run_id + ".yaml")):
        if os.path.exists(path):
            with open(path) as f:
                return f.read()
    return "(no config found)"


def write_html(sweep, plots, path):
    statuses = {}
    for r in sweep.runs:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>atoll sweep {html.escape(sweep.name)}</title>",
             "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}"
             "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}"
             "td:first-child,th:first-child{text-align:left}"
             "tr.bad td{background:#fde8e8}img{max-width:100%;border:1px solid #ddd;margin:.5em 0}"
             "pre{background:#f6f6f6;padding:.6em;font-size:12px}</style></head><body>",
             f"<h1>Sweep {html.escape(sweep.name)}</h1>",
             f"<p>{len(sweep.runs)} runs, {len(sweep.groups)} configurations: " +
             ", ".join(f"{n} {html.escape(s)}" for s, n in sorted(statuses.items())) +
             f". Swept: {html.escape(', '.join(sweep.keys) or 'seeds only')}.</p>"]
    bad = [r for r in sweep.runs if r["status"] != "ok"]
    if bad:
        parts.append("<h2>Runs that did not end ok</h2><ul>" + "".join(
            f"<li><b>{html.escape(r['run'])}</b>: {html.escape(r['status'])}"
            f"{': ' + html.escape(r['reason']) if r['reason'] else ''}</li>" for r in bad) + "</ul>")
    parts.append("<h2>Plots</h2>")
    for title, file, note in plots:
        with open(file, "rb") as f:
            data = base64.b64encode(f.read()).decode()
        parts.append(f"<h3>{html.escape(title)}</h3><img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>")
        if note:
            parts.append(f"<p><small>{html.escape(note)}</small></p>")
    if not sweep.has("sim_time_s"):
        parts.append("<p>No plot against simulated time: the runs recorded no sim_time_s.</p>")

    metrics = used_metrics(sweep.aggregate, "_mean")
    head = ["configuration"] + sweep.keys + ["runs", "ok"] + [m[1] + " (mean ± std)" for m in metrics]
    rows = []
    for a in sweep.aggregate:
        row = [a["group"]] + [a[k] for k in sweep.keys] + [a["runs"], a["ok"]]
        for field, _, kind in metrics:
            m, s = fmt(a[field + "_mean"], kind), fmt(a[field + "_std"], kind)
            row.append(m + (" ± " + s if s else ""))
        rows.append(row)
    parts.append("<h2>Configurations (aggregated over seeds)</h2>" + table(head, rows))

    metrics = used_metrics(sweep.runs)
    head = ["run", "status"] + sweep.keys + ["seed", "steps"] + [m[1] for m in metrics]
    rows = [[r["run"], r["status"]] + [r[k] for k in sweep.keys] + [r["seed"], r["steps"]] +
            [fmt(r[field], kind) for field, _, kind in metrics] for r in sweep.runs]
    parts.append("<h2>Runs</h2>" + table(head, rows, ["" if r["status"] == "ok" else "bad" for r in sweep.runs]))

    parts.append("<h2>Config of each run</h2>")
    for r in sweep.runs:
        parts.append(f"<details><summary>{html.escape(r['run'])} ({html.escape(r['status'])}, "
                     f"config {html.escape(r['config_hash'])})</summary><pre>"
                     f"{html.escape(run_config(sweep, r['run']))}</pre></details>")
    parts.append("<p>Tables: summary.csv, aggregate.csv, curves.csv next to this file.</p></body></html>")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(parts))
    os.replace(path + ".tmp", path)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: report.py SWEEP_DIR\n")
        return 2
    sweep = Sweep(sys.argv[1])
    os.makedirs(os.path.join(sweep.root, PLOTS), exist_ok=True)
    plots = []

    def plot(name, title, draw, note=""):
        file = os.path.join(sweep.root, PLOTS, name)
        draw(file)
        plots.append((title, file, note))

    plot("loss_vs_steps.png", "Validation loss vs inner steps",
         lambda f: loss_plot(sweep, "step", "inner steps (per island)",
                             f"{sweep.name}: validation loss vs inner steps", f),
         "x is the step of each evaluation record: inner steps per island for the synchronous "
         "algorithms (FedAvg: rounds x local steps); async_local_sgd counts the local steps the "
         "server has applied, summed over islands.")
    plot("loss_vs_bytes.png", "Validation loss vs bytes sent",
         lambda f: loss_plot(sweep, "bytes_sent", "bytes sent, all islands (log scale)",
                             f"{sweep.name}: validation loss vs bytes sent", f, log_x=True))
    if sweep.has("sim_time_s"):
        plot("loss_vs_time.png", "Validation loss vs simulated time",
             lambda f: loss_plot(sweep, "sim_time_s", "simulated time (s)",
                                 f"{sweep.name}: validation loss vs simulated time", f))
    plot("final_bars.png", "Final loss and bytes per configuration", lambda f: bar_plot(sweep, f))
    write_html(sweep, plots, os.path.join(sweep.root, "report.html"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
