--- tide.format: tostring() of tensors, in the manner of Torch7 and PyTorch:
-- values aligned in columns, a common scale factor when magnitudes differ
-- widely, '...' in place of the middle of large dimensions, and a footer
-- line with dtype, shape and device. Reading the values waits on the engine.
local ffi = require "ffi"
local B = require "bindings.ffi"
local C = B.C

local M = { edge = 3, threshold = 1000, precision = 4 }

local function shape_str(t)
  local s = {}
  for i = 0, t.ndim - 1 do s[#s + 1] = tostring(tonumber(t.sizes[i])) end
  return "[" .. table.concat(s, ", ") .. "]"
end

local function footer(t)
  local dev = ffi.string(C.tide_device_format(t.dev, ffi.new("char[32]"), 32))
  return string.format("[tide.Tensor of dtype %s, shape %s on %s]", ffi.string(C.tide_dtype_name(t.dtype_id)),
    shape_str(t), dev)
end

-- Which indices of a dimension of size n are shown (-1 marks the ellipsis).
local function shown(n, summarise)
  local r = {}
  if summarise and n > 2 * M.edge then
    for i = 1, M.edge do r[#r + 1] = i end
    r[#r + 1] = -1
    for i = n - M.edge + 1, n do r[#r + 1] = i end
  else
    for i = 1, n do r[i] = i end
  end
  return r
end

function M.tostring(t)
  local n = tonumber(t.nelem)
  if C.tide_tensor_wait(t) ~= 0 then
    return footer(t) .. "\n(failed: " .. ffi.string(C.tide_last_error()) .. ")"
  end
  if n == 0 then return "[]\n" .. footer(t) end
  local nd = t.ndim
  local sizes = {}
  for i = 0, nd - 1 do sizes[i + 1] = tonumber(t.sizes[i]) end
  local summarise = n > M.threshold
  -- gather the shown elements (row-major over the shown index sets)
  local idx_sets = {}
  for d = 1, nd do idx_sets[d] = shown(sizes[d], summarise) end
  local dbl = ffi.new("double[1]")
  local function value(index)  -- index: 1-based per dim
    local lin = 0
    for d = 1, nd do lin = lin * sizes[d] + (index[d] - 1) end
    C.tide_tensor_get(t, lin, dbl)
    return dbl[0]
  end
  local isfloat = C.tide_dtype_is_float(t.dtype_id) ~= 0
  local isbool = t.dtype_id == 5
  -- collect values to choose a format
  local vals = {}
  local function collect(d, index)
    if d > nd then vals[#vals + 1] = value(index); return end
    for _, i in ipairs(idx_sets[d]) do
      if i > 0 then index[d] = i; collect(d + 1, index) end
    end
  end
  collect(1, {})
  local fmt, scale = "%d", 1
  if isbool then
    fmt = nil
  elseif isfloat then
    local maxabs, minabs, allint = 0, math.huge, true
    for _, v in ipairs(vals) do
      if v == v and v ~= math.huge and v ~= -math.huge then
        local a = math.abs(v)
        if a > maxabs then maxabs = a end
        if a > 0 and a < minabs then minabs = a end
        if v ~= math.floor(v) then allint = false end
      end
    end
    if allint and maxabs < 1e8 then
      fmt = "%.0f."
    elseif maxabs >= 1e8 or (minabs < 1e-4 and maxabs / minabs > 1e3) or maxabs / math.max(minabs, 1e-300) > 1e8 then
      fmt = "%." .. M.precision .. "e"
    else
      local e = maxabs > 0 and math.floor(math.log10(maxabs)) or 0
      if e >= 3 then scale = 10 ^ e end
      fmt = "%." .. M.precision .. "f"
    end
  end
  local function fmtv(v)
    if isbool then return v ~= 0 and "true" or "false" end
    if v ~= v then return "nan" end
    if v == math.huge then return "inf" end
    if v == -math.huge then return "-inf" end
    local s = string.format(fmt, v / scale)
    if s == "-0." then s = "0." end
    return s
  end
  local width = 0
  for _, v in ipairs(vals) do width = math.max(width, #fmtv(v)) end
  local function pad(s) return string.rep(" ", width - #s) .. s end
  local lines = {}
  if scale ~= 1 then lines[#lines + 1] = string.format("%g *", scale) end
  if nd == 0 then
    lines[#lines + 1] = fmtv(vals[1])
    lines[#lines + 1] = footer(t)
    return table.concat(lines, "\n")
  end
  local pos = 0
  local function row()
    local cells = {}
    for _, i in ipairs(idx_sets[nd]) do
      if i < 0 then cells[#cells + 1] = pad("...") else pos = pos + 1; cells[#cells + 1] = pad(fmtv(vals[pos])) end
    end
    return table.concat(cells, " ")
  end
  local function block(d, prefix)
    if d == nd then lines[#lines + 1] = row(); return end
    if d == nd - 1 then
      if prefix ~= "" then lines[#lines + 1] = "(" .. prefix .. ".,.) =" end
      for _, i in ipairs(idx_sets[d]) do
        if i < 0 then lines[#lines + 1] = "..." else block(d + 1, prefix) end
      end
      if prefix ~= "" then lines[#lines + 1] = "" end
      return
    end
    for _, i in ipairs(idx_sets[d]) do
      if i < 0 then lines[#lines + 1] = "...\n" else block(d + 1, prefix == "" and tostring(i) or prefix .. "," .. i) end
    end
  end
  if nd == 1 then lines[#lines + 1] = row() else block(1, "") end
  if lines[#lines] == "" then lines[#lines] = nil end
  lines[#lines + 1] = footer(t)
  return table.concat(lines, "\n")
end

return M
