"""The browser client's pure logic (clients/browser/browser_perf.py, loaded by path: it runs in
the client image, where Playwright is, and imports only the standard library at the top) and
the landing pages it loads (workloads/web.py)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser_module import browser_argv, load_browser_perf

from quicbed import rowschema
from quicbed.workloads import ensure_content, object_bytes, store, web

bp = load_browser_perf()
URL = "https://server.quicbed/web/pages/news/index.html"
BASE = "https://server.quicbed/web/pages/news/"


def _argv(ca: str, *extra: str) -> list[str]:
    return browser_argv(URL, ca, "-n", "1", "--cpu", "--timeout", "30", *extra)


# ------------------------------------------------------------------------------ arguments


def test_the_contract_parses(ca: str) -> None:
    args = bp.parse_args(_argv(ca, "--protocol", "tls1.2"))
    assert (args.protocol, args.repetitions, args.timeout, args.cpu) == ("tls1.2", 1, 30.0, True)
    assert args.resolve == [bp.Resolve("server.quicbed", 443, "10.0.2.10")]


@pytest.mark.parametrize(
    "extra",
    [
        ("--protocol", "tls1.1"),
        ("--bogus",),
        ("-n", "0"),
        ("-n", "two"),
        ("--timeout", "-1"),
        ("--timeout", "soon"),
        ("--resolve", "server.quicbed:443"),
        ("--pause", "-5"),
    ],
)
def test_bad_flags_and_values_are_usage_errors(ca: str, extra: tuple[str, ...]) -> None:
    with pytest.raises(bp.UsageError):
        bp.parse_args(_argv(ca, *extra))


def test_usage_error_exits_2_with_one_line(ca: str, capsys: pytest.CaptureFixture) -> None:
    assert bp.main(_argv(ca, "--protocol", "h2c")) == bp.EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("browser_perf: usage error")
    assert bp.main(["--url", URL]) == bp.EXIT_USAGE  # --cacert missing
    assert bp.main(_argv("/nonexistent/ca.pem")) == bp.EXIT_USAGE


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["--url", "http://server.quicbed/x"], "https"),
        (["--url", "https://other.quicbed/x"], "no --resolve"),
        (["--browser", "headless-shell", "--protocol", "tls1.2"], "cannot pin tls1.2"),
    ],
)
def test_valid_requests_it_cannot_do_exit_3(
    ca: str, capsys: pytest.CaptureFixture, argv: list[str], why: str
) -> None:
    full = _argv(ca)
    if argv[0] == "--url":
        full[1] = argv[1]
    else:
        full += argv
    assert bp.main(full) == bp.EXIT_UNSUPPORTED
    out, err = capsys.readouterr()
    assert out == "" and why in err and err.count("\n") == 1


# ------------------------------------------------------------------------------ flags


@pytest.mark.parametrize(
    ("protocol", "present", "absent"),
    [
        ("quic", ["--enable-quic", "--origin-to-force-quic-on=server.quicbed:443"], ["--disable-quic"]),
        ("tls1.3", ["--disable-quic", "--ssl-version-min=tls1.3"], ["--enable-quic"]),
        ("tls1.2", ["--disable-quic", "--ssl-version-max=tls1.2"], ["--enable-quic"]),
    ],
)
def test_chromium_flags_pin_the_protocol(
    ca: str, protocol: str, present: list[str], absent: list[str]
) -> None:
    flags = bp.chromium_args(bp.parse_args(_argv(ca, "--protocol", protocol)))
    assert set(present) <= set(flags) and not set(absent) & set(flags)
    # Names only from --resolve, never DNS; certificates are checked (the run's CA is trusted
    # through the fresh HOME's NSS database instead).
    assert "--host-resolver-rules=MAP server.quicbed 10.0.2.10, MAP * ~NOTFOUND" in flags
    assert not any(f.startswith("--ignore-certificate-errors") for f in flags)
    assert {"--disable-background-networking", "--disable-component-update"} <= set(flags)


def test_a_replayed_page_forces_quic_and_resolves_every_origin(ca: str) -> None:
    cdn = ("--resolve", "cdn.page.example:443:10.0.2.51")
    flags = bp.chromium_args(bp.parse_args(_argv(ca, "--protocol", "quic", *cdn)))
    assert "--origin-to-force-quic-on=server.quicbed:443,cdn.page.example:443" in flags
    rules = "MAP server.quicbed 10.0.2.10, MAP cdn.page.example 10.0.2.51, MAP * ~NOTFOUND"
    assert f"--host-resolver-rules={rules}" in flags


# ------------------------------------------------------------------------------ the row


def _entry(name: str, hop: str = "h3", size: int = 1000, **times: float) -> dict:
    return {"name": name, "nextHopProtocol": hop, "encodedBodySize": size, "responseStatus": 200, **times}


def _perf(hop: str = "h3", sub_hop: str | None = None) -> dict:
    nav = _entry(
        URL,
        hop,
        8192,
        connectStart=4.0,
        secureConnectionStart=4.0 if hop == "h3" else 84.0,
        connectEnd=168.0,
        requestStart=168.5,
        responseStart=250.0,
        responseEnd=251.0,
        domContentLoadedEventEnd=380.0,
        loadEventEnd=400.5,
    )
    return {
        "timeOrigin": 1_700_000_000_000.0,
        "navigation": nav,
        "fcp": 390.0,
        "lcp": 392.0,
        "resources": [
            _entry(BASE + "asset0.css", sub_hop or hop, 4096),
            _entry(BASE + "asset1.js", sub_hop or hop, 3072),
            _entry(BASE + "asset2.png", hop, 2763),
        ],
    }


def _net(hop: str = "h3", security: str = "QUIC") -> dict:
    doc = {
        "url": URL,
        "protocol": hop,
        "status": 200,
        "connectionId": 37,
        "remoteIPAddress": "10.0.2.10",
        "remotePort": 443,
        "securityDetails": {
            "protocol": security,
            "cipher": "AES_128_GCM",
            "keyExchangeGroup": "X25519MLKEM768",
        },
    }
    subs = [
        {
            "url": BASE + n,
            "protocol": hop,
            "status": 200,
            "connectionId": 37,
            "securityDetails": {"protocol": security},
        }
        for n in ("asset0.css", "asset1.js")
    ]
    return {
        "document": doc,
        "responses": [doc, *subs],
        "requests": [URL, BASE + "asset0.css", BASE + "asset1.js", BASE + "asset2.png"],
        "failures": [],
    }


def test_row_from_the_browser_timings() -> None:
    row = bp.build_row(bp.empty_row("tls1.3", URL, 0), _perf("h2"), _net("h2", "TLS 1.3"))
    assert row["connection_time_ms"] == 164.0  # connectEnd - connectStart
    assert (row["ttfb_ms"], row["download_time_ms"]) == (250.0, 251.0)
    assert (row["page_load_time_ms"], row["dom_content_loaded_ms"]) == (400.5, 380.0)
    assert (row["fcp_ms"], row["lcp_ms"]) == (390.0, 392.0)
    assert row["t_start"] == 1_700_000_000.0
    assert row["t_connect"] == 1_700_000_000.084  # TCP: secureConnectionStart
    assert row["t_handshake"] == 1_700_000_000.168
    assert row["t_first_byte"] == 1_700_000_000.25
    assert row["t_done"] == 1_700_000_000.4005  # loadEventEnd
    assert row["bytes"] == 8192 + 4096 + 3072 + 2763  # encodedBodySize, document included
    assert (row["resources"], row["resource_protocols"], row["connections"]) == (3, {"h2": 4}, 1)
    assert (row["origins"], row["origin_connections"]) == (1, {"server.quicbed": 1})
    assert (row["http_version"], row["tls_version"], row["http_status"]) == ("2", "TLSv1.3", 200)
    assert (row["cipher"], row["tls_group"]) == ("AES_128_GCM", "X25519MLKEM768")
    assert (row["client_cpu_ms"], row["throughput_mbps"], row["resumed"]) == (None, None, False)
    assert set(row) == set(bp.ROW_KEYS)


def test_quic_row_carries_tls13_and_connects_at_the_handshake() -> None:
    row = bp.build_row(bp.empty_row("quic", URL, 2), _perf("h3"), _net("h3", "QUIC"))
    assert (row["http_version"], row["tls_version"], row["rep"]) == ("3", "TLSv1.3", 2)
    assert row["t_connect"] == row["t_handshake"]


def test_every_schema_column_of_the_tools_and_the_browser_is_in_the_row() -> None:
    tool = {c.name for c in rowschema.TOOL}
    browser = {c.name for c in rowschema.BROWSER}
    assert tool | browser <= set(bp.ROW_KEYS)
    assert all(rowschema.is_known(key) for key in bp.ROW_KEYS)  # cpu_bound: the executor's


@pytest.mark.parametrize(("cpu_ms", "pct"), [(450.0, 112.4), (200.0, 49.9)])
def test_browser_cpu_share_is_shown_but_flags_nothing(cpu_ms: float, pct: float) -> None:
    row = bp.empty_row("quic", URL, 0)
    row["page_load_time_ms"] = 400.5
    bp.add_cpu(row, cpu_ms)
    assert (row["browser_cpu_pct"], row["cpu_bound"]) == (pct, False)


PROC_STAT = """cpu  300 0 100 600 0 0 0 0 0 0
cpu0 100 0 50 50 0 0 0 0 0 0
cpu1 200 0 50 550 0 0 0 0 0 0
intr 12345
"""


def test_idle_jiffies_are_those_of_the_allowed_cpus() -> None:
    assert bp.allowed_cpu_jiffies(PROC_STAT, {0}) == (200, 50)
    assert bp.allowed_cpu_jiffies(PROC_STAT, {0, 1}) == (1000, 600)


def _snap(wall_s, jiffies, threads, throttled_ns=0):
    return bp.CpuSnapshot(wall_s, jiffies, threads, throttled_ns)


@pytest.mark.parametrize(
    ("idle_after", "main_ns", "throttled_ns", "bound"),
    [
        (70, 100_000_000, 0, False),  # 35 % idle, main thread 25 % of the load: the network
        (105, 100_000_000, 0, False),
        (6, 100_000_000, 0, True),  # 7.5 % idle over the load: the browser waited for a CPU
        (70, 380_000_000, 0, True),  # one thread ran 95 % of the load: the critical path
        (70, 100_000_000, 60_000_000, True),  # the quota throttled 15 % of it
        (70, 100_000_000, 30_000_000, False),
    ],
)
def test_cpu_bound_means_a_cpu_limited_the_load(idle_after, main_ns, throttled_ns, bound) -> None:
    before = _snap(10.0, (1000, 0), {(1, 1): ("CrBrowserMain", 0, 0), (1, 2): ("gone", 5, 5)})
    after = _snap(
        10.4,  # 400 ms on two CPUs: 80 jiffies
        (1080 if idle_after <= 80 else 1200, idle_after),
        {(1, 1): ("CrBrowserMain", main_ns, 2_000_000), (2, 9): ("CrRendererMain", 50_000_000, 1_000_000)},
        throttled_ns,
    )
    limits = bp.cpu_limits(before, after)
    assert limits["cpu_bound"] is bound, limits
    assert limits["cpu_wait_ms"] == 3.0  # run-queue wait of both threads; the gone one not counted
    assert limits["busiest_thread"] == "CrBrowserMain"


def test_the_load_cpu_is_broken_down_by_process_kind_and_thread() -> None:
    """Where a load's CPU went: per process kind (from each process's command line) and the
    busiest threads; a thread born in the load counts whole, one that ran nothing is left out."""
    before = _snap(0.0, (0, 0), {(1, 1): ("CrBrowserMain", 40_000_000, 0), (3, 4): ("ThreadPool", 0, 0)})
    threads = {
        (1, 1): ("CrBrowserMain", 100_000_000, 0),  # 60 ms in the load
        (1, 2): ("Chrome_IOThread", 25_000_000, 0),  # born in it: 25 ms
        (2, 9): ("CrRendererMain", 80_000_000, 0),
        (2, 10): ("Compositor", 5_500_000, 0),
        (3, 4): ("ThreadPool", 0, 0),
    }
    kinds = {1: "browser", 2: "renderer", 3: "utility:network"}
    after = bp.CpuSnapshot(0.2, (100, 50), threads, None, kinds)
    limits = bp.cpu_limits(before, after)
    assert limits["cpu_by_process"] == {"renderer": 85.5, "browser": 85.0, "utility:network": 0.0}
    assert list(limits["cpu_by_process"]) == ["renderer", "browser", "utility:network"]
    assert limits["cpu_top_threads"] == [
        ["CrRendererMain", "renderer", 80.0],
        ["CrBrowserMain", "browser", 60.0],
        ["Chrome_IOThread", "browser", 25.0],
        ["Compositor", "renderer", 5.5],
    ]


@pytest.mark.parametrize(
    ("cmdline", "comm", "kind"),
    [
        (
            ["/usr/lib/chromium/chromium", "--user-data-dir=/tmp/x/profile", "--headless"],
            "chromium",
            "browser",
        ),
        (["/usr/lib/chromium/chromium", "--type=renderer", "--lang=en"], "chromium", "renderer"),
        (["/usr/lib/chromium/chromium", "--type=gpu-process"], "chromium", "gpu-process"),
        (["/usr/lib/chromium/chromium --type=renderer --enable-quic --lang=en-US"], "chromium", "renderer"),
        (
            [
                "/usr/lib/chromium/chromium",
                "--type=utility",
                "--utility-sub-type=network.mojom.NetworkService",
            ],
            "chromium",
            "utility:network",
        ),
        (["/usr/lib/firefox-esr/firefox-esr", "-contentproc", "-isForBrowser"], "Web Content", "Web Content"),
        (
            ["/usr/lib/firefox-esr/firefox-esr", "--headless", "--profile", "/tmp/p"],
            "firefox-esr",
            "firefox-esr",
        ),
    ],
)
def test_process_kinds_from_the_command_line(cmdline: list[str], comm: str, kind: str) -> None:
    assert bp.process_kind(cmdline, comm) == kind


def test_no_throttling_figure_without_a_cgroup() -> None:
    limits = bp.cpu_limits(_snap(0.0, (0, 0), {}, None), _snap(0.5, (100, 50), {}, None))
    assert (limits["cpu_throttled_ms"], limits["host_idle_pct"], limits["cpu_bound"]) == (None, 50.0, False)


# ------------------------------------------------------------------------------ the proof


def test_all_over_the_asked_protocol_passes() -> None:
    assert bp.judge("quic", URL, _perf("h3"), _net("h3", "QUIC")) == ""
    assert bp.judge("tls1.2", URL, _perf("h2"), _net("h2", "TLS 1.2")) == ""


def test_one_subresource_over_another_protocol_is_an_error() -> None:
    error = bp.judge("quic", URL, _perf("h3", sub_hop="h2"), _net("h3", "QUIC"))
    assert error.startswith("protocol: asked quic (h3): ") and "asset0.css over h2" in error


def test_the_wrong_tls_version_is_an_error() -> None:
    error = bp.judge("tls1.2", URL, _perf("h2"), _net("h2", "TLS 1.3"))
    assert error.startswith("protocol:") and "TLS 1.3" in error


def test_a_resource_from_another_host_is_an_error() -> None:
    perf, net = _perf("h3"), _net("h3", "QUIC")
    net["requests"].append("https://cdn.example/lib.js")
    error = bp.judge("quic", URL, perf, net)
    assert error.startswith("protocol:") and "not from server.quicbed" in error
    net["requests"][-1] = "data:image/png;base64,AAAA"  # no network: fine
    assert bp.judge("quic", URL, perf, net) == ""


def test_a_replayed_page_may_fetch_from_its_resolved_origins_only() -> None:
    """A replayed page's resources come from its other origins, each --resolve'd; one from a
    name the load was not given is still an error. Each origin counts its own connections."""
    perf, net = _perf("h3"), _net("h3", "QUIC")
    cdn = "https://cdn.page.example/lib.js"
    perf["resources"].append(_entry(cdn, "h3"))
    net["requests"].append(cdn)
    net["responses"].append({**net["responses"][-1], "url": cdn, "connectionId": 41})
    assert "not from server.quicbed" in bp.judge("quic", URL, perf, net)
    assert bp.judge("quic", URL, perf, net, frozenset({"server.quicbed", "cdn.page.example"})) == ""
    net["requests"].append("https://ads.elsewhere.example/x.js")
    error = bp.judge("quic", URL, perf, net, frozenset({"cdn.page.example"}))
    assert "ads.elsewhere.example/x.js is not from cdn.page.example or server.quicbed" in error
    row = bp.build_row(bp.empty_row("quic", URL, 0), perf, net)
    assert (row["origins"], row["connections"]) == (2, 2)
    assert row["origin_connections"] == {"cdn.page.example": 1, "server.quicbed": 1}


def test_the_favicon_is_not_a_resource_of_the_page() -> None:
    perf, net = _perf("h3"), _net("h3", "QUIC")
    perf["resources"].append(_entry("https://server.quicbed/favicon.ico", ""))
    net["requests"].append("https://server.quicbed/favicon.ico")
    net["failures"].append({"url": "https://server.quicbed/favicon.ico", "errorText": ""})
    bp.drop_favicon(perf, net)
    assert bp.judge("quic", URL, perf, net) == bp.http_problems(perf, net, URL) == ""
    assert len(perf["resources"]) == 3


def test_failed_or_missing_subresources_are_http_errors() -> None:
    perf, net = _perf("h3"), _net("h3", "QUIC")
    perf["resources"][1]["responseStatus"] = 404
    net["failures"].append({"url": BASE + "asset2.png", "errorText": "net::ERR_FAILED"})
    error = bp.http_problems(perf, net, URL)
    assert error == "http: status 404 for asset1.js; asset2.png failed: net::ERR_FAILED"


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("Page.goto: net::ERR_CONNECTION_REFUSED at https://server.quicbed/x", "connect"),
        ("net::ERR_QUIC_HANDSHAKE_FAILED at https://server.quicbed/x", "connect"),
        ("net::ERR_CERT_AUTHORITY_INVALID at https://server.quicbed/x", "tls"),
        ("net::ERR_SSL_VERSION_OR_CIPHER_MISMATCH at https://server.quicbed/x", "tls"),
        ("net::ERR_TIMED_OUT at https://server.quicbed/x", "timeout"),
        ("Page.goto: Timeout 30000ms exceeded.\nCall log:\n  - navigating to ...", "timeout"),
        ("net::ERR_HTTP2_PROTOCOL_ERROR at https://server.quicbed/x", "http"),
        ("Page.goto: Target page, context or browser has been closed", "browser"),
        ("Page.goto: Navigation failed because page crashed!", "browser"),
    ],
)
def test_failures_get_their_category(message: str, category: str) -> None:
    error = bp.categorize(message)
    assert error.split(":", 1)[0] == category and "\n" not in error
    assert category in bp.ERROR_CATEGORIES


# ------------------------------------------------------------------------------ the pages


class _Tags(HTMLParser):
    """Every start tag with its attributes and the elements still open at the end."""

    VOID = {"meta", "link", "img", "br", "hr", "input", "source"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict, tuple[str, ...]]] = []
        self.open: list[str] = []
        self.mismatched: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs), tuple(self.open)))
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.open and self.open[-1] == tag:
            self.open.pop()
        else:
            self.mismatched.append(tag)


PAGES = {f"web/pages/{site}/index.html": site for site in web.LANDING_PAGES}
PAGES["web/index.html"] = ""


@pytest.mark.parametrize("rel", list(PAGES))
def test_every_landing_page_is_well_formed_and_fetches_its_assets(rel: str) -> None:
    files = web.web_files()
    html = files[rel]
    directory = rel.rsplit("/", 1)[0] + "/"
    parser = _Tags()
    parser.feed(html.decode("ascii"))
    parser.close()
    names = {tag for tag, _, _ in parser.tags}
    assert names <= {
        "html",
        "head",
        "meta",
        "title",
        "link",
        "body",
        "h1",
        "img",
        "a",
        "p",
        "script",
    }, names  # a tag cut in two shows as a strange name ("p<script")
    assert parser.open == [] and parser.mismatched == []
    refs = {}
    for tag, attrs, _ in parser.tags:
        ref = attrs.get("src") or attrs.get("href")
        if ref:
            refs.setdefault(ref, set()).add(tag)
    assets = {
        p.removeprefix(directory)
        for p in files
        if p.startswith(directory) and not p.endswith(".html") and "/" not in p.removeprefix(directory)
    }
    assert set(refs) == assets  # every asset referenced, nothing else
    assert all(re.fullmatch(r"[\w.-]+", ref) for ref in refs)  # relative: the page's own host
    # What makes a browser fetch each: a stylesheet (render-blocking, in <head>), an image, a
    # script, a preload (json, pdf).
    head = [(t, a) for t, a, opened in parser.tags if opened[-1:] == ("head",)]
    assert any(t == "link" and a.get("rel") == "stylesheet" for t, a in head)
    fetched = {
        a.get("src") or a.get("href")
        for t, a, _ in parser.tags
        if (t == "link" and a.get("rel") in ("stylesheet", "preload"))
        or (t in ("img", "script") and a.get("src"))
    }
    assert fetched == assets
    assert all(
        a.get("crossorigin") == "use-credentials" for t, a in head if a.get("rel") == "preload"
    )  # the page's connection, not an anonymous one


def test_pages_keep_their_sizes() -> None:
    files = web.web_files()
    assert len(files["web/index.html"]) == 12 * store.KiB
    for site, (html_kib, _assets) in web.LANDING_PAGES.items():
        assert len(files[f"web/pages/{site}/index.html"]) == html_kib * store.KiB
        page = sum(len(d) for p, d in files.items() if p.startswith(f"web/pages/{site}/"))
        assert page == object_bytes("web", f"pages/{site}")


def test_a_cache_of_an_older_generator_is_remade(tmp_path: Path) -> None:
    root = ensure_content(tmp_path, {"web"})
    page = root / "web/pages/media/index.html"
    good = page.read_bytes()
    stale = good.replace(b"<p>", b"<q>", 1)  # same size, other bytes, manifest to match
    page.write_bytes(stale)
    manifest = store.load_manifest(root)
    manifest["files"]["web/pages/media/index.html"]["sha256"] = "0" * 64
    (root / store.MANIFEST).write_text(json.dumps(manifest))
    ensure_content(root, {"web"})
    assert page.read_bytes() == good


def test_only_the_headless_shell_gets_the_lean_switches(ca: str) -> None:
    shell = bp.chromium_args(bp.parse_args(_argv(ca, "--browser", "headless-shell")))
    full = bp.chromium_args(bp.parse_args(_argv(ca)))  # the default: the full browser, as before
    assert shell == full + list(bp.LEAN_SWITCHES)
    assert not set(bp.LEAN_SWITCHES) & set(full)


def test_playback_opens_the_player_page_and_needs_time_for_it(ca: str, capsys) -> None:
    args = bp.parse_args(_argv(ca) + ["--duration", "20", "--timeout", "60"])
    load = bp.Load(args, 0)
    assert load.page_url() == (
        "https://server.quicbed/player/index.html?" "mpd=%2Fweb%2Fpages%2Fnews%2Findex.html&duration=20"
    )
    assert "--autoplay-policy=no-user-gesture-required" in bp.chromium_args(args)
    assert bp.main(_argv(ca) + ["--duration", "30", "--timeout", "30"]) == bp.EXIT_USAGE
    assert "must exceed --duration" in capsys.readouterr().err


def test_requests_the_player_cancelled_are_no_protocol_evidence() -> None:
    seg = "https://server.quicbed/video/dash/chunk-stream0-00013.m4s"
    done = "https://server.quicbed/video/dash/chunk-stream0-00012.m4s"
    perf = {"resources": [{"name": done, "nextHopProtocol": "h3"}, {"name": seg, "nextHopProtocol": ""}]}
    net = {
        "requests": [done, seg],
        "responses": [{"url": done, "protocol": "h3"}],
        "failures": [{"url": seg, "errorText": "net::ERR_ABORTED", "canceled": True}],
    }
    assert bp.drop_cancelled(perf, net) == 1
    assert [e["name"] for e in perf["resources"]] == [done] and net["failures"] == []
    # A request that failed otherwise stays, and so does its missing protocol.
    net["failures"] = [{"url": seg, "errorText": "net::ERR_CONNECTION_RESET"}]
    perf["resources"].append({"name": seg, "nextHopProtocol": ""})
    assert bp.drop_cancelled(perf, net) == 0 and len(perf["resources"]) == 2
