"""The exemplar database of Stage 3 and how exemplars are picked from it (paper section 3.3).

    db = exemplars.Database("out/small/crl/db.jsonl")      # every judged variant, append-only
    shown = exemplars.pick_exemplars(db, task, cfg, rng)    # [dict(code, speedup)] for the prompt

A contrastive prompt shows N earlier correct variants of a task with their measured
speedups. Bucket sampling picks them: group the task's variants into buckets of speedup
`bucket_width`, draw N distinct buckets with probability proportional to
exp((bucket mean - global mean) / tau), then one variant uniformly from each bucket.
"""
import math
import os
import re

import common
import taskset


class Database:
    """Rows: task, task_hash, source_hash, code, status, reason, speedup, step, origin,
    flags. A torn last line (a kill mid-write) is dropped on load."""

    def __init__(self, path, repair=True):
        self.path, self.rows, self.index = path, [], {}
        for row in common.read_jsonl(path, torn_tail=True, repair=repair) if os.path.exists(path) else []:
            self._keep(row)

    def _keep(self, row):
        # sft.py's data.jsonl (timed kept variants) reads as a database too
        row.setdefault("status", "ok" if row.get("speedup", 0) > 0 else "incorrect")
        row.setdefault("task_hash", taskset.sha(row.get("task_code", row["task"])))
        self.rows.append(row)
        self.index.setdefault((row["task_hash"], row["source_hash"]), row)

    def add(self, rows, write=True):
        """Keep the rows whose variant is new (one per task and source, also within rows)
        -> those rows."""
        new = []
        for r in rows:
            if (r["task_hash"], r["source_hash"]) not in self.index:
                self._keep(r)
                new.append(r)
        rows = new
        if write and rows:
            common.append_jsonl(self.path, rows, fsync=True)
        return rows

    def lookup(self, task_hash, source_hash):
        return self.index.get((task_hash, source_hash))

    def successes(self, task_name):
        return [r for r in self.rows if r["task"] == task_name and r["status"] == "ok"]


def bucket_sample(scores, n, width, tau, rng):
    """CUDA-L1's exemplar choice: group scores into buckets of `width`, pick n distinct
    buckets with probability proportional to exp((bucket mean - global mean) / tau), then
    one member uniformly from each. -> indices into scores (fewer when fewer buckets)."""
    buckets = {}
    for i, s in enumerate(scores):
        buckets.setdefault(math.floor(s / width), []).append(i)
    keys = list(buckets)
    mean = sum(scores) / len(scores) if scores else 0.0
    w = [math.exp((sum(scores[i] for i in buckets[b]) / len(buckets[b]) - mean) / tau) for b in keys]
    chosen = []
    while keys and len(chosen) < n:  # sampling without replacement, proportional to w
        j = rng.choices(range(len(keys)), weights=w)[0]
        chosen.append(rng.choice(buckets[keys.pop(j)]))
        w.pop(j)
    return chosen


def pick_exemplars(db, task, cfg, rng):
    """N earlier successful variants of a task, by bucket sampling (or uniformly, the
    ablation's `random` mode) -> [dict(code, speedup)]."""
    rows = db.successes(task.name)
    if cfg["exemplars"] == "random":
        idx = rng.sample(range(len(rows)), min(cfg["n_exemplars"], len(rows)))
    else:
        idx = bucket_sample([r["speedup"] for r in rows], cfg["n_exemplars"], cfg["bucket_width"], cfg["tau"], rng)
    return [dict(code=rows[i]["code"], speedup=rows[i]["speedup"]) for i in idx]


# ----------------------------------------------------------------------------------------
# Discovery: variants Stage 3 wrote that no earlier stage had, and that beat the teacher

def normalized(code):
    """Source without comments and whitespace, so that two variants differing only there count
    as one. C comments go; a Python '#' comment goes unless it is a preprocessor line. Python's
    `//` is taken for a comment too: two sources differing only after one count as the same,
    which can only undercount what is new."""
    code = re.sub(r"/\*.*?\*/", "", code or "", flags=re.S)
    code = re.sub(r"//[^\n]*", "", code)
    code = re.sub(r"#(?!\s*(?:include|pragma|define|undef|if|ifdef|ifndef|else|elif|endif)\b)[^\n]*", "", code)
    return re.sub(r"\s+", "", code)


def discoveries(rows, earlier, margin=0.05):
    """rows: database rows (db.jsonl); earlier: {task: set of normalized() sources} of every
    earlier stage's data. -> the correct Stage 3 variants (origin crl) whose normalised source
    is new and whose speedup beats the fastest Stage 1 variant of their task (origin sft) by at
    least `margin`, fastest first. Each row gains `teacher` (that Stage 1 row) and
    `teacher_best` (its speedup)."""
    best = {}
    for r in rows:
        if r.get("origin") == "sft" and r.get("status") == "ok" and (
                r["task"] not in best or r["speedup"] > best[r["task"]]["speedup"]):
            best[r["task"]] = r
    found = [dict(r, teacher=best[r["task"]], teacher_best=best[r["task"]]["speedup"]) for r in rows
             if r.get("origin") == "crl" and r.get("status") == "ok" and r["task"] in best
             and r["speedup"] >= (1 + margin) * best[r["task"]]["speedup"]
             and normalized(r.get("code")) not in earlier.get(r["task"], ())]
    return sorted(found, key=lambda r: -r["speedup"])


def earlier_sources(paths, rows=()):
    """{task: set of normalized() sources} from the JSONL files that exist among `paths`
    (Stage 1's data.jsonl, Stage 2's successes.jsonl) and from database rows of another
    origin than Stage 3's."""
    seen = {}
    found = [r for p in paths if os.path.exists(p) for r in common.read_jsonl(p, torn_tail=True)]
    for r in found + [r for r in rows if r.get("origin") != "crl"]:
        if r.get("code"):
            seen.setdefault(r["task"], set()).add(normalized(r["code"]))
    return seen
