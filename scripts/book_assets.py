"""The book's JavaScript, fetched from npm at build time and served by the book itself.

Out of the box, Jupyter Book 1.x pages load MathJax, require.js and the ipywidgets HTML manager
from CDNs, and notebook outputs such as bertviz's load d3 and jQuery from CDNs too. The built book
must work with no network, so this script

    fetch     downloads each package in ASSETS with `npm pack` (exact versions, never committed)
              and copies the files the book needs into VENDOR_SOURCE/_vendor/<package>/;
              `_config.yml` hands VENDOR_SOURCE to Sphinx as `html_extra_path`, so they land in
              _build/html/_vendor/ (not in `_static/`: Jupyter Book adds every `.js` under
              `_static/` to every page);
    localise  rewrites the CDN addresses that notebook outputs use (ASSETS' `cdn` aliases) into
              page-relative paths to those copies, then fails if any page would still fetch
              something from another host.

book/_extra/_js/ipywidgets-setup.js tells require.js where the widget manager's files are.
To serve one more library, add one line to ASSETS. Pages refer to `_vendor/...` through relative
URLs, so the book works at `/` and under a sub-path (a GitHub Pages project site) alike.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR_SOURCE = ROOT / "book" / "_vendor_js"  # ignored by git; `html_extra_path` in _config.yml
VENDOR_DIR = "_vendor"  # where the files live inside the built site


@dataclass(frozen=True)
class Asset:
    """An npm package, the files of it the book serves, and the CDN addresses those replace."""

    package: str
    version: str  # exact: the build must not change under us
    files: tuple[str, ...]  # glob patterns inside the package
    cdn: Mapping[str, str] = field(default_factory=dict)  # CDN address -> file in the package

    @property
    def target(self) -> str:
        """Where the package's files live, relative to the site root."""
        return f"{VENDOR_DIR}/{self.package}"


FONTS = ("dist/*.woff2", "dist/*.woff", "dist/*.ttf", "dist/*.eot", "dist/*.svg")
ASSETS = (
    # Loaded by every page with widgets, as `nb_ipywidgets_js` in _config.yml says.
    # bertviz's output loads its own copy first (harmless: require.js keeps the one it finds).
    Asset("requirejs", "2.3.7", ("require.js",),
          {"https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js": "require.js"}),
    # Bundles @jupyter-widgets/base, controls and output, with Font Awesome for the icons.
    Asset("@jupyter-widgets/html-manager", "1.0.15", ("dist/embed-amd.js", *FONTS)),
    # The whole es5 tree: MathJax loads TeX extensions and fonts on demand (`mathjax_path`).
    Asset("mathjax", "3.2.2", ("es5/**/*",)),
    # For bertviz, whose output asks require.js for these (jQuery 2.0.0 is not on npm).
    Asset("d3", "5.7.0", ("dist/d3.min.js",),
          {"https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min": "dist/d3.min"}),
    Asset("jquery", "2.2.4", ("dist/jquery.min.js",),
          {"https://cdnjs.cloudflare.com/ajax/libs/jquery/2.0.0/jquery.min": "dist/jquery.min",
           "https://ajax.googleapis.com/ajax/libs/jquery/2.0.0/jquery.min": "dist/jquery.min"}),
)  # fmt: skip


def manifest_digest(assets: tuple[Asset, ...] = ASSETS) -> str:
    """A digest of ASSETS, so a fetch is redone exactly when the list changes."""
    text = json.dumps([(a.package, a.version, a.files) for a in assets])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def npm_pack(asset: Asset, workdir: Path) -> Path:
    """Download one package tarball from the npm registry and unpack it; returns its root."""
    spec = f"{asset.package}@{asset.version}"
    result = subprocess.run(
        ["npm", "pack", spec, "--json", "--pack-destination", str(workdir)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.exit(f"npm pack {spec} failed:\n{result.stderr}")
    tarball = workdir / json.loads(result.stdout)[0]["filename"]
    unpacked = workdir / tarball.name.removesuffix(".tgz")
    with tarfile.open(tarball) as archive:
        archive.extractall(unpacked, filter="data")
    return unpacked / "package"  # npm tarballs keep everything under package/


def fetch(destination: Path = VENDOR_SOURCE) -> None:
    """Put ASSETS' files under destination/_vendor/, unless they are there already."""
    stamp = destination / ".manifest"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == manifest_digest():
        print(f"book assets: up to date in {destination.relative_to(ROOT)}")
        return
    if shutil.which("npm") is None:
        sys.exit("npm is needed to fetch the book's JavaScript: apt-get install -y npm")
    shutil.rmtree(destination, ignore_errors=True)
    with tempfile.TemporaryDirectory() as workdir:
        for asset in ASSETS:
            package = npm_pack(asset, Path(workdir))
            copied = 0
            for pattern in asset.files:
                for source in package.glob(pattern):
                    if source.is_file():
                        target = destination / asset.target / source.relative_to(package)
                        target.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(source, target)
                        copied += 1
            if not copied:
                sys.exit(f"{asset.package}@{asset.version} has no files matching {asset.files}")
            print(f"book assets: {asset.package}@{asset.version} ({copied} files)")
    stamp.write_text(manifest_digest(), encoding="utf-8")


def pages(site: Path) -> Iterator[Path]:
    yield from sorted(site.rglob("*.html"))


def localise_page(text: str, page: Path, site: Path) -> str:
    """Point the CDN addresses in one page at the book's copies, relative to the page."""
    to_root = os.path.relpath(site, page.parent).replace(os.sep, "/")
    for asset in ASSETS:
        for url, file in asset.cdn.items():
            text = text.replace(url, f"{to_root}/{asset.target}/{file}")
    return text


class _Fetches(HTMLParser):
    """Collects the addresses a browser fetches while loading a page (not the links it shows)."""

    FETCHING_RELS = {"stylesheet", "preload", "modulepreload", "prefetch", "preconnect",
                     "dns-prefetch", "icon", "shortcut", "apple-touch-icon", "manifest"}  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag in {"script", "img", "iframe", "source", "audio", "video", "embed", "track"}:
            self.urls.append(values.get("src", ""))
        elif tag == "link" and self.FETCHING_RELS & set(values.get("rel", "").lower().split()):
            self.urls.append(values.get("href", ""))
        elif tag == "object":
            self.urls.append(values.get("data", ""))
        if "style" in values:
            self.urls += re.findall(r"url\(\s*([^)]*)\)", values["style"])


EXTERNAL = re.compile(r"^\s*['\"]?(?:https?:)?//", re.IGNORECASE)
CSS_EXTERNAL = re.compile(r"(?:url\(\s*['\"]?|@import\s+['\"])((?:https?:)?//[^'\")\s]+)")


def external_fetches(site: Path) -> list[str]:
    """Every address on another host that a page or stylesheet of the site would fetch."""
    found = []
    for page in pages(site):
        parser = _Fetches()
        parser.feed(page.read_text(encoding="utf-8"))
        rel = page.relative_to(site)
        found += [f"{rel}: {url.strip()}" for url in parser.urls if EXTERNAL.match(url)]
    for sheet in sorted(site.rglob("*.css")):
        rel = sheet.relative_to(site)
        text = sheet.read_text(encoding="utf-8", errors="replace")
        found += [f"{rel}: {url}" for url in CSS_EXTERNAL.findall(text)]
    return found


def localise(site: Path) -> None:
    """Rewrite CDN aliases in every page of a built site, then check nothing external remains."""
    changed = 0
    for page in pages(site):
        text = page.read_text(encoding="utf-8")
        new = localise_page(text, page, site)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed += 1
    missing = [a.target for a in ASSETS if not (site / a.target).is_dir()]
    if missing:
        sys.exit(f"{site} lacks {missing}: is book/_vendor_js in _config.yml's html_extra_path?")
    leaks = external_fetches(site)
    if leaks:
        sys.exit("These pages would fetch from the network:\n  " + "\n  ".join(leaks))
    print(f"book assets: {changed} pages pointed at local copies; no page fetches from elsewhere")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="download ASSETS from npm into book/_vendor_js/")
    localise_cmd = commands.add_parser("localise", help="rewrite CDN addresses in a built site")
    localise_cmd.add_argument("site", type=Path, nargs="?", default=ROOT / "_build" / "html")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        fetch()
    else:
        localise(args.site)


if __name__ == "__main__":
    main()
