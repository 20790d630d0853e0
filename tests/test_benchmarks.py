"""The benchmark scripts' CPU-side parts: the variants they write are legal specs, and the illegal ones are
reported with the rule that rejects them (the GPU parts run on the H200 only)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from seeds import hand_files

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_row_sweep_variants_are_legal_or_listed_with_their_rule():
    s = _load("sweep_rows_sm90")
    files, rejected = s.legal(s.variants(sorted(s.OPS), [64, 128, 256], [1, 2]))
    # 64 threads hold 8192 / 64 = 128 fp32 of a row per thread: over sm_90's budget of 127
    assert rejected == [f"| {op} | {v} | 64 | 8 | 1 | none | all | rejected by rule row_registers | | | | | |"
                        for op, v in (("layernorm", "registers"), ("rmsnorm", "registers"), ("softmax", "online"))]
    assert all(f.instance.target.value == "sm_90" for f in files)
    tails = {(f.instance.op, f.instance.variant, f.instance.tail) for f in files if f.instance.tail != "none"}
    assert tails == {(op, v, t) for op, v in (("softmax", "two_pass"), ("softmax", "online"), ("rmsnorm", "streamed"),
                                              ("rmsnorm", "registers"), ("layernorm", "streamed"),
                                              ("layernorm", "registers"))
                     for t in ("predicated", "specialized")}
    assert all(f.instance.unroll == 1 for f in files if f.instance.variant in ("online", "registers"))


def test_decode_split_sweep_writes_one_legal_decode_kernel_per_split():
    from codegen.generate.instance import build_instances
    from codegen.generate.render import render_all
    from codegen.spec.load import parse_specs

    s = _load("sweep_decode_split_sm90")
    batches, lengths = [1, 8, 64], [4096, 32768]
    for split in (1, 2, 32):
        (f,) = render_all(build_instances(parse_specs(s.spec(split, batches, lengths), "<sweep>")))
        inst = f.instance
        assert inst.variant.value == "decode" and inst.split_kv == split and inst.target.value == "sm_90"
        assert inst.shapes == tuple((b, s.HEADS, s.KV_HEADS, 1, n) for n in lengths for b in batches)
        # the split kernel's workgroups (what the sweep reports beside the SMs): splits x K/V heads x batch
        assert [inst.launch_grids(sh)[0] for sh in inst.shapes[:3]] == [(split, s.KV_HEADS, b) for b in batches]


def test_dynamic_m_benchmark_pairs_the_dynamic_kernel_with_its_static_twin():
    from codegen.core.hardware import Target
    from codegen.generate.pipeline import Project

    b = _load("gemm_dynamic_m")
    dynamic, static = b.kernels(Project(), b.SPEC, Target.SM_90, b.MS)
    assert dynamic.instance.dynamic_m == (1, 8192) and static.instance.dynamic_m is None
    assert dynamic.uri.startswith("gemm_fp16_nt_128x256x64_t256_s4_sw8_dynm_predicated_sm90_")
    assert static.uri.startswith("gemm_fp16_nt_128x256x64_t256_s4_sw8_predicated_sm90_")
    assert dynamic.instance.shapes == static.instance.shapes == tuple((m, 4096, 4096) for m in b.MS)
    assert len(dynamic.instance.compile_shapes()) == 1 and len(static.instance.compile_shapes()) == len(b.MS)
    # the dynamic kernel is the committed one (the spec's own), its twin differs only in dynamic_m
    assert dynamic.uri in {f.uri for f in Project().rendered()}
    assert (dynamic.instance.block_m, dynamic.instance.stages, dynamic.instance.tail) == (
        static.instance.block_m, static.instance.stages, static.instance.tail)


def test_dynamic_m_benchmark_refuses_an_m_outside_the_range():
    import pytest

    from codegen.core.errors import TilegenError
    from codegen.core.hardware import Target
    from codegen.generate.pipeline import Project

    b = _load("gemm_dynamic_m")
    with pytest.raises(TilegenError, match=r"shapes\[0\].m=9000: is outside dynamic_m \[1, 8192\].*\[dynamic_m_range\]"):
        b.kernels(Project(), b.SPEC, Target.SM_90, (9000,))


def test_dynamic_m_benchmark_fails_loudly_without_a_gpu(tmp_path, capsys, monkeypatch):
    from codegen.run.gpu import NoGpu

    b = _load("gemm_dynamic_m")

    def no_gpu():
        raise NoGpu("torch sees no GPU")

    monkeypatch.setattr(b, "detect_gpu", no_gpu)
    assert b.main(["--out", str(tmp_path / "out")]) == 1
    assert "no GPU to run on: torch sees no GPU" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_dynamic_m_benchmark_script_exits_1_on_this_machine_without_a_gpu(tmp_path):
    import subprocess

    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would run the benchmark")
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "gemm_dynamic_m.py"), "--out", str(tmp_path / "out")],
                          check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "gemm_dynamic_m: no GPU to run on:" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_static_sweep_spaces_load_and_every_point_is_refused_by_a_rule_or_kept():
    """benchmarks/static_sweep.sh's specs are legal, each has a search block for both targets, and the rules
    partition every point of each space (a point is refused by named rules or is a kernel: nothing dropped)."""
    from codegen.core.hardware import Target
    from codegen.spec.load import parse_specs
    from codegen.tune.search import constrain, expand

    names = []
    for path in sorted((BENCHMARKS / "static_sweep").glob("sweep_*.yaml")):
        for ls in parse_specs(path.read_text(), f"benchmarks/static_sweep/{path.name}"):
            names.append(ls.spec.name)
            for target in (Target.GFX942, Target.SM_90):
                points = list(expand(ls.spec, target))
                part = constrain(ls, target, points)
                assert len(part.points) == len(points) > 1
                assert sum(part.rejected_by_rule.values()) >= sum(bool(p.rules) for p in part.points)
                assert all(p.rules or p.uri for p in part.points), ls.spec.name
    assert names == ["sw_attn_bf16", "sw_gemm_bf16", "sw_softmax_bf16", "sw_rmsnorm_fp32", "sw_layernorm_fp16"]
    script = (BENCHMARKS / "static_sweep.sh").read_text()
    assert all(name in script for name in names)


def test_attention_fa3_run_names_sm90_seeds_of_the_same_shapes():
    """benchmarks/attention_fa3_h200.sh verifies and times the fa3 seeds and the default-schedule seeds of the
    same shapes: every name it gives is an sm_90 kernel of the spec set, pairwise one fa3 and one default."""
    import re

    script = (BENCHMARKS / "attention_fa3_h200.sh").read_text()
    arrays = {m[1]: m[2].split() for m in re.finditer(r"^(FA3|DEFAULT)=\(([^)]*)\)", script, re.MULTILINE)}
    by_name = {f.instance.name: f.instance for f in hand_files() if f.instance.target.value == "sm_90"}
    pairs = list(zip(arrays["FA3"], arrays["DEFAULT"], strict=True))
    assert len(pairs) == 5
    for fa3, default in pairs:
        assert (by_name[fa3].schedule, by_name[default].schedule) == ("fa3", "default")
        assert by_name[fa3].shapes == by_name[default].shapes and by_name[fa3].mask == by_name[default].mask
        assert (by_name[fa3].spec_dtypes, by_name[fa3].head_dim) == (by_name[default].spec_dtypes, by_name[default].head_dim)


def test_gemm_classes_are_each_served_by_a_kernel_of_the_project():
    """benchmarks/gemm_classes.py routes every class of every (dtype, layout) through examples/gemm_classes's
    dispatch as an H200 sees it: none falls back to torch, and a class whose spec is gone would."""
    import tilegen
    from codegen.core.hardware import Target

    bench = _load("gemm_classes")
    ops = tilegen.load(bench.PROJECT, backend=bench.RoutesOnly(), target=Target.SM_90, device_name="NVIDIA H200")
    calls, rendered = bench.routes(ops, "meta")
    assert len(calls) == len(bench.CLASSES) * len(bench.COMBOS)
    assert [c for c in calls if c.route == "fallback"] == []
    assert {(c.kernel, c.run_shape) for c in calls} == set(rendered)
    elsewhere = tilegen.load(bench.PROJECT, backend=bench.RoutesOnly(), target=Target.SM_90,
                             device_name="NVIDIA H100")  # no lockfile of its own: hand configurations only
    assert all(c.route != "tuned" for c in bench.routes(elsewhere, "meta")[0])
    seeds = tilegen.load(bench.ROOT, backend=bench.RoutesOnly(), target=Target.SM_90, device_name="NVIDIA H200")
    assert any(c.route == "fallback" for c in bench.routes(seeds, "meta")[0])  # the seeds do not serve every class


def test_gemm_classes_summary_meets_the_targets_only_with_every_class_served_and_fast():
    bench = _load("gemm_classes")
    rows = [{"dtype": d, "layout": lay, "class": c, "shape": [m, n, k], "route": "tuned", "vs_cublas": 1.05}
            for d, lay in bench.COMBOS for c, m, n, k in bench.CLASSES]
    assert all(s["met"] for s in bench.summarise(rows))
    slow = [dict(r) for r in rows]
    slow[0]["vs_cublas"] = 0.9  # one class below the floor, the geometric mean still above 1.02
    summary = {s["group"]: s for s in bench.summarise(slow)}
    assert summary["all"]["geomean_vs_cublas"] > bench.TARGET_GEOMEAN and not summary["all"]["met"]
    assert summary["all"]["below_floor"] == 1 and summary["all"]["slowest"].endswith("0.900x")
    assert summary["bf16 nt"]["met"]
    unserved = [dict(r) for r in rows]
    unserved[-1] = {**unserved[-1], "route": "fallback", "vs_cublas": None}
    summary = {s["group"]: s for s in bench.summarise(unserved)}
    assert summary["all"]["not_served"] == 1 and not summary["all"]["met"] and not summary["bf16 nn"]["met"]


def test_cluster_gemm_experiment_multicasts_into_slots_both_ctas_released():
    """benchmarks/gemm_cluster_sm90.py's hand schedule, lowered for sm_90a: rank 0 multicasts the shared operand, a
    slot's empty barrier counts the consumer warpgroups of both CTAs (each arrives on the barrier of every CTA of the
    cluster), and the CTAs leave together. TileLang's own pipeline, given the same multicast, releases a slot on the
    local consumers alone (the reason the experiment schedules by hand)."""
    import re

    import tilelang.language as T

    b = _load("gemm_cluster_sm90")
    for share in ("a", "b"):
        src = b.cuda_source(b.manual(2048, 1024, 4096, share=share))
        assert src.count("tma_load_multicast") == 1
        assert re.findall(r"empty\[\d\]\.init\((\d+)\)", src) == ["4"] * 4  # 2 consumer warpgroups x 2 CTAs
        assert "empty[(k_1 & 3)].arrive((((int)threadIdx.x) & 127));" in src  # to CTA rank tx % 128 (0 or 1)
        assert src.rsplit("tl::cluster_sync();", 1)[1].strip() == "}"  # the kernel's last statement
    M, N, K, BM, BN, BK = 2048, 1024, 4096, 128, 128, 64

    @T.prim_func
    def auto_multicast(A: T.Tensor((M, K), "bfloat16"), B: T.Tensor((N, K), "bfloat16"), C: T.Tensor((M, N), "bfloat16")):
        with T.Kernel(N // BN, M // BM, threads=256, cluster_dims=(2, 1, 1)) as (bx, by):
            A_s = T.alloc_shared((BM, BK), "bfloat16")
            B_s = T.alloc_shared((BN, BK), "bfloat16")
            C_l = T.alloc_fragment((BM, BN), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // BK, num_stages=4):
                T.copy_cluster(A[by * BM, k * BK], A_s, cluster_mask=0b11)
                T.copy(B[bx * BN, k * BK], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * BM, bx * BN])

    src = b.cuda_source(auto_multicast)
    assert src.count("tma_load_multicast") == 1
    # its slots' empty barriers: local, one arrival per consumer thread of this CTA, nothing sent to the peer
    assert re.findall(r"mbarrier\[[4-7]\]\.init\((\d+)\)", src) == ["256"] * 4
    assert not re.search(r"\.arrive\([^)]", src.split("tma_load_multicast")[1])


def test_gpu_window_runs_the_steps_that_fit_and_skips_the_rest_with_a_reason(tmp_path):
    """benchmarks/gpu_window.sh with shims for python3 and nvidia-smi (they record their arguments): the steps in
    the order given, each bounded by what is left of the window, tune --all given the rest less a margin, a step
    whose minimum does not fit skipped with a line that says so, an unknown step named, and the archives written."""
    import os
    import subprocess
    import tarfile

    shims = tmp_path / "bin"
    shims.mkdir()
    calls = tmp_path / "calls"
    for name in ("python3", "nvidia-smi"):
        (shims / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\n')
        (shims / name).chmod(0o755)

    def window(seconds: int, *steps: str) -> str:
        out = tmp_path / f"out{seconds}"
        env = os.environ | {"PATH": f"{shims}:{os.environ['PATH']}", "OUT": str(out), "WINDOW_S": str(seconds)}
        subprocess.run(["bash", str(BENCHMARKS / "gpu_window.sh"), *steps], env=env, check=True, capture_output=True,
                       timeout=60)
        assert {p.name for p in out.iterdir()} == {"window.log", "results.tgz", "tuned.tgz"}
        with tarfile.open(out / "tuned.tgz") as tgz:
            assert any(n.startswith("examples/llama_layer/tuned") for n in tgz.getnames()) == (seconds == 400)
        return (out / "window.log").read_text()

    log = window(400, "layer", "tune:examples/llama_layer:llama_attn_prefill", "all")
    *firsts, last = calls.read_text().splitlines()[1:]
    assert firsts == [f"python3 examples/llama_layer/run.py --reports {tmp_path}/out400/results/llama_layer",
                      "python3 -m codegen -C examples/llama_layer tune llama_attn_prefill -t sm_90 --budget 40s"]
    # the rest of the window (385 s, less the seconds the archives after each step took) less a 45 s margin
    budget = re.fullmatch(r"python3 -m codegen -C \. tune --all -t sm_90 --budget (\d+)s", last)
    timeout = re.search(r"== tune --all in \. \(timeout (\d+) s\)", log)
    assert budget and timeout and 300 <= int(budget[1]) == int(timeout[1]) - 45 <= 340, (last, log)
    assert "== layer (timeout 170 s)" in log
    calls.unlink()
    log = window(100, "layer", "main", "fa3", "bogus")
    assert calls.read_text().splitlines()[1:] == [
        "python3 -m codegen -C examples/fa3_grid verify --all -t sm_90 --out " + f"{tmp_path}/out100/results/fa3_grid",
        "python3 -m codegen -C examples/fa3_grid bench --all -t sm_90 --out " + f"{tmp_path}/out100/results/fa3_grid"]
    assert "== layer skipped: needs 140 s, 100 s left" in log and "== main skipped: needs 540 s" in log
    assert "== bogus: not a step (fa3, layer, classes, tail, main, tune:DIR:SPEC, all[:DIR])" in log


def test_gpu_window_archives_each_finished_step_before_the_next(tmp_path):
    """A call ended from outside during a step (the device's own limit) still returns the archives of the steps
    before it: the shim of the second step's python3 kills the window's shell."""
    import os
    import subprocess
    import tarfile

    shims, out = tmp_path / "bin", tmp_path / "out"
    shims.mkdir()
    pid = tmp_path / "pid"
    (shims / "nvidia-smi").write_text("#!/bin/sh\n")
    (shims / "python3").write_text(f"""#!/bin/sh
case "$*" in
  *run.py*) mkdir -p "{out}/results/llama_layer" && echo measured > "{out}/results/llama_layer/layer.md" ;;
  *) kill -9 "$(cat {pid})"; sleep 1 ;;
esac
""")
    for f in shims.iterdir():
        f.chmod(0o755)
    env = os.environ | {"PATH": f"{shims}:{os.environ['PATH']}", "OUT": str(out), "WINDOW_S": "400"}
    script = BENCHMARKS / "gpu_window.sh"
    done = subprocess.run(["bash", "-c", f'echo $$ > "{pid}"; exec bash "{script}" layer all'], check=False, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    assert done.returncode == -9, done
    with tarfile.open(out / "results.tgz") as tgz:
        assert "results/llama_layer/layer.md" in tgz.getnames()
    assert (out / "tuned.tgz").is_file()
    assert "== tune --all in ." in (out / "window.log").read_text()


def test_one_launch_tail_experiment_drops_the_interior_checks_under_its_branch():
    """benchmarks/gemm_tail_sm90.py's one-launch form of `tail: specialized`, lowered for sm_90a at a ragged shape:
    one kernel, whole tiles loading without bounds checks and the edge tiles with them, both pipelined (cp.async,
    warp specialisation off)."""
    b = _load("gemm_tail_sm90")
    src = b.cuda_source(b.one_launch(1000, 1000, 1000), b.NO_WS)
    assert b.form(src) == "1 kernel(s), 0 TMA load(s), 4 unchecked / 4 checked cp.async, not warp-specialised"
    interior, edges = src.split("} else {", 1)
    assert "cp_async_gs<16>" in interior and "cp_async_gs_conditional" not in interior  # whole tiles: no checks
    assert "cp_async_gs_conditional<16>" in edges and "cp_async_gs<16>" not in edges
