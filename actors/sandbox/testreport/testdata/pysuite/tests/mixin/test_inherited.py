import unittest

from . import ChecksMixin


class InheritedTest(ChecksMixin, unittest.TestCase):
    value = 2

    def test_own(self):
        self.assertTrue(self.value)
