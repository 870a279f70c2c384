#!/usr/bin/env python3
r"""CSV input, missing values and atomic output files for the command line (no pandas needed).

Everything here raises :class:`CLIError` with a one-line message that names the file, the column and the row;
:func:`gpytorch_explain.cli.main` prints it on stderr and exits with status 2.

Rows are numbered from 0 (the first line after the header is row 0, line 2 of the file), as ``--row`` counts them;
blank lines are not rows (messages give each row's line in the file too).
"""

from __future__ import annotations

import contextlib
import csv
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MISSING",
    "NAN_POLICIES",
    "CLIError",
    "Table",
    "atomic_output",
    "atomic_path",
    "check_input_file",
    "check_output_path",
    "handle_nan",
    "read_csv",
    "split_names",
]

#: cells read as missing values (NaN); compared after stripping whitespace, case-insensitively
MISSING: frozenset[str] = frozenset({"", "na", "n/a", "nan", "null", "none"})
#: what ``--nan`` can ask for
NAN_POLICIES: tuple[str, ...] = ("error", "drop", "mean")


class CLIError(Exception):
    """A user error: printed as one line on stderr (no traceback), exit status 2."""


def check_input_file(path: str, what: str = "file") -> str:
    """``path`` if it is a readable regular file, else :class:`CLIError`."""
    if not os.path.exists(path):
        raise CLIError(f"{what} not found: {path}")
    if os.path.isdir(path):
        raise CLIError(f"{what} is a directory, not a file: {path}")
    if not os.access(path, os.R_OK):
        raise CLIError(f"{what} is not readable: {path}")
    return path


def split_names(text: str | None) -> list[str] | None:
    """``"a, b,c"`` -> ``["a", "b", "c"]`` (``None`` stays ``None``); an empty list is an error."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise CLIError(f"no column names in {text!r}; give them comma-separated, e.g. a,b,c")
    return names


@dataclass
class Table:
    """A CSV file read as text: ``header`` (column names) and ``rows`` (lists of cells), with its path.

    Example:
        >>> table = Table("t.csv", ["a", "b"], [["1", "x"], ["2.5", ""]])
        >>> table.numeric(["a"])[:, 0].tolist()
        [1.0, 2.5]
        >>> table.numeric(["b"])
        Traceback (most recent call last):
        ...
        gpytorch_explain.cli.dataio.CLIError: t.csv: column 'b', row 0 (line 2): 'x' is not a number
    """

    path: str
    header: list[str]
    rows: list[list[str]]
    #: the file's line number of each row (default: row i on line i + 2, as in a file without blank lines)
    lines: list[int] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def line(self, i: int) -> int:
        """The file's line number of row ``i``."""
        return self.lines[i] if self.lines is not None else i + 2

    def _header_hint(self) -> str:
        """A hint when every column name reads as a number: the first line is probably data, not a header."""
        try:
            [float(name) for name in self.header]
        except ValueError:
            return ""
        return (
            " (every column name is a number: the first line of the file is read as the header; if it is a data "
            "row, add a header line naming the columns)"
        )

    def require(self, names: Sequence[str], what: str = "column") -> None:
        """Raise :class:`CLIError` naming every column of ``names`` the file lacks."""
        missing = [name for name in names if name not in self.header]
        if missing:
            listed = ", ".join(repr(name) for name in missing)
            raise CLIError(
                f"{self.path}: no {what}{'s' if len(missing) > 1 else ''} {listed}; "
                f"the columns are {', '.join(self.header)}{self._header_hint()}"
            )

    def text(self, name: str) -> list[str]:
        """The raw cells of column ``name``."""
        self.require([name])
        j = self.header.index(name)
        return [row[j] for row in self.rows]

    def numeric(self, names: Sequence[str]) -> np.ndarray:
        """Columns ``names`` as an ``(n, len(names))`` float64 array; missing cells (:data:`MISSING`) are NaN.

        A cell that is not a number, or is infinite, raises :class:`CLIError` naming the column and the row.
        """
        self.require(names)
        out = np.empty((len(self.rows), len(names)), dtype=np.float64)
        for k, name in enumerate(names):
            j = self.header.index(name)
            for i, row in enumerate(self.rows):
                cell = row[j].strip()
                if cell.lower() in MISSING:
                    out[i, k] = np.nan
                    continue
                try:
                    value = float(cell)
                except ValueError:
                    raise CLIError(
                        f"{self.path}: column {name!r}, row {i} (line {self.line(i)}): {cell!r} is not a number"
                    ) from None
                if np.isinf(value):
                    raise CLIError(f"{self.path}: column {name!r}, row {i} (line {self.line(i)}): {cell!r} is infinite")
                out[i, k] = value
        return out


def read_csv(path: str) -> Table:
    """Read a comma-separated file with a header row (UTF-8, a byte-order mark is allowed).

    Empty files, a header without data rows, duplicate or empty column names and rows with the wrong number of
    fields raise :class:`CLIError`. Blank lines (nothing but whitespace) are skipped and not counted as rows; a line
    of empty cells (``,,``) is a row whose values are all missing, which ``--nan`` handles like any other, except
    after the last data row (spreadsheet exports end with such lines), where it is dropped.
    """
    check_input_file(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            records, end = [], 0
            for row in reader:
                start, end = end + 1, reader.line_num  # a quoted field may span lines: the record starts here
                if len(row) > 1 or (row and row[0].strip()):
                    records.append((start, row))
        # lines of empty cells after the last data row (spreadsheet exports end with them) are not rows
        while records and not any(cell.strip() for cell in records[-1][1]):
            records.pop()
    except UnicodeDecodeError as err:
        raise CLIError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start})") from None
    except csv.Error as err:
        raise CLIError(f"{path}: not a readable CSV file ({err})") from None
    if not records:
        raise CLIError(f"{path} is empty: expected a header row and data rows")
    header = [name.strip() for name in records[0][1]]
    if any(not name for name in header):
        raise CLIError(f"{path}: the header has an empty column name (column {header.index('') + 1})")
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise CLIError(f"{path}: the header names column {name!r} twice")
        seen.add(name)
    rows, lines = [], []
    for line, row in records[1:]:
        if len(row) != len(header):
            raise CLIError(f"{path}: line {line} has {len(row)} fields, the header has {len(header)}")
        rows.append(row)
        lines.append(line)
    if not rows:
        raise CLIError(f"{path} has a header but no data rows")
    return Table(path, header, rows, lines)


def handle_nan(
    values: np.ndarray, names: Sequence[str], policy: str, path: str, fill: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Apply the ``--nan`` policy to ``values`` (``(n, k)``, columns ``names``).

    :param policy: ``"error"`` (a :class:`CLIError` naming each column with NaNs and how many), ``"drop"`` (drop the
        rows with any NaN) or ``"mean"`` (replace a NaN by ``fill`` of its column; by default the column's mean
        over the other rows).
    :return: the new values and the indices of the rows kept (into the original rows).

    Example:
        >>> import numpy as np
        >>> v = np.array([[1.0, np.nan], [3.0, 4.0], [np.nan, 6.0]])
        >>> handle_nan(v, ["a", "b"], "mean", "t.csv")[0].tolist()
        [[1.0, 5.0], [3.0, 4.0], [2.0, 6.0]]
        >>> handle_nan(v, ["a", "b"], "drop", "t.csv")[1].tolist()
        [1]
    """
    if policy not in NAN_POLICIES:
        raise CLIError(f"--nan must be one of {', '.join(NAN_POLICIES)}, got {policy!r}")
    bad = np.isnan(values)
    rows = np.arange(values.shape[0])
    if not bad.any():
        return values, rows
    if policy == "error":
        parts = []
        for k in np.flatnonzero(bad.any(0)):
            where = np.flatnonzero(bad[:, k])
            shown = ", ".join(str(i) for i in where[:5]) + (", ..." if where.size > 5 else "")
            parts.append(f"column {names[k]!r}: {where.size} row{'s' if where.size > 1 else ''} ({shown})")
        raise CLIError(
            f"{path}: missing/NaN values in {'; '.join(parts)}; pass --nan drop to drop those rows "
            "or --nan mean to fill in column means"
        )
    if policy == "drop":
        keep = ~bad.any(1)
        if not keep.any():
            raise CLIError(f"{path}: every row has a missing/NaN value; nothing is left after --nan drop")
        return values[keep], rows[keep]
    if fill is None:
        with np.errstate(invalid="ignore"):
            counts = (~bad).sum(0)
            if (counts == 0).any():
                name = names[int(np.flatnonzero(counts == 0)[0])]
                raise CLIError(f"{path}: column {name!r} has no values at all; --nan mean cannot fill it")
            fill = np.nanmean(values, axis=0)
    return np.where(bad, np.asarray(fill, dtype=np.float64)[None, :], values), rows


def check_output_path(path: str | None) -> None:
    """Fail early (before any long work) when ``path`` cannot be written: a missing folder, or a directory."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"cannot write {path}: folder {folder} does not exist")
    if os.path.isdir(path):
        raise CLIError(f"cannot write {path}: it is a directory")


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Write ``path`` all at once, for writers that take a file name (``torch.save``, ``savefig``).

    Yields a temporary path in the same folder (same extension), which replaces ``path`` (``os.replace``) only
    when the body finishes; on any error the temporary file is removed and ``path`` is left as it was.
    """
    check_output_path(path)
    folder = os.path.dirname(os.path.abspath(path))
    suffix = os.path.splitext(path)[1]
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=f".tmp{suffix}", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "w", **kwargs) -> Iterator:
    """:func:`atomic_path` for text or binary writes: yields the temporary file opened with ``mode``.

    Example:
        >>> import os, tempfile
        >>> target = os.path.join(tempfile.mkdtemp(), "out.txt")
        >>> with atomic_output(target) as handle:
        ...     _ = handle.write("done")
        >>> open(target).read()
        'done'
    """
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle
