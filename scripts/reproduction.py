#!/usr/bin/env python3
"""Writes one section's generated part of docs/reproductions.md from a finished sweep.

    scripts/reproduction.py NAME SWEEP_DIR DOC

NAME is the comparison (configs/sweeps/paper-NAME.yaml), SWEEP_DIR its sweep directory
(sweeps/paper-NAME, with the tables `atoll sweep` / `atoll report` write), DOC the document.
The text between the lines `<!-- reproduce:NAME -->` and `<!-- /reproduce:NAME -->` is
replaced with:

- the table of every configuration: its swept values, how many seeds ended ok, the final
  validation loss and accuracy as mean +- sample std over the seeds, the bytes sent, and,
  where the section asks for them, the difference to a baseline configuration and the
  step (or round) at which each seed first reached train.target_loss;
- where the section names a key to tune (the papers report each setting at its best value
  of it), a second table with the best value of that key per setting;
- the plots of `atoll report` (loss against steps, final losses; against simulated time
  where the section says so), copied to docs/reproductions/NAME/.

The prose around the markers (the paper's claim, its numbers, the verdict) is written by
hand and left alone. Run by scripts/reproduce.sh; the standard library only.
"""
import csv
import math
import os
import re
import shutil
import sys

# What each section adds to the generic table. baseline: the group every other is compared
# with; tune: the swept key the paper tunes per setting (best final loss chosen per value of
# the other keys); rounds: the key whose value divides a step into rounds (FedAvg counts
# rounds, its curves count local steps); target: show the step (or round) of each seed
# first at or below train.target_loss; time: the comparison is against simulated time
# (plots/loss_vs_time.png is shown too).
SECTIONS = {
    "diloco-scaling": {"baseline": "algorithm=ddp", "tune": "algorithm.outer_lr"},
    "diloco": {"baseline": "algorithm=ddp"},
    "streaming": {"baseline": "algorithm=diloco"},
    "async": {"baseline": "algorithm=diloco", "time": True},
    "demo": {"baseline": "algorithm=ddp"},
    "fedavg": {"target": True, "rounds": "algorithm.local_steps"},
}


def read_csv(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        raise SystemExit(f"reproduction.py: cannot read {path} ({e.strerror}): run `atoll sweep` or `atoll report` first")


def number(text):
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def mean_std(row, metric, digits):
    m, s = number(row.get(metric + "_mean")), number(row.get(metric + "_std"))
    if m is None:
        return "—"
    return f"{m:.{digits}f}" + (f" ± {s:.{digits}f}" if s is not None else "")


def human_bytes(v):
    if v is None:
        return "—"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v:.0f} B"


def target_of(sweep_dir, run_id):
    """train.target_loss of a run, from the resolved config the sweep started it from."""
    try:
        with open(os.path.join(sweep_dir, "configs", run_id + ".yaml")) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^\s*target_loss:\s*([^\s#]+)", text, re.M)
    return number(m.group(1)) if m else None


def first_reached(curves, run_id, target):
    """First evaluation step of the run at or below the target, or None."""
    for c in curves:
        if c["run"] == run_id:
            loss = number(c["val_loss"])
            if loss is not None and loss <= target:
                return int(float(c["step"]))
    return None


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def generate(name, sweep_dir, doc_dir):
    opts = SECTIONS.get(name, {})
    aggregate = read_csv(os.path.join(sweep_dir, "aggregate.csv"))
    summary = read_csv(os.path.join(sweep_dir, "summary.csv"))
    curves = read_csv(os.path.join(sweep_dir, "curves.csv"))
    if not aggregate:
        raise SystemExit(f"reproduction.py: {sweep_dir}/aggregate.csv has no configurations")
    cols = list(aggregate[0].keys())
    keys = cols[1:cols.index("runs")]
    classifier = any(number(r.get("final_val_accuracy_mean")) is not None for r in aggregate)
    base = next((r for r in aggregate if r["group"] == opts.get("baseline")), None)
    base_loss = number(base["final_val_loss_mean"]) if base else None

    header = keys + ["seeds ok", "final val loss"]
    header += ["final accuracy"] if classifier else []
    header += [f"vs {opts['baseline']}"] if base else []
    header += ["bytes sent"]
    target = None
    if opts.get("target"):
        target = next((t for t in (target_of(sweep_dir, s["run"]) for s in summary) if t is not None), None)
        if target is not None:
            header += [("round" if opts.get("rounds") else "step") + f" at val loss ≤ {target:g} (per seed)"]
    rows = []
    for r in aggregate:
        row = [r[k] if r[k] else "·" for k in keys]
        row += [f"{r['ok']}/{r['runs']}", mean_std(r, "final_val_loss", 4)]
        if classifier:
            row.append(mean_std(r, "final_val_accuracy", 3))
        if base:
            loss = number(r["final_val_loss_mean"])
            row.append("—" if loss is None or not base_loss else f"{100 * (loss / base_loss - 1):+.1f} %")
        row.append(human_bytes(number(r["bytes_sent_mean"])))
        if target is not None:
            per_seed = []
            for s in sorted((s for s in summary if s["group"] == r["group"]), key=lambda s: int(s["seed"])):
                step = first_reached(curves, s["run"], target)
                if step is not None and opts.get("rounds"):
                    step //= int(float(s[opts["rounds"]] or 1))
                per_seed.append("—" if step is None else str(step))
            row.append(", ".join(per_seed))
        rows.append(row)

    wall = sum(number(s["wall_time_s"]) or 0 for s in summary)
    ok = sum(s["status"] == "ok" for s in summary)
    out = [f"Generated by `scripts/reproduce.sh {name}` from `sweeps/paper-{name}/` ({ok} of "
           f"{len(summary)} runs ok, {wall / 60:.1f} run-minutes). Mean ± sample std over the seeds; "
           "· = a key the configuration does not sweep.", "", table(header, rows)]

    tune = opts.get("tune")
    if tune and tune in keys:
        others = [k for k in keys if k != tune]
        best = {}
        for r in aggregate:
            loss = number(r["final_val_loss_mean"])
            if loss is None or not r[tune]:
                continue
            setting = tuple(r[k] for k in others)
            if setting not in best or loss < number(best[setting]["final_val_loss_mean"]):
                best[setting] = r
        rows = []
        for setting, r in best.items():
            row = [v if v else "·" for v in setting] + [r[tune], mean_std(r, "final_val_loss", 4)]
            if base:
                row.append(f"{100 * (number(r['final_val_loss_mean']) / base_loss - 1):+.1f} %")
            rows.append(row)
        header = others + [f"best {tune}", "final val loss"] + ([f"vs {opts['baseline']}"] if base else [])
        out += ["", f"Each setting at its best `{tune}` (lowest mean final validation loss):", "",
                table(header, rows)]

    plots = os.path.join(sweep_dir, "plots")
    dest = os.path.join(doc_dir, "reproductions", name)
    shown = []
    for plot in ("loss_vs_steps.png",) + (("loss_vs_time.png",) if opts.get("time") else ()) + ("final_bars.png",):
        if os.path.exists(os.path.join(plots, plot)):
            os.makedirs(dest, exist_ok=True)
            shutil.copyfile(os.path.join(plots, plot), os.path.join(dest, plot))
            shown.append(f"![{plot[:-4]}](reproductions/{name}/{plot})")
    if shown:
        out += ["", " ".join(shown)]
    return "\n".join(out)


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__.strip().splitlines()[2].strip())
    name, sweep_dir, doc = sys.argv[1:]
    with open(doc) as f:
        text = f.read()
    begin, end = f"<!-- reproduce:{name} -->", f"<!-- /reproduce:{name} -->"
    if begin not in text or end not in text:
        raise SystemExit(f"reproduction.py: {doc} has no '{begin}' ... '{end}' block for {name}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    body = generate(name, sweep_dir, os.path.dirname(os.path.abspath(doc)))
    with open(doc + ".tmp", "w") as f:
        f.write(head + begin + "\n" + body + "\n" + end + tail)
    os.replace(doc + ".tmp", doc)
    print(f"{doc}: section {name} regenerated from {sweep_dir}")


if __name__ == "__main__":
    main()
