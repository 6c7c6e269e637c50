"""The QEMU router's pure logic: the initramfs archive (the kernel's `newc` cpio format), the
QEMU command line, the reason a failed boot gives, and the order in which `auto` tries the
backends (netem, delayline, uml, vm) and passes one over for a queue. Booting it is proven on
the real path (the probe in doctor, every path test on auto where it is chosen, test_path.py's
kill -9 case)."""

from __future__ import annotations

import gzip
import io
import lzma
import stat
from pathlib import Path

import pytest

from quicbed.errors import HostProblem, InputError
from quicbed.topology import backends
from quicbed.topology.backends import base, proof, vmimage
from quicbed.topology.backends.proof import Proof
from quicbed.topology.backends.vm import TCG_TIMING
from quicbed.topology.linkspec import Aqm, LinkSpec


def _read_newc(data: bytes) -> list[tuple[str, int, bytes]]:
    """Entries of a newc archive, read as the kernel's initramfs unpacker does: a 110-byte
    ASCII header, the name, padding to 4 bytes, the data, padding to 4 bytes."""
    entries, pos = [], 0
    while True:
        header = data[pos : pos + 110]
        assert header[:6] == b"070701", header[:6]
        fields = [int(header[6 + 8 * i : 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = data[pos + 110 : pos + 110 + namesize - 1].decode()
        assert data[pos + 110 + namesize - 1] == 0
        pos += 110 + namesize
        pos += -pos % 4
        body = data[pos : pos + size]
        pos += size
        pos += -pos % 4
        if name == "TRAILER!!!":
            assert pos == len(data)
            return entries
        entries.append((name, mode, body))


def test_the_initramfs_archive_holds_what_was_put_in_it() -> None:
    out = io.BytesIO()
    files = [("init", 0o755, b"#!/bin/busybox sh\n"), ("modules/01-a.ko", 0o644, b"x" * 5)]
    vmimage.write_newc(out, ["bin", "modules"], files)
    entries = _read_newc(out.getvalue())
    assert [(n, stat.S_IFMT(m)) for n, m, _ in entries] == [
        ("bin", stat.S_IFDIR),
        ("modules", stat.S_IFDIR),
        ("init", stat.S_IFREG),
        ("modules/01-a.ko", stat.S_IFREG),
    ]
    assert entries[2][2] == b"#!/bin/busybox sh\n" and stat.S_IMODE(entries[2][1]) == 0o755
    assert entries[3][2] == b"xxxxx" and stat.S_IMODE(entries[3][1]) == 0o644


def test_the_qemu_command_line_has_one_nic_per_tap_in_order(tmp_path: Path) -> None:
    kernel = vmimage.GuestKernel("6.1.0-0-amd64", "6.1-1", tmp_path)
    argv = vmimage.qemu_argv(
        "quicbed-vm-x",
        "tcg",
        Path("/r/vm_router.sh"),
        {"A": "1"},
        ctl=tmp_path / "ctl",
        taps=("vm0", "vm1"),
        kernel=kernel,
        initrd=tmp_path / "initrd.gz",
    )
    netdevs = [argv[i + 1] for i, word in enumerate(argv) if word == "-netdev"]
    assert netdevs == [
        "tap,id=n0,ifname=vm0,script=no,downscript=no",
        "tap,id=n1,ifname=vm1,script=no,downscript=no",
    ]
    assert argv[argv.index("-accel") + 1] == "tcg" and "-cpu" not in argv
    shares = [argv[i + 1] for i, word in enumerate(argv) if word == "-virtfs"]
    assert "path=/,mount_tag=hostroot" in shares[0] and "readonly=on" in shares[0]
    assert f"path={tmp_path / 'ctl'},mount_tag=ctl" in shares[1] and "readonly" not in shares[1]
    cmdline = argv[argv.index("-append") + 1].split()
    assert "QUICBED_INIT=/r/vm_router.sh" in cmdline and "A=1" in cmdline
    kvm = vmimage.qemu_argv("n", "kvm", Path("/i"), {}, kernel=kernel, initrd=tmp_path / "i.gz")
    assert kvm[kvm.index("-accel") + 1] == "kvm" and "-cpu" in kvm


def test_a_failed_boot_names_its_cause() -> None:
    assert proof.vm_failure("SeaBIOS\nQUICBED-PROBE-FAILED: insmod 9p.ko\n") == (
        "QUICBED-PROBE-FAILED: insmod 9p.ko"
    )
    assert proof.vm_failure("qemu-system-x86_64: failed to set MSR 0x10a to 0x69\n") == (
        "qemu-system-x86_64: failed to set MSR 0x10a to 0x69"
    )
    assert proof.vm_failure("Probing EDD ... ok\n", timed_out=True, timeout_s=10) == (
        "the guest did not answer within 10 s"
    )


def _proved(monkeypatch: pytest.MonkeyPatch, backend: type, proof: Proof) -> None:
    monkeypatch.setattr(backend, "prove", classmethod(lambda cls, fresh=False: proof))


def _proofs(monkeypatch: pytest.MonkeyPatch, vm: Proof, uml: Proof) -> None:
    _proved(monkeypatch, backends.NetemBackend, Proof("netem", False, "no sch_netem"))
    _proved(monkeypatch, backends.VmBackend, vm)
    _proved(monkeypatch, backends.UmlBackend, uml)
    _proved(monkeypatch, backends.DelayLineBackend, Proof("delayline", True, "runs"))


TCG = Proof("vm", True, "boots under tcg", accelerator="tcg")
UML = Proof("uml", True, "boots")


KVM = Proof("vm", True, "boots under kvm", accelerator="kvm")
NO_UML = Proof("uml", False, "uml cannot run on this CPU: ptrace")
CODEL = Aqm("fq_codel")


def test_auto_takes_the_delay_line_before_uml_and_the_qemu_router(monkeypatch: pytest.MonkeyPatch) -> None:
    """netem, delayline, uml, vm: the delay line runs every rate, so the routers are reached
    only where it cannot run (or for a queue: below)."""
    assert [b.name for b in backends.in_auto_order()] == ["netem", "delayline", "uml", "vm"]
    _proofs(monkeypatch, KVM, UML)
    for rate in (20, 150, 500, 1000):
        choice = backends.choose_backend("auto", rate)
        assert choice == backends.BackendChoice("delayline", "no sch_netem in this kernel; runs")
    _proved(monkeypatch, backends.DelayLineBackend, Proof("delayline", False, "no binary"))
    assert backends.choose_backend("auto", 20).name == "uml"
    assert backends.choose_backend("auto", 150).name == "vm"  # above UML's 100, within KVM's 200
    with pytest.raises(HostProblem) as err:
        backends.choose_backend("auto", 500)
    ceiling = backends.VM_MAX_RATE_MBIT["kvm"]
    assert f"500 Mbit/s is above what the vm router forwards ({ceiling:g})" in str(err.value)
    _proofs(monkeypatch, KVM, NO_UML)
    _proved(monkeypatch, backends.DelayLineBackend, Proof("delayline", False, "no binary"))
    vm = backends.choose_backend("auto", 20)
    assert vm.name == "vm" and vm.reason == (
        "no sch_netem in this kernel; no binary; uml cannot run on this CPU: ptrace; boots under kvm"
    )


def test_a_queue_the_host_lacks_passes_over_to_the_qemu_router(monkeypatch: pytest.MonkeyPatch) -> None:
    """The delay line and UML queue in this host's kernel: for an aqm it lacks, auto passes
    them over (saying why) for the QEMU router, whose kernel has it; under TCG the reason
    carries its caveat. Where the host's kernel has it, or only drop-tail is asked, the delay
    line; where no backend that runs it runs here, the first that runs (check_queues then
    refuses the queue in one line)."""
    _proofs(monkeypatch, TCG, UML)
    monkeypatch.setattr(base, "host_has_qdisc", lambda kind: False)
    assert backends.choose_backend("auto", 20, queues=(Aqm(), Aqm())).name == "delayline"
    codel = backends.choose_backend("auto", 20, queues=(CODEL, Aqm()))
    lacks = "but its bottleneck queues in this host's kernel, which has no sch_fq_codel"
    tcg = f"boots under tcg, though {TCG_TIMING}"
    reason = f"no sch_netem in this kernel; runs, {lacks}; boots, {lacks}; {tcg}"
    assert codel == backends.BackendChoice("vm", reason)
    _proofs(monkeypatch, KVM, UML)
    kvm = backends.choose_backend("auto", 20, queues=(CODEL, CODEL))
    assert kvm.name == "vm" and kvm.reason.endswith("; boots under kvm")
    monkeypatch.setattr(base, "host_has_qdisc", lambda kind: True)  # the delay line queues in it
    assert backends.choose_backend("auto", 20, queues=(CODEL, CODEL)).name == "delayline"
    monkeypatch.setattr(base, "host_has_qdisc", lambda kind: False)
    _proofs(monkeypatch, Proof("vm", False, "no kernel"), UML)
    fallback = backends.choose_backend("auto", 20, queues=(CODEL, CODEL))
    assert fallback == backends.BackendChoice("delayline", "no sch_netem in this kernel; runs")
    with pytest.raises(InputError, match=r"backends that run it: vm \(not on this host: no kernel\)"):
        backends.check_queues(*(LinkSpec(rate_mbit=20, delay_ms=40, aqm=CODEL),) * 2, fallback)


@pytest.mark.parametrize("compress", [lzma.compress, gzip.compress])
def test_the_elf_kernel_is_found_inside_a_bzimage(compress) -> None:
    elf = b"\x7fELF" + bytes(range(256)) * 64
    decoy = b"\xfd7zXZ\x00 not a stream \x1f\x8b\x08 nor this"
    bzimage = b"MZ setup code " + decoy + compress(elf) + b"\x00" * 100
    assert vmimage.extract_vmlinux(bzimage) == elf
    with pytest.raises(HostProblem):
        vmimage.extract_vmlinux(b"MZ" + compress(b"not an ELF file"))
