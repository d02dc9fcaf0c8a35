"""The evaluator: KernelBench tasks in, trustworthy verdicts out. The only file that runs
candidate code, always in worker processes (DESIGN.md sections 3-4).

    python evaluate.py --tasks builtin --solutions tasks/seeds/cpu      # the usual front end
    python -c "import kernels; print(kernels.load_tasks('builtin'))"

    import kernels
    with kernels.Evaluator(kernels.config.parse([])) as ev:
        [v] = ev.evaluate([(task, code)])       # v.status, v.reason, v.speedup, v.log ...

The project's own candidate format builds in seconds: CUDA (or C++) source free of torch
headers, compiled straight with nvcc (or g++) and called through ctypes:

    import kernels
    lib = kernels.load_cuda(r'''
    __global__ void relu_k(const float* x, float* y, long n) { ... }
    extern "C" void relu(const float* x, float* y, long n, cudaStream_t s) {
        relu_k<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);
    }''')
    ... lib.relu(x, y, x.numel())   # tensors pass as pointers; the stream is filled in

torch.utils.cpp_extension.load_inline solutions (KernelBench's format) work unchanged.
"""
import ast
import copy
import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import asdict, dataclass, field

import config

HERE = os.path.dirname(os.path.abspath(__file__))
BUILTIN_TASKS = os.path.join(HERE, "tasks")


def _sha(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def cache_root(cfg=None):
    d = (cfg or {}).get("cache_dir") or os.environ.get("CUDAL1_CACHE") or "~/.cache/cudal1"
    return os.path.abspath(os.path.expanduser(d))


# ----------------------------------------------------------------------------------------
# The candidate format: load_cuda / load_cpp build torch-free source in seconds

class BuildError(RuntimeError):
    """A candidate's source did not compile; the message is the compiler's log."""


# C parameter types a launcher may take, and how Python arguments become them.
_INT32 = {"int", "int32_t", "unsigned", "unsigned int", "uint32_t"}
_INT64 = {"long", "long int", "long long", "int64_t", "uint64_t", "size_t", "ptrdiff_t",
          "unsigned long", "unsigned long long", "long long int"}


def _param_kind(decl):
    """'const float* __restrict__ x' -> 'ptr'; 'cudaStream_t s' -> 'stream'; ..."""
    decl = re.sub(r"\b(const|volatile|__restrict__|__restrict|restrict)\b", " ", decl)
    if "*" in decl or "[" in decl:
        return "ptr"
    words = decl.split()
    base = " ".join(words[:-1]) if len(words) > 1 else " ".join(words)
    if base == "cudaStream_t":
        return "stream"
    if base in ("float",):
        return "float"
    if base in ("double",):
        return "double"
    if base in ("bool",):
        return "bool"
    if base in _INT32:
        return "int32"
    if base in _INT64:
        return "int64"
    raise BuildError(f"unsupported parameter type in exported function: {decl.strip()!r} "
                     "(use pointers, int, long, int64_t, size_t, float, double, bool, cudaStream_t)")


_CTYPE = {"ptr": ctypes.c_void_p, "stream": ctypes.c_void_p, "float": ctypes.c_float,
          "double": ctypes.c_double, "bool": ctypes.c_bool, "int32": ctypes.c_int32,
          "int64": ctypes.c_int64}

_EXPORT = re.compile(r'extern\s+"C"\s+(?:__host__\s+)?(void|int|cudaError_t)\s+(\w+)\s*\(([^)]*)\)')


def parse_exports(src):
    """The `extern "C"` functions of a source: {name: (returns_int, [param kinds])}."""
    src = re.sub(r"//[^\n]*|/\*.*?\*/", " ", src, flags=re.S)
    out = {}
    for ret, name, params in _EXPORT.findall(src):
        params = params.strip()
        kinds = [] if params in ("", "void") else [_param_kind(p) for p in params.split(",")]
        out[name] = (ret != "void", kinds)
    return out


# Appended to every CUDA source: the library links its own static CUDA runtime, whose
# launch errors (bad grid, too much shared memory) torch's runtime never sees.
_CUDA_TAIL = """
extern "C" int kernels_last_error_(void) { return (int)cudaGetLastError(); }
extern "C" const char* kernels_error_string_(int e) { return cudaGetErrorString((cudaError_t)e); }
"""

KERNEL_CALLS = [0]  # calls into compiled candidate code, for the require_kernel policy


class Kernel:
    """One exported launcher. Tensors become pointers; cudaStream_t parameters are filled
    with torch's current stream and are not passed by the caller."""

    def __init__(self, fn, name, returns_int, kinds, lib):
        self.fn, self.name, self.returns_int, self.kinds, self.lib = fn, name, returns_int, kinds, lib
        fn.argtypes = [_CTYPE[k] for k in kinds]
        fn.restype = ctypes.c_int if returns_int else None
        self.nargs = sum(k != "stream" for k in kinds)

    def __call__(self, *args):
        import torch
        if len(args) != self.nargs:
            raise TypeError(f"{self.name}() takes {self.nargs} arguments "
                            f"(cudaStream_t is filled in), got {len(args)}")
        cargs, it = [], iter(args)
        for k in self.kinds:
            if k == "stream":
                cargs.append(torch.cuda.current_stream().cuda_stream)
                continue
            a = next(it)
            if k == "ptr" and isinstance(a, torch.Tensor):
                if a.is_cuda != self.lib.cuda:
                    raise TypeError(f"{self.name}(): a {a.device} tensor passed to a "
                                    f"{'CUDA' if self.lib.cuda else 'CPU'} kernel")
                a = a.data_ptr()
            elif isinstance(a, torch.Tensor):
                a = a.item()
            cargs.append(a)
        ret = self.fn(*cargs)
        KERNEL_CALLS[0] += 1
        if self.lib.cuda:
            err = self.lib.dll.kernels_last_error_()
            if err:
                msg = self.lib.dll.kernels_error_string_(err).decode()
                raise RuntimeError(f"CUDA error after {self.name}(): {msg}")
        if self.returns_int and ret != 0:
            raise RuntimeError(f"{self.name}() returned error code {ret}")
        return ret


class KernelLib:
    """A compiled library; its exported functions are attributes."""

    def __init__(self, path, exports, cuda):
        self.path, self.cuda = path, cuda
        self.dll = ctypes.CDLL(path)
        if cuda:
            self.dll.kernels_last_error_.restype = ctypes.c_int
            self.dll.kernels_error_string_.restype = ctypes.c_char_p
            self.dll.kernels_error_string_.argtypes = [ctypes.c_int]
        for name, (returns_int, kinds) in exports.items():
            setattr(self, name, Kernel(getattr(self.dll, name), name, returns_int, kinds, self))


def _which(tool, env_home=None):
    if env_home:
        p = os.path.join(env_home, "bin", tool)
        if os.path.exists(p):
            return p
    p = shutil.which(tool)
    if p is None:
        raise BuildError(f"{tool} not found on PATH")
    return p


def cuda_arch():
    """'90' for an H100: from KERNELS_CUDA_ARCH (set by the evaluator) or the visible GPU."""
    arch = os.environ.get("KERNELS_CUDA_ARCH")
    if arch:
        return arch
    import torch
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}{minor}"
    raise BuildError("no GPU visible and KERNELS_CUDA_ARCH unset: cannot pick an architecture")


def _compile(src, suffix, cmd_for, toolchain):
    """Build src into a cached shared library; returns its path. One directory per source
    hash; builds go to a private temporary directory renamed into place, so concurrent
    builders never share a lock and a killed build leaves nothing that blocks the next."""
    root = os.path.join(cache_root(), "lib")
    os.makedirs(root, exist_ok=True)
    key = _sha(src, toolchain)
    final = os.path.join(root, key)
    so = os.path.join(final, "lib.so")
    if os.path.exists(so):
        return so
    if os.path.exists(final + ".err"):  # compile errors are deterministic: cache them too
        raise BuildError(open(final + ".err").read())
    tmp = tempfile.mkdtemp(prefix=key + ".tmp", dir=root)
    srcfile = os.path.join(tmp, "kernel" + suffix)
    with open(srcfile, "w") as f:
        f.write(src)
    cmd = cmd_for(srcfile, os.path.join(tmp, "lib.so"))
    timeout = float(os.environ.get("KERNELS_COMPILE_TIMEOUT", "600"))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp)
    except subprocess.TimeoutExpired:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(f"compiler timed out after {timeout:.0f} s") from None
    if r.returncode != 0:
        log = (r.stdout + r.stderr).replace(tmp + "/", "")
        with open(tmp + ".err", "w") as f:
            f.write(log)
        os.replace(tmp + ".err", final + ".err")
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(log)
    try:
        os.rename(tmp, final)
    except OSError:  # another worker finished the same source first
        shutil.rmtree(tmp, ignore_errors=True)
    return so


_TOOLCHAIN = {}


def _toolchain_id(path, extra):
    if path not in _TOOLCHAIN:
        st = os.stat(path)
        _TOOLCHAIN[path] = f"{path}:{st.st_size}:{st.st_mtime_ns}"
    return _TOOLCHAIN[path] + extra


def load_cuda(src, flags=()):
    """Compile CUDA source (no torch headers needed) with nvcc and load it."""
    nvcc = _which("nvcc", os.environ.get("CUDA_HOME"))
    arch = cuda_arch()
    src = src + _CUDA_TAIL
    exports = parse_exports(src)

    def cmd(srcfile, out):
        return [nvcc, "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
                f"-gencode=arch=compute_{arch},code=sm_{arch}", *flags, "-o", out, srcfile]
    so = _compile(src, ".cu", cmd, _toolchain_id(nvcc, f"sm_{arch}{list(flags)}"))
    return KernelLib(so, {k: v for k, v in exports.items() if not k.startswith("kernels_")}, True)


def load_cpp(src, flags=()):
    """Compile C++ source (OpenMP allowed) with g++ and load it."""
    cxx = _which(os.environ.get("CXX", "g++"))
    exports = parse_exports(src)
    if not exports:
        raise BuildError('no exported functions: declare launchers as extern "C" void name(...)')

    def cmd(srcfile, out):
        return [cxx, "-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-fopenmp",
                *flags, "-o", out, srcfile]
    so = _compile(src, ".cpp", cmd, _toolchain_id(cxx, f"{os.uname().machine}{list(flags)}"))
    return KernelLib(so, exports, False)


# ----------------------------------------------------------------------------------------
# Tasks and solutions: loading and matching (read as text here; executed only in workers)

class TaskError(ValueError):
    """A task file that cannot be used (syntax error, no Model, no get_inputs)."""


@dataclass
class Task:
    name: str                     # "softmax", or "L1_23_Softmax" for KernelBench problems
    code: str
    source: str                   # where it came from, for error messages
    level: int | None = None
    problem_id: int | None = None

    @property
    def hash(self):
        return _sha(self.code)


@dataclass
class Solution:
    code: str | None              # None: the record had no code (the CUDA-L1 release has some)
    name: str                     # where it came from
    task: str | None = None       # task name it belongs to, when known by name
    level: int | None = None
    problem_id: int | None = None
    ref_code: str | None = None   # a reference carried by the solution (CUDA-L1 release)


def _top_names(code):
    """Names defined at a module's top level (classes, functions, assignments, imports)."""
    names = set()
    for node in ast.parse(code).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def check_task_code(code, where):
    """Raise TaskError naming `where` unless code parses and defines Model and get_inputs."""
    try:
        names = _top_names(code)
    except SyntaxError as e:
        raise TaskError(f"{where}: syntax error at line {e.lineno}: {e.msg}") from None
    missing = [n for n in ("Model", "get_inputs") if n not in names]
    if missing:
        raise TaskError(f"{where}: not a KernelBench task: no {' and no '.join(missing)} defined")


_LEVEL = re.compile(r"level[_-]?(\d+)", re.I)
_PROBLEM = re.compile(r"problem[_-]?(\d+)", re.I)


def _kb_ids(relpath):
    """(level, problem_id) from KernelBench-style paths: level1/23_Softmax.py or
    level_1_problem_23_sample_0_kernel.py; (None, None) when absent."""
    lv, pid = _LEVEL.search(relpath), _PROBLEM.search(relpath)
    stem = os.path.basename(relpath)
    if pid is None:
        pid = re.match(r"(\d+)_", stem)
    if lv is None or pid is None:
        return None, None
    return int(lv.group(1)), int(pid.group(1))


def _kb_name(level, pid, name):
    return f"L{level}_{pid}_{name}".rstrip("_")


def _read_jsonl(path):
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield i, json.loads(line)
                except json.JSONDecodeError as e:
                    raise TaskError(f"{path}:{i}: not valid JSON ({e.msg})") from None


def load_tasks(spec):
    """'builtin' | a task .py | a folder (flat, or KernelBench's levelN/ layout) | a .jsonl
    with a `code` field (and level, problem_id, name) -> [Task], sorted."""
    if spec in ("builtin", "", None):
        spec = BUILTIN_TASKS
    if not os.path.exists(spec):
        raise TaskError(f"{spec}: no such file or folder (tasks are 'builtin', a .py, a folder or a .jsonl)")
    tasks = []
    if spec.endswith(".jsonl"):
        for i, r in _read_jsonl(spec):
            if "code" not in r:
                raise TaskError(f"{spec}:{i}: record has no 'code' field")
            lv, pid = r.get("level"), r.get("problem_id")
            name = _kb_name(lv, pid, r.get("name", "")) if lv is not None else r.get("name", f"task{i}")
            check_task_code(r["code"], f"{spec}:{i} ({name})")
            tasks.append(Task(name, r["code"], f"{spec}:{i}", lv, pid))
    elif os.path.isfile(spec):
        code = open(spec).read()
        check_task_code(code, spec)
        lv, pid = _kb_ids(os.path.relpath(spec, os.path.dirname(os.path.dirname(spec))))
        stem = os.path.splitext(os.path.basename(spec))[0]
        name = _kb_name(lv, pid, stem.split("_", 1)[-1]) if lv else stem
        tasks.append(Task(name, code, spec, lv, pid))
    else:
        for root, dirs, files in os.walk(spec):
            dirs[:] = sorted(d for d in dirs if d not in ("seeds", "__pycache__") and not d.startswith("."))
            for fn in sorted(files):
                if fn.endswith(".py") and not fn.startswith("_"):
                    path = os.path.join(root, fn)
                    code = open(path).read()
                    check_task_code(code, path)
                    lv, pid = _kb_ids(os.path.relpath(path, spec))
                    stem = fn[:-3]
                    name = _kb_name(lv, pid, stem.split("_", 1)[-1]) if lv else stem
                    tasks.append(Task(name, code, path, lv, pid))
    if not tasks:
        raise TaskError(f"{spec}: no tasks found")
    names = [t.name for t in tasks]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise TaskError(f"{spec}: duplicate task names {sorted(dup)}")
    return sorted(tasks, key=lambda t: (t.level or 0, t.problem_id or 0, t.name))


def select(tasks, only):
    """--only: a comma list of task names or KernelBench ids (L1_19); empty keeps all."""
    if not only:
        return tasks
    keep = {s.strip() for s in only.split(",")}
    out = [t for t in tasks if t.name in keep or (t.level is not None and f"L{t.level}_{t.problem_id}" in keep)]
    if not out:
        raise TaskError(f"--only {only}: no such task (tasks: {', '.join(t.name for t in tasks[:12])}...)")
    return out


def _no_code(v):
    return v is None or (isinstance(v, str) and v.strip() in ("", "None", "null"))


def load_solutions(spec):
    """A .py defining ModelNew | a folder of them (matched to tasks by folder or file name,
    or KernelBench ids in the path) | a .jsonl keyed by level and problem id, including the
    CUDA-L1 release layout (level_id, task_id, ref_code, custom_code) -> [Solution]."""
    if not os.path.exists(spec):
        raise TaskError(f"{spec}: no such solutions file or folder")
    sols = []
    if spec.endswith(".jsonl") or spec.endswith(".json"):
        for i, r in _read_jsonl(spec):
            lv = r.get("level", r.get("level_id"))
            pid = r.get("problem_id", r.get("task_id"))
            code = next((r[k] for k in ("custom_code", "code", "solution") if k in r), None)
            task = r.get("task") or r.get("name")
            if lv is None and task is None:
                raise TaskError(f"{spec}:{i}: record names no task (level/problem_id or task)")
            sols.append(Solution(None if _no_code(code) else code, f"{spec}:{i}", task,
                                 int(lv) if lv is not None else None,
                                 int(pid) if pid is not None else None,
                                 None if _no_code(r.get("ref_code")) else r.get("ref_code")))
    elif os.path.isfile(spec):
        sols.append(_solution_file(spec, os.path.dirname(spec)))
    else:
        for root, dirs, files in os.walk(spec):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            sols += [_solution_file(os.path.join(root, f), spec) for f in sorted(files)
                     if f.endswith(".py") and not f.startswith("_")]
    return sols


def _solution_file(path, base):
    rel = os.path.relpath(path, base)
    lv, pid = _kb_ids(rel)
    stem = os.path.splitext(os.path.basename(path))[0]
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return Solution(open(path).read(), path, task=None if lv else f"{parent}|{stem}",
                    level=lv, problem_id=pid)


def match(tasks, solutions):
    """Pair solutions with tasks -> ([(Task, Solution)], [unmatched Solution]). A solution
    with its own ref_code brings its own task; `tasks` then only filters (DESIGN.md 2)."""
    by_id = {(t.level, t.problem_id): t for t in tasks if t.level is not None}
    by_name = {t.name: t for t in tasks}
    pairs, unmatched = [], []
    for s in solutions:
        t = None
        if s.level is not None:
            t = by_id.get((s.level, s.problem_id))
        elif s.task is not None:
            parent, _, stem = s.task.rpartition("|")
            # a folder named after the task holds variants; else the file stem names it,
            # exactly or as a prefix (softmax_fast.py), longest task name first
            t = by_name.get(parent) or by_name.get(stem) or next(
                (by_name[n] for n in sorted(by_name, key=len, reverse=True)
                 if stem.startswith(n + "_")), None)
        if s.ref_code is not None and (t is not None or not by_id):
            name = t.name if t else _kb_name(s.level, s.problem_id, "")
            t = Task(name, s.ref_code, s.name, s.level, s.problem_id)
        if t is None and len(tasks) == 1 and len(solutions) == 1:
            t = tasks[0]  # one task, one solution: they go together whatever the names
        (pairs.append((t, s)) if t is not None else unmatched.append(s))
    return pairs, unmatched


def solution_backend(code):
    """'cuda' | 'cpu' | None (pure PyTorch): what a solution's compiled code targets."""
    if not code:
        return None
    if "load_cuda(" in code or "cuda_sources" in code or "__global__" in code:
        return "cuda"
    if "load_cpp(" in code or "cpp_sources" in code:
        return "cpu"
    return None


# ----------------------------------------------------------------------------------------
# Verdicts

STATUSES = ("ok", "incorrect", "rejected", "runtime_error", "timeout", "compile_error", "task_error")


@dataclass
class Verdict:
    task: str
    solution: str
    status: str                   # one of STATUSES
    reason: str = ""              # short key: mismatch, side_stream, cached_output, ...
    message: str = ""             # one line for humans and models
    speedup: float = 0.0          # reference time / candidate time; 0 unless ok
    ref_ms: float | None = None
    new_ms: float | None = None
    spread: float | None = None   # relative range of the per-round speedups
    max_err: float | None = None  # worst error against the float64 reference
    tol: float | None = None
    log: str = ""                 # trimmed compiler / runtime log a model can read
    flags: list = field(default_factory=list)    # task flags, e.g. input_independent
    seconds: dict = field(default_factory=dict)  # compile, check, time, total
    kernel_calls: int = 0
    source_hash: str = ""
    seed: int = 0

    @property
    def ok(self):
        return self.status == "ok"

    def to_dict(self):
        return asdict(self)


def trim_log(text, limit=2000):
    """Keep what a model needs from a long compiler or runtime log: the error lines with a
    little context first, then the tail, within `limit` characters."""
    text = text.replace("\r", "")
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    keep = set()
    for i, l in enumerate(lines):
        if re.search(r"error|Error|undefined|Traceback|Exception", l):
            keep.update(range(max(0, i - 1), min(len(lines), i + 3)))
    picked = "\n".join(lines[i] for i in sorted(keep))[: limit // 2]
    tail = text[-(limit - len(picked) - 20):]
    return (picked + "\n[...]\n" + tail) if picked else "[...]\n" + tail


class Reject(Exception):
    """A candidate failed a check: carries the verdict's status, reason and message."""

    def __init__(self, status, reason, message, **extra):
        super().__init__(message)
        self.status, self.reason, self.message, self.extra = status, reason, message, extra


def _classify(exc, where):
    """An exception from candidate code -> Reject with a specific reason."""
    import torch
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, BuildError):
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


# ----------------------------------------------------------------------------------------
# Inside a worker process: load, check, time. Everything below runs candidate code.

def _import_code(code, modname, path):
    """Execute source as a module from a real file (tracebacks, inspect and torch.compile
    need one) under a private name."""
    import importlib.util
    with open(path, "w") as f:
        f.write(code)
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod


def _tensors(x):
    """Flatten an output or input structure into its tensors."""
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for e in x for t in _tensors(e)]
    return []


def _double(xs):
    """Inputs for the float64 reference: floating tensors in float64, the rest as they are."""
    import torch
    return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]


def _flags():
    """Global backend settings the candidate must not change (DESIGN.md 4)."""
    import warnings
    import torch
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
            KERNEL_CALLS[0] += 1
            return v(*args, **kwargs)
        return counted


def _count_torch_extensions():
    """Make KernelBench-style extensions count toward kernel_calls, like load_cuda's."""
    import types
    import torch.utils.cpp_extension as cx

    def wrap(fn):
        def loader(*args, **kwargs):
            m = fn(*args, **kwargs)
            return _Counted(m) if isinstance(m, types.ModuleType) else m
        return loader
    cx.load_inline, cx.load = wrap(cx.load_inline), wrap(cx.load)


class Harness:
    """What one worker needs to judge one candidate on one task."""

    def __init__(self, job):
        import torch
        self.job, self.cfg = job, job["cfg"]
        self.cuda = job["backend"] == "cuda"
        self.dev = torch.device("cuda" if self.cuda else "cpu")
        self.workdir = job["workdir"]
        self.flags, self.notes, self.calls = [], [], 0
        # The clocks and barriers the harness uses, captured before any candidate runs.
        import time
        self.clock = time.perf_counter
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)

    # -- task --------------------------------------------------------------------------
    def load_task(self):
        self.task = _import_code(self.job["task_code"], "kb_task_" + self.job["task_hash"],
                                 os.path.join(self.workdir, "task.py"))
        self.task_vars = {k: v for k, v in vars(self.task).items()
                          if isinstance(v, (int, float, str, bool, tuple))}
        self.init_args = self._init_args()

    def _init_args(self):
        import torch
        torch.manual_seed(0)
        f = getattr(self.task, "get_init_inputs", None)
        return list(f()) if f else []

    def inputs(self, seed):
        """A fresh input set on the device. Generated on the device when possible (fast for
        the gigabyte inputs of KernelBench), else on the host and moved."""
        import torch
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
        import torch
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
            raise _classify(e, "ModelNew.__init__") from e
        rs, ns = ref.state_dict(), new.state_dict()
        if rs.keys() == ns.keys() and all(rs[k].shape == ns[k].shape for k in rs):
            new.load_state_dict(rs)
        return ref, new

    # -- the candidate -----------------------------------------------------------------
    def load_candidate(self):
        import threading
        import torch
        _count_torch_extensions()
        self.flags0 = _flags()
        self.threads0 = {t.ident for t in threading.enumerate()}
        this = sys.modules[__name__]
        self.snap = _snapshot([
            ("torch", torch), ("torch.Tensor", torch.Tensor), ("TensorBase", torch._C.TensorBase),
            ("F", torch.nn.functional), ("torch.cuda", torch.cuda), ("Event", torch.cuda.Event),
            ("Stream", torch.cuda.Stream), ("nn.Module", torch.nn.Module),
            ("time", sys.modules["time"]), ("torch.testing", torch.testing),
            ("task", self.task), ("Model", self.task.Model), ("kernels", this)])
        self.hooks0 = self._global_hooks()
        path = os.path.join(self.workdir, "candidate.py")
        try:
            self.sol = _import_code(self.job["code"], "kb_candidate_" + self.job["source_hash"], path)
        except BaseException as e:  # SystemExit included: candidate code may call sys.exit
            r = _classify(e, "import")
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
        import threading
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


# -- correctness: errors against a float64 reference ------------------------------------

_CHUNK = 1 << 24  # elements per chunk: comparisons of gigabyte outputs stay small in memory
LOWP_LIMIT = 5e-2  # errors between the tolerance and this look like lowered precision


def _base_tol(dtype, allow_lowp):
    import torch
    if dtype == torch.float32 and allow_lowp:
        return 1e-2
    return {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 1e-2,
            torch.bfloat16: 5e-2}.get(dtype, 1e-4)


def rel_err(out, ref):
    """max_i |out_i - ref_i| / (|ref_i| + mean|ref|), in float64, chunked: an allclose whose
    atol scales with the output. inf where out has NaN/inf that ref has not."""
    import torch
    o, r = out.detach().reshape(-1), ref.detach().reshape(-1)
    total, count = 0.0, 0
    for i in range(0, r.numel(), _CHUNK):
        rc = r[i:i + _CHUNK].double()
        fin = torch.isfinite(rc)
        total += rc.abs().where(fin, 0).sum().item()
        count += int(fin.sum().item())
    scale = max(total / count, 1e-30) if count else 1e-30
    worst = 0.0
    for i in range(0, r.numel(), _CHUNK):
        oc, rc = o[i:i + _CHUNK].double(), r[i:i + _CHUNK].double()
        fin = torch.isfinite(rc)
        if not torch.equal(oc[~fin].nan_to_num(0.5, 1.5, -1.5), rc[~fin].nan_to_num(0.5, 1.5, -1.5)):
            return float("inf")  # NaN/inf where the reference has a different one
        if not torch.isfinite(oc[fin]).all():
            return float("inf")
        if fin.any():
            d = ((oc - rc).abs() / (rc.abs() + scale))[fin]
            worst = max(worst, d.max().item())
    return worst


def _bits(t):
    """A tensor's raw bits as integers, so NaNs compare equal to themselves."""
    import torch
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    if t.dtype.is_floating_point and t.element_size() in ints:
        return t.contiguous().view(ints[t.element_size()])
    return t


def same_bits(a, b):
    import torch
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def poison(specs, dev, copies=2):
    """Fill the memory the candidate's outputs will likely get with all-ones bytes (a NaN
    for floats) and free it: a kernel that leaves part of its output unwritten shows the
    poison instead of a stale correct answer (DESIGN.md 4: reading freed memory)."""
    import torch
    held = [torch.full((n,), 255, dtype=torch.uint8, device=dev) for n, _ in specs for _ in range(copies)]
    del held


def _poisoned(t):
    """Number of elements of a float tensor whose bytes are all ones (the poison)."""
    if not t.dtype.is_floating_point or t.numel() == 0:
        return 0
    return int((_bits(t) == -1).sum().item()) if t.element_size() > 1 else 0


def compare(out, ref32, ref64, allow_lowp, where):
    """Judge one output against the reference in the task's dtype (ref32) and in float64
    (ref64). Returns (err, tol); raises Reject. The tolerance is the dtype's, or 10x the
    eager reference's own error where the task is ill-conditioned."""
    import torch
    if isinstance(ref32, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(ref32):
            raise Reject("incorrect", "shape_mismatch", f"expected {len(ref32)} outputs ({where})")
        res = [compare(o, a, b, allow_lowp, where) for o, a, b in zip(out, ref32, ref64)]
        return max(r[0] for r in res), min(r[1] for r in res)
    if not isinstance(ref32, torch.Tensor):
        if out != ref32:
            raise Reject("incorrect", "mismatch", f"expected {ref32!r}, got {out!r} ({where})")
        return 0.0, 0.0
    if not isinstance(out, torch.Tensor):
        raise Reject("incorrect", "not_a_tensor", f"output is a {type(out).__name__}, not a tensor ({where})")
    if type(out) is not torch.Tensor:
        raise Reject("rejected", "tensor_subclass",
                     f"output is a {type(out).__name__}, a torch.Tensor subclass (lazy or deferred output)")
    if out.device != ref32.device:
        raise Reject("incorrect", "device_mismatch", f"output on {out.device}, expected {ref32.device}")
    if out.shape != ref32.shape:
        raise Reject("incorrect", "shape_mismatch", f"output shape {tuple(out.shape)}, expected {tuple(ref32.shape)}")
    if out.dtype != ref32.dtype:
        raise Reject("incorrect", "dtype_mismatch", f"output dtype {out.dtype}, expected {ref32.dtype}")
    if out.numel() and out.untyped_storage().data_ptr() == 0:
        raise Reject("rejected", "no_storage", "output tensor has no storage")
    if not ref32.dtype.is_floating_point:
        if not torch.equal(out, ref32):
            raise Reject("incorrect", "mismatch", f"integer output differs from the reference ({where})")
        return 0.0, 0.0
    n_poison = _poisoned(out) - _poisoned(ref32)
    if n_poison > 0:
        raise Reject("rejected", "unwritten_output",
                     f"{n_poison} of {out.numel()} output elements were never written ({where})")
    err = rel_err(out, ref64)
    tol = max(_base_tol(ref32.dtype, allow_lowp), 10 * rel_err(ref32, ref64))
    if err == float("inf"):
        raise Reject("incorrect", "nan", f"output has NaN/inf where the reference has none ({where})", err=err, tol=tol)
    if err > tol:
        if ref32.dtype in (torch.float32, torch.float64) and err <= LOWP_LIMIT and not allow_lowp:
            raise Reject("rejected", "precision", f"error {err:.2e} exceeds the {ref32.dtype} tolerance "
                         f"{tol:.1e}: consistent with fp16/bf16/TF32 arithmetic ({where})", err=err, tol=tol)
        raise Reject("incorrect", "mismatch", f"max relative error {err:.2e} > tolerance {tol:.1e} ({where})",
                     err=err, tol=tol)
    return err, tol


def fingerprint(out):
    """A cheap identity of an output's values, to spot results replayed from a cache."""
    ts = _tensors(out)
    return [(tuple(t.shape), t.double().sum().item(),
             t.reshape(-1)[:: max(1, t.numel() // 4096)].double().cpu()) for t in ts]


def same_fingerprint(a, b):
    import torch
    return len(a) == len(b) and all(x[0] == y[0] and x[1] == y[1] and torch.equal(x[2], y[2])
                                    for x, y in zip(a, b))


def run_checks(h):
    """Correctness (DESIGN.md 4): several weight seeds, fresh input sets each, candidate
    called first on every set (so no reference result sits in freed memory), with checks
    for side streams, mutated inputs, cached results and rebinding. Returns models to time."""
    import time
    import torch
    cfg, seed0 = h.cfg, h.job["seed"]
    errs, tols, constant, kept = [], [], True, None
    for s in range(cfg["check_seeds"]):
        ref, new = h.models(seed0 + 1000 * s)
        h.watch_forward(new)
        h.integrity("ModelNew.__init__")
        try:
            ref64 = copy.deepcopy(ref).double()
        except Exception:
            ref64 = None
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
            poison(h.out_specs, h.dev)
            where = f"seed {s}, input set {k}"
            before = KERNEL_CALLS[0]
            try:
                out = new(*xs)
                snap = [t.clone() for t in _tensors(out)]  # what the caller's stream sees now
                h.sync()
                if not h.cuda:
                    time.sleep(0.005)
            except Exception as e:
                raise _classify(e, "ModelNew.forward") from e
            h.calls += KERNEL_CALLS[0] - before
            if any(not same_bits(a, b) for a, b in zip(snap, _tensors(out))):
                raise Reject("rejected", "side_stream" if h.cuda else "background_work",
                             "output changed after forward returned: work left running on an "
                             + ("unjoined stream" if h.cuda else "other thread") + f" ({where})")
            for i, (x, c) in enumerate(zip(xs, clones)):
                if isinstance(x, torch.Tensor) and not same_bits(x, c):
                    raise Reject("rejected", "input_mutated", f"input {i} was modified in place ({where})")
            h.check_forward(new, "forward")
            h.integrity("forward")
            r32 = ref(*clones)
            r64 = r32
            if ref64 is not None:
                try:
                    r64 = ref64(*_double(clones))
                except Exception:  # ops without float64 support: compare in the task's dtype
                    ref64, r64 = None, r32
                    if h.cuda:
                        torch.cuda.empty_cache()
            fp, rp = fingerprint(out), fingerprint(r32)
            for pf, pr in prints:
                if same_fingerprint(fp, pf) and not same_fingerprint(rp, pr):
                    raise Reject("rejected", "cached_output", "output repeats an earlier call's result for "
                                 f"different inputs: results cached across calls ({where})")
            err, tol = compare(out, r32, r64, cfg["allow_lowp"], where)
            errs.append(err)
            tols.append(tol)
            constant &= all(same_fingerprint(rp, pr) for _, pr in prints)
            prints.append((fp, rp))
            del out, r32, r64, snap
        if kept is None:
            kept = (ref, new)
        del ref64
    h.max_err, h.tol = max(errs), min(tols)
    if constant:  # the output never changed with the input (DESIGN.md 4: the 120x zero task)
        h.flags.append("input_independent")
    return kept


# -- timing -------------------------------------------------------------------------------

def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _spread(xs):
    return (max(xs) - min(xs)) / _median(xs) if xs and _median(xs) > 0 else 0.0


def run_timing(h, ref, new):
    """Reference and candidate timed under the same conditions (DESIGN.md 4): warm-up, a
    cache flush before every call, a device-wide synchronize before the end mark, a pool of
    fresh input sets, the two interleaved in random order, median of runs per round, more
    rounds while rounds disagree, and a longer re-measure for implausible speedups."""
    import random
    import torch
    cfg, seed = h.cfg, h.job["seed"]
    ref_fn = torch.compile(ref) if cfg["baseline"] == "compile" else ref
    x0 = h.inputs(seed + 7)
    set_bytes = max(1, sum(x.numel() * x.element_size() for x in _tensors(x0)))
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
        est = [_median([timed(fn) for _ in range(3)]) for fn in (ref_fn, new)]
    except Exception as e:
        raise _classify(e, "timing") from e
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
            rr.append(_median(tr))
            rn.append(_median(tn))
        return rr, rn

    runs = int(min(cfg["max_runs"], max(cfg["min_runs"], cfg["round_seconds"] * 1e3 / max(1e-3, sum(est)))))
    # Slow programs (min_runs calls overrun a round twice over) get at most 3 rounds: their
    # speedups are far from 1 and their time is better spent on the next candidate.
    rounds = cfg["timing_rounds"] if runs * sum(est) <= 2e3 * cfg["round_seconds"] else min(3, cfg["timing_rounds"])
    try:
        rr, rn = measure(runs, rounds)
        speedup = _median(rr) / _median(rn)
        if speedup > cfg["suspicious_speedup"]:  # implausible: measure again, twice as long
            rr, rn = measure(2 * runs, rounds)
            h.notes.append(f"speedup {speedup:.1f}x re-measured")
    except Exception as e:
        raise _classify(e, "timing") from e
    h.check_forward(new, "timing")
    h.integrity("timing")
    ratios = [a / b for a, b in zip(rr, rn)]
    return _median(rr), _median(rn), _spread(ratios)


def run_job(job):
    """In a worker: judge one candidate on one task -> dict of Verdict fields."""
    import torch
    h = Harness(job)
    cfg, t0 = h.cfg, h.clock()
    res = {}
    _harness_settings(cfg)
    with torch.no_grad():
        try:
            h.load_task()
            ref = h.build(h.task.Model, job["seed"])
            xs = h.inputs(job["seed"])
            out = ref(*xs)  # warms the reference's libraries up, too
            if cfg["baseline"] == "compile":
                torch.compile(ref)(*xs)  # dynamo wraps torch functions on first use: do it before the snapshot
            h.out_specs = [(t.numel() * t.element_size(), t.dtype) for t in _tensors(out)]
            h.sync()
            del ref, out, xs
        except Exception as e:
            return dict(status="task_error", reason="reference_failed",
                        message=f"the reference failed: {type(e).__name__}: {str(e)[:300]}",
                        log=trim_log(traceback.format_exc()))
        try:
            h.load_candidate()
            t1 = h.clock()
            ref, new = run_checks(h)
            if cfg["require_kernel"] and h.calls == 0:
                raise Reject("rejected", "no_kernel", "forward never called a compiled kernel")
            t2 = h.clock()
            if cfg["time_candidates"]:
                ref_ms, new_ms, spread = run_timing(h, ref, new)
                run_checks_post(h, ref, new)
                res = dict(status="ok", speedup=ref_ms / new_ms, ref_ms=ref_ms, new_ms=new_ms, spread=spread,
                           message="; ".join(h.notes))
            else:  # Stages 1-2 filter on correctness alone (DESIGN.md 2)
                res = dict(status="ok", message="correct (not timed)")
            res["seconds"] = dict(load=t1 - t0, check=t2 - t1, time=h.clock() - t2)
        except Reject as r:
            res = dict(status=r.status, reason=r.reason, message=r.message, log=trim_log(r.extra.get("log", "")))
            if "err" in r.extra:
                res.update(max_err=r.extra["err"], tol=r.extra["tol"])
        except BaseException as e:  # SystemExit, KeyboardInterrupt raised by candidate code
            r = _classify(e, "evaluation")
            res = dict(status=r.status, reason=r.reason, message=r.message,
                       log=trim_log(_candidate_traceback(e, os.path.join(h.workdir, "candidate.py"))))
    res.setdefault("max_err", getattr(h, "max_err", None))
    res.setdefault("tol", getattr(h, "tol", None))
    res.update(flags=h.flags, kernel_calls=h.calls)
    return res


def run_checks_post(h, ref, new):
    """One more fresh input set after timing: a candidate that turns wrong once it has been
    checked (counting calls, say) is caught here."""
    xs = h.inputs(h.job["seed"] + 999)
    poison(h.out_specs, h.dev)
    try:
        out = new(*xs)
        h.sync()
    except Exception as e:
        raise _classify(e, "ModelNew.forward after timing") from e
    r32 = ref(*xs)
    try:
        r64 = copy.deepcopy(ref).double()(*_double(xs))
    except Exception:
        r64 = r32
    compare(out, r32, r64, h.cfg["allow_lowp"], "check after timing")


def _harness_settings(cfg):
    """Fixed settings for reference and candidate alike: no TF32 unless lowered precision
    is allowed, so an fp32 task is timed and checked as fp32."""
    import warnings
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = cfg["allow_lowp"]
        torch.backends.cudnn.allow_tf32 = cfg["allow_lowp"]


def reference_job(job):
    """In a worker: load a task and run its reference once (for checking task sets)."""
    import torch
    h = Harness(job)
    _harness_settings(h.cfg)
    with torch.no_grad():
        try:
            h.load_task()
            ref = h.build(h.task.Model, job["seed"])
            xs = h.inputs(job["seed"])
            h.sync()
            t0 = h.clock()
            out = ref(*xs)
            h.sync()
            ms = (h.clock() - t0) * 1e3
        except Exception as e:
            r = _classify(e, "the reference")
            return dict(status="task_error", reason=r.reason, message=r.message,
                        log=trim_log(traceback.format_exc()))
    shapes = [tuple(t.shape) for t in _tensors(out)]
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
        r = _classify(e, "import")
        if r.status == "compile_error":
            return dict(status=r.status, reason=r.reason, message=r.message,
                        log=trim_log(r.extra.get("log") or _candidate_traceback(e, path)))
    return dict(status="built")


def _standby_main(conn, env, cores):
    """A CUDA run worker started ahead of its job: context up, then wait for the job."""
    os.setsid()
    os.environ.update(env)
    if cores:
        os.sched_setaffinity(0, cores)
    import torch
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
    _child_main(msg[0], conn, msg[1])


def _child_main(kind, conn, job):
    """Entry of every worker process: a session of its own (so a kill takes its compilers
    too), output to a log file, then one job, its result sent back, and a hard exit."""
    import resource
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
                   log=trim_log(traceback.format_exc()))
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
    import torch
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)   # M_MMAP_THRESHOLD: the largest value glibc accepts
        libc.mallopt(-1, 1 << 30)    # M_TRIM_THRESHOLD
    except OSError:
        pass


# ----------------------------------------------------------------------------------------
# The parent: schedule compile workers on the CPU cores and one timing worker per GPU

def pick_backend(name):
    if name in ("cuda", "cpu"):
        return name
    if name != "auto":
        raise ValueError(f"backend must be auto, cuda or cpu, not {name!r}")
    import torch
    return "cuda" if torch.cuda.is_available() and shutil.which("nvcc") else "cpu"


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


def _gpu_arch(gpu):
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


class _Running:
    def __init__(self, kind, item, proc, conn, deadline, slot, log):
        self.kind, self.item, self.proc, self.conn = kind, item, proc, conn
        self.deadline, self.slot, self.log, self.start = deadline, slot, log, _now()


def _now():
    import time
    return time.monotonic()


def _tail(path, n=3000):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class Evaluator:
    """Judges (task, code) pairs. Compile workers (no GPU) build candidates in parallel on
    the CPU cores; one run worker per GPU checks and times, so no two timings share a GPU.
    Every worker is a fresh process forked from a server that has torch imported, runs one
    job and exits. On the CPU backend timing never overlaps compilation."""

    def __init__(self, cfg=None, **overrides):
        import multiprocessing as mp
        self.cfg = {**config.DEFAULTS, **(cfg or {}), **overrides}
        self.backend = pick_backend(self.cfg["backend"])
        self.cache = cache_root(self.cfg)
        os.makedirs(self.cache, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="kernels-")
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(["torch", __name__])
        self.env = {"KERNELS_BACKEND": self.backend, "CUDAL1_CACHE": self.cache, "MAX_JOBS": "2",
                    "KERNELS_COMPILE_TIMEOUT": str(self.cfg["compile_timeout"])}
        cores = sorted(os.sched_getaffinity(0))
        if self.backend == "cuda":
            import torch
            n = torch.cuda.device_count()
            self.gpus = [int(g) for g in self.cfg["gpus"].split(",")] if self.cfg["gpus"] else list(range(n))
            if not self.gpus:
                raise ValueError("backend cuda, but no GPU is visible")
            arch = _gpu_arch(self.gpus[0])
            self.env.update(KERNELS_CUDA_ARCH=arch, TORCH_CUDA_ARCH_LIST=f"{arch[:-1]}.{arch[-1]}")
            # Two cores per GPU for its timing worker, the rest for compilers: builds then
            # never steal the host time of a timed launch.
            k = 2 * len(self.gpus)
            self.run_cores = [cores[len(cores) - k + 2 * i: len(cores) - k + 2 * i + 2]
                              for i in range(len(self.gpus))] if len(cores) >= k + 2 else [None] * len(self.gpus)
            self.compile_cores = cores[: len(cores) - k] if len(cores) >= k + 2 else None
        else:
            self.gpus, self.run_cores, self.compile_cores = [None], [None], None
        self.workers = self.cfg["workers"] or len(self.compile_cores or cores)
        self.memo = {}
        self._jobs = 0
        self._standby = {}  # slot -> a run worker with its CUDA context up, waiting for a job
        self._clean_stale()

    def _clean_stale(self):
        """Leftovers of killed builds: temporary build folders and torch extension locks
        older than the compile timeout."""
        import time
        old = time.time() - self.cfg["compile_timeout"]
        for pattern_root, want in ((os.path.join(self.cache, "lib"), ".tmp"), (os.path.join(self.cache, "ext"), "lock")):
            for root, dirs, files in os.walk(pattern_root):
                for name in dirs + files:
                    p = os.path.join(root, name)
                    try:
                        if want in name and os.path.getmtime(p) < old:
                            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
                    except OSError:
                        pass

    def close(self):
        for proc, conn in self._standby.values():
            try:
                conn.send(None)
            except OSError:
                pass
            proc.join(5)
            if proc.exitcode is None:
                proc.kill()
        self._standby = {}
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- jobs ----------------------------------------------------------------------------
    def _job(self, task, code, kind):
        self._jobs += 1
        src_hash = _sha(code or "")
        workdir = os.path.join(self.tmp, f"{self._jobs}")
        os.makedirs(workdir, exist_ok=True)
        env = dict(self.env, TORCH_EXTENSIONS_DIR=os.path.join(self.cache, "ext", src_hash))
        return dict(task_code=task.code, task_hash=task.hash, code=code, source_hash=src_hash,
                    backend=self.backend, cfg=self.cfg, workdir=workdir, env=env,
                    seed=int.from_bytes(os.urandom(3), "little"), task_name=task.name)

    def _start(self, kind, item, slot):
        job = item["job"]
        job["log"] = os.path.join(job["workdir"], f"{kind}.log")
        env = dict(job["env"])
        if kind == "compile":
            env["CUDA_VISIBLE_DEVICES"] = ""
            job["cores"] = self.compile_cores
        else:
            if self.backend == "cuda":
                env["CUDA_VISIBLE_DEVICES"] = physical_gpu(self.gpus[slot])
            job["cores"] = self.run_cores[slot]
        job = dict(job, env=env)
        timeout = self.cfg["compile_timeout"] if kind == "compile" else self.cfg["run_timeout"]
        if kind == "run" and self.backend == "cuda":
            # A worker that already holds a CUDA context takes the job; the next one starts
            # its context now, while this one checks, instead of on the GPU's time later.
            proc, conn = self._standby.pop(slot, None) or self._spawn_standby(slot)
            conn.send((kind, job))
            self._standby[slot] = self._spawn_standby(slot)
            return _Running(kind, item, proc, conn, _now() + timeout, slot, job["log"])
        parent, child = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_child_main, args=(kind, child, job), daemon=True)
        proc.start()
        child.close()
        return _Running(kind, item, proc, parent, _now() + timeout, slot, job["log"])

    def _spawn_standby(self, slot):
        env = dict(self.env, CUDA_VISIBLE_DEVICES=physical_gpu(self.gpus[slot]))
        parent, child = self.ctx.Pipe(duplex=True)
        proc = self.ctx.Process(target=_standby_main, args=(child, env, self.run_cores[slot]), daemon=True)
        proc.start()
        child.close()
        return proc, parent

    def _kill(self, r):
        import signal
        try:
            os.killpg(r.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        r.proc.kill()
        r.proc.join(10)
        # a build killed mid-way leaves torch's lock file; nothing else holds it now
        ext = r.item["job"]["env"]["TORCH_EXTENSIONS_DIR"]
        for root, _, files in os.walk(ext):
            if "lock" in files:
                os.remove(os.path.join(root, "lock"))

    def _finish(self, r, timed_out=False):
        """A worker's result, or what its death says: crash, exit, timeout."""
        import signal
        res = None
        if timed_out:
            self._kill(r)
            limit = self.cfg["compile_timeout"] if r.kind == "compile" else self.cfg["run_timeout"]
            res = dict(status="timeout", reason="timeout", message=f"no result within {limit:.0f} s "
                       f"({'compiling' if r.kind == 'compile' else 'checking and timing'})",
                       log=trim_log(_tail(r.log)))
        else:
            try:
                res = r.conn.recv()
            except (EOFError, OSError):
                pass
            r.proc.join(30)
            if r.proc.exitcode is None:
                self._kill(r)
            if res is None:
                code = r.proc.exitcode
                if code is not None and code < 0:
                    name = signal.Signals(-code).name
                    why = " (out of memory?)" if name == "SIGKILL" else ""
                    res = dict(status="runtime_error", reason="crash",
                               message=f"worker died with {name}{why} while "
                                       f"{'importing' if r.kind == 'compile' else 'running'} the candidate")
                else:
                    res = dict(status="runtime_error", reason="exit",
                               message=f"worker exited with code {code} (os._exit or a fatal error)")
                res["log"] = trim_log(_tail(r.log))
        r.conn.close()
        res.setdefault("seconds", {})
        res["seconds"][r.kind] = round(_now() - r.start, 3)
        return res

    def _precheck(self, task, code):
        """Verdicts that need no worker: no code, unparsable code, no ModelNew."""
        if code is None:
            return dict(status="compile_error", reason="no_code", message="the solution has no code")
        try:
            names = _top_names(code)
        except SyntaxError as e:
            return dict(status="compile_error", reason="syntax_error",
                        message=f"syntax error at line {e.lineno}: {e.msg}")
        if "ModelNew" not in names:
            return dict(status="compile_error", reason="no_modelnew", message="the solution defines no ModelNew")
        return None

    def evaluate(self, pairs, progress=None, desc="evaluating"):
        """[(Task, code or Solution)] -> [Verdict], in order. Identical pairs are judged once
        (and remembered for this Evaluator's lifetime)."""
        items, verdicts = {}, [None] * len(pairs)
        for i, (task, sol) in enumerate(pairs):
            code = sol.code if isinstance(sol, Solution) else sol
            name = sol.name if isinstance(sol, Solution) else f"{task.name}#{_sha(code or '')[:8]}"
            key = (task.hash, _sha(code or ""))
            if key in self.memo:
                verdicts[i] = Verdict(**{**self.memo[key], "task": task.name, "solution": name})
                continue
            if key not in items:
                pre = self._precheck(task, code)
                items[key] = dict(task=task, code=code, name=name, idx=[], res=pre,
                                  job=None if pre else self._job(task, code, "run"))
            items[key]["idx"].append(i)
        todo = [it for it in items.values() if it["res"] is None]
        self._schedule(todo, ["compile", "run"], progress, desc)
        for key, it in items.items():
            fields = {k: v for k, v in it["res"].items() if k in Verdict.__dataclass_fields__}
            fields.update(source_hash=key[1], seed=it["job"]["seed"] if it["job"] else 0)
            self.memo[key] = fields
            for i in it["idx"]:
                name = pairs[i][1].name if isinstance(pairs[i][1], Solution) else it["name"]
                verdicts[i] = Verdict(**{**fields, "task": pairs[i][0].name, "solution": name})
        return verdicts

    def run_references(self, tasks, progress=None):
        """Load every task and run its reference once -> [Verdict] (status ok or task_error)."""
        items = [dict(task=t, code="", name="reference", idx=[i], res=None, job=self._job(t, "", "reference"))
                 for i, t in enumerate(tasks)]
        self._schedule(items, ["reference"], progress, "references")
        return [Verdict(task=it["task"].name, solution="reference",
                        **{k: v for k, v in it["res"].items() if k in Verdict.__dataclass_fields__})
                for it in items]

    def _schedule(self, items, phases, progress, desc):
        """Move each item through its phases: 'compile' on up to `workers` processes,
        'run'/'reference' one per device slot."""
        import collections
        import multiprocessing.connection as mpc
        bar = None
        if (self.cfg["progress"] if progress is None else progress) and items:
            from tqdm import tqdm
            bar = tqdm(total=len(items), desc=desc, unit="cand", dynamic_ncols=True)
        queues = {p: collections.deque() for p in phases}
        queues[phases[0]].extend(items)
        for it in items:
            it["seconds"] = {}
        # untimed reference runs may share a GPU two at a time; timed runs never do
        free = list(range(len(self.gpus))) * (2 if phases == ["reference"] and self.backend == "cuda" else 1)
        active = []
        # CPU timings must not share the cores with builds (untimed checks may)
        exclusive = self.backend == "cpu" and self.cfg["time_candidates"] and "run" in phases
        try:
            while any(queues.values()) or active:
                n_build = sum(r.kind == "compile" for r in active)
                n_dev = len(active) - n_build
                for p in phases:
                    if p == "compile":
                        while queues[p] and n_build < self.workers and not (
                                exclusive and (n_dev or any(queues[q] for q in phases if q != p))):
                            active.append(self._start(p, queues[p].popleft(), None))
                            n_build += 1
                    else:
                        while queues[p] and free and not (exclusive and n_build):
                            active.append(self._start(p, queues[p].popleft(), free.pop(0)))
                            n_dev += 1
                wait = max(0.0, min(r.deadline for r in active) - _now()) if active else 0
                ready = mpc.wait([r.conn for r in active] + [r.proc.sentinel for r in active], timeout=wait)
                for r in list(active):
                    done = r.conn in ready or r.proc.sentinel in ready
                    if not done and _now() < r.deadline:
                        continue
                    active.remove(r)
                    if r.slot is not None:
                        free.append(r.slot)
                        free.sort()
                    res = self._finish(r, timed_out=not done)
                    r.item["seconds"].update(res.pop("seconds", {}))
                    nxt = phases.index(r.kind) + 1
                    if res["status"] == "built" and nxt < len(phases):
                        queues[phases[nxt]].append(r.item)
                        continue
                    res["seconds"] = dict(r.item["seconds"])
                    res["seconds"]["total"] = round(sum(v for k, v in res["seconds"].items()
                                                        if k in ("compile", "run", "reference")), 3)
                    r.item["res"] = res
                    if bar:
                        bar.update(1)
                        bar.set_postfix_str(f"{r.item['task'].name}: {res['status']}", refresh=False)
        except BaseException:
            for r in active:
                self._kill(r)
            raise
        finally:
            if bar:
                bar.close()


def evaluate(tasks_and_codes, cfg=None, **overrides):
    """One-shot convenience: an Evaluator for one batch."""
    with Evaluator(cfg, **overrides) as ev:
        return ev.evaluate(tasks_and_codes)
