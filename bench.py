"""Benchmarks of the evaluator and of the policy. Prints tables; never a test.

    python bench.py --what=throughput          # seeds of this language, cold then warm cache
    python bench.py --what=throughput --bench_copies=4   # each seed 4 times, as Stage 3's samples of a task
    python bench.py --what=stability           # the same candidates in two separate runs
    python bench.py --what=all --device=cuda --solutions=tasks/seeds/cuda
    python bench.py --what=throughput --device=cuda --solutions=release_sample.jsonl  # KernelBench's format
    python bench.py --what=gpus --device=cuda   # evaluator throughput on 1 GPU vs all GPUs
    python bench.py --what=sandbox             # what the sandbox costs: runs with and without it
    python bench.py --what=drift --device=cuda --bench_minutes=20   # the reference's time over 20 minutes
    python bench.py --what=load --device=cpu   # the seeds quiet, then with one core kept busy
    python bench.py --what=policy --shapes=1.5b,7b --modes=full,lora    # one GPU
    python bench.py --what=policy --dtype bf16 --sampler=compile --top_p_draw=reject --compile_update=true  # fastest
    torchrun --nproc_per_node=2 bench.py --what=policy --shapes=7b --modes=fsdp
    python bench.py --what=step --device=cuda --shapes=1.5b,7b --modes=full,lora  # one Stage 3 step

Policy: for each model shape (random weights in Qwen2.5 shapes, nothing downloaded) and
training mode (full fine-tuning, LoRA, FSDP2 under torchrun), one Stage 3 step's work:
sampling bench_prompts x crl_samples replies of max_new_tokens (random weights rarely
emit EOS, so every reply runs to the cap: the worst case) and the GRPO update on them;
sampling tokens/s (the first call, which captures the CUDA graphs, and a second one),
update seconds (a second update on the same replies: the first pays one-time costs, and
is saved as update_s_first), and peak GPU memory in each phase.

Throughput: unique candidates fully evaluated (compiled, checked, timed) per minute with
the configured workers (checks_per_gpu run workers share each GPU, checks_per_cpu the CPU;
timing has the device alone), build latency per candidate, the cost of a build-cache hit,
and where the time goes.
Stability: each candidate's speedup from two runs, each in fresh workers; the relative
difference per candidate and its median over the suite. Drift: the references' times as the
minutes pass (drift()).
Results go to out/bench/<what>-<device>.json.
"""
import collections
import dataclasses
import json
import os
import shutil
import tempfile
import time

import config
import kernels
import taskset
from kernels import gate, sandbox


# The same GELU kernel in KernelBench's format (load_inline, torch headers, built in the
# constructor as many published kernels do), to put a number on what our own format saves in
# build time.
INLINE = dict(cuda='''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
__global__ void gelu_k(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
}
torch::Tensor gelu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    gelu_k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline("gelu_inline", cpp_sources="torch::Tensor gelu(torch::Tensor x);",
                               cuda_sources=cuda_src, functions=["gelu"])

    def forward(self, x):
        return self.ext.gelu(x.contiguous())
''', cpu='''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
torch::Tensor gelu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    long n = x.numel();
    #pragma omp parallel for
    for (long i = 0; i < n; i++) yp[i] = 0.5f * xp[i] * (1.0f + std::erf(xp[i] * 0.70710678f));
    return y;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline("gelu_inline", cpp_sources=src, functions=["gelu"],
                               extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])

    def forward(self, x):
        return self.ext.gelu(x.contiguous())
''')


def seed_pairs(cfg, language):
    """The candidates benchmarked: the built-in seeds of this language, or --solutions (our
    format, or records that bring their own tasks, such as a sample of the CUDA-L1 release in
    KernelBench's load_inline format)."""
    sols = taskset.load_solutions(cfg["solutions"] or os.path.join(taskset.BUILTIN_TASKS, "seeds", language))
    tasks = [] if taskset.brings_own_tasks(cfg["tasks"], sols) else taskset.load_tasks(cfg["tasks"])
    pairs = taskset.pair_up(tasks, sols, cfg["only"], language).pairs
    # Stage 3 judges G samples of each task, one after another: with --bench_copies each
    # candidate comes that many times, each copy a new source (built, checked and timed; a
    # reference time kept by --reference_retime can serve the later copies)
    k = cfg.get("bench_copies", 1)
    return [(t, dataclasses.replace(s, code=f"{s.code}\n# copy {i}\n", name=f"{s.name}#{i}") if k > 1 else s)
            for t, s in pairs for i in range(k)]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def throughput(cfg, pairs):
    rows = {}
    for label in ("cold cache", "warm cache"):
        t0, s0 = time.time(), gate.now()
        with kernels.Evaluator(cfg) as ev:
            g0 = gate.now()
            vs = ev.evaluate(pairs, desc=label)
            first = lambda kind, what: min((t for t, k, w in ev.events if k == kind and w == what), default=s0) - s0
            g1 = gate.now()
            share = gate.gate_share(ev.trace, g0, g1)
        wall = time.time() - t0
        # start-up: until the first timing nothing else can (processes importing torch, the
        # first builds and checks); paid once per Evaluator, not per candidate
        holds = [e[0] for e in ev.trace if e[3] == "hold"]
        start = holds[0] - s0 if holds else None
        for v in vs:  # the seeds are all correct: a failure here is the evaluator's to explain
            if not v.ok:
                print(f"{label}: {os.path.relpath(v.solution)}: {v.status}/{v.reason}: {v.message}\n{v.log[-1500:]}")
        sec = lambda k: [v.seconds.get(k, 0.0) for v in vs if v.seconds]
        blocking = {}  # task -> seconds each of its jobs kept a timing waiting (gate._blame's `<step>_blocking`)
        for v in vs:
            blocking.setdefault(v.task, []).append(sum(x for k, x in v.seconds.items() if k.endswith("_blocking")))
        rows[label] = dict(n=len(vs), ok=sum(v.ok for v in vs), wall_s=wall, per_min=60 * len(vs) / wall,
                           each={os.path.relpath(v.solution): v.seconds for v in vs}, blocking=blocking,
                           compile_med=pct(sec("compile"), 0.5), compile_max=max(sec("compile") or [0]),
                           check_med=pct(sec("check"), 0.5), time_med=pct(sec("time"), 0.5),
                           wait_med=pct(sec("wait"), 0.5),
                           run_med=pct(sec("run"), 0.5), workers=ev.workers, gpu_share=share,
                           reference_given=ev.reference_given, timer_jobs=list(ev.timer_jobs), device=ev.device,
                           start_s=start, ready_s=g0 - s0, first_build_s=first("compile", "end"),
                           first_run_s=first("run", "start"), after_start_per_min=60 * len(vs) / (g1 - holds[0]) if holds else None)
    # A build-cache hit inside one process: the cost a worker pays to load a built kernel.
    src = next((s.code for _, s in pairs if "load_cuda(" in s.code or "load_cpp(" in s.code), None)
    hit_ms = None
    if src:
        import re
        m = re.search(r"(SRC\w*)\s*=\s*r?('''|\"\"\")(.*?)\2", src, re.S)
        if m:
            load = kernels.load_cuda if "load_cuda(" in src else kernels.load_cpp
            # the loaders read the cache from the environment: the seed's own part of it, for
            # these loads only (later Evaluators without --cache_dir read it too)
            saved = os.environ.get("CUDAL1_CACHE")
            os.environ["CUDAL1_CACHE"] = sandbox.program_cache(kernels.cache_root(cfg), taskset.sha(src))
            try:
                load(m.group(3))
                t0 = time.perf_counter()
                for _ in range(20):
                    load(m.group(3))
                hit_ms = (time.perf_counter() - t0) / 20 * 1e3
            finally:
                if saved is None:
                    del os.environ["CUDAL1_CACHE"]
                else:
                    os.environ["CUDAL1_CACHE"] = saved
    # The load_inline version of one kernel, built cold, for comparison.
    iv = inline_s = None
    if cfg["bench_inline"]:
        task = next(t for t in taskset.load_tasks(cfg["tasks"]) if t.name == "gelu")
        with kernels.Evaluator(cfg) as ev:
            [iv] = ev.evaluate([(task, INLINE[ev.device])], desc="load_inline")
        inline_s = iv.seconds.get("compile")
    print(f"\nthroughput, {len(pairs)} unique candidates, {rows['cold cache']['workers']} compile workers, "
          f"{cfg['checks_per_gpu' if rows['cold cache']['device'] == 'cuda' else 'checks_per_cpu']} run workers "
          f"per device")
    print(f"{'':12s} {'cand/min':>9s} {'wall s':>8s} {'ok':>5s} {'build med':>10s} {'build max':>10s} "
          f"{'check med':>10s} {'time med':>9s} {'wait med':>9s} {'run med':>8s}")
    for label, r in rows.items():
        print(f"{label:12s} {r['per_min']:9.1f} {r['wall_s']:8.1f} {r['ok']:>2d}/{r['n']:<2d} {r['compile_med']:10.2f} "
              f"{r['compile_max']:10.2f} {r['check_med']:10.2f} {r['time_med']:9.2f} {r['wait_med']:9.2f} {r['run_med']:8.2f}")
    print("(run: a run worker's whole job, waits included; wait: paused for other workers' timings or "
          "waiting for the GPU alone)")
    for label, r in rows.items():
        for g, a in r["gpu_share"].items():
            tot = sum(a[k] for k in ("timing", "waiting", "checking", "other")) or 1
            checking = (f", the reference timer checking {a['checking']:.1f} s (a timing waiting for it "
                        f"{a['checking_waited']:.1f} s)" if a.get("checking") else "")
            print(f"{label}, {'GPU' if r['device'] == 'cuda' else 'CPU'} {g}: timing {a['timing']:.1f} s "
                  f"({100 * a['timing'] / tot:.0f}%), waiting for pause points {a['waiting']:.1f} s{checking}, "
                  f"neither (loads, checks, start) {a['other']:.1f} s")
    for label, r in rows.items():
        if r["start_s"] is not None:
            print(f"{label}: {r['start_s']:.1f} s from start to the first timing (evaluator ready {r['ready_s']:.1f} s, "
                  f"first build done {r['first_build_s']:.1f} s, first check begun {r['first_run_s']:.1f} s), "
                  f"{r['after_start_per_min']:.1f} cand/min after it")
    if cfg["reference_timing"] in ("apart", "separate") and cfg["reference_retime"] > 0:
        print(f"reference timed {cfg['reference_timing']} (--reference_retime " + f"{cfg['reference_retime']:g} s): given to "
              + ", ".join(f"{r['reference_given']} of {r['n']} jobs ({label})" for label, r in rows.items()))
    for label, r in rows.items():
        if r["timer_jobs"]:  # --reference_timing=separate: the timer's share of each job's timing phase
            n, rs, cs = zip(*r["timer_jobs"])
            each = [e for e in r["each"].values() if "time_timer" in e]
            print(f"{label}, the reference timer: rounds per timed job median {pct(n, 0.5):.0f}, max {max(n)} (a "
                  f"sizing round included; {sum(x > cfg['timing_rounds'] + 1 for x in n)} of {len(n)} jobs with extra "
                  f"rounds), its rounds {pct(rs, 0.5):.2f} s and its check {pct(cs, 0.5):.2f} s a job (medians, "
                  "request to answer)" + (f"; in the job: waiting for it {pct([e['time_timer'] for e in each], 0.5):.2f}"
                                          f" s, the check's whole step {pct([e['time_check'] for e in each], 0.5):.2f}"
                                          f" s (after the device is given back), a timing phase "
                                          f"{pct([e['time'] for e in each], 0.5):.2f} s"
                                          if each else ""))
            if each:  # what a hand-over costs: the jobs' waits for the timer less its own work, per round trip
                # (exact where every job succeeds, as the seeds do: a failed one's waits are not in its seconds)
                extra = sum(e["time_timer"] for e in each) - sum(rs) - sum(cs)
                print(f"{label}, hand-overs: {1e3 * extra / (sum(n) + len(n)):.1f} ms a round trip to the timer "
                      f"({sum(n) + len(n)} round trips)")
    for label, r in rows.items():  # where a timing phase goes (run_timing's parts), means over the jobs
        each = [e for e in r["each"].values() if "time_rounds" in e]
        if each:
            mean = lambda k: sum(e.get(k, 0.0) for e in each) / len(each)
            names = dict(time_sizing="warm-up and sizing", time_rounds="planned rounds", time_extra="extra rounds",
                         time_again="re-measures")
            print(f"{label}, a timing phase's parts (means over {len(each)} jobs, s): " +
                  ", ".join(f"{v} {mean(k):.3f}" for k, v in names.items()) + f", of {mean('time'):.3f}; "
                  f"after it, the device given back: closing checks {mean('time_after'):.3f}, the timer's check "
                  f"{mean('time_check'):.3f}")
    for label, r in rows.items():  # what keeps a timing waiting: jobs between pause points, by task
        total = sum(map(sum, r["blocking"].values()))
        if total:
            top = sorted(r["blocking"].items(), key=lambda kv: -sum(kv[1]))[:3]
            print(f"{label}, jobs that kept a timing waiting: {total:.1f} s in all (stretches overlap), most "
                  + ", ".join(f"{t} {sum(x) / len(x):.2f} s a job" for t, x in top))
    if hit_ms is not None:
        print(f"build-cache hit (load of an already built kernel, in process): {hit_ms:.2f} ms")
    if iv is not None:
        print(f"the same GELU through load_inline (torch headers): build {inline_s:.1f} s, verdict {iv.status}"
              f" (our format's median build above: {rows['cold cache']['compile_med']:.1f} s)")
    return dict(rows=rows, cache_hit_ms=hit_ms, inline_build_s=inline_s, inline_status=iv and iv.status)


def under_load(cfg, pairs):
    """The same candidates on a quiet machine, then with another process keeping one of the
    timing cores busy (as CI, a laptop or Stage 3 beside other work does): each speedup loaded
    against quiet, and whether the verdict said its measurement was disturbed."""
    import subprocess
    import sys
    with kernels.Evaluator(cfg) as ev:
        quiet = ev.evaluate(pairs, desc="quiet")
    core = sorted(os.sched_getaffinity(0))[-1]
    spin = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, [{core}])\nwhile True: pass"])
    try:
        with kernels.Evaluator(cfg) as ev:
            loaded = ev.evaluate(pairs, desc="one core busy")
    finally:
        spin.kill()
        spin.wait()
    rows = [dict(solution=os.path.relpath(a.solution), quiet=a.speedup, loaded=b.speedup,
                 ratio=b.speedup / a.speedup if a.ok and b.ok and a.speedup else None,
                 disturbed="disturbed" in b.flags) for a, b in zip(quiet, loaded)]
    print(f"\nunder load: one of {len(os.sched_getaffinity(0))} cores kept busy by another process")
    print(f"{'solution':46s} {'quiet':>8s} {'loaded':>8s} {'ratio':>7s}  disturbed")
    for r in rows:
        ratio = f"{r['ratio']:7.2f}" if r["ratio"] else "      -"
        print(f"{r['solution'][-46:]:46s} {r['quiet']:8.3f} {r['loaded']:8.3f} {ratio}  {'yes' if r['disturbed'] else ''}")
    off = [r for r in rows if r["ratio"] and not 0.8 <= r["ratio"] <= 1.25]
    print(f"{len(off)} of {len(rows)} off by more than 20% ({sum(r['disturbed'] for r in off)} of them flagged "
          f"disturbed); {sum(r['disturbed'] for r in rows)} flagged in all")
    return dict(rows=rows)


def stability(cfg, pairs):
    runs = []
    for i in range(2):
        with kernels.Evaluator(cfg) as ev:  # a new Evaluator: fresh workers, nothing remembered
            runs.append(ev.evaluate(pairs, desc=f"run {i + 1}"))
    rows = []
    for a, b in zip(*runs):
        if a.ok and b.ok:
            d = abs(a.speedup - b.speedup) / (0.5 * (a.speedup + b.speedup))
            rows.append(dict(task=a.task, solution=os.path.relpath(a.solution), s1=a.speedup, s2=b.speedup,
                             diff=d, spread1=a.spread, spread2=b.spread))
    print("\nstability: speedup of the same candidate in two separate runs")
    print(f"{'task':24s} {'solution':42s} {'run 1':>8s} {'run 2':>8s} {'diff':>7s}")
    for r in rows:
        print(f"{r['task'][:24]:24s} {r['solution'][-42:]:42s} {r['s1']:8.3f} {r['s2']:8.3f} {100 * r['diff']:6.1f}%")
    diffs = [r["diff"] for r in rows]
    med = pct(diffs, 0.5)
    print(f"median difference {100 * med:.2f}%, 90th percentile {100 * pct(diffs, 0.9):.2f}%, "
          f"max {100 * max(diffs or [0]):.2f}% over {len(rows)} candidates")
    return dict(rows=rows, median_diff=med, p90_diff=pct(diffs, 0.9))


def drift(cfg, pairs):
    """How the reference's time moves while the device keeps working: one seed per task judged
    again every bench_interval seconds for bench_minutes (at least twice), each round in a
    fresh Evaluator (nothing remembered); per round, each task's reference time (ref_ms)
    against its first round's. It says how often a reference timed once would have to be
    timed again to stay within the run-to-run spread: how long --reference_retime may reuse it
    (by default it is timed beside every candidate)."""
    one = list({t.name: (t, s) for t, s in pairs}.values())
    rounds, t0 = [], time.time()
    while True:
        start = time.time()
        with kernels.Evaluator(cfg) as ev:
            vs = ev.evaluate(one, desc=f"round {len(rounds) + 1}")
        rounds.append(dict(t=round(start - t0, 1), ref_ms={v.task: v.ref_ms for v in vs if v.ok and v.ref_ms}))
        if len(rounds) >= 2 and time.time() - t0 >= 60 * cfg["bench_minutes"]:
            break
        time.sleep(max(0.0, start + cfg["bench_interval"] - time.time()))
    first = rounds[0]["ref_ms"]
    rows = []
    for r in rounds:
        d = [abs(ms / first[t] - 1) for t, ms in r["ref_ms"].items() if t in first]
        rows.append(dict(t=r["t"], tasks=len(d), median=pct(d, 0.5), max=max(d, default=float("nan"))))
    print("\ndrift: each task's reference time against its first round's (|ratio - 1| over the tasks)")
    print(f"{'seconds':>8s} {'tasks':>6s} {'median':>8s} {'max':>8s}")
    for r in rows:
        print(f"{r['t']:8.0f} {r['tasks']:6d} {100 * r['median']:7.2f}% {100 * r['max']:7.2f}%")
    return dict(rounds=rounds, rows=rows)


def sandbox_cost(cfg, pairs):
    """What the box costs: the same candidates with a warm build cache, runs with the sandbox
    and without it alternating (run-to-run noise is several percent, so one run of each
    shows little), each in a fresh Evaluator; the medians compared."""
    with kernels.Evaluator(dict(cfg, time_candidates=False)) as ev:
        ev.evaluate(pairs, desc="build")  # warm cache: both sides time the same work
    rates = {True: [], False: []}
    for i in range(cfg["bench_repeats"]):
        for box in (True, False):
            t0 = time.time()
            with kernels.Evaluator(dict(cfg, sandbox=box)) as ev:
                vs = ev.evaluate(pairs, desc=f"sandbox={box} {i + 1}")
            rates[box].append(60 * len(vs) / (time.time() - t0))
            bad = [f"{v.task}: {v.status}/{v.reason}" for v in vs if not v.ok]
            if bad:
                print(f"sandbox={box}: not ok: {', '.join(bad)}")
    print(f"\nsandbox cost, {len(pairs)} candidates, warm cache, runs alternating (candidates/min)")
    for box, rs in rates.items():
        print(f"{'with the box' if box else 'without':14s} " + " ".join(f"{r:6.1f}" for r in rs)
              + f"   median {kernels.median(rs):6.1f}")
    cost = 1 - kernels.median(rates[True]) / kernels.median(rates[False])
    print(f"the box costs {100 * cost:.1f}% of throughput (median against median)")
    refused = sandbox.probe()  # what "the box" held here: a cost measured without a protection is not its cost
    print("protections in the box: all" if not refused else f"protections this machine refused: {', '.join(refused)}")
    return dict(with_box=rates[True], without=rates[False], cost=cost, refused=refused)


def gpu_scaling(cfg, pairs):
    """Evaluator throughput on GPU 0 alone and on every visible GPU, the same candidates
    with a warm build cache, so the GPU phase is what is measured; and how far each
    candidate's speedup moved between the two runs."""
    import torch
    n = torch.cuda.device_count()
    with kernels.Evaluator(dict(cfg, gpus="0", time_candidates=False, progress=False)) as ev:
        ev.evaluate(pairs)  # builds everything into the cache
    runs = {}
    for gpus in ["0", ",".join(str(i) for i in range(n))] if n > 1 else ["0"]:
        with kernels.Evaluator(dict(cfg, gpus=gpus)) as ev:
            t0 = time.time()
            vs = ev.evaluate(pairs, desc=f"GPUs {gpus}")
            runs[gpus] = dict(seconds=time.time() - t0, verdicts=vs)
    print(f"\n{'GPUs':8s} {'candidates':>10s} {'ok':>4s} {'wall s':>8s} {'cand/min':>9s} {'scaling':>8s}")
    base = None
    for gpus, r in runs.items():
        rate = 60 * len(pairs) / r["seconds"]
        base = base or rate
        print(f"{gpus:8s} {len(pairs):10d} {sum(v.ok for v in r['verdicts']):4d} {r['seconds']:8.1f} {rate:9.1f} "
              f"{rate / base:7.2f}x")
    out = {g: dict(seconds=r["seconds"], speedups=[v.speedup for v in r["verdicts"]]) for g, r in runs.items()}
    if len(runs) == 2:
        a, b = (r["verdicts"] for r in runs.values())
        diffs = [abs(x.speedup - y.speedup) / max(x.speedup, y.speedup) for x, y in zip(a, b) if x.ok and y.ok]
        print(f"speedup difference per candidate, 1 GPU vs {n}: median {100 * pct(diffs, 0.5):.1f}%, "
              f"90th percentile {100 * pct(diffs, 0.9):.1f}%")
    return out


# Dense bf16 peak (FLOP/s) and memory bandwidth (bytes/s) by the GPU's name, first match:
# the vendors' data sheets (SXM parts; no sparsity)
GPU_PEAKS = [("H200", 989e12, 4.8e12), ("H100 PCIe", 756e12, 2.0e12), ("H100", 989e12, 3.35e12),
             ("A100", 312e12, 2.04e12)]


def gpu_peaks():
    """-> (bf16 FLOP/s, bytes/s) of GPU 0, or (None, None) where unknown."""
    import torch
    if not torch.cuda.is_available():
        return None, None
    name = torch.cuda.get_device_name(0)
    return next(((f, b) for key, f, b in GPU_PEAKS if key in name), (None, None))


def shape_of(model):
    """-> (matmul weights N: every Linear, the LM head included, the embedding lookup not;
    layers L; width d; KV heads x head dim) of a causal LM."""
    import torch
    n = sum(m.in_features * m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear))
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return n, c.num_hidden_layers, c.hidden_size, c.num_key_value_heads * head_dim


def update_flops(n, layers, d, lengths, epochs, lora, with_ref):
    """Useful FLOPs of one GRPO update over sequences of these lengths (prompt + reply):
    forward 2 N S + 2 L d S^2 (the matmuls, then causal attention's scores and values);
    backward twice the forward for full training, once for LoRA (activation gradients
    only: the frozen weights get none); each inner epoch; plus the reference's forward
    when the KL term is on. Recomputation (checkpointing) is not counted."""
    fwd = sum(2 * n * s + 2 * layers * d * s * s for s in lengths)
    return epochs * (2 if lora else 3) * fwd + (fwd if with_ref else 0)


def sampling_limit(n_params, layers, kv_dim, batch, prompt, new, bandwidth, nbytes=2):
    """Memory-bound decode rate (tokens/s): every step reads all weights once and each
    sequence's KV cache (keys and values, L layers, kv_dim wide), at its mean length over
    the reply (prompt + new / 2)."""
    step = (n_params * nbytes + batch * 2 * layers * kv_dim * (prompt + new / 2) * nbytes) / bandwidth
    return batch / step


def policy_configs(cfg, world):
    """(shape, mode, the settings of that model) for each of --shapes and --modes: random
    weights in that shape (`tiny`: the built-in model), LoRA or FSDP2 (under torchrun only)."""
    for shape in [x.strip() for x in cfg["shapes"].split(",") if x.strip()]:
        for mode in [x.strip() for x in cfg["modes"].split(",") if x.strip()]:
            if (mode == "fsdp") == (world > 1):  # fsdp runs under torchrun, the others on one process
                yield shape, mode, dict(cfg, model="" if shape == "tiny" else f"random:{shape}", fsdp=mode == "fsdp",
                                        lora_rank=cfg["lora_rank"] or 64 if mode == "lora" else 0,
                                        temperature=cfg["crl_temperature"])


def policy_bench(cfg):
    """The table of the module docstring; -> its rows."""
    import torch
    import common
    import grpo
    import optim
    import policy
    import prompts
    import sampler
    rank, world, cfg = common.dist_setup(cfg)
    cuda = torch.cuda.is_available() and cfg["device"] != "cpu"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    peak = (lambda: torch.cuda.max_memory_allocated() / 2**30) if cuda else (lambda: float("nan"))
    tasks = taskset.load_tasks("builtin")[:cfg["bench_prompts"]]
    msgs = [prompts.task_prompt(t.code, "cuda") for t in tasks]
    rows = []
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"\npolicy: {len(msgs)} prompts x {cfg['crl_samples']} samples x {cfg['max_new_tokens']} new tokens, "
        f"gen_batch {cfg['gen_batch']}, crl_micro_batch {cfg['crl_micro_batch']}, beta {cfg['beta']}, world {world}, "
        f"dtype {cfg['dtype']}, sampler {cfg['sampler']}, top_p_draw {cfg['top_p_draw']}, "
        f"decode_attention {cfg['decode_attention']}, "
        f"compile_update {cfg['compile_update']}")
    flops_peak, bandwidth = gpu_peaks()
    batches = [int(x) for x in str(cfg["bench_gen_batches"]).split(",") if x.strip()]
    say(f"{'shape':6s} {'mode':5s} {'params':>7s} {'train':>7s} {'tok/s 1st':>9s} {'tok/s':>7s} {'limit':>7s} "
        f"{'GB sample':>9s} {'update s':>8s} {'MFU':>5s} {'GB update':>9s}")
    for shape, mode, c in policy_configs(cfg, world):
        row = dict(shape=shape, mode=mode)
        model = smp = ref = opt = None
        try:
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            model, tok = policy.load(c, train=True)
            model = policy.prepare(model, c, world)
            row["params"] = policy.count_params(model)
            row["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
            smp = sampler.Sampler(policy.unwrap(model), c)
            for key in ("tok_s_first", "tok_s"):
                sync()
                t0 = time.time()
                outs = policy.generate(smp, tok, msgs, c, n=c["crl_samples"], progress=False)
                sync()
                row[key] = sum(len(s.ids) for g in outs for s in g) / (time.time() - t0)
            row["gb_sample"] = peak()
            # each decode step reads the sampler's bf16 copy of every weight (LoRA merged in)
            # but an untied input embedding, of which it reads one row per sequence
            lm = policy.unwrap(model)
            emb, head = lm.get_input_embeddings().weight, lm.get_output_embeddings().weight
            n_all = sum(p.numel() for k, p in lm.named_parameters() if "lora_" not in k) \
                - (0 if emb is head else emb.numel())
            n_mm, layers, d, kv_dim = shape_of(lm)
            mean = lambda xs: sum(xs) / max(1, len(xs))
            prompt = mean([len(s.prompt_ids) for g in outs for s in g])
            new_tok = mean([len(s.ids) for g in outs for s in g])
            limit = lambda b: sampling_limit(n_all, layers, kv_dim, b, prompt, new_tok, bandwidth) if bandwidth else None
            row["limit"] = limit(c["gen_batch"])
            row["batches"] = {}
            for b in batches:  # another batch size: as many samples per prompt as fill a batch
                smp = None  # its cache is sized for one batch size: a new sampler (the old freed first)
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                cb = dict(c, gen_batch=b)
                smp = sampler.Sampler(lm, cb)
                n = max(1, -(-b // len(msgs)))
                for _ in range(2):  # the first call captures this batch size's CUDA graphs
                    sync()
                    t0 = time.time()
                    o = policy.generate(smp, tok, msgs, cb, n=n, progress=False)
                    sync()
                    rate = sum(len(s.ids) for g in o for s in g) / (time.time() - t0)
                row["batches"][b] = dict(tok_s=rate, limit=limit(b), gb=peak())
                del o
            smp = None
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            ref = policy.reference(c, model, c["model"])
            opt = optim.optimizer(model, 1e-6, c)
            gen = torch.Generator().manual_seed(0)
            rollouts = [grpo.Rollout(s.prompt_ids, s.ids, float(torch.randn(1, generator=gen)))
                        for g in outs for s in g]
            times = []
            for _ in range(2):  # the first pays one-time costs (the allocator's growth, first loads): the second counts
                sync()
                t0 = time.time()
                grpo.train_step(c, model, ref, opt, tok, rollouts, world)
                sync()
                times.append(time.time() - t0)
            row["update_s_first"], row["update_s"] = times
            row["gb_update"] = peak()
            lengths = [len(r.prompt_ids) + len(r.ids) for r in rollouts if r.adv != 0.0]
            row["update_tflop"] = update_flops(n_mm, layers, d, lengths, c["ppo_epochs"], c["lora_rank"] > 0,
                                               c["beta"] > 0) / 1e12
            if flops_peak:
                row["mfu"] = row["update_tflop"] * 1e12 / row["update_s"] / (flops_peak * world)
        except torch.OutOfMemoryError:
            row["oom"] = True
        del model, smp, ref, opt
        rows.append(row)
        f = lambda k, spec: format(row[k], spec) if k in row else ("OOM" if row.get("oom") else "-")
        say(f"{shape:6s} {mode:5s} {f('params', '7.2e')} {f('trainable', '7.2e')} {f('tok_s_first', '9.0f')} "
            f"{f('tok_s', '7.0f')} {f('limit', '7.0f') if row.get('limit') else '-':>7s} {f('gb_sample', '9.1f')} "
            f"{f('update_s', '8.1f')} {format(row['mfu'], '5.1%') if 'mfu' in row else '-':>5s} "
            f"{f('gb_update', '9.1f')}", flush=True)
        for b, r in row.get("batches", {}).items():
            say(f"{'':6s} {'':5s} sampling at gen_batch {b}: {r['tok_s']:,.0f} tok/s"
                + (f", memory-bound limit {r['limit']:,.0f} ({r['tok_s'] / r['limit']:.0%})" if r["limit"] else "")
                + f", peak {r['gb']:.1f} GB", flush=True)
    common.dist_teardown()
    return rows


def step_bench(cfg):
    """One Stage 3 step at real size, end to end (crl.py's schedule, grpo.steps: sampling,
    judging through the Evaluator, the update), for each shape and mode, the second of two steps (the first
    captures the sampler's graphs and grows the allocator); -> its rows. Random weights write
    no code, so the step's own judging is empty (and its rewards random, so that the update
    has work): the step's candidates are costed at the rate this Evaluator judges the
    built-in seeds (compiled, checked, timed), measured here. The three parts run one after
    another (nothing overlaps): the step is their sum."""
    import torch
    import common
    import grpo
    import optim
    import policy
    import prompts
    import sampler
    rank, world, cfg = common.dist_setup(cfg)
    say = print if rank == 0 else (lambda *a, **k: None)
    language = kernels.target(cfg)[1]
    pairs = seed_pairs(cfg, language)
    t0 = time.time()
    with kernels.Evaluator(cfg, time_candidates=True, progress=False) as ev:
        judged = ev.evaluate(pairs)
    per_s = len(judged) / (time.time() - t0)
    for v in judged:  # the seeds are all correct: a failure here is the evaluator's to explain
        if not v.ok:
            say(f"{os.path.relpath(v.solution)}: {v.status}/{v.reason}: {v.message[:1000]}")
    P, G = cfg["crl_tasks_per_step"], cfg["crl_samples"]
    say(f"\nstep: {P} tasks x {G} samples x {cfg['max_new_tokens']} new tokens per rank, world {world}; "
        f"judging: {len(judged)} seeds in {len(judged) / per_s:.1f} s ({60 * per_s:.1f} a minute, "
        f"{sum(v.ok for v in judged)} ok), a step's {P * G * world} candidates ~{P * G * world / per_s:.1f} s")
    say(f"{'shape':6s} {'mode':5s} {'sample s':>8s} {'tok/s':>7s} {'judge s':>7s} {'update s':>8s} {'step s':>7s} "
        f"{'judging real':>12s} {'step with it':>12s}")
    tasks = taskset.select(taskset.load_tasks(cfg["tasks"]), cfg["only"])
    mine = [tasks[i % len(tasks)] for i in range(P)]
    each = [t for t in mine for _ in range(G)]  # the task of every sample, in order
    rows = []
    for shape, mode, c in policy_configs(cfg, world):
        row = dict(shape=shape, mode=mode)
        model = ref = opt = smp = None
        try:
            model, tok = policy.load(c, train=True)
            ref = policy.reference(c, model, c["model"])  # as crl.py: the frozen start, then FSDP2
            model = policy.prepare(model, c, world)
            opt = optim.optimizer(model, c["crl_lr"], c)
            smp = sampler.Sampler(policy.unwrap(model), c)
            msgs = [prompts.task_prompt(t.code, language) for t in mine]
            with kernels.Evaluator(c, time_candidates=True, progress=False) as ev:
                gen = torch.Generator().manual_seed(0)
                policy_work = (lambda: grpo.sample(c, smp, tok, msgs),
                               lambda samples, rewards, stale: grpo.learn(c, model, ref, opt, tok, samples, rewards,
                                                                          world, stale))

                def reward(d):  # as Stage 3's (the speedup, 0 for a failure), and a random
                    # stand-in where there is no code (all of them, with random weights), so
                    # that the groups' rewards differ and the update has work to do
                    codes = [prompts.parse_response(s.text).code for s in d["samples"]]
                    todo = [(t, code) for t, code in zip(each, codes) if code]
                    verdicts, out = iter(ev.evaluate(todo, progress=False) if todo else []), []
                    for code in codes:
                        v = next(verdicts) if code else None
                        out.append(float(torch.rand(1, generator=gen)) if v is None else v.speedup if v.ok else 0.0)
                    return out
                res = timed_steps(policy_work, reward, ev, 2, overlap=False)[-1]
                if c["overlap"] and world == 1:
                    row.update(overlapped(policy_work, len(msgs) * c["crl_samples"], ev, pairs))
            row.update(gen_s=res["gen_s"], eval_s=res["eval_s"], update_s=res["update_s"],
                       update_tokens=res["stats"]["tokens"],
                       tok_s=sum(len(s.ids) for s in res["samples"]) / max(1e-9, res["gen_s"]))
            row["step_s"] = res["gen_s"] + res["eval_s"] + res["update_s"]
            row["judge_real_s"] = P * G * world / per_s
            row["step_real_s"] = res["gen_s"] + row["judge_real_s"] + res["update_s"]
        except torch.OutOfMemoryError:
            row["oom"] = True
        del model, ref, opt, smp
        rows.append(row)
        f = lambda k, w: format(row[k], f"{w}.2f") if k in row else format("OOM" if row.get("oom") else "-", f">{w}")
        say(f"{shape:6s} {mode:5s} {f('gen_s', 8)} {f('tok_s', 7)} {f('eval_s', 7)} {f('update_s', 8)} "
            f"{f('step_s', 7)} {f('judge_real_s', 12)} {f('step_real_s', 12)}", flush=True)
        if "overlap_s" in row:
            say(f"       --overlap, {row['judged']} seeds judged a step ({row['ok']} ok): {row['sequential_s']:.2f} s a step one part after "
                f"another, {row['overlap_s']:.2f} s overlapped (of which {row['wait_s']:.2f} s waiting for the judging); "
                f"not ok of {row['rounds'] * row['judged']}: {row['failed'] or 'none'}")
            for k, m in row.get("why", {}).items():
                say(f"       {k}: {m}")
    say("(the table's step: sampling, then judging, then the update, nothing overlapped)")
    common.dist_teardown()
    return dict(judge_per_min=60 * per_s, seeds=len(judged), rows=rows)


def timed_steps(policy_work, reward, ev, n, overlap):
    """n Stage 3 steps through grpo.steps, crl.py's schedule -> a record per step: its samples,
    seconds sampling (gen_s), judging (eval_s), updating (update_s) and in all (step_s), the
    wait for its judging (wait_s), the update's stats. policy_work: (sample() -> samples,
    learn(samples, rewards, stale) -> (adv, stats)); reward(d) -> one float per sample of d
    (d["step"], d["samples"]). The policy's GPU work holds the evaluator's timing off
    (Evaluator.host_gpu), as in crl.py."""
    import grpo
    sample, learn = policy_work
    updates = [0]

    def draw(step):
        t0 = time.time()
        with ev.host_gpu():
            samples = sample()
        return dict(step=step, samples=samples, gen_s=time.time() - t0, drawn_after=updates[0])

    def judge(d):
        t0 = time.time()
        d["rewards"] = reward(d)
        d["eval_s"] = time.time() - t0

    def update(d, wait, t0):
        t1 = time.time()
        with ev.host_gpu():
            _, stats = learn(d["samples"], d["rewards"], d["drawn_after"] < updates[0])
        updates[0] += 1
        return dict(d, stats=stats, update_s=time.time() - t1, wait_s=wait, step_s=time.time() - t0)
    return list(grpo.steps(draw, judge, update, 0, n, overlap, cancel=ev.cancel))


def overlapped(policy_work, k, ev, pairs, n=2):
    """crl.py --overlap at real size with real judging: each step's k candidates are the seeds
    (each made a new source, so it is built, checked and timed), rewards random. n steps one
    part after another, then n with each step's judging in a thread while the next step
    samples (no timing beside the policy's work) -> seconds a step each way (the overlapped
    steps' without the first draw, which nothing overlaps) and their wait for the judging."""
    import torch
    failed = collections.Counter()  # beside the policy's memory: what fails that did not alone
    why = {}  # the last message of each kind of failure
    ok = [0]

    def tally(offset):  # judge a step's candidates, count the ok ones and the others' reasons -> random rewards
        def reward(d):
            fresh = [(t, f"{sol.code}\n# bench step {offset + d['step']}, candidate {i}\n")
                     for i, (t, sol) in enumerate((pairs * k)[:k])]
            judged = ev.evaluate(fresh, progress=False)
            for v in judged:
                if not v.ok:
                    kind = f"{v.status}/{v.reason} ({v.task})"
                    failed[kind] += 1
                    why[kind] = v.message[:300]
            ok[0] = sum(v.ok for v in judged)
            return torch.rand(len(d["samples"])).tolist()
        return reward
    seq = timed_steps(policy_work, tally(0), ev, n, overlap=False)
    over = timed_steps(policy_work, tally(n), ev, n, overlap=True)
    overlap_s = (sum(r["step_s"] for r in over) - over[0]["gen_s"]) / n
    return dict(judged=k, sequential_s=sum(r["step_s"] for r in seq) / n, overlap_s=overlap_s,
                wait_s=sum(r["wait_s"] for r in over) / n, ok=ok[0], failed=dict(failed), why=why, rounds=2 * n)


def run(cfg):
    if cfg["what"] in ("policy", "step"):  # the policy's benchmarks: per GPU count, not per device
        import torch
        dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"{os.cpu_count()}-core CPU"
        res = dict(device=dev, torch=torch.__version__, config=cfg,
                   **(dict(rows=policy_bench(cfg)) if cfg["what"] == "policy" else step_bench(cfg)))
        if int(os.environ.get("RANK", "0")) == 0:
            path = os.path.join(cfg["out"], "bench", f"{cfg['what']}-{os.environ.get('WORLD_SIZE', '1')}gpu.json")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            json.dump(res, open(path, "w"), indent=1)
            print(f"results: {path}")
        return
    if cfg["what"] not in ("throughput", "stability", "all", "gpus", "sandbox", "load", "drift"):
        raise ValueError(f"--what is throughput, stability, all, gpus, sandbox, load, drift, policy or step, not "
                         f"{cfg['what']!r}")
    device, language = kernels.target(cfg)  # where candidates run (--language can move them)
    cfg["device"] = device
    pairs = seed_pairs(cfg, language)
    if not pairs:
        raise ValueError("no candidates for this device and language")
    tmp = None
    if cfg["fresh_cache"] and not cfg["cache_dir"]:
        tmp = cfg["cache_dir"] = tempfile.mkdtemp(prefix="bench-cache-")  # cold means cold
    import torch
    dev = torch.cuda.get_device_name(0) if device == "cuda" else f"{os.cpu_count()}-core CPU"
    print(f"device {device} on {dev}; torch {torch.__version__}")
    res = dict(device=dev, torch=torch.__version__, config=cfg)
    try:
        if cfg["what"] in ("throughput", "all"):
            res["throughput"] = throughput(cfg, pairs)
        if cfg["what"] in ("stability", "all"):
            res["stability"] = stability(cfg, pairs)
        if cfg["what"] == "gpus":
            res["gpus"] = gpu_scaling(cfg, pairs)
        if cfg["what"] == "sandbox":
            res["sandbox"] = sandbox_cost(cfg, pairs)
        if cfg["what"] == "load":
            res["load"] = under_load(cfg, pairs)
        if cfg["what"] == "drift":
            res["drift"] = drift(cfg, pairs)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    path = os.path.join(cfg["out"], "bench", f"{cfg['what']}-{device}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    json.dump(res, open(path, "w"), indent=1)
    print(f"results: {path}")


def main(argv=None):
    return config.cli(run, argv, "bench.py", __doc__, config.BENCH, resumable=False)


if __name__ == "__main__":
    main()
