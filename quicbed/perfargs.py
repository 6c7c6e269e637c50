"""The perf tools' fixed arguments (clients/README.md, "the client contract"), spelled once.

Every tool a descriptor names takes them, after its command: the URL, the one name the testbed
resolves and where, the run's CA, the repetitions, the CPU samples and the timeout. A tool's
full argv adds its variant's flags (clients.tools.Tool.argv); the servers' untimed warm-up
fetch (servers.testbed.warm_up) takes these alone. Base layer: both of those import it.
"""

from __future__ import annotations


def contract_argv(
    command: tuple[str, ...] | list[str],
    url: str,
    resolve: str,
    cacert: str,
    timeout_s: float,
    *,
    repetitions: int = 1,
    cpu: bool = True,
) -> list[str]:
    """`command` with the contract's arguments. `cpu=False`: no CPU samples (an untimed
    fetch); `repetitions`: measurements in one process (a bench's)."""
    return [
        *command,
        "--url",
        url,
        "--resolve",
        resolve,
        "--cacert",
        cacert,
        "-n",
        str(repetitions),
        *(["--cpu"] if cpu else []),
        "--timeout",
        str(int(timeout_s)),
    ]
