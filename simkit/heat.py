"""Placeholder: spherical Brownian motion kernel (being written; see issue 2)."""
from simkit.kernels import MarkovKernel


class BrownianKernel(MarkovKernel):
    def __init__(self, t):
        raise NotImplementedError("BrownianKernel is not implemented yet")
