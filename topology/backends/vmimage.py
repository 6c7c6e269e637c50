"""The QEMU router's guest: Debian's kernel, a small initramfs, and the QEMU command line.

- The kernel is Debian's `linux-image-<VM_KERNEL_ABI>` at VM_KERNEL_VERSION (versions.env),
  fetched once with `apt-get download` and unpacked (never installed) under
  $QUICBED_CACHE/vm. Its modules have netem, htb, cake, pie, fq, codel and BBR; fq_codel is
  built in.
- The initramfs is built here (no cpio on the host: `newc` is written by this module). It
  holds the host's static busybox, the modules the router needs (virtio, 9p, the qdiscs) in
  load order, and `vm_initramfs.sh` as /init. That init mounts the host's / read-only over
  virtio-9p (as UML's hostfs does), the run's control directory on /mnt, and hands over to
  the script named by QUICBED_INIT on the kernel command line.
- `qemu_argv` is the one QEMU command line: the router, its boot probe and the netem guest.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import lzma
import os
import shutil
import stat
import subprocess
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from quicbed.errors import HostProblem
from quicbed.hostcalls import PROBE_TIMEOUT_S, host_run
from quicbed.paths import CACHE, REPO, read_versions

VM_CACHE = CACHE / "vm"
INITRAMFS_INIT = REPO / "topology" / "vm_initramfs.sh"
BUSYBOX = Path("/bin/busybox")  # busybox-static: the initramfs runs before any library is there
QEMU = "qemu-system-x86_64"  # Debian's; $QUICBED_QEMU_BINARY may name another (a stand-in, in tests)
VM_MARK = "quicbed-vm-"  # `quicbed clean` finds QEMU routers and guests by their -name
# Loaded in this order, each after what it needs (modprobe --show-depends resolves the rest).
VM_MODULES = (
    "virtio_pci",
    "virtio_net",
    "9pnet_virtio",
    "9p",
    "sch_netem",
    "sch_htb",
    "sch_tbf",
    "sch_cake",
    "sch_pie",
    "sch_fq",
    "sch_codel",
    "tcp_bbr",
    "veth",  # the netem guest's topology (topology/guest.py)
    "bridge",
)


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


@dataclass(frozen=True)
class GuestKernel:
    """An unpacked Debian kernel package and the initramfs built for it."""

    abi: str  # e.g. 6.1.0-56-amd64
    version: str  # the package's version, e.g. 6.1.192-2
    root: Path  # the unpacked package

    @property
    def package(self) -> str:
        return f"linux-image-{self.abi}"

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.abi}"

    @property
    def vmlinux(self) -> Path:
        """The uncompressed kernel, which QEMU boots through its PVH entry: no BIOS hand-over
        and no decompression under TCG (2.1 s to the probe's answer instead of 4.4 s)."""
        return self.root / "vmlinux"

    @property
    def modules_dir(self) -> Path:
        return self.root / "lib" / "modules" / self.abi


def pinned_kernel() -> GuestKernel:
    versions = read_versions()
    abi, version = versions["VM_KERNEL_ABI"], versions["VM_KERNEL_VERSION"]
    return GuestKernel(abi, version, VM_CACHE / f"{abi}_{version}")


def kernel_ready(kernel: GuestKernel | None = None) -> bool:
    kernel = kernel or pinned_kernel()
    return kernel.vmlinux.is_file() and (kernel.modules_dir / "modules.dep").is_file()


def fetch_kernel(kernel: GuestKernel | None = None) -> GuestKernel:
    """Download and unpack the pinned kernel package once (`make vm`)."""
    kernel = kernel or pinned_kernel()
    if kernel_ready(kernel):
        return kernel
    for command in ("apt-get", "dpkg-deb", "depmod"):
        if shutil.which(command) is None and shutil.which(command, path="/usr/sbin:/sbin") is None:
            raise HostProblem(f"cannot fetch the QEMU router's kernel: no {command} on this host")
    work = VM_CACHE / f".fetch-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        proc = subprocess.run(
            ["apt-get", "download", f"{kernel.package}={kernel.version}"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
        )
        debs = list(work.glob("*.deb"))
        if proc.returncode != 0 or not debs:
            raise HostProblem(
                f"cannot download {kernel.package}={kernel.version} (VM_KERNEL_* in versions.env): "
                f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['no package']}"
            )
        unpacked = work / "root"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], check=True, timeout=300)
        subprocess.run(["depmod", "-b", str(unpacked), kernel.abi], check=True, timeout=120)
        (unpacked / "vmlinux").write_bytes(
            extract_vmlinux((unpacked / kernel.vmlinuz.relative_to(kernel.root)).read_bytes())
        )
        shutil.rmtree(kernel.root, ignore_errors=True)
        os.replace(unpacked, kernel.root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return kernel


def extract_vmlinux(bzimage: bytes) -> bytes:
    """The ELF kernel inside a bzImage: the payload after the first XZ (Debian's) or gzip magic
    that decompresses to an ELF file."""
    for magic, decompress in ((b"\xfd7zXZ\x00", _unxz), (b"\x1f\x8b\x08", _gunzip)):
        start = bzimage.find(magic)
        while start != -1:
            with contextlib.suppress(lzma.LZMAError, zlib.error, EOFError):
                elf = decompress(bzimage[start:])
                if elf[:4] == b"\x7fELF":
                    return elf
            start = bzimage.find(magic, start + 1)
    raise HostProblem("the QEMU router's kernel image holds no XZ or gzip payload with an ELF kernel")


def _unxz(data: bytes) -> bytes:
    return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data)


def _gunzip(data: bytes) -> bytes:
    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)


def module_files(kernel: GuestKernel) -> list[Path]:
    """The .ko files of VM_MODULES and everything they need, in load order."""
    out: list[Path] = []
    for name in VM_MODULES:
        proc = host_run(
            ["modprobe", "-d", str(kernel.root), "-S", kernel.abi, "--show-depends", name], PROBE_TIMEOUT_S
        )
        if proc.returncode != 0:
            raise HostProblem(
                f"the QEMU router's kernel {kernel.abi} has no module {name}: {proc.stderr.strip()}"
            )
        for line in proc.stdout.splitlines():
            words = line.split()
            if words[:1] == ["insmod"] and Path(words[1]) not in out:
                out.append(Path(words[1]))
    return out


def initramfs(kernel: GuestKernel | None = None) -> Path:
    """The initramfs for this kernel, built once per kernel, module list, busybox and init."""
    kernel = kernel or fetch_kernel()
    if not BUSYBOX.is_file():
        raise HostProblem(
            "the QEMU router's initramfs needs a static busybox: apt-get install busybox-static"
        )
    modules = module_files(kernel)
    digest = hashlib.sha256()
    for part in (INITRAMFS_INIT, BUSYBOX, *modules):
        digest.update(part.name.encode() + part.read_bytes())
    path = kernel.root / f"initramfs-{digest.hexdigest()[:12]}.gz"
    if path.is_file():
        return path
    files: list[tuple[str, int, bytes]] = [
        ("init", 0o755, INITRAMFS_INIT.read_bytes()),
        ("bin/busybox", 0o755, BUSYBOX.read_bytes()),
    ]
    files += [(f"modules/{i:02d}-{ko.name}", 0o644, ko.read_bytes()) for i, ko in enumerate(modules, 1)]
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with gzip.open(tmp, "wb", compresslevel=6) as out:
        write_newc(out, ["bin", "modules", "proc", "sys", "dev", "newroot"], files)
    os.replace(tmp, path)
    return path


def write_newc(out: Writer, dirs: Sequence[str], files: Sequence[tuple[str, int, bytes]]) -> None:
    """A cpio archive in the kernel's `newc` format: these directories, then these files."""
    entries = [(d, stat.S_IFDIR | 0o755, b"") for d in dirs]
    entries += [(name, stat.S_IFREG | mode, data) for name, mode, data in files]
    for inode, (name, mode, data) in enumerate(entries, 1):
        out.write(_newc_entry(inode, name, mode, data))
    out.write(_newc_entry(0, "TRAILER!!!", 0, b""))


def _newc_entry(inode: int, name: str, mode: int, data: bytes) -> bytes:
    nlink = 2 if stat.S_ISDIR(mode) else 1
    fields = (inode, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0)
    header = b"070701" + "".join(f"{value:08x}" for value in fields).encode() + name.encode() + b"\0"
    header += b"\0" * (-len(header) % 4)
    return header + data + b"\0" * (-len(data) % 4)


def qemu_binary() -> str:
    return os.environ.get("QUICBED_QEMU_BINARY") or QEMU


def accelerator_args(accel: str) -> list[str]:
    """KVM with the host's CPU (less the MSR this nested KVM refuses), or TCG's default CPU."""
    if accel == "kvm":
        return ["-accel", "kvm", "-cpu", "host,-arch-capabilities"]
    return ["-accel", "tcg"]


def qemu_argv(
    name: str,
    accel: str,
    init: Path,
    env: dict[str, str],
    *,
    memory_mb: int = 256,
    cpus: int = 1,
    ctl: Path | None = None,
    taps: Sequence[str] = (),
    kernel: GuestKernel | None = None,
    initrd: Path | None = None,
) -> list[str]:
    """QEMU booting the pinned kernel with the host's / read-only as its root, `init` run after
    the initramfs, `env` in its environment (kernel command line), `ctl` on /mnt, and one
    virtio NIC on each named tap device (eth0, eth1, ... in this order)."""
    kernel = kernel or fetch_kernel()
    words = [f"{key}={value}" for key, value in env.items()]
    cmdline = " ".join(
        ["console=ttyS0", "quiet", "panic=-1", "net.ifnames=0", f"QUICBED_INIT={init}", *words]
    )
    argv = [qemu_binary(), "-name", name, *accelerator_args(accel), "-m", str(memory_mb), "-smp", str(cpus)]
    argv += ["-nographic", "-nodefaults", "-no-reboot", "-serial", "stdio"]
    argv += ["-kernel", str(kernel.vmlinux), "-initrd", str(initrd or initramfs(kernel)), "-append", cmdline]
    argv += ["-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"]
    if ctl is not None:
        argv += ["-virtfs", f"local,path={ctl},mount_tag=ctl,security_model=none,multidevs=remap"]
    for index, tap in enumerate(taps):
        argv += ["-netdev", f"tap,id=n{index},ifname={tap},script=no,downscript=no"]
        argv += ["-device", f"virtio-net-pci,netdev=n{index},mac=52:54:00:00:00:{index + 1:02x}"]
    return argv


def qemu_version() -> str:
    proc = host_run([qemu_binary(), "--version"], PROBE_TIMEOUT_S)
    return proc.stdout.splitlines()[0].removeprefix("QEMU emulator version ").strip() if proc.stdout else "?"


def main() -> int:
    """`make vm`: fetch the pinned kernel and build the initramfs."""
    kernel = fetch_kernel()
    print(f"QEMU router kernel {kernel.package} {kernel.version}: {kernel.vmlinux}")
    print(f"initramfs: {initramfs(kernel)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
