"""Network profiles (topology/profiles/*.yaml): a link spec per direction, as data.

`down` is the server→client direction (the router's egress toward the clients), `up` the
client→server direction. Delay is one-way and given per direction, so the RTT is their sum:
nothing is applied twice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from quicbed.errors import InputError
from quicbed.topology.linkspec import LinkSpec, check_linkspec, field_names, parse_aqm, parse_linkspec
from quicbed.yamlio import Source, load_source

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
_TOP_KEYS = ("description", "source", "down", "up")
# The RTT as experiment files (and Profile.rtt_ms) name it: half of it is each direction's delay.
RTT_KEY = "rtt_ms"
# gemodel is a mapping; a trace is a file named in YAML, its path relative to that file
_OVERRIDABLE = tuple(f for f in field_names() if f not in ("gemodel", "trace"))


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    source: str
    down: LinkSpec
    up: LinkSpec

    @property
    def rtt_ms(self) -> float:
        return self.down.delay_ms + self.up.delay_ms

    @property
    def max_rate_mbit(self) -> float:
        return max(self.down.rate_mbit, self.up.rate_mbit)

    @property
    def has_trace(self) -> bool:
        return bool(self.down.trace or self.up.trace)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "rtt_ms": self.rtt_ms,
            "down": self.down.to_dict(),
            "up": self.up.to_dict(),
        }


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name: str, overrides: dict[str, str] | None = None) -> Profile:
    """A profile by name (or path to a YAML file), with `key=value` overrides applied."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else PROFILE_DIR / f"{name}.yaml"
    if not path.exists():
        raise InputError(
            f"unknown profile {name!r} (available: {', '.join(available_profiles())})", field="profile"
        )
    profile = parse_profile(load_source(path), path.stem)
    return apply_overrides(profile, overrides or {})


def parse_profile(src: Source, name: str) -> Profile:
    data, file = src.data, src.file
    if not isinstance(data, dict):
        raise InputError("a profile must be a mapping with down and up", file, 1)
    for key in data:
        if key not in _TOP_KEYS:
            raise InputError(f"unknown key (known: {', '.join(_TOP_KEYS)})", file, src.line((key,)), str(key))
    for key in ("down", "up"):
        if key not in data:
            raise InputError("missing (a link spec for this direction)", file, 1, key)

    def direction(key: str) -> LinkSpec:
        return parse_linkspec(data[key], file, key, lambda *keys: src.line((key, *keys)))

    return Profile(
        name=name,
        description=str(data.get("description", "")),
        source=str(data.get("source", "")),
        down=direction("down"),
        up=direction("up"),
    )


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """`--set loss_pct=1 --set down.rate_mbit=50` → {"loss_pct": "1", "down.rate_mbit": "50"}."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InputError(f"expected KEY=VALUE, got {pair!r}", field="--set")
        out[key.strip()] = value.strip()
    return out


Changes = dict[str, dict[str, Any]]  # direction -> {link parameter: value}


def apply_overrides(profile: Profile, overrides: dict[str, Any]) -> Profile:
    """Override link parameters in both directions (`loss_pct`) or one (`down.loss_pct`);
    `rtt_ms`, as experiment files and sweeps say it, sets each direction's delay to half of it.

    The result is checked as a whole, so the order of the overrides does not matter; a bad
    value is reported as `--set KEY: ...` with the key as the user gave it."""
    changes = {key: _changes(key, raw) for key, raw in overrides.items()}
    if RTT_KEY in changes:
        for key in changes:
            if key != RTT_KEY and key.rpartition(".")[2] == "delay_ms":
                raise InputError(f"give {RTT_KEY} or delay_ms, not both", field=f"--set {key}")
    down, up = profile.down, profile.up
    for change in changes.values():
        down = replace(down, **change.get("down", {}))
        up = replace(up, **change.get("up", {}))
    for spec, where in ((down, "down"), (up, "up")):
        try:
            check_linkspec(spec, "", lambda _key: None, where)
        except InputError as exc:
            raise _blame(exc, where, changes) from None
    return replace(profile, down=down, up=up)


def _changes(key: str, raw: Any) -> Changes:
    """What one override sets in each direction."""
    if key == RTT_KEY:
        rtt = _override_value(RTT_KEY, raw, key)
        if rtt < 0:
            raise InputError(f"must be >= 0 ms, got {rtt:g}", field=f"--set {key}")
        return {"down": {"delay_ms": rtt / 2}, "up": {"delay_ms": rtt / 2}}
    direction, _, param = key.rpartition(".")
    if param == RTT_KEY and direction in ("down", "up"):
        raise InputError(
            f"{RTT_KEY} is a round trip and has no direction (use "
            f"{direction}.delay_ms for a one-way delay)",
            field=f"--set {key}",
        )
    if direction not in ("", "down", "up") or param not in _OVERRIDABLE:
        raise InputError(
            f"cannot override {key!r} (use PARAM, down.PARAM or up.PARAM with "
            f"PARAM in {', '.join(_OVERRIDABLE)}; or {RTT_KEY})",
            field="--set",
        )
    value = _override_value(param, raw, key)
    return {d: {param: value} for d in ("down", "up") if direction in ("", d)}


def _override_value(param: str, raw: Any, key: str) -> Any:
    if param == "jitter_distribution":
        return str(raw)
    if param == "aqm":  # `--set aqm=fq_codel`; a sweep may also give a mapping
        try:
            return parse_aqm(raw, "", "aqm")
        except InputError as exc:
            raise InputError(exc.detail, field=f"--set {key}{(exc.field or 'aqm')[3:]}") from None
    whole = param == "queue_packets"
    try:
        return int(raw) if whole else float(raw)
    except (TypeError, ValueError):
        kind = "a whole number" if whole else "a number"
        raise InputError(f"must be {kind}, got {raw!r}", field=f"--set {key}") from None


def _blame(exc: InputError, direction: str, changes: dict[str, Changes]) -> InputError:
    """The link check's error, named after the override that set the bad parameter."""
    param = (exc.field or "").rpartition(".")[2]
    for key in reversed(changes):  # the last override of a parameter is the one in effect
        if param in changes[key].get(direction, {}):
            return InputError(exc.detail, field=f"--set {key}")
    # A parameter the profile set, made invalid by another override (reorder_pct, delay_ms=0).
    return InputError(f"{exc.field}: {exc.detail}", field="--set")
