"""The second, independent measurement. A candidate whose timing (timing.py) gave it a large
speedup (confirm_speedup, 1.5x) is timed again by the Evaluator in a fresh worker, with a
minimal timer that shares nothing with the first but the loading of the task and candidate:
another clock (CLOCK_MONOTONIC_RAW, captured when this module is imported, which happens only
in a worker that runs this job, before its candidate loads), one call at a time on a new input
set each, candidate first, a device synchronize on both sides of the call (its own cost
measured and taken off), its output compared with the reference's after each pair.

A candidate whose speed depends on how it is measured (it told the first timer's phases
apart, or forged what that timer reads) shows it here: the two speedups disagree by more
than their spreads allow, and the Evaluator rejects it as `unconfirmed` (evaluator.py).

    confirm_job(job)    # in a run worker; job["confirm"]: what the first timing found
"""
import time

import torch

from . import correctness, harness, timing
from .verdicts import Reject, median

_NOW, _RAW = time.clock_gettime_ns, time.CLOCK_MONOTONIC_RAW
SECONDS = 0.3        # of timed pairs (both programs), about; at least MIN_PAIRS of them however long
MIN_PAIRS, MAX_PAIRS = 3, 200


def _ms():
    return _NOW(_RAW) / 1e6


def measure(h, ref, new, tol):
    """-> (reference ms, candidate ms, spread, load): medians of per-call times less the
    timer's own cost; spread is the relative range of the speedups of the first, middle and
    last third of the pairs; load, other processes' use of its cores (CPU only, None when
    below timing.LOAD_LIMIT). Raises Reject when an output disagrees with the reference's."""
    ref_fn = h.baseline(ref)
    flush = timing.flush_buffer(h)

    def call(fn, xs):
        flush.zero_()
        h.sync()
        t0 = _ms()
        out = fn(*xs)
        h.sync()
        return out, _ms() - t0

    def candidate(xs):
        with h.calling(), h.candidate_flags("the second measurement"):
            return call(new, xs)

    def reference(xs):
        with h.reference_flags():
            return call(ref_fn, xs)

    idle = []  # what the timer reads around nothing: a synchronize and two clock reads
    for _ in range(20):
        h.sync()
        t0 = _ms()
        h.sync()
        idle.append(_ms() - t0)
    idle = median(idle)
    xs = h.inputs()
    children = timing.ChildWatch()
    candidate(xs), reference(xs)  # warm-up
    def pairs():
        tr, tn, t0 = [], [], _ms()
        while len(tn) < MIN_PAIRS or (len(tn) < MAX_PAIRS and _ms() - t0 < 1e3 * SECONDS):
            xs = h.inputs()  # new values every pair; the candidate sees them first
            out, ms = candidate(xs)
            r, rms = reference(xs)
            if not correctness.agrees(out, r, tol):
                raise Reject("incorrect", "mismatch", "its output differs from the reference's in the second "
                             f"measurement (a fresh worker, pair {len(tn) + 1})")
            tn.append(max(ms - idle, 1e-4))
            tr.append(max(rms - idle, 1e-4))
            del out, r, xs
        return tr, tn
    # on the CPU, measured again while other processes use its cores, as the first timer's
    # rounds are; a load that outlasts the retries is reported (load)
    (tr, tn), load = timing.retried(h.load_probe() if h.load_probe else None, pairs)
    children.check("the second measurement")
    k = len(tn) // 3 or 1
    parts = [median(tr[i:i + k]) / median(tn[i:i + k]) for i in range(0, len(tn) - k + 1, k)][:3]
    spread = (max(parts) - min(parts)) / median(parts)
    return median(tr), median(tn), spread, load


def confirm_job(job):
    """In a worker: time an already accepted candidate again -> dict of Verdict fields."""
    h = harness.Harness(job)
    first = job["confirm"]
    t0, p0 = h.clock(), h.gate.paused  # (paused at the worker's start, before this: not loading)
    with torch.no_grad():
        try:
            ref, _ = harness.start(h, prebuild=False)
        except Exception as e:
            return harness.reference_failed(e)
        try:
            h.gate.pause_point()
            state = h.reference_state(ref)
            h.load_candidate()
            new = h.candidate(job["seed"])
            # both programs' first calls (cuDNN autotuning, a lazy build: seconds for some
            # published kernels) beside the other workers' checks, not with the GPU alone:
            # nobody waits for them, and the call's deadline runs on its share of the GPU
            xs = h.inputs()
            h.forward(new, xs, "before the second measurement")
            h.check_reference(ref, state, "the candidate's first call")
            h.gate.pause_point()
            with h.reference_flags():
                h.baseline(ref)(*xs)
            h.reference_ran(ref, state)
            h.sync()
            del xs
            h.gate.pause_point()
            timing.settle_children(h.gate.pause_point, h.cfg["settle_seconds"])
            h.gate.acquire()  # the GPU alone, as for the first timing
            t1, paused = h.clock(), h.gate.paused  # (release, below, pauses too: not loading)
            try:
                # a candidate is held to twice its checked tolerance against the task's own
                # dtype (the first check compared with float64)
                ref_ms, new_ms, spread, load = measure(h, ref, new, 2 * (first.get("tol") or 0))
            finally:
                t2 = h.clock()
                h.gate.release()
            h.check_forward(new, "the second measurement")
            h.integrity("the second measurement", dispatch=True)
            h.check_reference(ref, state, "the second measurement")
        except BaseException as e:
            return harness.failed(h, e)
    # under load, what the Evaluator says instead of rejecting a disagreement (evaluator.py)
    loaded = dict(flags=["disturbed"], message=f"other processes used {load:.1f} cores' worth of its own") if load else {}
    return dict(status="ok", ref_ms=ref_ms, new_ms=new_ms, spread=spread, **loaded,
                seconds=dict(confirm_load=t1 - t0 - (paused - p0), confirm_time=t2 - t1))
