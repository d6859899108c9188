-- engine_spec: the asynchronous engine gives the same bits as running every op
-- at once (tide.debug.sync), over random programs of ops on shared tensors,
-- views, in-place writes, copies across the cpu:N devices and tensors dropped
-- while ops on them are pending; plus the engine's devices and sync points.
local tide = require "tide"
local H = require "spec.helpers"

-- A deterministic program: a list of steps over a pool of tensor slots.
local function make_program(seed, n_steps)
  local x = seed
  local function rnd(n)
    x = (x * 1103515245 + 12345) % 2147483648
    return x % n + 1
  end
  local steps = {}
  for i = 1, n_steps do
    steps[i] = { kind = rnd(10), a = rnd(6), b = rnd(6), c = rnd(6), k = rnd(3), v = rnd(5) }
  end
  return steps
end

local devices = { "cpu", "cpu:0", "cpu:1" }

-- Runs a program; returns the final contents of every slot as tables.
local function run_program(steps)
  tide.manual_seed(1)
  local slots = {}
  for i = 1, 6 do
    -- big enough (> 64K elements) that ops on them are queued, not run inline
    slots[i] = (tide.arange(300 * 300):view(300, 300):float() * (i / 90000)):to(devices[i % 3 + 1])
  end
  for _, s in ipairs(steps) do
    local a, b = slots[s.a], slots[s.b]
    if a:device() ~= b:device() then b = b:to(a:device()) end
    if s.kind == 1 then
      slots[s.c] = a + b
    elseif s.kind == 2 then
      slots[s.c] = (a * b):minimum(4):maximum(-4)
    elseif s.kind == 3 then
      a:add_(b * 0.5)
    elseif s.kind == 4 then
      a:narrow(1, s.v, 100):copy_(b:narrow(2, s.v * 10, 100):t())
    elseif s.kind == 5 then
      slots[s.c] = a:t() - s.v
    elseif s.kind == 6 then
      slots[s.c] = a:to(devices[s.k])
    elseif s.kind == 7 then
      a:mul_(0.75)
    elseif s.kind == 8 then
      local tmp = a * 3 + b   -- dropped at once, while ops on it may be pending
      slots[s.c] = tmp:narrow(2, 1, 300) - 1
      tmp = nil
      collectgarbage()
    elseif s.kind == 9 then
      slots[s.c] = tide.where(a:gt(b), a, b)
    else
      a:t():copy_(a)   -- overlapping in-place copy through a view
    end
  end
  local out = {}
  for i = 1, 6 do out[i] = slots[i]:totable() end
  return out
end

local function same_bits(x, y)
  for i = 1, #x do
    local rx, ry = x[i], y[i]
    for r = 1, #rx do
      for c = 1, #rx[r] do
        local u, v = rx[r][c], ry[r][c]
        if not (u == v or (u ~= u and v ~= v)) then return false, string.format("slot %d [%d,%d]: %.9g ~= %.9g", i, r, c, u, v) end
      end
    end
  end
  return true
end

describe("engine", function()
  it("lists the cpu devices and moves tensors between them", function()
    local devs = tide.devices()
    assert.are.equal("cpu", devs[1])
    assert.are.equal("cpu:0", devs[2])
    assert.truthy(#devs >= 3)
    local t = tide.arange(4):to("cpu:1")
    assert.are.equal("cpu:1", t:device())
    assert.are.equal("cpu:1", (t * 2):device())
    H.equal((t * 2):to("cpu"), { 0, 2, 4, 6 })
    assert.are.equal("cpu:0", tide.zeros(2, { device = "cpu:0" }):device())
    assert.has_error(function() return tide.ones(2, { device = "cpu" }) + tide.ones(2):to("cpu:1") end,
      "add: input 2 is on cpu:1 but input 1 is on cpu")
    assert.has_error(function() tide.ones(2):to("cpu:99") end)
  end)

  it("gives the same bits asynchronously as running each op at once (random programs)", function()
    local n = tonumber(os.getenv("TIDE_STRESS") or 200)
    for seed = 1, n do
      local steps = make_program(seed, 12)
      local async = run_program(steps)
      local sync = tide.debug.sync(run_program, steps)
      local ok, where = same_bits(async, sync)
      assert(ok, string.format("program %d differs: %s", seed, where or ""))
    end
  end)

  it("runs independent work on different devices and syncs", function()
    local a = tide.ones(400, 400):to("cpu:0")
    local b = tide.ones(400, 400):to("cpu:1")
    for _ = 1, 20 do a = a * 1.01; b = b + 1 end
    tide.sync()
    assert.is_true(math.abs(a[{ 1, 1 }]:item() - 1.01 ^ 20) < 1e-4)
    assert.are.equal(21, b[{ 400, 400 }]:item())
  end)

  it("switches to synchronous mode for a region", function()
    assert.is_false(tide.debug.is_sync())
    local inside = tide.debug.sync(function() return tide.debug.is_sync() end)
    assert.is_true(inside)
    assert.is_false(tide.debug.is_sync())
  end)
end)

describe("engine diagnostics", function()
  it("writes a Chrome trace of what each device ran", function()
    local path = os.tmpname()
    tide.profile(function()
      local a = tide.ones(300, 300):to("cpu:0")
      local b = tide.ones(300, 300):to("cpu:1")
      local _ = (a + 1):to("cpu"), (b * 2):to("cpu")
      tide.sync()
    end, path)
    local f = assert(io.open(path))
    local text = f:read("*a")
    f:close()
    os.remove(path)
    assert.matches('"traceEvents"', text)
    assert.matches('"name":"add","ph":"X"', text)
    assert.matches('"name":"mul","ph":"X"', text)
    assert.matches('float32 %[300,300%]', text)
    assert.matches('"name":"cpu:1"', text)
  end)

  it("names the failing op, its inputs and the line that enqueued it", function()
    local a = tide.ones(1500, 1500)
    tide.sync()
    local y = a:matmul(a)                    -- queued, and tens of milliseconds long: the next op waits for it
    local bad = tide.tensor({ 1, 1900 }, "int64")
    local line = debug.getinfo(1, "l").currentline + 1
    local z = y:index_select(1, bad)         -- queued too; fails when it runs
    local ok, err = pcall(function() return z:totable() end)
    local wait_line = debug.getinfo(1, "l").currentline - 1
    assert.is_false(ok)
    assert.matches("index_select: index 1900 is out of range for dimension 1 of size 1500", err, 1, true)
    assert.matches("float32 [1500,1500], int64 [2]", err, 1, true)
    assert.matches("enqueued at spec/engine_spec.lua:" .. line, err, 1, true)
    assert.matches("engine_spec.lua:" .. wait_line .. ":", err, 1, true)
    -- poisoned for good, and what reads it fails too; unrelated work goes on
    assert.has_error(function() return z:sum() end)
    tide.sync()                              -- raised above already: not again
    assert.are.equal(1501, (y + 1)[{ 1, 1 }]:item())
  end)

  it("raises each failure once: at the read that meets it, or else at the next tide.sync()", function()
    local a = tide.ones(1500, 1500)
    tide.sync()
    local y = a:matmul(a)                    -- what the failing ops wait for
    local z1 = y:index_select(1, tide.tensor({ 1700 }, "int64"))
    local z2 = y:index_select(1, tide.tensor({ 1800 }, "int64"))
    assert.has_error(function() return z1:totable() end)
    local ok, err = pcall(function() return (z1 + 1):totable() end)   -- z1 stays poisoned
    assert.is_false(ok)
    assert.matches("index 1700 is out of range", err, 1, true)
    ok, err = pcall(tide.sync)               -- z2's, which nothing read
    assert.is_false(ok)
    assert.matches("index 1800 is out of range", err, 1, true)
    assert.is_nil(err:find("1700", 1, true))
    tide.sync()
  end)

  it("runs everything at once with tide.debug.sync, so errors point at the enqueuing line", function()
    local y = tide.zeros(400, 400) + 1
    local bad = tide.tensor({ 500 }, "int64")
    local ok, err = pcall(tide.debug.sync, function() return y:index_select(1, bad) end)
    assert.is_false(ok)
    assert.matches("index_select: index 500 is out of range", err, 1, true)
  end)

  it("reports a wait that sees no progress for TIDE_WATCHDOG seconds, with what it waits on", function()
    -- a child process waits on one long matmul on cpu:1 (a second or more on one core)
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
local tide = require "tide"
local a = tide.ones(3000, 3000, { device = "cpu:1" })
tide.sync()
local c = a:matmul(a)
print("value", c[{ 1, 1 }]:item())
]])
    f:close()
    local p = assert(io.popen("TIDE_WATCHDOG=0.2 luajit " .. script .. " 2>&1"))
    local out = p:read("*a")
    p:close()
    os.remove(script)
    assert.matches("value\t3000", out)
    assert.matches("tide watchdog: a wait has seen no op finish for", out, 1, true)
    assert.matches("matmul%(float32 %[3000,3000%], float32 %[3000,3000%]%) on queue %d+", out)
    assert.matches("enqueued at " .. script:gsub("%p", "%%%0"), out)
  end)
  it("finishes queued work before the process exits", function()
    -- a script that ends with matmuls still queued on every device: before the
    -- fix, OpenBLAS's destructor freed its buffers under running kernels
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
local tide = require "tide"
local r = {}
for _, dev in ipairs(tide.devices()) do
  local a = tide.ones(400, 400, { device = dev })
  for i = 1, 6 do r[#r + 1] = a:matmul(a) end
end
print("queued")
]])
    f:close()
    for _ = 1, 3 do
      local p = assert(io.popen("luajit " .. script .. " 2>&1; echo status $?"))
      local out = p:read("*a")
      p:close()
      assert.are.equal("queued\nstatus 0\n", out)
    end
    os.remove(script)
  end)
end)

describe("the default device", function()
  local initial = tide.get_default_device()
  before_each(function() tide.set_default_device("cpu") end)
  after_each(function() tide.set_default_device(initial) end)

  it("starts as TIDE_DEFAULT_DEVICE says, or cpu", function()
    local tide_bin = (os.getenv("TIDE_LIBRARY") or ""):match("^(.*)/[^/]*$")
    if not tide_bin then
      print("\nskipped: TIDE_LIBRARY is not set, so the tide executable is not known")
      return
    end
    local function run(env)
      local p = assert(io.popen(env .. " " .. tide_bin .. "/tide -e 'print(require[[tide]].get_default_device())' 2>&1"))
      local out = p:read("*a")
      p:close()
      return out
    end
    assert.are.equal("cpu\n", run("TIDE_DEFAULT_DEVICE="))
    assert.are.equal("cpu:1\n", run("TIDE_DEFAULT_DEVICE=cpu:1"))
    assert.matches("TIDE_DEFAULT_DEVICE: device: unknown device 'gpu:3'", run("TIDE_DEFAULT_DEVICE=gpu:3"), 1, true)
  end)

  it("is where creation functions put tensors when their options name none", function()
    assert.are.equal("cpu", tide.get_default_device())
    tide.set_default_device("cpu:1")
    assert.are.equal("cpu:1", tide.get_default_device())
    local made = {
      tensor = tide.tensor({ 1, 2, 3 }), zeros = tide.zeros(2, 3), ones = tide.ones(2), full = tide.full({ 2 }, 7),
      empty = tide.empty(4), rand = tide.rand(3), randn = tide.randn(3), randint = tide.randint(0, 5, { 4 }),
      randperm = tide.randperm(5), arange = tide.arange(5), linspace = tide.linspace(0, 1, 5), eye = tide.eye(3),
    }
    for name, t in pairs(made) do assert.are.equal("cpu:1", t:device(), name) end
    assert.are.same({ 1, 2, 3 }, made.tensor:totable())
    assert.are.same({ 0, 1, 2, 3, 4 }, made.arange:totable())
    -- named devices still win, both ways
    assert.are.equal("cpu", tide.zeros(2, { device = "cpu" }):device())
    assert.are.equal("cpu:0", tide.arange(0, 3, { device = "cpu:0" }):device())
    tide.set_default_device("cpu")
    assert.are.equal("cpu:0", tide.randint(0, 5, { 4 }, { device = "cpu:0" }):device())
    assert.are.equal("cpu:0", tide.eye(2, { device = "cpu:0" }):device())
    assert.are.equal("cpu:0", tide.linspace(0, 1, 3, { device = "cpu:0" }):device())
    assert.are.equal("cpu:0", tide.randperm(3, { device = "cpu:0" }):device())
    assert.are.equal("cpu:0", tide.tensor({ 1 }, { device = "cpu:0" }):device())
    assert.are.equal("cpu", tide.zeros(1):device())
  end)

  it("draws the same random numbers on any device for a seed", function()
    tide.manual_seed(3)
    local a = tide.randn(100)
    tide.manual_seed(3)
    tide.set_default_device("cpu:1")
    local b = tide.randn(100)
    assert.are.same(a:totable(), b:totable())
  end)

  it("refuses a device that is not there, and keeps the one it had", function()
    tide.set_default_device("cpu:0")
    assert.has_error(function() tide.set_default_device("gpu") end,
      "device: unknown device 'gpu' (expected cpu, cpu:N or cuda:N)")
    assert.has_error(function() tide.set_default_device(3) end,
      "set_default_device: expected a device name ('cpu', 'cpu:N', 'cuda:N'), got number")
    if not tide.cuda.is_available() then
      assert.has_error(function() tide.set_default_device("cuda:0") end,
        "device: 'cuda:0': " .. select(2, tide.cuda.is_available()))
    end
    assert.are.equal("cpu:0", tide.get_default_device())
    -- an error inside a creation call with a named device leaves the default as it was
    assert.has_error(function() tide.zeros(-1, { device = "cpu:1" }) end)
    assert.are.equal("cpu:0", tide.get_default_device())
  end)
end)
