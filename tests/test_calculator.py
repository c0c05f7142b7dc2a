"""llmkit.course.calculator: Python's arithmetic on untrusted text, without eval, with size limits."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmkit.course.calculator import MAX_EXPRESSION_LENGTH, CalculatorError, calculate


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("2 + 3 * 4", 14),
        ("(2 + 3) * 4", 20),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("-7 % 3", 2),
        ("7.5 % 2", 1.5),
        ("2 ** 10", 1024),
        ("2 ** 3 ** 2", 512),  # ** is right-associative
        ("-2 ** 2", -4),  # ** binds tighter than unary minus
        ("2 ** -1", 0.5),
        ("+3 - -3", 6),
        ("1_000 * 1e3", 1_000_000.0),
        ("  37 * 91  ", 3367),
        ("0.1 + 0.2", 0.1 + 0.2),
        ("10 ** 100", 10**100),
        ("abs(-3)", 3),
        ("sqrt(16)", 4.0),
        ("round(2.567, 2)", 2.57),
        ("round(2.5)", 2),  # Python rounds halves to even
        ("round(1234, -2)", 1200),
        ("2 * pi", 2 * math.pi),
        ("e ** 2", math.e**2),
        ("-" * 299 + "1", -1),  # the deepest nesting the length limit allows still evaluates
        ("(" * 149 + "1" + ")" * 149, 1),
    ],
)
def test_known_values(expression, expected):
    result = calculate(expression)
    assert result == expected
    assert type(result) is type(expected)


# Random arithmetic that we generate ourselves, so Python's eval of it is trusted. Powers take a
# small literal base and exponent, which keeps every value far below the calculator's size limit.
leaves = st.integers(0, 12).map(str)
powers = st.tuples(st.integers(0, 9), st.integers(-1, 3)).map(lambda p: f"{p[0]} ** {p[1]}")
operators = st.sampled_from(["+", "-", "*", "/", "//", "%"])


def combine(children):
    binary = st.tuples(children, operators, children, st.booleans()).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})" if t[3] else f"{t[0]} {t[1]} {t[2]}"
    )
    return st.one_of(binary, children.map(lambda c: f"-{c}"), children.map(lambda c: f"({c})"))


expressions = st.recursive(st.one_of(leaves, powers), combine, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(expressions)
def test_matches_python_on_random_arithmetic(expression):
    try:
        expected = eval(expression)  # trusted: built by the strategy above, not by a model
    except ZeroDivisionError:
        with pytest.raises(CalculatorError, match="division by zero"):
            calculate(expression)
        return
    result = calculate(expression)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    "expression, reason",
    [
        ("__import__('os')", "only functions are abs, round, sqrt"),
        ("__import__('os').system('echo hi')", "only functions"),
        ("().__class__", "attribute access"),
        ("(1).__class__", "attribute access"),
        ("lambda: 1", "lambda"),
        ("x + 1", "unknown name"),
        ("open", "unknown name"),
        ("math.sqrt(4)", "only functions"),
        ("abs(x=1)", "by position"),
        ("abs(*[1])", "by position"),
        ("'a' * 3", "str values are not numbers"),
        ("True + 1", "bool values are not numbers"),
        ("1j * 2", "complex values are not numbers"),
        ("[1, 2]", "not arithmetic"),
        ("1 < 2", "not arithmetic"),
        ("~1", "not arithmetic"),
        ("1 << 400", "not arithmetic"),
        ("2 ^ 3", "write \\*\\* for a power"),
        ("10 ** 10000", "too large"),
        ("9 ** 9 ** 9", "too large"),
        ("2 ** (10 ** 50)", "too large"),
        ("0.5 ** -1000", "too large"),
        ("1e999", "too large"),
        ("10 ** 100 * 10", "too large"),
        ("1" * 101, "too large"),
        ("1.0000001 ** (10 ** 20)", "too large"),
        ("round(5, -10 ** 9)", "whole number of digits"),
        ("1 / 0", "division by zero"),
        ("5 // (2 - 2)", "division by zero"),
        ("1 % 0.0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("(-8) ** 0.5", "not a real number"),
        ("sqrt(-1)", "negative"),
        ("sqrt()", "wrong number of arguments"),
        ("round(1, 2, 3)", "wrong number of arguments"),
        ("2 +", "not a valid expression"),
        ("", "empty"),
        ("   ", "empty"),
        ("1 +" * 100 + "1", "the limit is 300"),
    ],
)
def test_refusals_say_why(expression, reason):
    with pytest.raises(CalculatorError, match=reason):
        calculate(expression)


def test_refusal_names_what_is_allowed():
    with pytest.raises(CalculatorError) as info:
        calculate("__import__('os')")
    assert "__import__('os')" in str(info.value)
    assert "+ - * /" in str(info.value)


def test_length_limit_is_exact():
    at_limit = "1+" * ((MAX_EXPRESSION_LENGTH - 1) // 2) + "1"
    assert len(at_limit) <= MAX_EXPRESSION_LENGTH
    assert calculate(at_limit) == (MAX_EXPRESSION_LENGTH + 1) // 2
    with pytest.raises(CalculatorError, match="characters long"):
        calculate(" " * MAX_EXPRESSION_LENGTH + "1")


def test_non_text_is_refused():
    with pytest.raises(CalculatorError, match="must be text"):
        calculate(42)


def test_calculator_error_is_a_value_error():
    assert issubclass(CalculatorError, ValueError)
