"""Files in directories a container can write, handled as root without following links.

A run's trials/ is mounted read-write into the client container and a server's log directory
into its container (issue 46): whatever runs there can swap a file or a directory for a symbolic
link between two of our calls. Root therefore never resolves a path below the run directory by
name: each directory is opened with O_DIRECTORY | O_NOFOLLOW from its parent's descriptor, and
files are listed, opened, stat'ed and removed relative to that descriptor (dir_fd=), so a link
at any component fails (ELOOP, ENOTDIR) instead of leading out. Only regular files are read or
appended to (S_ISREG on the open descriptor), and no more than MAX_FILE_BYTES of each.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

# A trial's qlog or key log is kilobytes to a few MiB; a full-packet capture of a 100 MB
# download at most ~110 MiB. Anything larger is not copied: a hostile stack must not fill the disk.
MAX_FILE_BYTES = 256 * 1024 * 1024
_CHUNK = 1024 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO put in a file's place must not hang the open; regular files ignore it.
_FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class UnsafeFile(OSError):
    """A name that is not a regular file (a link, a FIFO, a directory) or is over its bound."""


class SafeDir:
    """An open directory; every name given to its methods is one component, never a path."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SafeDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry itself (a link is a link), or None if there is none."""
        try:
            return os.stat(_one(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def regular_files(self) -> dict[str, os.stat_result]:
        """Name -> lstat of every regular file here; links, FIFOs and directories are left out."""
        found = {}
        for name in self.names():
            st = self.lstat(name)
            if st is not None and stat.S_ISREG(st.st_mode):
                found[name] = st
        return found

    def open_file(self, name: str, flags: int, mode: int = 0o600) -> int:
        """A descriptor of a regular file here (never through a link), or UnsafeFile."""
        try:
            fd = os.open(_one(name), flags | _FILE_FLAGS, mode, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # a link; a FIFO without a reader
                raise UnsafeFile(exc.errno, f"{name}: not a regular file") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafeFile(errno.EINVAL, f"{name}: not a regular file")
        return fd

    def create_private(self, name: str) -> int:
        """A new empty file, 0600 (key logs are secrets), replacing whatever entry had the name."""
        self.unlink(name)
        fd = self.open_file(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.fchmod(fd, 0o600)  # the umask may have taken bits; never more than 0600 either
        return fd

    def make_private(self, name: str) -> None:
        """Mode 0600 on a regular file here (a tool may have made it anew); nothing else."""
        with contextlib.suppress(FileNotFoundError, UnsafeFile):
            fd = self.open_file(name, os.O_RDONLY)
            try:
                os.fchmod(fd, 0o600)
            finally:
                os.close(fd)

    def unlink(self, name: str) -> None:
        """Remove the entry (a link itself, not its target); a directory or none is left."""
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(_one(name), dir_fd=self.fd)

    def subdir(self, name: str, create: bool = False) -> SafeDir:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(_one(name), 0o755, dir_fd=self.fd)
        return SafeDir(os.open(_one(name), _DIR_FLAGS, dir_fd=self.fd))

    def rmdir(self, name: str) -> None:
        os.rmdir(_one(name), dir_fd=self.fd)

    def copy_out(self, name: str, out_fd: int, limit: int = MAX_FILE_BYTES) -> int:
        """Append a regular file's bytes to out_fd; UnsafeFile if it is over `limit` (checked
        before copying, and the copy stops there should it grow meanwhile). Returns bytes."""
        fd = self.open_file(name, os.O_RDONLY)
        try:
            if os.fstat(fd).st_size > limit:
                raise UnsafeFile(errno.EFBIG, f"{name}: larger than {limit // (1024 * 1024)} MiB")
            copied = 0
            while copied < limit and (chunk := os.read(fd, min(_CHUNK, limit - copied))):
                _write_all(out_fd, chunk)
                copied += len(chunk)
            return copied
        finally:
            os.close(fd)


def _one(name: str) -> str:
    """One path component: a name with a slash (or . and ..) would leave the directory."""
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise UnsafeFile(errno.EINVAL, f"{name!r}: not a file name")
    return name


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def open_dir(root: Path, rel: str | Path = "", create: bool = False) -> SafeDir:
    """root/rel, with root itself and every component of rel opened without following a link
    (created 0755 with `create`). root is the trusted anchor (a run directory root made)."""
    if create:
        Path(root).mkdir(parents=True, exist_ok=True)
    current = SafeDir(os.open(root, _DIR_FLAGS))
    try:
        for part in Path(rel).parts:
            child = current.subdir(part, create)
            current.close()
            current = child
    except BaseException:
        current.close()
        raise
    return current


@contextlib.contextmanager
def opened_dir(root: Path, rel: str | Path = "", create: bool = False) -> Iterator[SafeDir | None]:
    """open_dir, or None where the directory is missing or is not one (a link put there)."""
    try:
        directory = open_dir(root, rel, create)
    except (FileNotFoundError, NotADirectoryError, UnsafeFile):
        yield None
        return
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        yield None
        return
    with directory:
        yield directory
