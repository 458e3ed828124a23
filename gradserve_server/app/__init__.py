"""gradserve HTTP service: PyTorch autograd semantics over HTTP, computed by the numpy engine."""
