"""The correctness phase of a run job, inside an evaluator worker (harness.py's run_job calls
it once the candidate is loaded): several weight seeds, fresh input sets, the candidate called
first on each, the checks for work left running, mutated inputs, cached and aliased results;
after timing, one more input set. `h` is the worker's Harness throughout.

    ref, new, ref64 = run_checks(h)          # or raises Reject
    check_after_timing(h, ref, new, ref64)
"""
import base64
import time

import torch

from . import correctness, verdicts
from .correctness import tensors
from .verdicts import Reject, fresh_seed


def run_checks(h):
    """Correctness (EVAL.md, "How a candidate is judged"): several weight seeds, fresh input
    sets each, candidate called first on every set (so no reference result sits in freed
    memory), with checks for side streams, mutated inputs, cached results and rebinding. The
    last seed's sets after its first are drawn from other distributions (DISTRIBUTIONS).
    -> (ref, new, ref64) of the first seed, for timing and the check after it."""
    cfg = h.cfg
    agreed, constant, kept = [], True, None
    seeds = h.seeds()[1:]
    for s, seed in enumerate(seeds):
        h.gate.pause_point()
        ref, new = h.models(seed)
        ref64 = correctness.float64_copy(ref)
        states = [h.reference_state(ref), h.reference_state(ref64)]  # before any call of the candidate
        prints = []  # (candidate, reference) fingerprints of this seed's calls, and their distribution
        held = []    # this seed's earlier outputs (per call: tensors, addresses), kept alive so a
        # reused buffer shows; the addresses read when they were new: an output a later call
        # overwrote (a CUDA graph's, torch.compile's "reduce-overhead") must not be touched.
        # Older ones are let go past HELD_BYTES (the last one always stays): a task with
        # gigabyte outputs (KernelBench's L1_23) would otherwise run out of memory on them.
        retried = False  # with the reference's weights, after a mismatch
        xs = None
        draws = [0] * (cfg["check_inputs"] + 1)  # each set's distribution by number (0: the task's own)
        if s == len(seeds) - 1:  # one set of the task's own, then one of each other distribution
            draws = [0] + list(range(1, len(DISTRIBUTIONS) + 1)) + draws[1 + len(DISTRIBUTIONS):]
        for k, d in enumerate(draws):
            h.gate.pause_point()
            refill = 0 < k == len(draws) - 1  # last round: same tensors, new values
            iseed = fresh_seed()  # (separate: the timer makes the same set from it)
            fresh = h.inputs(iseed, fenced=True)
            draw = draw_into(fresh, d)  # the distribution's name, where it applies
            if refill:  # caches keyed by address, id or shape hit here and replay old results
                for x, f in zip(xs, fresh):
                    if isinstance(x, torch.Tensor):
                        x.copy_(f)
                fresh = None
            else:
                xs = fresh
            clones = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
            where = f"seed {s}, input set {k}" + (f", drawn from {draw}" if draw else "")
            with correctness.poisoned(h.out_specs, h.dev):
                out, snap = h.forward(new, xs, where, snapshot=True)
            if not h.cuda:
                time.sleep(0.005)
            if any(not correctness.same_bits(a, b) for a, b in zip(snap, tensors(out))):
                # on a GPU, a thread it left running says which, however long the synchronize took
                reason = "side_stream" if h.cuda and not h.left else "thread" if h.cuda else "background_work"
                raise Reject("rejected", reason, "output changed after forward returned: work left running on "
                             + ("an unjoined stream" if reason == "side_stream" else "another thread") + f" ({where})")
            for i, (x, c) in enumerate(zip(xs, clones)):
                if isinstance(x, torch.Tensor) and not correctness.same_bits(x, c):
                    raise Reject("rejected", "input_mutated", f"input {i} was modified in place ({where})")
            h.check_forward(new, "forward")
            h.integrity("forward")
            h.check_reference(ref, states[0], where)
            h.check_reference(ref64, states[1], where)
            if h.claims is not None and d:  # separate: the timer makes this set from its seed and the
                # distribution's number and judges the output there, whatever the reference does here
                h.claims.append(dict(w=seed, s=iseed, spot=False, d=d, c=claim(out, iseed, CLAIM_SAMPLES)))
            had64 = ref64 is not None
            h.gate.pause_point()
            try:
                r32, r64, ref64 = correctness.reference_outputs(ref, ref64, clones)
            except Exception as e:
                if not draw or correctness.gpu_out_of_memory(e):
                    raise
                continue  # the reference fails on these values: they say nothing
            h.reference_ran(ref, states[0])  # checked just before: what changed now, it changed itself
            h.reference_ran(ref64, states[1])
            if had64 and ref64 is None and h.cuda:  # no float64 kernel: give its memory back
                torch.cuda.empty_cache()
            if draw and not finite(r32):
                continue  # the reference is not finite on them (a log, a square root): nothing to compare
            fp, rp = correctness.fingerprint(out), correctness.fingerprint(r32)
            for pf, pr, _ in prints:
                if correctness.same_fingerprint(fp, pf) and not correctness.same_fingerprint(rp, pr):
                    raise Reject("rejected", "cached_output", "output repeats an earlier call's result for "
                                 f"different inputs: results cached across calls ({where})")
            claimed = out
            try:
                agree = correctness.compare(out, r32, r64, cfg["allow_lowp"], where)
            except Reject as failure:
                if draw and failure.reason in SHORTCUT_REASONS:
                    distribution_shortcut(h, failure, where)
                    agree = None
                elif failure.reason != "mismatch" or retried:
                    raise
                else:
                    new, agree, claimed = with_reference_weights(h, ref, seed, clones, r32, r64, where, failure)
                    retried = True
            if h.claims is not None and not d and sum(not c["d"] for c in h.claims) < verdicts.check_claims(cfg):
                # separate: the output goes to the reference timer too, which judges it against a
                # reference no candidate code has reached (timer_check)
                h.claims.append(dict(w=seed, s=iseed, spot=False, d=0, c=claim(claimed, iseed, CLAIM_SAMPLES)))
            # right, but the output is an input handed back: right only where the op is the
            # identity on these inputs (a ReLU of torch.rand), so no work was done; the
            # reference's own view of an input is the one honest case
            if _storage_shared(out, xs) and not _storage_shared(r32, clones):
                raise Reject("rejected", "aliased_input", "the output is an input tensor's own storage, where the "
                             f"reference computes a new tensor: the work was skipped ({where})")
            if any(t.untyped_storage().data_ptr() in a for _, a in held for t in tensors(out) if t.numel()):
                reused_output(h, where)
            if agree is not None:
                agreed.append(agree)
            if not draw:  # constant on the task's own inputs (other distributions may move it)
                constant &= all(correctness.same_fingerprint(rp, pr) for _, pr, d in prints if not d)
            prints.append((fp, rp, draw))
            held.append((tensors(out), {t.untyped_storage().data_ptr() for t in tensors(out) if t.numel()}))
            let_go(held, HELD_BYTES)
            del out, r32, r64, snap, claimed
        if kept is None:
            kept, h.ref_state = (ref, new, ref64), states[0]
        del ref64, held
    h.max_err, h.tol, h.mean_err, h.mean_tol = correctness.Agreement.worst(agreed)
    # kernels it registered for the reference's ops (at import or in a call) would have made
    # the reference's outputs, not only its speed, the candidate's own
    h.integrity("the checks", dispatch=True)
    if constant:  # the output never changed with the input, like the all-zero task that scored 120x
        h.flags.append("input_independent")
    return kept


HELD_BYTES = 4 << 30  # earlier outputs kept alive per seed (above): the latest, and older ones up to this


def let_go(held, limit):
    """Drop the oldest of held [(tensors, addresses)] while they hold more than limit bytes;
    the newest always stays (a buffer reused by the next call still shows)."""
    while len(held) > 1 and sum(t.nbytes for ts, _ in held for t in ts) > limit:
        held.pop(0)


# Values the last weight seed's later input sets are drawn from, shapes and dtypes kept
# (floating inputs only): right only on the task's own distribution (a ReLU dropped because
# torch.rand is never negative) is a shortcut an RL policy would learn.
DISTRIBUTIONS = {"normal(0, 1)": lambda x: x.normal_(), "uniform(-1, 1)": lambda x: x.uniform_(-1, 1)}


SHORTCUT_REASONS = ("mismatch", "nan", "precision")  # wrong on a drawn set: distribution_shortcut


def draw_into(xs, d):
    """Input set xs redrawn in place from other distribution number d (1, 2, ...; 0: left as
    it is), its floating tensors only -> the distribution's name, or None where nothing was
    drawn. The job's checks and the reference timer make a drawn set so, from the same seed."""
    if not d:
        return None
    name, fill = list(DISTRIBUTIONS.items())[d - 1]
    floats = [x for x in xs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    for x in floats:
        fill(x)
    return name if floats else None


def finite(out):
    """Every floating tensor of an output finite (a reference on a drawn set may not be: a log)."""
    return all(t.isfinite().all() for t in tensors(out) if t.is_floating_point())


def distribution_shortcut(h, failure, where):
    """Wrong on a set drawn from another distribution, after every set of the task's own
    passed: rejected (input_distribution), or with allow_distribution_shortcut flagged."""
    if not h.cfg["allow_distribution_shortcut"]:
        raise Reject("rejected", "input_distribution", f"right on the task's own input sets, wrong on inputs of "
                     f"its shapes ({where}): {failure.message} (a shortcut that holds only for the task's "
                     "distribution, or an error its own draws did not show; --allow_distribution_shortcut "
                     "accepts it, flagged)") from None
    if "input_distribution" not in h.flags:
        h.flags.append("input_distribution")


def with_reference_weights(h, ref, seed, xs, r32, r64, where, failure):
    """After a mismatch: is the forward wrong, or only the initialization? ModelNew is built
    again with the reference's weights loaded (where the state_dicts match) and compared once
    more. Right with them: its initialization draws the random stream differently (another
    order, another way); rejected by default, accepted and flagged with allow_init_mismatch
    -> (the candidate with the reference's weights, its Agreement, its output). Wrong with them too: the
    failure stands, as it does where Model has no weights to copy."""
    rs = ref.state_dict()
    if not rs:
        raise failure
    try:
        ns = h.candidate(seed).state_dict()
    except Reject:
        raise failure from None
    if rs.keys() != ns.keys() or any(rs[k].shape != ns[k].shape for k in rs):
        raise failure
    new = h.candidate(seed, weights=rs)
    try:
        with correctness.poisoned(h.out_specs, h.dev):
            out = h.forward(new, xs, where)
        agree = correctness.compare(out, r32, r64, h.cfg["allow_lowp"], where)
    except Reject:
        raise failure from None
    if not h.cfg["allow_init_mismatch"]:
        raise Reject("incorrect", "init_mismatch",
                     "ModelNew computes the right function, but only with Model's weights copied in: its "
                     "own initialization differs. Both are built from the same seed (as KernelBench does), "
                     "so create the parameters in the same order and the same way as Model "
                     f"(or accept this with --allow_init_mismatch) ({where})")
    if "init_mismatch" not in h.flags:
        h.flags.append("init_mismatch")
    return new, agree, out


def _storage_shared(out, xs):
    ptrs = {x.untyped_storage().data_ptr() for x in xs if isinstance(x, torch.Tensor) and x.numel()}
    return any(t.numel() and t.untyped_storage().data_ptr() in ptrs for t in tensors(out))


def reused_output(h, where):
    """An output returned in the same buffer as an earlier call's (a preallocated tensor, a
    CUDA graph's static output): accepted as KernelBench does, and flagged."""
    if h.cfg["reject_reused_output"]:
        raise Reject("rejected", "reused_output", "the output is returned in the buffer of an earlier call's "
                     f"output, which this call overwrote ({where})")
    if "reused_output" not in h.flags:
        h.flags.append("reused_output")


# ----------------------------------------------------------------------------------------
# --reference_timing=separate: the candidate's outputs on the checks' input sets, on the timed
# calls kept for the spot checks, and on one more input set after timing are judged again by
# the reference timer (worker.timer_main), a process no candidate code has reached, against its
# own reference, under the Evaluator's settings. The verdict is the timer's too.

TIMER_SAMPLES = 32768  # output elements of the Evaluator's own check sent to the timer, over all tensors
CLAIM_SAMPLES = 8192  # of each other claim (verdicts.MAX_CLAIMS of them fit one message)


def samples_each(n, total=TIMER_SAMPLES):
    """Positions sampled in each of an output's n tensors (claim and compare_claim alike)."""
    return max(1, total // max(1, n))


def sample_at(t, seed, i, per):
    """Tensor i of an output, flattened and read at `per` positions drawn from (seed, i) (all
    of it when it is smaller): the same positions on both sides."""
    n = t.numel()
    if n <= per:
        return t.reshape(-1)
    g = torch.Generator().manual_seed(seed * 1009 + i)
    return t.reshape(-1)[torch.randint(0, n, (per,), generator=g).to(t.device)]


def timer_check(h, new):
    """The worker's side, after timing, while it holds the device: the Evaluator picks one more
    input seed now (the gate asks it), the candidate runs on that set, and its output goes to
    the Evaluator as a claim (its structure, each tensor's dtype and shape, its values at sampled
    positions), first of a list: then the claims run_checks kept (h.claims: its input sets of the
    task's own distribution, by weight seed and input seed) and those of the timed calls kept
    for the spot checks (h.spots: their inputs' seeds), and those of the sets drawn from other
    distributions (by input seed and the distribution's number). The Evaluator has the timer judge each
    against its own reference; the verdict is the timer's, whatever this process concludes."""
    seed = h.gate.check_seed()
    xs = h.inputs(seed, fenced=True)
    with correctness.poisoned(h.out_specs, h.dev):
        out = h.forward(new, xs, "the reference timer's check")
    weights = h.seeds()[1]  # the timed candidate's (run_checks keeps its first seed's)
    spots = [dict(w=weights, s=s, spot=True, d=0, c=claim(outs, s, CLAIM_SAMPLES)) for _, outs, _, s in h.spots[0]]
    h.gate.checked([dict(w=weights, s=seed, spot=False, d=0, c=claim(out, seed))] + (h.claims or []) + spots)


def claim(out, seed, samples=TIMER_SAMPLES):
    """An output -> plain JSON: {"t": i} for tensor i, {"l": [...]} for a list or tuple, {"v": x}
    for a number, a bool or None, {"o": type name} for anything else; and the tensors, each
    read at the positions `seed` draws (`samples` in all)."""
    per = samples_each(len(tensors(out)), samples)
    specs = []

    def tree(x):
        if isinstance(x, torch.Tensor):
            v = sample_at(x.detach(), seed, len(specs), per).contiguous().cpu()
            specs.append(dict(dtype=str(x.dtype).removeprefix("torch."), shape=list(x.shape),
                              data=base64.b64encode(v.view(torch.uint8).numpy().tobytes()).decode()))
            return {"t": len(specs) - 1}
        if isinstance(x, (list, tuple)):
            return {"l": [tree(e) for e in x]}
        if x is None or isinstance(x, (bool, int, float)):
            return {"v": x}
        return {"o": type(x).__name__}
    return dict(tree=tree(out), tensors=specs)


def compare_claim(got, r32, r64, seed, dev, allow_lowp, where, samples=TIMER_SAMPLES, factor=1.0):
    """The timer's side: a worker's claim (above) against this process's reference outputs
    (r32, r64 on the same input set) -> an Agreement; raises Reject as compare does, its
    tolerances times factor."""
    n = len(tensors(r32))
    per = samples_each(n, samples)
    specs = got.get("tensors") if isinstance(got, dict) else None
    if not isinstance(specs, list) or len(specs) != n:
        raise Reject("incorrect", "shape_mismatch", f"expected {n} output tensors ({where})")
    seen = [0]

    def walk(node, a, b):
        if not isinstance(node, dict) or len(node) != 1:
            raise Reject("incorrect", "shape_mismatch", f"outputs of another structure than the reference's ({where})")
        (kind, v), = node.items()
        if isinstance(a, (list, tuple)):
            if kind != "l" or not isinstance(v, list) or len(v) != len(a):
                raise Reject("incorrect", "shape_mismatch", f"expected {len(a)} outputs ({where})")
            return correctness.Agreement.worst([walk(n, x, y) for n, x, y in zip(v, a, b)] or
                                               [correctness.Agreement(0.0, 0.0)])
        if isinstance(a, torch.Tensor):
            if kind != "t" or v != seen[0]:
                raise Reject("incorrect", "not_a_tensor", f"output is not a tensor where the reference's is ({where})")
            i, spec = seen[0], specs[seen[0]]
            seen[0] += 1
            dtype = getattr(torch, str(spec.get("dtype")), None) if isinstance(spec, dict) else None
            shape = spec.get("shape") if isinstance(spec, dict) else None
            if not isinstance(shape, list) or [int(s) for s in shape if type(s) is int] != shape:
                raise Reject("incorrect", "shape_mismatch", f"an output's shape unreadable ({where})")
            if tuple(shape) != tuple(a.shape):
                raise Reject("incorrect", "shape_mismatch", f"output shape {tuple(shape)}, expected {tuple(a.shape)}")
            if dtype != a.dtype:
                raise Reject("incorrect", "dtype_mismatch", f"output dtype {spec.get('dtype')}, expected {a.dtype}")
            want = sample_at(a, seed, i, per)
            try:
                raw = base64.b64decode(spec.get("data", ""), validate=True)
            except (ValueError, TypeError):
                raw = b""
            if len(raw) != want.numel() * want.element_size():
                raise Reject("incorrect", "shape_mismatch", f"an output's values do not fit its shape ({where})")
            mine = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(a.dtype).to(dev) if raw else \
                want.new_empty(0)
            return correctness.compare(mine, want, sample_at(b, seed, i, per), allow_lowp, where, factor)
        out = v if kind == "v" and (v is None or isinstance(v, (bool, int, float))) else object()
        return correctness.compare(out, a, b, allow_lowp, where, factor)
    return walk(got.get("tree"), r32, r64)  # r64: r32's structure (correctness.reference_outputs)


def check_after_timing(h, ref, new, ref64):
    """One more fresh input set after timing: a candidate that turns wrong once it has been
    checked (counting calls, say) is caught here."""
    xs = h.inputs(fenced=True)
    with correctness.poisoned(h.out_specs, h.dev):
        out = h.forward(new, xs, "after timing")
    r32, r64, _ = correctness.reference_outputs(ref, ref64, xs)
    correctness.compare(out, r32, r64, h.cfg["allow_lowp"], "check after timing")
