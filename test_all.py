"""The tests. CPU tests run anywhere (CI); tests marked gpu need CUDA and are skipped without it.

    pytest test_all.py                 # everything this machine can run
    pytest test_all.py -m gpu -x       # the GPU half, on a CUDA machine
    pytest test_all.py -k hacks -v     # one group

Compiled candidates are shared through one build cache per session, so each builds once.
"""
import ast
import glob
import json
import os
import subprocess
import sys
import time

import pytest
import torch

import bench
import config
import evaluate
import kernels

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "shared", "kernelbench", "problems.jsonl")
HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
# Short timing: tests judge verdicts, not speed (speed lives in bench.py).
FAST = dict(timing_rounds=2, round_seconds=0.05, min_runs=3, progress=False)


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    d = os.environ.get("CUDAL1_TEST_CACHE") or str(tmp_path_factory.mktemp("cache"))
    os.environ["CUDAL1_CACHE"] = d  # load_cpp/load_cuda in this process use it too
    return d


def make_eval(cache, backend, **kw):
    return kernels.Evaluator(dict(FAST, cache_dir=cache, backend=backend, **kw))


@pytest.fixture(scope="session")
def tasks():
    return {t.name: t for t in kernels.load_tasks("builtin")}


# ---------------------------------------------------------------------------- config

def test_config_presets_and_overrides():
    cfg = config.parse(["--config", "small", "--workers=3", "--allow_lowp", "--tasks", "x.jsonl"])
    assert cfg["workers"] == 3 and cfg["allow_lowp"] is True and cfg["tasks"] == "x.jsonl"
    assert cfg["config"] == "small"
    assert config.parse(["--config=kernelbench"])["run_timeout"] == config.PRESETS["kernelbench"]["run_timeout"]
    assert config.parse(["--round_seconds=0.5"])["round_seconds"] == 0.5


@pytest.mark.parametrize("argv, msg", [
    (["--worker=3"], "did you mean --workers"),
    (["--workers=three"], "wants a int"),
    (["--allow_lowp=maybe"], "true or false"),
    (["--config=huge"], "unknown preset"),
    (["positional"], "unexpected argument"),
    (["--tasks"], "needs a value"),
])
def test_config_rejects_bad_input(argv, msg):
    with pytest.raises(ValueError, match=msg):
        config.parse(argv)


# ---------------------------------------------------------------------------- loading

def test_builtin_suite_loads():
    ts = kernels.load_tasks("builtin")
    assert len(ts) >= 12
    assert {"diag_matmul", "gemm_max_subtract_gelu", "attention", "mlp"} <= {t.name for t in ts}


@pytest.mark.skipif(not os.path.exists(SHARED), reason="../shared/kernelbench absent")
def test_kernelbench_jsonl_loads_all_250():
    ts = kernels.load_tasks(SHARED)
    assert len(ts) == 250
    assert {t.level for t in ts} == {1, 2, 3}
    assert ts[0].name.startswith("L1_1_")


def test_kernelbench_folder_layout(tmp_path):
    code = open(os.path.join(kernels.BUILTIN_TASKS, "gelu.py")).read()
    for rel in ("level1/19_GELU.py", "level2/7_Conv_GELU.py"):
        p = tmp_path / rel
        p.parent.mkdir(exist_ok=True)
        p.write_text(code)
    ts = kernels.load_tasks(str(tmp_path))
    assert [(t.name, t.level, t.problem_id) for t in ts] == [("L1_19_GELU", 1, 19), ("L2_7_Conv_GELU", 2, 7)]
    one = kernels.load_tasks(str(tmp_path / "level1" / "19_GELU.py"))
    assert one[0].name == "L1_19_GELU"


@pytest.mark.parametrize("code, msg", [
    ("class Model(:\n  pass", "syntax error at line 1"),
    ("def get_inputs(): return []", "no Model"),
    ("class Model: pass", "no get_inputs"),
])
def test_malformed_task_names_the_file(tmp_path, code, msg):
    p = tmp_path / "broken_task.py"
    p.write_text(code)
    with pytest.raises(kernels.TaskError, match=msg) as e:
        kernels.load_tasks(str(p))
    assert "broken_task.py" in str(e.value)
    j = tmp_path / "set.jsonl"
    j.write_text(json.dumps({"level": 1, "problem_id": 3, "name": "x", "code": code}) + "\n")
    with pytest.raises(kernels.TaskError, match=r"set.jsonl:1"):
        kernels.load_tasks(str(j))


def test_missing_task_path_is_clear():
    with pytest.raises(kernels.TaskError, match="no such file"):
        kernels.load_tasks("/nonexistent/tasks")


def test_solutions_match_by_folder_name_and_ids(tmp_path, tasks):
    (tmp_path / "softmax").mkdir()
    (tmp_path / "softmax" / "fast.py").write_text("class ModelNew: pass")
    (tmp_path / "gelu_v2.py").write_text("class ModelNew: pass")
    (tmp_path / "nothing_like_it.py").write_text("class ModelNew: pass")
    pairs, unmatched = kernels.match(list(tasks.values()), kernels.load_solutions(str(tmp_path)))
    assert sorted(t.name for t, _ in pairs) == ["gelu", "softmax"]
    assert [os.path.basename(s.name) for s in unmatched] == ["nothing_like_it.py"]
    kb = [kernels.Task("L1_19_ReLU", "x", "x", 1, 19)]
    sols = [kernels.Solution("class ModelNew: pass", "level_1_problem_19_sample_0_kernel.py", level=1, problem_id=19)]
    assert kernels.match(kb, sols)[0][0][0].name == "L1_19_ReLU"


def test_cuda_l1_release_layout(tmp_path, tasks, cache):
    """The CUDA-L1 release: level_id, task_id, ref_code, custom_code (null or "None")."""
    ref = open(os.path.join(kernels.BUILTIN_TASKS, "gelu.py")).read()
    good = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.nn.functional.gelu(x)\n"
    recs = [dict(level_id=1, task_id=19, ref_code=ref, custom_code=good),
            dict(level_id=1, task_id=20, ref_code=ref, custom_code=None),
            dict(level_id=1, task_id=21, ref_code=ref, custom_code="None")]
    p = tmp_path / "cuda_l1.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    sols = kernels.load_solutions(str(p))
    assert [s.code is None for s in sols] == [False, True, True]
    pairs, unmatched = kernels.match([], sols)  # no task set: each record brings its own
    assert not unmatched and [t.name for t, _ in pairs] == ["L1_19", "L1_20", "L1_21"]
    with make_eval(cache, "cpu") as ev:
        vs = ev.evaluate(pairs)
    assert [v.status for v in vs] == ["ok", "compile_error", "compile_error"]
    assert vs[1].reason == "no_code"
    # a task set filters: only problem 19 of level 1 is kept
    pairs, unmatched = kernels.match([kernels.Task("L1_19_GELU", ref, "-", 1, 19)], sols)
    assert len(pairs) == 1 and len(unmatched) == 2


# ---------------------------------------------------------------------------- the build API

def test_parse_exports():
    src = '''
    // extern "C" void commented_out(int x);
    extern "C" void add(const float* __restrict__ a, float *b, long n, float alpha, cudaStream_t s) {}
    extern "C" int check(int32_t k, size_t m, double d, bool f) { return 0; }
    '''
    ex = kernels.parse_exports(src)
    assert ex == {"add": (False, ["ptr", "ptr", "int64", "float", "stream"]),
                  "check": (True, ["int32", "int64", "double", "bool"])}
    with pytest.raises(kernels.BuildError, match="unsupported parameter type"):
        kernels.parse_exports('extern "C" void f(std::vector<int> v) {}')


def test_load_cpp_builds_caches_and_reports_errors(cache):
    src = 'extern "C" void twice(const float* x, float* y, long n) { for (long i = 0; i < n; i++) y[i] = 2 * x[i]; }'
    lib = kernels.load_cpp(src)
    x = torch.randn(1000)
    y = torch.empty_like(x)
    lib.twice(x, y, x.numel())
    assert torch.equal(y, 2 * x)
    stamp = os.path.getmtime(lib.path)
    assert kernels.load_cpp(src).path == lib.path and os.path.getmtime(lib.path) == stamp  # a cache hit
    with pytest.raises(TypeError, match="takes 3 arguments"):
        lib.twice(x, y)
    with pytest.raises(kernels.BuildError, match="was not declared"):
        kernels.load_cpp('extern "C" void f(float* y) { y[0] = not_declared; }')
    with pytest.raises(kernels.BuildError, match="was not declared"):  # the failure is cached too
        kernels.load_cpp('extern "C" void f(float* y) { y[0] = not_declared; }')


def test_trim_log_keeps_errors():
    log = "\n".join([f"line {i} of noise" for i in range(2000)] + ["kernel.cu(3): error: bad thing"] +
                    [f"more noise {i}" for i in range(2000)])
    t = kernels.trim_log(log, 1000)
    assert len(t) <= 1000 and "error: bad thing" in t


# ---------------------------------------------------------------------------- correctness math

def test_rel_err_and_compare():
    r64 = torch.randn(1000, dtype=torch.float64)
    r32 = r64.float()
    assert kernels.rel_err(r32, r64) < 1e-6
    assert kernels.compare(r32.clone(), r32, r64, False, "t")[0] < 1e-6
    with pytest.raises(kernels.Reject) as e:  # fp16 rounding: a precision downgrade
        kernels.compare(r32.half().float(), r32, r64, False, "t")
    assert (e.value.status, e.value.reason) == ("rejected", "precision")
    assert kernels.compare(r32.half().float(), r32, r64, True, "t")[0] < 1e-2  # allowed by the flag
    with pytest.raises(kernels.Reject) as e:
        kernels.compare(r32 + 1, r32, r64, False, "t")
    assert (e.value.status, e.value.reason) == ("incorrect", "mismatch")
    bad = r32.clone()
    bad[5] = float("nan")
    with pytest.raises(kernels.Reject) as e:
        kernels.compare(bad, r32, r64, False, "t")
    assert e.value.reason == "nan"
    with pytest.raises(kernels.Reject) as e:
        kernels.compare(r32[:10], r32, r64, False, "t")
    assert e.value.reason == "shape_mismatch"
    with pytest.raises(kernels.Reject) as e:
        kernels.compare(r32.double(), r32, r64, False, "t")
    assert e.value.reason == "dtype_mismatch"
    unwritten = r32.clone()
    unwritten.view(torch.int32)[:100] = -1  # the poison pattern
    with pytest.raises(kernels.Reject) as e:
        kernels.compare(unwritten, r32, r64, False, "t")
    assert e.value.reason == "unwritten_output"


def test_tolerance_scales_with_an_ill_conditioned_reference():
    # cumsum of a long zero-mean sequence: the eager fp32 reference is itself far from fp64
    x = torch.randn(1 << 18, dtype=torch.float64)
    r64 = x.cumsum(0)
    r32 = x.float().cumsum(0)
    err_ref = kernels.rel_err(r32, r64)
    _, tol = kernels.compare(r32.clone(), r32, r64, False, "t")
    assert tol == max(1e-4, 10 * err_ref)


def test_summary_math():
    V = kernels.Verdict
    vs = [V("a", "1", "ok", speedup=2.0), V("b", "2", "ok", speedup=0.5), V("c", "3", "incorrect", "mismatch"),
          V("d", "4", "rejected", "thread")]
    s = evaluate.summarize(vs)
    assert s["success_rate"] == 0.5 and s["mean_speedup"] == pytest.approx(2.5 / 4)
    assert s["geomean_speedup"] == pytest.approx(1.0) and s["max_speedup"] == 2.0
    assert s["fast_p"] == {"0.0": 0.5, "1.0": 0.25, "1.5": 0.25, "2.0": 0.0}
    assert s["reasons"] == {"incorrect/mismatch": 1, "rejected/thread": 1}
    best = evaluate.best_per_task(vs + [V("c", "5", "ok", speedup=1.2)])
    assert sorted((v.task, v.speedup) for v in best) == [("a", 2.0), ("b", 0.5), ("c", 1.2), ("d", 0.0)]


# ---------------------------------------------------------------------------- hacks and faults

def hack_files(backend):
    """hacks/*.py for this backend: cpu_/cuda_ prefixed files for one, the rest for both."""
    other = "cuda" if backend == "cpu" else "cpu"
    out = []
    for f in sorted(glob.glob(os.path.join(HERE, "hacks", "*.py"))):
        if os.path.basename(f).startswith(other + "_"):
            continue
        code = open(f).read()
        meta = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(code).body
                if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id in ("EXPECT", "TASK", "OPTIONS")}
        out.append((f, code, meta))
    return out


def run_hacks(cache, tasks, backend):
    """Every adversarial candidate, in batches by the options they need, with an honest
    candidate after them: a crash or a hang must not spoil the next evaluation."""
    honest = open(os.path.join(HERE, "tasks", "seeds", backend, "swish_bias", "fast.py")).read()
    groups = {}
    for f, code, meta in hack_files(backend):
        groups.setdefault(repr(sorted(meta.get("OPTIONS", {}).items())), []).append((f, code, meta))
    failures = []
    for key, items in groups.items():
        opts = dict(ast.literal_eval(key))
        with make_eval(cache, backend, **opts) as ev:
            vs = ev.evaluate([(tasks[m["TASK"]], code) for _, code, m in items] + [(tasks["swish_bias"], honest)])
        for (f, _, meta), v in zip(items, vs):
            status, _, reasons = meta["EXPECT"].partition("/")
            if v.status != status or (reasons and v.reason not in reasons.split("|")):
                failures.append(f"{os.path.basename(f)}: expected {meta['EXPECT']}, got {v.status}/{v.reason}: {v.message}")
        if not vs[-1].ok:
            failures.append(f"honest candidate after {key}: {vs[-1].status}/{vs[-1].reason}: {vs[-1].message}")
    assert not failures, "\n".join(failures)


def test_hacks_and_faults_cpu(cache, tasks):
    assert len(hack_files("cpu")) >= 20
    run_hacks(cache, tasks, "cpu")


@gpu
@needs_cuda
def test_hacks_and_faults_cuda(cache, tasks):
    run_hacks(cache, tasks, "cuda")


def test_parent_prechecks_need_no_worker(cache, tasks):
    with make_eval(cache, "cpu") as ev:
        vs = ev.evaluate([(tasks["gelu"], None), (tasks["gelu"], "def broken(:"), (tasks["gelu"], "x = 1")])
    assert [(v.status, v.reason) for v in vs] == [
        ("compile_error", "no_code"), ("compile_error", "syntax_error"), ("compile_error", "no_modelnew")]


def test_stale_locks_are_cleaned(cache):
    lock = os.path.join(cache, "ext", "deadbeef", "myext", "lock")
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    open(lock, "w").close()
    old = time.time() - 10 * 3600
    os.utime(lock, (old, old))
    kernels.Evaluator(dict(cache_dir=cache, backend="cpu")).close()
    assert not os.path.exists(lock)


# ---------------------------------------------------------------------------- seeds: no false positives

def seed_pairs(tasks, backend):
    pairs = []
    for f in sorted(glob.glob(os.path.join(HERE, "tasks", "seeds", backend, "*", "*.py"))):
        pairs.append((tasks[os.path.basename(os.path.dirname(f))], kernels.Solution(open(f).read(), f)))
    return pairs


def check_seeds(cache, tasks, backend):
    pairs = seed_pairs(tasks, backend)
    assert len(pairs) >= 2 * len(tasks), "every task needs a naive and a fast seed"
    with make_eval(cache, backend) as ev:
        vs = ev.evaluate(pairs)
    bad = [f"{v.solution}: {v.status}/{v.reason}: {v.message}\n{v.log}" for v in vs if not v.ok]
    assert not bad, "\n".join(bad)
    for v in vs:  # the always-zero task, and only it, is flagged
        assert ("input_independent" in v.flags) == (v.task == "gemm_max_subtract_gelu"), v.solution
        assert v.kernel_calls > 0, f"{v.solution} never calls its own kernel"
    return vs


def test_seeds_pass_cpu(cache, tasks):
    check_seeds(cache, tasks, "cpu")


@gpu
@needs_cuda
def test_seeds_pass_cuda(cache, tasks):
    check_seeds(cache, tasks, "cuda")


# ---------------------------------------------------------------------------- KernelBench's own format

@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=[gpu, needs_cuda])])
def test_load_inline_solution(cache, tasks, backend):
    """KernelBench-style load_inline solutions work unchanged (one slow torch build)."""
    with make_eval(cache, backend, require_kernel=True) as ev:
        [v] = ev.evaluate([(tasks["gelu"], bench.INLINE[backend])])
    assert v.ok, f"{v.status}/{v.reason}: {v.message}\n{v.log}"
    assert v.kernel_calls > 0


def test_torch_compile_baseline_is_no_false_positive(cache, tasks):
    """Compiling the reference wraps torch functions (dynamo); that must not read as the
    candidate patching the harness."""
    honest = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
             "        return torch.nn.functional.gelu(x)\n"
    with make_eval(cache, "cpu", baseline="compile") as ev:
        [v] = ev.evaluate([(tasks["gelu"], honest)])
    assert v.ok, f"{v.status}/{v.reason}: {v.message}"


# ---------------------------------------------------------------------------- evaluate.py

def test_evaluate_cli_writes_results(cache, tmp_path):
    sols = os.path.join(HERE, "tasks", "seeds", "cpu")
    argv = ["--backend=cpu", "--tasks=builtin", f"--solutions={sols}", "--only=gelu,diag_matmul",
            f"--cache_dir={cache}", f"--out={tmp_path}", "--progress=false", "--timing_rounds=2",
            "--round_seconds=0.05"]
    r = subprocess.run([sys.executable, "evaluate.py", *argv], cwd=HERE, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "candidates: 4/4 correct" in r.stdout, r.stdout
    [path] = glob.glob(str(tmp_path / "evaluate" / "*.json"))
    res = json.load(open(path))
    assert res["summary"]["all"]["n"] == 4 and len(res["verdicts"]) == 4
    assert res["config"]["only"] == "gelu,diag_matmul"
    bad = subprocess.run([sys.executable, "evaluate.py", "--solutions=/nope"], cwd=HERE, capture_output=True, text=True)
    assert bad.returncode != 0 and "no such solutions" in bad.stderr


def test_reference_only_mode(cache, tasks):
    broken = kernels.Task("broken", "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                          "        raise ValueError('boom')\ndef get_inputs():\n    return [torch.randn(3)]\n", "-")
    with make_eval(cache, "cpu") as ev:
        vs = ev.run_references([tasks["gelu"], broken])
    assert [v.status for v in vs] == ["ok", "task_error"]
    assert vs[0].ref_ms > 0 and "boom" in vs[1].message
