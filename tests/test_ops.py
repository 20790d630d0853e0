"""tilegen ops on the CPU: dispatch (tuned, spec, M buckets, dynamic_m, dynamic_kv, fallback), its accounting and warnings,
strict mode, the input checks, the compile cache's keys, and the custom ops under torch.compile -- with kernels
that compute with torch (tests/opsfakes.py) in place of the compiled TileLang ones."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import warnings

import pytest
import torch
from opsfakes import KernelCallError, TorchKernels

import tilegen
from codegen.core.hardware import Target
from codegen.generate.lockfile import (
    Candidate,
    LockEntry,
    LockFile,
    hand_hash,
    local_versions,
    lock_path,
    winner_instance,
    write_lockfile,
)
from codegen.generate.render import render
from codegen.ops import FallbackWarning, NoKernelError, OpsError, OpsInputError, library, stats_table
from codegen.ops.adapters import ADAPTERS, GemmArgs
from codegen.ops.cache import ENTRY_FILE, TILELANG_CACHE_ENV, OpsCache, environment_material, kernel_material
from codegen.ops.dispatch import BUCKET_MAX_BLOCK_RATIO, resolve
from codegen.spec.load import load_spec_files

H200 = "NVIDIA H200"
SPECS = """\
- name: lin_decode
  op: gemm
  dtypes: {a: bf16, b: bf16, out: bf16, accumulate: fp32}
  layout: nt
  shapes:
    - {m: 16, n: 256, k: 128}
    - {m: 64, n: 256, k: 128}
  tiling: {block_m: 16, block_n: 32, block_k: 64, threads: 128}
  pipeline: {stages: 2}
  tail: predicated
  targets: [sm_90]
  search:
    sm_90:
      tiling: {block_n: [32, 64]}
- name: lin_dynamic
  op: gemm
  dtypes: {a: bf16, b: bf16, out: bf16, accumulate: fp32}
  layout: nt
  dynamic_m: {min: 1, max: 1024}
  shapes:
    - {m: 128, n: 256, k: 128}
  tiling: {block_m: 64, block_n: 64, block_k: 64, threads: 128}
  pipeline: {stages: 2}
  tail: predicated
  targets: [sm_90]
- name: gemm_splitk
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16, accumulate: fp32}
  layout: nn
  shapes:
    - {m: 64, n: 64, k: 1024}
  tiling: {block_m: 64, block_n: 64, block_k: 64, threads: 128}
  pipeline: {stages: 2}
  split_k: 2
  targets: [sm_90]
- name: gemm_splitk_fixup
  op: gemm
  dtypes: {a: fp16, b: fp16, out: fp16, accumulate: fp32}
  layout: nn
  shapes:
    - {m: 128, n: 64, k: 2048}
  tiling: {block_m: 64, block_n: 64, block_k: 64, threads: 128}
  pipeline: {stages: 2}
  split_k: 4
  split_k_sum: fixup
  targets: [sm_90]
- name: rms
  op: rmsnorm
  dtypes: {input: bf16, out: bf16, accumulate: fp32}
  eps: 1.0e-5
  shapes:
    - {rows: 8, cols: 256}
  threads: 32
  vector: 8
  targets: [sm_90]
- name: ln
  op: layernorm
  dtypes: {input: fp16, out: fp16, accumulate: fp32}
  eps: 1.0e-5
  shapes:
    - {rows: 8, cols: 1024}
  threads: 64
  vector: 8
  split: 2
  targets: [sm_90]
- name: sm
  op: softmax
  dtypes: {input: fp32, out: fp32, accumulate: fp32}
  shapes:
    - {rows: 6, cols: 128}
  threads: 32
  vector: 4
  targets: [sm_90]
- name: rope_small
  op: rope
  dtypes: {input: bf16, out: bf16, accumulate: fp32}
  shapes:
    - {tokens: 4, heads: 4, kv_heads: 2}
  head_dim: 64
  rotary_dim: 64
  threads: 32
  vector: 8
  tail: predicated
  targets: [sm_90]
- name: attn_prefill
  op: attention
  dtypes: {input: bf16, out: bf16, accumulate: fp32}
  shapes:
    - {batch: 1, heads: 4, kv_heads: 2, seq_q: 128, seq_kv: 128}
  head_dim: 64
  causal: top_left
  tiling: {block_m: 64, block_n: 64, threads: 128}
  pipeline: {stages: 2}
  targets: [sm_90]
- name: attn_decode
  op: attention
  variant: decode
  dtypes: {input: bf16, out: bf16, accumulate: fp32}
  shapes:
    - {batch: 2, heads: 4, kv_heads: 2, seq_q: 1, seq_kv: 256}
  head_dim: 64
  tiling: {block_m: 64, block_n: 64, threads: 128}
  pipeline: {stages: 2}
  split_kv: 2
  targets: [sm_90]
- name: attn_decode_dyn
  op: attention
  variant: decode
  dtypes: {input: bf16, out: bf16, accumulate: fp32}
  shapes:
    - {batch: 2, heads: 4, kv_heads: 2, seq_q: 1, seq_kv: 512}
  head_dim: 64
  dynamic_kv: {min: 128, max: 4096}
  tiling: {block_m: 64, block_n: 64, threads: 128}
  pipeline: {stages: 2}
  split_kv: 2
  tail: predicated
  targets: [sm_90]
- name: attn_decode_fixup
  op: attention
  variant: decode
  dtypes: {input: bf16, out: bf16, accumulate: fp32}
  shapes:
    - {batch: 1, heads: 8, kv_heads: 2, seq_q: 1, seq_kv: 1024}
  head_dim: 64
  tiling: {block_m: 64, block_n: 64, threads: 128}
  pipeline: {stages: 2}
  split_kv: 4
  split_kv_combine: fixup
  targets: [sm_90]
"""
TUNED_SHAPE = (16, 256, 128)
WINNER = {"tiling.block_n": 64}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project of small specs with one lockfile entry (lin_decode at 16x256x128 on the H200: block_n 64)."""
    root = tmp_path_factory.mktemp("ops_project")
    (root / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (root / "specs").mkdir()
    (root / "specs" / "ops.yaml").write_text(SPECS, encoding="utf-8")
    loaded = {ls.spec.name: ls for ls in load_spec_files([root / "specs"], root)}
    ls = loaded["lin_decode"]
    inst, why = winner_instance(ls, Target.SM_90, WINNER)
    assert inst is not None, why
    entry = LockEntry(spec="lin_decode", hand_hash=hand_hash(ls, Target.SM_90), shape=TUNED_SHAPE, device=H200,
                      versions=local_versions(), winner=Candidate(uri=inst.uri(), tunables=WINNER, time_ms=0.01,
                                                                  code_sha256=render(inst).code_sha256),
                      runner_up=None, strategy="test")
    write_lockfile(lock_path(root, Target.SM_90, H200), LockFile(target=Target.SM_90, device=H200, entries=(entry,)))
    return root


def _load(project, **kw):
    kw = {"backend": TorchKernels(), "target": Target.SM_90, "device_name": H200} | kw
    return tilegen.load(project, **kw)


@pytest.fixture
def ops(project):
    return _load(project)


def _routes(ops) -> dict[tuple, tuple[str, str]]:
    return {(s.op, s.shape): (s.route, s.kernel) for s in ops.stats()}


def bf16(*shape, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))) * scale).to(torch.bfloat16)


# ---- dispatch --------------------------------------------------------------------------------------------------

def test_import_tilegen_gives_the_projects_ops(ops):
    assert isinstance(ops, tilegen.Ops)
    wants = {w.describe() for w in ops.kernels()}
    assert "gemm layout=nt dtypes=bf16/bf16/bf16" in wants
    assert "rmsnorm dtypes=bf16/bf16 eps=1e-05" in wants
    assert any(w.startswith("attention variant=decode") for w in wants)


def test_linear_routes_tuned_spec_bucket_dynamic_and_fallback(ops):
    w = bf16(256, 128, scale=0.1)
    tuned_uri = ops.route("gemm", GemmArgs(bf16(16, 128), w, "nt", torch.bfloat16, "")).kernel
    assert "16x64x64" in tuned_uri  # the lockfile's winner (block_n 64), not the hand 16x32x64
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for m in (16, 64, 8, 128, 100, 2000):
            x = bf16(m, 128)
            y = ops.linear(x, w)
            assert y.shape == (m, 256) and y.is_contiguous()
            torch.testing.assert_close(y, (x.double() @ w.double().t()).to(torch.bfloat16))
        y3 = ops.linear(bf16(2, 4, 128), w)  # leading dimensions are M
        assert y3.shape == (2, 4, 256)
    routes = _routes(ops)
    assert routes[("gemm", (16, 256, 128))] == ("tuned", tuned_uri)
    assert routes[("gemm", (64, 256, 128))][0] == "spec"
    assert routes[("gemm", (8, 256, 128))] == ("bucket", tuned_uri)  # run at the tuned M = 16, A padded
    assert routes[("gemm", (128, 256, 128))][0] == "spec"  # a shape of lin_dynamic
    assert routes[("gemm", (100, 256, 128))][0] == "dynamic"
    assert routes[("gemm", (2000, 256, 128))] == ("fallback", "torch")  # over dynamic_m's max
    fallbacks = [str(c.message) for c in caught if c.category is FallbackWarning]
    assert len(fallbacks) == 1 and fallbacks[0].startswith("tilegen.gemm 2000x256x128 ")
    bucket = next(s for s in ops.stats() if s.route == "bucket")
    assert "m=8 run at m=16" in bucket.detail
    # the dynamic kernel was compiled once for its (n, k), whatever M
    assert [s for u, s in ops.backend.compiled if "dynm" in u] == [("m", 256, 128)]


def test_decode_attention_routes_a_growing_kv_cache_to_the_dynamic_kernel(ops):
    qd = bf16(2, 1, 4, 64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for skv in (256, 512, 300, 4096, 100, 5000):  # attn_decode's shape, attn_decode_dyn's, in its range, out of it
            kd, vd = bf16(2, skv, 2, 64), bf16(2, skv, 2, 64)
            torch.testing.assert_close(ops.attention_decode(qd, kd, vd), _sdpa(qd, kd, vd, False), atol=2e-2, rtol=2e-2)
    assert sorted(str(c.message).split()[1] for c in caught if c.category is FallbackWarning) == [
        "2x4x2x1x100", "2x4x2x1x5000"]
    routes = _routes(ops)
    assert routes[("attention_decode", (2, 4, 2, 1, 256))][0] == "spec"  # exact shapes first
    dyn = routes[("attention_decode", (2, 4, 2, 1, 512))][1]
    assert "dynkv" in dyn and routes[("attention_decode", (2, 4, 2, 1, 300))] == ("dynamic", dyn)
    assert routes[("attention_decode", (2, 4, 2, 1, 4096))] == ("dynamic", dyn)
    assert routes[("attention_decode", (2, 4, 2, 1, 100))] == ("fallback", "torch")  # under dynamic_kv's min
    assert routes[("attention_decode", (2, 4, 2, 1, 5000))] == ("fallback", "torch")  # over its max
    why = next(s.detail for s in ops.stats() if s.shape == (2, 4, 2, 1, 5000))
    assert "2x4x2x1x128..4096" in why, why
    # one compile for every KV length: seq_kv symbolic
    assert [s for u, s in ops.backend.compiled if "dynkv" in u] == [(2, 4, 2, 1, "seq_kv")]
    # a different batch is another compile shape, which the spec does not list: not served
    assert ops.route("attention_decode", _attn(bf16(1, 1, 4, 64), bf16(1, 300, 2, 64))).route == "fallback"


def _attn(q, k):
    from codegen.ops.adapters import AttentionArgs

    return AttentionArgs(q, k, k, "none", None)


def test_a_lockfile_entry_answers_only_for_its_device(project):
    other = _load(project, device_name="NVIDIA H100")
    x, w = bf16(16, 128), bf16(256, 128)
    route = other.route("gemm", GemmArgs(x, w, "nt", torch.bfloat16, ""))
    assert route.route == "spec" and "16x32x64" in route.kernel  # the hand configuration


def _two_tuned_specs(root, times_ms):
    """A project of two specs of one kind (gemv and tiled, say) that list one shape, each with a lockfile entry
    there on the H200 whose winner measured times_ms[i]."""
    spec = """\
- name: {name}
  op: gemm
  dtypes: {{a: bf16, b: bf16, out: bf16, accumulate: fp32}}
  layout: nt
  shapes: [{{m: 16, n: 256, k: 128}}]
  tiling: {{block_m: 16, block_n: 32, block_k: {bk}, threads: 128}}
  pipeline: {{stages: 2}}
  tail: predicated
  targets: [sm_90]
  search:
    sm_90:
      tiling: {{block_n: [32, 64]}}
"""
    (root / "tilegen.toml").write_text('specs = ["specs"]\n', encoding="utf-8")
    (root / "specs").mkdir()
    (root / "specs" / "two.yaml").write_text(spec.format(name="a_first", bk=64) + spec.format(name="b_second", bk=128),
                                             encoding="utf-8")
    entries = []
    for ls, ms in zip(load_spec_files([root / "specs"], root), times_ms, strict=True):
        inst, why = winner_instance(ls, Target.SM_90, WINNER)
        assert inst is not None, why
        entries.append(LockEntry(spec=ls.spec.name, hand_hash=hand_hash(ls, Target.SM_90), shape=TUNED_SHAPE,
                                 device=H200, versions=local_versions(), runner_up=None, strategy="test",
                                 winner=Candidate(uri=inst.uri(), tunables=WINNER, time_ms=ms,
                                                  code_sha256=render(inst).code_sha256)))
    write_lockfile(lock_path(root, Target.SM_90, H200), LockFile(target=Target.SM_90, device=H200,
                                                                 entries=tuple(entries)))
    return {e.spec: e.winner.uri for e in entries}


@pytest.mark.parametrize("times_ms, fastest", [((0.02, 0.01), "b_second"), ((0.01, 0.02), "a_first")])
def test_of_two_specs_tuned_at_one_shape_the_faster_winner_serves_it(tmp_path, times_ms, fastest):
    uris = _two_tuned_specs(tmp_path, times_ms)
    ops = _load(tmp_path)
    x, w = bf16(16, 128), bf16(256, 128, scale=0.1)
    route = ops.route("gemm", GemmArgs(x, w, "nt", torch.bfloat16, ""))
    assert (route.route, route.spec, route.kernel) == ("tuned", fastest, uris[fastest])
    assert "the fastest tuned entry at this shape" in route.detail
    # a call at a smaller M pads to the tuned M: the bucket takes the faster kernel too
    assert ops.route("gemm", GemmArgs(bf16(9, 128), w, "nt", torch.bfloat16, "")).kernel == uris[fastest]
    torch.testing.assert_close(ops.linear(x, w), (x.double() @ w.double().t()).to(torch.bfloat16))


def test_bucket_pads_at_most_the_block_ratio(ops):
    want, _ = ADAPTERS["gemm"].call(ops._ctx, GemmArgs(bf16(8, 128), bf16(256, 128), "nt", torch.bfloat16, ""))
    hand = [dataclasses.replace(c, shapes=((64, 256, 128),)) for c in ops.kernels()[want]
            if c.spec == "lin_decode" and not c.tuned_on]
    assert hand[0].instance.block_m == 16 and BUCKET_MAX_BLOCK_RATIO == 2
    assert resolve(want, (32, 256, 128), hand, H200).route == "bucket"  # 4 row blocks for 2
    assert resolve(want, (32, 256, 128), hand, H200).run_shape == (64, 256, 128)
    refused = resolve(want, (8, 256, 128), hand, H200)  # 4 row blocks for 1
    assert refused.route == "fallback" and "64x256x128" in refused.detail
    assert resolve(want, (65, 256, 128), hand, H200).route == "fallback"  # no M at or above


def test_fallback_warns_once_per_shape_and_is_counted(ops):
    x, w = bf16(3000, 128), bf16(256, 128)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops.linear(x, w)
        ops.linear(x, w)
        ops.linear(bf16(5, 128), bf16(512, 128))
    messages = [str(c.message) for c in caught if c.category is FallbackWarning]
    assert len(messages) == 2
    assert messages[0].startswith("tilegen.gemm 3000x256x128 (layout=nt dtypes=bf16/bf16/bf16): torch fallback: ")
    assert "m 1..1024 x 256x128" in messages[0]  # what the kernels of this kind do serve
    assert "5x512x128" in messages[1]
    calls = {(s.shape, s.route): s.calls for s in ops.stats()}
    assert calls[((3000, 256, 128), "fallback")] == 2 and calls[((5, 512, 128), "fallback")] == 1
    table = stats_table(ops.stats())
    assert table.splitlines()[0] == "| op | want | shape | route | kernel | calls | why |"
    assert "| 3000x256x128 | fallback | torch | 2 |" in table
    ops.reset_stats()
    assert ops.stats() == []


def test_no_kernel_of_the_kind_says_so(ops):
    with pytest.warns(FallbackWarning, match="no kernel of the project is gemm layout=nt dtypes=fp16/fp16/fp16"):
        ops.linear(torch.randn(4, 8).half(), torch.randn(16, 8).half())


def test_strict_mode_raises_instead_of_falling_back(project):
    strict = _load(project, strict=True)
    for _ in range(2):
        with pytest.raises(NoKernelError, match=r"tilegen.gemm 3000x256x128 .*strict mode"):
            strict.linear(bf16(3000, 128), bf16(256, 128))
    assert strict.stats() == []  # a refused call ran nothing: not counted as a fallback
    assert strict.linear(bf16(16, 128), bf16(256, 128)).shape == (16, 256)  # kernels still run
    assert [(s.shape, s.calls) for s in strict.stats()] == [((16, 256, 128), 1)]


def test_the_gemm_fallback_to_a_wider_output_rounds_the_fp32_product_once(ops):
    """16-bit inputs and an fp32 output: the product in fp32, not rounded to the inputs' dtype first."""
    a, b = bf16(8, 12), bf16(12, 10)
    with pytest.warns(FallbackWarning):
        y = ops.gemm(a, b, out_dtype=torch.float32)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, a.float() @ b.float(), rtol=1e-6, atol=1e-6)
    assert (y - (a @ b).float()).abs().max() > 0  # the negative control: the bf16 product differs


def test_arguments_that_are_not_tensors_or_numbers_are_refused_by_name(ops):
    x, w = bf16(4, 256), bf16(256)
    for call, message in (
            (lambda: ops.gemm(None, w), "tilegen.gemm: a must be a torch.Tensor, not NoneType"),
            (lambda: ops.softmax([1.0, 2.0]), "tilegen.softmax: x must be a torch.Tensor, not list"),
            (lambda: ops.rmsnorm([1.0, 2.0], w, 1e-5), "tilegen.rmsnorm: x must be a torch.Tensor, not list"),
            (lambda: ops.rmsnorm(x, w, None), "tilegen.rmsnorm: eps must be a number, not NoneType"),
            (lambda: ops.rmsnorm(x, w, "1e-5"), "tilegen.rmsnorm: eps must be a number, not str"),
            (lambda: ops.linear(x, bf16(8, 256), scale="a"), "tilegen.gemm: scale must be a number, not str"),
            (lambda: ops.attention(*(bf16(1, 4, 2, 64),) * 3, scale="a"), "tilegen.attention: scale must be a number")):
        with pytest.raises(OpsInputError, match=re.escape(message)):
            call()
    assert ops.rmsnorm(x, w, 1e-5).shape == ops.rmsnorm(x, w, 1).shape == (4, 256)  # int and float numbers pass


def test_load_takes_the_target_by_name(project):
    assert _load(project, target="sm_90").target == Target.SM_90
    with pytest.raises(OpsError, match="target 'sm_91' is not one of gfx942, gfx950, sm_90"):
        _load(project, target="sm_91")


def test_a_copied_model_shares_the_ops_it_calls(ops):
    """copy.deepcopy of a model holding the Ops (a patched layer) keeps calling the same Ops: its handle names it."""
    import copy

    holder = torch.nn.Module()
    holder.ops = ops
    assert copy.deepcopy(holder).ops is ops and copy.copy(ops) is ops


def test_zero_columns_keep_their_rows_in_the_shape_and_head_dim_zero_is_refused(ops):
    with pytest.warns(FallbackWarning, match=r"tilegen.softmax 4x0 "):
        assert ops.softmax(torch.randn(4, 0).half()).shape == (4, 0)
    assert [s.shape for s in ops.stats() if s.op == "softmax"] == [(4, 0)]
    q = torch.randn(1, 3, 2, 0).half()
    with pytest.raises(OpsInputError, match="head_dim is 0"):
        ops.attention(q, q, q)


def test_every_family_runs_its_kernel_with_its_workspaces(ops):
    g = torch.Generator().manual_seed(0)
    x = bf16(8, 256)
    w = (1 + 0.1 * torch.randn(256, generator=g)).to(torch.bfloat16)
    torch.testing.assert_close(ops.rmsnorm(x, w, 1e-5), ADAPTERS["rmsnorm"].fallback(ops._ctx, _row(x, w, None, 1e-5)))
    xl, wl, bl = torch.randn(2, 4, 1024, generator=g).half(), torch.randn(1024, generator=g).half(), torch.randn(1024).half()
    torch.testing.assert_close(ops.layernorm(xl, wl, bl, 1e-5), ADAPTERS["layernorm"].fallback(ops._ctx, _row(xl, wl, bl, 1e-5)))
    xs = torch.randn(6, 128, generator=g)
    torch.testing.assert_close(ops.softmax(xs), torch.softmax(xs, -1))
    a, b = torch.randn(64, 1024, generator=g).half(), torch.randn(1024, 64, generator=g).half()
    torch.testing.assert_close(ops.gemm(a, b, layout="nn"), (a.double() @ b.double()).half())  # split-K workspace
    q, k = bf16(4, 4, 64), bf16(4, 2, 64)
    angle = torch.arange(4.0)[:, None] * 10000 ** (-torch.arange(0, 64, 2) / 64)
    qo, ko = ops.rope(q, k, angle.cos(), angle.sin())
    fq, fk = ADAPTERS["rope"].fallback(ops._ctx, _rope(q, k, angle.cos(), angle.sin()))
    assert qo.shape == q.shape and ko.shape == k.shape
    torch.testing.assert_close(qo, fq)
    torch.testing.assert_close(ko, fk)
    qa, ka, va = bf16(1, 128, 4, 64), bf16(1, 128, 2, 64), bf16(1, 128, 2, 64)
    torch.testing.assert_close(ops.attention(qa, ka, va, causal=True), _sdpa(qa, ka, va, True), atol=2e-2, rtol=2e-2)
    qd, kd, vd = bf16(2, 1, 4, 64), bf16(2, 256, 2, 64), bf16(2, 256, 2, 64)
    torch.testing.assert_close(ops.attention_decode(qd, kd, vd), _sdpa(qd, kd, vd, False), atol=2e-2, rtol=2e-2)
    routes = {s.op: s.route for s in ops.stats()}
    assert routes == {"rmsnorm": "spec", "layernorm": "spec", "softmax": "spec", "gemm": "spec", "rope": "spec",
                      "attention": "spec", "attention_decode": "spec"}


def test_a_fixup_kernels_tile_counters_are_one_zeroed_buffer_per_stream_reused_by_every_call(ops):
    """split_k_sum fixup: the counters must be zero on entry and the kernel leaves them zero, so the ops zero one
    buffer when the route is first run and pass it to every later call (the fake kernel checks zero on entry)."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(128, 2048, generator=g).half(), torch.randn(2048, 64, generator=g).half()
    for _ in range(3):
        torch.testing.assert_close(ops.gemm(a, b, layout="nn"), (a.double() @ b.double()).half())
    [plan] = [p for p in ops._plans.values() if p.route.shape == (128, 64, 2048)]
    assert "sk4fx" in plan.route.kernel and plan.calls == 3
    [(key, counters)] = plan.prepared.kept.items()
    assert key[0] == len(plan.prepared.workspaces) - 1 and counters.dtype == torch.int32
    assert counters.shape == (2, 1) and not counters.any()


def test_a_fixup_kernel_that_leaves_its_counters_set_is_caught_on_the_next_call(ops):
    """Negative control of the one-buffer contract: a kernel leaving its counters non-zero fails the next call."""
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(128, 2048, generator=g).half(), torch.randn(2048, 64, generator=g).half()
    ops.gemm(a, b, layout="nn")
    [plan] = [p for p in ops._plans.values() if p.route.shape == (128, 64, 2048)]
    next(iter(plan.prepared.kept.values())).fill_(1)  # what a kernel that never resets would leave
    with pytest.raises(KernelCallError, match="tile counters not zero on entry"):
        ops.gemm(a, b, layout="nn")


def test_a_decode_fixup_kernels_split_counters_are_kept_zeroed_between_calls(ops):
    """split_kv_combine fixup: the same one-buffer contract as the GEMM's (the fake kernel checks zero on entry)."""
    qd, kd, vd = bf16(1, 1, 8, 64), bf16(1, 1024, 2, 64), bf16(1, 1024, 2, 64)
    for _ in range(2):
        torch.testing.assert_close(ops.attention_decode(qd, kd, vd), _sdpa(qd, kd, vd, False), atol=2e-2, rtol=2e-2)
    [plan] = [p for p in ops._plans.values() if p.route.shape == (1, 8, 2, 1, 1024)]
    assert "_k4_fx" in plan.route.kernel and plan.calls == 2
    [counters] = plan.prepared.kept.values()
    assert counters.dtype == torch.int32 and counters.shape == (1, 2) and not counters.any()


def _row(x, w, b, eps):
    from codegen.ops.adapters import RowArgs

    return RowArgs(x, w, b, eps)


def _rope(q, k, cos, sin):
    from codegen.ops.adapters import RopeArgs

    return RopeArgs(q, k, cos, sin)


def _sdpa(q, k, v, causal):
    from codegen.ops.adapters import AttentionArgs

    return ADAPTERS["attention"].fallback(None, AttentionArgs(q, k, v, "top_left" if causal else "none", None))


def test_a_kernel_called_at_the_wrong_shape_is_caught_by_the_fakes(ops):
    """The fakes are able to fail: a bucket route whose A is not padded to the kernel's M."""
    want, shape = ADAPTERS["gemm"].call(ops._ctx, GemmArgs(bf16(8, 128), bf16(256, 128), "nt", torch.bfloat16, ""))
    route = ops._route(want, shape)
    kernel, prepared = ops._kernel(route), ADAPTERS["gemm"].prepare(route.rendered.instance, shape, shape)
    with pytest.raises(KernelCallError, match="called at"):
        ADAPTERS["gemm"].run(kernel, prepared, GemmArgs(bf16(8, 128), bf16(256, 128), "nt", torch.bfloat16, ""),
                             shape, shape)


# ---- input checks ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("call", "message"), [
    (lambda o: o.linear(bf16(16, 128), bf16(256, 128).half()), "b is torch.float16, expected torch.bfloat16"),
    (lambda o: o.linear(bf16(16, 128).to("meta"), bf16(256, 128).to("meta")), "a is on meta; the kernels run on cpu"),
    (lambda o: o.linear(bf16(128, 16).t(), bf16(256, 128)), "x is not contiguous"),
    (lambda o: o.gemm(bf16(16, 128), bf16(256, 128).t(), layout="nn"), "b is not contiguous"),
    (lambda o: o.linear(bf16(16, 64), bf16(256, 128)), "do not agree on K"),
    (lambda o: o.linear(torch.ones(4, 8, dtype=torch.int32), torch.ones(16, 8, dtype=torch.int32)), "a is torch.int32"),
    (lambda o: o.gemm(bf16(4, 8), bf16(8, 4), layout="xy"), "layout 'xy'"),
    (lambda o: o.rmsnorm(bf16(8, 256), bf16(128), 1e-5), "weight has 128 elements"),
    (lambda o: o.rmsnorm(bf16(8, 256), bf16(256), 0.0), "eps must be a positive number"),
    (lambda o: o.rope(bf16(4, 4, 64), bf16(4, 2, 64), bf16(4, 32), bf16(4, 32)), "cos is torch.bfloat16, expected torch.float32"),
    (lambda o: o.rope(bf16(4, 4, 64), bf16(4, 2, 64), torch.ones(4, 40), torch.ones(4, 40)), "rotary_dim <= head_dim=64"),
    (lambda o: o.attention(bf16(1, 8, 4, 64), bf16(1, 8, 2, 64), bf16(1, 9, 2, 64)), "k (1x8x2x64) and v (1x9x2x64) differ"),
    (lambda o: o.attention(bf16(1, 8, 3, 64), bf16(1, 8, 2, 64), bf16(1, 8, 2, 64)), "heads=3 is not a multiple"),
    (lambda o: o.attention(bf16(1, 9, 4, 64), bf16(1, 8, 2, 64), bf16(1, 8, 2, 64), causal="bottom_right"),
     "would see no key"),
    (lambda o: o.attention(bf16(1, 8, 4, 64), bf16(1, 8, 2, 64), bf16(1, 8, 2, 64), causal="left"), "causal='left'"),
])
def test_inputs_the_kernels_cannot_take_are_refused_before_anything_runs(ops, call, message):
    with pytest.raises(OpsInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(ops)
    assert ops.stats() == [] and ops.backend.compiled == []


def test_an_ops_object_that_is_gone_is_named(project):
    handle = _load(project).handle  # the object is dropped at once
    with pytest.raises(OpsError, match=f"handle {handle} names no live Ops object"):
        torch.ops.tilegen.softmax(torch.randn(2, 2), None, None, handle)


# ---- torch.compile and the custom ops --------------------------------------------------------------------------

def test_custom_ops_are_registered_with_fake_implementations(ops):
    for name in library.OPS:
        assert hasattr(torch.ops.tilegen, name), name
    x, w = bf16(8, 256), bf16(256)
    torch.library.opcheck(torch.ops.tilegen.rmsnorm.default, (x, w, 1e-5, ops.handle),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.tilegen.gemm.default, (bf16(8, 128), bf16(256, 128), "nt", torch.bfloat16, "",
                                                           ops.handle), test_utils=("test_schema", "test_faketensor"))


def _block(ops, x, w_norm, w_q, cos, sin):
    """A small block of tilegen ops (each at a shape a spec serves) and torch glue."""
    h = ops.rmsnorm(x, w_norm, 1e-5)  # 8x256
    q = ops.linear(h[:, :128].contiguous(), w_q)  # 8x256x128: the M bucket of the tuned 16x256x128
    qr, kr = ops.rope(q[:4].reshape(4, 4, 64), q[4:6].reshape(4, 2, 64), cos, sin)
    s = ops.softmax(x[:6, :128].float().contiguous())
    return qr.float().sum() + kr.float().mean() + s.sum()


def test_torch_compile_fullgraph_traces_the_ops_without_graph_breaks(ops):
    args = (bf16(8, 256), bf16(256), bf16(256, 128, scale=0.05), torch.rand(4, 32), torch.rand(4, 32))
    explained = torch._dynamo.explain(lambda *a: _block(ops, *a))(*args)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    code = explained.graphs[0].code
    assert all(f"tilegen.{op}" in code for op in ("rmsnorm", "gemm", "rope", "softmax"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        eager = _block(ops, *args)
        ops.reset_stats()
        compiled = torch.compile(lambda *a: _block(ops, *a), fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(*args), eager)
    assert {(s.op, s.route): s.calls for s in ops.stats()} == {  # the compiled graph ran the real implementations
        ("rmsnorm", "spec"): 1, ("gemm", "bucket"): 1, ("rope", "spec"): 1, ("softmax", "spec"): 1}
    torch._dynamo.reset()


# ---- the compile cache ---------------------------------------------------------------------------------------------

class FakeTileLang:
    """compile_kernel's stand-in: 'compiles' into TILELANG_CACHE_DIR unless that folder already holds the kernel
    (then 'loads' it) -- as TileLang's own disk cache does."""

    def __init__(self):
        self.compiles = self.loads = 0
        self.dirs: list[str] = []

    def __call__(self, rendered, shape, target):
        folder = os.environ[TILELANG_CACHE_ENV]
        self.dirs.append(folder)
        binary = os.path.join(folder, "kernel_lib.so")
        if os.path.exists(binary):
            self.loads += 1
        else:
            self.compiles += 1
            with open(binary, "w") as f:
                f.write(rendered.uri)
        return ("kernel", rendered.uri, shape)


ENV = environment_material(target=Target.SM_90, device=H200, torch_version="2.11.0+cu130", runtime_version="CUDA 13.0",
                           tilelang_version="0.1.15", toolchain={"nvcc": "/usr/local/cuda/bin/nvcc", "version": "13.0"})


def _rendered(project, name="rms"):
    from codegen.generate.pipeline import Project

    return next(f for f in Project(root=project).rendered(None, [Target.SM_90]) if name in f.names)


def test_cache_compiles_once_and_a_second_process_loads(project, tmp_path, monkeypatch):
    monkeypatch.setenv(TILELANG_CACHE_ENV, "/elsewhere")
    fake, r = FakeTileLang(), _rendered(project)
    first = OpsCache(tmp_path)
    kernel, event = first.get(r, (8, 256), ENV, Target.SM_90, fake)
    assert kernel == ("kernel", r.uri, (8, 256)) and not event.hit and fake.compiles == 1
    assert (first.entry(event.key) / ENTRY_FILE).is_file()
    assert fake.dirs[0].startswith(str(first.entry(event.key)))  # TileLang's cache inside the entry
    assert os.environ[TILELANG_CACHE_ENV] == "/elsewhere"  # restored after the call
    _, again = OpsCache(tmp_path).get(r, (8, 256), ENV, Target.SM_90, fake)  # a fresh object: another process
    assert again.hit and again.key == event.key and (fake.compiles, fake.loads) == (1, 1)


@pytest.mark.parametrize("change", ["code", "tilelang", "runtime", "device", "toolchain", "shape"])
def test_cache_key_misses_when_code_or_versions_change(project, tmp_path, change):
    fake, r = FakeTileLang(), _rendered(project)
    cache = OpsCache(tmp_path)
    _, base = cache.get(r, (8, 256), ENV, Target.SM_90, fake)
    env, shape = dict(ENV), (8, 256)
    if change == "code":
        text = r.text + "\n# a template edit\n"
        r = dataclasses.replace(r, text=text, code_sha256=hashlib.sha256(text.split("\n", 1)[1].encode()).hexdigest())
    elif change == "tilelang":
        env["tilelang"] = "0.1.16"
    elif change == "runtime":
        env["runtime"] = "CUDA 13.1"
    elif change == "device":
        env["device"] = "NVIDIA H100 80GB HBM3"
    elif change == "toolchain":
        env["toolchain"] = {**env["toolchain"], "version": "13.1"}
    else:
        shape = (16, 256)
    _, event = cache.get(r, shape, env, Target.SM_90, fake)
    assert not event.hit and event.key != base.key and fake.compiles == 2


def test_code_hash_is_the_rendered_code(project):
    import hashlib

    r = _rendered(project)
    assert kernel_material(r, (), {})["code_sha256"] == hashlib.sha256(r.text.split("\n", 1)[1].encode()).hexdigest() == r.code_sha256
    dyn = _rendered(project, "lin_dynamic")
    assert dyn.instance.compile_shape((5, 256, 128)) == dyn.instance.compile_shape((700, 256, 128))  # one entry


def test_ops_make_each_kernel_ready_once(ops):
    x, w = bf16(8, 256), bf16(256)
    for _ in range(3):
        ops.rmsnorm(x, w, 1e-5)
    assert len(ops.cache_events()) == 1 and len(ops.backend.compiled) == 1


class FailingKernels(TorchKernels):
    def get(self, rendered, compile_shape):
        if rendered.instance.op == "rmsnorm":
            raise RuntimeError("nvcc failed\nerror: ptxas ran out of registers")
        return super().get(rendered, compile_shape)


def test_a_kernel_that_fails_to_compile_falls_back_and_says_why(project):
    ops = _load(project, backend=FailingKernels())
    x, w = bf16(8, 256), bf16(256)
    with pytest.warns(FallbackWarning, match="failed to compile: RuntimeError: error: ptxas ran out of registers"):
        torch.testing.assert_close(ops.rmsnorm(x, w, 1e-5), ADAPTERS["rmsnorm"].fallback(ops._ctx, _row(x, w, None, 1e-5)))
    ops.rmsnorm(x, w, 1e-5)
    assert [(s.route, s.calls) for s in ops.stats()] == [("fallback", 2)]
    with pytest.raises(NoKernelError, match="failed to compile"):
        _load(project, backend=FailingKernels(), strict=True).rmsnorm(x, w, 1e-5)


def test_plain_eager_calls_skip_the_dispatcher_and_autograd_gets_the_custom_op(ops):
    x, w = bf16(8, 256), bf16(256)
    torch.testing.assert_close(ops.rmsnorm(x, w, 1e-5), torch.ops.tilegen.rmsnorm(x, w, 1e-5, ops.handle))
    w.requires_grad_(True)
    y = ops.rmsnorm(x, w, 1e-5)  # autograd must see it: the custom op, which has no backward
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="no autograd formula"):
        y.float().sum().backward()
    with torch.no_grad():
        assert not ops.rmsnorm(x, w, 1e-5).requires_grad


def test_precompile_skips_complete_entries(project, tmp_path):
    from codegen.ops.cache import precompile

    fake, r = FakeTileLang(), _rendered(project)
    cache = OpsCache(tmp_path)
    cache.get(r, (8, 256), ENV, Target.SM_90, fake)
    report = precompile(cache, [(r, (8, 256)), (r, (8, 256))], ENV, Target.SM_90, workers=2)
    assert (report.kernels, report.cached, report.errors) == (1, 1, {})  # nothing left to compile: no worker started


class RecordingKernels(TorchKernels):
    """TorchKernels whose kernels also record the arguments of every call."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def get(self, rendered, compile_shape):
        kernel, event = super().get(rendered, compile_shape)

        def recorded(*args):
            self.calls.append(args)
            return kernel(*args)

        return recorded, event


def test_a_plain_gemm_at_its_own_m_calls_the_kernel_with_the_callers_a_and_b(project):
    """The plan's direct launch (no case record): kernel(A, B, C) on the caller's own tensors, computing the
    product; a bucket call (A padded to the tuned M) still takes the launch through the case record."""
    backend = RecordingKernels()
    ops = _load(project, backend=backend)
    w = bf16(256, 128, scale=0.1)
    xs = [bf16(m, 128) for m in (16, 8)]
    for x in xs:
        torch.testing.assert_close(ops.linear(x, w), (x.double() @ w.double().t()).to(torch.bfloat16))
    (a16, b16, c16), (a8, b8, c8) = backend.calls
    assert a16 is xs[0] and b16 is w and c16.shape == (16, 256)
    assert a8.shape == (16, 128) and b8 is w and c8.shape == (16, 256)  # the bucket's padded A, then out[:8]
    plans = {p.route.shape: p for p in ops._plans.values()}
    assert plans[(16, 256, 128)].launch.__qualname__.startswith("GemmAdapter.launcher")
    assert plans[(8, 256, 128)].launch.__qualname__.startswith("Adapter.launcher")


def test_the_direct_gemm_launch_is_taken_only_where_the_familys_launch_is_kernel_a_b_c(ops):
    """Negative control of the probe: a family launch that passes the kernel anything but (A, B, C) -- here B and A
    swapped -- keeps the launch through the case record, so the kernel gets what verify's launch would give it."""
    from codegen.ops.adapters import launch_order

    x, w = bf16(16, 128), bf16(256, 128)
    ops.linear(x, w)
    [plan] = [p for p in ops._plans.values() if p.route.shape == (16, 256, 128)]
    fixed = {"trans_a": False, "trans_b": True}
    assert launch_order(plan.prepared, ("A", "B"), 1, **fixed) == (0, 1, 2)
    swapped = dataclasses.replace(plan.prepared, launch=lambda kernel, case, out: kernel(case.B, case.A, out))
    assert launch_order(swapped, ("A", "B"), 1, **fixed) == (1, 0, 2)
    derived = dataclasses.replace(plan.prepared, launch=lambda kernel, case, out: kernel(case.A, case.B.t(), out))
    assert launch_order(derived, ("A", "B"), 1, **fixed) is None  # reads the stand-in: no direct launch
    extra = dataclasses.replace(plan.prepared, launch=lambda kernel, case, out: kernel(case.A, case.B, 7, out))
    assert launch_order(extra, ("A", "B"), 1, **fixed) is None  # passes a value of its own
    seen = []
    launch = ADAPTERS["gemm"].launcher(lambda *xs: seen.append(xs), swapped, (16, 256, 128), (16, 256, 128))
    launch(GemmArgs(x, w, "nt", torch.bfloat16, ""))
    [(first, second, out)] = seen
    assert first is w and second is x and out.shape == (16, 256)


def test_a_tilelang_kernel_is_called_through_its_executable_only_where_its_wrapper_adds_nothing():
    from codegen.ops.api import direct_call

    class TVMFFIKernelAdapter:  # stands for TileLang's tvm_ffi adapter
        def __init__(self, result_idx, callee=False):
            self.result_idx, self._ffi_callee_allocated_output_abi = result_idx, callee

        def _get_executable(self):
            return "executable"

    class OtherAdapter(TVMFFIKernelAdapter):
        pass

    class Kernel:
        def __init__(self, adapter):
            self.adapter = adapter

    assert direct_call(Kernel(TVMFFIKernelAdapter([]))) == "executable"
    for adapter in (TVMFFIKernelAdapter([2]), TVMFFIKernelAdapter([], callee=True), OtherAdapter([]), None):
        kernel = Kernel(adapter)
        assert direct_call(kernel) is kernel  # it allocates an output, or is another backend's: TileLang's call


def test_a_modules_parameters_under_no_grad_take_the_direct_call_and_with_grad_the_custom_op(ops, monkeypatch):
    """nn.Parameter weights (every nn.Linear's and norm's) are plain tensors to the ops: under no_grad the call
    runs without torch's dispatcher (which costs tens of microseconds a call in Python); where autograd must record
    it (grad enabled, a weight that requires grad) the call is the custom op."""
    assert torch.nn.Parameter.__torch_function__ is torch._C._disabled_torch_function_impl  # adds no behaviour
    through = []
    real = library.lookup
    monkeypatch.setattr(library, "lookup", lambda handle: through.append(handle) or real(handle))
    x, w, nw = bf16(16, 128), torch.nn.Parameter(bf16(256, 128)), torch.nn.Parameter(bf16(128))
    with torch.no_grad():
        torch.testing.assert_close(ops.linear(x, w), (x.double() @ w.double().t()).to(torch.bfloat16))
        ops.rmsnorm(x, nw, 1e-5)
    assert through == []
    y = ops.linear(x, w)
    assert through == [ops.handle] and y.requires_grad


def test_rows_rope_and_decode_take_their_direct_launch_and_agree_with_the_case_record_launch(project):
    """rmsnorm on a matrix, rope and decode attention are called on the caller's tensors directly (the launch order
    probed once);
    rmsnorm on 3-d rows and the split layernorm (a workspace) keep the launch through the case record. Each agrees
    with the torch fallback."""
    backend = RecordingKernels()
    ops = _load(project, backend=backend)
    x, w = bf16(8, 256), bf16(256)
    want = ADAPTERS["rmsnorm"].fallback(ops._ctx, _row(x, w, None, 1e-5))
    torch.testing.assert_close(ops.rmsnorm(x, w, 1e-5), want)
    [(x_in, w_in, _)] = backend.calls
    assert x_in is x and w_in is w
    torch.testing.assert_close(ops.rmsnorm(x.view(2, 4, 256), w, 1e-5), want.view(2, 4, 256))  # 3-d: run()
    g = torch.Generator().manual_seed(3)
    q, k = bf16(4, 4, 64), bf16(4, 2, 64)
    angle = torch.rand(4, 32, generator=g)
    qo, ko = ops.rope(q, k, angle.cos(), angle.sin())
    from codegen.ops.adapters import RopeArgs

    qw, kw = ADAPTERS["rope"].fallback(ops._ctx, RopeArgs(q, k, angle.cos(), angle.sin()))
    torch.testing.assert_close(qo, qw)
    torch.testing.assert_close(ko, kw)
    xl, wl, bl = torch.randn(8, 1024).half(), torch.randn(1024).half(), torch.randn(1024).half()
    ops.layernorm(xl, wl, bl, 1e-5)
    qd, kd, vd = bf16(2, 1, 4, 64), bf16(2, 256, 2, 64), bf16(2, 256, 2, 64)
    torch.testing.assert_close(ops.attention_decode(qd, kd, vd), _sdpa(qd, kd, vd, False), atol=2e-2, rtol=2e-2)
    q_in, k_in, v_in, *ws, o = backend.calls[-1]
    assert q_in is qd and k_in is kd and v_in is vd and len(ws) == 2 and o.shape == qd.shape  # split KV: 2 workspaces
    launchers = {p.op: p.launch.__qualname__.split(".")[0] for p in ops._plans.values()}
    assert launchers == {"rmsnorm": "NormAdapter", "rope": "RopeAdapter", "layernorm": "Adapter",  # split: run()
                         "attention_decode": "AttentionAdapter"}


class _OpsSeen(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the name of every op that reaches the Python dispatch key."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dispatched_call_autograd_need_not_record_takes_the_nograd_twin_and_one_it_must_the_custom_op(ops):
    """Through the dispatcher (here: a dispatch mode is active), a call without inputs that require grad goes
    through tilegen::<op>_nograd, one that autograd must record through the custom op: its output requires grad
    and its backward refuses. Called directly with such inputs, the twin hands the call to the custom op."""
    x, w = bf16(8, 256), bf16(256)
    want = ADAPTERS["rmsnorm"].fallback(ops._ctx, _row(x, w, None, 1e-5))
    with _OpsSeen() as mode:
        torch.testing.assert_close(ops.rmsnorm(x, w, 1e-5), want)
    assert "tilegen.rmsnorm_nograd.default" in mode.seen and "tilegen.rmsnorm.default" not in mode.seen
    w.requires_grad_(True)
    with _OpsSeen() as mode:
        y = ops.rmsnorm(x, w, 1e-5)
    assert "tilegen.rmsnorm.default" in mode.seen and "tilegen.rmsnorm_nograd.default" not in mode.seen
    assert y.requires_grad
    for z in (y, torch.ops.tilegen.rmsnorm_nograd(x, w, 1e-5, ops.handle)):
        torch.testing.assert_close(z.detach(), want)
        with pytest.raises(RuntimeError, match="no autograd formula"):
            z.float().sum().backward()


def test_the_nograd_twins_pass_torchs_op_checks(ops):
    from codegen.ops.library import NOGRAD, OPS

    assert all(hasattr(torch.ops.tilegen, name + NOGRAD) for name in OPS)
    x, w = bf16(8, 256), bf16(256)
    torch.library.opcheck(torch.ops.tilegen.rmsnorm_nograd.default, (x, w, 1e-5, ops.handle),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.tilegen.gemm_nograd.default, (bf16(8, 128), bf16(256, 128), "nt", torch.bfloat16,
                                                                  "", ops.handle),
                          test_utils=("test_schema", "test_faketensor"))
