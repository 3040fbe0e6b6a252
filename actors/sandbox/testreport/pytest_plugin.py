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
#
# FrognanoReport(path) writes the lines to a new file (validation runs).
# FrognanoReport(None, sink) hands each line to sink instead: graders pass
# _frognano_stream(fd, key), which sends every line at once over a pipe the
# grader owns, numbered and authenticated (see _frognano_stream), and
# _frognano_guard, which reports pytest internals changed behind its back.
import hashlib as _frognano_hashlib
import hmac as _frognano_hmac
import json as _frognano_json
import os as _frognano_os

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


def _frognano_stream(fd, key):
    """A sink that writes "SEQ MAC JSON\\n" lines to fd: SEQ counts from 1,
    MAC is HMAC-SHA256 under key of "SEQ JSON". Everything it uses is bound
    now, so later monkeypatching of os, json or hmac does not reach it."""
    write, new, sha256, seq = _frognano_os.write, _frognano_hmac.new, _frognano_hashlib.sha256, [0]

    def sink(line):
        seq[0] += 1
        body = ("%d " % seq[0]) + line
        data = (("%d %s " % (seq[0], new(key, body.encode("utf-8"), sha256).hexdigest())) + line + "\n").encode("utf-8")
        while data:
            data = data[write(fd, data):]
    return sink


def _frognano_guard(sink):
    """A check of pytest's reporting machinery: it records the code of the
    functions through which a test's outcome travels (and of this
    plugin), and returns a function of the plugin that names those
    replaced since, and says whether the plugin's own sink or methods were
    swapped on the instance."""
    import sys
    watched = {
        "_pytest.runner": ["call_and_report", "call_runtest_hook", "pytest_runtest_makereport", "runtestprotocol",
                           "CallInfo.from_call", "check_interactive_exception"],
        "_pytest.reports": ["TestReport.from_item_and_call", "TestReport.__init__", "CollectReport.__init__",
                            "BaseReport.passed", "BaseReport.failed", "BaseReport.skipped", "BaseReport.outcome"],
        "_pytest.python": ["Function.runtest", "pytest_pyfunc_call", "Function.setup"],
        "_pytest.skipping": ["pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_makereport",
                             "evaluate_skip_marks", "evaluate_xfail_marks"],
        "_pytest.main": ["pytest_runtestloop", "Session.perform_collect"],
        "_pytest.outcomes": ["exit", "skip", "xfail", "fail"],
        "_pytest.unittest": ["TestCaseFunction.runtest"],
        "pluggy._callers": ["_multicall"],
        "pluggy._hooks": ["HookCaller.__call__", "_HookCaller.__call__"],
        "pluggy.hooks": ["_HookCaller.__call__"],
        "pluggy.callers": ["_multicall"],
        "unittest.case": ["TestCase.run", "TestCase.__call__"],
        __name__: ["FrognanoReport.pytest_runtest_logreport", "FrognanoReport.pytest_collectreport",
                   "FrognanoReport.pytest_sessionfinish", "FrognanoReport._write"],
    }

    def look(mod, name):
        obj = sys.modules.get(mod)
        for part in name.split("."):
            if obj is None:
                return None
            d = getattr(obj, "__dict__", None)
            obj = d.get(part) if d is not None and part in d else getattr(obj, part, None)
        for a in ("fget", "__func__"):
            obj = getattr(obj, a, obj)
        return obj

    def fingerprint():
        out = {}
        for mod, names in watched.items():
            for name in names:
                obj = look(mod, name)
                out[mod + ":" + name] = (obj, getattr(obj, "__code__", None))
        return out
    before = fingerprint()

    def changed(plugin):
        now = fingerprint()
        out = sorted(k for k, (obj, code) in before.items() if now[k][0] is not obj or now[k][1] is not code)
        if getattr(plugin, "_sink", None) is not sink:
            out.append("the plugin's sink")
        out += ["the plugin's " + k for k in vars(plugin) if k.startswith("pytest_") or k in ("_write", "_new_hookimpls", "_hookimpls")]
        return out
    return changed


# Hooks through which a test's outcome travels: an implementation of one
# registered after pytest was configured, by anything but a conftest
# module, is code under test speaking for pytest.
_FROGNANO_HOOKS = ("pytest_runtest_makereport", "pytest_runtest_logreport", "pytest_report_teststatus",
                   "pytest_runtest_protocol", "pytest_runtest_setup", "pytest_runtest_call",
                   "pytest_runtest_teardown", "pytest_pyfunc_call", "pytest_collection_modifyitems",
                   "pytest_collectreport", "pytest_make_collect_report", "pytest_sessionfinish",
                   "pytest_runtestloop", "pytest_itemcollected")


class FrognanoReport:
    def __init__(self, path, sink=None, guard=None, repo=None):
        self._guard, self._pm, self._impls, self._repo = guard, None, None, repo
        if sink is not None:
            self._sink, self._file = sink, None
            return
        # "x": the file must be new; the runner made its directory for
        # this run alone.
        self._file = open(path, "x", encoding="utf-8")

        def sink(line):
            self._file.write(line + "\n")
            self._file.flush()
        self._sink = sink

    def _write(self, event):
        if self._file is not None and self._file.closed:
            return
        if self._file is None:
            # A grading stream: check before every line (the grader rejects
            # the run at the first "tampered" line).
            guard = self._guard
            changed = (guard(self) if callable(guard) else ["the plugin's guard"]) + FrognanoReport._new_hookimpls(self)
            if changed:
                self._sink(_frognano_json.dumps({"phase": "tampered", "changed": changed}))
        self._sink(_frognano_json.dumps(event))

    def _hookimpls(self):
        out = {}
        for name in _FROGNANO_HOOKS:
            caller = getattr(self._pm.hook, name, None)
            for impl in (caller.get_hookimpls() if caller is not None else ()):
                out[(name, id(impl.function))] = impl
        return out

    def _new_hookimpls(self):
        # Two rules: no hook implementation may come from a module of the
        # repository other than a conftest.py (the grader restored those
        # from the image), and none but a conftest's may appear after the
        # session started (when collection begins importing the code
        # under test).
        if self._pm is None:
            return []
        import sys
        bad = []
        for key, impl in self._hookimpls().items():
            plugin = impl.plugin
            is_module = type(plugin).__name__ == "module"
            mod = plugin if is_module else sys.modules.get(getattr(type(plugin), "__module__", ""), None)
            origin = _frognano_os.path.realpath(str(getattr(mod, "__file__", "") or "/"))
            conftest = is_module and origin.endswith(_frognano_os.sep + "conftest.py")
            if conftest:
                continue
            if self._repo and origin.startswith(self._repo + _frognano_os.sep):
                bad.append("hook %s of plugin %s from %s" % (key[0], impl.plugin_name, origin))
            elif self._impls is not None and key not in self._impls:
                bad.append("hook %s of plugin %s registered during the run" % (key[0], impl.plugin_name))
        return bad

    @_frognano_pytest.hookimpl(trylast=True)
    def pytest_configure(self, config):
        self._pm = config.pluginmanager

    @_frognano_pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session):
        if self._pm is not None:
            self._impls = set(self._hookimpls())

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
        self._write({"phase": "finish", "exitstatus": int(exitstatus),
                     "collected": int(getattr(session, "testscollected", -1) or 0)})
        if self._file is not None:
            self._file.close()
