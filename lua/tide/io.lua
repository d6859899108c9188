--- tide.io: files. Checkpoints (`tide.save` / `tide.load`, in the safetensors
-- format), NumPy's .npy and .npz, IDX (the MNIST format) and CSV. The runtime
-- parses and writes the bytes (runtime/src/io/); this file turns its tensor
-- dicts into Lua tables and flattens nested tables into checkpoint names.
--
-- Checkpoint layout. A table of tensors is stored one safetensors entry per
-- tensor, named by its keys joined with "." (`{ state = { [1] = { exp_avg = t } } }`
-- gives "state.1.exp_avg"; integer keys are written in decimal). Numbers,
-- strings and booleans go into the `__metadata__` string map under the same
-- kind of name ("param_groups.1.lr" -> "0.001", with enough digits to read
-- back exactly; "inf", "-inf", "nan"; "true", "false"). A flat table whose keys are strings and whose values are all
-- tensors is stored as just that, as PyTorch's safetensors writer would.
-- Anything else also gets the metadata entry "tide.keys": a JSON array with
-- one [name, type, path] per entry, where type is "tensor", "number", "string",
-- "boolean" or "table" (an empty table) and path lists the keys, integer keys
-- as JSON numbers and string keys as JSON strings. That is how `{[1] = t}` and
-- `{["1"] = t}` stay distinct, and how a key containing "." is told from
-- nesting; tide.load rebuilds the same nested table from it. Entries are
-- ordered (integer keys first, then strings), so the same table always gives
-- the same bytes.
--
-- Errors, including corrupt or truncated files, are raised at the caller's line
-- and name the function, the file and what is wrong.
local B = require "bindings.ffi"
local T = require "tide.tensor"
local ffi, C = B.ffi, B.C
local fail, raise, wrap = B.fail, B.raise, B.wrap
local is_tensor = T.is_tensor
local floor, huge = math.floor, math.huge

local M = {}

local KEYS = "tide.keys"        -- the metadata entry that records nesting and types
local MAX_INT_KEY = 1e14        -- integer keys round-trip exactly through lua-cjson below this

-- lua-cjson, loaded on first use: only nested checkpoints need it.
local json
local function get_json()
  if not json then
    local ok, cjson = pcall(require, "cjson")
    if not ok then fail("tide.io: nested checkpoints need lua-cjson (tools/setup-deps installs it): " .. cjson) end
    json = cjson.new()
  end
  return json
end

local function check_path(op, path)
  if type(path) ~= "string" then
    fail(string.format("%s: argument 1 (path) must be a string, got %s", op, type(path)))
  end
end

local function check_opts(op, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail(string.format("%s: options must be a table, got %s", op, type(opts))) end
  for k in pairs(opts) do
    if not known[k] then fail(string.format("%s: unknown option '%s'", op, tostring(k))) end
  end
  return opts
end

-- -- tensor dicts ----------------------------------------------------------------

-- Takes an owned tide_tensor_dict * (raising the runtime's error if NULL) and
-- returns its names and tensors (lists, in its order) and its metadata (a map).
local function take_dict(d)
  if d == nil then raise() end
  d = ffi.gc(d, C.tide_tensor_dict_free)
  local names, tensors, meta = {}, {}, {}
  for i = 0, tonumber(C.tide_tensor_dict_count(d)) - 1 do
    local p = C.tide_tensor_dict_tensor(d, i)
    C.tide_tensor_retain(p)
    names[#names + 1] = ffi.string(C.tide_tensor_dict_name(d, i))
    tensors[#tensors + 1] = wrap(p, tonumber(C.tide_tensor_nbytes(p)))
  end
  for i = 0, tonumber(C.tide_tensor_dict_meta_count(d)) - 1 do
    meta[ffi.string(C.tide_tensor_dict_meta_key(d, i))] = ffi.string(C.tide_tensor_dict_meta_value(d, i))
  end
  C.tide_tensor_dict_free(ffi.gc(d, nil))
  return names, tensors, meta
end

local function new_dict()
  local d = C.tide_tensor_dict_new()
  if d == nil then raise() end
  return ffi.gc(d, C.tide_tensor_dict_free)
end

-- -- flattening nested tables ----------------------------------------------------------

-- `["a"][1]` for messages: Lua's own notation of a key path.
local function path_str(path)
  local r = {}
  for i, k in ipairs(path) do r[i] = type(k) == "string" and string.format("[%q]", k) or string.format("[%d]", k) end
  return table.concat(r)
end

local function key_name(k) return type(k) == "string" and k or string.format("%d", k) end

local function copy(list) local r = {} for i = 1, #list do r[i] = list[i] end return r end

-- Integers first (ascending), then strings: a stable order for the file.
local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta == "number" end
  return a < b
end

-- The entries of a nested table: { name, path, kind, value } per tensor, number,
-- string, boolean or empty table, in a deterministic order.
local function flatten(root, op)
  local entries, on_stack = {}, {}
  local function walk(tbl, path, prefix)
    if on_stack[tbl] then fail(string.format("%s: the table at %s contains itself", op, path_str(path))) end
    on_stack[tbl] = true
    local keys = {}
    for k in pairs(tbl) do
      local tk = type(k)
      if tk == "number" then
        if k ~= floor(k) or k ~= k or math.abs(k) >= MAX_INT_KEY then
          fail(string.format("%s: key %s in the table at %s: number keys must be integers of magnitude below 1e14",
            op, tostring(k), path_str(path) == "" and "the top" or path_str(path)))
        end
      elseif tk ~= "string" then
        fail(string.format("%s: key %s in the table at %s is a %s; keys must be strings or integers", op,
          tostring(k), path_str(path) == "" and "the top" or path_str(path), tk))
      end
      keys[#keys + 1] = k
    end
    table.sort(keys, key_less)
    if #keys == 0 and #path > 0 then
      entries[#entries + 1] = { name = prefix, path = copy(path), kind = "table" }
    end
    for _, k in ipairs(keys) do
      local v = tbl[k]
      local name = #path == 0 and key_name(k) or prefix .. "." .. key_name(k)
      path[#path + 1] = k
      local tv = type(v)
      if is_tensor(v) then
        entries[#entries + 1] = { name = name, path = copy(path), kind = "tensor", value = v }
      elseif tv == "table" then
        walk(v, path, name)
      elseif tv == "number" or tv == "string" or tv == "boolean" then
        entries[#entries + 1] = { name = name, path = copy(path), kind = tv, value = v }
      else
        fail(string.format("%s: the value at %s is a %s; only tensors, numbers, strings, booleans and tables "
          .. "can be saved", op, path_str(path), tv))
      end
      path[#path] = nil
    end
    on_stack[tbl] = nil
  end
  walk(root, {}, "")
  return entries
end

local function encode_value(v)
  if type(v) == "number" then
    if v ~= v then return "nan" end
    if v == huge then return "inf" end
    if v == -huge then return "-inf" end
    for digits = 15, 16 do   -- the shortest of %.15g .. %.17g that reads back exactly
      local s = string.format("%." .. digits .. "g", v)
      if tonumber(s) == v then return s end
    end
    return string.format("%.17g", v)
  end
  return tostring(v)   -- strings as they are; booleans as "true"/"false"
end

local specials = { nan = 0 / 0, inf = huge, ["-inf"] = -huge }

-- t, or its copy in host memory when it is on a CUDA device: what is written.
-- Waited for first, so that a failure of the op that made it is raised as
-- that op's, after `what` (as the C writers word a host tensor's), not as the copy's.
local function host(t, what)
  if not t:is_cuda() then return t end
  if C.tide_tensor_wait(t) ~= 0 then fail(what .. ": " .. ffi.string(C.tide_last_error())) end
  return t:cpu()
end

local function decode_value(kind, s, path, name)
  if kind == "string" then return s end
  if kind == "boolean" then
    if s == "true" then return true elseif s == "false" then return false end
  elseif kind == "number" then
    local v = specials[s] or tonumber(s)
    if v then return v end
  end
  fail(string.format("load: '%s': metadata '%s' is not a %s: %q", path, name, kind, s))
end

--- Saves a table of tensors (nested tables, numbers, strings and booleans
-- included) to path in the safetensors format, atomically: a temporary file
-- beside path is written, fsync'd and renamed over it, so a failed save
-- leaves an existing file intact. See the top of this file for the layout.
-- Tensors on a CUDA device are copied to the host to be written (tide.load
-- gives host tensors; `:to(device)` moves them back).
-- @param path the file to write
-- @param tbl a table name -> tensor, or nested tables (a state_dict, an optimizer's state)
-- @param opts optional: `metadata`, a table of strings stored in `__metadata__`
-- @usage tide.save("model.safetensors", model:state_dict())
-- @usage tide.save("ckpt.safetensors", { model = model:state_dict(), optim = opt:state_dict(), epoch = 3 })
function M.save(path, tbl, opts)
  check_path("save", path)
  if type(tbl) ~= "table" then
    fail(string.format("save: argument 2 must be a table of tensors, got %s", is_tensor(tbl) and "a tensor" or type(tbl)))
  end
  opts = check_opts("save", opts, { metadata = true })
  local entries = flatten(tbl, "save")
  local by_name, flat = {}, true
  for _, e in ipairs(entries) do
    local other = by_name[e.name]
    if other then
      fail(string.format("save: the keys %s and %s would both be stored as '%s'", path_str(other.path),
        path_str(e.path), e.name))
    end
    by_name[e.name] = e
    if #e.path > 1 or type(e.path[1]) ~= "string" or e.kind ~= "tensor" then flat = false end
  end
  local d = new_dict()
  local meta = {}
  if opts.metadata ~= nil then
    if type(opts.metadata) ~= "table" then fail("save: metadata must be a table of strings, got " .. type(opts.metadata)) end
    for k, v in pairs(opts.metadata) do
      if type(k) ~= "string" or type(v) ~= "string" then
        fail(string.format("save: metadata must map strings to strings, got %s -> %s", type(k), type(v)))
      end
      if k == KEYS or (by_name[k] and by_name[k].kind ~= "tensor") then
        fail(string.format("save: metadata key '%s' is taken by the checkpoint's own entries", k))
      end
      meta[k] = v
    end
  end
  if not flat then
    local manifest = {}
    for i, e in ipairs(entries) do
      manifest[i] = { e.name, e.kind, e.path }
      if e.kind ~= "tensor" and e.kind ~= "table" then meta[e.name] = encode_value(e.value) end
    end
    meta[KEYS] = get_json().encode(manifest)
  end
  for _, e in ipairs(entries) do
    if e.kind == "tensor" then
      B.check(C.tide_tensor_dict_add(d, e.name, host(e.value, string.format("save: '%s': tensor '%s'", path, e.name))))
    end
  end
  local keys = {}
  for k in pairs(meta) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do B.check(C.tide_tensor_dict_set_meta(d, k, meta[k])) end
  local rc = C.tide_safetensors_save(path, d)
  C.tide_tensor_dict_free(ffi.gc(d, nil))
  B.check(rc)
end

local function set_path(root, keys, value, path)
  local t = root
  for i = 1, #keys - 1 do
    local k = keys[i]
    local nxt = t[k]
    if nxt == nil then nxt = {}; t[k] = nxt end
    if type(nxt) ~= "table" then
      fail(string.format("load: '%s': tide.keys nests a value under %s, which is not a table", path,
        path_str({ unpack(keys, 1, i) })))
    end
    t = nxt
  end
  local last = keys[#keys]
  if not (type(value) == "table" and not is_tensor(value) and type(t[last]) == "table") then t[last] = value end
end

local kinds = { tensor = true, table = true, number = true, string = true, boolean = true }

--- Loads a safetensors file (written by Tide, PyTorch, or any other writer).
-- Reads each tensor straight from the file into its storage (one copy, no mmap).
-- @param path the file to read
-- @return the table as saved (nested when tide.save stored nesting; name -> tensor otherwise),
--   and the `__metadata__` strings that are not Tide's own entries
-- @usage local sd, meta = tide.load("model.safetensors")
function M.load(path)
  check_path("load", path)
  local names, tensors, meta = take_dict(C.tide_safetensors_load(path))
  local root = {}
  local manifest = meta[KEYS]
  if manifest == nil then
    for i = 1, #names do root[names[i]] = tensors[i] end
    return root, meta
  end
  local ok, m = pcall(get_json().decode, manifest)
  if not ok or type(m) ~= "table" then
    fail(string.format("load: '%s': the tide.keys metadata is not valid JSON: %s", path, tostring(m)))
  end
  local by_name = {}
  for i = 1, #names do by_name[names[i]] = tensors[i] end
  meta[KEYS] = nil
  for i, e in ipairs(m) do
    local name, kind, keys
    if type(e) == "table" then name, kind, keys = e[1], e[2], e[3] end
    if not (type(name) == "string" and kinds[kind] and type(keys) == "table" and #keys > 0) then
      fail(string.format("load: '%s': tide.keys entry %d is malformed (expected [name, type, path])", path, i))
    end
    for _, k in ipairs(keys) do
      if type(k) ~= "string" and type(k) ~= "number" then
        fail(string.format("load: '%s': tide.keys has a malformed path for '%s'", path, tostring(name)))
      end
    end
    local v
    if kind == "tensor" then
      v = by_name[name]
      if v == nil then fail(string.format("load: '%s': tide.keys lists tensor '%s', which the file lacks", path, name)) end
      by_name[name] = nil
    elseif kind == "table" then
      v = {}
    else
      local s = meta[name]
      if s == nil then fail(string.format("load: '%s': tide.keys lists value '%s', which the metadata lacks", path, name)) end
      meta[name] = nil
      v = decode_value(kind, s, path, name)
    end
    set_path(root, keys, v, path)
  end
  for name, t in pairs(by_name) do   -- tensors another writer added: by their names
    if root[name] == nil then root[name] = t end
  end
  return root, meta
end

-- -- NumPy, IDX, CSV ----------------------------------------------------------------------

--- Reads a .npy file. Supports bool, uint8, int8/16/32/64, uint16/32 (widened to
-- int32/int64) and float16/32/64, either byte order; a fortran_order array comes
-- back as a view with column-major strides (`:contiguous()` makes a C-order copy).
-- @param path the .npy file
-- @return a tensor
-- @usage local x = tide.io.load_npy("x.npy")
function M.load_npy(path)
  check_path("load_npy", path)
  local p = C.tide_npy_load(path)
  if p == nil then raise() end
  return wrap(p, tonumber(C.tide_tensor_nbytes(p)))
end

--- Writes t to path as a .npy file (version 1.0, C order, little-endian), atomically.
-- bfloat16 has no NumPy dtype: convert first. A tensor on a CUDA device is
-- copied to the host to be written.
-- @param path the file to write
-- @param t a tensor (any layout: a strided view is written in C order)
-- @usage tide.io.save_npy("x.npy", x)
function M.save_npy(path, t)
  check_path("save_npy", path)
  if not is_tensor(t) then fail("save_npy: argument 2 must be a tensor, got " .. type(t)) end
  B.check(C.tide_npy_save(path, host(t, string.format("save_npy: '%s'", path))))
end

--- Reads an .npz archive (what numpy.savez and savez_compressed write).
-- @param path the .npz file
-- @return a table name -> tensor (names without ".npy")
-- @usage local arrays = tide.io.load_npz("data.npz"); print(arrays.x)
function M.load_npz(path)
  check_path("load_npz", path)
  local names, tensors = take_dict(C.tide_npz_load(path))
  local r = {}
  for i = 1, #names do r[names[i]] = tensors[i] end
  return r
end

--- Reads an IDX file (MNIST's format), gzip'd or not. uint8, float32 and float64
-- keep their type; int8, int16 and int32 give int32.
-- @param path the file (".gz" or not: the contents decide)
-- @return a tensor of the file's shape
-- @usage local images = tide.io.read_idx("train-images-idx3-ubyte.gz")   -- uint8 [60000, 28, 28]
function M.read_idx(path)
  check_path("read_idx", path)
  local p = C.tide_idx_load(path)
  if p == nil then raise() end
  return wrap(p, tonumber(C.tide_tensor_nbytes(p)))
end

local csv_opts = ffi.new("tide_csv_options")

--- Reads a CSV file of numbers (gzip'd or not) into a 2-d tensor [rows, columns].
-- Blank lines are skipped; fields may be double-quoted; empty fields are NaN
-- (an error for integer dtypes).
-- @param path the file (gzip'd or not)
-- @param opts `header` (boolean: the first line names the columns), `delimiter`
--   (one character, "," by default; " " splits at runs of blanks), `dtype` ("float32" by default)
-- @return the tensor, and with a header the list of column names
-- @usage local data, names = tide.io.read_csv("iris.csv", { header = true })
function M.read_csv(path, opts)
  check_path("read_csv", path)
  opts = check_opts("read_csv", opts, { header = true, delimiter = true, dtype = true })
  local delim = opts.delimiter or ","
  if type(delim) ~= "string" or #delim ~= 1 then
    fail(string.format("read_csv: delimiter must be a one-character string, got %s",
      type(delim) == "string" and string.format("%q", delim) or type(delim)))
  end
  if opts.header ~= nil and type(opts.header) ~= "boolean" then
    fail("read_csv: header must be a boolean, got " .. type(opts.header))
  end
  csv_opts.delimiter = delim:byte()
  csv_opts.header = opts.header and 1 or 0
  csv_opts.dtype = T.dtype_id(opts.dtype or "float32", "read_csv")
  local names, tensors, meta = take_dict(C.tide_csv_load(path, csv_opts))
  assert(names[1] == "data")
  if not opts.header then return tensors[1] end
  local cols = {}
  for k, v in pairs(meta) do cols[tonumber(k) + 1] = v end
  return tensors[1], cols
end

M.save_safetensors, M.load_safetensors = M.save, M.load

return M
