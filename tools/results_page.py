"""Write reports/README.md, the results page, from the JSON reports under reports/.

    python tools/results_page.py           # (re)write reports/README.md
    python tools/results_page.py --check   # exit 1 if reports/README.md is not what the JSON gives

Each report is shown with the command that made it, the commit and the device, and is marked either
measured (run on a GPU: the device is named) or static (compiled code read without running it). Where a
report does not record its own command or commit, reports/provenance.json says it; what neither records is
shown as "not recorded". Deterministic: sorted files, fixed number formats, no timestamps.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = Path("reports/README.md")
PROVENANCE = Path("reports/provenance.json")
NOT_RECORDED = "not recorded"


def _shape(s) -> str:
    return "x".join(str(v) for v in s) if isinstance(s, list | tuple) else str(s)


def _ms(v) -> str:
    return "" if v is None else f"{v:.4g}"


def _x(v) -> str:
    return "" if v is None else f"{v:.2f}x"


def _pct(v) -> str:
    return "" if v is None else f"{v:.1f} %"


def _code(command: str) -> str:
    return command if command == NOT_RECORDED else f"`{command}`"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return out


def _details(summary: str, lines: list[str]) -> list[str]:
    return ["<details><summary>" + summary + "</summary>", "", *lines, "", "</details>"]


# ---- what kind of report a JSON file is --------------------------------------------------------------

def kind_of(data) -> str:
    if isinstance(data, list):
        return "experiment"
    if not isinstance(data, dict):
        return "unknown"
    if "cases" in data and "environment" in data:
        return "verify"
    if "rows" in data and "summary" in data and "targets" in data:
        return "gemm_classes"
    if "rows" in data and "copy_gbps" in data and "sms" in data:
        return "split_sweep"
    if "rows" in data and "copy_gbps" in data:
        return "bench"
    if "builds" in data and str(data.get("source", "")).startswith("sass"):
        return "sass"
    if "builds" in data and "target" in data and isinstance(data["builds"], list):
        return "static"
    if "selection" in data and "spec" in data:
        return "tune"
    if "profiler" in data and "subjects" in data:
        return "profile"
    if "dynamic" in data and "static" in data and "rows" in data:
        return "dynamic_m"
    if "cold_jobs1_s" in data:
        return "build_bench"
    if "timings" in data and "gemms" in data and "checks" in data:
        return "llama_layer"
    return "unknown"


def provenance(rel: str, data, kind: str, recorded: dict) -> dict[str, str]:
    """command, commit, device and kind label of one report: what it records, else provenance.json."""
    env = data.get("environment", {}) if isinstance(data, dict) else {}
    hand = recorded.get(rel, {})
    command = env.get("command") or hand.get("command") or NOT_RECORDED
    commit = (env.get("git_commit") or "")[:7] or hand.get("commit") or NOT_RECORDED
    device = env.get("device") or ""
    if kind == "tune" and isinstance(data.get("measured"), dict):
        device = data["measured"].get("device", "")
    if kind in ("profile", "dynamic_m"):
        device = data.get("gpu", "")
    device = device or hand.get("device", "")
    if kind == "static":
        label, device = f"static ({data['target']} {'PTX / cubin' if data['target'] == 'sm_90' else 'ISA'})", "none"
    elif kind == "sass":
        label = "static (sm_90 SASS)"
        device = device or NOT_RECORDED
    elif kind == "build_bench":
        m = data.get("machine", {})
        label, device = "measured (build times)", f"CPU: {m.get('cpu', '?')}, {m.get('usable_cores', '?')} cores"
    elif kind == "tune" and data.get("selection") != "measured":
        label, device = "static rank (not measured)", "none"
    else:
        label = f"measured ({device})" if device else "measured"
        device = device or NOT_RECORDED
    return {"command": command, "commit": commit, "device": device, "label": label}


# ---- one section per kind ----------------------------------------------------------------------------

def section_verify(data) -> list[str]:
    cases = data["cases"]
    groups: dict[tuple[str, str], Counter] = {}
    for c in cases:
        groups.setdefault((c["target"], c["run_target"]), Counter())[c["status"]] += 1
    statuses = ("verified", "failed", "vacuous", "error", "skipped")
    rows = []
    for (target, run), n in sorted(groups.items()):
        what = f"{target} kernels" if target == run else f"{target} programs (logic check, run on {run})"
        rows.append([what, sum(n.values()), *(n[s] for s in statuses)])
    out = [f"{len(cases)} cases, {len({c['uri'] for c in cases})} kernels.", ""]
    out += _table(["kernels", "cases", *statuses], rows)
    skipped = Counter((c["target"], c.get("error", "")) for c in cases if c["status"] == "skipped")
    if skipped:
        out += ["", "Skipped:", ""] + [f"- {n} {t} case(s): {why}" for (t, why), n in sorted(skipped.items())]
    bad = [c for c in cases if c["status"] in ("failed", "vacuous", "error")]
    if bad:
        out += ["", "Cases not verified:", ""]
        out += _table(["kernel", "run on", "shape", "status", "note"],
                      [[c["uri"], c["run_target"], _shape(c["shape"]), c["status"], _why(c)] for c in bad])
    return out


def _why(case) -> str:
    """A case's error, else the negative controls that were not rejected."""
    passed = [f"control {k} passed" for k, v in sorted(case.get("controls", {}).items()) if v.startswith("PASSED")]
    return case.get("error") or "; ".join(passed) or case.get("label", "")


def _speedups(row) -> str:
    return "; ".join(f"{k} {_x(v)}" for k, v in sorted(row.get("speedup", {}).items()))


def section_bench(data) -> list[str]:
    rows = data["rows"]
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: (r["name"], r["shape"], r["uri"]))
    out = [(f"Copy bandwidth measured in the same run: {data['copy_gbps']:.0f} GB/s. "
           "Speed-up = baseline time / kernel time."), ""]
    out += _table(["spec", "shape", "kernel", "ms", "TFLOP/s", "% copy BW", "speed-up vs"],
                  [[r["name"], _shape(r["shape"]), r["uri"], _ms((r.get("kernel") or {}).get("median_ms")),
                    f"{r['tflops']:.0f}" if r.get("tflops") is not None else "", _pct(r.get("pct_copy_bw")),
                    _speedups(r)] for r in ok])
    skipped = Counter((r["target"], r.get("error", "")) for r in rows if r["status"] != "ok")
    if skipped:
        out += ["", "Not timed:", ""]
        out += [f"- {n} {target} rows: {why}" for (target, why), n in sorted(skipped.items())]
    if data.get("tuning"):
        out += ["", "Tuned kernels beside their hand configuration:", ""] + [f"- {t}" for t in data["tuning"]]
    return out


def _static_cells(target: str, s: dict) -> list[str]:
    if target == "sm_90":
        return [s.get("registers", ""), f"{s.get('smem_bytes', 0)} B", f"{s.get('warps_per_sm', '')} warps/SM",
                s.get("spill_bytes", ""), f"{s.get('wgmma', 0)} WGMMA, {s.get('tma', 0)} TMA"]
    return [f"{s.get('total_vgprs', '')} VGPR ({s.get('vgprs', '')}+{s.get('agprs', '')}a), {s.get('sgprs', '')} SGPR",
            f"{s.get('lds_bytes', 0)} B", f"{s.get('waves_per_simd', '')} waves/SIMD", s.get("spills", ""),
            f"{sum((s.get('mfma') or {}).values())} MFMA"]


def section_static(data) -> list[str]:
    target, builds = data["target"], data["builds"]
    ok = [b for b in builds if b["status"] == "ok"]
    spills = [b for b in ok if (b["summary"].get("spill_bytes") or b["summary"].get("spills"))]
    warnings = sum(len(b["summary"].get("warnings", [])) for b in ok)
    tc = ", ".join(f"{k} {v}" for k, v in sorted(data.get("toolchain", {}).items()))
    out = [f"Toolchain: {tc}.", "",
           (f"{len(builds)} builds ((kernel, shape) pairs) of {len({b['uri'] for b in builds})} kernels: "
           f"{len(ok)} built, {len(builds) - len(ok)} failed, {len(spills)} with spills, "
           f"{warnings} `[vector_loads]` warnings. Not run: these are compiler outputs."), ""]
    rows = [[b["uri"], _shape(b["shape"]), b["status"], *(_static_cells(target, b["summary"]) if b["status"] == "ok"
                                                          else ["", "", "", "", b.get("error") or ""])]
            for b in sorted(builds, key=lambda b: (b["uri"], b["shape"]))]
    out += _details(f"every build on {target}",
                    _table(["kernel", "shape", "status", "registers", "LDS / shared", "occupancy", "spills", "MMA"], rows))
    return out


def section_sass(data) -> list[str]:
    rows = []
    for b in sorted(data["builds"], key=lambda b: (b["uri"], b.get("shape", []))):
        ks = b.get("kernels", [])
        rows.append([b["uri"], _shape(b.get("shape", "")), sum(k.get("hgmma", 0) for k in ks),
                     sum(k.get("tma_loads", 0) for k in ks), sum(k.get("local_loads", 0) + k.get("local_stores", 0)
                                                                 for k in ks)])
    out = [f"{len(rows)} builds read with cuobjdump -sass. Not run: instruction counts only.", ""]
    return out + _details("every build", _table(["kernel", "shape", "HGMMA", "TMA loads", "LDL/STL"], rows))


def section_tune(data) -> list[str]:
    c = data.get("counts", {})
    out = [f"Spec `{data['spec']}` ({data.get('spec_file', '')}) on {data['target']}: "
           + ", ".join(f"{k} {v}" for k, v in c.items()) + f"; selection: {data['selection']}.", ""]
    m = data.get("measured")
    if isinstance(m, dict):
        v = m.get("versions", {})
        split = (f" ({m['verify_s']} s compiling and verifying, then {len(m.get('rounds', []))} bench rounds)"
                 if "verify_s" in m else "")
        parts = m.get("verify")
        if isinstance(parts, dict):  # verification's own part: its compile stage beside its cases
            split += (f" -- verification: {parts['compiles']} compiles in {parts['compile_s']} s beside "
                      f"{parts['cases']} cases ({parts['edge_cases']} at edge shapes; {parts['launches']} launches, "
                      f"{parts['case_s']} s in the workers)")
        out += [f"Measured on {m.get('device')} ({m.get('gpus', 1)} GPU), {m.get('wall_s')} s{split}, budget "
                f"{m.get('budget_s')} s, {len(m.get('verified', []))} candidates verified first; "
                + ", ".join(f"{k} {v[k]}" for k in sorted(v)) + ".", ""]
        rows = []
        for s in m.get("shapes", []):
            w = s.get("winner") or {}
            tun = ", ".join(f"{k}={val}" for k, val in sorted(w.get("tunables", {}).items()))
            vs = "; ".join(f"{k} {_x(val)}" for k, val in sorted(s.get("speedup_vs_baselines", {}).items()))
            rows.append([_shape(s["shape"]), w.get("uri", ""), tun, _ms(w.get("time_ms")),
                         _x(s.get("speedup_vs_hand")), vs])
        out += _table(["shape", "winner", "tunables", "ms", "vs hand", "vs baselines"], rows)
    elif data.get("ranked"):
        out += ["Static rank, not measured: survivors ordered by compiled resources only.", ""]
    return out


def section_profile(data) -> list[str]:
    out = [f"`{data['uri']}` at {_shape(data['shape'])}: **{data.get('verdict', '')}**.", ""]
    rows = [[s["subject"], _ms((s.get("duration_ns") or 0) / 1e6), _pct(s.get("dram_pct_of_peak_profiler")),
             _pct(s.get("l2_hit_pct")), _pct(s.get("achieved_occupancy_pct")), _pct(s.get("tensor_pipe_pct"))]
            for s in data["subjects"]]
    return out + _table(["subject", "ms", "DRAM % of peak", "L2 hit", "occupancy", "tensor pipe"], rows)


def section_dynamic_m(data) -> list[str]:
    out = [(f"`{data['dynamic']}` (one kernel for every M) beside `{data['static']}` (compiled per M), "
           f"n={data['n']}, k={data['k']}."), ""]
    rows = [[r["m"], _ms(r["dynamic"]["median_ms"]), _ms(r["static"]["median_ms"]),
             f"{r['dynamic']['median_ms'] / r['static']['median_ms']:.3f}", _ms(r["eager"]["median_ms"]),
             "yes" if r.get("identical") else "no"] for r in data["rows"]]
    return out + _table(["M", "dynamic ms", "static ms", "dynamic / static", "torch eager ms", "identical"], rows)


def section_gemm_classes(data) -> list[str]:
    t = data["targets"]
    out = [(f"GEMM shape classes routed by the project's dispatch, each kernel against cuBLAS at the call's shape "
            f"(`benchmarks/gemm_classes.py`). Targets: geometric mean >= {t['geomean_vs_cublas']}x, no class below "
            f"{t['floor_vs_cublas']}x, every class served."), ""]
    out += _table(["group", "classes", "timed", "not served", "geomean vs cuBLAS", f"below {t['floor_vs_cublas']}x",
                   "slowest", "targets met"],
                  [[s["group"], s["classes"], s["timed"], s["not_served"],
                    f"{s['geomean_vs_cublas']:.3f}x" if s["geomean_vs_cublas"] else "-", s["below_floor"], s["slowest"],
                    "yes" if s["met"] else "no"] for s in data["summary"]])
    rows = [[r["dtype"], r["layout"], r["class"], "x".join(map(str, r["shape"])), r["route"], _code(r["kernel"]),
             _ms(r.get("ms")), _ms(r.get("cublas_ms")),
             f"{r['vs_cublas']:.3f}x" if r.get("vs_cublas") else (r.get("error") or r["detail"])[:120]]
            for r in data["rows"]]
    return out + [""] + _table(["dtype", "layout", "class", "m x n x k", "route", "kernel", "ms", "cuBLAS ms",
                                "vs cuBLAS"], rows)


def section_build_bench(data) -> list[str]:
    rows = [[t, v.get("builds"), f"{v.get('lower_s_median', 0):.2f}", f"{v.get('compile_s_median', 0):.2f}"]
            for t, v in sorted(data.get("by_target", {}).items())]
    out = [(f"{data.get('builds')} builds ({data.get('scope')}): cold, one job {data['cold_jobs1_s']:.1f} s; "
           f"{data.get('cold_parallel_jobs')} jobs {data.get('cold_parallel_s', 0):.1f} s; warm (cached) "
           f"{data.get('warm_library_s', 0):.2f} s."), ""]
    return out + _table(["target", "builds", "lowering s (median)", "compile s (median)"], rows)


def section_experiment(data) -> list[str]:
    keys = sorted({k for r in data if isinstance(r, dict) for k in r})
    rows = [[(_ms(r.get(k)) if isinstance(r.get(k), float) else r.get(k, "")) for k in keys]
            for r in data if isinstance(r, dict)]
    return _table(keys, rows)


def section_split_sweep(data) -> list[str]:
    """benchmarks/sweep_decode_split_sm90.py: decode attention's split_kv against batch and KV length."""
    rows = sorted(data["rows"], key=lambda r: (r["seq_kv"], r["batch"], r["split_kv"]))
    best = {}
    for r in rows:
        key = (r["batch"], r["seq_kv"])
        if "ms" in r and (key not in best or r["ms"] < best[key]["ms"]):
            best[key] = r
    out = [(f"{data['sms']} SMs; copy bandwidth measured in the same run: {data['copy_gbps']:.0f} GB/s. "
            "Workgroups = split_kv x K/V heads x row blocks x batch; `best`: the fastest split of its shape."
            + (" Partial: the sweep had not finished." if data.get("partial") else "")), ""]
    return out + _table(["batch", "seq_kv", "split_kv", "workgroups", "status", "ms", "% copy BW", "vs sdpa_cudnn",
                         "best"],
                        [[r["batch"], r["seq_kv"], r["split_kv"], r["workgroups"], r["status"], _ms(r.get("ms")),
                          _pct(r.get("pct_copy")), _x(r.get("vs", {}).get("sdpa_cudnn")),
                          "yes" if best.get((r["batch"], r["seq_kv"])) is r else ""] for r in rows])


def section_llama_layer(data) -> list[str]:
    """examples/llama_layer/run.py: the checks' verdict, the layer's times and its GEMMs through dispatch."""
    m = data.get("model", {})
    checks = data.get("checks", [])
    fails = [c["name"] for c in checks if (c.get("control") and not c.get("caught"))
             or (not c.get("control") and not c.get("passed"))]
    out = [(f"transformers' LlamaDecoderLayer (hidden {m.get('hidden')}, {m.get('heads')} / {m.get('kv_heads')} heads, "
            f"MLP {m.get('mlp')}) on tilegen ops: {'**PASS**' if data.get('passed') else '**FAIL**'} -- "
            f"{len(checks)} checks against the fp32 reference" + (f", failing: {', '.join(fails)}" if fails else "")
            + ". Times are medians of one run; ratios are against transformers' own layer in the same run."), ""]
    out += _table(["phase", "layer", "mode", "ms", "vs transformers eager", "vs transformers compile"],
                  [[t["phase"], t["layer"], t["mode"], _ms(t.get("median_ms")), t.get("vs_transformers_eager", ""),
                    t.get("vs_transformers_compile", "")] for t in data.get("timings", []) if "median_ms" in t])
    out += ["", ("The layer's GEMMs through dispatch against cuBLAS (eager calls; and one call replayed as a CUDA graph, "
                 "the kernel's own time, where the report has it):"), ""]
    out += _table(["phase", "shape", "route", "kernel", "vs cuBLAS (eager)", "vs cuBLAS (graphs)"],
                  [[g["phase"], _shape(g["shape"]), g["route"], g["kernel"], _x(g.get("vs_cublas")),
                    _x(g.get("vs_cublas_graph")) if "vs_cublas_graph" in g else "-"] for g in data.get("gemms", [])])
    fused = data.get("fused_gemms", [])
    if fused:
        out += ["", "The fused GEMMs against the unfused torch sequence they replace:", ""]
        out += _table(["phase", "op", "computes", "shape", "kernel", "vs torch eager"],
                      [[f["phase"], f["op"], f["computes"], _shape(f["shape"]), f["kernel"], _x(f.get("vs_torch"))]
                       for f in fused])
    return out


def tuned_summary(entries) -> list[str]:
    """One row per tuned (spec, shape) of every measured tune report: the winner against the hand configuration
    and each torch baseline timed in the same run (for GEMM, eager is cuBLAS; for attention, sdpa_* are SDPA's
    backends), and the commit the tune ran at."""
    rows = []
    for rel, kind, data, prov in entries:
        m = data.get("measured") if kind == "tune" else None
        if not isinstance(m, dict):
            continue
        for sh in m.get("shapes", []):
            base = sh.get("speedup_vs_baselines", {})
            rows.append([f"[{data['spec']}](#{_anchor(rel)})", data["target"], m.get("device", ""), _shape(sh["shape"]),
                         (sh.get("winner") or {}).get("uri", ""), _x(sh.get("speedup_vs_hand")),
                         "; ".join(f"{k} {_x(v)}" for k, v in sorted(base.items())), prov["commit"]])
    if not rows:
        return []
    return ["## Tuned kernels", "",
            ("What `tilegen tune` measured, per tuned shape: the winner (now in the lockfile, `tuned/`) against the "
             "spec's hand configuration and against torch, all timed in one run (L2 flushed, medians). Speed-up = "
             "the other's time / the winner's."), "",
            *_table(["spec", "target", "device", "shape", "winner", "vs hand", "vs torch (same run)", "commit"], rows), ""]


SECTIONS = {"verify": section_verify, "bench": section_bench, "static": section_static, "sass": section_sass,
            "tune": section_tune, "profile": section_profile, "dynamic_m": section_dynamic_m,
            "build_bench": section_build_bench, "experiment": section_experiment, "llama_layer": section_llama_layer,
            "split_sweep": section_split_sweep, "gemm_classes": section_gemm_classes}


def render(root: Path) -> str:
    reports = root / "reports"
    prov_path = root / PROVENANCE
    recorded = json.loads(prov_path.read_text()) if prov_path.exists() else {}
    entries = []
    for path in sorted(reports.rglob("*.json")):
        rel = path.relative_to(reports).as_posix()
        if path == prov_path:
            continue
        data = json.loads(path.read_text())
        kind = kind_of(data)
        entries.append((rel, kind, data, provenance(rel, data, kind, recorded)))
    lines = [
        "# Results",
        "",
        "<!-- @generated by tools/results_page.py from reports/**/*.json; do not edit -->",
        "",
        "Every JSON report under `reports/`, with the command that made it, the commit and the device.",
        "Regenerate with `python tools/results_page.py`; `--check` fails when this page is stale.",
        "",
        "Two kinds of figures, never mixed:",
        "",
        "- **measured**: run on the named device. Every kernel timing here is of an sm_90 kernel on an NVIDIA",
        "  H200 or H100, each report (and each tuned row) naming its device; ratios compare times of one run",
        "  on one device. AMD (gfx942, gfx950) programs appear only in verify reports, run on the NVIDIA GPU",
        "  as a logic check; no AMD kernel has been timed, and no AMD timing is claimed.",
        "- **static**: compiled code read without running it: gfx942 / gfx950 ISA from clang, sm_90",
        "  PTX / cubin from nvcc, SASS from cuobjdump. Registers, LDS, occupancy, instruction counts.",
        "",
        "The commit is the one the report records (`git rev-parse HEAD` where it ran, or",
        "`TILEGEN_GIT_COMMIT`); where a report records no command or commit, `reports/provenance.json`",
        "gives it; otherwise it is shown as not recorded.",
        "",
    ]
    lines += tuned_summary(entries)
    lines += [
        "## Index",
        "",
    ]
    lines += _table(["report", "kind", "command", "commit", "device"],
                    [[f"[{rel}](#{_anchor(rel)})", p["label"], _code(p["command"]), p["commit"], p["device"]]
                     for rel, _, _, p in entries])
    for rel, kind, data, p in entries:
        lines += ["", f"## {rel}", "", f"- kind: **{p['label']}**", f"- command: {_code(p['command'])}",
                  f"- commit: {p['commit']}", f"- device: {p['device']}"]
        env = data.get("environment") if isinstance(data, dict) else None
        if env:
            lines.append("- versions: " + ", ".join(f"{k} {env[k]}" for k in ("torch", "tilelang", "runtime", "driver")
                                                      if env.get(k)))
        lines.append("")
        section = SECTIONS.get(kind)
        lines += section(data) if section else ["Format not recognised by tools/results_page.py."]
    return "\n".join(lines) + "\n"


def _anchor(rel: str) -> str:
    """GitHub's heading anchor of `## <rel>`: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return "".join(ch for ch in rel.lower() if ch.isalnum() or ch in "-_ ").replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is stale; write nothing")
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this checkout)")
    args = ap.parse_args(argv)
    text = render(args.root)
    page = args.root / PAGE
    if args.check:
        if not page.exists() or page.read_text() != text:
            print(f"{PAGE} is stale: run `python tools/results_page.py`", file=sys.stderr)
            return 1
        print(f"{PAGE} is up to date")
        return 0
    if not page.exists() or page.read_text() != text:
        page.write_text(text)
        print(f"wrote {PAGE}")
    else:
        print(f"{PAGE} unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
