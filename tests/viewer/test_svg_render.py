#!/usr/bin/env python3
"""test_svg_render.py -- render SVG pictures in headless Chromium and check
the result is a real picture, not an empty or broken page.

    test_svg_render.py FILE.svg...
    test_svg_render.py --loopscope BIN --fixture DB [--args "..."]
        (writes `loopscope timeline DB --svg OUT ARGS` and the three
        `loopscope graph DB --kind K -o OUT.svg`, and renders them)

Each SVG is rendered to a 1200x800 PNG; the PNG is decoded here (zlib and
struct, no PIL) and must be larger than a few KiB and use more than one
colour, with enough non-white pixels to be a drawing.  The run_golden.py
cases only check that the SVGs parse as XML; this checks that a browser
draws them.

A broken SVG also renders as a picture: Chromium's XML error page (a pink
box, then the drawing up to the first error).  So each SVG is first parsed
strictly (xml.etree) and loaded in Chromium with --dump-dom, whose DOM must
hold no <parsererror>.  A self-test runs first: truncated, bad-entity,
unclosed-tag and invalid-character SVGs must each be reported (by Chromium
too, not only by the XML parser), and a good one must pass.

Exit 77 (skip) when chromium is not installed, unless CI=true: then 1.
"""
import argparse
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
import xml.etree.ElementTree as ET

SKIP = 77


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def render(chromium, svg, png, tmp):
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp)
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", f"--screenshot={png}",
           "--window-size=1200,800", "file://" + os.path.abspath(svg)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0 or not os.path.exists(png):
        return f"chromium failed (exit {p.returncode}): {p.stderr.strip()[-500:]}"
    return None


def chromium_dom_error(chromium, svg, tmp):
    """Chromium's verdict on the markup: an error string when its DOM holds
    a parsererror (the XML error page), else None."""
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp)
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={profile}", "--dump-dom",
           "file://" + os.path.abspath(svg)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, errors="replace")
    if p.returncode != 0:
        return f"chromium --dump-dom failed (exit {p.returncode}): {p.stderr.strip()[-300:]}"
    if "<parsererror" in p.stdout:
        i = p.stdout.find("<div")
        return f"{svg}: Chromium shows its XML error page: {p.stdout[i:i + 200]}"
    if "<svg" not in p.stdout:
        return f"{svg}: Chromium's DOM has no <svg>"
    return None


def markup_error(chromium, svg, tmp):
    """Strict XML first, then what Chromium makes of it."""
    try:
        ET.parse(svg)
    except ET.ParseError as e:
        return f"{svg}: not well-formed XML: {e}"
    return chromium_dom_error(chromium, svg, tmp)


GOOD_SVG = ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<svg xmlns="http://www.w3.org/2000/svg" width="300" height="100">'
            '<rect width="200" height="60" fill="#2e9e44"/><text x="10" y="90">ok &amp; fine</text>'
            '</svg>\n')
BROKEN_SVGS = {
    "truncated": GOOD_SVG[:GOOD_SVG.index("<text")],
    "bad entity": GOOD_SVG.replace("&amp;", "&nbsp;"),
    "unclosed tag": GOOD_SVG.replace("</text>", ""),
    "invalid character": GOOD_SVG.replace("fine", "fi\x01ne"),
}


def self_test(chromium, tmp):
    """The checks reject what they must: each broken SVG is reported, by
    Chromium's DOM as well as by the XML parser, and a good one passes."""
    errs = []
    for what, text in BROKEN_SVGS.items():
        path = os.path.join(tmp, f"selftest-{what.replace(' ', '-')}.svg")
        with open(path, "w") as f:
            f.write(text)
        if not markup_error(chromium, path, tmp):
            errs.append(f"self-test: a {what} SVG is accepted")
        elif not chromium_dom_error(chromium, path, tmp):
            errs.append(f"self-test: Chromium's error page for a {what} SVG goes unnoticed")
    path = os.path.join(tmp, "selftest-good.svg")
    with open(path, "w") as f:
        f.write(GOOD_SVG)
    err = markup_error(chromium, path, tmp)
    if err:
        errs.append(f"self-test: a good SVG is rejected: {err}")
    return errs


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data):
    """Return (width, height, rows of RGB(A) byte rows, bytes per pixel)."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError("not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if ihdr is None:
        raise ValueError("no IHDR chunk")
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {ctype}, interlace {interlace})")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
            elif f == 4:
                line[i] = (line[i] + paeth(a, b, c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return w, h, rows, bpp


def check_png(png):
    data = open(png, "rb").read()
    if len(data) < 4096:
        return f"{png}: only {len(data)} bytes, an empty page?"
    w, h, rows, bpp = decode_png(data)
    colours, inked = set(), 0
    for row in rows[::2]:                     # every other row: fast enough
        for i in range(0, len(row), bpp * 2):
            px = row[i:i + 3]
            colours.add(px)
            if px != b"\xff\xff\xff":
                inked += 1
    sampled = (h // 2) * (w // 2)
    if len(colours) < 3:
        return f"{png}: {len(colours)} colour(s) only, nothing drawn"
    if inked < sampled // 200:
        return f"{png}: only {inked} of {sampled} sampled pixels are not white"
    print(f"  {w}x{h}, {len(data)} bytes, {len(colours)} colours, "
          f"{100.0 * inked / sampled:.1f}% inked")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("svg", nargs="*")
    ap.add_argument("--loopscope")
    ap.add_argument("--fixture", action="append", default=[])
    ap.add_argument("--args", default="", help="extra timeline arguments")
    ap.add_argument("--keep", help="copy the PNGs to this directory")
    a = ap.parse_args()
    if not a.svg and not (a.loopscope and a.fixture):
        ap.error("give SVG files, or --loopscope and --fixture")
    chromium = find_chromium()
    if not chromium:
        if os.environ.get("CI") == "true":
            print("FAIL: chromium is not installed (CI=true: not skipping)")
            return 1
        print("skip: chromium is not installed (apt-get install chromium)")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="svgrender-")
    try:
        errs = self_test(chromium, tmp)
        if errs:
            print("FAIL self_test\n" + "\n".join(errs))
            return 1
        print(f"ok self_test: {len(BROKEN_SVGS)} broken SVGs reported, a good one accepted")
        svgs = list(a.svg)
        for i, db in enumerate(a.fixture):
            out = os.path.join(tmp, f"timeline-{i}.svg")
            cmds = [(out, [a.loopscope, "timeline", db, "--svg", out, *shlex.split(a.args)])]
            for kind in ("blocking", "tasks", "lifecycle"):
                g = os.path.join(tmp, f"graph-{kind}-{i}.svg")
                cmds.append((g, [a.loopscope, "graph", db, "--kind", kind, "-o", g]))
            for path, cmd in cmds:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                if p.returncode != 0:
                    print(f"FAIL: {' '.join(map(shlex.quote, cmd))}: exit {p.returncode}\n{p.stderr}")
                    return 1
                svgs.append(path)
        failed = 0
        for i, svg in enumerate(svgs):
            png = os.path.join(tmp, f"render-{i}.png")
            print(f"render {svg}")
            err = markup_error(chromium, svg, tmp) or render(chromium, svg, png, tmp)
            if not err:
                try:
                    err = check_png(png)
                except (ValueError, zlib.error, struct.error) as e:
                    err = f"{png}: cannot decode: {e}"
            if a.keep and os.path.exists(png):
                os.makedirs(a.keep, exist_ok=True)
                shutil.copy(png, os.path.join(a.keep, os.path.basename(svg) + ".png"))
            if err:
                print(f"FAIL: {err}")
                failed += 1
        return 1 if failed else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
