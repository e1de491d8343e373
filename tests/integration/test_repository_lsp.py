"""The repository as context over LSP (issue 48): a server started on a workspace folder
indexes it in the background, then offers the model what another file's alike line holds at
the cursor, and forgets a file the client says was deleted. The index itself:
tests/unit/test_repository.py and tests/unit/test_lsp_repository.py."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.support.lsp_wire import WireServer
from tests.support.wait import wait_for

# `dg-lsp serve` whose engine takes the first of the texts it is offered (InfillRequest.choices),
# and writes `'other.toml')` where it is offered none.
CHOOSING_SERVER = """
from dg_lsp.lsp.server import create_server
from tests.support.scripted import Scripted

class Choosing(Scripted):
    def infill_stream(self, request, cancel=None, document=None):
        self.texts = [request.choices[0] if request.choices else "'other.toml')"]
        return super().infill_stream(request, cancel, document)

create_server(Choosing()).start_io()
"""
MAIN = "def run():\n    value = load_config("


def suggestion(wire: WireServer, folder: Path) -> str | None:
    """The suggestion in a new document of `folder` holding MAIN (a new one each time: the
    server keeps a document's suggestions while its text is the same)."""
    uri = (folder / f"main_{uuid.uuid4().hex}.py").as_uri()
    wire.open(uri, MAIN)
    result = wire.inline(uri, 1, len("    value = load_config("))["result"]
    items = result["items"] if isinstance(result, dict) else (result or [])
    return items[0]["insertText"] if items else None


def test_another_files_text_is_offered_once_the_folder_is_indexed_and_not_after_its_deletion(
        tmp_path):
    folder = tmp_path / "pkg"
    folder.mkdir()
    config = folder / "config.py"
    config.write_text("def setup():\n    value = load_config('app.toml')\n")
    wire = WireServer(None, options={"minConfidence": 0}, root_uri=tmp_path.as_uri(),
                      python_args=("-c", CHOOSING_SERVER))
    try:
        wait_for(lambda: suggestion(wire, folder) == "'app.toml')", what="the indexed folder")
        config.unlink()
        wire.notify("workspace/didChangeWatchedFiles",
                    {"changes": [{"uri": config.as_uri(), "type": 3}]})
        assert suggestion(wire, folder) == "'other.toml')"
    finally:
        wire.close()
