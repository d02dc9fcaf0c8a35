"""The paper's stage-by-stage comparison over training runs, one run per seed (evaluate.py --runs).

    python crl.py --config smol --seed 0 --out out/s0                        # and seeds 1, 2
    python crl.py --config smol --seed 0 --out out/s0 --exemplars random     # the random-exemplar ablation
    python evaluate.py --config smol --samples 8 --runs out/s0,out/s1,out/s2

evaluate.py samples and judges every stage checkpoint of every run; this module holds what
comes after: the numbers per stage over seeds, the tables, the files, and the re-judging of
Stage 3's discoveries. It imports no stage script.
"""
import difflib
import json
import math
import os
import random
import statistics

import common
import config
import exemplars
import kernels
import taskset

# In the order of the paper's ablation: Stage 1, Stages 1+2, + GRPO with random exemplars,
# + bucket sampling. base is the untrained start.
STAGES = ("base", "sft", "selftrain", "crl-random", "crl")
METRICS = ("success_rate", "mean_speedup", "fast_1")
# CUDA-L1 (arXiv 2507.14111), ablation of the mean speedup. Its 2.41 (Stages 1+2 and GRPO
# without exemplars) has no run here.
PAPER = {"sft": 1.14, "selftrain": 1.36, "crl-random": 2.14, "crl": 3.12}
PAPER_NOTE = ("paper: CUDA-L1's ablation of the mean speedup (A100, KernelBench, DeepSeek-V3): Stage 1 alone 1.14, "
              "Stages 1+2 1.36, + random exemplars 2.14, + bucket sampling 3.12; its 1+2+GRPO 2.41 is plain GRPO "
              "without exemplars, not run here")


def roots(cfg):
    return list(dict.fromkeys(r.strip() for r in cfg["runs"].split(",") if r.strip()))


def run_checkpoints(cfg, root):
    """A run's stages -> ([(stage, checkpoint)] that exist, base first as "base", [missing stages])."""
    found, missing = [("base", "base")], []
    for stage in STAGES[1:]:
        d = common.stage_dir(dict(cfg, out=root), stage)
        if common.has_checkpoint(d):
            found.append((stage, d))
        else:
            missing.append(stage)
    return found, missing


def run_file(cfg, root, stage, name):
    return os.path.join(common.stage_dir(dict(cfg, out=root), stage), name)


def check_runs(cfg):
    """Every run root must hold a stage of this --config; -> {root: (found, missing)}."""
    out = {}
    for root in roots(cfg):
        found, missing = run_checkpoints(cfg, root)
        if len(found) == 1 and not os.path.isfile(run_file(cfg, root, "sft", "data.jsonl")):
            raise ValueError(f"--runs {root}: no stage of --config {cfg['config']} in "
                             f"{os.path.join(root, cfg['config'])} (crl.py --config {cfg['config']} --out {root} "
                             f"writes one)")
        out[root] = (found, missing)
    return out


def flagged_in_dbs(cfg, runs, apart):
    """Tasks some run's Stage 3 database flagged (its output never changes with the input)."""
    out = set()
    for root in runs:
        path = run_file(cfg, root, "crl", "db.jsonl")
        for r in common.read_jsonl(path, torn_tail=True) if os.path.isfile(path) else []:
            if set(apart) & set(r.get("flags") or []):
                out.add(r["task"])
    return out


# ----------------------------------------------------------------------------------------
# Numbers over seeds: plain dicts in, plain dicts out


def spread(xs):
    """Numbers over seeds -> dict(mean, sd (sample, n - 1; 0 for one), min, max, n, values);
    None when there are none."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return dict(mean=sum(xs) / len(xs), sd=statistics.stdev(xs) if len(xs) > 1 else 0.0, min=min(xs), max=max(xs),
                n=len(xs), values=xs)


def aggregate(per_run):
    """per_run: {run: {stage: {success_rate, mean_speedup, fast_1, ...}}} -> {stage: {metric:
    spread over the runs that have the stage}}, in STAGES order."""
    out = {}
    for stage in STAGES:
        got = [stages[stage] for stages in per_run.values() if stage in stages]
        if got:
            out[stage] = {k: spread([g[k] for g in got]) for k in METRICS}
    return out


def task_geomean(a, b, apart=()):
    """Geometric mean over tasks of a's per-task mean speedup over b's (tasks set aside, or
    where either is 0, left out), or None. The mean speedup is a mean over tasks, so one task
    far above 1x (diag_matmul's algebraic shortcut, 20-40x) outweighs all the others; this
    ratio weighs every task alike."""
    xs = [math.log(a[t] / b[t]) for t in a if t in b and t not in apart and a[t] > 0 and b[t] > 0]
    return math.exp(sum(xs) / len(xs)) if xs else None


def paired_interval(a, b, apart=(), n=2000, level=0.95, seed=0):
    """How far the draw of the k samples moves two ratios of checkpoints A and B -> {"mean":
    (low, high), "per task": (low, high)}: percentile intervals of A's mean speedup over B's and
    of task_geomean(A, B) when each task's k samples are drawn again with replacement, the same
    sample indices for A and B (a paired bootstrap: sample j of every checkpoint comes from the
    same generator state, evaluate.py). a, b: {task: [speedup of sample j, ...]}. None where no
    task has two samples in both."""
    tasks = [t for t in a if t in b and t not in apart and len(a[t]) == len(b[t]) > 1]
    if not tasks:
        return None
    rng, got = random.Random(seed), {"mean": [], "per task": []}
    for _ in range(n):
        ma, mb = {}, {}
        for t in tasks:
            idx = [rng.randrange(len(a[t])) for _ in a[t]]
            ma[t], mb[t] = sum(a[t][i] for i in idx) / len(idx), sum(b[t][i] for i in idx) / len(idx)
        if sum(mb.values()) > 0:
            got["mean"].append(sum(ma.values()) / sum(mb.values()))
        g = task_geomean(ma, mb)
        if g is not None:
            got["per task"].append(g)
    lo = (1 - level) / 2

    def interval(xs):
        xs = sorted(xs)
        return (xs[int(lo * (len(xs) - 1))], xs[int((1 - lo) * (len(xs) - 1))]) if xs else None
    return {k: interval(xs) for k, xs in got.items()}


def ratios(per_run, pairs=(("crl", "sft"), ("crl", "crl-random"), ("selftrain", "sft")), apart=()):
    """Mean speedup of one stage over another's, and the per-task geometric mean of the same
    ratio (task_geomean, marked "per task"), per run, with the interval the draw of the samples
    alone gives each (paired_interval; where the samples were kept), and their spread over runs."""
    per, intervals = {}, {}
    for run, s in per_run.items():
        per[run], intervals[run] = {}, {}
        for a, b in pairs:
            both = a in s and b in s
            per[run][f"{a}/{b}"] = (s[a]["mean_speedup"] / s[b]["mean_speedup"]
                                    if both and s[b]["mean_speedup"] > 0 else None)
            per[run][f"{a}/{b} per task"] = task_geomean(s[a]["per_task"], s[b]["per_task"], apart) if both else None
            iv = paired_interval(s[a]["samples"], s[b]["samples"], apart) \
                if both and "samples" in s[a] and "samples" in s[b] else None
            intervals[run][f"{a}/{b}"] = iv and iv["mean"]
            intervals[run][f"{a}/{b} per task"] = iv and iv["per task"]
    keys = [f"{a}/{b}" for a, b in pairs]
    keys += [f"{k} per task" for k in keys]
    return dict(per_run=per, intervals=intervals, over_runs={k: spread([p[k] for p in per.values()]) for k in keys})


def per_task(per_run):
    """-> {task: {stage: mean over runs of the task's mean speedup}}."""
    vals = {}
    for stages in per_run.values():
        for stage, s in stages.items():
            for task, x in s["per_task"].items():
                vals.setdefault(task, {}).setdefault(stage, []).append(x)
    return {t: {st: sum(xs) / len(xs) for st, xs in by.items()} for t, by in vals.items()}


# ----------------------------------------------------------------------------------------
# Tables


def _pm(s, spec):
    return "-" if s is None else f"{s['mean']:{spec}} ± {s['sd']:{spec}}"


def stage_table(agg):
    """-> rows of strings, the header first: one row per stage."""
    rows = [("stage", "seeds", "success", "mean speedup [min, max]", "fast_1", "paper")]
    for stage, m in agg.items():
        sp = m["mean_speedup"]
        rows.append((stage, str(sp["n"]), _pm(m["success_rate"], ".2f"),
                     f"{_pm(sp, '.3f')} [{sp['min']:.3f}, {sp['max']:.3f}]", _pm(m["fast_1"], ".2f"),
                     f"{PAPER[stage]:.2f}" if stage in PAPER else "-"))
    return rows


def task_table(tasks, set_aside, order=()):
    stages = [s for s in STAGES if any(s in by for by in tasks.values())]
    rows = [("task",) + tuple(stages)]
    for t in [t for t in order if t in tasks] + sorted(set(tasks) - set(order)):
        rows.append((t + (" (set aside)" if t in set_aside else ""),) +
                    tuple(f"{tasks[t][s]:.3f}" if s in tasks[t] else "-" for s in stages))
    return rows


def ratio_table(r):
    keys = list(r["over_runs"])
    rows = [("run",) + tuple(keys)]
    ivs = r.get("intervals", {})

    def cell(run, k):
        x, iv = r["per_run"][run][k], ivs.get(run, {}).get(k)
        return "-" if x is None else f"{x:.3f}" + (f" [{iv[0]:.2f}, {iv[1]:.2f}]" if iv else "")
    rows += [(run,) + tuple(cell(run, k) for k in keys) for run in r["per_run"]]
    over = r["over_runs"]
    rows.append(("over runs",) + tuple("-" if over[k] is None else f"{_pm(over[k], '.3f')} [{over[k]['min']:.3f}, "
                                       f"{over[k]['max']:.3f}]" for k in keys))
    return rows


def aligned(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def markdown(rows):
    return ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])] + \
           ["| " + " | ".join(r) + " |" for r in rows[1:]]


def tables(result):
    """The report's sections -> [(title, rows)]."""
    n = len(result["runs"])
    return [(f"stages over {n} run(s) (success and fast_1: fraction of all samples; mean speedup counts failures "
             f"as 0; mean ± sd over seeds; set-aside tasks excluded)", stage_table(result["aggregate"])),
            ("mean speedup per task (mean over seeds of each task's mean over its samples)",
             task_table(result["per_task"], result["set_aside"], result.get("tasks", ()))),
            ("mean speedup ratios per seed ([low, high]: the 95% interval from the draw of the k samples alone, a paired "
             "bootstrap)", ratio_table(result["ratios"]))]


def merged_line(result):
    """Where each run of a merged comparison (merge) was judged."""
    return "runs judged apart, then merged: " + "; ".join(
        f"{run}: {d['device']}, k = {d['samples']} ({d['source']})" for run, d in result["devices"].items())


def print_report(result):
    for title, rows in tables(result):
        print(f"\n{title}")
        print("\n".join("  " + line for line in aligned(rows)))
    print("  " + PAPER_NOTE)
    if result.get("devices"):
        print("  " + merged_line(result))
    if result["set_aside"]:
        print(f"  set aside (a verdict flagged input_independent or input_distribution; not in the headline "
              f"numbers): {', '.join(result['set_aside'])}")


# ----------------------------------------------------------------------------------------
# Discovery, measured: Stage 3's new variants judged again beside the teacher's best


def run_candidates(cfg, root, set_aside):
    """A run's discoveries (exemplars.discoveries over its crl/db.jsonl: each with `teacher`,
    the row of the fastest Stage 1 variant of its task); set-aside tasks left out."""
    path = run_file(cfg, root, "crl", "db.jsonl")
    if not os.path.isfile(path):
        return []
    rows = common.read_jsonl(path, torn_tail=True)
    earlier = exemplars.earlier_sources([run_file(cfg, root, "sft", "data.jsonl"),
                                         run_file(cfg, root, "selftrain", "successes.jsonl")], rows)
    return [dict(r, run=root) for r in exemplars.discoveries(rows, earlier) if r["task"] not in set_aside]


def confirm(cands, judge, margin=0.05):
    """judge([(candidate row, code)]) -> [(ok, speedup, verdict)], in order (verdict: its
    "status/reason", what says why one was not confirmed): each candidate and its teacher
    variant judged together. -> the candidates with `new_speedup`, `teacher_new`, their
    verdicts `new_verdict` and `teacher_verdict`, and `confirmed`: correct, and at least
    (1 + margin) x the teacher's new speedup."""
    got = judge([(c, c["code"]) for c in cands] + [(c, c["teacher"]["code"]) for c in cands])
    out = []
    for c, (ok, s, why), (t_ok, t, t_why) in zip(cands, got[:len(cands)], got[len(cands):]):
        s, t = s if ok else 0.0, t if t_ok else 0.0
        out.append(dict(c, new_speedup=s, teacher_new=t, new_verdict=why, teacher_verdict=t_why,
                        confirmed=bool(ok and t > 0 and s >= (1 + margin) * t)))
    return out


def discovery_counts(judged, runs):
    def counts(rows):
        conf = [r for r in rows if r["confirmed"]]
        return dict(candidates=len(rows), confirmed=len(conf), tasks=sorted({r["task"] for r in conf}))
    return dict(per_run={run: counts([r for r in judged if r["run"] == run]) for run in runs}, all=counts(judged))


def best_discovery(rows):
    """The confirmed discovery furthest ahead of its teacher variant, judged side by side, or None."""
    return max((r for r in rows if r["confirmed"]), key=lambda r: r["new_speedup"] / r["teacher_new"], default=None)


def nearest(code, variants):
    """The variant most like `code` (difflib's ratio over lines)."""
    lines = code.splitlines()
    return max(variants, key=lambda v: difflib.SequenceMatcher(None, v["code"].splitlines(), lines).ratio(),
               default=None)


def discovery_diff(best, stage1):
    """A unified diff from the nearest Stage 1 variant of the task to the discovery."""
    near = nearest(best["code"], [r for r in stage1 if r["task"] == best["task"] and r.get("code")])
    if near is None:
        return ""
    return "".join(difflib.unified_diff(
        near["code"].splitlines(True), best["code"].splitlines(True),
        fromfile=f"Stage 1 variant of {best['task']} (nearest, {near.get('source_hash', '')[:12]})",
        tofile=f"Stage 3 step {best.get('step')} in {best['run']} ({best['new_speedup']:.2f}x against the teacher's "
               f"{best['teacher_new']:.2f}x)"))


def task_index(tasks, cfg, runs):
    """task hash -> Task: --tasks, then the tasks Stage 1's datasets carry (task_code)."""
    out = {t.hash: t for t in tasks}
    for root in runs:
        path = run_file(cfg, root, "sft", "data.jsonl")
        for r in common.read_jsonl(path, torn_tail=True) if os.path.isfile(path) else []:
            if r.get("task_code"):
                out.setdefault(taskset.sha(r["task_code"]), taskset.Task(r["task"], r["task_code"], path))
    return out


def discover(cfg, runs, tasks, set_aside):
    """Every run's discoveries judged again in a fresh evaluator (the main one remembers its
    verdicts), each beside its teacher variant -> dict(counts, rows, best, diff)."""
    cands = [c for root in runs for c in run_candidates(cfg, root, set_aside)]
    index = task_index(tasks, cfg, runs)
    unknown = [c for c in cands if c["task_hash"] not in index]
    if unknown:
        print(f"discovery: {len(unknown)} candidate(s) of tasks not in --tasks {cfg['tasks']} left out")
    cands = [c for c in cands if c["task_hash"] in index]
    judged = []
    if cands:
        with kernels.Evaluator(cfg, progress=cfg["progress"]) as ev:
            def judge(pairs):
                vs = ev.evaluate([(index[c["task_hash"]], code) for c, code in pairs], desc="judging discoveries again")
                return [(v.ok, v.speedup, f"{v.status}/{v.reason}" if v.reason else v.status) for v in vs]
            judged = confirm(cands, judge)
    counts = discovery_counts(judged, runs)
    best = best_discovery(judged)
    diff = ""
    if best:
        path = run_file(cfg, best["run"], "sft", "data.jsonl")
        stage1 = common.read_jsonl(path, torn_tail=True) if os.path.isfile(path) else []
        diff = discovery_diff(best, stage1 or [best["teacher"]])
    keep = ("run", "task", "step", "source_hash", "speedup", "teacher_best", "new_speedup", "teacher_new",
            "new_verdict", "teacher_verdict", "confirmed")
    return dict(counts=counts, unknown_tasks=len(unknown), rows=[{k: r.get(k) for k in keep} for r in judged],
                best=dict({k: best.get(k) for k in keep}, code=best["code"]) if best else None, diff=diff)


def discovery_lines(d):
    rows = [("run", "candidates", "confirmed", "tasks with a confirmed one")]
    rows += [(run, str(c["candidates"]), str(c["confirmed"]), ", ".join(c["tasks"]) or "-")
             for run, c in list(d["counts"]["per_run"].items()) + [("all", d["counts"]["all"])]]
    lines = aligned(rows)
    b = d["best"]
    if b:
        lines.append(f"best: {b['task']} in {b['run']} (step {b['step']}): {b['new_speedup']:.2f}x against the "
                     f"teacher variant's {b['teacher_new']:.2f}x, judged side by side "
                     f"({b['new_speedup'] / b['teacher_new']:.2f}x)")
    for r in d.get("rows") or ():  # why each of the others was not confirmed (older results: no verdicts)
        if not r["confirmed"] and r.get("new_verdict"):
            lines.append(f"not confirmed: {r['task']} in {r['run']} (step {r['step']}): {r['new_speedup']:.2f}x "
                         f"({r['new_verdict']}) against the teacher variant's {r['teacher_new']:.2f}x "
                         f"({r['teacher_verdict']})")
    return rows, lines


DISCOVERY_TITLE = ("discovery: Stage 3 variants no earlier stage wrote that beat the fastest Stage 1 variant of their "
                   "task by 5% in training, judged again in a fresh evaluator beside that variant (confirmed: still "
                   ">= 1.05x it)")


def print_discovery(d):
    print(f"\n{DISCOVERY_TITLE}")
    print("\n".join("  " + line for line in discovery_lines(d)[1]))


def merge(results, sources=()):
    """Stage comparisons of different runs (evaluate.py --runs, each judged apart: one per GPU or
    machine) -> one comparison over all their runs, as if judged together, except that each run's
    numbers keep the evaluator and device they were measured on (result["devices"] says which).
    The per-run numbers and samples are kept as they are; the spread over seeds, the ratios and
    the discovery counts are computed again. sources: the files, named in the result."""
    per_run, runs, devices, rows = {}, {}, {}, []
    for i, res in enumerate(results):
        name = sources[i] if i < len(sources) else f"result {i + 1}"
        for run in res["runs"]:
            if run in runs:
                raise ValueError(f"run {run} is in more than one comparison ({devices[run]['source']} and {name}): "
                                 f"give each run once")
            runs[run], per_run[run] = res["runs"][run], res["per_run"][run]
            devices[run] = dict(device=res.get("device", "?"), samples=res.get("samples"), source=name)
        rows += (res.get("discovery") or {}).get("rows", [])
    set_aside = sorted({t for res in results for t in res["set_aside"]})
    tasks = list(dict.fromkeys(t for res in results for t in res.get("tasks", ())))
    counts = discovery_counts(rows, list(runs))
    best = best_discovery(rows)
    found = [res["discovery"] for res in results if (res.get("discovery") or {}).get("best") is not None
             and res["discovery"]["best"].get("source_hash") == (best or {}).get("source_hash")]
    discovery = dict(counts=counts, unknown_tasks=sum((res.get("discovery") or {}).get("unknown_tasks", 0)
                                                      for res in results),
                     rows=rows, best=found[0]["best"] if found else None, diff=found[0]["diff"] if found else "")
    samples = {d["samples"] for d in devices.values()}
    return dict(runs=runs, samples=samples.pop() if len(samples) == 1 else sorted(samples, key=str), tasks=tasks,
                set_aside=set_aside, per_run=per_run, aggregate=aggregate(per_run),
                ratios=ratios(per_run, apart=set(set_aside)), per_task=per_task(per_run),
                device="; ".join(dict.fromkeys(d["device"] for d in devices.values())), devices=devices,
                discovery=discovery, merged=list(sources))


# ----------------------------------------------------------------------------------------
# Files


def command(cfg):
    """The evaluate.py command that repeats this run: the settings that differ from the preset."""
    preset = config.preset_values(cfg["config"])
    keys = sorted(config.read_by(config.EVALUATE))
    extra = [f"--{k}={str(cfg[k]).lower() if isinstance(cfg[k], bool) else cfg[k]}" for k in keys
             if k in cfg and cfg[k] != preset[k]]
    return " ".join(["python evaluate.py"] + ([f"--config {cfg['config']}"] if cfg["config"] != "default" else [])
                    + extra)


def device_line(device):
    if device == "cuda":
        import torch
        return f"cuda: {torch.cuda.get_device_name(0)}"
    return f"{device}: {os.cpu_count()}-core CPU"


def write_markdown(result, path):
    lines = ["# Stage comparison over training runs", "", "```", result["command"], "```", "",
             f"device: {result['device']}", ""]
    if result.get("devices"):
        lines += [merged_line(result), ""]
    for title, rows in tables(result):
        lines += [f"## {title[0].upper()}{title[1:]}", ""] + markdown(rows) + [""]
    lines += [PAPER_NOTE[0].upper() + PAPER_NOTE[1:] + ".", ""]
    if result["set_aside"]:
        lines += [f"Set aside (not in the headline numbers): {', '.join(result['set_aside'])}.", ""]
    missing = {run: r["missing"] for run, r in result["runs"].items() if r["missing"]}
    if missing:
        lines += ["Missing checkpoints: " + "; ".join(f"{run}: {', '.join(m)}" for run, m in missing.items()) + ".", ""]
    if result.get("discovery"):
        rows, text = discovery_lines(result["discovery"])
        lines += ["## Discovery", "", DISCOVERY_TITLE[len("discovery: "):], ""] + markdown(rows) + [""]
        lines += text[len(rows):] + [""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path


def plot(result, path):
    """Two panels, success rate and mean speedup per stage: bars the mean over seeds, error
    bars min..max, a dot per seed, the paper's numbers as markers. -> path, or None without
    matplotlib (an optional dependency)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    agg = result["aggregate"]
    stages = list(agg)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in zip(axes, ("success_rate", "mean_speedup"), ("success rate", "mean speedup (failures as 0)")):
        s = [agg[st][key] for st in stages]
        x = range(len(stages))
        ax.bar(x, [v["mean"] for v in s], color="#8fb3d9", yerr=[[v["mean"] - v["min"] for v in s],
                                                                [v["max"] - v["mean"] for v in s]], capsize=4)
        for i, v in enumerate(s):
            k = len(v["values"])
            ax.scatter([i + 0.25 * (j / max(k - 1, 1) - 0.5) for j in range(k)], v["values"], color="k", s=12, zorder=3)
        if key == "mean_speedup":
            px = [i for i, st in enumerate(stages) if st in PAPER]
            ax.scatter(px, [PAPER[stages[i]] for i in px], marker="D", color="#d62728", zorder=4,
                       label="CUDA-L1 (paper)")
            ax.axhline(1.0, color="gray", lw=0.8, ls=":")
            if px:
                ax.legend(loc="upper left")
        else:
            ax.set_ylim(0, 1)
        ax.set_xticks(list(x), stages)
        ax.set_title(title)
    fig.suptitle(f"{len(result['runs'])} run(s): bars mean over seeds, error bars min..max, dots seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def finish(cfg, result, stem, tasks, device):
    """After the main evaluator has closed: the discoveries judged again, then the files."""
    result.update(command=command(cfg), device=device_line(device))
    result["discovery"] = discover(cfg, list(result["runs"]), tasks, set(result["set_aside"]))
    print_discovery(result["discovery"])
    paths = write_files(result, stem)
    print(f"stage comparison: {', '.join(paths.values())}"
          + ("" if "png" in paths else " (no .ablation.png: pip install matplotlib)"))
    return paths


def write_files(result, stem):
    """<stem>.ablation.json/.md/.png and .discovery.diff -> {kind: path} of those written."""
    paths = {"json": stem + ".ablation.json", "md": write_markdown(result, stem + ".ablation.md")}
    with open(paths["json"], "w") as f:
        json.dump(result, f, indent=1)
    png = plot(result, stem + ".ablation.png")
    if png:
        paths["png"] = png
    diff = (result.get("discovery") or {}).get("diff")
    if diff:
        with open(stem + ".discovery.diff", "w") as f:
            f.write(diff)
        paths["diff"] = stem + ".discovery.diff"
    return paths
