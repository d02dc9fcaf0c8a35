"""Task sets and solutions: reading them in every layout and pairing them up. Text only:
nothing here imports or runs a task or a candidate (the evaluator's workers do that).

    import taskset
    tasks = taskset.load_tasks("builtin")            # a .py, a folder, KernelBench's levelN/ layout, a .jsonl
    tasks = taskset.select(tasks, "gelu,L1_19")      # --only
    sols = taskset.load_solutions("tasks/seeds/cpp") # a .py, a folder, a .jsonl (the CUDA-L1 release too)
    p = taskset.pair_up(tasks, sols, only="", language="cpp")  # p.pairs, p.unmatched, p.other_language

A task is a KernelBench program (`class Model`, `get_inputs()`, optionally
`get_init_inputs()`); a solution defines `class ModelNew` with the same constructor and
forward.
"""
import json
import os
import re
from dataclasses import dataclass

import common
# what the evaluator is handed, defined with it (the kernels package stands alone)
from kernels.source import Solution, sha, top_names  # noqa: F401 (taskset.Solution, taskset.sha)

HERE = os.path.dirname(os.path.abspath(__file__))
BUILTIN_TASKS = os.path.join(HERE, "tasks")


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
        return sha(self.code)


def check_task_code(code, where):
    """Raise TaskError naming `where` unless code parses and defines Model and get_inputs."""
    try:
        names = top_names(code)
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


def load_tasks(spec):
    """'builtin' | a task .py | a folder (flat, or KernelBench's levelN/ layout) | a .jsonl
    with a `code` field (and level, problem_id, name) -> [Task], sorted."""
    if spec in ("builtin", "", None):
        spec = BUILTIN_TASKS
    if not os.path.exists(spec):
        raise TaskError(f"{spec}: no such file or folder (tasks are 'builtin', a .py, a folder or a .jsonl)")
    tasks = []
    if spec.endswith(".jsonl"):
        for i, r in common.read_jsonl(spec, numbered=True):
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


_SCORES = ("score", "score_default", "speedup")  # a published speedup, under the names releases use


def _records(spec):
    """(where, record) from a .jsonl, or from a .json holding one object: a list of records,
    or the CUDA-L1 repository's per-GPU file ({"1": [records of level 1], "2": [...], ...})."""
    lines = ((f"{spec}:{i}", r) for i, r in common.read_jsonl(spec, numbered=True))
    if spec.endswith(".jsonl"):
        yield from lines
        return
    try:
        with open(spec) as f:
            obj = json.load(f)
    except json.JSONDecodeError:  # a .json that holds JSON lines
        yield from lines
        return
    if isinstance(obj, dict) and obj and all(str(k).isdigit() and isinstance(v, list) for k, v in obj.items()):
        for lv, rs in obj.items():
            yield from ((f"{spec}:level {lv}[{j}]", dict(r, level_id=r.get("level_id", int(lv))))
                        for j, r in enumerate(rs))
    elif isinstance(obj, list):
        yield from ((f"{spec}[{j}]", r) for j, r in enumerate(obj))
    else:  # one record
        yield f"{spec}", obj


def load_solutions(spec):
    """A .py defining ModelNew | a folder of them (matched to tasks by folder or file name,
    or KernelBench ids in the path) | a .jsonl keyed by level and problem id, including the
    CUDA-L1 release layout (level_id, task_id, ref_code, custom_code, score), or a .json of
    such records (the CUDA-L1 repository's per-GPU file keyed by level) -> [Solution]."""
    if not os.path.exists(spec):
        raise TaskError(f"{spec}: no such solutions file or folder")
    sols = []
    if spec.endswith(".jsonl") or spec.endswith(".json"):
        for i, r in _records(spec):
            if not isinstance(r, dict):
                raise TaskError(f"{i}: a solution record is a JSON object, not {type(r).__name__}")
            lv = r.get("level", r.get("level_id"))
            pid = r.get("problem_id", r.get("task_id"))
            code = next((r[k] for k in ("custom_code", "code", "solution") if k in r), None)
            task = r.get("task") or r.get("name")
            if lv is None and task is None:
                raise TaskError(f"{i}: record names no task (level/problem_id or task)")
            score = next((r[k] for k in _SCORES if isinstance(r.get(k), (int, float))), None)
            sols.append(Solution(None if _no_code(code) else code, i, task,
                                 int(lv) if lv is not None else None,
                                 int(pid) if pid is not None else None,
                                 None if _no_code(r.get("ref_code")) else r.get("ref_code"),
                                 float(score) if score is not None else None))
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
    with its own ref_code brings its own task (the CUDA-L1 release's kernels were written
    for those problem sizes); `tasks` then only filters."""
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


def solution_language(code):
    """'cuda' | 'cpp' | 'triton' | None (pure PyTorch): the kernel language a solution's own
    kernels are written in (config.LANGUAGES)."""
    if not code:
        return None
    if "@triton.jit" in code or "@triton.autotune" in code:
        return "triton"
    if "load_cuda(" in code or "cuda_sources" in code or "__global__" in code:
        return "cuda"
    if "load_cpp(" in code or "cpp_sources" in code:
        return "cpp"
    return None


@dataclass
class Pairing:
    pairs: list           # [(Task, Solution)] to judge
    unmatched: list       # [Solution] that match no task
    other_language: list  # [(Task, Solution)] written in another kernel language, left out


def brings_own_tasks(spec, solutions):
    """True when --tasks (spec) is left at builtin and the solutions carry their own reference
    code (the CUDA-L1 release): each then brings its own task instead of being matched to the
    built-in ones (evaluate.py, bench.py)."""
    return spec == "builtin" and any(s.ref_code for s in solutions)


def pair_up(tasks, solutions, only="", language=None):
    """The step between loading and judging: match solutions to tasks, keep the tasks
    `only` names (checked after matching, since solutions with a ref_code bring tasks of
    their own), and set aside solutions written in another kernel language than `language`."""
    pairs, unmatched = match(tasks, solutions)
    if pairs:
        keep = {t.name for t in select([t for t, _ in pairs], only)}
        pairs = [(t, s) for t, s in pairs if t.name in keep]
    other = [(t, s) for t, s in pairs if language and solution_language(s.code) not in (None, language)]
    return Pairing([p for p in pairs if p not in other], unmatched, other)
