"""The QUIC stacks' clients, read from the client registry, and what the contract says each
must refuse: the stack tests (test_stack_clients.py, test_stack_clients_path.py) take their
lists from here, so a stack added as stacks/<name>/ (or through QUICBED_CLIENT_DIRS) is
tested with no test touched.

A stack client is a tool in an image of its own that is not a browser (the perf tools share
quicbed/client:dev; the browsers keep the contract through browser_perf and have their tests).
"""

from __future__ import annotations

from quicbed.clients import tools

# Flags of the contract (clients/tools.py, the C tools') that a tool offers only through its
# descriptor. A tool that does not offer one must exit 3 on it, with these words on stderr.
NO_QLOG = (["--qlog", "/tmp/q"], "qlog")
NO_RESUME = (["--resume"], "--resume")
NO_CURL_TIMERS = (["--curl-timers"], "libcurl")  # libcurl's timers: the C tools only
NO_GROUPS = (["--groups", "X25519MLKEM768"], "key-exchange group")
UNKNOWN_CC = "vegas"  # a congestion control no shipped stack has


def stack_clients() -> list[str]:
    """The registry's stack clients, in listing order."""
    return [
        name
        for name, tool in tools.load_clients().items()
        if tool.image != tools.CLIENT_IMAGE and not tool.browser
    ]


def cannot(tool: tools.Tool) -> list[tuple[list[str], str]]:
    """What the tool's descriptor does not offer, as (arguments, words of its one line on
    stderr): each must be exit 3 with no rows."""
    out = [] if tool.qlog_flag else [NO_QLOG]
    if "resume" not in tool.options:
        out.append(NO_RESUME)
    if "kex" not in tool.options:
        out.append(NO_GROUPS)
    out.append(NO_CURL_TIMERS)
    assert UNKNOWN_CC not in tool.options.get("cc", ()), tool.options["cc"]
    out.append((["--cc", UNKNOWN_CC], "congestion control"))
    return out


def chosen_groups(tool: tools.Tool) -> dict[str, str]:
    """kex value -> the group the row must name: the first of what the option gives."""
    given = tool.values.get("kex", {})
    return {value: given.get(value, value).split(":")[0] for value in tool.options.get("kex", ())}
