"""The evaluator's vocabulary: the Verdict it returns, the Reject a failed check raises,
and the small helpers every part of it shares. A leaf: it imports nothing of the project,
so every other module of the evaluator, and the scripts, can import it.

    raise Reject("rejected", "side_stream", "work left running on a stream ...")
    v = Verdict(task, solution, "ok", speedup=2.1, ...)
"""
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field


@dataclass
class Verdict:
    task: str
    solution: str
    status: str                   # ok | incorrect | rejected | runtime_error | timeout | compile_error | task_error
    reason: str = ""              # short key: mismatch, side_stream, cached_output, ...
    message: str = ""             # one line for humans and models
    speedup: float = 0.0          # reference time / candidate time; 0 unless ok
    ref_ms: float | None = None
    new_ms: float | None = None
    spread: float | None = None   # relative range of the per-round speedups
    confirmed: float | None = None  # the speedup a second timer measured in a fresh worker, where one did
    max_err: float | None = None  # worst error against the float64 reference
    tol: float | None = None
    mean_err: float | None = None  # mean error against the float64 reference, where it came closest to its bound
    mean_tol: float | None = None
    log: str = ""                 # trimmed compiler / runtime log a model can read
    flags: list = field(default_factory=list)    # input_independent, init_mismatch, reused_output
    set_flags: dict = field(default_factory=dict)  # global settings the candidate set, e.g. cudnn_benchmark
    seconds: dict = field(default_factory=dict)  # compile, check, time, total
    kernelbench: dict = field(default_factory=dict)  # KernelBench's verdict (kernelbench.py), where asked for
    kernel_calls: int = 0
    alone: bool = False           # judged again alone on its GPU after running out of memory beside others
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
    """A failure, of the candidate or of its job: the verdict's status, reason and message,
    raised by a failed check or built where a failure is found; result() is the one way it
    becomes a worker's result and a Verdict's fields. extra: log, err and tol."""

    def __init__(self, status, reason, message, **extra):
        super().__init__(message)
        self.status, self.reason, self.message, self.extra = status, reason, message, extra

    def result(self):
        res = dict(status=self.status, reason=self.reason, message=self.message,
                   log=trim_log(self.extra.get("log") or ""))
        if "err" in self.extra:
            res.update(max_err=self.extra["err"], tol=self.extra["tol"])
        return res


def median(xs):
    """The median of a non-empty list (the mean of the middle two for an even count):
    timing rounds, and the median speedups the stages and reports print."""
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def spread(xs):
    """The relative range of the rounds' speedups (or times): (max - min) / median, 0 for none."""
    return (max(xs) - min(xs)) / median(xs) if xs and median(xs) > 0 else 0.0


_URANDOM = os.urandom  # captured at import, before any candidate runs


def fresh_seed():
    """A seed no candidate can know ahead: the input values a candidate is checked and timed
    on, and the timing's order, come from the OS's random source when they are needed (with
    os.urandom as it was when the evaluator's modules were imported)."""
    return int.from_bytes(_URANDOM(6), "little")


def unusable(task, solution, parsed):
    """The verdict for a model response with no usable code (prompts.Parsed: its reason and
    error); it never reaches a worker."""
    return Verdict(task, solution, **Reject("compile_error", parsed.reason, parsed.error).result())


# ----------------------------------------------------------------------------------------
# What a worker may send the Evaluator. A candidate runs in the worker and can write on its
# pipe, so the messages are plain JSON of a fixed schema (never pickle: unpickling runs code),
# read without blocking, and checked field by field; the verdict is composed from them here.

MAX_MESSAGE = 4 << 20  # (the separate timing's claims: up to MAX_CLAIMS sampled outputs, about 2 MB)
STATUSES = ("ok", "incorrect", "rejected", "runtime_error", "timeout", "compile_error", "task_error")
# what each kind of job can report: a compile job only builds (its "ok" would be a forgery)
JOB_STATUSES = dict(compile=("built", "compile_error", "runtime_error"),
                    run=STATUSES, reference=("ok", "task_error", "runtime_error"))
CONTROL = {"call": (int, float, type(None)), "acquire": None, "paused": None, "release": None,
           "host": (bool,), "device": None, "reference": (list,), "refround": (list,),
           "newround": (float,), "checkseed": None, "checked": (list,)}
_NUM = (int, float, type(None))
RESULT = dict(status=str, reason=str, message=str, log=str, speedup=_NUM, ref_ms=_NUM, new_ms=_NUM,
              spread=_NUM, max_err=_NUM, tol=_NUM, mean_err=_NUM, mean_tol=_NUM, flags=list, set_flags=dict, kernel_calls=int, seconds=dict)


# --reference_timing=separate: what a timed success's check message carries (checks.timer_check):
# the claim on the Evaluator's own input set first, then one per checked input set of the task's
# own distribution and one per set drawn from another distribution (d: its number, from 1; 0 for
# every other claim), then the spot checks' (1 to 3). A job that was timed was checked on all
# its sets (a failure there ends it before timing), so the Evaluator knows how many to expect.
MAX_CLAIMS = 16
SPOT_CLAIMS = 3  # timing.SPOT_CHECKS
OTHER_DISTRIBUTIONS = 2  # len(checks.DISTRIBUTIONS): the last weight seed's sets drawn from them
CLAIM = {"w": int, "s": int, "spot": bool, "d": int, "c": dict}


def check_claims(cfg):
    """The claims of checked input sets of the task's own distribution a timed job sends
    (checks.run_checks makes them): every set of every weight seed but the last's, the last's
    first and those left after the other distributions' draws; at most what fits beside the others."""
    ci, n = cfg["check_inputs"], cfg["check_seeds"]
    own = (n - 1) * (ci + 1) + 1 + max(0, ci - OTHER_DISTRIBUTIONS) if n > 0 else 0
    return min(own, MAX_CLAIMS - 1 - SPOT_CLAIMS - OTHER_DISTRIBUTIONS)


def claims_fit(claims, seed, expected):
    """A check message's claims as the harness makes them: the first on the Evaluator's seed,
    `expected` of checked sets of the task's own distribution, one of each other distribution's,
    one to SPOT_CLAIMS of timed calls; fields by name and type."""
    if not (isinstance(claims, list) and 2 <= len(claims) <= MAX_CLAIMS and all(
            isinstance(c, dict) and c.keys() == CLAIM.keys() and all(type(c[k]) is t for k, t in CLAIM.items())
            for c in claims)):
        return False
    if not all(0 <= c["w"] < 1 << 62 and 0 <= c["s"] < 1 << 48 for c in claims):  # seeds as the harness draws
        return False  # them (one out of range would fail the timer, and cost it a restart, not the job)
    spots = sum(c["spot"] for c in claims)
    draws = sorted(c["d"] for c in claims if c["d"])
    own = sum(not (c["spot"] or c["d"]) for c in claims[1:])
    return (claims[0]["s"] == seed and not claims[0]["spot"] and not claims[0]["d"] and 1 <= spots <= SPOT_CLAIMS
            and not any(c["spot"] and c["d"] for c in claims)
            and draws == list(range(1, OTHER_DISTRIBUTIONS + 1)) and own == expected)


_DUMPS = json.dumps  # captured at import, before any candidate runs (worker.py captures encode)


class ProtocolError(Exception):
    """A worker's message outside the schema: the candidate wrote on the evaluator's pipe."""


def encode(msg):
    """A message -> one frame: a 4-byte big-endian length, then the JSON (the framing of
    multiprocessing's Connection, so either end can also be a Connection)."""
    data = _DUMPS(msg, allow_nan=True).encode()
    return len(data).to_bytes(4, "big", signed=True) + data


def decode(buf):
    """bytes received so far -> (complete messages, the rest). Raises ProtocolError."""
    out = []
    while len(buf) >= 4:
        n = int.from_bytes(buf[:4], "big", signed=True)
        if not 0 <= n <= MAX_MESSAGE:
            raise ProtocolError(f"a frame of {n} bytes")
        if len(buf) < 4 + n:
            break
        try:
            msg = json.loads(buf[4:4 + n].decode())
        except (ValueError, RecursionError) as e:  # (JSON nested past the reader's depth: not a crash)
            raise ProtocolError(f"not JSON: {e}") from None
        out.append(_checked(msg))
        buf = buf[4 + n:]
    return out, buf


MAX_DEPTH = 64  # lists and objects within each other in one message (the harness's reach 10 or so)


def _depth(x):
    """How deep lists and dicts nest in x, counted without recursion (a message nested a few
    hundred deep reads as JSON, but fails anything recursive after: pickling it to the timer
    raised RecursionError in the Evaluator's loop, and ended the evaluation)."""
    if not isinstance(x, (list, dict)):
        return 0
    deepest, todo = 0, [(x, 1)]
    while todo:
        y, d = todo.pop()
        deepest = max(deepest, d)
        if d <= MAX_DEPTH:
            todo.extend((v, d + 1) for v in (y.values() if isinstance(y, dict) else y) if isinstance(v, (list, dict)))
    return deepest


def _checked(msg):
    if _depth(msg) > MAX_DEPTH:
        raise ProtocolError(f"a message nested more than {MAX_DEPTH} deep")
    if isinstance(msg, list) and msg and msg[0] in CONTROL:
        want = CONTROL[msg[0]]
        if (want is None and len(msg) == 1) or (want and len(msg) == 2 and isinstance(msg[1], want)):
            return tuple(msg)
        raise ProtocolError(f"a malformed {msg[0]!r} message")
    if isinstance(msg, dict):
        return msg
    raise ProtocolError(f"a {type(msg).__name__} where a message or a result belongs")


def check_result(kind, res):
    """A worker's result -> the fields a Verdict takes, checked: known keys of the right
    types, a status this kind of job can report, and for a timed success the speedup computed
    here from the two times (never the worker's own number). Raises ProtocolError."""
    bad = [k for k, v in res.items() if k not in RESULT or not isinstance(v, RESULT[k])]
    if bad:
        raise ProtocolError(f"unknown or mistyped result fields: {', '.join(sorted(bad))[:200]}")
    if res.get("status") not in JOB_STATUSES[kind]:
        raise ProtocolError(f"status {str(res.get('status'))[:40]!r} from a {kind} job")
    if not all(isinstance(f, str) and len(f) <= 64 for f in res.get("flags", [])):
        raise ProtocolError("malformed flags")
    if not all(isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in res.get("set_flags", {}).items()):
        raise ProtocolError("malformed set_flags")
    if not all(isinstance(k, str) and isinstance(v, (int, float)) for k, v in res.get("seconds", {}).items()):
        raise ProtocolError("malformed seconds")
    out = dict(res, message=res.get("message", "")[:2000], log=res.get("log", "")[:20000], speedup=0.0)
    ref, new = res.get("ref_ms"), res.get("new_ms")
    if kind == "run" and res["status"] == "ok" and (ref is not None or new is not None):
        if not all(isinstance(t, (int, float)) and 0 < t < math.inf for t in (ref, new)):
            raise ProtocolError(f"a success timed at {ref} ms against {new} ms")
        out["speedup"] = ref / new
    return out
