"""What the stage scripts and evaluate.py all do: torchrun helpers, JSONL files, a stage's
output folder, the optimizer, and judging model responses. No candidate code runs here.

    rank, world, cfg = common.dist_setup(cfg)        # under torchrun: one GPU per rank
    rows = common.all_gather(mine, world)             # every rank's object, in rank order
    out, finished = common.start_stage(cfg, "sft")     # out/<config>/sft/, with run_config.json
    judged = common.judge_responses(ev, [(task, text), ...], "judging")   # [(Parsed, Verdict)]
"""
import atexit
import json
import os
import shutil

import torch

import config
import kernels
import policy
import prompts

# ----------------------------------------------------------------------------------------
# Ranks (torchrun): each rank samples and judges its share on its own GPU


def dist_setup(cfg):
    """-> (rank, world, cfg for this rank). WORLD_SIZE > 1: join the process group, take
    GPU LOCAL_RANK for the policy and for timing, and a share of the compile workers. A
    second call (crl.py running Stages 1 and 2 first) finds the group joined and the cfg
    already set up."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, cfg
    import torch.distributed as dist
    if dist.is_initialized():
        return dist.get_rank(), world, cfg
    import datetime
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available() and cfg["device"] != "cpu"
    # ranks legitimately wait a long time for each other: rank 0 asking teachers and judging
    # Stage 1's dataset, a rank judging slow candidates; the default 10-30 minutes would kill
    # such a run
    timeout = datetime.timedelta(hours=6)
    if cuda:
        torch.cuda.set_device(local)
        # naming the device up front lets NCCL map ranks to GPUs without guessing
        dist.init_process_group("nccl", device_id=torch.device(f"cuda:{local}"), timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    # each rank on its own slice of this host's cores, so its timing workers never share a
    # core with another rank's (the evaluator pins them to the last cores it is given)
    cores = sorted(os.sched_getaffinity(0))
    nlocal = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    share = len(cores) // nlocal
    if share >= 1:
        os.sched_setaffinity(0, cores[local * share:(local + 1) * share])
    cfg = dict(cfg, device=f"cuda:{local}" if cuda else "cpu", gpus=str(local) if cuda else cfg["gpus"])
    return dist.get_rank(), world, cfg


def dist_teardown():
    """Leave the process group, if this process joined one (a script's last step)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def barrier(world):
    if world > 1:
        torch.distributed.barrier()


def all_gather(obj, world):
    """Every rank's obj, in rank order (a list of one on a single process)."""
    if world == 1:
        return [obj]
    import torch.distributed as dist
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def all_reduce_grads(model, world):
    """Sum gradients over ranks: each rank's loss is already divided by the global normaliser.
    FSDP2 (policy.Sharded) has reduced them in backward already, as a mean: scale it back
    to the sum (a divide factor of 1 would need PREMUL_SUM, which gloo lacks)."""
    if world == 1:
        return
    if isinstance(model, policy.Sharded):
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(world)
        return
    import torch.distributed as dist
    for p in model.parameters():
        if not p.requires_grad:  # LoRA's frozen base
            continue
        if p.grad is None:  # a rank whose groups were all skipped still joins every all_reduce
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)


# ----------------------------------------------------------------------------------------
# Files


def read_jsonl(path, torn_tail=False):
    """The rows of a JSONL file. torn_tail: a last line cut short by a kill mid-append (no
    newline, not valid JSON) is dropped; anything else that does not parse still raises."""
    with open(path) as f:
        lines = f.read().split("\n")
    rows = []
    for i, line in enumerate(lines):
        try:
            if line.strip():
                rows.append(json.loads(line))
        except ValueError:
            if not (torn_tail and i == len(lines) - 1):
                raise
    return rows


def write_jsonl(path, rows):
    """Write rows atomically (a kill never leaves half a file)."""
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    os.replace(path + ".tmp", path)


def append_jsonl(path, rows, fsync=False):
    """Append rows; fsync=True when the file is the run's memory (a kill must not lose it)."""
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def stage_dir(cfg, stage):
    """Where a stage writes: out/<config>/<stage>/."""
    return os.path.join(cfg["out"], cfg["config"], stage)


def start_stage(cfg, stage, write_config=True):
    """Open a stage's folder, out/<config>/<stage>/, saving the config it runs with (under
    torchrun rank 0 alone writes) -> (folder, finished). finished: the folder already holds
    a completed checkpoint, which the stage reuses (nothing is written then)."""
    out = stage_dir(cfg, stage)
    if policy.is_done(out):
        print(f"{stage}: {out} is finished (delete it to run again)")
        return out, True
    os.makedirs(out, exist_ok=True)
    if write_config:
        config.save(cfg, os.path.join(out, "run_config.json"))
        atexit.register(_drop_if_empty, out)
    return out, False


def _drop_if_empty(out):
    """At exit: a stage folder that holds only its run_config.json and empty files (the run
    failed before it produced anything) is removed, so nothing looks half done."""
    try:
        names = os.listdir(out)
        if all(n == "run_config.json" or os.path.getsize(os.path.join(out, n)) == 0 for n in names):
            shutil.rmtree(out)
            os.rmdir(os.path.dirname(out))  # out/<config> too, if nothing else is in it
    except OSError:
        pass


def reduce_and_clip(model, world, max_norm):
    """After every rank's backward: gradients summed over ranks (all_reduce_grads), then
    clipped to max_norm over the trainable parameters -> the norm before clipping."""
    all_reduce_grads(model, world)
    norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_norm)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # FSDP2: a DTensor


def optimizer(model, lr, cfg, state=None):
    """AdamW as every stage builds it, resumed from state["optimizer"] when there is one."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr,
                            weight_decay=cfg["weight_decay"], betas=(0.9, 0.95))
    if state and state.get("optimizer"):
        if isinstance(model, policy.Sharded):  # a full (gathered) state, each rank keeps its shards
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
            set_optimizer_state_dict(model, opt, state["optimizer"], options=StateDictOptions(full_state_dict=True))
        else:
            opt.load_state_dict(state["optimizer"])
    return opt


# ----------------------------------------------------------------------------------------
# Judging model responses


def unusable(task_name, solution, parsed):
    """The verdict for a response with no usable code (it never reaches a worker)."""
    return kernels.Verdict(task_name, solution, "compile_error", parsed.reason, parsed.error)


def judge_responses(ev, tasks_and_texts, desc):
    """(task, response text) pairs -> (Parsed, Verdict) per pair, in order."""
    parsed = [prompts.parse_response(text) for _, text in tasks_and_texts]
    todo = [(t, p.code) for (t, _), p in zip(tasks_and_texts, parsed) if p.code is not None]
    verdicts = iter(ev.evaluate(todo, desc=desc) if todo else [])
    return [(p, next(verdicts) if p.code is not None else unusable(task.name, "response", p))
            for (task, _), p in zip(tasks_and_texts, parsed)]
