-- jit_bench.lua: eager against tide.jit.compile on the same work, in one run.
--   (a) chains of 10 elementwise ops on 4M floats, fused into one kernel when
--       compiled: a memory-bound one (arithmetic on two tensors), next to the same
--       chain written as one plain C loop that reads and writes memory once
--       (bench/ref.c; target: compiled >= 70% of its speed), and, for context, a
--       compute-bound one (exp, tanh and sigmoid dominate) next to a C copy loop
--   (b) the MLP 784-256-256-10 training step (Adam), batch 16 and 128
--       (target: compiled >= 1.3x eager at batch 16)
--   (c) the Fashion-MNIST CNN training step, batch 64
--   (d) the cost per op of a replay on 1-element tensors (target < 100 ns)
-- and the peak memory of (b) and (c) each way (target: compiled <= 0.7x eager).
-- Each case runs in a child process of its own, so its peak is its own.
-- usage: build/tide bench/jit_bench.lua
local tide = require "tide"
local F = tide.nn.functional
local ffi = require "ffi"

ffi.cdef [[ double tide_ref_copy(float * dst, const float * src, int64_t n, int32_t reps);
            double tide_ref_add(float * dst, const float * a, const float * b, int64_t n, int32_t reps);
            double tide_ref_chain(float * dst, const float * x, const float * v, int64_t n, int32_t reps); ]]
-- shared helpers, found beside this script
local common = dofile((debug.getinfo(1, "S").source:sub(2):match("^(.*)/") or ".") .. "/common.lua")
local now = common.now

-- Best of three rounds of `reps` calls, after a warm-up; seconds per call.
local function timed(f, reps)
  for _ = 1, math.max(3, math.floor(reps / 10)) do f() end
  tide.sync()
  local best = math.huge
  for _ = 1, 3 do
    local t0 = now()
    for _ = 1, reps do f() end
    tide.sync()
    best = math.min(best, (now() - t0) / reps)
  end
  return best
end

local model = common.model

-- A child: one training case, eager or compiled: "seconds_per_step peak_bytes".
if arg[1] == "--case" then
  local kind, batch, steps, how = arg[2], tonumber(arg[3]), tonumber(arg[4]), arg[5]
  tide.manual_seed(0)
  local m = model(kind)
  local opt = tide.optim.Adam(m:parameters(), { lr = 1e-3 })
  local x = kind == "mlp" and tide.randn(batch, 784) or tide.randn(batch, 1, 28, 28)
  local y = tide.randint(1, 11, { batch })
  local function step(xb, yb)
    local loss = F.cross_entropy(m(xb), yb)
    opt:zero_grad()
    loss:backward()
    opt:step()
    return loss
  end
  local f = how == "compiled" and tide.jit.compile(step) or step
  for _ = 1, 3 do f(x, y) end   -- warm-up (and capture): the peak counts the steady state
  tide.sync()
  collectgarbage("collect")
  tide.reset_peak_memory()
  local s = timed(function() f(x, y) end, steps)
  print(string.format("%.6f %d", s, tide.memory_stats().peak))
  os.exit(0)
end

local cpu_model = common.cpu_model
print(string.format("machine: %s, %d threads", cpu_model(), tide.get_num_threads()))

-- (a) ---------------------------------------------------------------------------------
do
  local n = 4 * 1024 * 1024
  local x, v = tide.rand(n), tide.rand(n)
  local ref = common.load_ref()
  local ok = ref ~= nil
  local src, src2, dst = ffi.new("float[?]", n), ffi.new("float[?]", n), ffi.new("float[?]", n)
  for i = 0, n - 1 do src[i], src2[i] = math.random(), math.random() end

  -- memory-bound: ten cheap ops, the inputs read and the result written once when fused
  -- (ref.c's tide_ref_chain is the same chain; keep the two in step)
  local function arith(t, u)
    local y = t * 1.5 + u
    y = y:sub(0.25):relu()
    y = y * u - t
    y = y:abs():neg()
    return y:maximum(u) / 3
  end
  local c = tide.jit.compile(arith)
  c(x, v); c(x, v)
  local kernels = c:stats().graphs[1].nodes
  -- interleaved rounds, best of each: the machine may be shared
  local eager, compiled, cloop, addloop = math.huge, math.huge, math.huge, math.huge
  for _ = 1, 5 do
    eager = math.min(eager, timed(function() arith(x, v) end, 5))
    compiled = math.min(compiled, timed(function() c(x, v) end, 10))
    if ok then
      cloop = math.min(cloop, ref.tide_ref_chain(dst, src, src2, n, 10) / 10)
      addloop = math.min(addloop, ref.tide_ref_add(dst, src, src2, n, 10) / 10)
    end
  end
  local line = string.format("(a) memory-bound: 10 arithmetic ops on two 4M-float tensors: eager %.2f ms, compiled " ..
    "%.2f ms (%d kernel)", eager * 1e3, compiled * 1e3, kernels)
  if ok then
    line = line .. string.format("; the chain as one C loop %.2f ms (a C add loop %.2f ms): compiled at %.0f%% of " ..
      "the C loop (target >= 70%%)", cloop * 1e3, addloop * 1e3, 100 * cloop / compiled)
  end
  print(line)

  -- compute-bound, for context: exp, tanh and sigmoid cost more than the memory traffic
  local function chain(t)
    local y = t * 1.5 + 0.5
    y = y:exp():mul(0.25):sub(0.1):relu()
    y = y:tanh():mul(2):add(t):sigmoid()
    return y
  end
  c = tide.jit.compile(chain)
  eager = timed(function() chain(x) end, 10)
  compiled = timed(function() c(x) end, 10)
  line = string.format("(a) compute-bound: 10 elementwise ops with exp, tanh, sigmoid on 4M floats: eager %.2f ms, " ..
    "compiled %.2f ms", eager * 1e3, compiled * 1e3)
  if ok then
    local copy = ref.tide_ref_copy(dst, src, n, 20) / 20
    line = line .. string.format("; C loop reading and writing once %.2f ms: compiled at %.0f%% of it (the " ..
      "transcendentals' compute dominates)", copy * 1e3, 100 * copy / compiled)
  end
  print(line)
end

-- (b), (c) ------------------------------------------------------------------------------
local self = debug.getinfo(1, "S").source:sub(2)
local function child(args)
  local p = assert(io.popen("luajit " .. self .. " " .. args))
  local out = p:read("*a")
  p:close()
  local s, peak = out:match("(%S+) (%S+)")
  return tonumber(s), tonumber(peak)
end
for _, c in ipairs { { "mlp", 16, 400, "(b)" }, { "mlp", 128, 200, "(b)" }, { "cnn", 64, 20, "(c)" } } do
  local es, ep = child(string.format("--case %s %d %d eager", c[1], c[2], c[3]))
  local cs, cp = child(string.format("--case %s %d %d compiled", c[1], c[2], c[3]))
  print(string.format("%s %s batch %d step: eager %.3f ms, compiled %.3f ms (%.2fx); peak memory %.1f / %.1f MiB (%.2fx)",
    c[4], c[1], c[2], es * 1e3, cs * 1e3, es / cs, ep / 2^20, cp / 2^20, cp / ep))
end

-- (d) ---------------------------------------------------------------------------------
do
  local a = tide.ones(1)
  local function chain(t)
    for _ = 1, 100 do t = t + 1 end
    return t
  end
  local c = tide.jit.compile(chain)
  local unfused = tide.jit.compile(chain, { passes = { fuse = false } })
  local eager = timed(function() chain(a) end, 2000)
  local compiled = timed(function() c(a) end, 2000)
  local plain = timed(function() unfused(a) end, 2000)
  print(string.format("(d) 100 dependent adds on 1-element tensors, per op: eager %.0f ns, replay %.0f ns fused " ..
    "(%d kernels), %.0f ns unfused (target < 100)", eager / 100 * 1e9, compiled / 100 * 1e9,
    c:stats().graphs[1].nodes, plain / 100 * 1e9))
end
