"""``torch.backends.cudnn``: no cuDNN (torch built without CUDA); its flags are kept, to no effect."""

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    return False


def version() -> None:
    return None
