"""The set-up is complete: every host command the code runs is declared in quicbed.doctor, the
Makefile installs the Debian package that provides it, and a throwaway container with nothing
but the repository gets all of them from the Makefile's package step alone."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from quicbed import doctor
from quicbed.errors import EnvironmentProblem
from quicbed.paths import CACHE, REPO

# Python files whose commands run inside a container image, not on the host.
IN_IMAGES = {
    "clients/perf/wirecheck.py",
    *(f"clients/browser/{name}" for name in ("browser_perf.py", "chromium_driver.py", "firefox_driver.py")),
}
SOURCES = ("quicbed", "topology", "servers", "experiments", "analysis", "bench", "clients", "workloads")
# Calls whose first argument is an argv run with the host's binaries (host.exec is the
# container's, and is left out on purpose).
HOST_RUNNERS = {
    "run",
    "host_run",
    "Popen",
    "popen_argv",
    "in_netns",
    "check_output",
    "check_call",
    "call",
    "r",
    "probe",
    "_run",
}
SHELL_WORDS = {
    "export",
    "fail",
    "echo",
    "exec",
    "read",
    "while",
    "do",
    "done",
    "if",
    "then",
    "fi",
    "for",
    "in",
    "else",
    ":",
    ".",
    "set",
    "cd",
    "test",
    "[",
    "return",
    "local",
    "true",
    "false",
    "printf",
    "shift",
    "trap",
    "wait",
    "break",
    "continue",
}


def python_commands() -> dict[str, set[str]]:
    """argv[0] literals of host-run calls and argv lists, per command, with where they are."""
    found: dict[str, set[str]] = {}
    for folder in SOURCES:
        for path in (REPO / folder).rglob("*.py"):
            rel = str(path.relative_to(REPO))
            if rel in IN_IMAGES:
                continue
            for name in _argv0s(ast.parse(path.read_text())):
                found.setdefault(name, set()).add(rel)
    return found


def _argv0s(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in HOST_RUNNERS and node.args:
                out += _first_literal(node.args[0])
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id.endswith("argv") for t in node.targets
        ):
            out += _first_literal(node.value)
    return out


def _first_literal(arg: ast.expr) -> list[str]:
    if isinstance(arg, ast.List) and arg.elts and isinstance(arg.elts[0], ast.Constant):
        value = arg.elts[0].value
        if isinstance(value, str) and re.fullmatch(r"[a-z][a-z0-9_.-]*", value):
            return [value]
    return []


def shell_commands(script: Path) -> set[str]:
    """The first word of every simple command of a small init script."""
    words: set[str] = set()
    for line in script.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"&&|\|\||[;|]|\bthen\b|\bdo\b|\belse\b|\$\(|\bwhile\b|\bif\b", line):
            tokens = [t for t in part.split() if "=" not in t or t.startswith("-")]
            if tokens and re.fullmatch(r"[a-z][a-z0-9_.-]*", tokens[0]):
                words.add(tokens[0])
    defined = set(re.findall(r"^(\w+)\(\)", script.read_text(), re.M))
    return words - SHELL_WORDS - defined


def test_every_host_command_the_code_runs_is_declared() -> None:
    declared = {c.name for c in doctor.HOST_COMMANDS}
    found = python_commands()
    undeclared = {name: sorted(where) for name, where in found.items() if name not in declared}
    assert not undeclared, f"commands run from the host but not in doctor.HOST_COMMANDS: {undeclared}"
    # The scan must really see the code: these are run in many places.
    assert {"ip", "tc", "nsenter", "docker", "iperf3", "ethtool", "make"} <= set(found)


@pytest.mark.parametrize("init", ["uml_router.sh", "uml_guest.sh", "uml_probe.sh"])
def test_the_uml_init_scripts_commands_are_declared_for_uml(init: str) -> None:
    from quicbed.topology.backends import UML_BINARY

    uml = {c.name for c in doctor.commands("uml", "core")}
    used = shell_commands(REPO / "topology" / init)
    if init == "uml_router.sh":  # it brings the LANs up and serves commands in router_serve.sh
        used |= shell_commands(REPO / "topology" / "router_serve.sh")
    assert "insmod" in used and "ip" in used  # the parser sees the script
    assert used - uml - {"sh", "rm", "mv", "sleep", "mkdir"} == set(), used - uml
    assert UML_BINARY in uml


@pytest.mark.parametrize("init", ["vm_router.sh", "vm_probe.sh", "vm_guest.sh"])
def test_the_qemu_router_scripts_commands_are_declared(init: str) -> None:
    """Run on the host's / inside the guest: the host's commands, as the UML inits' are."""
    declared = {c.name for c in doctor.commands("vm", "uml", "core")}
    used = shell_commands(REPO / "topology" / init)
    if init == "vm_router.sh":
        used |= shell_commands(REPO / "topology" / "router_serve.sh")
    assert {"mount", "ip"} <= used  # the parser sees the script
    assert used - declared - {"sh", "rm", "mv", "sleep", "mkdir", "cut"} == set(), used - declared
    assert "qemu-system-x86_64" in declared and "busybox" in declared


def insmod_modules(script: Path) -> set[str]:
    """The modules an init script loads (`for m in ...; do insmod "$mods/$m.ko"`), as paths under
    doctor.UML_MODULE_DIR: `mods=` is that directory or one below it."""
    text = script.read_text().replace("\\\n", " ")
    top = re.escape(doctor.UML_MODULE_DIR.replace("*", "$(uname -r)"))
    mods = re.search(rf"^mods={top}(/\S+)?$", text, re.M)
    loops = re.findall(r'^for m in ([^;]*); do\s+insmod "\$mods/\$m\.ko"', text, re.M)
    assert mods and loops and len(loops) == len(re.findall(r'\binsmod "', text)), script
    below = (mods.group(1) or "").strip("/")
    return {f"{below}/{m}".strip("/") for loop in loops for m in loop.split()}


def test_doctor_checks_every_module_the_uml_inits_load() -> None:
    loaded = (
        insmod_modules(REPO / "topology" / "uml_router.sh")
        | insmod_modules(REPO / "topology" / "uml_guest.sh")
        | insmod_modules(REPO / "topology" / "uml_probe.sh")
    )
    assert {"net/sched/sch_netem", "drivers/net/veth", "lib/crc-ccitt"} <= loaded  # parser sees both
    assert sorted(doctor.UML_MODULES) == sorted(loaded)


def makefile_packages(variable: str = "APT_PACKAGES") -> set[str]:
    text = (REPO / "Makefile").read_text()
    block = re.search(rf"^{variable} :=(.*?)(?<!\\)\n", text, re.S | re.M)
    assert block, f"{variable} not found in the Makefile"
    return set(block.group(1).replace("\\", " ").split())


def _owner(command: str) -> str | None:
    """The package dpkg says provides the command (trying /usr-merged and alternatives paths)."""
    path = shutil.which(command)
    candidates = [f"{d}/{command}" for d in ("/usr/bin", "/usr/sbin", "/bin", "/sbin")]
    if path:
        candidates = [path, os.path.realpath(path), *candidates]
    for candidate in candidates:
        proc = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if not ln.startswith("diversion")]
        if proc.returncode == 0 and lines:
            return lines[0].split(":")[0].split(",")[0].strip()
    return None


def _essential(package: str) -> bool:
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Essential}", package], capture_output=True, text=True)
    return proc.stdout.strip() == "yes"


def test_the_makefile_installs_the_package_of_every_declared_command() -> None:
    listed = makefile_packages() | makefile_packages("APT_PACKAGES_IF_AVAILABLE")
    problems = []
    for cmd in doctor.HOST_COMMANDS:
        owner, packages = _owner(cmd.name), cmd.package.split("|")
        if owner is None:
            problems.append(f"{cmd.name}: no Debian package on this host provides it")
        elif owner not in packages:
            problems.append(f"{cmd.name}: dpkg says {owner}, doctor says {cmd.package}")
        elif not any(p in listed for p in packages) and not _essential(owner):
            problems.append(f"{cmd.name}: {owner} is neither in APT_PACKAGES nor Essential")
    assert not problems, problems


def _path_without(tmp_path: Path, *left_out: str) -> str:
    """A PATH of links to every declared command except `left_out` (sbin's too: a non-root
    user's PATH has no /usr/sbin, where tc and insmod live)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    search = f"{os.environ.get('PATH', '')}:/usr/local/sbin:/usr/sbin:/sbin"
    for cmd in doctor.HOST_COMMANDS:
        real = shutil.which(cmd.name, path=search)
        if real and cmd.name not in left_out:
            (bin_dir / cmd.name).symlink_to(real)
    return str(bin_dir)


# Left out of PATH in these tests: commands in /usr/bin (doctor also looks in sbin).
def test_require_names_the_package_of_a_missing_command(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", _path_without(tmp_path, "iperf3", "linux.uml"))
    with pytest.raises(EnvironmentProblem) as err:
        doctor.require("core", "uml")
    message = str(err.value)
    assert "iperf3" in message and "linux.uml" in message
    assert "apt-get install iperf3 user-mode-linux" in message
    with pytest.raises(ValueError):
        doctor.require("no-such-group")


def _doctor_commands_only(path: str) -> subprocess.CompletedProcess[str]:
    """`doctor.py --commands-only` as a bare script, with only `path` as PATH."""
    return subprocess.run(
        [sys.executable, str(REPO / "quicbed" / "doctor.py"), "--commands-only"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
        timeout=30,
    )


def test_doctor_cli_exits_nonzero_and_names_the_package(tmp_path: Path) -> None:
    proc = _doctor_commands_only(_path_without(tmp_path, "iperf3"))
    assert proc.returncode == 4, proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("command iperf3"))
    assert "MISSING" in line and "apt-get install iperf3" in line
    assert "1 item(s) missing" in proc.stdout


def test_commands_in_sbin_count_for_a_user_without_sbin_on_path(tmp_path: Path) -> None:
    """A non-root user's PATH has no /usr/sbin; `doctor --commands-only` (which `make lint`'s
    users run without root) must not call tc and insmod missing for it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for cmd in doctor.HOST_COMMANDS:  # every command that is not in sbin, as links
        real = shutil.which(cmd.name)
        if real and not real.startswith(("/usr/sbin/", "/sbin/", "/usr/local/sbin/")):
            (bin_dir / cmd.name).symlink_to(real)
    proc = _doctor_commands_only(str(bin_dir))
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("command tc "))
    assert "/usr/sbin/tc" in line and "MISSING" not in line, line
    assert proc.returncode == 0, proc.stdout


@pytest.mark.docker
def test_doctor_on_this_host_is_all_ok() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "quicbed.cli", "doctor"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MISSING" not in proc.stdout
    assert "kernel htb" in proc.stdout and "image quicbed/client:dev" in proc.stdout


# -- a fresh machine: the package step alone, in a throwaway container -------------------------
FRESH_SCRIPT = r"""
set -e
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make >/dev/null
doctor() { python3 /repo/quicbed/doctor.py --commands-only; }
# 1. the list without kmod: doctor must notice (this is what a green CI once hid)
make -s -C /repo deps QUICBED_CACHE=/tmp/qc APT_PACKAGES="$WITHOUT_KMOD" >/dev/null
if doctor > /tmp/short.txt; then echo "FAIL: doctor passed without kmod"; exit 1; fi
grep -q '^command insmod .*MISSING.*apt-get install kmod' /tmp/short.txt || {
  cat /tmp/short.txt; echo "FAIL: insmod not named"; exit 1; }
echo "without kmod: $(tail -1 /tmp/short.txt)"
# 2. the Makefile's own list: every command present
make -s -C /repo deps QUICBED_CACHE=/tmp/qc >/dev/null
doctor
"""


def _base_image_ready(suite: str) -> bool:
    proc = subprocess.run(["docker", "image", "inspect", f"debian:{suite}-slim"], capture_output=True)
    return proc.returncode == 0


@pytest.mark.docker
@pytest.mark.parametrize("suite", ["bookworm", "trixie"])
def test_a_fresh_debian_gets_every_command_from_the_package_step(suite: str) -> None:
    if not _base_image_ready(suite):
        pytest.fail(f"debian:{suite}-slim is missing: make images builds it (images/base.sh)")
    archives = CACHE / "apt" / suite  # downloaded .debs kept between runs: minutes, not more
    archives.mkdir(parents=True, exist_ok=True)
    without = " ".join(sorted(makefile_packages() - {"kmod"}))
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "-e",
            f"WITHOUT_KMOD={without}",
            "-v",
            f"{REPO}:/repo:ro",
            "-v",
            f"{archives}:/var/cache/apt/archives",
            f"debian:{suite}-slim",
            "bash",
            "-c",
            FRESH_SCRIPT,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    from_kmod = sum(c.package == "kmod" for c in doctor.HOST_COMMANDS)  # insmod, modprobe, depmod
    assert f"without kmod: doctor: {from_kmod} item(s) missing" in out, out[-2000:]
    assert f"doctor: all {len(doctor.HOST_COMMANDS) + len(doctor.UML_MODULES)} items ok" in out
