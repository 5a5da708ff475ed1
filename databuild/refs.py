"""Partition refs: their grammar, and where a ref lives under a storage root (`<root>/<ref>`)."""

import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from databuild.errors import InvalidInputError, InvalidPartitionRefError

MAX_REF_LENGTH = 512
RESERVED_SEGMENT = "_databuild"
_SEGMENT = re.compile(r"[A-Za-z0-9_.=-]+")


def validate_ref(ref: str) -> str:
    """Return ``ref`` unchanged if it follows the grammar, else raise with the reason."""
    if not isinstance(ref, str) or ref == "":
        raise InvalidPartitionRefError("partition ref is empty")
    if len(ref) > MAX_REF_LENGTH:
        raise InvalidPartitionRefError(
            f"partition ref is {len(ref)} characters long; the limit is {MAX_REF_LENGTH}"
        )
    for position, segment in enumerate(ref.split("/"), start=1):
        if segment == "":
            raise InvalidPartitionRefError(
                f"partition ref {ref!r} has an empty segment at position {position} "
                "(leading, trailing or doubled '/')"
            )
        if segment in (".", ".."):
            raise InvalidPartitionRefError(
                f"partition ref {ref!r} has a {segment!r} segment; refs may not navigate the tree"
            )
        if not _SEGMENT.fullmatch(segment):
            bad = sorted({c for c in segment if not _SEGMENT.fullmatch(c)})
            raise InvalidPartitionRefError(
                f"partition ref {ref!r} has illegal character(s) {''.join(bad)!r} in segment "
                f"{segment!r}; allowed are letters, digits and _ . = -"
            )
    if ref.split("/", 1)[0] == RESERVED_SEGMENT:
        raise InvalidPartitionRefError(
            f"partition ref {ref!r} starts with {RESERVED_SEGMENT!r}, which is reserved for DataBuild's own files"
        )
    return ref


# Spark's Hadoop scheme -> the scheme pyarrow knows the same store by.
ARROW_SCHEMES = {
    "file": "file",
    "s3a": "s3",
    "s3": "s3",
    "gs": "gs",
    "abfss": "abfss",
    "abfs": "abfs",
    "hdfs": "hdfs",
}


def storage_uri(root: str | Path) -> str:
    """``root`` as a URI: a plain path becomes an absolute ``file://`` URI. Raises naming the schemes
    it accepts."""
    text = str(root)
    if "://" not in text:
        return Path(text).expanduser().resolve().as_uri()
    parts = urlsplit(text)
    if parts.scheme not in ARROW_SCHEMES:
        raise InvalidInputError(
            f"scheme {parts.scheme!r} is not supported; use a path, or a URI with one "
            f"of {', '.join(s + '://' for s in sorted(ARROW_SCHEMES))}"
        )
    if parts.scheme != "file" and not parts.netloc:
        raise InvalidInputError(f"the URI names no bucket or host; write {parts.scheme}://bucket/path")
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") or "/"))


def ref_uri(root: str, ref: str) -> str:
    """The ref's own folder: where an external producer puts data it then announces."""
    return f"{root.rstrip('/')}/{validate_ref(ref)}"
