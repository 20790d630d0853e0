"""Property-based fuzzing of spec loading: whatever the text, `parse_specs` + `build_instances` either
succeed or raise SpecError/SpecErrors whose every line is `file:LINE:COL: ... [rule]` — never another
exception, never more than CASE_SECONDS or CASE_PEAK_BYTES (tracemalloc peak) for one case.

Three strategies, EXAMPLES cases each, derandomized (the same cases on every run, so CI is reproducible):
random text, random documents dumped by yaml.safe_dump (shared subtrees become anchors/aliases, some nested
deeply), and random mutations of every seed spec in specs/*.yaml.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen.core.errors import SpecError, SpecErrors
from codegen.families import ops, spec_model
from codegen.generate.instance import build_instances
from codegen.spec.load import parse_specs

FILE = "specs/fuzz.yaml"
LINE = re.compile(re.escape(FILE) + r":\d+:\d+: .* \[[a-z_0-9]+\]")  # fullmatch: `.` stops at a newline
EXAMPLES = 300
CASE_SECONDS = 10.0  # per case, with tracemalloc on (it slows Python ~2x): a hang guard, far above the ~0.1 s a case takes, so a loaded CI machine does not trip it
CASE_PEAK_BYTES = 64 * 2**20
MAX_INT32 = 2**31 - 1  # TileLang shapes are int32

FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=timedelta(seconds=CASE_SECONDS * 2),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check(text: str) -> list[str]:
    """Load and build `text`; assert the outcome is a clean success or clean one-line errors, in bounds."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        instances = build_instances(parse_specs(text, FILE))
        lines = []
    except SpecErrors as exc:
        lines = [str(e) for e in exc.errors]
        assert lines
    except SpecError as exc:
        lines = [str(exc)]
    finally:
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    bad = [line for line in lines if not LINE.fullmatch(line)]
    assert not bad, bad[:3]
    if not lines:  # what reaches a template is an int32 or a finite float (an `inf` literal is a NameError there)
        odd = [(i.name, n) for i in instances for n in _numbers(dataclasses.asdict(i))
               if not (math.isfinite(n) and abs(n) <= MAX_INT32)]
        assert not odd, odd[:3]
    assert elapsed < CASE_SECONDS, f"{elapsed:.2f} s for {len(text)} characters"
    assert peak < CASE_PEAK_BYTES, f"{peak / 2**20:.1f} MiB for {len(text)} characters"
    return lines


def _numbers(value):
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


# ---- (a) random text and random documents --------------------------------------------------------------------------

YAML_PIECES = ["[", "]", "{", "}", ":", ": ", ",", "-", "- ", "&a ", "*a", "&b ", "*b", "!!str ", "!x ", "<<: ", "? ",
               "|", ">", "'", '"', "#", "%YAML 1.2\n", "---\n", "...\n", "\n", "  ", "\t", "\x00", "\x1b", "\ufeff",
               "\u2028", "op", "gemm", "shapes", "name", "1", "0x1F", "1e999", ".inf", ".nan", "-.inf", "~", "null",
               "true", "yes", "010", "99999999999999999999", "é", "\U0001f600"]


@FUZZ
@given(st.one_of(st.text(max_size=400), st.lists(st.sampled_from(YAML_PIECES), max_size=120).map("".join)))
def test_random_text(text):
    check(text)


FIELD_NAMES = sorted({name for model in map(spec_model, ops()) for name in model.model_fields}
                     | {"m", "n", "k", "rows", "cols", "a", "b", "out", "input", "block_m", "threads", "stages"})
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**63, 2**64, 10**40]),
    st.floats(), st.text(max_size=20), st.sampled_from(list(ops()) + ["fp16", "bf16", "gfx942", "sm_90"]),
)
KEYS = st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=8), st.integers())
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(KEYS, inner, max_size=5)), max_leaves=30)


@st.composite
def dumped_documents(draw) -> str:
    """A document whose later parts reuse earlier ones (safe_dump writes `&id001` / `*id001`), up to a
    billion-laughs shape (9 levels of 9 references), wrapped in up to 1,500 levels of nesting."""
    pool = draw(st.lists(VALUES, min_size=1, max_size=4))
    for _ in range(draw(st.integers(0, 9))):
        refs = draw(st.lists(st.sampled_from(pool[-2:]), min_size=1, max_size=9))
        pool.append(refs if draw(st.booleans()) else {f"k{i}": r for i, r in enumerate(refs)})
    depth = draw(st.one_of(st.just(0), st.integers(0, 40), st.integers(0, 1500)))
    if not depth:
        return yaml.safe_dump(pool[-1], default_flow_style=draw(st.sampled_from([None, True, False])),
                              allow_unicode=draw(st.booleans()))
    # nesting as text: PyYAML's dumper recurses and cannot write 1,500 levels itself
    inner = yaml.safe_dump(pool[-1], default_flow_style=True, width=2**20).removesuffix("\n...\n").strip()
    opener = draw(st.sampled_from(["[", "{k: ", "[{k: "]))
    closer = "".join({"[": "]", "{": "}"}[c] for c in reversed(opener) if c in "[{")
    return opener * depth + inner + closer * depth + "\n"


@FUZZ
@given(dumped_documents())
def test_random_documents(text):
    check(text)


@FUZZ
@given(dumped_documents())
def test_random_documents_without_libyaml(text):
    """The same documents with the libyaml pre-scan off: PyYAML's composer alone keeps the same bounds."""
    with mock.patch("codegen.core.yamlsrc._prescan", lambda text, file: None):
        check(text)


# ---- (b) mutations of the seed specs --------------------------------------------------------------------------------

SEEDS = {p.name: p.read_text() for p in sorted((Path(__file__).resolve().parents[1] / "specs").glob("*.yaml"))}
SEED_VALUES = {name: yaml.safe_load(text) for name, text in SEEDS.items()}
SPECIAL = st.sampled_from([math.inf, -math.inf, math.nan, 1e308, 5e-324, -0.0, 0, -1, 2**31 - 1, 2**31, 2**64,
                           10**30, "", "\x01", "a\nb", "../x", "x" * 300, None, True, [], {}])
HOSTILE = st.one_of(SPECIAL, SPECIAL, SCALARS, st.lists(SCALARS, max_size=4), st.dictionaries(KEYS, SCALARS, max_size=3))


def _paths(value, path=()):
    yield path
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from _paths(child, (*path, key))


def _at(value, path):
    for part in path:
        value = value[part]
    return value


def _replace(value, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in value.items()}
    return [_replace(v, rest, new) if i == head else v for i, v in enumerate(value)]


def _mutate_tree(draw, value):
    path = draw(st.sampled_from(list(_paths(value))))
    op = draw(st.sampled_from(["replace", "delete", "rename", "copy"]))
    if op == "replace" or not path:
        return _replace(value, path, draw(HOSTILE))
    parent_path, key = path[:-1], path[-1]
    parent = _at(value, parent_path)
    if op == "delete":
        new_parent = ({k: v for k, v in parent.items() if k != key} if isinstance(parent, dict)
                      else [v for i, v in enumerate(parent) if i != key])
    elif op == "rename" and isinstance(parent, dict):  # a near-miss or random key
        new_key = draw(st.one_of(st.just(f"{key}s"), st.just(str(key)[:-1]), KEYS))
        new_parent = {(new_key if k == key else k): v for k, v in parent.items()}
    else:  # copy a sibling (a list grows; a mapping gains the value under another key)
        new_parent = ({**parent, draw(KEYS): parent[key]} if isinstance(parent, dict)
                      else [*parent, parent[key]])
    return _replace(value, parent_path, new_parent)


def _mutate_text(draw, text: str) -> str:
    lines = text.splitlines(keepends=True)
    op = draw(st.sampled_from(["insert", "duplicate_line", "delete_line", "swap_lines"]))
    if op == "insert":  # control characters, YAML syntax and junk at a random place
        at = draw(st.integers(0, len(text)))
        junk = draw(st.one_of(st.sampled_from(YAML_PIECES), st.text(max_size=5),
                              st.sampled_from(["\x00", "\x01", "\x07", "\x7f", "\r", "\x85"])))
        return text[:at] + junk + text[at:]
    i = draw(st.integers(0, len(lines) - 1))
    if op == "duplicate_line":  # duplicate keys, mostly
        return "".join(lines[: i + 1] + lines[i:])
    if op == "delete_line":
        return "".join(lines[:i] + lines[i + 1:])
    j = draw(st.integers(0, len(lines) - 1))
    lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines)


@st.composite
def mutated_seeds(draw) -> str:
    """One seed file with: one value swapped for a hostile one (the rest stays valid, so the rules and the
    instance build run on it), or 1-4 structural edits (delete, replace, rename, copy — a copy is dumped as an
    alias), or 1-4 text edits (junk and control characters inserted, lines duplicated, dropped or swapped)."""
    name = draw(st.sampled_from(sorted(SEEDS)))
    mode = draw(st.sampled_from(["leaf", "tree", "text"]))
    if mode == "leaf":
        value = SEED_VALUES[name]
        leaves = [p for p in _paths(value) if p and not isinstance(_at(value, p), (dict, list))]
        value = _replace(value, draw(st.sampled_from(leaves)), draw(HOSTILE))
        return yaml.safe_dump(value, sort_keys=False)
    if mode == "tree":
        value = SEED_VALUES[name]
        for _ in range(draw(st.integers(1, 4))):
            value = _mutate_tree(draw, value)
        return yaml.safe_dump(value, sort_keys=False, allow_unicode=draw(st.booleans()))
    text = SEEDS[name]
    for _ in range(draw(st.integers(1, 4))):
        text = _mutate_text(draw, text)
    return text


@FUZZ
@given(mutated_seeds())
def test_mutated_seed_specs(text):
    check(text)


def test_the_seeds_themselves_pass_the_check():
    """The fuzz strategies start from valid specs: the check accepts them without error lines."""
    assert SEEDS
    for text in SEEDS.values():
        assert check(text) == []


def test_the_check_can_fail(monkeypatch: pytest.MonkeyPatch):
    """`check` is not vacuous: a line without file:LINE:COL or [rule], a second line, a foreign exception and an
    over-budget case each fail it."""
    for bad in (f"{FILE}: no location [io]", f"{FILE}:1:1: no rule", f"{FILE}:1:1: two\nlines [yaml]"):
        assert not LINE.fullmatch(bad)

    def raising(exc):
        def parse(text, file):
            raise exc
        return parse

    monkeypatch.setattr(sys.modules[__name__], "parse_specs", raising(SpecError(FILE, "no location", "io")))
    with pytest.raises(AssertionError):
        check("")
    monkeypatch.setattr(sys.modules[__name__], "parse_specs", raising(RecursionError()))
    with pytest.raises(RecursionError):
        check("")
    monkeypatch.setattr(sys.modules[__name__], "parse_specs", lambda text, file: [bytearray(CASE_PEAK_BYTES)])
    monkeypatch.setattr(sys.modules[__name__], "build_instances", lambda loaded: [])
    with pytest.raises(AssertionError, match="MiB"):
        check("")


# ---- (c) the lockfile reader ------------------------------------------------------------------------------------
# Whatever the text, codegen.generate.lockfile.parse_lockfile returns a LockFile every value of which is what the schema
# promises, or raises LockfileError: one line `FILE: ... [lockfile_<rule>]` -- never another exception.

LOCK_FILE = "tuned/sm_90/NVIDIA_H200.json"
LOCK_LINE = re.compile(re.escape(LOCK_FILE) + r": .* \[lockfile_[a-z]+\]")
LOCK_SEED = (Path(__file__).resolve().parents[1] / "tuned" / "sm_90" / "NVIDIA_H200.json").read_text()
LOCK_SEED_VALUE = json.loads(LOCK_SEED)
JSON_PIECES = ['{', '}', '[', ']', ':', ',', '"', '\\', '"format"', '"entries"', '"shape"', '"time_ms"', '1', '1.9',
               '-0', '1e400', '-1e400', 'NaN', 'Infinity', '-Infinity', 'true', 'null', '9' * 30, '"\\u0000"',
               '"\\ud800"', '"\x1b[31m"', ' ', '\n', '\x00', '\ufeff']
LOCK_HOSTILE = st.one_of(SPECIAL, SCALARS, st.sampled_from([1.9, 1e400, -1e400, 0.0, True, False, "NaN", "1", "a" * 600,
                                                            "\x1b[31m", "NVIDIA H100", 2**40, [[[[[[[[[1]]]]]]]]]]),
                         st.lists(SCALARS, max_size=4), st.dictionaries(st.text(max_size=8), SCALARS, max_size=3))


def check_lock(text: str):
    """Parse `text` as the lockfile of sm_90 on an NVIDIA H200; assert a clean result or one clean line, in bounds."""
    from codegen.core.hardware import Target
    from codegen.generate.lockfile import LockfileError, parse_lockfile

    tracemalloc.start()
    start = time.perf_counter()
    try:
        lock = parse_lockfile(text, LOCK_FILE, file_name="NVIDIA_H200.json", target=Target.SM_90)
        line = None
    except LockfileError as exc:
        lock, line = None, str(exc)
    finally:
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if line is not None:
        assert LOCK_LINE.fullmatch(line), line
    else:
        keys = [e.key for e in lock.entries]
        assert len(keys) == len(set(keys))
        assert all(e.device == lock.device == "NVIDIA H200" for e in lock.entries)
        for e in lock.entries:
            assert e.shape and all(type(s) is int and 0 < s <= MAX_INT32 for s in e.shape)
            for c in (e.winner, e.runner_up) if e.runner_up else (e.winner,):
                assert type(c.time_ms) is float and math.isfinite(c.time_ms) and c.time_ms > 0
                assert all(type(v) in (int, str, bool) for v in c.tunables.values())
    assert elapsed < CASE_SECONDS and peak < CASE_PEAK_BYTES
    return line


@st.composite
def mutated_lockfiles(draw) -> str:
    """The committed lockfile with 1-3 structural edits (a value replaced by a hostile one, a key deleted,
    renamed or copied, an entry repeated), dumped as JSON (NaN and Infinity as Python writes them), or with
    1-3 text edits (JSON junk inserted, a slice deleted)."""
    if draw(st.booleans()):
        value = LOCK_SEED_VALUE
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.integers(0, 5)) == 0 and isinstance(value, dict) and isinstance(value.get("entries"), list) \
                    and value["entries"]:
                entries = value["entries"]
                value = {**value, "entries": [*entries, draw(st.sampled_from(entries))]}
            else:
                value = _mutate_tree(draw, value)
        return json.dumps(value, indent=draw(st.sampled_from([None, 2])))
    text = LOCK_SEED
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:at] + draw(st.sampled_from(JSON_PIECES)) + text[at:]
        else:
            text = text[:at] + text[at + draw(st.integers(1, 40)):]
    return text


@FUZZ
@given(mutated_lockfiles())
def test_mutated_lockfiles(text):
    check_lock(text)


@FUZZ
@given(st.one_of(st.text(max_size=300), st.lists(st.sampled_from(JSON_PIECES), max_size=150).map("".join),
                 st.recursive(LOCK_HOSTILE, lambda inner: st.one_of(st.lists(inner, max_size=4),
                              st.dictionaries(st.sampled_from(["format", "target", "device", "entries", "x"]), inner,
                                              max_size=4)), max_leaves=20).map(json.dumps)))
def test_random_lockfile_text(text):
    check_lock(text)


def test_the_lockfile_seed_passes_and_the_check_can_fail():
    """The committed lockfile is accepted (the mutations start from a valid file); a foreign exception, a second
    line and a line without the rule each fail `check_lock`."""
    assert check_lock(LOCK_SEED) is None
    for bad in (f"{LOCK_FILE}: no rule", f"{LOCK_FILE}: two\nlines [lockfile_json]", "elsewhere: x [lockfile_json]"):
        assert not LOCK_LINE.fullmatch(bad)
    with mock.patch("codegen.generate.lockfile.parse_lockfile", side_effect=RecursionError()), pytest.raises(RecursionError):
        check_lock(LOCK_SEED)
