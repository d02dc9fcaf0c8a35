"""Score solutions on a task set, honestly: success rate, speedups, fast_p, rejection reasons.

    python evaluate.py --tasks builtin --solutions tasks/seeds/cpu
    python evaluate.py --tasks builtin --solutions tasks/seeds/cuda --baseline compile
    python evaluate.py --tasks ../KernelBench/KernelBench/level1 --solutions runs/level1
    python evaluate.py --solutions cuda_l1_h100.jsonl      # records carry their own ref_code
    python evaluate.py --tasks ../shared/kernelbench/problems.jsonl --reference_only

Settings are config.py's (`--key=value`); the full results go to out/evaluate/<time>.json.
"""
import json
import math
import os
import sys
import time

import config
import kernels

FAST_P = (0.0, 1.0, 1.5, 2.0)


def summarize(verdicts):
    """Verdicts -> the headline numbers. Mean speedup counts failures as 0 (as CUDA-L1
    reports); geometric mean, median and max are over successes; fast_p is the fraction
    of all candidates that are correct and faster than p times the reference."""
    n = len(verdicts)
    ok = [v.speedup for v in verdicts if v.ok]
    reasons = {}
    for v in verdicts:
        if not v.ok:
            key = f"{v.status}/{v.reason}"
            reasons[key] = reasons.get(key, 0) + 1
    return dict(
        n=n, ok=len(ok), success_rate=len(ok) / n if n else 0.0,
        mean_speedup=sum(ok) / n if n else 0.0,
        geomean_speedup=math.exp(sum(math.log(s) for s in ok) / len(ok)) if ok else 0.0,
        median_speedup=kernels._median(ok) if ok else 0.0,
        max_speedup=max(ok) if ok else 0.0,
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


def print_table(verdicts):
    rows = [("task", "solution", "status", "reason", "speedup", "ref ms", "new ms", "spread", "err")]
    for v in verdicts:
        rows.append((v.task[:28], os.path.relpath(v.solution)[-34:] if os.path.exists(v.solution) else v.solution[-34:],
                     v.status, v.reason, _fmt(v.speedup if v.ok else None), _fmt(v.ref_ms, ".3f"),
                     _fmt(v.new_ms, ".3f"), _fmt(v.spread, ".3f"), _fmt(v.max_err, ".1e")))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


def print_summary(s, title):
    fp = "  ".join(f"fast_{p}={s['fast_p'][p]:.2f}" for p in s["fast_p"])
    print(f"{title}: {s['ok']}/{s['n']} correct ({100 * s['success_rate']:.0f}%), "
          f"mean speedup {s['mean_speedup']:.3f}x (failures as 0), geomean {s['geomean_speedup']:.3f}x, "
          f"median {s['median_speedup']:.3f}x, max {s['max_speedup']:.3f}x")
    print(f"  {fp}")
    if s["reasons"]:
        print("  failures: " + ", ".join(f"{k} {n}" for k, n in s["reasons"].items()))


def report(verdicts):
    """Per-candidate table, then summaries; tasks flagged input_independent apart."""
    print_table(verdicts)
    main = [v for v in verdicts if "input_independent" not in v.flags]
    flagged = [v for v in verdicts if "input_independent" in v.flags]
    out = {"all": summarize(main)}
    print()
    print_summary(out["all"], "candidates")
    if len({v.task for v in main}) < len(main):
        out["best_per_task"] = summarize(best_per_task(main))
        print_summary(out["best_per_task"], "best per task")
    if flagged:
        out["flagged"] = summarize(flagged)
        names = sorted({v.task for v in flagged})
        print(f"flagged input_independent (output never changes with the input; not in the numbers above): "
              f"{', '.join(names)}; their best speedup {max([v.speedup for v in flagged] + [0]):.1f}x")
    return out


def wanted(task, only):
    """--only: comma list of task names or KernelBench ids (L1_19); empty keeps all."""
    keep = set(only.split(","))
    return not only or task.name in keep or (task.level is not None and f"L{task.level}_{task.problem_id}" in keep)


def main(argv=None):
    try:
        cfg = config.parse(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        sys.exit(f"evaluate.py: {e}")
    t0 = time.time()
    try:
        all_tasks = kernels.load_tasks(cfg["tasks"])
        tasks = [t for t in all_tasks if wanted(t, cfg["only"])]
        solutions = kernels.load_solutions(cfg["solutions"]) if cfg["solutions"] else []
    except kernels.TaskError as e:
        sys.exit(f"evaluate.py: {e}")
    if not cfg["reference_only"] and not solutions:
        sys.exit("evaluate.py: give --solutions (a .py, a folder or a .jsonl), or --reference_only")
    with kernels.Evaluator(cfg) as ev:
        print(f"backend {ev.backend}, {len(ev.gpus) if ev.backend == 'cuda' else 0} GPU(s), "
              f"{ev.workers} compile workers, cache {ev.cache}")
        if cfg["reference_only"]:
            verdicts = ev.run_references(tasks)
            bad = [v for v in verdicts if not v.ok]
            for v in verdicts:
                print(f"{v.task[:40]:40s} {v.status:10s} {_fmt(v.ref_ms, '.3f'):>10s} ms  {v.message[:60]}")
            print(f"\n{len(verdicts) - len(bad)}/{len(verdicts)} references ran")
            summary = {"references_ok": len(verdicts) - len(bad), "n": len(verdicts)}
        else:
            # with --tasks left at its default, solutions carrying ref_code bring their own tasks
            pairs, unmatched = kernels.match(all_tasks if cfg["tasks"] != "builtin" or not any(
                s.ref_code for s in solutions) else [], solutions)
            if unmatched:
                print(f"{len(unmatched)} solution(s) match no task, skipped (e.g. {unmatched[0].name})")
            pairs = [(t, s) for t, s in pairs if wanted(t, cfg["only"])]
            other = [(t, s) for t, s in pairs if kernels.solution_backend(s.code) not in (None, ev.backend)]
            if other:
                print(f"{len(other)} solution(s) written for another backend than {ev.backend}, skipped")
                pairs = [p for p in pairs if p not in other]
            if not pairs:
                sys.exit("evaluate.py: nothing to evaluate")
            verdicts = ev.evaluate(pairs)
            print()
            summary = report(verdicts)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(cfg["out"], "evaluate", f"{stamp}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(dict(config=cfg, backend=ev.backend, summary=summary, seconds=time.time() - t0,
                       verdicts=[v.to_dict() for v in verdicts]), f, indent=1)
    print(f"results: {path} ({time.time() - t0:.0f} s)")
    return verdicts, summary


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("\nevaluate.py: interrupted; workers stopped, no results written")
    except ValueError as e:
        sys.exit(f"evaluate.py: {e}")
