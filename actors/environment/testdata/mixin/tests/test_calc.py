import unittest

from tests import CalcChecks


class CalcTest(CalcChecks, unittest.TestCase):
    pass


class CalcSubclassTest(CalcChecks, unittest.TestCase):
    def test_own(self):
        self.assertEqual(calc_add_twice(1), 2)


def calc_add_twice(x):
    from calc import add
    return add(x, x)
