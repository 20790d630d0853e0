"""`tilegen tune` without --static: measured selection on the GPU present, over the survivors of the static
stages (codegen.tune.search).

1. verify every survivor, the hand configuration included (codegen.run.gpurun.verify_all: the spec's shapes and
   the family's edge shapes, negative controls included). A candidate with any case not `verified` (failed,
   vacuous, error) can never be selected; it is listed with its statuses.
2. successive halving (eta = 2) over bench rounds (codegen.run.gpurun.bench_all: L2 flushed, median; torch eager /
   torch.compile / the vendor baseline timed in the first round, in the same run; every round on one worker per
   GPU that keeps the kernels it loaded, codegen.run.gpurun.GpuSession): each round times every
   remaining candidate at every shape; candidates are scored by the geometric mean over shapes of (their median of
   all rounds so far / the best of that shape); the better half goes on, the hand configuration always; it stops
   at two candidates, when a round would not be smaller, or when the next round would overrun the budget (its
   time estimated from the last round's; at least one round is run). The budget counts from the start of step 1:
   verifying the candidates is part of it, so `tune --all`'s one budget holds its last spec too. No random
   sampling, no seed.
3. per shape, the finalists ordered by their median time: the winner and the runner-up, beside the hand
   configuration and the baselines, go to the lockfile (codegen.generate.lockfile) of this target and device.

Only a GPU of the kernel's own target measures it (an sm_90 kernel on an H100/H200, gfx942 on an MI300X); the
ROCm path is the same code and has not run on AMD hardware here.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections import Counter
from typing import TYPE_CHECKING

from codegen.core.errors import TilegenError
from codegen.core.events import OnEvent, ignore
from codegen.generate.lockfile import Candidate, LockEntry, gpu_versions, hand_hash, local_versions, space_sha256
from codegen.run.report import command_line, git_commit
from codegen.tune.search import Point, TuneResult

if TYPE_CHECKING:
    from codegen.run.gpurun import GpuSession

STRATEGY = "successive_halving(eta=2) over bench rounds; deterministic (no sampling, no seed)"
_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")


def _verify_parts(cases: list[dict], files: dict, seconds: float, compile_s: float, compiles: int) -> dict:
    """Where verification's time went: its wall seconds; its compile stage's (which runs beside the cases, so the
    two overlap) and compiles; the (kernel, shape) cases, those at a derived edge shape, their launches (one per
    seed and input kind) and the seconds the workers spent in them (inputs, launch and check; summed over
    workers sharing a GPU, so it may pass the wall time)."""
    pairs = {(c["uri"], tuple(c["shape"])) for c in cases if c["status"] != "skipped"}
    edge = {(u, s) for u, s in pairs if u in files and s not in {tuple(x) for x in files[u].instance.shapes}}
    return {"seconds": round(seconds, 1), "compile_s": round(compile_s, 1), "compiles": compiles,
            "cases": len(pairs), "edge_cases": len(edge), "launches": sum(1 for c in cases if c.get("seed", 0) >= 0),
            "case_s": round(sum(float(c.get("seconds") or 0.0) for c in cases), 1)}


def parse_budget(text: str) -> float:
    """`20m`, `90s`, `1.5h`, `300` (seconds) -> seconds."""
    m = _BUDGET.match(text)
    if not m or float(m.group(1)) <= 0:
        raise TilegenError(f"--budget {text!r}: give a positive time such as 20m, 90s or 1h")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def measure(result: TuneResult, gpu, *, budget_s: float, jobs: int | None, timeout_s: float,
            ray: str | None = None, on_event: OnEvent = ignore,
            session: GpuSession | None = None) -> tuple[dict[str, object], list[LockEntry]]:
    """Verify, then select by successive halving; returns the report's `measured` document and the lockfile
    entries (one per shape). Verification and every round run on the workers of `session` (a run's, such as
    `tune --all`'s), or of one started for this spec and ended with it."""
    from codegen.run.gpurun import GpuSession

    if session is not None:
        return _measure(result, gpu, budget_s=budget_s, jobs=jobs, timeout_s=timeout_s, ray=ray, on_event=on_event,
                        session=session)
    with GpuSession() as own:
        return _measure(result, gpu, budget_s=budget_s, jobs=jobs, timeout_s=timeout_s, ray=ray, on_event=on_event,
                        session=own)


def _measure(result: TuneResult, gpu, *, budget_s: float, jobs: int | None, timeout_s: float, ray: str | None,
             on_event: OnEvent, session: GpuSession) -> tuple[dict[str, object], list[LockEntry]]:
    from codegen.run.gpurun import bench_all, verify_all

    if gpu.run_target != result.target:
        raise TilegenError(f"{result.target.value} kernels are measured on a {result.target.value} GPU; this is "
                           f"{gpu.name} ({gpu.run_target.value}): use --static here")
    survivors = list(result.survivors())
    if not survivors:
        raise TilegenError(f"{result.spec_name}: no candidate survived the static stages on {result.target.value}")
    files = {p.uri: result.part.files[p.uri] for p in survivors}
    t0 = time.monotonic()
    compiled_before = (session.compile_s, session.compiles)
    vrep = verify_all(list(files.values()), gpu, jobs=jobs, timeout_s=timeout_s, ray=ray, on_event=on_event,
                      session=session)
    verify_s = time.monotonic() - t0  # compiling the survivors and running every case (where a tune's time goes)
    verify_parts = _verify_parts(vrep.cases, files, verify_s, session.compile_s - compiled_before[0],
                                 session.compiles - compiled_before[1])
    statuses: dict[str, Counter] = {u: Counter() for u in files}
    first_error: dict[str, str] = {}
    for c in vrep.cases:
        statuses[c["uri"]][c["status"]] += 1
        if c["status"] not in ("verified", "skipped") and c.get("error"):
            first_error.setdefault(c["uri"], str(c["error"]))
    good = {u for u, s in statuses.items() if s.get("verified", 0) > 0 and set(s) <= {"verified", "skipped"}}
    not_selectable = [{"uri": u, "statuses": dict(sorted(statuses[u].items())), "error": first_error.get(u, "")}
                      for u in sorted(files) if u not in good]
    alive: list[Point] = [p for p in survivors if p.uri in good]
    timed = list(alive)  # every verified candidate is timed in the first round
    if not alive:
        raise TilegenError(f"{result.spec_name}: every candidate failed verification on {gpu.name}")
    hand_uri = result.part.hand.uri
    times: dict[tuple[str, tuple], list[float]] = {}
    baselines: dict[tuple, dict[str, float]] = {}
    bench_errors: dict[str, str] = {}
    rounds: list[dict[str, object]] = []
    start = t0  # the budget holds verification too: a round is started only if it should end within it
    # every round on the session's worker, which verify used too: it keeps the kernels it loaded, and the session
    # what verify compiled
    while True:
        round_start = time.monotonic()
        # torch's baselines (eager and torch.compile: the slow part of a round) are timed in the first round
        # only, beside the hand configuration: every later round times the candidates alone
        beside = frozenset() if rounds else frozenset({next((p.uri for p in alive if p.uri == hand_uri), alive[0].uri)})
        brep = bench_all([files[p.uri] for p in alive], gpu, jobs=jobs, timeout_s=timeout_s, ray=ray,
                         baselines_for=beside, on_event=on_event, session=session)
        for row in brep.rows:
            shape = tuple(row["shape"])
            if row["status"] != "ok" or not row["kernel"]:
                bench_errors.setdefault(row["uri"], row["error"] or row["status"])
                continue
            times.setdefault((row["uri"], shape), []).append(float(row["kernel"]["median_ms"]))
            if row["baselines"]:  # beside the hand configuration, in the first round
                baselines[shape] = {k: float(v["median_ms"]) for k, v in row["baselines"].items()}
        alive = [p for p in alive if p.uri not in bench_errors]
        if not alive:
            raise TilegenError(f"{result.spec_name}: every candidate failed to bench on {gpu.name}")
        shapes = sorted({s for (_, s) in times})
        best = {s: min(statistics.median(times[(p.uri, s)]) for p in alive if (p.uri, s) in times) for s in shapes}

        def score(p: Point, shapes=shapes, best=best) -> float:
            ratios = [statistics.median(times[(p.uri, s)]) / best[s] for s in shapes if (p.uri, s) in times]
            return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else math.inf

        alive.sort(key=lambda p: (score(p), p.uri))
        rounds.append({"candidates": len(alive), "elapsed_s": round(time.monotonic() - start, 1),
                       "seconds": round(time.monotonic() - round_start, 1),
                       "scores": {p.uri: round(score(p), 4) for p in alive}})
        if len(alive) <= 2:
            break
        keep = alive[: math.ceil(len(alive) / 2)]
        keep += [p for p in alive if p.uri == hand_uri and p not in keep]
        if len(keep) >= len(alive):  # the hand configuration kept beside the better half: no smaller round
            break
        # the next round would time len(keep) of this round's len(alive) candidates: start it only if it
        # should end within the budget (a round cut short by the caller's deadline keeps nothing)
        last_s = time.monotonic() - round_start
        if time.monotonic() - start + last_s * len(keep) / len(alive) > budget_s:
            break
        alive = keep
    versions = local_versions() | gpu_versions(gpu)
    hh = hand_hash(result.loaded, result.target)
    space = space_sha256(result.loaded, result.target)  # the space this run searched
    measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    per_shape, entries = [], []
    for s in sorted({s for (_, s) in times}):
        ranked = sorted((p for p in alive if (p.uri, s) in times), key=lambda p: (statistics.median(times[(p.uri, s)]), p.uri))
        cands = [Candidate(uri=p.uri, tunables=p.tunables(), time_ms=round(statistics.median(times[(p.uri, s)]), 6),
                           code_sha256=files[p.uri].code_sha256) for p in ranked]
        hand_ms = statistics.median(times[(hand_uri, s)]) if (hand_uri, s) in times else None
        per_shape.append({"shape": list(s), "winner": cands[0].to_json(),
                          "runner_up": cands[1].to_json() if len(cands) > 1 else None,
                          "hand_ms": hand_ms, "baselines_ms": baselines.get(s, {}),
                          "speedup_vs_hand": round(hand_ms / cands[0].time_ms, 4) if hand_ms else None,
                          "speedup_vs_baselines": {k: round(v / cands[0].time_ms, 4)
                                                   for k, v in sorted(baselines.get(s, {}).items())}})
        entries.append(LockEntry(spec=result.spec_name, hand_hash=hh, shape=s, device=gpu.name, versions=versions,
                                 winner=cands[0], runner_up=cands[1] if len(cands) > 1 else None, strategy=STRATEGY,
                                 space_sha256=space, measured_at=measured_at))
    doc = {"device": gpu.name, "command": command_line(), "git_commit": git_commit(),
           "gpus": f"Ray cluster {ray}" if ray else len(gpu.devices), "wall_s": round(time.monotonic() - t0, 1),
           "verify_s": round(verify_s, 1), "verify": verify_parts,
           "versions": versions, "strategy": STRATEGY, "budget_s": budget_s,
           "verified": sorted(good), "not_selectable": not_selectable,
           "bench_errors": dict(sorted(bench_errors.items())), "rounds": rounds, "shapes": per_shape,
           # every candidate timed (the median of its rounds), for the report's plot of time against the tunables
           "candidates": {p.uri: {"tunables": p.tunables(), "hand": p.uri == hand_uri,
                                  "median_ms": {"x".join(map(str, s)): round(statistics.median(times[(p.uri, s)]), 6)
                                                for s in sorted({s for (u, s) in times if u == p.uri})}}
                          for p in sorted(timed, key=lambda p: p.uri)}}
    return doc, entries

