"""A Rust cross toolchain from Debian's archive, for machines whose rustup cannot add a target.

Debian bookworm ships a current Rust for its web browsers (`rustc-web`, in bookworm-security) with the standard
library of every release architecture (`libstd-rust-web-dev`). This script downloads the compiler, its libraries
(the host's standard library, its driver and LLVM) and the target's standard library, checks each package against
the archive's SHA-256, and unpacks them under a private directory, with a `rustc` wrapper that finds its libraries.
Nothing is installed system-wide; Cargo uses the wrapper through RUSTC.

    python3 debian_rust.py <directory> <debian architecture of the target, e.g. arm64>

Prints the wrapper's path. Re-running with the same version reuses the directory.
"""

import hashlib
import io
import lzma
import re
import sys
import tarfile
import urllib.request
from pathlib import Path

ARCHIVE = "http://deb.debian.org/debian-security"
SUITE = "bookworm-security"
HOST = "amd64"
HOST_LIBS = "usr/lib/x86_64-linux-gnu"


def packages(arch: str) -> dict[str, dict[str, str]]:
    """The suite's package index for `arch`: name -> fields."""
    url = f"{ARCHIVE}/dists/{SUITE}/main/binary-{arch}/Packages.xz"
    text = lzma.decompress(urllib.request.urlopen(url, timeout=120).read()).decode()
    index = {}
    for stanza in text.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z0-9-]+): (.*)$", stanza, re.M))
        if "Package" in fields:
            index[fields["Package"]] = fields
    return index


def depends(fields: dict[str, str], pattern: str) -> str:
    """The one dependency of a package whose name matches `pattern`."""
    names = [d.strip().split(" ")[0] for d in fields.get("Depends", "").split(",")]
    found = [n for n in names if re.fullmatch(pattern, n)]
    if len(found) != 1:
        sys.exit(f"[package] {fields['Package']} depends on {found or 'nothing'} matching {pattern}")
    return found[0]


def unpack(fields: dict[str, str], into: Path) -> None:
    """Downloads a package, checks its SHA-256 and extracts its data archive into `into`."""
    deb = urllib.request.urlopen(f"{ARCHIVE}/{fields['Filename']}", timeout=600).read()
    if hashlib.sha256(deb).hexdigest() != fields["SHA256"]:
        sys.exit(f"[package] {fields['Filename']} does not match the archive's SHA-256")
    if not deb.startswith(b"!<arch>\n"):
        sys.exit(f"[package] {fields['Filename']} is not a Debian package")
    offset = 8
    while offset < len(deb):  # ar members: a 60-byte header (name, ..., size at 48-58), data padded to 2 bytes
        name, size = deb[offset : offset + 16].decode().strip(), int(deb[offset + 48 : offset + 58])
        if name.startswith("data.tar"):
            data = deb[offset + 60 : offset + 60 + size]
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                archive.extractall(into, filter="tar")
            return
        offset += 60 + size + size % 2
    sys.exit(f"[package] {fields['Filename']} has no data archive")


def main() -> None:
    directory, target_arch = Path(sys.argv[1]), sys.argv[2]
    host, target = packages(HOST), packages(target_arch)
    rustc = host["rustc-web"]
    version = rustc["Version"]
    root = directory / version.replace("~", "_").replace("+", "_")
    wrapper = root / "rustc"
    if not wrapper.exists():
        std_dev = host["libstd-rust-web-dev"]
        driver = host[depends(std_dev, r"libstd-rust-web-[0-9.]+")]
        llvm = host[depends(driver, r"libllvm[0-9]+")]
        target_std = target["libstd-rust-web-dev"]
        if target_std["Version"] != version:
            sys.exit(f"[package] {target_arch} standard library {target_std['Version']} is not rustc {version}")
        tree = root / "tree"
        for fields in (rustc, std_dev, driver, llvm, target_std):
            label = f"{fields['Package']} {fields['Version']} ({fields['Architecture']})"
            print(f"[package] fetching {label}", file=sys.stderr)
            unpack(fields, tree)
        wrapper.write_text(
            "#!/bin/sh\n"
            f'LD_LIBRARY_PATH="{tree / HOST_LIBS}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" '
            f'exec "{tree / "usr/bin/rustc"}" "$@"\n'
        )
        wrapper.chmod(0o755)
    print(wrapper)


if __name__ == "__main__":
    main()
