"""The tuned lockfile: `tuned/<target>/<device>.json`, one per target and device, committed.

Each entry is keyed honestly: the canonical configuration hash of the spec's *hand* configuration for the
target (a changed spec changes it), the shape, the device name, and the tilelang / torch / runtime / driver
versions it was measured with. It holds the winner's tunables (the values of the spec's `search:` tunables),
its kernel name, code hash (codegen.generate.render.code_sha256: what was measured) and time, and the runner-up's.

`check_lockfiles` lists stale entries (spec gone, hand configuration changed, shape no longer in the spec,
winner or runner-up no longer legal, renamed or rendering other code, versions changed) and misses (a shape
of a spec with a `search:` block for the target and no entry): `tilegen tune --check` exits 1 on a stale entry,
and with --strict on a miss. An entry also records the search space it chose from (`space_sha256`, of the
spec's `search:` block for its target); an entry whose spec now searches another space still serves -- its
winner is as legal and as measured as before -- but is listed as `research`, and `tilegen tune --all` searches
it again. Never a silent fallback and never a wrong-device hit: a lockfile only answers for its own device.

A lockfile is data from outside (edited by hand, merged, or made up): `read_lockfile` reads at most
`LIMITS.max_bytes`, counts its nesting on the text before json.loads recurses, refuses a repeated JSON key and
an integer literal of more than `LIMITS.max_int_digits` digits, validates the document against a strict
schema (`LockFileDoc`: known keys only, integer sizes, finite positive times, bounded printable strings), and
checks that it has one entry per (spec, hand hash, shape) and one device -- its file name's, its header's, its
every entry's and, on a machine with a GPU, consistent with that GPU (`check_present`). Any violation is one
`LockfileError` line; `check_lockfiles` lists it under `invalid` and uses none of the file's entries.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictFloat,
    StrictInt,
    StringConstraints,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from codegen.core.errors import TilegenError
from codegen.core.files import dump_json, write_text_atomic
from codegen.core.hardware import Target
from codegen.families import family_for_op
from codegen.families.spec import (
    MAX_INT32,
    NAME_PATTERN,
    apply_point,
    hand_spec,
    search_block_type,
    search_blocks,
    search_values,
)
from codegen.generate.render import render
from codegen.spec.load import LoadedSpec
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
    space_sha256: str | None = None  # the search space the winner was chosen from (space_sha256()); None: not recorded
    measured_at: str | None = None  # when the tuner measured it, UTC (`2026-12-03T19:02:11Z`); None: not recorded

    @property
    def key(self) -> tuple[str, str, Shape]:
        return (self.spec, self.hand_hash, self.shape)

    def to_json(self) -> dict[str, object]:
        return {"spec": self.spec, "hand_hash": self.hand_hash, "shape": list(self.shape), "device": self.device,
                "versions": dict(sorted(self.versions.items())), "winner": self.winner.to_json(),
                "runner_up": self.runner_up.to_json() if self.runner_up else None, "strategy": self.strategy,
                **({"space_sha256": self.space_sha256} if self.space_sha256 else {}),
                **({"measured_at": self.measured_at} if self.measured_at else {})}

    def measured_before(self, other: LockEntry) -> bool:
        """Whether this entry is known to be an older measurement than `other`: both record when they were
        measured and this one is earlier, or only `other` records it (an entry of a lockfile that predates the
        field). Two entries that do not both say so are not ordered."""
        if other.measured_at is None:
            return False
        return self.measured_at is None or self.measured_at < other.measured_at  # ISO 8601 in UTC sorts as text


@dataclass(frozen=True, kw_only=True)
class LockFile:
    target: Target
    device: str
    entries: tuple[LockEntry, ...] = ()

    def document(self) -> dict[str, object]:
        rows = sorted(self.entries, key=lambda e: (e.spec, e.shape, e.hand_hash))
        return {"format": FORMAT, "target": self.target.value, "device": self.device,
                "entries": [e.to_json() for e in rows]}

    def merged(self, new: list[LockEntry], *, keep_later: bool = False) -> LockFile:
        """This lockfile with `new` entries replacing those of the same key (spec, hand hash, shape), and those of
        the same spec and shape under another hand configuration measured before them (the spec's hand changed
        and it was tuned again: the old entry would only be reported stale). With `keep_later` (merging lockfiles
        measured elsewhere), an entry of this lockfile measured after the new one stays: a copy of the project that
        tuned one spec carries the other specs' entries as they were when it was copied, and merging it after a
        copy that re-tuned them must not bring the old measurements back."""
        groups: dict[tuple[str, Shape], dict[str, LockEntry]] = {}  # (spec, shape) -> hand hash -> entry
        for e in [*self.entries, *new]:
            if e.device != self.device:
                raise TilegenError(f"an entry measured on {e.device} cannot go into {self.device}'s lockfile")
            group = groups.setdefault((e.spec, e.shape), {})
            held = group.get(e.hand_hash)
            if keep_later and held is not None and e.measured_before(held):
                continue
            others = {h: old for h, old in group.items() if h != e.hand_hash}
            if any(e.measured_before(old) for old in others.values()):
                continue  # another hand configuration was tuned later: this entry is the superseded one
            for h, old in others.items():
                if old.measured_before(e):
                    del group[h]
            group[e.hand_hash] = e
        return LockFile(target=self.target, device=self.device,
                        entries=tuple(e for group in groups.values() for e in group.values()))


# ---- reading: a lockfile is data from outside ---------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class LockfileLimits:
    """What one lockfile may cost before it is parsed; past a limit it is refused in one line. An entry is
    about 1 KB (the committed tuned/sm_90/NVIDIA_H200.json: 9 entries, 8.6 KB) and nests 5 levels deep (the
    document, `entries`, an entry, its `winner`, the winner's `tunables`)."""

    max_bytes: int = 4 * 2**20  # read at most one byte more; about 4,000 entries
    max_depth: int = 8  # nested arrays/objects, counted on the text before json.loads recurses
    max_int_digits: int = 20  # a longer integer literal is refused while parsing (no huge-int conversion)


LIMITS = LockfileLimits()


class LockfileError(TilegenError):
    """A lockfile that is not a valid one: its file, the entry/field, the problem and the rule, on one line.
    `tilegen tune --check` reports it and exits 1; `tilegen gen` reports it and uses none of the file's entries."""

    def __init__(self, file: str, where: str, message: str, rule: str):
        self.file, self.where, self.rule = file, where, rule
        super().__init__(f"{file}: {where + ': ' if where else ''}{message} [{rule}]")


# Field types of the schema: every value a lockfile may hold is bounded, printable and of the one JSON type.
_Printable = r"^[ -~]+$"  # printable ASCII: no newline, no escape sequence, no control character
_SHA256, _KERNEL, _DEVICE = r"^[0-9a-f]{64}$", r"^[A-Za-z0-9_.-]+$", r"^[A-Za-z0-9][ -~]*$"
_UTC = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"
_PATTERN_MEANS = {  # what a pattern asks for, in words
    NAME_PATTERN: "must be a spec name (a lower-case identifier)",
    _SHA256: "must be a sha256: 64 lower-case hexadecimal digits",
    _KERNEL: "must be a kernel name (letters, digits, '_', '.', '-')",
    _DEVICE: "must be a GPU name: printable ASCII, starting with a letter or digit",
    _Printable: "must be printable ASCII on one line",
    _UTC: "must be a UTC time written YYYY-MM-DDTHH:MM:SSZ",
}
SpecName = Annotated[str, StringConstraints(strict=True, pattern=NAME_PATTERN)]
Sha256 = Annotated[str, StringConstraints(strict=True, pattern=_SHA256)]
KernelName = Annotated[str, StringConstraints(strict=True, max_length=200, pattern=_KERNEL)]
DeviceName = Annotated[str, StringConstraints(strict=True, max_length=100, pattern=_DEVICE)]
Text = Annotated[str, StringConstraints(strict=True, max_length=500, pattern=_Printable)]
MeasuredAt = Annotated[str, StringConstraints(strict=True, pattern=_UTC)]
TunablePath = Annotated[str, StringConstraints(strict=True, max_length=100, pattern=r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")]


def _tunable_value(value: object) -> object:
    """A tunable's value as a spec writes it: an integer, a boolean or a short printable string (an enum's value);
    the spec's search model validates it further when the entry is checked."""
    if isinstance(value, bool | int) or (isinstance(value, str) and len(value) <= 100 and re.fullmatch(_Printable, value)):
        return value
    raise PydanticCustomError("tunable_value", "must be an integer, a boolean or a printable string of at most 100 "
                              "characters")


TunableValue = Annotated[object, PlainValidator(_tunable_value)]
Size = Annotated[StrictInt, Field(gt=0, le=MAX_INT32)]  # a shape's sizes: int32, as the spec's are
TimeMs = Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False)]  # finite and positive (JSON's NaN, 1e400: refused)
VersionKey = Literal["tilelang", "torch", "runtime", "driver"]


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CandidateDoc(_Doc):
    uri: KernelName
    tunables: Annotated[dict[TunablePath, TunableValue], Field(max_length=64)]
    time_ms: TimeMs
    code_sha256: Sha256  # what was measured: an entry without it cannot say whether its kernel's code changed

    def candidate(self) -> Candidate:
        return Candidate(uri=self.uri, tunables=dict(self.tunables), time_ms=self.time_ms, code_sha256=self.code_sha256)


class EntryDoc(_Doc):
    """One entry as the file holds it; a field added to LockEntry is one optional field here."""

    spec: SpecName
    hand_hash: Sha256
    shape: Annotated[tuple[Size, ...], Field(min_length=1, max_length=8)]
    device: DeviceName
    versions: dict[VersionKey, Text]
    winner: CandidateDoc
    runner_up: CandidateDoc | None = None
    strategy: Text | Literal[""] = ""
    space_sha256: Sha256 | None = None
    measured_at: MeasuredAt | None = None

    def entry(self) -> LockEntry:
        return LockEntry(spec=self.spec, hand_hash=self.hand_hash, shape=self.shape, device=self.device,
                         versions=dict(self.versions), winner=self.winner.candidate(),
                         runner_up=self.runner_up.candidate() if self.runner_up else None, strategy=self.strategy,
                         space_sha256=self.space_sha256, measured_at=self.measured_at)


class LockFileDoc(_Doc):
    format: Annotated[StrictInt, Field(ge=FORMAT, le=FORMAT)]
    target: Target
    device: DeviceName
    entries: list[EntryDoc]


class _Refused(ValueError):
    """Raised from inside json.loads' hooks: the message is the user's."""


def _read_capped(path: Path, shown: str) -> str:
    try:
        if not path.is_file():
            raise LockfileError(shown, "", "not a regular file", "lockfile_io")
        with path.open("rb") as f:
            data = f.read(LIMITS.max_bytes + 1)
    except OSError as exc:
        raise LockfileError(shown, "", f"cannot read: {exc.strerror or exc}", "lockfile_io") from None
    if len(data) > LIMITS.max_bytes:
        raise LockfileError(shown, "", f"over the {LIMITS.max_bytes}-byte limit of a lockfile (read no further)",
                            "lockfile_limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockfileError(shown, "", f"not UTF-8 text (byte {exc.start})", "lockfile_json") from None


# strings (skipped whole, escapes included) and the brackets outside them
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _check_depth(text: str, shown: str) -> None:
    """Refuse nesting deeper than LIMITS.max_depth on the text itself, in one linear pass, before json.loads
    (which recurses once per level) sees it."""
    depth = 0
    for m in _JSON_TOKENS.finditer(text):
        ch = m.group()
        if ch in "[{":
            depth += 1
            if depth > LIMITS.max_depth:
                line = text.count("\n", 0, m.start()) + 1
                col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
                raise LockfileError(shown, f"line {line}, column {col}",
                                    f"nests deeper than {LIMITS.max_depth} arrays/objects", "lockfile_limit")
        elif ch in "]}":
            depth -= 1


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"key {_shown(key)} appears twice in one object")
        out[key] = value
    return out


def _int(text: str) -> int:
    if len(text.lstrip("-")) > LIMITS.max_int_digits:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits (at most {LIMITS.max_int_digits})")
    return int(text)


def _shown(value: object) -> str:
    """A value from the file as a message shows it: one line, printable, at most 40 characters."""
    text = json.dumps(value, ensure_ascii=True) if isinstance(value, str | bool | None) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _where(loc: tuple, doc: object) -> tuple[str, object]:
    """`entries[2].shape[0]` and the value there, from a pydantic error location (its union-member tags, which
    are not keys of the document, left out)."""
    out, value = "", doc
    for part in loc:
        if isinstance(part, int) and isinstance(value, list) and 0 <= part < len(value):
            out, value = f"{out}[{part}]", value[part]
        elif isinstance(part, str) and isinstance(value, dict) and part in value:
            key = part if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,40}", part) else _shown(part)
            out, value = (f"{out}.{key}" if out else key), value[part]
        elif isinstance(part, str) and part == loc[-1] and isinstance(value, dict):  # a missing field's name
            out, value = (f"{out}.{part}" if out else part), _ABSENT
    return out, value


_ABSENT = object()


# pydantic messages that talk Python rather than JSON
_MESSAGES = {
    "model_type": "must be a JSON object", "model_attributes_type": "must be a JSON object",
    "dict_type": "must be a JSON object", "list_type": "must be a JSON array", "tuple_type": "must be a JSON array",
    "string_type": "must be a string", "int_type": "must be an integer", "float_type": "must be a number",
    "string_unicode": "must be valid Unicode (no lone surrogate escape)",
}


def _schema_error(exc: ValidationError, doc: object, shown: str) -> LockfileError:
    err = exc.errors(include_url=False)[0]
    where, value = _where(err["loc"], doc)
    if err["type"] == "extra_forbidden":
        return LockfileError(shown, where, "unknown key", "lockfile_schema")
    if err["type"] == "missing":
        return LockfileError(shown, where, "required field is missing", "lockfile_schema")
    if err["loc"][-1:] == ("[key]",):  # a dict key (a version's name) is wrong, not its value
        return LockfileError(shown, where, f"unknown key: {err['msg'].replace('Input should be', 'one of')}",
                             "lockfile_schema")
    scalar = value is not _ABSENT and not isinstance(value, dict | list)
    message = (_PATTERN_MEANS.get(err.get("ctx", {}).get("pattern"), err["msg"]) if err["type"] == "string_pattern_mismatch"
               else _MESSAGES.get(err["type"], err["msg"]))
    return LockfileError(shown, f"{where}={_shown(value)}" if scalar else where or "<document>", message,
                         "lockfile_schema")


def read_lockfile(path: Path, *, shown: str | None = None, target: Target | None = None) -> LockFile:
    """A lockfile, validated (parse_lockfile), read with a size cap: at most LIMITS.max_bytes + 1 bytes."""
    shown = shown or path.as_posix()
    return parse_lockfile(_read_capped(path, shown), shown, file_name=path.name if target else None, target=target)


def parse_lockfile(text: str, shown: str, *, file_name: str | None = None, target: Target | None = None) -> LockFile:
    """A lockfile's text, validated: bounded size and depth, valid JSON with no repeated key, the schema
    (LockFileDoc: known keys, integer sizes, finite positive times), one entry per key (spec, hand hash, shape),
    every entry's device the header's. With `target` (a file of tuned/<target>/): the header's target is the
    folder's and `file_name` is the header device's (lock_path). Any violation: LockfileError, one line."""
    if len(text) > LIMITS.max_bytes:
        raise LockfileError(shown, "", f"over the {LIMITS.max_bytes}-byte limit of a lockfile", "lockfile_limit")
    _check_depth(text, shown)
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_int=_int)
    except _Refused as exc:
        raise LockfileError(shown, "", str(exc), "lockfile_json") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        why = f"line {exc.lineno}, column {exc.colno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "too deep"
        raise LockfileError(shown, "", f"not valid JSON: {why}", "lockfile_json") from None
    if not isinstance(raw, dict):
        raise LockfileError(shown, "", "not a tilegen lockfile: the document must be a JSON object", "lockfile_schema")
    if type(raw.get("format", FORMAT)) is not int or raw.get("format", FORMAT) != FORMAT:
        raise LockfileError(shown, f"format={_shown(raw['format'])}", f"this tilegen reads format {FORMAT}",
                            "lockfile_format")
    try:
        doc = LockFileDoc.model_validate(raw)
    except ValidationError as exc:
        raise _schema_error(exc, raw, shown) from None
    if target is not None:
        if doc.target != target:
            raise LockfileError(shown, f"target={_shown(doc.target.value)}", f"a lockfile under tuned/{target.value}/ "
                                f"holds {target.value} entries", "lockfile_device")
        if file_name is not None and file_name != f"{device_slug(doc.device)}.json":
            raise LockfileError(shown, f"device={_shown(doc.device)}", f"the lockfile of {doc.device} is "
                                f"{device_slug(doc.device)}.json, not {_shown(file_name)}", "lockfile_device")
    seen: dict[tuple[str, str, Shape], int] = {}
    for i, e in enumerate(doc.entries):
        if e.device != doc.device:
            raise LockfileError(shown, f"entries[{i}].device={_shown(e.device)}",
                                f"an entry of {doc.device}'s lockfile must be measured on {doc.device}", "lockfile_device")
        key = (e.spec, e.hand_hash, e.shape)
        if key in seen:
            raise LockfileError(shown, f"entries[{i}]", f"a second entry for {e.spec} {'x'.join(map(str, e.shape))} "
                                f"(the same spec, hand_hash and shape as entries[{seen[key]}])", "lockfile_duplicate")
        seen[key] = i
    return LockFile(target=doc.target, device=doc.device, entries=tuple(e.entry() for e in doc.entries))


def write_lockfile(path: Path, lock: LockFile) -> bool:
    """Write when the content changed; True if written. What is written is first read back as a lockfile would
    be (parse_lockfile): tilegen never writes one it would refuse."""
    text = dump_json(lock.document())
    parse_lockfile(text, path.as_posix())
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_text_atomic(path, text)
    return True


# ---- keys and checks ------------------------------------------------------------------------------------

def hand_hash(loaded: LoadedSpec, target: Target) -> str:
    """The canonical configuration hash of the spec's hand configuration for `target`."""
    fam = family_for_op(loaded.spec.op)
    return fam.instance(hand_spec(loaded.spec, target), TARGETS[target], loaded.doc.file).config_sha256()


def canonical_space(space: dict[str, list] | list[dict[str, list]]) -> str:
    """The sha256 of a search space given as {tunable path: values} (a tune report's `space`), or as a list of them
    (a search of several blocks): the paths and, per path, the set of values, so neither the order the spec lists
    them in nor a comment changes it (nor the order of the blocks)."""
    def canon(block: dict[str, list]) -> dict[str, list[str]]:
        return {k: sorted({json.dumps(getattr(v, "value", v)) for v in vals}) for k, vals in block.items()}

    doc = canon(space) if isinstance(space, dict) else sorted((canon(b) for b in space), key=json.dumps)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def space_sha256(loaded: LoadedSpec, target: Target) -> str | None:
    """canonical_space of the spec's `search:` block for `target`; None where it has none."""
    search = getattr(loaded.spec, "search", {}).get(target)
    if search is None:
        return None
    blocks = [dict(search_values(block)) for block in search_blocks(search)]
    return canonical_space(blocks[0] if len(blocks) == 1 else blocks)


def winner_instance(loaded: LoadedSpec, target: Target, tunables: dict[str, object]):
    """The instance (every shape of the spec) of the hand configuration with the winner's tunables, or
    (None, why it is not legal any more)."""
    fam = family_for_op(loaded.spec.op)
    block = search_block_type(type(loaded.spec))
    try:
        parsed = block.model_validate(_nest({k: [v] for k, v in tunables.items()}))
    except ValueError as exc:
        return None, f"its tunables are not valid any more: {str(exc).splitlines()[0]}"
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
    invalid: tuple[str, ...] = ()  # lockfiles not used at all (LockfileError lines): none of their entries counts
    fresh: tuple[tuple[Target, LockEntry, object], ...] = ()  # entries that answer for today's spec set, each
    # with its winner's instance (every shape of the spec)
    research: tuple[Finding, ...] = ()  # fresh entries chosen from another search space than the spec's today
    entries: int = 0
    not_compared: tuple[str, ...] = field(default_factory=tuple)  # versions this machine cannot say

    @property
    def clean(self) -> bool:
        return not self.stale and not self.misses and not self.invalid and not self.research


def check_present(lock: LockFile, shown: str, gpu_present: tuple[str, Target]) -> None:
    """A lockfile against the GPU of this machine (its name, the target it runs): a lockfile of this very device
    must be of that target, and one whose file name is this device's must name it exactly."""
    name, run_target = gpu_present
    if lock.device == name and lock.target != run_target:
        raise LockfileError(shown, f"device={_shown(lock.device)}", f"the {name} of this machine runs "
                            f"{run_target.value} kernels, not {lock.target.value}", "lockfile_device")
    if lock.device != name and device_slug(lock.device) == device_slug(name):
        raise LockfileError(shown, f"device={_shown(lock.device)}", f"the GPU here is {_shown(name)}, whose lockfile "
                            f"this file's name says it is", "lockfile_device")


def _read_locks(root: Path, target: Target, gpu_present: tuple[str, Target] | None
                ) -> tuple[list[tuple[Path, LockFile]], list[str], bool]:
    """The valid lockfiles of tuned/<target>/, the lines of the invalid ones, and whether there was any file."""
    from codegen.spec.project import ProjectError, confined

    folder = root / LOCK_DIR / target.value
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    locks, invalid = [], []
    for path in paths:
        shown = path.relative_to(root).as_posix().encode("unicode_escape").decode("ascii")  # one printable line
        try:
            confined(root, path, shown)
            lock = read_lockfile(path, shown=shown, target=target)
            if gpu_present is not None:
                check_present(lock, shown, gpu_present)
        except (LockfileError, ProjectError) as exc:
            invalid.append(str(exc))
            continue
        locks.append((path, lock))
    return locks, invalid, bool(paths)


def check_lockfiles(root: Path, loaded: list[LoadedSpec], current_versions: dict[str, str],
                    targets: list[Target] | None = None, *,
                    device_versions: tuple[str, dict[str, str]] | None = None,
                    gpu_present: tuple[str, Target] | None = None) -> CheckReport:
    """Every entry of every lockfile under tuned/ against the spec set, and every shape of a spec with a
    `search:` block for a target against the lockfiles of that target. `current_versions` holds what any
    machine can say (tilelang, which compiles the kernel); `device_versions` is (the device present, what its
    GPU run uses: torch, runtime, driver), compared only with that device's lockfile -- a CPU machine's torch
    says nothing of the GPU's. A version not compared is listed in the report. A lockfile that is not valid
    (read_lockfile; with `gpu_present`, the GPU of this machine: check_present) is one line of `invalid` and
    none of its entries is used."""
    by_name = {ls.spec.name: ls for ls in loaded}
    stale: list[Finding] = []
    misses: list[Finding] = []
    research: list[Finding] = []
    invalid: list[str] = []
    fresh: list[tuple[Target, LockEntry, object]] = []
    count = 0
    compared_keys: set[str] = set()
    all_keys: set[str] = set()
    for target in targets or list(Target):
        locks, bad, any_file = _read_locks(root, target, gpu_present)
        invalid.extend(bad)
        for path, lock in locks:
            shown = path.relative_to(root).as_posix()
            for e in lock.entries:
                count += 1
                all_keys |= set(e.versions)

                def stale_(reason: str, e=e, shown=shown) -> None:
                    stale.append(Finding(file=shown, spec=e.spec, shape=e.shape, reason=f"stale: {reason}"))

                ls = by_name.get(e.spec)
                if ls is None or target not in ls.spec.targets:
                    stale_(f"no spec named {e.spec} for {target.value}")
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
                if e.space_sha256 and e.space_sha256 != space_sha256(ls, target):
                    research.append(Finding(file=shown, spec=e.spec, shape=e.shape,
                                            reason="research: chosen from another search space than the spec's "
                                                   "today (the entry still serves)"))
        if any_file and not locks:  # every lockfile of the target is invalid: its lines stand for the misses
            continue
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
    return CheckReport(stale=tuple(stale), misses=tuple(misses), invalid=tuple(invalid), fresh=tuple(fresh), entries=count,
                       research=tuple(research), not_compared=tuple(sorted(all_keys - compared_keys)))


def tuned_instances(root: Path, loaded: list[LoadedSpec], targets: list[Target] | None = None
                    ) -> tuple[list[tuple[object, str]], CheckReport]:
    """What `gen` emits beside the hand configurations: for each fresh lockfile entry, (the winner's instance
    at that one shape, the device it was measured on), and the check report that says which entries were not
    used (stale) and which searched shapes have none (misses: the hand configuration serves them). Only what
    any machine can compare decides freshness here (the tilelang version; codegen.generate.lockfile.local_versions)."""
    from dataclasses import replace

    report = check_lockfiles(root, loaded, local_versions(), targets)
    return [(replace(inst, shapes=(e.shape,)), e.device) for _, e, inst in report.fresh], report


def fam_shapes(ls: LoadedSpec) -> list[Shape]:
    """The spec's shapes as tuples, as its family's instance holds them."""
    return list(family_for_op(ls.spec.op).instance(ls.spec, TARGETS[ls.spec.targets[0]], ls.doc.file).shapes)


def local_versions() -> dict[str, str]:
    """What every machine can say of the kernels it would build: the tilelang version (importlib metadata)."""
    from codegen.core.toolchain import find_tilelang

    return {"tilelang": find_tilelang().version}


def gpu_versions(gpu) -> dict[str, str]:
    """What a measurement on `gpu` (codegen.run.gpu.GpuInfo) depends on beyond tilelang: torch, runtime, driver."""
    env = TARGETS[gpu.run_target].device_environment()
    return {"torch": gpu.torch_version, "runtime": gpu.runtime_version, "driver": env.get("driver", "unknown")}
