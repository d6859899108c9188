--- spec helpers shared by the specs: comparing tensors with expected values
-- (nested tables or tensors) within a tolerance, sweeping layouts
-- (contiguous, transposed, strided, broadcast, empty, 0-d) of the same values,
-- deterministic data for references written in plain Lua, and the pieces of
-- those references that several specs share.
local tide = require "tide"

local H = {}

local function flat(x, out)
  out = out or {}
  if type(x) == "table" then
    for i = 1, #x do flat(x[i], out) end
  elseif type(x) == "boolean" then
    out[#out + 1] = x and 1 or 0
  else
    out[#out + 1] = x
  end
  return out
end
H.flat = flat

local function shape_of(x)
  local s = {}
  while type(x) == "table" do s[#s + 1] = #x; x = x[1] end
  return s
end

--- Asserts that tensor t has the given shape and values close to `expected`
-- (a nested table, a number or a tensor): |a - e| <= atol + rtol * |e|, NaN equal to NaN.
function H.close(t, expected, rtol, atol, msg)
  rtol, atol = rtol or 1e-6, atol or 1e-7
  assert(tide.is_tensor(t), "expected a tensor, got " .. type(t))
  local exp_shape, exp_vals
  if tide.is_tensor(expected) then
    exp_shape, exp_vals = expected:shape(), flat(expected:totable())
  elseif type(expected) == "table" then
    exp_shape, exp_vals = shape_of(expected), flat(expected)
  else
    exp_shape, exp_vals = {}, { expected }
  end
  local got_shape = t:shape()
  if table.concat(got_shape, ",") ~= table.concat(exp_shape, ",") then
    error(string.format("%sshape [%s] ~= expected [%s]", msg and (msg .. ": ") or "",
      table.concat(got_shape, ","), table.concat(exp_shape, ",")), 2)
  end
  local got = flat(t:totable())
  for i = 1, #exp_vals do
    local a, e = got[i], exp_vals[i]
    local ok = (a ~= a and e ~= e) or a == e or math.abs(a - e) <= atol + rtol * math.abs(e)
    if not ok then
      error(string.format("%selement %d: got %.17g, expected %.17g", msg and (msg .. ": ") or "", i, a, e), 2)
    end
  end
  return true
end

--- Asserts exact equality of values and shape.
function H.equal(t, expected, msg) return H.close(t, expected, 0, 0, msg) end

-- body, run with the default device at cpu (and then set back), for specs of
-- what only the CPU does, or that compare a device with the host: the suite
-- also runs with TIDE_DEFAULT_DEVICE=cuda:0.
function H.on_cpu(body)
  return function(...)
    local prev = tide.get_default_device()
    tide.set_default_device("cpu")
    local ok, err = pcall(body, ...)
    tide.set_default_device(prev)
    if not ok then error(err, 0) end
  end
end

-- f, run with every op at once (tide.debug.sync), for specs of the errors ops
-- raise: on a device (the suite run with TIDE_DEFAULT_DEVICE=cuda:0) an index
-- out of range is found by the device's work, which adds " (on cuda:0)" to
-- the CPU's message; the message comes without the suffix.
function H.sync(f)
  return function()
    local ok, err = pcall(tide.debug.sync, f)
    if ok then return err end
    tide.sync()   -- raised above: not again
    error(type(err) == "string" and (err:gsub(" %(on cuda:%d+%)$", "")) or err, 0)
  end
end

--- The memory figures (`in_use`, `peak`, ...) of the allocator behind the
-- default device: the host's, or a CUDA device's when the suite runs there, so
-- that a spec of memory that stays flat measures the memory the ops use.
function H.mem_stats()
  local n = tide.get_default_device():match("^cuda:(%d+)$")
  return n and tide.cuda.memory_stats(tonumber(n)) or tide.memory_stats()
end

--- Starts H.mem_stats().peak over from what is in use now.
function H.reset_peak()
  local n = tide.get_default_device():match("^cuda:(%d+)$")
  if n then tide.cuda.reset_peak_memory(tonumber(n)) else tide.reset_peak_memory() end
end

--- The same values as t in several layouts: contiguous, a non-contiguous copy
-- (built transposed and transposed back) and a strided one (every other column
-- of a wider tensor). Returns a table name -> tensor.
function H.layouts(t)
  local r = { contiguous = t:clone() }
  if t:dim() >= 2 then
    r.transposed = t:transpose(1, 2):clone():transpose(1, 2)
  end
  if t:dim() >= 1 then
    local shape = t:shape()
    shape[#shape] = shape[#shape] * 2
    local wide = tide.zeros(shape, t:dtype())
    local st = wide:stride()
    st[#st] = 2
    r.strided = wide:as_strided(t:shape(), st, 0)
    r.strided:copy_(t)
  end
  return r
end

--- Deterministic pseudo-random numbers in [lo, hi) for reference data (no tide RNG).
function H.values(n, lo, hi, seed)
  local x = seed or 12345
  local r = {}
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    r[i] = lo + (hi - lo) * (x / 2147483648)
  end
  return r
end

--- A table of n values reshaped into nested tables of `shape`.
function H.nest(vals, shape)
  local pos = 0
  local function build(d)
    local r = {}
    for i = 1, shape[d] do
      if d == #shape then pos = pos + 1; r[i] = vals[pos] else r[i] = build(d + 1) end
    end
    return r
  end
  if #shape == 0 then return vals[1] end
  return build(1)
end

--- The number of elements of a shape (a table of sizes).
function H.numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- A generator of H.values of a shape (in [lo, hi), default [-1, 1)) from
-- `seed`, which steps by 7919 after each call: the values, flat.
local function seeded(seed)
  return function(shape, lo, hi)
    local vals = H.values(H.numel(shape), lo or -1, hi or 1, seed)
    seed = seed + 7919
    return vals
  end
end

--- rnd(shape, lo, hi): a float64 tensor of shape with deterministic values in
-- [lo, hi) (default [-1, 1)), and its values flat; each call draws new ones
-- (from `seed` on, so a spec file gets the same data every run).
-- @usage local rnd = H.random_tensors(11); local x, xv = rnd({ 2, 3 })
function H.random_tensors(seed)
  local next_values = seeded(seed)
  return function(shape, lo, hi)
    local vals = next_values(shape, lo, hi)
    return tide.tensor(H.nest(vals, shape), "float64"), vals
  end
end

--- vals(shape, lo, hi): as H.random_tensors, the values as nested tables of shape.
function H.random_tables(seed)
  local next_values = seeded(seed)
  return function(shape, lo, hi) return H.nest(next_values(shape, lo, hi), shape) end
end

--- get(i1, i2, ...) (1-based) of the flat row-major values of a shape.
function H.at(vals, shape)
  return function(...)
    local k, off = { ... }, 0
    for d = 1, #shape do off = off * shape[d] + (k[d] - 1) end
    return vals[off + 1]
  end
end

--- A nested table of shape whose element at i (a table of 1-based indices) is f(i).
function H.build(shape, f)
  local idx = {}
  local function rec(d)
    local r = {}
    for i = 1, shape[d] do
      idx[d] = i
      if d == #shape then r[i] = f(idx) else r[i] = rec(d + 1) end
    end
    return r
  end
  return rec(1)
end

--- Calls f(t, name) for each of H.layouts(x).
function H.each_layout(x, f)
  for name, t in pairs(H.layouts(x)) do f(t, name) end
end

--- A copy of t that requires grad: a leaf for gradcheck.
function H.grad_leaf(t) return t:clone():requires_grad_() end

--- A float64 tensor of v (a leaf that requires grad when grad is true).
function H.t64(v, grad)
  local t = tide.tensor(v, "float64")
  if grad then t:requires_grad_() end
  return t
end

--- The reference of linear interpolation (PyTorch's coordinate mapping) at
-- 0-based output position dst of m, from n inputs (sf: the scale factor
-- given, or nil): the two 0-based source positions and their weights.
function H.linear_source(dst, n, m, sf, align_corners)
  local src
  if align_corners then
    src = m > 1 and dst * (n - 1) / (m - 1) or 0
  else
    local scale = sf and 1 / sf or n / m
    src = math.max((dst + 0.5) * scale - 0.5, 0)
  end
  local i0 = math.min(math.floor(src), n - 1)
  local lam = math.min(math.max(src - i0, 0), 1)
  return i0, math.min(i0 + 1, n - 1), 1 - lam, lam
end

return H
