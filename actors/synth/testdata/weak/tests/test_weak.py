from weak import label, total


def test_total():
    assert total([1, 2, 3]) == 6


def test_total_empty():
    assert total([]) == 0


def test_label():
    assert label("a", 2) == "a:2"


def test_label_empty():
    assert label("", 0) == ":0"
