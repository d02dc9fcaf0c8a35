"""Sharing a GPU between evaluator workers: checks share it, timings own it.

Loading a candidate and checking its outputs need a GPU but not a quiet one; timing needs it
to itself. So the Evaluator (evaluator.py) runs up to `checks_per_gpu` workers on each GPU,
and a worker that has passed its checks asks for the GPU before it times (acquire). The
Evaluator then asks every other worker on that GPU to pause at its next pause point (the
harness has them between candidate calls, right after a synchronize, so nothing of theirs
is left queued on the device), stops their process groups (SIGSTOP: a thread a candidate
left behind launches nothing either), and hands the GPU over. After the timing (release)
the worker that timed pauses too: the next waiting worker times, or all paused ones go on
(the one that timed to its last check). Time spent paused or waiting does
not count against a worker's deadlines. The CPU device is shared the
same way (`checks_per_cpu` workers): a timing there has the cores alone.

Host-only work (building a model on the host) needs no pause point: a worker inside it is
stopped where it is, and before any candidate code is loaded it may even go on during
another's timing (WorkerGate.host_only).

Messages, worker -> Evaluator, through the result pipe: ("call", seconds | None) for a
candidate call's deadline, ("acquire",), ("paused",), ("release",), ("host", may_run) and
("device",) around host-only work. Evaluator -> worker, single bytes on the same (duplex)
pipe after the job: P pause, R resume, G go, D host-only work over.

    Worker side (worker.py):  WorkerGate(fd, send, sync, cores, free): pause_point, host_only, building, acquire, release
    Parent side (evaluator.py): Running (one worker), pick_slot, join, arbitrate(workers of one GPU),
                                share_clock(workers of one GPU)
    Reading a run's trace (bench.py): gate_share(trace, t0, t1)
"""
import contextlib
import math
import os
import secrets
import select
import signal
import struct
import subprocess
import threading
import time

from . import verdicts

# Captured at import, before any candidate runs, like the result path in worker.py.
_READ, _SELECT, _AFFINITY = os.read, select.select, os.sched_setaffinity


def physical_gpu(index, visible=None):
    """The CUDA_VISIBLE_DEVICES entry for visible GPU `index` of this process.

    Workers get one GPU each through CUDA_VISIBLE_DEVICES, which names GPUs as the machine
    numbers them; a parent started with CUDA_VISIBLE_DEVICES=2,3 must hand its GPU 0 out as
    "2", not "0". Entries may be indices or UUIDs and pass through unchanged."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not visible or not visible.strip():
        return str(index)
    ids = [v.strip() for v in visible.split(",")]
    ids = ids[:ids.index("")] if "" in ids else ids  # CUDA ignores everything from an empty entry on
    if not 0 <= index < len(ids):
        raise ValueError(f"GPU {index} is not among the {len(ids)} visible ones (CUDA_VISIBLE_DEVICES={visible})")
    return ids[index]


def gpu_arch(gpu):
    """Compute capability without creating a CUDA context in this process."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader",
                            "-i", physical_gpu(gpu)],
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().replace(".", "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    import torch
    major, minor = torch.cuda.get_device_capability(gpu)
    return f"{major}{minor}"


def now():
    return time.monotonic()


# A worker asked to pause and still inside its candidate call after this many seconds is late:
# the ones already paused go on meanwhile (arbitrate), for as long as the one waiting for the
# GPU has waited less than DEFER_FOR seconds; after that they wait with it, so that workers
# late in turn cannot put a timing off for ever.
DEFER_AFTER, DEFER_FOR = 0.5, 20.0
# A worker writes each frame whole (worker._send): a frame begun and not finished for this
# long, while its worker runs, was written by someone else (a candidate). It would swallow the
# harness's next messages, its "paused" among them, and hold every timing on its GPU until the
# job's deadline: the job ends at once, rejected/protocol.
FRAME_SECONDS = 5.0
# --reference_timing=separate: the most calls one reference round may ask for, and the most
# rounds one job may (a timing asks for timing_rounds to max_rounds of them, twice over when
# re-measured, plus its estimate): a candidate cannot keep the timer, and the device, busy.
MAX_REFERENCE_RUNS, MAX_REFERENCE_ROUNDS = 4096, 64


class Open:
    """The gate of a worker that has its device to itself (the CPU device, compile jobs)."""
    paused = 0.0

    def pause_point(self):
        pass

    def host_only(self, during_timing=False, device_up=True):
        return contextlib.nullcontext()

    def building(self):
        return contextlib.nullcontext()

    def acquire(self):
        pass

    def release(self):
        pass


class WorkerGate:
    """In a run worker: fd is its end of the pipe, send puts a message on it, sync
    empties the device queue, cores (or None) are the GPU's timing cores, free returns
    the allocator's cached memory to the device. beside: host work may go on while another
    worker times (a GPU's timing; on the CPU, host work is on the timed cores)."""

    def __init__(self, fd, send, sync, cores=None, free=lambda: None, beside=True):
        self.fd, self.send, self.sync, self.cores, self.free = fd, send, sync, cores, free
        self.beside = beside
        self.shared = os.sched_getaffinity(0)
        self.paused = 0.0  # seconds spent at pause points
        self.timer = 0.0  # separate: seconds spent waiting for the reference timer (hand-overs included)
        self.main, self.in_build = threading.get_ident(), False  # only this thread reads the pipe

    def _next(self):
        b = _READ(self.fd, 1)
        if not b:  # the Evaluator went away: nothing left to wait for
            os._exit(0)
        return b

    def pause_point(self):
        """A safe place to stop (no candidate call running): pause here if asked to."""
        if not _SELECT([self.fd], [], [], 0)[0]:
            return
        if self._next() == b"P":
            self._pause()

    def _pause(self):
        self.sync()
        self.free()  # cached blocks back to the device, for the one that times
        self._hold(("paused",))

    @contextlib.contextmanager
    def host_only(self, during_timing=False, device_up=True):
        """A stretch of host work that launches nothing on the GPU (building a model on the
        host): the Evaluator may stop this worker anywhere inside it instead of waiting for
        the next pause point. during_timing: no candidate code is loaded yet either, so it
        may even go on while another worker times (off that worker's timing cores). On the
        way out it waits for the Evaluator's D, so it never launches GPU work the Evaluator
        still takes for host work; a pause asked for meanwhile is taken right there.
        device_up False: the worker's start, CUDA not up yet (nothing to synchronize)."""
        if device_up:
            self.sync()  # nothing of ours left queued
        if self.cores:
            _AFFINITY(0, self.shared - set(self.cores))
        self.send(("host", during_timing and self.beside))
        try:
            yield
        finally:
            self.send(("device",))
            pending = False
            while (b := self._next()) != b"D":
                pending = b == b"P" or (pending and b != b"R")  # every P is answered by one R
            if pending:
                self._pause()
            if self.cores:  # all its cores again once it runs only while nobody times
                _AFFINITY(0, self.shared)

    @contextlib.contextmanager
    def building(self):
        """A torch extension build (load_inline, load) called by candidate code: compilers on
        the host, nothing on the GPU, so host_only: the Evaluator may stop this worker anywhere
        inside it while another one times, instead of every other worker on the GPU waiting for
        this one's next pause point, a minute for a build in __init__ or the first forward.
        Only from the thread that reads the gate's pipe, and not nested."""
        if threading.get_ident() != self.main or self.in_build:
            yield
            return
        self.in_build = True
        try:
            with self.host_only():
                yield
        finally:
            self.in_build = False

    def acquire(self):
        """Block until this worker has the GPU to itself; then time on the timing cores."""
        self.sync()
        self.send(("acquire",))
        while self._next() != b"G":  # a pause request that crossed ours is moot now
            pass
        if self.cores:
            _AFFINITY(0, self.cores)

    def reference_round(self, runs, flags):
        """--reference_timing=separate, while this worker holds the device: the reference's part
        of a round, `runs` calls timed by the device's reference timer (a process where no
        candidate code has run), this process stopped by the Evaluator meanwhile; flags: the
        speed-only flags the candidate set, which the reference is timed under too ->
        (median ms, other processes' load or None, one call as the timer saw it in ms: flush,
        synchronize and new inputs included, what a round is sized on). The Evaluator keeps the
        times it hands back here and computes the speedup from them, not from anything this
        process says."""
        self.sync()  # nothing of the candidate's left running on the device
        t = time.perf_counter()
        self.send(("refround", [runs, flags]))
        while self._next() != b"T":
            pass
        ms, load, wall = struct.unpack("<ddd", self._read(24))
        self.timer += time.perf_counter() - t
        if ms <= 0:
            raise RuntimeError("the reference timer failed (the Evaluator says why)")
        return ms, (None if load < 0 else load), wall

    def candidate_round(self, ms):
        """--reference_timing=separate: the median of the candidate's calls in the part of a
        round just timed, sent before the candidate runs again. The Evaluator keeps what it
        is told here, part by part, and the candidate's time in the verdict comes from that
        record: a candidate that rewrote the harness's list of earlier rounds from its own
        calls (it can reach that list by walking the frames above it) changes nothing the
        Evaluator already holds."""
        self.send(("newround", float(ms)))

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = _READ(self.fd, n - len(data))
            if not chunk:
                os._exit(0)
            data += chunk
        return data

    def _answer(self, byte):
        """Wait for the Evaluator's answer `byte` outside a hold of the device: a pause asked
        for meanwhile (P, and no R for it yet) is taken once the answer is in, as host_only does."""
        pending = False
        while (b := self._next()) != byte:
            pending = b == b"P" or (pending and b != b"R")
        return pending

    def check_seed(self):
        """--reference_timing=separate, after this worker's timing (the device shared again):
        the seed of the input set the reference timer checks (checks.timer_check), picked by
        the Evaluator now."""
        self.sync()
        self.send(("checkseed",))
        pending = self._answer(b"S")
        seed = struct.unpack("<q", self._read(8))[0]
        if pending:
            self._pause()
        return seed

    def checked(self, claims):
        """The candidate's outputs (checks.timer_check's claims: on that set first) to the
        Evaluator, which has the timer judge them against its reference once nobody times on
        this device, this process stopped meanwhile (and no timing starts until it is done)."""
        t = time.perf_counter()
        self.sync()
        self.send(("checked", claims))
        pending = self._answer(b"C")
        self.timer += time.perf_counter() - t
        if pending:
            self._pause()

    def release(self):
        """Timing done: give the GPU back and wait, paused, until the others may run too
        (the next one waiting times first)."""
        try:
            self.sync()
            self.free()
        except Exception:  # a failed timing: its error is already on its way to the verdict
            pass
        if self.cores:
            _AFFINITY(0, self.shared)
        self._hold(("release",))

    def _hold(self, msg):
        """Send msg, then wait for R; the time it took counts as paused."""
        t = time.perf_counter()
        self.send(msg)
        while self._next() != b"R":
            pass
        self.paused += time.perf_counter() - t


class Running:
    """The Evaluator's handle on one worker process running one job. state: run | pausing
    (asked to pause, not yet there) | paused (also after its timing) | wait (asked for the
    GPU) | hold (has it); stopped: its process group is SIGSTOPped."""

    def __init__(self, kind, item, proc, conn, deadline, slot, log, gpu=None):
        self.kind, self.item, self.proc, self.conn = kind, item, proc, conn
        self.deadline, self.slot, self.log, self.start = deadline, slot, log, now()
        self.job_deadline, self.call_limit, self.result = deadline, None, None
        self.gpu, self.state, self.since, self.stopped, self.held_since = gpu, "run", now(), False, None
        self.trace = None  # a list to append (time, GPU, worker pid, new state) to, or None
        self.group = None  # its job's control group (limits.JobGroup), or None
        self.host = None  # inside WorkerGate.host_only: "stop" (may be stopped anywhere), "run" (may go on)
        self.going_on = False  # let go on while a late one finishes its call (arbitrate)
        self.ticked, self.sharing = None, 1  # inside a candidate call since (share_clock), with how many
        self.blocked, self.blocking = 0.0, None  # seconds it kept a waiting timing off; since (arbitrate)
        self.fd, self.buf, self.partial_since = conn.fileno(), b"", None
        # --reference_timing=apart: whether this job may tell the reference's time (it times
        # the reference before its candidate loads), what it told: (ms, spread, disturbed), and
        # the (ms, spread) it was given instead (the Evaluator's, from an earlier job)
        self.takes_reference, self.reference, self.given_reference = False, None, None
        # --reference_timing=separate: whether its timing asks the reference timer for the
        # reference's rounds, the one it asked for and not yet got (runs, flags), and the
        # rounds' times the timer measured (the only reference time its speedup uses)
        self.separate, self.ref_request, self.ref_rounds, self.timer_error = False, None, [], None
        self.new_rounds = []  # the candidate's part of each round, as the job told it then (candidate_round)
        self.timer_oom = False  # the timer ran out of the GPU's memory for it (the job: again, alone)
        # with reference_retime: the speed flags of its first round (the key its rounds are kept
        # under), whether a round the timer measured for it was under load, whether it was
        # given an earlier job's rounds
        self.ref_flags, self.ref_loaded, self.reference_reused = None, False, False
        self.ref_call_ms = 0.0  # the timer's last call for it as the timer saw it (kept with its rounds)
        self.ref_pending = False  # its round (or its check) is with the timer now
        self.timer_s = [0.0, 0.0]  # seconds its rounds, its check took with the timer (request to answer)
        # the timer's check (checks.timer_check): the seed given, the claim to hand over, the
        # timer's answer (("ok",) | ("reject", status, reason, message))
        self.check_seed, self.check_claim, self.check_result = None, None, None
        self.released = False  # its timing is over (the device given back): the timer's check may come
        self.rounds_kept = False  # its rounds were looked at for keeping (Evaluator._keep_rounds)
        self.claims_expected = 0  # of checked input sets (verdicts.check_claims)
        os.set_blocking(self.fd, False)

    @property
    def held(self):
        """Not running: its deadlines wait."""
        return self.stopped or self.state in ("paused", "wait")

    def receive(self):
        """Read what the worker sent (verdicts.decode: JSON frames, read without blocking, so a
        half-written frame cannot stall the Evaluator): its result, a deadline for the candidate
        call it is entering (("call", seconds)) or leaving (("call", None)), or a gate message.
        -> True once it is done. A message outside the schema ends the job: rejected/protocol."""
        eof = False
        try:
            while len(self.buf) <= verdicts.MAX_MESSAGE + 4:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    eof = True
                    break
                self.buf += chunk
        except BlockingIOError:
            pass
        except OSError:  # the worker died; its exit code tells the rest
            eof = True
        try:
            msgs, self.buf = verdicts.decode(self.buf)
            if eof and self.buf and not any(isinstance(m, dict) for m in msgs):
                raise verdicts.ProtocolError(f"a frame cut short ({len(self.buf)} bytes)")
            # a stopped worker cannot finish its frame: the clock runs while it may
            self.partial_since = (self.partial_since or now()) if self.buf and not self.stopped else None
            if self.partial_since is not None and now() - self.partial_since > FRAME_SECONDS:
                raise verdicts.ProtocolError(f"a frame cut short for {FRAME_SECONDS:.0f} s ({len(self.buf)} bytes)")
            for msg in msgs:
                if isinstance(msg, dict):
                    self.result = verdicts.check_result(self.kind, msg)
                    return True
                if msg[0] == "call":
                    self.call_limit = msg[1]
                    self.deadline = self.job_deadline if msg[1] is None else min(self.job_deadline, now() + msg[1])
                elif msg == ("acquire",):
                    self._set("wait")
                elif msg == ("paused",):
                    if self.state == "pausing":
                        self._set("paused")
                elif msg == ("release",):
                    if self.state == "hold":
                        self._set("paused")  # until nobody waits for the GPU
                        self.released = True
                elif msg[0] == "host":
                    self.host = "run" if msg[1] else "stop"
                elif msg[0] == "reference":
                    # sent once, by the harness, before the candidate's code is loaded: a second
                    # one, or one from a job that was given the time, is the candidate's writing
                    t = msg[1]
                    if not (self.takes_reference and self.reference is None and len(t) == 3
                            and all(isinstance(x, (int, float)) and 0 <= x < math.inf for x in t) and t[0] > 0):
                        raise verdicts.ProtocolError("a reference time the harness did not send")
                    self.reference = (float(t[0]), float(t[1]), bool(t[2]))
                elif msg[0] == "refround":
                    # asked while it holds the device, one at a time, a bounded number of calls
                    # and of rounds, flags by name: anything else is the candidate's writing
                    a = msg[1]
                    if not (self.separate and self.state == "hold" and self.ref_request is None
                            and not self.ref_pending and len(self.ref_rounds) < MAX_REFERENCE_ROUNDS and len(a) == 2
                            and type(a[0]) is int and 1 <= a[0] <= MAX_REFERENCE_RUNS and isinstance(a[1], dict)
                            and len(a[1]) <= 64
                            and all(type(v) in (bool, int, float, str) and len(str(v)) <= 64 for v in a[1].values())):
                        raise verdicts.ProtocolError("a reference round the harness did not ask for")
                    self.ref_request = (a[0], a[1])
                    self.ref_flags = a[1] if self.ref_flags is None else self.ref_flags
                elif msg[0] == "newround":
                    # told while it holds the device and no round is with the timer, one a round: a
                    # round's two parts come in either order, so never more than the timer's rounds
                    x = msg[1]  # a float (verdicts.CONTROL)
                    if not (self.separate and self.state == "hold" and not self.ref_pending
                            and self.ref_request is None and 0 < x < math.inf
                            and len(self.new_rounds) <= len(self.ref_rounds)):
                        raise verdicts.ProtocolError("a candidate's round the harness did not time")
                    self.new_rounds.append(x)
                elif msg == ("checkseed",):
                    # once a job, after the timing (rounds in, the device given back)
                    if not (self.separate and self.released and self.state in ("run", "pausing")
                            and self.check_seed is None and self.ref_request is None and not self.ref_pending
                            and self.ref_rounds):
                        raise verdicts.ProtocolError("a check the harness did not ask for")
                    self.check_seed = secrets.randbits(48)
                    self.tell(b"S" + struct.pack("<q", self.check_seed))
                elif msg[0] == "checked":
                    if not (self.separate and self.released and self.state in ("run", "pausing")
                            and self.check_seed is not None
                            and self.check_claim is None and self.check_result is None and not self.ref_pending
                            and verdicts.claims_fit(msg[1], self.check_seed, self.claims_expected)):
                        raise verdicts.ProtocolError("a check the harness did not ask for")
                    self.check_claim = msg[1]
                elif msg == ("device",):
                    self.host = None
                    self.tell(b"D")  # it waits for this before any GPU work
        except verdicts.ProtocolError as e:
            self.result = verdicts.Reject("rejected", "protocol", f"the worker's channel to the evaluator carried "
                                          f"{e}: only the harness may write on it").result()
            return True
        return eof

    def _set(self, state=None, stopped=None):
        """A change of state or of stopped; the time a worker was held (not running) is
        added to its deadlines when it runs again."""
        was, t = self.held, now()
        if state is not None and state != self.state:
            self.state, self.since = state, t
            if self.trace is not None:
                self.trace.append((t, self.gpu, self.proc.pid, state))
        if stopped is not None:
            self.stopped = stopped
        if was and not self.held:
            self.deadline += t - self.held_since
            self.job_deadline += t - self.held_since
        elif self.held and not was:
            self.held_since = t

    def tell(self, byte):
        try:
            os.write(self.conn.fileno(), byte)
        except OSError:  # it died; its result (or its exit) says the rest
            pass

    def stop(self, stop=True):
        """Stop its process group (or let it go on), and freeze (thaw) its job's control group:
        what the candidate started in a session of its own stops with it."""
        if self.stopped != stop:
            stop_group(self.proc.pid, stop)
            if self.group is not None:
                self.group.freeze(stop)
            if stop:
                wait_stopped(self.proc.pid)
            self._set(stopped=stop)


def stop_group(pid, stop=True):
    """SIGSTOP (SIGCONT) the process group a worker or timer leads; one already gone is left."""
    try:
        os.killpg(pid, signal.SIGSTOP if stop else signal.SIGCONT)
    except (ProcessLookupError, PermissionError):
        pass


SETTLE_LIMIT = 0.05  # seconds wait_stopped waits for a stopped tree's last running thread


def running_threads(pid):
    """Threads of pid and its descendants that are running or runnable (state R) -> a count.
    A stop is a signal: each thread acts on it when it next enters the kernel, which a thread
    spinning on a core does at its next timer tick (4 ms at 250 Hz), so a stopped process
    can run on for a tick after killpg returns."""
    n, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/stat", "rb") as f:
                    n += f.read().rsplit(b")", 1)[1].split()[0] == b"R"
                with open(f"/proc/{p}/task/{t}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
            except (OSError, IndexError, ValueError):
                pass
    return n


def wait_stopped(pid, limit=SETTLE_LIMIT):
    """After stopping a worker or the reference timer: wait (at most `limit` s) until no
    thread of it runs. The other side of a timing starts only then, so its first call does
    not share the cores with a thread still spinning (on the CPU VM, 1-3 threads of a spinning
    process ran on for 0.5-8.5 ms after killpg). -> True once none runs (False after `limit`:
    a process in a session of its own, which killpg missed and no freezer holds, runs on)."""
    end = time.monotonic() + limit
    while running_threads(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.0002)
    return True


def pick_slot(free, slots, active, item, exiting=()):
    """A free device slot for item (slots[s] is slot s's GPU): on the GPU with the fewest
    jobs; an item that ran out of memory beside others runs alone on its GPU, and nothing
    joins it there. It also waits for the workers that sent their result and are still
    exiting there (`exiting`): until a process is gone, its memory is not. -> a slot, or None."""
    best = None
    for s in free:
        on = [r for r in active if r.slot is not None and r.gpu == slots[s]]
        if any(r.item.get("alone") for r in on) or (item.get("alone") and (
                on or any(r.slot is not None and r.gpu == slots[s] for r in exiting))):
            continue
        if best is None or len(on) < best[0]:
            best = (len(on), s)
    return None if best is None else best[1]


def join(new, workers):
    """A worker just given a job on a GPU where someone waits or times: it pauses at its
    first pause point, before any GPU work of its own."""
    if any(w.state in ("wait", "hold") for w in workers):
        new.tell(b"P")
        new._set("pausing")


class Host:
    """The Evaluator's caller's own work on the device (Evaluator.host_gpu): Stage 3 samples
    and updates the policy while another thread judges the last step's candidates. No
    timing starts while the host wants or holds the device, and the host gets it once no
    worker times (on a GPU: none holds it; on the CPU: no run job is active, since a CPU run
    worker checks and times). Checks and builds go on beside it. The Evaluator's loop grants
    it (wake: a pipe that loop waits on); with no loop running it is granted at once."""

    def __init__(self):
        self.state = None  # None | "want" | "hold"
        self.lock, self.granted, self.loops = threading.Lock(), threading.Event(), 0
        self.cancelled = False  # set from another thread: the loop ends, its workers killed
        self.wake, self._poke = os.pipe()
        os.set_blocking(self.wake, False)
        os.set_blocking(self._poke, False)  # a full pipe (no loop draining it) drops a poke, never blocks

    def acquire(self):
        with self.lock:
            self.granted.clear()
            self.state = "want"
            if not self.loops:
                self.grant()
        self.poke()
        self.granted.wait()

    def grant(self):  # the lock held
        self.state = "hold"
        self.granted.set()

    def enter(self):
        """A loop that grants starts."""
        with self.lock:
            self.loops += 1

    def settle(self, timing):
        """Once per pass of that loop: the host gets the device if it wants it and nobody is
        timing (`timing`: whether a worker holds the device, or on the CPU a run job is on)."""
        with self.lock:
            if self.state == "want" and not timing:
                self.grant()

    def leave(self):
        """That loop ends: with no loop left, a host that waits gets the device."""
        with self.lock:
            self.loops -= 1
            if not self.loops and self.state == "want":
                self.grant()

    def release(self):
        with self.lock:
            self.state = None
        self.poke()

    def poke(self):
        with contextlib.suppress(OSError):  # closed: no loop to wake
            os.write(self._poke, b"x")

    def drain(self):
        with contextlib.suppress(OSError):
            os.read(self.wake, 4096)

    def close(self):
        for fd in (self.wake, self._poke):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.wake = self._poke = -1  # a late poke fails, rather than write to a reused descriptor


def arbitrate(workers, host=None):
    """The protocol's next step for one GPU's workers (_arbitrate), then who kept a timing
    waiting meanwhile (_blame)."""
    _arbitrate(workers, host)
    _blame(workers)


def _arbitrate(workers, host=None):
    """One GPU's workers (their run jobs) -> the next step of the protocol: while one waits
    for the GPU or holds it, every other one is asked to pause; the first one waiting gets
    the GPU once all others are paused, waiting themselves or in host-only work, and they
    are stopped (host-only work with no candidate code loaded yet goes on); with nobody
    waiting or holding, the paused ones go on. A worker in a long candidate call is waited
    for (it reaches its pause point, or its call deadline ends it): stopping it there would
    leave its kernels running under someone else's timing. Once per wait, the ones already
    paused go on while such a late one finishes its call (DEFER_AFTER), and are asked again
    when it is there, for the first DEFER_FOR seconds of a wait; no timing starts while any
    of them runs. host: the Host's state ("want", "hold" or None): nothing is granted while
    it wants or holds the GPU, and while it holds it the ones waiting wait, the rest go on."""
    holder = any(w.state == "hold" for w in workers)
    waiting = sorted((w for w in workers if w.state == "wait"), key=lambda w: w.since)
    if not (holder or waiting) or (host == "hold" and not holder):
        for w in workers:
            if w.state in ("paused", "pausing"):
                w.tell(b"R")  # one still on its way reads its P, then this R
                w._set("run")
            if not w.ref_pending:  # (one whose outputs the timer checks stays stopped until it answers)
                w.stop(False)
            w.going_on = False
        return
    # Out of the way of a timing: paused, waiting, or in host-only work (WorkerGate.host_only)
    aside = lambda w: w.state in ("paused", "wait") or (w.state == "pausing" and w.host)
    # A worker still in a long candidate call (a first call that autotunes or builds: tens of
    # seconds) would keep the ones already paused idle all that while: they go on meanwhile and
    # pause again when it is there, as often as one is late, in the first DEFER_FOR seconds of
    # the wait (after that the one waiting is not put off again).
    late = [w for w in workers if w.state == "pausing" and not w.host and now() - w.since > DEFER_AFTER]
    if late and not holder and now() - waiting[0].since < DEFER_FOR:
        for w in workers:
            if w.state == "paused" and not w.stopped:
                w.tell(b"R")
                w._set("run")
                w.going_on = True
    if not late:
        for w in workers:
            w.going_on = False
    for w in workers:
        if w.state == "run" and not w.going_on:
            w.tell(b"P")
            w._set("pausing")
        if holder and w.state != "hold" and aside(w) and w.host != "run":
            w.stop()  # one that paused, or began host work, during a timing
        elif not holder and w.state == "pausing" and not w.host and not w.ref_pending:
            w.stop(False)  # stopped in host work that has ended since: on to its pause point
    if holder or host or not all(aside(w) for w in workers):
        return
    first = waiting[0]
    for w in workers:
        if w is not first and w.host != "run":
            w.stop()
    first.stop(False)
    first._set("hold")
    first.tell(b"G")


def _blame(workers):
    """Seconds each worker kept a timing waiting, asked to pause and not yet at a pause point
    (Running.blocked, in its verdict's seconds as `<step>_blocking`): where a run's GPU time
    goes while nobody times. Each stretch from one call to the next is laid on the workers
    that were in the way at the end of the first."""
    t = now()
    someone_waits = any(w.state == "wait" for w in workers) and not any(w.state == "hold" for w in workers)
    for w in workers:
        if w.blocking is not None:
            w.blocked += t - w.blocking
        w.blocking = t if someone_waits and w.state == "pausing" and not w.host else None


def share_clock(workers):
    """One GPU's workers -> their call deadlines run on their share of the GPU: while k of
    them are inside candidate calls at once (none paused or stopped), each one's deadline
    moves on by (1 - 1/k) of the time. A first call that autotunes or builds beside seven
    others gets the time it would need alone; a hang alone still ends at its deadline.
    Called before and after each wait of the Evaluator's loop."""
    t = now()
    calling = [w for w in workers if w.call_limit is not None and not w.held]
    for w in calling:
        if w.ticked is not None and w.sharing > 1:
            w.deadline = min(w.job_deadline, w.deadline + (t - w.ticked) * (1 - 1 / w.sharing))
    for w in workers:
        w.ticked, w.sharing = (t, len(calling)) if w in calling else (None, 1)


def gate_share(trace, t0, t1):
    """Evaluator.trace (time, GPU, worker, state) -> {GPU: seconds of [t0, t1] (gate.now()
    clock) spent timing (a worker holds the GPU), checking (the reference timer checks a job's
    outputs, whether or not someone waits for the GPU meanwhile), waiting (one asked for it,
    the others are still on their way to a pause point) and other (loading and checking only,
    or starting up)}: where the time goes when throughput falls short of the timing capacity;
    and, apart from those four, checking_waited: the part of checking while a job waited for
    the device (no timing starts while the timer checks). The timer's entries have the worker
    "timer", state round | check | idle."""
    out = {}
    for g in sorted({e[1] for e in trace}):
        evs = [e for e in trace if e[1] == g and t0 <= e[0] <= t1]
        states, acc = {}, dict(timing=0.0, waiting=0.0, checking=0.0)
        waited = 0.0
        for (t, _, w, st), nxt in zip(evs, [e[0] for e in evs[1:]] + [t1]):
            states[w] = st
            vals = set(states.values())
            k = "timing" if "hold" in vals else "checking" if states.get("timer") == "check" else \
                "waiting" if "wait" in vals else None
            if k:
                acc[k] += nxt - t
            waited += (nxt - t) * (k == "checking" and "wait" in vals)
        acc["other"] = (t1 - t0) - acc["timing"] - acc["waiting"] - acc["checking"]
        acc["checking_waited"] = waited
        out[g] = acc
    return out
