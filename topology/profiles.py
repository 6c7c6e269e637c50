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
from quicbed.topology.linkspec import LinkSpec, check_linkspec, field_names, parse_linkspec
from quicbed.yamlio import Source, load_source

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
_TOP_KEYS = ("description", "source", "down", "up")


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

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "source": self.source,
                "rtt_ms": self.rtt_ms, "down": self.down.to_dict(), "up": self.up.to_dict()}


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name: str, overrides: dict[str, str] | None = None) -> Profile:
    """A profile by name (or path to a YAML file), with `key=value` overrides applied."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else PROFILE_DIR / f"{name}.yaml"
    if not path.exists():
        raise InputError(f"unknown profile {name!r} (available: {', '.join(available_profiles())})",
                         field="profile")
    profile = parse_profile(load_source(path), path.stem)
    return apply_overrides(profile, overrides or {})


def parse_profile(src: Source, name: str) -> Profile:
    data, file = src.data, src.file
    if not isinstance(data, dict):
        raise InputError("a profile must be a mapping with down and up", file, 1)
    for key in data:
        if key not in _TOP_KEYS:
            raise InputError(f"unknown key (known: {', '.join(_TOP_KEYS)})", file,
                             src.line((key,)), str(key))
    for key in ("down", "up"):
        if key not in data:
            raise InputError("missing (a link spec for this direction)", file, 1, key)

    def direction(key: str) -> LinkSpec:
        return parse_linkspec(data[key], file, key, lambda *keys: src.line((key, *keys)))

    return Profile(name=name, description=str(data.get("description", "")),
                   source=str(data.get("source", "")), down=direction("down"), up=direction("up"))


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """`--set loss_pct=1 --set down.rate_mbit=50` → {"loss_pct": "1", "down.rate_mbit": "50"}."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise InputError(f"expected KEY=VALUE, got {pair!r}", field="--set")
        out[key.strip()] = value.strip()
    return out


def apply_overrides(profile: Profile, overrides: dict[str, Any]) -> Profile:
    """Override link parameters in both directions (`loss_pct`) or one (`down.loss_pct`)."""
    down, up = profile.down, profile.up
    for key, raw in overrides.items():
        direction, _, param = key.rpartition(".")
        if direction not in ("", "down", "up") or param not in field_names() \
                or param == "gemodel":
            raise InputError(f"cannot override {key!r} (use PARAM, down.PARAM or up.PARAM with "
                             f"PARAM in {', '.join(f for f in field_names() if f != 'gemodel')})",
                             field="--set")
        value = _override_value(param, raw, key)
        if direction in ("", "down"):
            down = replace(down, **{param: value})
        if direction in ("", "up"):
            up = replace(up, **{param: value})
    for spec, where in ((down, "down"), (up, "up")):
        check_linkspec(spec, "--set", lambda _key: None, where)
    return replace(profile, down=down, up=up)


def _override_value(param: str, raw: Any, key: str) -> Any:
    if param == "jitter_distribution":
        return str(raw)
    try:
        return int(raw) if param == "queue_packets" else float(raw)
    except (TypeError, ValueError):
        raise InputError(f"must be a number, got {raw!r}", field=key) from None
