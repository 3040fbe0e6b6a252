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
# FrognanoReport(None, sink) hands each event to sink instead: graders pass
# _frognano_stream(fd, key, check), which sends every line at once over a
# pipe the grader owns, numbered and authenticated, each after running
# check = _frognano_guard(repo), which reports pytest internals changed
# behind its back (FrognanoReport(None, sink, check, repo) arms it).
import hashlib as _frognano_hashlib
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


def _frognano_encoder():
    """json.dumps for the plugin's events (dicts of str, int, float, None,
    bool and lists of str), with the same output, made of C functions bound
    now: nothing the code under test can replace later (json.dumps, the
    plugin's module globals, builtins) changes a line between the plugin's
    event and the stream."""
    from json.encoder import encode_basestring_ascii as string
    frepr, irepr, join = float.__repr__, int.__repr__, ", ".join
    type_, str_, bool_, int_, float_, list_, tuple_, dict_ = type, str, bool, int, float, list, tuple, dict
    special = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}.get

    def enc(v):
        t = type_(v)
        if t is str_:
            return string(v)
        if v is None:
            return "null"
        if t is bool_:
            return "true" if v else "false"
        if t is int_:
            return irepr(v)
        if t is float_:
            r = frepr(v)
            return special(r, r)
        if t is list_ or t is tuple_:
            return "[" + join([enc(x) for x in v]) + "]"
        if t is dict_:
            return "{" + join([string(str_(k)) + ": " + enc(x) for k, x in v.items()]) + "}"
        return string(str_(v))
    return enc


def _frognano_stream(fd, key, check=None):
    """A sink that writes "SEQ MAC JSON\\n" lines to fd: SEQ counts from 1,
    MAC is HMAC-SHA256 under key of "SEQ JSON". It takes an event (a dict,
    encoded by _frognano_encoder) or a line. With a check (_frognano_guard),
    every line but the first is preceded by the check, and by a "tampered"
    line naming what it found: the check is in the same closure as the key,
    so no line reaches the stream without it unless the closure itself is
    rewritten. Everything it uses is bound now, so later monkeypatching of
    os, json, hmac or builtins does not reach it; the MAC is computed on
    hashlib's C objects (RFC 2104 by hand), so no Python function that code
    under test could swap ever sees the key."""
    write, sha256, seq, type_, str_, error = _frognano_os.write, _frognano_hashlib.sha256, [0], type, str, BaseException
    encode = _frognano_encoder()
    k = bytes(key)
    if len(k) > 64:
        k = sha256(k).digest()
    k = k.ljust(64, b"\0")
    inner, outer = sha256(bytes(b ^ 0x36 for b in k)), sha256(bytes(b ^ 0x5C for b in k))
    del k, key

    def send(line):
        seq[0] += 1
        body = ("%d " % seq[0]) + line
        i = inner.copy()
        i.update(body.encode("utf-8"))
        o = outer.copy()
        o.update(i.digest())
        data = (("%d %s " % (seq[0], o.hexdigest())) + line + "\n").encode("utf-8")
        while data:
            data = data[write(fd, data):]

    def sink(event):
        line = event if type_(event) is str_ else encode(event)
        if check is not None and seq[0]:
            try:
                changed = check()
            except error as e:  # what the check reads was broken: tampering too
                changed = ["the guard failed: " + type_(e).__name__]
            if changed:
                send(encode({"phase": "tampered", "changed": changed}))
        send(line)
    return sink


def _frognano_guard(repo=None):
    """The check of pytest's reporting machinery that the grading stream
    runs before every line (see _frognano_stream). It returns check:
    check() names what changed since it was armed; the plugin arms it in
    three steps, once each, by check("plugin", itself), check("configure",
    config) and check("session", session) (a step again, or out of order,
    is itself reported).

    What it compares, by identity, against what it recorded:
      - every function and class in the modules through which a test's
        outcome travels (pytest's runner, reports, python, skipping, main,
        outcomes, unittest, nodes, terminal, _code.code, python_api,
        raises, assertion.rewrite; pluggy's modules of each version;
        unittest.case) and this plugin's class:
        the module's and class's entries (a function replaced by
        assignment) and each function's __code__ (replaced in place);
      - the plugin's instance: its class and every attribute;
      - from pytest's configuration on: the plugin manager, its hook
        relay and inner hook executor (add_hookcall_monitoring);
      - from the session's start on: for each hook in _FROGNANO_HOOKS, its
        caller on the relay, the caller's executor, its implementations
        (none may appear but a conftest module's, see origin; none may
        go), each one's
        function and that function's __code__; and sys.gettrace() and
        sys.getprofile(). An implementation from a module of the
        repository other than a conftest.py is reported whenever it is
        registered.

    Cost. The old check re-resolved a hand-picked list of names and
    resolved every hook implementation's file with realpath before every
    line: about 0.6 CPU-s of a 1 CPU-s grading run of six's 200 tests.
    Here everything is resolved once, when it is armed, into flat lists of
    (container, key, object) and (function, code); each check is a few
    C-level passes (map over operator.is_) over those lists, and a file is
    resolved only for an implementation not seen before (once: cached by
    the implementation object, which the cache keeps alive so its id is
    never reused). Running it before every line, not at fixed points,
    keeps what the old check had: a change made and undone between two
    lines is caught if it is in place at any line, and a line never leaves
    while one is."""
    import sys
    import operator
    is_, getitem, attrgetter = operator.is_, operator.getitem, operator.attrgetter
    all_, map_, len_, list_, type_, vars_, getattr_, isinstance_, id_ = all, map, len, list, type, vars, getattr, isinstance, id
    zip_, set_, str_, modules = zip, set, str, sys.modules
    isfile, basename = _frognano_os.path.isfile, _frognano_os.path.basename
    code_of = attrgetter("__code__")
    realpath, sep = _frognano_os.path.realpath, _frognano_os.sep
    gettrace, getprofile = sys.gettrace, sys.getprofile
    function, classmethod_, staticmethod_, property_ = type(_frognano_message), classmethod, staticmethod, property

    mods = ["_pytest.runner", "_pytest.reports", "_pytest.python", "_pytest.skipping", "_pytest.main",
            "_pytest.outcomes", "_pytest.unittest", "_pytest.nodes", "_pytest.terminal", "_pytest._code.code",
            "_pytest.python_api", "_pytest.raises", "_pytest.assertion.rewrite",
            "pluggy._callers", "pluggy._hooks", "pluggy._manager", "pluggy._result", "pluggy._execution",
            "pluggy._caller", "pluggy.callers", "pluggy.hooks", "pluggy.manager", "unittest.case"]
    # Flat lists: entries (container's dict, key, object) and code (function, code).
    d_dicts, d_keys, d_vals, c_funcs, c_codes, names = [], [], [], [], [], []

    def entry(d, key, obj, name):
        d_dicts.append(d)
        d_keys.append(key)
        d_vals.append(obj)
        names.append(name)
        for a in ("fget", "fset", "__func__"):
            obj = getattr_(obj, a, obj)
        code = getattr_(obj, "__code__", None)
        if code is not None and type_(obj) is function:
            c_funcs.append(obj)
            c_codes.append(code)

    def add_class(cls, name):
        for key, obj in list_(vars_(cls).items()):
            if isinstance_(obj, (function, classmethod_, staticmethod_, property_)):
                entry(cls.__dict__, key, obj, name + "." + key)

    def add_module(modname):
        mod = sys.modules.get(modname)
        if mod is None:
            return
        for key, obj in list_(vars_(mod).items()):
            if isinstance_(obj, (function, type_)):
                entry(mod.__dict__, key, obj, modname + ":" + key)
                if isinstance_(obj, type_) and getattr_(obj, "__module__", None) == modname:
                    add_class(obj, modname + ":" + key)
    for m in mods:
        add_module(m)
    add_class(FrognanoReport, "FrognanoReport")
    # The parts of the check armed later: attributes pinned as (object,
    # attribute, value), the hooks' implementations, and arming notes.
    pins = []   # (object, attribute, value, name, whether read from its __dict__)
    hooks = []  # per hook: [name, caller, impls, functions, underlying functions, codes]
    seen = {}   # implementation -> (it, None or why it is not allowed); keeps it alive
    state = {"armed": (), "notes": []}

    def pin(obj, a, name):
        # An instance attribute, read from the instance's __dict__ (a
        # method read through getattr is a new object each time) or, for
        # a class with __slots__, its slot.
        dicted = hasattr(obj, "__dict__")
        pins.append((obj, a, vars_(obj).get(a) if dicted else getattr_(obj, a, None), name, dicted))

    def origin(impl):
        # A conftest: a module whose file is a conftest.py that exists
        # (the grader restored every conftest.py of the repository from
        # the image) and in which the hook's function was compiled, so a
        # module object made up to look like one does not pass.
        plugin = impl.plugin
        is_module = type_(plugin).__name__ == "module"
        mod = plugin if is_module else modules.get(getattr_(type_(plugin), "__module__", ""), None)
        where = realpath(str_(getattr_(mod, "__file__", "") or "/"))
        f = getattr_(impl.function, "__func__", impl.function)
        code = getattr_(f, "__code__", None) if type_(f) is function else None
        conftest = is_module and basename(where) == "conftest.py" and isfile(where) and \
            code is not None and realpath(str_(code.co_filename)) == where
        return conftest, where

    def judge(name, impl, during):
        if id_(impl) in seen:
            return seen[id_(impl)][1]
        conftest, where = origin(impl)
        why = None
        if not conftest:
            if repo and where.startswith(repo + sep):
                why = "hook %s of plugin %s from %s" % (name, impl.plugin_name, where)
            elif during:
                why = "hook %s of plugin %s registered during the run" % (name, impl.plugin_name)
        seen[id_(impl)] = (impl, why)
        return why

    def snapshot(h, impls):
        funcs = list_(map_(attrgetter("function"), impls))
        under = [getattr_(f, "__func__", f) for f in funcs]
        under = [f for f in under if type_(f) is function]
        h[2:] = [impls, funcs, under, list_(map_(code_of, under))]

    def arm(step, obj):
        done = state["armed"]
        order = ("plugin", "configure", "session")
        if len_(done) >= 3 or order[len_(done)] != step:
            state["notes"].append("the guard armed again (%s)" % step)
            return
        state["armed"] = done + (step,)
        if step == "plugin":
            state["plugin"], state["cls"] = obj, type_(obj)
            state["pvars"] = d = dict(vars_(obj))
            state["pkeys"], state["pvals"] = list_(d), list_(d.values())
        elif step == "configure":
            pm = obj.pluginmanager
            state["pm"] = pm
            pin(obj, "pluginmanager", "the configuration's plugin manager")
            for a in ("hook", "_inner_hookexec", "_hookexec"):
                pin(pm, a, "the plugin manager's " + a)
        else:
            pm = state.get("pm")
            if pm is None:
                return
            relay = vars_(pm.hook)
            state["relay"] = relay
            for name in _FROGNANO_HOOKS:
                caller = relay.get(name)
                if caller is None:
                    continue
                h = [name, caller]
                impls = list_(caller.get_hookimpls())
                snapshot(h, impls)
                hooks.append(h)
                pin(caller, "_hookexec", "the executor of hook " + name)
                for impl in impls:
                    judge(name, impl, False)
            state["trace"] = (gettrace(), getprofile())

    def check(*step):
        if step:
            arm(*step)
            return []
        out = list_(state["notes"])
        if not all_(map_(is_, map_(getitem, d_dicts, d_keys), d_vals)) or not all_(map_(is_, map_(code_of, c_funcs), c_codes)):
            for d, k, v, n in zip_(d_dicts, d_keys, d_vals, names):
                if d.get(k) is not v:
                    out.append(n)
            for f, c in zip_(c_funcs, c_codes):
                if f.__code__ is not c:
                    out.append("the code of %s.%s" % (getattr_(f, "__module__", "?"), getattr_(f, "__qualname__", "?")))
        plugin = state.get("plugin")
        if plugin is not None:
            pv = vars_(plugin)
            if type_(plugin) is not state["cls"] or len_(pv) != len_(state["pkeys"]) or \
                    not all_(map_(is_, map_(pv.get, state["pkeys"]), state["pvals"])):
                out.append("the plugin's attributes")
        elif state["armed"] == ():
            out.append("the plugin's guard was never armed")
        for obj, a, v, n, dicted in pins:
            if (vars_(obj).get(a) if dicted else getattr_(obj, a, None)) is not v:
                out.append(n)
        if hooks:
            relay = state["relay"]
            if vars_(state["pm"].hook) is not relay:
                out.append("the hook relay")
            for h in hooks:
                name, caller, impls = h[0], h[1], h[2]
                c = relay.get(name)
                if c is not caller:
                    out.append("the caller of hook " + name)
                    continue
                now = list_(caller.get_hookimpls())
                if len_(now) != len_(impls) or not all_(map_(is_, now, impls)):
                    # By identity (an implementation's __eq__ is not asked).
                    ids, old = set_(map_(id_, now)), set_(map_(id_, impls))
                    gone = [i for i in impls if id_(i) not in ids]
                    if gone:
                        out.append("hook %s lost %d implementations" % (name, len_(gone)))
                    bad = [judge(name, i, True) for i in now if id_(i) not in old]
                    bad = [b for b in bad if b]
                    out += bad
                    if not bad and not gone:
                        snapshot(h, now)  # a conftest's, collected during the run
                        impls = now
                    else:
                        continue
                if not all_(map_(is_, map_(attrgetter("function"), impls), h[3])) or \
                        not all_(map_(is_, map_(code_of, h[4]), h[5])):
                    out.append("an implementation of hook " + name)
            trace, profile = state["trace"]
            if gettrace() is not trace or getprofile() is not profile:
                out.append("a trace or profile function")
        return out
    return check


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
        # guard: the check that sink runs before every line (grading:
        # _frognano_guard(repo), also given to _frognano_stream); the
        # plugin only arms it.
        self._guard = guard
        if sink is not None:
            self._sink, self._file = sink, None
        else:
            # "x": the file must be new; the runner made its directory for
            # this run alone.
            self._file = open(path, "x", encoding="utf-8")
            self._sink = None
        if guard is not None:
            guard("plugin", self)

    def _write(self, event):
        if self._file is None:
            self._sink(event)
        elif not self._file.closed:
            self._file.write(_frognano_json.dumps(event) + "\n")
            self._file.flush()

    @_frognano_pytest.hookimpl(trylast=True)
    def pytest_configure(self, config):
        if self._guard is not None:
            self._guard("configure", config)

    @_frognano_pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session):
        if self._guard is not None:
            self._guard("session", session)

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
