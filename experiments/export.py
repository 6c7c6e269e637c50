"""`quicbed export RUN DEST [--no-secrets]`: a copy of a run to share.

A run directory may hold what should not leave the machine: with `capture: [keys]`, each
trial's keys.log holds the TLS secrets that decrypt its packets. The copy is made as root
from a folder that containers wrote into, so it is made through directory descriptors
(quicbed/safefs.py): regular files only, never through a symbolic link, each within
safefs.MAX_FILE_BYTES; links, FIFOs and devices are left out and counted. The rows keep
naming the files left out (capture_files): `quicbed explain` then shows the packets
without decrypting them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from quicbed import rowschema, safefs
from quicbed.errors import InputError

# File names that hold secrets, wherever they lie in the run (rowschema's capture names).
SECRET_NAMES = frozenset({rowschema.CAPTURE_FILES["keys"]})


@dataclass
class Exported:
    files: int = 0
    bytes: int = 0
    secrets_left_out: list[str] = field(default_factory=list)  # relative paths
    secrets_copied: int = 0
    unsafe_left_out: list[str] = field(default_factory=list)  # links, FIFOs, over the bound


def export_run(run_dir: Path, dest: Path, no_secrets: bool) -> Exported:
    """Copy run_dir to dest (which must not exist), as the module says."""
    if not (run_dir / "manifest.json").is_file():
        raise InputError(f"{run_dir}: not a run directory (no manifest.json)")
    if dest.exists() or dest.is_symlink():
        raise InputError(f"{dest}: exists; export writes a new directory")
    dest.mkdir(parents=True)
    os.chmod(dest, 0o755)
    done = Exported()
    with safefs.open_dir(run_dir) as src, safefs.open_dir(dest) as out:
        _copy_tree(src, out, "", no_secrets, done)
    return done


def _copy_tree(src: safefs.SafeDir, out: safefs.SafeDir, rel: str, no_secrets: bool, done: Exported) -> None:
    for name in sorted(src.names()):
        path = f"{rel}{name}"
        st = src.lstat(name)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            with src.subdir(name) as child, out.subdir(name, create=True) as child_out:
                _copy_tree(child, child_out, f"{path}/", no_secrets, done)
        elif not stat.S_ISREG(st.st_mode):
            done.unsafe_left_out.append(path)
        elif no_secrets and name in SECRET_NAMES:
            done.secrets_left_out.append(path)
        elif _copy_file(src, out, name, path, st.st_mode, done) and name in SECRET_NAMES:
            done.secrets_copied += 1


def _copy_file(
    src: safefs.SafeDir, out: safefs.SafeDir, name: str, path: str, mode: int, done: Exported
) -> bool:
    """Whether the file was copied (a file that turned unsafe while read is left out)."""
    fd = out.open_file(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(mode) & 0o644)
    try:
        done.bytes += src.copy_out(name, fd)
        done.files += 1
    except safefs.UnsafeFile:
        done.unsafe_left_out.append(path)
        os.close(fd)
        fd = -1
        out.unlink(name)
        return False
    finally:
        if fd >= 0:
            os.close(fd)
    return True


def summary(done: Exported, dest: Path, no_secrets: bool) -> list[str]:
    lines = [f"exported {done.files} files ({done.bytes / 2**20:.1f} MiB) to {dest}"]
    if no_secrets:
        lines.append(f"left out {len(done.secrets_left_out)} secret file(s) (TLS key logs)")
    elif done.secrets_copied:
        lines.append(
            f"warning: {done.secrets_copied} TLS key log(s) copied: they decrypt the captures; "
            "--no-secrets leaves them out"
        )
    if done.unsafe_left_out:
        shown = ", ".join(repr(p) for p in done.unsafe_left_out[:3])
        lines.append(f"left out {len(done.unsafe_left_out)} link(s) or non-regular file(s): {shown}")
    return lines
