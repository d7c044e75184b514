# SPDX-License-Identifier: MIT
"""Schemas: samples made of named fields, each of a dtype and a shape, and
the conversion of values to them."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ._common import _cistern, _need_numpy, _np
from .constants import DTYPES
from .records import _Record

if TYPE_CHECKING:
    from ._common import Array, Fields, SchemaLike

__all__ = ["Field", "Schema"]


@dataclasses.dataclass(frozen=True)
class Field(_Record):
    """One field of a schema (struct cistern_field): its name, the name of its
    dtype (one of DTYPES, as cistern_dtype_name() gives it), its shape (() for a
    scalar), and where it lies in a sample: offset and size in bytes, and
    itemsize, the bytes of one element."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    size: int
    itemsize: int


@dataclasses.dataclass(frozen=True)
class Schema(Mapping[str, Field]):
    """What every sample of a segment holds: named fields, each a dtype and a
    shape (docs/SCHEMA.md). It reads as a mapping of field names to Fields, in
    order; text is its canonical text form and size the bytes of one sample.

    Fields lie in a sample as the members of a C struct do: in order, each at
    an offset that is a multiple of its item size, the sample padded at the end
    to a multiple of the largest. numpy's structured dtype with align=True has
    the same layout, and `dtype` is that dtype: a record array of it is a run of
    samples as they are in the segment.
    """

    text: str
    size: int
    fields: tuple[Field, ...]

    @classmethod
    def parse(cls, spec: SchemaLike) -> Schema:
        """The Schema of `spec`: its text form
        ("obs:float32[84,84];action:int64[]"), a dict {name: (dtype, shape)} (or
        {name: dtype} for a scalar), a list of (name, dtype) or (name, dtype,
        shape), a numpy structured dtype, or a Schema (cistern_schema_parse()).
        dtypes are given by name (DTYPES) or as numpy takes them. ValueError,
        naming the field, if one is wrong."""
        if isinstance(spec, Schema):
            return spec
        return cls._from(_cistern.schema_parse(_schema_text(spec)))

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> Schema:
        return cls(text=d["text"], size=d["size"],
                   fields=tuple(Field._from(f) for f in d["fields"]))

    def __getitem__(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (f.name for f in self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __str__(self) -> str:
        return self.text

    @property
    def names(self) -> tuple[str, ...]:
        """The field names, in order."""
        return tuple(f.name for f in self.fields)

    @functools.cached_property
    def dtype(self) -> Any:
        """The numpy structured dtype of one sample: the fields at their offsets,
        itemsize the sample size (what numpy.dtype(..., align=True) gives)."""
        np = _need_numpy()
        return np.dtype({"names": list(self.names),
                         "formats": [(f.dtype, f.shape) if f.shape else f.dtype
                                     for f in self.fields],
                         "offsets": [f.offset for f in self.fields],
                         "itemsize": self.size})

    @functools.cached_property
    def _gaps(self) -> tuple[tuple[int, int], ...]:
        """The padding of a sample, (start, end) byte ranges no field covers."""
        gaps, end = [], 0
        for f in self.fields:
            if f.offset > end:
                gaps.append((end, f.offset))
            end = f.offset + f.size
        if self.size > end:
            gaps.append((end, self.size))
        return tuple(gaps)

    def _views(self, buf: Any, n: int | None = None) -> Fields:
        """Zero-copy views of the sample in buf (n None), or of its n samples
        along a first axis, by field name."""
        np = _need_numpy()
        rec = np.frombuffer(buf, dtype=self.dtype, count=1 if n is None else n)
        if n is None:
            return {f.name: rec[f.name].reshape(f.shape) for f in self.fields}
        return {f.name: rec[f.name] for f in self.fields}

    def _values(self, data: Any, rows: int | None = None) -> Fields:
        """The fields of one sample (rows None) or of `rows` samples along a first
        axis, from a dict or a numpy structured record or array, each checked
        against this schema and converted to its dtype. ValueError naming the
        field if one is missing, extra, of another dtype or shape, or out of
        range."""
        given = _structured_fields(data)
        if given is None:
            if not isinstance(data, Mapping):
                raise ValueError("a sample of a segment with a schema is a dict of its fields "
                                 f"({', '.join(self.names)}) or a numpy structured array")
            given = data
        for k in given:
            if k not in self:
                raise ValueError(f"field {k!r} is not in the schema ({self.text})")
        for f in self.fields:
            if f.name not in given:
                raise ValueError(f"field {f.name!r} is missing (the schema is {self.text})")
        lead = () if rows is None else (rows,)
        return {f.name: _field_value(f, given[f.name], lead) for f in self.fields}

    def _rows(self, data: Any) -> int:
        """How many samples a batch of fields (a dict or a structured array) holds."""
        np = _need_numpy()
        given = _structured_fields(data)
        if given is None:
            if not isinstance(data, Mapping) or not data:
                raise ValueError("put_batch: a batch of a segment with a schema is a dict of "
                                 "its fields, each with the samples along a first axis, or a "
                                 "numpy structured array")
            given = data
        first = self.names[0]
        v = given[first] if first in given else next(iter(given.values()))
        shape = np.shape(v)
        if not shape:
            raise ValueError(f"put_batch: field {first!r} has no first axis of samples")
        return int(shape[0])


def _schema_text(spec: SchemaLike) -> str:
    """The text form of a schema given in any of the forms Schema.parse() takes."""
    if isinstance(spec, str):
        return spec
    items: list[tuple[Any, Any, Any]] = []
    if _np is not None and isinstance(spec, _np.dtype):
        if spec.names is None:
            raise ValueError(f"schema: the numpy dtype {spec} has no named fields")
        fields = spec.fields
        assert fields is not None
        items = [(n, fields[n][0], ()) for n in spec.names]
    elif isinstance(spec, Mapping):
        for name, v in spec.items():
            if isinstance(v, tuple) and len(v) == 2:
                items.append((name, v[0], v[1]))
            else:
                items.append((name, v, ()))
    elif isinstance(spec, Sequence):
        for item in spec:
            if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
                raise ValueError(f"schema: {item!r} is not (name, dtype) or (name, dtype, shape)")
            items.append((item[0], item[1], item[2] if len(item) == 3 else ()))
    else:
        raise ValueError(f"schema: {spec!r} is not a text, a dict, a list or a numpy dtype")
    return ";".join(_field_text(*item) for item in items)


def _field_text(name: Any, dtype: Any, shape: Any) -> str:
    """One field in the text form: name:dtype[shape]."""
    if not isinstance(name, str):
        raise ValueError(f"schema: a field name is a str, not {name!r}")
    if shape is None:
        dims: tuple[Any, ...] = ()
    elif isinstance(shape, int):
        dims = (shape,)
    else:
        dims = tuple(shape)
    if isinstance(dtype, str) and dtype in DTYPES:
        dname = dtype
    else:
        np = _need_numpy()
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise ValueError(f"schema: field {name!r}: {dtype!r} is not a dtype") from None
        if dt.subdtype is not None:
            dt, sub = dt.subdtype
            dims = tuple(sub) + dims
        dname = dt.name
        if dname not in DTYPES or dt.byteorder == ">" or dt.names is not None:
            raise ValueError(f"schema: field {name!r}: dtype {dt} is not one of "
                             f"{', '.join(DTYPES)} (in the host's byte order)")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) and not hasattr(d, "__index__"):
            raise ValueError(f"schema: field {name!r}: shape {shape!r} is not whole numbers")
    return f"{name}:{dname}[{','.join(str(int(d)) for d in dims)}]"


def _structured_fields(data: Any) -> Mapping[str, Any] | None:
    """The fields of a numpy structured record or array by name, or None if data
    is not one."""
    if _np is None:
        return None
    if isinstance(data, _np.void) or (isinstance(data, _np.ndarray)
                                      and data.dtype.names is not None):
        a = _np.asarray(data)
        if a.dtype.names is None:
            return None
        return {n: a[n] for n in a.dtype.names}
    return None


def _schema_fields(sch: Schema | None, data: Any) -> Any:
    """What a put into a segment of schema `sch` takes as fields: a dict or a
    structured record as it is; a numpy array or scalar of any dtype but uint8
    (raw bytes) as the value of the schema's only field, checked as a field is,
    since its bytes read as that field would be another value. None for raw
    bytes (bytes, a uint8 array, any other buffer), which are checked for size
    only. ValueError for a typed array where the schema has several fields."""
    if sch is None:
        return None
    if isinstance(data, Mapping) or _structured_fields(data) is not None:
        return data
    if (_np is not None and isinstance(data, (_np.ndarray, _np.generic))
            and data.dtype != _np.uint8):
        if len(sch.fields) == 1:
            return {sch.names[0]: _np.asarray(data)}
        raise ValueError(f"a {data.dtype} array is not a sample of the schema ({sch.text}): "
                         "put a dict of its fields, a numpy structured record, or the "
                         "sample's raw bytes (bytes or a uint8 array)")
    return None


def _batch_rows(sch: Schema | None, data: Any) -> Any:
    """The rows put_batch() sends for `data` on a segment of schema `sch`: a
    C-contiguous numpy array of one or more rows. Fields (a dict, records)
    become an array of the schema's dtype, zeroed first so that the padding
    between fields is zeros too. ValueError for no row at all."""
    np = _need_numpy()
    fields = _schema_fields(sch, data)
    if sch is not None and fields is not None:
        k = sch._rows(fields)
        values = sch._values(fields, k)
        if k == 0:
            raise ValueError("put_batch: data must be one or more samples")
        data = np.zeros(k, dtype=sch.dtype)
        for name, v in values.items():
            data[name] = v
    data = np.ascontiguousarray(data)
    if data.ndim == 0 or data.shape[0] == 0:
        raise ValueError("put_batch: data must be an array of one or more rows")
    return data


def _convert(v: Any, want: Any, what: str, where: str | None = None) -> Array:
    """v (a number, a list, a numpy scalar or array) as an array of dtype `want`,
    by the conversion rule of docs/SCHEMA.md: a bool dtype takes bools only; an
    integer dtype takes whole numbers in its range (3 and 3.0 fit an int64; 0.5
    does not, nor 300 a uint8); a float dtype takes any number, rounded to its
    precision (0.1 becomes float32's nearest), but not a finite one beyond its
    range (1e39 into float32), while NaN and the infinities pass. ValueError
    naming `what` (and saying `where` wants the dtype) otherwise; v itself is
    never changed."""
    np = _need_numpy()
    try:
        a = np.asarray(v)
    except (ValueError, TypeError):
        raise ValueError(f"{what}: not an array of numbers") from None
    if a.dtype == want:
        return cast("Array", a)
    kind = a.dtype.kind
    if kind not in ({"b": "b"}.get(want.kind, "buif")):
        raise ValueError(f"{what}: {a.dtype} values, where {want} is wanted"
                         if where is None else f"{what}: {a.dtype} values, where {where}")
    with np.errstate(all="ignore"):
        if want.kind in "iu" and a.size:
            if kind == "f" and not bool(np.all(np.isfinite(a) & (np.trunc(a) == a))):
                raise ValueError(f"{what}: a value that is not a whole number, for {want}")
            info = np.iinfo(want)
            lo, hi = a.min(), a.max()
            lo, hi = (float(lo), float(hi)) if kind == "f" else (int(lo), int(hi))
            if lo < info.min or hi > info.max:
                raise ValueError(f"{what}: a value out of range for {want}")
        conv = a.astype(want)
        if want.kind == "f" and not np.array_equal(np.isfinite(conv), np.isfinite(a)):
            raise ValueError(f"{what}: a value out of range for {want}")
    return cast("Array", conv)


def _field_value(f: Field, v: Any, lead: tuple[int, ...]) -> Array:
    """v as an array of field f's dtype and of shape lead + f.shape. A numpy array
    must have the field's dtype; other values (numbers, lists, numpy scalars)
    are converted by _convert()'s rule."""
    np = _need_numpy()
    want = np.dtype(f.dtype)
    shape = lead + f.shape
    if isinstance(v, np.ndarray):
        if v.dtype != want:
            raise ValueError(f"field {f.name!r}: dtype {v.dtype}, where the schema has {f.dtype}")
        a = v
    else:
        a = _convert(v, want, f"field {f.name!r}", f"the schema has {f.dtype}")
    if a.shape != shape:
        raise ValueError(f"field {f.name!r}: shape {a.shape}, where the schema has {shape}")
    return cast("Array", a)
