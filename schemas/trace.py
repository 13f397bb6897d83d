"""The trace file: what ``simulate`` and ``record`` write and ``replay`` and the tests read.

JSON Lines, one Kafka message per line, so a trace can be grepped, cut with ``head`` and produced by
any tool that can print JSON. Payloads are embedded verbatim and read back as ``msgspec.Raw``: the
reader never parses them, so replay pays for decoding once, in the consumer that validates the
message anyway. Both ends stream through fixed-size buffers, so memory does not grow with the file.
The format is documented in ``docs/trace-format.md``.
"""

from __future__ import annotations

import binascii
import gzip
import logging
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Self

import msgspec

from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import NOT_JSON, Label, Message, decode, encode

FORMAT = "fabricwatch-trace"
VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})

_GZIP_MAGIC = b"\x1f\x8b"
# Measured on snapshot JSON (bench/bench_codec.py data): level 1 compresses 3-5x faster than the default
# 6 for a file 6-22% larger. A recorder or simulator must keep up with the stream; disk is cheap.
_GZIP_LEVEL = 1
_WRITE_CHUNK = 256 * 1024
_MAX_HEADER_BYTES = 1 << 20
_NULL = msgspec.Raw(b"null")
# What the gzip module raises on a file cut while it was being written, or on corrupt data.
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)

log = logging.getLogger(__name__)

ErrorHandler = Callable[[int, str], None]


class TraceFormatError(ValueError):
    """The file is not a trace this build can read; nothing in it can be trusted."""


class TraceHeader(msgspec.Struct):
    format: str
    version: int
    source: str
    created_ns: int
    meta: dict[str, Any] = msgspec.field(default_factory=dict)


class TraceRecord(msgspec.Struct, omit_defaults=True, gc=False):
    """One message as it crossed (or would have crossed) a topic.

    ``payload`` holds the message's JSON bytes unparsed; ``payload_b64`` carries bytes that are not
    a JSON object (garbage recorded from a topic must survive a round trip so replay can exercise
    the dead-letter path). Exactly one of the two is set.
    """

    topic: str
    key: str | None
    ts_ns: int
    # msgspec cannot decode Raw inside a union, so ``Raw | None`` is spelt as a None default.
    payload: msgspec.Raw = None  # type: ignore[assignment]
    payload_b64: str | None = None

    def __post_init__(self) -> None:
        # Runs on decode too, where msgspec turns the ValueError into a ValidationError.
        if self.payload == _NULL:
            self.payload = None  # type: ignore[assignment]
        if (self.payload is None) == (self.payload_b64 is None):
            raise ValueError("exactly one of `payload` and `payload_b64` is required")
        if self.payload_b64 is not None:
            try:
                binascii.a2b_base64(self.payload_b64, strict_mode=True)
            except binascii.Error as exc:
                raise ValueError(f"`payload_b64` is not valid base64: {exc}") from None

    def value(self) -> bytes:
        """The message bytes exactly as they were on the topic."""
        if self.payload is not None:
            return bytes(self.payload)
        return binascii.a2b_base64(self.payload_b64, strict_mode=True)  # type: ignore[arg-type]


class _HeaderProbe(msgspec.Struct):
    """Just enough of a header to say why a file is not a trace before judging the other fields."""

    format: Any = None
    version: Any = None


_record_decoder = msgspec.json.Decoder(TraceRecord)
_probe_decoder = msgspec.json.Decoder(_HeaderProbe)
_header_decoder = msgspec.json.Decoder(TraceHeader)
_raw_decoder = msgspec.json.Decoder(msgspec.Raw)
_record_encoder = msgspec.json.Encoder()
_header_encoder = msgspec.json.Encoder(order="deterministic")


class TraceWriter:
    """Append messages to a new trace; a ``.gz`` suffix compresses.

    Lines are encoded straight into one buffer that goes to the file (or the gzip stream) in large
    chunks: per-line writes would cost more than the encoding at simulator rates. Output depends
    only on the calls made, so fixtures and simulator runs can be compared byte for byte.
    """

    def __init__(
        self, path: str | Path, source: str, created_ns: int, meta: dict[str, Any] | None = None
    ) -> None:
        self.path = Path(path)
        self.records = 0
        self._buf = bytearray()
        self._closed = False
        self._file, self._out = _open_for_write(self.path)
        header = TraceHeader(FORMAT, VERSION, source, created_ns, dict(meta or {}))
        _header_encoder.encode_into(header, self._buf, -1)
        self._buf += b"\n"

    def write_message(self, topic: str, key: str | None, ts_ns: int, msg: Message) -> None:
        """Append a message from our own code: trusted, so it is embedded without checks."""
        self._append(TraceRecord(topic, key, ts_ns, payload=msgspec.Raw(encode(msg))))

    def write(self, topic: str, key: str | None, ts_ns: int, value: bytes) -> None:
        """Append whatever bytes a topic carried, valid or not."""
        if _is_embeddable(value):
            record = TraceRecord(topic, key, ts_ns, payload=msgspec.Raw(value))
        else:
            b64 = binascii.b2a_base64(value, newline=False).decode("ascii")
            record = TraceRecord(topic, key, ts_ns, payload_b64=b64)
        self._append(record)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._out.write(self._buf)
            self._out.close()
        finally:
            self._file.close()

    def _append(self, record: TraceRecord) -> None:
        _record_encoder.encode_into(record, self._buf, -1)
        self._buf += b"\n"
        self.records += 1
        if len(self._buf) >= _WRITE_CHUNK:
            self._out.write(self._buf)
            self._buf.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Closing on error too: the records written so far are what a post-mortem needs.
        self.close()


class TraceReader:
    """Iterate the records of a trace in file order, skipping and reporting malformed lines.

    A recorded trace may hold anything a topic carried and may end mid-line (a recorder killed
    while writing), so a bad line costs that line only: it is counted in ``malformed`` and passed
    to ``on_error(line_number, reason)`` (logged when no handler is given). Only a bad header
    raises, because then nothing after it can be interpreted.
    """

    def __init__(self, path: str | Path, on_error: ErrorHandler | None = None) -> None:
        self.path = Path(path)
        self.records = 0
        self.malformed = 0
        self.truncated = False
        self.line = 1
        """Line number of the record last yielded, for reporting what a consumer found wrong in it."""
        self._on_error = on_error or self._log_error
        self._file = open(self.path, "rb", buffering=1 << 16)  # noqa: SIM115 - closed by close()
        try:
            gzipped = self._file.peek(2)[:2] == _GZIP_MAGIC
            self._stream: BinaryIO = gzip.GzipFile(fileobj=self._file, mode="rb") if gzipped else self._file
            self.header = self._read_header()
        except BaseException:
            self._file.close()
            raise

    def __iter__(self) -> Iterator[TraceRecord]:
        decode_record = _record_decoder.decode
        lineno = 1
        try:
            for lineno, line in enumerate(self._stream, start=2):
                self.line = lineno
                try:
                    record = decode_record(line)
                except NOT_JSON as exc:
                    if not line.isspace():
                        self._report(lineno, str(exc))
                    continue
                self.records += 1
                yield record
        except _GZIP_ERRORS as exc:
            self.truncated = True
            self._report(lineno + 1, f"compressed stream is truncated or corrupt: {exc}")

    def close(self) -> None:
        self._stream.close()
        self._file.close()

    def _read_header(self) -> TraceHeader:
        try:
            line = self._stream.readline(_MAX_HEADER_BYTES)
        except _GZIP_ERRORS as exc:
            raise TraceFormatError(f"{self.path}: cannot read the header: {exc}") from None
        if not line.strip():
            raise TraceFormatError(f"{self.path}: line 1 is empty, expected a {FORMAT} header")
        return _parse_header(line, self.path)

    def _report(self, lineno: int, reason: str) -> None:
        self.malformed += 1
        self._on_error(lineno, reason)

    def _log_error(self, lineno: int, reason: str) -> None:
        log.warning("%s:%d: skipped: %s", self.path, lineno, reason)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def read_labels(path: str | Path, on_error: ErrorHandler | None = None) -> list[Label]:
    """The ground truth of a trace, for scoring detectors against it.

    A label that does not decode raises: scoring against partial ground truth would mislead.
    """
    with TraceReader(path, on_error) as reader:
        return [decode(r.value(), Label) for r in reader if r.topic == topics.LABELS]


def _open_for_write(path: Path) -> tuple[BinaryIO, BinaryIO]:
    """The file and the stream to write to; gzip gets no name or time so output is reproducible."""
    file = open(path, "wb")  # noqa: SIM115 - closed by TraceWriter.close()
    if path.suffix != ".gz":
        return file, file
    return file, gzip.GzipFile(filename="", mode="wb", fileobj=file, compresslevel=_GZIP_LEVEL, mtime=0)


def _is_embeddable(value: bytes) -> bool:
    """Whether bytes can sit in a line verbatim and come back identical: one JSON object, one line."""
    if value[:1] != b"{" or value[-1:] != b"}" or b"\n" in value or b"\r" in value:
        return False
    try:
        _raw_decoder.decode(value)
        value.decode("utf-8")  # msgspec skips a Raw value without checking its encoding
    except NOT_JSON:
        return False
    return True


def _parse_header(line: bytes, path: Path) -> TraceHeader:
    """Check format and version first, so a foreign file gets a useful message, not a field error."""
    try:
        probe = _probe_decoder.decode(line)
    except NOT_JSON as exc:
        raise TraceFormatError(f"{path}: line 1 is not a {FORMAT} header: {exc}") from None
    if probe.format != FORMAT:
        raise TraceFormatError(f"{path}: not a {FORMAT}: header format is {probe.format!r}")
    if probe.version not in SUPPORTED_VERSIONS or isinstance(probe.version, bool):
        supported = ", ".join(map(str, sorted(SUPPORTED_VERSIONS)))
        raise TraceFormatError(
            f"{path}: unsupported trace version {probe.version!r} (this build reads {supported})"
        )
    try:
        return _header_decoder.decode(line)
    except NOT_JSON as exc:
        raise TraceFormatError(f"{path}: bad trace header: {exc}") from None
