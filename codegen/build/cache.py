"""A content-addressed cache of build artifacts under .cache/build/.

An entry is a folder named by the sha256 of its key material (kernel name, code hash, shape, target, tilelang
version, compiler fingerprint...). It is assembled in a private staging folder, its manifest (the
sha256 and size of every artifact) written last, and moved into place with one rename: readers
see a whole entry or none. A reader checks every artifact against the manifest, so a corrupt or
truncated entry is reported and rebuilt, never trusted. Writers of one key are serialised by a
file lock, so concurrent builds (two shells, parallel test runs) build an entry once. A staging
folder is named by its key and only exists while its writer holds that key's lock, so one whose lock
is free was left by a writer that was killed, and is removed (sweep_staging).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from codegen.core.errors import TilegenError

CACHE_FORMAT = 1
MANIFEST = "manifest.json"
STALE_STAGING_S = 6 * 3600  # a staging folder not named by a key (an older layout) is removed at this age
_KEY = re.compile(r"[0-9a-f]{64}")


def cache_key(material: Mapping[str, object]) -> str:
    blob = json.dumps({"format": CACHE_FORMAT, **material}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Lookup:
    """A cache probe: `path` is the verified entry, or None with `problem` saying why it was not usable
    (None for a plain miss)."""

    path: Path | None
    problem: str | None = None


@dataclass(frozen=True)
class BuildCache:
    root: Path

    def entry(self, key: str) -> Path:
        return self.root / "entries" / key[:2] / key

    def lock(self, key: str) -> FileLock:
        path = self.root / "locks" / f"{key}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(path))

    def log_path(self, key: str) -> Path:
        """Where the log of a failed build of `key` is kept (successful builds keep theirs in the entry)."""
        return self.root / "logs" / f"{key}.log"

    def lookup(self, key: str) -> Lookup:
        entry = self.entry(key)
        manifest_path = entry / MANIFEST
        if not entry.exists():
            return Lookup(path=None)
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            if manifest.get("key") != key:
                return Lookup(path=None, problem="manifest names another key")
            for name, want in sorted(manifest["artifacts"].items()):
                f = entry / name
                if not f.is_file():
                    return Lookup(path=None, problem=f"{name} is missing")
                if f.stat().st_size != want["bytes"]:
                    return Lookup(path=None, problem=f"{name} is {f.stat().st_size} B, manifest says {want['bytes']} B")
                if _sha256(f) != want["sha256"]:
                    return Lookup(path=None, problem=f"{name} does not match its sha256")
        except FileNotFoundError:
            return Lookup(path=None, problem="manifest is missing")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return Lookup(path=None, problem=f"unreadable manifest ({type(exc).__name__})")
        return Lookup(path=entry)

    @contextmanager
    def staging(self, key: str) -> Iterator[Path]:
        """A private folder to assemble an entry in; removed on any exit (Ctrl-C included) unless
        `publish` moved it into place."""
        parent = self.root / "staging"
        parent.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=parent))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def publish(self, key: str, staged: Path, material: Mapping[str, object]) -> Path:
        """Write the manifest of every file in `staged`, then move it into place. Hold `lock(key)`."""
        artifacts = {
            f.name: {"sha256": _sha256(f), "bytes": f.stat().st_size}
            for f in sorted(staged.iterdir()) if f.is_file() and f.name != MANIFEST
        }
        manifest = {"format": CACHE_FORMAT, "key": key, "material": material, "artifacts": artifacts}
        tmp = staged / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, staged / MANIFEST)
        dest = self.entry(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():  # a corrupt entry: move it aside first (rename onto a non-empty folder fails)
            trash = Path(tempfile.mkdtemp(prefix=f"{key}.old.", dir=self.root / "staging"))
            os.replace(dest, trash / "entry")
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(staged, dest)
        return dest

    def open(self) -> None:
        """Create the cache's folders, or say in one error why they cannot be (a --cache-dir that is a file, a
        read-only place), before any build starts -- not once per kernel from the workers."""
        for sub in ("entries", "locks", "logs", "staging"):
            folder = self.root / sub
            try:
                folder.mkdir(parents=True, exist_ok=True)
                probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".probe.", delete=True)  # noqa: SIM115
                probe.close()
            except OSError as exc:
                raise TilegenError(f"build cache {self.root}: cannot write {folder}: {exc.strerror or exc}") from None

    def sweep_staging(self) -> None:
        """Remove the staging folders no writer is using: those whose key's lock is free (left by a
        build that was killed mid-way; one stopped by Ctrl-C removes its own)."""
        parent = self.root / "staging"
        if not parent.is_dir():
            return
        now = time.time()
        for p in sorted(parent.iterdir()):
            key = p.name.split(".")[0]
            if not _KEY.fullmatch(key):
                try:
                    if now - p.stat().st_mtime > STALE_STAGING_S:
                        shutil.rmtree(p, ignore_errors=True)
                except OSError:
                    pass
                continue
            lock = self.lock(key)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue  # being written now
            try:
                shutil.rmtree(p, ignore_errors=True)
            finally:
                lock.release()
