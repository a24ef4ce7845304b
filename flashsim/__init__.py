"""flashsim: a bit-level functional simulator of NVIDIA warp-level machinery (sm_90)."""

from flashsim._version import __version__
from flashsim.errors import ArgumentError, FlashsimError, SimulatedFault, TraceError

__all__ = ["ArgumentError", "FlashsimError", "SimulatedFault", "TraceError", "__version__", "flash_attn_func"]


def __getattr__(name):
    # flash_attn_func pulls in numpy-level modules; import it on first use so the package stays light
    if name == "flash_attn_func":
        from flashsim.api import flash_attn_func

        return flash_attn_func
    raise AttributeError(f"module 'flashsim' has no attribute {name!r}")
