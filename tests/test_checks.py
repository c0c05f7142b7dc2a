import math

import pytest

from llmkit.checks import check_bool, check_int, check_number, is_int


def test_int_refuses_bool_and_float_and_names_the_argument():
    assert check_int("n", 3, minimum=1) == 3
    assert is_int(0) and not is_int(True) and not is_int(1.0)
    with pytest.raises(TypeError, match="n must be an int, got True"):
        check_int("n", True)
    with pytest.raises(TypeError, match="n must be an int"):
        check_int("n", 2.0)
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        check_int("n", 0, minimum=1)
    with pytest.raises(ValueError, match="at most 5"):
        check_int("n", 6, maximum=5)


def test_number_bounds_and_finiteness():
    assert check_number("p", 0.5, minimum=0, maximum=1) == 0.5
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="finite"):
            check_number("p", bad)
    with pytest.raises(ValueError, match="greater than 0"):
        check_number("t", 0.0, above=0)
    with pytest.raises(TypeError):
        check_number("t", False)
    with pytest.raises(TypeError):
        check_number("t", "1")


def test_bool_is_exact():
    assert check_bool("cache", False) is False
    with pytest.raises(TypeError, match="cache must be True or False"):
        check_bool("cache", "false")
