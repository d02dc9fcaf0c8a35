"""What the harness watches inside an evaluator worker, set up before any candidate runs:
global flags (read and written through functions captured here), identity snapshots of
callables, torch's own wrappers told apart from tampering, the origin of each thread, and
calls into compiled kernels counted. Helpers only: candidate code runs in harness.py.
"""
import contextlib
import os
import re
import sys
import sysconfig
import threading
import types
import warnings

import torch

from . import seccomp
from .builds import KERNEL_CALLS, _caller_file, cite_inline
from .correctness import malloc_again


def flag_table():
    """Global settings a candidate might change: name -> (read, write or None). Captured when
    the worker starts, before any candidate can patch the functions."""
    b = torch.backends

    def attr(obj, name):
        return (lambda: getattr(obj, name)), (lambda v: setattr(obj, name, v))
    return dict(  # matmul_precision before matmul_tf32: setting the first sets the second too
        matmul_precision=(torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        matmul_tf32=attr(b.cuda.matmul, "allow_tf32"), cudnn_tf32=attr(b.cudnn, "allow_tf32"),
        cudnn_enabled=attr(b.cudnn, "enabled"), cudnn_benchmark=attr(b.cudnn, "benchmark"),
        cudnn_deterministic=attr(b.cudnn, "deterministic"),
        fp16_reduced=attr(b.cuda.matmul, "allow_fp16_reduced_precision_reduction"),
        bf16_reduced=attr(b.cuda.matmul, "allow_bf16_reduced_precision_reduction"),
        deterministic=(torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms),
        mkldnn=attr(b.mkldnn, "enabled"),
        # autograd's state: recording a graph (and, in anomaly mode, a stack trace) for every
        # op of the reference is a cost per op, which a fused candidate pays once
        grad=(torch.is_grad_enabled, torch.set_grad_enabled), anomaly=(torch.is_anomaly_enabled, torch.set_anomaly_enabled),
        default_dtype=((lambda get=torch.get_default_dtype: str(get())), None),
        threads=(torch.get_num_threads, None),
        # Python code run for every torch call or op (a TorchFunctionMode, torch.set_default_device,
        # a TorchDispatchMode) or a profiler recording each: this thread's, read only
        function_modes=(torch._C._len_torch_function_stack, None),
        dispatch_modes=(torch._C._len_torch_dispatch_stack, None),
        profiler=(torch._C._autograd._profiler_enabled, None),
        # the worker's own threads (torch's pool) pinned to fewer cores: its parallel ops slow down
        threads_moved=(_threads_moved, None),
        # OpenMP's max-active-levels (this thread's): 0 makes every parallel region of torch's
        # CPU ops serial, and a candidate's -fopenmp library shares torch's runtime
        **({"omp_levels": (omp.omp_get_max_active_levels, omp.omp_set_max_active_levels)} if (omp := _openmp()) else {}))


def _openmp():
    """The OpenMP runtime torch's CPU ops run on (libgomp, or Intel's or LLVM's), as loaded in
    this process -> ctypes library, or None (none loaded: torch built without OpenMP)."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if re.search(r"/lib(gomp|iomp5|omp)[-.\w]*\.so", line)})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            lib.omp_get_max_active_levels.restype = ctypes.c_int
            return lib
        except (OSError, AttributeError):
            continue
    return None


_GET_AFFINITY = os.sched_getaffinity
_CORES = {}  # tid -> its cores, for the threads watch_affinity was given


def watch_affinity(tids, but_this_thread=False):
    """Remember the cores of these threads (the worker's own, before the candidate loads);
    but_this_thread: leave out the calling thread (on a GPU the gate moves it). Its tid is
    asked of the kernel: in a forked worker, threading.main_thread().native_id still names
    the thread of the process it was forked from."""
    _CORES.clear()
    for t in set(tids) - ({str(threading.get_native_id())} if but_this_thread else set()):
        try:
            _CORES[int(t)] = _GET_AFFINITY(int(t))
        except OSError:
            pass


def _threads_moved():
    """How many of the watched threads now run on other cores (one that ended: not moved)."""
    moved = 0
    for t, cores in _CORES.items():
        try:
            moved += _GET_AFFINITY(t) != cores
        except OSError:
            pass
    return moved


FLAGS = flag_table()


# The kernels the dispatcher runs for a plain tensor's op: a candidate that registers its own
# for an op the reference uses (torch.library "IMPL" on aten::addmm, say, or TORCH_LIBRARY_IMPL
# in a C++ extension) slows or changes the reference. Meta, Python, functionalization and the
# like serve tracing and compilation, where torch itself registers kernels later.
DISPATCH_KEYS = {"CPU", "CUDA", "BackendSelect", "ADInplaceOrView", "Autograd", "AutogradCPU", "AutogradCUDA",
                 "AutogradOther", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                 "CompositeExplicitAutogradNonFunctional"}
_OP_NAMES, _DUMP = torch._C._dispatch_get_all_op_names, torch._C._dispatch_dump  # captured at import


def dispatch_table(names=None):
    """{op: a hash of its kernels for DISPATCH_KEYS} for aten and prims ops (those of `names`),
    from the dispatcher's own listing: about 50 ms for all of them."""
    names = names or [n for n in _OP_NAMES() if n.startswith(("aten::", "prims::"))]
    return {n: hash(tuple(line for line in _DUMP(n).splitlines()
                          if line.partition(":")[0].partition("[")[0] in DISPATCH_KEYS)) for n in names}


def overridden(table):
    """-> the ops of `table` (dispatch_table) whose kernels changed since."""
    now = dispatch_table(list(table))
    return [n for n, h in table.items() if now[n] != h]
# The flag policy (EVAL.md, "How a candidate is judged"): whatever a candidate sets applies to
# its own calls only and is undone after each; numerics flags (TF32, matmul precision) are
# then judged by the float64 comparison. Speed-only flags also apply to the reference while
# timing, so they earn nothing by themselves. The harness's own conditions are fixed.
SPEED_FLAGS = ("cudnn_benchmark",)
FIXED_FLAGS = ("default_dtype", "threads", "function_modes", "dispatch_modes", "profiler", "threads_moved")


def read_flags():
    with warnings.catch_warnings():  # the TF32 attributes warn about a newer API
        warnings.simplefilter("ignore")
        return {k: get() for k, (get, _) in FLAGS.items()}


def write_flags(values):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, (get, put) in FLAGS.items():
            if put is not None and k in values and get() != values[k]:
                put(values[k])


# Settings torch can set but not read back: oneDNN's and MKL's verbose modes, which print a
# line for every primitive run (a convolution took 2.3x as long with oneDNN's on), and glibc's
# malloc settings (correctness._MALLOC). Turned off (written again) after each candidate call and
# before each reference call, so a candidate's apply to its own.
_verbose = getattr(torch._C, "_verbose", None)
_QUIET = [f for f in (getattr(_verbose, "mkldnn_set_verbose", None), getattr(_verbose, "mkl_set_verbose", None)) if f]


def quiet():
    for f in _QUIET:
        f(0)
    malloc_again()


INHERITED = object()  # a class attribute found on a base class, not on the class itself


def snapshot(objs):
    """Identity of every callable attribute of the given objects, and of the code each runs:
    the harness's clocks, synchronisation, comparisons, torch's namespace, the reference's
    module classes. For a class, the names it inherits too: defining one on the class later
    shadows the base's. The code object is kept because replacing a function's __code__
    changes what it does while its identity stays."""
    snap = {}
    for label, obj in objs:
        for k, v in list(vars(obj).items()):
            if callable(v) or isinstance(v, (staticmethod, classmethod, property)):
                snap[(label, k)] = (obj, v, _code(v))
            elif isinstance(obj, types.ModuleType) and obj.__name__.partition(".")[0] == "kernels" \
                    and not k.startswith("__"):
                # the harness's own constants: a candidate that emptied guards.FIXED_FLAGS or
                # checks.DISTRIBUTIONS, or set timing.SPOT_CHECKS to 0, would switch a check off.
                # Immutable values by identity; the public dicts and sets by their contents (a
                # private one, _MALLOC say, is state the harness itself writes)
                if isinstance(v, _IMMUTABLE):
                    snap[(label, k)] = (obj, v, None)
                elif isinstance(v, (dict, set)) and k.isupper() and not k.startswith("_"):
                    snap[(label, k)] = (obj, v, _Contents(_contents(v)))
        if isinstance(obj, type):
            for k in dir(obj):
                if k not in vars(obj) and callable(getattr(obj, k, None)):
                    snap[(label, k)] = (obj, INHERITED, None)
    return snap


_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset)


class _Contents(tuple):
    """A container's items when the snapshot was taken (snapshot)."""


def _contents(v):
    return tuple(sorted(v, key=repr)) if isinstance(v, set) else tuple(v.items())


def _same_contents(v, then):
    now = _contents(v)
    return len(now) == len(then) and all(a is b or (isinstance(a, tuple) and len(a) == 2 and a[0] == b[0]
                                                    and a[1] is b[1]) for a, b in zip(now, then))


def _code(v):
    f = getattr(v, "__func__", v)  # a method, staticmethod or classmethod: its function
    return getattr(f, "__code__", None)


def torch_wrapper(new, old):
    """True when `new` is torch's own wrapper around `old`, as torch.compile installs on first
    use (torch.manual_seed, nn.Module.__init__): torch's code, holding the original."""
    code = getattr(new, "__code__", None)
    if code is None or not os.path.abspath(code.co_filename).startswith(TORCH_DIR):
        return False
    held = [c.cell_contents for c in (new.__closure__ or ()) if c.cell_contents is not None]
    return getattr(new, "__wrapped__", None) is old or any(h is old for h in held)


TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def patched(snap):
    return [f"{label}.{k}" for (label, k), (obj, v, code) in snap.items()
            if (vars(obj).get(k, INHERITED) is not v and not torch_wrapper(vars(obj).get(k), v))
            or (isinstance(code, _Contents) and not _same_contents(v, code))
            or (code is not None and not isinstance(code, _Contents) and _code(v) is not code)]


def interpreter_hooks():
    """What the interpreter runs besides the program: trace and profile functions (this
    thread's and those given to new threads), signal handlers, interval timers. A hook that
    busy-waits while the reference runs slows it down unseen in the output."""
    import signal
    timers = tuple(signal.getitimer(t) != (0.0, 0.0) for t in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL,
                                                                   signal.ITIMER_PROF))
    handlers = tuple(signal.getsignal(s) for s in sorted(signal.valid_signals())
                     if s not in (signal.SIGKILL, signal.SIGSTOP))
    return dict(trace=sys.gettrace(), profile=sys.getprofile(), thread_trace=getattr(threading, "_trace_hook", None),
                thread_profile=getattr(threading, "_profile_hook", None), timers=timers, handlers=handlers,
                kernel_handlers=kernel_handlers())


def kernel_handlers():
    """Each signal's handler as the kernel holds it (rt_sigaction, asking only): Python's view
    (getsignal) misses one set by compiled code or a raw system call."""
    import ctypes
    out = []
    for sig in range(1, 65):
        if sig in seccomp.HANDLED:
            # the filter lets these be handled (the compilers a build starts need them) and
            # torch.compile sets some during an honest first call; none can be raised from
            # inside the job but CHLD, and Python's view above still sees Python's handlers
            out.append(None)
            continue
        act = (ctypes.c_ulong * 4)()  # handler, flags, restorer, mask: the kernel's struct
        out.append(act[0] if _SYSCALL(_RT_SIGACTION, sig, None, act, 8) == 0 else None)
    return tuple(out)


def _raw_syscall():
    import ctypes
    import platform
    f = ctypes.CDLL(None, use_errno=True).syscall
    f.restype = ctypes.c_long
    return f, {"x86_64": 13, "aarch64": 134}.get(platform.machine(), -1)


_SYSCALL, _RT_SIGACTION = _raw_syscall()  # captured at import, like the flags


def changed_hooks(before):
    now = interpreter_hooks()
    return [k for k in before if now[k] != before[k]]


class Counted:
    """A torch extension module (load_inline, load) whose functions count their calls."""

    def __init__(self, mod):
        object.__setattr__(self, "_mod", mod)

    def __getattr__(self, name):
        v = getattr(self._mod, name)
        if not callable(v) or isinstance(v, type):
            return v

        def counted(*args, **kwargs):
            KERNEL_CALLS[0] += 1
            return v(*args, **kwargs)
        return counted


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _source_files(paths, seen=None):
    """The contents of a build's source files and of the local headers they include
    ("quoted" includes found beside them), by name: what the build's output depends on
    besides its flags, unlike the files' paths and times."""
    seen = {} if seen is None else seen
    for p in paths:
        if isinstance(p, str) and p not in seen and os.path.isfile(p):
            with open(p, "rb") as f:
                seen[p] = data = f.read()
            here = os.path.dirname(os.path.abspath(p))
            _source_files([os.path.join(here, inc) for inc in _INCLUDE.findall(data.decode("latin-1"))], seen)
    return sorted((os.path.basename(p), d) for p, d in seen.items())


def remember_builds(folder):
    """torch's extension builds (load_inline, load) are remembered in `folder` (the program's
    own part of the build cache, which only identical programs share), keyed by their
    arguments, the contents of their source files and the target architectures:
    - a build that failed fails at once afterwards, with the same error. A failing nvcc run
      with torch's headers costs tens of seconds, which published kernels that catch the
      error and fall back to PyTorch would pay at every construction (check, second timer,
      KernelBench's verdict);
    - a module that built is imported from its copy afterwards. `load` of files the candidate
      writes into its working folder at every construction (as several published kernels
      do) rebuilds each time otherwise (ninja sees new paths and times), a minute per job.
    The compiler is deterministic; a candidate that writes here only changes its own loads."""
    import hashlib
    import importlib.util
    import shutil
    import torch.utils.cpp_extension as cx

    def wrap(fn):
        def build(*args, **kwargs):
            sources = kwargs.get("sources", args[1] if fn.__name__ == "load" and len(args) > 1 else None)
            paths = [sources] if isinstance(sources, str) else list(sources or [])
            files = _source_files(paths)
            key = repr((fn.__name__, args, sorted(kwargs.items()), files, os.environ.get("TORCH_CUDA_ARCH_LIST")))
            # each job has a work folder of its own, and some write their sources into a fresh
            # temporary folder (tempfile.mkdtemp) at every import: where the sources are is no part of it
            for d in sorted({os.path.dirname(os.path.abspath(p)) for p in paths if isinstance(p, str)} | {os.getcwd()},
                            key=len, reverse=True):
                key = key.replace(d, "<folder>")
            memo = os.path.join(folder, "memo-" + hashlib.sha256(key.encode()).hexdigest()[:24])
            if os.path.exists(memo + ".txt"):
                with open(memo + ".txt") as f:
                    raise RuntimeError(f.read())
            name = kwargs.get("name", args[0] if args else None)
            plain = isinstance(name, str) and kwargs.get("is_python_module", True) and not kwargs.get("is_standalone")
            if plain and os.path.exists(memo + ".so"):
                spec = importlib.util.spec_from_file_location(name, memo + ".so")
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module
            try:
                module = fn(*args, **kwargs)
            except RuntimeError as e:
                if not str(e).startswith("Error building extension"):
                    raise
                text = cite_inline(str(e), _caller_file())  # the candidate's .py lines beside main.cpp's
                os.makedirs(folder, exist_ok=True)
                with open(memo + ".txt", "w") as f:
                    f.write(text)
                raise RuntimeError(text) from None
            so = getattr(module, "__file__", None)
            if plain and isinstance(module, types.ModuleType) and so and so.endswith(".so"):
                os.makedirs(folder, exist_ok=True)
                shutil.copyfile(so, memo + ".part")
                os.replace(memo + ".part", memo + ".so")  # whole or absent, for a job killed mid-copy
            return module
        return build
    cx.load_inline, cx.load = wrap(cx.load_inline), wrap(cx.load)


def count_torch_extensions(around=contextlib.nullcontext, count=True):
    """Make KernelBench-style extensions count toward kernel_calls, like load_cuda's (count);
    each build runs inside around() (gate.WorkerGate.building: host work the GPU gate may stop
    anywhere)."""
    import torch.utils.cpp_extension as cx

    def wrap(fn):
        def loader(*args, **kwargs):
            with around():
                m = fn(*args, **kwargs)
            return Counted(m) if count and isinstance(m, types.ModuleType) else m
        return loader
    cx.load_inline, cx.load = wrap(cx.load_inline), wrap(cx.load)


def count_triton_launches():
    """Make launches of Triton kernels (`fn[grid](...)`, through an autotuner too: the compiled
    kernel's run, or the interpreter's on a CPU) count toward kernel_calls, like load_cuda's
    calls. -> the classes wrapped, for the integrity snapshot ([] without Triton)."""
    try:
        from triton.runtime import interpreter, jit
    except ImportError:
        return []
    classes = [jit.JITFunction, interpreter.InterpretedFunction]

    def wrap(run):
        def counted(self, *args, **kwargs):
            out = run(self, *args, **kwargs)
            if not kwargs.get("warmup"):  # after it: a call that fails to launch counts nothing
                KERNEL_CALLS[0] += 1
            return out
        return counted
    for cls in classes:
        cls.run = wrap(cls.run)
    return classes


PATHS = sysconfig.get_paths()
COMPILERS = tuple(os.path.join(TORCH_DIR, d, "") for d in ("_dynamo", "_inductor")) + tuple(
    os.path.join(PATHS[k], "triton", "") for k in ("purelib", "platlib")) + (
    # a build inside a call (load_inline, load_cuda, load_cpp at the first forward)
    os.path.join(TORCH_DIR, "utils", "cpp_extension.py"), os.path.join(os.path.dirname(__file__), "builds.py"))
LIBRARIES = tuple({os.path.join(PATHS[k], "") for k in ("purelib", "platlib")} | {TORCH_DIR})
# Python's own library too: code a candidate calls into, never the candidate's own
SYSTEM = tuple({os.path.join(PATHS[k], "") for k in ("stdlib", "platstdlib")}) + LIBRARIES


def stack(thread_id):
    """A thread's stack from the top, as file names. No frame outlives this call: one held
    (by the harness's watchdog, between its looks) would keep its locals alive, the
    candidate's tensors among them (a CUDA graph's pool then finds a tensor it does not
    track: torch.compile's "max-autotune" warmed up in a constructor)."""
    f, names = sys._current_frames().get(thread_id), []
    while f is not None:
        names.append(f.f_code.co_filename)
        f = f.f_back
    return names


def track_thread_origins():
    """Mark each thread with who started it: the first caller outside the standard library
    (threading, concurrent.futures, ...) in an installed package (torch.compile's compile
    workers, tqdm's monitor) or in the candidate's own code. Only the candidate's threads
    count as background work."""
    start = threading.Thread.start

    def tracked(thread, *args, **kwargs):
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith(PATHS["stdlib"]) and \
                not f.f_code.co_filename.startswith(LIBRARIES):
            f = f.f_back
        thread._started_by_library = f is not None and f.f_code.co_filename.startswith(LIBRARIES)
        return start(thread, *args, **kwargs)
    threading.Thread.start = tracked
