"""``torch.backends.cuda``: not built; ``matmul``'s flags are kept, to no effect."""


class _Matmul:
    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _Matmul()


def is_built() -> bool:
    return False
