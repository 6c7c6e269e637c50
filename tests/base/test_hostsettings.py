"""quicbed/hostsettings.py on stand-in /proc/sys files: the host's own values recorded once,
held values restored, `clean`'s restore_all, and a record that names a file outside
/proc/sys never written to."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from quicbed import hostsettings


@pytest.fixture
def sysctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proc" / "sys"
    (root / "net" / "ipv4").mkdir(parents=True)
    (root / "net" / "core").mkdir(parents=True)
    (root / "net" / "ipv4" / "tcp_allowed_congestion_control").write_text("reno cubic\n")
    (root / "net" / "core" / "rmem_default").write_text("212992\n")
    monkeypatch.setattr(hostsettings, "SYSCTL_ROOT", root)
    monkeypatch.setattr(hostsettings, "STATE", tmp_path / "state")
    return root


def test_a_kept_change_is_recorded_once_and_clean_restores_it(sysctl: Path) -> None:
    allowed = sysctl / "net" / "ipv4" / "tcp_allowed_congestion_control"
    hostsettings.change(allowed, "reno cubic bbr")
    hostsettings.change(allowed, "reno cubic bbr dctcp")  # the host's value stays the first one
    assert hostsettings.changed() == {str(allowed): {"host": "reno cubic", "now": "reno cubic bbr dctcp"}}
    restored = hostsettings.restore_all()
    assert allowed.read_text() == "reno cubic" and len(restored) == 1, restored
    assert hostsettings.changed() == {} and hostsettings.restore_all() == []


def test_held_values_are_restored_and_two_holders_take_turns(sysctl: Path) -> None:
    rmem = sysctl / "net" / "core" / "rmem_default"
    seen: list[str] = []

    def boot() -> None:
        with hostsettings.held({rmem: lambda old: str(max(8 << 20, int(old)))}):
            seen.append(rmem.read_text())
            time.sleep(0.2)

    threads = [threading.Thread(target=boot) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Overlapping boots each saw the raised value, and the host's own came back (not 8 MiB).
    assert seen == [str(8 << 20)] * 2 and rmem.read_text() == "212992"
    assert hostsettings.changed() == {}


def test_a_boot_killed_while_holding_leaves_a_record_for_clean(sysctl: Path) -> None:
    rmem = sysctl / "net" / "core" / "rmem_default"
    with pytest.raises(KeyboardInterrupt), hostsettings.held({rmem: lambda old: "8388608"}):
        # the finally restores; a SIGKILL would not: stand in for it by dropping the restore
        record = json.loads((hostsettings.STATE / "host-settings.json").read_text())
        assert record == {str(rmem): "212992"}
        raise KeyboardInterrupt
    assert rmem.read_text() == "212992"
    rmem.write_text("8388608")  # as a killed boot leaves it
    (hostsettings.STATE / "host-settings.json").write_text(json.dumps(record))
    assert hostsettings.restore_all() and rmem.read_text() == "212992"


def test_a_record_naming_a_file_outside_proc_sys_is_never_written(sysctl: Path, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.write_text("untouched")
    hostsettings.STATE.mkdir(parents=True, exist_ok=True)
    record = {str(canary): "owned", f"{sysctl}/../../canary": "owned"}
    (hostsettings.STATE / "host-settings.json").write_text(json.dumps(record))
    assert hostsettings.restore_all() == [] and canary.read_text() == "untouched"
