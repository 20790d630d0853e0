"""fp32 GEMM on the sm_90 tensor cores through tfloat32 shared tiles (wgmma), beside torch fp32 and tf32 at 4096^3.
An experiment for issue 15 (which structure the gemm_fp32 template should take): `python3 benchmarks/fp32_tensorcore_sm90.py
lower` prints the wgmma count of each configuration (CPU); `... run OUT.json` times them on the GPU, L2 flushed."""
import json
import sys

import tilelang
import tilelang.language as T

F32 = "float32"
TF = T.tfloat32


def hi_bits(x):  # x rounded to TF32 (nearest, ties away), low bits cleared: exactly representable
    u = T.reinterpret(x, "uint32")
    return T.reinterpret((u + T.uint32(0x1000)) & T.uint32(0xFFFFE000), F32)


def make(M, N, K, mode, layout, bm, bn, bk, stages, threads):
    a_shape = (M, K)
    b_shape = (N, K) if layout == "nt" else (K, N)

    @T.prim_func
    def k(A: T.Tensor(a_shape, F32), B: T.Tensor(b_shape, F32), C: T.Tensor((M, N), F32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), TF)
            B_s = T.alloc_shared((bn, bk), TF)
            if mode == "3x":
                A_l = T.alloc_shared((bm, bk), TF)
                B_l = T.alloc_shared((bn, bk), TF)
            C_l = T.alloc_fragment((bm, bn), F32)
            T.clear(C_l)
            for kk in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if mode == "tf":
                    T.copy(A[by * bm, kk * bk], A_s)
                    if layout == "nt":
                        T.copy(B[bx * bn, kk * bk], B_s)
                    else:
                        for j, i in T.Parallel(bn, bk):
                            B_s[j, i] = B[kk * bk + i, bx * bn + j]
                    T.gemm(A_s, B_s, C_l, transpose_B=True)
                else:
                    for i, j in T.Parallel(bm, bk):
                        A_s[i, j] = hi_bits(A[by * bm + i, kk * bk + j])
                        A_l[i, j] = A[by * bm + i, kk * bk + j] - hi_bits(A[by * bm + i, kk * bk + j])
                    if layout == "nt":
                        for j, i in T.Parallel(bn, bk):
                            B_s[j, i] = hi_bits(B[bx * bn + j, kk * bk + i])
                            B_l[j, i] = B[bx * bn + j, kk * bk + i] - hi_bits(B[bx * bn + j, kk * bk + i])
                    else:
                        for j, i in T.Parallel(bn, bk):
                            B_s[j, i] = hi_bits(B[kk * bk + i, bx * bn + j])
                            B_l[j, i] = B[kk * bk + i, bx * bn + j] - hi_bits(B[kk * bk + i, bx * bn + j])
                    T.gemm(A_l, B_s, C_l, transpose_B=True)
                    T.gemm(A_s, B_l, C_l, transpose_B=True)
                    T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])
    return k


def make_tma(M, N, K, mode, bm, bn, bk, stages, threads):
    """Operands declared tfloat32 in global memory (torch float32 storage): T.copy is a plain copy (TMA), the
    tensor cores truncate each value to TF32. mode "tt": C = A_hi B_hi^T; mode "3t": the 3xTF32 sum over
    operands split beforehand (A_hi, A_lo: M x K; B_hi, B_lo: N x K; split_operand)."""

    @T.prim_func
    def k(A: T.Tensor((M, K), TF), B: T.Tensor((N, K), TF), A2: T.Tensor((M, K), TF), B2: T.Tensor((N, K), TF),
          C: T.Tensor((M, N), F32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), TF)
            B_s = T.alloc_shared((bn, bk), TF)
            if mode == "3t":
                A_l = T.alloc_shared((bm, bk), TF)
                B_l = T.alloc_shared((bn, bk), TF)
            C_l = T.alloc_fragment((bm, bn), F32)
            T.clear(C_l)
            for kk in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, kk * bk], A_s)
                T.copy(B[bx * bn, kk * bk], B_s)
                if mode == "3t":
                    T.copy(A2[by * bm, kk * bk], A_l)
                    T.copy(B2[bx * bn, kk * bk], B_l)
                    T.gemm(A_l, B_s, C_l, transpose_B=True)
                    T.gemm(A_s, B_l, C_l, transpose_B=True)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])
    return k


def make_split(R, Cn, bm=64, bn=256, threads=256):
    """X (R x Cn fp32) -> X_hi (TF32, nearest, ties away; low bits cleared), X_lo = X - X_hi."""

    @T.prim_func
    def k(X: T.Tensor((R, Cn), F32), H: T.Tensor((R, Cn), F32), L: T.Tensor((R, Cn), F32)):
        with T.Kernel(T.ceildiv(Cn, bn), T.ceildiv(R, bm), threads=threads) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                H[by * bm + i, bx * bn + j] = hi_bits(X[by * bm + i, bx * bn + j])
                L[by * bm + i, bx * bn + j] = X[by * bm + i, bx * bn + j] - hi_bits(X[by * bm + i, bx * bn + j])
    return k


TMA_CONFIGS = [  # mode, bm, bn, bk, stages, threads
    ("tt", 128, 128, 32, 3, 256), ("tt", 128, 256, 32, 3, 256), ("tt", 128, 256, 32, 4, 256),
    ("tt", 128, 256, 64, 2, 256), ("tt", 256, 128, 32, 3, 256), ("3t", 128, 128, 32, 3, 256), ("3t", 128, 256, 32, 2, 256),
    ("3t", 128, 256, 32, 3, 256), ("3t", 128, 128, 32, 4, 256),
]

CONFIGS = [  # mode, layout, bm, bn, bk, stages, threads
    ("tf", "nt", 128, 128, 32, 3, 256), ("tf", "nt", 128, 256, 32, 3, 256), ("tf", "nt", 128, 256, 32, 2, 256),
    ("tf", "nt", 256, 128, 32, 3, 256), ("tf", "nn", 128, 128, 32, 3, 256), ("tf", "nn", 128, 256, 32, 2, 256),
    ("3x", "nt", 128, 128, 32, 2, 256), ("3x", "nt", 128, 256, 32, 2, 256), ("3x", "nn", 128, 128, 32, 2, 256),
    ("3x", "nn", 128, 256, 32, 2, 256), ("3x", "nt", 128, 128, 16, 3, 256),
]


def main(lower_only: bool):
    tgt = {"kind": "cuda", "arch": "sm_90a"}
    M = N = K = 4096
    from tvm.target import Target
    out = []
    if lower_only:
        for cfg in CONFIGS:
            with Target(tgt):
                src = tilelang.lower(make(M, N, K, *cfg), target=tgt).kernel_source
            print(cfg, "wgmma", src.count("wgmma_ss"), "len", len(src))
        for cfg in TMA_CONFIGS:
            with Target(tgt):
                src = tilelang.lower(make_tma(M, N, K, *cfg), target=tgt).kernel_source
            print("tma", cfg, "wgmma", src.count("wgmma_ss"), "tma", src.count("tma_load"), "len", len(src))
        with Target(tgt):
            src = tilelang.lower(make_split(M, K), target=tgt).kernel_source
        print("split", src.count("float4"))
        return
    import torch
    torch.manual_seed(0)
    A = torch.randn(M, K, device="cuda"); Bt = torch.randn(N, K, device="cuda"); Bn = Bt.t().contiguous()
    ref = (A.double() @ Bt.double().t())
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def timeit(fn, iters=30):
        for _ in range(3): fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(iters):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
        ts.sort(); return ts[len(ts) // 2]

    def err(c):
        return float(((c.double() - ref).abs().max() / ref.abs().max()).item())

    torch.backends.cuda.matmul.allow_tf32 = False
    t = timeit(lambda: A @ Bt.t()); out.append({"name": "torch fp32 (allow_tf32=False)", "ms": t, "err": err(A @ Bt.t())})
    torch.backends.cuda.matmul.allow_tf32 = True
    t = timeit(lambda: A @ Bt.t()); out.append({"name": "torch tf32 (allow_tf32=True)", "ms": t, "err": err(A @ Bt.t())})
    torch.backends.cuda.matmul.allow_tf32 = False
    for cfg in CONFIGS if "--tma-only" not in sys.argv else []:
        try:
            with Target(tgt):
                kern = tilelang.compile(make(M, N, K, *cfg), target=tgt)
            C = torch.empty(M, N, device="cuda")
            B = Bt if cfg[1] == "nt" else Bn
            kern(A, B, C)
            t = timeit(lambda kern=kern, B=B, C=C: kern(A, B, C))
            out.append({"name": str(cfg), "ms": t, "err": err(C)})
        except Exception as exc:  # noqa: BLE001 - an experiment reports each configuration's failure
            out.append({"name": str(cfg), "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        print(out[-1], flush=True)
    A_hi, A_lo = torch.empty_like(A), torch.empty_like(A)
    B_hi, B_lo = torch.empty_like(Bt), torch.empty_like(Bt)
    with Target(tgt):
        split = tilelang.compile(make_split(M, K), target=tgt)
    split(A, A_hi, A_lo)
    split(Bt, B_hi, B_lo)
    t_split = timeit(lambda: (split(A, A_hi, A_lo), split(Bt, B_hi, B_lo)))
    out.append({"name": "split A and B (2 launches)", "ms": t_split, "err": float((A_hi + A_lo - A).abs().max().item())})
    for cfg in TMA_CONFIGS:
        try:
            with Target(tgt):
                kern = tilelang.compile(make_tma(M, N, K, *cfg), target=tgt)
            C = torch.empty(M, N, device="cuda")
            args = (A, Bt, A, Bt, C) if cfg[0] == "tt" else (A_hi, B_hi, A_lo, B_lo, C)
            kern(*args)
            e = err(C)
            t = timeit(lambda kern=kern, args=args: kern(*args))
            out.append(dict(name="tma " + str(cfg), ms=t, err=e, **({"ms_with_split": t + t_split} if cfg[0] == "3t" else {})))
        except Exception as exc:  # noqa: BLE001 - an experiment reports each configuration's failure
            out.append({"name": "tma " + str(cfg), "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        print(out[-1], flush=True)
    for o in out:
        if "ms" in o:
            o["tflops"] = 2 * M * N * K / o["ms"] / 1e9
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    res = main(sys.argv[1] == "lower")
    if res and len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump(res, f, indent=1)
