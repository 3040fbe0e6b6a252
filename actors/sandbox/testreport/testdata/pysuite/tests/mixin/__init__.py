# Test methods that unittest classes in other modules inherit: pytest's
# node id names the inheriting class's module, JUnit XML's file attribute
# names this one.


class ChecksMixin:
    def test_inherited_pass(self):
        self.assertEqual(self.value, 2)

    def test_inherited_fail(self):
        self.assertEqual(self.value, 3)
