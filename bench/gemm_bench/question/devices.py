"""Device identity: which GPU a result was measured on, and which results a page selects.

A result records the name the driver reports (``NVIDIA H100 80GB HBM3``); its identity is the
*slug* of that name (``h100-80gb-hbm3``), which is also the second half of the cache file name.
Pages and roles select devices by an exact slug or by an alias from :data:`ALIASES`, never by a
substring: ``h200`` must not select a ``GH200 480GB`` result, and adding a device to the cache
must not change which result an existing page or role shows.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Short names an author may write in ``:devices:`` or ``NAME@DEVICE``, each naming exactly one
#: device slug (the slug of the name ``torch.cuda.get_device_name()`` reports for that SKU).
#: Every slug is also its own selector; an alias never names two devices.
ALIASES: dict[str, str] = {
    "h100": "h100-80gb-hbm3",
    "h100-sxm": "h100-80gb-hbm3",
    "h100-pcie": "h100-pcie",
    "h200": "h200",
    "gh200": "gh200-480gb",
    "b200": "b200",
    "gb200": "gb200",
    "b300": "b300-sxm6-ac",
    "rtx-pro-6000": "rtx-pro-6000-blackwell-server-edition",
}


def device_slug(name: str) -> str:
    """A file-name-safe device id: ``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``.

    Idempotent (a slug is its own slug), so a slug can stand for a device wherever a name can.
    """
    words = name.lower().replace("nvidia", " ").replace("_", " ").replace("-", " ").split()
    slug = "-".join(w for w in ("".join(ch for ch in w if ch.isalnum() or ch == ".") for w in words) if w)
    return slug.strip("-.") or "unknown-device"


def device_label(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``H100 80GB HBM3``: tabs and legends need no vendor prefix."""
    return name.removeprefix("NVIDIA ").strip() or name


def selector_label(selector: str) -> str:
    """The tab label of the device a selector names, from its slug: ``h100`` -> ``H100 80GB HBM3``, the
    :func:`device_label` of the name the driver reports for it (for the H100 and the H200 exactly), so a
    GPU a page has not measured gets a tab of the same name as its measured tabs elsewhere on the page
    (tabs of one name switch together): it read ``H100-80GB-HBM3`` beside ``H100 80GB HBM3`` (session 19)."""
    return normalize_selector(selector).replace("-", " ").upper()


def normalize_selector(selector: str) -> str:
    """The slug a selector names: an alias's device, else the selector itself as a slug."""
    key = selector.strip().lower()
    return ALIASES.get(key, key)


def selects(selector: str, device_name: str) -> bool:
    """Whether ``selector`` (a slug or an alias) names the device called ``device_name``."""
    return normalize_selector(selector) == device_slug(device_name)


def select(selector: str, device_names: Iterable[str]) -> str | None:
    """The one device of ``device_names`` that ``selector`` names, or None."""
    for name in device_names:
        if selects(selector, name):
            return name
    return None
