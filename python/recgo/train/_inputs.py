"""The training job's input files as the user gives them: plain or gzip (recognised by its magic bytes,
as recgo's Go readers do), the Criteo file's cached train/validation split, the UserBehavior columns."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import os
import shutil
import tempfile
import time
import zlib
from pathlib import Path
from typing import IO

import torch

from ..errors import InvalidInputError, RecgoIOError
from .._textfiles import open_binary
from ._files import derived_path
from ._progress import progress_bar

_CHUNK = 1 << 20
_WHITESPACE = b" \t\r\n\f\v"
_SPLIT_VERSION = "v2"  # v1 (one folder per file version, never removed) copied gzip bytes as they were
_I64 = (-(1 << 63), (1 << 63) - 1)


def _bad_gzip(path: Path, exc: BaseException) -> InvalidInputError:
    return InvalidInputError(f"{path}: truncated or corrupt gzip stream: {exc}")


# -- the Criteo split -------------------------------------------------------------------------------

def split_file(path: Path, fraction: float, progress: bool = False) -> tuple[Path, Path, int]:
    """The file's lines (gzip decompressed) as two cached plain files, its first (1 − fraction) and its
    last ``fraction`` (at least one line), and the training line count. Blank lines at the very end
    are not lines; elsewhere they stay (the reader names them). The split is streamed (constant
    memory) into ``<tmp>/recgo-splits-<the file's path>/<size, mtime, fraction>/`` and kept while the
    file is unchanged; copies of earlier versions of the same file are removed. ``progress``: a bar of
    the bytes copied while a split takes more than two seconds."""
    try:
        st = path.stat()
        src_key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    except OSError as exc:
        raise RecgoIOError(f"{path}: {exc}") from exc
    group = derived_path(f"recgo-splits-{src_key}", "")
    stamp = f"{_SPLIT_VERSION}-{st.st_size}-{st.st_mtime_ns}-"
    final = group / f"{stamp}{fraction!r}"
    train, val, meta = final / "train.txt", final / "validation.txt", final / "lines"
    _remove_stale(group, stamp)
    if not meta.exists():
        try:
            group.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=group, prefix=f".{final.name}."))
        except OSError as exc:
            raise RecgoIOError(f"{group}: {exc}") from exc
        try:
            n_train, n_val = _split_into(path, fraction, tmp, progress)
            try:
                os.rename(tmp, final)
            except OSError:
                if not meta.exists():  # not another process (a rank of the same job) that finished first
                    raise
        except OSError as exc:
            raise RecgoIOError(f"{final}: {exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return train, val, n_train
    try:
        n_train = int(meta.read_text().split()[0])
    except (OSError, ValueError, IndexError) as exc:
        raise RecgoIOError(f"{meta}: unreadable split ({exc}); remove {final}") from exc
    return train, val, n_train


def _remove_stale(group: Path, stamp: str) -> None:
    """Remove the group's splits of other versions of the file (and day-old unfinished ones)."""
    try:
        entries = list(group.iterdir())
    except OSError:
        return
    for e in entries:
        try:
            if e.name.startswith("."):  # an unfinished split: its writer removes it, unless it died
                stale = time.time() - e.stat().st_mtime > 86400
            else:
                stale = not e.name.startswith(stamp)
        except OSError:
            continue
        if stale:
            shutil.rmtree(e, ignore_errors=True)


def _split_into(path: Path, fraction: float, folder: Path, progress: bool = False) -> tuple[int, int]:
    """Write the split into ``folder`` (train.txt, validation.txt, lines): the whole file decompressed
    into train.txt in one pass, then its last lines moved to validation.txt, found from the end."""
    train = folder / "train.txt"
    total = newlines = 0
    bar = None
    try:
        with open_binary(path) as src, train.open("wb") as dst:
            # bytes written; a gzip file's decompressed size is unknown until read, so no total for it
            size = None if isinstance(src, gzip.GzipFile) else path.stat().st_size
            bar = progress_bar(size, f"{path.name}: split", progress, unit="B", delay=2.0)
            while chunk := src.read(_CHUNK):
                newlines += chunk.count(b"\n")
                total += len(chunk)
                dst.write(chunk)
                if bar is not None:
                    bar.update(len(chunk))
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise _bad_gzip(path, exc) from exc
    except OSError as exc:
        raise RecgoIOError(f"{path}: {exc}") from exc
    finally:
        if bar is not None:
            bar.close()
    with train.open("r+b") as f:
        end, tail_newlines = _data_end(f, total)
        last_unterminated = end > 0 and _byte(f, end - 1) != b"\n"
        n_lines = newlines - tail_newlines + last_unterminated
        if n_lines < 2:
            raise InvalidInputError(f"{path}: {n_lines} lines; the run needs training lines and at least one "
                                    "validation line")
        n_val = max(1, int(n_lines * fraction))
        n_train = max(0, n_lines - n_val)
        # the validation lines start after the n_train-th line ending: the m-th from the data's end
        start = 0 if n_train == 0 else _after_newline_from_end(f, end, newlines - tail_newlines - n_train + 1)
        with (folder / "validation.txt").open("wb") as out:
            f.seek(start)
            left = end - start
            while left > 0:
                chunk = f.read(min(_CHUNK, left))
                out.write(chunk)
                left -= len(chunk)
        f.truncate(start)
    (folder / "lines").write_text(f"{n_train} {n_lines - n_train}\n")
    return n_train, n_lines - n_train


def _byte(f: IO[bytes], at: int) -> bytes:
    f.seek(at)
    return f.read(1)


def _data_end(f: IO[bytes], total: int) -> tuple[int, int]:
    """Where the data ends once blank (whitespace-only) lines at the very end are dropped (after the
    last non-blank line's line ending), and the line endings dropped with them."""
    pos = total
    ws_start = 0
    while pos > 0:  # the start of the whitespace at the file's end
        lo = max(0, pos - _CHUNK)
        f.seek(lo)
        kept = f.read(pos - lo).rstrip(_WHITESPACE)
        if kept:
            ws_start = lo + len(kept)
            break
        pos = lo
    if ws_start == 0:  # nothing but blank lines
        f.seek(0)
        return 0, sum(c.count(b"\n") for c in iter(lambda: f.read(_CHUNK), b""))
    f.seek(ws_start)
    end, dropped, at = -1, 0, ws_start
    while chunk := f.read(_CHUNK):  # whitespace only: the last line's ending, then blank lines
        i = chunk.find(b"\n") if end < 0 else -1
        if i >= 0:
            end = at + i + 1
        dropped += chunk.count(b"\n", i + 1)
        at += len(chunk)
    return (total if end < 0 else end), dropped


def _after_newline_from_end(f: IO[bytes], end: int, m: int) -> int:
    """The position after the m-th ``\\n`` counted back from ``end`` (m ≥ 1, and there are m)."""
    pos = end
    while pos > 0:
        lo = max(0, pos - _CHUNK)
        f.seek(lo)
        chunk = f.read(pos - lo)
        c = chunk.count(b"\n")
        if c >= m:
            i = len(chunk)
            for _ in range(m):
                i = chunk.rfind(b"\n", 0, i)
            return lo + i + 1
        m -= c
        pos = lo
    return 0


# -- UserBehavior -----------------------------------------------------------------------------------

_UB_COLUMNS = "(user, item, category, behavior, timestamp)"


def userbehavior_events(path: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The user, item, category and timestamp columns of a UserBehavior CSV (plain or gzip), in file
    order, as int64 tensors (timestamps float64 when one is fractional). A header line is skipped;
    blank lines and a short line (the public sample's last line is cut) are dropped at the very end
    only; elsewhere, or an ID that is not an integer within int64, raises naming line and column."""
    cols, fractional = _userbehavior_rows(path, checked=False)
    try:
        return _tensors(cols, fractional)
    except (OverflowError, RuntimeError, ValueError):  # a value outside int64: find it, naming its line
        cols, fractional = _userbehavior_rows(path, checked=True)
        return _tensors(cols, fractional)


def _tensors(cols: tuple[list, list, list, list], fractional: bool) -> tuple[torch.Tensor, ...]:
    users, items, cats, times = cols
    return (torch.tensor(users, dtype=torch.int64), torch.tensor(items, dtype=torch.int64),
            torch.tensor(cats, dtype=torch.int64),
            torch.tensor(times, dtype=torch.float64 if fractional else torch.int64))


def _userbehavior_rows(path: Path, checked: bool) -> tuple[tuple[list, list, list, list], bool]:
    """The four columns as lists and whether a timestamp is fractional. ``checked``: raise for an ID
    outside int64 (and take an integer timestamp outside it as a float), which the fast pass leaves
    to the conversion to tensors."""
    users: list[int] = []
    items: list[int] = []
    cats: list[int] = []
    times: list[int | float] = []
    fractional = False
    short: tuple[int, int] | None = None  # (line, columns) of a blank or short line: only the last may be
    lo, hi = _I64
    names = ("user", "item", "category")
    try:
        # utf-8-sig: an export with a byte-order mark had its first event taken for a header and dropped;
        # bytes that are not UTF-8 reach the integer checks as U+FFFD (named there), not a decode error
        with open_binary(path) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="") as fh:
            for line, row in enumerate(csv.reader(fh), start=1):
                blank = not row or (len(row) == 1 and not row[0].strip())
                if short and not blank:
                    raise InvalidInputError(f"{path}, line {short[0]}: {short[1]} of the 5 columns {_UB_COLUMNS}")
                if blank:
                    short = short or (line, 0)
                    continue
                if len(row) < 5:
                    short = (line, len(row))
                    continue
                if line == 1 and not row[0].strip().lstrip("-").isdigit():
                    continue  # a header (user_id,item_id,...): the dataset has none, exports may
                try:
                    ids = (int(row[0]), int(row[1]), int(row[2]))
                except ValueError:
                    col = next(c for c in range(3) if not _is_int(row[c]))
                    raise InvalidInputError(f"{path}, line {line}, column {col + 1} ({names[col]}): expected an "
                                            f"integer ID, got {row[col][:40]!r}") from None
                try:
                    t: int | float = int(row[4])
                except ValueError:
                    t, fractional = _seconds(path, line, row[4]), True
                if checked:
                    for col, v in enumerate(ids):
                        if not lo <= v <= hi:
                            raise InvalidInputError(f"{path}, line {line}, column {col + 1} ({names[col]}): ID "
                                                    f"{row[col].strip()[:40]} is outside the int64 range")
                    if not lo <= t <= hi:
                        t, fractional = float(t), True
                users.append(ids[0])
                items.append(ids[1])
                cats.append(ids[2])
                times.append(t)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise _bad_gzip(path, exc) from exc
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path}: not a text CSV ({exc})") from exc
    except OSError as exc:
        raise RecgoIOError(f"{path}: {exc}") from exc
    return (users, items, cats, times), fractional


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _seconds(path: Path, line: int, text: str) -> float:
    """A fractional timestamp, or raise naming the line."""
    try:
        t = float(text)
    except ValueError:
        t = float("nan")
    if t != t or t in (float("inf"), float("-inf")):
        raise InvalidInputError(f"{path}, line {line}, column 5 (timestamp): expected a number of seconds, "
                                f"got {text[:40]!r}")
    return t
