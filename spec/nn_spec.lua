-- nn: the Module base (registration, walking, modes, state_dict, to, printing,
-- user-defined modules), every layer's forward against plain-Lua references,
-- initialisation statistics, BatchNorm and Dropout in training and evaluation,
-- attention and the transformer layer (values, masks, gradcheck), and a small
-- MLP that learns XOR with a hand-written SGD loop.
local tide = require "tide"
local H = require "spec.helpers"
local nn = tide.nn
local F = nn.functional

local gradcheck = tide.autograd.gradcheck

local seed = 101
local function rnd(shape, lo, hi, grad)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local t = tide.tensor(H.nest(H.values(n, lo or -1, hi or 1, seed), shape), "float64")
  seed = seed + 7919
  if grad then t:requires_grad_() end
  return t
end
local function names(iter)
  local r = {}
  for name in iter do r[#r + 1] = name end
  return r
end
local function sorted_keys(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r)
  return r
end

describe("nn.Module", function()
  it("tide.nn is the module require 'tide.nn' returns", function()
    assert.are.equal(require("tide.nn"), tide.nn)
    assert.are.equal(require("tide.nn.functional"), tide.nn.functional)
  end)

  local Net = nn.Module:extend("Net")
  function Net:init(n_in, n_hidden)
    self.fc1 = nn.Linear(n_in, n_hidden)
    self.scale = tide.ones(n_hidden):requires_grad_()
    self:register_buffer("count", tide.zeros({}))
    self.fc2 = nn.Linear(n_hidden, 1)
    self.n_hidden = n_hidden
  end
  function Net:forward(x) return self.fc2(self.fc1(x):tanh() * self.scale) end

  describe("user-defined modules", function()
    it("register children, parameters and buffers by assignment, in order", function()
      local net = Net(3, 4)
      assert.are.equal("Net", net:class_name())
      -- a module's own parameters come before its children's, as in PyTorch
      assert.are.same({ "scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias" }, names(net:named_parameters()))
      assert.are.same({ "count" }, names(net:named_buffers()))
      assert.are.same({ "scale" }, names(net:named_parameters(false)))
      assert.are.equal(5, #net:parameters())
      assert.are.equal(2, #net:children())
      assert.are.same({ "", "fc1", "fc2" }, names(net:named_modules()))
      assert.are.equal(4, net.n_hidden)
      assert.are.same({ 2, 1 }, net(tide.randn(2, 3)):shape())
    end)
    it("call forward through __call and inherit with super", function()
      local Scaled = Net:extend("Scaled")
      function Scaled:init(n_in, n_hidden, k)
        Net.init(self, n_in, n_hidden)
        self.k = k
      end
      function Scaled:forward(x) return Net.forward(self, x) * self.k end
      local s = Scaled(2, 3, 10)
      assert.are.equal(Net, Scaled.super)
      assert.are.equal(5, #s:parameters())
      local x = tide.randn(1, 2)
      H.close(s(x), Net.forward(s, x) * 10, 1e-6)
    end)
    it("re-register a field when a plain value is replaced by a module, and forget on nil", function()
      local net = Net(2, 2)
      net.extra = 5
      net.extra = nn.Linear(2, 2)
      assert.are.equal(7, #net:parameters())
      net.extra = nil
      assert.are.equal(5, #net:parameters())
      net.scale = nil
      assert.are.same({ "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias" }, names(net:named_parameters()))
      net.cache = tide.ones(2)                  -- a tensor that requires no grad: a plain field
      assert.are.equal(4, #net:parameters())
      net.fc1 = nil
      assert.are.same({ "fc2" }, names(net:named_children()))
    end)
    it("keep parameters shared between modules once", function()
      local a, b = nn.Linear(3, 3), nn.Linear(3, 3)
      b.weight = a.weight
      local seq = nn.Sequential(a, b)
      assert.are.same({ "0.weight", "0.bias", "1.bias" }, names(seq:named_parameters()))
      assert.are.same({ "0.bias", "0.weight", "1.bias", "1.weight" }, sorted_keys(seq:state_dict()))
      seq(tide.randn(2, 3)):sum():backward()
      assert.is_not_nil(a.weight.grad)
      local shared = nn.Sequential(a, a)          -- a shared child: walked once, saved under both names
      assert.are.equal(2, #shared:parameters())
      assert.are.equal(1, #shared:children())
      assert.are.same({ "0.weight", "0.bias", "1.weight", "1.bias" }, shared:state_dict_keys())
      shared:load_state_dict(shared:state_dict())
      local p, q = nn.Module(), nn.Module()
      p.q = q
      q.p = p
      assert.has_error(function() p:state_dict() end, "state_dict: the module tree has a cycle at 'q.p'")
    end)
    it("nn.Parameter makes a leaf that shares memory and leaves its argument alone", function()
      local t = tide.zeros(3)
      local m = nn.Module()
      m.p = nn.Parameter(t)
      assert.are.same({ "p" }, names(m:named_parameters()))
      assert.is_true(m.p.requires_grad)
      assert.is_false(t.requires_grad)
      tide.no_grad(function() m.p:fill_(2) end)
      H.equal(t, { 2, 2, 2 })
      m.frozen = nn.Parameter(tide.ones(2), false)
      assert.is_nil(m.frozen.grad)
      assert.are.equal(1, #m:parameters())   -- a tensor that requires no grad is a plain field
    end)
    it("register explicitly, with clear errors", function()
      local m = nn.Module()
      m:register_parameter("w", tide.zeros(2))
      assert.is_true(m.w.requires_grad)
      m:register_buffer("tmp", tide.zeros(2), false)
      m:add_module("child", nn.ReLU())
      assert.are.same({ "w" }, sorted_keys(m:state_dict()))
      local x = tide.ones(2):requires_grad_()
      assert.has_error(function() m:register_parameter("p", x * 2) end,
        "Module: parameter 'p' must be a leaf tensor, got the result of 'mul' (use detach())")
      assert.has_error(function() m:register_parameter("a.b", tide.zeros(1)) end,
        "Module: parameter name 'a.b' must not contain '.'")
      assert.has_error(function() m.child = 3 end,
        "Module: cannot assign a number to child module 'child' (a module or nil expected)")
      assert.has_error(function() m.w = "x" end, "Module: parameter 'w' must be a tensor, got string")
      assert.has_error(function() m[1] = nn.ReLU() end,
        "Module: numeric fields are for module lists (Sequential, ModuleList); got [1]")
      assert.has_error(function() nn.Module()(1) end, "Module: forward is not defined; define Module:forward(...)")
      assert.has_error(function() m:extend("X") end, "extend: call it on a class (nn.Module:extend), not an instance")
    end)
  end)

  describe("modes and gradients", function()
    it("train and eval set the flag recursively", function()
      local net = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(0.5)))
      assert.is_true(net[2][1].training)
      assert.are.equal(net, net:eval())
      assert.is_false(net.training)
      assert.is_false(net[2][1].training)
      net:train()
      assert.is_true(net[2][1].training)
      assert.has_error(function() net:train("yes") end, "train: mode must be a boolean, got string")
    end)
    it("zero_grad sets every gradient to nil", function()
      local net = Net(2, 3)
      net(tide.randn(4, 2)):sum():backward()
      for _, p in ipairs(net:parameters()) do assert.is_not_nil(p.grad) end
      net:zero_grad()
      for _, p in ipairs(net:parameters()) do assert.is_nil(p.grad) end
    end)
    it("apply visits every module, children first", function()
      local seen = {}
      nn.Sequential(nn.Linear(1, 1), nn.Sequential(nn.Tanh())):apply(function(m) seen[#seen + 1] = m:class_name() end)
      assert.are.same({ "Linear", "Tanh", "Sequential", "Sequential" }, seen)
    end)
  end)

  describe("state_dict", function()
    it("holds parameters and buffers under qualified names, sharing memory", function()
      local model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
      local sd = model:state_dict()
      assert.are.same({ "0.bias", "0.weight", "1.bias", "1.num_batches_tracked", "1.running_mean", "1.running_var",
        "1.weight" }, sorted_keys(sd))
      assert.are.same({ "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
        "1.num_batches_tracked" }, model:state_dict_keys())
      assert.is_false(sd["0.weight"].requires_grad)
      tide.no_grad(function() model[1].weight:fill_(7) end)
      H.close(sd["0.weight"], tide.full({ 3, 2 }, 7))
    end)
    it("round-trips into a fresh module", function()
      tide.manual_seed(1)
      local a = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
      a(tide.randn(8, 3))   -- moves the running statistics
      a:eval()
      tide.manual_seed(2)
      local b = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)):eval()
      local x = tide.randn(5, 3)
      assert.is_false(pcall(H.close, b(x), a(x), 1e-6))
      local r = b:load_state_dict(a:state_dict())
      assert.are.same({ missing_keys = {}, unexpected_keys = {} }, r)
      H.close(b(x), a(x), 1e-6)
      H.equal(b[2].num_batches_tracked, 1)
      assert.is_true(b[1].weight.requires_grad and b[1].weight.is_leaf)
    end)
    it("names missing and unexpected keys and mismatched shapes, copying nothing then", function()
      local m = nn.Linear(2, 3)
      local before = m.weight:clone()
      assert.has_error(function() m:load_state_dict({ weight = tide.zeros(3, 2) }) end,
        'load_state_dict: Linear: missing keys "bias" (pass {strict = false} to load the rest)')
      assert.has_error(function()
        m:load_state_dict({ weight = tide.zeros(3, 2), bias = tide.zeros(3), extra = tide.zeros(1), alpha = tide.zeros(1) })
      end, 'load_state_dict: Linear: unexpected keys "alpha", "extra" (pass {strict = false} to load the rest)')
      assert.has_error(function() m:load_state_dict({ weight = tide.zeros(2, 3), bias = tide.zeros(3) }) end,
        'load_state_dict: size mismatch for "weight": the state dict has shape [2,3], the module [3,2]')
      assert.has_error(function() m:load_state_dict({ weight = 1, bias = tide.zeros(3) }) end,
        'load_state_dict: the value of "weight" must be a tensor, got number')
      H.equal(m.weight, before)
      local r = m:load_state_dict({ weight = tide.zeros(3, 2), extra = tide.zeros(1) }, { strict = false })
      assert.are.same({ missing_keys = { "bias" }, unexpected_keys = { "extra" } }, r)
      H.equal(m.weight, tide.zeros(3, 2))
    end)
  end)

  describe("to", function()
    it("converts floating-point parameters and buffers, keeping leaves, grads and sharing", function()
      local a, b = nn.Linear(2, 2), nn.Linear(2, 2)
      b.weight = a.weight
      local model = nn.Sequential(a, b, nn.BatchNorm1d(2))
      model(tide.randn(3, 2)):sum():backward()
      local w32 = a.weight:clone()
      assert.are.equal(model, model:to("float64"))
      for name, p in model:named_parameters() do
        assert.are.equal("float64", p:dtype(), name)
        assert.is_true(p.requires_grad and p.is_leaf, name)
        assert.are.equal("float64", p.grad:dtype(), name)
      end
      assert.are.equal(model[1].weight, model[2].weight)
      assert.are.equal("float64", model[3].running_mean:dtype())
      assert.are.equal("int64", model[3].num_batches_tracked:dtype())
      H.close(a.weight, w32)
      model:half()
      assert.are.equal("float16", model[1].bias:dtype())
      assert.are.equal("int64", model[3].num_batches_tracked:dtype())
      model:bfloat16()
      assert.are.equal("bfloat16", model[2].weight.grad:dtype())
      model:float()
      assert.are.equal("float32", model[1].bias:dtype())
      model:to("cpu:0")
      assert.are.equal("cpu:0", model[3].running_var:device())
      model:to("cpu:1", { non_blocking = true })   -- PyTorch's option: every copy is asynchronous here
      assert.are.equal("cpu:1", model[3].running_var:device())
      assert.has_error(function() model:to("cpu", { copy = true }) end, "to: unknown option 'copy' (options: non_blocking)")
      assert.has_error(function() model:to("cpu", { non_blocking = 1 }) end,
        "to: option 'non_blocking' must be a boolean, got number")
      model:to("cpu:0")
      assert.has_error(function() model:to("nowhere") end, "to: 'nowhere' is neither a dtype nor a device")
      -- a device that is not here says why
      assert.has_error(function() model:to("cpu:999") end)
      local ok, err = pcall(function() model:to("cpu:999") end)
      assert.is_false(ok)
      assert.matches("^.-: to: device: 'cpu:999'", err)
      if not tide.cuda.is_available() then
        ok, err = pcall(function() model:to("cuda:0") end)
        assert.matches("to: device: 'cuda:0': CUDA is not available: ", err, 1, true)
      end
    end)
  end)

  describe("printing", function()
    it("shows the tree as PyTorch does", function()
      local Small = nn.Module:extend("Small")
      function Small:init()
        self.body = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1, false))
        self.norm = nn.LayerNorm(1)
      end
      assert.are.equal(table.concat({
        "Small(",
        "  (body): Sequential(",
        "    (0): Linear(in_features=2, out_features=8, bias=true)",
        "    (1): Tanh()",
        "    (2): Linear(in_features=8, out_features=1, bias=false)",
        "  )",
        "  (norm): LayerNorm({1}, eps=1e-05, elementwise_affine=true)",
        ")" }, "\n"), tostring(Small()))
      assert.are.equal("Dropout(p=0.25)", tostring(nn.Dropout(0.25)))
      assert.are.equal("CrossEntropyLoss(reduction='sum')", tostring(nn.CrossEntropyLoss({ reduction = "sum" })))
    end)
  end)
end)

describe("nn containers", function()
  it("Sequential chains its modules and is indexed, counted and walked as a list", function()
    local seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    seq:add(nn.Linear(3, 1))
    assert.are.equal(3, #seq)
    assert.are.equal("ReLU", seq[2]:class_name())
    assert.are.equal(seq[3], seq[-1])
    local n = 0
    for i, m in ipairs(seq) do n = n + 1; assert.are.equal(seq[i], m) end
    assert.are.equal(3, n)
    local x = tide.randn(4, 2)
    H.close(seq(x), seq[3](seq[2](seq[1](x))), 1e-6)
    assert.are.same({ "0.weight", "0.bias", "2.weight", "2.bias" }, names(seq:named_parameters()))
    assert.are.equal(2, #nn.Sequential({ nn.Tanh(), nn.Tanh() }))
    assert.has_error(function() nn.Sequential(nn.ReLU(), 3) end, "Sequential: argument 2 must be a module, got number")
    assert.has_error(function() seq[5] = nn.ReLU() end,
      "Sequential: index 5 is out of range: a list of 3 modules grows at index 4")
  end)
  it("ModuleList registers its modules and has no forward", function()
    local Stack = nn.Module:extend("Stack")
    function Stack:init()
      self.layers = nn.ModuleList({ nn.Linear(2, 2), nn.Linear(2, 2) })
      self.layers:append(nn.Linear(2, 2))
    end
    function Stack:forward(x)
      for _, l in ipairs(self.layers) do x = l(x) end
      return x
    end
    local s = Stack()
    assert.are.equal(6, #s:parameters())
    assert.are.equal("layers.2.bias", names(s:named_parameters())[6])
    assert.are.same({ 3, 2 }, s(tide.randn(3, 2)):shape())
    s.layers:extend(nn.ModuleList({ nn.Identity() }))
    assert.are.equal(4, #s.layers)
    assert.has_error(function() s.layers(tide.zeros(1)) end,
      "ModuleList: a module list has no forward; call its modules (for _, m in ipairs(list) do ... end)")
  end)
end)

describe("nn layers", function()
  describe("Linear", function()
    it("computes x W^T + b with its own parameters", function()
      local m = nn.Linear(3, 2, { dtype = "float64" })
      local x = rnd { 4, 3 }
      local w, b, xt = m.weight:totable(), m.bias:totable(), x:totable()
      local ref = {}
      for i = 1, 4 do
        ref[i] = {}
        for o = 1, 2 do
          local s = b[o]
          for k = 1, 3 do s = s + w[o][k] * xt[i][k] end
          ref[i][o] = s
        end
      end
      H.close(m(x), ref, 1e-12)
      assert.is_nil(nn.Linear(3, 2, false).bias)
      assert.are.equal(1, #nn.Linear(3, 2, { bias = false }):parameters())
      assert.has_error(function() nn.Linear(-1, 2) end, "Linear: in_features must be a non-negative integer, got -1")
    end)
    it("is initialised from U(-1/sqrt(in), 1/sqrt(in)), bias included", function()
      tide.manual_seed(3)
      local m = nn.Linear(400, 300)
      local bound = 1 / math.sqrt(400)
      for _, t in ipairs { m.weight, m.bias } do
        assert.is_true(t:amax():item() <= bound and t:amin():item() >= -bound)
        assert.is_true(t:amax():item() > 0.95 * bound and t:amin():item() < -0.95 * bound)
      end
      assert.is_true(math.abs(m.weight:mean():item()) < 0.01 * bound)
      H.close(m.weight:std(), bound / math.sqrt(3), 0.01)
    end)
  end)

  describe("Embedding", function()
    it("looks up rows, draws N(0, 1) and zeroes the padding row", function()
      tide.manual_seed(4)
      local e = nn.Embedding(200, 100, { padding_idx = -1 })
      assert.are.equal(200, e.padding_idx)
      H.equal(e.weight[200], tide.zeros(100))
      local w = e.weight:narrow(1, 1, 199)
      assert.is_true(math.abs(w:mean():item()) < 0.02)
      H.close(w:std(), 1, 0.02)
      local idx = tide.tensor({ { 3, 200 } }, "int64")
      local out = e(idx)
      assert.are.same({ 1, 2, 100 }, out:shape())
      H.equal(out[1][1], e.weight[3])
      out:sum():backward()
      H.equal(e.weight.grad[200], tide.zeros(100))
      H.equal(e.weight.grad[3], tide.ones(100))
      assert.are.equal("Embedding(200, 100, padding_idx=200)", tostring(e))
      assert.has_error(function() nn.Embedding(5, 2, { padding_idx = 6 }) end,
        "Embedding: padding_idx 6 is out of range for 5 embeddings")
    end)
    it("from_pretrained shares the weight and freezes it", function()
      local w = tide.randn(4, 3)
      local e = nn.Embedding.from_pretrained(w)
      assert.is_false(e.weight.requires_grad)
      local w2 = tide.randn(4, 3)
      nn.Embedding.from_pretrained(w2, { freeze = false })
      assert.is_false(w2.requires_grad)
      H.equal(e(tide.tensor({ 2 }, "int64")), { w:totable()[2] })
      assert.is_true(nn.Embedding.from_pretrained(w:clone(), { freeze = false }).weight.requires_grad)
    end)
  end)

  describe("LayerNorm", function()
    it("starts at weight 1, bias 0 and normalises each row", function()
      local m = nn.LayerNorm(4, { dtype = "float64" })
      H.equal(m.weight, tide.ones(4))
      H.equal(m.bias, tide.zeros(4))
      local x = rnd({ 3, 4 }, -2, 2)
      local ref = {}
      for i, row in ipairs(x:totable()) do
        local mean, var = 0, 0
        for _, v in ipairs(row) do mean = mean + v / 4 end
        for _, v in ipairs(row) do var = var + (v - mean) ^ 2 / 4 end
        ref[i] = {}
        for j, v in ipairs(row) do ref[i][j] = (v - mean) / math.sqrt(var + 1e-5) end
      end
      H.close(m(x), ref, 1e-10, 1e-12)
      assert.are.equal(0, #nn.LayerNorm({ 2, 3 }, { elementwise_affine = false }):parameters())
      assert.is_nil(nn.LayerNorm(2, { bias = false }).bias)
      assert.is_true(gradcheck(function(a) return m(a) end, { rnd({ 2, 4 }, -2, 2, true), m.weight, m.bias }))
    end)
  end)

  describe("BatchNorm", function()
    it("updates the running statistics by the momentum formula in training", function()
      local bn = nn.BatchNorm1d(2, { momentum = 0.3, dtype = "float64" })
      local rm, rv = { 0, 0 }, { 1, 1 }
      for _ = 1, 2 do
        local x = rnd({ 4, 2 }, -3, 3)
        local xt = x:totable()
        local y = bn(x)
        for c = 1, 2 do
          local m, v = 0, 0
          for i = 1, 4 do m = m + xt[i][c] / 4 end
          for i = 1, 4 do v = v + (xt[i][c] - m) ^ 2 end
          rm[c] = 0.7 * rm[c] + 0.3 * m
          rv[c] = 0.7 * rv[c] + 0.3 * v / 3     -- the unbiased variance
          local yt = y:totable()
          for i = 1, 4 do assert.is_true(math.abs(yt[i][c] - (xt[i][c] - m) / math.sqrt(v / 4 + 1e-5)) < 1e-10) end
        end
      end
      H.close(bn.running_mean, rm, 1e-12)
      H.close(bn.running_var, rv, 1e-12)
      H.equal(bn.num_batches_tracked, 2)
    end)
    it("uses the running statistics in evaluation, and leaves them alone", function()
      local bn = nn.BatchNorm1d(3, { dtype = "float64" })
      tide.no_grad(function()
        bn.running_mean:copy_(tide.tensor { 1, 2, 3 })
        bn.running_var:copy_(tide.tensor { 4, 0.25, 1 })
        bn.weight:fill_(2)
        bn.bias:fill_(0.5)
      end)
      bn:eval()
      local x = rnd({ 2, 3, 2 }, -2, 2)
      local xt = x:totable()
      local y = bn(x):totable()
      local m, v = { 1, 2, 3 }, { 4, 0.25, 1 }
      for n = 1, 2 do for c = 1, 3 do for l = 1, 2 do
        assert.is_true(math.abs(y[n][c][l] - ((xt[n][c][l] - m[c]) / math.sqrt(v[c] + 1e-5) * 2 + 0.5)) < 1e-10)
      end end end
      H.close(bn.running_mean, m)
      H.equal(bn.num_batches_tracked, 0)
    end)
    it("with momentum = false keeps a cumulative average", function()
      local bn = nn.BatchNorm1d(1, { momentum = false, dtype = "float64" })
      bn(tide.tensor({ { 1 }, { 3 } }, "float64"))
      bn(tide.tensor({ { 5 }, { 9 } }, "float64"))
      H.close(bn.running_mean, { (2 + 7) / 2 }, 1e-12)
      H.close(bn.running_var, { (2 + 8) / 2 }, 1e-12)   -- unbiased variances 2 and 8
      assert.are.equal("BatchNorm1d(1, eps=1e-05, momentum=false, affine=true, track_running_stats=true)", tostring(bn))
    end)
    it("without running statistics uses the batch's in evaluation too; affine = false has no parameters", function()
      local bn = nn.BatchNorm1d(2, { track_running_stats = false, affine = false })
      assert.are.equal(0, #bn:parameters())
      assert.are.equal(0, #bn:buffers())
      bn:eval()
      local y = bn(tide.randn(16, 2))
      H.close(y:mean(1), { 0, 0 }, 0, 1e-5)
    end)
    it("BatchNorm2d normalises [N, C, H, W] per channel and gradchecks", function()
      local bn = nn.BatchNorm2d(2, { dtype = "float64" })
      local y = bn(rnd({ 2, 2, 3, 3 }, -2, 2))
      H.close(y:mean({ 1, 3, 4 }), { 0, 0 }, 0, 1e-12)
      H.close(y:var({ 1, 3, 4 }, false, 0), { 1, 1 }, 1e-4)
      assert.is_true(gradcheck(function(a) return bn(a) end, { rnd({ 2, 2, 2, 2 }, -2, 2, true), bn.weight, bn.bias }))
      assert.has_error(function() bn(tide.zeros(2, 2)) end,
        "BatchNorm2d: expected 4-d input [N, C, H, W], got shape [2,2]")
      assert.has_error(function() nn.BatchNorm1d(2)(tide.zeros(2, 2, 2, 2)) end,
        "BatchNorm1d: expected 2-d or 3-d input ([N, C] or [N, C, L]), got shape [2,2,2,2]")
    end)
  end)

  describe("Dropout", function()
    it("drops and scales in training, is the identity in evaluation, reproducibly", function()
      local d = nn.Dropout(0.25)
      local x = tide.ones(64, 64)
      tide.manual_seed(7)
      local a = d(x)
      local zeros = a:eq(0):sum():item() / 4096
      assert.is_true(math.abs(zeros - 0.25) < 0.03, "zeroed fraction " .. zeros)
      H.close(a:amax(), 1 / 0.75, 1e-6)
      tide.manual_seed(7)
      H.equal(d(x), a)
      d:eval()
      assert.are.equal(x, d(x))
      assert.has_error(function() nn.Dropout(1.5) end, "Dropout: p must be a number between 0 and 1, got 1.5")
    end)
  end)

  describe("shape and activation modules", function()
    it("compute what their functions compute", function()
      local x = rnd({ 2, 3, 4 }, -2, 2)
      assert.are.same({ 2, 12 }, nn.Flatten()(x):shape())
      assert.are.same({ 24 }, nn.Flatten(1)(x):shape())
      assert.are.same({ 2, 3, 4 }, nn.Flatten(2, 2)(x):shape())
      assert.are.equal(x, nn.Identity()(x))
      local xt = x:totable()
      local function each(t, f)
        local r = {}
        for i, v in ipairs(t) do r[i] = type(v) == "table" and each(v, f) or f(v) end
        return r
      end
      H.close(nn.ReLU()(x), each(xt, function(v) return math.max(v, 0) end))
      H.close(nn.Tanh()(x), each(xt, math.tanh), 1e-12)
      H.close(nn.Sigmoid()(x), each(xt, function(v) return 1 / (1 + math.exp(-v)) end), 1e-12)
      H.close(nn.SiLU()(x), each(xt, function(v) return v / (1 + math.exp(-v)) end), 1e-12)
      H.close(nn.GELU("tanh")(x), each(xt, function(v)
        return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3)))
      end), 1e-9)
      H.close(nn.GELU()(x), F.gelu(x))
      local sm = nn.Softmax(2)(x)
      H.close(sm:sum(2), tide.ones(2, 4), 1e-12)
      H.close(nn.LogSoftmax(-1)(x):exp(), x:softmax(-1), 1e-12)
      assert.has_error(function() nn.Softmax() end,
        "Softmax: dim must be a nonzero integer (1-based, negative from the end), got nil")
      assert.has_error(function() nn.GELU("fast") end, "GELU: approximate must be 'none' or 'tanh', got fast")
    end)
  end)

  describe("loss modules", function()
    it("call their functions with their options; weights are buffers", function()
      local x = rnd({ 3, 4 }, -2, 2)
      local t = tide.tensor({ 1, 4, 2 }, "int64")
      local w = tide.tensor({ 1, 2, 3, 4 }, "float64")
      local ce = nn.CrossEntropyLoss({ weight = w, label_smoothing = 0.1, reduction = "sum" })
      H.close(ce(x, t), F.cross_entropy(x, t, { weight = w, label_smoothing = 0.1, reduction = "sum" }), 1e-12)
      assert.are.same({ "weight" }, sorted_keys(ce:state_dict()))
      H.close(nn.CrossEntropyLoss()(x, x:softmax(2)), F.cross_entropy(x, x:softmax(2)), 1e-12)
      H.close(nn.NLLLoss({ ignore_index = 4 })(x:log_softmax(2), t),
        F.nll_loss(x:log_softmax(2), t, { ignore_index = 4 }), 1e-12)
      H.close(nn.MSELoss("sum")(x, x * 2), (x * x):sum(), 1e-12)
      local y = rnd({ 3, 4 }, 0, 1)
      local pw = tide.tensor({ 1, 2, 3, 4 }, "float64")
      H.close(nn.BCEWithLogitsLoss({ pos_weight = pw })(x, y),
        F.binary_cross_entropy_with_logits(x, y, { pos_weight = pw }), 1e-12)
      assert.has_error(function() nn.MSELoss("avg") end, "MSELoss: reduction must be 'mean', 'sum' or 'none', got avg")
    end)
  end)
end)

describe("nn.init", function()
  local init = nn.init
  it("computes fans for Linear and convolution weights, and gains", function()
    assert.are.same({ 3, 5 }, { init.calculate_fan_in_and_fan_out(tide.empty(5, 3)) })
    assert.are.same({ 3 * 9, 8 * 9 }, { init.calculate_fan_in_and_fan_out(tide.empty(8, 3, 3, 3)) })
    assert.has_error(function() init.calculate_fan_in_and_fan_out(tide.empty(4)) end,
      "calculate_fan_in_and_fan_out: fans need a tensor of at least 2 dimensions, got 1")
    H.close(tide.tensor(init.calculate_gain("tanh")), 5 / 3)
    H.close(tide.tensor(init.calculate_gain("relu")), math.sqrt(2))
    H.close(tide.tensor(init.calculate_gain("leaky_relu", math.sqrt(5))), math.sqrt(1 / 3))
    assert.are.equal(1, init.calculate_gain("sigmoid"))
  end)
  it("draws within the bounds and with the spread each formula gives", function()
    tide.manual_seed(12)
    local w = tide.empty(256, 512):requires_grad_()
    local function check(bound, std)
      if bound then
        assert.is_true(w:amax():item() <= bound and w:amin():item() >= -bound)
        assert.is_true(w:amax():item() > 0.99 * bound)
      end
      assert.is_true(math.abs(w:mean():item()) < 0.02 * std)
      H.close(w:std(), std, 0.02)
    end
    init.kaiming_uniform_(w)
    check(math.sqrt(6 / 512), math.sqrt(2 / 512))
    init.kaiming_uniform_(w, { a = math.sqrt(5) })
    check(1 / math.sqrt(512), 1 / math.sqrt(512 * 3))
    init.kaiming_normal_(w, { mode = "fan_out", nonlinearity = "relu" })
    check(nil, math.sqrt(2 / 256))
    init.xavier_uniform_(w, 2)
    check(2 * math.sqrt(6 / 768), 2 * math.sqrt(2 / 768))
    init.xavier_normal_(w)
    check(nil, math.sqrt(2 / 768))
    init.normal_(w, 3, 0.5)
    H.close(w:mean(), 3, 0.01)
    H.close(w:std(), 0.5, 0.02)
    init.uniform_(w, -2, 1)
    assert.is_true(w:amin():item() >= -2 and w:amax():item() <= 1)
    assert.is_true(w.is_leaf and w.requires_grad)
    H.equal(init.zeros_(w):sum(), 0)
    H.equal(init.ones_(w):sum(), 256 * 512)
    H.equal(init.constant_(w, 0.5):mean(), 0.5)
    assert.has_error(function() init.kaiming_uniform_(w, { mode = "fan" }) end,
      "kaiming_uniform_: mode must be 'fan_in' or 'fan_out', got fan")
    assert.has_error(function() init.zeros_(tide.zeros(2, "int64")) end,
      "zeros_: expects a floating-point tensor, got int64")
  end)
  it("orthogonal_ fills (semi-)orthogonal rows or columns, times the gain", function()
    tide.manual_seed(14)
    local function gram_err(m, by_rows, gain)
      local g = by_rows and m:matmul(m:mT()) or m:mT():matmul(m)
      return (g - tide.eye(g:size(1), { dtype = m:dtype() }) * gain * gain):abs():amax():item()
    end
    local w = tide.empty(3, 5):requires_grad_()
    assert.are.equal(w, init.orthogonal_(w, 2))
    assert.is_true(gram_err(w, true, 2) < 1e-5 and w.is_leaf and w.requires_grad)
    local v = init.orthogonal_(tide.empty(6, 2, 2, "float64"))   -- seen as [6, 4]: orthonormal columns
    assert.is_true(gram_err(v:reshape(6, 4), false, 1) < 1e-12)
    -- two draws differ (the signs come from R, not a fixed convention)
    local a, b = init.orthogonal_(tide.empty(4, 4)), init.orthogonal_(tide.empty(4, 4))
    assert.is_true((a - b):abs():amax():item() > 0.1)
    assert.has_error(function() init.orthogonal_(tide.empty(4)) end,
      "orthogonal_: only tensors with 2 or more dimensions are supported, got 1")
  end)
  it("reset_linear_ is Linear's default, for conv-shaped weights too", function()
    tide.manual_seed(13)
    local w, b = tide.empty(16, 4, 3, 3), tide.empty(16)
    init.reset_linear_(w, b)
    local bound = 1 / math.sqrt(36)
    assert.is_true(w:amax():item() <= bound and w:amin():item() >= -bound and w:amax():item() > 0.9 * bound)
    assert.is_true(b:amax():item() <= bound and b:amin():item() >= -bound)
  end)
end)

describe("nn.MultiheadAttention", function()
  -- The attention of batch-first tables q [N][L][E], k, v [N][S][E] in plain
  -- Lua with the module's parameters; mask(n, i, j) is true where masked.
  local function mha_ref(m, q, k, v, mask)
    local e, h = m.embed_dim, m.num_heads
    local hd = e / h
    local w, bias = m.in_proj_weight:totable(), m.in_proj_bias:totable()
    local wo, bo = m.out_proj.weight:totable(), m.out_proj.bias:totable()
    local function proj(x, off)
      local r = {}
      for i = 1, #x do
        r[i] = {}
        for o = 1, e do
          local s = bias[off + o]
          for j = 1, e do s = s + w[off + o][j] * x[i][j] end
          r[i][o] = s
        end
      end
      return r
    end
    local outs, weights = {}, {}
    for n = 1, #q do
      local Q, K, V = proj(q[n], 0), proj(k[n], e), proj(v[n], 2 * e)
      local ctx, avg = {}, {}
      for i = 1, #Q do
        ctx[i], avg[i] = {}, {}
        for j = 1, #K do avg[i][j] = 0 end
      end
      for hh = 0, h - 1 do
        for i = 1, #Q do
          local s, mx = {}, -math.huge
          for j = 1, #K do
            local d = 0
            for c = 1, hd do d = d + Q[i][hh * hd + c] * K[j][hh * hd + c] end
            s[j] = (mask and mask(n, i, j)) and -math.huge or d / math.sqrt(hd)
            mx = math.max(mx, s[j])
          end
          local z = 0
          for j = 1, #K do s[j] = math.exp(s[j] - mx); z = z + s[j] end
          for j = 1, #K do s[j] = s[j] / z; avg[i][j] = avg[i][j] + s[j] / h end
          for c = 1, hd do
            local acc = 0
            for j = 1, #K do acc = acc + s[j] * V[j][hh * hd + c] end
            ctx[i][hh * hd + c] = acc
          end
        end
      end
      outs[n] = {}
      for i = 1, #Q do
        outs[n][i] = {}
        for o = 1, e do
          local acc = bo[o]
          for c = 1, e do acc = acc + wo[o][c] * ctx[i][c] end
          outs[n][i][o] = acc
        end
      end
      weights[n] = avg
    end
    return outs, weights
  end

  local function model(opts)
    tide.manual_seed(21)
    local m = nn.MultiheadAttention(4, 2, opts or { dtype = "float64" })
    tide.no_grad(function() m.in_proj_bias:copy_(tide.linspace(-0.5, 0.5, 12)) end)  -- not all zero
    return m
  end

  it("is initialised as PyTorch's: Xavier in_proj, zero biases", function()
    tide.manual_seed(22)
    local m = nn.MultiheadAttention(64, 4)
    local bound = math.sqrt(6 / (64 + 192))
    assert.is_true(m.in_proj_weight:amax():item() <= bound and m.in_proj_weight:amax():item() > 0.95 * bound)
    H.equal(m.in_proj_bias, tide.zeros(192))
    H.equal(m.out_proj.bias, tide.zeros(64))
    assert.is_true(m.out_proj.weight:amax():item() <= 1 / 8)
    assert.are.same({ "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias" },
      names(m:named_parameters()))
  end)

  it("matches the reference in every layout, with averaged weights", function()
    local m = model()
    local x, y = rnd { 2, 3, 4 }, rnd { 2, 5, 4 }       -- batch-first [N, L, E], [N, S, E]
    local ro, rw = mha_ref(m, x:totable(), y:totable(), y:totable())
    local out, w = m(x:transpose(1, 2), y:transpose(1, 2), y:transpose(1, 2))   -- [L, N, E]
    assert.are.same({ 3, 2, 4 }, out:shape())
    H.close(out:transpose(1, 2), ro, 1e-10, 1e-12)
    H.close(w, rw, 1e-10, 1e-12)
    local mb = model({ batch_first = true, dtype = "float64" })
    local outb, wb = mb(x, y, y)
    H.close(outb, ro, 1e-10, 1e-12)
    H.close(wb, rw, 1e-10, 1e-12)
    local outu, wu = mb(x[1], y[1], y[1])               -- unbatched [L, E]
    H.close(outu, ro[1], 1e-10, 1e-12)
    H.close(wu, rw[1], 1e-10, 1e-12)
    local _, per_head = mb(x, y, y, { average_attn_weights = false })
    assert.are.same({ 2, 2, 3, 5 }, per_head:shape())
    H.close(per_head:mean(2), rw, 1e-10, 1e-12)
    local _, none = mb(x, y, y, { need_weights = false })
    assert.is_nil(none)
  end)

  it("masks keys with key_padding_mask and attn_mask (true: masked), bool or float", function()
    local m = model({ batch_first = true, dtype = "float64" })
    local x = rnd { 2, 3, 4 }
    local pad = tide.tensor({ { false, false, true }, { false, true, true } })
    local padt = pad:totable()
    local ro, rw = mha_ref(m, x:totable(), x:totable(), x:totable(), function(n, _, j) return padt[n][j] end)
    local out, w = m(x, x, x, { key_padding_mask = pad })
    H.close(out, ro, 1e-10, 1e-12)
    H.close(w, rw, 1e-10, 1e-12)
    local fpad = tide.zeros(2, 3, "float64"):masked_fill(pad, -math.huge)
    H.close(m(x, x, x, { key_padding_mask = fpad }), ro, 1e-10, 1e-12)
    local causal = tide.ones(3, 3, "bool"):triu(1)
    local rc = mha_ref(m, x:totable(), x:totable(), x:totable(), function(_, i, j) return j > i end)
    H.close(m(x, x, x, { attn_mask = causal }), rc, 1e-10, 1e-12)
    H.close(m(x, x, x, { is_causal = true }), rc, 1e-10, 1e-12)
    H.close(m(x, x, x, { attn_mask = causal:unsqueeze(1):expand(4, 3, 3):contiguous() }), rc, 1e-10, 1e-12)
    assert.has_error(function() m(x, x, x, { attn_mask = tide.ones(2, 3, "bool") }) end,
      "MultiheadAttention: attn_mask of shape [2,3] must be [L,S] = [3,3] or [N*num_heads,L,S] = [4,3,3]")
    assert.has_error(function() m(x, x, x, { key_padding_mask = tide.ones(3, 3, "bool") }) end,
      "MultiheadAttention: key_padding_mask of shape [3,3] must be [N,S] = [2,3]")
    assert.has_error(function() m(tide.zeros(2, 3, 5, "float64")) end,
      "MultiheadAttention: query of shape [2,3,5] has 5 features, expected embed_dim = 4")
    assert.has_error(function() nn.MultiheadAttention(6, 4) end,
      "MultiheadAttention: embed_dim 6 is not divisible by num_heads 4")
  end)

  it("takes keys and values of other sizes (kdim, vdim)", function()
    local m = nn.MultiheadAttention(4, 2, { kdim = 3, vdim = 5, batch_first = true })
    assert.are.same({ "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "out_proj.weight",
      "out_proj.bias" }, names(m:named_parameters()))
    local out, w = m(tide.randn(2, 3, 4), tide.randn(2, 6, 3), tide.randn(2, 6, 5))
    assert.are.same({ 2, 3, 4 }, out:shape())
    assert.are.same({ 2, 3, 6 }, w:shape())
  end)

  it("drops attention weights only in training", function()
    local m = nn.MultiheadAttention(4, 2, { dropout = 0.5, batch_first = true })
    local x = tide.randn(1, 4, 4)
    m:eval()
    H.equal(m(x), (m(x)))
    m:train()
    tide.manual_seed(5)
    local a = m(x)
    tide.manual_seed(5)
    H.equal(m(x), a)
    assert.is_false(pcall(H.close, a, (m:eval()(x)), 1e-6))
  end)

  it("gradchecks with respect to its inputs and parameters", function()
    local m = model({ batch_first = true, dtype = "float64" })
    local pad = tide.tensor({ { false, true, false } })
    local ins = { rnd({ 1, 2, 4 }, -1, 1, true), rnd({ 1, 3, 4 }, -1, 1, true) }
    for _, p in ipairs(m:parameters()) do ins[#ins + 1] = p end
    assert.is_true(gradcheck(function(q, kv)
      local out, w = m(q, kv, kv, { key_padding_mask = pad })
      return { out, w }
    end, ins))
  end)
end)

describe("nn.TransformerEncoderLayer", function()
  local function layer(opts)
    tide.manual_seed(31)
    opts.dim_feedforward, opts.dtype, opts.batch_first = 6, "float64", true
    local l = nn.TransformerEncoderLayer(4, 2, opts)
    tide.no_grad(function()   -- move the norms and biases off their identity start
      for name, p in l:named_parameters() do
        if name:find("norm") or name:find("bias") then p:add_(tide.linspace(-0.3, 0.3, p:numel()):view(p:shape())) end
      end
    end)
    return l:eval()
  end

  it("composes attention, feed-forward, residuals and norms (post-norm and pre-norm)", function()
    local x = rnd { 2, 3, 4 }
    local l = layer({ activation = "gelu" })
    local sa = l.self_attn(x, x, x)
    local h = l.norm1(x + sa)
    local ref = l.norm2(h + l.linear2(F.gelu(l.linear1(h))))
    H.close(l(x), ref, 1e-12)
    local p = layer({ norm_first = true })
    local n1 = p.norm1(x)
    local h2 = x + p.self_attn(n1, n1, n1)
    H.close(p(x), h2 + p.linear2(F.relu(p.linear1(p.norm2(h2)))), 1e-12)
    assert.are.same({ "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
      "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
      "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias" }, names(l:named_parameters()))
  end)

  it("ignores padded keys and keeps the sequence layout", function()
    local l = layer({})
    local x = rnd { 1, 3, 4 }
    local pad = tide.tensor({ { false, false, true } })
    local a = l(x, { src_key_padding_mask = pad })
    local x2 = x:clone()
    x2[{ 1, 3 }] = tide.tensor({ 9, 9, 9, 9 }, "float64")
    local b = l(x2, { src_key_padding_mask = pad })
    H.close(a:narrow(2, 1, 2), b:narrow(2, 1, 2), 1e-12)
    local s = nn.TransformerEncoderLayer(4, 2, { dim_feedforward = 8 })   -- [S, N, E]
    assert.are.same({ 5, 2, 4 }, s(tide.randn(5, 2, 4)):shape())
    assert.has_error(function() nn.TransformerEncoderLayer(4, 2, { activation = "swish" }) end,
      "TransformerEncoderLayer: activation must be 'relu', 'gelu', a function or a module, got 'swish'")
  end)

  it("applies dropout in training, reproducibly", function()
    local l = nn.TransformerEncoderLayer(4, 2, { dim_feedforward = 8, dropout = 0.5 })
    local x = tide.randn(3, 1, 4)
    tide.manual_seed(6)
    local a = l(x)
    tide.manual_seed(6)
    H.equal(l(x), a)
    l:eval()
    assert.is_false(pcall(H.close, a, l(x), 1e-6))
  end)

  it("runs forward and backward, and gradchecks on small shapes", function()
    local l = layer({ activation = "gelu" })
    local x = rnd({ 2, 3, 4 }, -1, 1, true)
    local pad = tide.tensor({ { false, false, true }, { false, false, false } })
    l(x, { src_key_padding_mask = pad, is_causal = true }):sum():backward()
    for name, p in l:named_parameters() do assert.is_not_nil(p.grad, name) end
    l:zero_grad()
    local ins = { rnd({ 1, 3, 4 }, -1, 1, true) }
    for _, p in ipairs(l:parameters()) do ins[#ins + 1] = p end
    assert.is_true(gradcheck(function(a) return l(a, { src_key_padding_mask = tide.tensor({ { false, false, true } }) })
    end, ins))
    local pre = layer({ norm_first = true })
    local ins2 = { rnd({ 1, 2, 4 }, -1, 1, true) }
    for _, p in ipairs(pre:parameters()) do ins2[#ins2 + 1] = p end
    assert.is_true(gradcheck(function(a) return pre(a) end, ins2))
  end)
end)

describe("nn training", function()
  it("a 2-8-1 tanh MLP learns XOR with hand-written SGD", function()
    tide.manual_seed(0)
    local model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    local x = tide.tensor({ { 0, 0 }, { 0, 1 }, { 1, 0 }, { 1, 1 } })
    local y = tide.tensor({ { 0 }, { 1 }, { 1 }, { 0 } })
    local criterion = nn.MSELoss()
    local lr, loss = 0.2, math.huge
    local steps = 0
    while loss > 1e-3 and steps < 1000 do   -- about 180 steps with this seed
      model:zero_grad()
      local l = criterion(model(x), y)
      l:backward()
      tide.no_grad(function()
        for _, p in ipairs(model:parameters()) do p:sub_(p.grad * lr) end
      end)
      loss = l:item()
      steps = steps + 1
    end
    assert.is_true(loss <= 1e-3, string.format("loss %.4g after %d steps", loss, steps))
    local pred = model(x)
    H.close(pred, { { 0 }, { 1 }, { 1 }, { 0 } }, 0, 0.1)
  end)
end)

describe("nn.Module forward hooks", function()
  it("run pre-hooks on the arguments and hooks on the results, each may replace them", function()
    local m = nn.Linear(2, 1)
    local calls = {}
    local x = tide.ones(3, 2)
    local pre = m:register_forward_pre_hook(function(mod, a)
      assert.are.equal(m, mod)
      calls[#calls + 1] = "pre"
      return a * 2
    end)
    local post = m:register_forward_hook(function(mod, args, y)
      calls[#calls + 1] = "post"
      assert.are.equal(1, args.n)
      H.equal(args[1], (x * 2):totable())
      return y + 100
    end)
    local y = m(x)
    assert.are.same({ "pre", "post" }, calls)
    H.close(y, tide.no_grad(function() return m:forward(x * 2) + 100 end))
    pre:remove()
    post:remove()
    post:remove()
    H.close(m(x), tide.no_grad(function() return m:forward(x) end))
    assert.are.equal(2, #calls)
  end)

  it("keep the arguments and results when a hook returns nil, and run in order", function()
    local m = nn.Identity()
    local order = {}
    m:register_forward_hook(function() order[#order + 1] = 1 end)
    m:register_forward_hook(function(_, _, y) order[#order + 1] = 2; return y * 3 end)
    m:register_forward_hook(function(_, _, y) order[#order + 1] = 3; return y + 1 end)
    H.equal(m(tide.tensor { 1, 2 }), { 4, 7 })
    assert.are.same({ 1, 2, 3 }, order)
    assert.has_error(function() m:register_forward_hook(42) end,
      "register_forward_hook: argument 1 must be a function, got number")
  end)

  it("see the activations of a child inside a Sequential, and stay out of state_dict", function()
    local net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    local seen
    net[2]:register_forward_hook(function(_, _, y) seen = y end)
    net(tide.randn(4, 2))
    assert.are.same({ 4, 3 }, seen:shape())
    local keys = {}
    for k in pairs(net:state_dict()) do keys[#keys + 1] = k end
    assert.are.equal(4, #keys)
  end)
end)
