-- optim.swa_utils: AveragedModel's SWA average against the mean of the
-- snapshots and its EMA against the recursion worked out here in plain Lua,
-- buffers followed or averaged; SWALR's lr sequence against PyTorch's rule
-- written out in Lua; update_bn's running statistics against the batches'
-- means and variances computed here; every error message.
local tide = require "tide"
local H = require "spec.helpers"

local nn, optim = tide.nn, tide.optim
local swa = optim.swa_utils

-- A float64 Linear(3, 2) whose weight and bias are set from vals (8 numbers).
local function linear(vals)
  local m = nn.Linear(3, 2, { dtype = "float64" })
  m.weight:detach():copy_(tide.tensor({ { vals[1], vals[2], vals[3] }, { vals[4], vals[5], vals[6] } }, "float64"))
  m.bias:detach():copy_(tide.tensor({ vals[7], vals[8] }, "float64"))
  return m
end

local function set(m, vals)
  m.weight:detach():copy_(tide.tensor({ { vals[1], vals[2], vals[3] }, { vals[4], vals[5], vals[6] } }, "float64"))
  m.bias:detach():copy_(tide.tensor({ vals[7], vals[8] }, "float64"))
end

local function values_of(m)
  local r = H.flat(m.weight:totable())
  for _, v in ipairs(m.bias:totable()) do r[#r + 1] = v end
  return r
end

local function close(a, b, rtol, what)
  assert.is_true(math.abs(a - b) <= rtol * math.abs(b) + 1e-300, string.format("%s: %.17g ~= %.17g", what, a, b))
end

describe("optim.swa_utils", function()
  describe("AveragedModel", function()
    it("SWA: the average is the mean of the snapshots, exactly where the running mean is exact", function()
      local net = linear { 1, 2, 3, 4, 5, 6, 7, 8 }
      local avg = swa.AveragedModel(net)
      -- snapshots k * v: the running means 1, 1.5, 2, 2.5 times v are exact in binary
      local v = { 1, -2, 3, 0.5, 8, -6, 7, 0.25 }
      for k = 1, 4 do
        local s = {}
        for i, x in ipairs(v) do s[i] = k * x end
        set(net, s)
        avg:update_parameters(net)
        local mean = (k + 1) / 2
        for i, x in ipairs(values_of(avg.module)) do assert.are.equal(mean * v[i], x, "snapshot " .. k) end
      end
      assert.are.equal(4, avg.n_averaged:item())
      assert.are.equal("int64", avg.n_averaged:dtype())
      -- arbitrary snapshots: the mean to rounding
      local snaps = {}
      avg = swa.AveragedModel(net)
      for k = 1, 7 do
        snaps[k] = H.values(8, -3, 3, 100 + k)
        set(net, snaps[k])
        avg:update_parameters(net)
      end
      local got = values_of(avg.module)
      for i = 1, 8 do
        local sum = 0
        for k = 1, 7 do sum = sum + snaps[k][i] end
        close(got[i], sum / 7, 1e-14, "element " .. i)
      end
      -- the copy is its own: the model's weights are the last snapshot's
      assert.are.same(snaps[7], values_of(net))
      -- calling it runs the averaged copy
      local x = tide.tensor({ { 1, 2, 3 } }, "float64")
      H.close(avg(x), avg.module(x), 0, 0)
    end)

    it("EMA by avg_fn and by multi_avg_fn follows the recursion", function()
      local decay = 0.75
      for _, opts in ipairs { { avg_fn = swa.get_ema_avg_fn(decay) },
                              { multi_avg_fn = swa.get_ema_multi_avg_fn(decay) } } do
        local net = linear(H.values(8, -1, 1, 7))
        local avg = swa.AveragedModel(net, opts)
        local ema
        for k = 1, 6 do
          local s = H.values(8, -2, 2, 40 + k)
          set(net, s)
          avg:update_parameters(net)
          if ema == nil then
            ema = s
          else
            for i = 1, 8 do ema[i] = decay * ema[i] + (1 - decay) * s[i] end
          end
          local got = values_of(avg.module)
          for i = 1, 8 do close(got[i], ema[i], 1e-15, string.format("step %d element %d", k, i)) end
        end
      end
      -- the default decay is 0.999
      local net = linear { 0, 0, 0, 0, 0, 0, 0, 0 }
      local avg = swa.AveragedModel(net, { avg_fn = swa.get_ema_avg_fn() })
      avg:update_parameters(net)
      set(net, { 1, 1, 1, 1, 1, 1, 1, 1 })
      avg:update_parameters(net)
      close(values_of(avg.module)[1], 1 - 0.999, 1e-15, "default decay")
    end)

    it("buffers follow the model, or are averaged with use_buffers", function()
      local function make()
        local m = nn.Sequential(nn.Linear(2, 2, { dtype = "float64" }), nn.BatchNorm1d(2, { dtype = "float64" }))
        return m
      end
      local net = make()
      local plain, with = swa.AveragedModel(net), swa.AveragedModel(net, { use_buffers = true })
      local means = { { 1, 2 }, { 3, 6 } }
      for k = 1, 2 do
        net[2].running_mean:copy_(tide.tensor(means[k], "float64"))
        plain:update_parameters(net)
        with:update_parameters(net)
      end
      H.equal(plain.module[2].running_mean, { 3, 6 })
      H.equal(with.module[2].running_mean, { 2, 4 })
    end)

    it("a custom multi_avg_fn gets the lists and n_averaged, from the second update on", function()
      local net = linear { 1, 1, 1, 1, 1, 1, 1, 1 }
      local seen = {}
      local avg = swa.AveragedModel(net, { multi_avg_fn = function(a, c, n)
        seen[#seen + 1] = { #a, #c, n:item() }
        for i = 1, #a do a[i]:copy_(c[i] * 2) end
      end })
      avg:update_parameters(net)
      assert.are.same(values_of(net), values_of(avg.module))
      avg:update_parameters(net)
      assert.are.same({ 2, 2, 2, 2, 2, 2, 2, 2 }, values_of(avg.module))
      -- it runs at the first update too (its result then discarded), so the update reads nothing back
      assert.are.same({ { 2, 2, 0 }, { 2, 2, 1 } }, seen)
    end)

    it("updates under tide.jit.compile (no host reads), replays giving the eager averages", function()
      local net = linear(H.values(8, -1, 1, 3))
      local eager, compiled = swa.AveragedModel(net), swa.AveragedModel(net)
      local f = tide.jit.compile(function() compiled:update_parameters(net) end)
      for k = 1, 5 do
        set(net, H.values(8, -1, 1, 60 + k))
        eager:update_parameters(net)
        f()
        assert.are.same(values_of(eager.module), values_of(compiled.module), "update " .. k)
      end
      assert.are.equal(5, compiled.n_averaged:item())
      assert.are.equal(3, f:stats().replays)
    end)

    it("rejects bad arguments", function()
      local net = linear { 1, 1, 1, 1, 1, 1, 1, 1 }
      assert.has_error(function() swa.AveragedModel(3) end, "AveragedModel: argument 1 must be a module, got 3")
      assert.has_error(function() swa.AveragedModel(net, { avg_fn = 1 }) end,
        "AveragedModel: avg_fn must be a function, got 1")
      assert.has_error(function() swa.AveragedModel(net, { decay = 1 }) end, "AveragedModel: unknown option 'decay'")
      assert.has_error(function() swa.AveragedModel(net, { use_buffers = 1 }) end,
        "AveragedModel: use_buffers must be a boolean, got number")
      local avg = swa.AveragedModel(net)
      assert.has_error(function() avg:update_parameters(nn.Linear(3, 3, { dtype = "float64" })) end,
        "AveragedModel: update_parameters: tensor 1 has shape [3,3] in the model, [2,3] in the averaged copy")
      assert.has_error(function() avg:update_parameters(nn.Sequential()) end,
        "AveragedModel: update_parameters: the model has 0 tensors to average, the averaged copy 2")
      assert.has_error(function() swa.get_ema_avg_fn(2) end, "get_ema_avg_fn: decay must be a number in [0, 1], got 2")
      assert.has_error(function() swa.get_ema_multi_avg_fn("x") end,
        "get_ema_multi_avg_fn: decay must be a number in [0, 1], got 'x'")
    end)
  end)

  describe("SWALR", function()
    -- PyTorch's SWALR.get_lr, one step at a time from the group's current lr
    local function ref(lr0, swa_lr, E, f, n)
      local r, lr = {}, lr0
      for step = 0, n do
        local s = E == 0 and math.max(1, step) or step
        local pa = f(math.max(0, math.min(1, (s - 1) / math.max(1, E))))
        local a = f(math.max(0, math.min(1, s / math.max(1, E))))
        local start = pa == 1 and swa_lr or (lr - pa * swa_lr) / (1 - pa)
        lr = swa_lr * a + start * (1 - a)
        r[step + 1] = lr
      end
      return r
    end
    local cos = function(t) return (1 - math.cos(math.pi * t)) / 2 end
    local lin = function(t) return t end

    local function sgd(lrs)
      local groups = {}
      for i, lr in ipairs(lrs) do groups[i] = { params = { tide.tensor({ i }, { requires_grad = true }) }, lr = lr } end
      return optim.SGD(groups)
    end

    it("anneals to swa_lr, cos by default over 10 steps, then holds it", function()
      local opt = sgd { 0.5, 1 }
      local s = swa.SWALR(opt, { swa_lr = { 0.05, 0.1 } })
      local want = { ref(0.5, 0.05, 10, cos, 15), ref(1, 0.1, 10, cos, 15) }
      for t = 0, 15 do
        if t > 0 then s:step() end
        for g = 1, 2 do
          close(opt.param_groups[g].lr, want[g][t + 1], 1e-15, "step " .. t)
          assert.are.equal(opt.param_groups[g].lr, opt:hyperparameter_tensors(g).lr:item())
          -- the closed form the recursion follows
          close(opt.param_groups[g].lr, want[g][1] * (1 - cos(math.min(t, 10) / 10)) + ({ 0.05, 0.1 })[g] *
            cos(math.min(t, 10) / 10), 1e-14, "closed form step " .. t)
        end
      end
      assert.are.equal(0.05, opt.param_groups[1].lr)
    end)

    it("linear, and anneal_epochs 0 jumps to swa_lr at once", function()
      local opt = sgd { 1 }
      local s = swa.SWALR(opt, { swa_lr = 0.2, anneal_epochs = 4, anneal_strategy = "linear" })
      local want = ref(1, 0.2, 4, lin, 8)
      for t = 0, 8 do
        if t > 0 then s:step() end
        close(opt.param_groups[1].lr, want[t + 1], 1e-15, "step " .. t)
      end
      close(want[3], 0.6, 1e-15, "halfway")
      opt = sgd { 1 }
      swa.SWALR(opt, { swa_lr = 0.2, anneal_epochs = 0 })
      assert.are.equal(0.2, opt.param_groups[1].lr)
    end)

    it("rejects bad options", function()
      local opt = sgd { 1 }
      assert.has_error(function() swa.SWALR(opt, {}) end, "SWALR: swa_lr is required")
      assert.has_error(function() swa.SWALR(opt, { swa_lr = 0.1, anneal_epochs = -1 }) end,
        "SWALR: anneal_epochs must be a non-negative integer, got -1")
      assert.has_error(function() swa.SWALR(opt, { swa_lr = 0.1, anneal_epochs = 1.5 }) end,
        "SWALR: anneal_epochs must be a non-negative integer, got 1.5")
      assert.has_error(function() swa.SWALR(opt, { swa_lr = 0.1, anneal_strategy = "step" }) end,
        "SWALR: anneal_strategy must be 'cos' or 'linear', got 'step'")
      assert.has_error(function() swa.SWALR(opt, { swa_lr = { 0.1, 0.2 } }) end,
        "SWALR: swa_lr must be a number or a table of 1 numbers (one per param group), got a table of 2")
    end)
  end)

  describe("update_bn", function()
    -- batches of [4, 2] float64 data; per-channel batch means and unbiased variances
    local function data(nb)
      local r = {}
      for b = 1, nb do r[b] = H.nest(H.values(8, -2, 5, 300 + b), { 4, 2 }) end
      return r
    end
    local function stats(batch)
      local mean, var = {}, {}
      for c = 1, 2 do
        local s = 0
        for i = 1, 4 do s = s + batch[i][c] end
        mean[c] = s / 4
        local q = 0
        for i = 1, 4 do q = q + (batch[i][c] - mean[c]) ^ 2 end
        var[c] = q / 3
      end
      return mean, var
    end

    it("recomputes the running statistics as the cumulative average of the batches' (momentum nil)", function()
      local raw = data(3)
      local net = nn.Sequential(nn.BatchNorm1d(2, { dtype = "float64", momentum = 0.3 }))
      net[1].running_mean:fill_(100)
      net:eval()
      local batches = {}
      for b, t in ipairs(raw) do batches[b] = { tide.tensor(t, "float64"), tide.zeros({ 4 }) } end
      swa.update_bn(batches, net)
      local mean, var = { 0, 0 }, { 0, 0 }
      for _, t in ipairs(raw) do
        local m, v = stats(t)
        for c = 1, 2 do mean[c], var[c] = mean[c] + m[c] / 3, var[c] + v[c] / 3 end
      end
      -- the dataset's mean (equal batches), and the batches' mean unbiased variance
      local all = 0
      for _, t in ipairs(raw) do for i = 1, 4 do all = all + t[i][1] end end
      close(mean[1], all / 12, 1e-14, "dataset mean")
      H.close(net[1].running_mean, mean, 1e-14, 1e-15)
      H.close(net[1].running_var, var, 1e-14, 1e-15)
      assert.are.equal(3, net[1].num_batches_tracked:item())
      assert.are.equal(0.3, net[1].momentum)
      assert.is_false(net.training)
    end)

    it("takes a DataLoader, plain tensors and an iterator function", function()
      local raw = data(2)
      local x = tide.tensor({ raw[1][1], raw[1][2], raw[1][3], raw[1][4], raw[2][1], raw[2][2], raw[2][3],
        raw[2][4] }, "float64")
      local m1, v1 = stats(raw[1])
      local m2, v2 = stats(raw[2])
      local want_m, want_v = { (m1[1] + m2[1]) / 2, (m1[2] + m2[2]) / 2 }, { (v1[1] + v2[1]) / 2, (v1[2] + v2[2]) / 2 }
      local ds = tide.data.TensorDataset(x, tide.zeros({ 8 }))
      for _, loader in ipairs {
        tide.data.DataLoader(ds, { batch_size = 4 }),
        { tide.tensor(raw[1], "float64"), tide.tensor(raw[2], "float64") },
        (function()
          local i = 0
          return function()
            i = i + 1
            if i <= 2 then return tide.tensor(raw[i], "float64") end
          end
        end)(),
      } do
        local net = nn.Sequential(nn.Linear(2, 2, { dtype = "float64" }), nn.BatchNorm1d(2, { dtype = "float64" }))
        net[1].weight:detach():copy_(tide.eye(2, { dtype = "float64" }))
        net[1].bias:detach():zero_()
        swa.update_bn(loader, net)
        H.close(net[2].running_mean, want_m, 1e-14, 1e-15)
        H.close(net[2].running_var, want_v, 1e-14, 1e-15)
        assert.are.equal(0.1, net[2].momentum)
        assert.is_true(net.training)
      end
    end)

    it("leaves a model without BatchNorm alone, and rejects bad arguments", function()
      local net = nn.Linear(2, 2)
      swa.update_bn({ 1 }, net)   -- nothing to update: the loader is not read
      local bn = nn.BatchNorm1d(2)
      assert.has_error(function() swa.update_bn(3, bn) end, "update_bn: loader must be a list of batches, an " ..
        "iterator function or a DataLoader, got 3")
      assert.has_error(function() swa.update_bn({}, 3) end, "update_bn: argument 2 must be a module, got 3")
      assert.has_error(function() swa.update_bn({ "x" }, bn) end, "update_bn: a batch must be a tensor or a table " ..
        "whose first element is one, got 'x'")
      assert.are.equal(0.1, bn.momentum)   -- restored after the error
    end)
  end)
end)
