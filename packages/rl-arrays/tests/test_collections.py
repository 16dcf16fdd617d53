import copy
import importlib.util
from collections import namedtuple

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rl_arrays import (
    AttrDict,
    NamedArrayTuple,
    NamedArrayTupleSchema,
    NamedArrayTupleSchema_like,
    NamedTuple,
    NamedTupleSchema,
    is_namedarraytuple,
    is_namedarraytuple_class,
    is_namedtuple,
    is_namedtuple_class,
    namedarraytuple,
    namedarraytuple_like,
)

Points = namedarraytuple("Points", ["x", "y"])
Inner = namedarraytuple("Inner", "a b")
Outer = namedarraytuple("Outer", ["inner", "c", "unused"])
PointsSchema = NamedArrayTupleSchema("Points", ["x", "y"])

BOTH_FORMS = pytest.mark.parametrize("make", [Points, PointsSchema], ids=["class", "schema"])


@BOTH_FORMS
def test_reference_example(make):
    p = make(np.array([0, 1]), y=np.array([10, 11]))
    assert repr(p) == "Points(x=array([0, 1]), y=array([10, 11]))"
    assert p[0] == make(0, 10)
    np.testing.assert_array_equal(p.get(0), [0, 1])
    x, y = p
    assert x is p.x and y is p.y
    p[1] = 2
    np.testing.assert_array_equal(p.x, [0, 2])
    np.testing.assert_array_equal(p.y, [10, 2])
    p[1] = make(3, 30)
    np.testing.assert_array_equal(p.x, [0, 3])
    np.testing.assert_array_equal(p.y, [10, 30])
    assert "x" in p and "z" not in p and 0 not in p


@BOTH_FORMS
def test_namedtuple_api(make):
    p = make(1, 2)
    assert p._fields == ("x", "y")
    assert p._asdict() == {"x": 1, "y": 2}
    assert p._replace(y=5) == make(1, 5)
    assert p._make([3, 4]) == make(3, 4)
    assert list(p.items()) == [("x", 1), ("y", 2)]
    assert len(p) == 2 and p == (1, 2)
    assert make(1, 2) != make(2, 1)
    with pytest.raises((AttributeError, TypeError)):
        p.x = 3


def test_nested_and_none_fields():
    T, B = 4, 3
    o = Outer(Inner(np.zeros((T, B)), np.zeros((T, B, 2))), np.arange(T * B).reshape(T, B), None)
    part = o[1:3, 0]
    assert isinstance(part.inner, Inner) and part.unused is None
    np.testing.assert_array_equal(part.c, [3, 6])
    assert part.inner.b.shape == (2, 2)
    o[2] = Outer(Inner(1.0, 2.0), -1, None)
    assert (o.inner.a[2] == 1).all() and (o.inner.b[2] == 2).all() and (o.c[2] == -1).all()
    o[0, 1] = 7
    assert o.inner.a[0, 1] == 7 and (o.inner.b[0, 1] == 7).all() and o.c[0, 1] == 7


def test_torch_fields_index_like_numpy():
    torch = pytest.importorskip("torch")
    p = Points(torch.arange(6).reshape(2, 3), torch.zeros(2, 3))
    q = p[:, 1]
    assert torch.equal(q.x, torch.tensor([1, 4]))
    p[1] = Points(-1, 5)
    assert torch.equal(p.x[1], torch.tensor([-1, -1, -1]))
    assert torch.equal(p.y[1], torch.tensor([5.0, 5.0, 5.0]))


def test_bad_field_names_are_refused():
    with pytest.raises(ValueError, match="duplicate field name 'a'"):
        namedarraytuple("Bad", ["a", "b", "a"])
    with pytest.raises(ValueError, match="valid identifiers"):
        namedarraytuple("Bad", ["a-b"])
    with pytest.raises(ValueError, match="valid identifiers"):
        NamedArrayTupleSchema("Bad", ["class"])
    with pytest.raises(ValueError, match="start with '_'"):
        namedarraytuple("Bad", ["_hidden"])
    with pytest.raises(ValueError, match="would hide the method get"):
        namedarraytuple("Bad", ["get"])


def test_assigning_another_type_is_refused():
    p = Points(np.zeros(3), np.zeros(3))
    with pytest.raises(TypeError, match=r"fields \('a', 'b'\)"):
        p[0] = Inner(1, 2)
    with pytest.raises(TypeError, match=r"Points\.y"):
        Points(np.zeros(3), None)[0] = Points(1, 2)


def test_index_errors_name_the_field():
    p = Points(np.zeros(3), np.zeros(2))
    with pytest.raises(IndexError, match=r"Points\.y\[2\]"):
        p[2]
    with pytest.raises(IndexError, match=r"Points\.y\[2\]"):
        p[2] = 1.0


def test_schema_form_calls_like_a_class():
    assert PointsSchema(1, y=2) == PointsSchema._make([1, 2])
    with pytest.raises(TypeError, match="missing values for fields \\['y'\\]"):
        PointsSchema(1)
    with pytest.raises(TypeError, match="unexpected field 'z'"):
        PointsSchema(1, 2, z=3)
    with pytest.raises(TypeError, match="multiple values for field 'x'"):
        PointsSchema(1, x=2)
    with pytest.raises(TypeError, match="takes 2 values"):
        PointsSchema(1, 2, 3)
    assert NamedArrayTupleSchema("Points", "x y") == PointsSchema
    plain = NamedTupleSchema("Plain", ["a", "b"])(np.arange(3), 1)
    assert isinstance(plain, NamedTuple) and not isinstance(plain, NamedArrayTuple)
    assert plain[1] == 1  # a plain NamedTuple indexes like a tuple


def test_type_predicates():
    Nt = namedtuple("Nt", ["a", "b"])
    assert is_namedtuple_class(Nt) and not is_namedarraytuple_class(Nt)
    assert is_namedarraytuple_class(Points) and not is_namedtuple_class(Points)
    assert is_namedtuple(Nt(1, 2)) and not is_namedarraytuple(Nt(1, 2))
    assert is_namedarraytuple(Points(1, 2)) and not is_namedtuple(Points(1, 2))
    assert not is_namedtuple((1, 2)) and not is_namedarraytuple_class(tuple)


def test_like_conversions():
    Nt = namedtuple("Nt", ["a", "b"])
    NatCls = namedarraytuple_like(Nt(1, 2))
    assert is_namedarraytuple_class(NatCls) and NatCls._fields == ("a", "b")
    assert NatCls.__name__ == "Nt"
    assert namedarraytuple_like(Nt, classname_suffix=True).__name__ == "Nt_nat"
    assert namedarraytuple_like(Points) is Points
    assert namedarraytuple_like(Points(1, 2)) is Points
    assert namedarraytuple_like(NamedTupleSchema("S", "a")) == NamedArrayTupleSchema("S", "a")
    assert NamedArrayTupleSchema_like(Nt) == NamedArrayTupleSchema("Nt", "a b")
    assert NamedArrayTupleSchema_like(Points(1, 2)) == PointsSchema
    with pytest.raises(TypeError, match="namedtuple"):
        namedarraytuple_like((1, 2))


def test_return_namedtuple_cls():
    Nat, Nt = namedarraytuple("Pair", "a b", return_namedtuple_cls=True)
    assert is_namedarraytuple_class(Nat) and is_namedtuple_class(Nt)
    assert isinstance(Nat(1, 2), Nt)


def test_deepcopy_keeps_type():
    p = Points(np.zeros(2), np.ones(2))
    q = copy.deepcopy(p)
    assert type(q) is Points and q.x is not p.x


def test_attrdict():
    d = AttrDict(lr=0.1, sub=AttrDict(eps=1.0))
    assert d.lr == d["lr"] == 0.1
    d.batch = 32
    assert d["batch"] == 32
    del d.batch
    assert "batch" not in d
    with pytest.raises(AttributeError, match="nope"):
        _ = d.nope
    c = d.copy()
    c.sub.eps = 0.5
    assert d.sub.eps == 1.0 and isinstance(c, AttrDict) and isinstance(c.sub, AttrDict)


# --------------------------------------------------------------------- property-based tests

_index_strategy = st.one_of(
    st.integers(-3, 2),
    st.slices(3),
    st.tuples(st.slices(3), st.integers(-2, 1)),
    st.tuples(st.integers(0, 2), st.slices(2)),
    st.just(Ellipsis),
    st.lists(st.integers(0, 2), min_size=1, max_size=4).map(np.array),
    st.just(np.array([True, False, True])),
)


@st.composite
def _five_fields(draw):
    """Five [T=3, B=2, ...] arrays of assorted trailing shapes and dtypes."""
    arrays = []
    for _ in range(5):
        trailing = draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
        dtype = draw(st.sampled_from([np.float32, np.int64, np.uint8, np.bool_]))
        arrays.append(draw(hnp.arrays(dtype, (3, 2, *trailing))))
    return arrays


Five = namedarraytuple("Five", ["a", "b", "c", "d", "e"])
FiveSchema = NamedArrayTupleSchema("Five", ["a", "b", "c", "d", "e"])


BACKENDS = ["numpy", "torch"] if importlib.util.find_spec("torch") else ["numpy"]


def _on(backend, arrays, loc):
    """The arrays and index as the backend takes them (torch: tensors, no negative steps)."""
    if backend == "numpy":
        return arrays, loc
    import torch

    parts = loc if isinstance(loc, tuple) else (loc,)
    assume(not any(isinstance(p, slice) and (p.step or 1) < 0 for p in parts))
    parts = tuple(torch.as_tensor(p) if isinstance(p, np.ndarray) else p for p in parts)
    return [torch.as_tensor(a) for a in arrays], parts if isinstance(loc, tuple) else parts[0]


@settings(max_examples=200, deadline=None)
@given(
    arrays=_five_fields(),
    loc=_index_strategy,
    schema=st.booleans(),
    backend=st.sampled_from(BACKENDS),
)
def test_indexing_matches_each_field_by_hand(arrays, loc, schema, backend):
    arrays, loc = _on(backend, arrays, loc)
    nat = (FiveSchema if schema else Five)(*arrays)
    got = nat[loc]
    for field, array in zip(got, arrays, strict=True):
        np.testing.assert_array_equal(np.asarray(field), np.asarray(array[loc]))


@settings(max_examples=200, deadline=None)
@given(
    arrays=_five_fields(), loc=_index_strategy, data=st.data(), backend=st.sampled_from(BACKENDS)
)
def test_assignment_matches_each_field_by_hand(arrays, loc, data, backend):
    values = [data.draw(hnp.arrays(a.dtype, a[loc].shape)) for a in arrays]
    (by_hand, loc), (mine, _), (values, _) = (
        _on(backend, [a.copy() for a in arrays], loc),
        _on(backend, [a.copy() for a in arrays], loc),
        _on(backend, values, loc),
    )
    nat = Five(*mine)
    nat[loc] = Five(*values)
    for field, array, value in zip(nat, by_hand, values, strict=True):
        array[loc] = value
        np.testing.assert_array_equal(np.asarray(field), np.asarray(array))
    scalar = data.draw(st.integers(0, 1))
    nat[loc] = scalar
    for field, array in zip(nat, by_hand, strict=True):
        array[loc] = scalar
        np.testing.assert_array_equal(np.asarray(field), np.asarray(array))
