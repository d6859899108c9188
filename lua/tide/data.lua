--- tide.data: datasets and batches, after PyTorch's torch.utils.data.
-- `TensorDataset(x, y)` holds tensors that share their first dimension;
-- `DataLoader(ds, opts)` cuts a dataset into batches, shuffled or not:
--
--     local loader = tide.data.DataLoader(tide.data.TensorDataset(x, y),
--                                         { batch_size = 64, shuffle = true, seed = 1 })
--     for epoch = 1, 10 do
--       for xb, yb in loader:iter() do ... end   -- or: for xb, yb in loader do ... end
--     end
--
-- A batch of a TensorDataset is gathered by one `index_select` per tensor,
-- which the engine runs asynchronously; the loader enqueues the next batch's
-- gather before it hands out the current one, so that batch is computed while
-- the training step runs. Other datasets (any table or object with `get(i)` or
-- `[i]`, and `len()`, `__len` or `#`) are read item by item and collated:
-- tensors are stacked along a new first dimension, numbers become 1-d int64
-- tensors when all are integers and float64 ones otherwise (as PyTorch's
-- default_collate), booleans bool tensors; tables are collated key by key,
-- other values (strings) are returned as lists.
--
-- LuaJIT (Lua 5.1) ignores `__len` on tables, so datasets and loaders are
-- userdata proxies, which it honours: `#ds` and `#loader` work.
local B = require "bindings.ffi"
local T = require "tide.tensor"
local ffi, C = B.ffi, B.C
local fail = B.fail
local is_tensor = T.is_tensor
local floor = math.floor

local M = {}

-- `require "tide"` is in progress while init.lua loads this file: fetch it at first use.
local function tide() return require "tide" end

-- A userdata whose fields live in `state`, whose methods come from `class`,
-- and whose `#`, call, tostring and numeric indexing go to the class's `_len`,
-- `_call`, `_tostring` and `_at`.
local function object(state, class)
  local u = newproxy(true)
  local mt = getmetatable(u)
  setmetatable(state, { __index = class })
  mt.__index = class._at and function(_, k)
    if type(k) == "number" then return class._at(u, k) end
    return state[k]
  end or state
  mt.__newindex = state
  mt.__len = class._len
  mt.__call = class._call
  mt.__tostring = class._tostring
  mt.__metatable = class   -- getmetatable(obj) tells the class
  return u
end

local function pack(...) return { n = select("#", ...), ... } end

local function is_int(x) return type(x) == "number" and x == floor(x) end

-- -- TensorDataset ------------------------------------------------------------------------

local TensorDataset = {}
M.TensorDataset_class = TensorDataset

--- A dataset of tensors that share their first dimension: item i is row i of each.
-- `ds[i]` is the table { x[i], y[i], ... }, `ds:get(i)` returns them as values
-- (views, 1-based, negative counts from the end); `#ds` is the number of rows.
-- @param ... tensors with the same size of dimension 1
-- @usage local ds = tide.data.TensorDataset(images, labels); local x, y = ds:get(1)
function M.TensorDataset(...)
  local n = select("#", ...)
  if n == 0 then fail("TensorDataset: expects at least one tensor") end
  local tensors = { ... }
  for i = 1, n do
    local t = tensors[i]
    if not is_tensor(t) then fail(string.format("TensorDataset: argument %d must be a tensor, got %s", i, type(t))) end
    if t:dim() == 0 then fail(string.format("TensorDataset: tensor %d is 0-d; it needs a first dimension", i)) end
    if t:size(1) ~= tensors[1]:size(1) then
      fail(string.format("TensorDataset: tensor %d has %d rows but tensor 1 has %d", i, t:size(1), tensors[1]:size(1)))
    end
  end
  return object({ tensors = tensors, n = tensors[1]:size(1) }, TensorDataset)
end

function TensorDataset.len(ds) return ds.n end
TensorDataset._len = TensorDataset.len

--- The rows i of every tensor, as multiple values.
function TensorDataset.get(ds, i)
  local n = ds.n
  if not is_int(i) or i == 0 or i > n or i < -n then
    fail(string.format("TensorDataset: index %s is out of range for %d rows", tostring(i), n))
  end
  local ts, r = ds.tensors, {}
  for k = 1, #ts do r[k] = ts[k]:select(1, i) end
  return unpack(r, 1, #ts)
end

function TensorDataset._at(ds, i) return { TensorDataset.get(ds, i) } end

--- The rows listed by `index` (an int64 tensor of 1-based indices) of every
-- tensor: a list of new tensors, gathered by asynchronous index_select ops.
function TensorDataset.gather(ds, index)
  local r, on = {}, { [index:device()] = index }   -- the index, on each tensor's device
  for k, t in ipairs(ds.tensors) do
    local dev = t:device()
    on[dev] = on[dev] or index:to(dev)
    r[k] = t:index_select(1, on[dev])
  end
  r.n = #r
  return r
end

function TensorDataset._tostring(ds)
  local shapes = {}
  for k, t in ipairs(ds.tensors) do shapes[k] = "[" .. table.concat(t:shape(), ",") .. "] " .. t:dtype() end
  return string.format("TensorDataset(%d rows: %s)", ds.n, table.concat(shapes, ", "))
end

-- -- generic datasets -----------------------------------------------------------------------

-- ds[k] without letting an __index that raises on unknown keys (tensors do) escape.
local function field(ds, k)
  local ok, v = pcall(function() return ds[k] end)
  if ok then return v end
  return nil
end

-- The number of items: ds:len(), a metatable's __len (Lua 5.2 style), or #ds.
local function length_fn(ds)
  local len = field(ds, "len")
  if type(len) == "function" then return function() return len(ds) end end
  local mt = type(ds) == "table" and getmetatable(ds)
  if type(mt) == "table" and type(mt.__len) == "function" then return function() return mt.__len(ds) end end
  return function() return #ds end
end

local collate

-- The values of one position across the samples of a batch, as one batch value.
local function collate_values(values, what)
  local first = values[1]
  local kind = is_tensor(first) and "tensor" or type(first)
  for i = 2, #values do
    local v = values[i]
    local k = is_tensor(v) and "tensor" or type(v)
    if k ~= kind then
      fail(string.format("DataLoader: %s is a %s in sample 1 but a %s in sample %d of the batch", what, kind, k, i))
    end
  end
  if kind == "tensor" then return tide().stack(values, 1) end
  if kind == "number" then
    local ints = true
    for i = 1, #values do if not is_int(values[i]) or math.abs(values[i]) >= 2 ^ 53 then ints = false; break end end
    return tide().tensor(values, ints and "int64" or "float64")   -- as PyTorch's default_collate
  end
  if kind == "boolean" then return tide().tensor(values, "bool") end
  if kind == "table" then return collate(values, what) end
  return values
end

-- Tables collate key by key.
function collate(samples, what)
  local r = {}
  for k in pairs(samples[1]) do
    local col = {}
    for i, s in ipairs(samples) do
      if s[k] == nil then
        fail(string.format("DataLoader: key %s of %s is missing in sample %d of the batch", tostring(k), what, i))
      end
      col[i] = s[k]
    end
    r[k] = collate_values(col, string.format("%s[%s]", what, tostring(k)))
  end
  return r
end

-- -- DataLoader --------------------------------------------------------------------------------

local DataLoader = {}
M.DataLoader_class = DataLoader

local function check_flag(opts, k)
  local v = opts[k]
  if v ~= nil and type(v) ~= "boolean" then
    fail(string.format("DataLoader: %s must be a boolean, got %s", k, type(v)))
  end
  return v == true
end

--- Batches of a dataset.
-- @param dataset a TensorDataset, a tensor (its rows), or any dataset with get(i) or [i] and a length
-- @param opts `batch_size` (default 1); `shuffle` (default false): a new random
--   order each epoch; `drop_last` (default false): leave out a last, smaller
--   batch; `seed`: shuffle reproducibly, independently of the global generator:
--   epoch e (counted by iter() calls from 0, or set with set_epoch) draws its
--   permutation with tide.randperm from Philox stream `seed` at counter offset
--   e * 2^40, and the global generator's state is restored afterwards. Without
--   a seed, shuffling draws from the global generator (tide.manual_seed).
-- @return a loader: `#loader` is the number of batches; `loader:iter()` returns an
--   iterator over the batches of the next epoch, each batch as multiple values
--   (one per tensor of a TensorDataset); `for xb, yb in loader do` does the same.
-- @usage for xb, yb in tide.data.DataLoader(ds, { batch_size = 32, shuffle = true }):iter() do ... end
function M.DataLoader(dataset, opts)
  opts = opts or {}
  if type(opts) ~= "table" then fail("DataLoader: options must be a table, got " .. type(opts)) end
  local known = { batch_size = true, shuffle = true, drop_last = true, seed = true }
  for k in pairs(opts) do
    if not known[k] then fail(string.format("DataLoader: unknown option '%s'", tostring(k))) end
  end
  if is_tensor(dataset) then dataset = M.TensorDataset(dataset) end
  local td = type(dataset)
  if td ~= "table" and td ~= "userdata" then fail("DataLoader: dataset must be a table or a dataset object, got " .. td) end
  local bs = opts.batch_size or 1
  if not is_int(bs) or bs < 1 then fail("DataLoader: batch_size must be a positive integer, got " .. tostring(bs)) end
  local seed = opts.seed
  if seed ~= nil and (not is_int(seed) or seed < 0 or seed >= 2 ^ 53) then
    fail("DataLoader: seed must be a non-negative integer, got " .. tostring(seed))
  end
  local gather = getmetatable(dataset) == TensorDataset and TensorDataset.gather or nil
  local get = field(dataset, "get")
  if type(get) ~= "function" then get = nil end
  return object({
    dataset = dataset, batch_size = bs, shuffle = check_flag(opts, "shuffle"),
    drop_last = check_flag(opts, "drop_last"), seed = seed, epoch = 0,
    _length = length_fn(dataset), _gather = gather, _get = get,
  }, DataLoader)
end

--- The number of items in the dataset.
function DataLoader.dataset_len(self)
  local n = self._length()
  if not is_int(n) or n < 0 then fail("DataLoader: the dataset's length must be a non-negative integer, got " .. tostring(n)) end
  return n
end

--- The number of batches of an epoch (also `#loader`).
function DataLoader.len(self)
  local n, bs = self:dataset_len(), self.batch_size
  if self.drop_last then return floor(n / bs) end
  return math.ceil(n / bs)
end
DataLoader._len = DataLoader.len

--- Sets the number of the next epoch (for the seeded order when resuming).
function DataLoader.set_epoch(self, e)
  if not is_int(e) or e < 0 then fail("set_epoch: epoch must be a non-negative integer, got " .. tostring(e)) end
  self.epoch = e
end

local state_seed, state_offset = ffi.new("uint64_t[1]"), ffi.new("uint64_t[1]")

-- The order of an epoch: nil (sequential) or a permutation tensor of 1..n.
local function epoch_order(self, epoch, n)
  if not self.shuffle then return nil end
  if self.seed == nil then return tide().randperm(n) end
  C.tide_rng_get_state(state_seed, state_offset)
  local saved_seed, saved_offset = state_seed[0], state_offset[0]
  C.tide_rng_set_state(self.seed, ffi.cast("uint64_t", epoch) * 1099511627776ULL)   -- epoch * 2^40
  local ok, perm = pcall(tide().randperm, n)
  C.tide_rng_set_state(saved_seed, saved_offset)
  if not ok then error(perm, 0) end
  return perm
end

-- Starts the work of batch b: for a TensorDataset, enqueues its gathers;
-- otherwise reads its items and collates them. Returns the batch values (with .n).
local function fetch(self, order, order_list, b, n)
  local bs = self.batch_size
  local first = (b - 1) * bs + 1
  local len = math.min(bs, n - first + 1)
  if self._gather then
    local index = order and order:narrow(1, first, len) or tide().arange(first, first + len)
    return self._gather(self.dataset, index)
  end
  local ds, get = self.dataset, self._get
  local samples, width = {}, nil
  for k = 1, len do
    local i = order_list and order_list[first + k - 1] or first + k - 1
    local s
    if get then s = pack(get(ds, i)) else s = pack(ds[i]) end
    if s.n == 0 or s[1] == nil then fail(string.format("DataLoader: the dataset returned nothing for item %d", i)) end
    for pos = 2, s.n do
      if s[pos] == nil then fail(string.format("DataLoader: value %d of item %d is nil", pos, i)) end
    end
    if width and s.n ~= width then
      fail(string.format("DataLoader: item %d has %d values but item %d has %d", i, s.n, samples[1].i, width))
    end
    width = width or s.n
    s.i = i
    samples[k] = s
  end
  local r = { n = width }
  for pos = 1, width do
    local values = {}
    for k = 1, len do values[k] = samples[k][pos] end
    r[pos] = collate_values(values, "value " .. pos)
  end
  return r
end

--- An iterator over the batches of the next epoch; each call returns a batch as
-- multiple values, nil after the last. The next batch's work is started before
-- the current batch is returned.
-- @usage for xb, yb in loader:iter() do ... end
function DataLoader.iter(self)
  local n = self:dataset_len()
  local nb = self:len()
  local epoch = self.epoch
  self.epoch = epoch + 1
  local order = epoch_order(self, epoch, n)
  local order_list = order and not self._gather and order:totable() or nil
  local b = 0
  local ahead = nb > 0 and fetch(self, order, order_list, 1, n) or nil
  return function()
    if b >= nb then return nil end
    b = b + 1
    local batch = ahead
    ahead = b < nb and fetch(self, order, order_list, b + 1, n) or nil   -- prefetch before handing out
    return unpack(batch, 1, batch.n)
  end
end

-- `for xb, yb in loader do`: Lua calls loader(nil, control); control is nil on
-- the first call of a loop, which starts a new epoch.
function DataLoader._call(self, _, control)
  if control == nil or self._it == nil then self._it = self:iter() end
  local r = { self._it() }
  if r[1] == nil then self._it = nil end
  return unpack(r)
end

function DataLoader._tostring(self)
  return string.format("DataLoader(%d items, batch_size %d, %d batches%s%s%s)", self:dataset_len(), self.batch_size,
    self:len(), self.shuffle and ", shuffle" or "", self.drop_last and ", drop_last" or "",
    self.seed and (", seed " .. self.seed) or "")
end

return M
