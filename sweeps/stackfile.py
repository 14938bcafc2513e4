"""``Pulumi.<stack>.yaml`` kept byte for byte across a sweep that rewrites it."""

from __future__ import annotations

import shutil
from pathlib import Path


class StackFile:
    """``Pulumi.<stack>.yaml`` kept byte for byte: a copy is taken at entry (and written next to
    the results, for a manual restore), and put back at exit, whatever ended the block."""

    def __init__(self, path: Path, backup_dir: Path) -> None:
        self.path = path
        self.original = path.read_bytes()
        backup_dir.mkdir(parents=True, exist_ok=True)
        self.backup = backup_dir / f"{path.name}.orig"
        self.backup.write_bytes(self.original)

    def restore(self) -> bool:
        """Put the original bytes back; True when the file had changed."""
        if self.path.read_bytes() == self.original:
            return False
        tmp = self.path.with_name(f".{self.path.name}.restore")
        tmp.write_bytes(self.original)
        shutil.copymode(self.path, tmp)  # the file's mode as it is, not the umask's
        tmp.replace(self.path)
        return True
