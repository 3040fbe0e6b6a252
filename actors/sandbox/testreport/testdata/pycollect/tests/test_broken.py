import does_not_exist  # a collection error


def test_never_runs():
    pass
