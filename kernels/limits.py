"""A job's limits: a control group of its own (cgroup v1 or v2, as root, where the machine
lets this process make one) for its process count (threads included), its host memory and
its CPU time summed over every process it starts; where no group can hold a limit, the
evaluator watches the job's processes instead (sandbox.WATCHED). Standard library only
(workers import it through sandbox.py).

    group = JobGroup(name, pids=1024, memory=8 << 30, cpu=600.0)  # the parent, per job
    group.dirs                           # the worker joins these (sandbox.enter)
    group.over_limit(worker_pid)         # the parent, while the job runs: CPU time (and the rest
                                         # where no group enforces it)
    group.freeze(True); group.freeze(False)  # the parent: stop every process of the job (those in
                                         # sessions of their own too) while a neighbour times, then thaw
    group.verdict(); group.close()       # the parent, after the job: a limit it hit; remove it
    clean_groups()                       # groups of evaluators that died before removing theirs
    descendants(pid)                     # every live process below pid
"""
import contextlib
import os
import signal
import time

def descendants(pid):
    """Every live process below pid, from /proc (parents before children)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def signal_all(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


GROUP_PREFIX = "cudal1-"  # + the evaluator's pid + the job: a group whose evaluator died is stale
WATCH_SECONDS = 0.5  # how often the evaluator looks at what it watches (JobGroup.over_limit)
_BASES = None


def write_value(d, name, value):
    with open(os.path.join(d, name), "w") as f:
        f.write(str(value))


def _field(d, name, key):
    """The number after `key` in a cgroup file of 'key value' lines (0 when missing)."""
    try:
        with open(os.path.join(d, name)) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
    except (OSError, ValueError):
        pass
    return 0


def _cgroup_bases():
    """{'pids' | 'memory' | 'cpu' | 'freezer': the folder this process's job groups go in}: per
    controller in a cgroup v1 hierarchy, else in the v2 (unified) one where it delegates the
    controller (v2 freezes any group: cgroup.freeze), always below this process's own group
    (so the machine's accounting still covers jobs)."""
    global _BASES
    if _BASES is not None:
        return _BASES
    mounts, paths, _BASES = {}, {}, {}
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fstype, _, opts = (right.split() + ["", "", ""])[:3]
                for c in ([""] if fstype == "cgroup2" else opts.split(",") if fstype == "cgroup" else []):
                    mounts.setdefault(c, left.split()[4])
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                for c in ctrls.split(",") if ctrls else [""]:
                    paths[c] = path.lstrip("/")
    except (OSError, ValueError):
        return _BASES
    for want, v1 in (("pids", "pids"), ("memory", "memory"), ("cpu", "cpuacct"), ("freezer", "freezer")):
        if v1 in mounts and v1 in paths:
            d = os.path.join(mounts[v1], paths[v1])
        elif "" in mounts and "" in paths:
            d = os.path.join(mounts[""], paths[""])
            if want in ("pids", "memory"):  # v2 counts CPU time and freezes in every group; these need delegating
                try:
                    with open(os.path.join(d, "cgroup.subtree_control")) as f:
                        if want not in f.read().split():
                            write_value(d, "cgroup.subtree_control", "+" + want)
                except OSError:
                    continue
        else:
            continue
        if os.access(d, os.W_OK):
            _BASES[want] = d
    return _BASES


def _members(d):
    """The processes in one group folder (none where it cannot be read)."""
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _freeze(d, on):
    """Freeze (or thaw) every process in one group folder -> True where it has a freezer."""
    for name, value in (("cgroup.freeze", "1" if on else "0"), ("freezer.state", "FROZEN" if on else "THAWED")):
        if os.path.exists(os.path.join(d, name)):
            try:
                write_value(d, name, value)
                return True
            except OSError:
                return False
    return False


def _remove_group(d, tries=1):
    """Kill what is left in one group folder, then remove it -> True once it is gone (the
    killed take a moment to exit: more tries wait for them, 10 ms apart; a frozen group is
    thawed after the kill, as a v1 frozen process cannot die)."""
    for i in range(tries):
        signal_all(_members(d), signal.SIGKILL)
        _freeze(d, False)
        try:
            os.rmdir(d)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if i + 1 < tries:
                time.sleep(0.01)
    return False


_PAGE = os.sysconf("SC_PAGE_SIZE")


class Hidden(Exception):
    """A process of the job closed its /proc files to the watch: made itself non-dumpable
    (prctl(PR_SET_DUMPABLE, 0)), which only root's watch reads past."""


def _per_process(pids, name, value):
    """The sum over these processes of value(their /proc/<pid>/<name> file, open); one that is
    gone counts 0, one whose file is closed to this process raises Hidden."""
    total = 0
    for p in pids:
        with _quiet(p), open(f"/proc/{p}/{name}") as f:
            total += value(f)
    return total


def _rss(pids):
    """Host memory these processes hold, a page shared among them counted once per process
    (bytes): an upper bound on _pss, read in O(1) per process (no walk of its memory map)."""
    return _per_process(pids, "statm", lambda f: int(f.read().split()[1]) * _PAGE)


def _pss(pids):
    """Host memory these processes hold, each page shared among them counted once (bytes).
    Walks each process's memory map (about 15 ms for one that imported torch)."""
    return _per_process(pids, "smaps_rollup",
                        lambda f: next(int(line.split()[1]) for line in f if line.startswith("Pss:")) * 1024)


def _memory_files(pids):
    """Host memory these processes hold in files of memory, which no process's resident set
    shows (bytes): the job's own tmpfs mounts, /dev/shm and /tmp (sandbox.enter), what is used
    of each (seen through a process's /proc/<pid>/root, counted where it is another mount than
    the evaluator's own), and the anonymous memory files (memfd_create) they hold open, each
    once. Pages of these files that a process also maps count twice (an upper bound)."""
    own, mounts, files, total = set(), set(), set(), 0
    for folder in ("/dev/shm", "/tmp"):
        with contextlib.suppress(OSError):
            own.add(os.stat(folder).st_dev)
    for p in pids:
        for folder in ("dev/shm", "tmp"):
            with _quiet(p):
                path = f"/proc/{p}/root/{folder}"
                dev = os.stat(path).st_dev
                if dev not in own and dev not in mounts:
                    mounts.add(dev)
                    v = os.statvfs(path)
                    total += (v.f_blocks - v.f_bfree) * v.f_frsize
        with _quiet(p):
            for fd in os.listdir(f"/proc/{p}/fd"):
                with _quiet(p):
                    if os.readlink(f"/proc/{p}/fd/{fd}").startswith("/memfd:"):
                        st = os.stat(f"/proc/{p}/fd/{fd}")
                        if (st.st_dev, st.st_ino) not in files:
                            files.add((st.st_dev, st.st_ino))
                            total += st.st_blocks * 512
    return total


@contextlib.contextmanager
def _quiet(p):
    """Process p or a file of it gone while it was read (or cut short) counts nothing; closed
    raises Hidden."""
    try:
        yield
    except PermissionError:
        raise Hidden(p) from None
    except (OSError, ValueError, IndexError, StopIteration):
        pass


def _written(pids):
    """Bytes these processes sent to disk, counted as they dirty the pages (write_bytes of
    /proc/<pid>/io, before any writeback; tmpfs not counted: that is memory, _memory_files).
    A process's count holds those of the children it reaped, so with the worker a subreaper
    the job's whole history is in its live processes."""
    return _per_process(pids, "io", lambda f: next(int(line.split()[1]) for line in f if line.startswith("write_bytes:")))


def _entries(folders, most):
    """Files and folders under these folders (links not followed), counted up to most + 1: the
    look at a folder a candidate filled stops there."""
    n, todo = 0, list(folders)
    while todo and n <= most:
        with contextlib.suppress(OSError):
            with os.scandir(todo.pop()) as it:
                for e in it:
                    n += 1
                    if e.is_dir(follow_symlinks=False):
                        todo.append(e.path)
                    if n > most:
                        break
    return n


def _tasks(pids):
    """Processes and threads these processes are (what a pids group counts)."""
    # num_threads, field 20 of stat (after the command name, which may hold spaces and parentheses)
    return _per_process(pids, "stat", lambda f: int(f.read().rpartition(")")[2].split()[17]))


class JobGroup:
    """One job's control groups (one folder per cgroup v1 hierarchy, one for v2): at most
    `pids` processes and threads at once and `memory` bytes of host memory, both enforced by
    the kernel, and its CPU time over all its processes, which the parent compares with
    `cpu` seconds. dirs is {} where the machine allows none (no root, no cgroups). Where no
    pids or memory group can be made (cgroup v2 delegates only what the group above enables,
    and no memory controller to a group that holds processes), the parent watches the job's
    processes and threads, and its memory, instead (over_limit)."""

    def __init__(self, name, pids=0, memory=0, cpu=0.0, freezer=True, disk=0, files=0, folders=()):
        self.name, self.pids, self.memory, self.cpu, self.dirs, self._next_look = name, pids, memory, cpu, {}, 0.0
        # bytes the job may write to disk, and files it may have in the folders it writes on
        # disk: always watched (no group holds them; an empty file costs some 256 bytes)
        self.disk, self.files, self.folders = disk, files, folders
        self.hit = None  # a limit over_limit found the job over
        self.read = False  # verdict() was asked after the job ended: only then may the groups go
        for what, base in _cgroup_bases().items():
            if what == "freezer" and not freezer:
                continue
            d = os.path.join(base, f"{GROUP_PREFIX}{os.getpid()}-{name}")
            v2 = os.path.exists(os.path.join(base, "cgroup.controllers"))
            try:
                os.makedirs(d, exist_ok=True)
                if what == "pids" and pids:
                    write_value(d, "pids.max", pids)
                if what == "memory" and memory:
                    write_value(d, "memory.max" if v2 else "memory.limit_in_bytes", memory)
                    try:  # and no swapping instead: over the limit is over the limit
                        write_value(d, "memory.swap.max", 0) if v2 else write_value(d, "memory.memsw.limit_in_bytes", memory)
                    except OSError:
                        pass
                self.dirs[what] = d
            except OSError:
                _remove_group(d)

    def cpu_seconds(self):
        """CPU time used so far by every process the job has had."""
        d = self.dirs.get("cpu")
        if d is None:
            return 0.0
        if os.path.exists(os.path.join(d, "cpu.stat")):
            return _field(d, "cpu.stat", "usage_usec") / 1e6
        try:
            with open(os.path.join(d, "cpuacct.usage")) as f:
                return int(f.read()) / 1e9
        except (OSError, ValueError):
            return 0.0

    def over_limit(self, pid, memory=True):
        """Whether the job went over a limit the evaluator watches (looked up at most twice a
        second: it asks on every message its workers send): its CPU time, all its processes
        together, and the bytes they wrote to disk; where no group has the kernel enforce them,
        its processes and threads, and its host memory (the proportional set size of its
        processes: pages they share with the forkserver or with each other count once; read
        only where their resident size, an upper bound read in O(1), is over; with the memory
        files they hold beside it, _memory_files: a look at 18 workers that imported torch costs
        a quarter of a second of the scheduler's time, and of theirs). pid: the job's worker;
        memory=False while it times on the GPU (reading its memory map holds its mmap lock,
        which could stall a timed launch)."""
        if time.monotonic() < self._next_look:
            return False
        self._next_look = time.monotonic() + WATCH_SECONDS
        count = self.pids and "pids" not in self.dirs
        weigh = memory and self.memory and "memory" not in self.dirs
        if count or weigh or self.disk or self.files:
            # the job's processes: its group's members, else its worker's descendants
            procs = next((m for m in map(_members, set(self.dirs.values())) if m), None) or [pid] + descendants(pid)
            try:
                self.hit = self._watch(procs, count, weigh)
            except Hidden as e:
                self.hit = "hidden_process", (f"process {e} of the job closed its /proc files (non-dumpable) to the "
                                              f"evaluator, which watches the job's limits here, and the job was killed")
            if self.hit:
                return True
        return bool(self.cpu and "cpu" in self.dirs and self.cpu_seconds() > self.cpu)

    def _watch(self, procs, count, weigh):
        """The limits over_limit watches, for these processes of the job -> (reason, message) of
        the one they went over, or None; raises Hidden."""
        if count and _tasks(procs) > self.pids:
            return "process_limit", (f"the candidate ran more than {self.pids} processes and threads at once "
                                     f"(max_processes; watched twice a second) and was killed")
        if self.disk and _written(procs) > self.disk:
            return "disk_limit", (f"the job's processes wrote more than {self.disk / 2**30:.1f} GB to disk "
                                  f"(job_disk_gb; watched twice a second) and were killed")
        if self.files and _entries(self.folders, self.files) > self.files:
            return "disk_limit", (f"the job had more than {self.files} files and folders in its work folder and its "
                                  f"program's part of the build cache (job_files; watched twice a second) and was killed")
        # the exact measure only where the cheap bound says it could be over; memory in
        # files (tmpfs, memfd) is in no process's resident set and counts beside it
        held = weigh and _memory_files(procs)
        if weigh and _rss(procs) + held > self.memory and _pss(procs) + held > self.memory:
            return "memory_limit", (f"the job's processes held more than {self.memory / 2**30:.1f} GB of host "
                                    f"memory (job_memory_gb; watched twice a second) and were killed")
        return None

    def freeze(self, on):
        """Stop (True) or let go on (False) every process of the job, a process the candidate
        started in a session of its own included (the gate's SIGSTOP reaches its worker's
        process group only) -> True where the job has a freezer."""
        d = self.dirs.get("freezer")
        return bool(d) and _freeze(d, on)

    def verdict(self):
        """(reason, message) for a limit the job ran into, or None."""
        if self.hit:
            return self.hit
        d = self.dirs.get("pids")
        if d and self.pids and _field(d, "pids.events", "max"):
            return "process_limit", (f"the candidate tried to run more than {self.pids} processes and threads "
                                     f"at once (max_processes); a process it asked for was refused")
        d = self.dirs.get("memory")
        if d and self.memory and (_field(d, "memory.events", "oom_kill") or _field(d, "memory.oom_control", "oom_kill")):
            return "memory_limit", (f"the job used more than its {self.memory / 2**30:.1f} GB of host memory "
                                    f"(job_memory_gb) and the kernel killed a process of it")
        if self.cpu and self.cpu_seconds() > self.cpu:
            return "cpu_time", (f"the job's processes used more than {self.cpu:g} s of CPU time together "
                                f"(cpu_seconds) and were killed")
        return None

    def close(self, tries=1):
        """Kill whatever is still in the groups and remove them -> True once all are gone."""
        for what, d in list(self.dirs.items()):
            if _remove_group(d, tries):  # (v2: one folder for all three, gone after the first)
                del self.dirs[what]
        return not self.dirs


def clean_groups():
    """Remove the job groups of evaluators that are gone (killed before they could)."""
    for base in set(_cgroup_bases().values()):
        try:
            names = [n for n in os.listdir(base) if n.startswith(GROUP_PREFIX)]
        except OSError:
            continue
        for n in names:
            try:
                os.kill(int(n[len(GROUP_PREFIX):].split("-")[0]), 0)
            except ProcessLookupError:
                _remove_group(os.path.join(base, n), tries=100)
            except (ValueError, PermissionError):
                pass
