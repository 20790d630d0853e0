"""The inputs' normal draws, kept per process (codegen.families.numerics.normal_draws): the same values as one
generator drawing them afresh, and never written by the families that share them."""

from __future__ import annotations

import pytest
import torch
from seeds import hand_files

from codegen.families import family, numerics
from codegen.families.attention.numerics import HOT_KEY_VALUE_SCALE, _split_control_keys
from codegen.families.numerics import INPUT_KINDS, normal_draws

FILES = {(f.instance.name, f.instance.target.value): f for f in hand_files()}


@pytest.fixture(autouse=True)
def _no_draws_kept():
    numerics._DRAWS.clear()
    yield
    numerics._DRAWS.clear()


def test_the_draws_are_one_generators_and_it_goes_on_from_them():
    g = torch.Generator().manual_seed(5)
    fresh = [torch.randn(3, 4, generator=g), torch.randn(7, generator=g)]
    after = torch.rand(6, generator=g)
    for _ in range(2):  # drawn, then kept
        (a, b), g2 = normal_draws(5, (3, 4), (7,))
        assert torch.equal(a, fresh[0]) and torch.equal(b, fresh[1])
        assert torch.equal(torch.rand(6, generator=g2), after)


def test_the_same_draws_are_handed_out_again_and_the_least_recent_go_first(monkeypatch):
    (a,), _ = normal_draws(0, (4, 4))
    assert normal_draws(0, (4, 4))[0][0] is a
    assert normal_draws(1, (4, 4))[0][0] is not a  # another seed: other draws
    monkeypatch.setattr(numerics, "DRAWS_MAX_BYTES", 3 * 64)  # three draws of 16 fp32
    for seed in (2, 3, 0):
        normal_draws(seed, (4, 4))
    assert [k[0] for k in numerics._DRAWS] == [2, 3, 0]  # 1 went first; 0 was used last
    normal_draws(9, (100,))  # larger than the whole budget: drawn, not kept
    assert [k[0] for k in numerics._DRAWS] == [2, 3, 0] and sum(n for _, _, n in numerics._DRAWS.values()) == 3 * 64


CASES = {  # (spec, target): a small shape of it
    ("gemm_fp16_nt", "sm_90"): (40, 24, 72),
    ("gemm_fp32_3xtf32", "sm_90"): (40, 24, 72),
    ("softmax_fp32_long", "sm_90"): (3, 300),
    ("layernorm_bf16", "gfx942"): (5, 256),
    ("rope_fp16_llama3_8b", "sm_90"): (9, 4, 2),
    ("attn_fp16_decode", "sm_90"): (2, 4, 2, 1, 300),
}


@pytest.mark.parametrize("key", list(CASES), ids=lambda k: k[0])
def test_inputs_drawn_twice_are_equal_so_no_family_writes_the_shared_draws(key):
    inst = FILES[key].instance
    fam = family(inst).numerics
    for kind in INPUT_KINDS:
        cases = [fam.make_inputs(inst, CASES[key], seed=0, kind=kind, device="cpu", run_target=inst.target)
                 for _ in range(2)]
        tensors = [{n: t for n, t in vars(c).items() if isinstance(t, torch.Tensor) and n != "WS"}  # WS: empty
                   for c in cases]
        assert tensors[0] and tensors[0].keys() == tensors[1].keys()
        for name, t in tensors[0].items():
            assert torch.equal(t, tensors[1][name]), (key, kind, name)


def test_decode_hot_values_are_the_draws_scaled_then_rounded():
    inst = FILES[("attn_fp16_decode", "sm_90")].instance
    shape = b, h, kvh, sq, skv = (1, 4, 2, 1, 4 * inst.block_n + 5)
    g = torch.Generator().manual_seed(0)
    torch.randn(b, sq, h, inst.head_dim, generator=g), torch.randn(b, skv, kvh, inst.head_dim, generator=g)
    v = torch.randn(b, skv, kvh, inst.head_dim, generator=g)
    hot = _split_control_keys(inst, skv, inst.split_for(shape))
    assert hot.any() and not hot.all()
    v[:, hot] *= HOT_KEY_VALUE_SCALE
    case = family(inst).numerics.make_inputs(inst, shape, seed=0, kind="normal", device="cpu", run_target=inst.target)
    assert torch.equal(case.V, v.to(case.V.dtype))
