"""Shared memory: a per-CTA byte array with GPU-like faults, a bank accountant and a race detector.

- :mod:`flashsim.smem.banks`: the bank-conflict rule (wavefronts and ideal wavefronts of a warp instruction
  as Nsight Compute counts them), the candidate counting models, the per-tag ledger;
- :mod:`flashsim.smem.cp_async`: the rule Nsight Compute counts cp.async (LDGSTS) by on sm_90;
- :mod:`flashsim.smem.memory`: :class:`SharedMemory` (the bytes, faults, initcheck, pending cp.async copies)
  and the :class:`Event` a warp instruction returns;
- :mod:`flashsim.smem.races`: the race detector (the per-word shadow, hazards, barriers).
"""

from flashsim.smem.banks import (
    BANKS, MODELS, OPS, PAIR_BROADCAST, PHASES, SM90, WIDTHS, WORD, CP_ASYNC_P0, BankLedger, BankModel, BankRow,
    bank_of, bank_table, phases_of, wavefronts,
)
from flashsim.smem.cp_async import cp_async_table, cp_async_wavefronts
from flashsim.smem.memory import MAX_PER_CTA, RESERVED, Event, SharedMemory
from flashsim.smem.races import Race, RaceAccess, RaceError

__all__ = [
    "BANKS", "BankLedger", "BankModel", "BankRow", "Event", "MODELS", "PHASES", "PAIR_BROADCAST", "SM90", "Race",
    "RaceAccess", "RaceError", "SharedMemory", "bank_of", "bank_table", "cp_async_table", "cp_async_wavefronts",
    "phases_of", "wavefronts", "CP_ASYNC_P0",
    # the constants of the rules and of a CTA's shared memory
    "MAX_PER_CTA", "OPS", "RESERVED", "WIDTHS", "WORD",
]
