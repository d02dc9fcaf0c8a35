"""The evaluator's vocabulary: the Verdict it returns, the Reject a failed check raises,
and the small helpers every part of it shares. A leaf: it imports nothing of the project,
so every other module of the evaluator, and the scripts, can import it.

    raise Reject("rejected", "side_stream", "work left running on a stream ...")
    v = Verdict(task, solution, "ok", speedup=2.1, ...)
"""
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
    max_err: float | None = None  # worst error against the float64 reference
    tol: float | None = None
    log: str = ""                 # trimmed compiler / runtime log a model can read
    flags: list = field(default_factory=list)    # input_independent, init_mismatch, reused_output
    set_flags: dict = field(default_factory=dict)  # global settings the candidate set, e.g. cudnn_benchmark
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


def median(xs):
    """The median of a non-empty list (the mean of the middle two for an even count):
    timing rounds, and the median speedups the stages and reports print."""
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def unusable(task, solution, parsed):
    """The verdict for a model response with no usable code (prompts.Parsed: its reason and
    error); it never reaches a worker."""
    return Verdict(task, solution, "compile_error", parsed.reason, parsed.error)
