"""Shared test configuration. The flashsim plugin (markers, --gpu, hypothesis profiles) is the pytest11
entry point of the installed package; from a plain checkout it is loaded here instead."""

import sys

pytest_plugins = ["pytester"]
if "flashsim.pytest_plugin" not in sys.modules:  # not installed: the entry point did not load it
    pytest_plugins.append("flashsim.pytest_plugin")
