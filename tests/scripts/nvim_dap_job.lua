-- Drives a real nvim-dap (headless Neovim) against a job's DAP endpoint, as a user would: with
-- nvim-dap-python ($RTDEBUG_NVIM_DAP_PYTHON) or without (the adapter is the few lines docs/other-editors.md
-- shows); or ($RTDEBUG_NVIM_RUN) against one rank, running the line `rtdebug attach --format nvim-dap` printed. Every rank must arrive as a
-- child session, stop at the breakpoint, and evaluate dist.get_rank(); then each child continues and
-- disconnects, and so does the parent (or, with RTDEBUG_NVIM_END=terminate, the parent is terminated: the
-- whole job ends). What happened is written to $RTDEBUG_NVIM_OUT as JSON.
local out_path = os.getenv('RTDEBUG_NVIM_OUT')
local port = tonumber(os.getenv('RTDEBUG_NVIM_PORT'))
local script = os.getenv('RTDEBUG_NVIM_SCRIPT')
local line = tonumber(os.getenv('RTDEBUG_NVIM_LINE'))
local nranks = tonumber(os.getenv('RTDEBUG_NVIM_RANKS'))
local dap = require('dap')
local result = { children = {}, ranks = {}, lines = {}, log = {} }
local parent = nil
local stopped = {}

local function finish(status)
  result.status = status
  local f = assert(io.open(out_path, 'w'))
  f:write(vim.fn.json_encode(result))
  f:close()
  vim.cmd('qa!')
end
vim.defer_fn(function() finish('timeout') end, tonumber(os.getenv('RTDEBUG_NVIM_TIMEOUT_MS') or '240000'))

local dap_python = os.getenv('RTDEBUG_NVIM_DAP_PYTHON') or ''
local solo = os.getenv('RTDEBUG_NVIM_RUN') or ''  -- one rank: what `rtdebug attach --format nvim-dap` printed
if dap_python ~= '' then  -- nvim-dap-python's adapter: it connects to an attach configuration's `connect`
  vim.opt.rtp:append(dap_python)
  require('dap-python').setup('python3')
else  -- without nvim-dap-python: connect to the address the (child) configuration names
  dap.adapters.python = function(callback, config)
    local c = config.connect or config
    callback({ type = 'server', host = c.host or '127.0.0.1', port = c.port })
  end
end

local function leave()
  table.insert(result.log, 'leaving')
  if solo ~= '' then
    stopped[1].session:disconnect({ terminateDebuggee = false }, function() finish('ok') end)
    return
  end
  for _, child in pairs(parent.children) do
    child:disconnect({ terminateDebuggee = false })
  end
  vim.defer_fn(function()
    parent:disconnect({ terminateDebuggee = false }, function() finish('ok') end)
  end, 500)
end

local function continue_all()
  require('dap.breakpoints').clear()
  local left = #stopped
  for _, s in ipairs(stopped) do
    s.session:request('setBreakpoints', { source = { path = script }, breakpoints = {} }, function(e)
      if e then table.insert(result.log, 'setBreakpoints: ' .. vim.inspect(e)) end
      s.session:request('continue', { threadId = s.thread }, function(err)
        if err then table.insert(result.log, 'continue: ' .. vim.inspect(err)) end
        left = left - 1
        if left == 0 then leave() end
      end)
    end)
  end
end

dap.listeners.after.event_initialized['rtdebug'] = function(session)
  if session.parent == nil and solo == '' then
    parent = session
  else
    table.insert(result.children, session.config.name)
  end
end

dap.listeners.after.event_stopped['rtdebug'] = function(session, body)
  table.insert(result.log, string.format('%s stopped: %s', session.config.name, body.reason))
  if (session.parent == nil and solo == '') or body.reason ~= 'breakpoint' or result.ranks[session.config.name] then return end
  result.ranks[session.config.name] = 'stopped'
  session:request('stackTrace', { threadId = body.threadId, levels = 1 }, function(err, st)
    if err then table.insert(result.log, 'stackTrace: ' .. vim.inspect(err)) return end
    local frame = st.stackFrames[1]
    local args = { expression = 'dist.get_rank()', frameId = frame.id, context = 'repl' }
    session:request('evaluate', args, function(err2, r)
      local name = session.config.name
      result.ranks[name] = err2 and ('error: ' .. vim.inspect(err2)) or r.result
      result.lines[name] = frame.line
      table.insert(stopped, { session = session, thread = body.threadId })
      if #stopped == nranks then
        if os.getenv('RTDEBUG_NVIM_END') == 'terminate' then  -- :DapTerminate with the parent focused
          dap.set_session(parent)
          dap.terminate(nil, nil, function() finish('ok') end)
        else
          continue_all()
        end
      end
    end)
  end)
end

vim.cmd('edit ' .. vim.fn.fnameescape(script))
require('dap.breakpoints').set({}, vim.api.nvim_get_current_buf(), line)
if solo ~= '' then
  assert(loadstring(solo))()
else
  dap.run({ type = 'python', request = 'attach', name = 'job', connect = { host = '127.0.0.1', port = port } })
end
