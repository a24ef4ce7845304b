"""flashsim: a bit-level functional simulator of NVIDIA warp-level machinery (sm_90)."""

from flashsim.errors import ArgumentError, FlashsimError, SimulatedFault, TraceError

__version__ = "0.1.0"

__all__ = ["ArgumentError", "FlashsimError", "SimulatedFault", "TraceError", "__version__"]
