-- Starts the server the way a user's config would, with no test overrides, and records whether it
-- attached:
--   GPUEMU_NVIM_SNIPPET set: the Neovim 0.10 fallback of editors/neovim/README.md, as-is (vim.lsp.start
--   in a FileType autocmd; vim.lsp.start exists in 0.11 too), and no vim.lsp.enable;
--   else: vim.lsp.enable('gpuemu') with lsp/gpuemu.lua's defaults (cmd found in <root>/.venv).
--   nvim --headless -u NONE -i NONE -c 'luafile attach.lua'
local plugin = assert(os.getenv('GPUEMU_NVIM_PLUGIN'))
local snippet = os.getenv('GPUEMU_NVIM_SNIPPET')
local ws = assert(os.getenv('GPUEMU_NVIM_WS'))
local out = assert(os.getenv('GPUEMU_NVIM_OUT'))
local file = os.getenv('GPUEMU_NVIM_FILE') or 'softmax_tail_mask.py'

local R = { errors = {} }
local ok, err = xpcall(function()
  vim.opt.runtimepath:prepend(plugin)
  vim.opt.swapfile = false
  vim.cmd('filetype on')
  vim.cmd.runtime('plugin/gpuemu.lua')
  if snippet and snippet ~= '' then
    dofile(snippet)
  else
    vim.lsp.enable('gpuemu')
  end
  vim.cmd.edit(vim.fn.fnameescape(ws .. '/' .. file))
  local buf = vim.api.nvim_get_current_buf()
  R.attached = vim.wait(30000, function()
    local c = vim.lsp.get_clients({ name = 'gpuemu', bufnr = buf })[1]
    return c ~= nil and c.initialized
  end, 50)
  local c = vim.lsp.get_clients({ name = 'gpuemu', bufnr = buf })[1]
  if c then
    R.root_dir = c.root_dir
    R.cmd = type(c.config.cmd) == 'table' and c.config.cmd or nil
    R.init_options = c.config.init_options
    R.has_op_state_handler = type((c.config.handlers or {})['gpuemu/opState']) == 'function'
  end
  R.diagnostics = vim.wait(60000, function()
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      local data = d.user_data and d.user_data.lsp and d.user_data.lsp.data
      if d.source == 'gpuemu' and type(data) == 'table' and data.op then
        return true
      end
    end
    return false
  end, 50)
  R.commands = vim.fn.exists(':GpuemuOps') == 2
  -- a buffer outside any gpuemu workspace gets no client
  vim.cmd.edit(vim.fn.fnameescape(vim.fn.fnamemodify(ws, ':h') .. '/outside.py'))
  vim.wait(500)
  R.outside_clients = #vim.lsp.get_clients({ bufnr = vim.api.nvim_get_current_buf() })
  -- nor a toml file of the workspace that is not its gpuemu.toml
  vim.cmd.edit(vim.fn.fnameescape(ws .. '/pyproject.toml'))
  R.other_toml_filetype = vim.bo.filetype
  vim.wait(500)
  R.other_toml_clients = #vim.lsp.get_clients({ bufnr = vim.api.nvim_get_current_buf() })
end, debug.traceback)
if not ok then
  table.insert(R.errors, err)
end
local f = assert(io.open(out, 'w'))
f:write(vim.json.encode(R))
f:close()
for _, c in ipairs(vim.lsp.get_clients()) do
  c:stop()
end
vim.wait(3000, function()
  return #vim.lsp.get_clients() == 0
end, 50)
vim.cmd('qa!')
