--- tide.autograd: reverse-mode automatic differentiation, as PyTorch has it.
-- The graph is recorded by the runtime (runtime/src/autograd/) as ops run;
-- this file gives it its Lua face: the tensor fields `grad`, `requires_grad`,
-- `grad_fn` and `is_leaf`, `t:backward()`, `tide.no_grad`, `autograd.grad`
-- and `gradcheck`. Backward rules live in C, next to nothing Lua needs.
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
local dead = ffi.new("int64_t[?]", 64)

-- Drops the functions of hooks whose node or leaf is gone.
local function sweep_hooks()
  repeat
    local n = tonumber(C.tide_autograd_hooks_dead(dead, 64))
    for i = 0, n - 1 do hook_fns[tonumber(dead[i])] = nil end
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

-- Runs a backward walk (n roots; n_in inputs for autograd.grad, results into
-- res_buf), calling the hooks it stops at. An error ends the walk, then is raised
-- at the user's line.
local function walk(n, given, n_in, flags)
  check(C.tide_autograd_walk_begin(walk_buf, n, roots, given and grads or nil, n_in, in_buf, flags))
  local w = walk_buf[0]
  local function abort(msg)
    C.tide_autograd_walk_end(w, nil)
    fail(msg)
  end
  while true do
    if C.tide_autograd_walk_next(w, hook_id, hook_grad) ~= 0 then abort(ffi.string(C.tide_last_error())) end
    local id = tonumber(hook_id[0])
    if id == 0 then break end
    local fn = hook_fns[id]
    if fn then
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
  check(C.tide_autograd_walk_end(w, n_in > 0 and res_buf or nil))
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
    local function get(e) if p then return p[e] end return flat[e + 1] end
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

return M
