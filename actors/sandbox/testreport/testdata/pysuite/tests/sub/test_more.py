def test_sub_pass():
    assert "frog".upper() == "FROG"
