"""Stage 3: contrastive RL (DESIGN.md section 2), and the whole pipeline from one command.

    python crl.py --config small                        # Stages 1, 2, 3 on the built-in tasks, offline
    python crl.py --config small --exemplars random     # the ablation: random exemplars, out/small/crl-random
    python crl.py --config small --init_from out/small/selftrain --crl_steps 40
    torchrun --nproc_per_node=8 crl.py --config small   # one rank per GPU

When the Stage 1 or Stage 2 checkpoint it starts from is missing, it runs that stage first.
Each step: pick tasks; for each, show the model N earlier variants from the database with
their measured speedups (bucket sampling, paper section 3.3) and sample G responses; judge
them through kernels.py (reward = speedup, 0 for a failure); smooth the rewards within each
group (r_hat = clip((r - mean) / std, -k, k)); update with a hand-written GRPO (PPO-style
clipped ratio, optional k3 KL to the frozen starting model). Every judged variant enters
the database. Writes out/<config>/crl/: the checkpoint (every `crl_ckpt_every` steps),
db.jsonl (the exemplar database), log.jsonl (one line per step), samples/, curves.png
(with matplotlib). Killed, even with kill -9? Run the same command again: it resumes from
the last checkpoint with the database intact.
"""
import json
import math
import os
import random
import sys
import time

import torch

import config
import kernels
import policy
import prompts
import selftrain
import sft

# ----------------------------------------------------------------------------------------
# Loss math: pure functions, shapes in comments (tiny-grpo's loss.py style)


def smooth_rewards(r, k, std_scale=True):
    """Group rewards -> advantages: clip((r - mean) / std, -k, k) (CUDA-L1's smoothing,
    k = 1.5). r: (G,). A group whose rewards are all equal has nothing to learn: zeros.
    std_scale=False is Dr. GRPO's variant (no division by the std)."""
    std = r.std(unbiased=False)
    if std < 1e-8:
        return torch.zeros_like(r)
    adv = (r - r.mean()) / (std if std_scale else 1.0)
    return adv.clamp(-k, k)


def k3_kl(logp, ref_logp):
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(d) - d - 1 with
    d = ref_logp - logp; always >= 0, exactly 0 where the two agree. (B, T) -> (B, T)"""
    d = ref_logp - logp
    return d.exp() - d - 1


def clipped_surrogate(logp, old_logp, adv, eps):
    """PPO's clipped objective as a per-token loss. logp, old_logp: (B, T); adv: (B,).
    -> loss (B, T), clipped (B, T) bool: where the clip took effect."""
    ratio = (logp - old_logp).exp()                      # (B, T)
    a = adv[:, None]                                     # (B, 1)
    unclipped = ratio * a
    clipped = ratio.clamp(1 - eps, 1 + eps) * a
    return -torch.minimum(unclipped, clipped), clipped < unclipped


def grpo_loss(logp, old_logp, ref_logp, adv, mask, eps, beta, normaliser):
    """One micro-batch's share of the GRPO loss. logp, old_logp, ref_logp (or None), mask:
    (B, T); adv: (B,). normaliser: the number of completion tokens in the whole batch
    (token-level normalisation) or a constant (Dr. GRPO), so micro-batches add up to the
    batch loss. Masked tokens (prompt, padding) contribute exactly 0.
    -> (loss, dict of sums for logging)"""
    keep = mask.bool()
    # masked positions are zeroed before exp(): a padding position's log-prob may be huge
    # or -inf, and inf * 0 is nan, not 0
    logp = torch.where(keep, logp, 0.0)
    old_logp = torch.where(keep, old_logp, 0.0)
    per_tok, clipped = clipped_surrogate(logp, old_logp, adv, eps)   # (B, T)
    kl = k3_kl(logp, torch.where(keep, ref_logp, 0.0)) if ref_logp is not None else None
    if kl is not None and beta:
        per_tok = per_tok + beta * kl
    loss = torch.where(keep, per_tok, 0.0).sum() / normaliser
    with torch.no_grad():  # how far this update has moved from pi_old (PPO's approx-KL)
        kl_old = k3_kl(logp, old_logp)
    stats = dict(clipped=float((clipped & keep).sum()), tokens=float(keep.sum()),
                 kl=float(torch.where(keep, kl, 0.0).sum().detach()) if kl is not None else 0.0,
                 kl_old=float(torch.where(keep, kl_old, 0.0).sum()))
    return loss, stats


# ----------------------------------------------------------------------------------------
# The exemplar database: every judged variant, append-only JSONL, fsync'd per step


class Database:
    """Rows: task, task_hash, source_hash, code, status, reason, speedup, step, origin,
    flags. A torn last line (a kill mid-write) is dropped on load."""

    def __init__(self, path, repair=True):
        self.path, self.rows, self.index = path, [], {}
        if not os.path.exists(path):
            return
        with open(path, "rb") as f:
            raw = f.read()
        end = raw.rfind(b"\n") + 1
        if end < len(raw):
            print(f"crl: {path}: dropped a torn last line (a kill mid-write)")
            if repair:  # cut it off, or the next append would be glued to it
                with open(path, "r+b") as f:
                    f.truncate(end)
        for line in raw[:end].decode().splitlines():
            if line.strip():
                self._keep(json.loads(line))

    def _keep(self, row):
        # sft.py's data.jsonl (timed kept variants) reads as a database too
        row.setdefault("status", "ok" if row.get("speedup", 0) > 0 else "incorrect")
        row.setdefault("task_hash", kernels._sha(row.get("task_code", row["task"])))
        self.rows.append(row)
        self.index.setdefault((row["task_hash"], row["source_hash"]), row)

    def add(self, rows, write=True):
        rows = [r for r in rows if (r["task_hash"], r["source_hash"]) not in self.index]
        for r in rows:
            self._keep(r)
        if write and rows:
            with open(self.path, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
                f.flush()
                os.fsync(f.fileno())
        return rows

    def lookup(self, task_hash, source_hash):
        return self.index.get((task_hash, source_hash))

    def successes(self, task_name):
        return [r for r in self.rows if r["task"] == task_name and r["status"] == "ok"]


def bucket_sample(scores, n, width, tau, rng):
    """CUDA-L1's exemplar choice: group scores into buckets of `width`, pick n distinct
    buckets with probability proportional to exp((bucket mean - global mean) / tau), then
    one member uniformly from each. -> indices into scores (fewer when fewer buckets)."""
    buckets = {}
    for i, s in enumerate(scores):
        buckets.setdefault(math.floor(s / width), []).append(i)
    keys = list(buckets)
    mean = sum(scores) / len(scores) if scores else 0.0
    w = [math.exp((sum(scores[i] for i in buckets[b]) / len(buckets[b]) - mean) / tau) for b in keys]
    chosen = []
    while keys and len(chosen) < n:  # sampling without replacement, proportional to w
        j = rng.choices(range(len(keys)), weights=w)[0]
        chosen.append(rng.choice(buckets[keys.pop(j)]))
        w.pop(j)
    return chosen


def pick_exemplars(db, task, cfg, rng):
    """N earlier successful variants of a task, by bucket sampling (or uniformly, the
    ablation's `random` mode) -> [dict(code, speedup)]."""
    rows = db.successes(task.name)
    if cfg["exemplars"] == "random":
        idx = rng.sample(range(len(rows)), min(cfg["n_exemplars"], len(rows)))
    else:
        idx = bucket_sample([r["speedup"] for r in rows], cfg["n_exemplars"], cfg["bucket_width"], cfg["tau"], rng)
    return [dict(code=rows[i]["code"], speedup=rows[i]["speedup"]) for i in idx]


# ----------------------------------------------------------------------------------------
# Ranks (torchrun): each rank samples and judges its share of prompts on its own GPU


def dist_setup(cfg):
    """-> (rank, world, cfg for this rank). WORLD_SIZE > 1: join the process group, take
    GPU LOCAL_RANK for the policy and for timing, and a share of the compile workers."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, cfg
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available() and cfg["device"] != "cpu"
    if cuda:
        torch.cuda.set_device(local)
    if cuda:  # naming the device up front lets NCCL map ranks to GPUs without guessing
        dist.init_process_group("nccl", device_id=torch.device(f"cuda:{local}"))
    else:
        dist.init_process_group("gloo")
    # each rank on its own slice of this host's cores, so its timing workers never share a
    # core with another rank's (the evaluator pins them to the last cores it is given)
    cores = sorted(os.sched_getaffinity(0))
    nlocal = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    share = len(cores) // nlocal
    if share >= 1:
        os.sched_setaffinity(0, cores[local * share:(local + 1) * share])
    cfg = dict(cfg, device=f"cuda:{local}" if cuda else "cpu", gpus=str(local) if cuda else cfg["gpus"])
    return dist.get_rank(), world, cfg


def dist_teardown(world):
    if world > 1:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()


def all_gather(obj, world):
    """Every rank's obj, in rank order (a list of one on a single process)."""
    if world == 1:
        return [obj]
    import torch.distributed as dist
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def all_reduce_grads(model, world):
    """Sum gradients over ranks: each rank's loss is already divided by the global normaliser."""
    if world == 1:
        return
    import torch.distributed as dist
    for p in model.parameters():
        if p.grad is None:  # a rank whose groups were all skipped still joins every all_reduce
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)


# ----------------------------------------------------------------------------------------
# One step


def judge_samples(ev, db, tasks_and_codes, step, origin):
    """[(task, code or None)] -> [row]: database rows (the stored one when this exact code
    was judged before: a variant is measured once), new rows marked new=True."""
    rows, todo = [None] * len(tasks_and_codes), []
    for i, (task, code) in enumerate(tasks_and_codes):
        old = db.lookup(task.hash, kernels._sha(code or ""))
        if old is not None:
            rows[i] = dict(old, new=False)
        elif code is not None:
            todo.append(i)
        else:
            rows[i] = None  # unusable response: no row
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
        path = os.path.join(cfg["out"], cfg["config"], stage, fname)
        if os.path.exists(path):
            for line in open(path):
                r = json.loads(line)
                t = by_name.get(r["task"])
                if t is not None and r.get("code") and (t.name, r["source_hash"]) not in seen:
                    seen.add((t.name, r["source_hash"]))
                    found.append((t, r["code"], stage))
                    if "timed" in r:  # Stage 1 timed its kept variants (sft_exemplars): no need to again
                        db.add([dict(task=t.name, task_hash=t.hash, source_hash=r["source_hash"], code=r["code"],
                                     speedup=r["speedup"], step=0, origin=stage, **r["timed"])], write=rank == 0)
    mine = found[rank::world]
    rows = judge_samples(ev, db, [(t, c) for t, c, _ in mine], 0, "seed")
    for r, (_, _, stage) in zip(rows, mine):
        r["origin"] = stage if r.get("new") else r["origin"]
    new = [dict(r, new=False) for part in all_gather([r for r in rows if r["new"]], world) for r in part]
    db.add(new, write=rank == 0)
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


def train_step(cfg, model, ref_model, opt, tok, groups, world):
    """GRPO update on this rank's groups: [dict(prompt_ids, ids, adv)], inner epochs.
    -> dict of stats (sums over all ranks)."""
    dev = next(model.parameters()).device
    live = [s for s in groups if s["adv"] != 0.0]
    n_tok = sum(len(s["ids"]) for s in live)
    totals = all_gather(dict(tokens=n_tok, seqs=len(live)), world)
    g_tokens = sum(t["tokens"] for t in totals)
    stats = dict(kl=0.0, kl_old=0.0, clipped=0.0, tokens=0.0, loss=0.0, grad_norm=0.0)
    if g_tokens == 0:
        return stats
    # Dr. GRPO: a constant (sequences x max_new_tokens), so long replies are not favoured
    normaliser = sum(t["seqs"] for t in totals) * cfg["max_new_tokens"] if cfg["dr_grpo"] else g_tokens
    mb, temp = cfg["crl_micro_batch"], cfg["temperature"] or 1.0  # log-probs at the sampling temperature
    batches = [live[i:i + mb] for i in range(0, len(live), mb)]
    packed = [{k: v.to(dev) for k, v in policy.pack(tok, [s["prompt_ids"] for s in b], [s["ids"] for s in b]).items()}
              for b in batches]
    # pi_old and the reference are fixed for all inner epochs: score them once
    with torch.no_grad():
        old = [policy.completion_logprobs(model, p["input_ids"], p["attention_mask"], temp)
               for p in packed]
        ref = [policy.completion_logprobs(ref_model, p["input_ids"], p["attention_mask"], temp)
               for p in packed] if ref_model is not None else [None] * len(packed)
    model.train()
    for epoch in range(cfg["ppo_epochs"]):
        for b, p, o, r in zip(batches, packed, old, ref):
            logp = policy.completion_logprobs(model, p["input_ids"], p["attention_mask"], temp)
            mask = p["completion_mask"][:, 1:].float()
            adv = torch.tensor([s["adv"] for s in b], device=dev)
            loss, st = grpo_loss(logp, o, r, adv, mask, cfg["clip_eps"], cfg["beta"], normaliser)
            loss.backward()
            if epoch == cfg["ppo_epochs"] - 1:  # report the last epoch's numbers
                for k in ("kl", "kl_old", "clipped", "tokens"):
                    stats[k] += st[k]
                stats["loss"] += loss.item()
        all_reduce_grads(model, world)
        stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"]))
        opt.step()
        opt.zero_grad(set_to_none=True)
    summed = all_gather({k: stats[k] for k in ("kl", "kl_old", "clipped", "tokens", "loss")}, world)
    for k in ("kl", "kl_old", "clipped", "tokens", "loss"):
        stats[k] = sum(s[k] for s in summed)
    return stats


def plot_curves(log_path, png_path):
    """Training curves as a PNG, when matplotlib is installed (an optional dependency)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [json.loads(line) for line in open(log_path)]
    keys = ["success_rate", "mean_speedup", "reward_std", "kl", "clip_frac", "skipped_groups"]
    fig, axes = plt.subplots(2, 3, figsize=(12, 6))
    for ax, k in zip(axes.flat, keys):
        ax.plot([r["step"] for r in rows], [r[k] for r in rows])
        ax.set_title(k)
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)
    return True


# ----------------------------------------------------------------------------------------
# Stage 3


def run_earlier_stages(cfg):
    """The one-command pipeline: run Stage 1 and Stage 2 when their checkpoints are missing."""
    base = os.path.join(cfg["out"], cfg["config"])
    if not policy.is_done(os.path.join(base, "sft")):
        print(f"crl: no finished Stage 1 checkpoint in {base}/sft: running Stage 1 (sft.py) first")
        sft.run(cfg)
    if not policy.is_done(os.path.join(base, "selftrain")):
        print(f"crl: no finished Stage 2 checkpoint in {base}/selftrain: running Stage 2 (selftrain.py) first")
        selftrain.run(cfg)
    return os.path.join(base, "selftrain")


def run(cfg):
    rank, world, cfg = dist_setup(cfg)
    # Stage 3 samples (and scores log-probs) at its own temperature: a group whose G samples
    # are all the same variant has zero spread and teaches nothing
    cfg = dict(cfg, temperature=cfg["crl_temperature"])
    if cfg["exemplars"] not in ("bucket", "random"):
        raise ValueError(f"--exemplars is bucket or random, not {cfg['exemplars']!r}")
    out = os.path.join(cfg["out"], cfg["config"], "crl" if cfg["exemplars"] == "bucket" else f"crl-{cfg['exemplars']}")
    if cfg["init_from"]:
        start_from = cfg["init_from"]
    elif rank == 0:
        start_from = run_earlier_stages(cfg)
    else:
        start_from = os.path.join(cfg["out"], cfg["config"], "selftrain")
    if world > 1:
        torch.distributed.barrier()  # rank 0 ran the earlier stages
    os.makedirs(out, exist_ok=True)
    if rank == 0:
        config.save(cfg, os.path.join(out, "run_config.json"))
    if policy.has_checkpoint(out):
        model, tok, state = policy.load_checkpoint(out, cfg)
        if state["step"] >= cfg["crl_steps"]:
            print(f"crl: {out} has run its {state['step']} steps (raise --crl_steps to go on, or delete it)")
            dist_teardown(world)
            return out
        print(f"crl: resuming after step {state['step']}")
    else:  # a stage's checkpoint, a model folder or a hub name
        model, tok = policy.load(cfg, start_from, train=True)
        state = dict(step=0)
    if world > 1:  # the same weights everywhere, different sampling noise on each rank
        torch.manual_seed(cfg["seed"] * 1000 + rank + 100003 * state["step"])
    ref_model = None
    if cfg["beta"] > 0:  # the frozen reference: the model Stage 3 started from
        ref_model, _ = policy.load(cfg, start_from)
        ref_model.eval().requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["crl_lr"], weight_decay=cfg["weight_decay"], betas=(0.9, 0.95))
    if state.get("optimizer"):
        opt.load_state_dict(state["optimizer"])
    tasks = kernels.select(kernels.load_tasks(cfg["tasks"]), cfg["only"])
    db = Database(os.path.join(out, "db.jsonl"), repair=rank == 0)
    os.makedirs(os.path.join(out, "samples"), exist_ok=True)
    t_start = time.time()
    with kernels.Evaluator(cfg, time_candidates=True, progress=cfg["progress"] and rank == 0) as ev:
        if state["step"] == 0 and not (state.get("extra") or {}).get("seeded"):
            seed_database(cfg, db, ev, tasks, rank, world)
        step = state["step"]
        try:
            while step < cfg["crl_steps"]:
                step += 1
                rec = one_step(cfg, step, model, ref_model, opt, tok, tasks, db, ev, rank, world, out)
                if rank == 0:
                    with open(os.path.join(out, "log.jsonl"), "a") as f:
                        f.write(json.dumps(rec) + "\n")
                    print(" | ".join(f"{k} {v}" for k, v in rec.items()), flush=True)
                    if step % cfg["crl_ckpt_every"] == 0 or step == cfg["crl_steps"]:
                        policy.save_checkpoint(out, model, tok, opt, step, cfg, dict(seeded=True))
                        plot_curves(os.path.join(out, "log.jsonl"), os.path.join(out, "curves.png"))
                if world > 1:
                    torch.distributed.barrier()
        except KeyboardInterrupt:
            sys.exit(f"\ncrl: interrupted in step {step}; the last checkpoint and the database are in {out}; "
                     f"run the same command to resume")
    if rank == 0:
        summarize_db(db, tasks)
        print(f"crl: {step} steps in {time.time() - t_start:.0f} s; checkpoint, database and logs in {out}")
    dist_teardown(world)
    return out


def one_step(cfg, step, model, ref_model, opt, tok, tasks, db, ev, rank, world, out):
    """Sample, judge, reward, update -> the step's log record (same keys every step)."""
    t0 = time.time()
    mine = step_tasks(tasks, step - 1, cfg["crl_tasks_per_step"], cfg["seed"])[rank::world]
    rng = random.Random(cfg["seed"] * 7919 + step * 131 + rank)
    shown = [pick_exemplars(db, t, cfg, rng) for t in mine]
    msgs = [prompts.task_prompt(t.code, ev.backend, ex) for t, ex in zip(mine, shown)]
    outs = policy.generate(model, tok, msgs, cfg, n=cfg["crl_samples"], progress=False)
    t1 = time.time()
    flat = [(t, s) for t, group in zip(mine, outs) for s in group]
    parsed = [prompts.parse_response(s["text"]) for _, s in flat]
    rows = judge_samples(ev, db, [(t, p.code) for (t, _), p in zip(flat, parsed)], step, "crl")
    new = [r for part in all_gather([dict(r, new=False) for r in rows if r and r["new"]], world) for r in part]
    db.add(new, write=rank == 0)
    t2 = time.time()
    rewards = [r["speedup"] if r and r["status"] == "ok" else 0.0 for r in rows]
    groups, skipped = [], 0
    G = cfg["crl_samples"]
    for g in range(len(mine)):
        adv = smooth_rewards(torch.tensor(rewards[g * G:(g + 1) * G]), cfg["reward_clip"], not cfg["dr_grpo"])
        skipped += int(bool((adv == 0).all()))
        for j in range(G):
            s = flat[g * G + j][1]
            groups.append(dict(prompt_ids=s["prompt_ids"], ids=s["ids"], adv=float(adv[j])))
    st = train_step(cfg, model, ref_model, opt, tok, groups, world)
    t3 = time.time()
    if step % cfg["dump_every"] == 0 or step == 1:  # reading rollouts is the main debugging tool
        dump = [dict(task=t.name, exemplars=[e["speedup"] for e in ex], text=s["text"], finished=s["finished"],
                     status=r["status"] if r else "compile_error", reason=r["reason"] if r else p.error.split(":")[0],
                     speedup=rw, sections=prompts.sections_present(s["text"]))
                for (t, s), p, r, rw, ex in zip(flat, parsed, rows, rewards, [e for e in shown for _ in range(G)])]
        sft.write_jsonl(os.path.join(out, "samples", f"step_{step}_rank{rank}.jsonl"), dump)
    every = all_gather(dict(rewards=rewards, gen_tok=sum(len(s["ids"]) for _, s in flat), skipped=skipped,
                            groups=len(mine), db=len(db.rows),
                            params=param_checksum(model) if world > 1 else 0.0), world)
    # the invariants of data parallelism: one database, one set of weights on every rank
    if len({(e["db"], e["params"]) for e in every}) > 1:
        raise RuntimeError(f"ranks disagree after step {step}: {[(e['db'], e['params']) for e in every]}")
    rw = [x for e in every for x in e["rewards"]]
    okr = sorted(x for x in rw if x > 0)
    n = max(1, len(rw))
    mean = sum(rw) / n
    return dict(step=step, success_rate=round(len(okr) / n, 3), mean_speedup=round(mean, 3),
                median_speedup=round(okr[len(okr) // 2], 3) if okr else 0.0, max_speedup=round(max(rw, default=0), 3),
                reward_mean=round(mean, 3), reward_std=round(math.sqrt(sum((x - mean) ** 2 for x in rw) / n), 3),
                kl=round(st["kl"] / max(1.0, st["tokens"]), 5), kl_old=round(st["kl_old"] / max(1.0, st["tokens"]), 5),
                clip_frac=round(st["clipped"] / max(1.0, st["tokens"]), 4),
                skipped_groups=sum(e["skipped"] for e in every), groups=sum(e["groups"] for e in every),
                new_variants=len(new), db_size=len(db.rows),
                tok_s=round(sum(e["gen_tok"] for e in every) / max(1e-9, t1 - t0)),
                gen_s=round(t1 - t0, 1), eval_s=round(t2 - t1, 1), update_s=round(t3 - t2, 1))


def param_checksum(model):
    """A number that differs when two ranks' weights do (an exact sum, in float64)."""
    with torch.no_grad():
        return float(sum(p.double().sum() for p in model.parameters()))


def summarize_db(db, tasks):
    """Best measured variant per task, by where it came from."""
    print(f"\n{'task':26s} {'best speedup':>12s}  found in")
    for t in tasks:
        rows = db.successes(t.name)
        if rows:
            best = max(rows, key=lambda r: r["speedup"])
            flag = " (input_independent)" if "input_independent" in (best.get("flags") or []) else ""
            print(f"{t.name:26s} {best['speedup']:11.2f}x  {best['origin']} step {best['step']}{flag}")


def main(argv=None):
    return config.cli(run, argv, "crl.py")


if __name__ == "__main__":
    main()
