import calc


class CalcChecks:
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_sub(self):
        self.assertEqual(calc.sub(5, 3), 2)

    def test_clamp_low(self):
        self.assertEqual(calc.clamp(-4, 0, 10), 0)

    def test_clamp_high(self):
        self.assertEqual(calc.clamp(14, 0, 10), 10)

    def test_clamp_inside(self):
        self.assertEqual(calc.clamp(4, 0, 10), 4)

    def test_mean(self):
        self.assertEqual(calc.mean([1, 2, 3, 6]), 3)

    def test_mean_empty(self):
        with self.assertRaises(ValueError):
            calc.mean([])
