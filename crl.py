"""Stage 3: contrastive RL (paper section 3.3; README "How it works"), and the whole
pipeline from one command.

    python crl.py --config small                        # Stages 1, 2, 3 on the built-in tasks, offline
    python crl.py --config small --exemplars random     # the ablation: random exemplars, out/small/crl-random
    python crl.py --config small --init_from out/small/selftrain --crl_steps 40
    torchrun --nproc_per_node=8 crl.py --config small   # one rank per GPU

When the Stage 1 or Stage 2 checkpoint it starts from is missing, it runs that stage first.
Each step: pick tasks; for each, show the model N earlier variants from the database with
their measured speedups (bucket sampling, exemplars.py) and sample G responses; judge them
through the kernels package (reward = speedup, 0 for a failure); smooth the rewards within each
group (r_hat = clip((r - mean) / std, -k, k)); update with GRPO (grpo.py: PPO-style clipped
ratio, optional k3 KL to the frozen starting model). Every judged variant enters the
database. With --overlap a step's candidates are judged while the next step's prompts are
sampled (those samples are one update stale: their PPO ratio is taken against the log-probs
they were drawn with), and no candidate is timed while the policy uses the GPU. Writes
out/<config>/crl/: the checkpoint (every `crl_ckpt_every` steps),
db.jsonl (the exemplar database), log.jsonl (one line per step), samples/, curves.png
(with matplotlib). Killed, even with kill -9? Run the same command again: it resumes from
the last checkpoint with the database intact.
"""
import functools
import math
import os
import random
import sys
import time
from dataclasses import dataclass

import torch

import common
import config
import exemplars
import grpo
import kernels
import optim
import policy
import prompts
import sampler
import selftrain
import sft
import taskset


@dataclass
class Run:
    """What every step of a Stage 3 run works with."""
    cfg: dict
    model: object
    sampler: object     # sampler.Sampler: the bf16 copy and captured graphs, kept across steps
    ref_logprobs: object  # log-probs under the frozen starting model (policy.reference), or None
    opt: object
    tok: object
    tasks: list
    db: exemplars.Database
    ev: kernels.Evaluator
    rank: int
    world: int
    out: str
    set_aside: set      # tasks whose output never changes with the input: out of the numbers
    updates: int = 0    # updates made by this process: a Draw made before the last one is stale


@dataclass
class Draw:
    """One step's prompts and samples, drawn; judged next (in a thread with --overlap)."""
    step: int
    mine: list          # this rank's tasks
    shown: list         # the exemplars each prompt showed
    samples: list       # G per task, in order
    each: list          # the task of every sample, in order
    gen_s: float
    updates: int        # Run.updates when drawn
    judged: dict = None  # judge(): parsed responses, database rows, seconds


def judge_samples(ev, db, tasks_and_codes, step, origin):
    """[(task, code or None)] -> [row]: database rows (the stored one when this exact code
    was judged before: a variant is measured once), new rows marked new=True."""
    rows, todo = [None] * len(tasks_and_codes), []
    for i, (task, code) in enumerate(tasks_and_codes):
        old = db.lookup(task.hash, taskset.sha(code or ""))
        if old is not None:
            rows[i] = dict(old, new=False)
        elif code is not None:
            todo.append(i)
        # else: an unusable response gets no row
    verdicts = ev.evaluate([tasks_and_codes[i] for i in todo], desc=f"step {step} judging") if todo else []
    for i, v in zip(todo, verdicts):
        task, code = tasks_and_codes[i]
        rows[i] = dict(task=task.name, task_hash=task.hash, source_hash=v.source_hash, code=code, status=v.status,
                       reason=v.reason, speedup=v.speedup if v.ok else 0.0, step=step, origin=origin,
                       flags=v.flags, message=v.message[:300], new=True)
    return rows


def seed_database(cfg, db, ev, tasks, rank, world):
    """Stage 1 and 2 successes enter the database, timed now (those stages ignore speed)."""
    by_name = {t.name: t for t in tasks}
    found, seen = [], set()
    for stage, fname in (("sft", "data.jsonl"), ("selftrain", "successes.jsonl")):
        path = os.path.join(common.stage_dir(cfg, stage), fname)
        for r in common.read_jsonl(path) if os.path.exists(path) else []:
            t = by_name.get(r["task"])
            if t is not None and r.get("code") and (t.name, r["source_hash"]) not in seen:
                seen.add((t.name, r["source_hash"]))
                found.append((t, r["code"], stage))
                if "timed" in r:  # Stage 1 timed its kept variants (sft_exemplars): no need to again
                    db.add([dict(task=t.name, task_hash=t.hash, source_hash=r["source_hash"], code=r["code"],
                                 speedup=r["speedup"], step=0, origin=stage, **r["timed"])], write=rank == 0)
    rows = common.sharded(lambda part: judge_samples(ev, db, [(t, c) for t, c, _ in part], 0, "seed"),
                          found, rank, world)
    db.add([dict(r, new=False, origin=stage) for r, (_, _, stage) in zip(rows, found) if r["new"]], write=rank == 0)
    ok = sum(r["status"] == "ok" for r in db.rows)
    if rank == 0:
        print(f"crl: database seeded with {len(found)} variants from Stages 1-2 ({ok} correct when timed)")


def step_tasks(tasks, step, per_step, seed):
    """Tasks for this step: a fixed shuffle per pass over the task list, so every task gets
    its turn and a resumed run picks the same tasks."""
    per_pass = max(1, len(tasks) // per_step) if per_step < len(tasks) else 1
    rng = random.Random(seed * 1000003 + step // per_pass)
    order = list(range(len(tasks)))
    rng.shuffle(order)
    k = step % per_pass
    return [tasks[i] for i in order[k * per_step:(k + 1) * per_step]] if per_step < len(tasks) else list(tasks)


def passes(log, pass_len):
    """Log rows -> one record per pass (pass_steps) over the tasks: (first step, last step,
    success rate, mean speedup with failures as 0), over the tasks not set aside. A single
    step covers only some tasks, so its numbers jump with which tasks it drew."""
    out = []
    for i in range(0, len(log), pass_len):
        rows = log[i:i + pass_len]
        rw = [x for r in rows for t, xs in r.get("tasks", {}).items() if t not in r.get("set_aside", []) for x in xs]
        if rw:
            out.append((rows[0]["step"], rows[-1]["step"], sum(x > 0 for x in rw) / len(rw), sum(rw) / len(rw)))
    return out


def plot_curves(log_path, png_path, pass_len):
    """Training curves as a PNG, when matplotlib is installed (an optional dependency):
    each step faint, each full pass over the tasks bold; success on a fixed 0-1 axis."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = common.read_jsonl(log_path)
    per_pass = passes(rows, pass_len)
    keys = ["success_rate", "mean_speedup", "reward_std", "kl", "clip_frac", "skipped_groups"]
    fig, axes = plt.subplots(2, 3, figsize=(12, 6))
    for ax, k in zip(axes.flat, keys):
        ax.plot([r["step"] for r in rows], [r[k] for r in rows], color="tab:blue", alpha=0.35, label="step")
        if k in ("success_rate", "mean_speedup") and per_pass:
            col = 2 if k == "success_rate" else 3
            ax.plot([p[1] for p in per_pass], [p[col] for p in per_pass], "o-", color="tab:blue", lw=2,
                    label=f"pass over the tasks ({pass_len} steps)")
            ax.legend(fontsize=7)
        if k == "success_rate":
            ax.set_ylim(0, 1.02)
        ax.set_title(k + (" (failures as 0)" if k == "mean_speedup" else ""))
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)
    return True


def pass_steps(tasks, per_step):
    """Steps that draw as many prompts as there are tasks: the window the curves and the
    closing report average over."""
    return -(-len(tasks) // per_step)


# ----------------------------------------------------------------------------------------
# Stage 3


def run_earlier_stages(cfg, rank=0):
    """The one-command pipeline: run Stage 1 and Stage 2 when their checkpoints are missing
    (under torchrun on every rank, as their own scripts would)."""
    for name, module in (("Stage 1", sft), ("Stage 2", selftrain)):
        stage = module.__name__
        if common.is_done(common.stage_dir(cfg, stage)):  # skipped: it must be this command's model
            common.check_resumable(cfg, common.stage_dir(cfg, stage), starts_from=True)
        else:
            if rank == 0:
                print(f"crl: no finished {name} checkpoint in {common.stage_dir(cfg, stage)}: "
                      f"running {name} ({stage}.py) first")
            module.run(cfg)
    return common.stage_dir(cfg, "selftrain")


def run(cfg):
    rank, world, cfg = common.dist_setup(cfg)
    stage = "crl" if cfg["exemplars"] == "bucket" else f"crl-{cfg['exemplars']}"
    # a Stage 3 folder of another model or start is refused now, not after Stages 1 and 2 ran
    common.check_resumable(cfg, common.stage_dir(cfg, stage))
    if cfg["init_from"]:
        policy.preflight(cfg, [cfg["init_from"]])
    else:  # the earlier stages may run first: their teachers and model are checked now, not in an hour
        sft.preflight(cfg)
    start_from = cfg["init_from"] or run_earlier_stages(cfg, rank)
    # Stage 3 samples (and scores log-probs) at its own temperature: a group whose G samples
    # are all the same variant has zero spread and teaches nothing. (Stages 1-2 above keep
    # `temperature`, as when run on their own.)
    cfg = dict(cfg, temperature=cfg["crl_temperature"])
    # a Stage 3 checkpoint is never marked finished: more steps can always follow
    out, _ = common.start_stage(cfg, stage, write_config=rank == 0)
    if common.has_checkpoint(out):
        model, tok, state = policy.load_checkpoint(out, cfg)
        if state["step"] >= cfg["crl_steps"]:
            print(f"crl: {out} has run its {state['step']} steps (raise --crl_steps to go on, or delete it)")
            if rank == 0:
                report(cfg, out, exemplars.Database(os.path.join(out, "db.jsonl"), repair=False),
                       taskset.select(taskset.load_tasks(cfg["tasks"]), cfg["only"]), start_from)
            common.dist_teardown()
            return out
        print(f"crl: resuming after step {state['step']}")
        log = os.path.join(out, "log.jsonl")
        if rank == 0 and os.path.exists(log):  # steps logged after that checkpoint run again: their rows go
            rows = common.read_jsonl(log, torn_tail=True)
            common.write_jsonl(log, [rec for rec in rows if rec.get("step", 0) <= state["step"]])
    else:  # a stage's checkpoint, a model folder or a hub name
        model, tok = policy.load(cfg, start_from, train=True)
        state = dict(step=0)
    if world > 1:  # the same weights everywhere, different sampling noise on each rank
        torch.manual_seed(cfg["seed"] * 1000 + rank + 100003 * state["step"])
    # the KL reference: the model Stage 3 started from
    ref_logprobs = policy.reference(cfg, model, start_from)
    model = policy.prepare(model, cfg, world)  # FSDP2 shards under torchrun with --fsdp
    opt = optim.optimizer(model, cfg["crl_lr"], cfg, state)
    tasks = taskset.select(taskset.load_tasks(cfg["tasks"]), cfg["only"])
    db = exemplars.Database(os.path.join(out, "db.jsonl"), repair=rank == 0)
    os.makedirs(os.path.join(out, "samples"), exist_ok=True)
    t_start = time.time()
    with kernels.Evaluator(cfg, time_candidates=True, progress=cfg["progress"] and rank == 0) as ev:
        if not ev.cfg["time_candidates"]:  # Triton's interpreter on a CPU: checked, never timed
            raise ValueError(f"Stage 3's reward is a measured speedup, and {ev.language} candidates on the "
                             f"{ev.device} are not timed: run it on a GPU")
        if state["step"] == 0 and not (state.get("extra") or {}).get("seeded"):
            seed_database(cfg, db, ev, tasks, rank, world)
        smp = sampler.Sampler(policy.unwrap(model), cfg)
        set_aside = {row["task"] for row in db.rows if "input_independent" in (row.get("flags") or [])}
        r = Run(cfg, model, smp, ref_logprobs, opt, tok, tasks, db, ev, rank, world, out, set_aside)
        step = first = state["step"]
        pass_len = pass_steps(tasks, cfg["crl_tasks_per_step"])
        if cfg["overlap"] and world > 1:
            print("crl: --overlap is for one process; under torchrun each step is judged before the next")
        schedule = grpo.steps(functools.partial(draw, r), functools.partial(judge, r), functools.partial(update, r),
                              first, cfg["crl_steps"], cfg["overlap"] and world == 1, cancel=ev.cancel)
        try:
            for rec in schedule:
                step = rec["step"]
                if rank == 0:
                    common.append_jsonl(os.path.join(out, "log.jsonl"), [rec])
                    print(step_line(rec), flush=True)
                if step % cfg["crl_ckpt_every"] == 0 or step == cfg["crl_steps"]:
                    # every rank takes part (FSDP2 gathers the shards); rank 0 writes
                    policy.save_checkpoint(out, model, tok, opt, step, cfg, dict(seeded=True), write=rank == 0)
                    if rank == 0:
                        plot_curves(os.path.join(out, "log.jsonl"), os.path.join(out, "curves.png"), pass_len)
                common.barrier(world)
        except KeyboardInterrupt:
            schedule.close()  # a judging in flight: its workers stopped, its thread ended
            sys.exit(f"\ncrl: interrupted in step {step + 1}; the last checkpoint and the database are in {out}; "
                     f"run the same command to resume")
    if rank == 0:
        print(f"crl: {step - first} steps in {time.time() - t_start:.0f} s"
              + (f" (after {first} before)" if first else ""))
        report(cfg, out, db, tasks, start_from)
    common.dist_teardown()
    return out


def draw(r, step):
    """A step's prompts (tasks, exemplars from the database) and G samples of each -> Draw.
    The policy's GPU work: no candidate is timed meanwhile (Evaluator.host_gpu)."""
    cfg = r.cfg
    mine = step_tasks(r.tasks, step - 1, cfg["crl_tasks_per_step"], cfg["seed"])[r.rank::r.world]
    rng = random.Random(cfg["seed"] * 7919 + step * 131 + r.rank)
    shown = [exemplars.pick_exemplars(r.db, t, cfg, rng) for t in mine]
    msgs = [prompts.task_prompt(t.code, r.ev.language, ex) for t, ex in zip(mine, shown)]
    t0 = time.time()
    with r.ev.host_gpu():
        samples = grpo.sample(cfg, r.sampler, r.tok, msgs)
    each = [t for t in mine for _ in range(cfg["crl_samples"])]
    return Draw(step, mine, shown, samples, each, time.time() - t0, r.updates)


def judge(r, d):
    """Judge a Draw's samples (variants judged before keep their rows): d.judged. No
    collectives and no database writes, so it may run in a thread beside draw() (--overlap)."""
    t0 = time.time()
    parsed = [prompts.parse_response(s.text) for s in d.samples]
    rows = judge_samples(r.ev, r.db, [(t, p.code) for t, p in zip(d.each, parsed)], d.step, "crl")
    d.judged = dict(parsed=parsed, rows=rows, seconds=time.time() - t0)


def update(r, d, wait, t0):
    """A judged Draw: its new variants into the database (gathered over ranks), rewards
    (speedup, 0 for a failure), the update (grpo.learn) -> the step's log record (same keys
    every step). wait: seconds the step waited for its judging after drawing the next
    (--overlap); t0: when the step began."""
    cfg, G, step = r.cfg, r.cfg["crl_samples"], d.step
    mine, shown, each = d.mine, d.shown, d.each
    parsed, rows = d.judged["parsed"], d.judged["rows"]
    new = [row for part in common.all_gather([dict(row, new=False) for row in rows if row and row["new"]], r.world)
           for row in part]
    added = r.db.add(new, write=r.rank == 0)  # a variant sampled twice in a step is one new variant
    rewards = [row["speedup"] if row and row["status"] == "ok" else 0.0 for row in rows]
    t1 = time.time()
    stale = d.updates < r.updates  # drawn before the last update (--overlap)
    for g in r.opt.param_groups:  # from the step number: right after a resume too
        g["lr"] = grpo.warmup_lr(cfg["crl_lr"], step, cfg["crl_warmup"])
    with r.ev.host_gpu():
        adv, st = grpo.learn(cfg, r.model, r.ref_logprobs, r.opt, r.tok, d.samples, update_rewards(rows, rewards),
                             r.world, stale)
    r.updates += 1
    update_s, flat = time.time() - t1, list(zip(each, d.samples))
    skipped = int((adv == 0).all(dim=1).sum())
    if step % cfg["dump_every"] == 0 or step == 1:  # reading rollouts is the main debugging tool
        dump = [dict(task=t.name, exemplars=[e["speedup"] for e in ex], text=s.text, finished=s.finished,
                     status=row["status"] if row else "compile_error", reason=row["reason"] if row else p.reason,
                     speedup=rw, sections=prompts.sections_present(s.text))
                for (t, s), p, row, rw, ex in zip(flat, parsed, rows, rewards, [e for e in shown for _ in range(G)])]
        common.write_jsonl(os.path.join(r.out, "samples", f"step_{step}_rank{r.rank}.jsonl"), dump)
    r.set_aside |= {row["task"] for row in rows if row and "input_independent" in (row.get("flags") or [])}
    by_task = {}
    for (t, _), x in zip(flat, rewards):
        by_task.setdefault(t.name, []).append(x)
    every = common.all_gather(dict(rewards=rewards, by_task=by_task, set_aside=sorted(r.set_aside),
                                   gen_tok=sum(len(s.ids) for _, s in flat), skipped=skipped,
                                   groups=len(mine), db=len(r.db.rows),
                                   params=param_checksum(r.model) if r.world > 1 else 0.0), r.world)
    # the invariants of data parallelism: one database, one set of weights on every rank
    if len({(e["db"], e["params"]) for e in every}) > 1:
        raise RuntimeError(f"ranks disagree after step {step}: {[(e['db'], e['params']) for e in every]}")
    set_aside = sorted({t for e in every for t in e["set_aside"]})
    by_task = {t: xs for e in every for t, xs in e["by_task"].items()}
    # the headline numbers leave set-aside tasks out, as evaluate.py does
    rw = [x for t, xs in by_task.items() if t not in set_aside for x in xs]
    okr = [x for x in rw if x > 0]
    n = max(1, len(rw))
    mean = sum(rw) / n
    return dict(step=step, success_rate=round(len(okr) / n, 3), mean_speedup=round(mean, 3),
                median_speedup=round(kernels.median(okr), 3) if okr else 0.0, max_speedup=round(max(rw, default=0), 3),
                reward_mean=round(mean, 3), reward_std=round(math.sqrt(sum((x - mean) ** 2 for x in rw) / n), 3),
                kl=round(st["kl"] / max(1.0, st["tokens"]), 5), kl_old=round(st["kl_old"] / max(1.0, st["tokens"]), 5),
                # the policy against the sampler on the sampled tokens (grpo.mismatch): mean, max
                mismatch=round(st["mismatch"] / max(1.0, st["mismatch_tokens"]), 5),
                mismatch_max=round(st["mismatch_max"], 3),
                clip_frac=round(st["clipped"] / max(1.0, st["tokens"]), 4),
                skipped_groups=sum(e["skipped"] for e in every), groups=sum(e["groups"] for e in every),
                new_variants=len(added), db_size=len(r.db.rows), tasks=by_task, set_aside=set_aside,
                ranks=[[e["db"], e["params"]] for e in every],  # (database rows, weight checksum) per rank
                tok_s=round(sum(e["gen_tok"] for e in every) / max(1e-9, d.gen_s)),
                gen_s=round(d.gen_s, 1), eval_s=round(d.judged["seconds"], 1), update_s=round(update_s, 1),
                wait_s=round(wait, 1), step_s=round(time.time() - t0, 1), stale=int(stale))


def update_rewards(rows, rewards):
    """The rewards the update learns from: a speedup timed under another process's load
    (flagged `disturbed`, kernels/timing.py) says little of the candidate, either way, so it
    is no signal (NaN: advantage 0, out of its group's mean and std, grpo.smooth_rewards);
    the logs and the database keep the measured number."""
    return [math.nan if row and "disturbed" in (row.get("flags") or ()) else x for row, x in zip(rows, rewards)]


def step_line(rec):
    """A step's printed line: what a person watches (log.jsonl keeps every key). "signal" counts
    the groups whose rewards differed, the only ones an update learns from."""
    wait = f", wait {rec['wait_s']:.0f}" if rec["wait_s"] else ""
    return (f"step {rec['step']} | success {rec['success_rate']:.2f} | speedup {rec['mean_speedup']:.2f} "
            f"(max {rec['max_speedup']:.1f}) | signal {rec['groups'] - rec['skipped_groups']}/{rec['groups']} groups | "
            f"kl {rec['kl']:.4f} | new {rec['new_variants']} (db {rec['db_size']}) | {rec['step_s']:.0f} s: sample "
            f"{rec['gen_s']:.0f} ({rec['tok_s']} tok/s), judge {rec['eval_s']:.0f}, update {rec['update_s']:.0f}{wait}"
            + (" | stale" if rec["stale"] else ""))


def param_checksum(model):
    """A number that differs when two ranks' weights do (an exact sum, in float64). FSDP2
    ranks hold different shards of one set of weights by construction: 0."""
    if isinstance(model, policy.Sharded):
        return 0.0
    with torch.no_grad():
        return float(sum(p.double().sum() for p in model.parameters()))


def report(cfg, out, db, tasks, start_from):
    """The run's closing block: where everything is, what Stage 1 kept against what Stage 3's
    policy sampled on the same tasks (set-aside tasks apart, as evaluate.py does), and the
    command that compares the checkpoints on equal terms."""
    log = common.read_jsonl(os.path.join(out, "log.jsonl")) if os.path.exists(os.path.join(out, "log.jsonl")) else []
    pass_len = pass_steps(tasks, cfg["crl_tasks_per_step"])
    set_aside = sorted({t for rec in log for t in rec.get("set_aside", [])} |
                       {r["task"] for r in db.rows if "input_independent" in (r.get("flags") or [])})
    names = [t.name for t in tasks if t.name not in set_aside]
    first, last = log[:pass_len], log[-pass_len:] if len(log) >= 2 * pass_len else None

    def mean_of(recs, name):  # a task's mean reward over its samples in those steps (failures 0)
        xs = [x for rec in recs for x in rec.get("tasks", {}).get(name, [])]
        return sum(xs) / len(xs) if xs else None

    def best_of(name, origins):
        xs = [r["speedup"] for r in db.successes(name) if r["origin"] in origins]
        return max(xs) if xs else None

    sampled = {n: max([x for rec in log for x in rec.get("tasks", {}).get(n, [])], default=None) for n in names}
    cols = [("Stage 1 best", {n: best_of(n, ("sft",)) for n in names}),
            ("Stage 3 pass 1", {n: mean_of(first, n) for n in names}),
            ("Stage 3 last pass", {n: mean_of(last, n) for n in names} if last is not None else None),
            ("Stage 3 best", sampled)]
    cols = [(title, vals) for title, vals in cols if vals is not None]
    print(f"\ncrl: results, speedup over the reference (x; failures as 0) on {len(names)} tasks")
    print(f"  {'task':26s}" + "".join(f" {title:>17s}" for title, _ in cols))
    for n in names:
        print(f"  {n[:26]:26s}" + "".join(f" {fmt(vals[n]):>17s}" for _, vals in cols))
    means = [[v for v in vals.values() if v is not None] for _, vals in cols]
    print(f"  {'mean over tasks':26s}" + "".join(f" {fmt(sum(m) / len(m) if m else None):>17s}" for m in means))
    print("  Stage 1 best: the fastest teacher variant Stage 1 kept (timed when Stage 3 began). Stage 3 pass 1 and "
          f"last pass:\n  the mean over what the policy sampled in its first and last {pass_len} step(s) (as many "
          "prompts as tasks; - where a task\n  drew none); Stage 3 best: the fastest sample it drew.")
    if set_aside:
        print(f"  set aside (output never changes with the input; not in the numbers): {', '.join(set_aside)}")
    for line in verdict_lines(log, pass_len, {t: sum(m) / len(m) for (t, _), m in zip(cols, means) if m}, dict(cols)):
        print("  " + line)
    found = [r for r in exemplars.discoveries(db.rows, exemplars.earlier_sources(
        [os.path.join(common.stage_dir(cfg, "sft"), "data.jsonl"),
         os.path.join(common.stage_dir(cfg, "selftrain"), "successes.jsonl")], db.rows)) if r["task"] not in set_aside]
    tasks_found = sorted({r["task"] for r in found})
    print(f"  new and faster: {len(found)} Stage 3 variant(s) on {len(tasks_found)} task(s) whose source no earlier "
          f"stage had and that beat\n  the fastest Stage 1 variant of the task by 5% or more (one timing each; "
          f"evaluate.py --runs judges them again)"
          + "".join(f"\n    {r['task']}: {r['speedup']:.2f}x against {r['teacher_best']:.2f}x (step {r['step']})"
                    for r in {r["task"]: r for r in reversed(found)}.values()))
    stages = [d for d in (common.stage_dir(cfg, s) for s in ("sft", "selftrain")) if common.has_checkpoint(d)]
    cks = list(dict.fromkeys(["base", *stages, start_from, out]))
    # what evaluate.py needs to rebuild the same tasks and the same base model
    preset = config.preset_values(cfg["config"])
    extra = "".join(f" --{k}={cfg[k]}" for k in ("tasks", "only", "model", "tiny_dim", "tiny_layers", "tiny_heads",
                                                  "tiny_vocab", "max_new_tokens") if cfg[k] != preset[k])
    print(f"\n  files: {out}/log.jsonl (a line per step), {out}/curves.png"
          f"{'' if curves_available() else ' (not drawn: pip install matplotlib)'}, {out}/db.jsonl (every variant "
          f"judged), {out}/samples/ (raw rollouts)")
    print(f"  checkpoints: {', '.join(c for c in cks if c != 'base')}")
    print(f"  compare the checkpoints on the same tasks, k samples each (base = the starting model):\n"
          f"    python evaluate.py --config {cfg['config']}{extra} --samples 4 --checkpoint {','.join(cks)}")


def verdict_lines(log, pass_len, means, per_task=None):
    """means: {column title: mean over tasks}; per_task: {column title: {task: value}}. One
    line on whether Stage 3 helped (its last pass against its first), the tasks whose sampled
    speedup fell by half or more between those passes, and a warning
    when its learning has stopped: in the last pass every group's samples got equal rewards
    (the update had nothing to follow), or the policy no longer moved."""
    lines = []
    if "Stage 3 pass 1" in means and "Stage 3 last pass" in means:
        first, last = means["Stage 3 pass 1"], means["Stage 3 last pass"]
        word = "rose" if last > first * 1.02 else "fell" if last < first * 0.98 else "stayed level"
        lines.append(f"Stage 3's mean sampled speedup {word}: {first:.2f} in its first pass, {last:.2f} in its last")
        a, b = (per_task or {}).get("Stage 3 pass 1") or {}, (per_task or {}).get("Stage 3 last pass") or {}
        fell = [f"{t} {a[t]:.2f} -> {b[t]:.2f}" for t in a if a[t] and b.get(t) is not None and b[t] <= 0.5 * a[t]]
        if fell:
            lines.append(f"fell by half or more from the first pass to the last: {', '.join(fell)}")
    tail = log[-pass_len:]
    groups, skipped = sum(r.get("groups", 0) for r in tail), sum(r.get("skipped_groups", 0) for r in tail)
    if tail and groups and skipped == groups:
        lines.append(f"WARNING: learning has stopped: in the last {len(tail)} step(s) all {groups} groups' samples got "
                     f"equal rewards, so no update followed (raise --crl_temperature or --crl_samples, or stop here)")
    elif tail and groups and skipped >= 0.75 * groups:
        lines.append(f"warning: in the last {len(tail)} step(s) {skipped} of {groups} groups carried no signal "
                     f"(equal rewards within the group)")
    return lines


def fmt(x):
    return "-" if x is None else f"{x:.2f}"


def curves_available():
    import importlib.util
    return importlib.util.find_spec("matplotlib") is not None


def main(argv=None):
    return config.cli(run, argv, "crl.py", __doc__, config.STAGE3)


if __name__ == "__main__":
    main()
