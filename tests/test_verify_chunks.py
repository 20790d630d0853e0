"""The chunked check (what `tilegen verify` runs) against the whole-tensor one, on the CPU: the same
verdicts, the same figures against the same reference (a chunk's matmul may sum in another order than the
whole one's, so the references themselves agree to fp32 rounding), a planted error in the last chunk
caught, and the extra memory bounded by the chunk size, not the problem."""

from __future__ import annotations

import weakref

import pytest
import torch
from numcheck import check_output
from torch.utils._python_dispatch import TorchDispatchMode

from codegen.core.hardware import Target
from codegen.families import family
from codegen.generate.pipeline import Project
from codegen.run.verify import compare, judge_chunks
from codegen.targets import torch_dtype

FILES = {(f.instance.name, f.instance.target): f.instance for f in Project().rendered()}

# (instance, a normal shape for it, elements per chunk: several chunks at that shape)
CASES = [
    ("softmax_fp16_two_pass", (37, 4096), 5 * 4096),
    ("softmax_fp16_ragged_spec", (9, 5119), 2 * 5119),
    ("rmsnorm_fp16", (21, 4096), 4 * 4096),
    ("layernorm_bf16_ragged", (13, 5121), 3 * 5121),
    ("gemm_fp16_nt", (256, 384, 512), 128 * 512),  # 128 columns x K of B, 128 rows x K of A
    ("gemm_bf16_nn", (256, 384, 512), 96 * 512),
    ("gemm_fp16_ragged_pred", (129, 127, 33), 40 * 33),
    ("attn_bf16_gqa_causal", (2, 8, 2, 160, 160), 4 * 64 * 160),  # one K/V head's 4 query heads, 64 rows
    ("attn_fp16_d128", (2, 4, 4, 128, 192), 2 * 128 * 192),  # two heads, every row
    # decode, bottom_right: 2 of the 5 query rows a chunk (the shift from the whole seq_q), 18 KV blocks over 16 splits
    ("attn_bf16_decode_causal", (2, 8, 2, 5, 1100), 4 * 2 * 1100),
    ("rope_fp16_llama3_8b", (7, 4, 2), 2 * 6 * 128),  # two tokens a block; Q rows and K rows apart
    ("rope_fp16_partial_r64", (5, 3, 3), 3 * 6 * 128),
]


def _inst(name):
    return FILES[(name, Target.SM_90)]


def _last_chunk(inst, shape, budget):
    fam = family(inst).numerics
    case = fam.make_inputs(inst, shape, seed=0, kind="normal", device="cpu", run_target=inst.target)
    chunks = list(fam.chunks(inst, case, budget))
    return case, chunks


def _bugs(inst, shape, budget):
    _, chunks = _last_chunk(inst, shape, budget)
    last = chunks[-1].index

    def element(ref, which):  # the first or last element of the last chunk, as an index of the output
        mask = torch.zeros(ref.shape, dtype=torch.bool)
        mask[last] = True
        return tuple(mask.nonzero()[which].tolist())

    def planted(case, ref):  # one element of the last chunk off by 5% of the largest output
        out = ref.clone()
        out[element(ref, -1)] += 0.05 * ref.abs().max()
        return out

    def nan_last(case, ref):
        out = ref.clone()
        out[element(ref, 0)] = float("nan")
        return out

    return {"correct": lambda case, ref: ref, "planted_last_chunk": planted, "nan_last_chunk": nan_last,
            "zeros": lambda case, ref: torch.zeros_like(ref)}


def _assembled(fam, inst, shape, case, budget):
    """The chunks' references and error magnitudes, each placed where its chunk sits in the output."""
    ref = torch.full(fam.out_shape(inst, shape), float("nan"))
    mag = torch.full_like(ref, float("nan"))
    for c in fam.chunks(inst, case, budget):
        ref[c.index], mag[c.index] = c.ref, c.mag
    return ref, mag


@pytest.mark.parametrize(("name", "shape", "budget"), CASES, ids=[c[0] for c in CASES])
def test_chunked_check_equals_the_whole_tensor_check(name, shape, budget):
    """The chunked check gives the whole-tensor check's verdicts, and its figures are exactly those of one
    whole-tensor comparison against the chunks' own references. Those references are the whole one's but
    for fp32 rounding where a chunk runs a matmul at another shape (BLAS picks its kernel, and with it the
    summation order, by shape: decode's 2 of 5 query rows here, a ragged GEMM's blocks), which stays below
    each element's modelled error magnitude; the figures are then equal where the references are."""
    inst = _inst(name)
    fam = family(inst).numerics
    _, chunks = _last_chunk(inst, shape, budget)
    assert len(chunks) > 1
    bugs = _bugs(inst, shape, budget)
    tol = fam.tolerance(inst, shape, inst.target)
    for kind in ("normal", "wide"):
        case = fam.make_inputs(inst, shape, seed=0, kind=kind, device="cpu", run_target=inst.target)
        ref, mag = fam.reference(inst, case)
        chunk_ref, chunk_mag = _assembled(fam, inst, shape, case, budget)
        assert bool(((chunk_ref - ref).abs() <= mag).all()), kind
        same_reference = torch.equal(chunk_ref, ref) and torch.equal(chunk_mag, mag)
        for bug, fn in bugs.items() if kind == "normal" else [("correct", bugs["correct"])]:
            whole = check_output(inst, shape, fn, kind=kind)
            parts = check_output(inst, shape, fn, kind=kind, max_elements=budget)
            assert parts[0] == whole[0], (bug, kind, whole, parts)  # status
            assert parts[2] == whole[2], (bug, kind)  # every control's outcome
            w, p = whole[1], parts[1]
            assert p.mismatch_ratio == w.mismatch_ratio and p.passed == w.passed, (bug, kind)
            assert p.max_abs_err == pytest.approx(w.max_abs_err, rel=1e-3, abs=1e-6), (bug, kind)
            out = fn(case, ref).to(torch_dtype(inst.spec_dtypes[-2], inst.target))  # what check_output judged
            assert p == compare(out, chunk_ref, tol.bound(chunk_ref, chunk_mag)), (bug, kind)
            if same_reference:
                assert p == w, (bug, kind)
            if bug == "correct":
                assert parts[0] == "verified", (kind, parts)
            else:  # the planted errors sit in the last chunk
                assert parts[0] == "failed" and p.mismatch_ratio > 0, (bug, parts)


@pytest.mark.parametrize(("name", "shape", "budget"), CASES, ids=[c[0] for c in CASES])
def test_chunks_cover_the_output_once_within_the_budget(name, shape, budget):
    inst = _inst(name)
    fam = family(inst).numerics
    _case, chunks = _last_chunk(inst, shape, budget)
    seen = torch.zeros(fam.out_shape(inst, shape), dtype=torch.int32)
    for c in chunks:
        seen[c.index] += 1
        assert c.ref.shape == seen[c.index].shape == c.mag.shape
        assert all(w.shape == c.ref.shape for w in c.controls.values())
        # the output block of a chunk is within the budget (attention's output is head_dim per score row)
        assert c.ref.numel() <= budget * (inst.head_dim if inst.op == "attention" else 1) // (
            shape[4] if inst.op == "attention" else 1)
    assert bool((seen == 1).all())


def test_a_vacuous_tolerance_is_still_reported_when_chunked():
    inst = _inst("gemm_fp16_nt")
    status, _, controls = check_output(inst, (128, 256, 512), lambda case, ref: ref, scale=1e6, max_elements=64 * 512)
    assert status == "vacuous" and any("PASSED" in v for v in controls.values())


# ---- memory --------------------------------------------------------------------------------------

class LiveBytes(TorchDispatchMode):
    """The peak bytes of tensor storage created by torch ops inside the mode and alive at the same time
    (each storage counted once, freed when the last tensor on it is collected). It sees what torch
    allocates; not Python objects, not allocator caching (on the CPU there is none to see)."""

    def __init__(self, existing=()):
        super().__init__()
        self.live, self.peak, self.refs = 0, 0, {}
        self.existing = {t.untyped_storage().data_ptr() for t in existing}  # views of these are not new

    def _free(self, key, nbytes):
        self.refs[key] -= 1
        if not self.refs[key]:
            del self.refs[key]
            self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                key = st.data_ptr()
                if key in self.existing:
                    continue
                if key not in self.refs:
                    self.refs[key] = 0
                    self.live += st.nbytes()
                    self.peak = max(self.peak, self.live)
                self.refs[key] += 1
                weakref.finalize(t, self._free, key, st.nbytes())
        return out


def _peak_extra_bytes(inst, shape, max_elements):
    fam = family(inst).numerics
    case = fam.make_inputs(inst, shape, seed=0, kind="normal", device="cpu", run_target=inst.target)
    out = torch.zeros(fam.out_shape(inst, shape), dtype=case.X.dtype if hasattr(case, "X") else torch.float16)
    tol = fam.tolerance(inst, shape, inst.target)
    with LiveBytes(existing=[case.X, out]) as mode:
        if max_elements is None:
            ref, mag = fam.reference(inst, case)
            chunks = [type(next(iter(fam.chunks(inst, case, 1))))(index=(...,), ref=ref, mag=mag,
                                                                     controls=fam.controls(inst, case, ref))]
            del ref, mag
        else:
            chunks = fam.chunks(inst, case, max_elements)
        status = judge_chunks(out, chunks, tol)[0]
        del chunks
    return mode.peak, status


def test_chunked_extra_memory_is_bounded_by_the_chunk_not_the_problem():
    inst = _inst("softmax_fp16_two_pass")
    budget = 1 << 16  # elements: 256 KiB per fp32 temporary
    small, _ = _peak_extra_bytes(inst, (64, 4096), budget)
    large, status = _peak_extra_bytes(inst, (512, 4096), budget)  # 8x the problem
    whole, whole_status = _peak_extra_bytes(inst, (512, 4096), None)
    print(f"peak extra bytes: chunked 64x4096 {small}, chunked 512x4096 {large}, whole 512x4096 {whole}")
    assert status == whole_status == "failed"  # zeros are not a softmax
    assert large <= 20 * 4 * budget  # about a dozen chunk-sized fp32 temporaries (+ [cols] column stats)
    assert large <= 1.25 * small  # does not grow with the problem
    assert whole >= 4 * large  # the whole-tensor check grows with it
