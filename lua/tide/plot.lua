--- tide.plot: a line chart of a series of numbers, drawn in the terminal with
-- Braille dots (2x4 per character; ASCII on request), with its range on the
-- axes. When gnuplot is installed it also writes a PNG; gnuplot is optional.
-- Reading a tensor's values waits on the engine.
local B = require "bindings.ffi"
local is_tensor = require("tide.tensor").is_tensor
local fail = B.fail   -- errors at the user's line

local M = {}

-- The values as a Lua array of numbers; raises naming the first bad one.
local function numbers(values)
  if is_tensor(values) then
    if not values:is_floating_point() and values:dtype() == "bool" then values = values:float() end
    local flat = values:reshape(-1):totable()
    if type(flat) == "number" then flat = { flat } end
    return flat
  end
  if type(values) ~= "table" then
    fail("plot: values must be a table of numbers or a tensor, got " .. type(values))
  end
  local r = {}
  for i = 1, #values do
    local v = values[i]
    if is_tensor(v) and v:numel() == 1 then v = v:item() end
    if type(v) ~= "number" then
      fail(string.format("plot: value %d is a %s, not a number", i, type(v)))
    end
    r[i] = v
  end
  return r
end

local function finite(v) return v == v and v ~= math.huge and v ~= -math.huge end

local function utf8_braille(bits)
  local cp = 0x2800 + bits
  return string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end

-- Braille dot bits by (x % 2, y % 4), y from the top.
local DOT = { [0] = { [0] = 0x01, 0x02, 0x04, 0x40 }, [1] = { [0] = 0x08, 0x10, 0x20, 0x80 } }

local function label(v)
  local s = string.format("%.4g", v)
  return s
end

--- The chart as text (what plot prints).
-- @param values a table of numbers, or a tensor (flattened)
-- @param opts width and height in characters (60 x 15), title, ascii (true: '*' instead of Braille)
-- @return the text, lines joined with "\n"
-- @usage print(tide.plot.render({ 1, 4, 9, 16 }, { width = 20, height = 5 }))
function M.render(values, opts)
  opts = opts or {}
  if type(opts) ~= "table" then fail("plot: options must be a table, got " .. type(opts)) end
  local ys = numbers(values)
  local n = #ys
  if n == 0 then fail("plot: no values to plot") end
  local W, H = opts.width or 60, opts.height or 15
  if type(W) ~= "number" or W < 2 or type(H) ~= "number" or H < 2 then
    fail("plot: width and height must be numbers >= 2")
  end
  W, H = math.floor(W), math.floor(H)
  local lo, hi = math.huge, -math.huge
  for _, v in ipairs(ys) do
    if finite(v) then lo, hi = math.min(lo, v), math.max(hi, v) end
  end
  if lo > hi then fail("plot: no finite values to plot") end
  if lo == hi then lo, hi = lo - 1, hi + 1 end
  local ascii = opts.ascii
  local sx, sy = ascii and 1 or 2, ascii and 1 or 4      -- dots per character
  local DW, DH = W * sx, H * sy
  local grid = {}
  for r = 0, H - 1 do
    grid[r] = {}
    for c = 0, W - 1 do grid[r][c] = 0 end
  end
  local function dot(x, y)   -- y from the bottom, in dots
    local yt = DH - 1 - y
    local r, c = math.floor(yt / sy), math.floor(x / sx)
    if ascii then grid[r][c] = 1
    else grid[r][c] = bit.bor(grid[r][c], DOT[x % sx][yt % sy]) end
  end
  local function pos(i, v)
    local x = n == 1 and 0 or math.floor((i - 1) / (n - 1) * (DW - 1) + 0.5)
    local y = math.floor((v - lo) / (hi - lo) * (DH - 1) + 0.5)
    return x, y
  end
  local px, py
  for i, v in ipairs(ys) do
    if finite(v) then
      local x, y = pos(i, v)
      if px then   -- Bresenham from the previous point
        local dx, dy = math.abs(x - px), -math.abs(y - py)
        local stx, sty = px < x and 1 or -1, py < y and 1 or -1
        local err, cx, cy = dx + dy, px, py
        while true do
          dot(cx, cy)
          if cx == x and cy == y then break end
          local e2 = 2 * err
          if e2 >= dy then err = err + dy; cx = cx + stx end
          if e2 <= dx then err = err + dx; cy = cy + sty end
        end
      else
        dot(x, y)
      end
      px, py = x, y
    else
      px, py = nil, nil   -- NaN and infinities break the line
    end
  end
  local top, bottom = label(hi), label(lo)
  local lw = math.max(#top, #bottom)
  local out = {}
  if opts.title then out[#out + 1] = string.rep(" ", lw + 2) .. tostring(opts.title) end
  for r = 0, H - 1 do
    local cells = {}
    for c = 0, W - 1 do
      local b = grid[r][c]
      if ascii then cells[#cells + 1] = b ~= 0 and "*" or " "
      else cells[#cells + 1] = b ~= 0 and utf8_braille(b) or " " end
    end
    local lab = r == 0 and top or r == H - 1 and bottom or ""
    out[#out + 1] = (string.rep(" ", lw - #lab) .. lab .. " |" .. table.concat(cells)):gsub("%s+$", "")
  end
  local xl, xr = "1", tostring(n)
  out[#out + 1] = string.rep(" ", lw + 1) .. "+" .. string.rep("-", W)
  out[#out + 1] = string.rep(" ", lw + 2) .. xl .. string.rep(" ", math.max(1, W - #xl - #xr)) .. xr
  return table.concat(out, "\n")
end

-- The gnuplot command: opts.gnuplot, else `gnuplot` if it is on PATH.
local function find_gnuplot(opts)
  if opts.gnuplot ~= nil then return opts.gnuplot end
  for dir in (os.getenv("PATH") or ""):gmatch("[^:]+") do
    local f = io.open(dir .. "/gnuplot", "r")
    if f then f:close() return dir .. "/gnuplot" end
  end
end

local function quote(s) return "'" .. tostring(s):gsub("'", "''") .. "'" end
local function shell_quote(s) return "'" .. tostring(s):gsub("'", [['\'']]) .. "'" end

--- Writes the chart as a PNG with gnuplot.
-- @return the path, or nil and a message
function M.png(values, path, opts)
  opts = opts or {}
  local gp = find_gnuplot(opts)
  if not gp then return nil, "gnuplot is not installed" end
  local ys = numbers(values)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write("set terminal png size ", opts.png_width or 800, ",", opts.png_height or 480, "\n")
  f:write("set output ", quote(path), "\n")
  if opts.title then f:write("set title ", quote(opts.title), "\n") end
  f:write("set grid\nunset key\nplot '-' using 1:2 with lines linewidth 2\n")
  for i, v in ipairs(ys) do
    f:write(i, " ", finite(v) and string.format("%.17g", v) or "NaN", "\n")
  end
  f:write("e\n")
  f:close()
  local rc = os.execute(shell_quote(gp) .. " " .. shell_quote(script) .. " >/dev/null 2>&1")
  os.remove(script)
  if rc ~= 0 and rc ~= true then return nil, "gnuplot failed (status " .. tostring(rc) .. ")" end
  return path
end

--- Draws values as a line chart in the terminal; with gnuplot installed, also
-- writes a PNG (opts.png: its path, default "tide_plot.png"; false: none).
-- @param values a table of numbers, or a tensor (flattened)
-- @param opts width, height, title, ascii (see render), png, gnuplot (its command)
-- @return the PNG's path when one was written
-- @usage tide.plot(losses, { title = "loss" })
function M.plot(values, opts)
  opts = opts or {}
  if type(opts) ~= "table" then fail("plot: options must be a table, got " .. type(opts)) end
  io.stdout:write(M.render(values, opts), "\n")
  if opts.png == false then return end
  local path, err = M.png(values, opts.png or "tide_plot.png", opts)
  if path then
    io.stdout:write("(wrote ", path, " with gnuplot)\n")
    return path
  elseif opts.png and err then
    io.stdout:write("(no PNG: ", err, ")\n")
  end
end

return setmetatable(M, { __call = function(_, ...) return M.plot(...) end })
