"""The box every candidate runs in, set up by its worker before any candidate code runs: a
minimal environment, no network, writes only under its work folder and its program's own
part of the build cache, and no process of its own left alive when its job ends. Standard
library only (workers and candidates import it).

    env = sandbox.minimal_env()          # what of this process's environment a worker keeps
    own = sandbox.program_cache(cache, source_hash)  # the part of the build cache a program writes
    group = limits.JobGroup(name, pids=1024, memory=8 << 30, cpu=600.0)  # a job's limits (limits.py)
    got = sandbox.enter(workdir, [own], group.dirs)  # in the worker: limits joined, reaper,
                                                     # network off, writes confined
    sandbox.confine([workdir, own])  # later: narrower still (never wider)
    left = sandbox.reap()                # every process the job left behind, killed -> commands
    sandbox.kill_tree(pid)               # from outside: a worker and everything it started
    text = sandbox.redact(text)          # the parent's environment values out of a message
    missing = sandbox.probe()            # the protections this machine refuses (tried in a child)

How: the environment is rebuilt from an allowlist (paths, CUDA and compiler variables, the
evaluator's own); the network is a new, empty network namespace (unshare, as root), and
System V IPC a namespace of its own; writes are confined with Landlock (Linux 5.13+); the
worker is a child subreaper, so whatever its candidate starts, however it detaches (setsid,
double fork), stays its descendant and is found and killed. The namespaces and the Landlock
domain belong to the worker's main thread and every thread or process it starts after
entering, which is where candidate code runs.
Each job also gets limits of its own (limits.py: a control group, or the parent's watch,
sandbox.WATCHED, where none can be made).
"""
import contextlib
import ctypes
import errno
import fcntl
import glob
import os
import signal
import stat
import tempfile
import time

try:
    from .limits import JobGroup, descendants, signal_all, write_value
except ImportError:  # run as a file: probe()'s child
    from limits import JobGroup, descendants, signal_all, write_value

# what a worker's environment keeps: these names, and names with these prefixes
KEEP = {"PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "LANG", "LANGUAGE", "TERM", "TZ", "CC", "CXX",
        "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV", "CONDA_PREFIX", "MAX_JOBS", "OMP_NUM_THREADS"}
KEEP_PREFIXES = ("CUDA", "NVIDIA_", "NVCC", "CUDNN", "KERNELS_", "CUDAL1_", "TORCH", "PYTORCH_", "TRITON_", "LC_",
                 "MKL_", "KMP_")

_libc = ctypes.CDLL(None, use_errno=True)
_NR = dict(landlock_create_ruleset=444, landlock_add_rule=445, landlock_restrict_self=446)  # x86_64 and arm64
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG = 38, 36, 1
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
CLONE_NEWNET, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWIPC = 0x40000000, 0x10000000, 0x20000000, 0x08000000
CLONE_NEWNS, MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = \
    0x20000, 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
# files and folders in each tmpfs of a job's own (/dev/shm, /tmp): a tmpfs file's inode and name
# are kernel memory no process's resident set shows, and an empty file uses no data block
TMPFS_FILES = 100_000


def minimal_env(env=None):
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if k in KEEP or k.startswith(KEEP_PREFIXES)}


_SECRETS = None


def redact(text):
    """text with every value of this process's environment that workers do not get (keys,
    tokens, anything else) replaced, as written and in the encodings a candidate would reach
    for (reversed, hex, base64 at each of its three alignments): a candidate that found one
    cannot carry it out in its verdict's message or log."""
    global _SECRETS
    if _SECRETS is None:
        kept = minimal_env()
        values = {v for k, v in os.environ.items() if k not in kept and len(v) >= 8}
        _SECRETS = sorted({f for v in values for f in _encodings(v)}, key=len, reverse=True)
    for s in _SECRETS:
        if s in text:
            text = text.replace(s, "<redacted>")
    return text


def _encodings(value):
    """value, reversed, in hex, and for each of the three offsets it may start at, the part of
    its base64 that does not depend on what stands before or after it."""
    import base64
    raw = value.encode()
    cores = {enc(b"\0" * pad + raw).decode()[(4 * pad + 2) // 3 + 1:-4]  # neighbours' characters dropped
             for pad in range(3) for enc in (base64.b64encode, base64.urlsafe_b64encode)}
    return {value, value[::-1], raw.hex(), raw.hex().upper()} | {c for c in cores if len(c) >= 8}


def redact_result(res):
    """redact() a worker's result (its message and log) in place."""
    for key in ("message", "log"):
        if isinstance(res.get(key), str):
            res[key] = redact(res[key])


# In the forkserver's environment, and so in every worker from its start (glibc reads its
# tunables only then): no per-thread cache of freed blocks. malloc hands those out without
# M_PERTURB's fill, so a small output could read a stale answer instead of the poison
# (correctness.poisoned). Workers drop it for the programs they start (worker.py).
WORKER_TUNABLES = "glibc.malloc.tcache_count=0"


WORKER_NAME = "cudal1-worker"  # the name of every evaluator worker process (evaluator.py)


def _without_main(prepare):
    """multiprocessing's preparation data for a new process, less the parent's main script
    where the process is one of our workers: a forked worker would otherwise run that script
    again as __mp_main__ (the `pytest` script imports pytest; evaluate.py its imports), a few
    tenths of a second of every job, for nothing: a worker's target and arguments live in
    kernels.worker. (The forkserver's own __main__ preload, which would make that run once,
    never takes effect on Python 3.11.)"""
    def prep(name):
        d = prepare(name)
        if name.startswith(WORKER_NAME):
            d.pop("init_main_from_path", None)
            d.pop("init_main_from_name", None)
        return d
    prep.wrapped = prepare
    return prep


def start_forkserver():
    """Start multiprocessing's forkserver (once per process) with the minimal environment,
    so the workers it forks, and /proc/<worker>/environ, hold no secret of this process, and
    WORKER_TUNABLES; say once which protections this machine refuses."""
    import sys
    from multiprocessing import forkserver, spawn
    if not hasattr(spawn.get_preparation_data, "wrapped"):
        spawn.get_preparation_data = _without_main(spawn.get_preparation_data)
    saved = os.environ.copy()
    os.environ.clear()
    os.environ.update(minimal_env(saved), GLIBC_TUNABLES=WORKER_TUNABLES)
    try:
        forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    missing = probe()
    global _REPORTED
    if not _REPORTED:
        _REPORTED = True
        if missing:
            print("evaluator: candidates run without these protections on this machine: "
                  + "; ".join(f"{k} ({v})" for k, v in missing.items()), file=sys.stderr)
        if WATCHED:
            print("evaluator: no control group here for " + ", ".join(WATCHED) + ": the evaluator, not the "
                  "kernel, holds these limits, looking at each job twice a second", file=sys.stderr)


_REPORTED = False


def forkserver_folder():
    """The folders of multiprocessing's forkserver sockets on this machine: this evaluator's
    and every other's (each forks a process for anyone who connects, outside every box)."""
    import glob
    import tempfile
    return sorted({d for t in {tempfile.gettempdir(), "/tmp"} for d in glob.glob(os.path.join(t, "pymp-*"))})


def devices():
    """The files outside its folders a job may write (none made): the null device, the GPU's
    device files, and its own process's /proc entries (CUDA does not start without).
    Not the rest of /dev: it holds the machine's disks, whose raw blocks are every file
    outside the box (hacks/sandbox_root.py). Shared memory is a folder of its own."""
    return ["/dev/null", *glob.glob("/dev/nvidia*"), *glob.glob("/dev/dri/*"), os.path.realpath("/proc/self")]


def _landlock(writable, scope=True):
    """Confine writes (create, write, truncate, remove, rename, link) to `writable` folders and
    /dev/shm, and to writing the files in devices() (no device node made anywhere); reads
    and execution stay open. From Landlock ABI 6 (Linux 6.12) also scope signals and
    abstract Unix sockets to the job's own processes: no signal to the Evaluator, a sibling
    worker or anything else outside, no connection to a listener outside.
    scope=False (a later, narrower ruleset): the scope stays the first ruleset's, so the
    worker still reaps what it started before. -> the Landlock ABI version, or raise OSError."""
    syscall = _libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(_NR["landlock_create_ruleset"], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        raise OSError(ctypes.get_errno(), "Landlock unavailable")
    handled = (1 << 1) | sum(1 << b for b in range(4, 13))   # WRITE_FILE, REMOVE_*, MAKE_*
    if abi >= 2:
        handled |= 1 << 13                                      # REFER (rename, link across folders)
    if abi >= 3:
        handled |= 1 << 14                                      # TRUNCATE
    folder = handled & ~((1 << 6) | (1 << 11))  # no MAKE_CHAR, MAKE_BLOCK: no device node anywhere
    existing = handled & ((1 << 1) | (1 << 14))  # devices: writing what is there (WRITE_FILE, TRUNCATE)
    # landlock_ruleset_attr: handled_access_fs, handled_access_net, scoped (ABI 6: abstract
    # Unix sockets, signals); older kernels take the first field alone
    attr = (ctypes.c_uint64 * 3)(handled, 0, (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if scope else 0)
    size = 24 if abi >= 6 else 8
    fd = syscall(_NR["landlock_create_ruleset"], ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]
    try:
        rules = [(p, folder) for p in [*writable, "/dev/shm"] if os.path.isdir(p)] + \
            [(p, existing) for p in devices() if os.path.exists(p)]
        for path, allowed in rules:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = PathBeneath(allowed, pfd)
                if syscall(_NR["landlock_add_rule"], ctypes.c_int(fd), ctypes.c_int(1), ctypes.byref(rule),
                           ctypes.c_uint32(0)) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
            finally:
                os.close(pfd)
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if syscall(_NR["landlock_restrict_self"], ctypes.c_int(fd), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(fd)
    return abi


IN_PID_NAMESPACE = False  # set in the job process own_pid_namespace() made


def own_pid_namespace():
    """Run the rest of this worker in a PID namespace of its own, with a /proc of its own
    (in a mount namespace of its own), which shows no process but the job's: not the
    Evaluator, not a sibling, not a process or thread started after the job began. Called first thing in a worker, before
    CUDA starts and before any thread (a fork follows). Only a process's children enter a
    new PID namespace, so this process forks twice and stays outside, as the worker the
    Evaluator knows: the first child is the namespace's init (its death kills everything in
    the namespace), the second returns from here and runs the job. This process waits for
    the job and exits as it did (the same code, the same signal); a kill of this process
    kills both (PR_SET_PDEATHSIG), and all three share its process group, which the GPU
    gate stops and continues. -> True in the job, or why not (it needs root). The Evaluator
    asks for it only where probe() found it whole ("process view")."""
    global IN_PID_NAMESPACE
    os.setsid()
    if _libc.unshare(CLONE_NEWPID) != 0:
        return f"unshare(CLONE_NEWPID): {os.strerror(ctypes.get_errno())} (needs root)"
    init = os.fork()
    if init == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.closerange(0, 1 << 16)
        while True:  # signals from inside the namespace do not reach its init
            signal.pause()
    job = os.fork()
    if job == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        try:  # its /proc at once: CUDA reads /proc/<getpid()>, which must be this process's
            if _libc.unshare(CLONE_NEWNS) != 0:
                raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}")
            _mount(None, "/", None, MS_REC | MS_PRIVATE)  # first: nothing mounted here reaches the host
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except OSError as e:  # enter() then covers every other process's folder in the host's /proc
            return f"a /proc of its own: {e}"
        IN_PID_NAMESPACE = True
        return True
    os.closerange(3, 1 << 16)  # the job's pipes are the job's: its end of file is the Evaluator's sign
    while True:
        try:
            _, status = os.waitpid(job, 0)
            break
        except InterruptedError:
            continue
    os.kill(init, signal.SIGKILL)
    if os.WIFSIGNALED(status):  # the same death, for the Evaluator to read
        try:
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            pass
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def enter(workdir, writable=(), groups=None, hidden=()):
    """Box the calling worker: into its job's control groups (JobGroup.dirs), a child
    subreaper, no network, System V IPC of its own, mounts of its own (a fresh /dev/shm; the
    folders in `hidden` covered, but for workdir and `writable` beneath them), working directory `workdir`,
    writes only under workdir, `writable`, /dev/shm and the device files of devices(), no
    signal or abstract socket beyond its own processes, and no capability left.
    -> {protection: True, or why it is missing}."""
    got = {}
    for d in set((groups or {}).values()):  # first: joining writes outside the folders allowed below
        try:
            write_value(d, "cgroup.procs", os.getpid())
        except OSError as e:
            got["limits"] = f"joining {d}: {e}"
    got["processes"] = _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 or \
        f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}"
    got["network"] = _no_network()
    got["ipc"] = _own_ipc()  # after _no_network: without root, in its user namespace
    got["private mounts"] = _private_mounts(hidden, [workdir, *writable])  # before Landlock, which forbids mounts
    os.chdir(workdir)
    try:
        abi = _landlock([workdir, *writable] + (["/tmp"] if PRIVATE_TMP else []))
        got["files"] = True
        got["signals"] = abi >= 6 or f"Landlock ABI {abi} (scoped signals need 6: Linux 6.12)"
    except (OSError, AttributeError) as e:
        got["files"] = got["signals"] = f"Landlock: {e}"
    got["privileges"] = _drop_capabilities()  # last: the steps above need them
    return got


def _drop_capabilities():
    """Every capability gone, the bounding set's too, so no program the job runs gets one back.
    Root (the user on the project's machines) keeps its uid and the files it owns, but loses
    what no file rule covers: device nodes, kernel modules, BPF, raw I/O, scheduling above
    others, raised limits, the GPU driver's administrator calls. -> True, or why not."""
    try:
        last = int(open("/proc/sys/kernel/cap_last_cap").read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):  # needs CAP_SETPCAP; without it the bounding set is already narrow
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    if _libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:  # effective, permitted, inheritable: none
        return f"capset: {os.strerror(ctypes.get_errno())}"
    # (the bounding set may stay where there was no CAP_SETPCAP to drop it: without privileges
    # to start with, and with no_new_privs set, no exec can use it)
    status = open("/proc/self/status").read()
    left = [l for l in status.splitlines() if l.startswith(("CapEff", "CapPrm", "CapAmb")) and int(l.split()[1], 16)]
    return not left or f"capabilities left: {left}"


def _mount(src, target, fstype, flags, data=None):
    enc = (lambda x: None if x is None else x.encode())
    if _libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}: {os.strerror(ctypes.get_errno())}")


def _mask_processes():
    """The /proc folder of every other process alive now (the evaluator and its ancestors,
    which hold the user's secrets in /proc/<pid>/environ, and any other) covered in this
    mount namespace by an empty, read-only one, with its threads' (/proc/<tid> opens too).
    Spared: the sibling workers (minimal environments; their threads are most threads here)
    and kernel threads. A process started later is not covered (EVAL.md, "Known limits")."""
    empty = "/dev/shm/.masked"
    os.mkdir(empty, 0)
    _mount("tmpfs", empty, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0")
    spared = {os.getpid(), 2}  # 2: kthreadd, the kernel threads' parent
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in spared:
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid in (os.getppid(), 2):  # a sibling (the forkserver's child), a kernel thread
                continue
            ids = [t for t in os.listdir(f"/proc/{name}/task") if t != name] + [name]
            for i in ids:  # threads before their process, whose folder holds theirs
                _mount(empty, f"/proc/{i}", None, MS_BIND)
        except OSError:
            pass  # gone meanwhile


def _private_mounts(hidden, keep):
    """A mount namespace of this thread's own (every process it starts shares it): a fresh
    /dev/shm, so whatever the job leaves there goes with it; a /proc of its PID namespace
    (own_pid_namespace), or where it has none, every other process's /proc folder covered
    (_mask_processes); each folder in `hidden` (the
    evaluator's job folders, other programs' builds, the forkserver's socket, saved results)
    covered by an empty one, with the folders in `keep` beneath them bound back.
    -> True, or why not (it needs root, or a user namespace: _no_network)."""
    if _libc.unshare(CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())} (needs root or a user namespace)"
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host's view
        held = {k: os.open(k, os.O_PATH | os.O_CLOEXEC) for k in keep if os.path.isdir(k)}
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,nr_inodes={TMPFS_FILES}")
        _private_tmp(hidden)
        if not IN_PID_NAMESPACE:  # (there /proc is the namespace's own: own_pid_namespace)
            _mask_processes()
        covered = [h for h in hidden if os.path.isdir(h)]
        for h in covered:
            _mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
        for k, fd in held.items():  # a kept folder under a covered (or read-only) one: bound back where it was
            if not os.path.isdir(k) or (PRIVATE_TMP and k.startswith("/tmp/")):
                os.makedirs(k, exist_ok=True)
                _mount(f"/proc/self/fd/{fd}", k, None, MS_BIND | MS_REC)
            os.close(fd)
        for h in covered:  # read-only once the kept folders are in (writes under its own /tmp are allowed)
            _mount(None, h, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        return True
    except OSError as e:
        return str(e)


def leave_evaluator_channels():
    """Close the pipes this worker inherited through the forkserver that lead out of its job:
    - to the Evaluator's multiprocessing resource tracker, a process outside every box that,
      when the Evaluator exits, unlinks every semaphore and shared-memory name registered with
      it (a candidate could have another program's /dev/shm entries removed). What the job's
      multiprocessing registers from now on goes nowhere: its semaphores and shared memory
      live in the job's own /dev/shm, which goes with it. (A tracker of the job's own would be
      a process the candidate left behind.)
    - the forkserver's "alive" pipe: a byte written to it (reopened through /proc/self/fd)
      ends the forkserver, and multiprocessing would start a new one from the Evaluator's
      process, with its whole environment (start_forkserver guards that too)."""
    from multiprocessing import forkserver, resource_tracker
    t = resource_tracker._resource_tracker
    fs = forkserver._forkserver
    for fd in (getattr(t, "_fd", None), getattr(fs, "_forkserver_alive_fd", None)):
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    t._fd = t._pid = None
    t._send = lambda *args: None  # the module's register() and unregister() send through it
    fs._forkserver_alive_fd = None


PRIVATE_TMP = False  # this job's /tmp is its own (_private_tmp)


# Every live Evaluator lists here what its jobs must not see (its job folders, its outputs,
# the project's results), so that each covers the others' too, whoever started them. A
# folder of /tmp, so shared by every user (sticky, like /tmp); in a job's own /tmp it is
# gone with the other evaluators' job folders (_private_tmp).
REGISTRY = "/tmp/kernels-evaluators"


def register_hidden(hidden):
    """List this process's Evaluator's hidden folders -> the entry's path (None where /tmp
    refuses it: its own jobs are covered all the same, other evaluators' jobs just not told)."""
    import json
    try:
        os.makedirs(REGISTRY, exist_ok=True)
        try:
            os.chmod(REGISTRY, 0o1777)  # the first evaluator on the machine made it: open it to all
        except PermissionError:
            pass  # another user's: already open
        fd, tmp = tempfile.mkstemp(dir=REGISTRY, prefix=f"{os.getpid()}-", suffix=".part")
        with os.fdopen(fd, "w") as f:
            json.dump(list(hidden), f)
        os.chmod(tmp, 0o644)
        os.rename(tmp, tmp[:-len(".part")] + ".json")
        return tmp[:-len(".part")] + ".json"
    except OSError:
        return None


def unregister_hidden(path):
    if path:
        try:
            os.remove(path)
        except OSError:
            pass


def others_hidden(own=None):
    """The folders every other live Evaluator on this machine hides from its jobs (entries of
    processes gone are removed where we may)."""
    import json
    out = []
    try:
        names = os.listdir(REGISTRY)
    except OSError:
        return out
    for name in names:
        path = os.path.join(REGISTRY, name)
        if path == own or not name.endswith(".json"):
            continue
        try:
            os.kill(int(name.split("-")[0]), 0)
        except ProcessLookupError:
            unregister_hidden(path)  # its evaluator is gone (killed before it could close)
            continue
        except (PermissionError, ValueError):
            pass  # another user's, alive
        try:
            with open(path) as f:
                out += [h for h in json.load(f) if isinstance(h, str)]
        except (OSError, ValueError):
            continue
    return out


def _private_tmp(hidden):
    """A /tmp of the job's own: a fresh tmpfs, where what was in /tmp when the job began (a
    virtual environment, a checkout may live there) is bound back read-only, but for the
    folders in `hidden`. Published kernels write their sources to /tmp/<name> and build from
    there; this lets them, and what they leave goes with the job. Where it cannot be made,
    /tmp stays as it is, read-only to the job (Landlock)."""
    global PRIVATE_TMP
    try:
        names = os.listdir("/tmp")
        if len(names) > 2000:  # thousands of mounts per job: not worth it
            return
        held = {}
        for name in names:
            p = os.path.join("/tmp", name)
            # any forkserver's folder, also one another program started after the Evaluator
            # listed them for this job (forkserver_folder): its socket forks for anyone; and
            # every evaluator's job folders and the registry (kernels-*), whoever started it
            if p not in hidden and not name.startswith(("pymp-", "kernels-")):
                held[name] = (os.open(p, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC),
                              os.readlink(p) if os.path.islink(p) else None)
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size=2g,nr_inodes={TMPFS_FILES}")
    except OSError:
        return
    for name, (fd, link) in held.items():
        p = os.path.join("/tmp", name)
        try:
            if link is not None:
                os.symlink(link, p)
                continue
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(p)
            else:
                open(p, "w").close()
            _mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC)
            _mount(None, p, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        except OSError:
            pass  # gone meanwhile, or a kind that cannot be bound: not there for this job
        finally:
            os.close(fd)
    PRIVATE_TMP = True


def _no_network():
    """Move into a new, empty network namespace: as root directly; without root inside a new
    user namespace, where the kernel allows unprivileged ones (only a process with one
    thread can enter one: every worker boxes itself before it starts a thread, CUDA's too).
    -> True, or why not."""
    if _libc.unshare(CLONE_NEWNET) == 0:
        return True
    why = os.strerror(ctypes.get_errno())
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return f"unshare(CLONE_NEWNET): {why} (needs root); in a new user namespace: {os.strerror(ctypes.get_errno())}"
    try:  # the same user and group inside, so files and permissions look as before
        write_value("/proc/self", "setgroups", "deny")
        write_value("/proc/self", "uid_map", f"{uid} {uid} 1")
        write_value("/proc/self", "gid_map", f"{gid} {gid} 1")
    except OSError:
        pass
    return True


def _own_ipc():
    """An IPC namespace of the job's own: the System V shared memory, message queues and
    semaphores of other programs (root reaches them all) out of its reach, and its own gone
    with it; and a segment no process has attached removed at once (shm_rmid_forced), so
    that the memory of every segment is in the resident set of a process that maps it, where
    the job's memory is watched. -> True, or why not."""
    if _libc.unshare(CLONE_NEWIPC) != 0:
        return f"unshare(CLONE_NEWIPC): {os.strerror(ctypes.get_errno())} (needs root or a user namespace)"
    try:
        write_value("/proc/sys/kernel", "shm_rmid_forced", 1)
    except OSError as e:
        return f"an IPC namespace, but detached segments kept: shm_rmid_forced: {e}"
    return True


def program_cache(root, src_hash):
    """The part of the build cache (root) one candidate program may write: its builds, its
    torch extensions, its Triton and Inductor caches, keyed by the hash of its whole source.
    Identical programs share it, and no program can plant a file where another one will
    load from."""
    return os.path.join(root, "programs", src_hash[:32])


@contextlib.contextmanager
def exclusive(path, wait):
    """One process at a time in the block, across workers (an flock on `path`): two jobs that
    compile the reference into the shared cache at once collided there (in PID namespaces
    their compilers' temporary files, named by pid and thread, are one path; seen in CI).
    -> True in the block once this process holds the lock; False after `wait` seconds without
    it: any process that can read the file can flock it (a candidate's, for as long as its job
    lives), so nobody waits on it for longer."""
    with open(path, "a") as lock:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(0.05)
        yield True


def confine(writable):
    """Narrow a boxed worker's writable folders further (Landlock rulesets stack, so this
    never widens what enter allowed) -> True, or False where Landlock is missing."""
    try:
        _landlock(list(writable), scope=False)
        return True
    except (OSError, AttributeError):
        return False


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def kill_tree(pid):
    """Stop pid and everything below it (again until no new process appears: a fork racing
    the scan is caught stopped), then kill them all."""
    seen = set()
    for _ in range(20):
        new = [p for p in [pid] + descendants(pid) if p not in seen]
        if not new:
            break
        signal_all(new, signal.SIGSTOP)
        seen.update(new)
    signal_all(seen, signal.SIGKILL)


def reap():
    """In a worker at the end of its job: kill every process below it and collect the
    zombies. -> the command lines of those the candidate left (torch.compile's own compile
    workers, which torch starts and keeps, are not counted)."""
    pids = descendants(os.getpid())
    # an empty command line is a zombie: already dead, only waiting to be collected
    left = [c for c in (_cmdline(p) for p in pids) if c and "compile_worker" not in c]
    signal_all(pids, signal.SIGKILL)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break
    return left


def probe():
    """Which protections this machine refuses, tried once per process in a fresh Python
    child that enters the box and tries to get out: -> {protection: why} (empty when all hold)."""
    global _PROBED
    if _PROBED is None:
        import json
        import shutil
        import subprocess
        import sys
        import tempfile
        dirs = [tempfile.mkdtemp(prefix="sandbox-probe-"), tempfile.mkdtemp(prefix="sandbox-outside-")]
        open(os.path.join(dirs[1], "seen"), "w").close()  # the box must not see it (hidden)
        group = JobGroup("probe", pids=PROBE_PIDS, memory=1 << 30, cpu=1.0)
        try:
            r = subprocess.run([sys.executable, __file__, *dirs, json.dumps(group.dirs)],
                               capture_output=True, text=True, timeout=60)
        finally:
            for d in dirs:  # here, outside the box: the child may not remove them
                shutil.rmtree(d, ignore_errors=True)
        try:
            got = json.loads(r.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            got = {"probe": f"the probe failed: {r.stderr[-300:]}"}
        got["job memory"] = ("memory" in group.dirs and got.get("limits", True) is True) or \
            os.path.exists("/proc/self/smaps_rollup") or "no memory control group, no /proc/<pid>/smaps_rollup to watch"
        # the child's own start-up, counted
        got["job CPU time"] = group.cpu_seconds() > 0 or \
            "no control group this process may make (needs root, and cgroup v1 or a delegated v2 controller)"
        if "pids" not in group.dirs:  # then watched (JobGroup.over_limit), as the memory
            got["process count"] = os.path.exists(f"/proc/{os.getpid()}/stat") or "no /proc/<pid>/stat to watch"
        WATCHED[:] = [k for k, c in (("process count", "pids"), ("job memory", "memory"))
                      if c not in group.dirs and got[k] is True]
        group.close()
        _PROBED = {k: v for k, v in got.items() if v is not True}
    return _PROBED


PROBE_PIDS = 8
WATCHED = []  # the job limits that hold here only because the evaluator watches them (probe)


def _probe_child(work, outside, groups):
    import json
    import socket
    view = own_pid_namespace()
    got = enter(work, groups=json.loads(groups), hidden=[outside])
    others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
    got["process view"] = (view is True and not others) or (
        f"{view}: only the processes alive when a job starts are out of its sight" if view is not True else
        f"{len(others)} processes outside the job visible in its /proc")
    kids, refused = [], 0
    for _ in range(2 * PROBE_PIDS):  # more processes than the probe's group allows
        try:
            pid = os.fork()
        except BlockingIOError:
            refused += 1
            continue
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    signal_all(kids, signal.SIGKILL)
    for pid in kids:
        os.waitpid(pid, 0)
    got["process count"] = refused > 0 or f"{2 * PROBE_PIDS} processes started in a group of {PROBE_PIDS}"
    if got["network"] is True:
        try:
            socket.create_connection(("127.0.0.1", 9), timeout=1).close()
            got["network"] = "a connection to 127.0.0.1 got through"
        except OSError as e:
            if e.errno != 101:  # ENETUNREACH: the empty namespace
                got["network"] = f"connect gave {e} rather than network unreachable"
    if got["signals"] is True:
        try:  # outside the box: the parent, or (in a PID namespace, where it is out of sight) init
            os.kill(os.getppid() or 1, 0)
            got["signals"] = "a signal to the process outside the box got through"
        except PermissionError:
            pass
    if got["ipc"] is True:  # a segment filled, then detached: gone at once
        _libc.shmat.restype = ctypes.c_void_p
        sid = _libc.shmget(0, 1 << 16, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
        at = _libc.shmat(sid, None, 0) if sid >= 0 else None
        if at is not None and at != ctypes.c_void_p(-1).value:
            ctypes.memset(at, 1, 1 << 16)
            _libc.shmdt(ctypes.c_void_p(at))
        if sid < 0 or _libc.shmctl(sid, 2, ctypes.create_string_buffer(512)) == 0:  # IPC_STAT
            got["ipc"] = "a segment no process had attached was still there" if sid >= 0 else "no segment made"
    if got["private mounts"] is True and os.path.exists(os.path.join(outside, "seen")):
        got["private mounts"] = "a covered folder's file was still visible"
    if got["files"] is True:  # next to this file: outside the work folder, never covered
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f".probe-{os.getpid()}")
        try:
            open(path, "w").close()
            os.remove(path)
            got["files"] = "a write outside the work folder got through"
        except OSError as e:
            if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                got["files"] = f"a write outside the work folder gave {e}"
    import seccomp  # (this file runs as a script here: its folder is on the path)
    got["system calls"] = seccomp.install() or seccomp.refuses_timers() or "timer_create got through the filter"
    print(json.dumps(got))


_PROBED = None

if __name__ == "__main__":  # probe()'s child
    import sys
    _probe_child(*sys.argv[1:4])
