"""Text and JSON files a run writes (metrics, scores, translations), each written atomically,
and the JSON objects read back."""

import json
import os
import tempfile
from pathlib import Path

from common.errors import DataError


def new_file_mode() -> int:
    """The mode open() gives a new file under this process's umask (mkstemp's is 0600)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_text(path: str | Path, text: str) -> None:
    """Write text to path atomically (temporary file, then rename): never a half-written file.

    The file gets the mode any new file would (0644 under the usual umask), not mkstemp's 0600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, new_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj) -> None:
    """Write obj as indented JSON atomically (temporary file, then rename)."""
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def read_json(path: str | Path) -> dict:
    """The JSON object in path; invalid JSON or another type is one DataError naming the file."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{path} is not valid JSON ({e.msg}, line {e.lineno})") from e
    if not isinstance(obj, dict):
        raise DataError(f"{path} does not hold a JSON object")
    return obj
