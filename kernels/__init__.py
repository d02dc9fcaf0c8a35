"""The evaluator's entry point: KernelBench tasks in, trustworthy verdicts out. Candidates
import it for the build API; scripts import it for the Evaluator. Candidate code only ever
runs in worker processes (worker.py, harness.py, timing.py), never in the process that
holds an Evaluator.

    python evaluate.py --tasks builtin --solutions tasks/seeds/cpp      # the usual front end

    import kernels
    with kernels.Evaluator(dict(device="cpu")) as ev:    # settings.py: every key and its default
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
import importlib

# The package's public names, each from the module that holds it. Candidates call the build
# API (builds.py); scripts use the Evaluator (evaluator.py) and its vocabulary (verdicts.py).
# Imported when first used, so that `import kernels.settings` (config.py does) costs nothing.
PUBLIC = {
    "builds": ("KERNEL_CALLS", "BuildError", "cache_root", "load_cpp", "load_cuda", "parse_exports"),
    "evaluator": ("Evaluator", "pick_device", "target"),
    "verdicts": ("Reject", "Verdict", "median", "trim_log", "unusable"),
    "source": ("Solution", "sha", "top_names"),
}
_WHERE = {name: mod for mod, names in PUBLIC.items() for name in names}
__all__ = list(_WHERE)


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module 'kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value  # looked up here from now on
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
