-- Drives a real nvim-dap (headless Neovim) against a job's DAP endpoint, as a user would: with
-- nvim-dap-python ($RTDEBUG_NVIM_DAP_PYTHON) or without (the adapter is the few lines docs/other-editors.md
-- shows); or ($RTDEBUG_NVIM_RUN) against one rank, running the line `rtdebug attach --format nvim-dap` printed.
--
-- The job: every rank must arrive as a child session; the breakpoint (a line only rank 1 runs) stops rank 1,
-- and the ranks' all-stop pauses every other rank (a `stopped` event, reason `pause`, no request of ours).
-- In each, dist.get_rank() is evaluated. Then, by $RTDEBUG_NVIM_END:
--   disconnect: rank 1 alone is continued; every other child must see `continued` (the ranks' continue-all);
--               each child disconnects, then the parent.
--   terminate:  :DapTerminate on rank 1's child (a DAP terminate to one rank): its console must say it keeps
--               running, and the others must be continued (its client left). Written to $RTDEBUG_NVIM_OUT
--               with status `detached`; once the file $RTDEBUG_NVIM_GO exists (the test has looked at the
--               job), :DapTerminate on the job's session: the whole job ends.
-- One rank ($RTDEBUG_NVIM_RUN): it stops at the breakpoint, evaluates, and disconnects.
-- What happened is written to $RTDEBUG_NVIM_OUT as JSON.
local out_path = os.getenv('RTDEBUG_NVIM_OUT')
local port = tonumber(os.getenv('RTDEBUG_NVIM_PORT'))
local script = os.getenv('RTDEBUG_NVIM_SCRIPT')
local line = tonumber(os.getenv('RTDEBUG_NVIM_LINE'))
local nranks = tonumber(os.getenv('RTDEBUG_NVIM_RANKS'))
local ending = os.getenv('RTDEBUG_NVIM_END')
local go_path = os.getenv('RTDEBUG_NVIM_GO') or ''
local dap = require('dap')
local result = { children = {}, ranks = {}, lines = {}, reasons = {}, continued = {}, console = {}, log = {} }
local parent = nil
local stopped = {} -- name -> { session, thread }
local nstopped = 0
local ended = false

local function write(status)
  result.status = status
  local f = assert(io.open(out_path, 'w'))
  f:write(vim.fn.json_encode(result))
  f:close()
end

local function finish(status)
  if ended then return end
  ended = true
  write(status)
  vim.cmd('qa!')
end
vim.defer_fn(function() finish('timeout') end, tonumber(os.getenv('RTDEBUG_NVIM_TIMEOUT_MS') or '240000'))

local dap_python = os.getenv('RTDEBUG_NVIM_DAP_PYTHON') or ''
local solo = os.getenv('RTDEBUG_NVIM_RUN') or '' -- one rank: what `rtdebug attach --format nvim-dap` printed
if dap_python ~= '' then -- nvim-dap-python's adapter: it connects to an attach configuration's `connect`
  vim.opt.rtp:append(dap_python)
  require('dap-python').setup('python3')
else -- without nvim-dap-python: connect to the address the (child) configuration names
  dap.adapters.python = function(callback, config)
    local c = config.connect or config
    callback({ type = 'server', host = c.host or '127.0.0.1', port = c.port })
  end
end

local function note(fmt, ...)
  table.insert(result.log, string.format(fmt, ...))
end

-- the one rank stopped at the breakpoint (its name), the others paused
local function at_breakpoint()
  for name, s in pairs(stopped) do
    if s.reason == 'breakpoint' then return name end
  end
end

local function when(pred, then_, what)
  local timer = vim.loop.new_timer()
  timer:start(50, 50, vim.schedule_wrap(function()
    if ended then timer:stop() return end
    if pred() then
      timer:stop()
      timer:close()
      note('%s', what)
      then_()
    end
  end))
end

local function others_continued(stopper)
  for name in pairs(stopped) do
    if name ~= stopper and not result.continued[name] then return false end
  end
  return true
end

local function leave()
  for _, child in pairs(parent.children) do
    child:disconnect({ terminateDebuggee = false })
  end
  vim.defer_fn(function()
    parent:disconnect({ terminateDebuggee = false }, function() finish('ok') end)
  end, 500)
end

local function continue_one(name)
  local s = stopped[name]
  require('dap.breakpoints').clear()
  s.session:request('setBreakpoints', { source = { path = script }, breakpoints = {} }, function(e)
    if e then note('setBreakpoints: %s', vim.inspect(e)) end
    s.session:request('continue', { threadId = s.thread }, function(err)
      if err then note('continue: %s', vim.inspect(err)) end
    end)
  end)
end

local function terminate_rank(name)
  require('dap.breakpoints').clear()
  dap.set_session(stopped[name].session) -- :DapTerminate with rank 1's child focused
  dap.terminate(nil, nil, function() note('%s terminated', name) end)
  local said = function()
    for _, text in ipairs(result.console[name] or {}) do
      if text:find('keeps running', 1, true) then return true end
    end
    return false
  end
  when(function() return said() and others_continued(name) end, function()
    write('detached')
    when(function() return vim.loop.fs_stat(go_path) ~= nil end, function()
      dap.set_session(parent) -- :DapTerminate with the job's session focused
      dap.terminate(nil, nil, function() finish('ok') end)
    end, 'go')
  end, 'rank terminated, the others running')
end

local function all_stopped()
  local name = at_breakpoint()
  result.continued = {} -- from here on: what the ranks do
  if name == nil then
    finish('no rank stopped at the breakpoint')
  elseif ending == 'terminate' then
    terminate_rank(name)
  else
    continue_one(name) -- continue in one rank: the ranks continue every other
    when(function() return others_continued(name) end, leave, 'the others continued')
  end
end

dap.listeners.after.event_initialized['rtdebug'] = function(session)
  if session.parent == nil and solo == '' then
    parent = session
  else
    table.insert(result.children, session.config.name)
  end
end

dap.listeners.after.event_output['rtdebug'] = function(session, body)
  local name = session.config.name
  result.console[name] = result.console[name] or {}
  table.insert(result.console[name], body.output)
end

dap.listeners.after.event_continued['rtdebug'] = function(session)
  result.continued[session.config.name] = true
end

dap.listeners.after.event_stopped['rtdebug'] = function(session, body)
  local name = session.config.name
  note('%s stopped: %s', name, body.reason)
  if (session.parent == nil and solo == '') or result.ranks[name] then return end
  result.ranks[name] = 'stopped'
  result.reasons[name] = body.reason
  session:request('stackTrace', { threadId = body.threadId, levels = 1 }, function(err, st)
    if err then note('stackTrace: %s', vim.inspect(err)) return end
    local frame = st.stackFrames[1]
    local args = { expression = 'dist.get_rank()', frameId = frame.id, context = 'repl' }
    session:request('evaluate', args, function(err2, r)
      result.ranks[name] = err2 and ('error: ' .. vim.inspect(err2)) or r.result
      result.lines[name] = frame.line
      stopped[name] = { session = session, thread = body.threadId, reason = body.reason }
      nstopped = nstopped + 1
      if solo ~= '' then
        session:disconnect({ terminateDebuggee = false }, function() finish('ok') end)
      elseif nstopped == nranks then
        all_stopped()
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
