"""JUnit XML, which GitHub, GitLab and Jenkins show natively: one test case per expectation
(`quicbed check`, `run --check`) or per comparison (`quicbed compare`), with the measured
numbers in the failure's message. The shape is the common one (testsuites > testsuite >
testcase > failure | skipped); tests/data/junit.xsd holds it and the tests validate against it.
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True)
class Case:
    classname: str  # e.g. "india.nginx.quic-h3" or "c0 india"
    name: str  # the expectation or the metric
    failure: str = ""  # "" = passed; else the one-line message (numbers included)
    skipped: str = ""  # why it could not be judged
    detail: str = ""  # longer text: the failure's body, or system-out for a pass


def junit_xml(suite: str, cases: list[Case]) -> str:
    failures = sum(bool(c.failure) for c in cases)
    skipped = sum(bool(c.skipped) and not c.failure for c in cases)
    root = ET.Element(
        "testsuites",
        name="quicbed",
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
    )
    ts = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time="0",
        timestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
        hostname=socket.gethostname(),
    )
    for case in cases:
        tc = ET.SubElement(ts, "testcase", classname=case.classname, name=case.name, time="0")
        if case.failure:
            ET.SubElement(tc, "failure", message=case.failure, type="quicbed").text = (
                case.detail or case.failure
            )
        elif case.skipped:
            ET.SubElement(tc, "skipped", message=case.skipped)
        elif case.detail:
            ET.SubElement(tc, "system-out").text = case.detail
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: Path | str, suite: str, cases: list[Case]) -> None:
    Path(path).write_text(junit_xml(suite, cases))
