--- :checkhealth gpuemu
local M = {}

function M.check()
  local health = vim.health
  local gpuemu = require('gpuemu')
  health.start('gpuemu-ls')

  if vim.fn.has('nvim-0.11') == 1 then
    health.ok('Neovim 0.11+: vim.lsp.config/vim.lsp.enable("gpuemu") use lsp/gpuemu.lua')
  elseif vim.fn.has('nvim-0.10') == 1 then
    health.warn('Neovim 0.10: no vim.lsp.config/enable; start the server with the vim.lsp.start fallback (README)')
  else
    health.error('Neovim 0.10 or newer is needed')
  end

  -- :checkhealth opens its own buffer: look at the buffer it was called from, else the cwd
  local alt = vim.fn.bufnr('#')
  local from = (alt > 0 and vim.api.nvim_buf_is_valid(alt)) and alt or 0
  local root = vim.fs.root(from, gpuemu.root_markers) or vim.fs.root(vim.fn.getcwd(), gpuemu.root_markers)
  if root then
    health.ok('workspace: ' .. root)
  else
    health.info('no gpuemu workspace here (no gpuemu.toml above the buffer or the cwd)')
  end

  local cmd = gpuemu.resolve_cmd(root)
  if vim.fn.executable(cmd[1]) == 1 then
    health.ok('default server command: ' .. vim.fn.exepath(cmd[1]))
  else
    health.warn(
      'default server command not found: ' .. cmd[1],
      { 'pip install /path/to/gpuemu-ls (a checkout, or a wheel built from one) into the workspace .venv, put gpuemu-ls on PATH, or set cmd in vim.lsp.config' }
    )
  end

  local clients = vim.lsp.get_clients({ name = gpuemu.name })
  if #clients == 0 then
    health.info('no gpuemu-ls client is running')
  end
  for _, c in ipairs(clients) do
    local exp = c.server_capabilities and c.server_capabilities.experimental
    local ok = type(exp) == 'table' and type(exp.gpuemu) == 'table'
    local ccmd = type(c.config.cmd) == 'table' and table.concat(c.config.cmd, ' ') or 'resolved per workspace'
    local line = string.format('client %d: root %s, cmd %s', c.id, c.root_dir or '?', ccmd)
    if ok then
      health.ok(line .. ' (gpuemu protocol ' .. tostring(exp.gpuemu.protocolVersion) .. ')')
    else
      health.warn(line .. ': the server does not advertise the gpuemu messages')
    end
  end
end

return M
