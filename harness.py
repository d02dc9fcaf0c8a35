"""Everything that runs inside an evaluator worker: load the task and the candidate, check
correctness, time both, and say what went wrong. The only code in the project that runs
candidate code; kernels.Evaluator starts the workers (one job each, a fresh process).

Entry points, called in a worker forked by kernels.Evaluator: child_main (every job) and
standby_main (a CUDA run worker that brings its context up before its job arrives). The jobs:
compile_job (import the candidate so its builds land in the cache), run_job (check and time
one candidate on one task), reference_job (run a task's reference once).
"""
import ast
import ctypes
import importlib.util
import os
import random
import re
import resource
import subprocess
import sys
import threading
import time
import traceback
import types
import warnings

import torch

import correctness
import kernels
from correctness import tensors
from kernels import Reject

def classify(exc, where):
    """An exception from candidate code -> Reject with a specific reason."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, kernels.BuildError):
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
    if isinstance(exc, SystemExit):
        return Reject("runtime_error", "exit", f"candidate called sys.exit({exc.code}) in {where}")
    if re.search(r"CUDA error|cudaError|illegal memory access|device-side assert", text):
        first = next((l for l in text.splitlines() if "CUDA error" in l or "illegal" in l), text)
        return Reject("runtime_error", "cuda_error", f"{first.strip()[:300]} (in {where})")
    return Reject("runtime_error", "exception", f"{text.splitlines()[0][:300]} (in {where})")


def _candidate_traceback(exc, filename):
    """The traceback trimmed to the candidate's own frames and the error line."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


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


def _flags():
    """Global backend settings the candidate must not change (README, "How a candidate is
    judged": flags)."""
    b = torch.backends
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dict(
            matmul_tf32=b.cuda.matmul.allow_tf32, cudnn_tf32=b.cudnn.allow_tf32,
            cudnn_enabled=b.cudnn.enabled, cudnn_benchmark=b.cudnn.benchmark,
            cudnn_deterministic=b.cudnn.deterministic,
            fp16_reduced=b.cuda.matmul.allow_fp16_reduced_precision_reduction,
            bf16_reduced=b.cuda.matmul.allow_bf16_reduced_precision_reduction,
            matmul_precision=torch.get_float32_matmul_precision(),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            default_dtype=str(torch.get_default_dtype()), threads=torch.get_num_threads(),
            mkldnn=b.mkldnn.enabled)


def _snapshot(objs):
    """Identity of every callable attribute of the given objects: the harness's clocks,
    synchronisation, comparisons, torch's namespace and the reference module."""
    snap = {}
    for label, obj in objs:
        for k, v in list(vars(obj).items()):
            if callable(v) or isinstance(v, (staticmethod, classmethod, property)):
                snap[(label, k)] = (obj, v)
    return snap


def _patched(snap):
    return [f"{label}.{k}" for (label, k), (obj, v) in snap.items() if vars(obj).get(k) is not v]


class _Counted:
    """A torch extension module (load_inline, load) whose functions count their calls."""

    def __init__(self, mod):
        object.__setattr__(self, "_mod", mod)

    def __getattr__(self, name):
        v = getattr(self._mod, name)
        if not callable(v) or isinstance(v, type):
            return v

        def counted(*args, **kwargs):
            kernels.KERNEL_CALLS[0] += 1
            return v(*args, **kwargs)
        return counted


def _count_torch_extensions():
    """Make KernelBench-style extensions count toward kernel_calls, like load_cuda's."""
    import torch.utils.cpp_extension as cx

    def wrap(fn):
        def loader(*args, **kwargs):
            m = fn(*args, **kwargs)
            return _Counted(m) if isinstance(m, types.ModuleType) else m
        return loader
    cx.load_inline, cx.load = wrap(cx.load_inline), wrap(cx.load)


class Harness:
    """What one worker needs to judge one candidate on one task. All its state is named
    here; the phases fill it in order: run_reference, load_candidate, run_checks, timing."""

    def __init__(self, job):
        self.job, self.cfg = job, job["cfg"]
        self.cuda = job["backend"] == "cuda"
        self.dev = torch.device("cuda" if self.cuda else "cpu")
        self.workdir = job["workdir"]
        # The clocks and barriers the harness uses, captured before any candidate runs.
        self.clock = time.perf_counter
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        # The task (load_task): its module, its plain top-level values (the sizes its input
        # functions read, watched for changes), constructor arguments, and the bytes and
        # dtype of each reference output (where the poison goes).
        self.task, self.task_vars, self.init_args, self.out_specs = None, {}, [], []
        # The candidate (load_candidate) and what integrity() compares against: global
        # flags, live threads, callables of the harness and torch, global module hooks;
        # ModelNew's forward and __call__ (watch_forward).
        self.sol, self.flags0, self.threads0, self.snap, self.hooks0, self.fwd0 = None, {}, set(), {}, 0, None
        # What the verdict reports beyond its status: task flags, notes for the message,
        # calls into compiled kernels, the worst error and its tolerance.
        self.flags, self.notes, self.calls, self.max_err, self.tol = [], [], 0, None, None
        # Fixed for reference and candidate alike: no TF32 unless lowered precision is
        # allowed, so an fp32 task is checked and timed as fp32.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cuda.matmul.allow_tf32 = self.cfg["allow_lowp"]
            torch.backends.cudnn.allow_tf32 = self.cfg["allow_lowp"]

    # -- task --------------------------------------------------------------------------
    def load_task(self):
        self.task = _import_code(self.job["task_code"], "kb_task_" + self.job["task_hash"],
                                 os.path.join(self.workdir, "task.py"))
        self.task_vars = {k: v for k, v in vars(self.task).items()
                          if isinstance(v, (int, float, str, bool, tuple))}
        torch.manual_seed(0)
        f = getattr(self.task, "get_init_inputs", None)
        self.init_args = list(f()) if f else []

    def run_reference(self):
        """Load the task and call its reference once on the device (which also warms its
        libraries up) -> (model, inputs, output, milliseconds of that first call)."""
        self.load_task()
        ref = self.build(self.task.Model, self.job["seed"])
        xs = self.inputs(self.job["seed"])
        self.sync()
        t0 = self.clock()
        out = ref(*xs)
        self.sync()
        self.out_specs = [(t.numel() * t.element_size(), t.dtype) for t in tensors(out)]
        return ref, xs, out, (self.clock() - t0) * 1e3

    def inputs(self, seed):
        """A fresh input set on the device. Generated on the device when possible (fast for
        the gigabyte inputs of KernelBench), else on the host and moved."""
        torch.manual_seed(seed)
        try:
            with torch.device(self.dev):
                xs = list(self.task.get_inputs())
        except Exception:
            torch.manual_seed(seed)
            xs = list(self.task.get_inputs())
        return [x.to(self.dev) if isinstance(x, torch.Tensor) else x for x in xs]

    def build(self, cls, seed):
        """cls(*init_args) from `seed`, its parameters created on the device (initialising
        big models on the host takes seconds); on the host if that fails."""
        try:
            torch.manual_seed(seed)
            with torch.device(self.dev):
                return cls(*self.init_args).to(self.dev)
        except Exception:
            torch.manual_seed(seed)
            return cls(*self.init_args).to(self.dev)

    def models(self, seed):
        """Reference and candidate built from the same seed; the candidate gets the
        reference's weights when its state_dict has the same names and shapes."""
        ref = self.build(self.task.Model, seed)
        try:
            new = self.build(self.sol.ModelNew, seed)
        except Exception as e:
            raise classify(e, "ModelNew.__init__") from e
        rs, ns = ref.state_dict(), new.state_dict()
        if rs.keys() == ns.keys() and all(rs[k].shape == ns[k].shape for k in rs):
            new.load_state_dict(rs)
        return ref, new

    # -- the candidate -----------------------------------------------------------------
    def load_candidate(self):
        _count_torch_extensions()
        self.flags0 = _flags()
        self.threads0 = {t.ident for t in threading.enumerate()}
        self.snap = _snapshot([
            ("torch", torch), ("torch.Tensor", torch.Tensor), ("TensorBase", torch._C.TensorBase),
            ("F", torch.nn.functional), ("torch.cuda", torch.cuda), ("Event", torch.cuda.Event),
            ("Stream", torch.cuda.Stream), ("nn.Module", torch.nn.Module),
            ("time", sys.modules["time"]), ("torch.testing", torch.testing),
            ("task", self.task), ("Model", self.task.Model), ("harness", sys.modules[__name__]),
            ("correctness", correctness), ("kernels", kernels)])
        self.hooks0 = self._global_hooks()
        path = os.path.join(self.workdir, "candidate.py")
        try:
            self.sol = _import_code(self.job["code"], "kb_candidate_" + self.job["source_hash"], path)
        except BaseException as e:  # SystemExit included: candidate code may call sys.exit
            r = classify(e, "import")
            r.extra.setdefault("log", _candidate_traceback(e, path))
            raise r from e
        if not hasattr(self.sol, "ModelNew"):
            raise Reject("compile_error", "no_modelnew", "the solution defines no ModelNew")
        self.integrity("import")
        self._size_constants()

    def _size_constants(self):
        """A solution that redefines the sizes the task's input functions read (batch_size,
        dim, ...) would fool a harness that used the solution's get_inputs; ours never does,
        but the attempt is rejected by name."""
        names = set()
        for fname in ("get_inputs", "get_init_inputs"):
            f = getattr(self.task, fname, None)
            if f is not None:
                names.update(f.__code__.co_names)
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

    def integrity(self, where):
        """Every hack class that leaves a trace outside the output, checked after each phase."""
        bad = _patched(self.snap)
        if bad:
            raise Reject("rejected", "harness_patched",
                         f"candidate replaced {', '.join(sorted(bad)[:5])} (during {where})")
        flags = _flags()
        changed = [f"{k}: {self.flags0[k]} -> {flags[k]}" for k in flags if flags[k] != self.flags0[k]]
        if changed:
            raise Reject("rejected", "global_flag", f"candidate changed {'; '.join(changed)} (during {where})")
        for k, v in self.task_vars.items():
            if vars(self.task).get(k) != v:
                raise Reject("rejected", "problem_size_changed",
                             f"candidate changed the task's {k} from {v!r} (during {where})")
        alive = [t for t in threading.enumerate() if t.ident not in self.threads0 and t.is_alive()]
        if alive:
            raise Reject("rejected", "thread", f"candidate left {len(alive)} thread(s) running "
                         f"({alive[0].name}) after {where}")
        if self._global_hooks() != self.hooks0:
            raise Reject("rejected", "forward_hook", f"candidate registered global module hooks ({where})")

    def watch_forward(self, new):
        """Remember how `new` is called, so rebinding forward/__call__ later is caught."""
        self.fwd0 = (type(new).forward, type(new).__call__, new.__dict__.get("forward"),
                     new.__dict__.get("__call__"))
        if any(m._forward_hooks or m._forward_pre_hooks for m in new.modules()):
            raise Reject("rejected", "forward_hook", "ModelNew registers forward hooks")

    def check_forward(self, new, where):
        now = (type(new).forward, type(new).__call__, new.__dict__.get("forward"),
               new.__dict__.get("__call__"))
        if any(a is not b for a, b in zip(now, self.fwd0)):
            raise Reject("rejected", "forward_rebound", f"ModelNew's forward/__call__ was rebound during {where}")
        if any(m._forward_hooks or m._forward_pre_hooks for m in new.modules()):
            raise Reject("rejected", "forward_hook", f"ModelNew registered forward hooks during {where}")


# ----------------------------------------------------------------------------------------
# Correctness and timing

def run_checks(h):
    """Correctness (README, "How a candidate is judged"): several weight seeds, fresh input
    sets each, candidate called first on every set (so no reference result sits in freed
    memory), with checks for side streams, mutated inputs, cached results and rebinding.
    -> (ref, new, ref64) of the first seed, for timing and the check after it."""
    cfg, seed0 = h.cfg, h.job["seed"]
    errs, tols, constant, kept = [], [], True, None
    for s in range(cfg["check_seeds"]):
        ref, new = h.models(seed0 + 1000 * s)
        h.watch_forward(new)
        h.integrity("ModelNew.__init__")
        ref64 = correctness.float64_copy(ref)
        prints = []  # (candidate, reference) fingerprints of this seed's calls
        xs = None
        for k in range(cfg["check_inputs"] + 1):
            refill = 0 < k == cfg["check_inputs"]  # last round: same tensors, new values
            fresh = h.inputs(seed0 + 1000 * s + k + 1)
            if refill:  # caches keyed by address, id or shape hit here and replay old results
                for x, f in zip(xs, fresh):
                    if isinstance(x, torch.Tensor):
                        x.copy_(f)
                fresh = None
            else:
                xs = fresh
            clones = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
            correctness.poison(h.out_specs, h.dev)
            where = f"seed {s}, input set {k}"
            before = kernels.KERNEL_CALLS[0]
            try:
                out = new(*xs)
                snap = [t.clone() for t in tensors(out)]  # what the caller's stream sees now
                h.sync()
                if not h.cuda:
                    time.sleep(0.005)
            except Exception as e:
                raise classify(e, "ModelNew.forward") from e
            h.calls += kernels.KERNEL_CALLS[0] - before
            if any(not correctness.same_bits(a, b) for a, b in zip(snap, tensors(out))):
                raise Reject("rejected", "side_stream" if h.cuda else "background_work",
                             "output changed after forward returned: work left running on an "
                             + ("unjoined stream" if h.cuda else "other thread") + f" ({where})")
            for i, (x, c) in enumerate(zip(xs, clones)):
                if isinstance(x, torch.Tensor) and not correctness.same_bits(x, c):
                    raise Reject("rejected", "input_mutated", f"input {i} was modified in place ({where})")
            h.check_forward(new, "forward")
            h.integrity("forward")
            had64 = ref64 is not None
            r32, r64, ref64 = correctness.reference_outputs(ref, ref64, clones)
            if had64 and ref64 is None and h.cuda:  # no float64 kernel: give its memory back
                torch.cuda.empty_cache()
            fp, rp = correctness.fingerprint(out), correctness.fingerprint(r32)
            for pf, pr in prints:
                if correctness.same_fingerprint(fp, pf) and not correctness.same_fingerprint(rp, pr):
                    raise Reject("rejected", "cached_output", "output repeats an earlier call's result for "
                                 f"different inputs: results cached across calls ({where})")
            err, tol = correctness.compare(out, r32, r64, cfg["allow_lowp"], where)
            errs.append(err)
            tols.append(tol)
            constant &= all(correctness.same_fingerprint(rp, pr) for _, pr in prints)
            prints.append((fp, rp))
            del out, r32, r64, snap
        if kept is None:
            kept = (ref, new, ref64)
        del ref64
    h.max_err, h.tol = max(errs), min(tols)
    if constant:  # the output never changed with the input, like the all-zero task that scored 120x
        h.flags.append("input_independent")
    return kept


def _spread(xs):
    return (max(xs) - min(xs)) / kernels.median(xs) if xs and kernels.median(xs) > 0 else 0.0


def run_timing(h, ref, new):
    """Reference and candidate timed under the same conditions: warm-up, a
    cache flush before every call, a device-wide synchronize before the end mark, a pool of
    fresh input sets, the two interleaved in random order, median of runs per round, more
    rounds while rounds disagree, and a longer re-measure for implausible speedups."""
    cfg, seed = h.cfg, h.job["seed"]
    ref_fn = torch.compile(ref) if cfg["baseline"] == "compile" else ref
    x0 = h.inputs(seed + 7)
    set_bytes = max(1, sum(x.numel() * x.element_size() for x in tensors(x0)))
    budget = min(4e9, 0.25 * torch.cuda.mem_get_info()[0]) if h.cuda else 5e8
    pool = [x0] + [h.inputs(seed + 8 + i) for i in range(int(min(7, budget // set_bytes)))]
    if h.cuda:
        flush = torch.empty(2 * torch.cuda.get_device_properties(h.dev).L2_cache_size,
                            dtype=torch.uint8, device=h.dev)
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    else:
        flush = torch.empty(32 << 20, dtype=torch.uint8)
    step = [0]

    def timed(fn):
        xs = pool[step[0] % len(pool)]
        step[0] += 1
        flush.zero_()
        h.sync()
        if h.cuda:
            ev0.record()
            fn(*xs)
            h.sync()  # all streams of the device, not just the current one
            ev1.record()
            ev1.synchronize()
            return ev0.elapsed_time(ev1)
        t0 = h.clock()
        fn(*xs)
        return (h.clock() - t0) * 1e3

    try:
        for _ in range(2):
            timed(ref_fn), timed(new)
        est = [kernels.median([timed(fn) for _ in range(3)]) for fn in (ref_fn, new)]
    except Exception as e:
        raise classify(e, "timing") from e
    rng = random.Random(seed)

    def measure(runs, rounds):
        rr, rn = [], []
        t0 = h.clock()
        # extra rounds while rounds disagree, up to max_rounds and 4x the planned time
        while len(rr) < rounds or (len(rr) < cfg["max_rounds"] and max(_spread(rr), _spread(rn)) > cfg["spread_limit"]
                                   and h.clock() - t0 < 4 * rounds * max(cfg["round_seconds"], runs * sum(est) / 1e3)):
            tr, tn = [], []
            for _ in range(runs):
                pair = [(ref_fn, tr), (new, tn)]
                rng.shuffle(pair)
                for fn, acc in pair:
                    acc.append(timed(fn))
            rr.append(kernels.median(tr))
            rn.append(kernels.median(tn))
        return rr, rn

    runs = int(min(cfg["max_runs"], max(cfg["min_runs"], cfg["round_seconds"] * 1e3 / max(1e-3, sum(est)))))
    # Slow programs (min_runs calls overrun a round twice over) get at most 3 rounds: their
    # speedups are far from 1 and their time is better spent on the next candidate.
    rounds = cfg["timing_rounds"] if runs * sum(est) <= 2e3 * cfg["round_seconds"] else min(3, cfg["timing_rounds"])
    try:
        rr, rn = measure(runs, rounds)
        speedup = kernels.median(rr) / kernels.median(rn)
        if speedup > cfg["suspicious_speedup"]:  # implausible: measure again, twice as long
            rr, rn = measure(2 * runs, rounds)
            h.notes.append(f"speedup {speedup:.1f}x re-measured")
    except Exception as e:
        raise classify(e, "timing") from e
    h.check_forward(new, "timing")
    h.integrity("timing")
    ratios = [a / b for a, b in zip(rr, rn)]
    return kernels.median(rr), kernels.median(rn), _spread(ratios)


def check_after_timing(h, ref, new, ref64):
    """One more fresh input set after timing: a candidate that turns wrong once it has been
    checked (counting calls, say) is caught here."""
    xs = h.inputs(h.job["seed"] + 999)
    correctness.poison(h.out_specs, h.dev)
    try:
        out = new(*xs)
        h.sync()
    except Exception as e:
        raise classify(e, "ModelNew.forward after timing") from e
    r32, r64, _ = correctness.reference_outputs(ref, ref64, xs)
    correctness.compare(out, r32, r64, h.cfg["allow_lowp"], "check after timing")


# ----------------------------------------------------------------------------------------
# The jobs, and the worker processes that run them

def run_job(job):
    """In a worker: judge one candidate on one task -> dict of Verdict fields."""
    h = Harness(job)
    cfg, t0 = h.cfg, h.clock()
    res = {}
    with torch.no_grad():
        try:
            ref, xs, out, _ = h.run_reference()
            if cfg["baseline"] == "compile":
                torch.compile(ref)(*xs)  # dynamo wraps torch functions on first use: do it before the snapshot
                h.sync()
            del ref, out, xs
        except Exception as e:
            return dict(status="task_error", reason="reference_failed",
                        message=f"the reference failed: {type(e).__name__}: {str(e)[:300]}",
                        log=kernels.trim_log(traceback.format_exc()))
        try:
            h.load_candidate()
            t1 = h.clock()
            ref, new, ref64 = run_checks(h)
            if cfg["require_kernel"] and h.calls == 0:
                raise Reject("rejected", "no_kernel", "forward never called a compiled kernel")
            t2 = h.clock()
            if cfg["time_candidates"]:
                ref_ms, new_ms, spread = run_timing(h, ref, new)
                check_after_timing(h, ref, new, ref64)
                res = dict(status="ok", speedup=ref_ms / new_ms, ref_ms=ref_ms, new_ms=new_ms, spread=spread,
                           message="; ".join(h.notes))
            else:  # Stages 1-2 filter on correctness alone (paper section 3.1-3.2)
                res = dict(status="ok", message="correct (not timed)")
            res["seconds"] = dict(load=t1 - t0, check=t2 - t1, time=h.clock() - t2)
        except Reject as r:
            res = dict(status=r.status, reason=r.reason, message=r.message, log=kernels.trim_log(r.extra.get("log", "")))
            if "err" in r.extra:
                res.update(max_err=r.extra["err"], tol=r.extra["tol"])
        except BaseException as e:  # SystemExit, KeyboardInterrupt raised by candidate code
            r = classify(e, "evaluation")
            res = dict(status=r.status, reason=r.reason, message=r.message,
                       log=kernels.trim_log(_candidate_traceback(e, os.path.join(h.workdir, "candidate.py"))))
    res.setdefault("max_err", h.max_err)
    res.setdefault("tol", h.tol)
    res.update(flags=h.flags, kernel_calls=h.calls)
    return res


def reference_job(job):
    """In a worker: load a task and run its reference once (for checking task sets)."""
    h = Harness(job)
    with torch.no_grad():
        try:
            _, _, out, ms = h.run_reference()
        except Exception as e:
            r = classify(e, "the reference")
            return dict(status="task_error", reason=r.reason, message=r.message,
                        log=kernels.trim_log(traceback.format_exc()))
    shapes = [tuple(t.shape) for t in tensors(out)]
    return dict(status="ok", ref_ms=ms, message=f"output {shapes}")


def compile_job(job):
    """In a worker without a GPU: import the candidate so that its builds (load_cuda,
    load_cpp, load_inline at module level) land in the cache. Only build failures are
    reported; anything else is left for the run phase to judge with a GPU."""
    path = os.path.join(job["workdir"], "candidate.py")
    try:
        ast.parse(job["code"])
        _import_code(job["code"], "kb_candidate_" + job["source_hash"], path)
    except BaseException as e:
        r = classify(e, "import")
        if r.status == "compile_error":
            return dict(status=r.status, reason=r.reason, message=r.message,
                        log=kernels.trim_log(r.extra.get("log") or _candidate_traceback(e, path)))
    return dict(status="built")


def standby_main(conn, env, cores):
    """A CUDA run worker started ahead of its job: context up, then wait for the job."""
    os.setsid()
    os.environ.update(env)
    if cores:
        os.sched_setaffinity(0, cores)
    try:
        torch.empty(1, device="cuda")
    except Exception:
        pass  # the job will meet the same error and report it
    try:
        msg = conn.recv()
    except EOFError:  # the evaluator went away
        os._exit(0)
    if msg is None:
        os._exit(0)
    child_main(msg[0], conn, msg[1])


def child_main(kind, conn, job):
    """Entry of every worker process: a session of its own (so a kill takes its compilers
    too), output to a log file, then one job, its result sent back, and a hard exit."""
    if os.getsid(0) != os.getpid():
        os.setsid()
    os.environ.update(job["env"])
    fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 20, 256 << 20))  # a print flood ends here
    if job.get("cores"):
        os.sched_setaffinity(0, job["cores"])
    if not (kind != "compile" and job["backend"] == "cuda"):  # CUDA maps huge address ranges
        # a candidate asking for terabytes gets an error, not the machine's OOM killer
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        resource.setrlimit(resource.RLIMIT_AS, (ram, ram))
    try:
        if job["backend"] == "cpu" and kind == "run":
            _cpu_worker_setup(job)
        res = {"compile": compile_job, "run": run_job, "reference": reference_job}[kind](job)
    except BaseException as e:
        res = dict(status="runtime_error", reason="harness", message=f"{type(e).__name__}: {e}"[:300],
                   log=kernels.trim_log(traceback.format_exc()))
    try:
        conn.send(res)
        conn.close()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)  # skip atexit handlers and finalizers the candidate may have left


def _cpu_worker_setup(job):
    """CPU timing worker: all its cores for torch, and freed heap blocks kept in the heap
    (not returned to the OS) so the output poison survives for the allocator to hand out."""
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)   # M_MMAP_THRESHOLD: the largest value glibc accepts
        libc.mallopt(-1, 1 << 30)    # M_TRIM_THRESHOLD
    except OSError:
        pass

