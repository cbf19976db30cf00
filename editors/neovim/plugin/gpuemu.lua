-- gpuemu-ls user commands. The logic lives in lua/gpuemu/init.lua (loaded on first use); the
-- language server itself is configured by lsp/gpuemu.lua and started by vim.lsp.enable('gpuemu').
if vim.g.loaded_gpuemu then
  return
end
vim.g.loaded_gpuemu = true

local function gpuemu()
  return require('gpuemu')
end

local command = vim.api.nvim_create_user_command

command('GpuemuRun', function(o)
  gpuemu().run(o.fargs, { mode = o.bang and 'thorough' or nil })
end, {
  nargs = '*',
  bang = true,
  complete = function(arglead)
    return gpuemu().complete_ops(arglead)
  end,
  desc = 'gpuemu: run ops (every op of the workspace without arguments; ! = thorough)',
})

command('GpuemuCancel', function()
  gpuemu().cancel()
end, { desc = 'gpuemu: cancel the runs started by :GpuemuRun' })

command('GpuemuOps', function()
  gpuemu().ops()
end, { desc = 'gpuemu: quickfix list of every op and kernel with its status' })

command('GpuemuFailures', function()
  gpuemu().failures()
end, { desc = 'gpuemu: quickfix list of the gpuemu diagnostics' })

command('GpuemuReproduce', function(o)
  gpuemu().reproduce(o.fargs)
end, { nargs = '*', desc = 'gpuemu: reproduce the failure under the cursor (or OP SEED)' })

command('GpuemuMinimize', function(o)
  gpuemu().minimize(o.fargs)
end, { nargs = '*', desc = 'gpuemu: minimize the failure under the cursor (or OP SEED)' })

command('GpuemuDebug', function(o)
  gpuemu().debug(o.fargs)
end, { nargs = '*', desc = 'gpuemu: debug the reproduction of the failure under the cursor with nvim-dap' })

command('GpuemuDetails', function()
  gpuemu().show_details()
end, { desc = 'gpuemu: the whole text of the last message cut to one line, in a float' })
