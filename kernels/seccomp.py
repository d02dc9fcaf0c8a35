"""The kernel's half of the box: a seccomp-BPF filter a worker installs on itself right before
the candidate's code is loaded (harness.py), so that what a candidate's process may not do is
refused by the kernel, whatever way the call is made (a raw `syscall` instruction, a glibc
alias, a library that imports no system function at all: seccomp sees only numbers). The
symbol check (static.py) stays as an early message. Issue 56; EVAL.md, "The system-call filter".

    prog = seccomp.program(seccomp.native_arch())   # list of (code, jt, jf, k) BPF instructions
    seccomp.install()                                # -> None, or why it could not be installed

The filter is a list of refusals: everything else is allowed, because what CUDA's driver,
torch, Triton and the compilers a first-call build starts need is large and not ours to list.
A refused call fails with EPERM (clone3 with ENOSYS, so glibc falls back to clone, whose flags
the filter can read), so the candidate sees an error and the verdict says what it was.
Filters are inherited by every thread and child and cannot be removed, only narrowed.
"""
import ctypes
import errno
import platform
import signal

# -- BPF and seccomp constants (linux/filter.h, linux/seccomp.h, linux/audit.h) -------------------
LD_W_ABS, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # AUDIT_ARCH_*, seccomp_data.arch
X32_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under numbers past this bit
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_FILTER_FLAG_TSYNC = 1  # every thread of the process, not just the caller

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian words)
OFF_NR, OFF_ARCH = 0, 4


def _arg(i, high=False):
    return 16 + 8 * i + (4 if high else 0)


# System call numbers, x86_64 (asm/unistd_64.h) and aarch64 (asm-generic/unistd.h); None: no such call.
NR = {  # name: (x86_64, aarch64)
    "clone": (56, 220), "clone3": (435, 435), "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240), "pidfd_send_signal": (424, 424),
    "rt_sigaction": (13, 134), "timer_create": (222, 107), "timer_settime": (223, 110), "setitimer": (38, 103),
    "alarm": (37, None), "mq_notify": (244, 184), "fcntl": (72, 25), "ioctl": (16, 29),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "perf_event_open": (298, 241), "ptrace": (101, 117), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "pidfd_getfd": (438, 438), "kcmp": (312, 272), "unshare": (272, 97),
    "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "move_mount": (429, 429), "open_tree": (428, 428), "mount_setattr": (442, 442), "bpf": (321, 280),
    "userfaultfd": (323, 282), "personality": (135, 92), "sched_setaffinity": (203, 122),
    "sched_setscheduler": (144, 119), "sched_setparam": (142, 118), "sched_setattr": (314, 274),
    "setpriority": (141, 140), "ioprio_set": (251, 30), "prlimit64": (302, 261), "prctl": (157, 167),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "acct": (163, 89),
    "reboot": (169, 142), "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "swapon": (167, 224), "swapoff": (168, 225),
    "settimeofday": (164, 170), "clock_settime": (227, 112), "clock_adjtime": (305, 266), "adjtimex": (159, 171),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264), "fanotify_init": (300, 262),
}

# Refused outright (EPERM). Why, by group:
DENIED = (
    # timers that deliver signals: a signal every half millisecond to the main thread, whose
    # handler spins while the reference runs (a native timer made with raw syscalls).
    # timerfd is left: it signals no one, and a thread that waits on it is a thread (watched)
    "timer_create", "timer_settime", "setitimer", "alarm",
    "mq_notify",  # a message queue's notification is a signal too (SIGEV_SIGNAL)
    # io_uring's operations are not system calls, so no filter sees them: a way round all of this
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # reading or changing other processes (the evaluator's, other jobs'), and counting the
    # machine's events: ptrace, cross-process memory, stealing descriptors, perf counters
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "perf_event_open",
    # leaving the box: namespaces, mounts, the root folder, file handles, kernel code and keys
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "open_by_handle_at", "name_to_handle_at", "bpf",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "keyctl", "add_key",
    "request_key", "fanotify_init", "acct", "reboot", "swapon", "swapoff",
    # page faults handled by a thread of the candidate: it could stall the harness's memory at will
    "userfaultfd",
    # scheduling and priority: the reference's threads made to yield, or the candidate's favoured
    "sched_setscheduler", "sched_setparam", "sched_setattr", "setpriority", "ioprio_set",
    # the clocks the timing reads
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
)

# Signals sent by the kill family may only be 0 (is it alive?) and SIGKILL (the worker reaps
# what the job started, sandbox.reap): a SIGSTOP/SIGCONT pair from a child around the
# reference's calls, or any signal whose handler spins, needs another number. raise() and
# abort() use tgkill: abort still ends the process (glibc falls back to a fault).
SIGNALLERS = {"kill": 1, "tkill": 1, "tgkill": 2, "rt_sigqueueinfo": 1, "rt_tgsigqueueinfo": 2, "pidfd_send_signal": 1}
SIGNALS_SENT = (0, signal.SIGKILL)
# A handler may be installed (rt_sigaction with a new action) only for the signals that the
# programs a build starts insist on handling (ninja: CHLD, INT, TERM, HUP, fatal if refused;
# sh: QUIT and the terminal's stop signals; Python: INT, and it ignores PIPE and XFSZ). Of
# these only CHLD reaches the worker from inside the job (a child's exit): the kill family
# above, timers, fcntl's F_SETSIG and clone's exit signal are refused, PIPE and XFSZ go to the
# thread that wrote. A handler the worker gets anyway is seen by the kernel-side hook check
# (guards.interpreter_hooks). Asking for the current action is always allowed.
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE, signal.SIGXFSZ,
           signal.SIGCHLD, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
# fcntl commands that make the kernel signal a process when a file is ready or changes
# (F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY): another signal source
FCNTL_SIGNALS = (8, 10, 15, 1024, 1026)
# ioctl commands that take a terminal as the controlling one or type into it (TIOCSCTTY,
# TIOCSTI, TIOCSPGRP): a terminal sends INT, QUIT, HUP and STOP to its foreground group
IOCTL_TTY = (0x540E, 0x5412, 0x5410)
# clone: threads and child processes are allowed (first-call builds, torch.compile and Triton
# start compilers from inside the candidate's calls; every child inherits this filter and the
# evaluator charges and reaps them: EVAL.md), but not with an exit signal other than SIGCHLD
# (a child that dies with SIGINT sent to its parent) nor into new namespaces.
CLONE_NEW = 0x7E020080  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET, NEWTIME (0x80)
CSIGNAL = 0xFF
# prctl options: PR_SET_DUMPABLE (the worker's memory readable by other processes again),
# PR_SET_PTRACER (letting one trace it), PR_SET_MM (rewriting its own memory map's records)
PRCTL_DENIED = (4, 0x59616D61, 35)
PERSONALITY_QUERY = 0xFFFFFFFF


def native_arch():
    """-> "x86_64" or "aarch64", or None for a machine this filter has no numbers for."""
    m = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m.lower(), m) if m.lower() in (
        "x86_64", "amd64", "aarch64", "arm64") else None


def _assemble(block):
    """Instructions with symbolic jump targets ("allow", "deny", or an int offset) -> the same
    with offsets; the block ends with the two returns the labels name."""
    out = []
    n = len(block)
    where = {"allow": n, "deny": n + 1}
    for i, (code, jt, jf, k) in enumerate(block):
        jt = where[jt] - i - 1 if isinstance(jt, str) else jt
        jf = where[jf] - i - 1 if isinstance(jf, str) else jf
        out.append((code, jt, jf, k))
    return out + [(RET, 0, 0, RET_ALLOW), (RET, 0, 0, RET_ERRNO | errno.EPERM)]


def _low_in(i, values, then, otherwise):
    """The low word of argument i (an int argument: the kernel reads only that) in values."""
    jumps = [(JEQ, then, 0, v) for v in values]
    return [(LD_W_ABS, 0, 0, _arg(i))] + jumps[:-1] + [(JEQ, then, otherwise, values[-1])]


def _rule(name):
    """The body checked for one system call -> instructions ending in its verdict."""
    if name in SIGNALLERS:
        return _assemble(_low_in(SIGNALLERS[name], SIGNALS_SENT, "allow", "deny"))
    if name == "rt_sigaction":  # a NULL new action (both words zero) only reads the current one
        return _assemble([(LD_W_ABS, 0, 0, _arg(1)), (JEQ, 0, 2, 0), (LD_W_ABS, 0, 0, _arg(1, True)),
                          (JEQ, "allow", 0, 0)] + _low_in(0, HANDLED, "allow", "deny"))
    if name == "fcntl":
        return _assemble(_low_in(1, FCNTL_SIGNALS, "deny", "allow"))
    if name == "ioctl":
        return _assemble(_low_in(1, IOCTL_TTY, "deny", "allow"))
    if name == "clone":  # the flags are the first argument on both machines
        return _assemble([(LD_W_ABS, 0, 0, _arg(0)), (JSET, "deny", 0, CLONE_NEW),
                          (0x54, 0, 0, CSIGNAL),  # BPF_ALU|BPF_AND|BPF_K: the exit signal
                          (JEQ, "allow", 0, 0), (JEQ, "allow", "deny", signal.SIGCHLD)])
    if name == "clone3":  # its flags sit in memory the filter cannot read: glibc then uses clone
        return [(RET, 0, 0, RET_ERRNO | errno.ENOSYS)]
    if name in ("sched_setaffinity", "prlimit64"):  # the calling thread or process only (pid 0):
        # the gate moves the worker's main thread, the candidate may move its own threads
        # (watched: guards.watch_affinity), nobody else's
        return _assemble(_low_in(0, (0,), "allow", "deny"))
    if name == "prctl":
        return _assemble(_low_in(0, PRCTL_DENIED, "deny", "allow"))
    if name == "personality":
        return _assemble(_low_in(0, (PERSONALITY_QUERY,), "allow", "deny"))
    assert name in DENIED, name
    return [(RET, 0, 0, RET_ERRNO | errno.EPERM)]


RULES = tuple(SIGNALLERS) + ("rt_sigaction", "fcntl", "ioctl", "clone", "clone3", "sched_setaffinity", "prlimit64",
                             "prctl", "personality") + DENIED


def program(arch):
    """The filter for `arch` ("x86_64" or "aarch64") -> [(code, jt, jf, k)]. Another
    architecture's calls (i386's int 0x80 on x86_64) and x32's numbers are refused whole."""
    col = ("x86_64", "aarch64").index(arch)
    prog = [(LD_W_ABS, 0, 0, OFF_ARCH), (JEQ, 1, 0, ARCH[arch]), (RET, 0, 0, RET_ERRNO | errno.EPERM),
            (LD_W_ABS, 0, 0, OFF_NR)]
    if arch == "x86_64":
        prog += [(0x35, 0, 1, X32_BIT), (RET, 0, 0, RET_ERRNO | errno.EPERM)]  # BPF_JGE
    for name in RULES:
        nr = NR[name][col]
        if nr is None:
            continue
        body = _rule(name)  # ends in a return, so the number stays loaded when it is skipped
        prog += [(JEQ, 0, len(body), nr)] + body
    prog.append((RET, 0, 0, RET_ALLOW))
    return prog


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}


def install():
    """Install the filter on every thread of this process (no new privileges first, which an
    unprivileged filter needs) -> None, or why not (the caller reports it: the box then holds
    without the kernel's half). The worker calls it once, right before the candidate's code."""
    arch = native_arch()
    if arch is None:
        return f"no system-call numbers for {platform.machine()}: the filter is not installed"
    prog = program(arch)
    if any(jt > 255 or jf > 255 for _, jt, jf, _ in prog) or len(prog) > 4096:
        return "the filter does not fit BPF's limits"  # a rule grew too long: a bug here, said loudly
    libc = ctypes.CDLL(None, use_errno=True)
    insns = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), insns)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS): {errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())}"
    # seccomp(2) with TSYNC: the threads torch, CUDA and the harness already started get it too
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(SYS_SECCOMP[arch]), ctypes.c_uint(1), ctypes.c_uint(SECCOMP_FILTER_FLAG_TSYNC),
                     ctypes.byref(fprog))  # SECCOMP_SET_MODE_FILTER
    if r != 0:
        e = ctypes.get_errno()
        return f"seccomp(SET_MODE_FILTER): {'a thread could not take it (tid ' + str(r) + ')' if r > 0 else errno.errorcode.get(e, e)}"
    return None


def refuses_timers():
    """After install: does a raw timer_create fail with EPERM? (the start-up probe's check)"""
    arch = native_arch()
    libc = ctypes.CDLL(None, use_errno=True)
    timer = ctypes.c_int()
    r = libc.syscall(ctypes.c_long(NR["timer_create"][("x86_64", "aarch64").index(arch)]), 1, None, ctypes.byref(timer))
    return r == -1 and ctypes.get_errno() == errno.EPERM
