"""The Evaluator: schedules compile and run workers (worker.py) over the CPU cores and GPUs
and turns what they report into Verdicts. Candidate code never runs in this process.

    with kernels.Evaluator(dict(device="cpu")) as ev:    # settings.py: every key and its default
        [v] = ev.evaluate([(task, code)])       # v.status, v.reason, v.speedup, v.log ...
"""
import contextlib
import os
import shutil
import struct
import sys
import tempfile

from . import gate, limits, sandbox, settings, static, verdicts
from .display import progress_bar, say
from .source import Solution, sha, top_names
from .builds import cache_root
from .verdicts import Reject, Verdict, unusable

STALL_SECONDS = 300.0  # no job ended for this long: the running ones' states are reported
CONFIRM_TRIES = 3  # second measurements of one candidate, where each disagreed under load on the CPU

# ----------------------------------------------------------------------------------------
# The parent: schedule compile workers on the CPU cores and run workers on the GPUs

def pick_device(name):
    """--device -> the device candidates run on: cuda (cuda:N too: the evaluator uses every
    visible GPU, or --gpus), cpu, or for auto cuda where a GPU and nvcc are, else cpu."""
    if name in ("cuda", "cpu"):
        return name
    if name.startswith("cuda:") and name[5:].isdigit():
        return "cuda"
    if name != "auto":
        raise ValueError(f"device must be auto, cuda, cuda:N or cpu, not {name!r}")
    import torch
    return "cuda" if torch.cuda.is_available() and shutil.which("nvcc") else "cpu"


def target(cfg):
    """-> (device, language): the device candidates run on and the language they are written
    in (settings.LANGUAGES). --device picks the device (pick_device), --language the language
    (auto: the device's own); a named language that does not run on that device runs on its
    first device instead (--language=cpp beside a GPU policy: candidates on the CPU)."""
    language = cfg["language"]
    if language != "auto" and len(settings.LANGUAGES[language]) == 1 and cfg["device"] == "auto":
        device = settings.LANGUAGES[language][0]  # the machine does not matter (nor torch's import)
    else:
        device = pick_device(cfg["device"])
    if language != "auto" and device not in settings.LANGUAGES[language]:
        device = settings.LANGUAGES[language][0]
    return device, settings.pick_language(language, device)


def _tail(path, n=3000):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class _Timer:
    """A device's reference timer (Evaluator._timer): its process and pipe, the job whose
    round it is timing (a gate.Running, or None) and since when."""

    def __init__(self, proc, conn):
        self.proc, self.conn, self.busy, self.since = proc, conn, None, 0.0
        self.what = "round"  # what it was asked for: a timing round or a check

    def stop(self, stop=True):
        """Stopped between its rounds: a timing's two processes each run only in their turn
        (a pool of OpenMP threads that spins on after the reference's calls would otherwise
        take the candidate's cores)."""
        gate.stop_group(self.proc.pid, stop)
        if stop:
            gate.wait_stopped(self.proc.pid)


class Evaluator:
    """Judges (task, code) pairs. Compile workers (no GPU) build candidates in parallel on
    the CPU cores; run workers check and time them, checks_per_gpu at once on each GPU,
    and each times with the GPU to itself (gate.py), so no two timings share a GPU and no
    check runs beside a timing. Every worker is a fresh process forked from a server that
    has torch imported, runs one job and exits. On the CPU device one run worker checks
    and times at a time, and timing never overlaps compilation."""

    def __init__(self, cfg=None, **overrides):
        import multiprocessing as mp
        self.cfg = {**settings.DEFAULTS, **(cfg or {}), **overrides}
        if "backend" in self.cfg:  # the setting's old name: ignored, it would judge elsewhere than asked
            raise ValueError("the evaluator's backend setting is now device (auto | cuda | cpu)")
        self.device, self.language = target(self.cfg)
        self.cache = cache_root(self.cfg)
        os.makedirs(self.cache, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="kernels-")
        self.ctx = mp.get_context("forkserver")
        # Workers run worker.py (which imports this module for the build API candidates call),
        # imported by the server that forks them while this process imports it too (torch:
        # seconds on a cold disk), not after; here, not at the top, so importing kernels stays cheap.
        self.ctx.set_forkserver_preload(["torch", "kernels.worker"])
        sandbox.start_forkserver()
        # each worker in a PID namespace of its own where the probe found one whole
        self.pid_namespace = self.cfg["sandbox"] and "process view" not in sandbox.probe()
        from . import worker
        self.worker = worker
        # task files size themselves by KERNELS_DEVICE (KERNELS_BACKEND: its older name)
        self.env = {"KERNELS_DEVICE": self.device, "KERNELS_BACKEND": self.device, "CUDAL1_CACHE": self.cache, "MAX_JOBS": "2",
                    "KERNELS_COMPILE_TIMEOUT": str(self.cfg["compile_timeout"])}
        if self.language == "triton" and self.device == "cpu":
            # Triton's interpreter (numpy, one program at a time): 10-1000x a compiled kernel's
            # time, which says nothing about the kernel, so candidates are checked, not timed
            self.env["TRITON_INTERPRET"] = "1"
            self.cfg.update(time_candidates=False, call_timeout=max(self.cfg["call_timeout"], 60.0),
                            run_timeout=max(self.cfg["run_timeout"], 900.0))
        # torch.compile of the reference (--baseline=compile): its compiler caches, shared by
        # all jobs and written only before a job's candidate code runs (harness.py)
        self.reference_cache = os.path.join(self.cache, "reference-compile")
        os.makedirs(self.reference_cache, exist_ok=True)
        # what a job must not see (sandbox.enter covers them; its own folders stay): the other
        # jobs' folders, the other programs' builds, the forkserver's socket (which forks on
        # anyone's request), the runs' saved results and the project's; never a folder that
        # holds what a job needs (an --out of /tmp or ~ would hold the code, Python or cache)
        import sys
        project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.needed = [project, sys.prefix, sys.base_prefix, self.cache]
        outs = [os.path.abspath(self.cfg["out"])] if self.cfg["out"] else []  # a script's run folder
        self.hidden = [h for h in outs + [os.path.join(project, "results")] if not self._holds_needed(h)]
        self.hidden += [self.tmp, os.path.join(self.cache, "programs")]
        self.registered = sandbox.register_hidden(self.hidden)  # for the jobs of every other evaluator
        cores = sorted(os.sched_getaffinity(0))
        if self.device == "cuda":
            import torch
            n = torch.cuda.device_count()
            self.gpus = [int(g) for g in self.cfg["gpus"].split(",")] if self.cfg["gpus"] else list(range(n))
            if not self.gpus:
                raise ValueError("device cuda, but no GPU is visible")
            arch = gate.gpu_arch(self.gpus[0])
            self.env.update(KERNELS_CUDA_ARCH=arch, TORCH_CUDA_ARCH_LIST=f"{arch[:-1]}.{arch[-1]}")
            # Two cores per GPU for its timing worker, the rest for compilers: builds then
            # never steal the host time of a timed launch.
            k = 2 * len(self.gpus)
            self.run_cores = [cores[len(cores) - k + 2 * i: len(cores) - k + 2 * i + 2]
                              for i in range(len(self.gpus))] if len(cores) >= k + 2 else [None] * len(self.gpus)
            self.compile_cores = cores[: len(cores) - k] if len(cores) >= k + 2 else None
            # Checks share a GPU (checks_per_gpu workers at once) and the compilers' cores;
            # timing has the GPU and its two cores to itself (gate.py).
            self.check_cores = [None if c is None else self.compile_cores + c for c in self.run_cores]
            self.slots = [g for g in range(len(self.gpus)) for _ in range(max(1, self.cfg["checks_per_gpu"]))]
        else:
            # the CPU is the one device: checks_per_cpu workers check at once, and one that times
            # has the cores alone (the others paused and stopped, as on a GPU; no build runs)
            self.gpus, self.run_cores, self.check_cores, self.compile_cores = [None], [None], [None], None
            self.slots = [0] * max(1, self.cfg["checks_per_cpu"])  # slot -> device index
        self.workers = self.cfg["workers"] or len(self.compile_cores or cores)
        self.memo = {}
        self._jobs = 0
        self._standby = {}  # slot -> a run worker started ahead (forked, in its PID namespace), waiting for a job
        self.host = gate.Host()  # the caller's own device work (host_gpu), which no timing overlaps
        self._exiting = []  # (worker that sent its result, when to kill it if it has not exited)
        self.trace = []  # the GPU gate's state changes (gate.Running.trace), for bench.py
        self.events = []  # (gate.now(), job kind, "start" | "end") of every job, for bench.py's start-up account
        # --reference_timing=apart: each task's reference time per GPU (or the CPU) as a job told it
        # before its candidate loaded, (ms, spread, when), reused for reference_retime seconds
        self.apart = self.cfg["time_candidates"] and self.cfg["reference_timing"] == "apart"
        self.ref_times = {}
        # --reference_timing=separate: each device's reference timer (started at its first
        # round): the reference's part of every timing round, in a process where no candidate
        # code has run, while the candidate's job holds the device and is stopped
        self.separate = self.cfg["time_candidates"] and self.cfg["reference_timing"] == "separate"
        self._timers = {}  # device index -> _Timer
        # with reference_retime: the rounds a timer measured for a job, quiet, kept for the task's later
        # jobs on that device and with the same speed flags: (task hash, device, flags) -> (round ms,
        # when, one call as the timer saw it in ms: what a job given them sizes its rounds on)
        self.timer_rounds = {}
        self.reference_given = 0  # jobs timed against a reference time another job's timing measured
        # separate: per timed job, (the rounds the timer measured for it, seconds they took there from
        # request to answer, seconds its check took there): where the mode's time goes (bench.py)
        self.timer_jobs = []
        self._groups = []  # (a job's limits.JobGroup, its worker): removed once it exited and was judged
        self.memory = int(self.cfg["job_memory_gb"] * 2**30) or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
        self._clean_stale()

    def _clean_stale(self):
        """Leftovers of killed builds: temporary build folders and torch extension locks
        older than the compile timeout; control groups of evaluators that died."""
        import time
        limits.clean_groups()
        old = time.time() - self.cfg["compile_timeout"]
        for root, dirs, files in os.walk(self.cache):
            for name in dirs + files:
                p = os.path.join(root, name)
                stale = (".tmp" in name and os.path.basename(root) == "lib") or \
                    ("lock" in name and f"{os.sep}ext{os.sep}" in p)
                try:
                    if stale and os.path.getmtime(p) < old:
                        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
                except OSError:
                    pass

    @staticmethod
    def _dismiss(proc, conn):
        """A standby worker that gets no job: told to exit, killed after 5 s."""
        try:
            conn.send(None)
        except OSError:
            pass
        proc.join(5)
        if proc.exitcode is None:
            proc.kill()
        conn.close()

    def close(self):
        for proc, conn in self._standby.values():
            self._dismiss(proc, conn)
        self._standby = {}
        for t in self._timers.values():
            t.stop(False)
            self._dismiss(t.proc, t.conn)
        self._timers = {}
        for g, p in self._groups:  # of workers still exiting
            p.join(5)
            g.close(tries=100)
        shutil.rmtree(self.tmp, ignore_errors=True)
        sandbox.unregister_hidden(self.registered)
        self.host.close()

    def _holds_needed(self, folder):
        """Would covering folder cover what a job needs (the project, Python, the cache)?"""
        return any(n == folder or n.startswith(folder + os.sep) for n in self.needed)

    @contextlib.contextmanager
    def host_gpu(self):
        """The caller's own work on the device (sampling, an update) while another thread
        judges: it starts once no candidate is being timed, and none is timed until it ends
        (gate.Host). Builds and checks go on beside it. On the way out the caller's cached
        device memory goes back to the device (an update of 1.5B parameters caches about 40 GB
        after its peak): the workers checking beside it would otherwise run out of memory,
        and an honest candidate would get reward 0 for it."""
        self.host.acquire()
        try:
            yield
        finally:
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                torch.cuda.empty_cache()
            self.host.release()

    def cancel(self):
        """From another thread: an evaluate() in flight there stops, its workers killed
        (KeyboardInterrupt in that thread)."""
        self.host.cancelled = True
        self.host.poke()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- jobs ----------------------------------------------------------------------------
    def _job(self, task, code):
        self._jobs += 1
        src_hash = sha(code or "")
        workdir = os.path.join(self.tmp, f"{self._jobs}")
        os.makedirs(workdir, exist_ok=True)
        # HOME and TMPDIR in the work folder: what tools write "at home" or "in /tmp" lands there;
        # every cache the candidate writes in its program's own part of the build cache
        own = sandbox.program_cache(self.cache, src_hash)
        os.makedirs(own, exist_ok=True)
        env = dict(self.env, CUDAL1_CACHE=own, TORCH_EXTENSIONS_DIR=os.path.join(own, "ext"),
                   TRITON_CACHE_DIR=os.path.join(own, "triton"), TORCHINDUCTOR_CACHE_DIR=os.path.join(own, "inductor"),
                   HOME=workdir, TMPDIR=workdir)
        return dict(task_code=task.code, task_hash=task.hash, code=code, source_hash=src_hash,
                    reference_cache=self.reference_cache,
                    # listed per job: forkservers and other evaluators (their job folders, results,
                    # outputs, whoever started them) come and go
                    hidden=self.hidden + sandbox.forkserver_folder() +
                    [h for h in sandbox.others_hidden(self.registered) if not self._holds_needed(h)],
                    pid_namespace=self.pid_namespace,
                    device=self.device, language=self.language, cfg=self.cfg, workdir=workdir, env=env,
                    seed=int.from_bytes(os.urandom(3), "little"), task_name=task.name)

    def _start(self, kind, item, slot):
        sandbox.start_forkserver()  # a forkserver a job ended comes back with the minimal environment
        job = item["job"]
        job["log"] = os.path.join(job["workdir"], f"{self._step(item, kind)}.log")
        env = dict(job["env"])
        if kind == "compile":
            env["CUDA_VISIBLE_DEVICES"] = ""
            job["cores"] = self.compile_cores
        else:
            g = self.slots[slot]
            if self.device == "cuda":
                env["CUDA_VISIBLE_DEVICES"] = gate.physical_gpu(self.gpus[g])
            job["cores"], job["time_cores"] = self.check_cores[g], self.run_cores[g]
        timeout = self.cfg["compile_timeout"] if kind == "compile" else self.cfg["run_timeout"]
        # the job's limits, all it starts included (limits.JobGroup); frozen with its worker on the CPU only,
        # where a stopped job's other processes would run on the timed cores (the GPU gate: SIGSTOP alone)
        self._jobs += 1
        group = limits.JobGroup(f"{self._jobs}-{kind}", self.cfg["max_processes"], self.memory,
                                 self.worker.cpu_limit(self.cfg, kind, job.get("cores")), freezer=self.device == "cpu",
                                 disk=int(self.cfg["job_disk_gb"] * 2**30), files=self.cfg["job_files"],
                                 folders=[job["workdir"], job["env"]["CUDAL1_CACHE"]]) if self.cfg["sandbox"] else None
        job = dict(job, env=env, cgroups=group.dirs if group else {}, kernelbench=bool(item.get("kb_job")),
                   confirm=None if item.get("kb_job") else item.get("confirm"))
        timed_apart = self.apart and kind == "run" and not (job["kernelbench"] or job["confirm"])
        known = self._reference_time(item, slot) if timed_apart else None
        job["reference_ms"] = list(known) if known else None
        self.reference_given += bool(known)
        if kind == "run" and self.device == "cuda":
            # A worker started ahead takes the job (CUDA starts in it, inside its box: worker.py);
            # the next one starts now, while this one checks.
            proc, conn = self._standby.pop(slot, None) or self._spawn_standby(slot)
            conn.send((kind, job))
            self._standby[slot] = self._spawn_standby(slot)
            r = gate.Running(kind, item, proc, conn, gate.now() + timeout, slot, job["log"], self.slots[slot])
            r.trace = self.trace
        else:
            parent, child = self.ctx.Pipe(duplex=kind == "run")  # a CPU run worker's gate reads on it
            proc = self.ctx.Process(target=self.worker.child_main, args=(kind, child, job), daemon=True,
                                    name=f"{sandbox.WORKER_NAME}-{kind}")
            proc.start()
            child.close()
            r = gate.Running(kind, item, proc, parent, gate.now() + timeout, slot, job["log"],
                             None if slot is None else self.slots[slot])
            if kind == "run":  # the CPU's run workers share it through the same gate
                r.trace = self.trace
        if group:
            r.group = group
            self._groups.append((group, proc))
        r.takes_reference, r.given_reference = timed_apart and not known, known
        r.separate = self.separate and kind == "run" and not (job["kernelbench"] or job["confirm"])
        r.claims_expected = verdicts.check_claims(job["cfg"])
        self.events.append((r.start, kind, "start"))
        return r

    def _reference_time(self, item, slot):
        """--reference_timing=apart: (ms, spread) of the task's reference on this slot's device,
        measured by an earlier job within reference_retime seconds, or None."""
        got = self.ref_times.get((item["task"].hash, self.slots[slot]))
        if got and gate.now() - got[2] < self.cfg["reference_retime"]:
            return got[:2]
        return None

    def _trusted_reference(self, r, res):
        """--reference_timing=apart: a timed success's speedup from the reference's time the
        Evaluator holds (told before the candidate loaded, or given to the job), never from
        the result a candidate could have written; a fresh, quiet measurement is kept for the
        task's next jobs on this device."""
        if r.reference and not r.reference[2] and self.cfg["reference_retime"] > 0:
            self.ref_times[(r.item["task"].hash, r.gpu)] = (r.reference[0], r.reference[1], gate.now())
        if res.get("status") != "ok" or not res.get("new_ms"):
            return res
        told = r.reference or r.given_reference
        if told is None:
            return Reject("rejected", "protocol", "a timed success without the reference's time told before the "
                          "candidate loaded: only the harness may write on the channel").result()
        return dict(res, ref_ms=told[0], speedup=told[0] / res["new_ms"])

    def _timer(self, g):
        """Device g's reference timer (worker.timer_main), started at its first round: a process
        forked from the forkserver like a worker, boxed, with a work folder no job sees."""
        t = self._timers.get(g)
        if t is not None and t.proc.is_alive():
            return t
        sandbox.start_forkserver()
        workdir = os.path.join(self.tmp, f"timer-{g}")
        os.makedirs(workdir, exist_ok=True)
        env = dict(self.env, CUDAL1_CACHE=workdir, HOME=workdir, TMPDIR=workdir)
        if self.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = gate.physical_gpu(self.gpus[g])
        hidden = [h for h in self.hidden + sandbox.forkserver_folder() if not self._holds_needed(h)]
        parent, child = self.ctx.Pipe(duplex=True)
        proc = self.ctx.Process(target=self.worker.timer_main, daemon=True, name=f"{sandbox.WORKER_NAME}-timer",
                                args=(child, env, self.run_cores[g], workdir, self.cfg["sandbox"], hidden))
        proc.start()
        child.close()
        t = self._timers[g] = _Timer(proc, parent)
        return t

    def _serve_timers(self, active):
        """--reference_timing=separate: hand each job that asked for a reference round (and
        holds its device) to its device's timer, the job stopped meanwhile; hand back what
        the timer measured (kept here: the speedup is computed from it, _finish), then let the
        job go on. A timer that fails or overruns fails the job's timing (task_error)."""
        for g, t in list(self._timers.items()):
            if t.busy is None:
                continue
            limit = max(60.0, self.cfg["run_timeout"])
            answered = t.conn.poll()
            late = gate.now() - t.since > limit
            if not (answered or late or not t.proc.is_alive()):
                continue
            try:
                reply = t.conn.recv() if answered and not late else ("error", f"no answer within {limit:.0f} s")
            except (EOFError, OSError):
                reply = ("error", "it died")
            r, t.busy = t.busy, None
            r.ref_pending = False
            self.trace.append((gate.now(), g, "timer", "idle"))
            r.timer_s[t.what == "check"] += gate.now() - t.since
            if t.what == "check" and reply[0] in ("ok", "reject"):
                t.stop()
                r.check_result = reply
                r.stop(False)
                r.tell(b"C")
                continue
            data = struct.pack("<ddd", -1.0, -1.0, -1.0)  # a failure (the harness raises on it)
            if reply[0] == "ok":  # a round's (a check's failure is "error": the job's timing fails with it)
                t.stop()  # first: its threads may spin on a while
                r.ref_rounds.append(float(reply[1]))
                r.ref_call_ms = float(reply[3])
                r.ref_loaded |= reply[2] is not None  # such rounds are not kept for other jobs
                data = struct.pack("<ddd", reply[1], -1.0 if reply[2] is None else reply[2], reply[3])
            elif reply[0] == "oom":  # no memory beside the other jobs on its GPU: the job fails as out of
                t.stop()  # memory, and is judged again alone (_separate_reference); the timer goes on
                r.timer_error, r.timer_oom = str(reply[1]), True
            else:  # a new timer for the next round
                t.stop(False)
                self._dismiss(t.proc, t.conn)
                del self._timers[g]
                r.timer_error = str(reply[1])
            r.stop(False)
            r.tell(b"C" if t.what == "check" else b"T" + data)
        for r in active:  # first, all of them: a job asking now is given rounds released in this loop
            self._keep_rounds(r)
        for r in active:
            # a round for the job holding its device; a check once nobody holds that device (the
            # job has given it back: the check is not timed, and no timing starts while it runs,
            # since the job stopped meanwhile is not at a pause point)
            if r.ref_pending or not ((r.ref_request is not None and r.state == "hold") or (
                    r.check_claim is not None and r.state != "hold" and not any(
                        a.kind == "run" and a.gpu == r.gpu and a.state == "hold" for a in active))):
                continue
            kept = self._kept_rounds(r) if r.ref_request is not None else None
            if kept:  # --reference_retime: an earlier job's rounds, in turn; the timer is not asked
                self.reference_given += not r.reference_reused
                r.reference_reused, r.ref_request = True, None
                r.ref_rounds.append(kept[0][len(r.ref_rounds) % len(kept[0])])
                # with the call as the timer saw it for the job that measured them: sized on the
                # candidate's call alone, a round would hold twice the candidate's calls it holds paired
                r.tell(b"T" + struct.pack("<ddd", r.ref_rounds[-1], -1.0, kept[1]))
                continue
            t = self._timer(r.gpu)
            if t.busy is not None:
                continue
            job = r.item["job"]
            task = {k: job[k] for k in ("task_code", "task_hash", "seed", "cfg", "device", "language")}
            if r.ref_request is not None:
                runs, flags = r.ref_request
                r.ref_request, t.what = None, "round"
                msg = ("round", task, runs, flags)
            else:  # the candidate's claims (checks.timer_check), the check's seed's first
                msg = ("check", task, r.check_claim)
                r.check_claim, t.what = None, "check"
            r.ref_pending = True
            r.stop(True)  # all of the candidate's process (and its job's group) while the reference runs
            t.busy, t.since = r, gate.now()
            self.trace.append((t.since, r.gpu, "timer", t.what))
            t.stop(False)
            t.conn.send(msg)

    def _keep_rounds(self, r):
        """--reference_timing=separate with reference_retime: r's rounds, if the timer measured
        them quiet, kept for its task's later jobs (_kept_rounds), once, as soon as its timing is
        over (the device given back): its check and the rest of its job change nothing in them,
        and a later job of the task that times meanwhile is given them."""
        if r.rounds_kept or not r.released:
            return
        r.rounds_kept = True
        if (self.cfg["reference_retime"] > 0 and r.ref_rounds and not (r.reference_reused or r.ref_loaded
                                                                          or r.timer_error)):
            self.timer_rounds[self._rounds_key(r)] = (list(r.ref_rounds), gate.now(), r.ref_call_ms)

    def _rounds_key(self, r):
        return r.item["job"]["task_hash"], r.gpu, tuple(sorted((r.ref_flags or {}).items()))

    def _kept_rounds(self, r):
        """--reference_timing=separate with reference_retime: the reference rounds a timer
        measured, quiet, for an earlier job of r's task on its device with the same speed flags,
        within reference_retime seconds, and its last call as the timer saw it (ms), or None. The
        flags are those of r's first request."""
        if self.cfg["reference_retime"] <= 0:
            return None
        got = self.timer_rounds.get(self._rounds_key(r))
        if got and gate.now() - got[1] < self.cfg["reference_retime"] and (r.ref_rounds == [] or r.reference_reused):
            return got[0], got[2]
        return None

    def _separate_reference(self, r, res):
        """--reference_timing=separate: a timed success's speedup from the rounds the reference
        timer measured for this job (the median of all it asked for) against the candidate's
        parts of the rounds as the job told them while it held the device (the median of all it
        told), never from its result; the spread of the speedups no wider than those parts
        show. With reference_retime a quiet set of rounds is kept for the task's later jobs."""
        self._keep_rounds(r)  # (its release may have come in the loop it ended in)
        if r.ref_rounds:
            self.timer_jobs.append((len(r.ref_rounds), *r.timer_s))
        if r.timer_error:
            return Reject("task_error", "oom" if r.timer_oom else "reference_failed",
                          f"the reference timer failed: {r.timer_error}").result()
        if res.get("status") != "ok" or not res.get("new_ms"):
            return res
        # one candidate part a round (the sizing estimate's reference round has none, unless it counted as a round)
        if not r.new_rounds or not 0 <= len(r.ref_rounds) - len(r.new_rounds) <= 1 or r.check_result is None:
            return Reject("rejected", "protocol", "a timed success without the reference timer's rounds and check, "
                          "or without one part of its own a round: only the harness may write on the channel").result()
        if r.check_result[0] == "reject":
            _, status, reason, message = r.check_result
            return Reject(status, reason, message, log=res.get("log", "")).result()
        ref_ms, new_ms = verdicts.median(r.ref_rounds), verdicts.median(r.new_rounds)
        # the rounds in the order they were timed (the timer's first, the sizing estimate's, has no
        # candidate part told): a spread the result claims wider would widen the second timer's margin
        told = [a / b for a, b in zip(r.ref_rounds[-len(r.new_rounds):], r.new_rounds)]
        spread = min(res.get("spread") or 0.0, verdicts.spread(told))
        return dict(res, ref_ms=ref_ms, new_ms=new_ms, speedup=ref_ms / new_ms, spread=spread)

    def _reap(self, wait=False):
        """Workers that sent their result: joined once they have exited, killed 30 s after."""
        keep = []
        for r, t in self._exiting:
            r.proc.join(max(0.0, t - gate.now()) if wait else 0)
            if r.proc.exitcode is None and (wait or gate.now() >= t):
                self._kill(r)
            if r.proc.exitcode is None:
                keep.append((r, t))
            else:
                r.conn.close()
        self._exiting = keep
        # a group goes once its job's verdict has read it (a worker the kernel killed for memory
        # may be found dead here first, and a group removed then would name no limit)
        self._groups = [(g, p) for g, p in self._groups if p.exitcode is None or not g.read or not g.close()]

    def _spawn_standby(self, slot):
        sandbox.start_forkserver()
        g = self.slots[slot]
        env = dict(self.env, CUDA_VISIBLE_DEVICES=gate.physical_gpu(self.gpus[g]))
        parent, child = self.ctx.Pipe(duplex=True)
        proc = self.ctx.Process(target=self.worker.standby_main,
                                args=(child, env, self.check_cores[g], self.pid_namespace), daemon=True,
                                name=f"{sandbox.WORKER_NAME}-standby")
        proc.start()
        child.close()
        return proc, parent

    def _kill(self, r):
        import signal
        sandbox.kill_tree(r.proc.pid)  # what the candidate started, even in sessions of its own
        try:
            os.killpg(r.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if r.group is not None:  # a frozen process dies only once thawed
            r.group.freeze(False)
        r.proc.kill()
        r.proc.join(10)
        # a build killed mid-way leaves torch's lock file; nothing else holds it now
        ext = r.item["job"]["env"]["TORCH_EXTENSIONS_DIR"]
        for root, _, files in os.walk(ext):
            if "lock" in files:
                os.remove(os.path.join(root, "lock"))

    def _report_stall(self, active, queues):
        """No job has ended for STALL_SECONDS: each running one's state and how many wait to
        start, on stderr (a long build or a KernelBench-size check may be that slow; a job
        that never ends would be a fault of the evaluator's, and this says where it stands)."""
        t = gate.now()
        waiting = ", ".join(f"{len(q)} {p}" for p, q in queues.items() if q) or "none"
        say(f"evaluator: no job ended in the last {STALL_SECONDS:.0f} s; waiting to start: {waiting}; "
                   f"running: {len(active)}", sys.stderr)  # under the bar, not into it
        for r in active:
            held = ", stopped" * r.stopped + (f", in host work ({r.host})" if r.host else "")
            on = f", GPU {r.gpu}" if self.device == "cuda" and r.gpu is not None else ""
            say(f"  {r.kind} of {r.item['task'].name} (pid {r.proc.pid}{on}): {r.state} for "
                       f"{t - r.since:.0f} s{held}; its deadline "
                       + ("waits while it is held" if r.held else f"in {r.deadline - t:.0f} s"), sys.stderr)

    def _finish(self, r, timed_out=False):
        """A worker's result, or what its death says: crash, exit, timeout, a limit it hit."""
        res = None
        self.events.append((gate.now(), r.kind, "end"))
        if timed_out:
            self._kill(r)
            limit = self.cfg["compile_timeout"] if r.kind == "compile" else self.cfg["run_timeout"]
            message = f"no result within {limit:.0f} s ({'compiling' if r.kind == 'compile' else 'checking and timing'})"
            if r.deadline < r.job_deadline:  # inside a candidate call
                message = (f"candidate code (its import, its constructor, or a call with its synchronize) ran over "
                           f"{r.call_limit:.1f} s, {self.cfg['call_timeout_factor']:.0f}x the reference's time or "
                           f"{self.cfg['call_timeout']:g} s (three times that for the first call, the import and "
                           "each constructor): a hang, or far too slow")
            res = Reject("timeout", "timeout", message, log=_tail(r.log)).result()
            r.conn.close()
        else:
            res = r.result
            if res is not None and res.get("reason") == "protocol":  # a forger: no grace
                self._kill(r)
                r.conn.close()
            elif res is not None:  # it exits by itself now; the scheduler does not wait for that
                self._exiting.append((r, gate.now() + 30))
            else:
                r.proc.join(30)
                if r.proc.exitcode is None:
                    self._kill(r)
                r.conn.close()
            if res is None:
                res = self.worker.death(r.kind, r.proc.exitcode, log=_tail(r.log))
        if r.takes_reference or r.given_reference:
            res = self._trusted_reference(r, res)
        if r.separate:
            res = self._separate_reference(r, res)
        hit = r.group.verdict() if r.group else None  # a limit of its control group: the cause
        if r.group:
            r.group.read = True
        if hit:
            res = Reject("runtime_error", hit[0], hit[1], log=res.get("log", "")).result()
        elif res.get("status") in ("built", "ok") and self.cfg["static_check"]:
            bad = self._libraries(r.item)
            if bad:
                res = Reject("rejected", "library_symbols", "a library it compiled imports "
                             + "; ".join(f"{os.path.basename(os.path.dirname(p))}/{os.path.basename(p)}: "
                                         f"{', '.join(names[:6])}" for p, names in bad[:3])
                             + " (processes, signals, raw system calls, loaded code, sockets: no kernel needs them)").result()
        sandbox.redact_result(res)  # a secret a candidate found stays out of the verdict
        step = self._step(r.item, r.kind)
        res.setdefault("seconds", {})[step] = round(gate.now() - r.start, 3)
        if r.blocked:  # the time it kept a timing on its GPU waiting (gate.arbitrate)
            res["seconds"][step + "_blocking"] = round(r.blocked, 3)
        return res

    @staticmethod
    def _step(item, kind):
        """What a job of this kind does for this item now: compile, run, reference, or the run
        kind's later steps, confirm (a second timing) and kernelbench (KernelBench's judgement)."""
        return "kernelbench" if item.get("kb_job") else "confirm" if item.get("confirm") else kind

    def _kernelbench(self, item, res):
        """KernelBench's verdict for an item whose own is `res`: {} when not wanted; without a
        worker where the candidate never built (KernelBench would not build it either) or was
        caught reaching for the evaluator (it would only do so again, and a result it forged
        there would read as KernelBench's); else None: a job must run it (kernelbench.py)."""
        if not item.get("kernelbench"):
            return {}
        if res["status"] == "compile_error" or res.get("reason") in ("static_check", "library_symbols", "protocol"):
            return dict(status=res["status"] if res["status"] == "compile_error" else "not_run",
                        reason=res["reason"], speedup=0.0)
        return None

    def _to_confirm(self, item, res):
        """A first timing whose speedup is large enough to be timed again (confirm.py)."""
        return (res["status"] == "ok" and res.get("new_ms") and not item.get("confirm")
                and 0 < self.cfg["confirm_speedup"] <= res["speedup"])

    def _confirmed(self, first, second, tries_left=0):
        """The verdict of a candidate timed twice: the first measurement's, if the second (a
        fresh worker, another timer) agrees within both spreads and confirm_margin; else
        rejected/unconfirmed. A second measurement that disagrees while other processes kept
        its CPU busy (its candidate's own are rejected there) says little: None while
        tries_left, and the caller measures it again later. A first measurement taken under
        load (flagged disturbed) that a quiet second one puts lower says nothing of the candidate:
        the second's numbers stand (a trick aimed at the first timer gains nothing by them). A
        failure in the second worker stands as it is."""
        if second["status"] != "ok":
            return dict(second, message=f"{second.get('message', '')} (in the second measurement, a fresh worker)")
        s1, s2 = first["speedup"], second["speedup"]
        allowed = 1 + self.cfg["confirm_margin"] + (first.get("spread") or 0) + (second.get("spread") or 0)
        loaded = "disturbed" in (second.get("flags") or ())
        if s2 * allowed < s1 and loaded and tries_left:
            return None
        if s2 * allowed < s1 and not loaded and "disturbed" in (first.get("flags") or ()):
            note = (f"timed at {s1:.2f}x under load, then at {s2:.2f}x by a second timer in a fresh worker, "
                    "without load: the second stands")
            return dict(first, speedup=s2, ref_ms=second["ref_ms"], new_ms=second["new_ms"], spread=second.get("spread"),
                        confirmed=s2, flags=[f for f in first.get("flags") or () if f != "disturbed"],
                        message="; ".join(m for m in (first.get("message"), note) if m))
        if s2 * allowed < s1:
            return Reject("rejected", "unconfirmed", (
                f"timed at {s1:.2f}x, then at {s2:.2f}x in a fresh worker by a second timer (more than the "
                f"{allowed:.2f}x apart that the two measurements' spreads allow): its speed depends on how it is measured"
                + (f" (or on the load: {second.get('message', '')}, each time it was measured again)" if loaded else "")
            )).result()
        note = f"confirmed at {s2:.2f}x by a second timer in a fresh worker"
        return dict(first, confirmed=s2, message="; ".join(m for m in (first.get("message"), note) if m))

    @staticmethod
    def _judged_again(earlier, res):
        """The verdict of a candidate whose two measurements disagreed once (`earlier`, the
        unconfirmed message), judged again from its first timing: the second round's verdict,
        which says so. Noise that no process accounts for (a shared VM's, seen to move a CPU
        timing twofold) can strike either measurement once; a trick aimed at the first timer
        works again, and the second round rejects it too. One that works only now and then gains
        nothing: the first round's figures are never used."""
        again = "unconfirmed twice" if res.get("reason") == "unconfirmed" else "judged again"
        return dict(res, message=f"{res.get('message', '')} ({again}: in a first round, {earlier})".lstrip())

    def _libraries(self, item):
        """The shared libraries the job's program built (its part of the build cache, its work
        folder; torch's own Triton and Inductor output aside), each checked once, against
        static.DENIED_SYMBOLS -> [(path, names)] of those that import any."""
        job, bad = item["job"], []
        seen = item.setdefault("libraries", set())
        own = job["env"]["CUDAL1_CACHE"]
        for root in (own, job["workdir"]):
            for d, dirs, files in os.walk(root):
                dirs[:] = [x for x in dirs if x not in ("triton", "inductor")]
                for f in files:
                    p = os.path.join(d, f)
                    if f.endswith(".so") and p not in seen:
                        seen.add(p)  # a torch extension (ext/, or built in the work folder) is a Python module
                        names = static.check_library(p, python_module=not p.startswith(os.path.join(own, "lib")),
                                                     cuda=self.device == "cuda")
                        if names:
                            bad.append((p, names))
        return bad

    def _precheck(self, task, code):
        """Verdicts that need no worker: no code, unparsable code, no ModelNew, a static check
        that finds the candidate reaching for the evaluator (static.py)."""
        if code is None:
            return Reject("compile_error", "no_code", "the solution has no code").result()
        try:
            names = top_names(code)
        except SyntaxError as e:
            return Reject("compile_error", "syntax_error", f"syntax error at line {e.lineno}: {e.msg}").result()
        if "ModelNew" not in names:
            return Reject("compile_error", "no_modelnew", "the solution defines no ModelNew").result()
        found = static.check(code) if self.cfg["static_check"] else []
        if found:
            return Reject("rejected", "static_check", "; ".join(f"line {n}: {what}" for n, what in found[:3])
                          + (f" (and {len(found) - 3} more)" if len(found) > 3 else "")).result()
        return None

    def evaluate(self, pairs, progress=None, desc="evaluating", on_verdict=None, kernelbench=False):
        """[(Task, code or Solution)] -> [Verdict], in order. Identical pairs are judged once
        (and remembered for this Evaluator's lifetime). on_verdict(i, verdict) is called as
        each one lands (evaluate.py journals them, so an interrupted run loses nothing).
        kernelbench: also judge each as KernelBench's eval does (Verdict.kernelbench)."""
        items, verdicts = {}, [None] * len(pairs)

        def finish(key, it):
            fields = {k: v for k, v in it["res"].items() if k in Verdict.__dataclass_fields__}
            fields.update(source_hash=key[1], seed=it["job"]["seed"] if it["job"] else 0)
            self.memo[key] = fields
            for i in it["idx"]:
                name = pairs[i][1].name if isinstance(pairs[i][1], Solution) else it["name"]
                verdicts[i] = Verdict(**{**fields, "task": pairs[i][0].name, "solution": name})
                if on_verdict:
                    on_verdict(i, verdicts[i])

        for i, (task, sol) in enumerate(pairs):
            code = sol.code if isinstance(sol, Solution) else sol
            name = sol.name if isinstance(sol, Solution) else f"{task.name}#{sha(code or '')[:8]}"
            key = (task.hash, sha(code or ""))
            if key in self.memo:
                verdicts[i] = Verdict(**{**self.memo[key], "task": task.name, "solution": name})
                if on_verdict:
                    on_verdict(i, verdicts[i])
                continue
            if key not in items:
                pre = self._precheck(task, code)
                items[key] = dict(task=task, code=code, name=name, idx=[], res=pre, key=key, kernelbench=kernelbench,
                                  job=None if pre else self._job(task, code))
                if pre:
                    pre["kernelbench"] = self._kernelbench(items[key], pre)
            items[key]["idx"].append(i)
        for key, it in items.items():  # verdicts that needed no worker land first
            if it["res"] is not None:
                finish(key, it)
        # builds through torch's loader take a minute or more where ours take seconds: they start
        # first, so that none of them is the last job to begin (longest first shortens the tail)
        todo = sorted((it for it in items.values() if it["res"] is None),
                      key=lambda it: not static.TORCH_BUILDS.search(it["code"]))
        for it in todo:  # nothing to build (it parses: _precheck): no compile job, a worker's start saved
            it["phase"] = "compile" if static.BUILDS.search(it["code"]) else "run"
        self._schedule(todo, ["compile", "run"], progress, desc, landed=lambda it: finish(it["key"], it))
        return verdicts

    def evaluate_responses(self, tasks_and_texts, parse, desc="judging"):
        """[(Task, a model's response text)] -> [(parsed, Verdict)], in order: the one path from
        a response to a verdict. parse(text) -> prompts.Parsed; a response without usable code
        gets its verdict here, without a worker."""
        parsed = [parse(text) for _, text in tasks_and_texts]
        todo = [(t, p.code) for (t, _), p in zip(tasks_and_texts, parsed) if p.code is not None]
        verdicts = iter(self.evaluate(todo, desc=desc) if todo else [])
        return [(p, next(verdicts) if p.code is not None else unusable(task.name, "response", p))
                for (task, _), p in zip(tasks_and_texts, parsed)]

    def run_references(self, tasks, progress=None):
        """Load every task and run its reference once -> [Verdict] (status ok or task_error)."""
        items = [dict(task=t, code="", name="reference", idx=[i], res=None, job=self._job(t, ""))
                 for i, t in enumerate(tasks)]
        self._schedule(items, ["reference"], progress, "references")
        return [Verdict(task=it["task"].name, solution="reference",
                        **{k: v for k, v in it["res"].items() if k in Verdict.__dataclass_fields__})
                for it in items]

    def _schedule(self, items, phases, progress, desc, landed=None):
        """Move each item through its phases: 'compile' on up to `workers` processes,
        'run'/'reference' one per device slot (checks_per_gpu slots per GPU, one on CPU);
        landed(item) as each finishes."""
        import collections
        import multiprocessing.connection as mpc
        bar = None
        if (self.cfg["progress"] if progress is None else progress) and items:
            bar = progress_bar(len(items), desc, "cand")
        queues = {p: collections.deque() for p in phases}
        for it in items:  # an item may start at a later phase (evaluate: nothing to build)
            queues[it.get("phase", phases[0])].append(it)
            it["seconds"] = {}
        free = list(range(len(self.slots)))
        active = []
        if self.device == "cuda" and "run" in phases:  # run workers start while the builds run
            for slot in range(min(len(self.slots), len(items))):
                if slot not in self._standby:
                    self._standby[slot] = self._spawn_standby(slot)
        # CPU timings must not share the cores with builds (checks may): builds are stopped
        # while a run worker waits for the CPU or times, and none starts then
        exclusive = self.device == "cpu" and self.cfg["time_candidates"] and "run" in phases
        moved = gate.now()  # when a job last ended: a long quiet spell is reported (_report_stall)
        host = self.host
        host.enter()
        try:
            while any(queues.values()) or active:
                self._reap()  # first: a worker that has just exited no longer holds a slot's memory
                n_build = sum(r.kind == "compile" for r in active)
                timing = exclusive and any(r.kind == "run" and r.state in ("wait", "hold") for r in active)
                for p in phases:
                    if p == "compile":
                        while queues[p] and n_build < self.workers and not timing:
                            active.append(self._start(p, queues[p].popleft(), None))
                            n_build += 1
                    else:  # on the CPU a run job checks and times: none starts while the host works,
                        # nor while one times (its start-up, before its first pause point, would run beside)
                        while queues[p] and not timing and not (p == "run" and self.device == "cpu" and host.state) and \
                                (slot := gate.pick_slot(free, self.slots, active, queues[p][0],
                                                        [e for e, _ in self._exiting])) is not None:
                            free.remove(slot)
                            r = self._start(p, queues[p].popleft(), slot)
                            if r.kind == "run":
                                gate.join(r, [a for a in active if a.kind == "run" and a.gpu == r.gpu])
                            active.append(r)
                # the GPU gate's next step (gate.py), then wait for a message, an exit or the
                # deadline of a worker that runs; the host gets the device once nobody times
                host.settle(any(r.kind == "run" and (self.device == "cpu" or r.state == "hold") for r in active))
                for r in active if exclusive else ():  # before arbitrate grants the CPU (the jobs
                    if r.kind == "compile":            # started since `timing` was read only join)
                        r.stop(timing)
                for g in range(len(self.gpus)):  # (on the CPU the host waits for every run job to end)
                    gate.arbitrate([r for r in active if r.kind == "run" and r.gpu == g],
                                   host.state if self.device == "cuda" else None)
                    gate.share_clock([r for r in active if r.kind == "run" and r.gpu == g])
                for r in active:  # over a limit the evaluator watches (limits.JobGroup): stopped now
                    if r.group and r.group.over_limit(r.proc.pid, memory=r.state != "hold"):
                        r.deadline = r.job_deadline = gate.now()
                wake = [r.deadline for r in active if not r.held] + [moved + STALL_SECONDS] + \
                    [t for _, t in self._exiting if t > gate.now()] + \
                    [gate.now() + limits.WATCH_SECONDS for r in active if r.group] + \
                    [r.partial_since + gate.FRAME_SECONDS + 0.01 for r in active if r.partial_since is not None] + \
                    [t for r in active if r.kind == "run" and r.state == "pausing"  # when it becomes late
                     and (t := r.since + gate.DEFER_AFTER + 0.01) > gate.now()]
                wait = max(0.0, min(wake) - gate.now()) if wake else (5.0 if active else 0)
                timers = [t.conn for t in self._timers.values() if t.busy is not None]
                if timers:
                    wait = min(wait, 1.0)  # (a timer that overruns is looked at again within a second)
                ready = mpc.wait([r.conn for r in active] + [r.proc.sentinel for r in active] +  # and an
                                 [e.proc.sentinel for e, _ in self._exiting] + [host.wake] + timers,  # exit an alone
                                 timeout=wait)                                                       # job waits for
                host.drain()
                if host.cancelled:
                    raise KeyboardInterrupt("evaluation cancelled")
                for g in range(len(self.gpus)):  # the deadlines, now
                    gate.share_clock([r for r in active if r.kind == "run" and r.gpu == g])
                if gate.now() - moved > STALL_SECONDS:
                    moved = gate.now()
                    self._report_stall(active, queues)
                for r in list(active):
                    done = ((r.conn in ready or r.partial_since is not None) and r.receive()) or r.proc.sentinel in ready
                    if r.proc.sentinel in ready and r.result is None:
                        r.receive()  # a result sent just before the exit
                    if not done and (r.held or gate.now() < r.deadline):
                        continue
                    active.remove(r)
                    moved = gate.now()
                    r._set("done")
                    if r.slot is not None:
                        free.append(r.slot)
                        free.sort()
                    res = self._finish(r, timed_out=not done)
                    for k, v in res.pop("seconds", {}).items():  # a step taken again counts twice
                        r.item["seconds"][k] = round(r.item["seconds"].get(k, 0) + v, 3)
                    if res.get("reason") == "oom" and r.gpu is not None and len(self.slots) > len(self.gpus) \
                            and not r.item.get("alone"):
                        r.item["alone"] = True  # out of memory beside other workers: again, alone
                        queues[r.kind].appendleft(r.item)
                        continue
                    nxt = phases.index(r.kind) + 1
                    if res["status"] == "built" and nxt < len(phases):
                        queues[phases[nxt]].append(r.item)
                        continue
                    if r.item.get("kb_job"):  # KernelBench's judgement, beside the verdict it already has
                        kb = dict(status=res["status"], reason=res.get("reason", ""), speedup=res["speedup"],
                                  message=res.get("message", "")[:300])
                        res = dict(r.item["verdict"], kernelbench=kb)
                    else:
                        if r.kind == "run" and self._to_confirm(r.item, res):  # timed again, in a fresh worker
                            r.item["first"] = res
                            r.item["confirm"] = dict(speedup=res["speedup"], tol=res.get("tol"))
                            queues["run"].appendleft(r.item)  # first: no candidate waits long for its verdict
                            continue
                        if r.item.get("confirm"):
                            left = r.item.setdefault("confirm_tries", CONFIRM_TRIES) - 1
                            res = self._confirmed(r.item["first"], res, left)
                            if res is None:  # disagreed under load: again, after the jobs now waiting
                                r.item["confirm_tries"] = left
                                queues["run"].append(r.item)
                                continue
                            if res.get("reason") == "unconfirmed" and not r.item.get("earlier"):
                                # a disagreement must happen twice (_judged_again): the whole round
                                # once more, from the first timing, in fresh workers
                                r.item["earlier"] = res["message"]
                                for k in ("first", "confirm", "confirm_tries"):
                                    r.item.pop(k, None)
                                queues["run"].appendleft(r.item)
                                continue
                        if r.item.get("earlier"):
                            res = self._judged_again(r.item["earlier"], res)
                        kb = self._kernelbench(r.item, res)
                        if kb is None:  # first in line, as a confirmation: the verdict lands only after it
                            r.item["verdict"], r.item["kb_job"] = res, True
                            queues["run"].appendleft(r.item)
                            continue
                        res["kernelbench"] = kb
                    if r.item.get("alone"):  # the verdict says it was judged again, alone on its GPU
                        res["alone"] = True
                    res["seconds"] = dict(r.item["seconds"])
                    res["seconds"]["total"] = round(sum(v for k, v in res["seconds"].items()
                                                        if k in ("compile", "run", "reference", "confirm", "kernelbench")), 3)
                    r.item["res"] = res
                    if landed:
                        landed(r.item)
                    if bar:
                        bar.update(1)
                        bar.set_postfix_str(f"{r.item['task'].name}: {res['status']}", refresh=False)
                # reference rounds asked for (separate): to the timers; their answers back to the jobs
                self._serve_timers(active)
        except BaseException:
            for r in active + [r for r, _ in self._exiting]:
                self._kill(r)
            raise
        finally:
            host.leave()
            self._reap(wait=True)
            if bar:
                bar.close()

