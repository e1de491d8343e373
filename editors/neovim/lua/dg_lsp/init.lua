-- dg-lsp for Neovim: starts the dg-lsp language server and adds
--   * ghost-text completions: Neovim >= 0.12 through vim.lsp.inline_completion; 0.10 and 0.11
--     drawn here with extmarks from textDocument/inlineCompletion while typing, accepted whole,
--     by word or by line,
--   * require("dg_lsp").complete() / :DgComplete: insert the model's completion at the cursor
--     (every version; asked for explicitly, so shown even below the confidence gate),
--   * accept_key without a suggestion shown: ask for one explicitly (ghost text on 0.10 and
--     0.11, marked with its confidence when below the gate; inserted elsewhere),
--   * :DgRewrite [instruction]: rewrite the selected lines with an instruction (asked for when
--     not given), also used by the server's "Rewrite selection with instruction…" code action,
--   * :DgFillHoles [marks]: a completion at every cursor, each its own, from one
--     dg-lsp/fillHoles request, applied as one edit: the cursors are the marks named
--     (`:DgFillHoles a b`), else each line of the visual block where `A` would append (each
--     line's end for a linewise range), else the cursor; require("dg_lsp").fill_holes(),
--   * next-edit suggestions (textDocument/copilotInlineEdit): after a change, the edit it implies
--     elsewhere (the next `count` of a rename), drawn where it applies; <Tab> goes there, then
--     applies it; :DgNextEdit, :DgNextEditAccept, :DgNextEditDismiss,
--   * require("dg_lsp").status(): the engine's state for a statusline, or why the last
--     suggestion was not shown (the server's dg-lsp/suggestion notification).
-- Neovim >= 0.11 registers the server with vim.lsp.config / vim.lsp.enable; 0.8-0.10 use
-- vim.lsp.start on each FileType; 0.7 uses vim.lsp.start_client and buf_attach_client.

local suggestion = require("dg_lsp.suggestion")

local M = {}

M.name = "dg_lsp"
M.rewrite_command = "dg-lsp.rewriteWithInstruction"
M.fill_holes_method = "dg-lsp/fillHoles"

M.defaults = {
  -- How to start the server: the `dg-lsp` console script on PATH.
  cmd = { "dg-lsp", "serve" },
  -- nil: every filetype (the server skips languages not in settings.languages).
  filetypes = nil,
  root_markers = { ".git", "pyproject.toml", "package.json", "Cargo.toml", "go.mod" },
  -- Server settings, camelCase as in dg_lsp/settings.py: model, device, engine, sampler,
  -- languages, holeSize, ... Sent as initializationOptions.
  settings = {},
  -- Neovim >= 0.10: show completions as ghost text while typing.
  inline_completion = true,
  -- An insert-mode key that accepts the ghost text, and otherwise asks for a suggestion now
  -- (triggerKind Invoked: the server answers even below the confidence gate): drawn as ghost
  -- text on Neovim 0.10 and 0.11, inserted at the cursor elsewhere (require("dg_lsp").complete(),
  -- the only way on 0.7-0.9). nil: no key.
  accept_key = "<M-l>",
  -- The ghost text drawn by this plugin on Neovim 0.10 and 0.11 (0.12 uses its own).
  ghost_text = {
    -- Ask this long after the last keystroke: typing fast sends one request, not one a key.
    debounce_ms = 75,
    -- Insert-mode keys, active only while a suggestion is shown; otherwise each does what it
    -- did before (<Tab> inserts a tab). false: no mapping.
    accept = "<Tab>",
    accept_word = "<M-Right>",
    accept_line = "<M-Down>",
    dismiss = "<C-]>",
  },
  -- Next-edit suggestions (a server that advertises experimental.copilotInlineEdit).
  next_edit = {
    -- Ask after each change, this long after the last one. false: only :DgNextEdit asks.
    enabled = true,
    debounce_ms = 400,
    -- Normal- and insert-mode keys, mapped only while a suggestion is shown. accept: to the
    -- suggestion's start first, then apply it; dismiss: clear it (and in insert mode do what
    -- the key does: <Esc> leaves insert mode). false: no mapping.
    accept = "<Tab>",
    dismiss = "<Esc>",
    -- Cursor moves that do not bring the cursor closer to the suggestion before it is cleared.
    clear_after_moves = 3,
  },
  -- Called as on_attach(client, bufnr) for every attached buffer.
  on_attach = nil,
}

M.options = nil
-- The last dg-lsp/engineState notification: { state = "loading"|"ready"|"unavailable", message }.
M.engine = { state = "starting", message = "" }

local function has(version)
  return vim.fn.has("nvim-" .. version) == 1
end

local function notify(message, level)
  vim.notify("dg-lsp: " .. message, level or vim.log.levels.INFO)
end

-- The dg-lsp client attached to a buffer (current buffer when nil).
local function client_for(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local clients
  if vim.lsp.get_clients then
    clients = vim.lsp.get_clients({ bufnr = bufnr, name = M.name })
  elseif has("0.8") then
    clients = vim.lsp.get_active_clients({ bufnr = bufnr, name = M.name })
  else
    clients = {}
    for _, client in pairs(vim.lsp.buf_get_clients(bufnr)) do
      if client.name == M.name then
        table.insert(clients, client)
      end
    end
  end
  return clients[1]
end

-- The dg-lsp client attached to a buffer, or nil.
M.client = client_for

local function request(client, method, params, handler, bufnr)
  if has("0.11") then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

local function cancel_request(client, id)
  if has("0.11") then
    return client:cancel_request(id)
  end
  return client.cancel_request(id)
end

local function notify_client(client, method, params)
  if has("0.11") then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

local function encoding_of(client)
  return client.offset_encoding or "utf-16"
end

-- Byte column -> LSP character in `encoding`, and back.
local function to_lsp_col(line, byte_col, encoding)
  if encoding == "utf-8" then
    return byte_col
  end
  if has("0.11") then
    return vim.str_utfindex(line, encoding, byte_col, false)
  end
  local utf32, utf16 = vim.str_utfindex(line, byte_col)
  return encoding == "utf-16" and utf16 or utf32
end

local function to_byte_col(line, character, encoding)
  if encoding == "utf-8" then
    return math.min(character, #line)
  end
  if has("0.11") then
    return vim.str_byteindex(line, encoding, character, false)
  end
  return vim.str_byteindex(line, character, encoding == "utf-16")
end

local function buf_version(bufnr)
  local versions = vim.lsp.util.buf_versions
  return versions and versions[bufnr] or vim.api.nvim_buf_get_changedtick(bufnr)
end

local function buf_line(bufnr, row)
  return vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
end

-- The LSP range of 1-based lines line1..line2, or of the last characterwise visual selection
-- when it spans exactly those lines.
function M.range_of_lines(bufnr, line1, line2, encoding)
  local start_row, start_col, end_row, end_col = line1 - 1, 0, line2 - 1, nil
  local vstart, vend = vim.fn.getpos("'<"), vim.fn.getpos("'>")
  if vim.fn.visualmode() == "v" and vstart[2] == line1 and vend[2] == line2 then
    start_col = vstart[3] - 1
    local last = buf_line(bufnr, end_row)
    -- '> is the last selected byte; the range ends after its whole character
    local char_end = vim.fn.byteidx(last, vim.fn.charidx(last, vend[3] - 1) + 1)
    end_col = char_end >= 0 and char_end or #last
  end
  local last = buf_line(bufnr, end_row)
  end_col = math.min(end_col or #last, #last)
  return {
    start = { line = start_row, character = to_lsp_col(buf_line(bufnr, start_row), start_col, encoding) },
    ["end"] = { line = end_row, character = to_lsp_col(last, end_col, encoding) },
  }
end

local function done(pattern)
  vim.api.nvim_exec_autocmds("User", { pattern = pattern, modeline = false })
end

local function execute_rewrite(client, bufnr, args)
  request(client, "workspace/executeCommand", { command = M.rewrite_command, arguments = { args } },
    function(err, result)
      if err then
        notify("rewrite failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      elseif result == nil then
        notify("the rewrite produced no edit", vim.log.levels.WARN)
      end
      -- On success the server has already sent workspace/applyEdit, which Neovim applied.
      done("DgRewriteDone")
    end, bufnr)
end

-- Asks for the instruction when args has none, then runs the rewrite command.
function M.rewrite_with_prompt(client, bufnr, args)
  if type(args.instruction) == "string" and args.instruction:match("%S") then
    execute_rewrite(client, bufnr, args)
    return
  end
  vim.ui.input({ prompt = "Rewrite instruction: " }, function(input)
    if input == nil or not input:match("%S") then
      return -- cancelled
    end
    args = vim.deepcopy(args)
    args.instruction = input
    execute_rewrite(client, bufnr, args)
  end)
end

-- :DgRewrite: the command's line range (or the characterwise selection on those lines).
function M.rewrite(opts)
  local bufnr = vim.api.nvim_get_current_buf()
  local client = client_for(bufnr)
  if client == nil then
    notify("no dg-lsp server is attached to this buffer", vim.log.levels.WARN)
    return
  end
  local args = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr), version = buf_version(bufnr) },
    range = M.range_of_lines(bufnr, opts.line1, opts.line2, encoding_of(client)),
  }
  if opts.args and opts.args:match("%S") then
    args.instruction = opts.args
  end
  M.rewrite_with_prompt(client, bufnr, args)
end

-- The LSP positions :DgFillHoles completes at (see the top of this file); nil and a reason
-- when a mark is not set.
function M.fill_positions(bufnr, opts, encoding)
  local places = {} -- { 0-based row, 0-based byte column }
  local marks = vim.split(opts.args or "", "%s+", { trimempty = true })
  if #marks > 0 then
    for _, name in ipairs(marks) do
      local mark = vim.api.nvim_buf_get_mark(bufnr, name)
      if mark[1] == 0 then
        return nil, "mark " .. name .. " is not set in this buffer"
      end
      table.insert(places, { mark[1] - 1, mark[2] })
    end
  elseif opts.range and opts.range > 0 then
    local vstart, vend = vim.fn.getpos("'<"), vim.fn.getpos("'>")
    local block = vim.fn.visualmode() == "\22" and vstart[2] == opts.line1 and vend[2] == opts.line2
    -- a block's right edge: '< and '> hold its corners' bytes (1-based), `$` a huge column
    local edge = block and math.max(vstart[3], vend[3]) or math.huge
    for row = opts.line1 - 1, opts.line2 - 1 do
      table.insert(places, { row, math.min(edge, #buf_line(bufnr, row)) })
    end
  else
    local row, col = unpack(vim.api.nvim_win_get_cursor(0))
    table.insert(places, { row - 1, col })
  end
  local positions = {}
  for _, place in ipairs(places) do
    local line = buf_line(bufnr, place[1])
    table.insert(positions, { line = place[1], character = to_lsp_col(line, math.min(place[2], #line), encoding) })
  end
  return positions
end

-- Each position's own completion (LSP positions), from one dg-lsp/fillHoles request, applied
-- as one edit while the buffer is unchanged; fires User DgFillHolesDone.
function M.fill_holes(bufnr, positions)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local client = client_for(bufnr)
  if client == nil then
    notify("no dg-lsp server is attached to this buffer", vim.log.levels.WARN)
    return done("DgFillHolesDone")
  end
  local version = buf_version(bufnr)
  local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr), version = version }, positions = positions }
  request(client, M.fill_holes_method, params, function(err, result)
    if err then
      notify("completing at every cursor failed: " .. (err.message or vim.inspect(err)), vim.log.levels.WARN)
    elseif buf_version(bufnr) ~= version then
      notify("the buffer changed while the model ran; nothing was inserted", vim.log.levels.WARN)
    else
      local edits, seen = {}, {}
      for _, item in ipairs(type(result) == "table" and result.items or {}) do
        local key = item.range.start.line .. ":" .. item.range.start.character
        if item.text ~= "" and not seen[key] then
          seen[key] = true
          table.insert(edits, { range = item.range, newText = item.text })
        end
      end
      if #edits == 0 then
        notify("the model wrote nothing usable at the cursors")
      else
        vim.lsp.util.apply_text_edits(edits, bufnr, encoding_of(client))
      end
    end
    done("DgFillHolesDone")
  end, bufnr)
end

-- :DgFillHoles [marks]
function M.fill_holes_command(opts)
  local bufnr = vim.api.nvim_get_current_buf()
  local client = client_for(bufnr)
  if client == nil then
    notify("no dg-lsp server is attached to this buffer", vim.log.levels.WARN)
    return
  end
  local positions, reason = M.fill_positions(bufnr, opts, encoding_of(client))
  if positions == nil then
    notify(reason, vim.log.levels.WARN)
    return
  end
  M.fill_holes(bufnr, positions)
end

-- Inserts the model's suggestion at the cursor: textDocument/inlineCompletion asked for
-- explicitly (triggerKind Invoked), which the server answers even below the confidence gate.
function M.complete(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local client = client_for(bufnr)
  if client == nil then
    notify("no dg-lsp server is attached to this buffer", vim.log.levels.WARN)
    return
  end
  local encoding = encoding_of(client)
  local win = vim.api.nvim_get_current_win()
  local row, col = unpack(vim.api.nvim_win_get_cursor(win))
  local character = to_lsp_col(buf_line(bufnr, row - 1), col, encoding)
  local position = { line = row - 1, character = character }
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = position,
    context = { triggerKind = 1 }, -- Invoked: the user asked
  }
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  request(client, "textDocument/inlineCompletion", params, function(err, result)
    if err then
      notify("completion failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return done("DgCompleteDone")
    end
    local items = type(result) == "table" and (result.items or result) or {}
    local item = items[1]
    -- nothing to insert: the server says why in its dg-lsp/suggestion notification
    if item == nil or type(item.insertText) ~= "string" or item.insertText == "" then
      return done("DgCompleteDone")
    end
    if vim.api.nvim_buf_get_changedtick(bufnr) ~= tick then
      return done("DgCompleteDone") -- the buffer changed while the model worked: stale
    end
    -- the range, when given, covers closers after the cursor that the text types again
    local edit = { range = item.range or { start = position, ["end"] = position },
                   newText = item.insertText }
    vim.lsp.util.apply_text_edits({ edit }, bufnr, encoding)
    -- Cursor after the inserted text.
    local lines = vim.split(edit.newText, "\n", { plain = true })
    local end_row = edit.range.start.line + #lines - 1
    local end_col = #lines[#lines]
    if #lines == 1 then
      local start = to_byte_col(buf_line(bufnr, edit.range.start.line), edit.range.start.character, encoding)
      end_col = start + #lines[1]
    end
    if vim.api.nvim_win_get_buf(win) == bufnr then
      vim.api.nvim_win_set_cursor(win, { end_row + 1, end_col })
    end
    done("DgCompleteDone")
  end, bufnr)
end

-- -- Ghost text on Neovim 0.10 and 0.11 ----------------------------------------------------
-- A suggestion is { row, col, text, replace, position, marker }: `text` goes at (row, col)
-- (0-based, bytes) and replaces the `replace` bytes after it, closers like ")" that the text
-- types again at its end; `position` is the LSP position it was asked at, `marker` its
-- confidence (" 0.12") when it is shown below the confidence gate because it was asked for.

local ghost_ns = vim.api.nvim_create_namespace("dg_lsp_ghost")
M.ghost_namespace = ghost_ns
local ghosts = {} -- bufnr -> the suggestion on screen
local pending = {} -- bufnr -> { timer } while debouncing, { client, id } while asked
-- bufnr -> { tick, row, col }: the buffer state the ghost (or the pending request) belongs to;
-- an event that finds the buffer still in that state is one this plugin caused.
local anchors = {}
local uv = vim.uv or vim.loop

local function cursor_state(bufnr)
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  return { tick = vim.api.nvim_buf_get_changedtick(bufnr), row = row - 1, col = col }
end

local function same_state(a, b)
  return a ~= nil and a.tick == b.tick and a.row == b.row and a.col == b.col
end

-- Stops what `store` (bufnr -> { timer } or { client, id }) has going for a buffer.
local function stop_pending(store, bufnr)
  local p = store[bufnr]
  store[bufnr] = nil
  if p == nil then
    return
  end
  if p.timer and not p.timer:is_closing() then
    p.timer:stop()
    p.timer:close()
  end
  if p.id then
    cancel_request(p.client, p.id) -- the server stops denoising at the next step
  end
end

local function cancel_pending(bufnr)
  stop_pending(pending, bufnr)
end

local function ghost_dismiss(bufnr)
  cancel_pending(bufnr)
  ghosts[bufnr] = nil
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, ghost_ns, 0, -1)
  end
end

-- First line inline at the cursor, the others as virtual lines below it. The last line gets
-- the rest of the cursor's line after it, where accepting puts that text.
local function ghost_draw(bufnr, g)
  vim.api.nvim_buf_clear_namespace(bufnr, ghost_ns, 0, -1)
  local lines = vim.split(g.text, "\n", { plain = true })
  local opts = { virt_text_pos = "inline" }
  if #lines == 1 then
    -- the re-typed closers are on screen already, right after the cursor
    opts.virt_text = { { g.text:sub(1, #g.text - g.replace), "DgLspGhost" } }
  else
    opts.virt_text = { { lines[1], "DgLspGhost" } }
    local after = buf_line(bufnr, g.row):sub(g.col + g.replace + 1)
    opts.virt_lines = {}
    for i = 2, #lines do
      local text = i == #lines and lines[i] .. after or lines[i]
      table.insert(opts.virt_lines, { { text, "DgLspGhost" } })
    end
  end
  vim.api.nvim_buf_set_extmark(bufnr, ghost_ns, g.row, g.col, opts)
  if g.marker then -- at the line's end: the text after the cursor stays readable
    vim.api.nvim_buf_set_extmark(bufnr, ghost_ns, g.row, g.col,
      { virt_text = { { g.marker, "DgLspConfidence" } }, virt_text_pos = "eol" })
  end
end

-- The marker of a suggestion shown below the gate, from the server's notification for the
-- position the ghost was asked at (the answer comes first, then the notification).
local function ghost_mark(g, s)
  local marker = suggestion.marker(s)
  local at = g.position
  if marker and at and s.line == at.line and s.character == at.character then
    g.marker = marker
    return true
  end
  return false
end

local function in_insert_mode()
  return vim.api.nvim_get_mode().mode:sub(1, 1) == "i"
end

-- `invoked`: the user asked (the accept key with nothing shown); else asked while typing.
local function ghost_request(bufnr, invoked)
  local client = client_for(bufnr)
  if client == nil or vim.api.nvim_get_current_buf() ~= bufnr or not in_insert_mode() then
    return
  end
  local state = cursor_state(bufnr)
  local line = buf_line(bufnr, state.row)
  local encoding = encoding_of(client)
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = state.row, character = to_lsp_col(line, state.col, encoding) },
    -- Invoked (1) is answered even below the confidence gate; Automatic (2) is gated
    context = { triggerKind = invoked and 1 or 2 },
  }
  local sent, id
  sent, id = request(client, "textDocument/inlineCompletion", params, function(err, result)
    if pending[bufnr] and pending[bufnr].id == id then
      pending[bufnr] = nil
    end
    -- An answer for an older keystroke or another cursor position is stale: drop it.
    if err or not vim.api.nvim_buf_is_valid(bufnr) or vim.api.nvim_get_current_buf() ~= bufnr
        or not in_insert_mode() or not same_state(state, cursor_state(bufnr)) then
      return
    end
    local items = type(result) == "table" and (result.items or result) or {}
    local item = items[1]
    if item == nil or type(item.insertText) ~= "string" or item.insertText == "" then
      return
    end
    local replace = 0
    if item.range then
      local start, stop = item.range.start, item.range["end"]
      if start.line ~= state.row or stop.line ~= state.row
          or to_byte_col(line, start.character, encoding) ~= state.col then
        return -- not a suggestion at the cursor: nothing this plugin can draw
      end
      replace = to_byte_col(line, stop.character, encoding) - state.col
    end
    local g = { row = state.row, col = state.col, text = item.insertText, replace = replace,
                position = params.position }
    ghost_mark(g, suggestion.current(bufnr, state.tick))
    ghosts[bufnr] = g
    ghost_draw(bufnr, g)
    done("DgGhostText")
  end, bufnr)
  pending[bufnr] = sent and { client = client, id = id } or nil
end

-- TextChangedI and CursorMovedI: typing asks again after the debounce; a cursor move only
-- clears. Which of the two events comes first does not matter: the second finds its state.
local function ghost_on_change(bufnr)
  local now = cursor_state(bufnr)
  local anchor = anchors[bufnr]
  if same_state(anchor, now) then
    return
  end
  ghost_dismiss(bufnr)
  anchors[bufnr] = now
  if anchor ~= nil and anchor.tick == now.tick then
    return
  end
  local timer = uv.new_timer()
  pending[bufnr] = { timer = timer }
  timer:start(M.options.ghost_text.debounce_ms, 0, vim.schedule_wrap(function()
    if pending[bufnr] and pending[bufnr].timer == timer then
      cancel_pending(bufnr)
      ghost_request(bufnr)
    end
  end))
end

-- The part of the suggestion that a partial accept takes.
local function next_word(text)
  return text:match("^%s*[%w_]+") or text:match("^%s*[^%w_%s]+") or text
end

local function next_line(text)
  -- at a line's end the next line comes with its newline
  return text:match("^[^\n]+") or text:match("^\n[^\n]*") or text
end

-- Inserts the whole suggestion, or the part `pick(text)` returns; the rest stays shown.
function M.ghost_accept(bufnr, pick)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local g = ghosts[bufnr]
  if g == nil then
    return false
  end
  local part = pick and pick(g.text) or g.text
  local rest = g.text:sub(#part + 1)
  -- Replace the closers after the cursor only once `part` types them again.
  local replace = math.max(0, g.replace - #rest)
  local lines = vim.split(part, "\n", { plain = true })
  vim.api.nvim_buf_set_text(bufnr, g.row, g.col, g.row, g.col + replace, lines)
  local row = g.row + #lines - 1
  local col = (#lines == 1 and g.col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { row + 1, col })
  ghost_dismiss(bufnr)
  anchors[bufnr] = cursor_state(bufnr) -- our own edit: no new request for it
  if rest ~= "" then
    ghosts[bufnr] = { row = row, col = col, text = rest, replace = g.replace - replace,
                      marker = g.marker }
    ghost_draw(bufnr, ghosts[bufnr])
  end
  done("DgGhostAccepted")
  return true
end

function M.ghost_accept_word(bufnr)
  return M.ghost_accept(bufnr, next_word)
end

function M.ghost_accept_line(bufnr)
  return M.ghost_accept(bufnr, next_line)
end

-- Asks for a suggestion at the cursor now, as the user's explicit request (triggerKind
-- Invoked: the server answers even below the confidence gate), and draws it as ghost text.
function M.ghost_ask(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  cancel_pending(bufnr)
  ghost_request(bufnr, true)
end

-- The suggestion shown in a buffer ({ row, col, text, replace, position, marker }), or nil.
function M.ghost(bufnr)
  return ghosts[(bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr]
end

local function feed(lhs)
  -- "i": before keys typed after this one; "n": the key's own meaning, not this mapping
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(lhs, true, false, true), "in", false)
end

local function map_ghost_key(bufnr, lhs, action, otherwise, desc)
  if not lhs then
    return
  end
  vim.keymap.set("i", lhs, function()
    if ghosts[bufnr] then
      action(bufnr)
    elseif otherwise then
      otherwise(bufnr)
    else
      feed(lhs)
    end
  end, { buffer = bufnr, desc = "dg-lsp: " .. desc })
end

local function ghost_attach(bufnr)
  local group = vim.api.nvim_create_augroup("dg_lsp_ghost_" .. bufnr, { clear = true })
  local function on(events, callback)
    vim.api.nvim_create_autocmd(events, { group = group, buffer = bufnr, callback = callback })
  end
  on({ "TextChangedI", "TextChangedP", "CursorMovedI" }, function() ghost_on_change(bufnr) end)
  on("InsertEnter", function() anchors[bufnr] = cursor_state(bufnr) end)
  on({ "InsertLeave", "BufLeave" }, function()
    ghost_dismiss(bufnr)
    anchors[bufnr] = nil
  end)
  on("BufUnload", function()
    ghost_dismiss(bufnr)
    anchors[bufnr] = nil
    vim.api.nvim_del_augroup_by_id(group)
  end)
  local keys = M.options.ghost_text
  map_ghost_key(bufnr, keys.accept, M.ghost_accept, nil, "accept the suggestion")
  map_ghost_key(bufnr, M.options.accept_key, M.ghost_accept, M.ghost_ask,
    "accept the suggestion, or ask for one")
  map_ghost_key(bufnr, keys.accept_word, M.ghost_accept_word, nil, "accept a word")
  map_ghost_key(bufnr, keys.accept_line, M.ghost_accept_line, nil, "accept a line")
  map_ghost_key(bufnr, keys.dismiss, ghost_dismiss, nil, "dismiss the suggestion")
end

-- -- Next-edit suggestions -------------------------------------------------------------------
-- After a change, and next_edit.debounce_ms without another, the server is asked for
-- textDocument/copilotInlineEdit at the cursor: the edit the last one implies (after renaming
-- `count` to `total` on one line, the next `count` becomes `total`), usually one word near it.
-- It is drawn where it applies: the replaced text highlighted as deleted, the new text inline
-- after it. A suggestion is { client_id, encoding, edit (the server's), tick, text, srow,
-- scol, erow, ecol (0-based, bytes: the replaced range), moves, distance }.

M.inline_edit_method = "textDocument/copilotInlineEdit"
local next_ns = vim.api.nvim_create_namespace("dg_lsp_next_edit")
M.next_edit_namespace = next_ns
local nexts = {} -- bufnr -> the suggestion on screen
local next_pending = {} -- bufnr -> { timer } while debouncing, { client, id } while asked
local next_asked = {} -- bufnr -> the changedtick last asked about (or about to be)
local next_keys = {} -- bufnr -> the mappings set while a suggestion is shown

local function supports_next_edit(client)
  local experimental = (client.server_capabilities or {}).experimental
  return type(experimental) == "table" and experimental.copilotInlineEdit == true
end

-- The keys go back to what they were: the buffer's own mappings are restored.
local function next_unmap(bufnr)
  local keys = next_keys[bufnr]
  next_keys[bufnr] = nil
  if keys == nil or not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  vim.api.nvim_buf_call(bufnr, function()
    for _, key in ipairs(keys) do
      pcall(vim.keymap.del, key.mode, key.lhs, { buffer = bufnr })
      if key.saved and vim.fn.exists("*mapset") == 1 then
        vim.fn.mapset(key.mode, false, key.saved)
      end
    end
  end)
end

-- Takes the suggestion off the screen (a request on its way is left alone).
local function next_clear(bufnr)
  nexts[bufnr] = nil
  next_unmap(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, next_ns, 0, -1)
  end
end

-- Clears the suggestion and stops asking for one; true when one was shown.
function M.next_edit_dismiss(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local shown = nexts[bufnr] ~= nil
  stop_pending(next_pending, bufnr)
  next_clear(bufnr)
  return shown
end

-- The replaced range as deleted text, the new text inline right after it (end of line before
-- Neovim 0.10), its other lines as virtual lines below.
local function next_draw(bufnr, s)
  vim.api.nvim_buf_clear_namespace(bufnr, next_ns, 0, -1)
  if s.srow ~= s.erow or s.scol ~= s.ecol then
    vim.api.nvim_buf_set_extmark(bufnr, next_ns, s.srow, s.scol,
      { end_row = s.erow, end_col = s.ecol, hl_group = "DgLspNextEditDelete" })
  end
  if s.text == "" then
    return
  end
  local lines = vim.split(s.text, "\n", { plain = true })
  local opts = { virt_text = { { lines[1], "DgLspNextEditInsert" } },
                 virt_text_pos = has("0.10") and "inline" or "eol" }
  if #lines > 1 then
    opts.virt_lines = {}
    for i = 2, #lines do
      table.insert(opts.virt_lines, { { lines[i], "DgLspNextEditInsert" } })
    end
  end
  vim.api.nvim_buf_set_extmark(bufnr, next_ns, s.erow, s.ecol, opts)
end

-- Lines between the cursor's row and the suggestion's (0 on them).
local function distance_to(s, row)
  return row < s.srow and s.srow - row or row > s.erow and row - s.erow or 0
end

local function on_suggestion(s, row, col)
  local after_start = row > s.srow or (row == s.srow and col >= s.scol)
  local before_end = row < s.erow or (row == s.erow and col <= s.ecol)
  return after_start and before_end
end

-- Applies the suggestion and tells the server (the edit's command); true when one was shown.
function M.next_edit_accept(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local s = nexts[bufnr]
  M.next_edit_dismiss(bufnr)
  if s == nil or vim.api.nvim_buf_get_changedtick(bufnr) ~= s.tick then
    return false
  end
  vim.lsp.util.apply_text_edits({ { range = s.edit.range, newText = s.text } }, bufnr, s.encoding)
  -- The cursor on the last character of the new text (after it in insert mode).
  local lines = vim.split(s.text, "\n", { plain = true })
  local row = s.srow + #lines - 1
  local first = #lines == 1 and s.scol or 0
  local col = first + #lines[#lines]
  if not in_insert_mode() then
    col = math.max(first, col - 1)
  end
  if vim.api.nvim_get_current_buf() == bufnr then
    vim.api.nvim_win_set_cursor(0, { row + 1, col })
  end
  local client = vim.lsp.get_client_by_id(s.client_id)
  local command = s.edit.command
  if client and type(command) == "table" and type(command.command) == "string" then
    if has("0.11") then
      client:exec_cmd(command, { bufnr = bufnr })
    else
      request(client, "workspace/executeCommand",
        { command = command.command, arguments = command.arguments }, function() end, bufnr)
    end
  end
  done("DgNextEditAccepted")
  return true
end

-- <Tab>: to the suggestion's start when the cursor is not on it, else accept it.
function M.next_edit_jump_or_accept(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local s = nexts[bufnr]
  if s == nil then
    return false
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  if vim.api.nvim_get_current_buf() == bufnr and not on_suggestion(s, row - 1, col) then
    vim.api.nvim_win_set_cursor(0, { s.srow + 1, s.scol })
    return true
  end
  return M.next_edit_accept(bufnr)
end

-- The suggestion shown in a buffer, or nil: { text, edit (the server's), srow, scol, erow,
-- ecol (the replaced range, 0-based, bytes), ... }.
function M.next_edit(bufnr)
  return nexts[(bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr]
end

-- Buffer-local keys while a suggestion is shown, in normal and insert mode; the buffer's own
-- mappings of those keys come back once it is gone.
local function next_map(bufnr)
  local opts = M.options.next_edit
  local keys = {}
  local function map(mode, lhs, action, desc)
    if not lhs then
      return
    end
    local saved = vim.api.nvim_buf_call(bufnr, function()
      return vim.fn.maparg(lhs, mode, false, true)
    end)
    table.insert(keys, { mode = mode, lhs = lhs, saved = saved.buffer == 1 and saved or nil })
    vim.keymap.set(mode, lhs, action, { buffer = bufnr, desc = "dg-lsp: " .. desc })
  end
  local ghost_keys = { [M.options.ghost_text.accept or ""] = true, [M.options.accept_key or ""] = true }
  for _, mode in ipairs({ "n", "i" }) do
    map(mode, opts.accept, function()
      -- the ghost text at the cursor first, where it takes the same key
      if mode == "i" and ghosts[bufnr] and ghost_keys[opts.accept] then
        M.ghost_accept(bufnr)
      else
        M.next_edit_jump_or_accept(bufnr)
      end
    end, "go to the next edit, then accept it")
    map(mode, opts.dismiss, function()
      M.next_edit_dismiss(bufnr)
      if mode == "i" then
        feed(opts.dismiss) -- and what the key does: <Esc> leaves insert mode
      end
    end, "dismiss the next edit")
  end
  next_keys[bufnr] = keys
end

-- Asks for a suggestion at the cursor; `manual`: says so when there is none.
function M.next_edit_request(bufnr, manual)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local client = client_for(bufnr)
  if client == nil or not supports_next_edit(client) then
    if manual then
      notify("no dg-lsp server with next-edit suggestions is attached", vim.log.levels.WARN)
    end
    return
  end
  stop_pending(next_pending, bufnr)
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  next_asked[bufnr] = tick
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  local encoding = encoding_of(client)
  local uri, version = vim.uri_from_bufnr(bufnr), buf_version(bufnr)
  local params = {
    textDocument = { uri = uri, version = version },
    position = { line = row - 1, character = to_lsp_col(buf_line(bufnr, row - 1), col, encoding) },
  }
  local sent, id
  sent, id = request(client, M.inline_edit_method, params, function(err, result)
    if next_pending[bufnr] and next_pending[bufnr].id == id then
      next_pending[bufnr] = nil
    end
    -- An answer for an older buffer state is stale (the server refuses a request for a
    -- version it no longer has: ContentModified): drop it.
    if err or not vim.api.nvim_buf_is_valid(bufnr)
        or vim.api.nvim_buf_get_changedtick(bufnr) ~= tick then
      return done("DgNextEditDone")
    end
    local edits = type(result) == "table" and result.edits or nil
    local edit = type(edits) == "table" and edits[1] or nil
    local doc = type(edit) == "table" and edit.textDocument or nil
    if type(edit) ~= "table" or type(edit.text) ~= "string" or type(edit.range) ~= "table"
        or (type(doc) == "table" and (doc.uri ~= uri or (doc.version ~= nil and doc.version ~= version))) then
      if manual then
        notify("no next edit here")
      end
      return done("DgNextEditDone")
    end
    local start, stop = edit.range.start, edit.range["end"]
    local line_count = vim.api.nvim_buf_line_count(bufnr)
    if start.line >= line_count or stop.line >= line_count then
      return done("DgNextEditDone")
    end
    local s = {
      client_id = client.id, encoding = encoding, edit = edit, tick = tick, text = edit.text,
      srow = start.line, scol = to_byte_col(buf_line(bufnr, start.line), start.character, encoding),
      erow = stop.line, ecol = to_byte_col(buf_line(bufnr, stop.line), stop.character, encoding),
      moves = 0,
    }
    if vim.api.nvim_get_current_buf() == bufnr then
      s.distance = distance_to(s, vim.api.nvim_win_get_cursor(0)[1] - 1)
    end
    next_clear(bufnr)
    nexts[bufnr] = s
    next_draw(bufnr, s)
    next_map(bufnr)
    notify_client(client, "textDocument/didShowInlineEdit", { item = { command = edit.command } })
    done("DgNextEdit")
    done("DgNextEditDone")
  end, bufnr)
  next_pending[bufnr] = sent and { client = client, id = id } or nil
end

-- TextChanged, TextChangedI: the suggestion no longer fits; ask again after the debounce,
-- once per buffer state (leaving insert mode after typing changes nothing more).
local function next_on_change(bufnr)
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  if nexts[bufnr] and nexts[bufnr].tick ~= tick then
    next_clear(bufnr)
  end
  if next_asked[bufnr] == tick or not M.options.next_edit.enabled then
    return
  end
  stop_pending(next_pending, bufnr)
  next_asked[bufnr] = tick
  local timer = uv.new_timer()
  next_pending[bufnr] = { timer = timer }
  timer:start(M.options.next_edit.debounce_ms, 0, vim.schedule_wrap(function()
    if next_pending[bufnr] and next_pending[bufnr].timer == timer then
      stop_pending(next_pending, bufnr)
      if vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_get_current_buf() == bufnr then
        M.next_edit_request(bufnr)
      end
    end
  end))
end

-- CursorMoved, CursorMovedI: a move that does not bring the cursor closer to the suggestion's
-- lines counts; clear_after_moves of them clear it. Reaching its lines starts the count anew.
local function next_on_move(bufnr)
  local s = nexts[bufnr]
  if s == nil then
    return
  end
  local distance = distance_to(s, vim.api.nvim_win_get_cursor(0)[1] - 1)
  if distance == 0 then
    s.moves = 0
  elseif s.distance == nil or distance >= s.distance then
    s.moves = s.moves + 1
  end
  s.distance = distance
  if s.moves >= M.options.next_edit.clear_after_moves then
    next_clear(bufnr)
  end
end

local function next_attach(bufnr)
  local group = vim.api.nvim_create_augroup("dg_lsp_next_edit_" .. bufnr, { clear = true })
  local function on(events, callback)
    vim.api.nvim_create_autocmd(events, { group = group, buffer = bufnr, callback = callback })
  end
  next_asked[bufnr] = vim.api.nvim_buf_get_changedtick(bufnr) -- nothing to ask about yet
  on({ "TextChanged", "TextChangedI", "TextChangedP" }, function() next_on_change(bufnr) end)
  on({ "CursorMoved", "CursorMovedI" }, function() next_on_move(bufnr) end)
  on("BufLeave", function() M.next_edit_dismiss(bufnr) end)
  on("BufUnload", function()
    M.next_edit_dismiss(bufnr)
    next_asked[bufnr] = nil
    vim.api.nvim_del_augroup_by_id(group)
  end)
end

local function define_highlights()
  vim.api.nvim_set_hl(0, "DgLspGhost", { link = "Comment", default = true })
  vim.api.nvim_set_hl(0, "DgLspConfidence", { link = "NonText", default = true })
  vim.api.nvim_set_hl(0, "DgLspNextEditDelete", { link = "DiffDelete", default = true })
  vim.api.nvim_set_hl(0, "DgLspNextEditInsert", { link = "DiffAdd", default = true })
end

-- For a statusline: the engine's state ("dg-lsp: ready"), or, while it is ready and the
-- current buffer unchanged since, why the last suggestion was not shown ("dg-lsp: unsure
-- (0.12)") or that it was shown below the gate because asked for ("dg-lsp: 0.12 (asked)").
function M.status()
  local bufnr = vim.api.nvim_get_current_buf()
  local last = suggestion.current(bufnr, vim.api.nvim_buf_get_changedtick(bufnr))
  return suggestion.status(M.engine.state, last)
end

-- The settings as a JSON object: an empty Lua table would be sent as [], which the server
-- refuses ("invalid settings").
local function settings_object()
  return next(M.options.settings) and M.options.settings or vim.empty_dict()
end

-- Sends changed server settings (merged into the current ones) to every dg-lsp client.
function M.update_settings(settings)
  M.options.settings = vim.tbl_deep_extend("force", M.options.settings, settings)
  local clients = vim.lsp.get_clients and vim.lsp.get_clients({ name = M.name })
    or (has("0.8") and vim.lsp.get_active_clients({ name = M.name }))
    or vim.tbl_values(vim.lsp.get_active_clients())
  for _, client in ipairs(clients) do
    if client.name == M.name then
      notify_client(client, "workspace/didChangeConfiguration",
        { settings = { ["dg-lsp"] = settings_object() } })
    end
  end
end

local function on_engine_state(_, result)
  if type(result) ~= "table" or type(result.state) ~= "string" then
    return
  end
  M.engine = { state = result.state, message = result.message or "" }
  -- No vim.notify here: the server shows an outage itself (window/showMessage), once.
  done("DgLspEngineState")
end

-- dg-lsp/suggestion, after each inline completion the server answered.
local function on_suggestion_notification(_, result)
  local s = suggestion.parse(result)
  local bufnr = s and vim.uri_to_bufnr(s.uri)
  if s == nil or not vim.api.nvim_buf_is_loaded(bufnr) then
    return
  end
  suggestion.record(bufnr, s, vim.api.nvim_buf_get_changedtick(bufnr))
  local g = ghosts[bufnr]
  if g and ghost_mark(g, s) then
    ghost_draw(bufnr, g)
  end
  if s.asked and not s.shown and s.reason ~= "" then
    notify(s.reason) -- asked for and nothing came: say why
  end
  done("DgLspSuggestion")
end

local function on_attach(client, bufnr)
  local native = vim.lsp.inline_completion ~= nil -- Neovim >= 0.12
  local key = M.options.accept_key
  if M.options.inline_completion and native then
    vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
    if key then
      -- Neovim's own inline completion asks only while typing (Automatic): with nothing shown
      -- the key asks explicitly and inserts the answer.
      vim.keymap.set("i", key, function()
        if not vim.lsp.inline_completion.get() then
          vim.schedule(function() M.complete(bufnr) end) -- no text changes in an expr mapping
        end
        return ""
      end, { buffer = bufnr, expr = true, desc = "dg-lsp: accept the suggestion, or ask for one" })
    end
  elseif M.options.inline_completion and has("0.10") then
    ghost_attach(bufnr) -- maps accept_key too
  elseif key then
    vim.keymap.set("i", key, function() M.complete(bufnr) end,
      { buffer = bufnr, desc = "dg-lsp: insert the completion" })
  end
  if supports_next_edit(client) then
    next_attach(bufnr)
  end
  if vim.bo[bufnr].omnifunc == "" then
    vim.bo[bufnr].omnifunc = "v:lua.vim.lsp.omnifunc"
  end
  if M.options.on_attach then
    M.options.on_attach(client, bufnr)
  end
end

local function root_dir(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  local start = name ~= "" and vim.fn.fnamemodify(name, ":p:h") or vim.fn.getcwd()
  for _, marker in ipairs(M.options.root_markers) do
    local found = vim.fn.findfile(marker, start .. ";")
    if found == "" then
      found = vim.fn.finddir(marker, start .. ";")
    end
    if found ~= "" then
      local path = vim.fn.fnamemodify(found, ":p"):gsub("/$", "")
      return vim.fn.fnamemodify(path, ":h")
    end
  end
  return start
end

local function client_config()
  return {
    name = M.name,
    cmd = M.options.cmd,
    init_options = { ["dg-lsp"] = settings_object() },
    handlers = {
      ["dg-lsp/engineState"] = on_engine_state,
      ["dg-lsp/suggestion"] = on_suggestion_notification,
    },
    on_attach = on_attach,
  }
end

local function wanted(bufnr)
  if vim.bo[bufnr].buftype ~= "" then
    return false
  end
  local filetypes = M.options.filetypes
  return filetypes == nil or vim.tbl_contains(filetypes, vim.bo[bufnr].filetype)
end

local function start_everywhere(attach)
  local group = vim.api.nvim_create_augroup("dg_lsp", { clear = true })
  vim.api.nvim_create_autocmd({ "FileType", "BufReadPost", "BufNewFile" }, {
    group = group,
    callback = function(event)
      if wanted(event.buf) then
        attach(event.buf)
      end
    end,
  })
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.api.nvim_buf_get_name(bufnr) ~= "" and wanted(bufnr) then
      attach(bufnr)
    end
  end
end

function M.setup(opts)
  M.options = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
  if opts and opts.cmd then
    M.options.cmd = opts.cmd -- a list: replace, never merge element-wise
  end

  -- The server's "Rewrite selection with instruction…" code action comes without an instruction.
  vim.lsp.commands[M.rewrite_command] = function(command, ctx)
    local client = vim.lsp.get_client_by_id(ctx.client_id)
    local args = command.arguments and command.arguments[1]
    if client and type(args) == "table" then
      M.rewrite_with_prompt(client, ctx.bufnr, args)
    end
  end

  define_highlights()
  vim.api.nvim_create_autocmd("ColorScheme", {
    group = vim.api.nvim_create_augroup("dg_lsp_highlights", { clear = true }),
    callback = define_highlights, -- :colorscheme clears every group
  })

  vim.api.nvim_create_user_command("DgRewrite", M.rewrite, {
    range = true, nargs = "?", desc = "dg-lsp: rewrite the selection with an instruction",
  })
  vim.api.nvim_create_user_command("DgFillHoles", M.fill_holes_command, {
    range = true, nargs = "*", desc = "dg-lsp: a completion at every cursor (marks, visual block)",
  })
  vim.api.nvim_create_user_command("DgComplete", function() M.complete() end, {
    desc = "dg-lsp: insert the completion at the cursor",
  })
  vim.api.nvim_create_user_command("DgNextEdit", function() M.next_edit_request(0, true) end, {
    desc = "dg-lsp: ask for the next edit now",
  })
  vim.api.nvim_create_user_command("DgNextEditAccept", function()
    if not M.next_edit_accept() then
      notify("no next edit is shown")
    end
  end, { desc = "dg-lsp: apply the next edit shown" })
  vim.api.nvim_create_user_command("DgNextEditDismiss", function() M.next_edit_dismiss() end, {
    desc = "dg-lsp: dismiss the next edit shown",
  })

  if has("0.11") then
    local config = client_config()
    config.name = nil
    config.filetypes = M.options.filetypes
    config.root_markers = M.options.root_markers
    vim.lsp.config(M.name, config)
    vim.lsp.enable(M.name)
  elseif vim.lsp.start then
    start_everywhere(function(bufnr)
      local config = client_config()
      config.root_dir = root_dir(bufnr)
      vim.lsp.start(config, { bufnr = bufnr })
    end)
  else
    -- Neovim 0.7: one client per root directory, attached to each buffer under it.
    local by_root = {}
    start_everywhere(function(bufnr)
      local root = root_dir(bufnr)
      if by_root[root] == nil or vim.lsp.get_client_by_id(by_root[root]) == nil then
        local config = client_config()
        config.root_dir = root
        by_root[root] = vim.lsp.start_client(config)
      end
      if by_root[root] ~= nil then
        vim.lsp.buf_attach_client(bufnr, by_root[root])
      end
    end)
  end
end

return M
