-- jit fusion on a CUDA device: chains of elementwise ops become one kernel that
-- libtide writes over the unfused kernels' own functions (runtime/src/cuda/
-- ewmath.cuh) and the backend compiles with NVRTC (graph/fuse_cuda.c). Every op
-- with a fused form runs inside a chain here, with broadcast rows, strided
-- views and host numbers, in float32 and float64 and (computed in float32,
-- each step's result rounded to its storage as the ops one by one store it)
-- float16 and bfloat16, and the compiled results must equal the eager ones on
-- the same device bit for bit (both sides round each operation on its own). On the fake device of make test-specs the kernels are
-- built by the host's C++ compiler; on a GPU (tools/gpu-session) by NVRTC.
local tide = require "tide"
local C = require "spec.helpers.cuda_compare"
local on_gpu, DEV = C.on_gpu, C.DEV

-- The fused node's steps in f's graph, one string per node.
local function fused(f)
  local r = {}
  for s in f:graph():gmatch("fused%(.-%) {(.-)}") do r[#r + 1] = s end
  return r
end

-- Three runs of ops: the unary ones, the binary ones and those with more
-- inputs or params, each ending in a result (so each is a kernel of its own).
local function chains(x, row, xt0, d, mask)
  local xt = xt0:t()
  local a = (x + row) * 2
  a = a:neg():abs():relu():sqrt():exp():log():log1p():expm1():sin():cos():tanh():sigmoid():silu():reciprocal()
  local b = x - xt
  b = b:maximum(x):minimum(row):pow(2):fmod(d):remainder(d):atan2(x):div(d)
  b = b:floor() + b:ceil() + b:round() + b:sign() + b
  local c = tide.where(mask, x, xt):add(x, 0.5):lerp(xt, 0.5):addcmul(x, xt, 2):addcdiv(x, d, 0.5)
  c = c:gelu():gelu("tanh"):clamp(-0.5, 0.75):masked_fill(mask, 0.5):clamp(nil, 0.25) + d:rsqrt()
  return a, b, c
end

local function inputs(dtype, shift)
  tide.manual_seed(shift)
  local x = tide.randn({ 5, 6 }, { dtype = dtype, device = DEV })
  local row = tide.randn({ 6 }, { dtype = dtype, device = DEV })
  local xt0 = tide.randn({ 6, 5 }, { dtype = dtype, device = DEV })
  local d = x:exp()
  return x, row, xt0, d, x:gt(0)
end

describe("jit fusion on a CUDA device", function()
  on_gpu("runs every op with a fused form in one kernel per chain, with eager's results bit for bit", function()
    for _, dtype in ipairs { "float32", "float64", "float16", "bfloat16" } do
      local f = tide.jit.compile(chains, { warmup = 0 })
      for r = 1, 4 do   -- captured, then step by step, recorded, and as a device graph
        local args = { inputs(dtype, r) }
        local got, want = { f(unpack(args)) }, { chains(unpack(args)) }
        for k = 1, 3 do C.same(want[k]:cpu(), got[k], dtype .. " chain " .. k, 0) end
      end
      local steps = fused(f)
      assert.are.equal(3, #steps, f:graph())
      assert.matches("^add mul neg abs relu sqrt exp log log1p expm1 sin cos tanh sigmoid silu reciprocal$", steps[1])
      assert.matches("^sub maximum minimum pow fmod remainder atan2 div floor ceil add round add sign add add$",
        steps[2])
      assert.matches("^where add_scaled lerp addcmul addcdiv gelu gelu clamp masked_fill clamp rsqrt add$", steps[3])
      C.on_device_only("the replay as one device graph launch", function()
        assert.matches("on the device: one device graph launch", f:graph(), 1, true)
      end)
    end
  end)

  on_gpu("runs the gamma family and the Bessel functions in fused chains, with eager's results bit for bit",
    function()
    -- both sides of zero, the poles, the root of digamma, half-integers, large and special values
    local vals = { 0, -0.0, -1, -2, 1, 2, 0.5, -0.5, -2.5, 1e-30, 1e10, math.huge, -math.huge, 0 / 0,
                   0.974421430, -16.33333 }
    for i = 1, 64 do vals[#vals + 1] = (i - 32) * 0.379 end
    local function fn(x)   -- a scale of its own each, or CSE would share one mul
      return (x * 1.5):lgamma(), (x * 1.25):digamma(), (x * 0.75):polygamma(1), (x * 0.5):polygamma(4),
        (x * 2):polygamma(66), (x * 3):i0(), (x * 3.5):i0e(), (x * 4):i1(), (x * 4.5):i1e()
    end
    for _, dtype in ipairs { "float32", "float64", "float16", "bfloat16" } do
      local x = tide.tensor(vals, "float64"):to(dtype):to(DEV)
      local f = tide.jit.compile(fn, { warmup = 0 })
      for r = 1, 3 do
        local got, want = { f(x) }, { fn(x) }
        for k = 1, #want do C.same(want[k]:cpu(), got[k], ("%s result %d, run %d"):format(dtype, k, r), 0) end
      end
      assert.are.same({ "mul lgamma", "mul digamma", "mul polygamma", "mul polygamma", "mul polygamma", "mul i0",
                        "mul i0e", "mul i1", "mul i1e" }, fused(f))
    end
  end)

  on_gpu("runs the other transcendental functions in fused chains, with eager's results bit for bit", function()
    local vals = { 0, -0.0, 1, -1, 0.5, -0.5, 0.999, -0.999, 2, 10, -10, 100, 1e-30, math.huge, -math.huge, 0 / 0 }
    for i = 1, 64 do vals[#vals + 1] = (i - 32) * 0.137 end
    local names = { "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc",
                    "erfinv", "log2", "log10", "exp2" }
    local function fn(x)   -- a scale of its own each, or CSE would share one mul
      local r = {}
      for i, name in ipairs(names) do r[i] = (x * (1 + i / 64))[name](x * (1 + i / 64)) end
      return unpack(r)
    end
    local want_steps = {}
    for i, name in ipairs(names) do want_steps[i] = "mul " .. name end
    for _, dtype in ipairs { "float32", "float64", "float16", "bfloat16" } do
      local x = tide.tensor(vals, "float64"):to(dtype):to(DEV)
      local f = tide.jit.compile(fn, { warmup = 0 })
      for r = 1, 2 do
        local got, want = { f(x) }, { fn(x) }
        for k = 1, #want do C.same(want[k]:cpu(), got[k], ("%s %s, run %d"):format(dtype, names[k], r), 0) end
      end
      assert.are.same(want_steps, fused(f))
    end
  end)

  on_gpu("walks inputs of any broadcast and layout over a 3-d result: columns, rows, one element, permuted views",
    function()
    local function fn(x, col, row, one, p)
      local v = x * col + row       -- [2,3,4] with [2,3,1] and [4]
      v = v - one                   -- a one-element device tensor
      v = v:maximum(p:permute(2, 3, 1))   -- a permuted [4,2,3] view, strided in every dim
      return (v * 0.5):tanh() + col:expand(2, 3, 4)
    end
    for _, dtype in ipairs { "float32", "float64", "bfloat16" } do
      local function inputs(seed)
        tide.manual_seed(seed)
        local o = { dtype = dtype, device = DEV }
        return tide.randn({ 2, 3, 4 }, o), tide.randn({ 2, 3, 1 }, o), tide.randn({ 4 }, o), tide.randn({ 1 }, o),
          tide.randn({ 4, 2, 3 }, o)
      end
      local f = tide.jit.compile(fn, { warmup = 0 })
      for r = 1, 4 do
        local args = { inputs(r) }
        C.same(fn(unpack(args)):cpu(), f(unpack(args)), dtype .. " replay " .. r, 0)
      end
      assert.are.equal(1, #fused(f), f:graph())
    end
  end)

  on_gpu("takes a Lua number argument from the device's memory, keeping the plan and the device graph", function()
    local x = tide.randn({ 4, 5 }, { device = DEV })
    local f = tide.jit.compile(function(a, s) return (a * s + 1):relu() end, { warmup = 0 })
    for s = 1, 5 do
      local got = f(x, s - 2.5)
      C.same(((x * (s - 2.5) + 1):relu()):cpu(), got, "s = " .. (s - 2.5), 0)
    end
    C.on_device_only("the replay as one task and one device graph launch", function()
      assert.matches("%-%- replayed as one task", f:graph())
      assert.matches("on the device: one device graph launch", f:graph(), 1, true)
    end)
  end)

  on_gpu("updates a tensor in place in one kernel, and step by step where an input overlaps it", function()
    local state = tide.randn({ 6, 6 }, { device = DEV })
    local f = tide.jit.compile(function(v) state:mul_(2):sub_(v) end, { warmup = 0 })
    local other = tide.randn({ 6, 6 }, { device = DEV })
    f(other:t())
    assert.are.same({ "mul sub" }, fused(f))
    for _ = 1, 3 do
      local want = state:clone():mul_(2):sub_(other:t())
      f(other:t())
      C.same(want:cpu(), state, "in place", 0)
    end
    local want = state:clone()
    want:mul_(2):sub_(want:t())   -- eager: the sub reads the doubled values
    f(state:t())                  -- a view of the target itself
    C.same(want:cpu(), state, "overlapping", 0)
  end)
end)
