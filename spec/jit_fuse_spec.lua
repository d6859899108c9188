-- tide.jit's elementwise fusion (runtime/src/graph/pass_fuse.c, ops/cpu/ew.c):
-- which chains become one kernel, and that the kernel gives eager's results,
-- bit for bit, with broadcast inputs, in-place updates and a final sum or mean.
-- Each case checks the graph too, so that a fusion that stops firing fails here.
local tide = require "tide"
local H = require "spec.helpers"
local F = tide.nn.functional

-- Compiles fn (captured on the first call), replays it twice on args and checks
-- each replay's results against fn's eager ones, exactly; returns the compiled function.
local function same_as_eager(fn, ...)
  local want = { fn(...) }
  local f = tide.jit.compile(fn, { warmup = 0 })
  for _ = 1, 3 do
    local got = { f(...) }
    for i = 1, #want do H.equal(got[i], want[i], "result " .. i) end
  end
  return f
end

local function nodes(f) return f:stats().graphs[1].nodes end

-- A chain ends in its sum or mean only on the CPU: on a CUDA device (the suite
-- run with TIDE_DEFAULT_DEVICE=cuda:0) fused kernels have no reduction yet.
local fuses_reductions = tide.get_default_device():match("^cpu") ~= nil

local on_cpu = H.on_cpu

-- The number of fused nodes in f's graph that run exactly `steps` ("mul add relu").
local function fused(f, steps)
  local n = 0
  for s in f:graph():gmatch("fused%(.-%) {(.-)}") do n = n + (s == steps and 1 or 0) end
  return n
end

describe("jit fusion", function()
  it("reads broadcast inputs where they are: 0-d tensors, host numbers, bias rows and columns", function()
    for _, dtype in ipairs { "float32", "float64" } do
      -- a short row (laid out once per thread), a long one (gathered), blocks that do not divide
      for _, c in ipairs { 3, 5000 } do
        local n = math.floor(30000 / c) + 1
        local lr, bias, col = tide.tensor(0.1, { dtype = dtype }), tide.randn({ c }, { dtype = dtype }),
          tide.randn({ n, 1 }, { dtype = dtype })
        local function fn(x) return ((x * lr + bias):relu() - col):mul(2):maximum(bias) end
        for _, x in ipairs { tide.randn({ n, c }, { dtype = dtype }), tide.randn({ c, n }, { dtype = dtype }):t() } do
          local f = same_as_eager(fn, x)
          assert.are.equal(1, nodes(f))
          assert.are.equal(1, fused(f, "mul add relu sub mul maximum"))
          lr:fill_(-0.5)             -- bound by reference: the replay reads the new value
          H.equal(f(x), fn(x))
          lr:fill_(0.1)
        end
      end
    end
  end)

  it("fuses float16 and bfloat16 chains, computing in float32 and rounding each step as eager stores it", function()
    local function fn(x, row, lr) return ((x * lr + row):relu():sqrt() - x):exp():mul(0.5):tanh():sigmoid():div(row) end
    for _, dtype in ipairs { "float16", "bfloat16" } do
      tide.manual_seed(3)
      local o = { dtype = dtype }
      local row, lr = tide.randn({ 700 }, o), tide.tensor(0.3, o)
      for _, x in ipairs { tide.randn({ 40, 700 }, o), tide.randn({ 700, 40 }, o):t() } do
        local f = same_as_eager(fn, x, row, lr)
        assert.are.equal(1, nodes(f), f:graph())
        assert.are.equal(1, fused(f, "mul add relu sqrt sub exp mul tanh sigmoid div"), f:graph())
      end
      -- an in-place update of a float16/bfloat16 tensor, with a Lua number
      local p0, g = tide.randn({ 300 }, o), tide.randn({ 300 }, o)
      local p = p0:clone()
      local step = tide.jit.compile(function(alpha) p:mul_(0.9):add_(g, alpha):clamp_(-1, 1) end, { warmup = 0 })
      local want = p0:clone()
      for _ = 1, 3 do
        step(-0.01)
        want:mul_(0.9):add_(g, -0.01):clamp_(-1, 1)
        H.equal(p, want)
      end
      assert.are.equal(1, fused(step, "mul add_scaled clamp"), step:graph())
    end
  end)

  it("fuses 0-d chains and chains over empty tensors", function()
    local function fn(x) return (x * 3 - 1):exp():div(2) end
    for _, x in ipairs { tide.tensor(0.5), tide.zeros(0, 3), tide.randn(1) } do
      local f = same_as_eager(fn, x)
      assert.are.equal(1, fused(f, "mul sub exp div"))
    end
  end)

  it("ends a chain in a sum or mean without storing its input, adding in eager's order", on_cpu(function()
    -- the same additions as reduce.c (16 lanes, chunks of 65536, in double): equal bit for bit
    local function mse(a, b) return ((a - b) ^ 2):mean() end
    local function sums(a, b) return (a * b + 1):sum(-1), (a - b):mean(-1, true) end
    for _, n in ipairs { 1, 7, 1024, 1041, 3 * 65536 + 5 } do
      local a, b = tide.randn(n), tide.randn(n)
      local f = same_as_eager(mse, a, b)
      assert.are.equal(1, nodes(f))
      assert.are.equal(1, fused(f, "sub pow mean"))
    end
    -- rows of one block or less (few and many), longer than a block, longer than a chunk; not contiguous
    for _, shape in ipairs { { 40, 7 }, { 20000, 7 }, { 5, 1500 }, { 2, 70000 }, { 3, 1 } } do
      local a, b = tide.randn(shape), tide.randn({ shape[2], shape[1] }):t()
      local f = same_as_eager(sums, a, b)
      assert.are.equal(1, fused(f, "mul add sum (last dim)"))
      assert.are.equal(1, fused(f, "sub mean (last dim)"))
      f = same_as_eager(mse, a, b)
      assert.are.equal(1, fused(f, "sub pow mean"))
    end
    -- float64, and empty: a sum of nothing is 0, a mean NaN
    same_as_eager(mse, tide.randn({ 999 }, { dtype = "float64" }), tide.randn({ 999 }, { dtype = "float64" }))
    local f = same_as_eager(function(a) return (a * 2):sum(), (a * 2):mean(), (a + 1):sum(-1), (a - 1):mean(-1) end,
      tide.zeros(4, 0))
    local s, m, rows_s, rows_m = f(tide.zeros(4, 0))
    H.equal(s, 0)
    assert.is_true(m:item() ~= m:item())
    H.equal(rows_s, { 0, 0, 0, 0 })
    assert.is_true(rows_m:totable()[1] ~= rows_m:totable()[1])
  end))

  it("does not fuse what must stay apart", function()
    -- an intermediate that is returned: the chain ends there, and the sum reads it
    local f = same_as_eager(function(a) local y = (a - 1) ^ 2; return y:sum(), y end, tide.randn(10))
    assert.are.equal(2, nodes(f))
    assert.are.equal(1, fused(f, "sub pow"))
    -- a broadcast that changes the shape: x * 2 is [3], the sum [4,3]
    f = same_as_eager(function(x, y) return (x * 2) + y end, tide.randn(3), tide.randn(4, 3))
    assert.are.equal(2, nodes(f))
    assert.are.equal(0, fused(f, "mul add"))
    -- a sum over a dim other than the last
    f = same_as_eager(function(a) return (a * a):sum(1) end, tide.randn(6, 5))
    assert.are.equal(2, nodes(f))
    -- an in-place target read at other indices: p:t() after p was updated
    local p0 = tide.randn(4, 4)
    local p = p0:clone()
    local g = tide.jit.compile(function() p:mul_(2):add_(p:t()) end, { warmup = 0 })
    local want = p0:clone()
    for _ = 1, 3 do
      g()
      want:mul_(2):add_(want:t())
      H.equal(p, want)
    end
    assert.are.equal(0, fused(g, "mul add"))
    assert.matches("<%- mul%(", g:graph())
  end)

  it("fuses in-place updates into one kernel that writes the target once", function()
    local x = tide.randn(50, 60)
    for _, layout in ipairs { "contiguous", "transposed" } do
      local base = tide.randn(60, 50)
      local state = layout == "contiguous" and base:t():contiguous() or base:t()   -- an updated view, too
      local want = state:clone()
      local f = tide.jit.compile(function(v) state:mul_(0.9):add_(v, 0.1):clamp_(-1, 1) end, { warmup = 0 })
      for _ = 1, 3 do
        f(x)
        want:mul_(0.9):add_(x, 0.1):clamp_(-1, 1)
        H.equal(state, want, layout)
      end
      assert.are.equal(1, nodes(f))
      assert.matches("%%%d+ <%- fused%(.-%) {mul add_scaled clamp}", f:graph())
    end
  end)

  it("runs an in-place chain step by step when an argument shares the target's memory", function()
    local state, other = tide.randn(6, 6), tide.randn(6, 6)
    local f = tide.jit.compile(function(v) state:mul_(2):sub_(v) end, { warmup = 0 })
    f(other:t())                        -- captured with an unrelated argument
    assert.are.equal(1, fused(f, "mul sub"))
    local want = state:clone()
    f(state:t())                        -- replayed with a view of the target itself
    want:mul_(2):sub_(want:t())         -- eager: the sub reads the doubled values
    H.equal(state, want)
    local g = tide.jit.compile(function(v) state:mul_(3):add_(v) end, { warmup = 0 })
    g(other)
    want = state:clone()
    g(state)                            -- the target itself, read after the update
    want:mul_(3):add_(want)
    H.equal(state, want)
  end)

  it("fuses an optimizer's updates: Adam's moments and its parameter step", function()
    local m = tide.nn.Linear(6, 3)
    local opt = tide.optim.Adam(m:parameters(), { lr = 1e-2 })
    local step = tide.jit.compile(function(x)
      local loss = (m(x) ^ 2):mean()
      opt:zero_grad()
      loss:backward()
      opt:step()
      return loss
    end)
    local x = tide.randn(4, 6)
    for _ = 1, 4 do step(x) end
    assert.are.equal(2, fused(step, "mul addcmul"))            -- v = beta2 v + (1 - beta2) g^2, per parameter
    assert.are.equal(2, fused(step, "sqrt add_scaled addcdiv")) -- p -= lr m / (sqrt(v) + eps), per parameter
    assert.are.equal(fuses_reductions and 1 or 0, fused(step, "pow mean"))   -- the loss (pow's input is saved)
  end)

  it("passes over autograd's aliases and dropout's mask, and gives eager's training results", function()
    local function run(compiled)
      tide.manual_seed(3)
      local w, b = tide.randn(4):requires_grad_(), tide.randn(4):requires_grad_()
      local function fn(x)
        local y = F.dropout(x:exp(), 0.5, true)   -- exp, then empty + bernoulli, then two muls
        local loss = (y * w + b):sum()             -- mul saves y (an alias) before the add
        w.grad, b.grad = nil, nil
        loss:backward()
        return loss:detach(), w.grad, b.grad
      end
      local f = compiled and tide.jit.compile(fn, { warmup = 0 }) or fn
      local x = tide.randn(5, 4)
      local out = {}
      for i = 1, 3 do out[i] = { f(x) } end
      return out, f
    end
    local want = run(false)
    local got, f = run(true)
    for i = 1, 3 do
      for k = 1, 3 do H.equal(got[i][k], want[i][k]) end
    end
    assert.are.equal(1, fused(f, "exp mul mul"))
    assert.are.equal(1, fused(f, fuses_reductions and "mul add sum" or "mul add"))
  end)

  it("leaves ops that record autograd history at replay to the ops, so a backward outside works", function()
    local w = tide.randn(4):requires_grad_()
    local function fn(x) return ((x * w):exp() * 2):sum() end
    local f = tide.jit.compile(fn, { warmup = 0 })
    local x = tide.randn(4)
    for _ = 1, 3 do
      w.grad = nil
      f(x):backward()
      local g = w.grad
      w.grad = nil
      fn(x):backward()
      H.equal(g, w.grad)
    end
    assert.are.equal(4, nodes(f))
    -- an argument that requires grad is a new signature: its graph keeps the history
    local g = tide.jit.compile(function(x) return (x * 2 + 1):sum() end, { warmup = 0 })
    g(tide.randn(3))
    assert.are.equal(fuses_reductions and 1 or 2, nodes(g))
    local a = tide.randn(3):requires_grad_()
    g(a):backward()
    H.equal(a.grad, { 2, 2, 2 })
    assert.are.equal(2, g:stats().captures)
    assert.matches("requires_grad", g:explain())
  end)
end)
