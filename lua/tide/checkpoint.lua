--- tide.utils.checkpoint: gradient checkpointing, as torch.utils.checkpoint.
-- checkpoint(fn, ...) runs fn(...) without keeping what its backward would
-- need, and runs it again, recording, when backward reaches it: memory for
-- compute. The recomputation draws the same random numbers (dropout) as the
-- first run unless told not to, and the gradients of the parameters fn uses
-- go into their .grad as usual.
--
--     local y = tide.utils.checkpoint.checkpoint(block, x)       -- block: a module or a function
--     local y = tide.utils.checkpoint.checkpoint_sequential(model, 4, x)
--
-- It is an autograd.Function whose backward recomputes fn on detached copies
-- of its tensor arguments and runs a backward of that graph of its own, so:
-- fn must get the tensors it differentiates through as arguments (or as
-- parameters: leaves), not as results of ops outside it, which would belong to
-- the graph being walked (an error says so); its result cannot be
-- differentiated twice (create_graph); and autograd.grad through it is refused,
-- since its parameters' gradients would go to their .grad.
local autograd = require "tide.autograd"
local B = require "bindings.ffi"
local T = require "tide.tensor"
local fail, is_tensor = B.fail, T.is_tensor

local M = {}

local function pack(...) return { n = select("#", ...), ... } end

-- The generator's state as two host numbers, not a tensor, so that a captured
-- (jit) step can take and restore it without reading a tensor.
local ffi, C = B.ffi, B.C
local function rng_state()
  local s = ffi.new("uint64_t[2]")
  C.tide_rng_get_state(s, s + 1)
  return s
end

local Checkpoint = autograd.Function("checkpoint")

-- forward(ctx, fn, preserve_rng, anchor, ...): anchor is a tensor that requires
-- grad, so the node is recorded even when no argument requires grad (fn's
-- parameters still need their gradients).
function Checkpoint.forward(ctx, fn, preserve, _, ...)
  ctx.fn, ctx.args = fn, pack(...)
  if preserve then ctx.rng = rng_state() end
  local tensors = {}
  for i = 1, ctx.args.n do tensors[i] = is_tensor(ctx.args[i]) and ctx.args[i] or nil end
  ctx:save_for_backward(unpack(tensors, 1, ctx.args.n))
  return fn(...)
end

function Checkpoint.backward(ctx, ...)
  if rawget(ctx, "_walk") then
    fail("checkpoint: its result cannot be differentiated with create_graph (the recomputation's backward is "
      .. "not recorded); call fn directly for higher-order gradients")
  end
  if rawget(ctx, "_grad_walk") then
    fail("checkpoint: autograd.grad through a checkpointed function is not supported (the gradients of the "
      .. "parameters fn uses would go to their .grad); use backward()")
  end
  local grads, saved, args = pack(...), ctx.saved_tensors, ctx.args
  local inputs = {}
  for i = 1, args.n do
    local t = saved[i]
    if t ~= nil then
      t = t:detach()
      if ctx.needs_input_grad[i + 3] then t:requires_grad_() end
      inputs[i] = t
    else
      inputs[i] = args[i]
    end
  end
  local now
  if ctx.rng then now = rng_state(); C.tide_rng_set_state(ctx.rng[0], ctx.rng[1]) end
  local ok, outs = pcall(function()
    return pack(autograd.enable_grad(function() return ctx.fn(unpack(inputs, 1, args.n)) end))
  end)
  if now then C.tide_rng_set_state(now[0], now[1]) end
  if not ok then error(outs, 0) end
  local roots, gs = {}, {}
  for i = 1, outs.n do
    local o = outs[i]
    if is_tensor(o) and o.requires_grad and grads[i] ~= nil then roots[#roots + 1], gs[#gs + 1] = o, grads[i] end
  end
  if #roots > 0 then autograd.backward(roots, gs) end
  local r = {}
  for i = 1, args.n do
    local t = inputs[i]
    if is_tensor(t) and ctx.needs_input_grad[i + 3] then r[i] = t.grad end
  end
  return nil, nil, nil, unpack(r, 1, args.n)
end

-- A 0-d leaf that requires grad, made once (not by an op, so no capture holds it).
local the_anchor
local function anchor()
  if not the_anchor then
    local t = B.wrap(C.tide_tensor_zeros(0, nil, C.TIDE_DTYPE_F32), 4)
    the_anchor = t:requires_grad_()
  end
  return the_anchor
end

local function callable(fn)
  local mt = type(fn) == "table" and getmetatable(fn)
  return type(fn) == "function" or (mt and mt.__call ~= nil)
end

--- checkpoint(fn, ...): fn(...), with its intermediate results recomputed in
-- backward instead of kept. fn may be a function or a module. To turn off the
-- recomputation's replay of the random stream: checkpoint({fn = fn,
-- preserve_rng_state = false}, ...).
-- @usage local h = tide.utils.checkpoint.checkpoint(block, x)
function M.checkpoint(fn, ...)
  local preserve = true
  if type(fn) == "table" and rawget(fn, "fn") ~= nil then
    preserve = fn.preserve_rng_state ~= false
    fn = fn.fn
  end
  if not callable(fn) then fail("checkpoint: argument 1 must be a function or a module, got " .. type(fn)) end
  if not autograd.is_grad_enabled() then return fn(...) end   -- nothing to save memory from
  return Checkpoint(fn, preserve, anchor(), ...)
end

--- checkpoint_sequential(functions, segments, input): runs a sequence (a list of
-- functions or modules, or an nn.Sequential) on input in `segments` chunks,
-- each checkpointed but the last, as torch.utils.checkpoint.checkpoint_sequential.
-- @usage local y = tide.utils.checkpoint.checkpoint_sequential(model, 2, x)
function M.checkpoint_sequential(functions, segments, input, opts)
  local list = functions   -- an nn.Sequential holds its modules at 1..n too
  if type(list) ~= "table" or #list == 0 then
    fail("checkpoint_sequential: argument 1 must be a non-empty list of functions or modules, or an nn.Sequential")
  end
  if type(segments) ~= "number" or segments < 1 or segments ~= math.floor(segments) then
    fail("checkpoint_sequential: segments must be a positive integer, got " .. tostring(segments))
  end
  local n = #list
  segments = math.min(segments, n)
  local size = math.ceil(n / segments)
  local preserve = not (opts and opts.preserve_rng_state == false)
  local function run(from, to)
    return function(x)
      for i = from, to do x = list[i](x) end
      return x
    end
  end
  local x, from = input, 1
  while from <= n do
    local to = math.min(from + size - 1, n)
    if to < n then x = M.checkpoint({ fn = run(from, to), preserve_rng_state = preserve }, x)
    else x = run(from, to)(x) end
    from = to + 1
  end
  return x
end

return M
