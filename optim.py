"""The optimizer and gradient plumbing every stage's update uses (sft.py's Stage 1 and 2
fine-tuning, grpo.py's Stage 3 update): AdamW, or fp32 master weights for bf16 ones
(Bf16Master); gradients summed over torchrun ranks, then clipped.

    opt = optim.optimizer(model, lr, cfg, state)      # state: a checkpoint's train_state, or None
    norm = optim.reduce_and_clip(model, opt, world, cfg["grad_clip"])   # after every rank's backward
"""
import torch

import policy


def all_reduce_grads(model, world, params=None):
    """Sum gradients over ranks: each rank's loss is already divided by the global normaliser.
    params: the tensors holding the gradients (default: the trainable parameters; with
    bf16 weights, the optimizer's fp32 masters). FSDP2 (Sharded) has reduced them in backward
    already, as a mean: scale it back to the sum (a divide factor of 1 would need
    PREMUL_SUM, which gloo lacks)."""
    if world == 1:
        return
    params = [p for p in model.parameters() if p.requires_grad] if params is None else params
    if isinstance(model, policy.Sharded):
        for p in params:
            if p.grad is not None:
                p.grad.mul_(world)
        return
    import torch.distributed as dist
    for p in params:
        if p.grad is None:  # a rank whose groups were all skipped still joins every all_reduce
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)


def reduce_and_clip(model, opt, world, max_norm):
    """After every rank's backward: gradients summed over ranks (all_reduce_grads), then
    clipped to max_norm over the trainable parameters -> the norm before clipping."""
    params = opt.masters if isinstance(opt, Bf16Master) else [p for p in model.parameters() if p.requires_grad]
    all_reduce_grads(model, world, params)
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # FSDP2: a DTensor


class Bf16Master:
    """AdamW for bf16 weights (--dtype bf16 in training): each trained tensor has an fp32
    master copy that the optimizer steps, with fp32 state, and gradients are summed in fp32
    (a hook moves each bf16 gradient into its master's .grad as soon as backward has it,
    so micro-batches add up in fp32). The model then computes in bf16 with no per-forward
    weight casts, while updates far below a weight's bf16 step (2^-8 of it) still add up.
    After each step the masters are copied into the weights in place (CUDA graphs that read
    them stay valid). Stands in for torch.optim.AdamW: param_groups, step, zero_grad and
    state_dict (AdamW's, plus the masters)."""

    def __init__(self, params, **adamw):
        self.params = list(params)
        self.masters = [p.detach().float().clone() for p in self.params]
        self.inner = torch.optim.AdamW(self.masters, **adamw)
        self.param_groups = self.inner.param_groups
        for p, m in zip(self.params, self.masters):
            p.register_post_accumulate_grad_hook(lambda p, m=m: self._collect(p, m))

    @staticmethod
    def _collect(p, m):
        m.grad = p.grad.float() if m.grad is None else m.grad.add_(p.grad)
        p.grad = None

    def step(self):
        self.inner.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.masters):
                p.copy_(m)

    def zero_grad(self, set_to_none=True):
        self.inner.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return dict(self.inner.state_dict(), masters=[m.detach().cpu() for m in self.masters])

    def load_state_dict(self, state):
        state = dict(state)
        masters = state.pop("masters", None)  # absent in a checkpoint saved with fp32 weights
        self.inner.load_state_dict(state)
        with torch.no_grad():
            for p, m, saved in zip(self.params, self.masters, masters or []):
                m.copy_(saved)
                p.copy_(m)


def optimizer(model, lr, cfg, state=None):
    """AdamW as every stage builds it, resumed from state["optimizer"] when there is one;
    for bf16 weights (not sharded: FSDP2 keeps its own fp32 shards), Bf16Master."""
    params = [p for p in model.parameters() if p.requires_grad]
    kw = dict(lr=lr, weight_decay=cfg["weight_decay"], betas=(0.9, 0.95))
    masters = not isinstance(model, policy.Sharded) and any(p.dtype == torch.bfloat16 for p in params)
    opt = Bf16Master(params, **kw) if masters else torch.optim.AdamW(params, **kw)
    if state and state.get("optimizer"):
        if isinstance(model, policy.Sharded):  # a full (gathered) state, each rank keeps its shards
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
            set_optimizer_state_dict(model, opt, state["optimizer"], options=StateDictOptions(full_state_dict=True))
        elif masters:
            opt.load_state_dict(state["optimizer"])
        else:  # fp32 weights: a bf16 run's masters are not AdamW's
            opt.load_state_dict({k: v for k, v in state["optimizer"].items() if k != "masters"})
    return opt
