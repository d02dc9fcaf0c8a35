"""Score solutions, or a model's samples, on a task set: success rate, speedups, fast_p,
rejection reasons.

    python evaluate.py --tasks builtin --solutions tasks/seeds/cpp
    python evaluate.py --tasks tasks/gelu.py --solutions my_gelu.py     # one file against one task
    python evaluate.py --config small --checkpoint out/small/sft --samples 4   # model mode: k samples per task
    python evaluate.py --config small --samples 4                              # the untrained tiny model
    python evaluate.py --config small --samples 4 --checkpoint base,out/small/sft,out/small/selftrain,out/small/crl
    python evaluate.py --config small --samples 4 --checkpoint out/small/crl --exemplars_db out/small/crl/db.jsonl
    python evaluate.py --config smol --samples 8 --runs out/s0,out/s1,out/s2   # every stage of runs over seeds
    python evaluate.py --merge a.ablation.json,b.ablation.json   # runs compared apart (one per GPU): one report
    python evaluate.py --tasks builtin --solutions tasks/seeds/cuda --baseline compile
    python evaluate.py --tasks ../KernelBench/KernelBench/level1 --solutions runs/level1
    python evaluate.py --solutions cuda_l1_h100.jsonl      # records carry their own ref_code
    python evaluate.py --solutions optimized_cuda_code/codes/h100.json   # the CUDA-L1 repository's file
    python evaluate.py --solutions cuda_l1_h100.jsonl --resume   # after an interruption: judged ones reused
    python evaluate.py --tasks problems.jsonl --reference_only     # KernelBench as one JSONL

Settings are config.py's (`--key=value`, `--help` lists them); the full results go to
out/evaluate/<time>.json. With --runs (the --out folders of `crl.py --seed S --out out/sS`, and
of its `--exemplars random` ablation) each run's base, sft, selftrain, crl and crl-random checkpoints
are sampled, prompted with exemplars from that run's Stage 1 data, and judged by one evaluator;
the stages are compared over the seeds beside the paper's ablation, Stage 3's discoveries are
judged again beside the teacher's best, and the tables go to out/evaluate/<time>.ablation.md
(.json, .png, and .discovery.diff). In solutions mode every verdict is also written as it lands to
out/evaluate/<time>.verdicts.jsonl, with a fingerprint of the evaluator settings it was judged
under; --resume reuses those of earlier runs with the same settings and judges the rest.
"""
import glob
import functools
import json
import math
import os
import random
import re
import time

import torch

import ablation
import common
import config
import exemplars
import kernels
import policy
import prompts
import taskset

FAST_P = (0.0, 1.0, 1.5, 2.0)
# verdicts kept apart from the numbers: accepted, but the output never changes with the input,
# or is right only on the task's own input distribution (--allow_distribution_shortcut)
APART = ("input_independent", "input_distribution")


def summarize(verdicts):
    """Verdicts -> the headline numbers. Mean speedup counts failures as 0 (as CUDA-L1
    reports); geometric mean, median and max are over timed successes; fast_p is the fraction
    of all candidates that are correct and faster than p times the reference."""
    n = len(verdicts)
    ok = [v.speedup for v in verdicts if v.ok]
    reasons = {}
    for v in verdicts:
        if not v.ok:
            key = f"{v.status}/{v.reason}"
            reasons[key] = reasons.get(key, 0) + 1
    timed = [s for s in ok if s > 0]  # not timed (Triton's interpreter, --time_candidates=false): 0
    return dict(
        n=n, ok=len(ok), success_rate=len(ok) / n if n else 0.0,
        mean_speedup=sum(ok) / n if n else 0.0,
        geomean_speedup=math.exp(sum(math.log(s) for s in timed) / len(timed)) if timed else 0.0,
        median_speedup=kernels.median(timed) if timed else 0.0,
        max_speedup=max(timed) if timed else 0.0,
        fast_p={str(p): sum(s > p for s in ok) / n if n else 0.0 for p in FAST_P},
        reasons=dict(sorted(reasons.items(), key=lambda kv: -kv[1])))


def best_per_task(verdicts):
    """The best verdict of each task: best-of-k when a task has several candidates."""
    best = {}
    for v in verdicts:
        b = best.get(v.task)
        if b is None or (v.ok, v.speedup) > (b.ok, b.speedup):
            best[v.task] = v
    return list(best.values())


def _fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def shown(name):
    """A solution's name as the table shows it: a file whole, relative to the current folder
    (absolute where that is shorter than climbing out with ../); records and samples as named."""
    if not os.path.exists(name):
        return name
    rel, full = os.path.relpath(name), os.path.abspath(name)
    return rel if len(rel) <= len(full) else full


def print_table(verdicts):
    rows = [("task", "solution", "status", "reason", "speedup", "ref ms", "new ms", "spread", "err")]
    for v in verdicts:
        rows.append((v.task[:28], shown(v.solution),
                     v.status, v.reason, _fmt(v.speedup if v.ok else None), _fmt(v.ref_ms, ".3f"),
                     _fmt(v.new_ms, ".3f"), _fmt(v.spread, ".3f"), _fmt(v.max_err, ".1e")))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


# lines of a build log that name no error of the candidate's: the build's own framing
_NOT_THE_ERROR = re.compile(r"Error building extension|ninja: build stopped|^\d+ errors? (detected|generated)|"
                            r"^\[\.\.\.\]$")


def _clip(line, n=200):
    return line if len(line) <= n else line[:n - 1] + "…"


def has_build_lines(v):
    """A failed build whose log (or syntax/link message) print_build_errors shows."""
    return v.status == "compile_error" and bool(v.log or v.reason in ("syntax_error", "link_error"))


def error_lines(v, n=3):
    """A failed build's first n compiler error lines, with the build folder's path cut from
    file names (it is long and the same for all); a log with no error line gives its first
    lines, and no log the message (syntax errors say where there)."""
    lines = [l.strip() for l in v.log.splitlines() if l.strip() and not _NOT_THE_ERROR.search(l.strip())]
    errs = [l for l in lines if re.search(r"\berror\b|undefined (reference|symbol)", l, re.I)] or lines
    errs = [re.sub(r"[^\s(]*/([^/\s]+(:\d+|\(\d+\)))", r"\1", l) for l in errs] or [v.message]
    return [_clip(l) for l in dict.fromkeys(errs)][:n]


def print_build_errors(verdicts, most=20):
    """Under the table, why each build failed: the table says only compile_error."""
    failed = [v for v in verdicts if has_build_lines(v)]
    if not failed:
        return
    print("\ncompile errors (first lines; whole logs under 'log' in the results file):")
    for v in failed[:most]:
        first, *rest = error_lines(v)
        print(f"  {v.task} {shown(v.solution)}: {first}")
        for l in rest:
            print(f"      {l}")
    if len(failed) > most:
        print(f"  ... and {len(failed) - most} more")


def print_rejections(verdicts, most=20):
    """Under the table, why each candidate that built was refused, in the evaluator's own words
    (the table says only status and reason; the message says which input, which bound, what
    is missing). Failed builds have their compiler lines (print_build_errors)."""
    failed = [v for v in verdicts if not v.ok and v.message and not has_build_lines(v)]
    if not failed:
        return
    print("\nwhy (first line of each verdict's message; whole messages in the results file):")
    for v in failed[:most]:
        print(f"  {v.task} {shown(v.solution)}: {v.status}/{v.reason}: {_clip((v.message.strip().splitlines() or [''])[0])}")
    if len(failed) > most:
        print(f"  ... and {len(failed) - most} more")


def print_summary(s, title):
    fp = "  ".join(f"fast_{p}={s['fast_p'][p]:.2f}" for p in s["fast_p"])
    head = f"{title}: {s['ok']}/{s['n']} correct ({100 * s['success_rate']:.0f}%)"
    if s["ok"] and not s["max_speedup"]:  # Triton's interpreter, --time_candidates=false
        print(f"{head}; not timed, so no speedups")
    else:
        print(f"{head}, mean speedup {s['mean_speedup']:.3f}x (failures as 0), geomean {s['geomean_speedup']:.3f}x, "
              f"median {s['median_speedup']:.3f}x, max {s['max_speedup']:.3f}x")
        print(f"  {fp}")
    if s["reasons"]:
        print("  failures: " + ", ".join(f"{k} {n}" for k, n in s["reasons"].items()))


def report(verdicts):
    """Per-candidate table, then summaries; candidates flagged input_independent or
    input_distribution (accepted with --allow_distribution_shortcut) apart."""
    print_table(verdicts)
    print_build_errors(verdicts)
    print_rejections(verdicts)
    main = [v for v in verdicts if not set(APART) & set(v.flags)]
    flagged = [v for v in verdicts if set(APART) & set(v.flags)]
    out = {"all": summarize(main)}
    print()
    print_summary(out["all"], "candidates")
    if len({v.task for v in main}) < len(main):
        out["best_per_task"] = summarize(best_per_task(main))
        print_summary(out["best_per_task"], "best per task")
    loaded = [v for v in verdicts if "disturbed" in v.flags]
    if loaded:
        print(f"{len(loaded)} of {len(verdicts)} timed while other processes used the timing cores (flagged "
              f"disturbed): on the CPU such a load can move a speedup several-fold; time them on a quiet machine")
    spent = {}
    for v in verdicts:
        for k, sec in v.seconds.items():
            spent[k] = spent.get(k, 0.0) + sec
    if spent.get("total"):  # where the workers' time went: what to speed up next
        parts = [f"{k} {spent[k]:.0f}" for k in ("compile", "run", "confirm", "kernelbench") if k in spent]
        inner = [f"{k} {spent[k]:.0f}" for k in ("load", "check", "time", "wait") if k in spent]
        kb = [f"{k[3:]} {spent[k]:.0f}" for k in ("kb_time", "kb_wait") if k in spent]
        print("worker seconds, summed over candidates: " + ", ".join(parts) +
              (f" (in run: {', '.join(inner)})" if inner else "") +
              (f" (in kernelbench: {', '.join(kb)})" if kb else ""))
        held = {k.removesuffix("_blocking"): sec for k, sec in spent.items() if k.endswith("_blocking")}
        if held:  # a timing waits for every other worker on its GPU to reach a pause point
            worst = sorted(((sec, f"{v.task} {k.removesuffix('_blocking')}") for v in verdicts
                            for k, sec in v.seconds.items() if k.endswith("_blocking")), reverse=True)[:5]
            print("timings kept waiting by a worker not yet at a pause point: " +
                  ", ".join(f"{k} {sec:.0f} s" for k, sec in held.items()) +
                  "; longest: " + ", ".join(f"{name} {sec:.1f} s" for sec, name in worst))
        out["seconds"] = spent
    if flagged:
        out["flagged"] = summarize(flagged)
        names = sorted({v.task for v in flagged})
        print(f"flagged input_independent (output never changes with the input) or input_distribution (right "
              f"only on the task's own input distribution), not in the numbers above: "
              f"{', '.join(names)}; their best speedup {max([v.speedup for v in flagged] + [0]):.1f}x")
    return out


def _kb(v):
    """KernelBench's verdict on one record as a short string ('' where not asked for)."""
    kb = v.kernelbench
    if not kb:
        return ""
    if kb["status"] != "ok":
        return f"{kb['status']}/{kb['reason']}"
    return f"ok {kb['speedup']:.2f}x" if kb["speedup"] else "ok (not timed)"


def audit(pairs, verdicts):
    """Solutions that carry a published score (the CUDA-L1 release's records do): our
    measured speedup beside theirs per task, the median of ours / theirs over the tasks both
    accept, why the others were not accepted here, and where KernelBench's own verdict
    (Verdict.kernelbench) differs from ours, with the reason each side gave."""
    rows, ratios, why, differ = [], [], {}, {}
    print(f"\n{'task':28s} {'published':>10s} {'measured':>10s} {'ratio':>7s}  {'verdict':30s} KernelBench's")
    for (t, s), v in zip(pairs, verdicts):
        if s.score is None:
            continue
        ratio = v.speedup / s.score if v.ok and s.score > 0 else None
        if ratio is not None:
            ratios.append(ratio)
        elif not v.ok:
            why[f"{v.status}/{v.reason}"] = why.get(f"{v.status}/{v.reason}", 0) + 1
        kb = v.kernelbench or {}
        if kb and (kb["status"] == "ok") != v.ok:
            k = (f"ours {v.status}/{v.reason}, KernelBench's ok" if kb["status"] == "ok"
                 else f"ours ok, KernelBench's {kb['status']}/{kb['reason']}")
            differ[k] = differ.get(k, 0) + 1
        rows.append(dict(task=t.name, solution=s.name, published=s.score, measured=v.speedup if v.ok else None,
                         ratio=ratio, status=v.status, reason=v.reason, kernelbench=_kb(v),
                         kernelbench_message=kb.get("message", "") if kb.get("status") != "ok" else ""))
        print(f"{t.name[:28]:28s} {s.score:10.2f} {_fmt(v.speedup if v.ok else None):>10s} {_fmt(ratio, '.3f'):>7s}  "
              f"{(v.status + ('/' + v.reason if v.reason else ''))[:30]:30s} {_kb(v)}")
    med = kernels.median(ratios) if ratios else None
    print(f"measured / published: median {_fmt(med, '.3f')} over the {len(ratios)} of {len(rows)} tasks both accept")
    if why:
        print("not accepted here: " + ", ".join(f"{k} {n}" for k, n in sorted(why.items(), key=lambda kv: -kv[1])))
    judged = [r for r in rows if r["kernelbench"]]
    if judged:
        same = len(judged) - sum(differ.values())
        print(f"KernelBench's verdict agrees with ours (both accept or both reject) on {same} of {len(judged)}" +
              "".join(f"\n  {k}: {n}" for k, n in sorted(differ.items(), key=lambda kv: -kv[1])))
    return dict(n=len(rows), both=len(ratios), median_ratio=med, not_accepted=why, differ=differ, rows=rows)


def write_audit(rows, stem):
    """The audit's per-record table as `<stem>.audit.md` and `<stem>.audit.csv` -> their paths."""
    import csv
    cols = ["task", "solution", "published", "measured", "ratio", "status", "reason", "kernelbench",
            "kernelbench_message"]
    fmt = lambda x: "" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)
    with open(stem + ".audit.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows([[fmt(r.get(c)) for c in cols] for r in rows])
    with open(stem + ".audit.md", "w") as f:
        f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
        f.writelines("| " + " | ".join(fmt(r.get(c)).replace("|", "/").replace("\n", " ") for c in cols) + " |\n"
                     for r in rows)
    return stem + ".audit.md", stem + ".audit.csv"


def sample_pairs(cfg, tasks, language, checkpoint):
    """Model mode: k samples per task from one checkpoint ("" or "base": --model, and with
    no --model the tiny built-in model, untrained) -> per task, as plain data a rank can
    send: dict(pairs=[(task name, code, solution name)], failed=[unusable responses' Verdict
    dicts], samples=[sample records]). With --exemplars_db (a crl.py db.jsonl) the prompts
    show exemplars from it, bucket-sampled as in Stage 3."""
    model, tok = policy.load(cfg, checkpoint if checkpoint not in ("", "base") else None)
    db = exemplars.Database(cfg["exemplars_db"], repair=False) if cfg["exemplars_db"] else None
    rng = random.Random(cfg["seed"])
    shown = [exemplars.pick_exemplars(db, t, cfg, rng) if db else () for t in tasks]
    if db:
        print(f"exemplars from {cfg['exemplars_db']}: in the prompts of {sum(map(bool, shown))} of {len(tasks)} tasks")
    msgs = [prompts.task_prompt(t.code, language, ex) for t, ex in zip(tasks, shown)]
    t0 = time.time()
    # The same draws for every checkpoint (common random numbers): two checkpoints with the
    # same weights then sample the same code, and a difference between stages is the weights',
    # not the luck of the draw (on the H200 two identical checkpoints sampled from where the
    # generator had got to differed by 15% in mean speedup at k = 8).
    torch.manual_seed(cfg["seed"])
    outs = policy.generate(model, tok, msgs, cfg, n=cfg["samples"], desc=f"sampling {checkpoint or 'base'}")
    print(f"{checkpoint or 'base model'}: sampled {cfg['samples']} x {len(tasks)} in {time.time() - t0:.0f} s")
    del model
    out = []
    for task, group in zip(tasks, outs):
        d = dict(pairs=[], failed=[], samples=[])
        for j, s in enumerate(group):
            name = f"{checkpoint or 'base'}:{task.name}/sample{j}"
            p = prompts.parse_response(s.text)
            d["samples"].append(dict(checkpoint=checkpoint, task=task.name, sample=j, text=s.text,
                                     finished=s.finished, parse_error=p.error))
            if p.code is None:
                d["failed"].append(kernels.unusable(task.name, name, p).to_dict())
            else:
                d["pairs"].append((task.name, p.code, name))
        out.append(d)
    return out


def model_mode(cfg, tasks, ev, rank, world):
    """Sample and judge each checkpoint in --checkpoint (a comma list) with one evaluator:
    code two checkpoints both produce is measured once, so their numbers differ only where
    their samples do. Under torchrun each rank samples its share of the tasks.
    -> (verdicts, summary, samples)"""
    order = {t.name: i for i, t in enumerate(tasks)}
    by_name = {t.name: t for t in tasks}
    verdicts, summary, samples = [], {}, []
    for ck in cfg["checkpoint"].split(",") if cfg["checkpoint"] else [""]:
        parts = common.sharded(lambda mine: sample_pairs(cfg, mine, ev.language, ck.strip()), tasks, rank, world)
        pairs = [(by_name[t], taskset.Solution(c, n)) for p in parts for t, c, n in p["pairs"]]
        failed = [kernels.Verdict(**d) for p in parts for d in p["failed"]]
        judge = functools.partial(ev.evaluate, desc=f"judging {ck or 'base'}")
        vs = sorted(common.sharded(judge, pairs, rank, world) + failed, key=lambda v: (order[v.task], v.solution))
        if rank == 0:
            print()
            summary[ck or "base"] = report(vs)
        verdicts += vs
        samples += [s for p in parts for s in p["samples"]]
    if len(summary) > 1 and rank == 0:
        cks = list(summary)
        print(f"\nmean speedup per task ± sd over its {cfg['samples']} samples (failures as 0)")
        print("\n".join("  " + line for line in ablation.aligned(task_rows(tasks, verdicts, cks))))
        print("\ncomparison (k samples per task; mean counts failures as 0; flagged samples excluded)")
        print(f"{'checkpoint':32s} {'success':>8s} {'mean':>7s} {'median':>7s} {'max':>7s} {'fast_1':>7s} "
              f"{'best-of-k mean':>15s}")
        for ck, s in summary.items():
            a, b = s["all"], s.get("best_per_task", s["all"])
            print(f"{ck[-32:]:32s} {a['success_rate']:8.2f} {a['mean_speedup']:7.3f} {a['median_speedup']:7.3f} "
                  f"{a['max_speedup']:7.2f} {a['fast_p']['1.0']:7.2f} {b['mean_speedup']:15.3f}")
    return verdicts, summary, samples


def task_rows(tasks, verdicts, cks):
    """model_mode's per-task table -> rows for ablation.aligned, the header first: each
    checkpoint's mean speedup over a task's samples ± their sd. A task with a sample flagged
    input_independent or input_distribution is marked set aside: the comparison leaves that
    sample out. Under the tasks, the geometric mean of the task means above 0 over the tasks
    not set aside, and of each checkpoint's per-task ratio to the first's (ablation.task_geomean)."""
    short = [os.path.basename(ck.rstrip("/")) or ck for ck in cks]
    labels = short if len(set(short)) == len(short) else [ck[-20:] for ck in cks]
    aside = {v.task for v in verdicts if set(APART) & set(v.flags)}
    per = {ck: {} for ck in cks}
    rows = [("task",) + tuple(labels)]
    for t in tasks:
        cells = []
        for ck in cks:
            s = ablation.spread([v.speedup if v.ok else 0.0 for v in verdicts
                                 if v.task == t.name and v.solution.startswith((ck or "base") + ":")])
            if s:
                per[ck][t.name] = s["mean"]
            cells.append(f"{s['mean']:.3f} ± {s['sd']:.3f}" if s else "-")
        rows.append((t.name[:32] + " (set aside)" * (t.name in aside),) + tuple(cells))
    kept = [t.name for t in tasks if t.name not in aside]
    above = [[per[ck][t] for t in kept if per[ck].get(t, 0) > 0] for ck in cks]
    rows.append(("geomean of task means above 0",) + tuple(
        f"{math.exp(sum(map(math.log, xs)) / len(xs)):.3f} ({len(xs)} of {len(kept)})" if xs else "-" for xs in above))
    ratios = [ablation.task_geomean(per[ck], per[cks[0]], aside) for ck in cks[1:]]
    rows.append((f"geomean per task over {labels[0]}",) + ("1.000",) + tuple("-" if r is None else f"{r:.3f}" for r in ratios))
    return rows


def stage_numbers(verdicts, set_aside):
    """One checkpoint's verdicts -> summarize()'s headline numbers over the tasks not set aside,
    and each task's mean speedup over its samples (failures as 0), set-aside ones too."""
    s = summarize([v for v in verdicts if v.task not in set_aside])
    per = {}
    for v in sorted(verdicts, key=lambda v: _sample_index(v.solution)):
        per.setdefault(v.task, []).append(v.speedup if v.ok else 0.0)
    return dict(n=s["n"], ok=s["ok"], success_rate=s["success_rate"], mean_speedup=s["mean_speedup"],
                fast_1=s["fast_p"]["1.0"], median_speedup=s["median_speedup"], max_speedup=s["max_speedup"],
                per_task={t: sum(xs) / len(xs) for t, xs in per.items()},
                samples=per)  # each task's speedups in sample order: sample j of every checkpoint shares its draw


def _sample_index(name):
    """"<checkpoint>:<task>/sample<j>" -> j (sample_pairs' names)."""
    m = re.search(r"/sample(\d+)$", name)
    return int(m[1]) if m else 0


def runs_mode(cfg, tasks, ev, rank, world):
    """--runs: every stage checkpoint of every training run, each prompted with exemplars from
    its run's Stage 1 data (a fresh rng of --seed per checkpoint, so a run's checkpoints see the
    same prompts), all samples judged together by this one evaluator (code two checkpoints both
    produce is measured once). Under torchrun each rank samples and judges its share.
    -> (verdicts, the comparison as plain data, samples)"""
    by_name = {t.name: t for t in tasks}
    runs = ablation.check_runs(cfg)
    pairs, owner, failed, samples = [], [], [], []
    for root, (found, missing) in runs.items():
        data = ablation.run_file(cfg, root, "sft", "data.jsonl")
        rcfg = dict(cfg, exemplars_db=data if os.path.isfile(data) else "")
        if rank == 0:
            print(f"run {root}: {', '.join(s for s, _ in found)}"
                  + (f"; missing {', '.join(missing)}" if missing else "")
                  + ("" if rcfg["exemplars_db"] else f"; no {data}, so no exemplars in its prompts"))
        for stage, ck in found:
            parts = common.sharded(lambda mine: sample_pairs(rcfg, mine, ev.language, ck), tasks, rank, world)
            name = (lambda n: f"{root}:{n}") if stage == "base" else (lambda n: n)  # base is in every run
            for p in parts:
                pairs += [(by_name[t], taskset.Solution(c, name(n))) for t, c, n in p["pairs"]]
                owner += [(root, stage)] * len(p["pairs"])
                failed += [((root, stage), kernels.Verdict(**dict(d, solution=name(d["solution"]))))
                           for d in p["failed"]]
                samples += [dict(s, run=root, stage=stage) for s in p["samples"]]
    judged = common.sharded(functools.partial(ev.evaluate, desc="judging every run's samples"), pairs, rank, world)
    got = {}
    for key, v in list(zip(owner, judged)) + failed:
        got.setdefault(key, []).append(v)
    verdicts = judged + [v for _, v in failed]
    set_aside = sorted({v.task for v in verdicts if set(APART) & set(v.flags)}
                       | ablation.flagged_in_dbs(cfg, runs, APART))
    per_run = {root: {stage: stage_numbers(got.get((root, stage), []), set(set_aside)) for stage, _ in found}
               for root, (found, _) in runs.items()}
    result = dict(runs={root: dict(checkpoints=dict(found), missing=missing)
                        for root, (found, missing) in runs.items()},
                  samples=cfg["samples"], tasks=[t.name for t in tasks], set_aside=set_aside, per_run=per_run,
                  aggregate=ablation.aggregate(per_run), ratios=ablation.ratios(per_run, apart=set(set_aside)),
                  per_task=ablation.per_task(per_run))
    if rank == 0:
        ablation.print_report(result)
    return verdicts, result, samples


# Evaluator settings that decide where and how fast a run goes, not what its verdicts say.
OPERATIONAL = ("gpus", "workers", "checks_per_gpu", "cache_dir")


def settings_key(cfg, device, language, kernelbench):
    """A fingerprint of the settings a verdict depends on: journalled verdicts are reused
    (--resume) only under the same ones."""
    judged = {k: cfg[k] for k in config.SETTINGS["evaluator"][1] if k not in OPERATIONAL}
    # the device judged on keeps its old key ("backend", a setting's name until --device took
    # its place): journals written before stay readable under the same fingerprint
    return taskset.sha(json.dumps(dict(judged, backend=device, language=language, kernelbench=kernelbench), sort_keys=True,
                                  default=str))[:16]


def earlier_verdicts(cfg, key):
    """(task hash, source hash) -> a verdict's fields, from every journal under out/evaluate
    written with the settings fingerprint `key` (a line torn by a kill is skipped)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(cfg["out"], "evaluate", "*.verdicts*.jsonl"))):
        for row in common.read_jsonl(path, torn_tail=True):
            if row.get("settings") == key:
                out[(row["task_hash"], row["verdict"]["source_hash"])] = row["verdict"]
    return out


def judge_solutions(cfg, ev, pairs, stamp, rank, world):
    """Solutions mode's judging: verdicts journalled as they land, those of earlier runs
    reused with --resume -> [Verdict] in the pairs' order. In an audit (solutions with
    published speedups) KernelBench's verdict is asked for too (--kernelbench_verdict)."""
    audit = any(s.score is not None for _, s in pairs)
    kb = cfg["kernelbench_verdict"] == "always" or (cfg["kernelbench_verdict"] == "audit" and audit)
    key = settings_key(cfg, ev.device, ev.language, kb)
    before = earlier_verdicts(cfg, key) if cfg["resume"] else {}
    old = {i: before[k] for i, (t, s) in enumerate(pairs) if (k := (t.hash, taskset.sha(s.code or ""))) in before}
    if cfg["resume"] and rank == 0:
        print(f"resumed: {len(old)} of {len(pairs)} verdicts from earlier runs with these settings")
    path = os.path.join(cfg["out"], "evaluate", f"{stamp}.verdicts" + (f"-rank{rank}" if world > 1 else "") + ".jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)

    def judge(part):
        with open(path, "a") as f:
            def land(i, v):
                f.write(json.dumps(dict(settings=key, task_hash=part[i][0].hash, verdict=v.to_dict())) + "\n")
                f.flush()
            return ev.evaluate(part, on_verdict=land, kernelbench=kb)
    fresh = iter(common.sharded(judge, [p for i, p in enumerate(pairs) if i not in old], rank, world))
    return [kernels.Verdict(**dict(old[i], task=t.name, solution=s.name)) if i in old else next(fresh)
            for i, (t, s) in enumerate(pairs)]


def time_account(events, trace, workers, slots, t0, t1, device="cuda"):
    """Where a run's wall time [t0, t1] (gate.now() clock) went -> dict: the share of the
    compile workers' and the run workers' capacity their jobs filled (Evaluator.events), and
    per device (each GPU, or the CPU) the share spent timing, waiting for pause points, or
    neither (gate.gate_share on Evaluator.trace). It says which side bounds a long run:
    builds on the host, or the device."""
    wall = max(t1 - t0, 1e-9)

    def busy(kind, n):  # job seconds inside [t0, t1] over n workers' time
        ts = sorted((t, w) for t, k, w in events if k == kind)
        live, last, total = 0, t0, 0.0
        for t, w in ts:
            t = min(max(t, t0), t1)
            total += live * (t - last)
            live, last = live + (1 if w == "start" else -1), t
        return (total + live * (t1 - last)) / (wall * max(n, 1))
    gpus = {g: {k: v / wall for k, v in a.items()} for g, a in kernels.gate.gate_share(trace, t0, t1).items()}
    return dict(seconds=wall, compile_busy=busy("compile", workers), run_busy=busy("run", slots), gpus=gpus,
                device="GPU" if device == "cuda" else "CPU")


def print_account(a):
    line = (f"time: {a['seconds']:.0f} s; compile workers busy {a['compile_busy']:.0%}, "
            f"run workers {a['run_busy']:.0%}")
    for g, s in a["gpus"].items():
        line += (f"; {a.get('device', 'GPU')} {g}: timing {s['timing']:.0%}, waiting for pause points {s['waiting']:.0%}, "
                 + (f"the reference timer checking {s['checking']:.0%}, " if s.get("checking") else "")
                 + f"neither {s['other']:.0%}")
    print(line)


def device_why(cfg, device):
    """Why this machine runs candidates on `device` (kernels.target's choice), for error
    messages."""
    if cfg["device"] != "auto" and cfg["device"].split(":")[0] == device:
        return f"--device={cfg['device']}"
    if cfg["language"] != "auto":
        return f"--language={cfg['language']}"
    import torch
    if device == "cuda":
        return "a CUDA GPU and nvcc found"
    return "nvcc not on PATH" if torch.cuda.is_available() else "no CUDA GPU"


def nothing_to_evaluate(p, cfg, ev, tasks):
    """Why pair_up left no pairs (p, a taskset.Pairing) and what to do: each solution was
    written in another kernel language than ev's or matched none of `tasks`."""
    parts, todo = [], []
    if p.other_language:
        k = len(p.other_language)
        wrote = " and ".join(sorted({taskset.solution_language(s.code) for _, s in p.other_language}))
        seeds = os.path.relpath(os.path.join(taskset.BUILTIN_TASKS, "seeds", ev.language))
        parts.append((k, f"{'is' if k == 1 else 'are'} written for {wrote} and this machine runs {ev.language} "
                         f"on {ev.device} ({device_why(cfg, ev.device)})"))
        todo.append(f"give solutions written for {ev.language} (the built-in tasks' are in {seeds})")
        if ev.device == "cuda":
            todo.append("run them with --device=cpu")
        elif cfg["device"] != "cpu":
            todo.append("run on a machine with a CUDA GPU and nvcc")
        else:
            todo.append("drop --device=cpu (on a machine with a CUDA GPU and nvcc)")
    if p.unmatched:
        k, names = len(p.unmatched), ", ".join(t.name for t in tasks[:8]) + (", ..." if len(tasks) > 8 else "")
        where = f"of --tasks {cfg['tasks']}" if tasks else "as they carry no ref_code and no --tasks was given"
        parts.append((k, f"{'matches' if k == 1 else 'match'} no task {where} (e.g. {shown(p.unmatched[0].name)})"))
        todo.append("name solutions after their task: a folder gelu/, a file gelu_*.py, or KernelBench ids "
                    "level1/19_*.py" + (f" (tasks: {names})" if tasks else ""))
    if not parts:
        return "nothing to evaluate"
    if len(parts) == 1:
        n = parts[0][0]
        why = f"{'the one solution' if n == 1 else f'all {n} solutions'} {parts[0][1]}"
    else:
        why = "no solution can run here: " + "; ".join(f"{k} {text}" for k, text in parts)
    return f"{why}: {', or '.join(todo)}"


def merge_mode(cfg):
    """--merge: stage comparisons of runs judged apart -> one report over all their runs, its
    files beside the others (out/evaluate/<time>.ablation.*); nothing is sampled or judged."""
    if cfg["samples"] or cfg["runs"] or cfg["checkpoint"] or cfg["solutions"] or cfg["reference_only"]:
        raise ValueError("--merge reads comparisons already made: it takes no --samples, --runs, --checkpoint, "
                         "--solutions or --reference_only")
    files = list(dict.fromkeys(f.strip() for f in cfg["merge"].split(",") if f.strip()))
    results = []
    for f in files:
        if not os.path.isfile(f):
            raise FileNotFoundError(f"--merge {f}: no such file (evaluate.py --runs writes "
                                    f"out/evaluate/<time>.ablation.json)")
        try:
            with open(f) as fh:
                r = json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"--merge {f}: not JSON ({e})") from None
        if not isinstance(r, dict) or not {"runs", "per_run", "set_aside"} <= set(r):
            raise ValueError(f"--merge {f}: not a stage comparison (evaluate.py --runs writes "
                             f"out/evaluate/<time>.ablation.json)")
        results.append(r)
    result = ablation.merge(results, files)
    result["command"] = ablation.command(cfg)
    ablation.print_report(result)
    ablation.print_discovery(result["discovery"])
    stem = os.path.join(cfg["out"], "evaluate", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    paths = ablation.write_files(result, stem)
    print(f"stage comparison over {len(result['runs'])} run(s) from {len(files)} file(s): {', '.join(paths.values())}")
    return [], result


def run(cfg):
    if cfg["merge"]:
        return merge_mode(cfg)
    rank, world, cfg = common.dist_setup(cfg)  # under torchrun: one GPU and a share of the cores per rank
    t0, stamp = time.time(), time.strftime("%Y%m%d-%H%M%S")
    all_tasks = taskset.load_tasks(cfg["tasks"])
    solutions = taskset.load_solutions(cfg["solutions"]) if cfg["solutions"] else []
    # records that bring their own tasks (the CUDA-L1 release) are kept by --only after pairing
    own = bool(solutions) and taskset.brings_own_tasks(cfg["tasks"], solutions)
    tasks = all_tasks if own else taskset.select(all_tasks, cfg["only"])
    if cfg["runs"] and (not cfg["samples"] or cfg["checkpoint"] or cfg["exemplars_db"]):
        raise ValueError("--runs samples every stage checkpoint of each run, with exemplars from its Stage 1 data: "
                         "it needs --samples k, and takes no --checkpoint or --exemplars_db")
    if cfg["samples"]:  # every model named must load, and the device must exist, before any sampling starts
        cks = [ck.strip() for ck in cfg["checkpoint"].split(",")] if cfg["checkpoint"] else ["base"]
        if cfg["runs"]:
            cks = ["base"] + [ck for found, _ in ablation.check_runs(cfg).values() for _, ck in found[1:]]
        policy.preflight(cfg, [cfg["model"] if ck in ("", "base") else ck for ck in cks])
    if cfg["exemplars_db"] and not cfg["samples"]:
        raise ValueError("--exemplars_db shows exemplars in model-mode prompts: it needs --samples k")
    if cfg["exemplars_db"] and not os.path.isfile(cfg["exemplars_db"]):
        raise FileNotFoundError(f"--exemplars_db {cfg['exemplars_db']}: no such file (crl.py writes "
                                f"out/<config>/crl/db.jsonl)")
    if not cfg["reference_only"] and not solutions and not cfg["samples"]:
        if cfg["solutions"]:  # a .py is always one solution: this is a folder or a .jsonl/.json
            raise ValueError(f"{cfg['solutions']} holds no solutions: " + (
                "it has no records" if os.path.isfile(cfg["solutions"]) else
                "it has no .py files (solutions are .py files defining ModelNew, in it or its subfolders, "
                "named after their task: gelu/fast.py, gelu_fast.py, level1/19_GELU.py)"))
        raise ValueError("give --solutions (a .py, a folder or a .jsonl), --samples k (model mode), "
                         "or --reference_only")
    samples = None
    with kernels.Evaluator(cfg, progress=cfg["progress"] and rank == 0) as ev:
        print(f"rank {rank}/{world}: " * (world > 1) + f"{ev.language} on {ev.device}, "
              f"{len(ev.gpus) if ev.device == 'cuda' else 0} GPU(s), {ev.workers} compile workers, cache {ev.cache}")
        if cfg["reference_only"]:
            verdicts = common.sharded(ev.run_references, tasks, rank, world)
            bad = [v for v in verdicts if not v.ok]
            for v in verdicts if rank == 0 else []:
                print(f"{v.task[:40]:40s} {v.status:10s} {_fmt(v.ref_ms, '.3f'):>10s} ms  {v.message[:60]}")
            if rank == 0:
                print(f"\n{len(verdicts) - len(bad)}/{len(verdicts)} references ran")
            summary = {"references_ok": len(verdicts) - len(bad), "n": len(verdicts)}
        elif cfg["runs"]:
            verdicts, summary, samples = runs_mode(cfg, tasks, ev, rank, world)
        elif cfg["samples"]:
            verdicts, summary, samples = model_mode(cfg, tasks, ev, rank, world)
        else:
            p = taskset.pair_up([] if own else all_tasks, solutions, cfg["only"], ev.language)
            if not p.pairs:  # the error says why each was left out: no "skipped" lines before it
                raise ValueError(nothing_to_evaluate(p, cfg, ev, [] if own else all_tasks))
            if p.unmatched:
                print(f"{len(p.unmatched)} solution(s) match no task, skipped (e.g. {shown(p.unmatched[0].name)})")
            if p.other_language:
                print(f"{len(p.other_language)} solution(s) written in another language than {ev.language}, skipped")
            g0 = kernels.gate.now()
            verdicts = judge_solutions(cfg, ev, p.pairs, stamp, rank, world)
            if rank == 0:
                print()
                summary = report(verdicts)
                summary["time"] = time_account(ev.events, ev.trace, ev.workers, len(ev.slots), g0, kernels.gate.now(),
                                               ev.device)
                print_account(summary["time"])
                if any(s.score is not None for _, s in p.pairs):  # an audit of published numbers
                    summary["audit"] = audit(p.pairs, verdicts)
    common.dist_teardown()
    if rank != 0:  # rank 0 reports and writes
        return verdicts, None
    path = os.path.join(cfg["out"], "evaluate", f"{stamp}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(dict(config=cfg, device=ev.device, language=ev.language, summary=summary, seconds=time.time() - t0,
                       verdicts=[v.to_dict() for v in verdicts], samples=samples), f, indent=1)
    print(f"results: {path} ({time.time() - t0:.0f} s)")
    if summary and summary.get("audit"):
        md, csv_path = write_audit(summary["audit"]["rows"], path[:-len(".json")])
        print(f"audit table: {md}, {csv_path}")
    if cfg["runs"]:  # after the main evaluator has closed: discoveries are judged again in a fresh one
        ablation.finish(cfg, summary, path[:-len(".json")], all_tasks, ev.device)
    return verdicts, summary


def main(argv=None):
    return config.cli(run, argv, "evaluate.py", __doc__, config.EVALUATE, resumable=False)


if __name__ == "__main__":
    main()
