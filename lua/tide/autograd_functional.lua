--- tide.autograd.functional: torch.autograd.functional's API (jacobian, hessian,
-- vjp, jvp, hvp, vhp), built on autograd.grad and the C backward rules, which
-- are differentiable again; loaded on first use of tide.autograd.functional.
-- tide has reverse mode only: jvp and hvp use the double-backward trick (a
-- gradient is linear in the gradient it starts from, so differentiating it with
-- respect to that gives the transposed product), and strategy = "forward-mode"
-- is refused. vectorize is accepted and ignored: without vmap a Jacobian costs
-- one backward walk per output element, each on the retained graph.
--
-- As PyTorch's: `inputs` is a tensor or a table of tensors, passed to func
-- unpacked; func returns a tensor or a table of tensors. A result comes as a
-- tensor where both are tensors and as (nested) tables otherwise: jacobian's
-- [i][j] (shape output i's ++ input j's) is for output i and input j. Inputs
-- no output depends on give zeros (strict = true raises instead). The caller's
-- tensors are not changed (neither requires_grad nor grad); results are
-- detached unless create_graph = true, which lets them be differentiated again.
--
--     local F = tide.autograd.functional
--     local J = F.jacobian(function(x) return x:softmax(1) end, x)   -- [n, n]
--     local Hs = F.hessian(function(x, y) return (x * y):sum() end, { x, y })  -- Hs[1][2]
--     local out, jv = F.jvp(f, x, v)                 -- J v, out = f(x) (detached)
local tide = require "tide"
local args = require "tide.args"
local fail, is_tensor = require("bindings.ffi").fail, tide.is_tensor
local need_bool, shape_str, fmt = args.need_bool, args.shape_str, string.format

local M = {}

-- -- arguments ---------------------------------------------------------------------

-- x as a list of tensors and whether it came as a table (PyTorch's _as_tuple).
-- `what` names the list in messages ("inputs"), `one` an element ("input").
local function as_list(x, api, what, one)
  if is_tensor(x) then return { x }, false end
  if type(x) ~= "table" then
    fail(fmt("%s: %s must be a tensor or a table of tensors, got %s", api, what, type(x)))
  end
  if #x == 0 then fail(fmt("%s: %s must not be an empty table", api, what)) end
  for i = 1, #x do
    if not is_tensor(x[i]) then fail(fmt("%s: %s %d must be a tensor, got %s", api, one, i, type(x[i]))) end
  end
  return x, true
end

local function need_function(f, api)
  local mt = type(f) == "table" and getmetatable(f)
  if type(f) ~= "function" and not (mt and mt.__call) then
    fail(fmt("%s: argument 1 must be a function, got %s", api, type(f)))
  end
end

-- opts checked: only `known` keys, booleans where they are flags.
local function options(opts, api, known)
  opts = args.options(opts, api, known)
  for _, k in ipairs { "create_graph", "strict", "vectorize" } do
    if known[k] then need_bool(opts[k], api, "option " .. k) end
  end
  return opts
end

-- Refuses forward mode, which tide does not have, naming the option.
local function reverse_mode(strategy, api, name)
  if strategy == nil or strategy == "reverse-mode" then return end
  if strategy == "forward-mode" then
    fail(fmt("%s: %s 'forward-mode' is not available: tide's autograd is reverse-mode only"
      .. " (use 'reverse-mode'; jvp gives Jacobian-vector products)", api, name))
  end
  fail(fmt("%s: %s must be 'reverse-mode' or 'forward-mode', got %s", api, name, tostring(strategy)))
end

-- The tensors func is differentiated at (PyTorch's _grad_preprocess): detached
-- leaves that require grad when need_graph, so the caller's tensors keep their
-- flags and grads; with create_graph an input that requires grad is taken
-- through a view instead, so the results stay differentiable with respect to it.
local function prepare(xs, create_graph, need_graph, api, one)
  local r = {}
  for i, x in ipairs(xs) do
    if create_graph and x.requires_grad then
      r[i] = x:view_as(x)
    else
      if need_graph and not x:is_floating_point() then
        fail(fmt("%s: %s %d must be a floating-point tensor, got %s", api, one, i, x:dtype()))
      end
      r[i] = x:detach()
      if need_graph then r[i]:requires_grad_() end
    end
  end
  return r
end

-- func(unpack(ins)) as a list of tensors and whether it returned a table.
local function call(func, ins, api)
  local r = { func(unpack(ins)) }
  local n = table.maxn(r)
  if n ~= 1 then fail(fmt("%s: the function must return a tensor or a table of tensors, got %d values", api, n)) end
  return as_list(r[1], api, "the function's result", "output")
end

-- v checked against the tensors it multiplies (PyTorch's _validate_v); v may
-- be nil only where those are a single one-element tensor (the product is then
-- the plain gradient, as autograd.grad's implicit grad_outputs).
local function check_v(v, refs, api, against)
  if v == nil then
    if #refs ~= 1 or refs[1]:numel() ~= 1 then
      fail(fmt("%s: v can be omitted only when the %s are a single tensor of one element", api, against))
    end
    return nil
  end
  local vs = as_list(v, api, "v", "v")
  if #vs ~= #refs then fail(fmt("%s: v has %d tensors, the %s have %d", api, #vs, against, #refs)) end
  for i, t in ipairs(vs) do
    if table.concat(t:shape(), ",") ~= table.concat(refs[i]:shape(), ",") then
      fail(fmt("%s: v %d has shape %s, %s %d has shape %s", api, i, shape_str(t), against:sub(1, -2), i,
        shape_str(refs[i])))
    end
  end
  return vs
end

-- -- strict mode ------------------------------------------------------------------------

local unused_msg = {
  back = "the outputs do not depend on input %d",
  back_trick = "the gradient of the inputs does not depend on the gradient of output %d,"
    .. " which the double-backward trick that computes jvp needs",
  double_back = "the gradient does not depend on input %d (the Hessian is zero there)",
  double_back_trick = "the Hessian-vector product does not depend on input %d,"
    .. " which the double-backward trick that computes hvp needs",
}
local no_history_msg = {
  outputs = "output %d of the function does not require grad"
    .. " (it is not computed from the inputs by differentiable ops)",
  grad_inputs = "the gradient of input %d does not depend on the gradients of the outputs",
  jacobian = "the gradient with respect to input %d does not depend on the inputs"
    .. " (a linear function's does not)",
}

local function strict_fail(api, msg, i)
  fail(fmt("%s: " .. msg .. ", which strict = true does not allow", api, i))
end

-- With strict, raises when a tensor of the list is missing or has no history.
local function check_history(ts, n, kind, api, strict)
  if not strict then return end
  for i = 1, n do
    if ts[i] == nil then strict_fail(api, unused_msg.back, i) end
    if not ts[i].requires_grad then strict_fail(api, no_history_msg[kind], i) end
  end
end

-- -- gradients -----------------------------------------------------------------------

-- autograd.grad of the outputs that require grad (outs has n entries, some may
-- be nil), vs their gradients or nil for implicit ones: a list with nil for an
-- input none of them reaches (PyTorch's _autograd_grad).
local function grad_of(outs, n, ins, vs, create_graph, retain_graph)
  local o, g = {}, {}
  for i = 1, n do
    if outs[i] ~= nil and outs[i].requires_grad then
      o[#o + 1] = outs[i]
      g[#o] = vs and vs[i]
    end
  end
  if #o == 0 then return {} end
  return tide.autograd.grad(o, ins, vs and g or nil,
    { create_graph = create_graph, retain_graph = retain_graph, allow_unused = true })
end

-- The gradients with zeros for the missing ones (refs give their shapes), or
-- strict's error; with create_graph and strict, also for one without history.
local function fill_zeros(gs, refs, strict, create_graph, stage, api)
  local r = {}
  for i, ref in ipairs(refs) do
    local g = gs[i]
    if g == nil then
      if strict then strict_fail(api, unused_msg[stage], i) end
      g = tide.zeros_like(ref)
    elseif strict and create_graph and not g.requires_grad then
      strict_fail(api, (stage:find("double") and "the Hessian" or "the Jacobian")
        .. " does not depend on input %d, so create_graph = true gives it no history", i)
    end
    r[i] = g
  end
  return r
end

-- Results detached unless create_graph (PyTorch's _grad_postprocess).
local function finish(ts, create_graph)
  if create_graph then return ts end
  local r = {}
  for i, t in ipairs(ts) do r[i] = t:detach() end
  return r
end

local function unlist(ts, was_list) if was_list then return ts end return ts[1] end

-- -- Jacobian ---------------------------------------------------------------------------

local function concat(a, b)
  local r = {}
  for _, s in ipairs(a) do r[#r + 1] = s end
  for _, s in ipairs(b) do r[#r + 1] = s end
  return r
end

-- The Jacobian of out with respect to each of ins (shape out's ++ the input's),
-- one backward walk per element of out, on the retained graph.
local function jacobian_of(out, i, ins, create_graph, strict, api)
  local m, r = out:numel(), {}
  if m == 0 or not out.requires_grad then
    for k, x in ipairs(ins) do
      if strict and m > 0 then strict_fail(api, "output " .. i .. " does not depend on input %d", k) end
      r[k] = tide.zeros(concat(out:shape(), x:shape()), { dtype = x:dtype(), device = x:device() })
    end
    return r
  end
  local flat, rows, zeros = out:reshape(-1), {}, {}
  for k = 1, #ins do rows[k] = {} end
  for j = 1, m do
    local g = tide.autograd.grad(flat:select(1, j), ins, nil,
      { retain_graph = true, create_graph = create_graph, allow_unused = true })
    for k, x in ipairs(ins) do
      local gk = g[k]
      if gk == nil then
        if strict then strict_fail(api, "output " .. i .. " does not depend on input %d", k) end
        zeros[k] = zeros[k] or tide.zeros_like(x)
        gk = zeros[k]
      elseif strict and create_graph and not gk.requires_grad then
        strict_fail(api, "the Jacobian does not depend on input %d, so create_graph = true gives it no history", k)
      end
      rows[k][j] = gk
    end
  end
  for k, x in ipairs(ins) do r[k] = tide.stack(rows[k], 1):reshape(concat(out:shape(), x:shape())) end
  return r
end

local function jacobian(func, inputs, opts, api)
  need_function(func, api)
  local xs, in_list = as_list(inputs, api, "inputs", "input")
  local create_graph, strict = opts.create_graph, opts.strict
  return tide.enable_grad(function()
    local ins = prepare(xs, create_graph, true, api, "input")
    local outs, out_list = call(func, ins, api)
    check_history(outs, #outs, "outputs", api, strict)
    local jac = {}
    for i, out in ipairs(outs) do jac[i] = finish(jacobian_of(out, i, ins, create_graph, strict, api), create_graph) end
    if not out_list then return unlist(jac[1], in_list) end
    if in_list then return jac end
    for i = 1, #jac do jac[i] = jac[i][1] end
    return jac
  end)
end

--- jacobian(func, inputs, opts): the Jacobian of func at inputs.
-- @param func a function of the inputs, returning a tensor or a table of tensors
-- @param inputs a floating-point tensor or a table of them
-- @param opts {create_graph = false, strict = false, vectorize = false (ignored),
--   strategy = "reverse-mode" ("forward-mode" is not available)}
-- @return a tensor of shape output's ++ input's where func takes and returns
--   tensors; else a table over outputs of tables over inputs, a level dropped
--   for whichever side is a tensor
-- @usage local J = tide.autograd.functional.jacobian(function(x) return A:matmul(x) end, x)  -- A
function M.jacobian(func, inputs, opts)
  opts = options(opts, "jacobian", { create_graph = true, strict = true, vectorize = true, strategy = true })
  reverse_mode(opts.strategy, "jacobian", "strategy")
  return jacobian(func, inputs, opts, "jacobian")
end

--- hessian(func, inputs, opts): the Hessian of a function with one-element
-- output, as the Jacobian of its gradient.
-- @param func a function of the inputs, returning a tensor of one element
-- @param inputs a floating-point tensor or a table of them
-- @param opts {create_graph = false, strict = false, vectorize = false (ignored),
--   outer_jacobian_strategy = "reverse-mode" ("forward-mode" is not available)}
-- @return a tensor of shape input's ++ input's for a tensor input; for a
--   table, a table of tables: [i][j] is the block of inputs i and j
-- @usage local Hm = tide.autograd.functional.hessian(function(x) return (x ^ 3):sum() end, x)  -- diag(6x)
function M.hessian(func, inputs, opts)
  opts = options(opts, "hessian",
    { create_graph = true, strict = true, vectorize = true, outer_jacobian_strategy = true })
  reverse_mode(opts.outer_jacobian_strategy, "hessian", "outer_jacobian_strategy")
  need_function(func, "hessian")
  local strict = opts.strict
  local function one_output(...)
    local r = { func(...) }
    if table.maxn(r) ~= 1 or not is_tensor(r[1]) then
      fail("hessian: the function must return a single tensor, got " .. (table.maxn(r) == 1 and type(r[1])
        or table.maxn(r) .. " values"))
    end
    local out = r[1]
    check_history({ out }, 1, "outputs", "hessian", strict)
    if out:numel() ~= 1 then
      fail("hessian: the function's result must have one element, got shape " .. shape_str(out))
    end
    return out:reshape({})
  end
  local function gradient(...)
    local ins = { ... }
    local g = jacobian(one_output, is_tensor(inputs) and ins[1] or ins, { create_graph = true }, "hessian")
    check_history(is_tensor(g) and { g } or g, #ins, "jacobian", "hessian", strict)
    return g
  end
  return jacobian(gradient, inputs, opts, "hessian")
end

-- -- products ---------------------------------------------------------------------------

local function product_options(opts, api) return options(opts, api, { create_graph = true, strict = true }) end

-- v, opts as given, or opts in v's place (a table that is neither a tensor nor a list).
local function shift_v(v, opts)
  if type(v) == "table" and not is_tensor(v) and #v == 0 and next(v) ~= nil and opts == nil then return nil, v end
  return v, opts
end

-- Runs body(ins, outs, vs, create_graph, strict) with grad mode on: the common
-- part of the products. v is shaped as the "inputs" or the "outputs" (v_of),
-- and so is the product (res_of).
local function product(api, func, inputs, v, opts, v_of, res_of, body)
  need_function(func, api)
  local xs, in_list = as_list(inputs, api, "inputs", "input")
  local create_graph, strict = opts.create_graph, opts.strict
  return tide.enable_grad(function()
    local ins = prepare(xs, create_graph, true, api, "input")
    local vs
    if v_of == "inputs" then vs = check_v(v, ins, api, "inputs") end
    local outs, out_list = call(func, ins, api)
    check_history(outs, #outs, "outputs", api, strict)
    if v_of == "outputs" then vs = check_v(v, outs, api, "outputs") end
    vs = vs and prepare(vs, create_graph, false, api, "v")
    local res = body(ins, outs, vs, create_graph, strict)
    return unlist(finish(outs, create_graph), out_list),
      unlist(finish(res, create_graph), res_of == "outputs" and out_list or in_list)
  end)
end

local function need_scalar_output(outs, api)
  if #outs ~= 1 or outs[1]:numel() ~= 1 then
    fail(fmt("%s: the function must return a single tensor of one element, got %s", api,
      #outs ~= 1 and (#outs .. " tensors") or ("shape " .. shape_str(outs[1]))))
  end
end

--- vjp(func, inputs, v, opts): the vector-Jacobian product v^T J of func at inputs.
-- @param v a tensor or table of tensors shaped as func's outputs; nil for a
--   one-element output
-- @param opts {create_graph = false, strict = false}
-- @return func's outputs (detached unless create_graph), and v^T J shaped as the inputs
-- @usage local y, vj = tide.autograd.functional.vjp(f, x, tide.ones_like(f(x)))
function M.vjp(func, inputs, v, opts)
  v, opts = shift_v(v, opts)
  return product("vjp", func, inputs, v, product_options(opts, "vjp"), "outputs", "inputs",
    function(ins, outs, vs, create_graph, strict)
      local g = grad_of(outs, #outs, ins, vs, create_graph)
      return fill_zeros(g, ins, strict, create_graph, "back", "vjp")
    end)
end

--- jvp(func, inputs, v, opts): the Jacobian-vector product J v of func at
-- inputs, by the double-backward trick (two reverse walks).
-- @param v a tensor or table of tensors shaped as the inputs; nil for a
--   one-element input
-- @param opts {create_graph = false, strict = false}
-- @return func's outputs (detached unless create_graph), and J v shaped as the outputs
-- @usage local y, jv = tide.autograd.functional.jvp(function(x) return x:sin() end, x, v)  -- cos(x) * v
function M.jvp(func, inputs, v, opts)
  v, opts = shift_v(v, opts)
  return product("jvp", func, inputs, v, product_options(opts, "jvp"), "inputs", "outputs",
    function(ins, outs, vs, create_graph, strict)
      -- the gradient of the inputs is linear in grad_outs, so its own gradient
      -- with respect to them does not depend on their (finite) values
      local grad_outs = {}
      for i, o in ipairs(outs) do grad_outs[i] = tide.zeros_like(o, { requires_grad = true }) end
      local gi = grad_of(outs, #outs, ins, grad_outs, true)
      check_history(gi, #ins, "grad_inputs", "jvp", strict)
      local g = grad_of(gi, #ins, grad_outs, vs, create_graph)
      return fill_zeros(g, outs, strict, create_graph, "back_trick", "jvp")
    end)
end

--- vhp(func, inputs, v, opts): the vector-Hessian product v^T H of a function
-- with one-element output.
-- @param v a tensor or table of tensors shaped as the inputs; nil for a one-element input
-- @param opts {create_graph = false, strict = false}
-- @return func's output (detached unless create_graph), and v^T H shaped as the inputs
-- @usage local y, vh = tide.autograd.functional.vhp(function(x) return (x ^ 3):sum() end, x, v)  -- 6 x v
function M.vhp(func, inputs, v, opts)
  v, opts = shift_v(v, opts)
  return product("vhp", func, inputs, v, product_options(opts, "vhp"), "inputs", "inputs",
    function(ins, outs, vs, create_graph, strict)
      need_scalar_output(outs, "vhp")
      local jac = grad_of(outs, 1, ins, nil, true)
      check_history(jac, #ins, "jacobian", "vhp", strict)
      local g = grad_of(jac, #ins, ins, vs, create_graph)
      return fill_zeros(g, ins, strict, create_graph, "double_back", "vhp")
    end)
end

--- hvp(func, inputs, v, opts): the Hessian-vector product H v of a function
-- with one-element output, by the double-backward trick (three reverse walks;
-- vhp gives the same for a function whose Hessian is symmetric, in two).
-- @param v a tensor or table of tensors shaped as the inputs; nil for a one-element input
-- @param opts {create_graph = false, strict = false}
-- @return func's output (detached unless create_graph), and H v shaped as the inputs
-- @usage local y, hv = tide.autograd.functional.hvp(rosenbrock, x, v)
function M.hvp(func, inputs, v, opts)
  v, opts = shift_v(v, opts)
  return product("hvp", func, inputs, v, product_options(opts, "hvp"), "inputs", "inputs",
    function(ins, outs, vs, create_graph, strict)
      need_scalar_output(outs, "hvp")
      local jac = grad_of(outs, 1, ins, nil, true)
      check_history(jac, #ins, "jacobian", "hvp", strict)
      local grad_jac = {}
      for i, x in ipairs(ins) do grad_jac[i] = tide.zeros_like(x, { requires_grad = true }) end
      local back = grad_of(jac, #ins, ins, grad_jac, true)
      local g = grad_of(back, #ins, grad_jac, vs, create_graph)
      return fill_zeros(g, ins, strict, create_graph, "double_back_trick", "hvp")
    end)
end

return M
