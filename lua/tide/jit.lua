--- tide.jit: `compile(fn)` captures what a Lua function does to tensors into a
-- graph (runtime/src/graph/) and replays the graph on later calls without
-- running the Lua code again. Ordinary code stays eager; this is Gluon's
-- hybridize, tf.function or jax.jit for Lua.
--
--     local step = tide.jit.compile(function(x, y)
--       local loss = F.cross_entropy(model(x), y)
--       opt:zero_grad(); loss:backward(); opt:step()
--       return loss
--     end)
--     for xb, yb in loader:iter() do local loss = step(xb, yb) end
--
-- What is captured, and what that means:
-- - Calls with a new signature (each tensor argument's dtype, device, shape
--   and contiguity; the kind of each number; the values of static arguments)
--   run eagerly `warmup` times (default 1: the first step creates optimizer
--   state, which later steps update), then once while being captured; later
--   calls with that signature replay the graph.
-- - Tensors the function reaches other than through its arguments (upvalues,
--   tables: parameters, optimizer state, gradients) are bound by reference:
--   replay reads and updates those same tensors, in place.
-- - Lua numbers passed as arguments become 0-d tensors of the graph (so a new
--   learning rate needs no recapture); `{static = {i, ...}}` bakes the values
--   of those arguments in instead (and any change recaptures). A Lua number
--   the function reads from anywhere else (an upvalue, a table field) is a
--   constant of the graph: replay keeps the value it had during capture.
-- - Lua control flow is unrolled: the branch taken during capture is replayed.
--   Reading a tensor's value during capture (item, totable, tostring, data_ptr,
--   masked_select) is an error, and so are math.random, os.time/clock/date
--   and io reads, since a replay could not do them again; random tensor ops
--   (tide.rand, dropout) draw fresh numbers on every replay.
-- - A tensor made during capture that Lua still holds afterwards without
--   returning it is reported (with the line that made it): replay makes a new
--   one and the held one goes stale.
-- - `{check = true}` runs each replay and the eager function side by side and
--   reports the first result or written tensor that differs (for instance
--   when the function reads a Lua number that has changed since capture).
-- - The function returns tensors (or nil), as several values or in a flat table.
local B = require "bindings.ffi"
local T = require "tide.tensor"
local ffi, C = B.ffi, B.C
local fail, raise, wrap = B.fail, B.raise, B.wrap
local is_tensor = T.is_tensor

local M = {}

local F64, I64 = 1, 3

-- -- signatures ---------------------------------------------------------------------

local function describe_arg(x, static)
  if is_tensor(x) then
    -- requires_grad too: a replay records autograd history only where the capture did
    return string.format("%s %s [%s]%s%s", T.methods.dtype(x), T.methods.device(x), table.concat(T.methods.shape(x), ","),
      T.methods.is_contiguous(x) and "" or " non-contiguous", C.tide_tensor_requires_grad(x) ~= 0 and " requires_grad" or "")
  end
  local tx = type(x)
  if static then return "static " .. tx .. " " .. tostring(x) end
  if tx == "number" then return x == math.floor(x) and "integer number" or "number" end
  if tx == "nil" then return "nil" end
  return nil
end

local function signature(args, n, statics, where)
  local parts = {}
  for i = 1, n do
    local d = describe_arg(args[i], statics[i])
    if not d then
      fail(string.format("jit.compile: argument %d of %s is a %s; pass tensors and numbers, or name it in "
        .. "{static = {%d}} to bake its value in", i, where, type(args[i]), i))
    end
    parts[i] = d
  end
  return parts, table.concat(parts, " | ")
end

-- Why a new signature was captured: the nearest cached one, argument by argument.
local function explain_miss(parts, cache_order, cache)
  local best, best_diff
  for _, key in ipairs(cache_order) do
    local other = cache[key].parts
    local diff = {}
    for i = 1, math.max(#parts, #other) do
      if parts[i] ~= other[i] then
        diff[#diff + 1] = string.format("argument %d changed from %s to %s", i, tostring(other[i]), tostring(parts[i]))
      end
    end
    if not best or #diff < #best_diff then best, best_diff = key, diff end
  end
  if not best then return "first call with this signature: " .. table.concat(parts, " | ") end
  local advice = "; shapes that keep changing recapture every time: pad or bucket them, or run eagerly"
  for _, d in ipairs(best_diff) do
    if d:find("static") then advice = "; a static argument's value is baked into the graph: pass it as a number " ..
      "argument instead to make it an input"; break end
  end
  return "new signature: " .. table.concat(best_diff, ", ") .. advice
end

-- -- capture ------------------------------------------------------------------------

local forbidden = {
  { math, "random", "math.random draws in Lua; use tide.rand/randn/randint inside the function" },
  { math, "randomseed", "math.randomseed changes Lua's generator" },
  { os, "time", "os.time reads the clock" }, { os, "clock", "os.clock reads the clock" },
  { os, "date", "os.date reads the clock" },
  { io, "read", "io.read reads input" }, { io, "open", "io.open opens a file" }, { io, "lines", "io.lines reads a file" },
}
local function forbid()
  local saved = {}
  for i, f in ipairs(forbidden) do
    saved[i] = f[1][f[2]]
    f[1][f[2]] = function()
      fail("jit capture: " .. f[3] .. ", which a replay could not do again; do it outside the compiled function")
    end
  end
  return saved
end
local function allow(saved)
  for i, f in ipairs(forbidden) do f[1][f[2]] = saved[i] end
end

-- Collects what fn returned into a plan: tensors become outputs of g.
local function plan_results(g, results, n)
  local plan = { n = n }
  for i = 1, n do
    local r = results[i]
    if is_tensor(r) then
      B.check(C.tide_graph_add_output(g, r))
      plan[i] = { out = C.tide_graph_num_outputs(g) - 1 }
    elseif r == nil then
      plan[i] = { none = true }
    elseif type(r) == "table" then
      local fields = {}
      for k, v in pairs(r) do
        if not is_tensor(v) then
          return nil, string.format("result %d is a table whose field %s is a %s; a replay returns tensors only",
            i, tostring(k), type(v))
        end
        B.check(C.tide_graph_add_output(g, v))
        fields[k] = C.tide_graph_num_outputs(g) - 1
      end
      plan[i] = { fields = fields }
    else
      return nil, string.format("result %d is a %s; a replay returns tensors only (return a 0-d tensor, "
        .. "and call :item() outside)", i, type(r))
    end
  end
  return plan
end

local leak_buf = ffi.new("char[?]", 4096)

local function capture(self, args, n, statics)
  local g = C.tide_graph_capture_begin()
  if g == nil then raise() end
  g = ffi.gc(g, C.tide_graph_release)
  local call_args = {}
  local ok, err = pcall(function()
    for i = 1, n do
      local x = args[i]
      if is_tensor(x) then
        B.check(C.tide_graph_add_arg(g, x))
        call_args[i] = x
      elseif type(x) == "number" and not statics[i] then
        local t = wrap(C.tide_tensor_scalar(x, x == math.floor(x) and I64 or F64))
        B.check(C.tide_graph_add_arg(g, t))
        call_args[i] = t
      else
        call_args[i] = x
      end
    end
  end)
  if not ok then
    C.tide_graph_capture_end(g, nil, 0)
    error(err, 0)
  end
  T.set_capturing(g)
  local saved = forbid()
  local results = { pcall(self.fn, unpack(call_args, 1, n)) }
  allow(saved)
  T.set_capturing(nil)
  local nres = table.maxn(results) - 1
  local plan, why
  if results[1] then plan, why = plan_results(g, { unpack(results, 2, nres + 1) }, nres) end
  collectgarbage("collect")   -- what the function dropped is released, so that what is still held shows
  B.collect()
  local st = C.tide_graph_capture_end(g, leak_buf, 4096)
  if not results[1] then error(results[2], 0) end
  if st ~= 0 then raise() end
  if not plan then fail("jit capture: " .. why) end
  local captured = C.tide_graph_num_nodes(g)
  B.check(C.tide_graph_optimize(g, self.passes, nil))
  self.removed = (self.removed or 0) + captured - C.tide_graph_num_nodes(g)
  local leaks = ffi.string(leak_buf)
  if leaks ~= "" then
    self.warnings[#self.warnings + 1] = "tensors made during capture are still held but not returned (a replay "
      .. "will not update them): " .. leaks
    io.stderr:write("tide.jit: " .. self.warnings[#self.warnings] .. "\n")
  end
  return g, plan, { unpack(results, 2, nres + 1) }, nres
end

-- -- replay -----------------------------------------------------------------------------

local arg_buf = ffi.new("tide_tensor *[?]", 64)
local out_buf = ffi.new("tide_tensor *[?]", 256)

local function replay(entry, args, n, statics)
  local g = entry.graph
  local na = 0
  local keep = {}
  for i = 1, n do
    local x = args[i]
    if is_tensor(x) then
      arg_buf[na] = x; na = na + 1
    elseif type(x) == "number" and not statics[i] then
      local t = wrap(C.tide_tensor_scalar(x, x == math.floor(x) and I64 or F64))
      keep[#keep + 1] = t
      arg_buf[na] = t; na = na + 1
    end
  end
  if C.tide_graph_replay(g, arg_buf, na, out_buf) ~= 0 then raise() end
  local outs = {}
  for i = 0, C.tide_graph_num_outputs(g) - 1 do
    local t = out_buf[i]
    outs[i] = wrap(t, tonumber(t.nelem) * tonumber(C.tide_dtype_size(t.dtype_id)))
  end
  local plan = entry.plan
  local r = {}
  for i = 1, plan.n do
    local p = plan[i]
    if p.out then r[i] = outs[p.out]
    elseif p.fields then
      local tbl = {}
      for k, o in pairs(p.fields) do tbl[k] = outs[o] end
      r[i] = tbl
    end
  end
  return unpack(r, 1, plan.n)
end

-- -- check mode -------------------------------------------------------------------------

local rng_seed, rng_off = ffi.new("uint64_t[1]"), ffi.new("uint64_t[1]")
local n_written = ffi.new("int32_t[1]")
local origins = ffi.new("const char *[?]", 256)

-- The largest difference between two tensors (math.huge when the shapes differ).
local function max_diff(a, b)
  if not is_tensor(a) or not is_tensor(b) then return a == b and 0 or math.huge end
  local sa, sb = T.methods.shape(a), T.methods.shape(b)
  if #sa ~= #sb then return math.huge end
  for i = 1, #sa do if sa[i] ~= sb[i] then return math.huge end end
  if a:numel() == 0 then return 0 end
  return (a:double() - b:double()):abs():max():item()
end

-- Runs the graph and the eager function from the same state (the tensors the
-- graph writes, and the generator, are put back in between) and compares what
-- each returned and left in those tensors. The eager run's results stand.
local function check_call(self, entry, args, n)
  local autograd = require "tide.autograd"
  local g = entry.graph
  local w = C.tide_graph_written(g, n_written, origins, 256)
  local written, where = {}, {}
  for i = 0, n_written[0] - 1 do
    C.tide_tensor_retain(w[i])
    written[i + 1] = wrap(w[i], 0)
    where[i + 1] = i < 256 and ffi.string(origins[i]) or "?"
  end
  C.tide_rng_get_state(rng_seed, rng_off)
  local seed, off = rng_seed[0], rng_off[0]
  local before = autograd.no_grad(function()
    local r = {}
    for i, t in ipairs(written) do r[i] = t:clone() end
    return r
  end)
  local compiled = { replay(entry, args, n, self.statics) }
  local after = autograd.no_grad(function()
    local r = {}
    for i, t in ipairs(written) do r[i] = t:clone(); t:copy_(before[i]) end
    return r
  end)
  C.tide_rng_set_state(seed, off)
  local eager = { self.fn(unpack(args, 1, n)) }
  local tol = self.check_tolerance
  local report
  for i = 1, math.max(#compiled, #eager) do
    local d = max_diff(compiled[i], eager[i])
    if d > tol then
      report = string.format("result %d differs from the eager run by %.3g", i, d)
      break
    end
  end
  for i, t in ipairs(written) do
    if report then break end
    local d = max_diff(after[i], t)
    if d > tol then
      report = string.format("the %s %s tensor written in place (last at %s) differs from the eager run by %.3g",
        T.methods.dtype(t), "[" .. table.concat(T.methods.shape(t), ",") .. "]", where[i], d)
    end
  end
  if report then
    self.check_reports[#self.check_reports + 1] = report
    io.stderr:write("tide.jit check: " .. self.where .. ": " .. report .. "\n")
  end
  return unpack(eager, 1, table.maxn(eager))
end

-- -- the compiled function --------------------------------------------------------------

local Compiled = {}
Compiled.__index = Compiled

function Compiled.__call(self, ...)
  local n = select("#", ...)
  local args = { ... }
  local parts, key = signature(args, n, self.statics, self.where)
  local entry = self.cache[key]
  if entry and entry.graph then
    self.replays = self.replays + 1
    if self.check then return check_call(self, entry, args, n) end
    return replay(entry, args, n, self.statics)
  end
  if not entry then
    if #self.cache_order >= self.max_cache then
      if not self.gave_up then
        self.gave_up = true
        io.stderr:write(string.format("tide.jit: %s has been captured for %d signatures and keeps meeting new "
          .. "ones; it runs eagerly for new signatures from now on (see :explain())\n", self.where, self.max_cache))
      end
      return self.fn(...)
    end
    local why = explain_miss(parts, self.cache_order, self.cache)
    self.explanations[#self.explanations + 1] = why
    if self.log then io.stderr:write("tide.jit: " .. self.where .. ": " .. why .. "\n") end
    entry = { parts = parts, warm = 0 }
    self.cache[key] = entry
    self.cache_order[#self.cache_order + 1] = key
  end
  if entry.warm < self.warmup then
    entry.warm = entry.warm + 1
    return self.fn(...)
  end
  local g, plan, results, nres = capture(self, args, n, self.statics)
  entry.graph, entry.plan = g, plan
  self.captures = self.captures + 1
  return unpack(results, 1, nres)
end

--- compiled:explain(): why each signature was captured, and any warning, as text.
function Compiled:explain()
  local lines = {}
  for i, e in ipairs(self.explanations) do lines[#lines + 1] = string.format("capture %d: %s", i, e) end
  for _, w in ipairs(self.warnings) do lines[#lines + 1] = "warning: " .. w end
  for _, r in ipairs(self.check_reports) do lines[#lines + 1] = "check: " .. r end
  if self.gave_up then lines[#lines + 1] = "gave up capturing after " .. self.max_cache .. " signatures" end
  return table.concat(lines, "\n")
end

local mem_buf = ffi.new("char[?]", 2048)
local peak_buf = ffi.new("int64_t[1]")

--- compiled:stats(): counts of captures, replays and graph sizes.
function Compiled:stats()
  local graphs = {}
  for _, key in ipairs(self.cache_order) do
    local e = self.cache[key]
    if e.graph then
      B.check(C.tide_graph_memory(e.graph, peak_buf, mem_buf, 2048))
      graphs[#graphs + 1] = { signature = key, nodes = C.tide_graph_num_nodes(e.graph),
        args = C.tide_graph_num_args(e.graph), outputs = C.tide_graph_num_outputs(e.graph),
        peak_bytes = tonumber(peak_buf[0]), largest = ffi.string(mem_buf) }
    end
  end
  return { captures = self.captures, replays = self.replays, signatures = #self.cache_order, graphs = graphs,
           removed_by_passes = self.removed or 0 }
end

--- compiled:memory(i): the peak bytes a replay of the i-th graph (default the
-- last) holds for temporaries, and its largest buffers there, with their lines.
function Compiled:memory(i)
  local key = self.cache_order[i or #self.cache_order]
  local e = key and self.cache[key]
  if not e or not e.graph then return nil end
  B.check(C.tide_graph_memory(e.graph, peak_buf, mem_buf, 2048))
  return tonumber(peak_buf[0]), ffi.string(mem_buf)
end

--- compiled:dot(path, i): the i-th graph (default the last) in Graphviz's DOT
-- language, written to path when one is given; returns the text.
function Compiled:dot(path, i)
  local key = self.cache_order[i or #self.cache_order]
  local e = key and self.cache[key]
  if not e or not e.graph then return nil end
  local text = ffi.string(C.tide_graph_dot(e.graph))
  if path then
    local f, err = _G.io.open(path, "w")
    if not f then fail("jit dot: cannot write " .. path .. ": " .. tostring(err)) end
    f:write(text)
    f:close()
  end
  return text
end

--- compiled:graph(i): a text listing of the i-th captured graph (default the last).
function Compiled:graph(i)
  local key = self.cache_order[i or #self.cache_order]
  local e = key and self.cache[key]
  if not e or not e.graph then return nil end
  return ffi.string(C.tide_graph_describe(e.graph))
end

--- compile(fn, opts): a callable that captures fn into a graph per signature and
-- replays it. opts: static = {argument positions baked in}, warmup = 1 (eager
-- calls per signature before capturing), max_cache = 8 (signatures kept),
-- log = false (print why each capture happened; also TIDE_JIT_LOG=1), passes =
-- {dce, cse, fuse, fold, simplify = true} (set one false to switch that pass off),
-- check = false (true, or {tolerance = 1e-5}: every replay also runs the Lua
-- function from the same state and reports, in :explain() and on stderr, the
-- first result or written tensor that differs; the eager results stand).
-- @usage local step = tide.jit.compile(train_step); step(x, y)
function M.compile(fn, opts)
  if type(fn) ~= "function" then fail("jit.compile: argument 1 must be a function, got " .. type(fn)) end
  opts = opts or {}
  if type(opts) ~= "table" then fail("jit.compile: options must be a table, got " .. type(opts)) end
  local known = { static = true, warmup = true, max_cache = true, log = true, passes = true, check = true }
  for k in pairs(opts) do
    if not known[k] then fail("jit.compile: unknown option '" .. tostring(k) .. "'") end
  end
  local statics = {}
  for _, i in ipairs(opts.static or {}) do
    if type(i) ~= "number" or i < 1 or i ~= math.floor(i) then
      fail("jit.compile: static must list argument positions (1-based), got " .. tostring(i))
    end
    statics[i] = true
  end
  local pass_bits = { dce = C.TIDE_GRAPH_PASS_DCE, cse = C.TIDE_GRAPH_PASS_CSE, fuse = C.TIDE_GRAPH_PASS_FUSE,
                      fold = C.TIDE_GRAPH_PASS_FOLD, simplify = C.TIDE_GRAPH_PASS_SIMPLIFY }
  local passes = C.TIDE_GRAPH_PASS_ALL
  if opts.passes ~= nil then
    if type(opts.passes) ~= "table" then fail("jit.compile: passes must be a table such as {cse = false}") end
    for k, v in pairs(opts.passes) do
      local bit_ = pass_bits[k]
      if not bit_ then fail("jit.compile: unknown pass '" .. tostring(k) .. "' (dce, cse, fuse, fold, simplify)") end
      if v == false then passes = bit.band(passes, bit.bnot(bit_)) end
    end
  end
  local info = debug.getinfo(fn, "S")
  local self = setmetatable({
    fn = fn, statics = statics, warmup = opts.warmup or 1, max_cache = opts.max_cache or 8, passes = passes,
    log = opts.log or os.getenv("TIDE_JIT_LOG") == "1",
    where = string.format("the function at %s:%d", info.short_src, info.linedefined),
    cache = {}, cache_order = {}, explanations = {}, warnings = {}, captures = 0, replays = 0,
    check = opts.check and true or false, check_reports = {},
    check_tolerance = type(opts.check) == "table" and opts.check.tolerance or 1e-5,
  }, Compiled)
  return self
end

return M
