-- dg-lsp for Neovim: starts the dg-lsp language server and adds
--   * ghost-text completions on Neovim >= 0.12 (vim.lsp.inline_completion),
--   * require("dg_lsp").complete() / :DgComplete: insert the model's completion at the cursor
--     (every version; map it in insert mode on Neovim < 0.12),
--   * :DgRewrite [instruction]: rewrite the selected lines with an instruction (asked for when
--     not given), also used by the server's "Rewrite selection with instruction…" code action,
--   * require("dg_lsp").status(): the engine's state for a statusline.
-- Neovim >= 0.11 registers the server with vim.lsp.config / vim.lsp.enable; 0.8-0.10 use
-- vim.lsp.start on each FileType; 0.7 uses vim.lsp.start_client and buf_attach_client.

local M = {}

M.name = "dg_lsp"
M.rewrite_command = "dg-lsp.rewriteWithInstruction"

M.defaults = {
  -- How to start the server: the `dg-lsp` console script on PATH.
  cmd = { "dg-lsp", "serve" },
  -- nil: every filetype (the server skips languages not in settings.languages).
  filetypes = nil,
  root_markers = { ".git", "pyproject.toml", "package.json", "Cargo.toml", "go.mod" },
  -- Server settings, camelCase as in dg_lsp/settings.py: model, device, engine, sampler,
  -- languages, holeSize, ... Sent as initializationOptions.
  settings = {},
  -- Neovim >= 0.12: show completions as ghost text.
  inline_completion = true,
  -- An insert-mode key (e.g. "<M-l>") that accepts the ghost text on Neovim >= 0.12 and inserts
  -- the completion at the cursor (require("dg_lsp").complete()) on older versions. nil: no key.
  accept_key = nil,
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

-- Inserts the server's completion at the cursor (textDocument/completion's item).
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
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = row - 1, character = to_lsp_col(buf_line(bufnr, row - 1), col, encoding) },
  }
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  request(client, "textDocument/completion", params, function(err, result)
    if err then
      notify("completion failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return done("DgCompleteDone")
    end
    local items = result and (result.items or result) or {}
    local item = items[1]
    if item == nil or item.textEdit == nil then
      return done("DgCompleteDone")
    end
    if vim.api.nvim_buf_get_changedtick(bufnr) ~= tick then
      return done("DgCompleteDone") -- the buffer changed while the model worked: stale
    end
    local edit = item.textEdit
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

-- The engine's state for a statusline: "dg-lsp: ready".
function M.status()
  return "dg-lsp: " .. M.engine.state
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
        { settings = { ["dg-lsp"] = M.options.settings } })
    end
  end
end

local function on_engine_state(_, result)
  if type(result) ~= "table" or type(result.state) ~= "string" then
    return
  end
  M.engine = { state = result.state, message = result.message or "" }
  if result.state == "unavailable" then
    notify(M.engine.message, vim.log.levels.WARN)
  end
  done("DgLspEngineState")
end

local function on_attach(client, bufnr)
  local inline = has("0.12") and M.options.inline_completion and vim.lsp.inline_completion ~= nil
  if inline then
    vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
  end
  local key = M.options.accept_key
  if key and inline then
    vim.keymap.set("i", key, function()
      if not vim.lsp.inline_completion.get() then
        return key
      end
    end, { buffer = bufnr, expr = true, desc = "dg-lsp: accept the completion" })
  elseif key then
    vim.keymap.set("i", key, function() M.complete(bufnr) end,
      { buffer = bufnr, desc = "dg-lsp: insert the completion" })
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
    init_options = { ["dg-lsp"] = M.options.settings },
    handlers = { ["dg-lsp/engineState"] = on_engine_state },
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

  vim.api.nvim_create_user_command("DgRewrite", M.rewrite, {
    range = true, nargs = "?", desc = "dg-lsp: rewrite the selection with an instruction",
  })
  vim.api.nvim_create_user_command("DgComplete", function() M.complete() end, {
    desc = "dg-lsp: insert the completion at the cursor",
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
