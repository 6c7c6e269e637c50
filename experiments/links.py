"""The experiment layer's view of network profiles: the topology's `Profile`, reused as is.

Named profiles come from quicbed.topology.profiles (topology/profiles/*.yaml); inline ones are
validated by the same link-spec parser, with errors re-located to the experiment file. Sweep
values become profile overrides, so `Condition.link` is exactly the path the executor builds.
"""

from __future__ import annotations

from typing import Any

from quicbed.errors import InputError
from quicbed.fields import check_mapping, check_number, check_str
from quicbed.topology import profiles as topo
from quicbed.topology.linkspec import field_names, parse_linkspec
from quicbed.topology.profiles import Profile
from quicbed.yamlio import PathKey, Source

Link = Profile
# rtt_ms is ours: half of it is each direction's delay_ms. gemodel (a mapping) and trace (a file)
# are not sweepable.
LINK_AXES: tuple[str, ...] = (*(f for f in field_names() if f not in ("gemodel", "trace")), "rtt_ms")
_AXIS_TYPES: dict[str, tuple[type, ...]] = {
    "jitter_distribution": (str,),
    "queue_packets": (int,),
    "aqm": (str, dict),  # a queue kind, or a mapping with its parameters
}
_INLINE_KEYS = {"name", "description", "source", "rtt_ms", "down", "up", *field_names()}


def available_profiles() -> list[str]:
    return topo.available_profiles()


def resolve_profile(name: str) -> Link:
    return topo.load_profile(name, {})


def parse_link(src: Source, path: PathKey, spec: Any) -> Link:
    """An inline profile: symmetric keys (rate_mbit, rtt_ms, loss_pct...) and/or down/up."""
    check_mapping(src, path, spec, _INLINE_KEYS, {"name"})
    name = check_str(src, (*path, "name"), spec["name"])
    if "rtt_ms" in spec and "delay_ms" in spec:
        raise src.error((*path, "delay_ms"), "give rtt_ms or delay_ms, not both")
    common = {k: v for k, v in spec.items() if k in field_names()}
    if "rtt_ms" in spec:
        common["delay_ms"] = check_number(src, (*path, "rtt_ms"), spec["rtt_ms"], 0, 20_000) / 2
    dirs = {}
    for d in ("down", "up"):
        own = spec.get(d, {})
        check_mapping(src, (*path, d), own, None, set())
        try:
            dirs[d] = parse_linkspec(common | own, src.file, d)
        except InputError as exc:
            raise src.error(_relocate(path, d, exc.field, spec), exc.detail) from None
    source = str(spec.get("source") or "inline in the experiment file")
    return Profile(name, str(spec.get("description") or ""), source, dirs["down"], dirs["up"])


def _relocate(path: PathKey, direction: str, field: str | None, spec: dict) -> PathKey:
    """Where in the inline spec the link-spec parser's `down.<key>` came from."""
    key = (field or "").split(".")[1:2]
    if not key:
        return (*path, direction)
    if key[0] in spec.get(direction, {}) or key[0] not in (*spec, "delay_ms"):
        return (*path, direction, key[0])  # in down:/up:, or missing there
    if key[0] == "delay_ms" and "rtt_ms" in spec:
        return (*path, "rtt_ms")
    return (*path, key[0])  # a symmetric key


def axis_param(axis: str) -> str | None:
    """The link parameter a sweep axis sets ("down.loss_pct" -> "loss_pct"), None if unknown."""
    if axis in LINK_AXES:
        return axis
    direction, _, param = axis.partition(".")
    if direction in ("down", "up") and param in LINK_AXES and param != "rtt_ms":
        return param
    return None


def is_link_axis(axis: str) -> bool:
    return axis_param(axis) is not None


def topology_overrides(values: dict[str, Any]) -> dict[str, Any]:
    """Sweep values as the topology's overrides: rtt_ms becomes a delay in each direction."""
    out: dict[str, Any] = {}
    for axis, value in values.items():
        if axis == "rtt_ms":
            out |= {"down.delay_ms": value / 2, "up.delay_ms": value / 2}
        else:
            out[axis] = value
    return out


def apply_overrides(link: Link, values: dict[str, Any]) -> Link:
    return topo.apply_overrides(link, topology_overrides(values))


def check_sweep_value(src: Source, path: PathKey, axis: str, value: Any, links: list[Link]) -> Any:
    """One sweep value: the right type, and a valid link for every profile it applies to."""
    types = _AXIS_TYPES.get(axis_param(axis) or "", (int, float))
    if isinstance(value, bool) or not isinstance(value, types):
        raise src.error(path, f"expected {' or '.join(t.__name__ for t in types)}, got {value!r}")
    for link in links:
        try:
            apply_overrides(link, {axis: value})
        except InputError as exc:
            raise src.error(path, f"{exc.detail} (for profile {link.name})") from None
    return value
