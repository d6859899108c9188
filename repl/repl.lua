--- repl.lua: the tide REPL. It reads lines (continuing while a statement is
-- incomplete), runs them as an expression when they are one, prints results
-- (tensors as tostring does, tables as a depth-limited, cycle-safe listing),
-- reports errors with a short traceback, completes names, and offers the
-- helpers help(), who() and time() and the :commands. tide.c gives it line
-- editing, history, a monotonic clock and Ctrl-C through the `sys` table; the
-- specs drive the same functions (M.feed, M.complete, M.pretty) without it.
-- Loaded by path (repl/repl.lua in the build tree, share/tide/repl.lua installed).
local tide = require "tide"
local B = require "bindings.ffi"
local ffi = require "ffi"

local M = {
  prompt = "> ",
  prompt2 = ">> ",
  depth = 3,          -- tables nested deeper print as {...}
  max_items = 40,     -- entries shown per table
  width = 80,
  interpreted = true, -- typed code runs in LuaJIT's interpreter, so Ctrl-C can stop any loop
}

local pack = function(...) return { n = select("#", ...), ... } end

-- What the REPL prints goes through M.write (the specs capture it).
M.write = function(s) io.write(s) io.flush() end
local function say(s) M.write(s .. "\n") end

-- The host's services; without tide.c (in the specs): no line editing, and
-- os.clock for a clock (tide.c gives a monotonic one).
local sys = {
  protect = function() end,
  add_history = function() end,
  set_completer = function() end,
  readline = function(prompt) io.write(prompt) io.flush() return io.read("*l") end,
  now = os.clock,
}

-- -- printing values ---------------------------------------------------------------

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or
            repeat return then true until while]]):gmatch("%a+") do KEYWORDS[w] = true end

local function is_ident(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil and not KEYWORDS[k]
end

local function shape_str(t)
  return "[" .. table.concat(t:shape(), ", ") .. "]"
end

local function short_tensor(t)
  return string.format("<tensor %s %s %s>", t:dtype(), shape_str(t), t:device())
end

local function func_str(f)
  local info = debug.getinfo(f, "S")
  if info.what == "C" then return "<function builtin>" end
  return string.format("<function %s:%d>", info.short_src, info.linedefined)
end

-- Orders keys: numbers first (ascending), then strings, then the rest by tostring.
local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then
    local rank = { number = 1, string = 2 }
    return (rank[ta] or 3) < (rank[tb] or 3) or ((rank[ta] or 3) == (rank[tb] or 3) and ta < tb)
  end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

local pretty

local function scalar_str(v)
  local tv = type(v)
  if tv == "string" then return string.format("%q", v):gsub("\\\n", "\\n") end
  if tv == "function" then return func_str(v) end
  if tide.is_tensor(v) then return short_tensor(v) end
  return tostring(v)
end

-- A table as text: one line when it fits, else one entry per line, indented.
local function table_str(t, depth, path, indent)
  if path[t] then return "<cycle: " .. tostring(t) .. ">" end
  local mt = getmetatable(t)
  if mt and mt.__tostring then return tostring(t) end
  if depth > M.depth then return "{...}" end
  path[t] = true
  local n = #t
  local keys = {}
  for k in pairs(t) do
    if not (type(k) == "number" and k >= 1 and k <= n and k == math.floor(k)) then keys[#keys + 1] = k end
  end
  table.sort(keys, key_order)
  local items, shown = {}, 0
  local inner = indent .. "  "
  local function add(s)
    shown = shown + 1
    if shown <= M.max_items then items[#items + 1] = s end
  end
  for i = 1, n do add(pretty(t[i], depth + 1, path, inner)) end
  for _, k in ipairs(keys) do
    local ks = is_ident(k) and k or ("[" .. scalar_str(k) .. "]")
    add(ks .. " = " .. pretty(t[k], depth + 1, path, inner))
  end
  path[t] = nil
  if shown > M.max_items then items[#items + 1] = string.format("... (%d more)", shown - M.max_items) end
  if #items == 0 then return "{}" end
  local one = "{ " .. table.concat(items, ", ") .. " }"
  if #one + #indent <= M.width and not one:find("\n", 1, true) then return one end
  return "{\n" .. inner .. table.concat(items, ",\n" .. inner) .. "\n" .. indent .. "}"
end

pretty = function(v, depth, path, indent)
  if type(v) == "table" then return table_str(v, depth, path, indent) end
  return scalar_str(v)
end

--- A value as the REPL shows it: a tensor as tostring does, a table as a listing
-- nested at most M.depth deep (cycles shown as <cycle: ...>), a string as is.
-- @param v any value
-- @return the text
-- @usage M.pretty({ 1, 2, x = { y = 3 } })  --> "{ 1, 2, x = { y = 3 } }"
function M.pretty(v)
  if tide.is_tensor(v) then return tostring(v) end
  if type(v) == "string" then return v end
  return pretty(v, 1, {}, "")
end

-- Prints the results of an evaluation (none: nothing).
local function show(r)
  if r.n == 0 then return end
  local parts, multiline = {}, false
  for i = 1, r.n do
    parts[i] = M.pretty(r[i])
    multiline = multiline or parts[i]:find("\n", 1, true) ~= nil
  end
  say(table.concat(parts, multiline and "\n" or "\t"))
end

-- -- errors ---------------------------------------------------------------------------

local THIS = debug.getinfo(1, "S").short_src

-- The message and a short traceback, without the REPL's own frames.
local function on_error(err)
  local msg = type(err) == "string" and err or ("(error object is a " .. type(err) .. " value: " .. tostring(err) .. ")")
  -- a Ctrl-C that lands in the REPL's own code (printing) is not its fault
  if msg:sub(1, #THIS + 1) == THIS .. ":" then msg = msg:gsub("^[^:]*:%d+: ", "") end
  local lines = {}
  local tb = debug.traceback("", 2)
  for line in tb:gmatch("[^\n]+") do
    -- the frames below the REPL's own are not the user's
    if line:find(THIS, 1, true) or line:find("in function 'xpcall'", 1, true) then break end
    if line:match("^%s") and not line:find("%[C%]: in function 'error'") and not line:find("%(tail call%)")
       and not line:find("%[builtin#") and not line:find("/bindings/ffi.lua:", 1, true) then
      lines[#lines + 1] = line
    end
  end
  local keep = 6
  if #lines > keep then
    local n = #lines
    for i = n, keep + 1, -1 do lines[i] = nil end
    lines[#lines + 1] = string.format("\t... (%d more)", n - keep)
  end
  if #lines == 0 then return msg end
  return msg .. "\nstack traceback:\n" .. table.concat(lines, "\n")
end
M.on_error = on_error

-- -- evaluating -------------------------------------------------------------------------

-- Compiles text: as an expression when it is one, else as statements.
-- Returns fn, nil; or nil, message, incomplete. An expression is compiled as
-- `return (...)(expr)`, called with pack: the values are packed at once, and a
-- call in expr is no tail call, so errors it raises name their line.
local function compile(text, name)
  local fn = loadstring("return (...)(" .. text .. "\n)", name)
  local expr = fn ~= nil
  if not fn then
    local err
    fn, err = loadstring(text, name)
    -- incomplete: the end of input came too early; a string cannot go on to the next line
    if not fn then return nil, err, err:sub(-7) == "'<eof>'" and not err:find("unfinished string", 1, true) end
  end
  if M.interpreted then jit.off(fn, true) end
  if expr then return fn end
  return function() return pack(fn()) end
end
M.compile = compile

-- Runs chunk(...) with Ctrl-C armed; returns ok and the results (or the message).
local function protected(chunk, ...)
  sys.protect(true)
  local r = pack(xpcall(chunk, on_error, ...))
  sys.protect(false)
  return r
end

local commands = {}
local buffer = nil    -- the lines of an incomplete statement

--- Feeds one line of input. Returns "more" when the statement so far is
-- incomplete (the next line continues it), else nil after running and printing.
-- @param line a line, without its newline
-- @return "more" or nil
function M.feed(line)
  if buffer == nil then
    local cmd, rest = line:match("^%s*:(%a+)%s*(.-)%s*$")
    if cmd then
      local f = commands[cmd]
      if not f then say(string.format("unknown command ':%s' (:help lists them)", cmd)) return end
      return f(rest)
    end
    if line:match("^%s*=") then line = "return " .. line:match("^%s*=(.*)$") end
  end
  local text = buffer and (buffer .. "\n" .. line) or line
  if text:match("^%s*$") then buffer = nil return end
  local fn, err, incomplete = compile(text, "=stdin")
  if not fn then
    if incomplete then buffer = text return "more" end
    buffer = nil
    say(err)
    return
  end
  buffer = nil
  local r = protected(fn, pack)   -- called by xpcall itself: a traceback says "main chunk"
  if not r[1] then say(r[2]) return end
  -- printing is armed for Ctrl-C too: a tensor's tostring waits for its value
  r = protected(show, r[2])
  if not r[1] then say(r[2]) end
end

--- Drops a statement being continued (Ctrl-C at a continuation prompt).
function M.cancel() buffer = nil end

-- -- helpers: time, who, help ------------------------------------------------------------

local function duration(s)
  if s < 1e-3 then return string.format("%.1f us", s * 1e6) end
  if s < 1 then return string.format("%.3f ms", s * 1e3) end
  return string.format("%.3f s", s)
end
M.duration = duration

--- Runs fn(...), waits for the work it queued on the engine (tide.sync), prints
-- the wall time and returns what fn returned.
-- @param fn a function
-- @return fn's results
-- @usage time(function() return a:matmul(b) end)
function M.time(fn, ...)
  if type(fn) ~= "function" then
    error("time: argument 1 must be a function, got " .. type(fn) .. " (or use :time expr)", 2)
  end
  local t0 = sys.now()
  local r = pack(fn(...))
  tide.sync()
  say("time: " .. duration(sys.now() - t0))
  return unpack(r, 1, r.n)
end

local function bytes(n)
  if n < 1024 then return n .. " B" end
  if n < 1024 * 1024 then return string.format("%.1f KiB", n / 1024) end
  if n < 1024 ^ 3 then return string.format("%.1f MiB", n / 1024 ^ 2) end
  return string.format("%.2f GiB", n / 1024 ^ 3)
end

--- The live tensors as text: the globals (and fields of global tables) that
-- hold one, with dtype, shape, device and bytes, then the others and totals.
-- @return the text
function M.who_text()
  B.collect()
  local live = B.live_tensors()
  local names = {}   -- tensor -> name
  local function visit(t, prefix, depth)
    for k, v in pairs(t) do
      if type(k) == "string" then
        if tide.is_tensor(v) then
          names[v] = names[v] or (prefix .. k)
        elseif type(v) == "table" and depth < 2 and v ~= _G and v ~= package.loaded and not package.loaded[k] then
          visit(v, prefix .. k .. ".", depth + 1)
        end
      end
    end
  end
  visit(_G, "", 1)
  local rows, others, other_bytes = {}, 0, 0
  local storages, total = {}, 0
  for _, t in ipairs(live) do
    local key = tostring(ffi.cast("uintptr_t", t.storage))
    local sb = tonumber(B.C.tide_storage_nbytes(t.storage))
    if not storages[key] then storages[key] = true total = total + sb end
    if names[t] then
      rows[#rows + 1] = { names[t], t:dtype(), shape_str(t), t:device(), bytes(tonumber(t.nelem) * t:element_size()) }
    else
      others, other_bytes = others + 1, other_bytes + tonumber(t.nelem) * t:element_size()
    end
  end
  table.sort(rows, function(a, b) return a[1] < b[1] end)
  table.insert(rows, 1, { "name", "dtype", "shape", "device", "bytes" })
  local w = {}
  for _, r in ipairs(rows) do
    for i, c in ipairs(r) do w[i] = math.max(w[i] or 0, #c) end
  end
  local out = {}
  if #rows > 1 then
    for _, r in ipairs(rows) do
      local cells = {}
      for i, c in ipairs(r) do cells[i] = c .. string.rep(" ", w[i] - #c) end
      out[#out + 1] = table.concat(cells, "  "):gsub("%s+$", "")
    end
  end
  if others > 0 then
    out[#out + 1] = string.format("(%d other tensor%s, not in globals: %s)", others, others == 1 and "" or "s",
      bytes(other_bytes))
  end
  local nstor = 0
  for _ in pairs(storages) do nstor = nstor + 1 end
  local m = tide.memory_stats()
  out[#out + 1] = string.format("%d live tensor%s over %d storage%s: %s; allocator: %s in use, %s cached, peak %s",
    #live, #live == 1 and "" or "s", nstor, nstor == 1 and "" or "s", bytes(total), bytes(m.in_use),
    bytes(m.cached), bytes(m.peak))
  return table.concat(out, "\n")
end

--- Prints the live tensors and their memory (see who_text).
function M.who() say(M.who_text()) end

-- Doc comments: the block of `--` lines right above line `line` of file `path`.
local file_cache = {}
local function file_lines(path)
  if file_cache[path] == nil then
    local f = io.open(path, "r")
    local lines = false
    if f then
      lines = {}
      for l in f:lines() do lines[#lines + 1] = l end
      f:close()
    end
    file_cache[path] = lines
  end
  return file_cache[path] or nil
end

local function clean_doc(block)
  local out = {}
  for _, l in ipairs(block) do
    l = l:gsub("^%s*%-%-%-?%s?", "")
    local tag, rest = l:match("^@(%a+)%s*(.*)$")
    if tag == "param" then l = "  " .. rest:gsub("^(%S+)%s*", "%1: ")
    elseif tag == "return" then l = "  returns " .. rest
    elseif tag == "usage" then l = "  usage: " .. rest
    elseif tag then l = "  " .. tag .. ": " .. rest end
    out[#out + 1] = l
  end
  return table.concat(out, "\n")
end

local function doc_above(path, line)
  local lines = file_lines(path)
  if not lines or line < 2 then return nil end
  local block = {}
  local i = line - 1
  while i >= 1 and lines[i]:match("^%s*%-%-") do
    table.insert(block, 1, lines[i])
    i = i - 1
  end
  if #block == 0 then return nil end
  return clean_doc(block)
end

-- "(a, b, ...)": f's parameters, when Lua knows them.
local function params(f)
  local info = debug.getinfo(f, "u")
  if not info or not info.nparams then return "(...)" end
  local names = {}
  for i = 1, info.nparams do names[i] = debug.getlocal(f, i) or ("arg" .. i) end
  if info.isvararg then names[#names + 1] = "..." end
  return "(" .. table.concat(names, ", ") .. ")"
end

-- The comment lines that open a file (its module description).
local function file_header(path)
  local lines = file_lines(path)
  if not lines then return nil end
  local block = {}
  for _, l in ipairs(lines) do
    if not l:match("^%s*%-%-") then break end
    block[#block + 1] = l
  end
  return #block > 0 and clean_doc(block) or nil
end

-- Where Tide's functions are found by name: prefix, table, separator.
local function places()
  local p = {
    { "tide.", tide }, { "t:", tide.Tensor }, { "tide.debug.", tide.debug },
    { "", { help = M.help, who = M.who, time = M.time } },
  }
  for name, mod in pairs(package.loaded) do
    if type(mod) == "table" and type(name) == "string" and name:match("^tide%.") and mod ~= tide then
      p[#p + 1] = { name .. ".", mod }
    end
  end
  return p
end

local function names_of(f)
  local r = {}
  for _, pl in ipairs(places()) do
    for k, v in pairs(pl[2]) do
      if v == f and type(k) == "string" then r[#r + 1] = pl[1] .. k end
    end
  end
  table.sort(r)
  return r
end

-- The registry entry of op `name`, as text (nil if no such op).
local function op_doc(name)
  local id = B.C.tide_op_find(name)
  if id < 0 then return nil end
  local info = ffi.new("tide_op_info")
  B.C.tide_op_get_info(id, info)
  local flags = {}
  for _, f in ipairs { "ELEMWISE", "COMMUTE", "INPLACE", "REDUCE", "RANDOM", "NOINPUT", "VARIADIC" } do
    if bit.band(info.flags, B.C["TIDE_OPF_" .. f]) ~= 0 then flags[#flags + 1] = f:lower() end
  end
  local p = ffi.string(info.params)
  return string.format("op %s of the registry: %s input%s, %d output%s%s%s", name,
    info.n_in < 0 and "1..8" or tostring(info.n_in), info.n_in == 1 and "" or "s", info.n_out,
    info.n_out == 1 and "" or "s", #flags > 0 and ("; " .. table.concat(flags, ", ")) or "",
    p ~= "" and ("\n  params: " .. p) or "")
end

local function columns(words)
  table.sort(words)
  local w = 0
  for _, s in ipairs(words) do w = math.max(w, #s) end
  w = w + 2
  local per = math.max(1, math.floor(M.width / w))
  local out, line = {}, {}
  for i, s in ipairs(words) do
    line[#line + 1] = s .. string.rep(" ", w - #s)
    if #line == per or i == #words then
      out[#out + 1] = "  " .. table.concat(line):gsub("%s+$", "")
      line = {}
    end
  end
  return table.concat(out, "\n")
end

local function module_path(mod)
  for name, m in pairs(package.loaded) do
    if m == mod and type(name) == "string" then
      return name, package.searchpath and package.searchpath(name, package.path)
    end
  end
end

local REPL_HELP = [[
tide REPL: type Lua; an expression prints its value(s). `tide` is loaded.
  help(x)        docs of a Tide function, module or tensor (help(tide), help(tide.matmul), help "matmul")
  who()          the live tensors and their memory
  time(fn, ...)  runs fn, waits for the engine, prints the wall time
  tide.plot(v)   a line chart of numbers or a 1-d tensor in the terminal (a PNG too with gnuplot)
  :time code     times an expression or statement       :who   same as who()
  :jit on|off    compile typed code (off: Ctrl-C stops any loop; the default)
  :help          this text                               :quit  leave (or Ctrl-D)
Keys: Tab completes globals, fields and methods (t:re<Tab>); Up/Down walk the
history (kept in $TIDE_HISTORY, default ~/.tide_history); Ctrl-C stops running code.]]

--- Documentation of x: a Tide function (from the `---` comments of its source,
-- or the op registry), a module (its description and members), a tensor, or a
-- name ("matmul", "tide.randn", "Tensor"). With no argument, the REPL's help.
-- @param x the thing to document
-- @return the text
function M.help_text(x, ...)
  if select("#", x, ...) == 0 or x == nil then return REPL_HELP end
  if type(x) == "string" then
    local found
    local name = x:gsub("^tide%.", ""):gsub("^t:", "")
    if name == "Tensor" or name == "tide" then found = name == "Tensor" and tide.Tensor or tide end
    found = found or rawget(tide, name) or tide.Tensor[name] or tide.debug[name]
    if found == nil then
      local v = _G
      for part in x:gmatch("[^%.]+") do v = type(v) == "table" and v[part] or nil end
      found = v
    end
    if found == nil then
      local od = op_doc(name)
      if od then return od end
      return string.format("help: nothing is called %q (try help(tide) for the list)", x)
    end
    return M.help_text(found)
  end
  if tide.is_tensor(x) then
    return string.format("a tensor: %s, %d elements. Its methods: help(tide.Tensor); a method: help(t.relu)",
      short_tensor(x), x:numel())
  end
  if type(x) == "function" then
    local names = names_of(x)
    local info = debug.getinfo(x, "S")
    local sig = info.what == "C" and "" or params(x)
    local title = #names > 0 and table.concat(names, sig .. ", ") .. sig or ("a function" .. sig)
    local out = { title }
    if info.what == "C" then
      out[#out + 1] = "a built-in function (LuaJIT's; see the Lua 5.1 manual)"
      return table.concat(out, "\n")
    end
    local src = info.source:sub(1, 1) == "@" and info.source:sub(2)
    local doc = src and doc_above(src, info.linedefined)
    if doc then out[#out + 1] = doc end
    for _, n in ipairs(names) do
      local od = op_doc(n:match("[%w_]+$"))
      if od then out[#out + 1] = od break end
    end
    if #out == 1 then out[#out + 1] = "no documentation" end
    out[#out + 1] = string.format("(defined at %s:%d)", info.short_src, info.linedefined)
    return table.concat(out, "\n")
  end
  if type(x) == "table" then
    local out = {}
    local name, path = module_path(x)
    if x == tide.Tensor then
      out[1] = "tide.Tensor: the methods of tensors (t:name(...)); help(t.NAME) or help \"NAME\" for one"
    elseif name then
      out[1] = (path and file_header(path)) or ("module " .. name)
    else
      out[1] = "a table: " .. M.pretty(x):sub(1, 200)
    end
    local fns, tabs, vals = {}, {}, {}
    for k, v in pairs(x) do
      if type(k) == "string" then
        if type(v) == "function" then fns[#fns + 1] = k
        elseif type(v) == "table" then tabs[#tabs + 1] = k
        else vals[#vals + 1] = k end
      end
    end
    if #fns > 0 then out[#out + 1] = "functions:\n" .. columns(fns) end
    if #tabs > 0 then out[#out + 1] = "tables:\n" .. columns(tabs) end
    if #vals > 0 and #vals < 30 then out[#out + 1] = "values:\n" .. columns(vals) end
    return table.concat(out, "\n")
  end
  return string.format("a %s: %s", type(x), M.pretty(x))
end

--- Prints the documentation of x (see help_text).
function M.help(...) say(M.help_text(...)) end

-- -- completion ---------------------------------------------------------------------------

local function safe_index(v, k)
  local ok, r = pcall(function() return v[k] end)
  if ok then return r end
end

-- The keys offered after `v.` or `v:` (callables only for `:`).
local function keys_of(v, colon)
  local keys = {}
  local function add_table(t, depth)
    for k, x in pairs(t) do
      if is_ident(k) and (not colon or type(x) == "function") then keys[k] = true end
    end
    local mt = getmetatable(t)
    if depth < 5 and mt and type(mt.__index) == "table" then add_table(mt.__index, depth + 1) end
  end
  if type(v) == "table" then
    add_table(v, 1)
  elseif tide.is_tensor(v) then
    add_table(tide.Tensor, 1)
  elseif type(v) == "string" then
    add_table(string, 1)
  end
  return keys
end

--- The completions of `word`, the end of `line` (what is typed before the
-- cursor): globals and keywords, or the fields, methods and module members
-- after `a.b.` or `a:`. Each is the whole word, sorted.
-- @param line the text before the cursor
-- @param word its last word
-- @return a list of strings
-- @usage M.complete("x = t:re", "t:re")  --> { "t:reciprocal", "t:relu", ... }
function M.complete(line, word)
  word = word or line:match("[%w_%.:]*$")
  local r = {}
  local base, sep, partial = word:match("^(.-)([%.:])([%w_]*)$")
  if not base then
    partial = word
    for k in pairs(KEYWORDS) do
      if k:sub(1, #partial) == partial then r[#r + 1] = k end
    end
    for k in pairs(keys_of(_G, false)) do
      if k:sub(1, #partial) == partial then r[#r + 1] = k end
    end
  else
    if not base:match("^[%a_][%w_]*$") and not base:match("^[%a_][%w_%.]*[%w_]$") then return r end
    local v = _G
    for part in base:gmatch("[^%.]+") do
      v = safe_index(v, part)
      if v == nil then return r end
    end
    for k in pairs(keys_of(v, sep == ":")) do
      if k:sub(1, #partial) == partial then r[#r + 1] = base .. sep .. k end
    end
  end
  table.sort(r)
  return r
end

-- -- commands --------------------------------------------------------------------------

commands.help = function(rest) M.help(rest ~= "" and rest or nil) end
commands.h = commands.help
commands.who = function() M.who() end
commands.quit = function() return "quit" end
commands.q = commands.quit
commands.time = function(code)
  if code == "" then say("usage: :time expression or statement") return end
  local fn, err = compile(code, "=stdin")
  if not fn then say(err) return end
  local r = protected(function() return M.time(fn, pack) end)
  if not r[1] then say(r[2]) return end
  r = protected(show, r[2])
  if not r[1] then say(r[2]) end
end
commands.jit = function(rest)
  if rest == "on" then M.interpreted = false
  elseif rest == "off" then M.interpreted = true
  elseif rest ~= "" then say("usage: :jit on|off") return end
  say("typed code is " .. (M.interpreted and "interpreted (Ctrl-C stops any loop)" or "compiled by LuaJIT"))
end

-- -- the loop ---------------------------------------------------------------------------

--- Sets the REPL's globals: help, who, time (and jit.compile when tide.jit exists).
function M.install_globals()
  _G.help, _G.who, _G.time = M.help, M.who, M.time
  -- TODO(jit): tide.jit (the graph compiler) is not there yet; when it is, the REPL offers jit.compile.
  if rawget(tide, "jit") and type(tide.jit) == "table" and tide.jit.compile then
    _G.jit.compile = tide.jit.compile
  end
end

--- Runs the REPL until end of input or :quit.
-- @param host the services of tide.c (readline, add_history, set_completer, now, protect, tty)
function M.run(host)
  if host then
    for k, v in pairs(host) do sys[k] = v end
  end
  if not M.started then
    M.started = true
    M.install_globals()
    sys.set_completer(M.complete)
    if sys.tty then
      say(string.format("tide %s on %s. help() for help, Ctrl-D to leave.", tide._VERSION, jit.version))
    end
  end
  while true do
    local line = sys.readline(buffer and M.prompt2 or M.prompt)
    if line == nil then return end
    if line == false then
      M.cancel()
    else
      if line:match("%S") then sys.add_history(line) end
      local ok, res = xpcall(M.feed, on_error, line)
      if not ok then say(res) buffer = nil end
      if res == "quit" then return end
    end
  end
end

return M
