-- Minimal init for the headless Neovim test of editors/neovim (no user config, no other plugins).
-- GPUEMU_NVIM_PLUGIN: editors/neovim; GPUEMU_NVIM_SERVER: the gpuemu-ls executable.
local plugin = assert(os.getenv('GPUEMU_NVIM_PLUGIN'), 'GPUEMU_NVIM_PLUGIN not set')
local server = assert(os.getenv('GPUEMU_NVIM_SERVER'), 'GPUEMU_NVIM_SERVER not set')
local iterations = tonumber(os.getenv('GPUEMU_NVIM_ITERATIONS') or '8')

vim.opt.runtimepath:prepend(plugin)
vim.opt.swapfile = false
vim.opt.more = false
vim.opt.shortmess:append('I')

vim.lsp.config('gpuemu', {
  cmd = { server },
  -- a quiet server: no first run of every op when the workspace opens (runOnOpen, on by default); the
  -- driver starts each run itself (the open, the save, :GpuemuRun) and waits for that run
  init_options = { mode = 'quick', iterations = iterations, runOnOpen = 'off' },
})
vim.lsp.enable('gpuemu')
