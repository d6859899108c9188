--- What the optimizer specs share: parameters with fixed values and the
-- gradients the specs set, a run against a plain-Lua reference of an update
-- rule, a state-dict round trip mid-run, and a compiled training step checked
-- against the eager one. The references themselves stay in each spec.
local tide = require "tide"
local assert = require "luassert"
local ffi = require "ffi"
local H = require "spec.helpers"

local O = {}

O.shapes = { { 2, 3 }, { 4 } }
function O.f32(x) return tonumber(ffi.new("float", x)) end
O.tol = { float32 = { 2e-5, 2e-6 }, float64 = { 1e-12, 1e-14 } }

--- Parameters with fixed values, their reference copies, and the coefficients of
-- the gradient the specs set (that of 0.5 c p^2 + d p, from the reference values);
-- seed (30 by default) picks the values.
function O.make_params(dtype, seed)
  local params, refs, coefs = {}, {}, {}
  for k, shape in ipairs(O.shapes) do
    local n = H.numel(shape)
    local vals = H.values(n, -1.5, 1.5, (seed or 30) + k)
    if dtype == "float32" then for i = 1, n do vals[i] = O.f32(vals[i]) end end
    params[k] = tide.tensor(H.nest(vals, shape), { dtype = dtype, requires_grad = true })
    refs[k] = vals
    coefs[k] = { c = H.values(n, 0.2, 2, 100 + k), d = H.values(n, -1, 1, 200 + k) }
  end
  return params, refs, coefs
end

--- The gradient of step `step` at the reference values ref_p.
function O.grad_values(ref_p, coef, dtype, step)
  local g = {}
  for i = 1, #ref_p do
    g[i] = coef.c[i] * ref_p[i] + coef.d[i] * (1 + 0.1 * step)
    if dtype == "float32" then g[i] = O.f32(g[i]) end
  end
  return g
end

--- Sets each parameter's gradient to that of step `step`, on the parameter's device.
function O.set_grads(params, refs, coefs, dtype, step)
  for k, p in ipairs(params) do
    p.grad = tide.tensor(H.nest(O.grad_values(refs[k], coefs[k], dtype, step), O.shapes[k]), dtype):to(p:device())
  end
end

--- `steps` steps of optimizer `name` with options opts and of reference(p, g,
-- st, opts), comparing every parameter after every step, and with `state` (a
-- list of {reference key, optimizer state key}) the state the reference keeps.
function O.check_against_reference(name, opts, dtype, reference, steps, state)
  local params, refs, coefs = O.make_params(dtype)
  local opt = tide.optim[name](params, opts)
  local states = { {}, {} }
  local tol = O.tol[dtype]
  for step = 1, steps do
    for k, p in ipairs(params) do
      local g = O.grad_values(refs[k], coefs[k], dtype, step)
      p.grad = tide.tensor(H.nest(g, O.shapes[k]), dtype)
      reference(refs[k], g, states[k], opts)
    end
    opt:step()
    for k, p in ipairs(params) do
      local what = string.format("%s %s step %d param %d", name, dtype, step, k)
      assert.are.equal(dtype, p:dtype())
      H.close(p, H.nest(refs[k], O.shapes[k]), tol[1], tol[2], what)
      for _, pair in ipairs(state or {}) do
        H.close(opt.state[p][pair[2]], H.nest(states[k][pair[1]], O.shapes[k]), tol[1], tol[2], what .. " " .. pair[2])
      end
    end
  end
  return params, opt
end

--- Defines, with `it`, one case per option set of configs[name] in float64 and
-- one in float32 (configs[name][float32_case]), each run by check(name, opts, dtype).
function O.each_config(it, names, configs, float32_case, check)
  for _, name in ipairs(names) do
    local cnames = {}
    for cname in pairs(configs[name]) do cnames[#cnames + 1] = cname end
    table.sort(cnames)
    for _, cname in ipairs(cnames) do
      it(name .. ", " .. cname .. ", float64", function() check(name, configs[name][cname], "float64") end)
    end
    local f32 = float32_case[name]
    it(name .. ", " .. f32 .. ", float32", function() check(name, configs[name][f32], "float32") end)
  end
end

--- A state-dict round trip: `before` steps, then the state dict (whose first
-- parameter's state has exactly `keys`) loaded into a fresh optimizer over
-- copies, which then takes the same `after` steps bit for bit; a state dict
-- missing a key is refused naming it.
function O.state_dict_round_trip(name, opts, keys, before, after)
  local params, refs, coefs = O.make_params("float64")
  local opt = tide.optim[name](params, opts)
  for step = 1, before do O.set_grads(params, refs, coefs, "float64", step); opt:step() end
  local sd = opt:state_dict()
  local got = {}
  for k in pairs(sd.state[1]) do got[#got + 1] = k end
  table.sort(got)
  table.sort(keys)
  assert.are.same(keys, got)
  assert.are.equal(before, sd.state[2].step:item())
  local copies = {}
  for k, p in ipairs(params) do copies[k] = p:detach():clone():requires_grad_() end
  local opt2 = tide.optim[name](copies, { lr = 123 })
  opt2:load_state_dict(sd)
  assert.are.equal(opts.lr, opt2.param_groups[1].lr)
  assert.are.equal(opts.lr, opt2:hyperparameter_tensors(1).lr:item())
  for step = before + 1, before + after do
    O.set_grads(params, refs, coefs, "float64", step); opt:step()
    O.set_grads(copies, refs, coefs, "float64", step); opt2:step()
    for k = 1, #params do H.equal(copies[k], params[k]:totable(), name .. " step " .. step) end
  end
  sd.state[1][keys[#keys]] = nil
  assert.has_error(function() tide.optim[name](copies):load_state_dict(sd) end,
    string.format("%s: load_state_dict: the state of parameter 1 lacks %s", name, keys[#keys]))
end

--- A small least-squares loss of w, for the compiled steps.
function O.regression()
  tide.manual_seed(1234)
  local x = tide.randn(8, 3)
  local y = x:matmul(tide.tensor({ { 1.5 }, { -2 }, { 0.5 } }))
  return function(w) return ((x:matmul(w) - y) ^ 2):mean() end
end

--- `steps` training steps of optimizer `name` on the regression, eager and
-- compiled, with an ExponentialLR(gamma) schedule between them: the losses,
-- the weights and the optimizer's state agree bit for bit, the compiled one
-- replayed at least `replays` times, and the loss moved the right way.
function O.compiled_matches_eager(name, opts, gamma, steps, replays)
  local loss_of = O.regression()
  local function train(compiled)
    local w = tide.zeros({ 3, 1 }, { requires_grad = true })
    local opt = tide.optim[name]({ w }, opts)
    local sched = tide.optim.ExponentialLR(opt, { gamma = gamma })
    local function step()
      local loss = loss_of(w)
      opt:zero_grad()
      loss:backward()
      opt:step()
      return loss
    end
    local f = compiled and tide.jit.compile(step) or step
    local losses = {}
    for i = 1, steps do
      losses[i] = f():item()
      sched:step()
    end
    return losses, w:clone(), opt.state[w], f
  end
  local l1, w1, st1 = train(false)
  local l2, w2, st2, f = train(true)
  assert.are.same(l1, l2)
  assert.are.equal(0, (w1 - w2):abs():max():item())
  for k, v in pairs(st1) do assert.are.same(v:totable(), st2[k]:totable(), k) end
  assert.is_true(f:stats().replays >= replays)
  if opts.maximize then
    assert.is_true(l1[steps] > l1[1], "the loss went up")
  else
    assert.is_true(l1[steps] < l1[1], "the loss went down")
  end
end

return O
