"""A JPEG segment walker: frame type and the software a file says wrote it (UNTRUSTED_CONTENT).

Reads only the headers before the first scan; never decodes pixels and never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from PIL import Image

from verilive.face.image import jpeg_segments

__all__ = ["EDITORS", "JpegInfo", "editing_signs", "jpeg_info"]


# Names of editing software, looked for in EXIF Software/ProcessingSoftware, XMP CreatorTool and
# softwareAgent, and JPEG comments (never in the raw XMP packet, whose namespaces say "adobe").
EDITORS = re.compile(
    r"photoshop|adobe|lightroom|gimp|snapseed|pixelmator|affinity|paint\.net|facetune|faceapp|picsart|"
    r"photopea|canva|meitu|vsco|luminar|capture one|darktable|rawtherapee|imagemagick|graphicsmagick|"
    r"photoscape|acdsee|corel|paintshop|inkscape|krita|fotor|befunky|remini|airbrush|youcam",
    re.I,
)
_XMP_HEADER = b"http://ns.adobe.com/xap/1.0/\x00"
_XMP_TOOLS = re.compile(rb"(?:CreatorTool|softwareAgent)(?:=\"|>)([^\"<]{1,200})")
_EXIF_SOFTWARE_TAGS = (0x0131, 0x000B)  # Software, ProcessingSoftware


@dataclass(frozen=True)
class JpegInfo:
    is_jpeg: bool
    progressive: bool = False
    # Software names the file declares (EXIF, XMP, comments).
    software: tuple[str, ...] = ()
    photoshop_block: bool = False  # APP13 "Photoshop 3.0" (image resources of Adobe software)
    adobe_marker: bool = False  # APP14 "Adobe" (Adobe encoders; browsers and cameras do not write it)


def _exif_software(app1: bytes) -> list[str]:
    try:
        exif = Image.Exif()
        exif.load(app1)
        return [str(exif[t]).strip("\x00 ") for t in _EXIF_SOFTWARE_TAGS if exif.get(t)]
    except Exception:  # malformed EXIF is common and not our concern here
        return []


def jpeg_info(data: bytes) -> JpegInfo:
    """Walk the JPEG segments up to the scan: frame type and what software wrote it. Never raises."""
    if len(data) < 4 or data[:2] != b"\xff\xd8":
        return JpegInfo(False)
    progressive = photoshop = adobe = False
    software: list[str] = []
    for marker, body in jpeg_segments(data):
        if marker in (0xC2, 0xC6, 0xCA, 0xCE):
            progressive = True
        elif marker == 0xE1 and body.startswith(b"Exif\x00"):
            software += _exif_software(body)
        elif marker == 0xE1 and body.startswith(_XMP_HEADER):
            software += [m.decode("utf-8", "replace") for m in _XMP_TOOLS.findall(body)]
        elif marker == 0xED and body.startswith(b"Photoshop 3.0"):
            photoshop = True
        elif marker == 0xEE and body.startswith(b"Adobe"):
            adobe = True
        elif marker == 0xFE:
            software.append(body[:200].decode("latin-1"))
        elif marker == 0xDA:  # start of scan: no more headers
            break
    return JpegInfo(True, progressive, tuple(software), photoshop, adobe)


def editing_signs(jpeg: JpegInfo) -> list[str]:
    """Editing software named in the file, Adobe segments, a progressive (re-saved) encoding."""
    out = []
    editors = sorted({m.group(0).lower() for s in jpeg.software if (m := EDITORS.search(s))})
    if editors:
        out.append("written by editing software (" + ", ".join(editors) + ")")
    if jpeg.photoshop_block or jpeg.adobe_marker:
        out.append("Adobe/Photoshop segments")
    if jpeg.progressive:
        out.append("progressive JPEG (camera streams are encoded baseline)")
    return out
