"""Python twins of the CUDA kernels in gpu/kernels: the same arithmetic in the same order, bit for bit."""
