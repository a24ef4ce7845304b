"""Transitional: the ``flashsim trace`` command lives in :mod:`flashsim.cli.trace`.

Only ``_ints`` is left here, for ``flashsim/sass/fstrace.py`` (``main``), which imports it from this module
while that file is being rewritten; it is :func:`flashsim.options.id_list`. Delete this module once
fstrace.py imports ``id_list`` from :mod:`flashsim.options` (tests/test_layering.py lists it in
``TRANSITIONAL_MODULES``).
"""

from flashsim.options import id_list as _ints

__all__ = ["_ints"]
