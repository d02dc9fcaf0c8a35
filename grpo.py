"""GRPO as CUDA-L1 uses it (paper section 3.3): smoothed group-relative advantages, the PPO
clipped ratio, an optional k3 KL to a frozen reference. Pure functions with shapes in the
comments, then the update step; then Stage 3's step schedule (draw, judge, update; the
judging overlapped with the next draw or not), the one crl.py runs and bench.py times. The
optimizer and the gradient plumbing every stage's update uses are in optim.py. No files, no
prompts, no evaluator.

    adv = grpo.smooth_rewards(torch.tensor([0.0, 1.2, 3.5, 0.8]), k=1.5)   # one group of G
    stats = grpo.train_step(cfg, model, ref_logprobs, opt, tok, rollouts, world)
    for rec in grpo.steps(draw, judge, update, first=0, last=20, overlap=True): ...
"""
import threading
import time
from dataclasses import dataclass

import torch

import common
import optim
import policy


@dataclass
class Rollout:
    """One sampled response with its advantage: what the update needs of a sample."""
    prompt_ids: list   # the prompt's tokens
    ids: list          # the sampled tokens (EOS included when the reply finished)
    adv: float         # its smoothed, group-relative advantage
    behaviour: list = None  # drawn before the last update (crl.py --overlap): the sampler's
                            # log-prob of each token, pi_old of the PPO ratio
    sampled: list = None    # the sampler's log-prob of each token, for the mismatch statistic only


def smooth_rewards(r, k, std_scale=True):
    """Group rewards -> advantages: clip((r - mean) / std, -k, k) (CUDA-L1's smoothing,
    k = 1.5). r: (G,). A group whose rewards are all equal has nothing to learn: zeros.
    std_scale=False is Dr. GRPO's variant (no division by the std). A NaN reward is no
    signal (crl.py: a disturbed timing): advantage 0, and left out of the mean and std."""
    known = ~r.isnan()
    if known.sum() < 2:
        return torch.zeros_like(r)
    std = r[known].std(unbiased=False)
    if std < 1e-8:
        return torch.zeros_like(r)
    adv = (r - r[known].mean()) / (std if std_scale else 1.0)
    return adv.clamp(-k, k).nan_to_num(0.0)


def group_advantages(rewards, k, std_scale=True):
    """Rewards of P prompts' groups -> advantages, each group smoothed on its own.
    rewards: (P, G) -> (P, G)"""
    if not len(rewards):  # a rank with no prompts this step
        return torch.zeros(0, 0)
    return torch.stack([smooth_rewards(g, k, std_scale) for g in torch.tensor(rewards, dtype=torch.float32)])


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


def behaviour_logprobs(rollouts, shape, dev, key="behaviour"):
    """Rollouts' sampler log-probs (the field `key`) placed as completion_logprobs places its
    own (entry t scores token t+1 of prompt + reply) -> (B, T-1), zeros off the replies."""
    out = torch.zeros(shape, device=dev)
    for r, s in enumerate(rollouts):
        p = len(s.prompt_ids)
        out[r, p - 1:p - 1 + len(s.ids)] = torch.tensor(getattr(s, key)[:len(s.ids)], device=dev)
    return out


def mismatch(logp, sampled, mask):
    """How far the policy's log-probs of the sampled tokens are from the sampler's own (its
    bf16 copy, its cache), before any update: (B, T) each -> (sum, max) of |difference| over
    the reply tokens. A token the policy finds far less likely than the sampler did gets a
    PPO gradient as if it were a surprise (a large move in one update)."""
    d = torch.where(mask.bool(), (logp - sampled).abs(), 0.0)
    return float(d.sum()), float(d.max()) if d.numel() else 0.0


def warmup_lr(lr, step, warmup):
    """Stage 3's learning rate at update `step` (1-based, the Stage 3 step, so a resumed run
    gets the same rate): rising linearly from lr / warmup at step 1 to lr at step `warmup`,
    then lr; warmup 0 is off. AdamW's first step moves every weight with a gradient by about
    lr (m / sqrt(v) is +-1 then), about twice as far as its later steps do: without a warmup
    a fresh optimizer's first update moved the policy's log-probs the most."""
    return lr * min(1.0, step / warmup) if warmup > 0 else lr


def has_dropout(model):
    """Whether a training forward of the model differs from an evaluation one."""
    cfg = getattr(policy.unwrap(model), "config", None)
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()) or \
        any(getattr(cfg, k, 0) or 0 for k in ("attention_dropout", "hidden_dropout", "dropout"))


def train_step(cfg, model, ref_logprobs, opt, tok, rollouts, world):
    """GRPO update on this rank's rollouts, `ppo_epochs` optimizer steps (the inner epochs).
    ref_logprobs: (input_ids, attention_mask, temperature) -> (B, T-1) log-probs of the KL
    reference, or None (no KL term). -> dict of stats (sums over all ranks)."""
    with policy.tf32_matmuls(model):  # the reference, pi_old and pi_theta all scored alike
        return _train_step(cfg, model, ref_logprobs, opt, tok, rollouts, world)


def _train_step(cfg, model, ref_logprobs, opt, tok, rollouts, world):
    dev = next(model.parameters()).device
    # a micro-batch is padded to its longest sequence: in order of length they pad least (the
    # loss is a sum over micro-batches, so the order does not change the update)
    live = sorted((s for s in rollouts if s.adv != 0.0), key=lambda s: len(s.prompt_ids) + len(s.ids))
    n_tok = sum(len(s.ids) for s in live)
    totals = common.all_gather(dict(tokens=n_tok, seqs=len(live)), world)
    g_tokens = sum(t["tokens"] for t in totals)
    stats = dict(kl=0.0, kl_old=0.0, clipped=0.0, tokens=0.0, loss=0.0, grad_norm=0.0, mismatch=0.0,
                 mismatch_max=0.0, mismatch_tokens=0.0)
    if g_tokens == 0:
        return stats
    # Dr. GRPO: a constant (sequences x max_new_tokens), so long replies are not favoured
    normaliser = sum(t["seqs"] for t in totals) * cfg["max_new_tokens"] if cfg["dr_grpo"] else g_tokens
    mb, temp = cfg["crl_micro_batch"], cfg["temperature"] or 1.0  # log-probs at the sampling temperature
    batches = [live[i:i + mb] for i in range(0, len(live), mb)]
    packed = [{k: v.to(dev) for k, v in policy.pack(tok, [s.prompt_ids for s in b], [s.ids for s in b]).items()}
              for b in batches]
    # The reference is fixed for all inner epochs: scored once. pi_old is the policy before
    # this update, which is what the first epoch's forward computes: its log-probs, detached,
    # are pi_old for every epoch, with no forward of their own. A model with dropout scores
    # pi_old apart, without it (a training forward would draw its own dropout mask).
    with torch.no_grad():
        ref = [ref_logprobs(p["input_ids"], p["attention_mask"], temp)
               for p in packed] if ref_logprobs is not None else [None] * len(packed)
        old = [policy.completion_logprobs(model, p["input_ids"], p["attention_mask"], temp)
               for p in packed] if has_dropout(model) else [None] * len(packed)
        for i, (b, p) in enumerate(zip(batches, packed)):  # drawn one update ago: pi_old drew them
            if all(s.behaviour is not None for s in b):
                old[i] = behaviour_logprobs(b, (len(b), p["input_ids"].shape[1] - 1), dev)
    model.train()
    for epoch in range(cfg["ppo_epochs"]):
        for i, (b, p, r) in enumerate(zip(batches, packed, ref)):
            logp = policy.completion_logprobs(model, p["input_ids"], p["attention_mask"], temp)
            if old[i] is None:
                old[i] = logp.detach()
            o = old[i]
            mask = p["completion_mask"][:, 1:].float()
            if epoch == 0 and all(s.sampled is not None for s in b):
                total, worst = mismatch(logp.detach(), behaviour_logprobs(b, logp.shape, dev, "sampled"), mask)
                stats["mismatch"] += total
                stats["mismatch_tokens"] += float(mask.sum())
                stats["mismatch_max"] = max(stats["mismatch_max"], worst)
            adv = torch.tensor([s.adv for s in b], device=dev)
            loss, st = grpo_loss(logp, o, r, adv, mask, cfg["clip_eps"], cfg["beta"], normaliser)
            loss.backward()
            if epoch == cfg["ppo_epochs"] - 1:  # report the last epoch's numbers
                for k in ("kl", "kl_old", "clipped", "tokens"):
                    stats[k] += st[k]
                stats["loss"] += loss.item()
        stats["grad_norm"] = optim.reduce_and_clip(model, opt, world, cfg["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
    keys = ("kl", "kl_old", "clipped", "tokens", "loss", "mismatch", "mismatch_tokens")
    summed = common.all_gather({k: stats[k] for k in keys + ("mismatch_max",)}, world)
    for k in keys:
        stats[k] = sum(s[k] for s in summed)
    stats["mismatch_max"] = max(s["mismatch_max"] for s in summed)
    return stats


def sample(cfg, smp, tok, messages):
    """`crl_samples` samples of each message, G per prompt in prompt order -> (P * G) Samples."""
    return [s for group in policy.generate(smp, tok, messages, cfg, n=cfg["crl_samples"], progress=False)
            for s in group]


def learn(cfg, model, ref_logprobs, opt, tok, samples, rewards, world, stale=False):
    """Group-relative advantages of the samples' rewards, then the update -> (adv (P, G), stats).
    stale: the samples were drawn before the last update (crl.py --overlap), so the PPO ratio
    is taken against the sampler's own log-probs of them (where it kept them)."""
    G = cfg["crl_samples"]
    adv = group_advantages([rewards[g:g + G] for g in range(0, len(rewards), G)],
                           cfg["reward_clip"], not cfg["dr_grpo"])                         # (P, G)
    rollouts = [Rollout(s.prompt_ids, s.ids, float(a), s.logps if stale else None, s.logps)
                for s, a in zip(samples, adv.reshape(-1))]
    return adv, train_step(cfg, model, ref_logprobs, opt, tok, rollouts, world)


# ----------------------------------------------------------------------------------------
# Stage 3's step schedule: the one crl.py runs and bench.py --what=step times

class Background(threading.Thread):
    """fn(arg) in a thread; result() waits for it -> the seconds waited (its error raised here)."""

    def __init__(self, fn, arg):
        super().__init__(daemon=True)
        self.fn, self.arg, self.error = fn, arg, None
        self.start()

    def run(self):
        try:
            self.fn(self.arg)
        except BaseException as e:  # raised again in the caller's thread
            self.error = e

    def result(self):
        t0 = time.time()
        self.join()
        if self.error is not None:
            raise self.error
        return time.time() - t0


def steps(draw, judge, update, first, last, overlap=False, cancel=None):
    """Steps first+1 .. last, each draw -> judge -> update; yields each update's result.
    draw(step) -> d: the policy samples (its GPU work); judge(d): the evaluator judges d's
    samples (no collectives and no shared writes, so it may run in a thread); update(d, wait,
    t0) -> the step's record (wait: seconds spent waiting for d's judging, t0: when the step
    began). overlap: a step's judging runs in a thread while the next step is drawn, so that
    draw comes from weights one update old (the update's `stale`). cancel() stops a judging
    still in flight when the loop is left early (an interrupt, or close()), before its thread
    is joined."""
    pending = None  # (d, the thread judging it), overlapped
    try:
        for step in range(first + 1, last + 1):
            t0 = time.time()
            if not overlap:
                d = draw(step)
                judge(d)
                yield update(d, 0.0, t0)
                continue
            if pending is None:
                d = draw(step)
                pending = (d, Background(judge, d))
            nxt = draw(step + 1) if step < last else None
            d, judging = pending
            wait = judging.result()
            pending = None
            rec = update(d, wait, t0)
            pending = (nxt, Background(judge, nxt)) if nxt is not None else None
            yield rec
    finally:
        if pending is not None:  # left early: its workers stopped, its thread ended
            if cancel is not None:
                cancel()
            pending[1].join(60)
