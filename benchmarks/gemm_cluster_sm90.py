"""A hand warp-specialised sm_90 GEMM with a 2-CTA cluster and TMA multicast of the operand the two CTAs share,
beside the auto-pipelined TileLang kernel tilegen emits for the tiles structure today and cuBLAS. An experiment
for the GEMM scheduling gap at mid sizes (is a cluster with multicast worth a structure of its own?); not a
tilegen kernel.

The hand schedule: one producer warp issues the TMA loads into a STAGES-slot ring (the shared operand by
multicast from cluster rank 0 into both CTAs' rings), two consumer warpgroups of 64 rows each run wgmma on
every slot. A slot's empty barrier is a cluster barrier: each consumer warpgroup of both CTAs arrives on it, so
rank 0 multicasts into a slot only when the peer CTA's consumers are done with it too. (TileLang's own pipeline
rewriter, given T.copy_cluster in T.Pipelined, releases a slot on the local consumers alone: the peer may still
be reading the slot the multicast overwrites.)

    python3 benchmarks/gemm_cluster_sm90.py lower                    # CPU: lowers and builds each variant
    python3 benchmarks/gemm_cluster_sm90.py run --out DIR [--shapes 2048x1024x4096,...]   # GPU

`run` (benchmarks/gemm_experiment.py) checks each kernel against an fp32 product, a negative control and 20
repeated calls that must agree bit for bit (a race between the multicast and the peer's reads would show there),
then times them beside cuBLAS with L2 flushed. Shapes must be whole tiles with an even number of tiles along the
cluster.
"""
import sys
from pathlib import Path

import tilelang.language as T

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a checkout where tilegen is not installed
    sys.path.insert(0, str(ROOT))

from benchmarks.gemm_experiment import cuda_source, main, run

A_DTYPE = B_DTYPE = OUT_DTYPE = "bfloat16"
ACCUM = "float32"
WARPGROUP, PRODUCER_THREADS = 128, 32


def manual(M, N, K, *, BM=128, BN=128, BK=64, S=4, share="a", depth=0):
    """share: 'a' (cluster of 2 along N: rank 0 multicasts A), 'b' (along M: rank 0 multicasts B), 'none' (cluster 1).
    depth: wgmma groups a consumer leaves in flight -- 0: each K step's products are waited for before its slot is
    released; 1: step k's products are issued before step k - 1's are waited for (and its slot released)."""
    k_tiles = (K + BK - 1) // BK
    ROWS = BM // 2
    cl = 2 if share != "none" else 1
    cdims = (2, 1, 1) if share == "a" else (1, 2, 1) if share == "b" else (1, 1, 1)

    a_mask, b_mask = (0b11 if share == "a" else None), (0b11 if share == "b" else None)  # None: a unicast load

    @T.macro
    def consume(A_ring, B_ring, C_c, r0, full, empty, tx):
        """A consumer warpgroup: rows r0 .. r0 + ROWS - 1 of the ring's A tiles, every slot released on both CTAs."""
        T.inc_max_nreg(240)
        T.clear(C_c)
        for k in T.serial(k_tiles):
            T.barrier_wait(full[k % S], (k // S) % 2)
            T.wgmma_gemm(A_ring[k % S, r0:r0 + ROWS, :], B_ring[k % S, :, :], C_c, transpose_B=True,
                         policy=T.GemmWarpPolicy.FullRow)
            if depth:
                T.wait_wgmma(1)
                if k > 0 and tx % WARPGROUP < cl:
                    T.mbarrier_arrive(empty[(k - 1) % S], tx % WARPGROUP)
            else:
                T.wait_wgmma(0)
                if tx % WARPGROUP < cl:
                    T.mbarrier_arrive(empty[k % S], tx % WARPGROUP)
        if depth:
            T.wait_wgmma(0)

    @T.prim_func
    def gemm_manual(A: T.Tensor((M, K), A_DTYPE), B: T.Tensor((N, K), B_DTYPE), C: T.Tensor((M, N), OUT_DTYPE)):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=3 * WARPGROUP, cluster_dims=cdims) as (bx, by):
            A_ring = T.alloc_shared((S, BM, BK), A_DTYPE)
            B_ring = T.alloc_shared((S, BN, BK), B_DTYPE)
            C_0 = T.alloc_fragment((ROWS, BN), ACCUM)
            C_1 = T.alloc_fragment((ROWS, BN), ACCUM)
            full = T.alloc_barrier([PRODUCER_THREADS] * S)
            empty = T.alloc_cluster_barrier([2 * cl] * S)
            T.cluster_sync()
            tx = T.get_thread_binding()
            row0, col0 = by * BM, bx * BN
            if tx < WARPGROUP:
                T.dec_max_nreg(24)
                if tx < PRODUCER_THREADS:
                    for k in T.serial(k_tiles):
                        T.barrier_wait(empty[k % S], (k // S + 1) % 2)
                        T.tma_copy(A[row0:row0 + BM, k * BK:(k + 1) * BK], A_ring[k % S, :, :], barrier=full[k % S],
                                   cluster_mask=a_mask, leader_scope_threads=PRODUCER_THREADS)
                        T.tma_copy(B[col0:col0 + BN, k * BK:(k + 1) * BK], B_ring[k % S, :, :], barrier=full[k % S],
                                   cluster_mask=b_mask, leader_scope_threads=PRODUCER_THREADS)
                        T.barrier_arrive(full[k % S])
            elif tx < 2 * WARPGROUP:
                consume(A_ring, B_ring, C_0, 0, full, empty, tx)
                T.copy(C_0, C[row0, col0])
            else:
                consume(A_ring, B_ring, C_1, ROWS, full, empty, tx)
                T.copy(C_1, C[row0 + ROWS, col0])
            T.cluster_sync()

    return gemm_manual


def auto(M, N, K, *, BM=128, BN=128, BK=64, S=4, swizzle=8):
    """What tilegen emits for the tiles structure (T.Pipelined, TileLang's own warp specialisation)."""
    @T.prim_func
    def gemm_auto(A: T.Tensor((M, K), A_DTYPE), B: T.Tensor((N, K), B_DTYPE), C: T.Tensor((M, N), OUT_DTYPE)):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=256) as (bx, by):
            if swizzle:
                T.use_swizzle(panel_size=swizzle)
            A_s = T.alloc_shared((BM, BK), A_DTYPE)
            B_s = T.alloc_shared((BN, BK), B_DTYPE)
            C_l = T.alloc_fragment((BM, BN), ACCUM)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, BK), num_stages=S):
                T.copy(A[by * BM, k * BK], A_s)
                T.copy(B[bx * BN, k * BK], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True, policy=T.GemmWarpPolicy.Square)
            T.copy(C_l, C[by * BM, bx * BN])
    return gemm_auto


VARIANTS = [
    ("auto 128x128 s4 sw8", lambda M, N, K: auto(M, N, K), None),
    ("auto 128x256 s4 sw8", lambda M, N, K: auto(M, N, K, BN=256), None),
    ("manual 128x128 s4 no cluster", lambda M, N, K: manual(M, N, K, share="none"), None),
    ("manual 128x128 s4 multicast A (2x1)", lambda M, N, K: manual(M, N, K, share="a"), None),
    ("manual 128x128 s4 multicast B (1x2)", lambda M, N, K: manual(M, N, K, share="b"), None),
    ("manual 128x256 s3 multicast B (1x2)", lambda M, N, K: manual(M, N, K, BN=256, S=3, share="b"), None),
    ("manual 128x128 s4 multicast B (1x2), depth 1", lambda M, N, K: manual(M, N, K, share="b", depth=1), None),
    ("manual 128x256 s3 multicast B (1x2), depth 1", lambda M, N, K: manual(M, N, K, BN=256, S=3, share="b", depth=1), None),
]


def lower_all(shape=(2048, 1024, 4096)):
    """Lower each variant (CPU) and print what its CUDA source does: multicast loads, cluster syncs."""
    for name, make, _ in VARIANTS:
        src = cuda_source(make(*shape))
        print(f"{name}: {src.count('tma_load_multicast')} multicast load(s), {src.count('cluster_sync')} cluster sync(s)")


def run_shapes(out, shapes):
    run(out, "gemm_cluster_sm90", "GEMM, a 2-CTA cluster with TMA multicast", "bf16, C = A @ B^T, L2 flushed, medians",
        shapes, VARIANTS, "bfloat16", repeats=20)


if __name__ == "__main__":
    main(__doc__, "gemm_cluster_sm90", "2048x1024x4096,2048x4096x4096,4096x4096x4096", lower_all, run_shapes)
