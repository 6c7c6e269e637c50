"""images/vendor_crates.py: a Cargo.lock's crates.io packages become a cargo directory source,
each checked against the lock's sha256. Pure logic on local files; the download itself is
exercised by the Rust stacks' image builds."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from quicbed.paths import REPO


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vendor_crates", REPO / "images" / "vendor_crates.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vc = _module()


def _crate(path: Path, members: dict[str, bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return hashlib.sha256(buf.getvalue()).hexdigest()


def test_only_the_registrys_packages_are_vendored_and_a_git_source_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "Cargo.lock"
    lock.write_text(
        'version = 4\n[[package]]\nname = "mine"\nversion = "0.1.0"\n'
        f'[[package]]\nname = "itoa"\nversion = "1.0.15"\nsource = "{vc.CRATES_IO}"\nchecksum = "ab"\n'
    )
    assert vc.registry_packages(lock) == [("itoa", "1.0.15", "ab")]
    lock.write_text(
        lock.read_text() + '[[package]]\nname = "x"\nversion = "1.0.0"\nsource = "git+https://e/x"\n'
    )
    with pytest.raises(vc.VendorError, match="x: only crates.io"):
        vc.registry_packages(lock)


def test_a_cached_crate_is_used_when_its_sum_matches_and_unpacks_with_cargos_checksum(tmp_path: Path) -> None:
    cache, dest = tmp_path / "cache", tmp_path / "vendor"
    cache.mkdir()
    crate = cache / "itoa-1.0.15.crate"
    checksum = _crate(crate, {"itoa-1.0.15/Cargo.toml": b"[package]\n", "itoa-1.0.15/src/lib.rs": b""})
    assert vc.fetch("itoa", "1.0.15", checksum, cache) == crate  # no download: the sum matches
    vc.unpack(crate, checksum, dest)
    assert (dest / "itoa-1.0.15/src/lib.rs").is_file()
    sums = json.loads((dest / "itoa-1.0.15/.cargo-checksum.json").read_text())
    assert sums == {"files": {}, "package": checksum}


def test_a_crate_that_would_write_outside_its_directory_is_refused(tmp_path: Path) -> None:
    crate = tmp_path / "evil-1.0.0.crate"
    checksum = _crate(crate, {"evil-1.0.0/../../escape": b"x"})
    with pytest.raises(vc.VendorError, match="unexpected member"):
        vc.unpack(crate, checksum, tmp_path / "vendor")
    assert not (tmp_path / "escape").exists()
