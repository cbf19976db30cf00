-- Drives a real headless Neovim through the gpuemu plugin; run after init.lua with
--   nvim --headless -u init.lua -i NONE -c 'luafile driver.lua'
-- Every observation goes into a JSON file (GPUEMU_NVIM_OUT) that the pytest side asserts on; the
-- driver itself only waits (vim.wait, bounded) and records, and always quits.
local ws = assert(os.getenv('GPUEMU_NVIM_WS'))
local out = assert(os.getenv('GPUEMU_NVIM_OUT'))
local op = os.getenv('GPUEMU_NVIM_OP') or 'softmax_tail_mask'
local file = os.getenv('GPUEMU_NVIM_FILE') or (op .. '.py')
local twin = os.getenv('GPUEMU_NVIM_TWIN') or (op .. '_ok')
local do_minimize = os.getenv('GPUEMU_NVIM_MINIMIZE') ~= '0'

local R = { steps = {}, lsp_status = {}, errors = {} }
local t0 = vim.uv.hrtime()
local function now_s()
  return (vim.uv.hrtime() - t0) / 1e9
end
local function step(name, ok, extra)
  local s = vim.tbl_extend('force', { name = name, ok = ok and true or false, t = now_s() }, extra or {})
  table.insert(R.steps, s)
  return ok
end

-- every vim.notify at ERROR level (an LSP request that failed, for instance) is recorded
R.notify_errors = {}
local notify = vim.notify
vim.notify = function(msg, level, opts)
  if level == vim.log.levels.ERROR then
    table.insert(R.notify_errors, tostring(msg))
  end
  return notify(msg, level, opts)
end

local seen_status = {}
local function sample_status()
  local ok, st = pcall(vim.lsp.status)
  if ok and st and st ~= '' and not seen_status[st] then
    seen_status[st] = true
    table.insert(R.lsp_status, st)
  end
end

-- vim.wait with sampling of vim.lsp.status() while waiting
local function wait(ms, cond)
  return vim.wait(ms, function()
    sample_status()
    return cond()
  end, 50)
end

local function clean(v)
  -- JSON-safe copy (no functions, vim.NIL as null)
  if type(v) == 'table' then
    local t = {}
    for k, x in pairs(v) do
      if type(x) ~= 'function' and type(x) ~= 'userdata' or x == vim.NIL then
        t[k] = clean(x)
      end
    end
    return t
  end
  return v
end

local function gpuemu_diags(bufnr)
  local list = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if d.source == 'gpuemu' then
      table.insert(list, d)
    end
  end
  return list
end

local function op_diag(bufnr, want_minimized)
  for _, d in ipairs(gpuemu_diags(bufnr)) do
    local data = d.user_data and d.user_data.lsp and d.user_data.lsp.data
    if type(data) == 'table' and data.op == op and data.seed ~= nil and data.seed ~= vim.NIL then
      if not want_minimized or (type(data.minimized) == 'table') then
        return d, data
      end
    end
  end
end

local function buffer_named(pattern)
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    local name = vim.api.nvim_buf_get_name(b)
    if name:find(pattern, 1, true) then
      return b, name
    end
  end
end

local TERMINAL = { passed = true, failed = true, error = true, not_run = true, errored = true }

-- a gpuemu.* command that came back with an error (then there is nothing more to wait for)
local function command_failed(name)
  local lc = require('gpuemu').last_command[name]
  return lc ~= nil and (lc.err ~= nil or (type(lc.result) == 'table' and lc.result.error ~= nil))
end

local function op_state(name)
  local g = require('gpuemu')
  for _, items in pairs(g.state) do
    local e = items['op:' .. name]
    if e then
      return e
    end
  end
end

local function main()
  local g = require('gpuemu')
  R.commands = {}
  for _, c in ipairs({ 'GpuemuRun', 'GpuemuOps', 'GpuemuReproduce', 'GpuemuMinimize', 'GpuemuFailures' }) do
    R.commands[c] = vim.fn.exists(':' .. c) == 2
  end

  -- 1. open the op file: the client attaches, the server validates the stale ops on open
  vim.cmd.edit(vim.fn.fnameescape(ws .. '/' .. file))
  local buf = vim.api.nvim_get_current_buf()
  R.filetype = vim.bo[buf].filetype
  local attached = wait(30000, function()
    local c = vim.lsp.get_clients({ name = 'gpuemu', bufnr = buf })[1]
    return c ~= nil and c.initialized
  end)
  if not step('attach', attached) then
    return
  end
  local client = vim.lsp.get_clients({ name = 'gpuemu', bufnr = buf })[1]
  R.client = { root_dir = client.root_dir, cmd = clean(client.config.cmd), init_options = clean(client.config.init_options) }
  R.experimental = clean((client.server_capabilities or {}).experimental)
  -- right after attach: the ops as :GpuemuOps lists them (a fresh copy: nothing stored yet), and the
  -- statusline the plugin fills from the discovery it makes on attach
  local first = client:request_sync('gpuemu/discoverOps', vim.empty_dict(), 10000, buf) or {}
  R.ops_at_attach = clean(g.ops_qf_items(first.result))
  wait(10000, function()
    local n = 0
    for _, items in pairs(g.state) do
      n = n + vim.tbl_count(items)
    end
    return n >= 18
  end)
  R.statusline_at_attach = g.statusline(buf)

  -- 2. :write it; wait until the run the save started is over (its work-done progress, whose
  --    begin message says "(save)", ended) and the op's diagnostic is there
  vim.cmd.write()
  local function save_run_ended()
    local token
    for _, e in ipairs(g.progress_log) do
      local m = e.message
      if e.kind == 'begin' and m:find('Validating ' .. op .. ':', 1, true) and m:find('(save)', 1, true) then
        token = e.token
      elseif token ~= nil and e.kind == 'end' and e.token == token then
        return true
      end
    end
    return false
  end
  local got = wait(60000, function()
    local st = op_state(op)
    return save_run_ended() and st ~= nil and TERMINAL[st.state] and not g.busy() and op_diag(buf) ~= nil
  end)
  local st = op_state(op)
  R.op_state = clean(st)
  if not step('diagnostics', got) then
    R.diagnostics_seen = clean(vim.diagnostic.get(nil))
    return
  end
  R.diagnostics = {}
  for _, d in ipairs(gpuemu_diags(buf)) do
    table.insert(R.diagnostics, {
      lnum = d.lnum,
      col = d.col,
      severity = d.severity,
      code = d.code,
      message = d.message,
      data = clean(d.user_data and d.user_data.lsp and d.user_data.lsp.data),
    })
  end
  R.statusline = g.statusline(buf)

  -- code lenses (enabled by the plugin, opt-out): the op's status above its def, refreshed when the run's
  -- results are in (the server's workspace/codeLens/refresh), not left at "queued"
  local function lens_done()
    for _, l in ipairs(vim.lsp.codelens.get(buf)) do
      local title = l.command and l.command.title or ''
      if title:find('gpuemu ' .. op .. ':', 1, true) and not title:find('queued', 1, true) and not title:find('running', 1, true) then
        return true
      end
    end
    return false
  end
  local lensed = wait(20000, lens_done)
  R.codelenses = {}
  for _, l in ipairs(vim.lsp.codelens.get(buf)) do
    table.insert(R.codelenses, { line = l.range.start.line, title = l.command and l.command.title or nil })
  end
  step('codelens', lensed)

  -- messages shown while a command runs: (history lines added, what the plugin showed)
  local function watch_messages(fn, until_done, ms)
    local hist_before = vim.fn.execute('messages')
    local shown_before = #g.shown
    fn()
    wait(ms, until_done)
    wait(600, function()
      return false
    end) -- deferred messages (progress echo, batched notes) land
    local added = vim.fn.execute('messages'):sub(#hist_before + 1)
    local shown = {}
    for i = shown_before + 1, #g.shown do
      table.insert(shown, g.shown[i])
    end
    return { history = added, shown = shown }
  end
  R.watch_messages = watch_messages

  -- 3. the Reproduce code action, through Neovim's own code-action machinery
  local d, data = op_diag(buf)
  local seed = math.floor(data.seed)
  local repro_rel = string.format('.gpuemu/repro/%s_%d.py', op, seed)
  R.repro_expected = repro_rel
  vim.api.nvim_win_set_cursor(0, { d.lnum + 1, d.col })
  -- first what the server answers (recorded to explain a failure), then the real thing
  local params = vim.lsp.util.make_range_params(0, client.offset_encoding)
  params.context = { diagnostics = { d.user_data.lsp }, triggerKind = 1 }
  local resp = client:request_sync('textDocument/codeAction', params, 10000, buf) or {}
  local titles = {}
  for _, a in ipairs(resp.result or {}) do
    table.insert(titles, a.title)
  end
  R.code_actions = { titles = titles, err = resp.err and (resp.err.message or tostring(resp.err)) or resp.err }
  vim.lsp.buf.code_action({
    apply = true,
    filter = function(action)
      return action.title:match('^Reproduce') ~= nil
    end,
  })
  local errors_before = #R.notify_errors
  local opened = wait(resp.err and 2000 or 30000, function()
    return buffer_named(repro_rel) ~= nil or #R.notify_errors > errors_before
  end) and buffer_named(repro_rel) ~= nil
  local _, repro_name = buffer_named(repro_rel)
  step('reproduce_action', opened, {
    buffer = repro_name,
    current = vim.api.nvim_buf_get_name(0),
    exists = vim.uv.fs_stat(ws .. '/' .. repro_rel) ~= nil,
  })

  -- 4. :GpuemuReproduce on the diagnostic under the cursor (the same case, written again)
  local rb = buffer_named(repro_rel)
  vim.cmd.buffer(buf)
  if rb then
    vim.api.nvim_buf_delete(rb, { force = true })
  end
  os.remove(ws .. '/' .. repro_rel)
  vim.api.nvim_win_set_cursor(0, { d.lnum + 1, d.col })
  g.last_command['gpuemu.reproduce'] = nil
  local function reproduced()
    return buffer_named(repro_rel) ~= nil
      and vim.uv.fs_stat(ws .. '/' .. repro_rel) ~= nil
      and g.last_command['gpuemu.reproduce'] ~= nil
      and not command_failed('gpuemu.reproduce')
  end
  R.reproduce_messages = watch_messages(function()
    vim.cmd('GpuemuReproduce')
  end, function()
    return reproduced() or command_failed('gpuemu.reproduce')
  end, 30000)
  R.reproduce_area = g.message_area
  local again = reproduced()
  -- the reproduction is the current buffer, the cursor on its verdict line
  local cur = vim.api.nvim_buf_get_name(0)
  R.repro_cursor = {
    buffer = cur,
    line = vim.api.nvim_win_get_cursor(0)[1],
    text = vim.api.nvim_get_current_line(),
    verdict = select(2, g.repro_lines(vim.api.nvim_buf_get_lines(0, 0, -1, false))),
  }
  step('reproduce_command', again, {
    exists = vim.uv.fs_stat(ws .. '/' .. repro_rel) ~= nil,
    result = clean(g.last_command['gpuemu.reproduce']),
  })

  -- 5. :GpuemuOps: every op and kernel with its status, in the quickfix list
  vim.cmd.buffer(buf)
  vim.fn.setqflist({}, ' ', { title = 'none' })
  vim.cmd('GpuemuOps')
  local listed = wait(15000, function()
    return vim.fn.getqflist({ title = 1 }).title == 'gpuemu ops'
  end)
  local qf = vim.fn.getqflist({ items = 1, title = 1 })
  R.ops_qf = {}
  for _, item in ipairs(qf.items) do
    table.insert(R.ops_qf, {
      filename = item.bufnr > 0 and vim.api.nvim_buf_get_name(item.bufnr) or '',
      lnum = item.lnum,
      type = item.type,
      text = item.text,
      user_data = clean(item.user_data),
    })
  end
  step('ops', listed, { count = #qf.items })

  -- 6. :GpuemuRun on the correct twin (gpuemu.runOp), answered when the run is over
  vim.cmd.buffer(buf)
  g.last_run = nil
  vim.cmd('GpuemuRun ' .. twin)
  local ran = wait(60000, function()
    return g.last_run ~= nil
  end)
  R.run = clean(g.last_run)
  R.twin_state = clean(op_state(twin))
  step('run', ran)

  -- 7. :GpuemuMinimize on the diagnostic: re-published with the minimized shape
  if do_minimize then
    vim.cmd.buffer(buf)
    d, data = op_diag(buf)
    vim.api.nvim_win_set_cursor(0, { d.lnum + 1, d.col })
    R.minimize_seed = data.seed
    R.minimize_before = clean(data.shapes)
    g.last_command['gpuemu.minimize'] = nil
    local function shrunk()
      local md = select(2, op_diag(buf, true))
      return md ~= nil and md.seed == data.seed and g.last_command['gpuemu.minimize'] ~= nil
    end
    R.minimize_messages = watch_messages(function()
      vim.cmd('GpuemuMinimize')
    end, function()
      return shrunk() or command_failed('gpuemu.minimize')
    end, 60000)
    R.minimize_area = g.message_area
    local _, md = op_diag(buf, true)
    R.minimized_diag = clean(md)
    R.minimize_result = clean(g.last_command['gpuemu.minimize'])
    step('minimize', shrunk())
  end

  -- 7b. :GpuemuDebug without nvim-dap: it says why, in one line
  vim.cmd.buffer(buf)
  d = op_diag(buf)
  vim.api.nvim_win_set_cursor(0, { d.lnum + 1, d.col })
  local debug_done = false
  R.debug_messages = watch_messages(function()
    g.debug(nil, {
      on_done = function()
        debug_done = true
      end,
    })
  end, function()
    return debug_done
  end, 30000)
  R.debug_area = g.message_area
  R.has_dap = pcall(require, 'dap')

  -- 8. :GpuemuFailures: the gpuemu diagnostics as a quickfix list
  vim.cmd.buffer(buf)
  vim.cmd('GpuemuFailures')
  local fq = vim.fn.getqflist({ items = 1, title = 1 })
  R.failures_qf = { title = fq.title, items = {} }
  for _, item in ipairs(fq.items) do
    table.insert(R.failures_qf.items, {
      filename = item.bufnr > 0 and vim.api.nvim_buf_get_name(item.bufnr) or '',
      lnum = item.lnum,
      text = item.text,
      user_data = clean(item.user_data),
    })
  end
  step('failures', #fq.items > 0)

  -- 9. :checkhealth gpuemu
  vim.cmd.buffer(buf)
  vim.cmd('checkhealth gpuemu')
  R.health = vim.api.nvim_buf_get_lines(0, 0, -1, false)
end

-- 10. gpuemu.toml completion through vim.lsp.completion: the omnifunc Neovim sets on attach
--     (vim.lsp.omnifunc, i.e. vim.lsp.completion) on a typed `distributions = ["`, in Insert mode. Insert
--     mode only runs once this file has returned to the main loop, so this step ends asynchronously:
--     toml_completion() prepares and feeds the keys, a timer reads the popup menu and then finish() runs.
local function toml_completion(done)
  local toml = ws .. '/gpuemu.toml'
  vim.cmd.edit(vim.fn.fnameescape(toml))
  local tbuf = vim.api.nvim_get_current_buf()
  local attached = wait(20000, function()
    return vim.lsp.get_clients({ name = 'gpuemu', bufnr = tbuf })[1] ~= nil
  end)
  R.toml_completion = { attached = attached, filetype = vim.bo[tbuf].filetype, omnifunc = vim.bo[tbuf].omnifunc }
  if not attached then
    step('toml_completion', false)
    return done()
  end
  -- a new line in the op's [[ops]] entry, after its name
  local lines = vim.api.nvim_buf_get_lines(tbuf, 0, -1, false)
  local at
  for i, l in ipairs(lines) do
    if l == string.format('name = "%s"', op) then
      at = i
      break
    end
  end
  local typed = 'distributions = ["'
  vim.api.nvim_buf_set_lines(tbuf, at, at, false, { typed })
  vim.api.nvim_win_set_cursor(0, { at + 1, 0 })
  R.toml_completion.line = typed
  vim.api.nvim_feedkeys(vim.keycode('A<C-x><C-o>'), 'n', false)
  local timer = assert(vim.uv.new_timer())
  local started = vim.uv.now()
  timer:start(
    100,
    100,
    vim.schedule_wrap(function()
      local info = vim.fn.complete_info({ 'items', 'mode' })
      local over = vim.uv.now() - started > 20000
      if not over and not (vim.fn.pumvisible() == 1 and #(info.items or {}) > 0) then
        return
      end
      timer:stop()
      timer:close()
      local items = {}
      for _, it in ipairs(info.items or {}) do
        local lsp_item = vim.tbl_get(it, 'user_data', 'nvim', 'lsp', 'completion_item') or {}
        table.insert(items, { word = it.word, abbr = it.abbr, label = lsp_item.label })
      end
      R.toml_completion.items = items
      R.toml_completion.mode = info.mode
      R.toml_completion.vim_mode = vim.api.nvim_get_mode().mode
      step('toml_completion', #items > 0)
      vim.api.nvim_feedkeys(vim.keycode('<C-e><Esc>'), 'n', false)
      vim.schedule(done)
    end)
  )
end

local function finish()
  local g_ok, g = pcall(require, 'gpuemu')
  if g_ok then
    R.progress_log = clean(g.progress_log)
    R.statusline_end = g.statusline()
  end
  R.messages = vim.fn.execute('messages')
  R.watch_messages = nil
  R.elapsed = now_s()
  local f = assert(io.open(out, 'w'))
  f:write(vim.json.encode(clean(R)))
  f:close()
  -- stop the server politely, then quit
  for _, c in ipairs(vim.lsp.get_clients({ name = 'gpuemu' })) do
    c:stop()
  end
  vim.wait(3000, function()
    return #vim.lsp.get_clients({ name = 'gpuemu' }) == 0
  end, 50)
  vim.cmd('qa!')
end

local ok, err = xpcall(main, debug.traceback)
if not ok then
  table.insert(R.errors, err)
  finish()
else
  local ok2, err2 = xpcall(toml_completion, debug.traceback, finish)
  if not ok2 then
    table.insert(R.errors, err2)
    finish()
  end
end
