"""namedarraytuple and its relatives: tuples of arrays indexed as one.

A namedarraytuple is a namedtuple whose ``[]`` reaches into every field at once, so a
whole structure of ``[T, B]`` arrays (or tensors, or nested namedarraytuples) can be
read, sliced and written with one expression.  Two forms exist:

* the class form, ``namedarraytuple(typename, fields)``, one class per type (fast);
* the schema form, ``NamedArrayTupleSchema(typename, fields)``, one shared class whose
  instances carry their own name and fields (types made at run time in bulk).

Both pickle in child processes under ``fork``, ``forkserver`` and ``spawn``, including
class-form types made at run time inside a function (see ``_reduce_class``).
"""

from __future__ import annotations

import copyreg
import importlib
import keyword
import reprlib
import sys
import weakref
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, overload

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "AttrDict",
    "NamedArrayTuple",
    "NamedArrayTupleSchema",
    "NamedArrayTupleSchema_like",
    "NamedTuple",
    "NamedTupleSchema",
    "is_namedarraytuple",
    "is_namedarraytuple_class",
    "is_namedtuple",
    "is_namedtuple_class",
    "namedarraytuple",
    "namedarraytuple_like",
]

# Field names that would hide the methods every namedarraytuple relies on.
_RESERVED_FIELDS = frozenset({"get", "items"})


def _check_fields(typename: str, field_names: str | Iterable[str]) -> tuple[str, ...]:
    """Validate names up front, so a bad schema fails where it is written."""
    if isinstance(field_names, str):
        field_names = field_names.replace(",", " ").split()
    fields = tuple(field_names)
    for name in (typename, *fields):
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(
                f"{typename!r}: type and field names must be valid identifiers, got {name!r}"
            )
    seen: set[str] = set()
    for name in fields:
        if name.startswith("_"):
            raise ValueError(f"{typename}: field names cannot start with '_', got {name!r}")
        if name in _RESERVED_FIELDS:
            raise ValueError(f"{typename}: field name {name!r} would hide the method {name}()")
        if name in seen:
            raise ValueError(f"{typename}: duplicate field name {name!r}")
        seen.add(name)
    return fields


def _retag(error: Exception, where: str) -> Exception:
    """The same kind of error, with the failing field's path in front of its message."""
    try:
        return type(error)(f"{where}: {error}")
    except Exception:
        return TypeError(f"{where}: {error}")


class _IndexAllFields(tuple[Any, ...]):
    """The array behaviour shared by both forms: ``[]`` applies to every field."""

    __slots__ = ()
    _fields: tuple[str, ...]

    if TYPE_CHECKING:  # a namedtuple's classmethod, or NamedTuple's method

        def _make(self, iterable: Iterable[Any], /) -> Any: ...

    def __getitem__(self, loc: Any) -> Any:
        try:
            return tuple_like(self, [None if field is None else field[loc] for field in self])
        except Exception as error:
            for name, field in zip(self._fields, self, strict=True):
                try:
                    if field is not None:
                        field[loc]
                except Exception:
                    raise _retag(error, f"{_typename(self)}.{name}[{reprlib.repr(loc)}]") from error
            raise

    def __setitem__(self, loc: Any, value: Any) -> None:
        value_fields = getattr(value, "_fields", None)
        name = None
        try:
            if value_fields is None or not isinstance(value, tuple):
                for name, field in zip(self._fields, self, strict=True):  # noqa: B007 (name: for errors)
                    if field is not None:
                        field[loc] = value
            elif value_fields == self._fields:
                for name, field, item in zip(self._fields, self, value, strict=True):  # noqa: B007
                    if field is not None:
                        field[loc] = item
                    elif item is not None:
                        raise TypeError("the field is None and cannot receive a value")
            else:
                raise TypeError(
                    f"cannot assign a {_typename(value)} with fields {value_fields} "
                    f"to a {_typename(self)} with fields {self._fields}"
                )
        except Exception as error:
            if name is None:
                raise
            raise _retag(error, f"{_typename(self)}.{name}[{reprlib.repr(loc)}]") from error

    def __contains__(self, key: object) -> bool:
        """Field names, like a dict (a tuple would compare values)."""
        return key in self._fields

    def get(self, index: int) -> Any:
        """Plain tuple indexing: the ``index``-th field itself."""
        return tuple.__getitem__(self, index)

    def items(self) -> Iterator[tuple[str, Any]]:
        """``(field_name, value)`` pairs in order."""
        return zip(self._fields, self, strict=True)


def _typename(obj: object) -> str:
    name = getattr(obj, "_typename", None)
    return name if isinstance(name, str) else type(obj).__name__


# ----------------------------------------------------------------------------- class form


class _NamedArrayTupleMeta(type):
    """Metaclass of every class-form namedarraytuple; it is what lets them pickle."""

    _typename: str
    _fields: tuple[str, ...]


# The classes made here are typed Any: their fields are only known at run time, and an Any
# class can still name a type in annotations elsewhere (``def step(...) -> EnvStep``).
@overload
def namedarraytuple(
    typename: str,
    field_names: str | Iterable[str],
    return_namedtuple_cls: Literal[False] = False,
    classname_suffix: bool = False,
    *,
    module: str | None = None,
) -> Any: ...
@overload
def namedarraytuple(
    typename: str,
    field_names: str | Iterable[str],
    return_namedtuple_cls: Literal[True],
    classname_suffix: bool = False,
    *,
    module: str | None = None,
) -> tuple[Any, Any]: ...
def namedarraytuple(
    typename: str,
    field_names: str | Iterable[str],
    return_namedtuple_cls: bool = False,
    classname_suffix: bool = False,
    *,
    module: str | None = None,
) -> Any:
    """Make a namedtuple subclass whose indexing and assignment apply to every field.

    >>> Points = namedarraytuple("Points", ["x", "y"])
    >>> p = Points(np.array([0, 1]), y=np.array([10, 11]))
    >>> p[0]                  # Points(x=0, y=10)
    >>> p[1] = Points(3, 30)  # field by field; p[1] = 2 writes 2 to every field
    >>> p.get(0)              # the x array itself;  'x' in p -> True

    ``None`` fields are skipped by indexing and assignment.  With
    ``classname_suffix`` the class is named ``typename + "_nat"``; with
    ``return_namedtuple_cls`` the plain namedtuple base class is returned as well.
    """
    fields = _check_fields(typename, field_names)
    if module is None:
        module = sys._getframe(1).f_globals.get("__name__", "__main__")
    cls = _build_class(typename, fields, classname_suffix, module)
    return (cls, cls.__bases__[1]) if return_namedtuple_cls else cls


def _build_class(
    typename: str, fields: tuple[str, ...], classname_suffix: bool, module: str
) -> _NamedArrayTupleMeta:
    base = namedtuple(typename, fields, module=module)  # type: ignore[misc]
    name = typename + "_nat" if classname_suffix else typename
    namespace = {
        "__slots__": (),
        "__module__": module,
        "__qualname__": name,
        "__doc__": f"{name}({', '.join(fields)}): a namedarraytuple.",
        "_typename": typename,
    }
    cls = _NamedArrayTupleMeta(name, (_IndexAllFields, base), namespace)
    _live_classes[(typename, fields, classname_suffix, module)] = cls
    return cls


# The latest class made for each definition, so that unpickling a run-time type in the
# process that made it gives back that very class, and elsewhere one class per definition.
_live_classes: weakref.WeakValueDictionary[
    tuple[str, tuple[str, ...], bool, str], _NamedArrayTupleMeta
] = weakref.WeakValueDictionary()


def _rebuild_class(
    typename: str, fields: tuple[str, ...], suffix: bool, module: str
) -> _NamedArrayTupleMeta:
    """Find or recreate a run-time type when unpickling it."""
    cls = _live_classes.get((typename, fields, suffix, module))
    return cls if cls is not None else _build_class(typename, fields, suffix, module)


def _reduce_class(
    cls: _NamedArrayTupleMeta,
) -> str | tuple[Callable[..., _NamedArrayTupleMeta], tuple[str, tuple[str, ...], bool, str]]:
    """Pickle a class by reference when importable, else by its definition."""
    try:
        found: Any = importlib.import_module(cls.__module__)
        for part in cls.__qualname__.split("."):
            found = getattr(found, part)
    except Exception:
        found = None
    if found is cls:
        return cls.__qualname__
    return _rebuild_class, (
        cls._typename,
        cls._fields,
        cls.__name__ != cls._typename,
        cls.__module__,
    )


copyreg.pickle(_NamedArrayTupleMeta, _reduce_class)


def is_namedtuple_class(obj: object) -> bool:
    """A namedtuple class (and not a namedarraytuple class)."""
    return (
        isinstance(obj, type)
        and issubclass(obj, tuple)
        and isinstance(getattr(obj, "_fields", None), tuple)
        and not is_namedarraytuple_class(obj)
    )


def is_namedarraytuple_class(obj: object) -> bool:
    """A class made by ``namedarraytuple``."""
    return isinstance(obj, _NamedArrayTupleMeta)


def is_namedtuple(obj: object) -> bool:
    """An instance of a namedtuple class (and not of a namedarraytuple class)."""
    return is_namedtuple_class(type(obj))


def is_namedarraytuple(obj: object) -> bool:
    """An instance of a class made by ``namedarraytuple``."""
    return is_namedarraytuple_class(type(obj))


# ---------------------------------------------------------------------------- schema form


class NamedTupleSchema:
    """Acts like a namedtuple class, without making a class for each type."""

    _instance_cls: type[NamedTuple]

    def __init__(self, typename: str, fields: str | Iterable[str]):
        self._typename = typename
        self._fields = _check_fields(typename, fields)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) > len(self._fields):
            raise TypeError(
                f"{self._typename} takes {len(self._fields)} values, got {len(args)} positional"
            )
        values = dict(zip(self._fields, args, strict=False))  # checked just above
        for name, value in kwargs.items():
            if name not in self._fields:
                raise TypeError(f"{self._typename} got an unexpected field {name!r}")
            if name in values:
                raise TypeError(f"{self._typename} got multiple values for field {name!r}")
            values[name] = value
        missing = [name for name in self._fields if name not in values]
        if missing:
            raise TypeError(f"{self._typename} is missing values for fields {missing}")
        return self._instance_cls(self._typename, self._fields, [values[f] for f in self._fields])

    def _make(self, iterable: Iterable[Any]) -> Any:
        return self._instance_cls(self._typename, self._fields, iterable)

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and self._typename == other._typename
            and self._fields == other._fields
        )

    def __hash__(self) -> int:
        return hash((type(self), self._typename, self._fields))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._typename!r}, {self._fields!r})"


class NamedTuple(tuple):
    """Acts like an instance of a namedtuple type; the one class for every such type.

    Name and fields live on the instance.  Fields are read as attributes through
    ``__getattr__``; like a namedtuple, attributes cannot be set.
    """

    _typename: str
    _fields: tuple[str, ...]

    def __new__(cls, typename: str, fields: tuple[str, ...], values: Iterable[Any]) -> Self:
        self = tuple.__new__(cls, values)
        if len(self) != len(fields):
            raise TypeError(f"{typename} expects {len(fields)} values, got {len(self)}")
        self.__dict__.update(_typename=typename, _fields=tuple(fields))
        return self

    def __getattr__(self, name: str) -> Any:
        fields = self.__dict__.get("_fields", ())
        if name in fields:
            return tuple.__getitem__(self, fields.index(name))
        raise AttributeError(f"{_typename(self)!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot set attribute {name!r} of {self._typename}")

    def __reduce__(self) -> tuple[type[Self], tuple[str, tuple[str, ...], tuple[Any, ...]]]:
        return type(self), (self._typename, self._fields, tuple(self))

    def __repr__(self) -> str:
        pairs = ", ".join(
            f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True)
        )
        return f"{self._typename}({pairs})"

    def _make(self, iterable: Iterable[Any]) -> Self:
        return type(self)(self._typename, self._fields, iterable)

    def _replace(self, **kwargs: Any) -> Self:
        unknown = set(kwargs) - set(self._fields)
        if unknown:
            raise ValueError(f"{self._typename} has no fields {sorted(unknown)}")
        return self._make(
            kwargs.get(name, value) for name, value in zip(self._fields, self, strict=True)
        )

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))


class NamedArrayTupleSchema(NamedTupleSchema):
    """Acts like a namedarraytuple class, without making a class for each type."""


class NamedArrayTuple(_IndexAllFields, NamedTuple):
    """Acts like an instance of a namedarraytuple type; the one class for every such type."""


NamedTupleSchema._instance_cls = NamedTuple
NamedArrayTupleSchema._instance_cls = NamedArrayTuple


def is_schema_form(obj: object) -> TypeGuard[NamedTupleSchema | NamedTuple]:
    return isinstance(obj, (NamedTupleSchema, NamedTuple))


def tuple_like(like: tuple[Any, ...], values: Iterable[Any]) -> Any:
    """``values`` in a tuple of ``like``'s kind: a namedtuple's class is called rather than its
    ``_make`` (torch 2.11's compiler cannot return from a graph an object made by ``_make``);
    the schema form keeps its name on the instance; anything else becomes a plain tuple."""
    if isinstance(like, NamedTuple):
        return like._make(values)
    return type(like)(*values) if hasattr(like, "_fields") else tuple(values)


def namedarraytuple_like(namedtuple_or_class: Any, classname_suffix: bool = False) -> Any:
    """The namedarraytuple type with the name and fields of a namedtuple-like input.

    Class-form input (a namedtuple or namedarraytuple, instance or class) gives a class;
    a namedarraytuple's own class is returned as is.  Schema-form input gives a
    ``NamedArrayTupleSchema``.
    """
    obj = namedtuple_or_class
    if is_schema_form(obj):
        if isinstance(obj, NamedArrayTupleSchema):
            return obj
        return NamedArrayTupleSchema(obj._typename, obj._fields)
    cls = obj if isinstance(obj, type) else type(obj)
    if is_namedarraytuple_class(cls):
        return cls
    if is_namedtuple_class(cls):
        return namedarraytuple(
            cls.__name__, obj._fields, classname_suffix=classname_suffix, module=cls.__module__
        )
    raise TypeError(
        f"namedarraytuple_like expects a namedtuple, namedarraytuple or schema, got {obj!r}"
    )


def NamedArrayTupleSchema_like(example: Any) -> NamedArrayTupleSchema:
    """A ``NamedArrayTupleSchema`` with the name and fields of any namedtuple-like input."""
    if isinstance(example, NamedArrayTupleSchema):
        return example
    if is_schema_form(example):
        return NamedArrayTupleSchema(example._typename, example._fields)
    cls = example if isinstance(example, type) else type(example)
    if is_namedtuple_class(cls) or is_namedarraytuple_class(cls):
        return NamedArrayTupleSchema(getattr(cls, "_typename", cls.__name__), example._fields)
    raise TypeError(
        f"NamedArrayTupleSchema_like expects a namedtuple, namedarraytuple or schema, "
        f"got {example!r}"
    )


# -------------------------------------------------------------------------------- AttrDict


class AttrDict(dict):
    """A dict whose keys are also attributes: ``d["lr"]`` and ``d.lr`` are the same."""

    __slots__ = ()

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"AttrDict has no key {key!r}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        try:
            del self[key]
        except KeyError:
            raise AttributeError(f"AttrDict has no key {key!r}") from None

    def copy(self) -> AttrDict:
        """Copy every unbroken chain of AttrDicts; other values (arrays) are shared."""
        return type(self)(
            (key, value.copy() if isinstance(value, AttrDict) else value)
            for key, value in self.items()
        )
