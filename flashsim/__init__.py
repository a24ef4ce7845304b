"""flashsim: a bit-level functional simulator of NVIDIA warp-level machinery (sm_90)."""

from flashsim._version import __version__
from flashsim.errors import ArgumentError, FlashsimError, SimulatedFault, TraceError

__all__ = ["ArgumentError", "FlashsimError", "SimulatedFault", "TraceError", "__version__", "flash_attn_func",
           "flash_attn_varlen_func", "flash_attn_with_kvcache"]


def __getattr__(name):
    # the API pulls in numpy-level modules; import it on first use so the package stays light
    if name in ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"):
        from flashsim import api

        return getattr(api, name)
    raise AttributeError(f"module 'flashsim' has no attribute {name!r}")
