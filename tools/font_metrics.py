"""Write ``bench/gemm_bench/report/dejavu_metrics.py``: DejaVu Sans advance widths for figure layout.

``python tools/font_metrics.py [--check]`` reads matplotlib's bundled ``DejaVuSans.ttf`` and
``DejaVuSans-Bold.ttf`` with :mod:`matplotlib.ft2font` (FreeType, no hinting, sized so that one
pixel is one font unit) and writes, per weight, the advance width of every character the figures
can show (ASCII, Latin-1, Latin Extended-A and the punctuation and symbols listed below), with the
font's typographic ascent, descent and line gap. The figures lay text out from this table, so a
docs build measures text without matplotlib. Kerning is not recorded (pairs such as "AV" or "To"
then measure a little wider than drawn, which errs on the side of room).

``--check`` writes nothing and exits 1 when the committed file differs from what the fonts give
(tests/test_figures.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "gemm_bench" / "report" / "dejavu_metrics.py"

#: Code point ranges (inclusive) and single characters recorded: what titles, labels, device
#: names and value formats use (× · – — µ ≤ ≥ and accented letters among them).
RANGES = ((0x20, 0x7E), (0xA0, 0x17F))
EXTRA = "–—‘’‚“”„†‡•…‰′″‹›€™−∕≈≠≤≥→←↑↓★☆✓"
FONTS = {"normal": "DejaVuSans.ttf", "bold": "DejaVuSans-Bold.ttf"}


def characters() -> list[str]:
    chars = [chr(c) for first, last in RANGES for c in range(first, last + 1)]
    return chars + [c for c in EXTRA if c not in chars]


def measure(path: Path) -> tuple[dict[int, int], dict[str, int]]:
    """(advance per code point, font-wide metrics), in font units."""
    from matplotlib import ft2font

    font = ft2font.FT2Font(str(path))
    units = font.units_per_EM
    font.set_size(units, 72)  # 1 px = 1 font unit
    widths = {}
    for char in characters():
        if font.get_char_index(ord(char)) == 0:
            continue  # not in the font: the layout's fallback width applies
        glyph = font.load_char(ord(char), flags=ft2font.LoadFlags.NO_HINTING)
        widths[ord(char)] = round(glyph.linearHoriAdvance / 65536)
    os2 = font.get_sfnt_table("OS/2")
    assert os2 is not None
    return widths, {"units_per_em": units, "ascent": os2["sTypoAscender"], "descent": -os2["sTypoDescender"],
                    "line_gap": os2["sTypoLineGap"]}


def generate() -> str:
    """The module's text (deterministic: the same fonts give the same bytes)."""
    import matplotlib

    fonts = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    tables = {weight: measure(fonts / name) for weight, name in FONTS.items()}
    (_, normal), (_, bold) = tables["normal"], tables["bold"]
    assert normal == bold, "the two weights' vertical metrics differ: record both"
    lines = [
        '"""DejaVu Sans advance widths and vertical metrics, in font units (generated; do not edit).',
        "",
        f"Written by ``tools/font_metrics.py`` from matplotlib's bundled {' and '.join(FONTS.values())};",
        "run it again after changing the characters it records. No kerning: see that script.",
        '"""',
        "",
        f"UNITS_PER_EM = {normal['units_per_em']}",
        f"ASCENT = {normal['ascent']}  # OS/2 sTypoAscender",
        f"DESCENT = {normal['descent']}  # -OS/2 sTypoDescender",
        f"LINE_GAP = {normal['line_gap']}  # OS/2 sTypoLineGap",
        "",
        "#: Advance width per code point, per weight.",
        "ADVANCES: dict[str, dict[int, int]] = {",
    ]
    for weight, (widths, _) in tables.items():
        lines.append(f'    "{weight}": {{')
        items = [f"{code:#06x}: {width}," for code, width in sorted(widths.items())]
        for start in range(0, len(items), 8):
            lines.append("        " + " ".join(items[start:start + 8]))
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    args = parser.parse_args()
    text = generate()
    if args.check:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT.relative_to(ROOT)} is {'up to date' if same else 'out of date: run tools/font_metrics.py'}")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
