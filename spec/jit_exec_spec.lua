-- tide.jit's replay as one engine task over a planned arena (runtime/src/graph/exec.c):
-- it is used where it can be, gives the node-by-node replay's results bit for
-- bit, hands out fresh results and gradients, falls back where it must (and
-- says why), reports errors at the captured line, and holds less memory.
local tide = require "tide"
local nn, F = tide.nn, tide.nn.functional
local H = require "spec.helpers"

local function plan_line(f) return f:graph():match("%-%- replayed[^\n]*") end

-- A training step of a fresh MLP, compiled with `passes`; returns the losses
-- over `n` steps, the final parameters and the compiled function.
local function train(passes, n)
  tide.manual_seed(3)
  local m = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Dropout(0.2), nn.Linear(12, 3))
  local opt = tide.optim.AdamW(m:parameters(), { lr = 1e-2 })
  local f = tide.jit.compile(function(x, y)
    local loss = F.cross_entropy(m(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
    return loss
  end, { passes = passes })
  tide.manual_seed(9)
  local losses = {}
  for i = 1, n do losses[i] = f(tide.randn(5, 6), tide.randint(1, 4, { 5 })):item() end
  local params = {}
  for i, p in ipairs(m:parameters()) do params[i] = p:clone() end
  return losses, params, f, m
end

describe("jit replay as one task", function()
  it("is used for a training step and matches the node-by-node replay bit for bit", function()
    local l1, p1, f1 = train(nil, 12)
    local l2, p2, f2 = train({ plan = false }, 12)
    assert.truthy(plan_line(f1):find("replayed as one task of %d+ steps"))
    assert.are.equal("-- replayed node by node: the plan pass is switched off", plan_line(f2))
    assert.are.same(l2, l1)
    for i = 1, #p1 do assert.are.equal(0, (p1[i] - p2[i]):abs():max():item(), "parameter " .. i) end
  end)

  it("hands out gradients of their own at each replay, as eager code does", function()
    local _, _, f, m = train(nil, 4)
    local w = m:parameters()[1]
    local g1 = w.grad
    local g1_copy = g1:clone()
    f(tide.randn(5, 6), tide.randint(1, 4, { 5 }))
    assert.are_not.equal(g1, w.grad)
    assert.are.equal(0, (g1 - g1_copy):abs():max():item(), "an old gradient was overwritten")
    assert.are.same(w:shape(), w.grad:shape())
  end)

  it("returns arguments, views of them, captured tensors and repeated results", function()
    local c = tide.arange(1, 7):view(2, 3):to("float32")
    local f = tide.jit.compile(function(x)
      local y = x * 2
      return x, x:t(), c, y, y:narrow(2, 2, 2), y
    end)
    for _ = 1, 3 do
      local x = tide.randn(2, 3)
      local a, at, cc, y, yn, y2 = f(x)
      assert.are.equal(x, a)
      assert.are.same(x:t():totable(), at:totable())
      assert.are.equal(c, cc)
      assert.are.same((x * 2):totable(), y:totable())
      assert.are.same((x * 2):narrow(2, 2, 2):totable(), yn:totable())
      assert.are.equal(y, y2)
    end
    assert.truthy(plan_line(f):find("one task"))
  end)

  it("keeps earlier results intact: each replay's results are new tensors", function()
    local f = tide.jit.compile(function(x) return (x + 1):exp() end)
    local x = tide.zeros(4)
    local r = {}
    for i = 1, 5 do r[i] = f(x + i) end
    for i = 1, 5 do assert.is_true(math.abs(r[i][1] - math.exp(i + 1)) < 1e-4 * math.exp(i + 1)) end
  end)

  it("replays node by node for arguments it cannot bind, with the same results", function()
    local w = tide.randn(3, 3)
    local f = tide.jit.compile(function(x) return (x:matmul(w) + 1):relu() end)
    local x = tide.randn(3, 3)
    for _ = 1, 3 do f(x) end
    local expect = (x:matmul(w) + 1):relu():totable()
    local xt = x:t():contiguous():t()                            -- not contiguous: node by node
    assert.is_false(xt:is_contiguous())
    -- eager on the same layout: a device's product may round another layout otherwise
    assert.are.same((xt:matmul(w) + 1):relu():totable(), f(xt):totable())
    assert.are.same((w:matmul(w) + 1):relu():totable(), f(w):totable())   -- shares memory with a captured tensor
    assert.are.same(expect, f(x):totable())
  end)

  it("says why a graph replays node by node", function()
    local w = tide.randn(3, { requires_grad = true })
    local f = tide.jit.compile(function(x) return x * w end)   -- history for a backward outside
    for _ = 1, 3 do f(tide.randn(3)) end
    assert.truthy(plan_line(f):find("autograd history", 1, true))
    -- what the results' backward keeps is not taken for tensors held by mistake
    assert.is_nil(f:explain():find("still held", 1, true))
    local y = f(tide.ones(3))
    y:sum():backward()
    assert.are.same({ 1, 1, 1 }, w.grad:totable())
    local g = tide.jit.compile(function(x) return x:to("cpu:1") + 1 end)
    local cpu = { device = "cpu" }   -- another device than cpu:1, whatever the default
    for _ = 1, 3 do g(tide.ones(2, cpu)) end
    assert.truthy(plan_line(g):find("several devices", 1, true))
    assert.are.same({ 2, 2 }, g(tide.ones(2, cpu)):totable())
  end)

  it("reports a failing step with its op and the line that captured it", function()
    local src = tide.randn(4, 2)
    local f = tide.jit.compile(function(i) return src:index_select(1, i) end)
    for _ = 1, 3 do f(tide.tensor({ 1, 4 }, "int64")) end
    -- a small replay runs at once and fails at the call; a queued one at the read
    local ok, err = pcall(function() return f(tide.tensor({ 1, 9 }, "int64")):totable() end)
    assert.is_false(ok)
    assert.truthy(err:find("index_select", 1, true), err)
    assert.truthy(err:find("replaying index_select captured at spec/jit_exec_spec.lua:", 1, true), err)
    assert.are.same(src:index_select(1, tide.tensor({ 2, 3 }, "int64")):totable(),
      f(tide.tensor({ 2, 3 }, "int64")):totable())
    tide.sync()   -- the read raised the failure: not again
  end)

  it("draws fresh random numbers at each replay, the eager sequence", function()
    local f = tide.jit.compile(function(x) return x + tide.rand(3) end)
    local function run(g)
      tide.manual_seed(5)
      local r = {}
      for i = 1, 4 do r[i] = g(tide.zeros(3)):totable() end
      return r
    end
    local eager, compiled = run(function(x) return x + tide.rand(3) end), run(f)
    assert.are.same(eager, compiled)
    assert.are_not.same(compiled[3], compiled[4])
  end)

  it("shares arena bytes between values whose lifetimes do not overlap", function()
    local f = tide.jit.compile(function(x)
      local y = x
      for _ = 1, 8 do y = y:matmul(x):tanh() end   -- each product dies after its tanh
      return y
    end, { passes = { fuse = false } })
    local x = tide.randn(64, 64) * 0.1
    for _ = 1, 3 do f(x) end
    local peak = f:memory()
    local one = 64 * 64 * 4
    assert.is_true(peak <= 4 * one, "peak " .. peak)   -- 16 values, at most two live at once, plus the result
    local e = x
    for _ = 1, 8 do e = e:matmul(x):tanh() end
    assert.are.same(e:totable(), f(x):totable())
  end)

  it("starts each replay from the first contents of a tensor made from Lua data and written in place", function()
    for _, passes in ipairs { {}, { plan = false } } do
      local f = tide.jit.compile(function(x)
        local acc = tide.tensor { 0, 0, 0 }
        acc:add_(x)
        acc[2] = 5
        return acc * 2
      end, { passes = passes })
      for i = 1, 5 do
        assert.are.same({ 2 * i, 10, 2 * i }, f(tide.full({ 3 }, i)):totable())
      end
    end
  end)

  it("makes a value copied into a new tensor in that tensor's memory, and runs no copy", function()
    local w = tide.randn(6, 4)
    local elided = tide.jit.compile(function(x)
      local out = tide.empty(3, 4)
      out:copy_(x:matmul(w))
      local flat = tide.empty(12)
      flat:copy_((x:matmul(w) * 2):view(12))   -- a reshape of the value: the same bytes
      return out, flat
    end, { passes = { cse = false } })
    local kept = tide.jit.compile(function(x)
      local y = x:matmul(w)
      local out = tide.empty(3, 4)
      out:copy_(y)
      return out, y                              -- y is handed out too: copied
    end)
    for _ = 1, 3 do elided(tide.randn(3, 6)); kept(tide.randn(3, 6)) end
    assert.truthy(plan_line(elided):find("one task of 3 steps", 1, true), plan_line(elided))
    assert.truthy(plan_line(kept):find("one task of 2 steps", 1, true), plan_line(kept))
    local x = tide.randn(3, 6)
    local out, flat = elided(x)
    assert.are.same(x:matmul(w):totable(), out:totable())
    assert.are.same((x:matmul(w) * 2):view(12):totable(), flat:totable())
    local o2, y = kept(x)
    assert.are.same(x:matmul(w):totable(), o2:totable())
    assert.are.same(x:matmul(w):totable(), y:totable())
    assert.are_not.equal(o2, y)
  end)

  it("keeps a value in memory of its own when a view of it is handed out, though it is also copied", function()
    local w = tide.randn(6, 4)
    local f = tide.jit.compile(function(x)
      local y = x:matmul(w)
      local out = tide.empty(3, 4)
      out:copy_(y)
      return y:view(12), out:sum()
    end, { passes = { cse = false } })
    local xs, got = {}, {}
    for i = 1, 5 do
      xs[i] = tide.randn(3, 6)
      got[i] = f(xs[i])   -- kept while later replays run
    end
    for i = 1, 5 do
      assert.are.same(xs[i]:matmul(w):view(12):totable(), got[i]:totable())
    end
  end)

  -- on the CPU: on a CUDA device a replay from the second on is one device
  -- graph launch, which the trace shows as one "replay"
  it("shows its steps in a trace, each with the line that captured it", H.on_cpu(function()
    local f = tide.jit.compile(function(x) return (x:matmul(x) + 1):relu() end, { passes = { fuse = false } })
    local x = tide.randn(8, 8)
    for _ = 1, 3 do f(x) end
    local path = os.tmpname()
    tide.profile(function() f(x); tide.sync() end, path)
    local fh = assert(io.open(path))
    local text = fh:read("*a")
    fh:close()
    os.remove(path)
    assert.matches('"name":"replay steps"', text)
    for _, op in ipairs { "matmul", "add", "relu" } do
      assert.matches('"name":"' .. op .. '","ph":"X","pid":1,"tid":%-1,[^\n]*jit_exec_spec%.lua:', text)
    end
  end))

  it("lets a graph go while its replay is still queued", function()
    local f = tide.jit.compile(function(x) return x:matmul(x):sum() end)
    local x = tide.randn(200, 200)
    for _ = 1, 3 do f(x) end
    local r = f(x)
    f = nil
    collectgarbage("collect")
    collectgarbage("collect")
    assert.is_true(math.abs(r:item() - x:matmul(x):sum():item()) < 1e-2)
  end)
end)
