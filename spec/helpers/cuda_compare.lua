--- Comparing CUDA kernels with the CPU's: runs a spec case on the device, or
-- prints why it was skipped, and checks that an op gives the same result on
-- the device as on the host (shape, dtype, values within a tolerance per dtype).
-- TIDE_SPEC_DRY_RUN=1 runs the comparisons against the cpu:1 queue instead: a
-- check of the specs themselves on a machine without a GPU.
local tide = require "tide"
local assert = require "luassert"   -- busted's, which spec files see as assert
local H = require "spec.helpers"

local C = {}

local available, why_not = tide.cuda.is_available()
C.DEV = "cuda:0"
C.DRY_RUN = os.getenv("TIDE_SPEC_DRY_RUN") == "1"
if C.DRY_RUN then available, C.DEV = true, "cpu:1" end

--- Asserts what only a CUDA device shows (a device graph in a plan's text);
-- a dry run says what it did not check.
function C.on_device_only(what, check)
  if C.DRY_RUN then
    print(("\ndry run on cpu:1: not checked: %s"):format(what))
    return
  end
  check()
end

-- Runs body() on the device, or prints why not. Call it where `it` is
-- defined: busted gives it to the spec file's functions, not to this module.
-- The default device is cpu meanwhile: what the body makes without naming a
-- device is the host side of its comparisons.
function C.on_gpu(name, body)
  getfenv(2).it(name .. " #cuda", function()
    if not available then
      print(("\nskipped '%s': %s"):format(name, why_not))
      return
    end
    H.on_cpu(body)()
  end)
end

C.EXACT = { int32 = true, int64 = true, uint8 = true, bool = true }
-- float tolerance per dtype: the device sums in another order and its libm
-- may differ from glibc's in the last place
C.TOL = { float32 = 2e-5, float64 = 1e-12, float16 = 2e-3, bfloat16 = 2e-2 }

function C.flat(t)
  local r = {}
  local v = t:cpu():double():reshape(-1):totable()
  for i = 1, #v do r[i] = v[i] end
  return r
end

-- The float tolerance for dtype: tol's (a number, or a table of them per
-- dtype) where it gives one, else C.TOL's.
local function tolerance(dtype, tol)
  if type(tol) == "table" then tol = tol[dtype] end
  return tol or C.TOL[dtype] or 0
end

-- Asserts that g (on the device) equals c (on the host) in shape, dtype and
-- values. tol (optional; see tolerance): for results that sum many products
-- in another order, or by another method, than the CPU's (convolutions).
function C.same(c, g, what, tol)
  assert.are.equal(C.DEV, g:device(), what)
  assert.are.same(c:size(), g:size(), what)
  assert.are.equal(c:dtype(), g:dtype(), what)
  local a, b = C.flat(c), C.flat(g)
  tol = tolerance(c:dtype(), tol)
  for i = 1, #a do
    local x, y = a[i], b[i]
    local ok
    if x ~= x then ok = y ~= y
    elseif C.EXACT[c:dtype()] or x == math.huge or x == -math.huge then ok = x == y
    else ok = math.abs(x - y) <= tol * math.max(1, math.abs(x)) end
    if not ok then
      -- the last dim around the element, both devices, for the next run to say why
      local n = c:dim() > 0 and c:size(-1) or 1
      local from = i - (i - 1) % n
      local row = { "", "" }
      for k = from, math.min(from + n - 1, from + 15) do
        row[1], row[2] = row[1] .. (" %.9g"):format(a[k]), row[2] .. (" %.9g"):format(b[k])
      end
      error(("%s: element %d is %.17g on the CPU but %.17g on %s\n  its row on the CPU:%s\n  on %s:%s")
        :format(what, i, x, y, C.DEV, row[1], C.DEV, row[2]), 2)
    end
  end
end

-- Host tensors that layouts() made, each with a function that makes the same
-- values in the same layout on the device (x:to(DEV) would make them dense).
local on_device = setmetatable({}, { __mode = "k" })

--- x on the device: in x's own layout when layouts() made x, else dense.
function C.to_dev(x)
  local f = on_device[x]
  if f then return f() end
  return x:to(C.DEV)
end

-- Inputs in every layout: name -> a host tensor of dtype, which C.to_dev (and
-- so C.both) gives the device in the same layout.
function C.layouts(dtype)
  tide.manual_seed(11)
  local base = tide.randn(4, 5):mul(3)
  if C.EXACT[dtype] then base = base:round() end
  if dtype == "uint8" or dtype == "bool" then base = base:abs() end
  base = base:to(dtype)
  local big = tide.randn(4, 8):mul(3)
  if C.EXACT[dtype] then big = big:round() end
  if dtype == "uint8" or dtype == "bool" then big = big:abs() end
  big = big:to(dtype)
  local r = {
    contiguous = base:clone(),
    transposed = base:t(),
    strided = big:narrow(2, 2, 5),   -- rows 8 apart
    empty = tide.zeros(0, 5):to(dtype),
    scalar = tide.tensor(2.5):to(dtype),
  }
  on_device[r.transposed] = function() return base:to(C.DEV):t() end
  on_device[r.strided] = function() return big:to(C.DEV):narrow(2, 2, 5) end
  return r
end

-- f(inputs...) on both devices for inputs given on the host.
function C.both(f, what, ...) C.both_within(nil, f, what, ...) end

-- C.both with the tolerance tol (a number, or a table of them per dtype)
-- instead of C.TOL's.
function C.both_within(tol, f, what, ...)
  local host, dev = { ... }, {}
  for i, x in ipairs(host) do dev[i] = type(x) == "table" and x or (tide.is_tensor(x) and C.to_dev(x) or x) end
  local c, g = f(unpack(host)), f(unpack(dev))
  C.same(c, g, what, tol)
end

return C
