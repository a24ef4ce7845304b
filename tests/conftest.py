"""Shared test configuration of this repository. The flashsim plugin (markers, --gpu) is the pytest11
entry point of the installed package; from a plain checkout it is loaded here instead. The hypothesis
profiles of this test suite live here, not in the plugin, so that installing flashsim changes nothing in
other projects' sessions: ``dev`` (100 examples), ``ci`` (derandomized, no deadline) when CI is set;
under --gpu the plugin's flashsim-gpu profile applies."""

import os
import sys

pytest_plugins = ["pytester"]
if "flashsim.pytest_plugin" not in sys.modules:  # not installed: the entry point did not load it
    pytest_plugins.append("flashsim.pytest_plugin")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_configure(config):
    try:
        from hypothesis import settings
    except ImportError:
        return
    default = settings.get_profile("default")
    settings.register_profile("dev", parent=default, max_examples=100)
    settings.register_profile("ci", parent=default, derandomize=True, max_examples=100, deadline=None)
    try:
        chosen = config.getoption("hypothesis_profile")
    except ValueError:
        chosen = None
    if chosen or config.getoption("gpu", default=False):
        return
    settings.load_profile("ci" if _in_ci() else "dev")
