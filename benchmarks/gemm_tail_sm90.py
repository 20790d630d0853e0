"""Ragged GEMM shapes on sm_90: tilegen's two tail policies beside a one-launch specialized form and cuBLAS. An
experiment for `tail: specialized` (is one launch with a workgroup-uniform branch worth a structure of its own?);
the one-launch kernel is not a tilegen kernel.

tilegen's `tail: specialized` launches up to three grids one after the other (the interior without bounds checks,
then the bottom and right edges bounds-checked, their K loops unpipelined), and on an H100 it ran 1000^3 at 0.081
ms against 0.024 ms for `tail: predicated` (reports/h100/run). The one-launch form: one grid over every tile, each
workgroup taking the unchecked pipelined path when its tile is whole and the checked pipelined path when it is not
(the branch is uniform over a workgroup, so no lane diverges); TileLang's analyser drops the interior's bounds
checks under the branch's condition. Two pipelined loops in two branches fail TileLang's warp-specialisation pass
(its warp partition sees the producer's warps), so this form is lowered with `tl.disable_warp_specialized`: cp.async
loads, no TMA. The predicated kernel is also timed with warp specialisation off, to tell the launch structure from
the load path.

    python3 benchmarks/gemm_tail_sm90.py lower                          # CPU: lowers each variant, prints its form
    python3 benchmarks/gemm_tail_sm90.py run --out DIR [--shapes 1000x1000x1000,...]   # GPU

`run` (benchmarks/gemm_experiment.py) checks each kernel against an fp32 product and a negative control, then times
it beside cuBLAS with L2 flushed.
"""
import importlib.util
import re
import sys
from pathlib import Path

import tilelang.language as T

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a checkout where tilegen is not installed
    sys.path.insert(0, str(ROOT))

from benchmarks.gemm_experiment import cuda_source, main, run

NO_WS = {"tl.disable_warp_specialized": True}
# the seeds of specs/gemm_edge.yaml: the same tile (128 x 128 x 32, 256 threads, 2 stages), the two tail policies
PREDICATED = "gemm_fp16_nt_128x128x32_t256_s2_predicated_sm90_bfa5d3"
SPECIALIZED = "gemm_fp16_nt_128x128x32_t256_s2_specialized_sm90_518aaa"
BM, BN, BK, THREADS, STAGES = 128, 128, 32, 256, 2
DTYPE, ACCUM = "float16", "float32"
SHAPES = "1000x1000x1000,4095x4097x1000,1000x1001x1001,8191x8193x4096"


def generated(uri: str):
    """The committed generated module of a seed (generated/sm_90/gemm/<uri>.py: needs only tilelang)."""
    path = ROOT / "generated" / "sm_90" / "gemm" / f"{uri}.py"
    spec = importlib.util.spec_from_file_location(uri, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_launch(M, N, K):
    """C = A @ B^T in one grid over every tile: whole tiles take the unchecked pipelined K loop (and the ragged last
    K tile, checked, if K is ragged), the others the checked pipelined loop over every K tile."""
    full_m, full_n, full_k = M // BM, N // BN, K // BK

    @T.macro
    def tile(A, B, C, row0, col0, k_tiles, k_tail):
        A_s = T.alloc_shared((BM, BK), DTYPE)
        B_s = T.alloc_shared((BN, BK), DTYPE)
        C_l = T.alloc_fragment((BM, BN), ACCUM)
        T.clear(C_l)
        for k in T.Pipelined(k_tiles, num_stages=STAGES):
            T.copy(A[row0, k * BK], A_s)
            T.copy(B[col0, k * BK], B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=True)
        if k_tail:
            A_t = T.alloc_shared((BM, BK), DTYPE)
            B_t = T.alloc_shared((BN, BK), DTYPE)
            T.copy(A[row0, k_tiles * BK], A_t)
            T.copy(B[col0, k_tiles * BK], B_t)
            T.gemm(A_t, B_t, C_l, transpose_B=True)
        T.copy(C_l, C[row0, col0])

    @T.prim_func
    def gemm_one_launch(A: T.Tensor((M, K), DTYPE), B: T.Tensor((N, K), DTYPE), C: T.Tensor((M, N), DTYPE)):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=THREADS) as (bx, by):
            if by < full_m and bx < full_n:
                tile(A, B, C, by * BM, bx * BN, full_k, K % BK != 0)
            else:
                tile(A, B, C, by * BM, bx * BN, T.ceildiv(K, BK), False)

    return gemm_one_launch


# (name, prim_func maker, pass configs)
VARIANTS = [
    ("tail predicated (tilegen)", lambda M, N, K: generated(PREDICATED).make_kernel(M, N, K), None),
    ("tail specialized (tilegen: up to 3 launches)", lambda M, N, K: generated(SPECIALIZED).make_kernel(M, N, K), None),
    ("tail predicated, warp specialisation off", lambda M, N, K: generated(PREDICATED).make_kernel(M, N, K), NO_WS),
    ("one launch, uniform branch (warp specialisation off)", one_launch, NO_WS),
]


def form(src: str) -> str:
    """What a lowered source does: kernels, loads (TMA, cp.async unchecked / checked), warp specialisation."""
    kernels = len(re.findall(r"__global__[^;{]*\{", src))  # definitions, not the forward declarations
    return (f"{kernels} kernel(s), {src.count('tma_load(')} TMA load(s), "
            f"{src.count('cp_async_gs<')} unchecked / {src.count('cp_async_gs_conditional<')} checked cp.async, "
            f"{'warp-specialised' if 'warpgroup_reg_alloc' in src else 'not warp-specialised'}")


def lower_all(shape=(1000, 1000, 1000)):
    for name, make, configs in VARIANTS:
        print(f"{name}: {form(cuda_source(make(*shape), configs))}")


def run_shapes(out, shapes):
    run(out, "gemm_tail_sm90", "GEMM at ragged shapes: tail policies and a one-launch specialized form",
        "fp16, C = A @ B^T, 128 x 128 x 32 tiles, 2 stages, L2 flushed, medians", shapes, VARIANTS, "float16")


if __name__ == "__main__":
    main(__doc__, "gemm_tail_sm90", SHAPES, lower_all, run_shapes)
