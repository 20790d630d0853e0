"""Benchmarks on the GPU present: the generated kernel beside torch eager and torch.compile, timed
the same way in the same run (CUDA/HIP events, warm-up, L2 flushed before every timed launch)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from codegen.core.hardware import DType, Target
from codegen.families import family
from codegen.targets import HARDWARE, TARGETS, torch_dtype

MIN_ITERS, MAX_ITERS, TARGET_MS = 10, 200, 300.0
# the kernels this (worker) process loaded, by what they are: a bench session's worker
# (codegen.run.gpurun.GpuSession) times the same kernels round after round, and loading one from TileLang's
# cache takes 0.02-0.6 s. The oldest goes first past LOADED_MAX.
_LOADED: dict[tuple, object] = {}
LOADED_MAX = 64


def loaded_kernel(rendered, shape: tuple, run_target: Target):
    """compile_kernel's kernel for (rendered, shape), loaded once in this process."""
    from codegen.run.gpu import compile_kernel

    key = (rendered.uri, rendered.code_sha256, tuple(rendered.instance.compile_shape(shape)), run_target.value)
    if key not in _LOADED:
        kernel = compile_kernel(rendered, shape, run_target)
        while len(_LOADED) >= LOADED_MAX:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = kernel
    return _LOADED[key]


def flush_bytes(l2_bytes: int, vendor: str) -> int:
    """Bytes to overwrite between timed runs: 4x the L2 torch reports, and at least the least flush of
    the vendor's targets (min_flush_bytes: 1 GiB on gfx942, whose 256 MiB Infinity Cache is not in
    L2_cache_size -- TileLang's default 256 MB is too small)."""
    floor = max((t.min_flush_bytes for t in TARGETS.values() if t.hw.vendor == vendor), default=256 << 20)
    return max(4 * l2_bytes, floor)


def time_ms(fn, flush, *, warmup: int = 3) -> list[float]:
    """Per-launch times in ms, each launch after the flush buffer is overwritten."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    iters = int(min(MAX_ITERS, max(MIN_ITERS, TARGET_MS / max(start.elapsed_time(end), 1e-3))))
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for s, e in pairs:
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]


@dataclass(kw_only=True)
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    iters: int

    @classmethod
    def of(cls, samples: list[float]) -> Timing:
        q = statistics.quantiles(samples, n=10) if len(samples) >= 2 else [samples[0]] * 9
        return cls(median_ms=statistics.median(samples), p10_ms=q[0], p90_ms=q[-1], iters=len(samples))


@dataclass(kw_only=True)
class BenchRow:
    uri: str
    name: str
    target: str
    shape: tuple[int, ...]
    dtypes: str
    status: str  # ok | error | skipped
    error: str = ""
    kernel: Timing | None = None
    baselines: dict[str, Timing] = field(default_factory=dict)
    baseline_errors: dict[str, str] = field(default_factory=dict)
    flops: float = 0.0
    bytes: float = 0.0
    # what a baseline moves where that is more than the kernel's `bytes` (the unfused torch sequence of a fused kernel)
    baseline_bytes: dict[str, float] = field(default_factory=dict)
    tflops: float | None = None
    gbps: float | None = None
    pct_peak: float | None = None
    pct_copy_bw: float | None = None
    bound: str = ""
    speedup: dict[str, float] = field(default_factory=dict)
    baseline_precision: str = ""  # what the baselines compute, where that is a choice (fp32 GEMM: allow_tf32)
    baselines_from: str = ""  # the kernel whose row timed these baselines in the same run ("": this row's own)
    seconds: float = 0.0  # wall time of the whole case: loading the kernel, inputs, every timing (torch.compile's too)


def bench_case(rendered, shape, run_target: Target, flush_nbytes: int, copy_gbps: float,
               baselines_for: frozenset[str] | None = None, run_shape: tuple | None = None) -> BenchRow:
    """Time one kernel at one shape beside the baselines (all kernels, or only those in `baselines_for`:
    the tuner times torch once per shape, beside the hand configuration); runs inside a worker process.
    `run_shape`: the kernel runs at this shape instead (a dispatch bucket: a kernel compiled for a larger M,
    on A padded with zero rows) while the baselines, the FLOP and byte counts are the call's `shape`'s."""
    import time

    import torch

    t0 = time.perf_counter()
    inst = rendered.instance
    fam = family(inst).numerics
    run_shape = tuple(shape) if run_shape is None else tuple(run_shape)
    kernel = loaded_kernel(rendered, run_shape, run_target)
    run_case = fam.make_inputs(inst, run_shape, seed=0, kind="normal", device="cuda", run_target=run_target)
    case = run_case if run_shape == tuple(shape) else fam.make_inputs(inst, shape, seed=0, kind="normal",
                                                                      device="cuda", run_target=run_target)
    out_dtype = torch_dtype(inst.spec_dtypes[-2], run_target)
    outs = fam.alloc_outputs(inst, run_shape, run_target, fill=None)
    flush = torch.empty(flush_nbytes, dtype=torch.uint8, device="cuda")
    row = BenchRow(uri=rendered.uri, name=inst.name, target=inst.target.value, shape=tuple(shape),
                   dtypes=inst.dtype_label(), status="ok",
                   flops=fam.flops(inst, shape), bytes=fam.bytes(inst, shape),
                   baseline_bytes=fam.baseline_bytes(inst, shape), baseline_precision=fam.baseline_precision(inst))
    row.kernel = Timing.of(time_ms(lambda: fam.launch(kernel, run_case, *outs), flush))
    baselines = fam.baselines(inst, case, out_dtype) if baselines_for is None or rendered.uri in baselines_for else {}
    for name, fn in baselines.items():
        try:
            row.baselines[name] = Timing.of(time_ms(fn, flush))
        except Exception as exc:  # noqa: BLE001 - a baseline that cannot run is reported, the kernel's numbers stand
            row.baseline_errors[name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
    hw = HARDWARE[run_target]
    seconds = row.kernel.median_ms / 1e3
    row.tflops = row.flops / seconds / 1e12
    row.gbps = row.bytes / seconds / 1e9
    peak = hw.peak_dense_tflops[DType(inst.spec_dtypes[0])]
    row.pct_peak = 100.0 * row.tflops / peak
    row.pct_copy_bw = 100.0 * row.gbps / copy_gbps if copy_gbps else None
    ridge = peak * 1e12 / (copy_gbps * 1e9 if copy_gbps else hw.hbm_bandwidth_tbps * 1e12)
    row.bound = "compute" if row.flops / row.bytes >= ridge else "memory"
    row.speedup = {b: t.median_ms / row.kernel.median_ms for b, t in row.baselines.items()}
    row.seconds = time.perf_counter() - t0
    return row


def measure_copy_gbps(flush_nbytes: int) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), the memory ceiling."""
    import torch

    nbytes = 2 << 30
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    flush = torch.empty(flush_nbytes, dtype=torch.uint8, device="cuda")
    t = Timing.of(time_ms(lambda: dst.copy_(src), flush))
    return 2 * nbytes / (t.median_ms / 1e3) / 1e9
