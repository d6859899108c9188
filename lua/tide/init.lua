--- tide: deep learning from LuaJIT. `local tide = require "tide"`.
-- This file assembles the module: the tensor metatype (methods, operators,
-- indexing, printing), the creation functions, the random functions and the
-- runtime's settings. The op functions themselves come from tide.tensor.
-- Like the bindings, one instance per Lua state: the metatype binds its methods once.
local REG = debug.getregistry()
if REG["tide.module"] then return REG["tide.module"] end
local B = require "bindings.ffi"
local T = require "tide.tensor"
local index = require "tide.index"
local format = require "tide.format"
local autograd = require "tide.autograd"
local ffi, C = B.ffi, B.C
local fail, raise, wrap = B.fail, B.raise, B.wrap
local methods, functions, is_tensor = T.methods, T.functions, T.is_tensor

local tide = { _VERSION = ffi.string(C.tide_version()) }

for name, f in pairs(functions) do tide[name] = f end
tide.is_tensor = is_tensor

-- -- the metatype ---------------------------------------------------------------------

local add, sub, mul, div = functions.add, functions.sub, functions.mul, functions.div
local getters, setters = autograd.getters, autograd.setters
local mt = {
  __index = function(t, k)
    local m = methods[k]
    if m ~= nil then return m end
    local get = getters[k]
    if get then return get(t) end
    if type(k) == "string" then
      fail(string.format("tensor has no method or field '%s'", k))
    end
    return index.get(t, k)
  end,
  __newindex = function(t, k, v)
    local set = setters[k]
    if set then return set(t, v) end
    index.set(t, k, v)
  end,
  __add = add,
  __sub = sub,
  __mul = mul,
  __div = div,
  __mod = functions.remainder,
  __pow = functions.pow,
  __unm = functions.neg,
  __len = function(t)
    if t.ndim == 0 then fail("len: a 0-d tensor has no length") end
    return tonumber(t.sizes[0])
  end,
  __tostring = format.tostring,
}
ffi.metatype("struct tide_tensor", mt)

-- -- creation -----------------------------------------------------------------------

-- Splits creation arguments: sizes (numbers or one table) then an optional
-- options table or dtype string. Returns sizes, dtype id, options.
local function creation_args(name, ...)
  local n = select("#", ...)
  while n > 0 and select(n, ...) == nil do n = n - 1 end
  local last = n > 0 and select(n, ...) or nil
  local opts
  if type(last) == "string" then
    opts = { dtype = last }; n = n - 1
  elseif type(last) == "table" and (n > 1 or last.dtype or last.device or last.requires_grad ~= nil) and
         not (n == 1 and #last > 0) then
    opts = last; n = n - 1
  end
  opts = opts or {}
  local sizes
  local first = ...
  if n == 1 and type(first) == "table" then
    sizes = first
  else
    sizes = {}
    for i = 1, n do sizes[i] = (select(i, ...)) end
  end
  for i, s in ipairs(sizes) do
    if type(s) ~= "number" then fail(string.format("%s: size %d must be a number, got %s", name, i, type(s))) end
  end
  local dtype = opts.dtype and T.dtype_id(opts.dtype, name) or 0
  return sizes, dtype, opts
end

-- Applies opts.requires_grad to a new tensor.
local function finish(t, opts)
  if type(opts) == "table" and opts.requires_grad then t:requires_grad_() end
  return t
end

local devname = ffi.new("char[32]")

-- The device named by opts.device (nil when none is named); the names met are
-- kept parsed (devices do not come and go while Tide runs).
local parsed = {}
local function device_of(opts)
  local name = opts and type(opts) == "table" and opts.device
  if name == nil then return nil end
  local dv = parsed[name]
  if dv then return dv end
  dv = ffi.new("tide_device")
  if C.tide_device_parse(name, dv) ~= 0 then raise() end
  if type(name) == "string" then parsed[name] = dv end
  return dv
end

-- Runs op `opname` (no tensor inputs) with params p on opts.device, or on the
-- default device when opts names none.
local function create(opname, p, opts)
  local dev = device_of(opts)
  if not dev then return T.run(T.op_ids[opname], 0, p, nil) end
  local prev = C.tide_get_default_device()
  if C.tide_set_default_device(dev) ~= 0 then raise() end
  local ok, t = pcall(T.run, T.op_ids[opname], 0, p, nil)
  C.tide_set_default_device(prev)
  if not ok then error(t, 0) end
  return t
end

-- Runs a creation op of the given sizes and scalars.
local function full_op(opname, sizes, dtype, s0, s1, opts)
  local p = T.new_params()
  if #sizes > 8 then fail(string.format("%s: %d dimensions given, at most 8 are supported", opname, #sizes)) end
  for i = 1, #sizes do p.ints[i - 1] = sizes[i] end
  p.n_ints = #sizes
  p.scalars[0], p.scalars[1] = s0 or 0, s1 or 0
  p.dtype = dtype
  return finish(create(opname, p, opts), opts)
end

--- zeros(2, 3), zeros({2, 3}), zeros(2, 3, {dtype = "int64"}) or zeros(2, 3, "int64").
function tide.zeros(...) local s, d, o = creation_args("zeros", ...) return full_op("full", s, d, 0, 0, o) end
function tide.ones(...) local s, d, o = creation_args("ones", ...) return full_op("full", s, d, 1, 0, o) end
--- empty(...): contents undefined (here: zero, from a fresh or reused block).
function tide.empty(...)
  local s, d, o = creation_args("empty", ...)
  local n = T.fill_sizes(s, "empty")
  local t = C.tide_tensor_empty(n, T.sizebuf, d, device_of(o) or C.tide_get_default_device())
  if t == nil then raise() end
  return finish(wrap(t, tonumber(t.nelem) * tonumber(C.tide_dtype_size(d))), o)
end
--- full(sizes, value, dtype_or_opts)
function tide.full(sizes, value, opts)
  if type(sizes) == "number" then sizes = { sizes } end
  if type(value) == "boolean" then value = value and 1 or 0 end
  if type(value) ~= "number" then fail("full: value must be a number, got " .. type(value)) end
  local _, d, o = creation_args("full", sizes, opts)
  return full_op("full", sizes, d, value, 0, o)
end

-- zeros_like(t, dtype_or_opts) & co: t's shape, dtype and device unless the options say otherwise.
local function like(name, f)
  tide[name .. "_like"] = function(t, a, b)
    if not is_tensor(t) then fail(name .. "_like: argument 1 must be a tensor") end
    local opts = type(b) == "table" and b or type(a) == "table" and a or {}
    local dtype = (type(b) == "string" and b) or (type(a) == "string" and name ~= "full" and a) or opts.dtype
      or methods.dtype(t)
    local o = { dtype = dtype, device = opts.device or methods.device(t), requires_grad = opts.requires_grad }
    return f(methods.shape(t), o, a)
  end
end
like("zeros", function(s, o) return tide.zeros(s, o) end)
like("ones", function(s, o) return tide.ones(s, o) end)
like("empty", function(s, o) return tide.empty(s, o) end)
like("full", function(s, o, v) return tide.full(s, v, o) end)
like("rand", function(s, o) return tide.rand(s, o) end)
like("randn", function(s, o) return tide.randn(s, o) end)
functions.full_like = tide.full_like

--- arange(end), arange(start, end), arange(start, end, step): start .. end-1, like PyTorch.
function tide.arange(a, b, c, opts)
  if type(c) ~= "number" then c, opts = 1, c end
  if type(b) ~= "number" then
    if b ~= nil then opts = b end
    a, b = 0, a
  end
  local d = 3  -- int64 unless a bound or the step is fractional, or a dtype is given
  if a ~= math.floor(a) or b ~= math.floor(b) or c ~= math.floor(c) then d = 0 end
  if type(opts) == "string" then opts = { dtype = opts } end
  if opts and opts.dtype then d = T.dtype_id(opts.dtype, "arange") end
  local p = T.new_params()
  p.scalars[0], p.scalars[1], p.scalars[2] = a, b, c
  p.dtype = d
  return create("arange", p, opts)
end

--- linspace(start, end, steps): steps values from start to end, both included.
function tide.linspace(a, b, steps, opts)
  if type(steps) ~= "number" then fail("linspace: steps must be a number") end
  local _, d, o = creation_args("linspace", opts)
  local p = T.new_params()
  p.scalars[0], p.scalars[1] = a, b
  p.ints[0], p.n_ints = steps, 1
  p.dtype = d
  return create("linspace", p, o)
end

--- eye(n), eye(n, m): the identity matrix.
function tide.eye(n, m, opts)
  if type(m) ~= "number" then m, opts = n, m end
  local _, d, o = creation_args("eye", opts)
  return full_op("eye", { n, m }, d, 0, 0, o)
end

-- Infers shape and flattens nested tables of numbers/booleans.
local function flatten_data(data)
  local shape, flat, all_bool = {}, {}, true
  local function probe(x, d)
    if type(x) == "table" then
      shape[d] = #x
      if #x > 0 then probe(x[1], d + 1) end
    end
  end
  probe(data, 1)
  local function walk(x, d)
    if d > #shape then
      if type(x) == "boolean" then
        flat[#flat + 1] = x and 1 or 0
      elseif type(x) == "number" then
        flat[#flat + 1] = x; all_bool = false
      elseif is_tensor(x) and x.nelem == 1 then
        flat[#flat + 1] = x:item(); all_bool = false
      else
        fail(string.format("tensor: element at depth %d must be a number or boolean, got %s", d, type(x)))
      end
      return
    end
    if type(x) ~= "table" or #x ~= shape[d] then
      fail(string.format("tensor: ragged nested table: expected %d elements at depth %d, got %s", shape[d], d,
        type(x) == "table" and tostring(#x) or type(x)))
    end
    for i = 1, #x do walk(x[i], d + 1) end
  end
  walk(data, 1)
  return shape, flat, all_bool and #flat > 0
end

--- tensor(data, dtype_or_opts): a tensor from a number, a boolean or nested tables.
-- The dtype defaults to float32 (bool when every element is a boolean).
function tide.tensor(data, opts)
  if is_tensor(data) then return data:clone() end
  if type(opts) == "string" then opts = { dtype = opts } end
  opts = opts or {}
  local td = type(data)
  if td ~= "table" and td ~= "number" and td ~= "boolean" then
    fail("tensor: data must be a number, a boolean or a nested table, got " .. td)
  end
  local shape, flat, all_bool = flatten_data(data)
  local d = opts.dtype and T.dtype_id(opts.dtype, "tensor") or (all_bool and 5 or 0)
  local n = T.fill_sizes(shape, "tensor")
  local buf = ffi.new("double[?]", math.max(#flat, 1), flat)
  if #flat > 0 then
    for i = 1, #flat do buf[i - 1] = flat[i] end
  end
  local t = C.tide_tensor_from_doubles(buf, n, T.sizebuf, d)
  if t == nil then raise() end
  t = wrap(t, #flat * tonumber(C.tide_dtype_size(d)))
  local dev = device_of(opts) or C.tide_get_default_device()
  if dev.type ~= 0 or dev.index >= 0 then t = t:to(ffi.string(C.tide_device_format(dev, devname, 32))) end
  return finish(t, opts)
end

-- -- random ---------------------------------------------------------------------------

--- rand(sizes...): uniform on [0, 1). randn: standard normal.
function tide.rand(...) local s, d, o = creation_args("rand", ...) return full_op("rand", s, d, 0, 1, o) end
function tide.randn(...) local s, d, o = creation_args("randn", ...) return full_op("randn", s, d, 0, 1, o) end
--- randint(low, high, sizes, dtype_or_opts): integers in [low, high) (int64 by default).
function tide.randint(low, high, sizes, opts)
  if type(high) ~= "number" then low, high, sizes, opts = 0, low, high, sizes end
  if type(sizes) == "number" then sizes = { sizes } end
  if type(sizes) ~= "table" then fail("randint: sizes must be a table of numbers") end
  local _, d, o = creation_args("randint", sizes, opts)
  if not (opts and (opts == "string" or (type(opts) == "table" and opts.dtype))) and type(opts) ~= "string" then
    d = 3
  end
  return full_op("randint", sizes, d, low, high, o)
end
--- randperm(n): a random permutation of 1..n (int64).
function tide.randperm(n, opts)
  local _, d, o = creation_args("randperm", opts)
  if not (opts and (type(opts) == "string" or opts.dtype)) then d = 3 end
  local p = T.new_params()
  p.ints[0], p.n_ints, p.dtype, p.flags = n, 1, d, C.TIDE_PARAMF_ONE_BASED
  return create("randperm", p, o)
end
--- bernoulli(p): 1 with probability p per element, in p's dtype.
function tide.bernoulli(p)
  if not is_tensor(p) then fail("bernoulli: argument must be a tensor of probabilities") end
  T.ins_set(0, p)
  return T.run(T.op_ids.bernoulli, 1, nil, nil)
end
methods.bernoulli = tide.bernoulli
--- t:bernoulli_(p): fills t with draws of probability p (a number or a tensor).
function methods.bernoulli_(t, p)
  if p == nil then p = 0.5 end
  if type(p) == "number" then
    p = tide.full({}, p, { dtype = t:is_floating_point() and t:dtype() or "float32", device = t:device() })
  end
  T.ins_set(0, p)
  return T.run(T.op_ids.bernoulli, 1, nil, t)
end
function methods.uniform_(t, a, b)
  return t:copy_(tide.rand(t:shape(), { dtype = t:dtype(), device = t:device() }) * ((b or 1) - (a or 0)) + (a or 0))
end
function methods.normal_(t, mean, std)
  return t:copy_(tide.randn(t:shape(), { dtype = t:dtype(), device = t:device() }) * (std or 1) + (mean or 0))
end

--- manual_seed(seed): the generator restarts from seed; the same seed gives the same numbers.
function tide.manual_seed(seed)
  if type(seed) ~= "number" or seed < 0 or seed ~= math.floor(seed) then
    fail("manual_seed: seed must be a non-negative integer, got " .. tostring(seed))
  end
  C.tide_manual_seed(seed)
end
function tide.initial_seed() return tonumber(C.tide_initial_seed()) end

--- get_rng_state(): the generator's state, as a 2-element int64 tensor (its seed
-- and the next unused counter of its Philox stream, bit for bit); set_rng_state
-- takes it back, so the numbers drawn after it repeat. It can be saved with tide.save.
-- @usage local s = tide.get_rng_state(); local a = tide.rand(3); tide.set_rng_state(s); assert(tide.equal(a, tide.rand(3)))
function tide.get_rng_state()
  local seed, offset = ffi.new("uint64_t[1]"), ffi.new("uint64_t[1]")
  C.tide_rng_get_state(seed, offset)
  local s = tide.empty({ 2 }, { dtype = "int64", device = "cpu" })
  local p = ffi.cast("uint64_t *", s:data_ptr())
  p[0], p[1] = seed[0], offset[0]
  return s
end
function tide.set_rng_state(s)
  if not T.is_tensor(s) or s:dtype() ~= "int64" or s:dim() ~= 1 or s:numel() ~= 2 then
    fail("set_rng_state: expects the int64 tensor of 2 elements get_rng_state gives, got "
      .. (T.is_tensor(s) and (s:dtype() .. " of shape [" .. table.concat(s:shape(), ",") .. "]") or type(s)))
  end
  local c = s:cpu():contiguous()
  local p = ffi.cast("uint64_t *", c:data_ptr())
  C.tide_rng_set_state(p[0], p[1])
end

-- -- runtime ----------------------------------------------------------------------------

--- Waits for all pending work; raises the first error not yet reported.
function tide.sync() if C.tide_sync() ~= 0 then raise() end end
function tide.set_num_threads(n)
  if type(n) ~= "number" or n < 1 then fail("set_num_threads: n must be a positive integer") end
  C.tide_set_num_threads(n)
end
function tide.get_num_threads() return C.tide_get_num_threads() end

--- The runtime's configuration as a table (version, simd, threads, blas, ...).
function tide.config()
  local r = {}
  for k, v in ffi.string(C.tide_config()):gmatch("([%w_]+)=([^\n]*)") do r[k] = tonumber(v) or v end
  return r
end

--- Memory counters of the host allocator, in bytes.
function tide.memory_stats()
  B.release_collected()
  local s = ffi.new("tide_mem_stats")
  C.tide_mem_get_stats(s)
  return { in_use = tonumber(s.bytes_in_use), cached = tonumber(s.bytes_cached), peak = tonumber(s.peak_in_use),
           allocs = tonumber(s.n_allocs), reused = tonumber(s.n_reused) }
end
function tide.empty_cache() B.release_collected(); C.tide_mem_empty_cache() end
--- Starts memory_stats().peak over from the bytes in use now.
function tide.reset_peak_memory() C.tide_mem_reset_peak() end

--- tide.cuda: whether CUDA devices are usable here, and why not. The CUDA backend
-- (libtide_cuda, built where the CUDA toolkit is found) is looked for on the first question.
tide.cuda = {}
--- is_available(): true, or false and the reason.
function tide.cuda.is_available()
  if C.tide_cuda_device_count() > 0 then return true end
  return false, ffi.string(C.tide_cuda_status())
end
--- device_count(): the CUDA devices found (0 without a GPU, its driver or the backend).
function tide.cuda.device_count() return tonumber(C.tide_cuda_device_count()) end
--- status(): the devices found, or why there are none.
function tide.cuda.status() return ffi.string(C.tide_cuda_status()) end

-- A CUDA device argument: nil (cuda:0), N or "cuda:N", as its index.
local function cuda_index(what, device)
  if device == nil then return 0 end
  if type(device) == "number" and device >= 0 and device % 1 == 0 then return device end
  local n = type(device) == "string" and device:match("^cuda:(%d+)$")
  if n then return tonumber(n) end
  fail(("tide.cuda.%s: expected a CUDA device (N or 'cuda:N'), got %s"):format(what,
    type(device) == "string" and "'" .. device .. "'" or tostring(device)))
end

--- synchronize(device): waits until the work queued so far is done and raises
-- the first failure, as tide.sync() does (for every device: a stronger wait
-- than PyTorch's, which waits for one); device (N or "cuda:N") must exist.
function tide.cuda.synchronize(device)
  local n = cuda_index("synchronize", device)
  local count = tonumber(C.tide_cuda_device_count())
  if n >= count then
    local ok, why = tide.cuda.is_available()
    fail(ok and ("tide.cuda.synchronize: there is no device cuda:%d (the CUDA devices are cuda:0 to cuda:%d)"):format(n, count - 1)
      or "tide.cuda.synchronize: " .. why)
  end
  tide.sync()
end

--- memory_stats(device): what the caching allocator of a CUDA device (N or
-- "cuda:N", default 0) holds, in bytes: `in_use` by tensors, `cached` for reuse,
-- `reserved` from the device (both), `peak` in use; and counts: `allocs`,
-- `reused` (from the cache), `segments` (device allocations), `cache_flushes`
-- (times the device was full and the cache was freed before a retry), `ooms`.
-- Raises when there is no such device, with the reason.
-- @usage print(tide.cuda.memory_stats("cuda:0").in_use)
function tide.cuda.memory_stats(device)
  B.release_collected()
  local s = ffi.new("tide_devmem_stats")
  B.check(C.tide_cuda_memory_stats(cuda_index("memory_stats", device), s))
  return { in_use = tonumber(s.bytes_in_use), cached = tonumber(s.bytes_cached),
           reserved = tonumber(s.bytes_reserved), peak = tonumber(s.peak_in_use), allocs = tonumber(s.n_allocs),
           reused = tonumber(s.n_reused), segments = tonumber(s.n_segments),
           cache_flushes = tonumber(s.n_cache_flushes), ooms = tonumber(s.n_ooms) }
end
--- empty_cache(device): returns a CUDA device's cached, unused memory to the driver.
function tide.cuda.empty_cache(device)
  B.release_collected()
  B.check(C.tide_cuda_empty_cache(cuda_index("empty_cache", device)))
end
--- reset_peak_memory(device): starts memory_stats(device).peak over from what is in use now.
function tide.cuda.reset_peak_memory(device)
  B.check(C.tide_cuda_reset_peak(cuda_index("reset_peak_memory", device)))
end

--- get_device_properties(device): what a CUDA device (N or "cuda:N", default 0)
-- is: `name`, `total_memory` (bytes), `major` and `minor` (its compute
-- capability), `multi_processor_count`. Raises when there is no such device.
-- @usage print(tide.cuda.get_device_properties(0).name)
function tide.cuda.get_device_properties(device)
  local p = ffi.new("tide_cuda_props")
  B.check(C.tide_cuda_device_props(cuda_index("get_device_properties", device), p))
  return { name = ffi.string(p.name), total_memory = tonumber(p.total_bytes), major = tonumber(p.major),
           minor = tonumber(p.minor), multi_processor_count = tonumber(p.multi_processors) }
end
--- get_device_name(device): a CUDA device's name ("NVIDIA H100 80GB HBM3").
function tide.cuda.get_device_name(device)
  return tide.cuda.get_device_properties(device).name
end
--- get_device_capability(device): a CUDA device's compute capability, as two numbers (9, 0).
function tide.cuda.get_device_capability(device)
  local p = tide.cuda.get_device_properties(device)
  return p.major, p.minor
end

--- set_allow_tf32(on): lets float32 matmuls on CUDA devices use TF32 tensor cores
-- (inputs rounded to a 10-bit mantissa, float32 sums; much faster on Ampere and
-- later). Off by default, as in PyTorch. An op takes the setting in force when
-- it is called.
function tide.cuda.set_allow_tf32(on)
  if type(on) ~= "boolean" then
    fail(("tide.cuda.set_allow_tf32: expected true or false, got %s"):format(type(on)))
  end
  C.tide_cuda_set_allow_tf32(on and 1 or 0)
end
--- allow_tf32(): whether float32 matmuls on CUDA devices may use TF32.
function tide.cuda.allow_tf32() return C.tide_cuda_allow_tf32() ~= 0 end

--- set_default_device(name): where creation functions (tensor, zeros, rand,
-- arange, ...) put tensors when their options name no device: "cpu" unless
-- set. Per Lua state's thread, like PyTorch's torch.set_default_device.
function tide.set_default_device(name)
  if type(name) ~= "string" then
    fail("set_default_device: expected a device name ('cpu', 'cpu:N', 'cuda:N'), got " .. type(name))
  end
  local dv = ffi.new("tide_device")
  if C.tide_device_parse(name, dv) ~= 0 or C.tide_set_default_device(dv) ~= 0 then raise() end
end
-- TIDE_DEFAULT_DEVICE=cuda:0 starts the main thread with that default device:
-- how a whole spec suite or script runs on a device unchanged.
do
  local name = os.getenv("TIDE_DEFAULT_DEVICE")
  if name and name ~= "" then
    local ok, err = pcall(tide.set_default_device, name)
    if not ok then fail("TIDE_DEFAULT_DEVICE: " .. tostring(err):gsub("^.-: ", "", 1)) end
  end
end
--- get_default_device(): the name of the default device.
function tide.get_default_device()
  return ffi.string(C.tide_device_format(C.tide_get_default_device(), devname, 32))
end

--- The devices ops can run on: "cpu" and the separate queues "cpu:0" .. "cpu:N-1".
function tide.devices()
  local r = { "cpu" }
  for i = 0, C.tide_device_cpu_count() - 1 do r[#r + 1] = "cpu:" .. i end
  for i = 0, tonumber(C.tide_cuda_device_count()) - 1 do r[#r + 1] = "cuda:" .. i end
  return r
end

tide.debug = {}
--- Runs fn with every op executed at once, in order, so an error is raised by the
-- line that enqueued the failing op (like TIDE_SYNC=1, for one region).
function tide.debug.sync(fn, ...)
  local prev = C.tide_get_sync()
  C.tide_set_sync(1)
  local r = { pcall(fn, ...) }
  C.tide_set_sync(prev)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2)
end
function tide.debug.is_sync() return C.tide_get_sync() ~= 0 end

--- Runs fn and writes a Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev)
-- of the ops each device ran to path. Returns what fn returns.
function tide.profile(fn, path)
  if type(fn) ~= "function" then fail("profile: argument 1 must be a function") end
  path = path or "tide_trace.json"
  C.tide_trace_start()
  local r = { pcall(fn) }
  if C.tide_trace_stop(path) ~= 0 then raise() end
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2)
end
function tide.dtypes()
  local r = {}
  for i = 0, #T.dtype_names do r[#r + 1] = T.dtype_names[i] end
  return r
end

tide.format = format
tide.autograd = autograd
tide.no_grad, tide.enable_grad = autograd.no_grad, autograd.enable_grad
tide.set_grad_enabled, tide.is_grad_enabled = autograd.set_grad_enabled, autograd.is_grad_enabled
tide.io = require "tide.io"               -- files; checkpoints are tide.save / tide.load
tide.save, tide.load = tide.io.save, tide.io.load
tide.data = require "tide.data"           -- TensorDataset, DataLoader
--- plot(values, opts): a line chart in the terminal (a PNG too with gnuplot); see tide.plot.
tide.plot = require "tide.plot"
tide.Tensor = methods   -- the method table, for extension: function tide.Tensor.foo(t) ... end
tide.optim = require "tide.optim"
tide.jit = require "tide.jit"           -- jit.compile: capture a function into a graph, replay it
tide.utils = { checkpoint = require "tide.checkpoint" }   -- utils.checkpoint: recompute instead of keeping
tide.amp = require "tide.amp"           -- autocast (mixed precision)
tide.autocast = tide.amp.autocast
require("tide.compose")(tide, methods)  -- functions and methods composed from the ops above
require("tide.distance")(tide, methods)  -- cdist, pdist
require("tide.linalg")(tide, methods)  -- tide.linalg: solve, cholesky, eigh, qr, svd, ...

-- tide.nn, tide.distributions and tide.special are loaded on first use (they require tide itself)
setmetatable(tide, { __index = function(t, k)
  if k == "nn" or k == "distributions" or k == "special" then
    t[k] = require("tide." .. k)
    return t[k]
  end
end })
REG["tide.module"] = tide
return tide
