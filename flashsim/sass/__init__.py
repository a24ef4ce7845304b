"""The SASS interpreter behind :mod:`flashsim.cuda`: cubin reading, decoding, the warp machine and its
memories, launches, and the diagnostics collected while a kernel runs."""
