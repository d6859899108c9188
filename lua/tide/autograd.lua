--- tide.autograd: reverse-mode automatic differentiation, as PyTorch has it.
-- The graph is recorded by the runtime (runtime/src/autograd/) as ops run;
-- this file gives it its Lua face: the tensor fields `grad`, `requires_grad`,
-- `grad_fn` and `is_leaf`, `t:backward()`, `tide.no_grad`, `autograd.grad`
-- and `gradcheck`. Backward rules live in C, next to nothing Lua needs.
-- `autograd.functional` (jacobian, hessian, vjp, jvp, hvp, vhp) is
-- autograd_functional.lua, loaded on first use.
local bit = require "bit"
local B = require "bindings.ffi"
local T = require "tide.tensor"
local ffi, C = B.ffi, B.C
local fail, check, wrap = B.fail, B.check, B.wrap
local methods, is_tensor = T.methods, T.is_tensor

local M = {}

-- -- fields of tensors (read through the metatype's __index / __newindex) -------

local getters, setters = {}, {}
M.getters, M.setters = getters, setters

function getters.grad(t)
  local g = C.tide_tensor_grad(t)
  if g == nil then return nil end
  return wrap(g, 0)
end
function setters.grad(t, g)
  if g ~= nil and not is_tensor(g) then fail("grad: expects a tensor or nil, got " .. type(g)) end
  check(C.tide_tensor_set_grad(t, g))
end
function getters.requires_grad(t) return C.tide_tensor_requires_grad(t) ~= 0 end
function setters.requires_grad(t, on) check(C.tide_tensor_set_requires_grad(t, on and 1 or 0)) end
--- The name of the op that made t ("mul", "view", ...), or nil for a leaf.
function getters.grad_fn(t)
  local n = C.tide_tensor_grad_fn_name(t)
  if n == nil then return nil end
  return ffi.string(n)
end
function getters.is_leaf(t) return t.ag_node == nil end
--- True for a non-leaf whose gradient backward keeps (t:retain_grad()).
function getters.retains_grad(t) return bit.band(t.flags, C.TIDE_TENSOR_RETAINS_GRAD) ~= 0 end

-- -- methods ------------------------------------------------------------------------

--- t:requires_grad_(on): makes t a leaf whose gradient is accumulated in t.grad
-- (on defaults to true). Returns t.
function methods.requires_grad_(t, on)
  check(C.tide_tensor_set_requires_grad(t, on == false and 0 or 1))
  return t
end

--- t:detach(): the same values as a tensor that does not require grad (no copy).
function methods.detach(t) return wrap(C.tide_tensor_detach(t), 0) end

--- t:retain_grad(): backward fills t.grad for a non-leaf t too (accumulated across
-- backward calls, as a leaf's); a no-op on a leaf. Returns nothing, as PyTorch's.
function methods.retain_grad(t) check(C.tide_tensor_retain_grad(t)) end

-- -- hooks -----------------------------------------------------------------------------
-- The runtime keeps a hook's id, on the node or leaf it watches; its function is
-- kept here. Backward walks step by step (walk_next stops at each due hook), so
-- hooks run here, on the thread that called backward, with no callback from C.

local hook_fns = {}                       -- id -> function
local customs = {}                        -- id -> a custom function's call (autograd.Function below)
local dead = ffi.new("int64_t[?]", 64)

-- Drops the functions of hooks, and the calls of custom functions, whose node or leaf is gone.
local function sweep_hooks()
  repeat
    local n = tonumber(C.tide_autograd_hooks_dead(dead, 64))
    for i = 0, n - 1 do
      local id = tonumber(dead[i])
      hook_fns[id], customs[id] = nil, nil
    end
  until n < 64
end

local Handle = {}
Handle.__index = Handle
--- handle:remove(): the hook is not called any more.
function Handle:remove()
  local t = self._t[1]
  if self.id and t then C.tide_tensor_remove_hook(t, self.id) end
  if self.id then hook_fns[self.id] = nil end
  self.id = nil
end

--- t:register_hook(fn): fn(grad) is called during backward with the gradient
-- flowing into t (for a leaf: summed over its uses, before it is accumulated into
-- t.grad). It may return a tensor of the same shape, dtype and device to use
-- instead, or nil. An error in fn is raised by backward. Returns a handle whose
-- remove() takes the hook off. Hooks are refused inside tide.jit.compile.
-- @usage local h = x:register_hook(function(g) return g:clamp(-1, 1) end); ...; h:remove()
function methods.register_hook(t, fn)
  if type(fn) ~= "function" and not (type(fn) == "table" and getmetatable(fn) and getmetatable(fn).__call) then
    fail("register_hook: argument 1 must be a function, got " .. type(fn))
  end
  sweep_hooks()
  local id = ffi.new("int64_t[1]")
  check(C.tide_tensor_add_hook(t, id))
  local n = tonumber(id[0])
  hook_fns[n] = fn
  return setmetatable({ id = n, _t = setmetatable({ t }, { __mode = "v" }) }, Handle)
end

local roots = ffi.new("tide_tensor *[?]", 64)
local grads = ffi.new("tide_tensor *[?]", 64)
local in_buf = ffi.new("tide_tensor *[?]", 256)
local res_buf = ffi.new("tide_tensor *[?]", 256)
local walk_buf = ffi.new("tide_autograd_walk *[1]")
local hook_id = ffi.new("int64_t[1]")
local hook_grad = ffi.new("tide_tensor *[1]")
local run_custom   -- autograd.Function's backward step, below

-- Runs a backward walk (n roots; n_in inputs for autograd.grad, results into
-- res_buf), calling the hooks and custom functions' backwards it stops at. An
-- error ends the walk, then is raised at the user's line. A custom backward
-- may start a walk of its own (checkpoint does): the buffers are per walk.
local function walk(n, given, n_in, flags)
  -- the walk reads its inputs until it ends, and a nested walk refills in_buf and res_buf
  local ins, out
  if n_in > 0 then
    ins, out = ffi.new("tide_tensor *[?]", n_in), ffi.new("tide_tensor *[?]", n_in)
    ffi.copy(ins, in_buf, n_in * ffi.sizeof("tide_tensor *"))
  end
  check(C.tide_autograd_walk_begin(walk_buf, n, roots, given and grads or nil, n_in, ins, flags))
  local w = walk_buf[0]
  local function abort(msg)
    C.tide_autograd_walk_end(w, nil)
    fail(msg)
  end
  while true do
    if C.tide_autograd_walk_next(w, hook_id, hook_grad) ~= 0 then abort(ffi.string(C.tide_last_error())) end
    local id = tonumber(hook_id[0])
    if id == 0 then break end
    local fn, call = hook_fns[id], customs[id]
    if call then
      local ok, err = pcall(run_custom, w, call, flags, n_in > 0)
      if not ok then abort(err) end
    elseif fn then
      local g = hook_grad[0]
      C.tide_tensor_retain(g)
      local ok, r = pcall(fn, wrap(g, 0))
      if not ok then abort("backward: a gradient hook raised an error: " .. tostring(r)) end
      if r ~= nil then
        if not is_tensor(r) then abort("backward: a gradient hook must return a tensor or nil, got " .. type(r)) end
        if C.tide_autograd_walk_replace(w, r) ~= 0 then abort(ffi.string(C.tide_last_error())) end
      end
    end
  end
  check(C.tide_autograd_walk_end(w, out))
  for i = 0, n_in - 1 do res_buf[i], ins[i] = out[i], nil end
end

local function tensor_list(x, what, api, max)
  if is_tensor(x) then return { x } end
  if type(x) ~= "table" then fail(string.format("%s: %s must be a tensor or a table of tensors", api, what)) end
  if #x > max then fail(string.format("%s: at most %d %s, got %d", api, max, what, #x)) end
  for i = 1, #x do
    if not is_tensor(x[i]) then
      fail(string.format("%s: %s %d must be a tensor, got %s", api, what, i, type(x[i])))
    end
  end
  return x
end

-- Fills roots/grads from outputs and their gradients; returns their count and
-- whether any gradient was given.
local function set_roots(outputs, grad_outputs, api)
  local outs = tensor_list(outputs, "outputs", api, 64)
  local gs = grad_outputs
  if is_tensor(gs) then gs = { gs } end
  if gs ~= nil and type(gs) ~= "table" then fail(api .. ": grad_outputs must be a tensor or a table of tensors") end
  for i = 1, #outs do
    roots[i - 1] = outs[i]
    local g = gs and gs[i]
    if g ~= nil and not is_tensor(g) then fail(string.format("%s: gradient %d must be a tensor", api, i)) end
    grads[i - 1] = g
  end
  return #outs, gs ~= nil
end

-- The walk's flags from opts: retain_graph defaults to create_graph, as in PyTorch.
local function walk_flags(opts, allow_unused)
  local create = opts.create_graph and true or false
  local retain = opts.retain_graph
  if retain == nil then retain = create end
  return (retain and C.TIDE_AUTOGRAD_RETAIN_GRAPH or 0) + (create and C.TIDE_AUTOGRAD_CREATE_GRAPH or 0)
    + (allow_unused and C.TIDE_AUTOGRAD_ALLOW_UNUSED or 0)
end

--- t:backward(grad, {retain_graph = false, create_graph = false}): accumulates
-- the gradients of t into the .grad of every leaf it depends on. grad may be
-- omitted for a one-element t. The gradients are computed asynchronously by
-- the engine. With create_graph the backward ops are recorded too, so the
-- gradients require grad and can be differentiated again (retain_graph then
-- defaults to true).
-- @usage loss:backward({create_graph = true}); (x.grad * v):sum():backward()
function methods.backward(t, grad, opts)
  if type(grad) == "table" and not is_tensor(grad) then grad, opts = nil, grad end
  local n, given = set_roots(t, grad, "backward")
  walk(n, given, 0, walk_flags(opts or {}))
end

--- autograd.backward(tensors, grads, {retain_graph, create_graph}): backward from several roots at once.
function M.backward(tensors, grad_tensors, opts)
  local n, given = set_roots(tensors, grad_tensors, "backward")
  walk(n, given, 0, walk_flags(opts or {}))
end

--- autograd.grad(outputs, inputs, grad_outputs, {retain_graph, create_graph, allow_unused}):
-- the gradients of outputs with respect to inputs, without touching any .grad.
-- Returns a tensor when inputs is a tensor, else a table (nil for an unused
-- input with allow_unused). With create_graph the gradients require grad, so
-- they can be differentiated again (a gradient penalty, a Hessian-vector product).
-- @usage local gx = tide.autograd.grad((x * x):sum(), x)
-- @usage local hv = tide.autograd.grad((tide.autograd.grad(f(x), x, nil, {create_graph = true}) * v):sum(), x)
function M.grad(outputs, inputs, grad_outputs, opts)
  if type(grad_outputs) == "table" and not is_tensor(grad_outputs) and #grad_outputs == 0 and opts == nil then
    grad_outputs, opts = nil, grad_outputs
  end
  opts = opts or {}
  local n, given = set_roots(outputs, grad_outputs, "grad")
  local ins = tensor_list(inputs, "inputs", "grad", 256)
  for i = 1, #ins do in_buf[i - 1] = ins[i] end
  if #ins == 0 then fail("grad: inputs must not be empty") end
  walk(n, given, #ins, walk_flags(opts, opts.allow_unused))
  local r = {}
  for i = 1, #ins do
    local g = res_buf[i - 1]
    r[i] = g ~= nil and wrap(g, tonumber(g.nelem) * tonumber(C.tide_dtype_size(g.dtype_id))) or nil
  end
  if is_tensor(inputs) then return r[1] end
  return r
end

-- -- custom functions ------------------------------------------------------------------
-- A Function's forward runs in Lua with grad mode off; the runtime records one
-- node for the call (tide_autograd_custom) and gives back its outputs as tensors
-- whose history is that node. A walk stops there, and run_custom calls the
-- Function's backward with the outputs' gradients. What the call keeps (its ctx,
-- where its tensor arguments were) lives in `customs` under the node's id until
-- the node is freed.

local Ctx = {}
local ctx_mt = {}

local function saved_of(ctx)
  local call = rawget(ctx, "_call")
  local name = call and call.name or "autograd.Function"
  if rawget(ctx, "_freed") then
    fail(string.format("backward of '%s': its saved tensors were freed by an earlier backward; pass retain_graph "
      .. "= true to the first one to go through the graph twice", name))
  end
  local saved = rawget(ctx, "_saved")
  if not saved then return {} end
  local r = {}
  for i = 1, saved.n do
    local t = saved[i]
    if t ~= nil then
      local now = C.tide_tensor_version(t)
      if now ~= saved.versions[i] then
        fail(string.format("backward of '%s': saved tensor %d (shape %s) was modified in place after it was saved "
          .. "(version %d, expected %d); clone it before the in-place op", name, i, require("tide.args").shape_str(t), now,
          saved.versions[i]))
      end
      local nr, w = saved.output_of and saved.output_of[i], rawget(ctx, "_walk")
      if nr and w then   -- create_graph: a saved output regains its history
        local p = C.tide_autograd_walk_custom_output(w, nr - 1, t)
        t = p ~= nil and wrap(p, 0) or fail(ffi.string(C.tide_last_error()))
      end
    end
    r[i] = t
  end
  return r
end

ctx_mt.__index = function(ctx, k)
  if k == "saved_tensors" then return saved_of(ctx) end
  return Ctx[k]
end

--- ctx:save_for_backward(...): keeps tensors (or nils) for backward, which reads
-- them as ctx.saved_tensors (a list). Saving through ctx rather than in a field
-- lets backward check that nothing wrote into them in place, frees them after a
-- backward without retain_graph, and gives saved outputs their history under
-- create_graph.
function Ctx:save_for_backward(...)
  local saved = { n = select("#", ...), versions = {} }
  for i = 1, saved.n do
    local t = select(i, ...)
    if t ~= nil and not is_tensor(t) then
      fail(string.format("save_for_backward: argument %d must be a tensor or nil, got %s", i, type(t)))
    end
    saved[i] = t
    if t ~= nil then saved.versions[i] = C.tide_tensor_version(t) end
  end
  rawset(self, "_saved", saved)
end

--- ctx:mark_non_differentiable(...): these outputs of forward get no gradient
-- (an argmax, a mask); backward still receives a zero gradient for each.
function Ctx:mark_non_differentiable(...)
  local set = rawget(self, "_non_diff") or {}
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if not is_tensor(t) then fail("mark_non_differentiable: arguments must be tensors, got " .. type(t)) end
    set[#set + 1] = t
  end
  rawset(self, "_non_diff", set)
end

--- ctx:set_materialize_grads(on): with false, backward gets nil (not zeros) for
-- outputs whose gradient is zero because nothing used them.
function Ctx:set_materialize_grads(on) rawset(self, "_materialize", on and true or false) end

function Ctx.mark_dirty()
  fail("mark_dirty: in-place autograd functions are not supported; return a new tensor from forward")
end

local function is_in(list, t)
  for _, u in ipairs(list or {}) do
    if rawequal(u, t) then return true end
  end
  return false
end

local function apply(fn, ...)
  sweep_hooks()
  local name = fn.name
  if type(fn.forward) ~= "function" then fail(name .. ": forward is not defined (function " .. name .. ".forward(ctx, ...))") end
  local n_args = select("#", ...)
  local ctx = setmetatable({ needs_input_grad = {}, _materialize = true }, ctx_mt)
  -- the node's inputs: the tensor arguments that need a gradient (the others get
  -- none, so need no edge), and their positions among all arguments
  local inputs, where = {}, {}
  local grad_on, any = C.tide_autograd_is_enabled() ~= 0, false
  for i = 1, n_args do
    local a = select(i, ...)
    local needs = is_tensor(a) and grad_on and C.tide_tensor_requires_grad(a) ~= 0
    if needs then inputs[#inputs + 1], where[#where + 1] = a, i end
    ctx.needs_input_grad[i] = needs
    any = any or needs
  end
  local outs = { n = 0 }
  local function keep(...) outs = { n = select("#", ...), ... } end
  keep(M.no_grad(fn.forward, ctx, ...))
  if not any then return unpack(outs, 1, outs.n) end
  if #inputs > C.TIDE_OP_MAX_IN then
    fail(string.format("%s: at most %d tensor arguments that require grad, got %d", name,
      tonumber(C.TIDE_OP_MAX_IN), #inputs))
  end
  -- the differentiable outputs, in order; what backward gets a gradient for
  local diff, metas, non_diff = {}, {}, rawget(ctx, "_non_diff")
  for i = 1, outs.n do
    local o = outs[i]
    if is_tensor(o) then
      metas[i] = { shape = o:shape(), dtype = o:dtype(), device = o:device() }
      if o:is_floating_point() and not is_in(non_diff, o) then diff[#diff + 1] = i end
    end
  end
  if #diff == 0 then return unpack(outs, 1, outs.n) end
  if #diff > C.TIDE_OP_MAX_OUT then
    fail(string.format("%s: at most %d differentiable outputs, got %d", name, tonumber(C.TIDE_OP_MAX_OUT), #diff))
  end
  local ins = ffi.new("tide_tensor *[?]", #inputs)
  for k, t in ipairs(inputs) do ins[k - 1] = t end
  local o, r, id = ffi.new("tide_tensor *[?]", #diff), ffi.new("tide_tensor *[?]", #diff), ffi.new("int64_t[1]")
  for k, i in ipairs(diff) do o[k - 1] = outs[i] end
  check(C.tide_autograd_custom(name, #inputs, ins, #diff, o, r, id))
  local saved = rawget(ctx, "_saved")
  for k, i in ipairs(diff) do
    for j = 1, saved and saved.n or 0 do   -- a saved output: backward gives it back its history
      if rawequal(saved[j], outs[i]) then
        saved.output_of = saved.output_of or {}
        saved.output_of[j] = k
      end
    end
    outs[i] = wrap(r[k - 1], 0)
  end
  rawset(ctx, "_call", { name = name })
  customs[tonumber(id[0])] = { fn = fn, ctx = ctx, where = where, n_args = n_args, diff = diff, metas = metas,
                               n_out = outs.n }
  return unpack(outs, 1, outs.n)
end

local custom_gy = ffi.new("tide_tensor *[?]", C.TIDE_OP_MAX_OUT)
local custom_gx = ffi.new("tide_tensor *[?]", C.TIDE_OP_MAX_IN)

run_custom = function(w, call, flags, grad_walk)
  local ctx, name = call.ctx, call.fn.name
  if type(call.fn.backward) ~= "function" then
    fail(string.format("backward of '%s': backward is not defined (function %s.backward(ctx, ...))", name, name))
  end
  check(C.tide_autograd_walk_custom_grads(w, custom_gy))
  local gys, got = {}, {}
  for k, i in ipairs(call.diff) do
    local g = custom_gy[k - 1]
    if g ~= nil then gys[i], got[i] = wrap(g, 0), true end
  end
  local tide = require "tide"
  for i = 1, call.n_out do   -- zeros for outputs nothing used, and for the non-differentiable
    local m = call.metas[i]
    if m and not got[i] and ctx._materialize then gys[i] = tide.zeros(m.shape, { dtype = m.dtype, device = m.device }) end
  end
  local create = bit.band(flags, C.TIDE_AUTOGRAD_CREATE_GRAPH) ~= 0
  rawset(ctx, "_walk", create and w or nil)
  rawset(ctx, "_grad_walk", grad_walk or nil)
  local r = { pcall(call.fn.backward, ctx, unpack(gys, 1, call.n_out)) }
  rawset(ctx, "_walk", nil)
  rawset(ctx, "_grad_walk", nil)
  if not r[1] then error(string.format("backward of '%s' raised an error: %s", name, tostring(r[2])), 0) end
  for j = call.n_args + 2, table.maxn(r) do
    if r[j] ~= nil then
      fail(string.format("backward of '%s' returned %d values, but forward took %d arguments", name,
        table.maxn(r) - 1, call.n_args))
    end
  end
  for k, i in ipairs(call.where) do
    local g = r[i + 1]
    if g ~= nil and not is_tensor(g) then
      fail(string.format("backward of '%s': the gradient of argument %d must be a tensor or nil, got %s", name, i,
        type(g)))
    end
    custom_gx[k - 1] = g
  end
  local st = C.tide_autograd_walk_custom_result(w, #call.where, custom_gx)
  for k = 0, #call.where - 1 do custom_gx[k] = nil end
  check(st)
  if bit.band(flags, C.TIDE_AUTOGRAD_RETAIN_GRAPH) == 0 then   -- as the runtime frees a rule's saved tensors
    rawset(ctx, "_saved", nil)
    rawset(ctx, "_freed", true)
  end
end

-- The custom function calls whose nodes are alive (for specs of memory).
function M._live_functions()
  B.release_collected()
  sweep_hooks()
  local n = 0
  for _ in pairs(customs) do n = n + 1 end
  return n
end

local function_mt = { __call = function(fn, ...) return apply(fn, ...) end }

--- autograd.Function(name [, {forward = f, backward = g}]): a differentiable
-- function whose backward you write, as torch.autograd.Function. forward(ctx,
-- ...) runs with grad mode off and returns tensors (and other values);
-- backward(ctx, ...) gets one gradient per forward result (zeros for unused or
-- non-differentiable ones, nil for non-tensors) and returns one per forward
-- argument (nil: zero, or not a tensor). ctx carries what forward keeps for
-- backward: ctx:save_for_backward(...) / ctx.saved_tensors, ctx.needs_input_grad
-- (a boolean per argument), ctx:mark_non_differentiable(...),
-- ctx:set_materialize_grads(false), and any field of your own. Call it as
-- F(...) or F.apply(...). backward runs as ordinary ops, recorded under
-- create_graph (so it can be differentiated again), and may itself run a
-- backward of a graph of its own. At most 8 tensor arguments that require
-- grad (any number of others) and 4 differentiable results.
-- @usage local Exp = tide.autograd.Function("Exp")
-- function Exp.forward(ctx, x) local y = x:exp(); ctx:save_for_backward(y); return y end
-- function Exp.backward(ctx, gy) local y = unpack(ctx.saved_tensors); return gy * y end
-- local y = Exp(x)
function M.Function(name, def)
  if type(name) ~= "string" or name == "" then
    fail("autograd.Function: argument 1 must be the function's name (a string), got " .. type(name))
  end
  if def ~= nil and type(def) ~= "table" then
    fail("autograd.Function: argument 2 must be a table {forward = f, backward = g}, got " .. type(def))
  end
  local fn = setmetatable({ name = name }, function_mt)
  if def then fn.forward, fn.backward = def.forward, def.backward end
  fn.apply = function(...) return apply(fn, ...) end
  return fn
end

-- -- grad mode ----------------------------------------------------------------------

--- Runs fn(...) with gradient recording off (as `with torch.no_grad()`); returns its results.
function M.no_grad(fn, ...)
  if type(fn) ~= "function" then fail("no_grad: argument 1 must be a function") end
  local prev = C.tide_autograd_is_enabled()
  C.tide_autograd_set_enabled(0)
  local r = { pcall(fn, ...) }
  C.tide_autograd_set_enabled(prev)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, table.maxn(r))
end

--- Runs fn(...) with gradient recording on, e.g. inside a no_grad region.
function M.enable_grad(fn, ...)
  if type(fn) ~= "function" then fail("enable_grad: argument 1 must be a function") end
  local prev = C.tide_autograd_is_enabled()
  C.tide_autograd_set_enabled(1)
  local r = { pcall(fn, ...) }
  C.tide_autograd_set_enabled(prev)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, table.maxn(r))
end

--- Turns gradient recording on or off for this thread; returns the previous state.
function M.set_grad_enabled(on)
  local prev = C.tide_autograd_is_enabled() ~= 0
  C.tide_autograd_set_enabled(on and 1 or 0)
  return prev
end
function M.is_grad_enabled() return C.tide_autograd_is_enabled() ~= 0 end

-- -- gradcheck ------------------------------------------------------------------------

-- A fixed sequence of projection weights in [-1, 1], so gradcheck neither
-- depends on nor disturbs the global generator.
local function projection(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local vals, x = {}, 12345
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    vals[i] = x / 1073741824 - 1
  end
  local t = require("tide").tensor(vals, "float64")
  return t:reshape(shape)
end

--- gradcheck(fn, inputs, {eps = 1e-6, atol = 1e-5, rtol = 1e-3}): compares the
-- gradients autograd gives for fn(unpack(inputs)) with central finite differences.
-- inputs are float64 tensors (those requiring grad are checked); fn returns a
-- tensor or a table of tensors. Each output is projected on fixed random
-- weights, so one backward checks every input element. Returns true, or raises
-- an error naming the input, the element and both values.
-- @usage tide.autograd.gradcheck(function(a, b) return a * b end, {a, b})
function M.gradcheck(fn, ins, opts)
  opts = opts or {}
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  if type(fn) ~= "function" then fail("gradcheck: argument 1 must be a function") end
  ins = tensor_list(ins, "inputs", "gradcheck", 64)
  local checked = {}
  for i, x in ipairs(ins) do
    if x.requires_grad then
      if x:dtype() ~= "float64" then
        fail(string.format("gradcheck: input %d is %s; finite differences need float64", i, x:dtype()))
      end
      if not x:is_contiguous() then fail(string.format("gradcheck: input %d must be contiguous", i)) end
      checked[#checked + 1] = i
    end
  end
  if #checked == 0 then fail("gradcheck: no input requires grad") end
  local function outputs()
    local o = fn(unpack(ins))
    if is_tensor(o) then return { o } end
    return o
  end
  local outs = outputs()
  local weights = {}
  for j, o in ipairs(outs) do weights[j] = projection(o:shape()) end
  local function scalar(os)
    local s = 0
    for j, o in ipairs(os) do
      if o:is_floating_point() then s = s + (o:double() * weights[j]):sum():item() end
    end
    return s
  end
  local total
  for j, o in ipairs(outs) do
    if o.requires_grad then
      local term = (o:double() * weights[j]):sum()
      total = total and total + term or term
    end
  end
  if not total then fail("gradcheck: no output requires grad") end
  local wanted = {}
  for k, i in ipairs(checked) do wanted[k] = ins[i] end
  local analytic = M.grad(total, wanted, nil, { allow_unused = true })
  for k, i in ipairs(checked) do
    local x = ins[i]
    -- each element nudged in place: through a pointer on the host, by an
    -- indexed write (a device op, outside autograd) on a device
    local p = not x:is_cuda() and ffi.cast("double *", x:data_ptr()) or nil
    local flat = not p and x:view(-1) or nil
    local function get(e) if p then return p[e] end return M.no_grad(function() return flat[e + 1] end) end
    local function set(e, v)
      if p then p[e] = v else M.no_grad(function() flat[e + 1] = v end) end
    end
    local a = analytic[k] and analytic[k]:contiguous():totable() or nil
    local flat_a = {}
    if a then
      local function flatten(v) if type(v) == "table" then for _, e in ipairs(v) do flatten(e) end
        else flat_a[#flat_a + 1] = v end end
      flatten(a)
    end
    for e = 0, x:numel() - 1 do
      local orig = get(e)
      set(e, orig + eps)
      local fp = scalar(outputs())   -- in grad mode: fn may itself call autograd.grad
      set(e, orig - eps)
      local fm = scalar(outputs())
      set(e, orig)
      local num = (fp - fm) / (2 * eps)
      local ana = flat_a[e + 1] or 0
      if not (math.abs(ana - num) <= atol + rtol * math.abs(num)) then
        fail(string.format("gradcheck: input %d, element %d: autograd gives %.10g, finite differences %.10g",
          i, e + 1, ana, num))
      end
    end
  end
  return true
end

-- on first use: autograd_functional requires tide, which requires this file
setmetatable(M, { __index = function(t, k)
  if k == "functional" then
    t[k] = require "tide.autograd_functional"
    return t[k]
  end
end })

return M
