# frognano's pytest plugin: pytest's own record of each test, one JSON
# object per line, written and flushed as each event happens (so the same
# lines could be streamed instead of written to a file):
#
#   {"nodeid": ID, "phase": "collect"|"setup"|"call"|"teardown",
#    "outcome": "passed"|"failed"|"skipped", "duration": SECONDS,
#    "message": TEXT}
#   {"phase": "finish", "exitstatus": N}
#
# IDs are pytest's node ids, exactly what pytest accepts on its command line
# (JUnit XML rebuilds them from classname and file, and gets inherited tests
# wrong). Collectors appear only when they did not pass: a test module that
# failed to import, or one skipped whole. "message" is there when the
# outcome is not "passed" (or the test was an xfail). The finish line is
# last; a report without it was cut short.
#
# Runners pass an instance to pytest.main(plugins=[...]) rather than `-p`,
# so no module of the repository under test can stand in for it. Plain
# Python 3.7+ and pytest 6+: it runs inside the environment's interpreter.
import json as _frognano_json

import pytest as _frognano_pytest

_FROGNANO_MESSAGE_MAX = 2000


def _frognano_message(report):
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail is not None and report.outcome == "skipped":
        return "xfail: " + str(wasxfail)
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])  # a skip: (path, line, reason)
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message)[:_FROGNANO_MESSAGE_MAX]
    # A collection error or a plain-text repr: its last lines say what
    # went wrong ("E   ModuleNotFoundError: ...").
    return str(longrepr)[-_FROGNANO_MESSAGE_MAX:]


class FrognanoReport:
    def __init__(self, path):
        # "x": the file must be new; the runner made its directory for
        # this run alone.
        self._file = open(path, "x", encoding="utf-8")

    def _write(self, event):
        if self._file.closed:
            return
        self._file.write(_frognano_json.dumps(event) + "\n")
        self._file.flush()

    def pytest_collectreport(self, report):
        if report.outcome == "passed":
            return
        self._write({"nodeid": report.nodeid, "phase": "collect", "outcome": report.outcome,
                     "duration": 0.0, "message": _frognano_message(report)})

    def pytest_runtest_logreport(self, report):
        event = {"nodeid": report.nodeid, "phase": report.when, "outcome": report.outcome,
                 "duration": float(getattr(report, "duration", 0.0) or 0.0)}
        if report.outcome != "passed" or getattr(report, "wasxfail", None) is not None:
            event["message"] = _frognano_message(report)
        self._write(event)

    @_frognano_pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        self._write({"phase": "finish", "exitstatus": int(exitstatus)})
        self._file.close()
