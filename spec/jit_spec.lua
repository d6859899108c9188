-- tide.jit: captured training steps give the eager results bit for bit,
-- recapture and its explanation, the errors of what cannot be captured,
-- numbers as graph inputs, static arguments, state bound by reference, one
-- tensor read through several view chains.
local tide = require "tide"
local H = require "spec.helpers"
local nn, F = tide.nn, tide.nn.functional

-- Runs `steps` training steps of a fresh model from `build`, eagerly or
-- compiled, from the same seed; returns the losses and the final parameters.
local function train(build, data, compiled)
  tide.manual_seed(42)
  local model, opt = build()
  local function step(x, y)
    local loss = F.cross_entropy(model(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
    return loss
  end
  local f = compiled and tide.jit.compile(step) or step
  local losses = {}
  for i, d in ipairs(data) do losses[i] = f(d[1], d[2]):item() end
  local params = {}
  for i, p in ipairs(model:parameters()) do params[i] = p:clone() end
  return losses, params, f
end


local function batches(n, shape, classes)
  tide.manual_seed(7)
  local data = {}
  for i = 1, n do data[i] = { tide.randn(shape), tide.randint(1, classes + 1, { shape[1] }) } end
  return data
end

local function same_training(build, data)
  local l1, p1 = train(build, data, false)
  local l2, p2, f = train(build, data, true)
  assert.are.same(l1, l2)
  for i = 1, #p1 do assert.are.equal(0, (p1[i] - p2[i]):abs():max():item(), "parameter " .. i) end
  return f
end

-- Calls fn compiled (a warm-up call, the capture, two replays), replaying as one
-- task and node by node, and asserts that every call returns what fn returns
-- eagerly on args, bit for bit. Returns the first compiled function.
local function same_as_eager(fn, args)
  local want = { fn(unpack(args)) }
  local first
  for _, opts in ipairs { {}, { passes = { plan = false } } } do
    local f = tide.jit.compile(fn, opts)
    for call = 1, 4 do
      local got = { f(unpack(args)) }
      assert.are.equal(#want, #got)
      for i = 1, #want do H.equal(got[i], want[i], string.format("call %d, result %d", call, i)) end
    end
    assert.are.equal(2, f:stats().replays)
    first = first or f
  end
  return first
end

describe("jit.compile", function()
  it("replays an MLP training step with the eager results, bit for bit, over 20 steps", function()
    local f = same_training(function()
      local m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
      return m, tide.optim.Adam(m:parameters(), { lr = 1e-2 })
    end, batches(20, { 5, 8 }, 4))
    local s = f:stats()
    assert.are.equal(1, s.captures)
    assert.are.equal(18, s.replays)   -- one eager warm-up call, one capture
    assert.is_true(s.graphs[1].nodes > 50)
  end)

  it("replays a CNN step with dropout and batch norm (fresh random numbers each replay)", function()
    same_training(function()
      local m = nn.Sequential(nn.Conv2d(1, 4, 3, { padding = 1 }), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.3), nn.Linear(4 * 4 * 4, 3))
      return m, tide.optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
    end, batches(20, { 6, 1, 8, 8 }, 3))
  end)

  it("replays a transformer encoder layer step", function()
    same_training(function()
      local enc = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0.1, batch_first = true })
      local m = nn.Sequential(enc, nn.Flatten(), nn.Linear(4 * 8, 3))
      return m, tide.optim.AdamW(m:parameters(), { lr = 1e-3 })
    end, batches(20, { 2, 4, 8 }, 3))
  end)

  it("replays a step whose backward adds many slices' gradients into one buffer, bit for bit", function()
    local function run(compiled)
      tide.manual_seed(3)
      local w = tide.randn({ 4, 6 }, { requires_grad = true })
      local u = tide.randn({ 6, 6 }, { requires_grad = true })
      local opt = tide.optim.SGD({ w, u }, { lr = 0.01 })
      local function step(x)
        local g = x:matmul(w)                          -- [5, 3, 6], one slice per step
        local h = tide.zeros(3, 6)
        for _, p in ipairs(g:unbind(1)) do h = (p + h:matmul(u)):tanh() end
        local loss = h:sum() + g:narrow(1, 2, 3):pow(2):mean() + (g * 0.5):mean() + w:select(1, 2):sum()
        opt:zero_grad()
        loss:backward()
        opt:step()
        return loss
      end
      local f = compiled and tide.jit.compile(step) or step
      local losses = {}
      tide.manual_seed(9)
      for i = 1, 6 do losses[i] = f(tide.randn(5, 3, 4)):item() end
      return losses, w:clone(), u:clone(), f
    end
    local l1, w1, u1 = run(false)
    local l2, w2, u2, f = run(true)
    assert.are.same(l1, l2)
    assert.are.equal(0, (w1 - w2):abs():max():item())
    assert.are.equal(0, (u1 - u2):abs():max():item())
    assert.are.equal(1, f:stats().captures)
  end)

  it("updates the Lua-visible parameters in place, and sets their gradients", function()
    local m = nn.Linear(3, 1)
    local w = m.weight
    local opt = tide.optim.SGD(m:parameters(), { lr = 0.1 })
    local step = tide.jit.compile(function(x)
      local loss = m(x):sum()
      opt:zero_grad()
      loss:backward()
      opt:step()
      return loss
    end)
    local x = tide.ones(2, 3)
    local before = w:clone()
    for _ = 1, 4 do step(x) end
    assert.are.equal(w, m.weight)                        -- the same tensor, not a copy
    H.close(m.weight, before - 0.4 * 2, 1e-5, 1e-6)      -- d(sum)/dw = 2 per element, 4 steps of 0.1
    H.close(w.grad, { { 2, 2, 2 } })
  end)

  it("recaptures for a new shape and says why", function()
    local f = tide.jit.compile(function(x) return x * 2 end, { warmup = 0 })
    local cpu = { device = "cpu" }   -- the message names it, whatever the default device
    H.close(f(tide.ones(2, cpu)), { 2, 2 })
    H.close(f(tide.ones(3, cpu)), { 2, 2, 2 })
    H.close(f(tide.ones(3, cpu)), { 2, 2, 2 })
    assert.are.equal(2, f:stats().captures)
    assert.are.equal(1, f:stats().replays)
    assert.are.equal("capture 1: first call with this signature: float32 cpu [2]\n" ..
      "capture 2: new signature: argument 1 changed from float32 cpu [2] to float32 cpu [3]; shapes that keep " ..
      "changing recapture every time: pad or bucket them, or run eagerly", f:explain())
  end)

  it("makes Lua numbers inputs of the graph, and bakes static ones in", function()
    local f = tide.jit.compile(function(x, a) return x * a end, { warmup = 0 })
    H.close(f(tide.ones(2), 3), { 3, 3 })
    H.close(f(tide.ones(2), 5), { 5, 5 })
    assert.are.equal(1, f:stats().captures)
    local g = tide.jit.compile(function(x, a) return x * a end, { warmup = 0, static = { 2 } })
    H.close(g(tide.ones(2), 3), { 3, 3 })
    H.close(g(tide.ones(2), 5), { 5, 5 })
    assert.are.equal(2, g:stats().captures)
  end)

  it("refuses to read a value during capture, naming the line", function()
    local f = tide.jit.compile(function(x)
      if x:sum():item() > 0 then return x end
      return -x
    end, { warmup = 0 })
    local line = debug.getinfo(1, "l").currentline - 3
    local ok, err = pcall(f, tide.ones(2))
    assert.is_false(ok)
    assert.matches("jit_spec.lua:" .. line .. ": jit capture: item%(%) reads a tensor's value while the function is " ..
      "being captured", err)
    assert.matches("tide.where", err)
  end)

  it("refuses math.random and io during capture, and restores them", function()
    local f = tide.jit.compile(function(x) return x * math.random() end, { warmup = 0 })
    assert.has_error(function() f(tide.ones(2)) end, "jit capture: math.random draws in Lua; use " ..
      "tide.rand/randn/randint inside the function, which a replay could not do again; do it outside the " ..
      "compiled function")
    assert.is_number(math.random())
  end)

  it("warns about tensors made during capture and kept without being returned", function()
    local kept = {}
    local f = tide.jit.compile(function(x)
      kept.t = x + 1
      return x * 2
    end, { warmup = 0 })
    f(tide.ones(2))
    assert.matches("warning: tensors made during capture are still held but not returned %(a replay will not " ..
      "update them%): float32 %[2%] made by 'add' at .*jit_spec.lua:%d+", f:explain())
  end)

  it("does not take what the history of an unused result holds for a tensor kept by mistake", function()
    -- the graph alone holds an unused result, and with it what its history
    -- saved (an alias of x * w for abs, exp's own result) and its leaves
    local w = tide.randn(3, 4, { requires_grad = true })
    local fns = {
      norm = function(x) return tide.norm(x * w, 2, { 2 }, true) end,
      unused_abs = function(x) local y = x * w; local _ = y:abs(); return y:sum(2, true) end,
      unused_exp = function(x) local y = x * w; local _ = y:exp(); return y end,
      unused_leaf = function(x) local p = tide.zeros(3, 4):requires_grad_(); local _ = x * p; return x + 1 end,
      training_step = function(x)
        local loss = tide.norm(x * w, 2, { 2 }, true):sum()
        loss:backward()
        return loss
      end,
    }
    for name, fn in pairs(fns) do
      local f = tide.jit.compile(fn, { warmup = 0 })
      f(tide.randn(3, 4))
      assert.is_nil(f:explain():find("warning", 1, true), name .. ": " .. f:explain())
    end
  end)

  it("still warns about a leaf made during capture that a history and Lua both hold", function()
    local kept = {}
    local f = tide.jit.compile(function(x)
      kept.p = tide.zeros(2):requires_grad_()
      return x * kept.p
    end, { warmup = 0 })
    f(tide.ones(2))
    assert.matches("warning: tensors made during capture are still held but not returned %(a replay will not " ..
      "update them%): float32 %[2%] made by 'full' at .*jit_spec.lua:%d+", f:explain())
  end)

  it("replays where with a broadcast condition and norm with keepdim as eager", function()
    local w = tide.randn(3, 4, { requires_grad = true })
    local fns = {
      where_broadcast = function(x) return tide.where(x:gt(0):sum(2, true):gt(0), x, x * 2) end,
      where_broadcast_grad = function(x)
        local y = x * w
        return tide.where(y:gt(0):sum(2, true):gt(0), y, y * 2)
      end,
      norm_keepdim = function(x) return tide.norm(x, 2, { 2 }, true) end,
      norm_keepdim_grad = function(x) return tide.norm(x * w, 2, { 2 }, true) end,
    }
    for name, fn in pairs(fns) do
      local f = tide.jit.compile(fn, { warmup = 0 })
      -- the second has a row whose condition is false, and one whose norm is 0
      local xs = { tide.randn(3, 4), tide.tensor({ { 1, -2, 3, -4 }, { 0, 0, 0, 0 }, { -1, -2, -3, -4 } }),
                   tide.randn(3, 4) }
      for i, x in ipairs(xs) do
        H.close(f(x), fn(x), 1e-6, 1e-6, name .. ", call " .. i)
      end
      assert.is_nil(f:explain():find("warning", 1, true), name .. ": " .. f:explain())
    end
  end)

  it("returns several tensors and tables of tensors", function()
    local f = tide.jit.compile(function(x) return x + 1, { a = x * 2, b = x:sum() } end, { warmup = 0 })
    for _ = 1, 2 do
      local y, t = f(tide.ones(2))
      H.close(y, { 2, 2 })
      H.close(t.a, { 2, 2 })
      H.close(t.b, 2)
    end
    local g = tide.jit.compile(function(x) return x:sum():item() end, { warmup = 0 })
    assert.has_error(function() g(tide.ones(2)) end)
    local h = tide.jit.compile(function(x) return 3 end, { warmup = 0 })
    assert.has_error(function() h(tide.ones(2)) end, "jit capture: result 1 is a number; a replay returns tensors " ..
      "only (return a 0-d tensor, and call :item() outside)")
  end)

  it("runs compiled functions inside compiled functions", function()
    local inner = tide.jit.compile(function(x) return x:exp() end, { warmup = 0 })
    inner(tide.zeros(2))   -- captured
    local outer = tide.jit.compile(function(x) return inner(x) * 2 end, { warmup = 0 })
    for _ = 1, 3 do H.close(outer(tide.zeros(2)), { 2, 2 }) end
    assert.are.equal(2, outer:stats().replays)
  end)

  it("gives up capturing after max_cache signatures and runs eagerly", function()
    local f = tide.jit.compile(function(x) return x + 1 end, { warmup = 0, max_cache = 2 })
    for n = 1, 4 do H.close(f(tide.zeros(n)), tide.ones(n)) end
    assert.are.equal(2, f:stats().captures)
    assert.matches("gave up capturing after 2 signatures", f:explain())
  end)

  it("keeps at most two replays in flight, so a loop's memory stays low", function()
    tide.manual_seed(0)
    local m = nn.Linear(512, 512)
    local opt = tide.optim.Adam(m:parameters(), { lr = 1e-3 })
    local x = tide.randn(8, 512)
    local step = tide.jit.compile(function(xb)
      local loss = m(xb):pow(2):mean()
      opt:zero_grad()
      loss:backward()
      opt:step()
      return loss
    end)
    for _ = 1, 3 do step(x) end
    tide.sync()
    collectgarbage("collect")
    local base = H.mem_stats().in_use
    H.reset_peak()
    for _ = 1, 100 do step(x) end   -- each step makes about 10 MiB of temporaries (1 MiB weights, Adam)
    tide.sync()
    local grew = H.mem_stats().peak - base
    assert.is_true(grew < 40 * 2^20, string.format("peak grew by %.1f MiB", grew / 2^20))
  end)

  it("drops dead code and merges repeated work, each pass switchable", function()
    local function fn(x)
      local _ = x:exp() * 3           -- dead: nothing reads it
      local a = (x * 2):sin()
      local b = (x * 2):sin()         -- repeats a
      x:mul(1)                        -- dead too
      return a + b
    end
    local counts = {}
    for name, passes in pairs { all = { fuse = false, fold = false, simplify = false },   -- DCE and CSE alone
                                no_cse = { cse = false, fuse = false, fold = false, simplify = false },
                                none = { cse = false, dce = false, fuse = false, fold = false, simplify = false } } do
      local f = tide.jit.compile(fn, { warmup = 0, passes = passes })
      for _ = 1, 2 do H.close(f(tide.ones(2)), { 2 * math.sin(2), 2 * math.sin(2) }, 1e-6, 1e-6) end
      counts[name] = f:stats().graphs[1].nodes
    end
    assert.are.equal(3, counts.all)        -- mul, sin, add, and nothing else
    assert.are.equal(5, counts.no_cse)     -- the second mul and sin stay
    assert.are.equal(8, counts.none)       -- exp, mul, mul, sin, mul, sin, mul, add
    assert.has_error(function() tide.jit.compile(fn, { passes = { unroll = false } }) end,
      "jit.compile: unknown pass 'unroll' (dce, cse, fuse, fold, simplify, plan)")
  end)

  it("replays one captured tensor read through two view chains that differ in shape alone", function()
    tide.manual_seed(1)
    local w = tide.randn(2, 2, 3, 3)
    local f = same_as_eager(function(x)
      return x * w:unsqueeze(1):sum() + x * w:view(2, 2, 9):narrow(3, 1, 3):unsqueeze(3):sum()
    end, { tide.randn(3) })
    local _, views = f:graph():gsub("= view%(", "")
    assert.are.equal(3, views)   -- unsqueeze(1), view(2,2,9) and unsqueeze(3): none merged
    same_as_eager(function(x)    -- merged, the slice would clamp to the wrong view and sum silently
      return x * w:unsqueeze(1):sum() + x * w:view(4, 9):narrow(2, 2, 3):sum()
    end, { tide.randn(3) })
  end)

  it("replays a tensor through three chains, chains that differ in a later step, and expands", function()
    tide.manual_seed(2)
    local w, v = tide.randn(2, 2, 3, 3), tide.randn(3, 1)
    same_as_eager(function(x)
      local a = w:unsqueeze(1):sum(1)                         -- [2,2,3,3]
      local b = w:view(4, 9):narrow(2, 2, 3)                  -- [4,3]
      local c = w:reshape(36):narrow(1, 5, 12):view(3, 4)     -- [3,4]
      return a * x, b * x, c:t():contiguous()
    end, { tide.randn(3) })
    same_as_eager(function(x)
      local a = w:view(4, 9):view(36)                         -- the first step shared, the second not
      local b = w:view(4, 9):view(6, 6)
      local c = v:unsqueeze(1):expand(2, 3, 4)
      local d = v:unsqueeze(1):expand(5, 3, 4)                -- expands differing in their shape alone
      local e = v:expand(3, 2)
      return a:sum() * x, b:sum(2), c:sum(1), d:sum(1) + x:view(1, 4), e + 1
    end, { tide.randn(4) })
  end)

  it("replays a view of a view used twice, and shares a chain that repeats", function()
    tide.manual_seed(3)
    local w = tide.randn(2, 2, 3, 3)
    same_as_eager(function(x)
      local vv = w:view(4, 9):narrow(1, 2, 2)                 -- [2,9], a view of a view
      return vv * x, vv:view(18):sum(), vv:unsqueeze(2):sum(3), vv:t():sum(2)
    end, { tide.randn(9) })
    local function fn(x) return w:view(4, 9):sum(1) * x + w:view(4, 9):sum(1) end
    local f = same_as_eager(fn, { tide.randn(9) })
    local _, views = f:graph():gsub("= view%(", "")
    assert.are.equal(1, views)                                -- the same chain: merged
    local unmerged = tide.jit.compile(fn, { warmup = 0, passes = { cse = false } })
    unmerged(tide.randn(9))
    _, views = unmerged:graph():gsub("= view%(", "")
    assert.are.equal(2, views)
  end)

  it("replays a graph argument read through different view chains", function()
    tide.manual_seed(4)
    same_as_eager(function(x, y)
      local a = x:unsqueeze(1) * y:view(12, 1)                -- [12,12]
      local b = x:view(2, 6):narrow(2, 2, 4):unsqueeze(3)     -- [2,4,1]
      local c = x:view(3, 4):t():reshape(12)
      return a:sum(1), b * y:view(1, 1, 12), c + x, x:expand(2, 12):sum(1)
    end, { tide.randn(12), tide.randn(12) })
  end)

  it("trains a parameter read through several views with the eager gradients, bit for bit", function()
    -- with an optimizer step, which writes the parameter in place, and with gradients alone
    local function run(compiled, with_opt)
      tide.manual_seed(5)
      local p = tide.randn(2, 3, 4, { requires_grad = true })
      local opt = tide.optim.SGD({ p }, { lr = 0.1, momentum = 0.9 })
      local function step(x)
        local a = p:view(6, 4):matmul(x)                                   -- [6]
        local b = p:unsqueeze(1):narrow(4, 2, 2):reshape(2, 6)             -- [2,6]
        local c = p:permute(3, 1, 2):reshape(4, 6)                         -- [4,6]
        local loss = (a * a):sum() + (b * b):sum() + (c:t():matmul(x) * a):sum()
        opt:zero_grad()
        loss:backward()
        if with_opt then opt:step() end
        return loss, p.grad:clone()
      end
      local f = compiled and tide.jit.compile(step) or step
      local losses, grads = {}, {}
      for i = 1, 6 do
        tide.manual_seed(10 + i)
        losses[i], grads[i] = f(tide.randn(4))
      end
      return losses, grads, p, f
    end
    for _, with_opt in ipairs { true, false } do
      local l1, g1, p1 = run(false, with_opt)
      local l2, g2, p2, f = run(true, with_opt)
      for i = 1, #l1 do
        H.equal(l2[i], l1[i], "loss " .. i)
        H.equal(g2[i], g1[i], "gradient " .. i)
      end
      H.equal(p2, p1)
      assert.are.equal(4, f:stats().replays)
    end
  end)

  it("keeps creation ops that differ in their device alone apart", function()
    local function fn(x) return x + tide.ones(3, { device = "cpu" }), tide.ones(3, { device = "cpu:1" }) * 2 end
    for _, passes in ipairs { {}, { fold = false } } do   -- folded into constants, or replayed
      local f = tide.jit.compile(fn, { passes = passes })
      for _ = 1, 4 do
        local a, b = f(tide.ones(3, { device = "cpu" }))
        H.equal(a, { 2, 2, 2 })
        H.equal(b, { 2, 2, 2 })
        assert.are.equal("cpu:1", b:device())
      end
    end
  end)

  it("keeps what replays must do though nothing reads it: in-place updates, gradients, random draws", function()
    local state = tide.zeros(2)
    local f = tide.jit.compile(function(x)
      state:add_(x)                   -- a tensor bound by reference
      local _ = tide.rand(3)          -- a draw: later draws depend on it
      return x * 1
    end, { warmup = 0 })
    for _ = 1, 3 do f(tide.ones(2)) end
    H.close(state, { 3, 3 })
    assert.matches("rand%(", f:graph())
  end)

  it("reports the replay's peak memory with its largest buffers, and draws the graph", function()
    local f = tide.jit.compile(function(x)
      local big = x:expand(256, 1024):exp()      -- 1 MiB
      return big:sum(1)
    end, { warmup = 0 })
    f(tide.ones(1024))
    local peak, largest = f:memory()
    assert.is_true(peak >= 2^20 and peak < 2^20 + 8192, "peak " .. peak)
    assert.matches("^1%.00 MiB: float32 %[256,1024%] made by 'exp' at .*jit_spec.lua:%d+", largest)
    assert.are.equal(peak, f:stats().graphs[1].peak_bytes)
    local path = os.tmpname()
    local dot = f:dot(path)
    assert.matches("^digraph tide {", dot)
    assert.matches('label="exp"', dot)
    local fh = io.open(path)
    assert.are.equal(dot, fh:read("*a"))
    fh:close()
    os.remove(path)
  end)

  it("fuses chains of elementwise ops into one kernel with the same results", function()
    local function chain(t, u)
      local y = t * 1.5 + 0.5
      y = y:exp():mul(0.25):sub(u):relu()     -- u broadcasts
      return y:tanh():mul(2):add(t):sigmoid()
    end
    for _, dtype in ipairs { "float32", "float64" } do
      local x = tide.rand({ 300, 70 }, { dtype = dtype }):t()   -- not contiguous
      local u = tide.rand({ 300 }, { dtype = dtype })
      local f = tide.jit.compile(chain, { warmup = 0 })
      local want = chain(x, u)
      for _ = 1, 2 do assert.are.equal(0, (f(x, u) - want):abs():max():item()) end
      assert.are.equal(1, f:stats().graphs[1].nodes)
      assert.matches("= fused%(", f:graph())
      local g = tide.jit.compile(chain, { warmup = 0, passes = { fuse = false } })
      g(x, u)
      assert.are.equal(10, g:stats().graphs[1].nodes)
    end
  end)

  it("ends a fused chain where an intermediate result is needed elsewhere", function()
    local f = tide.jit.compile(function(t)
      local a = (t * 2):exp()
      local b = a:sin():cos()
      return a, b       -- a is an output: it must be written out
    end, { warmup = 0 })
    local x = tide.rand(5)
    f(x)
    local a, b = f(x)
    H.close(a, (x * 2):exp(), 0, 0)
    H.close(b, (x * 2):exp():sin():cos(), 0, 0)
    assert.are.equal(2, f:stats().graphs[1].nodes)
  end)

  it("folds what depends on constants only, and simplifies x*1, x+0, x/1 and transposes that cancel", function()
    local function fn(x)
      local mask = tide.ones(4, 4):triu(1):mul(-1e9)   -- constants only
      local y = (x * 1 + 0) / 1
      return (y:t():t() + mask):softmax(2)
    end
    local x = tide.randn(4, 4)
    local want = fn(x)
    local f = tide.jit.compile(fn, { warmup = 0, passes = { fuse = false } })
    for _ = 1, 2 do assert.are.equal(0, (f(x) - want):abs():max():item()) end
    assert.are.equal(2, f:stats().graphs[1].nodes)   -- add, softmax
    local g = tide.jit.compile(fn, { warmup = 0, passes = { fuse = false, fold = false, simplify = false } })
    for _ = 1, 2 do assert.are.equal(0, (g(x) - want):abs():max():item()) end
    assert.is_true(g:stats().graphs[1].nodes >= 8)
  end)

  it("does not fold a constant that is written in place later, nor one it returns", function()
    local f = tide.jit.compile(function(x)
      local acc = tide.zeros(3)
      acc:add_(x)                 -- in place: must start from zero at every replay
      return acc, tide.ones(2)    -- a returned tensor must be new each time
    end, { warmup = 0 })
    local a1, o1 = f(tide.ones(3))
    local a2, o2 = f(tide.ones(3))
    H.close(a2, { 1, 1, 1 })
    assert.are_not.equal(o1, o2)
    o1:fill_(5)
    H.close(o2, { 1, 1 })
    local _ = a1
  end)

  it("check mode runs eager and compiled side by side and names the op that reads a changed Lua number",
    function()
    local scale = 2
    local w = tide.ones(3)
    local f = tide.jit.compile(function(x)
      w:mul_(scale)              -- a number read from an upvalue: a constant of the graph
      return x * w
    end, { warmup = 0, check = true })
    local line = debug.getinfo(1, "l").currentline - 3
    f(tide.ones(3))              -- captured: w = 2
    H.close(f(tide.ones(3)), { 4, 4, 4 })   -- replayed and checked: agree
    assert.are.equal("", f:explain():match("check:.*") or "")
    scale = 3                    -- eager now multiplies by 3, the graph still by 2
    local r = f(tide.ones(3))
    H.close(r, { 12, 12, 12 })   -- the eager result stands
    H.close(w, { 12, 12, 12 })
    assert.are.equal("check: op `mul_` at spec/jit_spec.lua:" .. line .. " reads a Lua number that has changed since "
      .. "capture (a constant of the graph: 2 then, 3 now); result 1 differs from the eager run by 4",
      f:explain():match("check:[^\n]*"))
    -- a correct training step checks clean
    local m = nn.Linear(4, 2)
    local opt = tide.optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
    local step = tide.jit.compile(function(x)
      local loss = m(x):pow(2):sum()
      opt:zero_grad(); loss:backward(); opt:step()
      return loss
    end, { check = true })
    for _ = 1, 5 do step(tide.randn(3, 4)) end
    assert.is_nil(step:explain():match("check:"))
  end)

  it("check mode names the op inside a fused chain whose Lua number changed, and another path taken",
    function()
    local scale, hi, branch = 2, 10, true
    local f = tide.jit.compile(function(x)
      local y = (x * 3):exp()
      y = y * scale              -- a number in a fused chain: an input of the fused kernel
      y = y:clamp(0, hi)         -- a number among an op's parameters
      if branch then return (y:tanh()) end   -- (): not a tail call, so the op knows its line
      return (y:sigmoid())
    end, { warmup = 0, check = true })
    local line = debug.getinfo(1, "l").currentline - 6
    local x = tide.rand(4, 5)
    f(x)
    assert.are.equal(1, f:stats().graphs[1].nodes)   -- mul exp mul clamp tanh, fused
    f(x)
    assert.is_nil(f:explain():match("check:"))
    scale = 3
    f(x)
    assert.matches("check: op `mul` at spec/jit_spec.lua:" .. line + 1 .. " reads a Lua number that has changed "
      .. "since capture %(a constant of the graph: 2 then, 3 now%); result 1 differs from the eager run by",
      f:explain())
    scale, hi = 2, 1
    f(x)
    assert.matches("check: op `clamp` at spec/jit_spec.lua:" .. line + 2 .. " %(one of the fused ops `mul exp mul "
      .. "clamp tanh` ending at spec/jit_spec.lua:" .. line + 3 .. ", which make value %%%d+, float32 %[4,5%]%) differs from the "
      .. "eager run by [%d.e-]+; its inputs agree; its number parameter 2 was 10 at capture and is 1 now %(a Lua "
      .. "number or option it was given has changed since capture%)", f:explain())
    hi, branch = 10, false
    f(x)
    assert.matches("check: the eager run took another path at its op 5, op `sigmoid` at spec/jit_spec.lua:"
      .. line + 4 .. ", where the capture had `tanh`", f:explain())
  end)

  it("check mode names the op that reads a tensor made from Lua data that has changed since capture",
    function()
    local weights = { 1, 2, 3 }
    local f = tide.jit.compile(function(x) return (x:matmul(tide.tensor(weights))) end, { warmup = 0, check = true })
    local line = debug.getinfo(1, "l").currentline - 1
    f(tide.ones(2, 3))
    weights[2] = 5
    H.close(f(tide.ones(2, 3)), { 9, 9 })
    -- on another device than cpu (cpu:1, cuda:0), the tensor is made on cpu and
    -- copied there: the copy reads it first
    local reader = tide.get_default_device() == "cpu" and "matmul" or "copy_"
    assert.are.equal("check: op `" .. reader .. "` at spec/jit_spec.lua:" .. line .. " reads value %1 (float32 [3], made from "
      .. "Lua data during capture: a constant of the graph), which differs from the eager run by 3; result 1 "
      .. "differs from the eager run by 3", f:explain():match("check:[^\n]*"))
  end)

  it("check mode leaves the eager run's results, writes and draws, and holds nothing afterwards", function()
    local function build()
      tide.manual_seed(3)
      local m = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 2))
      return m, tide.optim.Adam(m:parameters(), { lr = 1e-2 })
    end
    local data = batches(8, { 4, 6 }, 2)
    local function run(opts)
      local m, opt = build()
      local step = function(x, y)
        local loss = F.cross_entropy(m(x), y)
        opt:zero_grad(); loss:backward(); opt:step()
        return loss
      end
      if opts then step = tide.jit.compile(step, opts) end
      local losses = {}
      for i, d in ipairs(data) do losses[i] = step(d[1], d[2]):item() end
      return losses, m:parameters()[1]:clone(), step
    end
    local l1, p1 = run(nil)
    local l2, p2, step = run({ check = true })
    assert.are.same(l1, l2)
    assert.are.equal(0, (p1 - p2):abs():max():item())
    assert.is_nil(step:explain():match("check:"))
    assert.are.equal(6, step:stats().replays)
    -- what a check holds goes with it
    local _, _, again = run({ check = true })
    local x, y = data[1][1], data[1][2]
    again(x, y)
    local Bn = require "bindings.ffi"
    tide.sync()
    Bn.collect()
    local before, bytes = #Bn.live_tensors(), H.mem_stats().in_use
    for _ = 1, 5 do again(x, y) end
    tide.sync()
    Bn.collect()
    -- no growth (on another default device than cpu, what earlier runs left may
    -- still go meanwhile: fewer is fine)
    local after, after_bytes = #Bn.live_tensors(), H.mem_stats().in_use
    assert.is_true(after <= before, ("%d live tensors, %d before"):format(after, before))
    assert.is_true(after_bytes <= bytes, ("%d bytes in use, %d before"):format(after_bytes, bytes))
  end)

  it("recaptures when a captured tensor is another one: model:to(dtype), model:to(device), a new parameter", function()
    local m = nn.Sequential(nn.Linear(3, 2)):to("cpu")   -- the messages name it, whatever the default device
    local f = tide.jit.compile(function(x)
      return tide.no_grad(function() return m(x:to(m[1].weight:device())) end)
    end)
    local x = tide.randn(4, 3, { device = "cpu" })
    for _ = 1, 20 do f(x) end
    assert.are.equal(1, f:stats().captures)                   -- an unchanged model: no recapture
    assert.are.equal(18, f:stats().replays)
    m:to("float64")
    local y = f(x)                                           -- recaptured (an eager warm-up call first)
    assert.are.equal("float64", y:dtype())
    H.close(y, m(x), 1e-12, 1e-12)
    for _ = 1, 3 do assert.are.equal("float64", f(x):dtype()) end
    assert.are.equal(2, f:stats().captures)
    assert.are.equal("capture 2: captured tensor upvalue m -> [1] -> weight is a different tensor (float64 [2,3] "
      .. "instead of float32 [2,3]): recaptured", f:explain():match("capture 2:[^\n]*"))
    m:to("cpu:1")
    for _ = 1, 3 do y = f(x) end
    assert.are.equal("cpu:1", y:device())
    assert.matches("capture 3: captured tensor upvalue m %-> %[1%] %-> weight is a different tensor %(float64 %[2,3%] "
      .. "on cpu:1 instead of float64 %[2,3%] on cpu%): recaptured", f:explain())
    m:to("cpu")
    for _ = 1, 3 do y = f(x) end
    assert.matches("capture 4: captured tensor upvalue m %-> %[1%] %-> weight is a different tensor %(float64 %[2,3%] "
      .. "on cpu instead of float64 %[2,3%] on cpu:1%): recaptured", f:explain())
    m[1].weight = tide.zeros(2, 3, { dtype = "float64", device = "cpu" })   -- a new parameter
    for _ = 1, 3 do y = f(x) end
    H.close(y, m[1].bias:expand(4, 2), 0, 0)
    assert.matches("capture 5: captured tensor upvalue m %-> %[1%] %-> weight is a different tensor %(float64 %[2,3%] "
      .. "instead of float64 %[2,3%]%): recaptured", f:explain())
    assert.are.equal(5, f:stats().captures)
    assert.is_nil(f:explain():match("warning"))
  end)

  it("replays a creation op (no tensor inputs) on the device it was captured on, whatever the default is now", function()
    local f = tide.jit.compile(function(x) return x + tide.rand(2, 3) end)
    local x = tide.zeros(2, 3, { device = "cpu:1" })
    local initial = tide.get_default_device()
    finally(function() tide.set_default_device(initial) end)   -- the suite may run on another default device
    tide.set_default_device("cpu:1")
    local ok, err = pcall(function()
      for _ = 1, 2 do f(x) end                              -- a warm-up call, then the capture
    end)
    tide.set_default_device(initial == "cpu:1" and "cpu" or initial)   -- another default than the capture's
    assert(ok, err)
    for _ = 1, 3 do
      tide.manual_seed(9)
      local y = f(x)
      assert.are.equal("cpu:1", y:device())
      tide.manual_seed(9)
      H.close(y, tide.rand(2, 3), 0, 0)                      -- the same draws as an eager rand
    end
    assert.are.equal(1, f:stats().captures)
  end)

  it("recaptures, after a warm-up step, when the optimizer whose state it captured is replaced", function()
    local function build() local m = nn.Linear(4, 3); return m, tide.optim.Adam(m:parameters(), { lr = 1e-2 }) end
    local data = batches(12, { 5, 4 }, 3)
    local function run(compiled, log)
      tide.manual_seed(5)
      local m, opt = build()
      local step = function(x, y)
        local loss = F.cross_entropy(m(x), y)
        opt:zero_grad(); loss:backward(); opt:step()
        return loss
      end
      local f = compiled and tide.jit.compile(step, { log = log }) or step
      local losses = {}
      for i, d in ipairs(data) do
        if i == 6 then opt = tide.optim.Adam(m:parameters(), { lr = 1e-2 }) end   -- fresh state
        losses[i] = f(d[1], d[2]):item()
      end
      return losses, f
    end
    local l1 = run(false)
    local l2, f = run(true)
    assert.are.same(l1, l2)
    assert.are.equal(2, f:stats().captures)
    assert.are.equal(8, f:stats().replays)   -- calls 1 and 6 warm up, 2 and 7 capture
    assert.are.equal("capture 2: captured tensor upvalue opt -> _hy -> [upvalue opt -> param_groups -> [1]] -> dev -> "
      .. tide.get_default_device() .. " -> beta1 is no longer there (the path leads to nil): recaptured",
      f:explain():match("capture 2:[^\n]*"))
  end)

  it("lists the captured tensors that no path from the function's upvalues reaches", function()
    local Class = { scale = tide.full({ 3 }, 2) }          -- read through a metatable: not followed
    local obj = setmetatable({}, { __index = Class })
    local w = tide.ones(3)
    local f = tide.jit.compile(function(x) return x * w * obj.scale end, { warmup = 0 })
    local line = debug.getinfo(1, "l").currentline - 1
    for _ = 1, 3 do H.close(f(tide.ones(3)), { 2, 2, 2 }) end
    assert.are.equal("unchecked: capture 1 binds 1 tensor that no path from the function's upvalues reaches, so "
      .. "replacing it will not recapture: float32 [3] read at spec/jit_spec.lua:" .. line,
      f:explain():match("unchecked:[^\n]*"))
  end)

  it("rejects bad arguments", function()
    assert.has_error(function() tide.jit.compile(3) end, "jit.compile: argument 1 must be a function, got number")
    assert.has_error(function() tide.jit.compile(print, { bogus = 1 }) end, "jit.compile: unknown option 'bogus'")
    local f = tide.jit.compile(function(t) return t[1] end)
    assert.has_error(function() f({ tide.ones(1) }) end)
  end)
end)

describe("jit compiled functions dropped while their replays run", function()
  it("keep the graph's fused chains until the replays' tasks ran", function()
    -- a replay node by node (the result needs autograd history) queues fused
    -- tasks that read the graph's chains; the function is collected right after
    -- (a use after free under ASan before the tasks held the graph)
    local F = tide.nn.functional
    local target = tide.tensor({ 1, 2, 3, 1 }, { dtype = "int64" })
    for _ = 1, 40 do
      for _, g in ipairs { false, true } do
        local w = tide.randn(4, 3, { requires_grad = g })
        local x = tide.randn(4, 3)
        local f = tide.jit.compile(function(a) return F.cross_entropy((a * w):tanh() * 2, target) end, { warmup = 0 })
        f(x)
        local y = f(x)
        f = nil
        collectgarbage()
        assert.is_true(y:item() > 0)
      end
    end
  end)
end)
