"""The investigate page in a real headless Chromium (Debian's): laid out, drawn, scripted.

Two looks: the DOM after the page's script ran (it records how many lanes, op bars and log
cells have a non-empty box, i.e. were laid out), and a screenshot whose pixels must show the
timeline's colours: blue writes, green reads, and the red of the lost write.
"""

from __future__ import annotations

import dataclasses
import re
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from kmon.dashboards import tools
from kmon.investigate import Evidence, investigate
from kmon.investigate.page import render
from kmon.synth import SynthConfig, healthy
from tests.helpers import missing_tool

KEY, VALUE, OFFSET, WINDOW = 0, 8589934619, 59, 2
RED, BLUE, GREEN = (0xD6, 0x27, 0x28), (0x1F, 0x77, 0xB4), (0x2C, 0xA0, 0x2C)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def chromium() -> str:
    path = tools.chromium()
    if path is None:
        missing_tool("chromium", "`make setup` (kmon dashboards install-tools) apt-get installs "
                     "Debian's chromium")
    return path


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    ops = list(healthy(3000, SynthConfig(keys=4, processes=4, keys_per_process=2, seed=7)))
    out = []
    for o in ops:
        if o.type == "ok" and o.f in ("poll", "txn") and o.value:
            value = [("poll", {k: [(off, v) for off, v in pairs if not (k == KEY and v == VALUE)]
                               for k, pairs in m[1].items()}) if m[0] == "poll" and m[1] else m
                     for m in o.value]
            o = dataclasses.replace(o, value=value)
        out.append(o)
    inv = investigate([("", o) for o in out], Evidence("lost-write", KEY, offsets=[OFFSET],
                                                       values=[VALUE]), source="test", n=WINDOW)
    bars = [o for o in inv.ops if o.f in ("send", "poll", "txn")]
    expected = {"lanes": len({o.process for o in bars}), "ops": len(bars),
                "cells": (WINDOW * 2 + 1) * (1 + len({o.process for o in inv.ops}))}
    path = tmp_path_factory.mktemp("page") / "story.html"
    path.write_text(render(inv))
    return path, expected


def _run(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def test_the_browser_lays_out_every_lane_bar_and_cell(
    chromium: str, page: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    path, expected = page
    done = _run(chromium, tmp_path / "profile", "--dump-dom", path.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    m = re.search(r'<body data-rendered="lanes=(\d+) ops=(\d+) cells=(\d+)"', done.stdout)
    assert m, "the page's script did not run: " + done.stdout[:500]
    assert {"lanes": int(m[1]), "ops": int(m[2]), "cells": int(m[3])} == expected


def _pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of RGB(A) pixels of a non-interlaced 8-bit PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, b"", None
    while pos < len(png):
        (length,), kind = struct.unpack(">I", png[pos:pos + 4]), png[pos + 4:pos + 8]
        data = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    assert head is not None
    width, height, depth, color, _, _, interlace = head
    assert depth == 8 and color in (2, 6) and interlace == 0, head
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def test_the_screenshot_shows_writes_reads_and_the_lost_write(
    chromium: str, page: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    path, _ = page
    shot = tmp_path / "shot.png"
    done = _run(chromium, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1300,900",
                "--hide-scrollbars", path.as_uri())
    assert shot.is_file(), done.stderr[-2000:]
    width, bpp, rows = _pixels(shot.read_bytes())
    counts = dict.fromkeys((RED, BLUE, GREEN), 0)
    for row in rows:
        for x in range(width):
            px = tuple(row[x * bpp:x * bpp + 3])
            if px in counts:
                counts[px] += 1
    # each colour fills at least a few log cells' worth of pixels (a cell is 34x22)
    assert all(n > 300 for n in counts.values()), counts
