"""The repository part of `dg-lsp bench`: what the workspace index (dg_lsp.repository) costs.

- build: seconds to index a root and the memory the index holds after it (tracemalloc's count
  of what is still allocated, on a second build), for this repository (with its tests) and a
  generated repository of GENERATED_FILES Python files in GENERATED_FOLDERS folders;
- retrieval: milliseconds one completion spends reading the index (RepositoryContext: the
  other files' alike lines and the snippets), p50 and p95, at mid-line cursors of the
  generated repository (each file's lines call functions its neighbours define).
"""

from __future__ import annotations

import random
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from dg_lsp.repository.candidates import candidates
from dg_lsp.repository.index import RepositoryIndex
from dg_lsp.repository.retrieve import RepositoryContext
from engine.data.stats import percentile

GENERATED_FILES = 5000
GENERATED_FOLDERS = 50
REQUESTS = 400
ROOT = Path(__file__).resolve().parents[2]


def generate(root: Path, files: int = GENERATED_FILES, folders: int = GENERATED_FOLDERS,
             seed: int = 0) -> None:
    """A package of `files` modules, each defining a class and functions and calling its
    folder's other modules (about 80 lines, 2.5 KB each)."""
    rng = random.Random(seed)
    per_folder = files // folders
    for f in range(folders):
        folder = root / f"pkg{f}"
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        for m in range(per_folder - 1):
            other = rng.randrange(per_folder - 1)
            lines = [f'"""Module {m} of package {f}."""', "",
                     f"from pkg{f}.mod{other} import compute_{other}", "", ""]
            lines += [f"class Store{m}:", f'    """Holds the values of module {m}."""', "",
                      "    def __init__(self, size):", "        self.size = size",
                      "        self.items = []", ""]
            for k in range(8):
                lines += [f"def compute_{m}_{k}(values, limit={k}):",
                          f'    """Step {k} of module {m}."""',
                          f"    total = compute_{other}(values, limit)",
                          f"    store = Store{m}(len(values) + {k})",
                          "    for value in values[:limit]:",
                          "        store.items.append(value * total)", "    return store", ""]
            lines += [f"def compute_{m}(values, limit):", "    return sum(values[:limit])", ""]
            (folder / f"mod{m}.py").write_text("\n".join(lines))


def build_row(name: str, root: Path) -> dict[str, Any]:
    """Files, seconds and megabytes of indexing `root`."""
    started = time.perf_counter()
    index = RepositoryIndex(root)
    count = index.build()
    seconds = time.perf_counter() - started
    tracemalloc.start()
    again = RepositoryIndex(root)
    again.build()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"repository": name, "files": count, "megabytesOfText": round(index.chars / 1e6, 1),
            "buildSeconds": round(seconds, 2), "heldMb": round(held / 1e6, 1)}


def retrieval_rows(root: Path, requests: int = REQUESTS, seed: int = 0
                   ) -> list[dict[str, Any]]:
    """p50 / p95 of one completion's reading of the index at mid-line cursors: the first
    request in a file (its nearest files are ordered, their windows read), and the next one
    in the same file (as while the user types)."""
    from dg_lsp.syntax.languages import language_for

    index = RepositoryIndex(root)
    index.build()
    language = language_for("python")
    rng = random.Random(seed)
    paths = [p for p in index.files() if p.endswith(".py") and index.get(p).text]
    times: dict[str, list[float]] = {"first in a file": [], "next in the same file": []}
    offered = 0
    for _ in range(requests // 2):
        path = rng.choice(paths)
        lines = [ln for ln in index.get(path).text.split("\n") if "= " in ln or "(" in ln]
        for label in times:
            line = rng.choice(lines)
            cut = max(line.find("= ") + 2, line.find("(") + 1)
            before, head = line[:cut].lstrip(), line[:cut]
            repository = RepositoryContext(index, path)
            started = time.perf_counter()
            held = candidates(before, len(before), repository)
            snippets = repository.snippets_for(head, head, language, 144, bool(held))
            times[label].append((time.perf_counter() - started) * 1000)
            offered += bool(held or snippets)
    rows = []
    for label, measured in times.items():
        measured.sort()
        rows.append({"repository": f"generated, {len(index)} files", "request": label,
                     "requests": len(measured), "p50Ms": round(percentile(measured, 50), 3),
                     "p95Ms": round(percentile(measured, 95), 3)})
    rows[0]["withContext"] = rows[1]["withContext"] = round(offered / requests, 2)
    return rows


def repository_section() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dg-lsp-bench-repo-") as folder:
        generated = Path(folder)
        generate(generated)
        return {"build": [build_row("this repository", ROOT),
                          build_row(f"generated, {GENERATED_FILES} files", generated)],
                "retrieval": retrieval_rows(generated)}
