--- gpuemu-ls for Neovim: the logic behind lsp/gpuemu.lua and the :Gpuemu* commands.
---
--- The language server does the work (validation, diagnostics, code actions, reproductions);
--- this module keeps the per-op state the server announces with `gpuemu/opState`, echoes
--- work-done progress and failures, and implements the user commands on top of the server's
--- `gpuemu/discoverOps` request and its `gpuemu.*` commands (workspace/executeCommand).
---
--- Works with Neovim 0.11+ (vim.lsp.config / vim.lsp.enable) and 0.10 (vim.lsp.start, see the
--- README).

local M = {}

M.name = 'gpuemu'
M.root_markers = { 'gpuemu.toml' }
M.filetypes = { 'python', 'cuda', 'toml' }

--- Options of the Neovim side (the server's own options go in `init_options`, see docs/lsp.md).
--- @class gpuemu.Options
--- @field progress 'echo'|'notify'|false how to show $/progress from gpuemu-ls
--- @field notify_failures boolean echo a line when an op fails, errors, or passes again
--- @field open_quickfix boolean open the quickfix window after :GpuemuOps and :GpuemuFailures
--- @field icons table<string,string> statusline symbols
M.options = {
  progress = 'echo',
  notify_failures = true,
  open_quickfix = true,
  codelens = true,
  icons = {
    running = '●',
    failed = '✗',
    error = '!',
    not_run = '○',
    passed = '✓',
    never_run = '·',
  },
}

--- Every message the plugin showed (newest last, bounded): what a user saw, for tests and :messages.
M.shown = {}
--- What the message area holds now, as far as the plugin put it there (the last echo or notification).
M.message_area = nil

--- Per-op state from gpuemu/opState and gpuemu/discoverOps: state[workspace root][item id].
M.state = {}
--- Recent progress messages (newest last), as echoed; bounded.
M.progress_log = {}
--- Result of the last :GpuemuRun ({results, errors}); of the last gpuemu.* command, per command.
M.last_run = nil
M.last_command = {}
--- In-flight :GpuemuRun requests: request id -> client id.
M.requests = {}

local has_011 = vim.fn.has('nvim-0.11') == 1
local TERMINAL = {
  passed = true,
  failed = true,
  error = true,
  not_run = true,
  cancelled = true,
  errored = true,
}

--- @param opts? gpuemu.Options
function M.setup(opts)
  M.options = vim.tbl_deep_extend('force', M.options, opts or {})
  return M
end

-- ----------------------------------------------------------------------------------------------
-- Starting the server
-- ----------------------------------------------------------------------------------------------

local function is_windows()
  return vim.fn.has('win32') == 1
end

--- The server command for a workspace: its own .venv's gpuemu-ls when there is one (the package is
--- usually installed into the project's venv), else `gpuemu-ls` from PATH.
--- @param root? string workspace root (folder holding gpuemu.toml)
--- @return string[]
function M.resolve_cmd(root)
  if root and root ~= '' then
    local candidates = is_windows()
        and { root .. '/.venv/Scripts/gpuemu-ls.exe', root .. '/venv/Scripts/gpuemu-ls.exe' }
      or { root .. '/.venv/bin/gpuemu-ls', root .. '/venv/bin/gpuemu-ls' }
    for _, exe in ipairs(candidates) do
      if vim.fn.executable(exe) == 1 then
        return { exe }
      end
    end
  end
  return { 'gpuemu-ls' }
end

--- The folder holding gpuemu.toml above a buffer, or nil. A toml buffer only counts when it is a
--- gpuemu.toml (other toml files are not the server's business).
--- @param bufnr integer
--- @return string?
function M.find_root(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == '' then
    return nil
  end
  if vim.bo[bufnr].filetype == 'toml' and vim.fs.basename(name) ~= 'gpuemu.toml' then
    return nil
  end
  return vim.fs.root(bufnr, M.root_markers)
end

local function echo(msg, hl, history)
  M.message_area = msg
  vim.api.nvim_echo({ { msg, hl } }, history or false, {})
end

-- Progress comes case by case from ops validated in parallel: echo only the latest message, at
-- most every 100 ms, so that the message area never fills up into a hit-enter prompt. A notification
-- drops the echo still pending: what the server said outranks a progress line from before it.
local echo_pending, echo_timer_armed = nil, false
--- When the plugin last showed a notification (vim.uv.now()), and when each progress token began: a job
--- that ended without a message of its own after one was shown leaves it on screen (not "...: done").
local notified_at, progress_began = -1, {}

--- A message fitted on one screen line when there is a UI (no hit-enter prompts).
local function one_line(msg)
  msg = msg:gsub('%s*\n%s*', ' | ')
  if #vim.api.nvim_list_uis() > 0 then
    local width = math.max(20, vim.o.columns - 12)
    if vim.fn.strdisplaywidth(msg) > width then
      msg = vim.fn.strcharpart(msg, 0, width - 1) .. '…'
    end
  end
  return msg
end

local function notify(msg, level)
  msg = one_line(msg)
  echo_pending = nil
  notified_at = vim.uv.now()
  M.message_area = msg
  table.insert(M.shown, msg)
  if #M.shown > 200 then
    table.remove(M.shown, 1)
  end
  vim.notify(msg, level or vim.log.levels.INFO, { title = 'gpuemu' })
end

--- Details of the last message that did not fit on one line, for :GpuemuDetails (a float).
M.last_details = nil

--- A float with lines of text (details of a message that was cut to one line).
function M.show_details(lines)
  lines = lines or M.last_details
  if not lines or #lines == 0 then
    return notify('gpuemu: no details')
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].bufhidden = 'wipe'
  local width = 20
  for _, l in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(l))
  end
  width = math.min(width, math.max(20, vim.o.columns - 4))
  local height = math.min(#lines, math.max(1, vim.o.lines - 6))
  local win = vim.api.nvim_open_win(buf, true, {
    relative = 'editor',
    width = width,
    height = height,
    row = math.max(0, math.floor((vim.o.lines - height) / 2) - 1),
    col = math.max(0, math.floor((vim.o.columns - width) / 2)),
    style = 'minimal',
    border = 'rounded',
    title = ' gpuemu ',
  })
  vim.keymap.set('n', 'q', '<cmd>close<cr>', { buffer = buf, nowait = true })
  return win
end

--- `window/showMessage` from gpuemu-ls: one line through vim.notify (never a hit-enter prompt), the
--- server's text verbatim; the whole text stays available for :GpuemuDetails.
function M.on_show_message(_, result, _)
  if type(result) ~= 'table' or type(result.message) ~= 'string' then
    return vim.NIL
  end
  local lines = vim.split(result.message, '\n', { plain = true })
  if #lines > 1 or vim.fn.strdisplaywidth(result.message) > math.max(20, vim.o.columns - 12) then
    M.last_details = lines
  end
  local levels = { vim.log.levels.ERROR, vim.log.levels.WARN, vim.log.levels.INFO, vim.log.levels.DEBUG }
  notify(result.message, levels[result.type] or vim.log.levels.INFO)
  return vim.NIL
end

--- The lines of a standalone reproduction where the op is called (a breakpoint) and where the
--- verdict is printed, 1-based; nil when not found.
function M.repro_lines(lines)
  local script = false
  for _, l in ipairs(lines) do
    if l:match('^OP_SCRIPT = [\'"]') then
      script = true
    end
  end
  local call, verdict
  for i, l in ipairs(lines) do
    if not call and ((script and l:match('^%s*out = run_script%(OP_SCRIPT')) or (not script and l:match('^%s*out = call%(OP_CALL'))) then
      call = i
    end
    if not verdict and l:match('^%s*print%("FAILED: "') then
      verdict = i
    end
  end
  return call, verdict
end

--- `window/showDocument`: a reproduction opens at its verdict line; anything else as Neovim does.
function M.on_show_document(err, result, ctx, config)
  local uri = type(result) == 'table' and result.uri or nil
  local fname = uri and vim.uri_to_fname(uri) or nil
  if fname and fname:match('[/\\]%.gpuemu[/\\]repro[/\\][^/\\]+%.py$') then
    vim.cmd.edit(vim.fn.fnameescape(fname))
    local _, verdict = M.repro_lines(vim.api.nvim_buf_get_lines(0, 0, -1, false))
    if verdict then
      vim.api.nvim_win_set_cursor(0, { verdict, 0 })
      vim.cmd('normal! zz')
    end
    return { success = true }
  end
  local default = vim.lsp.handlers['window/showDocument']
  return default and default(err, result, ctx, config) or { success = false }
end

local function echo_latest(msg, hl)
  echo_pending = { msg, hl }
  if echo_timer_armed then
    return
  end
  echo_timer_armed = true
  vim.defer_fn(function()
    echo_timer_armed = false
    if echo_pending then
      echo(one_line(echo_pending[1]), echo_pending[2])
      echo_pending = nil
    end
  end, 100)
end

-- Op verdicts arrive together after a run of many ops: one message for one op (with the
-- diagnosis and replay command), one summary line for several.
local notes = {}
local function flush_notes()
  local batch = notes
  notes = {}
  if #batch == 1 then
    return notify(batch[1].msg, batch[1].level)
  end
  local bad, good, level = {}, {}, vim.log.levels.INFO
  for _, n in ipairs(batch) do
    if n.ok then
      good[#good + 1] = n.name
    else
      bad[#bad + 1] = n.name .. ' ' .. n.state
      level = math.max(level, n.level)
    end
  end
  local parts = {}
  if #bad > 0 then
    parts[#parts + 1] = #bad .. ' not passed: ' .. table.concat(bad, ', ')
  end
  if #good > 0 then
    parts[#parts + 1] = 'passing again: ' .. table.concat(good, ', ')
  end
  notify('gpuemu: ' .. table.concat(parts, '; ') .. ' (:GpuemuFailures)', level)
end
local function note(entry)
  notes[#notes + 1] = entry
  if #notes == 1 then
    vim.defer_fn(flush_notes, 200)
  end
end

--- `$/progress`: Neovim's own handler (which feeds vim.lsp.status() and fires LspProgress), then
--- an echoed line so that progress is visible without a progress plugin.
function M.on_progress(err, result, ctx, config)
  local default = vim.lsp.handlers['$/progress']
  local ret = default and default(err, result, ctx, config) or nil
  local value = type(result) == 'table' and result.value or nil
  if type(value) ~= 'table' or not value.kind then
    return ret
  end
  local msg = 'gpuemu: ' .. (value.title or 'working'):gsub('^gpuemu: ', '')
  -- Debug, Reproduce and Minimize end without a message, after the server said what they found
  -- (window/showMessage): "...: done" would replace it at once
  local quiet = false
  if value.kind == 'begin' then
    progress_began[result.token] = vim.uv.now()
  elseif value.kind == 'end' then
    local began = progress_began[result.token]
    progress_began[result.token] = nil
    quiet = (value.message == nil or value.message == '') and began ~= nil and notified_at >= began
  end
  if value.kind == 'end' then
    msg = msg .. ': ' .. (value.message or 'done')
  elseif value.message and value.message ~= '' then
    msg = msg .. ': ' .. value.message
  end
  if value.percentage and value.kind ~= 'end' then
    msg = string.format('%s (%d%%)', msg, value.percentage)
  end
  table.insert(M.progress_log, { kind = value.kind, token = result.token, message = msg })
  if #M.progress_log > 200 then
    table.remove(M.progress_log, 1)
  end
  local how = M.options.progress
  if quiet then
    how = nil
  end
  if how == 'echo' then
    echo_latest(msg, value.kind == 'end' and 'Normal' or 'ModeMsg')
  elseif how == 'notify' then
    notify(msg)
  end
  vim.schedule(function()
    pcall(vim.cmd.redrawstatus)
  end)
  return ret
end

--- `gpuemu/opState`: remember the op's state (statusline, :GpuemuOps) and echo failures.
function M.on_op_state(_, params, ctx)
  if type(params) ~= 'table' or not params.id then
    return
  end
  local root = params.workspace or '?'
  M.state[root] = M.state[root] or {}
  local prev = M.state[root][params.id]
  local entry = vim.tbl_extend('force', {}, params, { client_id = ctx and ctx.client_id, time = vim.uv.now() })
  M.state[root][params.id] = entry
  vim.schedule(function()
    pcall(vim.cmd.redrawstatus)
  end)
  if not M.options.notify_failures or next(M.requests) ~= nil then
    return -- (a :GpuemuRun in flight sums its verdicts up when it is done)
  end
  local st = params.state
  if st == 'failed' or st == 'error' or st == 'errored' or st == 'not_run' then
    local msg = string.format('gpuemu: %s %s: %s', params.name, st, params.message or '')
    if params.diagnosis and params.diagnosis ~= '' then
      msg = msg .. ' — ' .. params.diagnosis
    end
    local first = params.failures and params.failures[1]
    if first and first.replay then
      msg = msg .. ' [' .. first.replay .. ']'
    end
    local level = st == 'failed' and vim.log.levels.WARN or vim.log.levels.ERROR
    note({ msg = msg, level = level, name = params.name, state = st })
  elseif st == 'passed' and prev and (prev.state == 'failed' or prev.state == 'error') then
    note({ msg = string.format('gpuemu: %s passes now', params.name), ok = true, name = params.name })
  end
end

--- The configuration for vim.lsp.config('gpuemu', ...) (lsp/gpuemu.lua returns it) and for
--- vim.lsp.start on Neovim 0.10.
--- @return vim.lsp.Config
function M.lsp_config()
  return {
    -- a function so that the workspace's own .venv/bin/gpuemu-ls is found (Neovim 0.11 passes
    -- the resolved config; 0.10 does not, and the README's fallback passes a list instead)
    cmd = function(dispatchers, config)
      local root = config and config.root_dir or vim.fs.root(0, M.root_markers)
      return vim.lsp.rpc.start(M.resolve_cmd(root), dispatchers, {
        cwd = config and config.cmd_cwd or root,
        env = config and config.cmd_env or nil,
      })
    end,
    filetypes = M.filetypes,
    root_markers = M.root_markers,
    root_dir = function(bufnr, on_dir)
      local root = M.find_root(bufnr)
      if root then
        on_dir(root)
      end
    end,
    workspace_required = true,
    init_options = {
      mode = 'quick',
      onSave = true,
      runOnOpen = 'quick',
      trusted = true,
      -- Neovim on Linux offers no dynamic didChangeWatchedFiles: the server watches by itself
      watch = 'auto',
    },
    -- the server asks for a code-lens refresh when a run's results are in (Neovim 0.11 neither declares
    -- nor handles workspace/codeLens/refresh itself): without it a lens would say "queued" until the next
    -- BufEnter or write
    capabilities = { workspace = { codeLens = { refreshSupport = true } } },
    handlers = {
      ['gpuemu/opState'] = M.on_op_state,
      ['workspace/codeLens/refresh'] = M.on_codelens_refresh,
      ['$/progress'] = M.on_progress,
      ['window/showMessage'] = M.on_show_message,
      ['window/showDocument'] = M.on_show_document,
    },
    on_attach = function(client, bufnr)
      M.on_attach(client, bufnr)
    end,
  }
end

--- `workspace/codeLens/refresh`: the server's results changed (a run ended); fetch the lenses again for
--- the buffers of that client (unless `codelens = false`).
function M.on_codelens_refresh(_, _, ctx)
  local client = ctx and vim.lsp.get_client_by_id(ctx.client_id)
  if M.options.codelens and client then
    vim.schedule(function()
      for bufnr in pairs(client.attached_buffers or {}) do
        if vim.api.nvim_buf_is_loaded(bufnr) then
          pcall(vim.lsp.codelens.refresh, { bufnr = bufnr })
        end
      end
    end)
  end
  return vim.NIL
end

--- On attach: code lenses (unless `codelens = false`) and the stored results of every op (statusline).
function M.on_attach(client, bufnr)
  if M.options.codelens and client.server_capabilities and client.server_capabilities.codeLensProvider then
    pcall(vim.lsp.codelens.refresh, { bufnr = bufnr })
    local group = vim.api.nvim_create_augroup('gpuemu-codelens-' .. bufnr, { clear = true })
    vim.api.nvim_create_autocmd({ 'BufEnter', 'BufWritePost', 'InsertLeave' }, {
      group = group,
      buffer = bufnr,
      callback = function()
        pcall(vim.lsp.codelens.refresh, { bufnr = bufnr })
      end,
    })
  end
  M.discover_quietly(client)
end

--- gpuemu/discoverOps without a message: the stored status of every op, for the statusline.
function M.discover_quietly(client)
  local req = vim.fn.has('nvim-0.11') == 1 and function(...)
    return client:request(...)
  end or function(...)
    return client.request(...)
  end
  req('gpuemu/discoverOps', vim.empty_dict(), function(err, result)
    if not err and result then
      M._remember_discovery(result, client.id)
      pcall(vim.cmd.redrawstatus)
    end
  end)
end

-- ----------------------------------------------------------------------------------------------
-- Talking to the server
-- ----------------------------------------------------------------------------------------------

local function request(client, method, params, handler, bufnr)
  if has_011 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

local function request_sync(client, method, params, timeout_ms, bufnr)
  if has_011 then
    return client:request_sync(method, params, timeout_ms, bufnr)
  end
  return client.request_sync(method, params, timeout_ms, bufnr)
end

--- gpuemu clients: those attached to the buffer, else all running ones.
--- @param bufnr? integer
--- @return vim.lsp.Client[]
function M.clients(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local attached = vim.lsp.get_clients({ name = M.name, bufnr = bufnr })
  if #attached > 0 then
    return attached
  end
  return vim.lsp.get_clients({ name = M.name })
end

local function client_for(bufnr, workspace)
  local clients = M.clients(bufnr)
  if workspace then
    for _, c in ipairs(clients) do
      if c.root_dir and vim.fs.normalize(c.root_dir) == vim.fs.normalize(workspace) then
        return c
      end
    end
    for _, c in ipairs(vim.lsp.get_clients({ name = M.name })) do
      if c.root_dir and vim.fs.normalize(c.root_dir) == vim.fs.normalize(workspace) then
        return c
      end
    end
  end
  return clients[1]
end

local function no_client()
  notify('gpuemu: no gpuemu-ls client is running (open a file of a gpuemu.toml workspace)', vim.log.levels.WARN)
end

local function response_error(err)
  if not err then
    return nil
  end
  return type(err) == 'table' and (err.message or vim.inspect(err)) or tostring(err)
end

--- Run `gpuemu.*` through workspace/executeCommand.
--- @param client vim.lsp.Client
--- @param command string e.g. 'gpuemu.reproduce'
--- @param args table the command's single argument object
--- @param on_done? fun(err: any, result: any)
function M.execute(client, command, args, bufnr, on_done)
  local params = { command = command, arguments = { args } }
  return request(client, 'workspace/executeCommand', params, function(err, result)
    M.last_command[command] = { err = response_error(err), result = result }
    if err then
      notify(string.format('gpuemu: %s failed: %s', command, response_error(err)), vim.log.levels.ERROR)
    elseif type(result) == 'table' and result.error then
      notify(string.format('gpuemu: %s: %s', command, result.error), vim.log.levels.WARN)
    end
    if on_done then
      on_done(err, result)
    end
  end, bufnr)
end

-- ----------------------------------------------------------------------------------------------
-- :GpuemuRun [op ...]
-- ----------------------------------------------------------------------------------------------

local function summarize(results)
  local counts, bad = {}, {}
  for _, r in ipairs(results) do
    counts[r.status] = (counts[r.status] or 0) + 1
    if r.status ~= 'passed' then
      bad[#bad + 1] = r.name .. ' ' .. r.status
    end
  end
  local parts = {}
  for _, st in ipairs({ 'passed', 'failed', 'error', 'not_run', 'cancelled' }) do
    if counts[st] then
      parts[#parts + 1] = counts[st] .. ' ' .. st
    end
  end
  local msg = 'gpuemu: run done: ' .. (#parts > 0 and table.concat(parts, ', ') or 'nothing ran')
  if #bad > 0 then
    msg = msg .. ' (' .. table.concat(bad, ', ') .. ')'
  end
  return msg, #bad > 0
end

--- Run ops and kernels (all of the workspace when none is named): workspace/executeCommand
--- `gpuemu.runOp {workspace, op}` per name, or `gpuemu.runAll {workspace, mode}`. Each request is
--- answered when its runs are over; progress and per-op states arrive meanwhile.
--- @param names string[] op or kernel names ("kernel:NAME" for a kernel), or {} for everything
--- @param opts? {mode?: 'quick'|'thorough', bufnr?: integer, on_done?: fun(result: table)}
function M.run(names, opts)
  opts = opts or {}
  local bufnr = opts.bufnr or vim.api.nvim_get_current_buf()
  local clients = M.clients(bufnr)
  if #clients == 0 then
    return no_client()
  end
  local calls = {}
  for _, client in ipairs(clients) do
    if names and #names > 0 then
      for _, n in ipairs(names) do
        calls[#calls + 1] = { client, 'gpuemu.runOp', { workspace = client.root_dir, op = n, mode = opts.mode } }
      end
    else
      calls[#calls + 1] = { client, 'gpuemu.runAll', { workspace = client.root_dir, mode = opts.mode } }
    end
  end
  local what = (names and #names > 0) and table.concat(names, ', ') or 'every op'
  echo('gpuemu: running ' .. what .. (opts.mode and (' (' .. opts.mode .. ')') or ''), 'ModeMsg')
  local pending, results, errors = #calls, {}, {}
  for _, call in ipairs(calls) do
    local client, command, args = call[1], call[2], call[3]
    local params = { command = command, arguments = { args } }
    local ok, id
    ok, id = request(client, 'workspace/executeCommand', params, function(err, result)
      if id then
        M.requests[id] = nil
      end
      if err then
        errors[#errors + 1] = response_error(err)
      elseif type(result) == 'table' then
        if result.error then
          errors[#errors + 1] = result.error
        end
        vim.list_extend(results, result.results or {})
      end
      pending = pending - 1
      if pending > 0 then
        return
      end
      M.last_run = { results = results, errors = errors }
      for _, e in ipairs(errors) do
        notify('gpuemu: run failed: ' .. e, vim.log.levels.ERROR)
      end
      local msg, bad = summarize(results)
      notify(msg, bad and vim.log.levels.WARN or vim.log.levels.INFO)
      if opts.on_done then
        opts.on_done(M.last_run)
      end
    end, bufnr)
    if ok and id then
      M.requests[id] = client.id
    end
  end
end

--- Cancel the in-flight :GpuemuRun requests ($/cancelRequest: the server cancels their runs).
function M.cancel()
  local n = 0
  for id, client_id in pairs(M.requests) do
    local client = vim.lsp.get_client_by_id(client_id)
    if client then
      if has_011 then
        client:cancel_request(id)
      else
        client.cancel_request(id)
      end
      n = n + 1
    end
    M.requests[id] = nil
  end
  echo(n > 0 and ('gpuemu: cancelled ' .. n .. ' run(s)') or 'gpuemu: nothing to cancel')
end

--- Names for :GpuemuRun completion: from the last discovery, else asked now (1 s at most).
function M.complete_ops(arglead)
  local names = {}
  local seen = {}
  local function add(n)
    if not seen[n] then
      seen[n] = true
      names[#names + 1] = n
    end
  end
  local function from_state()
    for _, items in pairs(M.state) do
      for id, e in pairs(items) do
        add(e.kind == 'kernel' and id or (e.name or id:gsub('^op:', '')))
      end
    end
  end
  from_state()
  if #names == 0 then
    for _, client in ipairs(M.clients()) do
      local resp = request_sync(client, 'gpuemu/discoverOps', vim.empty_dict(), 1000)
      if resp and resp.result then
        M._remember_discovery(resp.result, client.id)
      end
    end
    from_state()
  end
  table.sort(names)
  return vim.tbl_filter(function(n)
    return vim.startswith(n, arglead or '')
  end, names)
end

-- ----------------------------------------------------------------------------------------------
-- :GpuemuOps
-- ----------------------------------------------------------------------------------------------

function M._remember_discovery(result, client_id)
  for _, ws in ipairs((result or {}).workspaces or {}) do
    M.state[ws.root] = M.state[ws.root] or {}
    for _, item in ipairs(ws.items or {}) do
      local live = M.state[ws.root][item.id]
      local running = live and not TERMINAL[live.state]
      if not running then
        M.state[ws.root][item.id] = vim.tbl_extend('force', live or {}, {
          workspace = ws.root,
          id = item.id,
          name = item.name,
          kind = item.kind,
          state = item.running and 'running' or item.status,
          message = item.message,
          diagnosis = item.diagnosis,
          client_id = client_id,
        })
      end
    end
  end
end

local function uri_path(uri)
  return uri and vim.uri_to_fname(uri) or nil
end

local QF_TYPE = { failed = 'E', error = 'E', errored = 'E', not_run = 'W', unknown = 'I', ['never run'] = 'I', passed = 'I' }

--- Quickfix items for a gpuemu/discoverOps result: every op and kernel at its source (the op's
--- function or script, the kernel's `__global__` line), else at its gpuemu.toml entry.
function M.ops_qf_items(result)
  local items = {}
  for _, ws in ipairs((result or {}).workspaces or {}) do
    for _, e in ipairs(ws.configError or {}) do
      items[#items + 1] = { filename = uri_path(ws.config), lnum = 1, col = 1, type = 'E', text = 'config: ' .. e }
    end
    for _, item in ipairs(ws.items or {}) do
      local uri, rng = item.sourceUri, item.sourceRange
      if not uri or not rng then
        uri, rng = item.uri, item.range
      end
      local status = item.running and 'running' or (item.status or 'unknown')
      if status == 'unknown' then
        status = 'never run' -- no stored result: the op has not run in this workspace yet
      end
      local text = string.format('[%s] %s %s', status, item.kind or 'op', item.name)
      if item.message and item.message ~= '' then
        text = text .. ': ' .. item.message
      end
      if item.diagnosis and item.diagnosis ~= '' then
        text = text .. ' — ' .. item.diagnosis
      end
      items[#items + 1] = {
        filename = uri_path(uri),
        lnum = rng and (rng.start.line + 1) or 1,
        col = rng and (rng.start.character + 1) or 1,
        type = QF_TYPE[status] or 'I',
        text = (text:gsub('\n', ' ')),
        user_data = { id = item.id, name = item.name, kind = item.kind, status = status, workspace = ws.root },
      }
    end
  end
  return items
end

--- Fill the quickfix list with every op and kernel and its status (gpuemu/discoverOps).
--- @param opts? {bufnr?: integer, open?: boolean, on_done?: fun(items: table[])}
function M.ops(opts)
  opts = opts or {}
  local clients = M.clients(opts.bufnr)
  if #clients == 0 then
    return no_client()
  end
  local pending, all = #clients, {}
  for _, client in ipairs(clients) do
    request(client, 'gpuemu/discoverOps', vim.empty_dict(), function(err, result)
      if err then
        notify('gpuemu: discoverOps failed: ' .. response_error(err), vim.log.levels.ERROR)
      else
        M._remember_discovery(result, client.id)
        vim.list_extend(all, M.ops_qf_items(result))
      end
      pending = pending - 1
      if pending == 0 then
        vim.fn.setqflist({}, ' ', { title = 'gpuemu ops', items = all })
        local open = opts.open
        if open == nil then
          open = M.options.open_quickfix
        end
        if open then
          vim.cmd('botright copen')
          vim.cmd('wincmd p')
        end
        echo(string.format('gpuemu: %d ops and kernels', #all))
        if opts.on_done then
          opts.on_done(all)
        end
      end
    end)
  end
end

-- ----------------------------------------------------------------------------------------------
-- Diagnostics: :GpuemuFailures, :GpuemuReproduce, :GpuemuMinimize
-- ----------------------------------------------------------------------------------------------

--- The LSP `data` of a gpuemu diagnostic (op, seed, dtype, shapes, layout, ...), or nil.
--- @param d vim.Diagnostic
function M.diagnostic_data(d)
  local lsp_diag = d.user_data and d.user_data.lsp
  local data = lsp_diag and lsp_diag.data
  if type(data) == 'table' then
    return data
  end
  return nil
end

local function is_gpuemu(d)
  local src = d.source or (d.user_data and d.user_data.lsp and d.user_data.lsp.source)
  return src == 'gpuemu'
end

--- gpuemu diagnostics of a buffer (all buffers when nil), optionally on one line (0-based).
function M.diagnostics(bufnr, lnum)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr, lnum and { lnum = lnum } or nil)) do
    if is_gpuemu(d) then
      out[#out + 1] = d
    end
  end
  return out
end

--- Quickfix list of every gpuemu diagnostic (all buffers, including files not opened).
function M.failures(opts)
  opts = opts or {}
  local diags = M.diagnostics(nil)
  table.sort(diags, function(a, b)
    if (a.severity or 9) ~= (b.severity or 9) then
      return (a.severity or 9) < (b.severity or 9)
    end
    local an, bn = vim.api.nvim_buf_get_name(a.bufnr), vim.api.nvim_buf_get_name(b.bufnr)
    if an ~= bn then
      return an < bn
    end
    return a.lnum < b.lnum
  end)
  local items = vim.diagnostic.toqflist(diags)
  for i, item in ipairs(items) do
    item.text = (item.text or ''):gsub('\n', ' ')
    local data = M.diagnostic_data(diags[i])
    if data then
      item.user_data = data
    end
  end
  vim.fn.setqflist({}, ' ', { title = 'gpuemu failures', items = items })
  local open = opts.open
  if open == nil then
    open = M.options.open_quickfix
  end
  if #items == 0 then
    echo('gpuemu: no failures')
  elseif open then
    vim.cmd('botright copen')
    vim.cmd('wincmd p')
  end
  return items
end

--- The gpuemu diagnostics with a seed under the cursor: those covering the cursor column first,
--- else those on its line.
local function cursor_failures(bufnr)
  local pos = vim.api.nvim_win_get_cursor(0)
  local lnum, col = pos[1] - 1, pos[2]
  local on_line, covering = {}, {}
  for _, d in ipairs(M.diagnostics(bufnr, lnum)) do
    local data = M.diagnostic_data(d)
    if data and data.op and data.seed ~= nil and data.seed ~= vim.NIL then
      on_line[#on_line + 1] = d
      local end_col = (d.end_lnum or d.lnum) > d.lnum and math.huge or (d.end_col or d.col)
      if col >= d.col and col <= end_col then
        covering[#covering + 1] = d
      end
    end
  end
  return #covering > 0 and covering or on_line
end

--- Pick one failure under the cursor (asking when there are several) and call fn(data).
local function with_failure(bufnr, args, fn)
  if args and #args >= 2 then -- :GpuemuReproduce OP SEED
    local client = client_for(bufnr)
    return fn({ op = args[1], seed = tonumber(args[2]), workspace = client and client.root_dir })
  end
  local found = cursor_failures(bufnr)
  if #found == 0 then
    return notify('gpuemu: no gpuemu failure with a seed under the cursor (or give OP SEED)', vim.log.levels.WARN)
  end
  if #found == 1 then
    return fn(M.diagnostic_data(found[1]))
  end
  vim.ui.select(found, {
    prompt = 'gpuemu failure:',
    format_item = function(d)
      local data = M.diagnostic_data(d)
      return string.format('%s seed %s (%s)', data.op, data.seed, data.failureKind or d.code or '')
    end,
  }, function(choice)
    if choice then
      fn(M.diagnostic_data(choice))
    end
  end)
end

local function seed_int(seed)
  return math.floor(tonumber(seed) or 0)
end

--- Replay the failure under the cursor: the server writes .gpuemu/repro/OP_SEED.py and opens it
--- (window/showDocument).
function M.reproduce(args, opts)
  opts = opts or {}
  local bufnr = opts.bufnr or vim.api.nvim_get_current_buf()
  with_failure(bufnr, args, function(data)
    local client = client_for(bufnr, data.workspace)
    if not client then
      return no_client()
    end
    echo_latest(string.format('gpuemu: reproducing %s seed %s', data.op, data.seed), 'ModeMsg')
    M.execute(
      client,
      'gpuemu.reproduce',
      { workspace = data.workspace or client.root_dir, op = data.op, seed = seed_int(data.seed) },
      bufnr,
      opts.on_done
    )
  end)
end

--- Shrink the failure under the cursor to its smallest failing case; the diagnostic is
--- re-published with the minimized shape.
function M.minimize(args, opts)
  opts = opts or {}
  local bufnr = opts.bufnr or vim.api.nvim_get_current_buf()
  with_failure(bufnr, args, function(data)
    local client = client_for(bufnr, data.workspace)
    if not client then
      return no_client()
    end
    echo_latest(string.format('gpuemu: minimizing %s seed %s', data.op, data.seed), 'ModeMsg')
    M.execute(
      client,
      'gpuemu.minimize',
      { workspace = data.workspace or client.root_dir, op = data.op, seed = seed_int(data.seed) },
      bufnr,
      function(err, result)
        -- the server says what it minimized to (window/showMessage, shown verbatim on one line)
        if opts.on_done then
          opts.on_done(err, result)
        end
      end
    )
  end)
end

--- Debug the failure under the cursor: reproduce it, then run the reproduction under nvim-dap with a
--- breakpoint where the op is called. Without nvim-dap, says why (and how to run it instead).
function M.debug(args, opts)
  opts = opts or {}
  local bufnr = opts.bufnr or vim.api.nvim_get_current_buf()
  local has_dap, dap = pcall(require, 'dap')
  with_failure(bufnr, args, function(data)
    local client = client_for(bufnr, data.workspace)
    if not client then
      return no_client()
    end
    local root = data.workspace or client.root_dir
    M.execute(client, 'gpuemu.reproduce', { workspace = root, op = data.op, seed = seed_int(data.seed) }, bufnr, function(err, result)
      if err or type(result) ~= 'table' or not result.repro then
        if opts.on_done then
          opts.on_done('no reproduction', nil)
        end
        return
      end
      local repro = result.repro
      if not has_dap then
        local why = 'gpuemu: :GpuemuDebug needs nvim-dap (with a python adapter, e.g. nvim-dap-python); run it instead: python '
          .. vim.fn.fnamemodify(repro, ':~:.')
        notify(why, vim.log.levels.WARN)
        if opts.on_done then
          opts.on_done(why, nil)
        end
        return
      end
      vim.cmd.edit(vim.fn.fnameescape(repro))
      local rbuf = vim.api.nvim_get_current_buf()
      local call = M.repro_lines(vim.api.nvim_buf_get_lines(rbuf, 0, -1, false))
      if call then
        pcall(function()
          require('dap.breakpoints').set({}, rbuf, call)
        end)
      end
      dap.run({ type = 'python', request = 'launch', name = 'gpuemu: ' .. vim.fs.basename(repro), program = repro, cwd = root })
      if opts.on_done then
        opts.on_done(nil, repro)
      end
    end)
  end)
end

-- ----------------------------------------------------------------------------------------------
-- Statusline
-- ----------------------------------------------------------------------------------------------

--- A short status for the statusline: running ops, then counts of failed/error/passed ops of the
--- current buffer's workspace (of all workspaces when the buffer is in none). '' when nothing is
--- known. Example: `gpuemu ● softmax 3/8 ✗1 ✓16`.
--- @param bufnr? integer
--- @return string
function M.statusline(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local ok, root = pcall(vim.fs.root, bufnr, M.root_markers)
  local roots = {}
  if ok and root and M.state[root] then
    roots = { M.state[root] }
  else
    for _, items in pairs(M.state) do
      roots[#roots + 1] = items
    end
  end
  local icons = M.options.icons
  local running, counts, any = {}, { failed = 0, error = 0, not_run = 0, passed = 0, never_run = 0 }, false
  for _, items in ipairs(roots) do
    for _, e in pairs(items) do
      any = true
      local st = e.state
      if st == 'running' or st == 'queued' then
        running[#running + 1] = e
      elseif st == 'errored' then
        counts.error = counts.error + 1
      elseif st == 'unknown' or st == nil then
        counts.never_run = counts.never_run + 1
      elseif counts[st] then
        counts[st] = counts[st] + 1
      end
    end
  end
  if not any then
    return ''
  end
  local parts = { 'gpuemu' }
  if #running > 0 then
    table.sort(running, function(a, b)
      return (a.name or '') < (b.name or '')
    end)
    local r = running[1]
    local prog = (r.total and r.total > 0) and string.format(' %d/%d', r.done or 0, r.total) or ''
    parts[#parts + 1] = string.format('%s %s%s', icons.running, r.name, prog)
    if #running > 1 then
      parts[#parts + 1] = string.format('(+%d)', #running - 1)
    end
  end
  for _, st in ipairs({ 'failed', 'error', 'not_run', 'passed', 'never_run' }) do
    if counts[st] > 0 then
      parts[#parts + 1] = (icons[st] or '') .. counts[st]
    end
  end
  return table.concat(parts, ' ')
end

--- Whether any op is queued or running (for scripts and tests).
function M.busy()
  for _, items in pairs(M.state) do
    for _, e in pairs(items) do
      if e.state == 'running' or e.state == 'queued' then
        return true
      end
    end
  end
  return false
end

return M
