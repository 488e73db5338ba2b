"""A Rust cross toolchain from Debian's archive, for machines whose rustup cannot add a target.

Debian bookworm ships a current Rust for its web browsers (`rustc-web`, in bookworm-security) with the standard
library of every release architecture (`libstd-rust-web-dev`). This script downloads the compiler, its libraries
(the host's standard library, its driver and LLVM) and the target's standard library, authenticates them as apt
does (the suite's InRelease verified with gpgv against the Debian archive keyring, the package indexes against its
SHA-256 list, each package against its index), and unpacks them under a private directory, with a `rustc` wrapper
that finds its libraries. Nothing is installed system-wide; Cargo uses the wrapper through RUSTC.

    python3 debian_rust.py <directory> <debian architecture of the target, e.g. arm64>

Prints the wrapper's path. Re-running with the same version reuses the directory.
"""

import hashlib
import io
import lzma
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

ARCHIVE = "https://deb.debian.org/debian-security"
SUITE = "bookworm-security"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
HOST = "amd64"
HOST_LIBS = "usr/lib/x86_64-linux-gnu"


def fetch(path: str) -> bytes:
    return urllib.request.urlopen(f"{ARCHIVE}/{path}", timeout=600).read()


def release_digests() -> dict[str, str]:
    """The suite's signed file list (InRelease, verified with gpgv): path under dists/<suite>/ -> SHA-256."""
    with tempfile.NamedTemporaryFile(suffix=".InRelease") as signed:
        signed.write(fetch(f"dists/{SUITE}/InRelease"))
        signed.flush()
        checked = subprocess.run(
            ["gpgv", "--keyring", KEYRING, "--output", "-", signed.name], capture_output=True, check=False
        )
    if checked.returncode != 0:
        sys.exit(f"[package] {SUITE} InRelease is not signed by {KEYRING}: {checked.stderr.decode().strip()}")
    text = checked.stdout.decode()
    sha256 = text.split("\nSHA256:\n", 1)[1]
    return {m[1]: m[0] for m in re.findall(r"^ ([0-9a-f]{64}) +\d+ (\S+)$", sha256, re.M)}


def packages(arch: str, digests: dict[str, str]) -> dict[str, dict[str, str]]:
    """The suite's package index for `arch`, checked against InRelease: name -> fields."""
    name = f"main/binary-{arch}/Packages.xz"
    data = fetch(f"dists/{SUITE}/{name}")
    if hashlib.sha256(data).hexdigest() != digests.get(name):
        sys.exit(f"[package] {SUITE} {name} does not match its InRelease")
    text = lzma.decompress(data).decode()
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
    deb = fetch(fields["Filename"])
    if hashlib.sha256(deb).hexdigest() != fields["SHA256"]:
        sys.exit(f"[package] {fields['Filename']} does not match its package index")
    if not deb.startswith(b"!<arch>\n"):
        sys.exit(f"[package] {fields['Filename']} is not a Debian package")
    offset = 8
    while offset < len(deb):  # ar members: a 60-byte header (name, ..., size at 48-58), data padded to 2 bytes
        name, size = deb[offset : offset + 16].decode().strip(), int(deb[offset + 48 : offset + 58])
        if name.startswith("data.tar"):
            data = deb[offset + 60 : offset + 60 + size]
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                extract(archive, into)
            return
        offset += 60 + size + size % 2
    sys.exit(f"[package] {fields['Filename']} has no data archive")


def extract(archive: tarfile.TarFile, into: Path) -> None:
    """Extracts every member inside `into`: no absolute path, no `..` (the "tar" filter where tarfile has one)."""
    if hasattr(tarfile, "tar_filter"):
        archive.extractall(into, filter="tar")
        return
    members = archive.getmembers()
    for member in members:
        if member.name.startswith("/") or ".." in Path(member.name).parts:
            sys.exit(f"[package] refusing the archive member {member.name}")
        if member.islnk() and (member.linkname.startswith("/") or ".." in Path(member.linkname).parts):
            sys.exit(f"[package] refusing the hard link {member.name} -> {member.linkname}")
    archive.extractall(into, members)


def main() -> None:
    directory, target_arch = Path(sys.argv[1]), sys.argv[2]
    digests = release_digests()
    host, target = packages(HOST, digests), packages(target_arch, digests)
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
        partial = root / "rustc.partial"
        partial.write_text(
            "#!/bin/sh\n"
            f'LD_LIBRARY_PATH="{tree / HOST_LIBS}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" '
            f'exec "{tree / "usr/bin/rustc"}" "$@"\n'
        )
        partial.chmod(0o755)
        os.replace(partial, wrapper)  # the wrapper exists only once everything it needs is unpacked
    print(wrapper)


if __name__ == "__main__":
    main()
