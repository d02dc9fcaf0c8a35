"""Correctness math: one output judged against the reference, in the task's dtype and in
float64. Pure tensor functions, called by the worker (harness.py) and by the tests; nothing
here runs candidate code.

    err, tol, mean, mean_tol = correctness.compare(out, ref32, ref64, allow_lowp=False, where="seed 0")  # or raises Reject
"""
import contextlib
import copy
import ctypes
import functools
import math
import typing

import torch

from .verdicts import Reject


def tensors(x):
    """Flatten an output or input structure into its tensors."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for e in x for t in tensors(e)]
    return []


def gpu_out_of_memory(e):
    """A float64 run the GPU had no memory for. Never a reason to compare against the task's
    own dtype instead: its error is then unknown and taken as none, and an exact candidate
    beside a reference whose convolutions ran in TF32 (PyTorch's default) was rejected
    `precision` (3.8e-3 against 1e-4) whenever other workers, or a policy, filled the GPU.
    Raised instead: the job's verdict is `oom`, which the Evaluator judges again alone. cuBLAS
    says it its own way when it has no memory for a GEMM's workspace."""
    return isinstance(e, torch.OutOfMemoryError) or any(
        m in str(e) for m in ("CUDA out of memory", "CUBLAS_STATUS_ALLOC_FAILED"))


def _in_float64(fn, fallback):
    """fn() -> its result; fallback where it fails (an op without a float64 kernel); where the
    GPU has no memory for it, once more after giving the cache back, then raised."""
    for attempt in range(2):
        try:
            return fn()
        except Exception as e:
            if not gpu_out_of_memory(e):
                return fallback
            if attempt:
                raise
        torch.cuda.empty_cache()  # the memory may have been this process's cache, or a passing neighbour's


def float64_copy(ref):
    """The reference model in float64, or None where it cannot be converted."""
    return _in_float64(lambda: copy.deepcopy(ref).double(), None)


def reference_outputs(ref, ref64, xs):
    """The reference's output on xs in the task's dtype and in float64 -> (r32, r64, ref64).
    Floating inputs are cast for the float64 run; where an op has no float64 kernel the
    comparison falls back to the task's dtype (r64 is r32) and ref64 comes back None; where
    the GPU has no memory for it, it raises (gpu_out_of_memory)."""
    r32 = ref(*xs)
    if ref64 is None:
        return r32, r32, None
    failed = object()
    r64 = _in_float64(lambda: ref64(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                      for x in xs]), failed)
    return (r32, r32, None) if r64 is failed else (r32, r64, ref64)


_CHUNK = 1 << 24  # elements per chunk: comparisons of gigabyte outputs stay small in memory
LOWP_LIMIT = 5e-2  # errors between the tolerance and this look like lowered precision


def _base_tol(dtype, allow_lowp):
    if dtype == torch.float32 and allow_lowp:
        return 1e-2
    return {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 1e-2,
            torch.bfloat16: 5e-2}.get(dtype, 1e-4)


def rel_err(out, ref):
    """max_i |out_i - ref_i| / (|ref_i| + mean|ref|): an allclose whose atol scales with the
    output. inf where out has NaN/inf that ref has not."""
    return rel_errs(ref, out)[0]


def rel_errs(ref, *outs):
    """rel_err of each of outs against one reference -> [max error] (no mean errors summed)."""
    return [e for e, _ in errors(ref, *outs, means=False)]


def errors(ref, *outs, means=True):
    """Each of outs against one reference -> [(rel_err, mean error)], the mean error being
    sum |out_i - ref_i| / sum |ref_i| over the reference's finite elements (0.0 unless
    `means`), the mean |ref|, the conversions and the reads shared, chunked, so that
    comparing gigabyte outputs stays small in memory and cheap in memory traffic. The arithmetic is float64 where an output is float64, else float32: rounding
    the float64 reference to float32 moves an error by about 6e-8, far below the smallest
    tolerance a float32 output is held to (1e-4). Two synchronizes in all (three where the
    reference has NaN/inf): on a GPU shared with other workers each one also waits for theirs."""
    r = ref.detach().reshape(-1)
    outs = [o.detach().reshape(-1) for o in outs]
    if r.numel() == 0:
        return [(0.0, 0.0)] * len(outs)
    wd = torch.float64 if any(o.dtype == torch.float64 for o in outs) else torch.float32
    chunks = range(0, r.numel(), _CHUNK)
    # mean |ref| over its finite elements: where all are (nearly always), one read of each
    # chunk by a norm, no temporaries; else counted and summed apart
    total = torch.stack([torch.linalg.vector_norm(r[i:i + _CHUNK], 1, dtype=torch.float64) for i in chunks]).sum()
    total, count = total.item(), r.numel()
    if not math.isfinite(total):
        total = torch.zeros((), dtype=torch.float64, device=r.device)
        count = torch.zeros((), dtype=torch.int64, device=r.device)
        for i in chunks:
            a = r[i:i + _CHUNK].to(wd).abs()
            fin = a.isfinite()
            count += fin.sum()
            total += a.nan_to_num_(0.0, 0.0, 0.0).sum(dtype=torch.float64)
        total, count = torch.stack([total, count.double()]).tolist()
    scale = max(total / count, 1e-30) if count else 1e-30
    worst = [torch.zeros((), dtype=wd, device=r.device) for _ in outs]
    sums = [torch.zeros((), dtype=torch.float64, device=r.device) for _ in outs]
    for i in chunks:
        rc = r[i:i + _CHUNK].to(wd)
        den = rc.abs().add_(scale)
        fin = None if count == r.numel() else rc.isfinite()
        for k, o in enumerate(outs):
            oc = o[i:i + _CHUNK].to(wd)
            a = (oc - rc).abs_()
            if fin is None:  # a finite reference: NaN/inf in out make the maximum NaN/inf
                if means:
                    sums[k] += a.sum(dtype=torch.float64)
                d = a.div_(den)
            else:  # NaN/inf in out must sit where ref has the same ones
                bad = ((oc.nan_to_num(0.5, 1.5, -1.5) != rc.nan_to_num(0.5, 1.5, -1.5)) & ~fin).any() \
                    | (~oc.isfinite() & fin).any()
                a = a.where(fin, 0)
                if means:
                    sums[k] += a.sum(dtype=torch.float64)
                d = a.div_(den).where(fin, 0).where(~bad, float("inf"))
            worst[k] = torch.maximum(worst[k], d.max())
    mx = [w if w == w else float("inf") for w in torch.stack(worst).tolist()]  # NaN: a NaN in out
    # (a NaN sum: NaN in out where the reference is finite, already inf in mx)
    mean = [(m / (scale * count) if m == m else float("inf")) if count else 0.0 for m in torch.stack(sums).tolist()]
    return list(zip(mx, mean))


def _bits(t):
    """A tensor's raw bits as integers, so NaNs compare equal to themselves."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    if t.dtype.is_floating_point and t.element_size() in ints:
        return t.contiguous().view(ints[t.element_size()])
    return t


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


@functools.cache
def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


# The harness's own malloc settings, as it set them last (mallopt): glibc has no way to read
# them back, and a candidate can change them through any alias (__libc_mallopt) or by writing
# glibc's memory, so they are written again after every candidate call and before every
# reference call (guards.quiet): a threshold or fill a candidate set applies to its own calls only.
_MALLOC = {}


def mallopt(param, value):
    """glibc's malloc settings (the host allocator torch's CPU tensors come from) -> whether
    it took; False where the C library is not glibc."""
    _MALLOC[param] = value
    return bool(getattr(_libc(), "mallopt", None) and _libc().mallopt(param, value))


def malloc_again():
    """The harness's malloc settings written again (_MALLOC)."""
    for param, value in _MALLOC.items():
        _libc().mallopt(param, value)


M_PERTURB, M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -6, -1, -3


@contextlib.contextmanager
def poisoned(specs, dev, copies=2):
    """While the candidate runs, the memory its outputs get reads as all-ones bytes (a NaN
    for floats): a kernel that leaves part of its output unwritten shows the poison instead
    of a stale correct answer (EVAL.md, "How a candidate is judged": reading freed memory).
    The GPU's caching allocator hands back the blocks just freed, so blocks of the outputs'
    sizes are filled and freed. The host allocator picks among all its free blocks, and
    which one depends on the worker's history, so there glibc fills every block it hands
    out while this is open (M_PERTURB; workers start without glibc's per-thread cache, whose
    blocks it hands out unfilled: sandbox.WORKER_TUNABLES): the same code gets the same
    verdict; where the C library is not glibc, the host gets the GPU's treatment."""
    perturbed = dev.type == "cpu" and mallopt(M_PERTURB, 0x100)  # blocks handed out: ~0x00
    if not perturbed:  # filled, then freed at once (the list is dropped)
        [torch.full((n,), 255, dtype=torch.uint8, device=dev) for n, _ in specs for _ in range(copies)]
    try:
        yield
    finally:
        if perturbed:
            mallopt(M_PERTURB, 0)


def _poisoned(t):
    """Number of elements of a float tensor whose bytes are all ones (the poison), counted a
    chunk at a time: a sum over the whole mask converts it to int64 first (12 GiB for
    KernelBench's 1.6-billion-element outputs)."""
    if not t.dtype.is_floating_point or t.numel() == 0 or t.element_size() == 1:
        return 0
    return int(torch.stack([torch.count_nonzero(c == -1) for c in _bits(t).reshape(-1).split(_CHUNK)]).sum())


def plain_tensors(out):
    """Raise tensor_subclass where an output is a torch.Tensor subclass (a lazy tensor that
    does the work only when read, as a released kernel's LazyMatmul does), before anything
    reads it: its own methods would answer, or fail, in the checker's place."""
    for t in tensors(out):
        if type(t) is not torch.Tensor:
            raise Reject("rejected", "tensor_subclass",
                         f"output is a {type(t).__name__}, a torch.Tensor subclass (lazy or deferred output)")


class Agreement(typing.NamedTuple):
    """compare's result: the worst relative error and its tolerance, the mean error and its
    bound (the verdict keeps both pairs: how close an accepted candidate came to each)."""
    err: float
    tol: float
    mean: float = 0.0
    mean_tol: float = 0.0

    def mean_used(self):
        """The share of its bound the mean error used: the key for the one nearest it."""
        return self.mean / self.mean_tol if self.mean_tol else 0.0

    @staticmethod
    def worst(agreements):
        """Several outputs' or input sets' Agreements -> one: the largest error, the smallest
        tolerance, and the mean error that came nearest its bound, with that bound."""
        near = max(agreements, key=Agreement.mean_used)
        return Agreement(max(a.err for a in agreements), min(a.tol for a in agreements), near.mean, near.mean_tol)


def compare(out, ref32, ref64, allow_lowp, where, factor=1.0):
    """Judge one output against the reference in the task's dtype (ref32) and in float64
    (ref64). Returns an Agreement; raises Reject. The tolerance is the dtype's, or 10x the
    eager reference's own error where the task is ill-conditioned; times factor (the spot
    checks of timed calls allow twice the checks' tolerance)."""
    if isinstance(ref32, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(ref32):
            raise Reject("incorrect", "shape_mismatch", f"expected {len(ref32)} outputs ({where})")
        return Agreement.worst([compare(o, a, b, allow_lowp, where, factor) for o, a, b in zip(out, ref32, ref64)])
    if not isinstance(ref32, torch.Tensor):
        if out != ref32:
            raise Reject("incorrect", "mismatch", f"expected {ref32!r}, got {out!r} ({where})")
        return Agreement(0.0, 0.0)
    if not isinstance(out, torch.Tensor):
        raise Reject("incorrect", "not_a_tensor", f"output is a {type(out).__name__}, not a tensor ({where})")
    plain_tensors(out)
    if out.device != ref32.device:
        raise Reject("incorrect", "device_mismatch", f"output on {out.device}, expected {ref32.device}")
    if out.shape != ref32.shape:
        raise Reject("incorrect", "shape_mismatch", f"output shape {tuple(out.shape)}, expected {tuple(ref32.shape)}")
    if out.dtype != ref32.dtype:
        raise Reject("incorrect", "dtype_mismatch", f"output dtype {out.dtype}, expected {ref32.dtype}")
    if out.numel() and out.untyped_storage().data_ptr() == 0:
        raise Reject("rejected", "no_storage", "output tensor has no storage")
    if not ref32.dtype.is_floating_point:
        if not torch.equal(out, ref32):
            raise Reject("incorrect", "mismatch", f"integer output differs from the reference ({where})")
        return Agreement(0.0, 0.0)
    n_poison = _poisoned(out)
    if n_poison:  # less the reference's own all-ones values (rare), read only when out has some
        n_poison -= _poisoned(ref32)
    if n_poison > 0:
        raise Reject("rejected", "unwritten_output",
                     f"{n_poison} of {out.numel()} output elements were never written ({where})")
    (err, mean), (ref_err, ref_mean) = errors(ref64, out, ref32)
    base = _base_tol(ref32.dtype, allow_lowp)
    tol = factor * max(base, 10 * ref_err)
    # The maximum alone is a weak test where the task's own float32 error is large at a few
    # elements (a deep network under TF32: the reference off by more than 100% somewhere):
    # 10x that error at its worst element would pass a different function everywhere else.
    # So the mean error is held to 10x the reference's own mean error too, and never below
    # twice the base tolerance: an output within `base` of every element can have a mean error
    # up to 2 base, so where the base binds the maximum, this never binds first. (Over the
    # CUDA-L1 release on an H100, the accepted candidates' mean errors came to at most 2.9x
    # their references' own where that term bound; twice 10x let through a network 15x off.)
    mean_tol = factor * max(2 * base, 10 * ref_mean)
    if err == float("inf"):
        raise Reject("incorrect", "nan", f"output has NaN/inf where the reference has none ({where})", err=err, tol=tol)
    lowp = ref32.dtype in (torch.float32, torch.float64) and not allow_lowp
    if err > tol:
        if lowp and err <= LOWP_LIMIT:
            raise Reject("rejected", "precision", f"error {err:.2e} exceeds the {ref32.dtype} tolerance "
                         f"{tol:.1e}: consistent with fp16/bf16/TF32 arithmetic ({where})", err=err, tol=tol)
        raise Reject("incorrect", "mismatch", f"max relative error {err:.2e} > tolerance {tol:.1e} ({where})",
                     err=err, tol=tol)
    if mean > mean_tol:
        what = (f"mean error {mean:.2e} > {mean_tol:.1e}, 10x the reference's own float32 mean error ({ref_mean:.1e}), "
                f"though each element is within the tolerance its worst one sets ({tol:.1e})")
        if lowp and mean <= LOWP_LIMIT:
            raise Reject("rejected", "precision", f"{what}: consistent with fp16/bf16/TF32 arithmetic ({where})",
                         err=err, tol=tol)
        raise Reject("incorrect", "mismatch", f"{what} ({where})", err=err, tol=tol)
    return Agreement(err, tol, mean, mean_tol)


def agrees(out, ref, tol):
    """out equals the reference's output ref within tol (relative, as rel_err): the quick
    comparison of the timers' spot checks, against the task's own dtype."""
    if isinstance(ref, (list, tuple)):
        return isinstance(out, (list, tuple)) and len(out) == len(ref) and all(map(agrees, out, ref, [tol] * len(ref)))
    if not isinstance(ref, torch.Tensor):
        return out == ref
    if type(out) is not torch.Tensor or out.shape != ref.shape or out.dtype != ref.dtype or out.device != ref.device:
        return False
    if not ref.dtype.is_floating_point:
        return torch.equal(out, ref)
    return rel_err(out, ref) <= tol


def _sum64(t):
    """A non-empty tensor's float64 sum, a chunk at a time: a float64 sum of a float32 tensor
    converts it whole first (12 GiB for a KernelBench output of 1.6 billion elements). -> 0-d"""
    return torch.stack([c.sum(dtype=torch.float64) for c in t.reshape(-1).split(_CHUNK)]).sum()


def fingerprint(out):
    """A cheap identity of an output's values, to spot results replayed from a cache."""
    ts = tensors(out)
    return [(tuple(t.shape), _sum64(t).item() if t.numel() else 0.0,
             t.reshape(-1)[:: max(1, t.numel() // 4096)].double().cpu()) for t in ts]


def checksums(ts):
    """An identity of each tensor's values (a model's weights), all read back in one transfer:
    its sum, a chunk at a time in float64, and a strided sample of its values, as int64 bits
    (NaN compares equal to itself) -> [int64 tensor], one per tensor (empty for an empty one):
    which of a model's tensors changed."""
    parts = []
    for t in ts:
        t = torch.view_as_real(t.detach()) if t.is_complex() else t.detach()
        if not t.numel():
            parts.append(torch.zeros(0, dtype=torch.float64, device=t.device))
            continue
        parts.append(torch.cat([_sum64(t)[None], t.reshape(-1)[:: max(1, t.numel() // 256)].double()]))
    if not parts:
        return []
    return list(torch.cat(parts).view(torch.int64).cpu().split([len(p) for p in parts]))


def same_fingerprint(a, b):
    return len(a) == len(b) and all(x[0] == y[0] and x[1] == y[1] and torch.equal(x[2], y[2])
                                    for x, y in zip(a, b))

