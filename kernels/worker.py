"""An evaluator worker process from start to exit: a session of its own, resource limits,
output to a log file, the sandbox (sandbox.py), one job (harness.py) with its GPU gate
(gate.py), every process it started killed, its result sent back, a hard exit. The Evaluator
in evaluator.py starts these from a forkserver that has imported this module, harness.py and
torch (and not transformers).

    child_main(kind, conn, job)     # every job: kind is compile | run | reference (run: a second measurement
                                    # too, confirm.py, where job["confirm"] is set; KernelBench's
                                    # judgement, kernelbench.py, where job["kernelbench"] is)
    standby_main(conn, env, cores)  # a CUDA run worker started ahead of its job (CUDA starts in the job)
"""
import importlib
import os
import resource
import signal
import sys
import threading
import time
import traceback

import torch

from . import checks, correctness, gate, guards, harness, sandbox, static, timing
from . import verdicts

if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
    # a CPU build of torch: importing the extension loader here, in the forkserver, starts no
    # CUDA, and saves every job the few tenths of a second it takes (_start_cuda's, on a GPU)
    importlib.import_module("torch.utils.cpp_extension")


def standby_main(conn, env, cores, box=True):
    """A CUDA run worker started ahead of its job, in a PID namespace of its own (box), waiting
    for the job. CUDA starts in the job, after the box (child_main): the driver starts threads
    of its own, and a thread started before the box stays outside it (namespaces, Landlock
    and capabilities are each thread's), where a signal handler the candidate sets runs too
    (hacks/sandbox_thread_signal.py wrote next to the evaluator's code from there)."""
    if box:
        sandbox.own_pid_namespace()
    else:
        os.setsid()
    os.environ.update(env)
    if cores:
        os.sched_setaffinity(0, cores)
    try:
        msg = conn.recv()
    except EOFError:  # the evaluator went away
        os._exit(0)
    if msg is None:
        os._exit(0)
    child_main(msg[0], conn, msg[1])


def timer_main(conn, env, cores, workdir, box, hidden=()):
    """The reference timer of one device (--reference_timing=separate): a process in which no
    candidate code ever runs. The Evaluator asks it for the reference's part of a timing round
    while the candidate's job holds the device and is stopped: ("round", task job, runs, the
    speed-only flags the candidate set) -> ("ok", median ms, other processes' load or None) |
    ("error", why); None ends it. Each task's reference model, input pool and flush buffer are
    made at its first round (the same construction, seed and inputs as a job's) and kept for
    its next candidates, the last few tasks at most. The Evaluator's messages are pickled:
    they come from the Evaluator only, never from a candidate's worker."""
    sandbox.leave_evaluator_channels()
    os.setsid()
    # stopped between rounds, it could not act on a polite signal: killed outright if its
    # parent (the forkserver, which ends with the Evaluator) goes
    sandbox._libc.prctl(sandbox.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.environ.update(env)
    if cores:
        os.sched_setaffinity(0, cores)
    fd = os.open(os.path.join(workdir, "timer.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    if box:
        sandbox.enter(workdir, [env["CUDAL1_CACHE"]], None, hidden)
    cuda = env.get("KERNELS_DEVICE") == "cuda"
    if cuda:
        _start_cuda()
    else:
        _cpu_worker_setup({})
    states = {}  # task hash -> (harness, reference, timed calls), most recent last
    quiet = None  # on a GPU: timing.DeviceQuiet, made at the first round
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            os._exit(0)
        if msg is None:
            os._exit(0)
        what, job = msg[0], msg[1]
        try:
            st = states.pop(job["task_hash"], None)
            if st is None:  # room first: its pool is made beside the tasks kept
                trim_timer_states(states)
                st = _timer_state(job, workdir)
            states[job["task_hash"]] = st
            h, ref, calls = st
            if what == "check":
                conn.send(_timer_checks(h, msg[2], harness.weight_seeds(job["seed"], h.cfg)[1:]))
                continue
            runs, flags = msg[2:]
            h.own_flags = dict(flags)  # reference_flags keeps the speed-only ones (as a paired timing does)
            if not cuda:  # the CPU: the Evaluator's few milliseconds of handing over before the calls, not
                time.sleep(0.003)  # in them (the load probe would count them)
            if cuda and quiet is None:
                quiet = timing.DeviceQuiet(h)
            ms, load = timing.reference_round(h, h.baseline(ref), calls, runs, h.load_probe() if h.load_probe else None,
                                              quiet)
            conn.send(("ok", ms, load, calls.wall * 1e3))  # and a call as the timer saw it (flush, refill)
        except Exception as e:
            traceback.print_exc()
            states.pop(job["task_hash"], None)
            if cuda and correctness.gpu_out_of_memory(e):  # the jobs beside it hold the GPU's memory: the
                states.clear()  # Evaluator judges the job again, alone on its GPU (as a job's own oom)
                torch.cuda.empty_cache()
                conn.send(("oom", f"{type(e).__name__}: {e}"[:300]))
                continue
            conn.send(("error", f"{type(e).__name__}: {e}"[:300]))


def _timer_checks(h, claims, weights):
    """The timer's check (checks.timer_check): each claim {w: weight seed, s: input seed, spot,
    d: another distribution's number or 0, c: the claim} against its reference, built from that
    seed as the job built its candidate (one of the job's `weights`; the timer's own Harness may
    be another job's), on the input set the input seed makes (drawn from distribution d, as
    run_checks does), in the task's dtype and in float64; a spot check's (a timed call's tensors,
    flattened) within twice the tolerance, as the worker's own spot check; a drawn set's failure
    is input_distribution, and one where the reference fails or is not finite is no check
    -> ("ok",) | ("reject", status, reason, message)."""
    n = len(claims)
    try:
        with torch.no_grad():
            ref = ref64 = None
            for w in sorted({c["w"] for c in claims}):  # one weight seed's models at a time (memory)
                if w not in weights:
                    return ("reject", "rejected", "protocol", "a check claimed on weights no check uses: only the "
                                                              "harness may write on the channel")
                ref = ref64 = None
                ref = h.build(h.task.Model, w)
                ref64 = correctness.float64_copy(ref)
                for i, c in enumerate(claims):
                    if c["w"] != w:
                        continue
                    xs = h.inputs(c["s"])
                    drawn = checks.draw_into(xs, c["d"])  # as run_checks drew it
                    what = ("a timed call's inputs" if c["spot"] else "a checked input set"
                            + (f" drawn from {drawn}" if drawn else ""))
                    where = ("the reference timer's check" if i == 0 else f"the reference timer, on {what} ({i} of "
                             f"{n - 1})") + ", against its own reference in a process no candidate code has reached"
                    try:
                        r32, r64, ref64 = correctness.reference_outputs(ref, ref64, xs)
                    except Exception as e:
                        if not drawn or correctness.gpu_out_of_memory(e):
                            raise
                        continue  # the reference fails on these values: they say nothing (run_checks alike)
                    if c["spot"]:
                        r32, r64 = correctness.tensors(r32), correctness.tensors(r64)
                    if drawn and not checks.finite(r32):
                        continue  # not finite on them (a log of normal values): nothing to compare
                    try:
                        checks.compare_claim(c["c"], r32, r64, c["s"], h.dev, h.cfg["allow_lowp"], where,
                                             checks.TIMER_SAMPLES if i == 0 else checks.CLAIM_SAMPLES,
                                             2.0 if c["spot"] else 1.0)
                    except verdicts.Reject as failure:
                        if not (drawn and failure.reason in checks.SHORTCUT_REASONS):
                            raise
                        if not h.cfg["allow_distribution_shortcut"]:  # (allowed: the job's own check flags it)
                            checks.distribution_shortcut(h, failure, where)  # raises input_distribution
                    r32 = r64 = xs = None
        return ("ok",)
    except verdicts.Reject as e:
        return ("reject", e.status, e.reason, e.message)
    finally:
        ref = ref64 = r32 = r64 = None
        if h.cuda:  # the float64 runs' memory back to the device, for the jobs beside it
            torch.cuda.empty_cache()


TIMER_TASKS, TIMER_BYTES = 4, 2 << 30  # the tasks the timer keeps (the one it times among them); the others' bytes


def trim_timer_states(states, tasks=TIMER_TASKS - 1, limit=TIMER_BYTES):
    """Drop the timer's least recently used tasks (states: task hash -> (harness, reference,
    timing.Calls), oldest first) until at most `tasks` are left, holding at most `limit` bytes of
    input pools and flush buffers: each pool is up to 4 GB of the GPU's memory, and the jobs
    beside the timer need theirs (on an H100 a timer holding 10-13 GB ran out for its check)."""
    while len(states) > tasks or (states and sum(st[2].bytes for st in states.values()) > limit):
        states.pop(next(iter(states)))


def _timer_state(job, workdir):
    """A task's reference as a run job builds it (its seed, its construction, its first run as
    the warm-up), with the timed calls' pool: the reference timer's state for that task."""
    folder = os.path.join(workdir, job["task_hash"][:16])
    os.makedirs(folder, exist_ok=True)
    h = harness.Harness(dict(job, workdir=folder))
    ref, xs, _, _ = h.run_reference()
    if h.cfg["baseline"] == "compile":  # compiled here, its caches in the timer's own folder (no job sees it)
        os.environ.update(TRITON_CACHE_DIR=os.path.join(workdir, "triton"),
                          TORCHINDUCTOR_CACHE_DIR=os.path.join(workdir, "inductor"))
        h.ref_compiled = torch.compile(ref)
        h.ref_compiled(*xs)
        h.sync()
    h.flags0 = guards.read_flags()
    calls = timing.Calls(h)
    calls(h.baseline(ref), True)  # warm-up: lazy initialization, caches
    return h, ref, calls


def _start_cuda():
    """In the box: CUDA, and the extension loader (guards wraps it; importing it starts a
    thread too) -> None, or why CUDA cannot start here (told to the job: the GPU's fault)."""
    try:
        torch.empty(1, device="cuda")
        importlib.import_module("torch.utils.cpp_extension")
    except Exception as e:
        return f"{type(e).__name__}: {e}"


# Captured when the forkserver imports this module, before any candidate runs: the result
# goes back through these, so a candidate that patches the encoder or os.write (rejected as
# harness_patched) cannot rewrite the verdict on its way out. What reaches the Evaluator is
# checked there against the schema (verdicts.check_result), never executed.
_ENCODE, _WRITE, _EXIT = verdicts.encode, os.write, os._exit
_SYNC, _FREE = torch.cuda.synchronize, torch.cuda.empty_cache
_LOCK = threading.Lock()  # the harness's watchdog thread sends too


def _send(conn, obj):
    """One JSON frame (verdicts.encode), written with the functions captured above."""
    data = _ENCODE(obj)
    fd = conn.fileno()
    with _LOCK:
        while data:
            data = data[_WRITE(fd, data):]


def child_main(kind, conn, job):
    """Entry of every worker process: a session of its own (so a kill takes its compilers
    too), output to a log file, then one job, its result sent back, and a hard exit."""
    sandbox.leave_evaluator_channels()
    if not sandbox.IN_PID_NAMESPACE and os.getsid(0) != os.getpid():  # (a standby worker is set)
        if job.get("pid_namespace"):
            sandbox.own_pid_namespace()  # setsid, then the job in a namespace of its own
        else:
            os.setsid()
    os.environ.pop("GLIBC_TUNABLES", None)  # this process's malloc is set; the compilers it starts get the default
    os.environ.update(job["env"])
    fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    if job.get("cores"):
        os.sched_setaffinity(0, job["cores"])
    # a run worker shares its device (a GPU, or the CPU) for checks and has it alone for timing
    # (gate.py); its synchronize and free are CUDA's once CUDA is up in it (below)
    cuda = job["device"] == "cuda"
    job["gate"] = gate.WorkerGate(conn.fileno(), lambda msg: _send(conn, msg), lambda: None, job.get("time_cores"),
                                  lambda: None, beside=cuda) if kind == "run" else gate.Open()
    # The worker's start is host work (the box; CUDA's context, which runs no kernel; the
    # extension loader's import: about a second on a GPU): a timing on its device need not wait
    # for it to reach its first pause point, and on a GPU it goes on beside that timing, off
    # the timing cores
    with job["gate"].host_only(during_timing=True, device_up=False):
        # the box (sandbox.py): a reaper of whatever the candidate starts, no network, writes only
        # in the work folder and the build cache; what the machine refuses, the Evaluator reported
        if job["cfg"]["sandbox"]:
            # writable: its own part of the build cache; a run job comparing against torch.compile
            # also the reference's compiler cache, until its candidate is loaded (harness.py)
            ref_compile = kind == "run" and job["cfg"]["baseline"] == "compile"
            sandbox.enter(job["workdir"], [job["env"]["CUDAL1_CACHE"]] + ([job["reference_cache"]] if ref_compile
                                                                           else []),
                          job.get("cgroups"), job.get("hidden", ()))
        if kind == "run" and cuda:  # after the box: no thread of the worker predates it
            job["cuda_failed"] = _start_cuda()
    if kind == "run" and cuda and not job["cuda_failed"]:
        job["gate"].sync, job["gate"].free = _SYNC, _FREE
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 20, 256 << 20))  # a print flood ends here
    # CPU time: a process that uses more is killed by SIGXCPU: runtime_error/cpu_time. Each
    # process counts its own here; the Evaluator also stops a job whose processes together
    # used more (its control group).
    cpu = int(cpu_limit(job["cfg"], kind)) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    if kind == "compile":  # builds share cores with the checks; the checks feed the GPU first
        os.nice(10)
    if not (kind != "compile" and cuda):  # CUDA maps huge address ranges
        # a candidate asking for terabytes gets an error, not the machine's OOM killer
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        resource.setrlimit(resource.RLIMIT_AS, (ram, ram))
    # the harness tells the Evaluator when a candidate call starts and ends, so a hang inside
    # one is stopped after that call's deadline instead of the whole job's
    job["notify"] = lambda seconds: _send(conn, ("call", seconds))
    # --reference_timing=apart: the reference's time, told before the candidate loads (the
    # Evaluator takes no other: harness.run_job)
    job["reference_time"] = lambda ms, spread, disturbed: _send(conn, ("reference", [ms, spread, disturbed]))
    try:
        if job["device"] == "cpu" and kind == "run":
            _cpu_worker_setup(job)
        if job.get("cuda_failed"):  # the GPU's fault, not the task's or the candidate's; out of
            # memory beside other workers is judged again alone (evaluator.py)
            err = job["cuda_failed"]
            res = verdicts.Reject("runtime_error", "oom" if "out of memory" in err.lower() else "cuda_init",
                                  f"the worker could not start CUDA on its GPU: {err[:300]}").result()
        else:
            if static.TORCH_BUILDS.search(job["code"] or ""):  # a build is not run twice
                guards.remember_builds(job["env"]["TORCH_EXTENSIONS_DIR"])
            run = {"compile": harness.compile_job, "run": harness.run_job, "reference": harness.reference_job}[kind]
            if kind == "run" and job.get("confirm"):  # the second measurement; its module is imported
                from . import confirm               # only here, so no first timing's worker has it
                run = confirm.confirm_job
            elif kind == "run" and job.get("kernelbench"):  # KernelBench's judgement, for audits
                from . import kernelbench
                run = kernelbench.kernelbench_job
            res = run(job)
    except BaseException as e:
        res = verdicts.Reject("runtime_error", "harness", f"{type(e).__name__}: {e}"[:300],
                              log=traceback.format_exc()).result()
    left = sandbox.reap() if job["cfg"]["sandbox"] else []  # every process the job started dies with it
    if left and res.get("status") in ("ok", "built"):
        res = verdicts.Reject("runtime_error", "left_process", f"the candidate left {len(left)} process(es) "
                              "running after its job: " + "; ".join(c[:80] for c in left[:3])).result()
    try:
        _send(conn, res)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        _EXIT(0)  # skip atexit handlers and finalizers the candidate may have left


def cpu_limit(cfg, kind, cores=None):
    """CPU seconds a job may use (cpu_seconds): by default its timeout on every core it may use
    (`cores`, or this process's), which no job reaches legitimately."""
    timeout = cfg["compile_timeout" if kind == "compile" else "run_timeout"]
    return cfg["cpu_seconds"] or timeout * len(cores or os.sched_getaffinity(0))


def death(kind, code, log=""):
    """What a worker that exited without a result died of, from its exit code (the parent's
    side; a limit of its control group, which says more, is looked at after this); log: the
    end of its output."""
    doing = "importing" if kind == "compile" else "running"
    if code is None or code >= 0:
        return verdicts.Reject("runtime_error", "exit", f"worker exited with code {code} (os._exit or a fatal "
                               "error)", log=log).result()
    name = signal.Signals(-code).name
    why = {"SIGKILL": " (out of memory?)", "SIGXCPU": " (its CPU-time limit, cpu_seconds)"}.get(name, "")
    return verdicts.Reject("runtime_error", "cpu_time" if name == "SIGXCPU" else "crash",
                           f"worker died with {name}{why} while {doing} the candidate", log=log).result()


def _cpu_worker_setup(job):
    """CPU timing worker: all its cores for torch, and freed heap blocks kept in the heap
    (not returned to the OS), so timed calls of either program do not pay for fresh pages."""
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    correctness.mallopt(correctness.M_MMAP_THRESHOLD, 32 << 20)  # the largest value glibc accepts
    correctness.mallopt(correctness.M_TRIM_THRESHOLD, 1 << 30)
    correctness.mallopt(correctness.M_PERTURB, 0)  # glibc's default, named so that it is written again (guards.quiet)
