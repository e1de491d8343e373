-- What the server did with each inline completion it answered, from its dg-lsp/suggestion
-- notification: shown or not, why not ("unsure (0.12)": the confidence gate hid it; "nothing
-- usable"), and whether it was shown below the gate because the user asked for it. The last
-- one is kept per buffer with the buffer's changedtick when it came: an edit makes it old.

local M = {}

local last = {} -- bufnr -> the last suggestion, as M.parse returns it, plus its tick

-- The notification's params as { uri, line, character, asked, shown, below_gate,
-- confidence (nil: no score), reason ("" when shown) }, or nil when not of that shape.
function M.parse(params)
  if type(params) ~= "table" or type(params.uri) ~= "string" or type(params.position) ~= "table"
      or type(params.asked) ~= "boolean" or type(params.shown) ~= "boolean" then
    return nil
  end
  local line, character = params.position.line, params.position.character
  if type(line) ~= "number" or type(character) ~= "number" then
    return nil
  end
  return {
    uri = params.uri, line = line, character = character, asked = params.asked,
    shown = params.shown, below_gate = params.belowGate == true,
    -- JSON null arrives as vim.NIL
    confidence = type(params.confidence) == "number" and params.confidence or nil,
    reason = type(params.reason) == "string" and params.reason or "",
  }
end

function M.record(bufnr, suggestion, tick)
  suggestion.tick = tick
  last[bufnr] = suggestion
end

function M.forget(bufnr)
  last[bufnr] = nil
end

-- The last suggestion for a buffer while the buffer is still at `tick`, else nil.
function M.current(bufnr, tick)
  local s = last[bufnr]
  return s ~= nil and s.tick == tick and s or nil
end

-- What is drawn after a suggestion shown below the gate (" 0.12"), else nil.
function M.marker(s)
  if s ~= nil and s.shown and s.below_gate and s.confidence ~= nil then
    return string.format(" %.2f", s.confidence)
  end
  return nil
end

-- The statusline text: why the last suggestion was not shown ("dg-lsp: unsure (0.12)"), or
-- that it was shown because asked for ("dg-lsp: 0.12 (asked)"), while the engine is ready;
-- the engine's state otherwise ("dg-lsp: ready").
function M.status(engine_state, s)
  if engine_state == "ready" and s ~= nil then
    if not s.shown and s.reason ~= "" then
      return "dg-lsp: " .. s.reason
    end
    local marker = M.marker(s)
    if marker then
      return "dg-lsp:" .. marker .. " (asked)"
    end
  end
  return "dg-lsp: " .. engine_state
end

return M
