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
--   replay reads and updates those same tensors, in place. After capture each
--   is looked for from the function's upvalues, globals and static table
--   arguments (breadth first, through tables and closures' upvalues) and the
--   path found is kept (`upvalue model -> [1] -> weight`); every call follows
--   the paths (about 0.1 us for an MLP's 20 tensors) and recaptures, as for a
--   new signature, when one leads to another tensor: after model:to("float64"),
--   model:to("cpu:1"), `layer.weight = t` or a new optimizer. Tensors no path
--   reaches (through a metatable, say) are listed by :explain() as unchecked.
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
-- - A replay is one engine task: the first replay plans the graph once (each
--   intermediate gets a place in one arena, shared by values whose lifetimes do
--   not overlap; each op is checked and resolved once), and later replays only
--   allocate their results and gradients, which are new tensors each time.
--   Graphs with results that need autograd history for a backward outside the
--   function, several devices, or calls on non-contiguous arguments (or ones
--   sharing memory with captured tensors) replay op by op; `:graph()` says which.
-- - `{check = true}` runs the eager function on each call while the graph
--   replays beside it, op by op (on copies of what it writes in place, with a
--   generator of its own), and reports the first op whose results differ while
--   its inputs agree, with the line that made it: an op that reads a Lua number
--   that has changed since capture, one whose parameters changed, the step of a
--   fused chain, or where the Lua code took another path; then the first result
--   or written tensor that differs. The eager results and writes stand. A check
--   is slow (every op waits for both results) and holds what both runs make
--   until the call ends.
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
local function explain_miss(parts, entries)
  local best, best_diff
  for _, e in ipairs(entries) do
    local other = e.parts
    local diff = {}
    for i = 1, math.max(#parts, #other) do
      if parts[i] ~= other[i] then
        diff[#diff + 1] = string.format("argument %d changed from %s to %s", i, tostring(other[i]), tostring(parts[i]))
      end
    end
    if not best or #diff < #best_diff then best, best_diff = e, diff end
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

-- Where the Lua numbers among args go as 0-d tensors: the CUDA device that
-- holds every tensor argument, so that a plan there (and its device graph)
-- reads them from that device's memory; else the host.
local function numbers_device(args, n)
  local dev
  for i = 1, n do
    local x = args[i]
    if is_tensor(x) then
      if x.dev.type ~= C.TIDE_DEVICE_CUDA or (dev and dev.index ~= x.dev.index) then return nil end
      dev = x.dev
    end
  end
  return dev
end

-- Lua number x as a 0-d tensor argument, weak in type promotion, on dev (or the host).
local function number_arg(x, dev)
  local dtype = x == math.floor(x) and I64 or F64
  return wrap(dev and C.tide_tensor_scalar_on(x, dtype, dev) or C.tide_tensor_scalar(x, dtype))
end

local function capture(self, args, n, statics)
  local g = C.tide_graph_capture_begin()
  if g == nil then raise() end
  g = ffi.gc(g, C.tide_graph_release)
  local call_args = {}
  local ndev = numbers_device(args, n)
  local ok, err = pcall(function()
    for i = 1, n do
      local x = args[i]
      if is_tensor(x) then
        B.check(C.tide_graph_add_arg(g, x))
        call_args[i] = x
      elseif type(x) == "number" and not statics[i] then
        local t = number_arg(x, ndev)
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

-- -- the identity of tensors bound by reference ---------------------------------------
-- A graph binds the tensors it reads other than its arguments by reference (its
-- externs). After capture, each is looked for from the function's upvalues,
-- globals and static table arguments, breadth first through tables and the
-- upvalues of functions (not the library's own), and the path to it is kept:
-- every call follows the paths (a few table lookups each) and recaptures when
-- one leads to another tensor, as after model:to("float64").

local ROOT, FIELD, UPVALUE, GRAD = 0, 1, 2, 3
local MAX_DEPTH, MAX_VISITS = 10, 20000
local tensor_ptr = ffi.typeof("tide_tensor *")
local ext_buf = ffi.new("const char *[?]", 1024)
local n_ext = ffi.new("int32_t[1]")
-- Where the library's own functions come from: the walk does not enter them.
local library = { debug.getinfo(1, "S").source:match("^(@.*)tide/jit%.lua$") or "@lua/",
                  debug.getinfo(B.wrap, "S").source:match("^(@.*)ffi%.lua$") or "@bindings/" }

local lua_libraries = { _G = true, string = true, table = true, math = true, io = true, os = true, debug = true,
                        coroutine = true, package = true, bit = true, jit = true, ffi = true }
local NEVER = {}   -- what a path whose end has no Lua reference of its own compares against

local function is_module(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__tide_module") == true
end

local function describe_tensor(t)
  return string.format("%s [%s]", T.methods.dtype(t), table.concat(T.methods.shape(t), ","))
end

-- Why path p no longer leads to its tensor, now that it leads to v.
local function why_stale(p, v)
  if type(v) ~= "cdata" or v == nil then
    return string.format("captured tensor %s is no longer there (the path leads to %s): recaptured", p.name,
      v == nil and "nil" or "a " .. type(v))
  end
  local t = ffi.cast(tensor_ptr, v)[0]
  local now, dev = describe_tensor(t), T.methods.device(t)
  local was = p.desc
  if dev ~= p.device then now, was = now .. " on " .. dev, was .. " on " .. p.device end
  return string.format("captured tensor %s is a different tensor (%s instead of %s): recaptured", p.name, now, was)
end

-- The path to a node of the walk as text: "upvalue model -> [1] -> weight". A
-- step's text is its own (false: not shown, as a module's _parameters) or its
-- key's: a name, [1], or for an object the walk reached too, [the path to it]
-- (opt.state's keys are the parameters).
local function path_text(node, node_of, depth)
  local names = {}
  local n = node
  while n do
    local text = n.text
    if text == nil then
      local k = n.key
      if type(k) == "string" then text = k
      elseif type(k) == "number" then text = "[" .. k .. "]"
      elseif node_of[k] and depth < 2 then text = "[" .. path_text(node_of[k], node_of, depth + 1) .. "]"
      else text = is_tensor(k) and "[" .. describe_tensor(k) .. " tensor]" or "[" .. type(k) .. "]" end
    end
    if text then table.insert(names, 1, text) end
    n = n.parent
  end
  return table.concat(names, " -> ")
end

-- A function returning fn's upvalue i as it is now: it shares the upvalue, so
-- a later assignment to it is seen, and the call compiles.
local function upvalue_getter(fn, i)
  local u
  local get = function() return u end
  debug.upvaluejoin(get, 1, fn, i)
  return get
end

-- Walks breadth first from the roots to the tensors in want (address -> index);
-- returns a path per index found: its steps (kinds[1] is ROOT, keys[1] a
-- function of the call's arguments), name, the tensor's address and Lua reference.
local function find_paths(fn, args, statics, want, n_want)
  local module_stores = { _parameters = true, _buffers = true, _modules = true, _attrs = true }
  local skip = {}   -- the library's modules and Lua's
  for name, m in pairs(package.loaded) do
    if name:match("^tide") or name:match("^bindings%.") or lua_libraries[name] then skip[m] = true end
  end
  local queue, head, seen, found, n_found, node_of = {}, 1, { [fn] = true }, {}, 0, {}
  local function push(v, parent, kind, key, text)
    if n_found == n_want or #queue >= MAX_VISITS then return end
    local tv = type(v)
    if tv == "table" or tv == "function" then
      if seen[v] or skip[v] then return end
      if tv == "function" then
        local src = debug.getinfo(v, "S").source
        if src == "=[C]" or src:sub(1, #library[1]) == library[1] or src:sub(1, #library[2]) == library[2] then
          return
        end
      end
      seen[v] = true
    elseif not is_tensor(v) then
      return
    end
    local node = { v = v, parent = parent, kind = kind, key = key, text = text,
                   depth = parent and parent.depth + 1 or 0 }
    queue[#queue + 1] = node
    if node_of[v] == nil then node_of[v] = node end
  end
  for i = 1, debug.getinfo(fn, "u").nups do
    local name, v = debug.getupvalue(fn, i)
    if debug.getinfo(fn, "S").what ~= "C" then push(v, nil, ROOT, upvalue_getter(fn, i), "upvalue " .. name) end
  end
  for i, on in pairs(statics) do
    if on and type(args[i]) == "table" then push(args[i], nil, ROOT, function(a) return a[i] end, "argument " .. i) end
  end
  local env = getfenv(fn)
  for k, v in next, env do
    if type(k) == "string" then push(v, nil, ROOT, function() return rawget(env, k) end, "global " .. k) end
  end
  local function record(node, index, ptr)
    local chain, n = {}, node   -- the nodes from the tensor up to the root
    while n do
      chain[#chain + 1] = n
      n = n.parent
    end
    local kinds, keys = {}, {}
    for j = #chain, 1, -1 do kinds[#kinds + 1], keys[#keys + 1] = chain[j].kind, chain[j].key end
    found[index] = { kinds = kinds, keys = keys, name = path_text(node, node_of, 0), ptr = ptr,
                     obj = node.kind == GRAD and NEVER or node.v }
    n_found = n_found + 1
  end
  while head <= #queue and n_found < n_want do
    local node = queue[head]
    head = head + 1
    local v = node.v
    if type(v) == "cdata" then
      local p = ffi.cast(tensor_ptr, v)
      local index = want[tonumber(ffi.cast("uintptr_t", p))]
      if index and not found[index] then record(node, index, p) end
      local g = p.ag_grad
      index = g ~= nil and want[tonumber(ffi.cast("uintptr_t", g))]
      if index and not found[index] then
        record({ v = g, parent = node, kind = GRAD, key = true, text = "grad" }, index, g)
      end
    elseif node.depth < MAX_DEPTH then
      if type(v) == "table" then
        local stores = is_module(v) and module_stores or {}
        for k, x in next, v do
          push(x, node, FIELD, k, stores[k] and false)   -- a module's stores are not shown
        end
      else
        for i = 1, math.huge do
          local name, x = debug.getupvalue(v, i)
          if name == nil then break end
          push(x, node, UPVALUE, i, "upvalue " .. name)
        end
      end
    end
  end
  return found
end

-- Whether v (what a path ends at) is p's tensor, through another Lua reference;
-- the next call compares with that one first.
local function same_tensor(v, p)
  if not (is_tensor(v) or ffi.istype(tensor_ptr, v)) or ffi.cast(tensor_ptr, v) ~= p.ptr then return false end
  if is_tensor(v) then p.obj = v end
  return true
end

local function upvalue_of(f, i)
  if type(f) ~= "function" then return nil end
  local _, v = debug.getupvalue(f, i)
  return v
end

-- The paths as one Lua function of the call's arguments that returns the first
-- path no longer leading to its tensor, and what it leads to. Common prefixes
-- are followed once: the steps go depth first, each from the value last found
-- one level up (local v<depth>). Straight-line code, so that it compiles to one
-- trace: about 10 times faster than a loop over the steps.
local function checker(paths)
  local root = { children = {}, order = {} }
  for _, p in ipairs(paths) do
    local node = root
    for d = 1, #p.kinds do
      local kind, key = p.kinds[d], p.keys[d]
      local by_key = node.children[kind] or {}
      node.children[kind] = by_key
      local child = by_key[key]
      if child == nil then
        child = { kind = kind, key = key, children = {}, order = {} }
        by_key[key] = child
        node.order[#node.order + 1] = child
      end
      node = child
    end
    node.path = p
  end
  local keys, ends = {}, {}
  local code = { "local K, P, same, upvalue_of, is_tensor, rawget, rawequal, type = ...\n",
                 "return function(args)\nlocal v0" }
  for d = 1, MAX_DEPTH + 1 do code[#code + 1] = ", v" .. d end
  code[#code + 1] = "\n"
  local step = {
    [ROOT] = "v%d = K[%d](args)\n",
    [FIELD] = "if type(v%d) == 'table' then v%d = rawget(v%d, K[%d]) else v%d = nil end\n",
    [UPVALUE] = "v%d = upvalue_of(v%d, K[%d])\n",
    [GRAD] = "if is_tensor(v%d) then v%d = v%d.ag_grad else v%d = nil end\n",
  }
  local function emit(node, d)
    for _, child in ipairs(node.order) do
      local i = #keys + 1
      keys[i] = child.key
      local k = child.kind
      if k == ROOT then code[#code + 1] = string.format(step[k], d, i)
      elseif k == FIELD then code[#code + 1] = string.format(step[k], d - 1, d, d - 1, i, d)
      elseif k == UPVALUE then code[#code + 1] = string.format(step[k], d, d - 1, i)
      else code[#code + 1] = string.format(step[k], d - 1, d, d - 1, d) end
      if child.path then
        ends[i] = child.path
        code[#code + 1] = string.format("if not rawequal(v%d, P[%d].obj) and not same(v%d, P[%d]) then "
          .. "return P[%d], v%d end\n", d, i, d, i, i, d)
      end
      emit(child, d + 1)
    end
  end
  emit(root, 1)
  code[#code + 1] = "end\n"
  local chunk = assert(loadstring(table.concat(code), "=tide.jit identity check"))
  return chunk(keys, ends, same_tensor, upvalue_of, is_tensor, rawget, rawequal, type)
end

-- Finds the paths to the externs of entry's graph g; the ones no path reaches are listed.
local function bind_identity(self, entry, g, args)
  local ext = C.tide_graph_externs(g, n_ext, ext_buf, 1024)
  if ext == nil then raise() end
  local want, n = {}, n_ext[0]
  for i = 0, n - 1 do want[tonumber(ffi.cast("uintptr_t", ext[i]))] = i + 1 end
  local found = find_paths(self.fn, args, self.statics, want, n)
  local paths, unchecked = {}, {}
  for i = 1, n do
    local p = found[i]
    if p then
      local t = ext[i - 1][0]
      p.desc, p.device = describe_tensor(t), T.methods.device(t)
      paths[#paths + 1] = p
    else
      local at = i <= 1024 and ffi.string(ext_buf[i - 1]) or ""
      unchecked[#unchecked + 1] = describe_tensor(ext[i - 1][0]) .. (at ~= "" and " read at " .. at or "")
    end
  end
  entry.paths, entry.stale = paths, checker(paths)
  if #unchecked > 0 then
    self.unchecked[#self.unchecked + 1] = string.format("capture %d binds %d tensor%s that no path from the "
      .. "function's upvalues reaches, so replacing %s will not recapture: %s", #self.entries, #unchecked,
      #unchecked == 1 and "" or "s", #unchecked == 1 and "it" or "them", table.concat(unchecked, "; "))
  end
end

-- -- replay -----------------------------------------------------------------------------

local arg_buf = ffi.new("tide_tensor *[?]", 64)
local out_buf = ffi.new("tide_tensor *[?]", 256)

local held = {}

-- Puts the graph's tensor arguments in arg_buf (numbers as 0-d tensors, which
-- held.args keeps alive until the next call); returns their count.
local function bind_args(args, n, statics)
  local na, keep = 0, {}
  local ndev = numbers_device(args, n)
  held.args = keep
  for i = 1, n do
    local x = args[i]
    if is_tensor(x) then
      arg_buf[na] = x; na = na + 1
    elseif type(x) == "number" and not statics[i] then
      local t = number_arg(x, ndev)
      keep[#keep + 1] = t
      arg_buf[na] = t; na = na + 1
    end
  end
  return na
end

-- What fn returned, rebuilt by the plan from the graph's outputs in out_buf
-- (NULL ones become nil).
local function results(entry)
  local outs = {}
  for i = 0, C.tide_graph_num_outputs(entry.graph) - 1 do
    local t = out_buf[i]
    if t ~= nil then outs[i] = wrap(t, tonumber(t.nelem) * tonumber(C.tide_dtype_size(t.dtype_id))) end
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
  return r
end

local function replay(entry, args, n, statics)
  local na = bind_args(args, n, statics)
  if C.tide_graph_replay(entry.graph, arg_buf, na, out_buf) ~= 0 then raise() end
  return unpack(results(entry), 1, entry.plan.n)
end

-- -- check mode -------------------------------------------------------------------------

local n_written = ffi.new("int32_t[1]")
local origins = ffi.new("const char *[?]", 256)
local report_buf = ffi.new("char[?]", 2048)

-- The largest difference between two tensors (math.huge when the shapes differ).
local function max_diff(a, b)
  if not is_tensor(a) or not is_tensor(b) then return a == b and 0 or math.huge end
  local sa, sb = T.methods.shape(a), T.methods.shape(b)
  if #sa ~= #sb then return math.huge end
  for i = 1, #sa do if sa[i] ~= sb[i] then return math.huge end end
  if a:numel() == 0 then return 0 end
  return (a:double() - b:double()):abs():max():item()
end

-- A borrowed tensor pointer as a Lua tensor of its own.
local function borrowed(p)
  C.tide_tensor_retain(p)
  return wrap(p, 0)
end

-- Runs the eager function while the graph replays beside it, op by op, on
-- copies of what it writes (tide_graph_check_begin), and reports the first op
-- that differs, then the first result or written tensor that differs. The
-- eager run's results and writes stand.
local function check_call(self, entry, args, n)
  if T.is_capturing() then return replay(entry, args, n, self.statics) end   -- inside another capture
  local g = entry.graph
  local na = bind_args(args, n, self.statics)
  local c = C.tide_graph_check_begin(g, arg_buf, na, self.check_tolerance)
  if c == nil then raise() end
  c = ffi.gc(c, C.tide_graph_release)
  T.set_capturing(c)
  local eager = { pcall(self.fn, unpack(args, 1, n)) }
  T.set_capturing(nil)
  B.check(C.tide_graph_check_end(c, out_buf, report_buf, 2048))
  local compiled = results(entry)
  if not eager[1] then
    C.tide_graph_release(ffi.gc(c, nil))
    error(eager[2], 0)
  end
  local report = ffi.string(report_buf)
  local summary
  local tol = self.check_tolerance
  for i = 1, math.max(entry.plan.n, table.maxn(eager) - 1) do
    local d = max_diff(compiled[i], eager[i + 1])
    if d > tol then
      summary = string.format("result %d differs from the eager run by %.3g", i, d)
      break
    end
  end
  local w = C.tide_graph_written(g, n_written, origins, 256)
  for i = 0, n_written[0] - 1 do
    if summary then break end
    local live = borrowed(w[i])
    local d = max_diff(borrowed(C.tide_graph_check_copy(c, w[i])), live)
    if d > tol then
      summary = string.format("the %s [%s] tensor written in place (last at %s) differs from the eager run by %.3g",
        T.methods.dtype(live), table.concat(T.methods.shape(live), ","), i < 256 and ffi.string(origins[i]) or "?", d)
    end
  end
  C.tide_graph_release(ffi.gc(c, nil))
  if summary then report = report == "" and summary or report .. "; " .. summary end
  if report ~= "" then
    self.check_reports[#self.check_reports + 1] = report
    io.stderr:write("tide.jit check: " .. self.where .. ": " .. report .. "\n")
  end
  return unpack(eager, 2, table.maxn(eager))
end

-- -- the compiled function --------------------------------------------------------------

local Compiled = {}
Compiled.__index = Compiled

function Compiled.__call(self, ...)
  local n = select("#", ...)
  local args = { ... }
  local parts, key = signature(args, n, self.statics, self.where)
  local entry = self.cache[key]
  local why
  if entry and entry.graph then
    local p, now = entry.stale(args)
    if not p then
      self.replays = self.replays + 1
      if self.check then return check_call(self, entry, args, n) end
      return replay(entry, args, n, self.statics)
    end
    why = why_stale(p, now)
    entry.graph, entry.plan, entry.paths, entry.stale = nil, nil, nil, nil   -- it binds tensors no longer used
    self.cache[key], entry = nil, nil
  end
  if not entry then
    if #self.entries >= self.max_cache then
      if not self.gave_up then
        self.gave_up = true
        io.stderr:write(string.format("tide.jit: %s has been captured for %d signatures and keeps meeting new "
          .. "ones; it runs eagerly for new signatures from now on (see :explain())\n", self.where, self.max_cache))
      end
      return self.fn(...)
    end
    why = why or explain_miss(parts, self.entries)
    self.explanations[#self.explanations + 1] = why
    if self.log then io.stderr:write("tide.jit: " .. self.where .. ": " .. why .. "\n") end
    entry = { parts = parts, key = key, warm = 0 }
    self.cache[key] = entry
    self.entries[#self.entries + 1] = entry
  end
  if entry.warm < self.warmup then
    entry.warm = entry.warm + 1
    return self.fn(...)
  end
  local g, plan, results, nres = capture(self, args, n, self.statics)
  bind_identity(self, entry, g, args)
  entry.graph, entry.plan = g, plan
  self.captures = self.captures + 1
  return unpack(results, 1, nres)
end

--- compiled:explain(): why each signature was captured (or recaptured), any
-- warning, the captured tensors no path reaches, and check reports, as text.
function Compiled:explain()
  local lines = {}
  for i, e in ipairs(self.explanations) do lines[#lines + 1] = string.format("capture %d: %s", i, e) end
  for _, w in ipairs(self.warnings) do lines[#lines + 1] = "warning: " .. w end
  for _, u in ipairs(self.unchecked) do lines[#lines + 1] = "unchecked: " .. u end
  for _, r in ipairs(self.check_reports) do lines[#lines + 1] = "check: " .. r end
  if self.gave_up then lines[#lines + 1] = "gave up capturing after " .. self.max_cache .. " signatures" end
  return table.concat(lines, "\n")
end

local mem_buf = ffi.new("char[?]", 2048)
local peak_buf = ffi.new("int64_t[1]")

--- compiled:stats(): counts of captures, replays and graph sizes.
function Compiled:stats()
  local graphs = {}
  for _, e in ipairs(self.entries) do
    if e.graph then
      B.check(C.tide_graph_memory(e.graph, peak_buf, mem_buf, 2048))
      graphs[#graphs + 1] = { signature = e.key, nodes = C.tide_graph_num_nodes(e.graph),
        args = C.tide_graph_num_args(e.graph), outputs = C.tide_graph_num_outputs(e.graph),
        peak_bytes = tonumber(peak_buf[0]), largest = ffi.string(mem_buf) }
    end
  end
  return { captures = self.captures, replays = self.replays, signatures = #self.entries, graphs = graphs,
           removed_by_passes = self.removed or 0 }
end

--- compiled:memory(i): the peak bytes a replay of the i-th graph (default the
-- last) holds for temporaries, and its largest buffers there, with their lines.
function Compiled:memory(i)
  local e = self.entries[i or #self.entries]
  if not e or not e.graph then return nil end
  B.check(C.tide_graph_memory(e.graph, peak_buf, mem_buf, 2048))
  return tonumber(peak_buf[0]), ffi.string(mem_buf)
end

--- compiled:dot(path, i): the i-th graph (default the last) in Graphviz's DOT
-- language, written to path when one is given; returns the text.
function Compiled:dot(path, i)
  local e = self.entries[i or #self.entries]
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
  local e = self.entries[i or #self.entries]
  if not e or not e.graph then return nil end
  return ffi.string(C.tide_graph_describe(e.graph))
end

--- compile(fn, opts): a callable that captures fn into a graph per signature and
-- replays it. opts: static = {argument positions baked in}, warmup = 1 (eager
-- calls per signature before capturing), max_cache = 8 (signatures kept),
-- log = false (print why each capture happened; also TIDE_JIT_LOG=1), passes =
-- {dce, cse, fuse, fold, simplify, plan = true} (set one false to switch that pass off;
-- plan replays as one engine task over one arena, without it node by node),
-- check = false (true, or {tolerance = 1e-5}, the largest absolute difference
-- taken as equal: every call runs the Lua function with the graph replaying
-- beside it and reports, in :explain() and on stderr, the first op that differs
-- and the first result or written tensor that does; the eager results stand).
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
                      fold = C.TIDE_GRAPH_PASS_FOLD, simplify = C.TIDE_GRAPH_PASS_SIMPLIFY,
                      plan = C.TIDE_GRAPH_PASS_PLAN }
  local passes = C.TIDE_GRAPH_PASS_ALL
  if opts.passes ~= nil then
    if type(opts.passes) ~= "table" then fail("jit.compile: passes must be a table such as {cse = false}") end
    for k, v in pairs(opts.passes) do
      local bit_ = pass_bits[k]
      if not bit_ then fail("jit.compile: unknown pass '" .. tostring(k) .. "' (dce, cse, fuse, fold, simplify, plan)") end
      if v == false then passes = bit.band(passes, bit.bnot(bit_)) end
    end
  end
  local info = debug.getinfo(fn, "S")
  local self = setmetatable({
    fn = fn, statics = statics, warmup = opts.warmup or 1, max_cache = opts.max_cache or 8, passes = passes,
    log = opts.log or os.getenv("TIDE_JIT_LOG") == "1",
    where = string.format("the function at %s:%d", info.short_src, info.linedefined),
    cache = {}, entries = {}, explanations = {}, warnings = {}, unchecked = {}, captures = 0, replays = 0,
    check = opts.check and true or false, check_reports = {},
    check_tolerance = type(opts.check) == "table" and opts.check.tolerance or 1e-5,
  }, Compiled)
  return self
end

return M
