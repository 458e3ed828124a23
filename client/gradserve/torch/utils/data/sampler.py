"""torch.utils.data's samplers: ``Sampler``, ``SequentialSampler``, ``RandomSampler``, ``SubsetRandomSampler``,
``BatchSampler``. The random ones draw as torch's do (see ``_random``): without a generator, a
``RandomSampler`` seeds a private generator from one draw of the default generator each epoch, then takes
``randperm(n)`` from it."""

from __future__ import annotations

import itertools

import numpy as np

from gradserve.torch.utils.data import _random


class Sampler:
    """Yields indices (or lists of indices) of a dataset."""

    def __init__(self, data_source=None) -> None:
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class RandomSampler(Sampler):
    """``RandomSampler(data_source, replacement=False, num_samples=None, generator=None)``."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={self.replacement}")
        if not _positive_int(self.num_samples):
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        generator = self.generator
        if generator is None:
            generator = _random.new_generator(_random.seed_from(None))
        if self.replacement:  # torch draws in chunks of 32
            for _ in range(self.num_samples // 32):
                yield from _random.randint(n, 32, generator)
            yield from _random.randint(n, self.num_samples % 32, generator)
        else:
            for _ in range(self.num_samples // n):
                yield from _random.randperm(n, generator)
            yield from _random.randperm(n, generator)[:self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """``SubsetRandomSampler(indices, generator=None)``: ``indices`` in the order of one ``randperm``."""

    def __init__(self, indices, generator=None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        for i in _random.randperm(len(self.indices), self.generator):
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``WeightedRandomSampler(weights, num_samples, replacement=True, generator=None)``: indices drawn with
    probabilities proportional to ``weights`` (one ``multinomial`` per epoch)."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None) -> None:
        if not _positive_int(num_samples):
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        shape = np.shape(np.asarray(weights.tolist() if hasattr(weights, "tolist") else weights, dtype=np.float64))
        if len(shape) != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {shape}")
        self.weights = [float(w) for w in (weights.tolist() if hasattr(weights, "tolist") else weights)]
        self.num_samples, self.replacement, self.generator = num_samples, replacement, generator

    def __iter__(self):
        yield from _random.multinomial(self.weights, self.num_samples, self.replacement, self.generator)

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """``BatchSampler(sampler, batch_size, drop_last)``: lists of ``batch_size`` indices (the last one shorter
    unless ``drop_last``)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool) -> None:
        if not _positive_int(batch_size):
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        it = iter(self.sampler)
        while batch := list(itertools.islice(it, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
