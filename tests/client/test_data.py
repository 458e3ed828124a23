"""torch.utils.data in the client (issue 23 item 3): datasets, samplers, DataLoader batching, drop_last,
collate_fn and default_collate, shuffling and random_split, against a real server; the same programs under
torch where it is installed."""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest

import gradserve.torch as torch
from gradserve.torch.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    IterableDataset,
    SequentialSampler,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)


def _xy(n=10):
    x = torch.arange(n * 2, dtype=torch.float32).reshape(n, 2)
    y = torch.arange(n)
    return x, y


def test_tensor_dataset_indexes_every_tensor(ctx):
    x, y = _xy()
    ds = TensorDataset(x, y)
    assert len(ds) == 10
    xi, yi = ds[3]
    assert xi.tolist() == [6.0, 7.0] and yi.item() == 3
    with pytest.raises(AssertionError, match="^Size mismatch between tensors$"):
        TensorDataset(x, torch.arange(3))


@pytest.mark.parametrize(("batch_size", "drop_last", "sizes"), [(4, False, [4, 4, 2]), (4, True, [4, 4]),
                                                                 (5, True, [5, 5]), (20, False, [10])])
def test_loader_batches_in_order_with_drop_last(ctx, batch_size, drop_last, sizes):
    x, y = _xy()
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, drop_last=drop_last)
    batches = list(loader)
    assert len(loader) == len(sizes) and [len(b[1]) for b in batches] == sizes
    assert all(isinstance(b, list) and len(b) == 2 for b in batches)  # default_collate: a tuple comes back a list
    assert sum((b[1].tolist() for b in batches), []) == list(range(sum(sizes)))
    assert batches[0][0].shape == torch.Size([sizes[0], 2]) and batches[0][0].dtype == torch.float32


def test_one_op_batches_equal_stacked_rows(ctx):
    x, y = _xy(7)
    ds = Subset(TensorDataset(x, y), [6, 0, 3, 2, 5])
    fast = list(DataLoader(ds, batch_size=2))
    slow = list(DataLoader(ds, batch_size=2, collate_fn=lambda b: default_collate(b)))
    assert [[t.tolist() for t in b] for b in fast] == [[t.tolist() for t in b] for b in slow]
    assert fast[0][1].tolist() == [6, 0] and repr(slow[0][0].grad_fn) is not None


def test_a_dataset_requiring_grad_is_batched_by_stacking(ctx):
    w = torch.ones(4, 2, requires_grad=True)
    (batch,) = next(iter(DataLoader(TensorDataset(w), batch_size=3)))
    assert batch.grad_fn.name() == "StackBackward0"
    batch.sum().backward()
    assert w.grad.tolist() == [[1.0, 1.0]] * 3 + [[0.0, 0.0]]


def test_default_collate_of_numbers_dicts_tuples_and_strings(ctx):
    Point = collections.namedtuple("Point", "x y")
    assert default_collate([1, 2, 3]).dtype == torch.int64
    floats = default_collate([1.5, 2.0])
    assert floats.dtype == torch.float64 and floats.tolist() == [1.5, 2.0]
    assert default_collate([True, False]).dtype == torch.bool
    assert default_collate(["a", "b"]) == ["a", "b"]
    d = default_collate([{"a": 1, "b": torch.zeros(2)}, {"a": 2, "b": torch.ones(2)}])
    assert d["a"].tolist() == [1, 2] and d["b"].tolist() == [[0.0, 0.0], [1.0, 1.0]]
    p = default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert isinstance(p, Point) and p.x.tolist() == [1, 3] and p.y.dtype == torch.float64
    arrays = default_collate([np.zeros(2, dtype=np.float32), np.ones(2, dtype=np.float32)])
    assert arrays.dtype == torch.float32 and arrays.tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert default_collate([np.float64(1.0), np.float64(2.0)]).dtype == torch.float64
    assert [t.tolist() for t in default_collate([(1, [2, 3]), (4, [5, 6])])[1]] == [[2, 5], [3, 6]]
    with pytest.raises(RuntimeError, match="^each element in list of batch should be of equal size$"):
        default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="^default_collate: batch must contain tensors, numpy arrays, numbers"):
        default_collate([object()])


def test_custom_dataset_and_collate_fn(ctx):
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": float(i), "y": i * i}

    seen = []

    def collate(batch):
        seen.append(len(batch))
        return default_collate(batch)

    batches = list(DataLoader(Squares(), batch_size=2, collate_fn=collate))
    assert seen == [2, 2, 1] and batches[1]["y"].tolist() == [4, 9] and batches[2]["x"].dtype == torch.float64
    unbatched = list(DataLoader(Squares(), batch_size=None))
    assert len(unbatched) == 5 and unbatched[2] == {"x": 2.0, "y": 4}


def test_iterable_dataset_is_batched_as_it_yields(ctx):
    class Counter(IterableDataset):
        def __iter__(self):
            return iter(range(7))

    assert [b.tolist() for b in DataLoader(Counter(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.tolist() for b in DataLoader(Counter(), batch_size=3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="expected unspecified shuffle option, but got shuffle=True"):
        DataLoader(Counter(), shuffle=True)


def test_shuffle_gives_a_permutation_each_epoch_reproducible_under_a_seed(ctx):
    x, y = _xy(12)
    loader = DataLoader(TensorDataset(x, y), batch_size=5, shuffle=True)
    torch.manual_seed(0)
    first = [[b[1].tolist() for b in loader] for _ in range(2)]
    torch.manual_seed(0)
    again = [[b[1].tolist() for b in loader] for _ in range(2)]
    assert first == again
    for epoch in first:
        assert [len(b) for b in epoch] == [5, 5, 2] and sorted(sum(epoch, [])) == list(range(12))
    assert first[0] != first[1]
    rows = next(iter(loader))
    assert (rows[0][:, 0] / 2).tolist() == [float(i) for i in rows[1].tolist()]  # x and y stay paired


def test_loader_argument_errors_are_torch_s(ctx):
    ds = TensorDataset(torch.zeros(4))
    cases = [
        (dict(sampler=SequentialSampler(ds), shuffle=True), "sampler option is mutually exclusive with shuffle"),
        (dict(batch_sampler=BatchSampler(SequentialSampler(ds), 2, False), batch_size=3),
         "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"),
        (dict(batch_size=None, drop_last=True), "batch_size=None option disables auto-batching and is mutually "
                                                "exclusive with drop_last"),
        (dict(batch_size=0), "batch_size should be a positive integer value, but got batch_size=0"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=f"^{message}$"):
            DataLoader(ds, **kwargs)
    batches = list(DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 3, False)))
    assert [b[0].shape[0] for b in batches] == [3, 1]


def test_random_split_by_lengths_and_fractions(ctx):
    ds = TensorDataset(torch.arange(10))
    torch.manual_seed(1)
    a, b = random_split(ds, [3, 7])
    assert (len(a), len(b)) == (3, 7) and sorted(list(a.indices) + list(b.indices)) == list(range(10))
    torch.manual_seed(1)
    assert random_split(ds, [3, 7])[0].indices == a.indices
    assert a[0][0].item() == a.indices[0]
    parts = random_split(ds, [0.25, 0.25, 0.5])
    assert [len(p) for p in parts] == [3, 2, 5]  # floors 2, 2, 5; the remainder goes to the first
    with pytest.raises(ValueError, match="^Sum of input lengths does not equal the length of the input dataset!$"):
        random_split(ds, [3, 3])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        random_split(TensorDataset(torch.arange(2)), [0.9, 0.1, 0.0])
    assert any("Length of split at index 2 is 0" in str(w.message) for w in caught)


def test_subset_and_concat(ctx):
    ds = TensorDataset(torch.arange(5))
    both = ds + TensorDataset(torch.arange(10, 13))
    assert isinstance(both, ConcatDataset) and len(both) == 8
    assert both[6][0].item() == 11 and both[-1][0].item() == 12
    sub = Subset(both, [7, 0])
    assert [b[0].tolist() for b in DataLoader(sub, batch_size=2)] == [[12, 0]]


def test_pin_memory_warns_as_torch_without_an_accelerator(ctx):
    loader = DataLoader(TensorDataset(torch.zeros(2)), pin_memory=True)
    with pytest.warns(UserWarning, match="^'pin_memory' argument is set as true but no accelerator is found"):
        assert len(list(loader)) == 2


def test_weighted_and_subset_random_samplers(ctx):
    from gradserve.torch.utils.data import SubsetRandomSampler, WeightedRandomSampler

    torch.manual_seed(0)
    drawn = list(WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], 200))
    assert len(drawn) == 200 and set(drawn) <= {1, 3} and drawn.count(3) > drawn.count(1)
    once = list(WeightedRandomSampler([1.0, 1.0, 0.0, 1.0], 3, replacement=False))
    assert sorted(once) == [0, 1, 3]
    with pytest.raises(ValueError, match=r"^weights should be a 1d sequence but given weights have shape \(1, 2\)$"):
        WeightedRandomSampler([[1.0, 2.0]], 2)
    with pytest.raises(ValueError, match="^num_samples should be a positive integer value, but got num_samples=0$"):
        WeightedRandomSampler([1.0], 0)
    assert sorted(SubsetRandomSampler([5, 7, 9])) == [5, 7, 9]
    x, y = _xy(6)
    batches = list(DataLoader(TensorDataset(x, y), batch_size=4, sampler=WeightedRandomSampler([1.0] * 6, 8)))
    assert [len(b[1]) for b in batches] == [4, 4]
