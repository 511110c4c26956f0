"""pytest plugin (loaded by tests/conftest.py): a run in which every test of a module skipped
fails.

A whole module skipping is how a missing tool once turned the detection matrix green: every
test skipped and pytest exited 0. Under the suite's policy (``tests.helpers.missing_tool``) a
missing tool is an error, but a skip can still come from elsewhere; a module that ran nothing
is reported and the run's exit status is 1. Skips for what the suite cannot provide (an
external cluster under KMON_BOOTSTRAP, a build installed uncompiled) are allowed: their reasons
contain one of ``ALLOWED``. Expected failures (xfail) count as run.
"""

from __future__ import annotations

from typing import Any

import pytest

ALLOWED = ("KMON_BOOTSTRAP", "installed uncompiled")

NAME = "kmon-skipped-modules"
_SKIPPED = "skipped"
_RAN = "ran"


class SkippedModules:
    def __init__(self) -> None:
        self.tests: dict[str, dict[str, str]] = {}  # module -> test -> skipped / ran

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", 1)[0]
        tests = self.tests.setdefault(module, {})
        if report.skipped and not hasattr(report, "wasxfail"):
            if not any(reason in str(report.longrepr) for reason in ALLOWED):
                tests[report.nodeid] = _SKIPPED
            else:
                tests[report.nodeid] = _RAN
        elif report.when == "call" or report.failed:
            tests.setdefault(report.nodeid, _RAN)

    def whole(self) -> list[str]:
        return sorted(m for m, tests in self.tests.items()
                      if tests and all(state == _SKIPPED for state in tests.values()))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.whole() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for module in self.whole():
            terminalreporter.write_line(
                f"FAILED {module}: every test of the module skipped (see the skip reasons above;"
                " a whole module skipping fails the run)", red=True, bold=True)


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(NAME):
        config.pluginmanager.register(SkippedModules(), NAME)
