"""Released versions of a PyPI package's Python sources, fetched with pip into the user's cache.

The held-out code the bench and the evaluation run on (dg_lsp.measure.eval.heldout) and the real
edits between consecutive releases (engine.edits.real, `dg-engine version-edits`) are
fetched the same way: `pip download --no-deps` from the package index pip is set up for,
the release's .py files kept under ~/.cache/dg-lsp (XDG_CACHE_HOME is honoured) and reused.

Wheels by default: pip only unpacks them. An sdist is taken only when asked (`sdist=True`)
and no wheel exists, because pip runs an sdist's own build code to read its metadata.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

PIP_TIMEOUT = 300  # seconds for one pip command
# Final releases only: a pre-release or a dev build is not what users upgraded to.
FINAL = re.compile(r"\d+(?:\.\d+)*")


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dg-lsp"


def versions_cache() -> Path:
    """Where `dg-engine version-edits` and the next-edit evaluation keep releases."""
    return cache_root() / "versions"


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True,
                              text=True, timeout=PIP_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise OSError(f"pip {args[0]} took more than {PIP_TIMEOUT} s") from exc


def _reason(stderr: str) -> str:
    """What pip says went wrong: its first ERROR line (its warnings come before it), else its
    last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
    return (errors or lines[-1:] or [""])[0][:300]


def release_versions(package: str) -> list[str]:
    """The package's final releases on the index, oldest first.

    Raises OSError with pip's reason when the index cannot be read."""
    run = _pip("index", "versions", package)
    found = re.search(r"^Available versions: (.+)$", run.stdout, re.MULTILINE)
    if run.returncode != 0 or found is None:
        raise OSError(f"cannot list the releases of {package} with pip "
                      f"({_reason(run.stderr)})")
    finals = [v.strip() for v in found.group(1).split(",") if FINAL.fullmatch(v.strip())]
    return sorted(finals, key=lambda v: tuple(int(part) for part in v.split(".")))


def consecutive(versions: list[str], count: int, last: str | None = None) -> list[str]:
    """The `count` releases that end at `last` (default: the newest), oldest first."""
    if last is not None:
        if last not in versions:
            raise ValueError(f"no release {last} among {', '.join(versions[-8:])}")
        versions = versions[:versions.index(last) + 1]
    return versions[-count:] if count > 0 else []


def fetch_sources(package: str, version: str, folder: Path, sdist: bool = False) -> Path:
    """`folder`, holding the Python sources of `package==version` (fetched on first use:
    the wheel, or the sdist when `sdist` and no wheel exists).

    Raises OSError with pip's reason when pip cannot fetch it."""
    if (folder / ".complete").exists():
        return folder
    with tempfile.TemporaryDirectory() as download:
        base = ["download", "--quiet", "--no-deps", "--dest", download, f"{package}=={version}"]
        run = _pip(*base, "--only-binary", ":all:")
        archives = list(Path(download).glob("*.whl"))
        if not archives and sdist:
            run = _pip(*base, "--no-binary", ":all:")
            archives = [p for p in Path(download).iterdir()
                        if p.name.endswith((".tar.gz", ".zip"))]
        if run.returncode != 0 or not archives:
            why = _reason(run.stderr) or "no wheel"
            raise OSError(f"cannot fetch {package}=={version} with pip ({why})")
        folder.mkdir(parents=True, exist_ok=True)
        for rel, data in _python_files(archives[0]):
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    (folder / ".complete").touch()
    return folder


def _python_files(archive: Path) -> list[tuple[PurePosixPath, bytes]]:
    """(path inside the package, content) of the archive's .py files."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zipped:
            return [(rel, zipped.read(name)) for name in zipped.namelist()
                    if (rel := _kept(name, strip_top=archive.suffix == ".zip")) is not None]
    with tarfile.open(archive) as tar:
        return [(rel, tar.extractfile(member).read())  # type: ignore[union-attr]
                for member in tar.getmembers()
                if member.isfile() and (rel := _kept(member.name, strip_top=True)) is not None]


def _kept(name: str, strip_top: bool) -> PurePosixPath | None:
    """Where an archive's file goes, None unless it is a .py file of the package: a wheel's
    as it installs; an sdist's without its top folder and a `src/` one, so that a file has
    the same path in every release. A path that would leave the folder is skipped."""
    path = PurePosixPath(name)
    if strip_top:
        path = PurePosixPath(*path.parts[1:])
        if path.parts[:1] == ("src",):
            path = PurePosixPath(*path.parts[1:])
    if (path.suffix != ".py" or path.is_absolute() or ".." in path.parts
            or any(part.endswith(".dist-info") for part in path.parts)):
        return None
    return path


def read_source(path: Path) -> str | None:
    """A Python file's text, None when it is not UTF-8 (a binary, another encoding)."""
    try:
        return path.read_bytes().decode("utf-8").replace("\r\n", "\n")
    except (UnicodeDecodeError, OSError):
        return None


def paired_files(old: Path, new: Path) -> list[tuple[str, str, str]]:
    """(relative path, old text, new text) of the .py files both folders hold and that
    changed between them, by path."""
    pairs = []
    for path in sorted(old.rglob("*.py")):
        rel = path.relative_to(old)
        other = new / rel
        if not other.is_file():
            continue
        before, after = read_source(path), read_source(other)
        if before is not None and after is not None and before != after:
            pairs.append((rel.as_posix(), before, after))
    return pairs


def release_pairs(package: str, versions: list[str], cache: Path | None = None,
                  sdist: bool = False) -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    """(older, newer, paired_files) for each two consecutive of `versions` (oldest first),
    fetched into `cache` (default: versions_cache()) as `package-version` folders."""
    root = cache or versions_cache()
    folders = [fetch_sources(package, v, root / f"{package}-{v}", sdist) for v in versions]
    return [(versions[i], versions[i + 1], paired_files(folders[i], folders[i + 1]))
            for i in range(len(versions) - 1)]
