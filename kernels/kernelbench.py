"""KernelBench's own judgement of a candidate, beside ours: what its eval (eval_kernel_against_ref)
would say, so that every difference between the two verdicts has a named cause. Shown in
audits of published numbers (evaluate.py); never a reward, never our verdict.

Its convention, followed here on purpose, weaknesses included:
- task and candidate executed from strings (exec into a namespace, no source file), except a
  Triton candidate, which its backend writes to a temporary file and imports (@triton.jit reads
  its kernels' source);
- torch.manual_seed(42) before building the initial inputs, Model and ModelNew; both built
  on the host, then moved to the device;
- 5 trials, each with its own seed drawn from a generator seeded 42: inputs from get_inputs(),
  the reference called first, then the candidate on the same tensors; shapes must match and
  torch.allclose(ref, new, atol=tol, rtol=tol) hold, tol by precision: 1e-4 for fp32, 1e-2
  for fp16 and bf16;
- timing: 3 warm-up calls, then 100 calls on one input set, each between two CUDA events
  (the host clock on a CPU), the mean; the reference timed the same way; PyTorch's default
  flags (none where our own timing is off: Triton's interpreter on a CPU, whose times say
  nothing of a kernel). Here the timing has the GPU alone (gate.py); the trials share it with other
  workers' checks, as KernelBench's own parallel evaluation does. What runs on the host only
  (the models' constructors for the reference, the inputs, which KernelBench's tasks make on
  the host, and a candidate's extension builds) is host work to the gate: another worker may
  time meanwhile, where a gigabyte input set made on one core would otherwise hold every
  timing on this GPU off for seconds, six times a record.

    kernelbench_job(job)   # in a run worker (worker.py), where job["kernelbench"] is set
"""
import os
import time

import torch

from .guards import count_torch_extensions
from .harness import _import_code, classify, seal
from .verdicts import Reject

SEED, TRIALS, WARMUP, TIMED = 42, 5, 3, 100
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def _exec(code):
    ns = {}
    exec(compile(code, "<string>", "exec"), ns)
    return ns


def _seed(s):
    torch.manual_seed(s)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(s)


def _to(xs, dev):
    return [x.to(dev) if isinstance(x, torch.Tensor) else x for x in xs]


def _outputs(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _agree(ref, new):
    """-> None, or why KernelBench would call the outputs different."""
    ref, new = _outputs(ref), _outputs(new)
    if len(ref) != len(new):
        return f"{len(new)} outputs, expected {len(ref)}"
    for r, n in zip(ref, new):
        if not isinstance(r, torch.Tensor) or not isinstance(n, torch.Tensor):
            if r != n:
                return f"expected {r!r}, got {n!r}"
            continue
        if r.shape != n.shape:
            return f"output shape {tuple(n.shape)}, expected {tuple(r.shape)}"
        tol = TOLERANCE.get(r.dtype, 1e-4)
        if not torch.allclose(r, n.to(r.dtype), atol=tol, rtol=tol):
            diff = (r.double() - n.double()).abs().max().item()
            return f"not allclose at atol = rtol = {tol:g} (max difference {diff:.2e})"
    return None


def _time(fn, xs, cuda):
    """KernelBench's timer: warm-up calls, then TIMED calls each between two events -> mean ms."""
    for _ in range(WARMUP):
        fn(*xs)
        if cuda:
            torch.cuda.synchronize()
    times = []
    for _ in range(TIMED):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*xs)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn(*xs)
            times.append((time.perf_counter() - t0) * 1e3)
    return sum(times) / len(times)


def kernelbench_job(job):
    """In a worker: judge one candidate by KernelBench's convention -> dict of Verdict fields
    (status ok with both mean times, or the failure KernelBench would report), with where
    its time went: kb_time timing with the GPU alone, kb_wait paused for others' timings or
    waiting for the GPU (the rest of the job is building, loading and the trials)."""
    spent = dict(kb_time=0.0, kb_wait=0.0)
    res = _judge(job, spent)
    spent["kb_wait"] += job["gate"].paused
    res["seconds"] = spent
    return res


def _judge(job, spent):
    cuda = job["device"] == "cuda"
    dev = torch.device("cuda" if cuda else "cpu")
    gate = job["gate"]
    where = "loading"

    def inputs(seed):
        _seed(seed)
        with gate.host_only():
            xs = task["get_inputs"]()
        return _to(xs, dev)
    try:
        with torch.no_grad():
            task = _exec(job["task_code"])
            _seed(SEED)
            init = _to(task["get_init_inputs"](), dev) if "get_init_inputs" in task else []
            _seed(SEED)
            with gate.host_only():  # no GPU work: another worker may time meanwhile
                ref = task["Model"](*init)
            ref = ref.to(dev)
            gate.pause_point()
            where = "the candidate's import"
            count_torch_extensions(around=gate.building, count=False)
            seal(job)
            sol = _exec(job["code"]) if job.get("language") != "triton" else \
                vars(_import_code(job["code"], "kernelbench_candidate", os.path.join(job["workdir"], "kernelbench_candidate.py")))
            gate.pause_point()
            where = "the candidate's constructor"
            _seed(SEED)
            new = sol["ModelNew"](*init).to(dev)
            gen = torch.Generator().manual_seed(SEED)
            seeds = [int(torch.randint(0, 2 ** 32 - 1, (1,), generator=gen).item()) for _ in range(TRIALS)]
            # The trials beside other workers' checks: only timing needs the device alone, and
            # their first calls (cuDNN autotuning, lazy builds: tens of seconds in some published
            # kernels) would otherwise keep every other worker on this GPU waiting.
            for i, s in enumerate(seeds):
                where = f"correctness trial {i + 1}"
                xs = inputs(s)
                r = ref(*xs)
                if cuda:
                    torch.cuda.synchronize()
                gate.pause_point()
                n = new(*xs)
                if cuda:
                    torch.cuda.synchronize()
                gate.pause_point()
                why = _agree(r, n)
                if why:
                    return Reject("incorrect", "mismatch", f"{why} ({where})").result()
            if not job["cfg"]["time_candidates"]:  # ours is not timed either (Triton's interpreter:
                return dict(status="ok")           # a kernel's time says nothing there)
            where = "timing"
            xs = inputs(SEED)  # before the device is ours alone: nobody waits while the host works
            t0 = time.perf_counter()
            gate.acquire()  # the device alone from here, as for our own timing
            t1 = time.perf_counter()
            try:
                ref_ms, new_ms = _time(ref, xs, cuda), _time(new, xs, cuda)
            finally:
                spent.update(kb_wait=t1 - t0, kb_time=time.perf_counter() - t1)
                gate.release()
    except Exception as e:
        return classify(e, where).result()
    return dict(status="ok", ref_ms=ref_ms, new_ms=new_ms)
