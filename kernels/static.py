"""A static check of a candidate's Python, in the Evaluator's process before any worker
starts (parsing only: nothing of the candidate runs here). It looks for what a program needs
only to reach the evaluator around it: frames and the garbage collector's object lists,
interpreter hooks, signals and timers, raw threads and processes, file descriptors and
sockets, dynamic code, raw memory through ctypes, and writes to attributes of modules and
classes it did not define. Honest kernels need none of these: try/except fallbacks,
torch.jit.script, a threading.Lock, torch.backends and compiler config flags, os.environ,
CUDA graphs, torch.compile and ctypes for a CUDA symbol's address all pass.

    found = static.check(code)     # -> [(line, what)], empty when nothing was found
    bad = static.check_library("lib.so")   # -> system functions a built library should not import
"""
import ast
import re

# A candidate that builds through torch's extension loader (a minute or more a build, where
# ours take seconds): read by the worker (a build is not run twice) and the scheduler.
TORCH_BUILDS = re.compile(r"cpp_extension|load_inline")
# Any build at import or construction, ours (kernels.load_cpp/load_cuda) or torch's: code that
# names none has nothing for a compile job to do, so its run job imports it directly
# (Evaluator.evaluate). Only scheduling depends on it: code that builds some other way
# builds in its run job instead, which costs that job the time.
BUILDS = re.compile(r"load_cpp|load_cuda|" + TORCH_BUILDS.pattern)

# Fully qualified names (after resolving the candidate's imports) a candidate may not touch.
FORBIDDEN = {
    "sys._getframe": "walks the interpreter's frames", "sys.modules": "reaches other modules' objects",
    "sys.settrace": "an interpreter hook", "sys.setprofile": "an interpreter hook",
    "sys.addaudithook": "an interpreter hook", "sys.setswitchinterval": "changes thread switching",
    "threading.settrace": "an interpreter hook", "threading.setprofile": "an interpreter hook",
    "gc.get_objects": "reaches every live object", "gc.get_referrers": "reaches other objects",
    "gc.get_referents": "reaches other objects",
    "os.fork": "starts a process", "os.forkpty": "starts a process", "os.system": "runs a command",
    "os.popen": "runs a command", "os.posix_spawn": "starts a process", "os.posix_spawnp": "starts a process",
    "os.kill": "signals a process", "os.killpg": "signals a process group", "os.write": "writes a file descriptor",
    "os.writev": "writes a file descriptor", "os.pwrite": "writes a file descriptor",
    "os.pwritev": "writes a file descriptor", "os.sendfile": "writes a file descriptor",
    "os.fdopen": "opens a raw descriptor", "io.FileIO": "opens a raw descriptor",
    "os.dup": "copies a file descriptor", "os.dup2": "copies a file descriptor", "os.open": "opens a raw descriptor",
    "ctypes.pythonapi": "calls the interpreter's C API", "ctypes.memmove": "writes raw memory",
    "ctypes.memset": "writes raw memory", "ctypes.string_at": "reads raw memory", "ctypes.CDLL": "loads a library",
    "ctypes.cdll": "loads a library", "ctypes.PyDLL": "loads a library", "ctypes.pydll": "loads a library",
    "importlib.import_module": "imports by a computed name", "builtins": "rebinds built-in functions",
    "traceback.extract_stack": "walks the interpreter's frames", "traceback.walk_stack": "walks the interpreter's frames",
    "traceback.format_stack": "walks the interpreter's frames", "traceback.print_stack": "walks the interpreter's frames",
    "traceback.StackSummary": "walks the interpreter's frames",
    "torch.set_num_threads": "changes the threads the reference runs with",
    "torch.set_num_interop_threads": "changes the threads the reference runs with",
    "os.sched_setaffinity": "moves the process between cores", "os.nice": "changes its priority",
    "os.setpriority": "changes a priority",
}
# The evaluator's package: a candidate calls its build API, nothing else (KERNEL_CALLS, the
# count --require_kernel reads, incremented by hand, passed it).
KERNELS_API = ("load_cuda", "load_cpp", "BuildError")
FORBIDDEN_PREFIXES = {"os.exec": "replaces the process", "os.spawn": "starts a process"}
# Modules whose every use is out of bounds.
FORBIDDEN_MODULES = {"inspect": "walks frames and code", "_thread": "starts threads the harness cannot see",
                     "signal": "signal handlers and timers", "socket": "opens connections",
                     "subprocess": "starts processes", "multiprocessing": "starts processes",
                     "pty": "starts processes", "faulthandler": "timers and signal handlers"}
# Attribute names out of bounds on any object: frames, code, raw addresses.
FORBIDDEN_ATTRS = {"f_back": "walks frames", "f_locals": "walks frames", "f_globals": "walks frames",
                   "tb_frame": "walks frames", "gi_frame": "walks frames", "cr_frame": "walks frames",
                   "__code__": "replaces or reads code", "co_code": "reads code", "__globals__": "reaches globals",
                   "from_address": "reads raw memory", "__subclasses__": "reaches every subclass",
                   "_started_by_library": "poses as a library's thread"}
BUILTINS = {"eval": "runs computed code", "exec": "runs computed code", "compile": "compiles computed code",
            "__import__": "imports by a computed name", "globals": "reaches module globals"}
# Module attributes a candidate may set: numerics and speed flags, judged at run time
# (EVAL.md, "How a candidate is judged"), and compiler settings.
SETTABLE = ("torch.backends.", "torch._inductor.config.", "torch._dynamo.config.", "torch._functorch.config.")
STRINGS = {"/proc/": "reads other processes", "/dev/shm": "shared memory outside the job", "pymp-": "the forkserver"}


def check(code):
    """-> [(line, what)] for each out-of-bounds use in code (a syntax error is the
    Evaluator's own verdict, not this check's)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    imported = {}  # local name -> fully qualified name, from the candidate's imports
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                imported[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                imported[a.asname or a.name] = f"{node.module}.{a.name}"
    found = []
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}

    def qualified(node):
        """The dotted name an expression stands for, through the imports, or None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in imported:
            return ".".join([imported[node.id]] + parts[::-1])
        return None

    def bad_name(q):
        root = q.split(".")[0]
        if root == "kernels" and q != "kernels" and q.split(".")[1] not in KERNELS_API:
            return f"{q}: the evaluator's internals (candidates call kernels.load_cuda, kernels.load_cpp)"
        for name, why in FORBIDDEN.items():
            if q == name or q.startswith(name + "."):
                return f"{name}: {why}"
        for prefix, why in FORBIDDEN_PREFIXES.items():
            if q.startswith(prefix):
                return f"{q}: {why}"
        if root in FORBIDDEN_MODULES:
            return f"{root}: {FORBIDDEN_MODULES[root]}"
        return None

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if node.module and not node.level else []
            for q in names:
                why = bad_name(q) or (bad_name(q.split(".")[0]) if q.split(".")[0] in FORBIDDEN_MODULES else None)
                if why:
                    found.append((line, f"import {q}: {why.split(': ', 1)[1]}"))
        elif isinstance(node, ast.Attribute):
            q = qualified(node)
            why = bad_name(q) if q else None
            if why:
                found.append((line, why))
            elif node.attr in FORBIDDEN_ATTRS:
                found.append((line, f".{node.attr}: {FORBIDDEN_ATTRS[node.attr]}"))
        elif isinstance(node, ast.Name) and node.id in imported and isinstance(node.ctx, ast.Load):
            why = bad_name(imported[node.id])
            if why:
                found.append((line, why))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILTINS \
                and node.func.id not in imported:
            found.append((line, f"{node.func.id}(): {BUILTINS[node.func.id]}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open" \
                and "open" not in imported and ((node.args and isinstance(node.args[0], ast.Constant)
                                                 and isinstance(node.args[0].value, int))
                                                or any(k.arg in ("closefd", "opener") for k in node.keywords)):
            found.append((line, "open() of a raw descriptor: writes the evaluator's channels"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
                and node.args and qualified(node.args[0]) and not _settable(qualified(node.args[0]) + "."):
            found.append((line, f"{node.func.id}() on {qualified(node.args[0])}: changes a module or class "
                                f"it did not define"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                q = qualified(t) if isinstance(t, ast.Attribute) else None
                if q and not _settable(q):
                    found.append((line, f"{q} = ...: changes a module or class it did not define"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            for s, why in STRINGS.items():
                if s in node.value:
                    found.append((line, f"{s!r}: {why}"))
    return sorted(set(found))


def _settable(q):
    return q.startswith(SETTABLE)


# ----------------------------------------------------------------------------------------
# The libraries a candidate compiled: what they import from the system, read with `nm`.

# Functions a kernel library has no use for: starting, signalling or tracing processes, raw
# system calls, loading code, changing memory protection, sockets, signal handlers and
# timers, threads of its own, process limits, placement and priority, the allocator's settings.
DENIED_SYMBOLS = {
    "fork", "vfork", "clone", "clone3", "kill", "killpg", "tgkill", "tkill", "ptrace", "syscall",
    "execve", "execv", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve", "system", "popen",
    "posix_spawn", "posix_spawnp", "dlopen", "dlsym", "dlvsym", "dlmopen", "mprotect", "pkey_mprotect",
    "socket", "connect", "bind", "listen", "accept", "sendmsg", "signal", "sigaction", "setitimer",
    "alarm", "timer_create", "pthread_create", "prctl", "setrlimit", "prlimit", "sched_setaffinity",
    "setpriority", "unshare", "setns", "mount", "process_vm_writev", "process_vm_readv",
    "pthread_setaffinity_np", "sched_setscheduler", "sched_setparam", "sched_setattr", "pthread_setschedparam",
    "mallopt", "malloc_trim",  # the host allocator's settings: the reference's allocations
    # glibc's other names for the same; a library making raw system calls needs no
    # name at all, which the system-call filter (seccomp.py) answers
    "__libc_mallopt", "__fork", "_Fork", "__vfork", "__clone", "__sigaction", "__libc_sigaction", "bsd_signal",
    "ssignal", "sigset", "__sysv_signal", "sysv_signal", "__sched_setscheduler", "ualarm", "nice", "timer_settime",
}
# What the CUDA runtime, linked statically into every library nvcc builds, imports itself (nm
# -u of libcudart_static.a): allowed in a CUDA build, where a candidate's own use of them
# cannot be told apart (EVAL.md, "Known limits").
CUDA_RUNTIME = {"kill", "mprotect", "pthread_create", "syscall", "socket", "connect", "bind", "listen", "sendmsg",
                "dlopen", "dlsym", "dlvsym", "dlmopen"}
# The Python C API: a torch extension (load_inline) is a Python module and needs it; a library
# of the project's own format is called through ctypes and does not.
PYTHON_API = ("Py", "_Py")


def check_library(path, python_module=False, cuda=False):
    """-> the names `path` imports that a kernel library has no use for (empty when none, or
    when `nm` is missing). cuda: built by nvcc or against the CUDA runtime (CUDA_RUNTIME)."""
    import re
    import shutil
    import subprocess
    if not shutil.which("nm"):
        return []
    out = subprocess.run(["nm", "-D", "--undefined-only", path], capture_output=True, text=True).stdout
    names = {re.sub(r"@.*", "", line.split()[-1]) for line in out.splitlines() if line.split()}
    bad = {n for n in names if n in DENIED_SYMBOLS and not (cuda and n in CUDA_RUNTIME)}
    if not python_module:
        bad |= {n for n in names if n.startswith(PYTHON_API)}
    return sorted(bad)
