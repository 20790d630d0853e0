"""What the hand-written sm_90 GEMM experiments (gemm_cluster_sm90.py, gemm_tail_sm90.py) share: lowering a
variant for sm_90a (CPU), and `run`: every (shape, variant) compiled in parallel (a failure is that variant's row),
each kernel checked against an fp32 product (max |err| / (|ref| + 1) < 2^-6) with a negative control (B's rows
rotated by one must fail that check) and, where asked, repeated calls that must agree bit for bit, then timed beside
cuBLAS by CUDA events with L2 flushed before every launch (`tilegen bench`'s method: codegen.run.bench.time_ms,
medians); the rows written as <stem>.json and a Markdown table <stem>.md. Not a runnable script."""
import json
import os
import time

import tilelang

TARGET = {"kind": "cuda", "arch": "sm_90a"}
TOLERANCE = 2 ** -6  # max |err| / (|ref| + 1) of a kernel's product against the fp32 one


def cuda_source(func, pass_configs=None) -> str:
    """The CUDA source TileLang lowers `func` to for sm_90a under `pass_configs` (CPU)."""
    import tvm
    from tvm.target import Target as TvmTarget

    with tvm.transform.PassContext(config=pass_configs or {}), TvmTarget(TARGET):
        return tilelang.lower(func, target=TARGET).kernel_source


def error_text(exc: Exception) -> str:
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"


def run(out, stem: str, title: str, setup: str, shapes, variants, dtype: str, repeats: int = 0):
    """Compile, check and time every variant at every shape (M, N, K); write out/<stem>.json and .md. `variants`:
    (name, make(M, N, K) -> prim_func C = A @ B^T, TileLang pass configs or None); `dtype`: torch's name of the
    inputs' dtype; `repeats`: calls that must return the first call's C bit for bit (a race would show there)."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from codegen.run.bench import Timing, flush_bytes, time_ms

    t0 = time.time()

    def build(job):
        (M, N, K), (_, make, configs) = job
        try:
            return tilelang.compile(make(M, N, K), out_idx=[2], target=TARGET, pass_configs=configs), None
        except Exception as exc:  # noqa: BLE001 - one variant's failure is its row
            return None, error_text(exc)

    jobs = [(shape, v) for shape in shapes for v in variants]
    with ThreadPoolExecutor(8) as pool:
        built = list(pool.map(build, jobs))
    compile_s = time.time() - t0
    print(f"compiled {len(jobs)} kernels in {compile_s:.0f} s", flush=True)
    flush = torch.empty(flush_bytes(torch.cuda.get_device_properties(0).L2_cache_size, "nvidia"), dtype=torch.uint8,
                        device="cuda")
    bench = lambda fn: Timing.of(time_ms(fn, flush)).median_ms
    rows = []
    torch.manual_seed(0)
    for (M, N, K) in shapes:
        a = torch.randn(M, K, device="cuda", dtype=getattr(torch, dtype))
        b = torch.randn(N, K, device="cuda", dtype=getattr(torch, dtype))
        ref = a.float() @ b.float().T
        rel = lambda c, ref=ref: ((c.float() - ref).abs() / (ref.abs() + 1)).max().item()
        t_cublas = bench(lambda a=a, b=b: torch.matmul(a, b.T))
        rows.append({"shape": f"{M}x{N}x{K}", "variant": "cuBLAS (torch.matmul)", "ms": t_cublas, "ok": True})
        for ((shape, (name, _, _)), (kern, error)) in zip(jobs, built):
            if shape != (M, N, K):
                continue
            row = {"shape": f"{M}x{N}x{K}", "variant": name}
            if error:
                rows.append({**row, "error": error})
                continue
            try:
                c = kern(a, b)
                row["err"] = rel(c)
                row["ok"] = row["err"] < TOLERANCE
                row["control_caught"] = rel(kern(a, b.roll(1, 0))) >= TOLERANCE  # a wrong product must fail
                if any(not torch.equal(kern(a, b), c) for _ in range(repeats)):
                    row["ok"] = False
                    row["nondeterministic"] = True
                row["ms"] = bench(lambda kern=kern, a=a, b=b: kern(a, b))
                row["vs_cublas"] = t_cublas / row["ms"]
            except Exception as exc:  # noqa: BLE001
                row["error"] = error_text(exc)
            rows.append(row)
            print(row, flush=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{stem}.json"), "w") as f:
        json.dump(rows, f, indent=1)
    lines = [f"# {title}: {torch.cuda.get_device_name()}", "",
             f"`python3 benchmarks/{stem}.py run` ({setup}); compiled {len(jobs)} kernels in {compile_s:.0f} s.", "",
             "| shape | variant | ms | vs cuBLAS | max rel err | ok | control caught | error |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        err = f"{r['err']:.2e}" if "err" in r else "-"
        lines.append(f"| {r['shape']} | {r['variant']} | {r.get('ms', float('nan')):.4f} | {r.get('vs_cublas', 1.0):.3f}x | "
                     f"{err} | {r.get('ok')} | {r.get('control_caught', '-')} | {r.get('error', '')} |")
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(doc: str, stem: str, shapes: str, lower_all, run_shapes):
    """The experiments' command line: `lower` (CPU) or `run --out DIR --shapes MxNxK,...` (GPU)."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("mode", choices=("lower", "run"))
    ap.add_argument("--out", default=f"reports/{stem}")
    ap.add_argument("--shapes", default=shapes)
    args = ap.parse_args()
    if args.mode == "lower":
        lower_all()
    else:
        run_shapes(args.out, [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")])
