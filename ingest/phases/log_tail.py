"""Follow many log files at once, as ``tail -F`` does: the complete lines written since the last
read, from every file matching the patterns (rank files that appear later included), through
rotation (the path now names a new file: the old one is read to its end first), truncation (the
file got shorter, or the byte before where reading stopped changed: read again from its start)
and deletion (what was written is still read).

A line is complete at its newline; a partial last line waits for the rest. Bytes that are not
UTF-8 become U+FFFD and the line is counted, never dropped: the parser decides what it is worth.
Files are read with ``pread`` on descriptors kept open, so a rename does not lose the tail.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass

_CHUNK = 1 << 20


@dataclass
class TailStats:
    files: int = 0
    lines: int = 0
    bytes: int = 0
    rotations: int = 0
    truncations: int = 0
    vanished: int = 0
    not_utf8: int = 0


@dataclass
class _File:
    fd: int
    inode: int
    offset: int
    partial: bytes = b""
    before: bytes = b""
    """The byte just before ``offset`` as it was read: if it changed, the file was rewritten."""


class LogTail:
    """``read()`` yields ``(path, line)`` for every complete line written since the previous call.
    Files present at the first read are read from their end unless ``from_start``; files that
    appear later are read from their start (a rank's new log, a rotated file's successor)."""

    def __init__(self, patterns: list[str], from_start: bool = False) -> None:
        if not patterns:
            raise ValueError("no log files to follow: give at least one path or glob pattern")
        self.patterns = list(patterns)
        self.stats = TailStats()
        self._from_start = from_start
        self._files: dict[str, _File] = {}
        self._first = True

    def read(self) -> Iterator[tuple[str, str]]:
        for path, chunk in self.read_chunks():
            for line in chunk.split("\n")[:-1]:
                yield path, line

    def read_chunks(self) -> Iterator[tuple[str, str]]:
        """What ``read`` yields, as runs of complete lines of one file (each ending with a newline):
        a parser that scans many lines at once is spared one call per line."""
        for path in self._matching():
            if path not in self._files:
                opened = self._open(path, at_end=self._first and not self._from_start)
                if opened is not None:
                    self._files[path] = opened
                    self.stats.files += 1
        self._first = False
        for path in list(self._files):
            yield from self._follow(path)

    def close(self) -> None:
        for f in self._files.values():
            os.close(f.fd)
        self._files.clear()

    def __enter__(self) -> LogTail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _matching(self) -> list[str]:
        found: set[str] = set()
        for pattern in self.patterns:
            found.update(glob.glob(pattern) if glob.has_magic(pattern) else [pattern])
        return sorted(p for p in found if os.path.isfile(p))

    def _open(self, path: str, at_end: bool) -> _File | None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        st = os.fstat(fd)
        offset = st.st_size if at_end else 0
        return _File(fd, st.st_ino, offset, before=os.pread(fd, 1, offset - 1) if offset else b"")

    def _follow(self, path: str) -> Iterator[tuple[str, str]]:
        f = self._files[path]
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        if st is not None and st.st_ino == f.inode and self._rewritten(f, st.st_size):
            self.stats.truncations += 1
            f.offset, f.partial, f.before = 0, b"", b""
        yield from self._drain(path, f)
        if st is None or st.st_ino != f.inode:
            # rotated or deleted: the old file was read to its end; its successor from its start
            os.close(f.fd)
            del self._files[path]
            if st is None:
                self.stats.vanished += 1
                return
            self.stats.rotations += 1
            successor = self._open(path, at_end=False)
            if successor is not None:
                self._files[path] = successor
                yield from self._drain(path, successor)

    @staticmethod
    def _rewritten(f: _File, size: int) -> bool:
        """Truncated: shorter than what was read, or (truncated, then written past the old
        length before this read, as logrotate's copytruncate allows) a different byte before
        the offset."""
        return size < f.offset or (f.offset > 0 and os.pread(f.fd, 1, f.offset - 1) != f.before)

    def _drain(self, path: str, f: _File) -> Iterator[tuple[str, str]]:
        while True:
            chunk = os.pread(f.fd, _CHUNK, f.offset)
            if not chunk:
                return
            f.offset += len(chunk)
            f.before = chunk[-1:]
            self.stats.bytes += len(chunk)
            held = f.partial + chunk
            cut = held.rfind(b"\n") + 1
            f.partial = held[cut:]
            if not cut:
                continue
            # a writer that writes whole lines leaves nothing after the last newline: no copy
            text = (held if cut == len(held) else held[:cut]).decode("utf-8", errors="replace")
            if "\ufffd" in text:
                self.stats.not_utf8 += sum("\ufffd" in line for line in text.split("\n"))
            self.stats.lines += text.count("\n")
            yield path, text
