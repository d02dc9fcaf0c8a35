"""The evaluator's entry point: KernelBench tasks in, trustworthy verdicts out. Candidates
import it for the build API; scripts import it for the Evaluator. Candidate code only ever
runs in worker processes (worker.py, harness.py, timing.py), never in the process that
holds an Evaluator.

    python evaluate.py --tasks builtin --solutions tasks/seeds/cpp      # the usual front end

    import kernels, taskset
    with kernels.Evaluator(config.parse([])) as ev:
        [v] = ev.evaluate([(task, code)])       # v.status, v.reason, v.speedup, v.log ...

The project's own candidate format (builds.py) builds in seconds: CUDA (or C++) source free
of torch headers, compiled straight with nvcc (or g++) and called through ctypes:

    import kernels
    lib = kernels.load_cuda(r'''
    __global__ void relu_k(const float* x, float* y, long n) { ... }
    extern "C" void relu(const float* x, float* y, long n, cudaStream_t s) {
        relu_k<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);
    }''')
    ... lib.relu(x, y, x.numel())   # tensors pass as pointers; the stream is filled in

torch.utils.cpp_extension.load_inline solutions (KernelBench's format) work unchanged.
"""
# The package's public names. Candidates call the build API (builds.py); scripts use the
# Evaluator (evaluator.py) and its vocabulary (verdicts.py).
from .builds import KERNEL_CALLS, BuildError, cache_root, load_cpp, load_cuda, parse_exports  # noqa: F401
from .evaluator import Evaluator, pick_backend, target  # noqa: F401
from .verdicts import Reject, Verdict, median, trim_log, unusable  # noqa: F401
