"""Stage 1: supervised fine-tuning on filtered teacher samples (paper section 3.1; README
"How it works").

    python sft.py --config small                                  # offline: seeds teach the tiny model
    python sft.py --config small --teachers builtin,file:cuda_l1.jsonl
    python sft.py --config qwen1.5b --teachers openai:http://localhost:8000/v1 --teacher_model my-coder
    python sft.py --config small --model /path/to/Qwen2.5-Coder-7B-Instruct --teachers hf:/path/to/teacher
    torchrun --nproc_per_node=2 sft.py --config qwen7b-fsdp --teachers file:teacher_samples.jsonl   # FSDP2

Each teacher answers the Stage 1 prompt for every task, up to `attempts` times; the evaluator (kernels)
keeps what compiles and is correct (speed is not judged; with --sft_exemplars the kept ones
are timed, for the prompts' exemplars); at most `keep` distinct variants per task per teacher
become the dataset; the student is fine-tuned on them, loss on completion tokens only. Writes out/<config>/sft/: the checkpoint (Hugging Face format
plus train_state.pt), data.jsonl (the dataset), candidates.jsonl (every candidate judged),
log.jsonl (one line per step), run_config.json. Killed? Run the same command again: the
dataset is reused and training resumes from the last checkpoint. Under torchrun, rank 0
builds the dataset and every rank trains on its share of each step's batches (the weights
replicated, or sharded with --fsdp).
"""
import json
import math
import os
import random
import re
import sys
import time

import common
import config
import kernels
import optim
import policy
import prompts
import taskset
import weights

# ----------------------------------------------------------------------------------------
# Teachers: each yields (task, response text) pairs


def mutate(code, rng):
    """A variant of a seed solution, as a human tuner would try one: another block size,
    an unroll pragma, another OpenMP schedule, a dropped pragma, or a loop bound off by one.
    Some variants are slower and some wrong, which is the point: the filter has to earn its
    keep, and Stage 3 has speeds to choose between."""
    ops = []
    sizes = ["64", "128", "256", "512", "1024"]
    launch = list(re.finditer(r"(<<<[^,>]+,\s*)(64|128|256|512|1024)\b", code))
    consts = list(re.finditer(r"(\b(?:threads|block|BLOCK|THREADS|kThreads)\w*\s*=\s*)(64|128|256|512|1024)\b", code))
    for m in launch + consts:
        ops.append(lambda m=m: code[:m.start(2)] + rng.choice([s for s in sizes if s != m.group(2)]) + code[m.end(2):])
    unroll = "#pragma GCC unroll 4" if "load_cpp(" in code else "#pragma unroll 4"
    for m in re.finditer(r"\n(\s*)(for \([^;]*;[^;]*;[^)]*\)\s*\{?)", code):
        ops.append(lambda m=m: code[:m.start()] + f"\n{m.group(1)}{unroll}" + code[m.start():])
    for m in re.finditer(r"#pragma omp parallel for\b(?![^\n]*schedule)", code):
        ops.append(lambda m=m: code[:m.end()] + rng.choice([" schedule(static)", " schedule(dynamic, 64)"]) + code[m.end():])
    for m in re.finditer(r"\n[ \t]*#pragma (?:omp|unroll|GCC unroll)[^\n]*", code):
        ops.append(lambda m=m: code[:m.start()] + code[m.end():])
    for m in re.finditer(r"(for \([^;]*;\s*\w+\s*)<(\s*\w+\s*;)", code):
        ops.append(lambda m=m: code[:m.start()] + m.group(1) + "<=" + m.group(2) + code[m.end():])
    return rng.choice(ops)() if ops else code


def builtin_teacher(tasks, cfg, language):
    """The offline teacher: the hand-written seeds in tasks/seeds/<language>/ and, when
    `mutate` is on, mutations of them, in random order, `attempts` tries per task."""
    rng = random.Random(cfg["seed"])
    for task in tasks:
        folder = os.path.join(taskset.BUILTIN_TASKS, "seeds", language, task.name)
        seeds = [open(os.path.join(folder, f)).read() for f in sorted(os.listdir(folder))
                 if f.endswith(".py")] if os.path.isdir(folder) else []
        pool = list(seeds)
        rng.shuffle(pool)
        for i in range(cfg["attempts"] if seeds else 0):
            if pool and (not cfg["mutate"] or rng.random() < 0.5):
                code = pool.pop()
            elif cfg["mutate"]:
                code = mutate(rng.choice(seeds), rng)
            else:
                break
            yield task, prompts.completion(code)


def file_teacher(path, tasks, cfg, language):
    """Pre-generated candidates: a solutions JSONL (the CUDA-L1 release layout works) or a
    folder of solution files, matched to tasks by taskset.match. Records that carry their
    own ref_code bring their own task, so the prompt shows that reference."""
    pairs, unmatched = taskset.match(tasks, taskset.load_solutions(path))
    if unmatched:
        print(f"file teacher {path}: {len(unmatched)} candidates match no task; skipped")
    counts = {}
    for task, sol in pairs:
        if counts.get(task.name, 0) < cfg["attempts"]:
            counts[task.name] = counts.get(task.name, 0) + 1
            yield task, prompts.completion(sol.code) if sol.code else ""


def hf_teacher(path, tasks, cfg, language):
    """A local Hugging Face model (or hub name) sampled `attempts` times per task."""
    model, tok = policy.load(cfg, path)
    msgs = [prompts.task_prompt(t.code, language) for t in tasks]
    outs = policy.generate(model, tok, msgs, cfg, n=cfg["attempts"], desc=f"teacher {path}")
    del model
    for task, samples in zip(tasks, outs):
        for s in samples:
            yield task, s.text


def openai_teacher(base_url, tasks, cfg, language):
    """An OpenAI-compatible chat endpoint (vLLM, SGLang, a hosted API) through the standard
    library, 8 requests in flight; the key, if any, comes from the environment variable
    named by `api_key_env`. A failed request is reported and counted as an empty reply."""
    import concurrent.futures
    import urllib.request
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    if os.environ.get(cfg["api_key_env"]):
        headers["Authorization"] = "Bearer " + os.environ[cfg["api_key_env"]]

    def ask(task):
        body = dict(model=cfg["teacher_model"], messages=prompts.task_prompt(task.code, language),
                    temperature=cfg["temperature"], top_p=cfg["top_p"], max_tokens=cfg["max_new_tokens"])
        req = urllib.request.Request(url, json.dumps(body).encode(), headers)
        try:
            with urllib.request.urlopen(req, timeout=cfg["teacher_timeout"]) as r:
                return json.loads(r.read())["choices"][0]["message"]["content"] or ""
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            print(f"openai teacher: {task.name}: {type(e).__name__}: {e}", file=sys.stderr)
            return ""

    jobs = [t for t in tasks for _ in range(cfg["attempts"])]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        yield from zip(jobs, pool.map(ask, jobs))


TEACHERS = dict(builtin=builtin_teacher, file=file_teacher, hf=hf_teacher, openai=openai_teacher)


def check_teacher(spec, cfg):
    """Raise ValueError, one line, for a teacher that cannot answer -> (kind, arg)."""
    kind, _, arg = spec.partition(":")
    if kind not in TEACHERS or (kind != "builtin") != bool(arg):
        raise ValueError(f"unknown teacher {spec!r} (builtin, file:<jsonl or folder>, hf:<path or name>, "
                         f"openai:<base_url>)")
    if kind == "openai" and not cfg["teacher_model"]:
        raise ValueError("openai: teachers need --teacher_model")
    if kind == "file" and not os.path.exists(arg):
        raise ValueError(f"teacher {spec}: no such file or folder")
    if kind == "hf":
        weights.check_model_path(arg)
    return kind, arg


def teacher_specs(cfg):
    return [s.strip() for s in cfg["teachers"].split(",") if s.strip()]


def preflight(cfg):
    """Everything Stage 1 will need, checked before any work: teachers, device, model."""
    for spec in teacher_specs(cfg):
        check_teacher(spec, cfg)
    policy.preflight(cfg, [cfg["init_from"] or cfg["model"]])


def teacher_stream(spec, tasks, cfg, language):
    kind, arg = check_teacher(spec, cfg)
    return TEACHERS[kind](*((tasks,) if kind == "builtin" else (arg, tasks)), cfg, language)


# ----------------------------------------------------------------------------------------
# The dataset: teacher samples filtered by the evaluator

def build_dataset(cfg, tasks, ev, out):
    """Ask every teacher, judge every candidate, keep at most `keep` distinct successes per
    task per teacher. Every judged candidate goes to candidates.jsonl."""
    data = []
    with open(os.path.join(out, "candidates.jsonl"), "a") as log:
        for spec in teacher_specs(cfg):
            samples = list(teacher_stream(spec, tasks, cfg, ev.language))
            counts, seen, t0 = {}, set(), time.time()
            judged = ev.evaluate_responses(samples, prompts.parse_response, f"judging {spec}")
            for (task, text), (p, v) in zip(samples, judged):
                # (seconds: where the stage's time goes, each step of each candidate's judging)
                log.write(json.dumps(dict(stage="sft", teacher=spec, task=task.name, status=v.status,
                                          reason=v.reason, source_hash=v.source_hash, message=v.message,
                                          seconds=v.seconds)) + "\n")
                if v.ok and counts.get(task.name, 0) < cfg["keep"] and (task.name, v.source_hash) not in seen:
                    seen.add((task.name, v.source_hash))
                    counts[task.name] = counts.get(task.name, 0) + 1
                    data.append(dict(task=task.name, task_code=task.code, teacher=spec, source_hash=v.source_hash,
                                     language=ev.language,
                                     prompt=prompts.task_prompt(task.code, ev.language),
                                     completion=prompts.completion(p.code, p.analysis, p.design), code=p.code))
            print(f"teacher {spec}: {len(samples)} samples, {sum(counts.values())} kept, "
                  f"{len(counts)}/{len(tasks)} tasks covered (judged in {time.time() - t0:.0f} s)")
    return data


# ----------------------------------------------------------------------------------------
# Fine-tuning (Stage 2 fine-tunes on its successes with the same loop)

def time_kept(cfg, data):
    """Measure the kept variants' speedups (one timing each): the exemplars shown in
    augmented prompts need them, and Stage 3's database starts from them. A variant that
    fails this second judging (its first pass was lucky) leaves the dataset: nothing that
    failed any check is trained on. -> the variants kept. Each is judged against the task
    it was kept for (a teacher's record may bring its own reference)."""
    t0 = time.time()
    with kernels.Evaluator(cfg, time_candidates=True) as ev:
        vs = ev.evaluate([(taskset.Task(d["task"], d["task_code"], "data.jsonl"), d["code"]) for d in data],
                         desc="timing kept variants")
    print(f"sft: {len(data)} kept variants judged again and timed ({time.time() - t0:.0f} s)")
    for d, v in zip(data, vs):
        d.update(speedup=v.speedup if v.ok else 0.0, timed=dict(status=v.status, reason=v.reason, flags=v.flags,
                                                                message=v.message[:300]))
    failed = [f"{d['task']}: {v.status}/{v.reason}" for d, v in zip(data, vs) if not v.ok]
    if failed:
        print(f"sft: {len(failed)} kept variant(s) failed when judged again and leave the dataset "
              f"({', '.join(failed[:4])}{', ...' if len(failed) > 4 else ''})")
    return [d for d, v in zip(data, vs) if v.ok]


def with_exemplars(data, j, cfg, rng):
    """Example j, its prompt showing 0..sft_exemplars variants of the same task (drawn from
    the dataset, the example itself included, with their measured speedups): teaches the
    prompt layout of Stage 3 without tying the target to speed, since target and exemplars
    are drawn independently. sft_exemplars=0 is the paper's plain Stage 1."""
    e = data[j]
    if not cfg["sft_exemplars"] or "speedup" not in e or "prompt_ids" in e:
        return e  # a Stage 2 success trains on the prompt it was sampled with (prompt_ids)
    pool = [d for d in data if d["task"] == e["task"] and d.get("speedup", 0) > 0]
    k = min(rng.randint(0, cfg["sft_exemplars"]), len(pool))
    shown = [dict(code=d["code"], speedup=d["speedup"]) for d in rng.sample(pool, k)]
    # a dataset written before languages had names of their own says backend cuda | cpu
    language = e.get("language") or {"cpu": "cpp"}.get(e.get("backend"), e.get("backend"))
    return dict(e, prompt=prompts.task_prompt(e["task_code"], language, shown))


def schedule(data, cfg, epochs):
    """Every epoch's batches, fixed by the seed (a resumed run sees the same ones): each
    example once per epoch, examples of similar length batched together (padding is wasted
    compute), batches in random order."""
    batches, bs = [], cfg["batch_size"]
    for epoch in range(epochs):
        rng = random.Random(cfg["seed"] * 7919 + epoch)
        ex = [with_exemplars(data, j, cfg, rng) for j in range(len(data))]
        ex.sort(key=lambda e: len(e["completion_ids"]) * 8 if "completion_ids" in e else
                sum(len(m["content"]) for m in e["prompt"]) + len(e["completion"]))
        chunk = [ex[i:i + bs] for i in range(0, len(ex), bs)]
        rng.shuffle(chunk)
        batches += chunk
    return batches


def lr_at(step, total, warmup, lr):
    """Linear warmup, then cosine decay to 10% of lr. Warmup takes at most a quarter of a
    short run (Stage 2's rounds are a dozen steps)."""
    warmup = min(warmup, total // 4)
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def sft_loss(logp, mask):
    """Mean negative log-likelihood over completion tokens. logp, mask: (B, T-1)."""
    return -(logp * mask).sum() / mask.sum().clamp(min=1)


def finetune(cfg, data, out, model, tok, state, epochs, lr, tag="sft", rank=0, world=1):
    """Fine-tune on [dict(prompt, completion)] for `epochs`; checkpoints every `ckpt_every`
    steps and on Ctrl-C (the caller saves the final one). A resumed run continues at its
    step with the same batch order. Under torchrun (model from policy.prepare: replicated,
    or FSDP2 shards) a step's grad_accum x world micro-batches are split over the ranks, so
    the steps are those of one process with grad_accum x world. -> (optimizer, steps): the
    optimizer's state goes into later checkpoints."""
    dev = next(model.parameters()).device
    batches = schedule(data, cfg, max(1, epochs))
    per_step = cfg["grad_accum"] * world
    total = math.ceil(len(batches) / per_step)
    opt = optim.optimizer(model, lr, cfg, state)
    start = state.get("step", 0)
    extra = dict(state.get("extra") or {}, done=False)
    model.train()
    done = start  # steps trained and logged
    logf = open(os.path.join(out, "log.jsonl"), "a") if rank == 0 else None
    try:
        for step in range(start, total):
            t0, tokens, loss_sum = time.time(), 0, 0.0
            for g in opt.param_groups:
                g["lr"] = lr_at(step, total, cfg["warmup"], lr)
            group = batches[step * per_step:(step + 1) * per_step]
            mine = [(b, 1.0) for b in group[rank::world]]
            # every rank runs as many forward/backward passes (FSDP2's collectives pair up);
            # a rank short of batches repeats one with weight 0
            mine += [(group[0], 0.0)] * (math.ceil(len(group) / world) - len(mine))
            for batch, weight in mine:
                b = {k: v.to(dev) for k, v in policy.sft_batch(tok, batch, cfg["max_len"]).items()}
                logp = policy.completion_logprobs(model, b["input_ids"], b["attention_mask"])
                loss = sft_loss(logp, b["completion_mask"][:, 1:].float())
                (loss * weight / per_step).backward()
                loss_sum += weight * loss.item() / per_step
                tokens += int(weight * b["attention_mask"].sum())
            norm = optim.reduce_and_clip(model, opt, world, cfg["grad_clip"])
            opt.step()
            opt.zero_grad(set_to_none=True)
            if world > 1:  # the step's loss and tokens over all ranks
                loss_sum, tokens = (sum(x) for x in zip(*common.all_gather((loss_sum, tokens), world)))
            dt = time.time() - t0
            rec = dict(stage=tag, step=step + 1, loss=round(loss_sum, 4), lr=opt.param_groups[0]["lr"],
                       grad_norm=round(norm, 3), tok_s=round(tokens / dt), s=round(dt, 2))
            if logf:
                logf.write(json.dumps(rec) + "\n")
                logf.flush()
            done = step + 1  # trained and logged: an interrupt from here on keeps this step
            if rank == 0 and (step % cfg["log_every"] == 0 or step + 1 == total):
                print(f"{tag} step {step + 1}/{total} | loss {loss_sum:.4f} | lr {rec['lr']:.2e} | "
                      f"grad {rec['grad_norm']:.2f} | {rec['tok_s']} tok/s | {dt:.2f} s", flush=True)
            if (step + 1) % cfg["ckpt_every"] == 0 and step + 1 < total:
                policy.save_checkpoint(out, model, tok, opt, step + 1, cfg, extra, write=rank == 0)
    except KeyboardInterrupt:
        policy.save_checkpoint(out, model, tok, opt, done, cfg, extra, write=rank == 0)
        sys.exit(f"\n{tag}: interrupted at step {done}; checkpoint saved in {out}; run the same command to resume")
    finally:
        if logf:
            logf.close()
    return opt, total


def run(cfg):
    """Stage 1 end to end -> the checkpoint folder. Reuses a finished stage. Under torchrun
    rank 0 asks the teachers and judges their samples; every rank trains (policy.prepare)."""
    import torch
    rank, world, cfg = common.dist_setup(cfg)
    out, finished = common.start_stage(cfg, "sft", write_config=rank == 0)
    if finished:
        return out
    preflight(cfg)
    torch.manual_seed(cfg["seed"])
    t0 = time.time()
    tasks = taskset.select(taskset.load_tasks(cfg["tasks"]), cfg["only"])
    data_path = os.path.join(out, "data.jsonl")
    if os.path.exists(data_path):  # resume: the dataset was built by an earlier run
        data = common.read_jsonl(data_path)
        if rank == 0:
            print(f"sft: dataset of {len(data)} examples from {data_path}")
    else:
        if rank == 0:
            try:
                with kernels.Evaluator(cfg, time_candidates=False) as ev:
                    print(f"sft: judging teacher samples written in {ev.language} on {ev.device} (correctness only)")
                    data = build_dataset(cfg, tasks, ev, out)
            except KeyboardInterrupt:  # the dataset is written whole or not at all: nothing to resume
                sys.exit("\nsft.py: interrupted while judging teacher samples, before any dataset or checkpoint "
                         "was written; the same command judges them again (builds come from the cache)")
            if cfg["sft_exemplars"]:
                data = time_kept(cfg, data)
            if data:
                common.write_jsonl(data_path, data)
                print(f"sft: dataset of {len(data)} examples -> {data_path} ({time.time() - t0:.0f} s)")
        common.barrier(world)
        if not os.path.exists(data_path):
            sys.exit("sft: no teacher sample passed the evaluator; nothing to train on")
        data = common.read_jsonl(data_path)
    if common.has_checkpoint(out):
        model, tok, state = policy.load_checkpoint(out, cfg)
        if rank == 0:
            print(f"sft: resuming from step {state.get('step', 0)}")
    else:
        model, tok = policy.load(cfg, cfg["init_from"] or None, train=True)
        state = {}
    if rank == 0:
        print(f"sft: {policy.count_params(model) / 1e6:.1f}M parameters, {len(data)} examples, {cfg['epochs']} epochs"
              + f", {world} ranks" * (world > 1))
    model = policy.prepare(model, cfg, world)
    opt, steps = finetune(cfg, data, out, model, tok, state, cfg["epochs"], cfg["lr"], rank=rank, world=world)
    policy.save_checkpoint(out, model, tok, opt, steps, cfg, dict(done=True), write=rank == 0)
    common.barrier(world)  # the checkpoint is on disk before any rank goes on
    if rank == 0:
        print(f"sft: {steps} steps, checkpoint in {out} ({time.time() - t0:.0f} s)")
    return out


def main(argv=None):
    out = config.cli(run, argv, "sft.py", __doc__, config.STAGE1)
    common.dist_teardown()
    return out


if __name__ == "__main__":
    main()
