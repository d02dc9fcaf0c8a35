"""Stage 2: self-supervised rounds for executability and correctness (paper section 3.2;
README "How it works").

    python selftrain.py --config small                       # from out/small/sft
    python selftrain.py --config small --init_from out/small/sft --st_rounds 5
    torchrun --nproc_per_node=2 selftrain.py --config qwen7b-fsdp     # each rank samples a share

Each round samples `st_samples` responses per task from the current model, judges them
(correctness only: speed is ignored at this stage), keeps the successes (one per source
hash) and fine-tunes on exactly the sampled tokens: REINFORCE with reward 1 for success,
0 otherwise and no baseline, which is fine-tuning on the successes. Stops after
`st_rounds` rounds, or earlier once the success rate stops rising; when a round's samples are
less often correct than the round before's, the model before that training is the checkpoint
(`--st_check_last`: one more round, sampled and judged only, checks the last training too;
`--st_keep speedup`: successes are timed, and a fall in the mean speedup, failures as 0,
undoes the training too; `--st_exemplars N`: prompts show up to N of Stage 1's variants, as Stage 3's
do; `--st_min_speedup X`: only successes at least X times as fast as the reference are trained
on, so a round does not teach the slow but correct code it sampled; `--st_noise Z`: a fall in the
success rate or the mean speedup within Z standard errors does not undo the training). Writes
out/<config>/selftrain/: the checkpoint after each round, successes.jsonl (every success,
for Stage 3's database), candidates.jsonl, log.jsonl, samples/round_<r>.jsonl.
Killed? Run the same command again: it resumes at the round in flight.
"""
import math
import os
import random
import time

import common
import config
import exemplars
import kernels
import policy
import prompts
import sampler
import sft
import taskset


def round_prompts(cfg, tasks, language, db, rnd):
    """Round rnd's prompts. With --st_exemplars N (and db, Stage 1's timed variants) each
    shows up to N of its task's variants, bucket-sampled by speedup as in Stage 3, so Stage 2
    samples and trains on prompts like those its checkpoint is used with (Stage 3, and
    evaluate.py --runs, show exemplars; the paper's Stage 2 shows none, N = 0)."""
    if not cfg["st_exemplars"] or db is None:
        return [prompts.task_prompt(t.code, language) for t in tasks]
    rng = random.Random(cfg["seed"] * 7919 + rnd)
    pick = dict(cfg, exemplars="bucket", n_exemplars=cfg["st_exemplars"])
    return [prompts.task_prompt(t.code, language, exemplars.pick_exemplars(db, t, pick, rng)) for t in tasks]


def sample_round(cfg, smp, tok, tasks, ev, rnd, out, rank=0, world=1, db=None):
    """Sample (smp: a sampler.Sampler of the model in training) and judge one round
    -> (successes, success rate, mean speedup: failures as 0, over the tasks not set aside;
    0 unless the evaluator times). Under torchrun each rank samples and judges every
    world-th task (common.sharded); every rank gets all rows and successes back. db: the
    exemplars of --st_exemplars (round_prompts)."""
    t0 = time.time()
    t1 = [t0]

    def sample_and_judge(mine):  # this rank's tasks -> per task (sample rows, distinct successes)
        msgs = round_prompts(cfg, mine, ev.language, db, rnd)
        outs = policy.generate(smp, tok, msgs, cfg, n=cfg["st_samples"], desc=f"round {rnd} sampling",
                               progress=cfg["progress"] and rank == 0)
        flat = [(t, s, m) for t, group, m in zip(mine, outs, msgs) for s in group]
        t1[0] = time.time()
        judged = ev.evaluate_responses([(t, s.text) for t, s, _ in flat], prompts.parse_response,
                                       f"round {rnd} judging")
        per_task, seen = {t.name: ([], []) for t in mine}, set()
        for (task, s, msg), (p, v) in zip(flat, judged):
            rows, succ = per_task[task.name]
            rows.append(dict(stage="selftrain", round=rnd, task=task.name, status=v.status, reason=v.reason,
                             source_hash=v.source_hash, message=v.message, finished=s.finished,
                             speedup=v.speedup, flags=v.flags, text=s.text))
            if v.ok and (task.name, v.source_hash) not in seen:
                seen.add((task.name, v.source_hash))
                succ.append(dict(task=task.name, task_code=task.code, source_hash=v.source_hash, round=rnd,
                                 speedup=v.speedup, prompt=msg, prompt_ids=s.prompt_ids, completion_ids=s.ids,
                                 completion=s.text, code=p.code))
        return [per_task[t.name] for t in mine]
    per_task = common.sharded(sample_and_judge, tasks, rank, world)
    rows, succ = [r for rs, _ in per_task for r in rs], [s for _, ss in per_task for s in ss]
    t1 = t1[0]
    ok = sum(r["status"] == "ok" for r in rows)
    rate = ok / max(1, len(rows))
    speed, se = mean_speedup(rows)
    if rank == 0:
        os.makedirs(os.path.join(out, "samples"), exist_ok=True)
        common.write_jsonl(os.path.join(out, "samples", f"round_{rnd}.jsonl"), rows)
        common.append_jsonl(os.path.join(out, "candidates.jsonl"),
                            [{k: v for k, v in r.items() if k != "text"} for r in rows])
        timed = f", mean speedup {speed:.3f} (standard error {se:.3f})" if ev.cfg["time_candidates"] else ""
        print(f"selftrain round {rnd}: {ok}/{len(rows)} correct ({100 * rate:.0f}%){timed}, "
              f"{len(succ)} distinct | sampling {t1 - t0:.0f} s, judging {time.time() - t1:.0f} s")
    return succ, rate, speed, se


def mean_speedup(rows):
    """Judged sample rows -> (the mean over tasks of each task's mean speedup, failures as 0,
    its standard error), leaving out tasks whose output never changes with the input (as crl.py
    and evaluate.py do). The error is the spread of the samples within each task: a task whose
    replies run from 0 (wrong) to 28x moves the mean by more than a round's training did."""
    aside = {r["task"] for r in rows if "input_independent" in (r.get("flags") or ())}
    by_task = {}
    for r in rows:
        if r["task"] not in aside:
            by_task.setdefault(r["task"], []).append(r.get("speedup") or 0.0)
    means = {t: sum(xs) / len(xs) for t, xs in by_task.items()}
    # variance of a task's mean: sample variance / n (a task sampled once adds none)
    var = sum(sum((x - means[t]) ** 2 for x in xs) / (len(xs) - 1) / len(xs)
              for t, xs in by_task.items() if len(xs) > 1)
    k = max(1, len(by_task))
    return sum(means.values()) / k, math.sqrt(var) / k


def trained_on(succ, floor):
    """The successes a round trains on: all of them (floor 0, the paper), or those at least
    floor times as fast as the reference. A correct but slow reply (diag(A) @ B for a
    diagonal matmul, 0.06x) is what a real model learned from Stage 2 when every success
    counted; its mean speedup on fresh samples halved."""
    return [s for s in succ if not floor or (s.get("speedup") or 0.0) >= floor]


def worse(rates, speeds, keep, n=0, noise=0.0, speed_ses=()):
    """Did the last round's samples come out worse than the round before's? -> the reason, or ""
    (keep: "success" compares success rates; "speedup" mean speedups too). noise > 0: a fall
    in the success rate counts only beyond that many standard errors of the difference of two
    rates of n samples each (pooled; two of 48 at 96% is within one), and a fall in the mean
    speedup beyond that many standard errors of the difference of the two means (speed_ses:
    each round's, from mean_speedup): a round of a few samples a task reverted on chance alone
    (on a real model, 3.231 -> 3.218 with a standard error near 1)."""
    if len(rates) < 2:
        return ""
    p = (rates[-1] + rates[-2]) / 2
    allowed = noise * math.sqrt(2 * p * (1 - p) / n) if noise and n else 0.0
    if rates[-1] < rates[-2] - allowed:
        within = f" (more than {noise:g} standard errors, {100 * allowed:.1f} points)" if allowed else ""
        return f"success rate fell to {100 * rates[-1]:.0f}% from {100 * rates[-2]:.0f}%{within}"
    if keep == "speedup" and len(speeds) >= 2:
        ses = list(speed_ses)[-2:] if noise and len(speed_ses) >= 2 else [0.0, 0.0]
        allowed = noise * math.sqrt(ses[0] ** 2 + ses[1] ** 2)
        if speeds[-1] < speeds[-2] - allowed:
            within = f" (more than {noise:g} standard errors, {allowed:.3f})" if allowed else ""
            return f"mean speedup fell to {speeds[-1]:.3f} from {speeds[-2]:.3f}{within}"
    return ""


def get_weights(model):
    """The model's full weights on the host (gathered from every rank under FSDP2)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if any(p.device.type == "cpu" for p in model.parameters()):
        # for weights already on the host the offload returns them, not a copy: the next
        # training would change them under us
        full = {k: v.detach().clone() for k, v in full.items()}
    return full


def set_weights(model, weights):
    """Put get_weights' copy back (every rank takes part under FSDP2)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))


def run(cfg):
    """Stage 2 end to end -> the checkpoint folder. Reuses a finished stage."""
    rank, world, cfg = common.dist_setup(cfg)
    out, finished = common.start_stage(cfg, "selftrain", write_config=rank == 0)
    if finished:
        return out
    start_from = cfg["init_from"] or common.stage_dir(cfg, "sft")
    policy.preflight(cfg, [cfg["init_from"]] if cfg["init_from"] else [])
    if common.has_checkpoint(out):
        model, tok, state = policy.load_checkpoint(out, cfg)
        if rank == 0:
            print(f"selftrain: resuming after round {state['extra']['round']}")
    elif common.has_checkpoint(start_from):
        if not cfg["init_from"]:  # Stage 1's folder stands in for --init_from: it must be this command's model
            common.check_resumable(cfg, start_from, starts_from=True)
        model, tok, _ = policy.load_checkpoint(start_from, cfg)
        state = dict(extra=dict(round=0, rates=[]))
    else:
        raise FileNotFoundError(f"{start_from}: no Stage 1 checkpoint to start from (run sft.py first, "
                                f"or give --init_from)")
    extra = state["extra"]
    tasks = taskset.select(taskset.load_tasks(cfg["tasks"]), cfg["only"])
    db = None
    if cfg["st_exemplars"]:
        data = os.path.join(start_from, "data.jsonl")
        if not os.path.isfile(data):
            raise FileNotFoundError(f"--st_exemplars shows Stage 1's variants: {start_from} has no data.jsonl "
                                    f"(sft.py writes it beside its checkpoint)")
        db = exemplars.Database(data, repair=False)
        if rank == 0 and not any(db.successes(t.name) for t in tasks):
            print(f"selftrain: warning: --st_exemplars has nothing to show: {data} holds no timed variant of these "
                  f"tasks (Stage 1 times what it keeps with --sft_exemplars)")
    t0 = time.time()
    model = policy.prepare(model, cfg, world)  # FSDP2 shards under torchrun with --fsdp
    smp = sampler.Sampler(policy.unwrap(model), cfg)
    kept = None  # the weights before the last round's training (on the host), while they may be needed
    # the paper's Stage 2 judges correctness only
    timed = cfg["st_keep"] == "speedup" or cfg["st_min_speedup"] > 0
    with kernels.Evaluator(cfg, time_candidates=timed, progress=cfg["progress"] and rank == 0) as ev:
        rounds = cfg["st_rounds"] + (1 if cfg["st_check_last"] else 0)  # the check: sampled, not trained on
        while extra["round"] < rounds:
            rnd = extra["round"] + 1
            succ, rate, speed, se = sample_round(cfg, smp, tok, tasks, ev, rnd, out, rank, world, db)
            if rank == 0:
                common.append_jsonl(os.path.join(out, "successes.jsonl"),
                                    [{k: v for k, v in s.items() if k not in ("prompt_ids", "completion_ids")}
                                     for s in succ])
            rates, speeds = extra["rates"] + [rate], extra.get("speeds", []) + [speed]
            ses = extra.get("speed_ses", []) + [se]
            why = worse(rates, speeds, cfg["st_keep"], len(tasks) * cfg["st_samples"], cfg["st_noise"], ses)
            if why and kept is not None:
                # The last round's training made the model worse: its samples are the measure.
                # Keep the model that round trained, not this one (on a real model an
                # unlucky round garbled constants and the stage handed Stage 3 a wreck).
                set_weights(model, kept)
                if rank == 0:
                    print(f"selftrain: {why}; keeping the model before round {rnd - 1}'s training and stopping")
                extra = dict(extra, rates=rates, speeds=speeds, speed_ses=ses, round=rnd, stopped=True, reverted=rnd - 1)
                break
            if len(rates) > 1 and rate <= rates[-2]:  # the success rate stopped rising: stop here
                if rank == 0:
                    print(f"selftrain: success rate {100 * rate:.0f}% did not rise over {100 * rates[-2]:.0f}%; "
                          f"stopping")
                extra = dict(extra, rates=rates, speeds=speeds, speed_ses=ses, round=rnd, stopped=True)
                break
            if rnd > cfg["st_rounds"]:  # the check round: the last training held
                extra = dict(extra, rates=rates, speeds=speeds, speed_ses=ses, round=rnd)
                break
            if rnd < rounds:  # the next round measures what this one trains: keep a way back
                kept = get_weights(model)
            train = trained_on(succ, cfg["st_min_speedup"])
            if rank == 0 and cfg["st_min_speedup"] > 0:
                print(f"selftrain round {rnd}: training on {len(train)} of {len(succ)} distinct successes "
                      f"(speedup >= {cfg['st_min_speedup']:g})")
            if train:
                # a fresh optimizer and schedule per round (the data changes every round)
                opt, _ = sft.finetune(cfg, train, out, model, tok, dict(extra=extra), cfg["st_epochs"],
                                      cfg["st_lr"], tag=f"selftrain r{rnd}", rank=rank, world=world)
            else:
                opt = None
            extra = dict(extra, rates=rates, speeds=speeds, speed_ses=ses, round=rnd)
            policy.save_checkpoint(out, model, tok, opt, 0, cfg, extra, write=rank == 0)
    policy.save_checkpoint(out, model, tok, None, 0, cfg, dict(extra, done=True), write=rank == 0)
    common.barrier(world)  # the checkpoint is on disk before any rank goes on
    if rank == 0:
        speeds = f", mean speedup by round {[round(x, 3) for x in extra['speeds']]}" if timed else ""
        print(f"selftrain: success rate by round {[round(r, 2) for r in extra['rates']]}{speeds}; checkpoint in {out} "
              f"({time.time() - t0:.0f} s)")
    return out


def main(argv=None):
    out = config.cli(run, argv, "selftrain.py", __doc__, config.STAGE2)
    common.dist_teardown()
    return out


if __name__ == "__main__":
    main()
