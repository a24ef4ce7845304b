"""FlashAttention-2's forward contract: flash_attn_func's argument checks (``check_args``), a float64 and a
plain low-precision reference attention, and flash-attn's acceptance rule for a kernel's output."""

from flashsim.attention.args import (
    DTYPES, LOG2E, MAX_HEADDIM, AttentionArgs, PhiloxGenerator, check_args, default_generator, to_numpy,
)
from flashsim.attention.reference import (
    RuleResult, attention_lowp, attention_reference, max_abs_diff, passes_flash_attn_rule,
)

__all__ = [
    "DTYPES", "LOG2E", "MAX_HEADDIM", "AttentionArgs", "PhiloxGenerator", "RuleResult", "attention_lowp",
    "attention_reference", "check_args", "default_generator", "max_abs_diff", "passes_flash_attn_rule", "to_numpy",
]
