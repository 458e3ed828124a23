"""``torch.backends.mkl``."""


def is_available() -> bool:
    return True
