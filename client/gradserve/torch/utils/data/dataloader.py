"""``DataLoader``: batches of a dataset, as torch's single-process loader makes them.

Each ``iter(loader)`` draws the loader's base seed from ``generator`` (the default generator when None), as
torch does even without workers, so that a seeded program's later random numbers stay torch's; then the
sampler yields indices (``shuffle=True``: a ``RandomSampler``), ``BatchSampler`` groups them and
``collate_fn`` makes each batch. ``num_workers`` is accepted and the batches are made in this process: handles
to server tensors cannot go to other processes, and the batches are the same. A ``TensorDataset`` (or a
``Subset`` of one) whose tensors do not require grad, batched by ``default_collate``, takes each batch as one
indexing op per tensor (``t[indices]``: the same values as stacking the rows, one op instead of one per row).
"""

from __future__ import annotations

import itertools
import warnings

from gradserve.torch.utils.data import _random
from gradserve.torch.utils.data._collate import default_collate, default_convert
from gradserve.torch.utils.data.dataset import IterableDataset, Subset, TensorDataset
from gradserve.torch.utils.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler


class _InfiniteConstantSampler(Sampler):
    """An IterableDataset's sampler: None forever (the dataset decides what comes next)."""

    def __iter__(self):
        while True:
            yield None


class DataLoader:
    """``DataLoader(dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
    collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None, ..., generator=None)``."""

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True) -> None:
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers "
                             "> 0 to enable multiprocessing, otherwise set prefetch_factor to None.")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
        self.worker_init_fn, self.generator = worker_init_fn, generator
        self.prefetch_factor, self.persistent_workers = prefetch_factor, persistent_workers
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            if shuffle not in (False, None):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 f"sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                                 f"but got batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with "
                             "drop_last")
        if sampler is None:
            if iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.drop_last = batch_size, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._iterable = iterable
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)

    def __iter__(self):
        return _LoaderIter(self)


def _rows_of(dataset, indices: list[int]):
    """``(tensors, indices)`` when ``dataset`` is a TensorDataset (through Subsets) of tensors without grad, so
    that a batch is ``t[indices]`` per tensor; else None."""
    while type(dataset) is Subset:
        indices = [dataset.indices[i] for i in indices]
        dataset = dataset.dataset
    if type(dataset) is not TensorDataset or any(t.requires_grad for t in dataset.tensors):
        return None
    return dataset.tensors, indices


class _LoaderIter:
    """One pass over a DataLoader (torch's _SingleProcessDataLoaderIter)."""

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        if loader.pin_memory:  # (torch warns when an iterator is made)
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then device pinned "
                          "memory won't be used.", stacklevel=3)
        self._sampler_iter = iter(loader._index_sampler)
        # torch draws the workers' base seed even without workers: the default generator moves on as in torch
        self._base_seed = _random.seed_from(loader.generator)
        self._dataset_iter = iter(loader.dataset) if loader._iterable else None
        self._fast = None
        if loader._auto_collation and loader.collate_fn is default_collate and not loader._iterable:
            self._fast = _rows_of(loader.dataset, [])

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self):
        index = next(self._sampler_iter)  # StopIteration ends the pass
        loader = self._loader
        if loader._iterable:
            return self._next_of_iterable(index)
        if not loader._auto_collation:
            return loader.collate_fn(loader.dataset[index])
        if self._fast is not None:
            tensors, rows = _rows_of(loader.dataset, index)
            return [t[rows] for t in tensors]
        getitems = getattr(loader.dataset, "__getitems__", None)
        data = getitems(index) if callable(getitems) else [loader.dataset[i] for i in index]
        return loader.collate_fn(data)

    def _next_of_iterable(self, index):
        loader = self._loader
        if not loader._auto_collation:
            return loader.collate_fn(next(self._dataset_iter))
        data = list(itertools.islice(self._dataset_iter, len(index)))
        if not data or loader.drop_last and len(data) < len(index):
            raise StopIteration
        return loader.collate_fn(data)
