"""The tuned lockfile: `tuned/<target>/<device>.json`, one per target and device, committed.

Each entry is keyed honestly: the canonical configuration hash of the spec's *hand* configuration for the
target (a changed spec changes it), the shape, the device name, and the tilelang / torch / runtime / driver
versions it was measured with. It holds the winner's tunables (the values of the spec's `search:` tunables),
its kernel name, code hash (codegen.render.code_sha256: what was measured) and time, and the runner-up's.

`check_lockfiles` lists stale entries (spec gone, hand configuration changed, shape no longer in the spec,
winner or runner-up no longer legal, renamed or rendering other code, versions changed) and misses (a shape of a spec with a `search:`
block for the target and no entry): `tilegen tune --check` exits 1 on either. Never a silent fallback and
never a wrong-device hit: a lockfile only answers for its own device.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from codegen.build import dump_json
from codegen.errors import TilegenError
from codegen.families import family_for_op
from codegen.files import write_text_atomic
from codegen.hardware import Target
from codegen.load import LoadedSpec
from codegen.render import render
from codegen.targets import TARGETS

LOCK_DIR = Path("tuned")
FORMAT = 1
Shape = tuple[int, ...]


def device_slug(device: str) -> str:
    """`NVIDIA H200` -> `NVIDIA_H200`: the lockfile's file name."""
    return re.sub(r"[^A-Za-z0-9.]+", "_", device).strip("_")


def lock_path(root: Path, target: Target, device: str) -> Path:
    return root / LOCK_DIR / target.value / f"{device_slug(device)}.json"


@dataclass(frozen=True, kw_only=True)
class Candidate:
    uri: str
    tunables: dict[str, object]  # search path -> value, as written in the spec
    time_ms: float
    code_sha256: str  # the measured kernel's code (RenderedFile.code_sha256): a template that changes it stales the entry

    def to_json(self) -> dict[str, object]:
        return {"uri": self.uri, "tunables": dict(sorted(self.tunables.items())), "time_ms": self.time_ms,
                "code_sha256": self.code_sha256}


@dataclass(frozen=True, kw_only=True)
class LockEntry:
    spec: str
    hand_hash: str  # sha256 of the hand configuration's canonical form for the target
    shape: Shape
    device: str
    versions: dict[str, str]  # tilelang, torch, runtime, driver
    winner: Candidate
    runner_up: Candidate | None
    strategy: str = ""

    @property
    def key(self) -> tuple[str, str, Shape]:
        return (self.spec, self.hand_hash, self.shape)

    def to_json(self) -> dict[str, object]:
        return {"spec": self.spec, "hand_hash": self.hand_hash, "shape": list(self.shape), "device": self.device,
                "versions": dict(sorted(self.versions.items())), "winner": self.winner.to_json(),
                "runner_up": self.runner_up.to_json() if self.runner_up else None, "strategy": self.strategy}


@dataclass(frozen=True, kw_only=True)
class LockFile:
    target: Target
    device: str
    entries: tuple[LockEntry, ...] = ()

    def document(self) -> dict[str, object]:
        rows = sorted(self.entries, key=lambda e: (e.spec, e.shape, e.hand_hash))
        return {"format": FORMAT, "target": self.target.value, "device": self.device,
                "entries": [e.to_json() for e in rows]}

    def merged(self, new: list[LockEntry]) -> LockFile:
        """This lockfile with `new` entries replacing those of the same key (spec, hand hash, shape)."""
        keep = {e.key: e for e in self.entries}
        for e in new:
            if e.device != self.device:
                raise TilegenError(f"an entry measured on {e.device} cannot go into {self.device}'s lockfile")
            keep[e.key] = e
        return LockFile(target=self.target, device=self.device, entries=tuple(keep.values()))


def _candidate(d: dict) -> Candidate:
    return Candidate(uri=str(d["uri"]), tunables=dict(d["tunables"]), time_ms=float(d["time_ms"]),
                     code_sha256=str(d["code_sha256"]))


def read_lockfile(path: Path) -> LockFile:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, this tilegen reads format {FORMAT}")
        entries = tuple(
            LockEntry(spec=str(e["spec"]), hand_hash=str(e["hand_hash"]), shape=tuple(int(x) for x in e["shape"]),
                      device=str(e["device"]), versions={str(k): str(v) for k, v in e["versions"].items()},
                      winner=_candidate(e["winner"]),
                      runner_up=_candidate(e["runner_up"]) if e.get("runner_up") else None,
                      strategy=str(e.get("strategy", "")))
            for e in doc["entries"])
        return LockFile(target=Target(doc["target"]), device=str(doc["device"]), entries=entries)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TilegenError(f"{path}: not a tilegen lockfile: {type(exc).__name__}: {exc}") from None


def write_lockfile(path: Path, lock: LockFile) -> bool:
    """Write when the content changed; True if written."""
    text = dump_json(lock.document())
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_text_atomic(path, text)
    return True


# ---- keys and checks ------------------------------------------------------------------------------------

def hand_hash(loaded: LoadedSpec, target: Target) -> str:
    """The canonical configuration hash of the spec's hand configuration for `target`."""
    from codegen.tune import hand_spec

    fam = family_for_op(loaded.spec.op)
    return fam.instance(hand_spec(loaded.spec, target), TARGETS[target], loaded.doc.file).config_sha256()


def winner_instance(loaded: LoadedSpec, target: Target, tunables: dict[str, object]):
    """The instance (every shape of the spec) of the hand configuration with the winner's tunables, or
    (None, why it is not legal any more)."""
    from codegen.tune import apply_point, hand_spec

    fam = family_for_op(loaded.spec.op)
    block = type(loaded.spec).model_fields["search"].annotation.__args__[1]  # dict[Target, <Search>]
    try:
        parsed = block.model_validate(_nest({k: [v] for k, v in tunables.items()}))
    except ValueError as exc:
        return None, f"its tunables are not valid any more: {str(exc).splitlines()[0]}"
    from codegen.spec import search_values

    candidate = apply_point(hand_spec(loaded.spec, target), tuple((k, v[0]) for k, v in search_values(parsed)))
    violations = fam.check(candidate, TARGETS[target])
    if violations:
        return None, f"the winner breaks {', '.join(sorted({v.rule for v in violations}))}"
    return fam.instance(candidate, TARGETS[target], loaded.doc.file), ""


def candidate_drift(role: str, inst, cand: Candidate) -> str:
    """Why a measured candidate no longer describes the kernel its tunables give today ('' if it does): another
    name (the configuration changed), or the same name rendering other code (a template change)."""
    rendered = render(inst)
    if rendered.uri != cand.uri:
        return f"the {role}'s kernel is now {rendered.uri}, not {cand.uri} (its configuration changed)"
    if rendered.code_sha256 != cand.code_sha256:
        return (f"{cand.uri}: code changed (the {role}'s code sha256 {cand.code_sha256[:12]} -> "
                f"{rendered.code_sha256[:12]})")
    return ""


def _nest(flat: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for path, v in flat.items():
        head, _, leaf = path.partition(".")
        if leaf:
            out.setdefault(head, {})[leaf] = v
        else:
            out[head] = v
    return out


@dataclass(frozen=True, kw_only=True)
class Finding:
    file: str  # the lockfile (relative to the root), or the target folder for a miss without one
    spec: str
    shape: Shape
    reason: str

    def line(self) -> str:
        return f"{self.file}: {self.spec} {'x'.join(map(str, self.shape))}: {self.reason}"


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    stale: tuple[Finding, ...] = ()
    misses: tuple[Finding, ...] = ()
    fresh: tuple[tuple[Target, LockEntry, object], ...] = ()  # entries that answer for today's spec set, each
    # with its winner's instance (every shape of the spec)
    entries: int = 0
    not_compared: tuple[str, ...] = field(default_factory=tuple)  # versions this machine cannot say

    @property
    def clean(self) -> bool:
        return not self.stale and not self.misses


def check_lockfiles(root: Path, loaded: list[LoadedSpec], current_versions: dict[str, str],
                    targets: list[Target] | None = None, *,
                    device_versions: tuple[str, dict[str, str]] | None = None) -> CheckReport:
    """Every entry of every lockfile under tuned/ against the spec set, and every shape of a spec with a
    `search:` block for a target against the lockfiles of that target. `current_versions` holds what any
    machine can say (tilelang, which compiles the kernel); `device_versions` is (the device present, what its
    GPU run uses: torch, runtime, driver), compared only with that device's lockfile -- a CPU machine's torch
    says nothing of the GPU's. A version not compared is listed in the report."""
    by_name = {ls.spec.name: ls for ls in loaded}
    stale: list[Finding] = []
    misses: list[Finding] = []
    fresh: list[tuple[Target, LockEntry, object]] = []
    count = 0
    compared_keys: set[str] = set()
    all_keys: set[str] = set()
    for target in targets or list(Target):
        folder = root / LOCK_DIR / target.value
        locks = [(p, read_lockfile(p)) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
        for path, lock in locks:
            shown = path.relative_to(root).as_posix()
            if lock.target != target:
                raise TilegenError(f"{shown}: holds target {lock.target.value}, not {target.value}")
            for e in lock.entries:
                count += 1
                all_keys |= set(e.versions)

                def stale_(reason: str, e=e, shown=shown) -> None:
                    stale.append(Finding(file=shown, spec=e.spec, shape=e.shape, reason=f"stale: {reason}"))

                ls = by_name.get(e.spec)
                if ls is None or target not in ls.spec.targets:
                    stale_(f"no spec named {e.spec} for {target.value}")
                    continue
                if e.device != lock.device:
                    stale_(f"measured on {e.device}, in {lock.device}'s lockfile")
                    continue
                if hand_hash(ls, target) != e.hand_hash:
                    stale_("the spec's hand configuration changed")
                    continue
                if e.shape not in {tuple(s) for s in fam_shapes(ls)}:
                    stale_("the shape is no longer in the spec")
                    continue
                inst, why = winner_instance(ls, target, e.winner.tunables)
                if inst is None:
                    stale_(why)
                    continue
                why = candidate_drift("winner", inst, e.winner)
                if not why and e.runner_up:
                    second, second_why = winner_instance(ls, target, e.runner_up.tunables)
                    why = (f"the runner-up: {second_why}" if second is None
                           else candidate_drift("runner-up", second, e.runner_up))
                if why:
                    stale_(why)
                    continue
                now = current_versions | (device_versions[1] if device_versions and device_versions[0] == lock.device
                                          else {})
                changed = [f"{k} {e.versions[k]} -> {v}" for k, v in sorted(now.items())
                           if k in e.versions and e.versions[k] != v]
                compared_keys |= set(now) & set(e.versions)
                if changed:
                    stale_("versions changed: " + ", ".join(changed))
                    continue
                fresh.append((target, e, inst))
        for ls in loaded:
            if target not in getattr(ls.spec, "search", {}) or target not in ls.spec.targets:
                continue
            hh = hand_hash(ls, target)
            for shape in fam_shapes(ls):
                if not locks:
                    misses.append(Finding(file=(LOCK_DIR / target.value).as_posix(), spec=ls.spec.name,
                                          shape=tuple(shape), reason="miss: no lockfile for this target"))
                for path, lock in locks:
                    if not any(e.spec == ls.spec.name and e.hand_hash == hh and e.shape == tuple(shape)
                               for e in lock.entries):
                        misses.append(Finding(file=path.relative_to(root).as_posix(), spec=ls.spec.name,
                                              shape=tuple(shape), reason=f"miss: not tuned on {lock.device}"))
    return CheckReport(stale=tuple(stale), misses=tuple(misses), fresh=tuple(fresh), entries=count,
                       not_compared=tuple(sorted(all_keys - compared_keys)))


def tuned_instances(root: Path, loaded: list[LoadedSpec], targets: list[Target] | None = None
                    ) -> tuple[list[tuple[object, str]], CheckReport]:
    """What `gen` emits beside the hand configurations: for each fresh lockfile entry, (the winner's instance
    at that one shape, the device it was measured on), and the check report that says which entries were not
    used (stale) and which searched shapes have none (misses: the hand configuration serves them). Only what
    any machine can compare decides freshness here (the tilelang version; codegen.lockfile.local_versions)."""
    from dataclasses import replace

    report = check_lockfiles(root, loaded, local_versions(), targets)
    return [(replace(inst, shapes=(e.shape,)), e.device) for _, e, inst in report.fresh], report


def fam_shapes(ls: LoadedSpec) -> list[Shape]:
    """The spec's shapes as tuples, as its family's instance holds them."""
    return list(family_for_op(ls.spec.op).instance(ls.spec, TARGETS[ls.spec.targets[0]], ls.doc.file).shapes)


def local_versions() -> dict[str, str]:
    """What every machine can say of the kernels it would build: the tilelang version (importlib metadata)."""
    from codegen.toolchain import find_tilelang

    return {"tilelang": find_tilelang().version}


def gpu_versions(gpu) -> dict[str, str]:
    """What a measurement on `gpu` (codegen.gpu.GpuInfo) depends on beyond tilelang: torch, runtime, driver."""
    env = TARGETS[gpu.run_target].device_environment()
    return {"torch": gpu.torch_version, "runtime": gpu.runtime_version, "driver": env.get("driver", "unknown")}
