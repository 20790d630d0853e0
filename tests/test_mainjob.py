"""`tilegen run` on a GPU verifies and benches what that GPU runs: the hand configurations and its own lockfile's
kernels, not the kernels only another device's lockfile chose (RenderedFile.for_device)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from codegen.core.hardware import Target
from codegen.core.toolchain import ToolchainMissing
from codegen.generate.pipeline import Project
from codegen.generate.render import RenderedFile, SpecRef

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
FILES = Project().rendered()


def _only_tuned_on(device: str) -> list[RenderedFile]:
    return [f for f in FILES if f.specs and all(s.tuned_on == device for s in f.specs)]


def test_for_device_keeps_hand_refs_and_that_device_s_tuned_ones():
    f = FILES[0]
    hand = SpecRef(file="specs/a.yaml", name="a", shapes=((1, 2, 3),))
    h100 = SpecRef(file="specs/b.yaml", name="b", shapes=((4, 5, 6),), tuned_on=H100)
    h200 = SpecRef(file="specs/c.yaml", name="c", shapes=((7, 8, 9),), tuned_on=H200)
    mixed = RenderedFile(path=f.path, text=f.text, uri=f.uri, instance=f.instance, specs=(hand, h100, h200),
                         code_sha256=f.code_sha256)
    on_h200 = mixed.for_device(H200)
    assert on_h200.specs == (hand, h200) and on_h200.instance.shapes == ((1, 2, 3), (7, 8, 9))
    only_h100 = RenderedFile(path=f.path, text=f.text, uri=f.uri, instance=f.instance, specs=(h100,),
                             code_sha256=f.code_sha256)
    assert only_h100.for_device(H200) is None and only_h100.for_device(H100).instance.shapes == ((4, 5, 6),)


@pytest.mark.parametrize(("device", "other"), [(H200, H100), (H100, H200)])
def test_the_main_job_leaves_other_devices_tuned_kernels_to_them(monkeypatch, tmp_path, device, other):
    from codegen.run import gpu as gpu_mod
    from codegen.run import gpucli
    from codegen.run.mainjob import run_main_job

    assert _only_tuned_on(other), f"the committed lockfiles hold kernels only {other}'s chose"
    seen: dict[str, list[RenderedFile]] = {}

    def fake(step):
        def run(files, **kw):
            seen[step] = files
            return SimpleNamespace(ok=True)
        return run

    def no_toolchain(target, root):
        raise ToolchainMissing(f"{target}: not here")

    monkeypatch.setattr(gpu_mod, "detect_gpu", lambda: SimpleNamespace(name=device, run_target=Target.SM_90))
    monkeypatch.setattr(gpucli, "run_verify", fake("verify"))
    monkeypatch.setattr(gpucli, "run_bench", fake("bench"))
    monkeypatch.setattr("codegen.targets.find_toolchain", no_toolchain)
    project = SimpleNamespace(root=tmp_path, instances=list, rendered=lambda: FILES,
                              generate=lambda: SimpleNamespace(written=[], unchanged=[], removed=[]))
    report = run_main_job(project, jobs=1, report_dir=tmp_path)
    uris = {f.uri for f in seen["verify"]}
    assert uris == {f.uri for f in seen["bench"]}
    assert not uris & {f.uri for f in _only_tuned_on(other)}
    assert {f.uri for f in FILES if f.is_hand} <= uris
    assert {f.uri for f in _only_tuned_on(device)} <= uris
    for f in seen["verify"]:
        assert all(not s.tuned_on or s.tuned_on == device for s in f.specs)
    left = len(FILES) - len(seen["verify"])
    assert f"{left} kernel(s) tuned for other devices only" in next(s.detail for s in report.steps if s.name == "verify")
