"""Content-defined chunks of a file, read as a stream, and how a chunk is sealed and opened.

A file is cut by FastCDC (about ``AVERAGE`` bytes a chunk, between ``MINIMUM`` and
``MAXIMUM``): a cut depends only on the bytes before it since the previous cut, so an edit
changes the chunks around it and no others. The file is read ``_READ`` bytes at a time, and a
chunk is taken only when the buffer holds ``MAXIMUM`` bytes past its start (or the file
ended), so the cuts are exactly those of the whole file in memory. A chunk is keyed by the
SHA-256 of its bytes and stored zstd-compressed.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from typing import BinaryIO

import zstandard

from .._errors import CorruptRecord, EncryptionKeyMissing
from .._keyring import SEALED_TAG, Keyring, key_id_of

__all__ = ["AVERAGE", "MAXIMUM", "MINIMUM", "chunks", "compress", "digest_of", "opened"]

MINIMUM = 256 * 1024
AVERAGE = 1024 * 1024
MAXIMUM = 4 * 1024 * 1024
_READ = 2 * MAXIMUM
_LEVEL = 1  # zstd's fastest standard level: a workspace snapshot is bound by its speed
_local = threading.local()


def _cut() -> object:
    """FastCDC's chunker: the compiled one, else the pure-Python one (about 10 MB/s), imported
    without the package's notice on stdout."""
    try:
        from fastcdc.fastcdc_cy import fastcdc_cy

        return fastcdc_cy
    except ImportError:  # pragma: no cover - the wheels this package installs are compiled
        from fastcdc.fastcdc_py import fastcdc_py

        return fastcdc_py


_fastcdc = _cut()


def chunks(file: BinaryIO) -> Iterator[bytes]:
    """The content-defined chunks of ``file`` from where it stands, in order; at most
    ``_READ + MAXIMUM`` bytes of it in memory at once."""
    buffer = bytearray()
    ended = False
    while not ended:
        block = file.read(_READ)
        ended = not block
        buffer += block
        view = memoryview(buffer)
        taken = 0
        for cut in _fastcdc(view, MINIMUM, AVERAGE, MAXIMUM):  # type: ignore[operator]
            if not ended and cut.offset + MAXIMUM > len(buffer):
                break
            yield bytes(view[cut.offset : cut.offset + cut.length])
            taken = cut.offset + cut.length
        view.release()
        del buffer[:taken]


def digest_of(data: bytes, keyring: Keyring | None = None) -> bytes:
    """A chunk's key: the SHA-256 of its bytes (HMAC-SHA256 under the digest key of an
    encrypted store)."""
    return hashlib.sha256(data).digest() if keyring is None else keyring._digest(data)


def compress(data: bytes, keyring: Keyring | None = None, digest: bytes = b"") -> bytes:
    """A chunk as stored (one compressor per thread: they are not thread-safe), sealed and
    bound to its ``digest`` in an encrypted store."""
    compressor = getattr(_local, "compressor", None)
    if compressor is None:
        compressor = _local.compressor = zstandard.ZstdCompressor(level=_LEVEL)
    packed = bytes(compressor.compress(data))
    return packed if keyring is None else keyring._seal(packed, digest)


def opened(stored: bytes, digest: bytes, where: str, keyring: Keyring | None = None) -> bytes:
    """A stored chunk's bytes, checked against its digest (``CorruptRecord`` naming
    ``where`` when they differ or cannot be decompressed); a sealed chunk is opened first
    (its tag proves it, ``EncryptionKeyMissing`` without its key)."""
    sealed = stored[:1] == SEALED_TAG
    if sealed:
        if keyring is None:
            raise EncryptionKeyMissing(key_id_of(stored) or "?")
        stored = keyring._open(stored, digest)
    decompressor = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = zstandard.ZstdDecompressor()
    try:
        data = bytes(decompressor.decompress(stored))
    except zstandard.ZstdError as exc:
        raise CorruptRecord(
            f"{where}: chunk {digest.hex()} cannot be decompressed ({exc})"
        ) from exc
    if not sealed and hashlib.sha256(data).digest() != digest:
        raise CorruptRecord(
            f"{where}: chunk {digest.hex()} does not match its digest; the store was changed "
            "outside stalwart"
        )
    return data
