"""Behaviour of the rule-condition language (logforensics.diagnose.expr)."""

from __future__ import annotations

import dataclasses
import pickle
import string
from importlib import resources
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logforensics.diagnose import expr as expr_mod
from logforensics.diagnose.expr import Expr, ExprError, compile_expr

ROOTS = {"baseline", "failing", "facts"}


def ev(text: str, env: dict[str, Any] | None = None, **kw: Any) -> Any:
    return compile_expr(text).evaluate({**(env or {}), **kw})


def compile_error(text: str, **kw: Any) -> str:
    with pytest.raises(ExprError) as info:
        compile_expr(text, **kw)
    message = str(info.value)
    assert "\n" not in message
    return message


@dataclasses.dataclass
class Mem:
    avail_gib: float
    kv_gib: float | None = None

    def secret(self) -> str:
        return "method"


class Shape(NamedTuple):
    tp: int
    dp: int


class Declared:
    __expr_fields__ = ("phase",)

    def __init__(self) -> None:
        self.phase = "decode"
        self.hidden = "not exposed"


ENV = {
    "failing": {
        "crash": {"phase": "kv_cache_alloc", "message": "CUDA out of memory on TP3"},
        "memory": {"TP0": {"kv_gib": 12.5}, "TP5": Mem(avail_gib=3.25, kv_gib=None)},
        "warnings": ["a", "b", "c"],
        "shape": Shape(tp=8, dp=2),
        "state": Declared(),
    },
    "baseline": {"ok": True, "warnings": ["a"], "memory": {"TP0": {"kv_gib": 20.0}}},
    "facts": {"memory": {"TP5": {"avail_gib": 1.5}}},
}


# ---------------------------------------------------------------- literals

@pytest.mark.parametrize("text, value", [
    ("42", 42), ("1.5", 1.5), ("1e-3", 1e-3), ("2.5E2", 250.0), (".5", 0.5), ("3.", 3.0),
    ("'single'", "single"), ('"double"', "double"), (r"'it\'s'", "it's"), (r'"q\"q"', 'q"q'),
    (r"'a\nb\tc'", "a\nb\tc"), (r"'\x41\u00e9'", "Aé"), (r"'back\\slash'", "back\\slash"),
    (r"'\d+\b'", "\\d+\\b"),
    ("true", True), ("false", False), ("null", None), ("True", True), ("False", False), ("None", None),
    ("[1, 'two', null]", [1, "two", None]), ("[]", []), ("[1, 2,]", [1, 2]), ("[[1], [2, 3]]", [[1], [2, 3]]),
])
def test_literals(text: str, value: Any) -> None:
    assert ev(text) == value
    assert type(ev(text)) is type(value)


# ------------------------------------------------------------------ access

@pytest.mark.parametrize("text, value", [
    ("failing.crash.phase", "kv_cache_alloc"),
    ("failing.memory.TP0.kv_gib", 12.5),
    ("failing.memory.TP5.avail_gib", 3.25),           # dataclass field
    ("failing.memory['TP5'].avail_gib", 3.25),
    ("failing.memory.TP5['avail_gib']", 3.25),         # string index on an object = field access
    ("failing.shape.tp * failing.shape.dp", 16),        # NamedTuple fields
    ("failing.shape[1]", 2),
    ("failing.state.phase", "decode"),                  # __expr_fields__
    ("failing.warnings[0]", "a"), ("failing.warnings[-1]", "c"),
    ("failing.crash['phase'][0]", "k"),
    ("[10, 20, 30][1 + 1]", 30),
    ("{}".format("facts.memory.TP5.avail_gib"), 1.5),
])
def test_access(text: str, value: Any) -> None:
    assert ev(text, ENV) == value


@pytest.mark.parametrize("text", [
    "failing.nope", "failing.nope.deeper.still", "failing.warnings[10]", "failing.warnings[-10]",
    "missing_root.x", "failing.memory.TP5.kv_gib.x", "failing.crash.phase.upper",
    "failing.memory.TP5.secret", "failing.state.hidden", "failing.shape.count",
    "failing.memory.TP5['__class__']", "failing.memory.TP5['_fields']", "failing.memory['TP9']",
    "null.x", "null[0]", "failing.warnings[null]",
])
def test_missing_or_unexposed_reads_are_null(text: str) -> None:
    assert ev(text, ENV) is None


def test_mapping_keys_are_data_not_attributes() -> None:
    # A key that looks private is still just data in a mapping.
    assert ev("x['__class__']", x={"__class__": 1}) == 1
    assert ev("x.keys", x={}) is None
    assert ev("x.items", x={"items": 3}) == 3


# -------------------------------------------------------------- arithmetic

@pytest.mark.parametrize("text, value", [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("10 - 4 - 3", 3), ("7 / 2", 3.5), ("7 % 3", 1),
    ("-3 + 5", 2), ("- -3", 3), ("+4", 4), ("-x * 2", -10), ("2 * -x", -10), ("1 - -1", 2),
    ("'ab' + 'cd'", "abcd"), ("[1] + [2, 3]", [1, 2, 3]), ("0.1 * 3 > 0.3", True),
])
def test_arithmetic(text: str, value: Any) -> None:
    assert ev(text, x=5) == value


@pytest.mark.parametrize("text", ["1 / 0", "1 % 0", "1.5 / 0.0", "x / 0", "1 + null", "null * 2",
                                  "-null", "x.y - 1", "2 * (null + 1)"])
def test_arithmetic_with_null_or_zero_divisor_is_null(text: str) -> None:
    assert ev(text, x=1) is None


@pytest.mark.parametrize("text, problem", [
    ("'a' + 1", "cannot apply '+' to string and int at column 5"),
    ("1 - 'a'", "cannot apply '-' to int and string"),
    ("true + 1", "cannot apply '+' to bool and int"),
    ("[1] * 2", "cannot apply '*' to list and int"),
    ("-'a'", "cannot apply unary '-' to string"),
    ("'a' < 1", "cannot compare string < int"),
    ("[1]['k']", "cannot index list with string"),
    ("1 in 5", "'in' needs a list, string or mapping"),
    ("1 in 'abc'", "cannot look for int in a string"),
    ("lower(3)", "lower() needs a string, got int"),
    ("len(3)", "len() needs a string, list or mapping"),
    ("sum(['a'])", "sum() needs a number"),
    ("max([1, 'a'])", "max() cannot order"),
    ("matches(x, y)", "regex longer than 500"),
    ("matches('a', x2)", "invalid regex"),
])
def test_type_errors_raise_expr_error(text: str, problem: str) -> None:
    with pytest.raises(ExprError, match="column") as info:
        ev(text, x="a", y="a" * 501, x2="(")
    assert problem in str(info.value)


# ------------------------------------------------------------- comparisons

@pytest.mark.parametrize("text, value", [
    ("1 == 1", True), ("1 != 1", False), ("1 == 1.0", True), ("'a' == 'a'", True), ("1 == '1'", False),
    ("2 < 3", True), ("3 <= 3", True), ("4 > 5", False), ("5 >= 5", True), ("'abc' < 'abd'", True),
    ("[1, 2] < [1, 3]", True),
    ("1 < 2 < 3", True), ("1 < 3 < 2", False), ("3 > 2 > 1 >= 1", True), ("1 == 1 < 2", True),
    ("2 in [1, 2]", True), ("2 not in [1, 2]", False), ("'out' in 'out of memory'", True),
    ("'x' not in 'abc'", True), ("'TP0' in m", True), ("'TP9' in m", False), ("null in [1, null]", True),
    ("[1] in [[1], [2]]", True),
])
def test_comparisons(text: str, value: Any) -> None:
    assert ev(text, m={"TP0": {}}) is value


@pytest.mark.parametrize("text, value", [
    ("null == null", True), ("null != null", False), ("null == 0", False), ("0 != null", True),
    ("null < 1", None), ("1 >= null", None), ("null < null", None), ("1 < null < 3", None),
    ("3 < 1 < null", False), ("1 in null", None), ("1 not in null", None), ("null in 'abc'", None),
])
def test_comparisons_with_null(text: str, value: Any) -> None:
    assert ev(text) is value


# ----------------------------------------------------------------- logic

@pytest.mark.parametrize("text, value", [
    ("true and false", False), ("true or false", True), ("not true", False), ("not not 1", True),
    ("1 and 'x'", True), ("0 or ''", False), ("not []", True),
    ("null and true", False), ("null or true", True), ("null or null", False), ("not null", True),
    ("true and true and 1", True), ("false or false or 1", True),
    ("not 1 == 2", True), ("not 2 in [1]", True), ("1 < 2 and 2 < 3 or false", True),
])
def test_logic_returns_bools_and_treats_null_as_false(text: str, value: bool) -> None:
    assert ev(text) is value


def test_logic_short_circuits() -> None:
    # lower(3) would be a type error; short-circuit must keep it from running.
    assert ev("false and lower(3)") is False
    assert ev("true or lower(3)") is True
    assert ev("'a' if true else lower(3)") == "a"
    assert ev("lower(3) if false else 'b'") == "b"
    with pytest.raises(ExprError):
        ev("true and lower(3)")


@pytest.mark.parametrize("text, value", [
    ("'yes' if x > 1 else 'no'", "yes"), ("'yes' if x > 5 else 'no'", "no"),
    ("'a' if null else 'b'", "b"), ("1 if false else 2 if false else 3", 3),
    ("(1 if true else 2) + 10", 11),
])
def test_conditional(text: str, value: Any) -> None:
    assert ev(text, x=2) == value


def test_spec_rule_is_false_not_error_on_missing_data() -> None:
    rule = compile_expr("failing.crash.phase == 'kv_cache_alloc' and failing.memory.TP0.kv_gib > 0",
                        names=ROOTS)
    assert rule.evaluate(ENV) is True
    for env in ({}, {"failing": None}, {"failing": {"crash": None}},
                {"failing": {"crash": {"phase": "kv_cache_alloc"}}},
                {"failing": {"crash": {"phase": "kv_cache_alloc"}, "memory": {"TP0": {"kv_gib": None}}}}):
        assert rule.evaluate(env) is False
        assert rule.holds(env) is False
    assert rule.holds(ENV) is True
    assert compile_expr("failing.memory.TP0.kv_gib > 0").holds({}) is False


# -------------------------------------------------------------- functions

@pytest.mark.parametrize("text, value", [
    ("abs(-2.5)", 2.5), ("abs(null)", None),
    ("min(3, 1, 2)", 1), ("max([3, 1, 2])", 3), ("min(['b', 'a'])", "a"), ("max([1, null, 3])", 3),
    ("min([])", None), ("max([null])", None), ("min(null)", None), ("max(2, null)", 2),
    ("len('abcd')", 4), ("len([1, 2])", 2), ("len(m)", 1), ("len(null)", None),
    ("round(2.567)", 3), ("round(2.567, 1)", 2.6), ("round(null)", None),
    ("sum([1, 2, 3.5])", 6.5), ("sum([])", 0), ("sum([1, null])", 1), ("sum(null)", None),
    ("any([0, null, 2])", True), ("any([])", False), ("all([1, 'x'])", True), ("all([1, null])", False),
    ("sorted([3, 1, 2])", [1, 2, 3]), ("sorted(['b', null, 'a'])", ["a", "b", None]), ("sorted(m)", ["k"]),
    ("count([1, 2, 1], 1)", 2), ("count('banana', 'an')", 2), ("count([null, 1], null)", 1),
    ("lower('ABC')", "abc"), ("upper('abc')", "ABC"), ("lower(null)", None),
    ("startswith('kv_cache', 'kv')", True), ("startswith('kv', ['x', 'k'])", True),
    ("startswith(null, 'a')", None),
    ("contains('out of memory', 'memory')", True), ("contains([1, 2], 3)", False),
    ("contains(m, 'k')", True), ("contains(null, 1)", None),
    ("matches('CUDA out of memory', 'out of mem')", True), (r"matches('TP12', '^TP\d+$')", True),
    ("matches('abc', 'x|y')", False), ("matches(null, 'a')", None),
    ("fmt_gib(12.3456)", "12.35 GiB"), ("fmt_gib(3)", "3.00 GiB"), ("fmt_gib(null)", None),
    ("pct(0.123)", "12.3%"), ("pct(1)", "100.0%"), ("pct(null)", None),
    ("max([abs(-1), round(2.567, 1), sum([1, 2])]) % 2 == 1", True),
])
def test_functions(text: str, value: Any) -> None:
    result = ev(text, m={"k": 1})
    assert result == value
    if isinstance(value, bool) or value is None:
        assert result is value


def test_sorted_result_limit() -> None:
    with pytest.raises(ExprError, match="longer than 100000"):
        ev("sorted(x)", x=list(range(100_001)))
    with pytest.raises(ExprError, match="longer than 100000"):
        ev("x + x", x=list(range(60_000)))


# ------------------------------------------------------------- compile-time

def test_names_used_are_dotted_paths() -> None:
    e = compile_expr("failing.crash.phase == 'x' and facts.memory['TP5'].avail_gib < baseline.ok "
                     "and len(failing.warnings[0]) > 0 and max(failing.memory[k].kv_gib, 1) and true")
    assert e.names_used == frozenset({"failing.crash.phase", "facts.memory.TP5.avail_gib", "baseline.ok",
                                      "failing.warnings", "failing.memory", "k"})


def test_unknown_root_name_lists_near_matches() -> None:
    message = compile_error("failng.crash.phase == 'x'", names=ROOTS)
    assert message.startswith("unknown name 'failng' at column 1")
    assert "'failing'" in message and "baseline" in message and "facts" in message
    assert compile_expr("failing.x", names=ROOTS).names_used == {"failing.x"}
    assert compile_expr("true and null", names=ROOTS).evaluate({}) is False  # constants are not names


@pytest.mark.parametrize("text, problem", [
    ("evil(1)", "unknown function 'evil' at column 1"),
    ("lowr('A')", "did you mean 'lower'"),
    ("getattr(x, 'y')", "unknown function 'getattr'"),
    ("_private", "name '_private' is not allowed"),
    ("x._y", "attribute '_y' is not allowed"),
    ("x.__class__", "attribute '__class__' is not allowed at column 3"),
    ("x.__class__.__mro__", "'__class__'"),
    ("__import__('os')", "function '__import__' is not allowed"),
    ("2 ** 10", "exponentiation '**' is not supported"),
    ("lambda x: x", "'lambda' is not supported at column 1"),
    ("lambda", "'lambda' is not supported"),
    ("x is None", "'is' is not supported"),
    ("[y for y in x]", "'for' is not supported"),
    ("x.lower()", "unexpected '('"),
    ("(lambda: 1)()", "'lambda' is not supported"),
    ("x = 1", "unexpected character '=' at column 3"),
    ("x + not y", "unexpected 'not' at column 5"),
    ("and(1)", "unexpected 'and' at column 1"),
    ("x.if", "unexpected 'if' at column 3"),
    ("x;y", "unexpected character ';' at column 2"),
    ("'open", "unterminated string at column 1"),
    ("(1 + 2", "unexpected end of expression at column 7"),
    ("", "empty expression"),
    ("   ", "empty expression"),
    ("len()", "len() takes 1 argument, got 0"),
    ("round(1, 2, 3)", "round() takes 1 to 2 arguments, got 3"),
    ("min()", "min() takes 1 or more arguments"),
    ("matches(x, '(')", "invalid regex"),
    ("matches(x, '" + "a" * 501 + "')", "regex longer than 500"),
    ("x + 1" + " + 1" * 1000, "expression too long"),
    ("-" * 70 + "1", "nested too deeply"),
    ("not " * 70 + "x", "nested too deeply"),
    ("[" * 70 + "]" * 70, "nested too deeply"),
    ("abs(" * 70 + "1" + ")" * 70, "nested too deeply"),
])
def test_forbidden_constructs_fail_at_compile_time(text: str, problem: str) -> None:
    assert problem in compile_error(text)


def test_error_position_on_later_line() -> None:
    assert "at line 2, column 3" in compile_error("1 +\n  $")


def test_depth_limit_counts_expression_nesting() -> None:
    assert ev("abs(" * 62 + "-1" + ")" * 62) == 1   # 62 calls + minus + literal = 64
    assert ev("x[" * 30 + "0" + "]" * 30, x=[0]) == 0
    assert "nested too deeply" in compile_error("abs(" * 64 + "-1" + ")" * 64)


def test_long_flat_chains_are_not_deep() -> None:
    n = 900
    assert ev(" + ".join(["1"] * n)) == n
    assert ev("x" + ".a" * n, x={}) is None
    assert ev(" and ".join(["true"] * 400)) is True
    assert ev("(" * 300 + "1" + ")" * 300) == 1   # parentheses add no nesting


def test_compile_rejects_non_strings() -> None:
    with pytest.raises(ExprError):
        compile_expr(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the Expr

def test_expr_is_frozen_and_reusable() -> None:
    e = compile_expr("x + 1")
    assert isinstance(e, Expr) and e.source == "x + 1"
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.source = "y"  # type: ignore[misc]
    assert [e.evaluate({"x": i}) for i in range(3)] == [1, 2, 3]
    assert pickle.loads(pickle.dumps(e)).evaluate({"x": 1}) == 2


def test_evaluation_does_not_reparse(monkeypatch: pytest.MonkeyPatch) -> None:
    e = compile_expr("failing.crash.phase == 'kv_cache_alloc' and len(failing.warnings) > 2")

    def boom(*a: Any, **k: Any) -> None:
        raise AssertionError("parser used during evaluation")
    monkeypatch.setattr(expr_mod.Lark, "parse", boom)
    monkeypatch.setattr(expr_mod, "_parser", boom)
    assert e.evaluate(ENV) is True


def test_env_must_be_a_mapping() -> None:
    with pytest.raises(ExprError, match="mapping"):
        compile_expr("x").evaluate([1])  # type: ignore[arg-type]


def test_grammar_ships_in_package_and_its_samples_compile() -> None:
    text = resources.files("logforensics.grammars").joinpath("expr.lark").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Sample expressions" in line) + 1
    samples = []
    for line in lines[start:]:
        if not line.startswith("//   "):
            break
        samples.append(line[len("//   "):])
    assert len(samples) >= 5
    for sample in samples:
        compile_expr(sample, names=ROOTS).evaluate(ENV)


# -------------------------------------------------------------- properties

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.text(alphabet=string.printable, max_size=60))
def test_random_printable_text_compiles_or_raises_expr_error(text: str) -> None:
    try:
        compile_expr(text)
    except ExprError:
        pass


TOKENS = ["x", "y", "x.a", "y[0]", "x['b']", "1", "0", "2.5", "'s'", "null", "true", "(", ")", "[", "]",
          ",", "+", "-", "*", "/", "%", "==", "<", ">=", " and ", " or ", "not ", " in ", " not in ",
          " if ", " else ", "len(", "max(", "sum(", "lower(", "matches(", "sorted(", ".", "**", "_", "$"]


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), max_size=25).map("".join))
def test_token_soup_compiles_or_raises_expr_error(text: str) -> None:
    try:
        compile_expr(text)
    except ExprError:
        pass


scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True) | st.text(max_size=5)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["a", "b", "0"]), inner, max_size=3),
    max_leaves=12,
)
envs = st.dictionaries(st.sampled_from(["x", "y"]), values, max_size=2)

atoms = st.sampled_from(["x", "y", "x.a", "x.a.b", "y[0]", "x['b']", "y[-1]", "1", "0", "2.5", "'s'", "null",
                         "true", "[]", "[1, null]"])


def _combine(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", " in ",
                                                " not in ", " and ", " or "]), inner)
    unary = st.tuples(st.sampled_from(["-", "not ", "len", "abs", "lower", "sorted", "sum", "max", "any",
                                       "fmt_gib", "pct", "round"]), inner)
    return (binary.map(lambda t: f"({t[0]} {t[1]} {t[2]})")
            | unary.map(lambda t: f"({t[0]}({t[1]}))")
            | st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})")
            | st.tuples(inner, inner).map(lambda t: f"[{t[0]}, {t[1]}]")
            | st.tuples(inner, inner).map(lambda t: f"count({t[0]}, {t[1]})")
            | st.tuples(inner, inner).map(lambda t: f"matches({t[0]}, {t[1]})"))


expressions = st.recursive(atoms, _combine, max_leaves=8)


@SETTINGS
@given(expressions, envs)
def test_evaluation_raises_only_expr_error(text: str, env: dict[str, Any]) -> None:
    e = compile_expr(text)
    try:
        e.evaluate(env)
        e.holds(env)
    except ExprError as exc:
        assert "\n" not in str(exc)
