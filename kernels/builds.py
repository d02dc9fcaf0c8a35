"""Building candidate programs: the build API candidates call (through the kernels package, as
kernels.load_cuda and kernels.load_cpp) and the build cache it fills. Standard library only:
it runs in the workers, and in the processes that build ahead of them (no torch needed).

    lib = load_cuda(src)          # nvcc, cached by source and toolchain -> KernelLib
    lib = load_cpp(src)           # g++ with OpenMP, the same way
    lib.relu(x, y, x.numel())     # tensors pass as pointers; cudaStream_t is filled in
    parse_exports(src)            # the extern "C" launchers a source declares
"""
import ast
import ctypes
import linecache
import os
import re
import shutil
import subprocess
import sys
import tempfile

from .source import sha


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
    kind = {"cudaStream_t": "stream", "float": "float", "double": "double", "bool": "bool"}.get(base)
    kind = kind or ("int32" if base in _INT32 else "int64" if base in _INT64 else None)
    if kind:
        return kind
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
        if len(args) != self.nargs:  # the stream is named only where the launcher takes one (CUDA)
            want = [k for k in self.kinds if k != "stream"]
            stream = " and its cudaStream_t is filled in" * ("stream" in self.kinds)
            raise TypeError(f"{self.name}() takes {self.nargs} arguments ({', '.join(want)}){stream}, "
                            f"got {len(args)}")
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
    p = os.path.join(env_home or "", "bin", tool)
    p = p if env_home and os.path.exists(p) else shutil.which(tool)
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
    key = sha(src, toolchain)
    final = os.path.join(root, key)
    so = os.path.join(final, "lib.so")
    if os.path.exists(so):
        return so
    if os.path.exists(final + ".err"):  # compile errors are deterministic: cache them too
        raise BuildError(cite_py(open(final + ".err").read(), src, _caller_file()))
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
        raise BuildError(cite_py(log, src, _caller_file()))
    try:
        os.rename(tmp, final)
    except OSError:  # another worker finished the same source first
        shutil.rmtree(tmp, ignore_errors=True)
    return so


def _cited(name):
    """Where a compiler cites a line of file `name` (a pattern): "kernel.cpp:7:5: error" (g++),
    "kernel.cu(7): error" (nvcc)."""
    return re.compile(rf"^({name}(?::(\d+)(?::\d+)?|\((\d+)\)))(?=: )", re.M)


_CITED = _cited(r"kernel\.(?:cpp|cu)")
# load_inline writes the candidate's strings into main.cpp and cuda.cu of its build folder
_INLINE = re.compile(r"^(/[^\s:()]+/(?:main\.cpp|cuda\.cu))(?=[:(]\d)", re.M)


def _caller_file():
    """The innermost file on the stack outside this package: the candidate (or the script)
    that called load_cpp/load_cuda."""
    here = os.path.dirname(os.path.abspath(__file__))
    f = sys._getframe(1)
    while f and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == here:
        f = f.f_back
    return f.f_code.co_filename if f else None


def cite_py(log, src, pyfile, cited=_CITED):
    """The compiler counts lines from the start of the source string, which a candidate
    writes inside its .py: each cited line also gets the .py line it was written on,
    "line 42 (kernel.cpp:7:5): error: ...". The .py line is that of the string literal
    holding the cited line (a literal is a piece of src, or all of it); left as it was where
    no literal, or more than one place, holds it."""
    try:
        tree = ast.parse("".join(linecache.getlines(pyfile)) if pyfile else "")
    except (SyntaxError, ValueError):
        return log
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value]
    lines = src.split("\n")

    def py_line(n):
        if not 1 <= n <= len(lines) or not lines[n - 1].strip():
            return None
        body = lines[n - 1].strip()
        a = sum(len(l) + 1 for l in lines[:n - 1]) + lines[n - 1].index(body)
        found = set()
        for c in (c for c in strings if len(c.value) >= len(body)):
            p = src.find(c.value, max(0, a + len(body) - len(c.value)))
            while 0 <= p <= a:  # each place the literal covers the cited line
                # (no further than its last line: a one-line literal writes its newlines as \n)
                found.add(min(c.lineno + c.value.count("\n", 0, a - p), c.end_lineno))
                p = src.find(c.value, p + 1)
        return found.pop() if len(found) == 1 else None

    def cite(m):
        n = py_line(int(m[2] or m[3]))
        return f"line {n} ({m[1]})" if n else m[1]
    return cited.sub(cite, log)


def cite_inline(log, pyfile):
    """cite_py for a torch extension build's log (load_inline): each generated file it cites
    is read back from the build folder and its lines traced to the candidate's strings."""
    for path in sorted(set(_INLINE.findall(log))):
        try:
            with open(path) as f:
                src = f.read()
        except OSError:
            continue
        log = cite_py(log, src, pyfile, _cited(re.escape(path)))
    return log


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
