"""The client contract and one adapter per client tool.

A client is an executable in the client image. The runner calls it with a fixed set of
arguments, always the same:

    <tool> --url https://server.quicbed/<path> --resolve server.quicbed:443:<address>
           --cacert <CA file> -n 1 --cpu --timeout <seconds> [the variant's options]

and reads the JSON rows it prints on stdout (columns: quicbed/rowschema.py). Exit status: 0
every measurement succeeded, 1 a row carries an error, 2 usage error, UNSUPPORTED_EXIT a valid
request the tool cannot do (no rows, the reason on stderr).

An adapter says what the experiment file may ask of the tool (options, their values and
defaults), how a variant is labelled, which workloads it runs, and how its options become
arguments. A tool that is not built yet is listed with `unavailable` set: experiment files that
name it are refused at validation, with that reason, never at run time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

CLIENT_IMAGE = "quicbed/client:dev"  # images/client: the perf tools (clients/perf)
UNSUPPORTED_EXIT = 3  # clients/perf/perf.h: PERF_EXIT_UNSUPPORTED

# `kex`: the key-exchange groups the perf tools offer (--groups). Classical X25519 for every
# stack by default; the post-quantum hybrid is what OpenSSL 3.5 offers when left alone.
KEX_GROUPS: dict[str, str] = {
    "x25519": "X25519:secp256r1",
    "x25519mlkem768": "X25519MLKEM768:X25519:secp256r1",
}
_KEX_SHORT = {"x25519": "", "x25519mlkem768": "-pq"}


@dataclass(frozen=True)
class Tool:
    """A client tool: its options (name -> allowed values) and how a variant is labelled."""

    name: str
    options: dict[str, tuple[str, ...]]
    defaults: dict[str, str]
    # label/protocol take the variant's resolved options.
    label: str  # str.format template, e.g. "tls{tls}-h{http}"
    protocol: str  # str.format template, e.g. "tls{tls}"
    workloads: tuple[str, ...] = ("web", "cloud")
    # Compact spelling in labels: "1.1" -> "1", so "tls1.2-h1".
    short: dict[str, dict[str, str]] = field(default_factory=dict)
    # option -> the tool's flag, in argv order; options without one only label the variant.
    flags: dict[str, str] = field(default_factory=dict)
    # option -> value -> what the flag is given (default: the value itself).
    values: dict[str, dict[str, str]] = field(default_factory=dict)
    # option -> value -> the arguments it becomes, for an option that sets several flags.
    expand: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    image: str = CLIENT_IMAGE
    unavailable: str = ""  # why experiments may not name it yet ("" = it runs)
    command: str = ""  # the executable in the image ("" = the tool's name)
    # Seconds a trial spends starting and ending the tool (docker exec, process start, row):
    # for the dry run's estimate; bench/overhead_bench.py and bench/browser_bench.py measure it.
    start_s: float = 0.1
    # What the tool takes of the workload's arguments (the video's duration; the browser also
    # the player's settings): workloads/kinds.py WorkloadKind.tool_args.
    workload_flags: tuple[str, ...] = ("--duration",)
    # Capture (experiment capture:): the flag that takes a key-log path (SSLKEYLOGFILE format)
    # and the one that takes a qlog path (JSON-SEQ, its QUIC connections'); "" = it cannot,
    # and no_qlog says why a QUIC trial of it writes none (the row's capture_missing).
    keylog_flag: str = "--keylog"
    qlog_flag: str = ""
    no_qlog: str = ""

    def capture_argv(self, keylog: str | None, qlog: str | None) -> list[str]:
        """The flags that make the tool write its key log and qlog to these paths (None: not
        asked for); a path the tool cannot write is left out (see no_qlog)."""
        out: list[str] = []
        for flag, path in ((self.keylog_flag, keylog), (self.qlog_flag, qlog)):
            if flag and path:
                out += [flag, path]
        return out

    def argv(
        self,
        url: str,
        resolve: str,
        cacert: str,
        timeout_s: float,
        options: dict[str, str],
        workload_args: dict[str, str] | None = None,
    ) -> list[str]:
        """The contract's arguments, then the variant's options as the tool's flags, then
        what the workload adds that the tool takes (e.g. the video's duration)."""
        argv = [
            self.command or self.name,
            "--url",
            url,
            "--resolve",
            resolve,
            "--cacert",
            cacert,
            "-n",
            "1",
            "--cpu",
            "--timeout",
            str(int(timeout_s)),
        ]
        for option, flag in self.flags.items():
            if options.get(option):
                argv += [flag, self.values.get(option, {}).get(options[option], options[option])]
        for option, table in self.expand.items():
            argv += table.get(options.get(option, ""), ())
        for flag, value in (workload_args or {}).items():
            if flag in self.workload_flags:
                argv += [flag, value]
        return argv

    def variant_label(self, options: dict[str, str]) -> str:
        short = {k: self.short.get(k, {}).get(v, v) for k, v in options.items()}
        return self.label.format(**short)

    def variant_protocol(self, options: dict[str, str]) -> str:
        return self.protocol.format(**options)

    def labels(self) -> list[str]:
        """Every label a variant of this tool can have."""
        names = list(self.options)
        return [
            self.variant_label(dict(zip(names, values, strict=True)))
            for values in itertools.product(*(self.options[n] for n in names))
        ]


# resume: "yes" measures a connection that resumes a warm-up connection's session (the perf
# tools' --resume: TLS tickets, and 0-RTT early data where the server accepts it).
_RESUME = ("no", "yes")
_RESUME_SHORT = {"no": "", "yes": "-resume"}
_RESUME_ARGS: dict[str, tuple[str, ...]] = {"yes": ("--resume",)}

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            name="tls_perf",
            options={
                "tls": ("1.2", "1.3"),
                "http": ("1.1", "2"),
                "kex": tuple(KEX_GROUPS),
                "resume": _RESUME,
            },
            defaults={"tls": "1.3", "http": "2", "kex": "x25519", "resume": "no"},
            label="tls{tls}-h{http}{kex}{resume}",
            protocol="tls{tls}",
            short={"http": {"1.1": "1"}, "kex": _KEX_SHORT, "resume": _RESUME_SHORT},
            flags={"tls": "--tls", "http": "--http", "kex": "--groups"},
            values={"kex": KEX_GROUPS},
            expand={"resume": _RESUME_ARGS},
        ),
        # backend: libcurl's HTTP/3, or ngtcp2 timed in library callbacks like the paper's tool.
        Tool(
            name="quic_perf",
            options={
                "http": ("3",),
                "backend": ("libcurl", "ngtcp2"),
                "kex": tuple(KEX_GROUPS),
                "resume": _RESUME,
            },
            defaults={"http": "3", "backend": "libcurl", "kex": "x25519", "resume": "no"},
            label="quic-h{http}{backend}{kex}{resume}",
            protocol="quic",
            short={
                "backend": {"libcurl": "", "ngtcp2": "-ngtcp2"},
                "kex": _KEX_SHORT,
                "resume": _RESUME_SHORT,
            },
            flags={"backend": "--backend", "kex": "--groups"},
            values={"kex": KEX_GROUPS},
            expand={"resume": _RESUME_ARGS},
            qlog_flag="--qlog",  # ngtcp2's qlog callback; libcurl: OpenSSL 3.5's QLOGDIR
        ),
        # The paper's non-adaptive video test (clients/perf): audio and video in parallel, paced
        # like playout; two TLS/TCP connections, or one QUIC connection with two streams.
        Tool(
            name="video_download",
            options={"protocol": ("quic", "tls1.3", "tls1.2"), "kex": tuple(KEX_GROUPS)},
            defaults={"protocol": "quic", "kex": "x25519"},
            label="video-{protocol}{kex}",
            protocol="{protocol}",
            workloads=("video",),
            short={"kex": _KEX_SHORT},
            flags={"kex": "--groups"},
            values={"kex": KEX_GROUPS},
            # QUIC through ngtcp2, timed in library callbacks, as the paper experiments run quic_perf
            expand={
                "protocol": {
                    "quic": ("--transport", "quic", "--backend", "ngtcp2"),
                    "tls1.3": ("--transport", "tcp", "--tls", "1.3"),
                    "tls1.2": ("--transport", "tcp", "--tls", "1.2"),
                }
            },
            qlog_flag="--qlog",
        ),
        Tool(
            name="chromium",
            # browser: the full Chromium, or Debian's chromium-headless-shell (a fifth of the CPU;
            # QUIC and TLS 1.3 only: clients/browser/README.md)
            options={
                "protocol": ("quic", "tls1.2", "tls1.3"),
                "browser": ("chromium-full", "headless-shell"),
            },
            defaults={"protocol": "quic", "browser": "chromium-full"},
            label="chromium-{protocol}{browser}",
            protocol="{protocol}",
            short={"browser": {"chromium-full": "", "headless-shell": "-shell"}},
            # web: one page load; video: the stream played in dash.js (--duration, the workload's)
            workloads=("web", "video"),
            command="browser_perf",  # clients/browser: one fresh browser per trial
            flags={"protocol": "--protocol", "browser": "--browser"},
            start_s=1.5,  # a fresh browser and profile per trial
            workload_flags=("--duration", "--player-settings"),
            no_qlog="chromium: NetLog not collected yet",
        ),
    )
}


def get_tool(name: str) -> Tool:
    return TOOLS[name]
