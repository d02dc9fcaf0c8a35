"""Timing a candidate against its reference, inside an evaluator worker (harness.py's
run_job calls it once the candidate has passed its checks).

Both programs are timed under the same conditions: a warm-up, a cache flush before every
call, a device-wide synchronize before the end mark, a pool of fresh input sets, the two
interleaved in random order, the median of each round, more rounds while the rounds'
speedups disagree, and a longer re-measure for implausible speedups. On a GPU the worker
has it alone while it times (gate.py); on the CPU a round during which other processes used
its cores is measured again, then kept and flagged (LoadProbe). A few of the candidate's
timed calls, drawn at random, are checked against the reference afterwards (spot_check).
"""
import contextlib
import os
import random
import resource
import threading
import time

import torch

from . import correctness
from .verdicts import Reject, fresh_seed, median, spread as _spread
from .correctness import tensors


# A CPU round during which other processes used more than this many cores' worth of the
# timing worker's cores is measured again, up to RETRIES times, then kept and flagged.
LOAD_LIMIT, RETRIES = 0.25, 3
# What threads the candidate started outside threading may use while the reference is timed
# (ThreadWatch): a quarter of a core, and a tenth of the CPU time the process got over those
# calls; more is rejected/thread. The share holds on a loaded machine, where such a thread
# gets less than a core but still takes its part of what the reference had (honest
# candidates' such threads, none in the seeds, would use nothing between their calls).
THREAD_LIMIT, THREAD_SHARE = 0.25, 0.1
# Cores' worth of CPU that processes the candidate started may use while it is timed
# (ChildWatch, both programs' calls together); more is rejected/child_process.
CHILD_LIMIT = 0.05
SPOT_CHECKS = 3  # timed calls of the candidate whose outputs are checked afterwards (run_timing)
# captured before any candidate runs
_PROCESS_TIME, _MONOTONIC, _SLEEP, _CLOCK = time.process_time, time.monotonic, time.sleep, time.clock_gettime
_LISTDIR, _OPEN, _READ, _CLOSE, _RUSAGE = os.listdir, os.open, os.read, os.close, resource.getrusage
_TICK = os.sysconf("SC_CLK_TCK")


class LoadProbe:
    """What other processes take of this worker's cores over an interval: the cores' busy
    time (/proc/stat) less this process's own CPU time, in cores' worth. A candidate's child
    processes count as others here; ChildWatch rejects their work."""

    def __init__(self):
        self.cores = sorted(os.sched_getaffinity(0))
        self.tick = os.sysconf("SC_CLK_TCK")
        self.t = self.busy = self.own = None

    def _busy(self):
        try:
            with open("/proc/stat") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        total = 0
        for line in lines:
            name, *v = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in self.cores:
                v = [int(x) for x in v]
                total += v[0] + v[1] + v[2] + sum(v[5:8])  # user nice system, irq softirq steal
        return total / self.tick

    def start(self):
        self.t, self.busy, self.own = _MONOTONIC(), self._busy(), _PROCESS_TIME()

    def stop(self):
        """-> other processes' use of the cores since start, in cores' worth, or None."""
        busy, wall = self._busy(), _MONOTONIC() - self.t
        if busy is None or self.busy is None or wall <= 0:
            return None
        return max(0.0, (busy - self.busy) - (_PROCESS_TIME() - self.own)) / wall


def thread_baseline():
    """This process's threads (tids), torch's intra-op pool started first (a parallel op): a
    reference that first goes parallel after the candidate loaded would otherwise have its
    own pool's threads taken for the candidate's. Taken before the candidate loads."""
    torch.ones(1 << 22).sum()
    return set(os.listdir("/proc/self/task"))


def _thread_clock(tid):
    """The CPU-time clock of one thread of this process (Linux's per-thread clock id for a
    tid): read in one system call, exact even while the thread runs on another core."""
    return ((~int(tid)) << 3) | 6


class ThreadWatch:
    """The CPU time of threads the candidate started that threading does not list (from
    compiled code, or through _thread), summed separately over the reference's timed calls
    and the candidate's. Over each timed call: this process's CPU time (every thread's, those
    that ended during the call too) less that of the threads it knows: those alive when the
    candidate loaded (tids0: the main thread, torch's pool, the driver's) and Python's threads
    (judged by harness.candidate_threads). What is left is such threads' work, also one that
    started and ended within the call, which a listing of threads never sees."""

    def __init__(self, tids0):
        self.tids0, self.tids, self.known = tids0, [], []
        self.cpu, self.process, self.wall = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]  # [candidate, reference]

    def refresh(self):
        """List the threads again (at each round): the known ones' clocks, and the count of
        the others (for the message)."""
        try:
            tids = os.listdir("/proc/self/task")
        except OSError:
            return
        py = {str(t.native_id) for t in threading.enumerate()}
        self.tids = [t for t in tids if t not in self.tids0 and t not in py]
        self.known = [_thread_clock(t) for t in tids if t in self.tids0 or t in py]

    def _known(self):
        if not self.known:  # no list of threads (no /proc): nothing is counted, as before the watch
            return None
        try:
            return sum(_CLOCK(c) for c in self.known)
        except OSError:  # a known thread ended: this call is not counted, and the list renewed
            return None

    def start(self):
        # The known threads first, then the process, at both ends: reading a running thread's
        # clock brings its count in the process's total up to date (that total lags by up to a
        # scheduler tick for threads running elsewhere, always so once RLIMIT_CPU is set)
        k = self._known()
        return k, _PROCESS_TIME(), _MONOTONIC()

    def stop(self, mark, is_ref):
        k = self._known()
        p, t = _PROCESS_TIME(), _MONOTONIC()
        if k is None or mark[0] is None:
            self.refresh()
            return
        self.cpu[is_ref] += (p - mark[1]) - (k - mark[0])  # summed raw: the reads' small errors cancel
        self.process[is_ref] += p - mark[1]
        self.wall[is_ref] += t - mark[2]

    def on_reference(self):
        """-> (cores' worth they used while the reference was timed, their share of the
        process's CPU time then, cores' worth while the candidate was)."""
        cpu = max(0.0, self.cpu[1])
        return (cpu / self.wall[1] if self.wall[1] > 0 else 0.0, cpu / self.process[1] if self.process[1] > 0 else 0.0,
                max(0.0, self.cpu[0]) / self.wall[0] if self.wall[0] > 0 else 0.0)


def children_cpu(alive=None):
    """CPU seconds of every process this one started, and theirs in turn: those alive (or
    ended and not yet collected), from /proc; those collected, from getrusage. A child that
    ends and is collected between two reads moves from one sum to the other. alive: a list
    the pids of those in /proc are appended to."""
    r = _RUSAGE(resource.RUSAGE_CHILDREN)
    total, kids = r.ru_utime + r.ru_stime, {}
    for name in _LISTDIR("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = _OPEN(f"/proc/{name}/stat", os.O_RDONLY)
            try:
                stat = _READ(fd, 4096).decode()
            finally:
                _CLOSE(fd)
            v = stat.rpartition(")")[2].split()  # after the command name: state, ppid, ...
            kids.setdefault(int(v[1]), []).append((int(name), sum(int(x) for x in v[11:15])))  # u/s time, theirs collected
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    todo = [os.getpid()]
    while todo:
        for pid, ticks in kids.get(todo.pop(), ()):
            total += ticks / _TICK
            todo.append(pid)
            if alive is not None:
                alive.append(pid)
    return total


def settle_children(pause_point, limit, window=0.25):
    """Before timing, wait until the processes the candidate started are idle, at most
    `limit` seconds: torch.compile starts its pool of compile workers in the background, and
    each imports torch (seconds of CPU) while the timing would run. Work that goes on past
    the limit (--settle_seconds) is ChildWatch's to judge. pause_point is called each window (a GPU worker
    must answer the gate while it waits). -> seconds waited (no sleep without live children)."""
    alive, t0 = [], _MONOTONIC()
    cpu = children_cpu(alive)
    while alive:
        pause_point()
        _SLEEP(window)
        alive, before = [], cpu
        cpu = children_cpu(alive)
        if (cpu - before) / window <= CHILD_LIMIT or _MONOTONIC() - t0 > limit:
            break
    return _MONOTONIC() - t0


class ChildWatch:
    """The CPU time of the processes the candidate started, over the whole timing: a child
    that works while the reference is timed (a spinner on the worker's cores, told by a
    shared page when the candidate runs) slows the reference alone, and an honest
    candidate's processes (torch.compile's workers) wait idle. Read twice: it walks /proc."""

    def __init__(self):
        self.t, self.cpu = _MONOTONIC(), children_cpu()

    def check(self, where):
        """Raises Reject (child_process) when they used more than CHILD_LIMIT cores."""
        used, wall = children_cpu() - self.cpu, _MONOTONIC() - self.t
        if wall > 0 and used / wall > CHILD_LIMIT:
            raise Reject("rejected", "child_process", f"processes it started used {used / wall:.2f} cores' worth of "
                         f"CPU time while it was timed ({where}): work beside the timed calls")


def retried(probe, measure, retries=RETRIES):
    """measure() again while other processes used this worker's cores (probe, a LoadProbe, or
    None on a GPU), up to `retries` times, a growing pause between (a passing load may be
    gone by then) -> (the last result, that load where it outlasted the retries, else None)."""
    for attempt in range(retries + 1):
        if probe:
            probe.start()
        out = measure()
        load = probe.stop() if probe else None
        if load is None or load <= LOAD_LIMIT:
            return out, None
        if attempt < retries:
            _SLEEP(0.2 * (attempt + 1))
    return out, load


def flush_buffer(h):
    """What is zeroed before every timed call, so that no call finds its data in a cache the
    previous one warmed: twice the GPU's L2, or 32 MiB on the CPU (the second timer uses it too)."""
    size = 2 * torch.cuda.get_device_properties(h.dev).L2_cache_size if h.cuda else 32 << 20
    return torch.empty(size, dtype=torch.uint8, device=h.dev)


class Calls:
    """Timed calls on a pool of fresh input sets, fenced as the checks' inputs are
    (harness.inputs: the storage a program is handed looks the same in both phases), the
    cache flushed before each call, the device synchronized before the end mark: run_timing's
    for both programs, and the reference timer's (worker.timer_main) for the reference alone.
    calls(fn, is_ref) -> ms; after each candidate call on_new(inputs, output, the seed they were
    made from) may keep them (the spot checks); watch (a ThreadWatch) brackets each call."""

    def __init__(self, h, watch=None, on_new=None):
        self.h, self.watch, self.on_new = h, watch, on_new
        self.seeds = [fresh_seed()]  # each pool set's (separate: the timer makes a spot check's set from it)
        x0 = h.inputs(self.seeds[0], fenced=True)
        self.set_bytes = max(1, sum(x.numel() * x.element_size() for x in tensors(x0)))
        self.budget = min(4e9, 0.25 * torch.cuda.mem_get_info()[0]) if h.cuda else 5e8
        self.seeds += [fresh_seed() for _ in range(int(min(7, self.budget // self.set_bytes)))]
        self.pool = [x0] + [h.inputs(s, fenced=True) for s in self.seeds[1:]]
        self.flush = flush_buffer(h)
        self.bytes = self.set_bytes * len(self.pool) + self.flush.numel()  # what it holds of the device's memory
        if h.cuda:
            self.ev0, self.ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.step = 0
        self.last = None  # the last call's ms

    def warm(self, fn, is_ref):
        """One call, untimed, before a part of a round that follows a pause (separate: the
        other process's part; after a retry's wait): the first call after a pause carries the
        wake of the idle cores and their threads (on the CPU VM: 4-12 ms on a 0.7 ms GELU, one
        timer tick or more), which a one-call round would report whole. Calls longer than a
        round, where that is a few percent, are not repeated."""
        if self.last is None or self.last < self.h.cfg["round_seconds"] * 1e3:
            self(fn, is_ref)

    def __call__(self, fn, is_ref):
        h = self.h
        t0 = h.clock()
        i = self.step % len(self.pool)
        self.step += 1
        ms, out = self._timed(fn, is_ref, self.pool[i])
        self.last = ms
        if not is_ref and self.on_new:
            self.on_new(self.pool[i], out, self.seeds[i])
        del out
        # the set just used gets new values, untimed, from the task's own get_inputs (its
        # distribution, its structure), written into its fenced buffers: no input set is
        # timed twice, so a cache keyed on a sample of the values never pays (one keyed on
        # the storage is the checks' cached_output)
        self.seeds[i] = fresh_seed()
        for x, f in zip(self.pool[i], h.inputs(self.seeds[i])):
            if isinstance(x, torch.Tensor):
                x.copy_(f)
        self.wall = h.clock() - t0  # the whole call as the host sees it (flush, synchronize, new inputs)
        return ms

    def _timed(self, fn, is_ref, xs):
        h = self.h
        self.flush.zero_()
        h.sync()
        mark = self.watch.start() if self.watch else None
        with h.reference_flags() if is_ref else h.candidate_flags("timing"), \
                contextlib.nullcontext() if is_ref else h.calling():
            if h.cuda:
                self.ev0.record()
                out = fn(*xs)
                h.sync()  # all streams of the device, not just the current one
                self.ev1.record()
                self.ev1.synchronize()
                ms = self.ev0.elapsed_time(self.ev1)
            else:
                t0 = h.clock()
                out = fn(*xs)
                ms = (h.clock() - t0) * 1e3
        if self.watch:
            self.watch.stop(mark, is_ref)
        return ms, out


class DeviceQuiet:
    """On a GPU, the reference timer's check that no other process's work is on the device
    before a round (--reference_timing=separate): a candidate's process is stopped during the
    reference's part, but kernels it queued just before run on, and the device's contexts take
    turns. A tiny synchronized operation is timed from the host: with another context's
    kernel resident it waits for its turn (a time slice, or the kernel's end). Before a round:
    again, a millisecond apart, until it takes no more than 3x its quiet time (its best of the
    first 20, at most 100 microseconds) and 50 microseconds over it; after `limit` seconds the
    round is timed anyway and reported as under load (the verdict flagged disturbed)."""

    def __init__(self, h, limit=2.0):
        self.h, self.limit = h, limit
        self.x = torch.zeros(256, device=h.dev)
        # (at most 100 microseconds: a quiet GPU does it in tens; a base taken while another
        # context's work was resident would let that work through)
        self.base = min([self._once() for _ in range(20)] + [100e-6])

    def _once(self):
        t = _MONOTONIC()
        self.x.zero_()
        self.h.sync()
        return _MONOTONIC() - t

    def wait(self):
        """-> None once quiet, else the seconds waited (reported as the round's load)."""
        t0 = _MONOTONIC()
        while self._once() > max(3 * self.base, self.base + 50e-6):
            if _MONOTONIC() - t0 > self.limit:
                return _MONOTONIC() - t0
            _SLEEP(0.001)
        return None


def reference_round(h, ref_fn, calls, runs, probe=None, quiet=None):
    """The reference timer's part of a round (--reference_timing=separate): runs timed calls of
    the reference alone, the candidate's process stopped meanwhile -> (median ms, the other
    processes' load on the cores where it outlasted the retries, else None). quiet: a
    DeviceQuiet (on a GPU), waited on first."""
    waited = quiet.wait() if quiet else None
    ts, load = retried(probe, lambda: (calls.warm(ref_fn, True), [calls(ref_fn, True) for _ in range(runs)])[1])
    return median(ts), load if waited is None else max(load or 0.0, 1.0)


def run_timing(h, ref, new, ref_ms=None, remote=None, report=None):
    """h: the worker's Harness; ref, new: the checked models -> (reference ms, candidate ms,
    spread of the per-round speedups). Exceptions from candidate code pass through: the
    caller turns them into verdicts. --reference_timing=apart: new None times the reference
    alone (before the candidate loads: -> (ms, None, spread of its rounds)); ref_ms given
    times the candidate alone against that time (the spot checks still run the reference).
    --reference_timing=separate: remote(runs) -> (ms, load, a call's wall ms) has the reference timer time
    the reference's part of each round, in a process where no candidate code has run, this
    process stopped meanwhile; a round's two parts in random order. report(ms), given with
    remote: the median of the candidate's part of each round, told as soon as it is timed (the
    Evaluator's record of it is what the verdict's candidate time comes from)."""
    cfg = h.cfg
    # --baseline=compile: the reference compiled before the candidate loaded (harness.py);
    # same seed, so the same weights as `ref`
    ref_fn = h.baseline(ref)
    rng = random.Random(fresh_seed())  # an order, and spot checks, the candidate cannot know ahead
    # Spot checks: a few of the candidate's timed calls, drawn at random as they happen (a
    # reservoir), keep their inputs and output; after the timing the reference runs on those
    # inputs and must agree (spot_check). A candidate that tells the timing from the checks
    # (by the rhythm of its calls, say, or the cores a GPU worker times on) and answers
    # wrongly while timed is caught: always if it does so in every timed call, with
    # probability 1 - (1 - p)^k in a fraction p of them (k = SPOT_CHECKS); the second timer
    # covers large speedups. The buffers are made at the first call (the warm-up) and then
    # refilled in place: nothing is allocated between timed calls.
    slots, seen = [], [0]  # slots: [inputs, outputs, the call kept there (0: none yet), the inputs' seed]

    def keep(xs, out, seed):
        seen[0] += 1
        outs = [out] if isinstance(out, torch.Tensor) else tensors(out)
        if not slots:
            slots.extend([[x.clone() if isinstance(x, torch.Tensor) else x for x in xs], [t.clone() for t in outs], 0,
                          None] for _ in range(k_spot))
        j = seen[0] - 1 if seen[0] <= k_spot else rng.randrange(seen[0])
        if j < k_spot:
            kept_in, kept_out = slots[j][:2]
            for a, b in zip(kept_in + kept_out, list(xs) + outs):
                if isinstance(a, torch.Tensor):
                    a.copy_(b)
            slots[j][2:] = seen[0], seed

    calls = Calls(h, on_new=keep)
    k_spot = SPOT_CHECKS if (SPOT_CHECKS + 1) * calls.set_bytes < calls.budget else 1
    # (by identity of the program, not `fn is new` on a candidate's object: run by the flags below)
    timed = lambda fn: calls(fn, fn is ref_fn)

    # Threads the candidate started outside threading (compiled code, _thread): a thread that
    # works while the reference is timed (a spinner on its cores, GPU work from beside it)
    # slows the reference alone; the candidate's own pool working in its calls is its work
    watch = calls.watch = ThreadWatch(h.tids0)
    watch.refresh()
    children = ChildWatch()
    probe = h.load_probe() if h.load_probe else None  # LoadProbe on the CPU
    disturbed = []  # the other processes' load (cores' worth) of each round kept despite it
    away = [0.0]  # separate: the timer's last reference call as it saw it (ms), what rounds are sized on

    def one_round(runs, rr, rn):
        # On the CPU, a round during which other processes used the timing cores is measured
        # again (retried): a load that slows the multi-threaded reference more than the
        # candidate would move the speedup several-fold, not cancel out. Once a load has
        # outlasted the retries, the later rounds are not retried (it is not passing).
        if remote is not None:  # separate: the candidate's calls here, the reference's in the timer
            # (both parts start with an untimed call: each follows the other's, its cores idle)
            mine = lambda: (watch.refresh(), calls.warm(new, False), [timed(new) for _ in range(runs)])[2]
            before = rng.random() < 0.5
            ms_r, load_r, away[0] = remote(runs) if before else (None, None, away[0])
            tn, load = retried(probe, mine, 0 if disturbed else RETRIES)
            if report is not None:  # before the candidate runs again: then nothing it does changes it
                report(median(tn))
            if not before:
                ms_r, load_r, away[0] = remote(runs)
            disturbed.extend(x for x in (load, load_r) if x is not None)
            rr.append(ms_r)
            rn.append(median(tn))
            return

        def pairs():
            watch.refresh()
            tr, tn = [], []
            for _ in range(runs):
                pair = [(fn, acc) for fn, acc, on in ((ref_fn, tr, time_ref), (new, tn, time_new)) if on]
                rng.shuffle(pair)
                for fn, acc in pair:
                    acc.append(timed(fn))
            return tr, tn
        (tr, tn), load = retried(probe, pairs, 0 if disturbed else RETRIES)
        if load is not None:
            disturbed.append(load)
        rr.append(median(tr) if tr else ref_ms)  # apart: the reference's time, measured before
        rn.append(median(tn) if tn else 1.0)     # apart, the reference alone: its rounds are rr

    # what each round times: both, interleaved (paired); the reference alone, before the
    # candidate loads, or the candidate alone against that time (apart)
    # (flags, not `fn in progs`: that would call a candidate's own __eq__)
    time_ref, time_new = ref_ms is None and remote is None, new is not None
    progs = [ref_fn] * time_ref + [new] * time_new
    if remote is not None and probe:
        ask = remote

        def remote(runs):  # the CPU: the Evaluator's few milliseconds of handing back over before the
            out = ask(runs)  # candidate's calls, not in them (the load probe would count them)
            _SLEEP(0.003)
            return out
    t0 = t_start = h.clock()
    for fn in progs:  # warm-up: lazy initialization, autotuning, caches
        timed(fn)
    slow_cold = h.clock() - t0 >= cfg["round_seconds"] / 3
    t0 = h.clock()
    if slow_cold:  # a pair that took a third of a round even cold is estimated on one pair,
        er, en = [], []  # shuffled as in a round of one pair, so that it can count as one (below)
        one_round(1, er, en)
        est, n = [er[0] if time_ref or remote else 0.0, en[0] if time_new else 0.0], 1
        est_away = away[0]
    else:
        est, n = [median([timed(fn) for _ in range(3)]) for fn in progs], 3
        est_away = remote(3)[2] if remote is not None else 0.0  # (separate: the timer's call, flush and refill included)
        est.append(est_away)
    # one timed pair as the host sees it (flush, synchronize, bookkeeping included): rounds
    # are sized on this, so that a round of tiny kernels lasts round_seconds too
    # (separate: the candidate's last call as the host saw it, and the reference's as the timer
    # saw it, not its round trip through the Evaluator, nor a retry's wait for a load to pass;
    # sized on the reference's bare time, a GELU round on the CPU VM ran to nearly twice its length)
    pair_ms = max(sum(est), (h.clock() - t0) * 1e3 / n if remote is None else calls.wall * 1e3 + est_away)

    fit = cfg["round_seconds"] * 1e3 / max(1e-3, pair_ms)  # pairs that fit one round
    runs, rounds = int(min(cfg["max_runs"], max(cfg["min_runs"], fit))), cfg["timing_rounds"]
    # Slow programs (min_runs pairs overrun a round twice over) get 3 rounds of as many
    # pairs as fit one (at least one), and no extra rounds: their speedups are far from 1
    # (a 275 ms naive GEMM against a 3 ms cuBLAS), and the GPU, which timing holds alone,
    # is better spent on the next candidate.
    slow = runs * pair_ms > 2e3 * cfg["round_seconds"]
    if slow:
        runs, rounds = max(1, int(fit)), min(3, rounds)
    suspicious = lambda rr, rn: new is not None and median(rr) / median(rn) > cfg["suspicious_speedup"]
    speedups = lambda rr, rn: [a / b for a, b in zip(rr, rn)]  # one per round
    rr, rn, t0 = [], [], h.clock()
    parts = h.time_parts = {}  # where the timing phase goes (bench.py prints the means)
    parts["sizing"] = t0 - t_start  # warm-up and the estimate the rounds are sized on
    if slow and slow_cold and runs == 1:  # the estimate was such a round: it counts, and a
        rr, rn = er, en                   # 275 ms candidate holds the GPU one pair less
    while len(rr) < rounds:
        one_round(runs, rr, rn)
    t1 = h.clock()
    parts["rounds"] = t1 - t0
    if not (slow or suspicious(rr, rn)):  # (an implausible speedup is measured again below)
        # extra rounds while the rounds' speedups disagree, up to max_rounds and 4x the planned
        # time. The speedup, not each program's time: a drift both programs share (the GPU's
        # clock between rounds, say) moves both medians of a round and leaves their ratio alone.
        planned = rounds * max(cfg["round_seconds"], runs * pair_ms / 1e3)
        while len(rr) < cfg["max_rounds"] and _spread(speedups(rr, rn)) > cfg["spread_limit"] \
                and h.clock() - t0 < 4 * planned:
            one_round(runs, rr, rn)
    t2 = h.clock()
    parts["extra"] = t2 - t1
    if suspicious(rr, rn):  # implausible: measured again, twice as long, and that counts
        h.notes.append(f"speedup {median(rr) / median(rn):.1f}x re-measured")
        rr, rn = [], []
        while len(rr) < rounds:
            one_round(2 * runs, rr, rn)
    parts["again"] = h.clock() - t2
    if new is not None:  # (the reference alone: no candidate loaded, nothing of its to watch)
        on_ref, share, on_new = watch.on_reference()
        if on_ref > THREAD_LIMIT or share > THREAD_SHARE:
            raise Reject("rejected", "thread", f"threads it started outside Python's threading ({len(watch.tids)} "
                         f"alive at the last look) used {on_ref:.2f} cores, {share:.0%} of the process's CPU time, "
                         f"while the reference was timed ({on_new:.2f} cores in its own timed calls)")
        children.check("the timing")
    if disturbed:
        h.flags += [] if "disturbed" in h.flags else ["disturbed"]
        h.notes.append("timed under load: another process's work was still on the device before "
                       f"{len(disturbed)} of the reference's rounds (the reference timer waited for it, then "
                       "timed anyway); the speedup may be off" if h.cuda else
                       f"timed under load: other processes used {max(disturbed):.1f} cores' worth of its "
                       f"own in {len(disturbed)} round(s), the first measured {RETRIES + 1} times; the speedup may be off")
    if new is None:
        return median(rr), None, _spread(rr)
    h.spots = ([s for s in slots if s[2]], seen[0])
    return median(rr), median(rn), _spread(speedups(rr, rn))


def closing_checks(h, ref, new):
    """After run_timing, the device no longer held (what was changed during the timing is
    still changed now: checking it later loses nothing, and the next candidate times
    meanwhile): the candidate's forward, the harness and the dispatcher, the reference's
    model as they were before it. Raises Reject."""
    t = h.clock()
    h.check_forward(new, "timing")
    h.integrity("timing", dispatch=True)
    h.check_reference(ref, h.ref_state, "timing")
    h.time_parts["after"] = h.clock() - t  # (run_timing made the dict)


def spot_check(h, ref):
    """After run_timing (the GPU no longer held): the reference on each kept timed call's
    inputs must agree with what the candidate returned there, within twice its checked
    tolerance in the task's own dtype (as the second timer holds it). Raises Reject
    (timed_output)."""
    spots, calls = h.spots
    for xs, outs, n, _ in spots:
        with h.reference_flags():
            r = ref(*xs)
        h.sync()
        r = [r] if isinstance(r, torch.Tensor) else tensors(r)
        if not correctness.agrees(outs, r, 2 * (h.tol or 0)):
            raise Reject("rejected", "timed_output", f"its output in timed call {n} of {calls} differs from the "
                         "reference's on the same inputs, while its checked outputs agreed: it computes "
                         "differently while it is timed")
