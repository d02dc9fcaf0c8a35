"""Judging one candidate inside an evaluator worker: load the task and the candidate, guard
the harness (integrity snapshots, global flags, threads), check correctness, have it timed
(timing.py), and say what went wrong. With timing.py, the only code in the project that
runs candidate code; worker.py runs one of these jobs per worker process:

    compile_job(job)    # import the candidate so that its builds land in the cache
    run_job(job)        # check and time one candidate on one task -> dict of Verdict fields
    reference_job(job)  # run a task's reference once
"""
import ast
import contextlib
import importlib.util
import os
import re
import subprocess
import sys
import threading
import time
import traceback
import warnings

import torch

from . import builds, checks, correctness, gate, guards, sandbox, seccomp, static, timing, verdicts
from .correctness import tensors
from .verdicts import Reject, fresh_seed

# The package's names are bound when first used (kernels/__init__.py): all of them here, once
# in the forkserver that imports this module, so every job's snapshot holds each and a
# candidate's replacement of one shows.
for _name in sys.modules["kernels"].__all__:
    getattr(sys.modules["kernels"], _name)

# The first candidate call's deadline, in call limits (Harness.calling).
FIRST_CALL = 3
CONV = os.path.join(guards.TORCH_DIR, "nn", "modules", "conv.py")  # where cuDNN searches, seen from Python
SEARCH = 4  # a first call inside that search may last this many first-call limits (60 s by default)
# Host memory the reference models built ahead (Harness.prebuild) may take per worker.
PREBUILD_BYTES = 2 << 30


def classify(exc, where):
    """An exception from candidate code -> Reject with a specific reason."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, builds.BuildError):
        return Reject("compile_error", "build_failed", "compilation failed", log=str(exc))
    if isinstance(exc, SyntaxError):
        return Reject("compile_error", "syntax_error", f"syntax error at line {exc.lineno}: {exc.msg}")
    if "Error building extension" in text or isinstance(exc, subprocess.CalledProcessError):
        return Reject("compile_error", "build_failed", "load_inline build failed", log=text)
    if isinstance(exc, ImportError) and "undefined symbol" in text:
        return Reject("compile_error", "link_error", text.splitlines()[0][:300])
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or re.search(
            r"out of memory|can't allocate memory|CUBLAS_STATUS_ALLOC_FAILED", text):
        return Reject("runtime_error", "oom", f"out of memory in {where}")
    if isinstance(exc, OSError) and exc.errno == 27:  # EFBIG: the worker's log limit
        return Reject("runtime_error", "output_flood", f"candidate wrote over 256 MB of output in {where}")
    if isinstance(exc, OSError) and exc.errno == 1:  # EPERM: the system-call filter (seccomp.py), or the box
        return Reject("rejected", "system_call", f"the box refused a system call: {text.splitlines()[0][:200]} "
                      f"(in {where}; EVAL.md, \"The system-call filter\")")
    if isinstance(exc, SystemExit):
        return Reject("runtime_error", "exit", f"candidate called sys.exit({exc.code}) in {where}")
    if re.search(r"CUDA error|cudaError|illegal memory access|device-side assert", text):
        first = next((l for l in text.splitlines() if "CUDA error" in l or "illegal" in l), text)
        return Reject("runtime_error", "cuda_error", f"{first.strip()[:300]} (in {where})")
    return Reject("runtime_error", "exception", f"{text.splitlines()[0][:300]} (in {where})")


def _candidate_traceback(exc, filename, tail=0):
    """The traceback trimmed to the candidate's own frames (and the innermost `tail` of any
    file: where an error inside torch was raised) and the error line."""
    tb = traceback.extract_tb(exc.__traceback__)
    frames = [f for i, f in enumerate(tb) if f.filename == filename or i >= len(tb) - tail]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def seal(job):
    """Right before a candidate's code first runs in this worker: the system-call filter
    (seccomp.py), where the job is boxed. After it, whatever the worker runs (the harness
    too) runs under it. A machine that refuses it was reported at start-up (sandbox.probe)."""
    if job["cfg"].get("sandbox"):  # (a job made by hand, in a test's own process, is not boxed)
        why = seccomp.install()
        if why:
            print(f"system-call filter: {why}", file=sys.stderr)


def weight_seeds(s0, cfg):
    """A job's weight seeds from its seed s0: the reference's first run, then one per check."""
    return [s0] + [s0 + 1000 * s for s in range(cfg["check_seeds"])]


def _import_code(code, modname, path):
    """Execute source as a module from a real file (tracebacks, inspect and torch.compile
    need one) under a private name."""
    with open(path, "w") as f:
        f.write(code)
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod


FENCE = 16384  # elements of NaN on each side of a fenced input (64 KB of fp32: alignment kept)


def _fenced(x):
    """x, contiguous, inside a buffer with FENCE NaNs before and after it."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.is_contiguous()):
        return x
    buf = torch.full((x.numel() + 2 * FENCE,), float("nan"), dtype=x.dtype, device=x.device)
    buf[FENCE:FENCE + x.numel()] = x.reshape(-1)
    return buf[FENCE:FENCE + x.numel()].view(x.shape)


def _how_called(new):
    """What a call of the model `new` runs: its class's forward and __call__, and the functions
    behind any forward/__call__ set on the instance."""
    own = [new.__dict__.get(k) for k in ("forward", "__call__")]
    return (type(new).forward, type(new).__call__) + tuple(getattr(f, "__func__", f) for f in own)


class Harness:
    """What one worker needs to judge one candidate on one task. All its state is named
    here; the phases fill it in order: run_reference, load_candidate, checks.run_checks, timing."""

    def __init__(self, job):
        self.job, self.cfg = job, job["cfg"]
        self.cuda = job["device"] == "cuda"
        self.dev = torch.device("cuda" if self.cuda else "cpu")
        self.workdir = job["workdir"]
        # The clocks and barriers the harness uses, captured before any candidate runs.
        self.clock = time.perf_counter
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        # On the CPU, what other processes take of the timing cores (timing.LoadProbe)
        self.load_probe = None if self.cuda else timing.LoadProbe
        # The task (load_task): its module, its plain top-level values (the sizes its input
        # functions read, watched for changes), constructor arguments, and the bytes and
        # dtype of each reference output (where the poison goes).
        self.task, self.task_vars, self.init_args, self.out_specs = None, {}, [], []
        # Reference models built ahead on the host (prebuild), by seed, until build() takes them.
        self.built = {}
        # The candidate (load_candidate) and what integrity() compares against: global
        # flags, live threads, callables of the harness and torch, global module hooks;
        # ModelNew's forward and __call__, per instance (watch_forward).
        self.sol, self.flags0, self.threads0, self.snap, self.hooks0, self.fwd0 = None, {}, set(), {}, 0, {}
        self.cfg0 = ()  # the settings when it loaded (integrity)
        self.tids0 = set()
        # The global flags the candidate set (candidate_flags), and those in force now.
        self.own_flags, self.applied = {}, {}
        # What the verdict reports beyond its status: task flags, notes for the message,
        # calls into compiled kernels, the worst error and its tolerance.
        self.flags, self.notes, self.calls, self.max_err, self.tol = [], [], 0, None, None
        self.mean_err = self.mean_tol = None
        # --reference_timing=apart: seconds the reference's timing took, and of those queued for the device
        self.reference_s = self.reference_wait = 0.0
        # Deadlines: each candidate call (with its synchronize) gets call_limit seconds, told
        # to the Evaluator through notify; None until the reference's time is known.
        self.notify = job.get("notify") or (lambda seconds: None)
        # The GPU gate (gate.py): pause points between candidate calls while checking, the
        # GPU alone while timing. Open (no waiting) where a worker has its device alone.
        self.gate = job.get("gate") or gate.Open()
        self.call_limit, self.in_call, self.called, self.first_call, self.call_start = None, False, False, False, 0.0
        self.call_lock = threading.Lock()  # a call's start and end, and the watchdog's extensions
        self.left = []  # the candidate's threads still running when its last forward returned
        self.ref_compiled = None  # --baseline=compile: the reference compiled before the candidate loads
        self.spots = ([], 0)  # timed calls kept for the spot check (timing.py), of how many
        self.claims = None  # separate: the checked outputs for the reference timer (checks.timer_check)
        self.timer_check_s = 0.0  # separate: seconds timer_check took (the timer's part included)
        self.time_parts = {}  # run_timing's phases and the closing checks', seconds
        self.ref_state = None  # the timed reference model's state before the candidate's first call
        # The same for reference and candidate alike: PyTorch's own defaults (cuDNN convolutions
        # in TF32 on Ampere and later, matmuls in full fp32), the reference as its users run it
        # and as KernelBench and CUDA-L1 time it; TF32 everywhere with allow_lowp, nowhere with
        # strict_fp32. The tolerance follows (correctness.compare): 10x the reference's own error
        # against float64 where that is larger than the dtype's.
        # Written explicitly, defaults included, under every setting alike.
        tf32 = True if self.cfg["allow_lowp"] else False if self.cfg["strict_fp32"] else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            b = torch.backends
            b.cuda.matmul.allow_tf32 = b.cuda.matmul.allow_tf32 if tf32 is None else tf32
            b.cudnn.allow_tf32 = b.cudnn.allow_tf32 if tf32 is None else tf32

    # -- task --------------------------------------------------------------------------
    def load_task(self):
        self.task = _import_code(self.job["task_code"], "kb_task_" + self.job["task_hash"],
                                 os.path.join(self.workdir, "task.py"))
        self.task_vars = {k: v for k, v in vars(self.task).items()
                          if isinstance(v, (int, float, str, bool, tuple))}
        torch.manual_seed(0)
        f = getattr(self.task, "get_init_inputs", None)
        self.init_args = list(f()) if f else []

    def seeds(self):
        """The weight seeds: the reference's first run, then one per correctness check."""
        return weight_seeds(self.job["seed"], self.cfg)

    def prebuild(self, budget=PREBUILD_BYTES):
        """The reference models of this job's seeds, built on the host now, before any
        candidate code is loaded, so the work (seconds for large layers: the random
        initialization runs on one core) may overlap other workers' timings (gate.py).
        Each is what build() would make later (both call _on_host). It stops once they
        pass `budget` bytes (so at least one is built); the rest are built when needed."""
        size = 0
        for seed in self.seeds():
            if size > budget:
                break
            m = self._on_host(self.task.Model, seed)
            self.built.setdefault(seed, []).append(m)
            size += sum(t.numel() * t.element_size() for t in list(m.parameters()) + list(m.buffers()))

    def baseline(self, ref):
        """The reference as it is timed: its torch.compile'd form under --baseline=compile."""
        return self.ref_compiled if self.cfg["baseline"] == "compile" else ref

    def run_reference(self):
        """Load the task (unless done) and call its reference once on the device (which
        also warms its libraries up) -> (model, inputs, output, milliseconds of that first call)."""
        if self.task is None:
            self.load_task()
        ref = self.build(self.task.Model, self.job["seed"])
        xs = self.inputs(self.job["seed"])
        self.sync()
        t0 = self.clock()
        out = ref(*xs)
        self.sync()
        self.out_specs = [(t.numel() * t.element_size(), t.dtype) for t in tensors(out)]
        # the classes the reference runs through (nn.Linear, ...): watched like torch's own
        self.ref_classes = {c for m in ref.modules() for c in type(m).__mro__
                            if isinstance(c, type) and issubclass(c, torch.nn.Module)}
        return ref, xs, out, (self.clock() - t0) * 1e3

    def inputs(self, seed=None, fenced=False):
        """A fresh input set on the device, from the task's get_inputs. seed None (every set
        made once the candidate is loaded): drawn from the OS's random source now, so no
        candidate can make the sets it will be asked for ahead and store their answers (the
        job's seed is within its reach; only the weights and the reference's first run use
        it). Generated on the device when possible (fast for
        the gigabyte inputs of KernelBench), else on the host and moved. fenced: each
        floating input sits inside a larger buffer whose margins hold NaN, so a kernel that
        reads past either end of an input gets NaN every time, not whatever lies there."""
        seed = fresh_seed() if seed is None else seed
        torch.manual_seed(seed)
        try:
            with torch.device(self.dev):
                xs = list(self.task.get_inputs())
        except Exception:
            torch.manual_seed(seed)
            xs = list(self.task.get_inputs())
        xs = [x.to(self.dev) if isinstance(x, torch.Tensor) else x for x in xs]
        return [_fenced(x) for x in xs] if fenced else xs

    def build(self, cls, seed):
        """cls(*init_args) as KernelBench builds both programs: the seed set right before the
        constructor, the parameters created on the host, then the model moved to the device.
        Weights are never copied from one to the other, so a candidate may fold constants
        into its own at construction. A reference built ahead (prebuild) is taken as is."""
        if cls is self.task.Model and self.built.get(seed):
            return self.built[seed].pop(0).to(self.dev)
        return self._on_host(cls, seed).to(self.dev)

    def _on_host(self, cls, seed):
        torch.manual_seed(seed)  # right before the constructor: both programs draw the same stream
        return cls(*self.init_args)

    def models(self, seed):
        """The reference and the candidate, each built from `seed` (the candidate on the
        host now: for large weights, tenths of a second, so a pause point before it)."""
        ref = self.build(self.task.Model, seed)
        self.gate.pause_point()
        return ref, self.candidate(seed)

    def candidate(self, seed, weights=None):
        """ModelNew built from `seed` under its own flags; `weights`: a state_dict to load."""
        try:
            with self.calling(setup=True), self.candidate_flags("ModelNew.__init__"):
                new = self.build(self.sol.ModelNew, seed)
                if weights is not None:
                    new.load_state_dict(weights)
        except Reject:
            raise
        except Exception as e:
            raise classify(e, "ModelNew.__init__") from e
        self.watch_forward(new)
        self.integrity("ModelNew.__init__")
        return new

    # -- global flags ------------------------------------------------------------------
    @contextlib.contextmanager
    def candidate_flags(self, where):
        """Run candidate code under the flags it has set so far; afterwards keep what it
        changed as its own and put the harness's flags back."""
        self.applied = {**self.flags0, **self.own_flags}
        guards.write_flags(self.applied)
        try:
            yield
        finally:
            now = guards.read_flags()
            self.own_flags.update({k: v for k, v in now.items() if v != self.applied[k]})
            self.own_flags = {k: v for k, v in self.own_flags.items() if v != self.flags0[k]}
            guards.write_flags(self.flags0)
            guards.quiet()
            self.applied = self.flags0
        fixed = [k for k in guards.FIXED_FLAGS if k in self.own_flags]
        if fixed:
            raise Reject("rejected", "global_flag", "candidate changed the harness's " + "; ".join(
                f"{k}: {self.flags0[k]} -> {self.own_flags[k]}" for k in fixed) + f" (during {where})")

    @contextlib.contextmanager
    def reference_flags(self):
        """The reference while timing: the harness's flags plus the speed-only ones the
        candidate set, so that a flag alone earns no speedup."""
        self.applied = {**self.flags0, **{k: v for k, v in self.own_flags.items() if k in guards.SPEED_FLAGS}}
        guards.write_flags(self.applied)
        guards.quiet()
        try:
            yield
        finally:
            guards.write_flags(self.flags0)
            self.applied = self.flags0

    # -- deadlines ---------------------------------------------------------------------
    def set_call_limit(self, ref, xs):
        """A candidate call may take call_timeout_factor times the reference's warm call, and
        never less than call_timeout; then a watchdog starts (see calling)."""
        self.sync()
        t0 = self.clock()
        ref(*xs)
        self.sync()
        ms = (self.clock() - t0) * 1e3
        self.call_limit = max(self.cfg["call_timeout"], self.cfg["call_timeout_factor"] * ms / 1e3)
        main = threading.main_thread().ident
        benchmark = guards.FLAGS["cudnn_benchmark"][0]  # captured before any candidate ran

        def watch():  # torch.compile, triton or a build inside a call is work, not a hang
            while True:
                time.sleep(0.5)
                if not self.in_call:
                    continue
                names = guards.stack(main)
                # compiling is what runs nearest the top of the stack: from there down past
                # libraries' frames and generated code ("<...>", as torch.fx's) to a compiler's.
                # Candidate code on the way is running, not compiling (a hang inside a function
                # wrapped by torch._dynamo.disable has a compiler's frame below it).
                top = next((n for n in names if not n.startswith(guards.SYSTEM + ("<",)) or
                            n.startswith(guards.COMPILERS)), "")
                with self.call_lock:  # the same call still (no deadline is sent after one ended)
                    if not self.in_call:
                        continue
                    # the call's own limit from now, never less than two of these looks
                    more = max(self.call_limit * (FIRST_CALL if self.first_call else 1), 2.0)
                    # and so is cuDNN's search for its convolution algorithms (cudnn.benchmark)
                    # in the candidate's first call: tens of seconds for a deep network's shapes,
                    # up to SEARCH first-call limits in all (a hang dressed as convolutions ends there)
                    left = self.call_start + SEARCH * FIRST_CALL * self.call_limit - time.monotonic()
                    if self.first_call and names and names[0] == CONV and benchmark() and left > 0:
                        self.notify(min(more, left))
                    if top.startswith(guards.COMPILERS):
                        self.notify(more)
        threading.Thread(target=watch, name="harness-watchdog", daemon=True).start()

    @contextlib.contextmanager
    def calling(self, setup=False):
        """Candidate code running, a forward and its synchronize or (setup) its import or its
        constructor: its own deadline. Without one, code there that runs long could not be
        paused either, and every timing on its GPU would wait for its job's deadline."""
        if self.call_limit is None:
            yield
            return
        # the first call may build, compile or autotune (cuDNN's search for a 3-D convolution):
        # FIRST_CALL times the limit; a hang there costs that much once. The import and each
        # constructor may do the same, and get as long, without using up the first call's.
        first = setup or not self.called
        with self.call_lock:
            self.notify(self.call_limit * (FIRST_CALL if first else 1))
            self.first_call, self.call_start = first, time.monotonic()
            self.in_call, self.called = True, self.called or not setup
        try:
            yield
        finally:
            with self.call_lock:
                self.in_call = self.first_call = False
                self.notify(None)

    def forward(self, new, xs, where, snapshot=False):
        """One call of the candidate under its flags and its call deadline, synchronized, its
        kernel calls counted -> out, or with snapshot (out, copies of its tensors taken before
        the synchronize: what the caller's stream saw when forward returned). self.left: the
        candidate's threads still running when it returned."""
        label = "ModelNew.forward after timing" if where == "after timing" else "ModelNew.forward"
        before = builds.KERNEL_CALLS[0]
        with self.calling():
            try:
                with self.candidate_flags(f"ModelNew.forward, {where}"):
                    out = new(*xs)
                self.left = self.candidate_threads()
                correctness.plain_tensors(out)  # before anything reads it (a lazy tensor's methods)
                snap = [t.clone() for t in tensors(out)] if snapshot else None
                self.sync()  # an asynchronous CUDA error shows here
            except Reject:
                raise
            except Exception as e:
                r = classify(e, label)
                r.extra.setdefault("log", _candidate_traceback(e, os.path.join(self.workdir, "candidate.py"), tail=8))
                raise r from e
        self.calls += builds.KERNEL_CALLS[0] - before
        return (out, snap) if snapshot else out

    # -- the candidate -----------------------------------------------------------------
    def load_candidate(self):
        # builds at import were done ahead by a compile worker; one in __init__ or a forward
        # is host work the gate may stop anywhere
        guards.count_torch_extensions(around=self.gate.building)
        triton = guards.count_triton_launches() if "triton" in (self.job["code"] or "") else []
        guards.track_thread_origins()
        self.tids0 = timing.thread_baseline()  # every thread, from compiled code too
        # their cores may not change; on a GPU the gate moves the main thread itself (gate.py)
        guards.watch_affinity(self.tids0, but_this_thread=self.cuda)
        self.flags0 = self.applied = guards.read_flags()
        self.threads0 = {t.ident for t in threading.enumerate()}
        self.snap = guards.snapshot([
            ("torch", torch), ("torch.Tensor", torch.Tensor), ("TensorBase", torch._C.TensorBase),
            ("F", torch.nn.functional), ("torch.cuda", torch.cuda), ("Event", torch.cuda.Event),
            ("Stream", torch.cuda.Stream), ("nn.Module", torch.nn.Module),
            ("time", sys.modules["time"]), ("torch.testing", torch.testing),
            ("task", self.task), ("Model", self.task.Model), ("harness", sys.modules[__name__]),
            ("correctness", correctness), ("checks", checks), ("timing", timing), ("guards", guards), ("kernels", sys.modules["kernels"]),
            ("builds", builds), ("verdicts", verdicts),
            # the way the verdict travels back to the Evaluator
            ("json", sys.modules["json"]), ("json.encoder", sys.modules["json.encoder"]),
            # the harness's own state (its clock, say) and the reference's building blocks
            ("harness instance", self)] + [(f"{c.__module__}.{c.__qualname__}", c)
                                           for c in sorted(getattr(self, "ref_classes", ()), key=str)]
            + [(f"triton {c.__qualname__}", c) for c in triton])  # their counted launches
        self.hooks0 = self._global_hooks()
        self.cfg0 = tuple(sorted((k, repr(v)) for k, v in self.cfg.items()))  # as integrity compares them
        self.interp0 = guards.interpreter_hooks()
        self.dispatch0 = guards.dispatch_table()
        path = os.path.join(self.workdir, "candidate.py")
        seal(self.job)  # last: the harness's own set-up above may do what the candidate may not
        try:
            with self.calling(setup=True), self.candidate_flags("import"):
                self.sol = _import_code(self.job["code"], "kb_candidate_" + self.job["source_hash"], path)
        except Reject:
            raise
        except BaseException as e:  # SystemExit included: candidate code may call sys.exit
            r = classify(e, "import")
            r.extra.setdefault("log", _candidate_traceback(e, path))
            raise r from e
        if not hasattr(self.sol, "ModelNew"):
            raise Reject("compile_error", "no_modelnew", "the solution defines no ModelNew")
        self.integrity("import")
        self._size_constants()

    def _size_constants(self):
        """A solution that redefines the sizes the task's input functions read (batch_size, dim)
        would fool a harness that used its get_inputs; ours never does, but it is rejected."""
        names = {n for fname in ("get_inputs", "get_init_inputs") if (f := getattr(self.task, fname, None))
                 for n in f.__code__.co_names}
        sv = vars(self.sol)
        for k in sorted(names & self.task_vars.keys()):
            if k in sv and isinstance(sv[k], type(self.task_vars[k])) and sv[k] != self.task_vars[k]:
                raise Reject("rejected", "problem_size_changed",
                             f"the solution sets {k} = {sv[k]!r}; the task has {self.task_vars[k]!r}")

    @staticmethod
    def _global_hooks():
        from torch.nn.modules import module as m
        return sum(len(getattr(m, n, {})) for n in (
            "_global_forward_hooks", "_global_forward_pre_hooks", "_global_module_registration_hooks"))

    def integrity(self, where, dispatch=False):
        """Every hack class that leaves a trace outside the output, checked after each phase;
        with `dispatch`, the dispatcher's kernels too (40 ms: after the checks and the timings)."""
        bad = guards.patched(self.snap)
        if bad:
            raise Reject("rejected", "harness_patched",
                         f"candidate replaced {', '.join(sorted(bad)[:5])} (during {where})")
        # the settings the checks read (a candidate that set allow_lowp widened its own tolerance
        # a hundredfold; check_seeds 0 would skip the checks)
        then = dict(self.cfg0)
        changed = sorted(k for k in self.cfg.keys() | then.keys() if repr(self.cfg.get(k)) != then.get(k))
        if changed:
            raise Reject("rejected", "harness_patched", f"candidate changed the evaluator's settings: "
                         f"{', '.join(changed[:5])} (during {where})")
        ops = guards.overridden(self.dispatch0) if dispatch else []
        if ops:
            raise Reject("rejected", "harness_patched", f"candidate registered its own kernels for "
                         f"{', '.join(sorted(ops)[:5])}, which the reference may run (during {where})")
        flags = guards.read_flags()  # outside its own calls (a thread of the candidate, say)
        changed = [f"{k}: {self.flags0[k]} -> {flags[k]}" for k in flags if flags[k] != self.flags0[k]]
        if changed:
            raise Reject("rejected", "global_flag", f"candidate changed {'; '.join(changed)} outside its calls "
                         f"(during {where})")
        for k, v in self.task_vars.items():
            if vars(self.task).get(k) != v:
                raise Reject("rejected", "problem_size_changed",
                             f"candidate changed the task's {k} from {v!r} (during {where})")
        alive = self.candidate_threads()
        if alive:
            raise Reject("rejected", "thread", f"candidate left {len(alive)} thread(s) running "
                         f"({alive[0].name}) after {where}")
        if self._global_hooks() != self.hooks0:
            raise Reject("rejected", "forward_hook", f"candidate registered global module hooks ({where})")
        hooks = guards.changed_hooks(self.interp0)
        if hooks:
            raise Reject("rejected", "interpreter_hook", f"candidate installed interpreter hooks: {', '.join(hooks)} "
                         f"(trace, profile, signal handlers or interval timers run code beside the harness; "
                         f"during {where})")

    def candidate_threads(self):
        """Threads the candidate started that are still running (not a library's helpers)."""
        return [t for t in threading.enumerate() if t.ident not in self.threads0 and t.is_alive()
                and not getattr(t, "_started_by_library", False)]

    def watch_forward(self, new):
        """Remember how `new` is called, so rebinding forward/__call__ later is caught."""
        # per instance (a forward chosen in __init__, self.forward = self._impl, is ordinary
        # Python: a bound method of its own in every instance), by function, so that no model
        # is kept alive here; a new instance at a reused id overwrites its entry
        self.fwd0[id(new)] = _how_called(new)
        if any(m._forward_hooks or m._forward_pre_hooks for m in new.modules()):
            raise Reject("rejected", "forward_hook", "ModelNew registers forward hooks")

    @staticmethod
    def reference_state(ref):
        """What a candidate that reached the reference's model (through gc, say) could change
        in it between calls: each module's hooks, an instance-level forward or __call__, the
        submodules themselves, the parameters' and buffers' storage and values. -> a dict;
        `own`: buffers its own calls change (reference_ran), their values not compared."""
        if ref is None:
            return None
        mods = [(n, type(m), len(m._forward_hooks), len(m._forward_pre_hooks),
                 tuple(k for k in ("forward", "__call__") if k in vars(m))) for n, m in ref.named_modules()]
        params = list(ref.parameters())
        ts = params + list(ref.buffers())
        return dict(mods=mods, ptrs=[(t.data_ptr(), t.dtype) for t in ts], sums=correctness.checksums(ts),
                    params=len(params), own=set())

    def check_reference(self, ref, state, where):
        """Raises Reject (reference_changed) when `ref` no longer matches `state`."""
        if state is None or ref is None:  # ref64 is dropped where the float64 run failed
            return
        now = self.reference_state(ref)
        changed = [i for i, (a, b) in enumerate(zip(now["sums"], state["sums"]))
                   if i not in state["own"] and not torch.equal(a, b)]
        if now["mods"] != state["mods"] or now["ptrs"] != state["ptrs"] or changed:
            what = "hooks, forward or modules" if now["mods"] != state["mods"] else "weights"
            raise Reject("rejected", "reference_changed", f"the reference's model was changed ({what}) "
                         f"during {where}: it would run slower, or compute what the candidate does")

    def reference_ran(self, ref, state):
        """After a call of the reference itself (checked just before): the buffers it changed
        are its own to change (BatchNorm's running statistics); a parameter is never."""
        if state is None or ref is None:
            return
        now = self.reference_state(ref)
        for i, (a, b) in enumerate(zip(now["sums"], state["sums"])):
            if i >= state["params"] and not torch.equal(a, b):
                state["own"].add(i)

    def check_forward(self, new, where):
        if any(a is not b for a, b in zip(_how_called(new), self.fwd0[id(new)])):
            raise Reject("rejected", "forward_rebound", f"ModelNew's forward/__call__ was rebound during {where}")
        if any(m._forward_hooks or m._forward_pre_hooks for m in new.modules()):
            raise Reject("rejected", "forward_hook", f"ModelNew registered forward hooks during {where}")


# ----------------------------------------------------------------------------------------
# The jobs, and the worker processes that run them

def compile_reference(h, ref, xs):
    """torch.compile of the reference (--baseline=compile), before any candidate code runs here,
    with compiler caches no candidate can write (shared, one job of a task compiling at a time;
    where the lock is held too long, as a candidate can, this job's own), then its writes confined
    to its own folders. Timing calls this compiled reference: nothing of it is compiled after
    the candidate loads, so no planted file stands in for it."""
    own, shared = {k: os.environ.get(k, "") for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")}, h.job["reference_cache"]
    with sandbox.exclusive(os.path.join(shared, f"compile-{h.job['task_hash'][:16]}.lock"), min(60.0, h.cfg["run_timeout"] / 10)) as held:
        caches = shared if held else os.path.join(shared, "own-" + os.urandom(8).hex())
        os.environ.update(TRITON_CACHE_DIR=os.path.join(caches, "triton"),
                          TORCHINDUCTOR_CACHE_DIR=os.path.join(caches, "inductor"))
        try:
            fn = torch.compile(ref)
            fn(*xs)
            h.sync()
        finally:
            os.environ.update(own)
    if h.cfg["sandbox"]:
        sandbox.confine([h.workdir, os.environ["CUDAL1_CACHE"]])
    return fn


def start(h, prebuild=True):
    """A run job up to its candidate: the task loaded, its reference models built ahead
    (prebuild), the reference run once on the device, compiled for --baseline=compile, the
    call deadline set -> (the reference of the job's seed, the inputs it ran on)."""
    h.load_task()  # task code: sizes and classes, nothing run on the device
    if prebuild:
        with h.gate.host_only(during_timing=True):
            h.prebuild()
    h.gate.pause_point()
    ref, xs, _, _ = h.run_reference()
    if h.cfg["baseline"] == "compile":  # before the snapshot: dynamo wraps torch functions on first use
        h.ref_compiled = compile_reference(h, ref, xs)
    h.set_call_limit(ref, xs)
    return ref, xs


def run_job(job):
    """In a worker: judge one candidate on one task -> dict of Verdict fields."""
    h = Harness(job)
    cfg, t0, p0 = h.cfg, h.clock(), h.gate.paused  # (paused at the worker's start, before this: not loading)
    res = {}
    with torch.no_grad():
        apart = cfg["time_candidates"] and cfg["reference_timing"] == "apart"
        separate = cfg["time_candidates"] and cfg["reference_timing"] == "separate"
        try:
            ref, _ = start(h)
            if apart and job.get("reference_ms"):  # measured by another job of this task, lately
                ref_ms, ref_spread = job["reference_ms"]
            elif apart:  # the reference timed while no candidate code exists in this process,
                ref_ms, _, ref_spread = timed_alone(h, ref)  # and told now: the only time the Evaluator uses
                job.get("reference_time", lambda *a: None)(ref_ms, ref_spread, "disturbed" in h.flags)
        except Exception as e:
            return reference_failed(e)
        h.claims = [] if separate else None
        try:
            h.gate.pause_point()
            h.load_candidate()
            t1, p1 = h.clock(), h.gate.paused
            ref, new, ref64 = checks.run_checks(h)
            if cfg["require_kernel"] and h.calls == 0:
                raise Reject("rejected", "no_kernel", "forward never called a compiled kernel")
            t2, p2, wait = h.clock(), h.gate.paused, 0.0
            t3 = t2
            if cfg["time_candidates"]:
                if (waited := timing.settle_children(h.gate.pause_point, cfg["settle_seconds"])) > 1.0:
                    h.notes.append(f"timed after its processes went idle ({waited:.1f} s)")
                h.gate.acquire()  # the GPU alone from here to release: no other worker runs on it
                wait = h.clock() - t2
                try:
                    if apart:  # the candidate alone, against the reference's time from before it loaded
                        _, new_ms, spread = timing.run_timing(h, ref, new, ref_ms=ref_ms)
                        spread += ref_spread
                    elif separate:  # the reference's rounds timed by the device's reference timer
                        # under the speed-only flags the candidate has set by then, as paired
                        remote = lambda runs: h.gate.reference_round(
                            runs, {k: v for k, v in h.own_flags.items() if k in guards.SPEED_FLAGS})
                        ref_ms, new_ms, spread = timing.run_timing(h, ref, new, remote=remote,
                                                                   report=h.gate.candidate_round)
                    else:
                        ref_ms, new_ms, spread = timing.run_timing(h, ref, new)
                except Reject:
                    raise
                except Exception as e:
                    raise classify(e, "timing") from e
                finally:
                    t3 = h.clock()
                    h.gate.release()
                t4, p4 = h.clock(), h.gate.paused
                # the checks of what the timing did: the device shared again (each takes its turn
                # at the pause points), so the next candidate's timing need not wait for them
                h.gate.pause_point()
                timing.closing_checks(h, ref, new)
                if separate:
                    tc = h.clock()
                    checks.timer_check(h, new)  # its outputs judged where no candidate reached
                    h.timer_check_s = h.clock() - tc
                timing.spot_check(h, ref)
                checks.check_after_timing(h, ref, new, ref64)
                res = dict(status="ok", speedup=ref_ms / new_ms, ref_ms=ref_ms, new_ms=new_ms, spread=spread,
                           message="; ".join(h.notes))
            else:  # Stages 1-2 filter on correctness alone (paper section 3.1-3.2)
                t4, p4 = t2, p2
                res = dict(status="ok", message="correct (not timed)")
            # each phase without its pauses; the pauses and the waits for the GPU apart (gate.py);
            # apart, the reference's timing is timing, not loading
            tr, wr = h.reference_s, h.reference_wait
            res["seconds"] = dict(load=t1 - t0 - (p1 - p0) - tr, check=t2 - t1 - (p2 - p1) + h.clock() - t4 - (h.gate.paused - p4),
                                  time=t3 - t2 - wait + tr - wr, wait=h.gate.paused + wait + wr)
            if separate:  # of `time`: waiting for the timer (hand-overs included), and the check's whole step
                res["seconds"].update(time_timer=h.gate.timer, time_check=h.timer_check_s)
            res["seconds"].update({f"time_{k}": v for k, v in h.time_parts.items()})
        except BaseException as e:  # SystemExit, KeyboardInterrupt raised by candidate code too
            res = failed(h, e)
            # what the job waited for (pauses; apart, the device for its reference), so a fault's
            # own cost reads as the run's time less this
            res["seconds"] = dict(wait=h.gate.paused + h.reference_wait)
    res.setdefault("max_err", h.max_err)
    res.setdefault("tol", h.tol)
    if res.get("status") == "ok":
        res.update(mean_err=h.mean_err, mean_tol=h.mean_tol)
    res.update(flags=h.flags, kernel_calls=h.calls, set_flags={k: str(v) for k, v in h.own_flags.items()})
    return res


def timed_alone(h, ref):
    """--reference_timing=apart: the reference timed on its own, with the device to itself (the
    gate), before the candidate's code is loaded -> (ms, None, spread of its rounds). Whatever
    the candidate does later in this process (timers, threads, patched libraries, global
    state) cannot reach a measurement that is over."""
    t0 = h.clock()
    h.gate.acquire()
    h.reference_wait = h.clock() - t0  # queued for the device: the job's wait, not its work
    try:
        return timing.run_timing(h, ref, None)
    finally:
        h.gate.release()
        h.reference_s = h.clock() - t0


def reference_failed(e):
    """The reference's exception -> a task_error (out of memory: "oom", which the Evaluator
    judges again alone if the GPU was shared)."""
    return Reject("task_error", "oom" if classify(e, "").reason == "oom" else "reference_failed",
                  f"the reference failed: {type(e).__name__}: {str(e)[:300]}", log=traceback.format_exc()).result()


def failed(h, e):
    """What went wrong once the candidate was in play -> Verdict fields: a Reject as it says, else classify's."""
    if not isinstance(e, Reject):
        r = classify(e, "evaluation")
        r.extra["log"] = _candidate_traceback(e, os.path.join(h.workdir, "candidate.py"))
        return r.result()
    return e.result()


def reference_job(job):
    """In a worker: load a task and run its reference once (for checking task sets)."""
    h = Harness(job)
    with torch.no_grad():
        try:
            _, _, out, ms = h.run_reference()
        except Exception as e:
            r = classify(e, "the reference")
            return Reject("task_error", r.reason, r.message, log=traceback.format_exc()).result()
    shapes = [tuple(t.shape) for t in tensors(out)]
    return dict(status="ok", ref_ms=ms, message=f"output {shapes}")


def compile_job(job):
    """In a worker without a GPU: import the candidate so that its builds (load_cuda,
    load_cpp, load_inline at module level) land in the cache, and where it builds through
    torch's extension loader, construct it too (_construct_ahead). Only build failures at
    import are reported; anything else is left for the run phase to judge with a GPU."""
    path = os.path.join(job["workdir"], "candidate.py")
    seal(job)  # its builds' compilers run under the filter too (they need nothing it refuses)
    try:
        ast.parse(job["code"])
        mod = _import_code(job["code"], "kb_candidate_" + job["source_hash"], path)
    except BaseException as e:
        r = classify(e, "import")
        if r.status == "compile_error":
            r.extra["log"] = r.extra.get("log") or _candidate_traceback(e, path)
            return r.result()
        return dict(status="built")
    _construct_ahead(job, mod)
    return dict(status="built")


def _construct_ahead(job, mod):
    """Many published kernels call load_inline in ModelNew's constructor, so importing
    builds nothing, and the nvcc run (tens of seconds with torch's headers) would fall to a
    GPU worker. Such a candidate is constructed once here, on the host as the run phase
    constructs it, so the build lands in its cache from a compile worker. Whatever happens
    here is not a verdict (without a GPU a constructor may take another path, or fail): the
    run phase constructs it again and judges that."""
    cls = getattr(mod, "ModelNew", None)
    if not isinstance(cls, type) or not static.TORCH_BUILDS.search(job["code"]):
        return
    try:
        task = _import_code(job["task_code"], "kb_task_" + job["task_hash"], os.path.join(job["workdir"], "task.py"))
        f = getattr(task, "get_init_inputs", None)
        init = list(f()) if f else []
        # many build only `if torch.cuda.is_available()`, which a compile worker (no GPU) is not
        cuda = torch.cuda.is_available
        if job["device"] == "cuda":
            torch.cuda.is_available = lambda: True
        try:
            with torch.no_grad():
                cls(*init)
        finally:
            torch.cuda.is_available = cuda
    except BaseException:
        pass
