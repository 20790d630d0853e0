"""`tilegen profile` on the CPU: the ncu and rocprofv3 parsers on samples written from their documented
formats (tests/data/profile/README.md: not captured runs), the verdict, the profiler commands, the
missing-profiler message (exit 1, nothing written) and the report written end to end with the profiler
replaced by the samples."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codegen.cli.main import app
from codegen.core.hardware import Target
from codegen.generate.pipeline import Project
from codegen.run import profile as prof
from codegen.run.gpu import GpuInfo
from codegen.targets import HARDWARE

DATA = Path(__file__).parent / "data" / "profile"
H200 = HARDWARE[Target.SM_90]
MI300X = HARDWARE[Target.GFX942]
PROJECT = Project()


def _inst(prefix: str, target: Target):
    return next(f.instance for f in PROJECT.rendered(targets=[target]) if f.uri.startswith(prefix))


def test_ncu_raw_csv_is_read_in_base_units():
    (row,) = prof.parse_ncu_raw_csv((DATA / "ncu_raw_gemm.csv").read_text())
    assert row["Kernel Name"] == "gemm_fp16_nt_128x256x64_t256_s3_sm90_3f2a9c_kernel"
    assert row["dram__bytes_read.sum"] == pytest.approx(201.33e6)  # Mbyte -> bytes
    assert row["gpu__time_duration.sum"] == pytest.approx(201_600.0)  # usecond -> ns
    (row,) = prof.parse_ncu_raw_csv((DATA / "ncu_raw_rmsnorm.csv").read_text())
    assert row["dram__bytes_read.sum"] == 268_435_456.0  # thousands separators dropped


def test_captured_ncu_run_of_a_cublas_gemm_is_compute_bound():
    """A real ncu 2025.3.1 capture on an H200 (NVTX columns between Host Name and Kernel Name, units 'ns')."""
    (row,) = prof.parse_ncu_raw_csv((DATA / "ncu_h200_captured_torch_matmul_fp16_8192.csv").read_text())
    assert row["Kernel Name"].startswith("nvjet_sm90") and row["gpu__time_duration.sum"] == 1_437_888.0
    m = prof.ncu_measured("baseline:eager", [row])
    assert 2 * 8192**3 / m.duration_ns / 1e3 == pytest.approx(764.7, abs=0.1)  # TFLOP/s: cuBLAS near peak
    assert m.tensor_pipe_pct == pytest.approx(96.86) and m.l2_hit_pct == pytest.approx(70.2)
    assert m.achieved_occupancy_pct == pytest.approx(14.78) and m.theoretical_occupancy_pct == pytest.approx(18.75)
    assert m.top_stalls(1) == [("gmma", pytest.approx(4.85))] and "selected" not in m.stalls
    kind, line, _ = prof.verdict(m, H200, _inst("gemm_", Target.SM_90))
    assert kind == "compute" and line == "compute-bound at 97 % of the tensor pipe"


def test_captured_ncu_run_of_torch_rms_norm_is_memory_bound():
    (row,) = prof.parse_ncu_raw_csv((DATA / "ncu_h200_captured_torch_rms_norm_fp16_16384x8192.csv").read_text())
    m = prof.ncu_measured("baseline:eager", [row])
    assert m.dram_bytes == 470_004_224 + 248_925_184 and m.duration_ns == 197_600
    assert m.dram_pct_of_peak(H200) == pytest.approx(75.8, abs=0.1)
    assert m.top_stalls(1)[0][0] == "long_scoreboard" and m.occupancy_limiter == "registers/warps"
    kind, line, _ = prof.verdict(m, H200, _inst("rmsnorm_", Target.SM_90))
    assert kind == "memory" and line.startswith("memory-bound at 76 % of peak DRAM bandwidth (3638 GB/s)")
    assert m.missing == []


def test_ncu_memory_bound_row_kernel():
    m = prof.ncu_measured("kernel", prof.parse_ncu_raw_csv((DATA / "ncu_raw_rmsnorm.csv").read_text()))
    assert m.dram_gbps() == pytest.approx(2 * 268_435_456 / 131_072)
    assert m.dram_pct_of_peak(H200) == pytest.approx(100 * 4096 / 4800)
    assert m.l2_hit_pct == pytest.approx(3.12) and m.achieved_occupancy_pct == pytest.approx(55.7)
    assert m.occupancy_limiter == "registers" and m.tensor_pipe_pct == 0.0
    assert [k for k, _ in m.top_stalls()] == ["long_scoreboard", "barrier", "short_scoreboard"]
    kind, line, knobs = prof.verdict(m, H200, _inst("rmsnorm_fp16_streamed_t256_v8_u2", Target.SM_90))
    assert kind == "memory" and line.startswith("memory-bound at 85 % of peak DRAM bandwidth")
    assert knobs == ["vector"]


def test_ncu_compute_bound_gemm():
    m = prof.ncu_measured("kernel", prof.parse_ncu_raw_csv((DATA / "ncu_raw_gemm.csv").read_text()))
    kind, line, knobs = prof.verdict(m, H200, _inst("gemm_", Target.SM_90))
    assert kind == "compute" and line == "compute-bound at 78 % of the tensor pipe"
    assert "block_k" in knobs and "stages" in knobs and "k_pack" not in knobs  # no k_pack on sm_90


def test_low_occupancy_and_latency_verdicts():
    inst = _inst("gemm_", Target.SM_90)
    m = prof.Measured(subject="kernel", kernels=["k"], duration_ns=1e6, dram_read_bytes=1e8, tensor_pipe_pct=10.0,
                      achieved_occupancy_pct=12.0, occupancy_limiter="shared_mem")
    kind, line, knobs = prof.verdict(m, H200, inst)
    assert kind == "occupancy" and "low occupancy (12 % achieved, limited by shared_mem)" in line and "threads" in knobs
    m.achieved_occupancy_pct, m.stalls = 60.0, {"long_scoreboard": 9.0, "wait": 1.0}
    kind, line, _ = prof.verdict(m, H200, inst)
    assert kind == "latency" and "top stall long_scoreboard" in line


def test_ncu_output_that_is_not_a_report_is_an_error():
    with pytest.raises(prof.ProfileParseError, match="no CSV report"):
        prof.parse_ncu_raw_csv("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n")


def test_rocprofv3_passes_combine_into_one_measurement():
    passes = [prof.parse_rocprof_csv((DATA / name).read_text())
              for name in ("rocprofv3_counter_collection.csv", "rocprofv3_pass_l2.csv")] + [{}]
    m = prof.rocprof_measured("kernel", passes, MI300X)
    assert m.kernels == ["rmsnorm_fp16_streamed_t256_v8_u2_gfx942_4fc90d_kernel"] and m.duration_ns == 125_000
    assert m.dram_bytes == 2 * 262_144 * 1024
    assert m.l2_hit_pct == pytest.approx(100 * 1.2e5 / 8.92e6)
    assert "VALUBusy" in m.missing and "FETCH_SIZE" not in m.missing
    kind, line, _ = prof.verdict(m, MI300X, _inst("rmsnorm_fp16_streamed_t256_v8_u2", Target.GFX942))
    assert kind == "memory" and "81 % of peak" in line


def test_rocprofv3_csv_of_another_kind_is_an_error():
    with pytest.raises(prof.ProfileParseError, match="counter_collection"):
        prof.parse_rocprof_csv('"Kind","Agent_Id"\n"KERNEL_DISPATCH",1\n')


def test_profiler_commands():
    cmd = prof.ncu_command("ncu", Path("/tmp/x.csv"), "^gemm_abc", ["python", "-m", "codegen.run.profile_child"])
    text = " ".join(cmd)
    for part in ("--clock-control none", "--csv", "--page raw", "--kernel-name regex:^gemm_abc",
                 "--nvtx-include tilegen_profile/", "--section WarpStateStats", "dram__bytes_read.sum"):
        assert part in text
    assert cmd[-3:] == ["python", "-m", "codegen.run.profile_child"]
    roc = prof.rocprof_command("rocprofv3", Path("/tmp/d"), ("FETCH_SIZE", "WRITE_SIZE"), "^k", ["python"])
    assert roc[:4] == ["rocprofv3", "--pmc", "FETCH_SIZE", "WRITE_SIZE"] and roc[-2:] == ["--", "python"]


FAKE_H200 = GpuInfo(name="NVIDIA H200", vendor="nvidia", run_target=Target.SM_90, l2_bytes=60 << 20,
                    torch_version="2.x", runtime_version="CUDA 12.8")


def test_missing_profiler_is_one_line_exit_1_and_nothing_written(tmp_path, monkeypatch):
    monkeypatch.setattr("codegen.run.gpucli.require_gpu", lambda: FAKE_H200)
    monkeypatch.setattr(prof.shutil, "which", lambda name: None)
    result = CliRunner().invoke(app, ["profile", "gemm_fp16_nt", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "ncu (Nsight Compute) not found on PATH" in result.output and "nsight-compute" in result.output
    assert not any(tmp_path.iterdir())


def test_report_written_from_the_samples(tmp_path, monkeypatch):
    """The whole command on the CPU, ncu replaced by the recorded-format samples."""
    monkeypatch.setattr("codegen.run.gpucli.require_gpu", lambda: FAKE_H200)
    monkeypatch.setattr(prof, "find_profiler", lambda vendor: "ncu")
    uri = next(f.uri for f in PROJECT.rendered(targets=[Target.SM_90]) if f.uri.startswith("rmsnorm_fp16_streamed_t256_v8_u2"))
    seen = []

    def fake_run(cmd, what, timeout_s=None):
        seen.append(cmd)
        if cmd[-1] == "names":
            return subprocess.CompletedProcess(cmd, 0, stdout='["compile", "eager"]\n', stderr="")
        log = Path(cmd[cmd.index("--log-file") + 1])
        log.write_text((DATA / "ncu_raw_rmsnorm.csv").read_text())
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(prof, "_run", fake_run)
    report, (js, md) = prof.run_profile(PROJECT, uri, "8192x4096", folder=tmp_path)
    assert report.bottleneck == "memory"
    assert js == tmp_path / f"{uri}_8192x4096.json" and md.suffix == ".md"  # --out DIR: DIR itself, no sub-folders
    doc = json.loads(js.read_text())
    assert doc["verdict"].startswith("memory-bound at 85 %") and doc["knobs"] == ["vector"]
    assert [s["subject"] for s in doc["subjects"]] == ["kernel", "baseline:compile", "baseline:eager"]
    assert "--kernel-name" in seen[1] and "--kernel-name" not in seen[2]  # baselines: the NVTX range only
    assert "WarpStateStats" in seen[1] and "WarpStateStats" not in seen[2]  # baselines: the lighter sections
    assert all("application-only" in c for c in seen[1:])
    assert "memory-bound at 85 %" in md.read_text()
    pngs = sorted(p.name for p in js.parent.glob("*.png"))
    if pngs:  # matplotlib present
        assert pngs == [f"{uri}_8192x4096_roofline.png", f"{uri}_8192x4096_stalls.png"]
    with pytest.raises(Exception, match="takes 2 sizes"):
        prof.run_profile(PROJECT, uri, "8192", folder=tmp_path)
    seen.clear()
    report, _ = prof.run_profile(PROJECT, uri, "8192x4096", folder=tmp_path / "alone", baselines=False)
    assert [s.subject for s in report.subjects] == ["kernel"] and len(seen) == 1  # --no-baselines: no names, one run
    assert "baselines not profiled (--no-baselines)." in report.notes


# ---- tilegen tune --profile-top N: the profiler replaced -----------------------------------------------

def test_profile_candidates_profiles_the_best_in_measured_order_and_keeps_failures():
    files = {f.uri: f for f in PROJECT.rendered(targets=[Target.SM_90]) if f.uri.startswith("gemm_")}
    a, b, c = sorted(files)[:3]
    doc = {"rounds": [{"scores": {a: 1.5, b: 1.0, c: 2.0}}, {"scores": {b: 1.0, a: 1.2}}],  # last round decides
           "shapes": [{"shape": [256, 256, 256], "winner": {"uri": b, "time_ms": 0.5}, "runner_up": {"uri": a, "time_ms": 0.6}},
                      {"shape": [512, 256, 256], "winner": {"uri": b, "time_ms": 1.0}, "runner_up": None}]}
    rows_csv = prof.parse_ncu_raw_csv((DATA / "ncu_raw_gemm.csv").read_text())
    calls = []

    def profile_one(rendered, shape, rendered_file):
        calls.append((rendered.uri, shape))
        assert rendered_file.is_file()  # the candidate, pickled for the child
        if rendered.uri == a and shape == (512, 256, 256):
            raise prof.TilegenError("ncu on kernel timed out after 900 s")
        m = prof.ncu_measured("kernel", rows_csv)
        kind, line, knobs = prof.verdict(m, H200, rendered.instance)
        return prof.ProfileReport(uri=rendered.uri, name="g", target="sm_90", shape=shape, gpu="NVIDIA H200", profiler="ncu",
                                  bottleneck=kind, verdict=line, knobs=knobs, subjects=[m], peak_dram_gbps=4800.0, notes=[])

    rows = prof.profile_candidates(files, doc, 2, FAKE_H200, PROJECT.root, profile_one=profile_one)
    assert calls == [(b, (256, 256, 256)), (b, (512, 256, 256)), (a, (256, 256, 256)), (a, (512, 256, 256))]  # c: not top 2
    assert [(r.rank, r.uri, r.time_ms) for r in rows] == [(1, b, 0.5), (1, b, 1.0), (2, a, 0.6), (2, a, None)]
    assert rows[0].verdict == "compute-bound at 78 % of the tensor pipe" and rows[0].tensor_pipe_pct == pytest.approx(78, abs=1)
    assert rows[0].dram_gbps is not None and rows[0].profiled_us == pytest.approx(201.6)
    assert rows[3].error == "ncu on kernel timed out after 900 s" and rows[3].dram_gbps is None
    cells = [[c.cell(r) for c in prof.candidate_columns()] for r in rows]
    assert cells[3][-1].startswith("error: ncu on kernel timed out") and cells[3][4] == "-"
    assert json.dumps([r.to_json() for r in rows])  # goes into the tune report's measured document
    assert prof.profile_candidates(files, doc, 0, FAKE_H200, PROJECT.root, profile_one=profile_one) == []


def test_profile_top_needs_measured_selection():
    result = CliRunner().invoke(app, ["tune", "gemm_fp16_nt", "--static", "--profile-top", "2"])
    assert result.exit_code == 1 and "--profile-top" in result.output and "--static" in result.output
