"""Streaming readers for edge lists and node tables (features, labels, index lists).

Each reader yields NumPy chunks of bounded size and can be iterated more than
once. Errors name the file, the row (0-based data row; CSV errors give the line)
and the fix.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from sparsetrain._sigbus import watch
from sparsetrain.errors import DatasetError, InputNote, SettingError

CHUNK_ROWS = 1 << 22
_SRC_NAMES = ("src", "source", "from", "u", "row")
_DST_NAMES = ("dst", "target", "to", "v", "col")
_WEIGHT_NAMES = ("weight", "w", "edge_weight")
_ROLES = {**dict.fromkeys(_SRC_NAMES, "src"), **dict.fromkeys(_DST_NAMES, "dst"),
          **dict.fromkeys(_WEIGHT_NAMES, "weight")}
_NOT_FEATURES = ("id", "node", "node_id", "nid", "idx", "index", "label", "labels", "y")
_ROLE_WORDS = {"src": "source", "dst": "destination", "weight": "edge weight"}


def file_kind(path: Path) -> str:
    """'csv', 'parquet' or 'npy', from the file name (``.gz``/``.bz2`` CSV allowed)."""
    name = path.name.lower()
    for suffix in (".gz", ".bz2", ".zst"):
        name = name.removesuffix(suffix)
    if name.endswith((".csv", ".tsv", ".txt")):
        return "csv"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith(".npy"):
        return "npy"
    raise DatasetError(f"{path}: unknown file type; use .csv (optionally .gz), .parquet or .npy")


def _check_exists(path: Path) -> None:
    if not path.is_file():
        raise DatasetError(f"{path}: no such file; check the path")
    if path.stat().st_size == 0:
        raise DatasetError(f"{path}: the file is empty; it needs at least one row")


def check_column_names(path: Path, names: list[str], where: str) -> None:
    """Every column named, no name twice (names compared without case and spaces)."""
    keys = [n.strip().lower() for n in names]
    if "" in keys:
        column = keys.index("") + 1
        raise DatasetError(f"{path}: {where}: column {column} has no name; name every column (e.g. src,dst)")
    seen = set()
    for name, key in zip(names, keys):
        if key in seen:
            raise DatasetError(f"{path}: {where} names column {name!r} twice; give every column its own name")
        seen.add(key)


# ---------------------------------------------------------------- CSV

def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_failed(path: Path, exc: Exception) -> DatasetError:
    """A compressed or unreadable file, in words: which file, what is wrong, how to fix it."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    suffix = path.suffix.lower()
    packer = {".gz": "gzip", ".bz2": "bzip2", ".zst": "zstd"}.get(suffix)
    if packer and "truncated" in text.lower():
        return DatasetError(f"{path}: the {packer} stream is truncated ({text}); the file is incomplete, copy or "
                            "compress it again")
    if packer:
        return DatasetError(f"{path}: not readable as {packer} data ({text}); compress it with {packer} or drop "
                            f"{suffix} from the name")
    return DatasetError(f"{path}: cannot be read ({text}); check the file")


def _open_text(path: Path):
    return io.TextIOWrapper(pa.input_stream(str(path), compression="detect"), encoding="utf-8", errors="replace")


def _csv_layout(path: Path) -> tuple[bool, list[str], str]:
    """(has_header, column_names, delimiter) from the first line."""
    try:
        with pa.input_stream(str(path), compression="detect") as stream:
            head = b""
            while b"\n" not in head and len(head) < 1 << 24:  # the whole first line, however wide
                block = stream.read(1 << 16)
                if not block:
                    break
                head += block
    except (OSError, pa.ArrowInvalid) as exc:
        raise _read_failed(path, exc) from None
    first_bytes = head.split(b"\n", 1)[0]
    try:
        first = first_bytes.decode("utf-8").removeprefix("\ufeff").rstrip("\r")
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: line 1 is not UTF-8 text; save the file as UTF-8 (CSV headers and values must be "
                           "UTF-8)") from None
    if not first.strip():
        raise DatasetError(f"{path}: the first line is empty; the file must start with a header or a data row")
    delimiter = "\t" if "\t" in first else ("," if "," in first else " ")
    fields = [f.strip().strip('"').strip() for f in first.split(delimiter) if f.strip() != "" or delimiter != " "]
    # a header has a field that is text; an empty field (a trailing delimiter) is not one
    has_header = any(f != "" and not _is_number(f) for f in fields)
    names = [f.lower() for f in fields] if has_header else [f"c{i}" for i in range(len(fields))]
    if has_header:
        check_column_names(path, names, "line 1")
    return has_header, names, delimiter


def csv_line(path: Path, row: int, has_header: bool) -> int:
    """1-based line of 0-based data ``row``, counting the header and the empty lines the parser skips (error path
    only)."""
    seen = -1 if has_header else 0
    with _open_text(path) as text:
        for number, line in enumerate(text, start=1):
            if line.rstrip("\r\n") == "":
                continue
            if seen == row:
                return number
            seen += 1
    return row + 1 + int(has_header)


_ARROW_COL = re.compile(r"column #(\d+)")
_ARROW_VALUE = re.compile(r"invalid value '([^']*)'")
_ARROW_COUNT = re.compile(r"Expected (\d+) columns, got (\d+)")


def _find_line(path: Path, delimiter: str, match) -> int | None:
    """1-based line of the first line whose fields satisfy ``match`` (only on the error path)."""
    try:
        with _open_text(path) as text:
            for number, line in enumerate(text, start=1):
                if line.rstrip("\r\n") != "" and match(line.rstrip("\r\n").split(delimiter)):
                    return number
    except (OSError, pa.ArrowInvalid):
        return None
    return None


def _csv_error(path: Path, exc: Exception, what: str, names: list[str], delimiter: str,
               has_header: bool) -> DatasetError:
    text = str(exc).splitlines()[0]
    count = _ARROW_COUNT.search(text)
    if count:
        want = int(count.group(1))
        line = _find_line(path, delimiter, lambda fields: len(fields) != want)
        where = f"line {line}" if line else "a line"
        return DatasetError(f"{path}: {where} has {count.group(2)} fields but line 1 has {want}; give every line the "
                            "same columns")
    col = _ARROW_COL.search(text)
    value = _ARROW_VALUE.search(text)
    if not (col and value):
        return DatasetError(f"{path}: cannot be parsed ({text}); {what}")
    column = int(col.group(1))
    wanted = value.group(1)
    line = _find_line(path, delimiter,
                      lambda fields: column < len(fields) and fields[column].strip().strip('"') == wanted)
    where = f"line {line}" if line else "a line"
    name = repr(names[column]) if has_header and column < len(names) else str(column + 1)
    expected = "an integer" if "to int" in text else "a number"
    return DatasetError(f"{path}: {where}, column {name}: {wanted!r} is not {expected}; {what}")


def _iter_csv(path: Path, columns: list[str] | None, types: dict, what: str) -> Iterator[pa.RecordBatch]:
    _check_exists(path)
    has_header, names, delimiter = _csv_layout(path)
    # our own (stripped, lower-case) names, so a header's case or spacing never hides a column
    read = pacsv.ReadOptions(column_names=names, skip_rows=int(has_header), block_size=1 << 24)
    parse = pacsv.ParseOptions(delimiter=delimiter, ignore_empty_lines=True)
    convert = pacsv.ConvertOptions(
        column_types={n: types.get(n, types.get("*")) for n in (columns or names) if types.get(n, types.get("*"))},
        include_columns=columns,
        null_values=[""],
        quoted_strings_can_be_null=False,
        strings_can_be_null=False,
    )
    try:
        with pacsv.open_csv(str(path), read_options=read, parse_options=parse, convert_options=convert) as reader:
            for batch in reader:
                yield batch
    except pa.ArrowInvalid as exc:
        if "CSV" not in str(exc) and "conversion" not in str(exc).lower():
            raise _read_failed(path, exc) from None
        raise _csv_error(path, exc, what, names, delimiter, has_header) from None
    except OSError as exc:
        raise _read_failed(path, exc) from None


# ---------------------------------------------------------------- edges

class EdgeListReader:
    """Edge list from CSV, Parquet or NumPy; call the object to iterate ``(src, dst, weight)`` chunks.

    CSV/Parquet: columns named ``src``/``dst`` (or ``source``/``target``...), else
    the first two; a column named ``weight`` is the edge weight; ``time_column`` names the column of edge times
    (read by :meth:`times`, not by the chunks). NumPy: an int array of shape [2, E] (PyG's ``edge_index``) or [E, 2].
    """

    def __init__(self, path: str | Path, chunk_rows: int = CHUNK_ROWS, time_column: str | None = None):
        self.path = Path(path)
        _check_exists(self.path)
        self.kind = file_kind(self.path)
        self.chunk_rows = chunk_rows
        self.time_col = None if time_column is None else time_column.strip().lower()
        if self.time_col is not None and self.kind == "npy":
            raise DatasetError(f"{self.path}: a .npy edge list has no named columns, so it has no edge time column "
                               f"{time_column!r}; write the edges as CSV or Parquet with src, dst and a "
                               f"{time_column!r} column")
        self.src_col, self.dst_col, self.weight_col = self._columns()
        self.has_header = self.kind != "csv" or _csv_layout(self.path)[0]
        self.where = where_in(self.path, self.kind, self.has_header)

    @property
    def weighted(self) -> bool:
        return self.weight_col is not None

    def _pick(self, names: list[str], has_header: bool = True) -> tuple[str, str, str | None]:
        """(src, dst, weight) columns: by header name, else the first two by position (said in an ``InputNote``)."""
        path = self.path
        if has_header:
            check_column_names(path, names, "the header" if self.kind == "parquet" else "line 1")
        if self.time_col is not None:
            if not has_header:
                raise DatasetError(f"{path}: line 1 is not a header, so no column is named {self.time_col!r} (the edge "
                                   f"time column); start the file with a header line such as 'src,dst,{self.time_col}'")
            matches = [n for n in names if n.strip().lower() == self.time_col]
            if not matches:
                raise DatasetError(f"{path}: no column is named {self.time_col!r} (columns: {', '.join(names)}); name "
                                   "the edge time column in the header, or pass its name with --edge-time-column")
            self.time_col = matches[0]
            names = [n for n in names if n != self.time_col]
        roles = {}
        for name in names if has_header else []:
            role = _ROLES.get(name.strip().lower())
            if role in roles:
                raise DatasetError(f"{path}: columns {roles[role]!r} and {name!r} both name the {_ROLE_WORDS[role]}; "
                                   "keep one of them")
            if role is not None:
                roles[role] = name
        others = [n for n in names if n not in roles.values()]
        if ("src" in roles) != ("dst" in roles):
            found, missing = ("src", "dst") if "src" in roles else ("dst", "src")
            unknown = f" ({', '.join(map(repr, others))} is not a known name)" if others else ""
            raise DatasetError(
                f"{path}: the header names {roles[found]!r} ({_ROLE_WORDS[found]}) but no {_ROLE_WORDS[missing]} "
                f"column{unknown}; name the columns src,dst (or {'/'.join(_SRC_NAMES[1:3])}, "
                f"{'/'.join(_DST_NAMES[1:3])}), weight optional"
            )
        if not has_header:
            if len(names) < 2:
                raise DatasetError(f"{path}: line 1 has {len(names)} column; an edge list needs two (src,dst per line)")
            if len(names) > 2:
                raise DatasetError(
                    f"{path}: line 1 has {len(names)} columns and no header; start the file with a header line "
                    f"'src,dst,weight' (the third column is then the edge weight), or keep only the src and dst columns"
                )
            return names[0], names[1], None
        if "src" not in roles:
            if len(others) != 2:
                count = f"{len(others)} column(s)" if len(others) < 2 else f"{len(others)} columns ({','.join(others)})"
                raise DatasetError(f"{path}: the header names no source or destination column among {count}; "
                                   "name the columns src,dst (weight optional)")
            note = (f"{path}: the header names no source or destination column; reading {others[0]!r} as the source "
                    f"and {others[1]!r} as the destination of each edge (name them src,dst to say so)")
            warnings.warn(InputNote(note), stacklevel=3)
            return others[0], others[1], roles.get("weight")
        if others:
            raise DatasetError(
                f"{path}: column {others[0]!r} is not used (columns: {', '.join(names)}); name the edge weight column "
                f"'weight' (or {', '.join(repr(n) for n in _WEIGHT_NAMES[1:])}), pass --edge-time-column "
                f"{others[0]} if it holds edge times, or remove the column"
            )
        return roles["src"], roles["dst"], roles.get("weight")

    def _columns(self) -> tuple:
        if self.kind == "csv":
            has_header, names, _ = _csv_layout(self.path)
            return self._pick(names, has_header)
        if self.kind == "parquet":
            schema = _parquet_file(self.path).schema_arrow
            return self._pick(schema.names)
        array = _open_npy(self.path)
        if array.ndim != 2 or 2 not in array.shape:
            raise DatasetError(f"{self.path}: shape {list(array.shape)}; a NumPy edge list must be [2, E] or [E, 2]")
        if not np.issubdtype(array.dtype, np.integer):
            raise DatasetError(f"{self.path}: dtype {array.dtype}; {_INTEGER_IDS}")
        if array.shape == (2, 2):
            raise DatasetError(
                f"{self.path}: shape [2, 2] is ambiguous (two edges as [2, E] or as [E, 2]); "
                "write this edge list as CSV (src,dst per line) or with more than two edges"
            )
        return None, None, None

    def is_empty(self) -> bool:
        """Whether the file holds no edge at all (a CSV is read only up to its first data line)."""
        if self.kind != "csv":
            return self.num_rows() == 0
        with _open_text(self.path) as text:
            lines = (line for line in text if line.strip("\ufeff\r\n") != "")
            return next(lines, None) is None or (self.has_header and next(lines, None) is None)

    def num_rows(self) -> int | None:
        if self.kind == "parquet":
            return _parquet_file(self.path).metadata.num_rows
        if self.kind == "npy":
            a = _open_npy(self.path)
            return a.shape[1] if a.shape[0] == 2 and a.shape[1] != 2 else a.shape[0]
        return None

    def times(self) -> np.ndarray:
        """The edge time column, one entry per edge in file order: int64 when every value is an integer, else float64;
        an empty, non-numeric, NaN or infinite value is one error naming the row."""
        if self.time_col is None:
            raise SettingError(f"{self.path}: no edge time column was named")
        return read_time_column(self.path, self.kind, self.time_col, self.has_header, self.where, self.chunk_rows,
                                "edge time")

    def __call__(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        if self.kind == "npy":
            yield from self._npy_chunks()
            return
        if self.kind == "parquet":
            batches = _parquet_batches(self.path, [c for c in (self.src_col, self.dst_col, self.weight_col) if c],
                                       self.chunk_rows)
        else:
            cols = [c for c in (self.src_col, self.dst_col, self.weight_col) if c]
            types = {self.src_col: pa.int64(), self.dst_col: pa.int64()}
            if self.weight_col:
                types[self.weight_col] = pa.float32()
            batches = _iter_csv(self.path, cols, types, "node ids must be integers; fix or remove that line")
        row = 0
        for batch in batches:
            src, dst = (_int_column(self.path, batch.column(c), _shown(c, self.has_header), row, self.where)
                        for c in (self.src_col, self.dst_col))
            w = None
            if self.weight_col:
                shown = _shown(self.weight_col, self.has_header)
                w = _float_column(self.path, batch.column(self.weight_col), shown, row, self.where)
            row += len(src)
            yield src, dst, w

    def _npy_chunks(self):
        array = _open_npy(self.path)
        pairs_first = array.shape[0] == 2 and array.shape[1] != 2
        total = array.shape[1] if pairs_first else array.shape[0]
        two_rows = pairs_first == bool(array.flags.c_contiguous)  # all sources, then all destinations, on disk
        for lo in range(0, total, self.chunk_rows):
            n = min(self.chunk_rows, total - lo)
            if two_rows:
                src, dst = _read_flat(self.path, array, lo, n), _read_flat(self.path, array, total + lo, n)
            else:
                block = _read_flat(self.path, array, 2 * lo, 2 * n).reshape(n, 2)
                src, dst = block[:, 0], block[:, 1]
            yield (_to_int64(self.path, src, "src", lo, self.where), _to_int64(self.path, dst, "dst", lo, self.where),
                   None)


def _parquet_file(path: Path) -> pq.ParquetFile:
    try:
        # no pre-buffering: it would read ahead (and keep) much of the file
        return pq.ParquetFile(str(path), pre_buffer=False, buffer_size=1 << 24)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"{path}: not a readable Parquet file ({exc}); re-export it") from None


def _parquet_batches(path: Path, columns: list[str] | None, chunk_rows: int) -> Iterator[pa.RecordBatch]:
    """Record batches, one row group at a time, so memory stays at about one batch."""
    parquet = _parquet_file(path)
    try:
        for group in range(parquet.num_row_groups):
            yield from parquet.iter_batches(batch_size=chunk_rows, row_groups=[group], columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"{path}: cannot be read ({exc}); the Parquet file is damaged, re-export it") from None


def _open_npy(path: Path) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DatasetError(f"{path}: not a readable .npy file ({exc}); save it with numpy.save") from None
    watch(array, path)
    return array


def _read_flat(path: Path, array: np.memmap, first: int, count: int) -> np.ndarray:
    """Elements ``first ... first + count`` of a .npy's data in storage order, by a plain read.

    Not through the mapping: mapped pages would stay in this process's RSS as a pass
    streams through the file; read ones stay only in the page cache.
    """
    data = np.fromfile(path, dtype=array.dtype, count=count, offset=array.offset + first * array.dtype.itemsize)
    if len(data) != count:
        raise DatasetError(f"{path}: ends before element {first + count}; the file is truncated, save it again with "
                           "numpy.save")
    return data


LABEL_NAMES_FIX = ("class names are not read as labels: number them 0..K-1 first, e.g. in pandas "
                   "df['label'] = df['label'].astype('category').cat.codes, and keep .cat.categories as the "
                   "id -> name table")
_INTEGER_IDS = "node ids must be integers: store them as int64 (e.g. numpy's .astype(np.int64) once every id is whole)"


def _to_int64(path: Path, values: np.ndarray, name: str, first_row: int, where) -> np.ndarray:
    """int64 ids; an unsigned id that int64 cannot hold is an error, never a wrap to a negative id."""
    if values.dtype == np.uint64 and len(values) and values.max() > np.iinfo(np.int64).max:
        bad = int(np.flatnonzero(values > np.iinfo(np.int64).max)[0])
        raise DatasetError(f"{path}: {where(first_row + bad)}, {name}: node id {values[bad]} does not fit in int64; "
                           "node ids must be in [0, num_nodes), fix that row")
    return values.astype(np.int64, copy=False)


def _shown(column: str, has_header: bool) -> str:
    """A column as the user knows it: its header name, or its position in a CSV file without a header."""
    return repr(column) if has_header else str(int(column.removeprefix("c")) + 1)


def _int_column(path: Path, column: pa.Array, shown: str, first_row: int, where) -> np.ndarray:
    if pa.types.is_integer(column.type) and column.null_count == 0:
        return _to_int64(path, column.to_numpy(), f"column {shown}", first_row, where)
    if column.null_count:
        bad = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise DatasetError(f"{path}: {where(bad)}, column {shown}: empty value; every edge needs a node id")
    raise DatasetError(f"{path}: column {shown} has type {column.type}; {_INTEGER_IDS}")


def _float_column(path: Path, column: pa.Array, shown: str, first_row: int, where) -> np.ndarray:
    if column.null_count:
        bad = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise DatasetError(f"{path}: {where(bad)}, column {shown}: empty value; fill it or drop the column")
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        raise DatasetError(f"{path}: column {shown} has type {column.type}; it must be numeric")
    return column.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)


# ---------------------------------------------------------------- node tables

class NodeTableReader:
    """Per-node rows (features: 2-D floats; labels / index lists: 1-D ints) from CSV, Parquet or NumPy.

    Row ``i`` is node ``i`` (an index list: one node id per row). Parquet features: every numeric
    column is one dimension, or one list column holds the vector. Labels and index lists have one column.
    """

    def __init__(self, path: str | Path, role: str, chunk_rows: int = CHUNK_ROWS):
        if role not in ("features", "labels", "index"):
            raise SettingError(f"unknown node table role {role!r}")
        self.path = Path(path)
        self.role = role
        _check_exists(self.path)
        self.kind = file_kind(self.path)
        self.chunk_rows = chunk_rows
        self.has_header = self.kind != "csv" or _csv_layout(self.path)[0]
        self.where = where_in(self.path, self.kind, self.has_header)
        if self.kind == "npy":
            array = _open_npy(self.path)
            want_ndim = 2 if role == "features" else 1
            if array.ndim == 2 and role != "features" and array.shape[1] == 1:
                want_ndim = 2
            if array.ndim != want_ndim:
                raise DatasetError(f"{self.path}: shape {list(array.shape)}; {role} must be a {want_ndim}-D array")
            if role == "index" and array.dtype.kind not in "iu":
                raise DatasetError(f"{self.path}: dtype {array.dtype}; {_INTEGER_IDS}")
            if array.dtype.kind not in "iuf" + ("b" if role == "features" else ""):
                fix = f" ({LABEL_NAMES_FIX})" if role == "labels" and array.dtype.kind in "USO" else ""
                raise DatasetError(f"{self.path}: dtype {array.dtype}; {role} must be numeric{fix}")
        else:
            self._check_columns()

    def _check_columns(self) -> None:
        """Labels and index lists: one column. Features: no column named like node ids or labels."""
        if self.kind == "csv":
            has_header, names, _ = _csv_layout(self.path)
        else:
            has_header, names = True, _parquet_file(self.path).schema_arrow.names
            check_column_names(self.path, names, "the header")
        if self.role == "features":
            misplaced = [n for n in names if n.strip().lower() in _NOT_FEATURES] if has_header else []
            if misplaced:
                raise DatasetError(
                    f"{self.path}: column {misplaced[0]!r} looks like node ids or labels, not a feature; feature rows "
                    "are in node id order (row i = node i): sort the rows by the id column, then drop it (labels go "
                    "in their own file)"
                )
            return
        if len(names) != 1:
            listed = f" ({', '.join(names)})" if has_header else ""
            what = "a node's label (row i = node i)" if self.role == "labels" else "a node id"
            raise DatasetError(f"{self.path}: {len(names)} columns{listed}; {self.role} need one column, each row "
                               f"{what}: keep only that column (rows sorted by node id)")

    def num_rows(self) -> int | None:
        if self.kind == "npy":
            return int(_open_npy(self.path).shape[0])
        if self.kind == "parquet":
            return _parquet_file(self.path).metadata.num_rows
        return None

    def __call__(self) -> Iterator[np.ndarray]:
        if self.kind == "npy":
            array = _open_npy(self.path)
            width = int(np.prod(array.shape[1:], dtype=np.int64))
            for lo in range(0, array.shape[0], self.chunk_rows):
                n = min(self.chunk_rows, array.shape[0] - lo)
                if array.flags.c_contiguous:
                    chunk = _read_flat(self.path, array, lo * width, n * width).reshape(n, width)
                else:  # Fortran order: rows are strided on disk
                    chunk = np.asarray(array[lo : lo + n]).reshape(n, width)
                yield chunk if self.role == "features" else chunk.reshape(-1)
            return
        row = 0
        if self.kind == "parquet":
            batches = _parquet_batches(self.path, None, self.chunk_rows)
        else:
            what = {"features": "features must be numbers", "labels": f"labels must be integers ({LABEL_NAMES_FIX})",
                    "index": "node ids must be integers"}
            column_type = pa.int64() if self.role == "index" else pa.float64()  # labels: OGB writes NaN for "no label"
            batches = _iter_csv(self.path, None, {"*": column_type}, f"{what[self.role]}; fix that line")
        for batch in batches:
            chunk = self._to_numpy(batch, row)
            row += len(chunk)
            yield chunk

    def _to_numpy(self, batch: pa.RecordBatch, first_row: int) -> np.ndarray:
        names = batch.schema.names
        if self.role == "features":
            first_type = batch.schema.types[0]
            if len(names) == 1 and (pa.types.is_list(first_type) or pa.types.is_fixed_size_list(first_type)):
                col = batch.column(0)
                if col.null_count:
                    empty = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                    raise DatasetError(f"{self.path}: {self.where(first_row + empty)}: empty feature vector; every "
                                       "node needs one")
                lengths = pc.list_value_length(col).to_numpy()
                if len(lengths) and (lengths != lengths[0]).any():
                    bad = int(np.flatnonzero(lengths != lengths[0])[0])
                    raise DatasetError(f"{self.path}: {self.where(first_row + bad)}: vector of length {lengths[bad]}, "
                                       f"expected {lengths[0]}; all feature vectors must have one length")
                flat = col.flatten().to_numpy(zero_copy_only=False)
                return flat.reshape(len(col), -1)
            columns = [self._numeric(batch.column(i), names[i], first_row) for i in range(len(names))]
            return np.stack(columns, axis=1)
        return self._numeric(batch.column(0), names[0], first_row)

    def _numeric(self, column: pa.Array, name: str, first_row: int) -> np.ndarray:
        shown = _shown(name, self.has_header)
        if column.null_count:
            bad = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise DatasetError(f"{self.path}: {self.where(bad)}, column {shown}: empty value; every node needs a value")
        if self.role == "index" and not pa.types.is_integer(column.type):
            raise DatasetError(f"{self.path}: column {shown} has type {column.type}; {_INTEGER_IDS}")
        kind = column.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
            fix = f" ({LABEL_NAMES_FIX})" if self.role == "labels" and (
                pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind)) else ""
            raise DatasetError(f"{self.path}: column {shown} has type {column.type}; {self.role} must be "
                               f"numeric{fix}")
        return column.to_numpy(zero_copy_only=False)


def first_non_integer(values: np.ndarray) -> int | None:
    """Index of the first value that is not a whole number (NaN included), or None."""
    if np.issubdtype(values.dtype, np.integer) or values.dtype == np.bool_:
        return None
    bad = ~np.isfinite(values) | (values != np.floor(values))
    return int(np.flatnonzero(bad)[0]) if bad.any() else None


def where_in(path: Path, kind: str, has_header: bool):
    """Turn a 0-based data row into the user's terms: a CSV line number or an array row."""
    if kind == "csv":
        return lambda row: f"line {csv_line(path, row, has_header)}"
    return lambda row: f"row {row}"


# ---------------------------------------------------------------- times

def _time_values(path: Path, column: pa.Array, shown: str, first_row: int, where, what: str) -> np.ndarray:
    if column.null_count:
        bad = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise DatasetError(f"{path}: {where(bad)}, column {shown}: empty value; every {what} needs a value")
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        raise DatasetError(f"{path}: column {shown} has type {column.type}; {what}s must be numbers (integers or "
                           "floats, e.g. Unix seconds)")
    return column.to_numpy(zero_copy_only=False)  # check_times takes unsigned values above int64 as errors


_INT64_MAX = np.iinfo(np.int64).max
_EXACT_FLOAT = 2**53  # float64 holds every integer up to here, and loses some beyond


def check_times(values: np.ndarray, name: str, where, what: str) -> np.ndarray:
    """``values`` as int64 (integer input) or float64, every entry finite; else one error naming the first bad row."""
    if values.dtype.kind == "b" or values.dtype.kind not in "iuf":
        raise DatasetError(f"{name}: dtype {values.dtype}; {what}s must be numbers (integers or floats)")
    if values.dtype.kind == "u" and len(values) and values.max() > _INT64_MAX:
        row = int(np.flatnonzero(values > _INT64_MAX)[0])
        raise DatasetError(f"{name}: {where(row)}: {what} {values[row]} does not fit in int64 (at most 2**63 - 1) and "
                           f"would wrap to a negative time; give {what}s as int64 (e.g. 'never' as 2**63 - 1)")
    if values.dtype.kind in "iu":
        return values.astype(np.int64, copy=False)
    values = values.astype(np.float64, copy=False)
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetError(f"{name}: {where(row)}: {what} {values[row]} is not a finite number; give every "
                           f"{what} a value (NaN and inf are not times)")
    return values


def read_time_column(path: Path, kind: str, column: str | None, has_header: bool, where, chunk_rows: int,
                     what: str) -> np.ndarray:
    """One numeric column of a CSV/Parquet file (``column`` None: its only column) or a 1-D .npy, read whole.

    Integer columns stay int64 (a CSV's is first read as int64, then uint64 (refused beyond int64), then as floats if
    some value is not an integer)."""
    if kind == "npy":
        array = _open_npy(path)
        if array.ndim == 2 and array.shape[1] == 1:
            array = array.reshape(-1)
        if array.ndim != 1:
            raise DatasetError(f"{path}: shape {list(array.shape)}; {what}s must be a 1-D array, one per row")
        return check_times(np.asarray(array), str(path), where, what)
    if column is None:
        names = _csv_layout(path)[1] if kind == "csv" else _parquet_file(path).schema_arrow.names
        if len(names) != 1:
            raise DatasetError(f"{path}: {len(names)} columns ({', '.join(names)}); {what}s need one column, row i "
                               "the time of node i: keep only that column")
        column = names[0]
    shown = _shown(column, has_header)
    parts, row = [], 0
    for attempt in (pa.int64(), pa.uint64(), pa.float64()) if kind == "csv" else (None,):
        parts, row = [], 0
        try:
            if kind == "csv":
                batches = _iter_csv(path, [column], {column: attempt}, f"{what}s must be numbers; fix that line")
            else:
                batches = _parquet_batches(path, [column], chunk_rows)
            for batch in batches:
                values = _time_values(path, batch.column(0), shown, row, where, what)
                parts.append(values)
                row += len(values)
            break
        except DatasetError:
            if attempt is None or attempt == pa.float64():
                raise
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if attempt == pa.float64():  # some value is not an int64: as floats, integers beyond 2**53 would merge
        inexact = np.abs(values) > _EXACT_FLOAT
        if inexact.any():
            row = int(np.flatnonzero(inexact)[0])
            raise DatasetError(f"{path}: {where(row)}, column {shown}: {what} {values[row]:.0f} is beyond 2**53 in a "
                               "column read as floats (some value is not an int64), where distinct times would merge; "
                               f"write every {what} as an integer in int64, or every one as a float below 2**53")
    return check_times(values, str(path), where, what)


def read_node_times(path: str | Path) -> tuple[np.ndarray, object]:
    """A node time file (CSV/Parquet of one column, or a 1-D .npy; row i = node i), read whole and checked, and its
    ``where`` (a row in the user's terms)."""
    path = Path(path)
    _check_exists(path)
    kind = file_kind(path)
    has_header = kind != "csv" or _csv_layout(path)[0]
    where = where_in(path, kind, has_header)
    return read_time_column(path, kind, None, has_header, where, CHUNK_ROWS, "node time"), where
