"""``gradserve.torch.utils.data``: torch.utils.data for client tensors: datasets (``Dataset``,
``IterableDataset``, ``TensorDataset``, ``ConcatDataset``, ``Subset``, ``random_split``), samplers and
``DataLoader`` with torch's batching, shuffling, ``drop_last`` and ``collate_fn``."""

from gradserve.torch.utils.data._collate import default_collate, default_convert
from gradserve.torch.utils.data.dataloader import DataLoader
from gradserve.torch.utils.data.dataset import (
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from gradserve.torch.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)


def get_worker_info():
    """None: batches are made in the main process."""
    return None


__all__ = ["DataLoader", "Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "Subset", "random_split",
           "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler",
           "default_collate", "default_convert", "get_worker_info"]
