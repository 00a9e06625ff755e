"""Parameter values and parameter spaces: member index <-> parameter values by arithmetic.

A node with parameters expands into members, one per combination. Nothing here builds
one object per member: a :class:`ParameterSpace` maps a member index to its values (and
back) with mixed-radix arithmetic (``product``) or a shared position (``zip``), and
ranges are never materialised. Only values listed in the file (or read from a CSV /
JSON-lines file) are held, once per parameter.

Order: ``product`` varies the last parameter fastest, like ``itertools.product``, so
``temperature: [300, 350], seed: {range: [0, 3]}`` gives members
0:(300,0) 1:(300,1) 2:(300,2) 3:(350,0) ...
"""

from __future__ import annotations

import json
import math
from itertools import product as _product
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..workflow.rules import FileSpecMethods, RangeSpecMethods
from ..base.errors import InputError
from ..base.source import did_you_mean, text_problem, value_text
from ..base.yaml_reader import regular_file


class Values(Sequence):
    """The values one parameter takes, in order."""

    def positions(self, text: str) -> Sequence[int]:
        """Every position whose value has this text (see :func:`pwe.base.source.value_text`)."""
        raise NotImplementedError

    def texts(self) -> Iterator[str]:
        return (value_text(v) for v in self)


class ListValues(Values):
    """Values listed in the workflow or read from a file."""

    def __init__(self, values: Sequence[Any]):
        self._values = list(values)
        self._index: dict[str, list[int]] | None = None

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, i):  # type: ignore[override]
        return self._values[i]

    def positions(self, text: str) -> Sequence[int]:
        if self._index is None:  # built on first use: a plan that never matches never pays
            index: dict[str, list[int]] = {}
            for i, v in enumerate(self._values):
                index.setdefault(value_text(v), []).append(i)
            self._index = index
        return self._index.get(text, ())


class RangeValues(Values):
    """``start, start+step, ...`` up to and excluding ``stop``; never materialised."""

    def __init__(self, start: float, stop: float, step: float = 1):
        self.start, self.stop, self.step = start, stop, step
        self._float = any(isinstance(x, float) for x in (start, stop, step))
        self._len = self.count(start, stop, step)
        if self._float:
            # 0, 0.1, ... 0.3 must read 0.3, not 0.30000000000000004
            self._digits = max(_decimals(x) for x in (start, stop, step))

    @staticmethod
    def count(start: float, stop: float, step: float = 1) -> int:
        """How many values ``range: [start, stop, step]`` has (finite bounds; a Python int,
        however large)."""
        return max(0, math.ceil((stop - start) / step))

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(i)
        v = self.start + i * self.step
        return round(v, self._digits) if self._float else v

    def positions(self, text: str) -> Sequence[int]:
        try:
            x = float(text)
        except ValueError:
            return ()
        if not math.isfinite(x):
            return ()
        i = round((x - self.start) / self.step)
        if 0 <= i < self._len and value_text(self[i]) == text:
            return (i,)
        return ()


def _decimals(x: float) -> int:
    s = repr(float(x))
    if "e" in s:
        return 15
    return max(1, len(s.split(".")[1]))


#: The most members of one node and of one run (the run's state takes 13 bytes a member;
#: a node of 1,000,000 members is routine).
MAX_MEMBERS = 100_000_000
#: The largest parameter file read (CSV or JSON lines); it must be a regular file.
MAX_PARAMETER_FILE_BYTES = 512 * 1024 * 1024


def read_values(spec: Any, name: str, base: Path, wf_file: Path, line: int | None) -> Values:
    """The values of a parameter, from its validated spec."""
    if isinstance(spec, RangeSpecMethods):
        count = RangeValues.count(*spec.range)
        if count > MAX_MEMBERS:
            raise InputError(f"parameter '{name}': {{range: {spec.range}}} has {count:,} values; a node has at most "
                             f"{MAX_MEMBERS:,} members", wf_file, line)
        return RangeValues(*spec.range)
    if isinstance(spec, FileSpecMethods):
        return ListValues(_read_file_column(base / spec.file, spec.column or name, wf_file, line))
    return ListValues(spec)


def _read_file_column(path: Path, column: str, wf_file: Path, line: int | None) -> list[Any]:
    """One column of a CSV file (strings) or one key of a JSON-lines file (typed)."""

    def fail(msg: str) -> InputError:
        return InputError(msg, wf_file, line)

    try:
        problem = regular_file(path, MAX_PARAMETER_FILE_BYTES, "a parameter file")
        if problem:
            raise fail(f"parameter file {str(path)!r}: {problem}")
        fh = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise fail(f"parameter file {str(path)!r}: {(exc.strerror or str(exc)).lower()}") from None
    import csv  # (only a node with a parameter file pays for it)

    with fh:
        try:
            if path.suffix.lower() in (".jsonl", ".ndjson"):
                values = _jsonl_key(fh, path, column)
            else:
                values = _csv_column(fh, path, column)
        except UnicodeDecodeError:
            raise fail(f"parameter file {str(path)!r} is not UTF-8 text") from None
        except csv.Error as exc:
            raise InputError(f"CSV error: {exc}", path) from None
    if not values:
        raise fail(f"parameter file {str(path)!r} gives no values for '{column}'")
    return values


def _jsonl_key(fh: Any, path: Path, column: str) -> list[Any]:
    """The values (typed) of key ``column`` of each object of a JSON-lines file; blank lines
    are skipped. InputError naming the line for one that is not an object with that key
    holding a string, number or boolean."""
    values: list[Any] = []
    for n, text in enumerate(fh, 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"not JSON: {exc.msg}", path, n) from None
        if not isinstance(row, dict):
            raise InputError("each line must be a JSON object", path, n)
        if column not in row:
            raise InputError(f"no key '{column}'{did_you_mean(column, row)}", path, n)
        v = row[column]
        if not isinstance(v, (str, int, float, bool)):
            raise InputError(f"'{column}' must be a string, number or boolean", path, n)
        if isinstance(v, str) and text_problem(v):
            raise InputError(f"'{column}' {text_problem(v)}", path, n)
        values.append(v)
    return values


def _csv_column(fh: Any, path: Path, column: str) -> list[Any]:
    """The values (strings) of column ``column`` of a CSV file whose first line names the
    columns; blank rows are skipped. InputError naming the line for a row too short."""
    import csv

    values: list[Any] = []
    reader = csv.reader(fh)
    header = next(reader, None)
    if not header:
        raise InputError("the CSV file is empty; its first line names the columns", path, 1)
    header = [h.strip() for h in header]
    if column not in header:
        raise InputError(
            f"no column '{column}'{did_you_mean(column, header)}; columns: {', '.join(header)}", path, 1
        )
    col = header.index(column)
    for row in reader:
        if not row or not any(c.strip() for c in row):
            continue
        if col >= len(row):
            raise InputError(f"row has {len(row)} fields, needs column {col + 1} ('{column}')",
                             path, reader.line_num)
        if text_problem(row[col]):
            raise InputError(f"column '{column}' {text_problem(row[col])}", path, reader.line_num)
        values.append(row[col])
    return values


class ParameterSpace:
    """The members of one node: index <-> values, by arithmetic."""

    def __init__(self, values: Mapping[str, Values], combine: str = "product"):
        self.names = list(values)
        self.values = dict(values)
        self.combine = combine
        #: values of the members a check grew (``check:``), index ``size + k``: filled by
        #: the run's state from its journal (:mod:`pwe.planning.trees`), empty in a plan alone
        self.grown: list[dict[str, Any]] = []
        sizes = [len(v) for v in self.values.values()]
        if combine == "zip" and sizes:
            self.size = sizes[0]
        else:
            self.size = math.prod(sizes)  # 1 for a node without parameters
        # strides[k]: how far apart two members are whose k-th parameter differs by one
        self.strides: list[int] = []
        stride = 1
        for n in reversed(sizes):
            self.strides.insert(0, stride)
            stride *= n

    def __len__(self) -> int:
        return self.size

    def positions_of(self, index: int) -> dict[str, int]:
        """The position within each parameter's values of member ``index``."""
        if not 0 <= index < self.size:
            raise IndexError(f"member {index} of {self.size}")
        if self.combine == "zip":
            return {n: index for n in self.names}
        return {n: (index // s) % len(self.values[n]) for n, s in zip(self.names, self.strides)}

    def values_of(self, index: int) -> dict[str, Any]:
        if index >= self.size and self.grown:  # a grown member: its journaled values
            return dict(self.grown[index - self.size])
        return {n: self.values[n][p] for n, p in self.positions_of(index).items()}

    def texts_of(self, index: int, names: Sequence[str]) -> dict[str, str]:
        pos = self.positions_of(index)
        return {n: value_text(self.values[n][pos[n]]) for n in names}

    def index_of(self, positions: Mapping[str, int]) -> int:
        if self.combine == "zip":
            return next(iter(positions.values()), 0)
        return sum(positions[n] * s for n, s in zip(self.names, self.strides))

    def matching(self, fixed: Mapping[str, str]) -> Iterator[int]:
        """Indices of the members whose values have the texts ``fixed`` gives (name -> text).

        Never scans the members: for ``product`` the matches are the cartesian product
        of each parameter's matching positions; for ``zip`` the positions one parameter
        matches, checked against the others.
        """
        if not fixed:
            yield from range(self.size)
            return
        if self.combine == "zip":
            cands = sorted((self.values[n].positions(t) for n, t in fixed.items()), key=len)
            first, rest = cands[0], [set(c) for c in cands[1:]]
            for p in first:
                if all(p in r for r in rest):
                    yield p
            return
        axes = [
            self.values[n].positions(fixed[n]) if n in fixed else range(len(self.values[n]))
            for n in self.names
        ]
        for combo in _product(*axes):
            yield sum(p * s for p, s in zip(combo, self.strides))

    def count_matching(self, fixed: Mapping[str, str]) -> int:
        if not fixed:
            return self.size
        if self.combine == "zip":
            return sum(1 for _ in self.matching(fixed))
        return math.prod(
            len(self.values[n].positions(fixed[n])) if n in fixed else len(self.values[n]) for n in self.names
        )
