-- optim: each optimizer's steps against its published update rule computed
-- here in plain Lua float64 (float32 and float64 parameters), param groups,
-- nil gradients, zero_grad, hyperparameter changes and their tensors, state
-- dict round trips, add_param_group, the schedules against their closed forms,
-- every error message, and training runs that must reach a small loss.
local tide = require "tide"
local H = require "spec.helpers"
local O = require "spec.helpers.optim"
local ffi = require "ffi"

local optim = tide.optim

-- -- references ----------------------------------------------------------------------------

-- The published update rules, one element at a time, in float64. p, g: arrays
-- of numbers; st: the parameter's state (arrays and counters); o: the group's options.
local ref = {}

function ref.SGD(p, g, st, o)
  for i = 1, #p do
    local gi = g[i]
    if o.maximize then gi = -gi end
    gi = gi + (o.weight_decay or 0) * p[i]
    local mom = o.momentum or 0
    if mom ~= 0 then
      st.buf = st.buf or {}
      if st.buf[i] == nil then st.buf[i] = gi
      else st.buf[i] = mom * st.buf[i] + (1 - (o.dampening or 0)) * gi end
      if o.nesterov then gi = gi + mom * st.buf[i] else gi = st.buf[i] end
    end
    p[i] = p[i] - o.lr * gi
  end
end

local function adam(p, g, st, o, decoupled)
  local b1, b2 = o.betas and o.betas[1] or 0.9, o.betas and o.betas[2] or 0.999
  local eps = o.eps or 1e-8
  local wd = o.weight_decay or (decoupled and 1e-2 or 0)
  st.t = (st.t or 0) + 1
  st.m, st.v, st.vmax = st.m or {}, st.v or {}, st.vmax or {}
  local bc1, bc2 = 1 - b1 ^ st.t, 1 - b2 ^ st.t
  for i = 1, #p do
    local gi = g[i]
    if o.maximize then gi = -gi end
    if decoupled then p[i] = p[i] * (1 - o.lr * wd) else gi = gi + wd * p[i] end
    st.m[i] = b1 * (st.m[i] or 0) + (1 - b1) * gi
    st.v[i] = b2 * (st.v[i] or 0) + (1 - b2) * gi * gi
    local v = st.v[i]
    if o.amsgrad then
      st.vmax[i] = math.max(st.vmax[i] or 0, v)
      v = st.vmax[i]
    end
    p[i] = p[i] - o.lr / bc1 * st.m[i] / (math.sqrt(v) / math.sqrt(bc2) + eps)
  end
end
function ref.Adam(p, g, st, o) adam(p, g, st, o, false) end
function ref.AdamW(p, g, st, o) adam(p, g, st, o, true) end

function ref.RMSprop(p, g, st, o)
  local alpha, eps, mom = o.alpha or 0.99, o.eps or 1e-8, o.momentum or 0
  st.v, st.a, st.b = st.v or {}, st.a or {}, st.b or {}
  for i = 1, #p do
    local gi = g[i]
    if o.maximize then gi = -gi end
    gi = gi + (o.weight_decay or 0) * p[i]
    st.v[i] = alpha * (st.v[i] or 0) + (1 - alpha) * gi * gi
    local avg
    if o.centered then
      st.a[i] = alpha * (st.a[i] or 0) + (1 - alpha) * gi
      avg = math.sqrt(st.v[i] - st.a[i] * st.a[i])
    else
      avg = math.sqrt(st.v[i])
    end
    avg = avg + eps
    if mom > 0 then
      st.b[i] = mom * (st.b[i] or 0) + gi / avg
      p[i] = p[i] - o.lr * st.b[i]
    else
      p[i] = p[i] - o.lr * gi / avg
    end
  end
end

-- -- the harness ----------------------------------------------------------------------------

-- parameters, gradients and tolerances as the other optimizer specs have them
local shapes, tol, grad_values = O.shapes, O.tol, O.grad_values
local function make_params(dtype) return O.make_params(dtype, 11) end

-- Runs `steps` steps of optimizer `name` built from make(params) and of the
-- reference with the group options of each parameter (group_of(k) -> options),
-- comparing every parameter after every step. skip(k, step) leaves a gradient nil.
local function check_against_reference(name, dtype, make, group_of, steps, skip)
  local params, refs, coefs = make_params(dtype)
  local opt = make(params)
  local states = {}
  for k = 1, #params do states[k] = {} end
  for step = 1, steps do
    for k, p in ipairs(params) do
      if skip and skip(k, step) then
        p.grad = nil
      else
        local g = grad_values(refs[k], coefs[k], dtype, step)
        p.grad = tide.tensor(H.nest(g, shapes[k]), dtype)
        ref[name](refs[k], g, states[k], group_of(k))
      end
    end
    opt:step()
    for k, p in ipairs(params) do
      assert.are.equal(dtype, p:dtype())
      H.close(p, H.nest(refs[k], shapes[k]), tol[dtype][1], tol[dtype][2],
        string.format("%s %s step %d param %d", name, dtype, step, k))
    end
  end
  return opt, params
end

-- One config: the options, or groups = { group options... } (param k in group k).
local function run_config(name, cfg, dtype)
  local steps = 6
  if cfg.groups then
    return check_against_reference(name, dtype, function(params)
      local groups = {}
      for k, g in ipairs(cfg.groups) do
        local grp = { params = { params[k] } }
        for key, v in pairs(g) do grp[key] = v end
        groups[k] = grp
      end
      return optim[name](groups, cfg.opts)
    end, function(k)
      local o = {}
      for key, v in pairs(cfg.opts or {}) do o[key] = v end
      for key, v in pairs(cfg.groups[k]) do o[key] = v end
      return o
    end, steps, cfg.skip)
  end
  return check_against_reference(name, dtype, function(params) return optim[name](params, cfg.opts) end,
    function() return cfg.opts end, steps, cfg.skip)
end

local configs = {
  SGD = {
    plain = { opts = { lr = 0.1 } },
    momentum = { opts = { lr = 0.1, momentum = 0.9 } },
    ["momentum, dampening and weight decay"] = { opts = { lr = 0.05, momentum = 0.8, dampening = 0.3,
                                                          weight_decay = 0.01 } },
    nesterov = { opts = { lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 0.1 } },
    maximize = { opts = { lr = 0.05, momentum = 0.5, maximize = true } },
    ["param groups with different lrs"] = { opts = { lr = 0.02, momentum = 0.5 },
                                            groups = { { lr = 0.1, momentum = 0.9 }, {} } },
    ["nil gradients skipped"] = { opts = { lr = 0.1, momentum = 0.9 },
                                  skip = function(k, step) return k == 2 and (step == 1 or step == 4) end },
  },
  Adam = {
    plain = { opts = { lr = 0.1 } },
    ["betas, eps and weight decay"] = { opts = { lr = 0.05, betas = { 0.8, 0.95 }, eps = 1e-3, weight_decay = 0.1 } },
    amsgrad = { opts = { lr = 0.1, amsgrad = true } },
    maximize = { opts = { lr = 0.05, maximize = true, weight_decay = 0.01 } },
    ["param groups with different lrs"] = { opts = { lr = 0.01 },
                                            groups = { { lr = 0.1, betas = { 0.5, 0.9 } }, { amsgrad = true } } },
    ["nil gradients skipped, with a step count per parameter"] = {
      opts = { lr = 0.1 }, skip = function(k, step) return k == 2 and step <= 2 end },
  },
  AdamW = {
    plain = { opts = { lr = 0.1 } },
    ["weight decay and amsgrad"] = { opts = { lr = 0.05, weight_decay = 0.5, amsgrad = true } },
    maximize = { opts = { lr = 0.05, maximize = true, betas = { 0.7, 0.9 } } },
    ["param groups with different lrs"] = { opts = { lr = 0.01, weight_decay = 0.1 },
                                            groups = { { lr = 0.1 }, { weight_decay = 0 } } },
  },
  RMSprop = {
    plain = { opts = { lr = 0.01 } },
    ["momentum and weight decay"] = { opts = { lr = 0.01, momentum = 0.9, weight_decay = 0.1, alpha = 0.9 } },
    centered = { opts = { lr = 0.01, centered = true, eps = 1e-4 } },
    ["centered with momentum, maximize"] = { opts = { lr = 0.01, centered = true, momentum = 0.5, maximize = true } },
    ["param groups with different lrs"] = { opts = { lr = 0.001 },
                                            groups = { { lr = 0.01, centered = true }, { momentum = 0.3 } } },
    ["nil gradients skipped"] = { opts = { lr = 0.01, momentum = 0.9 },
                                  skip = function(k, step) return k == 1 and step == 3 end },
  },
}

-- A small least-squares problem: returns a loss function of w and the data.
local function regression()
  tide.manual_seed(1234)
  local x = tide.randn(64, 3)
  local w_true = tide.tensor({ { 1.5 }, { -2 }, { 0.5 } })
  local y = x:matmul(w_true) + tide.randn(64, 1) * 0.01
  return function(w) return ((x:matmul(w) - y) ^ 2):mean() end
end

local function addr(t) return tonumber(ffi.cast("uintptr_t", ffi.cast("void *", t))) end

describe("optim", function()
  for _, name in ipairs { "SGD", "Adam", "AdamW", "RMSprop" } do
    describe(name .. " follows its update rule", function()
      local names = {}
      for cname in pairs(configs[name]) do names[#names + 1] = cname end
      table.sort(names)
      for _, cname in ipairs(names) do
        for _, dtype in ipairs { "float64", "float32" } do
          it(cname .. ", " .. dtype, function() run_config(name, configs[name][cname], dtype) end)
        end
      end
    end)
  end

  describe("steps", function()
    it("leave the parameters leaves, record no graph, and keep the state on the parameter's device", function()
      local p = tide.tensor({ 1, 2 }, { requires_grad = true })
      local q = tide.tensor({ 3, 4 }, { requires_grad = true }):detach():to("cpu:1"):requires_grad_()
      local opt = optim.Adam({ p, q }, { lr = 0.1 })
      ;(p * p):sum():backward()
      ;(q * q):sum():backward()
      opt:step()
      assert.is_true(p.is_leaf and q.is_leaf)
      assert.is_nil(p.grad_fn)
      assert.is_true(p.requires_grad)
      assert.are.equal("cpu:1", q:device())
      assert.are.equal("cpu:1", opt.state[q].exp_avg:device())
      assert.are.equal("cpu:1", opt.state[q].step:device())
      assert.are.equal("cpu:1", opt:hyperparameter_tensors(1, "cpu:1").lr:device())
      H.close(q, { 2.9, 3.9 }, 1e-6)
      H.close(p, { 0.9, 1.9 }, 1e-6)
    end)
    it("make no state for a parameter that never had a gradient", function()
      local p = tide.tensor({ 1, 2 }, { requires_grad = true })
      local q = tide.tensor({ 3 }, { requires_grad = true })
      local opt = optim.SGD({ p, q }, { lr = 0.1, momentum = 0.9 })
      ;(p * p):sum():backward()
      opt:step()
      assert.is_nil(opt.state[q])
      H.equal(q, { 3 })
      assert.is_not_nil(opt.state[p].momentum_buffer)
      assert.is_nil(opt:state_dict().state[2])
    end)
    it("take a closure that recomputes the loss, with grad recording on", function()
      local w = tide.tensor({ 2 }, { requires_grad = true })
      local opt = optim.SGD({ w }, { lr = 0.25 })
      local loss = tide.no_grad(function()
        return opt:step(function()
          opt:zero_grad()
          local l = (w * w):sum()
          l:backward()
          return l
        end)
      end)
      H.close(loss, 4)
      H.close(w, { 1 })
    end)
    it("keep memory flat over many steps", function()
      local w = tide.randn({ 32, 32 }, { requires_grad = true })
      local opt = optim.Adam({ w }, { lr = 1e-3, amsgrad = true })
      local function step()
        opt:zero_grad()
        w:tanh():mean():backward()
        opt:step()
      end
      -- the bytes held once the collector has released every tensor no longer referenced
      local function settled()
        tide.sync()
        collectgarbage("collect")
        collectgarbage("collect")
        local _ = tide.zeros(1)   -- the next tensor made releases what the collection freed
        tide.sync()
        return H.mem_stats().in_use
      end
      for _ = 1, 20 do step() end
      local before = settled()
      for _ = 1, 300 do step() end   -- a leaked 32x32 float32 buffer per step would hold 1.2 MB
      local after = settled()
      assert.is_true(after - before < 256 * 1024, "grew by " .. (after - before))
    end)
    it("make as few passes over the parameters' memory as their rules need (fused ops)", function()
      -- counted from a trace of one steady-state step over one [64] parameter: ops
      -- reading a tensor of 64 elements are passes, the rest are 0-d ops (the step
      -- count, bias corrections, and the group's factors derived once per step)
      local function count(name, opts)
        local p = tide.randn({ 64 }, { requires_grad = true })
        local opt = optim[name]({ p }, opts)
        p.grad = tide.randn(64)
        opt:step()
        tide.sync()
        local path = os.tmpname()
        tide.profile(function() opt:step(); tide.sync() end, path)
        local f = assert(io.open(path))
        local trace = f:read("*a")
        f:close()
        os.remove(path)
        local passes, small, seen = 0, 0, {}
        for op, inputs in trace:gmatch('"name":"([^"]*)","ph":"X"[^\n]-"inputs":"([^"]*)"') do
          if inputs:find("%[64%]") then passes = passes + 1 else small = small + 1 end
          seen[#seen + 1] = op
        end
        return passes, small, table.concat(seen, " ")
      end
      for _, case in ipairs {
        { "SGD", { lr = 0.1 }, 1, 1 },
        { "SGD", { lr = 0.1, momentum = 0.9 }, 3, 2 },
        { "SGD", { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.1 }, 5, 2 },
        { "Adam", { lr = 0.1 }, 6, 10 },
        { "Adam", { lr = 0.1, amsgrad = true, weight_decay = 0.1 }, 8, 10 },
        { "AdamW", { lr = 0.1 }, 7, 12 },
        { "RMSprop", { lr = 0.01 }, 5, 3 },
        { "RMSprop", { lr = 0.01, momentum = 0.9 }, 7, 3 },
        { "RMSprop", { lr = 0.01, momentum = 0.9, centered = true }, 9, 3 },
      } do
        local passes, small, ops = count(case[1], case[2])
        local keys = {}
        for k, v in pairs(case[2]) do keys[#keys + 1] = k .. "=" .. tostring(v) end
        table.sort(keys)
        local what = string.format("%s {%s}: %s", case[1], table.concat(keys, ", "), ops)
        assert.are.equal(case[3], passes, what)
        assert.are.equal(case[4], small, what)
      end
    end)
  end)

  describe("zero_grad", function()
    it("sets gradients to nil by default", function()
      local p = tide.tensor({ 1, 2 }, { requires_grad = true })
      local opt = optim.SGD({ p }, { lr = 0.1 })
      ;(p * p):sum():backward()
      opt:zero_grad()
      assert.is_nil(p.grad)
      opt:step()   -- nothing to do
      H.equal(p, { 1, 2 })
    end)
    it("zeroes them in place with set_to_none = false, and the next backward accumulates from zero", function()
      local p = tide.tensor({ 1, 2 }, { requires_grad = true })
      local opt = optim.SGD({ p }, { lr = 0.1 })
      ;(p * p):sum():backward()
      local g = p.grad
      opt:zero_grad(false)
      H.equal(g, { 0, 0 })
      H.equal(p.grad, { 0, 0 })
      ;(p * 3):sum():backward()
      H.equal(p.grad, { 3, 3 })
    end)
  end)

  describe("hyperparameters", function()
    it("a new lr set on a param group takes effect on the next step", function()
      local p = tide.tensor({ 1 }, { dtype = "float64", requires_grad = true })
      local opt = optim.SGD({ p }, { lr = 0.1 })
      p.grad = tide.tensor({ 1 }, "float64")
      opt:step()
      H.close(p, { 0.9 }, 1e-15)
      opt.param_groups[1].lr = 0.01
      opt:step()
      H.close(p, { 0.89 }, 1e-15)
      for _, g in ipairs(opt.param_groups) do g.lr = 0.5 end
      opt:step()
      H.close(p, { 0.39 }, 1e-15)
    end)
    it("are mirrored into 0-d float64 tensors that the update ops read", function()
      local p = tide.tensor({ 1 }, { dtype = "float64", requires_grad = true })
      local opt = optim.Adam({ p }, { lr = 0.1, betas = { 0.8, 0.9 } })
      local ts = opt:hyperparameter_tensors(1)
      assert.are.same({ {}, "float64" }, { ts.lr:shape(), ts.lr:dtype() })
      assert.are.same({ 0.1, 0.8, 0.9, 1e-8, 0 },
        { ts.lr:item(), ts.beta1:item(), ts.beta2:item(), ts.eps:item(), ts.weight_decay:item() })
      local lr_addr = addr(ts.lr)
      opt.param_groups[1].lr = 0.02
      opt.param_groups[1].betas[1] = 0.5
      opt:sync_hyperparameters()
      assert.are.same({ 0.02, 0.5 }, { ts.lr:item(), ts.beta1:item() })
      p.grad = tide.tensor({ 1 }, "float64")
      opt:step()
      assert.are.equal(lr_addr, addr(opt:hyperparameter_tensors(1).lr))   -- the same tensor, step after step
      H.close(p, { 1 - 0.02 }, 0, 1e-9)
      -- a write to the tensor alone (what a compiled step's replay sees) changes the update
      ts.lr:fill_(0.5)
      local before = p:item()
      opt:step()
      H.close(p, { before - 0.5 }, 0, 1e-8)
      assert.are.equal(0.02, opt.param_groups[1].lr)
    end)
    it("a scheduler's step writes the new lr into the tensor at once", function()
      local p = tide.tensor({ 1 }, { requires_grad = true })
      local opt = optim.SGD({ p }, { lr = 1 })
      local lr_t = opt:hyperparameter_tensors(1).lr
      local sched = optim.StepLR(opt, { step_size = 1, gamma = 0.5 })
      sched:step()
      assert.are.equal(0.5, lr_t:item())
      sched:step()
      assert.are.equal(0.25, lr_t:item())
    end)
    it("must stay numbers", function()
      local p = tide.tensor({ 1 }, { requires_grad = true })
      local opt = optim.SGD({ p }, { lr = 0.1 })
      opt.param_groups[1].lr = "fast"
      p.grad = tide.ones(1)
      assert.has_error(function() opt:step() end, "SGD: param group 1: lr must be a number, got string")
    end)
  end)

  describe("param groups", function()
    it("take their options from the defaults, theirs first, and keep extra keys", function()
      local a = tide.tensor({ 1 }, { requires_grad = true })
      local b = tide.tensor({ 2 }, { requires_grad = true })
      local opt = optim.Adam({ { params = { a }, lr = 0.5, name = "head" }, { params = b } }, { lr = 0.01 })
      assert.are.equal(0.5, opt.param_groups[1].lr)
      assert.are.equal("head", opt.param_groups[1].name)
      assert.are.equal(0.01, opt.param_groups[2].lr)
      assert.are.same({ 0.9, 0.999 }, opt.param_groups[2].betas)
      assert.are.equal(b, opt.param_groups[2].params[1])
      assert.are.equal(0.01, opt.defaults.lr)
    end)
    it("add_param_group adds a group that steps with its own options", function()
      local a = tide.tensor({ 1 }, { dtype = "float64", requires_grad = true })
      local b = tide.tensor({ 1 }, { dtype = "float64", requires_grad = true })
      local opt = optim.SGD({ a }, { lr = 0.1 })
      local g = opt:add_param_group({ params = { b }, lr = 0.3 })
      assert.are.equal(g, opt.param_groups[2])
      assert.are.equal(0, g.momentum)
      a.grad, b.grad = tide.ones(1, "float64"), tide.ones(1, "float64")
      opt:step()
      H.close(a, { 0.9 }, 1e-15)
      H.close(b, { 0.7 }, 1e-15)
    end)
  end)

  describe("state_dict", function()
    local cases = {
      { "SGD", { lr = 0.1, momentum = 0.9, nesterov = true } },
      { "Adam", { lr = 0.05, amsgrad = true, weight_decay = 0.01 } },
      { "AdamW", { lr = 0.05 } },
      { "RMSprop", { lr = 0.01, centered = true, momentum = 0.5 } },
    }
    for _, case in ipairs(cases) do
      local name, opts = case[1], case[2]
      it(name .. ": a fresh optimizer loaded with it takes identical steps", function()
        local params, refs, coefs = make_params("float64")
        local function groups_of(ps, lr)
          return { { params = { ps[1] }, lr = lr }, { params = { ps[2] } } }
        end
        local opt = optim[name](groups_of(params, opts.lr * 2), opts)
        local function set_grads(ps, step)
          for k, p in ipairs(ps) do
            p.grad = tide.tensor(H.nest(grad_values(refs[k], coefs[k], "float64", step), shapes[k]), "float64")
          end
        end
        for step = 1, 3 do set_grads(params, step); opt:step() end
        local sd = opt:state_dict()
        -- the copies: same parameter values, an optimizer with other hyperparameters
        local copies = {}
        for k, p in ipairs(params) do copies[k] = p:detach():clone():requires_grad_() end
        local opt2 = optim[name](groups_of(copies, 123), { lr = 0.5 })
        opt2:load_state_dict(sd)
        assert.are.same(opt.param_groups[1].lr, opt2.param_groups[1].lr)
        assert.are.equal(opts.lr * 2, opt2:hyperparameter_tensors(1).lr:item())
        -- the snapshot does not move with later steps
        local snap = {}
        for key, v in pairs(sd.state[1]) do snap[key] = v:totable() end
        for step = 4, 7 do
          set_grads(params, step); opt:step()
          set_grads(copies, step); opt2:step()
          for k = 1, #params do H.equal(copies[k], params[k]:totable(), name .. " step " .. step) end
        end
        for key, v in pairs(sd.state[1]) do assert.are.same(snap[key], v:totable(), key) end
      end)
    end
    it("is a nested table of numbers, booleans and tensors, parameters numbered across groups", function()
      local a = tide.tensor({ 1, 2 }, { requires_grad = true })
      local b = tide.tensor({ 3 }, { requires_grad = true })
      local c = tide.tensor({ 4 }, { requires_grad = true })
      local opt = optim.Adam({ { params = { a, b } }, { params = { c }, lr = 0.5 } }, { lr = 0.1 })
      ;(a:sum() + c:sum()):backward()
      opt:step()
      local sd = opt:state_dict()
      assert.are.same({ 1, 2 }, sd.param_groups[1].params)
      assert.are.same({ 3 }, sd.param_groups[2].params)
      assert.are.same({ 0.9, 0.999 }, sd.param_groups[1].betas)
      assert.are.equal(0.5, sd.param_groups[2].lr)
      assert.are.equal(false, sd.param_groups[2].amsgrad)
      assert.is_nil(sd.state[2])
      assert.are.equal(1, sd.state[1].step:item())
      assert.are.equal(1, sd.state[3].step:item())
      assert.are.same({ 2 }, sd.state[1].exp_avg:shape())
      assert.are.same({ 1 }, sd.state[3].exp_avg_sq:shape())
    end)
    it("converts the loaded state to each parameter's dtype", function()
      local p = tide.tensor({ 1, 2 }, { dtype = "float64", requires_grad = true })
      local opt = optim.Adam({ p }, { lr = 0.1 })
      ;(p * p):sum():backward()
      opt:step()
      local q = tide.tensor({ 1, 2 }, { requires_grad = true })
      local opt2 = optim.Adam({ q }, { lr = 0.1 })
      opt2:load_state_dict(opt:state_dict())
      assert.are.equal("float32", opt2.state[q].exp_avg:dtype())
      assert.are.equal("float64", opt2.state[q].step:dtype())
      H.close(opt2.state[q].exp_avg, opt.state[p].exp_avg:totable(), 1e-6)
    end)
  end)

  describe("errors", function()
    local p, q
    before_each(function()
      p = tide.tensor({ 1, 2 }, { requires_grad = true })
      q = tide.tensor({ 3 }, { requires_grad = true })
    end)
    it("are raised at the caller's line", function()
      local ok, err = pcall(optim.SGD, {})
      assert.is_false(ok)
      assert.matches("optim_spec.lua:%d+: SGD: got an empty parameter list", err)
    end)
    it("for bad parameters", function()
      assert.has_error(function() optim.SGD(nil) end,
        "SGD: params must be a tensor, a table of tensors or a table of param groups, got nil")
      assert.has_error(function() optim.SGD({}) end, "SGD: got an empty parameter list")
      assert.has_error(function() optim.SGD({ p, 3 }) end, "SGD: parameter 2 of group 1 must be a tensor, got number")
      assert.has_error(function() optim.Adam({ p * 2 }) end,
        "Adam: parameter 1 of group 1 is not a leaf tensor (it was computed by 'mul'); optimize the leaf it came from")
      assert.has_error(function() optim.SGD({ p, tide.ones(2) }) end,
        "SGD: parameter 2 of group 1 does not require grad; call p:requires_grad_() on it first")
      assert.has_error(function() optim.SGD({ p, q, p }) end,
        "SGD: parameter 3 of group 1 is the same tensor as parameter 1 of group 1")
      assert.has_error(function() optim.SGD({ { params = { p } }, { params = { q, p } } }) end,
        "SGD: parameter 2 of group 2 is the same tensor as parameter 1 of group 1")
      assert.has_error(function() optim.SGD({ { params = { p } }, { lr = 1 } }) end,
        "SGD: param group 2 has no 'params' (a tensor or a table of tensors)")
      assert.has_error(function() optim.SGD({ { params = {} } }) end, "SGD: param group 1 has an empty parameter list")
      assert.has_error(function() optim.SGD({ { params = { p } }, p }) end,
        "SGD: param group 2 must be a table with 'params', got a tensor")
    end)
    it("for bad options, naming the optimizer and the value", function()
      assert.has_error(function() optim.SGD({ p }, 0.1) end, "SGD: options must be a table, got number")
      assert.has_error(function() optim.SGD({ p }, { momentun = 0.9 }) end, "SGD: unknown option 'momentun'")
      assert.has_error(function() optim.SGD({ p }, { lr = -0.1 }) end, "SGD: lr must be >= 0, got -0.1")
      assert.has_error(function() optim.SGD({ p }, { lr = "fast" }) end, "SGD: lr must be a number, got 'fast'")
      assert.has_error(function() optim.SGD({ p }, { momentum = -1 }) end, "SGD: momentum must be >= 0, got -1")
      assert.has_error(function() optim.SGD({ p }, { weight_decay = -1 }) end,
        "SGD: weight_decay must be >= 0, got -1")
      assert.has_error(function() optim.SGD({ p }, { dampening = true }) end,
        "SGD: dampening must be a number, got true")
      assert.has_error(function() optim.SGD({ p }, { nesterov = true }) end,
        "SGD: nesterov requires momentum > 0 and dampening = 0")
      assert.has_error(function() optim.SGD({ p }, { nesterov = true, momentum = 0.9, dampening = 0.1 }) end,
        "SGD: nesterov requires momentum > 0 and dampening = 0")
      assert.has_error(function() optim.SGD({ p }, { nesterov = 1 }) end, "SGD: nesterov must be a boolean, got 1")
      assert.has_error(function() optim.SGD({ p }, { maximize = "yes" }) end,
        "SGD: maximize must be a boolean, got 'yes'")
      assert.has_error(function() optim.Adam({ p }, { betas = { 1.5, 0.999 } }) end,
        "Adam: beta1 must be in [0, 1), got 1.5")
      assert.has_error(function() optim.Adam({ p }, { betas = { 0.9, 1 } }) end, "Adam: beta2 must be in [0, 1), got 1")
      assert.has_error(function() optim.Adam({ p }, { betas = { -0.1, 0.9 } }) end,
        "Adam: beta1 must be in [0, 1), got -0.1")
      assert.has_error(function() optim.Adam({ p }, { betas = 0.9 }) end,
        "Adam: betas must be a table of two numbers, got 0.9")
      assert.has_error(function() optim.Adam({ p }, { betas = { 0.9 } }) end,
        "Adam: betas must be a table of two numbers, got a table of 1 values")
      assert.has_error(function() optim.Adam({ p }, { eps = -1 }) end, "Adam: eps must be >= 0, got -1")
      assert.has_error(function() optim.Adam({ p }, { lr = -1 }) end, "Adam: lr must be >= 0, got -1")
      assert.has_error(function() optim.Adam({ p }, { weight_decay = -0.5 }) end,
        "Adam: weight_decay must be >= 0, got -0.5")
      assert.has_error(function() optim.Adam({ p }, { amsgrad = 1 }) end, "Adam: amsgrad must be a boolean, got 1")
      assert.has_error(function() optim.AdamW({ p }, { betas = { 0.9, 2 } }) end,
        "AdamW: beta2 must be in [0, 1), got 2")
      assert.has_error(function() optim.AdamW({ p }, { weight_decay = -1 }) end,
        "AdamW: weight_decay must be >= 0, got -1")
      assert.has_error(function() optim.RMSprop({ p }, { alpha = -0.5 }) end, "RMSprop: alpha must be >= 0, got -0.5")
      assert.has_error(function() optim.RMSprop({ p }, { momentum = -1 }) end,
        "RMSprop: momentum must be >= 0, got -1")
      assert.has_error(function() optim.RMSprop({ p }, { eps = -1 }) end, "RMSprop: eps must be >= 0, got -1")
      assert.has_error(function() optim.RMSprop({ p }, { centered = "yes" }) end,
        "RMSprop: centered must be a boolean, got 'yes'")
      assert.has_error(function() optim.SGD({ { params = { p } }, { params = { q }, lr = -1 } }, { lr = 0.1 }) end,
        "SGD: param group 2: lr must be >= 0, got -1")
    end)
    it("for add_param_group, step, zero_grad and hyperparameter_tensors", function()
      local opt = optim.SGD({ p }, { lr = 0.1 })
      assert.has_error(function() opt:add_param_group({ params = { p } }) end,
        "SGD: add_param_group: parameter 1 of group 2 is the same tensor as parameter 1 of group 1")
      assert.has_error(function() opt:add_param_group({ params = { q }, lr = -1 }) end,
        "SGD: add_param_group: param group 2: lr must be >= 0, got -1")
      assert.has_error(function() opt:add_param_group({ params = { q * 1 } }) end,
        "SGD: add_param_group: parameter 1 of group 2 is not a leaf tensor (it was computed by 'mul'); optimize " ..
        "the leaf it came from")
      assert.are.equal(1, #opt.param_groups)
      assert.has_error(function() opt:step(3) end, "SGD: step: closure must be a function, got number")
      assert.has_error(function() opt:zero_grad(0) end, "SGD: zero_grad: set_to_none must be a boolean, got number")
      assert.has_error(function() opt:hyperparameter_tensors(2) end,
        "SGD: hyperparameter_tensors: no param group 2 (there are 1)")
    end)
    it("for a state dict of the wrong shape, leaving the optimizer as it was", function()
      local opt = optim.Adam({ p, q }, { lr = 0.1, amsgrad = true })
      ;(p:sum() + q:sum()):backward()
      opt:step()
      local good = opt:state_dict()
      local function variant(edit)
        local sd = opt:state_dict()
        edit(sd)
        return sd
      end
      local fresh = optim.Adam({ p, q }, { lr = 0.3 })
      local cases = {
        { 5, "Adam: load_state_dict: expects a table with the tables 'state' and 'param_groups', got number" },
        { { state = {} }, "Adam: load_state_dict: expects a table with the tables 'state' and 'param_groups', got a " ..
          "table without them" },
        { variant(function(sd) sd.param_groups[2] = sd.param_groups[1] end),
          "Adam: load_state_dict: the state dict has 2 param groups, the optimizer 1" },
        { variant(function(sd) sd.param_groups[1].params = { 1 } end),
          "Adam: load_state_dict: param group 1 has 1 parameters in the state dict, 2 in the optimizer" },
        { variant(function(sd) sd.param_groups[1].params = { 2, 1 } end),
          "Adam: load_state_dict: param group 1 lists parameter 2 at position 1, expected 1" },
        { variant(function(sd) sd.param_groups[1].betas = { 1.5, 0.9 } end),
          "Adam: load_state_dict: param group 1: beta1 must be in [0, 1), got 1.5" },
        { variant(function(sd) sd.param_groups[1].eps = nil end), "Adam: load_state_dict: param group 1 lacks 'eps'" },
        { variant(function(sd) sd.state[3] = sd.state[1] end),
          "Adam: load_state_dict: state for parameter 3, but the optimizer has 2 parameters" },
        { variant(function(sd) sd.state[1] = 7 end), "Adam: load_state_dict: the state of parameter 1 must be a " ..
          "table, got number" },
        { variant(function(sd) sd.state[1].exp_avg = tide.zeros(3) end),
          "Adam: load_state_dict: exp_avg of parameter 1 has shape [3], the parameter [2]" },
        { variant(function(sd) sd.state[2].exp_avg_sq = 0 end),
          "Adam: load_state_dict: exp_avg_sq of parameter 2 must be a tensor, got number" },
        { variant(function(sd) sd.state[1].step = tide.zeros(2) end),
          "Adam: load_state_dict: step of parameter 1 must be a number or a one-element tensor, got shape [2]" },
        { variant(function(sd) sd.state[1].momentum_buffer = tide.zeros(2) end),
          "Adam: load_state_dict: unknown state 'momentum_buffer' for parameter 1" },
        { variant(function(sd) sd.state[1].max_exp_avg_sq = nil end),
          "Adam: load_state_dict: the state of parameter 1 lacks max_exp_avg_sq" },
      }
      for _, case in ipairs(cases) do
        assert.has_error(function() fresh:load_state_dict(case[1]) end, case[2])
      end
      assert.are.equal(0.3, fresh.param_groups[1].lr)
      assert.is_nil(next(fresh.state))
      fresh:load_state_dict(good)
      assert.are.equal(0.1, fresh.param_groups[1].lr)
      local sgd = optim.SGD({ p, q }, { lr = 0.1, momentum = 0.9 })
      assert.has_error(function() sgd:load_state_dict(good) end,
        "SGD: load_state_dict: param group 1 lacks 'dampening'")
    end)
  end)

  describe("lr_scheduler", function()
    local function sgd(lrs)
      local groups = {}
      for i, lr in ipairs(lrs) do
        groups[i] = { params = { tide.tensor({ i }, { requires_grad = true }) }, lr = lr }
      end
      return optim.SGD(groups, { momentum = 0.9 })
    end
    -- Steps sched n times; checks get_last_lr() and the groups' lr against closed(step, group) each time.
    local function against(opt, sched, n, closed)
      for step = 0, n do
        if step > 0 then sched:step() end
        local last = sched:get_last_lr()
        for gi, group in ipairs(opt.param_groups) do
          local want = closed(step, gi)
          assert.is_true(math.abs(last[gi] - want) <= 1e-12 * math.abs(want) + 1e-15,
            string.format("step %d group %d: %.17g ~= %.17g", step, gi, last[gi], want))
          assert.are.equal(last[gi], group.lr)
          assert.are.equal(group.lr, opt:hyperparameter_tensors(gi).lr:item())
        end
      end
    end
    it("are reachable from tide.optim", function()
      assert.are.equal(optim.lr_scheduler.StepLR, optim.StepLR)
      assert.are.equal(optim.lr_scheduler.CosineAnnealingLR, optim.CosineAnnealingLR)
      assert.are.equal(optim.lr_scheduler.OneCycleLR, optim.OneCycleLR)
    end)
    it("StepLR", function()
      local opt = sgd { 0.1, 0.5 }
      local s = optim.StepLR(opt, { step_size = 3, gamma = 0.5 })
      local base = { 0.1, 0.5 }
      against(opt, s, 12, function(t, g) return base[g] * 0.5 ^ math.floor(t / 3) end)
      assert.are.equal(0.1, opt.param_groups[1].initial_lr)
      local d = optim.StepLR(sgd { 1 }, { step_size = 2 })
      d:step(); d:step()
      assert.are.equal(0.1, d:get_last_lr()[1])
    end)
    it("CosineAnnealingLR, beyond T_max too", function()
      local opt = sgd { 0.1, 0.02 }
      local s = optim.CosineAnnealingLR(opt, { T_max = 10, eta_min = 0.001 })
      local base = { 0.1, 0.02 }
      against(opt, s, 25, function(t, g) return 0.001 + (base[g] - 0.001) * (1 + math.cos(math.pi * t / 10)) / 2 end)
    end)
    -- The 1cycle reference: phases as (first step, last step, lr from, lr to, momentum from, momentum to).
    local function one_cycle(t, phases, strategy)
      local function f(a, b, pct)
        if strategy == "linear" then return (b - a) * pct + a end
        return b + (a - b) / 2 * (math.cos(math.pi * pct) + 1)
      end
      for k, ph in ipairs(phases) do
        if t <= ph[2] or k == #phases then
          local pct = (t - ph[1]) / (ph[2] - ph[1])
          return f(ph[3], ph[4], pct), f(ph[5], ph[6], pct)
        end
      end
    end
    it("OneCycleLR, cos, cycling the momentum of SGD", function()
      local opt = sgd { 1 }
      local s = optim.OneCycleLR(opt, { max_lr = 0.1, total_steps = 20 })
      local lo, hi, fin = 0.1 / 25, 0.1, 0.1 / 25 / 1e4
      local phases = { { 0, 5, lo, hi, 0.95, 0.85 }, { 5, 19, hi, fin, 0.85, 0.95 } }
      for step = 0, 19 do
        if step > 0 then s:step() end
        local lr, mom = one_cycle(step, phases, "cos")
        H.close(tide.tensor(s:get_last_lr()[1], "float64"), lr, 1e-12, 1e-18, "lr at step " .. step)
        H.close(tide.tensor(opt.param_groups[1].momentum, "float64"), mom, 1e-12, 0, "momentum at step " .. step)
        assert.are.equal(opt.param_groups[1].momentum, opt:hyperparameter_tensors(1).momentum:item())
      end
      assert.are.equal(fin, s:get_last_lr()[1])
      assert.are.same({ lo, hi, fin, 0.95, 0.85 }, { opt.param_groups[1].initial_lr, opt.param_groups[1].max_lr,
        opt.param_groups[1].min_lr, opt.param_groups[1].max_momentum, opt.param_groups[1].base_momentum })
      s:step()   -- step total_steps is allowed, as in PyTorch
      assert.has_error(function() s:step() end, "OneCycleLR: tried to step 21 times; total_steps is 20")
    end)
    it("OneCycleLR, linear, three phases, epochs and steps_per_epoch, a max_lr per group, beta1 of Adam", function()
      local a = tide.tensor({ 1 }, { requires_grad = true })
      local b = tide.tensor({ 2 }, { requires_grad = true })
      local opt = optim.Adam({ { params = { a } }, { params = { b } } }, { betas = { 0.9, 0.99 } })
      local s = optim.OneCycleLR(opt, { max_lr = { 0.1, 0.4 }, epochs = 4, steps_per_epoch = 5, pct_start = 0.25,
        anneal_strategy = "linear", three_phase = true, div_factor = 10, final_div_factor = 100,
        base_momentum = 0.8, max_momentum = { 0.9, 0.95 } })
      for step = 0, 19 do
        if step > 0 then s:step() end
        for gi, max_lr in ipairs { 0.1, 0.4 } do
          local lo, maxm = max_lr / 10, gi == 1 and 0.9 or 0.95
          local phases = { { 0, 4, lo, max_lr, maxm, 0.8 }, { 4, 8, max_lr, lo, 0.8, maxm },
                           { 8, 19, lo, lo / 100, maxm, maxm } }
          local lr, mom = one_cycle(step, phases, "linear")
          local group = opt.param_groups[gi]
          assert.is_true(math.abs(group.lr - lr) <= 1e-12 * lr, string.format("step %d: %.17g ~= %.17g", step,
            group.lr, lr))
          assert.is_true(math.abs(group.betas[1] - mom) <= 1e-12)
          assert.are.equal(0.99, group.betas[2])
          assert.are.equal(group.betas[1], opt:hyperparameter_tensors(gi).beta1:item())
        end
      end
    end)
    it("OneCycleLR without cycle_momentum leaves the momentum alone", function()
      local opt = optim.RMSprop({ tide.tensor({ 1 }, { requires_grad = true }) }, { momentum = 0.3 })
      local s = optim.OneCycleLR(opt, { max_lr = 1, total_steps = 10, cycle_momentum = false })
      s:step()
      assert.are.equal(0.3, opt.param_groups[1].momentum)
      assert.is_nil(opt.param_groups[1].max_momentum)
    end)
    it("state_dict and load_state_dict continue a schedule", function()
      for _, make in ipairs {
        function(o) return optim.StepLR(o, { step_size = 2, gamma = 0.3 }) end,
        function(o) return optim.CosineAnnealingLR(o, { T_max = 7 }) end,
        function(o) return optim.OneCycleLR(o, { max_lr = 0.2, total_steps = 12 }) end,
      } do
        local opt = sgd { 0.1, 0.3 }
        local s = make(opt)
        for _ = 1, 4 do s:step() end
        local osd, ssd = opt:state_dict(), s:state_dict()
        local opt2 = sgd { 1, 1 }
        local s2 = make(opt2)
        opt2:load_state_dict(osd)
        s2:load_state_dict(ssd)
        assert.are.same(s:get_last_lr(), s2:get_last_lr())
        for _ = 1, 6 do
          s:step(); s2:step()
          assert.are.same(s:get_last_lr(), s2:get_last_lr())
          assert.are.same(opt.param_groups[1].momentum, opt2.param_groups[1].momentum)
        end
        assert.are.equal(ssd.last_epoch + 6, s2.last_epoch)
      end
    end)
    it("errors name the scheduler and the value", function()
      local opt = sgd { 0.1 }
      local cases = {
        { function() optim.StepLR(5, { step_size = 1 }) end, "StepLR: argument 1 must be an optimizer, got number" },
        { function() optim.StepLR(opt, 3) end, "StepLR: options must be a table, got number" },
        { function() optim.StepLR(opt, { step_size = 0 }) end, "StepLR: step_size must be a positive integer, got 0" },
        { function() optim.StepLR(opt, {}) end, "StepLR: step_size must be a positive integer, got nil" },
        { function() optim.StepLR(opt, { step_size = 2, gama = 0.1 }) end, "StepLR: unknown option 'gama'" },
        { function() optim.StepLR(opt, { step_size = 2, gamma = "x" }) end, "StepLR: gamma must be a number, got 'x'" },
        { function() optim.CosineAnnealingLR(opt, { T_max = 2.5 }) end,
          "CosineAnnealingLR: T_max must be a positive integer, got 2.5" },
        { function() optim.CosineAnnealingLR(opt, { T_max = 2, eta_min = "x" }) end,
          "CosineAnnealingLR: eta_min must be a number, got 'x'" },
        { function() optim.OneCycleLR(opt, { max_lr = 1 }) end,
          "OneCycleLR: give total_steps, or epochs and steps_per_epoch" },
        { function() optim.OneCycleLR(opt, { max_lr = 1, total_steps = -3 }) end,
          "OneCycleLR: total_steps must be a positive integer, got -3" },
        { function() optim.OneCycleLR(opt, { max_lr = 1, epochs = 2, steps_per_epoch = 1.5 }) end,
          "OneCycleLR: steps_per_epoch must be a positive integer, got 1.5" },
        { function() optim.OneCycleLR(opt, { total_steps = 10 }) end, "OneCycleLR: max_lr is required" },
        { function() optim.OneCycleLR(opt, { max_lr = { 1, 2 }, total_steps = 10 }) end,
          "OneCycleLR: max_lr must be a number or a table of 1 numbers (one per param group), got a table of 2" },
        { function() optim.OneCycleLR(opt, { max_lr = 1, total_steps = 10, pct_start = 1.5 }) end,
          "OneCycleLR: pct_start must be a number in [0, 1], got 1.5" },
        { function() optim.OneCycleLR(opt, { max_lr = 1, total_steps = 10, anneal_strategy = "exp" }) end,
          "OneCycleLR: anneal_strategy must be 'cos' or 'linear', got 'exp'" },
        { function() optim.OneCycleLR(opt, { max_lr = 1, total_steps = 10, pct_start = 0.1 }) end,
          "OneCycleLR: phase 1 is empty (it ends at step 0 where it starts); give more total_steps or another " ..
          "pct_start" },
      }
      for _, case in ipairs(cases) do assert.has_error(case[1], case[2]) end
      local s = optim.StepLR(opt, { step_size = 2 })
      assert.has_error(function() s:load_state_dict(nil) end, "StepLR: load_state_dict: expects a table, got nil")
      local c = optim.CosineAnnealingLR(sgd { 0.1 }, { T_max = 3 }):state_dict()
      assert.has_error(function() s:load_state_dict(c) end,
        "StepLR: load_state_dict: lacks 'step_size' (is it the state of a StepLR?)")
      local two = optim.StepLR(sgd { 0.1, 0.2 }, { step_size = 2 }):state_dict()
      assert.has_error(function() s:load_state_dict(two) end,
        "StepLR: load_state_dict: 'base_lrs' must be a table of 1 numbers (one per param group), got 2 values")
    end)
  end)

  describe("extension", function()
    it("Optimizer.class makes a new optimizer that gets groups, state dicts and schedules", function()
      local SignSGD = optim.Optimizer.class("SignSGD", {
        defaults = { lr = 0.1 },
        hypers = { { "lr", function(g) return g.lr end } },
        check = function(group, bad) optim.Optimizer.checks.at_least_zero(group, "lr", bad) end,
        state_keys = { step = "step" },
        required_state = function() return { "step" } end,
        init_state = function(p) return { step = optim.Optimizer.scalar_tensor(0, p:device()) } end,
        derive = function(hy) return { neg_lr = -hy.lr } end,
        update = function(p, g, st, _, _, d)
          st.step:add_(1)
          p:add_(g:sign() * d.neg_lr)
        end,
      })
      local p = tide.tensor({ 3, -2 }, { requires_grad = true })
      local opt = SignSGD({ p }, { lr = 0.5 })
      assert.is_true(optim.Optimizer.is_optimizer(opt))
      assert.has_error(function() SignSGD({ p }, { lr = -1 }) end, "SignSGD: lr must be >= 0, got -1")
      local sched = optim.StepLR(opt, { step_size = 1, gamma = 0.5 })
      for _ = 1, 2 do
        p.grad = tide.tensor({ 10, -0.1 })
        opt:step()
        sched:step()
      end
      H.close(p, { 3 - 0.75, -2 + 0.75 })
      assert.are.equal(2, opt:state_dict().state[1].step:item())
      assert.matches("^SignSGD %(\n  param group 1: 1 parameters\n.*    lr: 0.125\n", tostring(opt))
    end)
    it("LRScheduler.class makes a new schedule", function()
      local Halving = optim.lr_scheduler.LRScheduler.class("Halving", {
        options = { every = true }, fields = { "every" },
        setup = function(self, _, opts) self.every = opts.every or 1 end,
        get_lr = function(self, step)
          local r = {}
          for i, base in ipairs(self.base_lrs) do r[i] = base / 2 ^ math.floor(step / self.every) end
          return r
        end,
      })
      local opt = optim.SGD({ tide.tensor({ 1 }, { requires_grad = true }) }, { lr = 1 })
      local s = Halving(opt, { every = 2 })
      for _ = 1, 5 do s:step() end
      assert.are.same({ 0.25 }, s:get_last_lr())
      assert.are.equal(0.25, opt:hyperparameter_tensors(1).lr:item())
      assert.are.equal("Halving (last_epoch 5, lr 0.25)", tostring(s))
      assert.are.same({ every = 2, last_epoch = 5, _step_count = 6, base_lrs = { 1 }, _last_lr = { 0.25 } },
        s:state_dict())
    end)
  end)

  describe("training", function()
    for _, case in ipairs {
      { "SGD", { lr = 0.1, momentum = 0.9 }, 150 },
      { "Adam", { lr = 0.05 }, 300 },
      { "AdamW", { lr = 0.05, weight_decay = 1e-4 }, 300 },
      { "RMSprop", { lr = 0.01 }, 300 },
    } do
      it(case[1] .. " fits a linear regression", function()
        local loss_of = regression()
        local w = tide.zeros({ 3, 1 }, { requires_grad = true })
        local opt = optim[case[1]]({ w }, case[2])
        local first
        for i = 1, case[3] do
          opt:zero_grad()
          local loss = loss_of(w)
          loss:backward()
          opt:step()
          if i == 1 then first = loss:item() end
        end
        local final = tide.no_grad(function() return loss_of(w):item() end)
        assert.is_true(first > 1, "first loss " .. first)
        assert.is_true(final < 3e-4, case[1] .. " final loss " .. final)   -- the noise floor is 1.1e-4
        H.close(w, { { 1.5 }, { -2 }, { 0.5 } }, 0, 0.01)
      end)
    end
    it("SGD with a OneCycle schedule minimises a quadratic", function()
      local x = tide.tensor({ 3, -4, 5 }, { requires_grad = true })
      local opt = optim.SGD({ x }, { lr = 0.1, nesterov = true, momentum = 0.9 })
      local sched = optim.OneCycleLR(opt, { max_lr = 0.2, total_steps = 100 })
      for _ = 1, 100 do
        opt:zero_grad()
        ;((x - 1) ^ 2):sum():backward()
        opt:step()
        if sched.last_epoch < 100 then sched:step() end
      end
      H.close(x, { 1, 1, 1 }, 0, 1e-3)
    end)
  end)
end)
