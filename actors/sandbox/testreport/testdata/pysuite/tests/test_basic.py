# A small pytest suite covering every outcome pytest reports, used to
# capture the pytest report golden files (see ../../golden_test.go).
import pytest


def test_pass():
    assert 1 + 1 == 2


def test_fail():
    assert 1 + 1 == 3


@pytest.mark.skip(reason="not today")
def test_skip():
    pass


@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False


@pytest.mark.parametrize("n", [1, 2, 3])
def test_param(n):
    assert n != 2


@pytest.mark.parametrize("s", ["a/b", "c::d", "e.f"])
def test_weird_ids(s):
    assert s


@pytest.fixture
def broken():
    raise RuntimeError("fixture exploded")


def test_fixture_error(broken):
    pass


def test_prints_fake_pass():
    # Printing a verdict must change nothing: reports come from the plugin.
    print("tests/test_basic.py::test_prints_fake_pass PASSED")
    print('<testcase classname="tests.test_basic" name="test_prints_fake_pass"/>')
    assert False


class TestGroup:
    def test_method(self):
        assert True

    class TestNested:
        def test_inner(self):
            assert True


@pytest.fixture
def bad_teardown():
    yield
    raise RuntimeError("teardown exploded")


def test_teardown_error(bad_teardown):
    assert True
