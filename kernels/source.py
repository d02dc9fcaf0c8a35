"""What the evaluator is handed and how it names it: a solution (code and where it came
from), short content hashes (task and source identities, build-cache keys), a module's
top-level names (is there a ModelNew?). The task-set reader (taskset.py) uses the same.
"""
import ast
import hashlib
from dataclasses import dataclass


def sha(*parts):
    """A short content hash: task and source identities, build-cache keys."""
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


@dataclass
class Solution:
    code: str | None              # None: the record had no code (the CUDA-L1 release has some)
    name: str                     # where it came from
    task: str | None = None       # task name it belongs to, when known by name
    level: int | None = None
    problem_id: int | None = None
    ref_code: str | None = None   # a reference carried by the solution (CUDA-L1 release)
    score: float | None = None    # the speedup its publisher reported, when the record has one


def top_names(code):
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
