"""``torch.backends.mps``: no Apple GPU here."""


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
