"""SumTree / MinTree against a plain numpy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from janus.buffer.replay.sumtree import MinTree, SumTree, default_fanouts

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available on this machine")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]
CAPACITIES = [1, 2, 3, 7, 100, 1000, 4097]
# None: the default geometry; the others force several narrow levels on small capacities.
FANOUTS = [None, [2], [3, 2], [4, 4], [2, 3, 5]]


def ref_find_right(leaves: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """Leaf i with prefix(i) <= m < prefix(i+1)."""
    return np.searchsorted(np.cumsum(leaves), mass, side="right")


@st.composite
def scenarios(draw):
    capacity = draw(st.sampled_from(CAPACITIES))
    fanouts = draw(st.sampled_from(FANOUTS))
    updates = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, min(3 * capacity, 300)))
        slots = draw(st.lists(st.integers(0, capacity - 1), min_size=n, max_size=n))
        # Integer values: every sum is exact in float64, so find() is checked exactly.
        values = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
        updates.append((slots, values))
    return capacity, fanouts, updates


def apply_ref(capacity: int, updates) -> tuple[np.ndarray, np.ndarray]:
    ref = np.zeros(capacity)
    written = np.zeros(capacity, dtype=bool)
    for slots, values in updates:
        for s, v in zip(slots, values):  # sequential: the last occurrence wins
            ref[s] = v
            written[s] = True
    return ref, written


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=40))
def test_sum_and_min_match_reference(scenario, fractions):
    capacity, fanouts, updates = scenario
    tree, mtree = SumTree(capacity, "cpu", fanouts=fanouts), MinTree(capacity, "cpu", fanouts=fanouts)
    for slots, values in updates:
        s = torch.tensor(slots, dtype=torch.long)
        tree.update(s, torch.tensor(values, dtype=torch.float64))
        mtree.update(s, torch.tensor(values, dtype=torch.float64))
    ref, written = apply_ref(capacity, updates)
    assert np.array_equal(tree.leaves.numpy(), ref)
    assert tree.total().item() == ref.sum()
    assert mtree.min().item() == (ref[written].min() if written.any() else math.inf)
    probe = torch.arange(capacity)
    assert np.array_equal(tree.get(probe).numpy(), ref)
    if ref.sum() == 0:
        return
    # Random masses plus every exact prefix boundary (the hardest case for [p, q) semantics).
    cs = np.cumsum(ref)
    mass = np.concatenate([np.array(fractions) * ref.sum(), [0.0], cs[cs < ref.sum()]])
    got, vals = tree.find(torch.from_numpy(mass), with_values=True)
    expected = ref_find_right(ref, mass)
    assert np.array_equal(got.numpy(), expected)
    assert np.array_equal(vals.numpy(), ref[expected])
    assert (ref[got.numpy()] > 0).all()


@settings(max_examples=60, deadline=None)
@given(scenarios(), st.lists(st.floats(0.0, 1.0, exclude_min=True), min_size=1, max_size=40))
def test_find_fraction_mode(scenario, fractions):
    """``fraction=True`` searches prefix(i) < f * total <= prefix(i+1)."""
    capacity, fanouts, updates = scenario
    tree = SumTree(capacity, "cpu", fanouts=fanouts)
    for slots, values in updates:
        tree.update(torch.tensor(slots), torch.tensor(values, dtype=torch.float64))
    ref, _ = apply_ref(capacity, updates)
    if ref.sum() == 0:
        return
    f = np.array(fractions)
    got = tree.find(torch.from_numpy(f), fraction=True).numpy()
    assert np.array_equal(got, np.searchsorted(np.cumsum(ref), f * ref.sum(), side="left"))
    assert (ref[got] > 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_duplicates_last_occurrence_wins(device):
    tree, mtree = SumTree(10, device), MinTree(10, device)
    slots = torch.tensor([3, 5, 3, 3, 5, 1], device=device)
    values = torch.tensor([1.0, 9.0, 2.0, 7.0, 4.0, 6.0], dtype=torch.float64, device=device)
    for _ in range(3):  # repeated: a nondeterministic scatter would eventually disagree
        tree.update(slots, values)
        mtree.update(slots, values)
        assert tree.get(torch.tensor([1, 3, 5], device=device)).tolist() == [6.0, 7.0, 4.0]
        assert tree.total().item() == 17.0
        assert mtree.min().item() == 4.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("capacity", [100_000, 1_000_000])
def test_large_trees_float_values(device, capacity):
    """Float leaves (inexact sums): totals match, masses at or past the total stay in range and
    never pick a zero leaf; the large-batch (count) path agrees with the binary-search path."""
    g = torch.Generator().manual_seed(0)
    leaves = torch.rand(capacity, generator=g, dtype=torch.float64)
    leaves[torch.randint(0, capacity, (capacity // 3,), generator=g)] = 0.0
    leaves[-50:] = 0.0
    tree = SumTree(capacity, device)
    tree.update(torch.arange(capacity, device=device), leaves.to(device))
    total = tree.total()
    assert math.isclose(total.item(), leaves.sum().item(), rel_tol=1e-12)
    edge = torch.stack([total, total * (1 - 1e-16), torch.nextafter(total, total.new_zeros(())), total * 2])
    mass = torch.cat([torch.rand(2048, generator=g, dtype=torch.float64).to(device) * total, edge])
    big = tree.find(mass).cpu()
    small = torch.cat([tree.find(chunk) for chunk in mass.split(256)]).cpu()
    assert torch.equal(big, small)
    assert int(big.max()) < capacity and bool((leaves[big] > 0).all())
    cs = leaves.cumsum(0)
    excl = cs[big] - leaves[big]
    m = mass.cpu().clamp(max=cs[-1].item())
    tol = 1e-9 * cs[-1].item()
    assert bool(((excl <= m + tol) & (m <= cs[big] + tol)).all())


@pytest.mark.parametrize("device", DEVICES)
def test_nan_leaves_keep_indices_in_range(device):
    tree = SumTree(5000, device, fanouts=[16])
    tree.update(torch.arange(5000, device=device), torch.ones(5000, dtype=torch.float64, device=device))
    tree.update(torch.tensor([17], device=device), torch.tensor([math.nan], dtype=torch.float64, device=device))
    idx = tree.find(torch.rand(300, dtype=torch.float64, device=device), fraction=True)
    assert int(idx.min()) >= 0 and int(idx.max()) < 5000


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("capacity,fanouts", [(7, None), (1000, [4, 4]), (4097, None), (10_000, [8])])
def test_state_dict_round_trip(device, capacity, fanouts):
    g = torch.Generator().manual_seed(1)
    slots = torch.randint(0, capacity, (capacity // 2 + 1,), generator=g)
    values = torch.rand(slots.shape[0], generator=g, dtype=torch.float64)
    tree, mtree = SumTree(capacity, device, fanouts=fanouts), MinTree(capacity, device, fanouts=fanouts)
    tree.update(slots.to(device), values.to(device))
    mtree.update(slots.to(device), values.to(device))
    state, mstate = tree.state_dict(), mtree.state_dict()
    assert all(isinstance(v, (torch.Tensor, int)) for v in (*state.values(), *mstate.values()))
    tree2, mtree2 = SumTree(capacity, device, fanouts=fanouts), MinTree(capacity, device, fanouts=fanouts)
    tree2.load_state_dict(state)
    mtree2.load_state_dict(mstate)
    assert torch.equal(tree2.leaves, tree.leaves) and torch.equal(mtree2.leaves, mtree.leaves)
    assert all(torch.equal(a, b) for a, b in zip(tree.levels, tree2.levels))
    assert mtree2.min().item() == mtree.min().item()
    mass = torch.rand(500, generator=g, dtype=torch.float64).to(device)
    assert torch.equal(tree2.find(mass, fraction=True), tree.find(mass, fraction=True))
    with pytest.raises(ValueError):
        SumTree(capacity + 1, device).load_state_dict(state)


def test_min_tree_ignores_unwritten_and_tracks_overwrites():
    mtree = MinTree(4097, "cpu")
    assert mtree.min().item() == math.inf
    mtree.update(torch.tensor([4096, 5]), torch.tensor([3.0, 2.0], dtype=torch.float64))
    assert mtree.min().item() == 2.0
    mtree.update(torch.tensor([5]), torch.tensor([8.0], dtype=torch.float64))  # raise the min leaf
    assert mtree.min().item() == 3.0
    assert mtree.leaves[0].item() == math.inf


def test_default_geometry_and_validation():
    assert default_fanouts(4096) == [] and default_fanouts(100_000) == [32]
    assert default_fanouts(1_000_000) == [32] and default_fanouts(10_000_000) == [32, 32, 32]
    tree = SumTree(1_000_000, "cpu")
    assert tree.levels[-1].shape[0] == 31250
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError):
            SumTree(bad, "cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SumTree(10, "cpu", fanouts=[1])


def test_empty_inputs_are_no_ops():
    tree = SumTree(100_000, "cpu")
    tree.update(torch.tensor([7, 9]), 2.0)  # a scalar value is broadcast
    tree.update(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.float64))
    assert tree.total().item() == 4.0
    assert tree.find(torch.tensor([], dtype=torch.float64)).shape == (0,)
    assert tree.find(torch.tensor([[1.0, 3.0]])).tolist() == [7, 9]  # any shape, any float dtype
