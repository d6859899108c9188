--- tide.compose: the functions and tensor methods a PyTorch user expects that
-- are compositions of ops tide has (roll, diagonal, kron, tensordot, diff,
-- cross, meshgrid, nonzero, logaddexp, isnan, nan_to_num, median, quantile,
-- unique, addmm, index_put, scatter_reduce, cov, gcd, bitwise_and,
-- matrix_exp, NumPy's names, ...), so autograd, every device and
-- tide.jit take them unchanged. Kernels of their own belong to the runtime's
-- registry; nothing here defines a name that exists already.
-- Called once, by init.lua: require("tide.compose")(tide, methods).
local B = require "bindings.ffi"
local args = require "tide.args"
local T = require "tide.tensor"
local fail, is_tensor, size_args = B.fail, T.is_tensor, T.size_args
local floor, fmt, abs, min, max = math.floor, string.format, math.abs, math.min, math.max
local LN2 = math.log(2)

-- -- argument checks ------------------------------------------------------------------

local is_int, options, need_tensor, need_int = args.is_int, args.options, args.need_tensor, args.need_int

-- A tensor, or a Lua number/boolean as a 0-d wrapped number (weak in type promotion).
local function operand(x, name, pos)
  if is_tensor(x) then return x end
  local tx = type(x)
  if tx == "number" or tx == "boolean" then return T.scalar(x) end
  fail(fmt("%s: argument %d must be a tensor or a number, got %s", name, pos, tx))
end

-- A dimension of an n-d tensor (1-based, negative from the end) as a positive one.
local function wrap_dim(n, d, name)
  if not is_int(d) or d == 0 or d > n or d < -n then
    fail(fmt("%s: dimension %s is out of range for a %d-d tensor", name, tostring(d), n))
  end
  return d > 0 and d or n + d + 1
end

-- A number or a table of numbers as a table.
local function int_list(v, name, what)
  if type(v) == "number" then v = { v } end
  if type(v) ~= "table" then
    fail(fmt("%s: %s must be a number or a table of numbers, got %s", name, what, type(v)))
  end
  for i = 1, #v do
    if not is_int(v[i]) then fail(fmt("%s: %s must be integers, got %s", name, what, tostring(v[i]))) end
  end
  return v
end

local function shape_str(s) return "[" .. table.concat(s, ",") .. "]" end

-- The tensors of f(a, b, c) or f({a, b, c}), checked, and a trailing options table.
local function tensor_args(name, ...)
  local list, n = { ... }, select("#", ...)
  while n > 0 and list[n] == nil do n = n - 1 end
  local opts
  if n > 0 and type(list[n]) == "table" and #list[n] == 0 and next(list[n]) ~= nil then
    opts = list[n]; list[n] = nil; n = n - 1
  end
  if n == 1 and type(list[1]) == "table" then list = list[1]; n = #list end
  if n == 0 then fail(name .. ": expects at least one tensor") end
  for i = 1, n do
    if not is_tensor(list[i]) then fail(fmt("%s: argument %d must be a tensor, got %s", name, i, type(list[i]))) end
  end
  return list, opts or {}
end

-- The dtype of a floating result of a and b (tensors or numbers): the widest
-- floating dtype among the tensors; float32 for integers and for float16 with bfloat16.
local function float_result(a, b)
  local seen = {}
  for _, x in ipairs { a, b } do if is_tensor(x) then seen[x:dtype()] = true end end
  if seen.float64 then return "float64" end
  if seen.float32 then return "float32" end
  if seen.float16 and not seen.bfloat16 then return "float16" end
  if seen.bfloat16 and not seen.float16 then return "bfloat16" end
  return "float32"
end

return function(tide, methods)
  -- Defines tide[name] and, with as_method, methods[name] -- each only where
  -- the name is free, so that a kernel added to the registry later wins.
  local function define(name, f, as_method)
    if tide[name] == nil then tide[name] = f end
    if as_method and methods[name] == nil then methods[name] = f end
  end
  local function device_opts(x, dtype) return { device = x:device(), dtype = dtype } end

  -- -- function forms of methods ------------------------------------------------------

  --- reshape(x, ...), permute(x, ...), narrow(x, dim, start, length) & co:
  -- the tensor methods called as functions, as torch.reshape & co.
  for _, name in ipairs { "reshape", "permute", "transpose", "squeeze", "unsqueeze", "flatten", "narrow",
                          "select", "chunk", "split", "unbind", "t", "clone", "numel" } do
    local m = methods[name]
    define(name, function(x, ...) return m(need_tensor(x, name), ...) end)
  end
  --- swapaxes(x, d1, d2), swapdims: transpose's NumPy names.
  define("swapaxes", function(x, a, b) return methods.transpose(need_tensor(x, "swapaxes"), a, b) end, true)
  define("swapdims", function(x, a, b) return methods.transpose(need_tensor(x, "swapdims"), a, b) end, true)

  --- movedim(x, source, destination): x with dims source (a dim or a table) moved
  -- to positions destination, the others in their order; a view, as torch.movedim.
  -- @usage tide.movedim(x, 1, -1)        -- NCHW -> CHWN
  local function movedim(x, src, dst)
    need_tensor(x, "movedim")
    local n = x:dim()
    src, dst = int_list(src, "movedim", "source"), int_list(dst, "movedim", "destination")
    if #src ~= #dst then
      fail(fmt("movedim: source and destination must have the same number of dims, got %d and %d", #src, #dst))
    end
    local perm, used = {}, {}
    for i = 1, #src do
      local s, d = wrap_dim(n, src[i], "movedim"), wrap_dim(n, dst[i], "movedim")
      if used[s] then fail(fmt("movedim: repeated dim %d in source", src[i])) end
      if perm[d] then fail(fmt("movedim: repeated dim %d in destination", dst[i])) end
      perm[d], used[s] = s, true
    end
    local s = 1
    for d = 1, n do
      if not perm[d] then
        while used[s] do s = s + 1 end
        perm[d], used[s] = s, true
      end
    end
    if n == 0 then return x end
    return x:permute(perm)
  end
  define("movedim", movedim, true)
  define("moveaxis", movedim, true)

  --- unflatten(x, dim, sizes): dim split into sizes (one may be -1), as torch.unflatten.
  -- @usage x:unflatten(2, { 2, -1 })     -- [4,6] -> [4,2,3]
  define("unflatten", function(x, dim, sizes)
    need_tensor(x, "unflatten")
    local d = wrap_dim(x:dim(), dim, "unflatten")
    if type(sizes) ~= "table" or #sizes == 0 then
      fail("unflatten: sizes must be a non-empty table of numbers, got " .. type(sizes))
    end
    local s, n = x:shape(), x:size(d)
    local prod, infer = 1, nil
    for i, v in ipairs(sizes) do
      if not is_int(v) or v < -1 then fail("unflatten: sizes must be non-negative integers or -1, got " .. tostring(v)) end
      if v == -1 then
        if infer then fail("unflatten: only one size may be -1") end
        infer = i
      else prod = prod * v end
    end
    local out = {}
    for i, v in ipairs(sizes) do out[i] = v end
    if infer then
      if prod == 0 or n % prod ~= 0 then
        fail(fmt("unflatten: sizes %s cannot split dimension %d of size %d", shape_str(sizes), d, n))
      end
      out[infer] = n / prod
    elseif prod ~= n then
      fail(fmt("unflatten: sizes %s don't multiply up to the size of dimension %d (%d)", shape_str(sizes), d, n))
    end
    local shape = {}
    for i = 1, d - 1 do shape[#shape + 1] = s[i] end
    for _, v in ipairs(out) do shape[#shape + 1] = v end
    for i = d + 1, #s do shape[#shape + 1] = s[i] end
    return x:reshape(shape)
  end, true)

  --- ravel(x): x flattened to one dimension (a view when x is contiguous).
  define("ravel", function(x) return need_tensor(x, "ravel"):reshape(-1) end, true)

  --- broadcast_shapes(s1, s2, ...): the shape that tables of sizes broadcast to.
  local function broadcast_shapes(name, shapes)
    local out = {}
    local n = 0
    for _, s in ipairs(shapes) do n = max(n, #s) end
    for k = 1, n do   -- k-th dimension from the end
      local size = 1
      for _, s in ipairs(shapes) do
        local v = s[#s - k + 1] or 1
        if v ~= 1 then
          if size ~= 1 and size ~= v then
            local strs = {}
            for i, t in ipairs(shapes) do strs[i] = shape_str(t) end
            fail(fmt("%s: shapes %s cannot be broadcast together (dimension %d from the end: %d vs %d)", name,
              table.concat(strs, " and "), k, size, v))
          end
          size = v
        end
      end
      out[n - k + 1] = size
    end
    return out
  end
  define("broadcast_shapes", function(...)
    local shapes = { ... }
    for i, s in ipairs(shapes) do int_list(s, "broadcast_shapes", "shape " .. i) end
    return broadcast_shapes("broadcast_shapes", shapes)
  end)
  --- broadcast_to(x, shape): x expanded to shape (a view), as torch.broadcast_to.
  define("broadcast_to", function(x, ...) return need_tensor(x, "broadcast_to"):expand(...) end, true)
  --- broadcast_tensors(a, b, ...): the tensors expanded to their common shape, as a table of views.
  -- @usage local ab = tide.broadcast_tensors(a, b); local a2, b2 = ab[1], ab[2]
  local function broadcast_tensors(...)
    local list = tensor_args("broadcast_tensors", ...)
    local shapes = {}
    for i, t in ipairs(list) do shapes[i] = t:shape() end
    local shape = broadcast_shapes("broadcast_tensors", shapes)
    local r = {}
    for i, t in ipairs(list) do r[i] = t:expand(shape) end
    return r
  end
  define("broadcast_tensors", broadcast_tensors)

  -- -- methods of PyTorch tensors -------------------------------------------------------

  --- x:tolist(): the elements as nested Lua tables (totable's PyTorch name; waits).
  methods.tolist = methods.tolist or methods.totable
  --- x:ndimension(): the number of dimensions, as x:dim().
  methods.ndimension = methods.ndimension or methods.dim

  -- new_zeros(x, sizes..., opts) & co: x's dtype and device unless opts (a
  -- table or a dtype name) say otherwise.
  local function new_opts(x, opts, name)
    if type(opts) == "string" then opts = { dtype = opts } end
    opts = options(opts, name, { dtype = true, device = true, requires_grad = true })
    return { dtype = opts.dtype or x:dtype(), device = opts.device or x:device(), requires_grad = opts.requires_grad }
  end
  local function split_sizes(name, ...)
    local n = select("#", ...)
    while n > 0 and select(n, ...) == nil do n = n - 1 end
    local last = n > 0 and select(n, ...) or nil
    local opts
    if type(last) == "string" or (type(last) == "table" and #last == 0 and (n > 1 or next(last) ~= nil)) then
      opts, n = last, n - 1
    end
    local first = ...
    local sizes = (n == 1 and type(first) == "table") and first or { ... }
    for i = n + 1, #sizes do sizes[i] = nil end
    for i = 1, #sizes do need_int(sizes[i], name, "sizes", 0) end
    return sizes, opts
  end
  --- x:new_zeros(sizes, opts), new_ones, new_empty: a new tensor of x's dtype and device.
  -- @usage local z = x:new_zeros(2, 3)
  for _, k in ipairs { "zeros", "ones", "empty" } do
    methods["new_" .. k] = methods["new_" .. k] or function(x, ...)
      local sizes, opts = split_sizes("new_" .. k, ...)
      return tide[k](sizes, new_opts(x, opts, "new_" .. k))
    end
  end
  --- x:new_full(sizes, value, opts): a new tensor of x's dtype and device filled with value.
  methods.new_full = methods.new_full or function(x, sizes, value, opts)
    if type(sizes) == "number" then sizes = { sizes } end
    if type(sizes) ~= "table" then fail("new_full: sizes must be a table of numbers, got " .. type(sizes)) end
    return tide.full(sizes, value, new_opts(x, opts, "new_full"))
  end
  --- x:new_tensor(data, opts): a copy of data (nested tables, a number or a
  -- tensor, detached) with x's dtype and device.
  methods.new_tensor = methods.new_tensor or function(x, data, opts)
    local o = new_opts(x, opts, "new_tensor")
    if is_tensor(data) then
      local r = data:detach():to(o.dtype, o.device, { copy = true })
      if o.requires_grad then r:requires_grad_() end
      return r
    end
    return tide.tensor(data, o)
  end

  --- clamp_min(x, min), clamp_max(x, max): clamp with one bound (a number or a tensor).
  define("clamp_min", function(x, lo)
    if lo == nil then fail("clamp_min: min must be a number or a tensor, got nil") end
    return methods.clamp(need_tensor(x, "clamp_min"), lo, nil)
  end, true)
  define("clamp_max", function(x, hi)
    if hi == nil then fail("clamp_max: max must be a number or a tensor, got nil") end
    return methods.clamp(need_tensor(x, "clamp_max"), nil, hi)
  end, true)
  methods.clamp_min_ = methods.clamp_min_ or function(x, lo)
    if lo == nil then fail("clamp_min_: min must be a number or a tensor, got nil") end
    return methods.clamp_(x, lo, nil)
  end
  methods.clamp_max_ = methods.clamp_max_ or function(x, hi)
    if hi == nil then fail("clamp_max_: max must be a number or a tensor, got nil") end
    return methods.clamp_(x, nil, hi)
  end

  --- square(x): x * x. x:square_() squares in place.
  define("square", function(x) need_tensor(x, "square"); return x * x end, true)
  methods.square_ = methods.square_ or function(x) return x:mul_(x) end

  --- x:type(): the dtype's name; x:type(dtype): x converted to dtype (a tide
  -- name or PyTorch's "torch.FloatTensor" & co), x itself when it has it.
  local torch_types = { ["torch.FloatTensor"] = "float32", ["torch.DoubleTensor"] = "float64",
    ["torch.HalfTensor"] = "float16", ["torch.BFloat16Tensor"] = "bfloat16", ["torch.IntTensor"] = "int32",
    ["torch.LongTensor"] = "int64", ["torch.ByteTensor"] = "uint8", ["torch.BoolTensor"] = "bool" }
  methods.type = methods.type or function(x, dtype)
    if dtype == nil then return x:dtype() end
    dtype = torch_types[dtype] or dtype
    T.dtype_id(dtype, "type")
    return x:to(dtype)
  end

  --- x:sum_to_size(sizes): x summed down to sizes, which must broadcast to x's shape.
  -- @usage grad:sum_to_size(1, 3)
  methods.sum_to_size = methods.sum_to_size or function(x, ...)
    local sizes = size_args(...)
    local s, n = x:shape(), x:dim()
    local lead = n - #sizes
    local ok = lead >= 0
    for i = 1, #sizes do
      if not is_int(sizes[i]) then fail("sum_to_size: sizes must be integers, got " .. tostring(sizes[i])) end
      if ok and sizes[i] ~= s[lead + i] and sizes[i] ~= 1 then ok = false end
    end
    if not ok then fail(fmt("sum_to_size: size %s is not expandable to size %s", shape_str(sizes), shape_str(s))) end
    local r, keep = x, {}
    for i = 1, #sizes do
      if sizes[i] == 1 and s[lead + i] ~= 1 then keep[#keep + 1] = lead + i end
    end
    if #keep > 0 then r = r:sum(keep, true) end
    if lead > 0 then
      local lead_dims = {}
      for i = 1, lead do lead_dims[i] = i end
      r = r:sum(lead_dims)
    end
    return r
  end

  --- repeat_interleave(x, repeats, dim, {output_size}): each element (or slice
  -- along dim) repeated `repeats` times; repeats is a number or a tensor of a
  -- count per element. Without dim, x is flattened first. With a tensor of
  -- counts and no output_size, the total is read to the host (a sync, as in
  -- PyTorch); give output_size to stay asynchronous. repeat_interleave(counts)
  -- alone gives the (1-based) indices 1..n repeated by counts.
  -- @usage tide.repeat_interleave(x, tide.tensor({1, 2}, "int64"), 1)
  local function repeat_interleave(x, repeats, dim, opts)
    need_tensor(x, "repeat_interleave")
    if repeats == nil then   -- repeat_interleave(counts, nil, nil, opts)
      if x:dim() ~= 1 then fail(fmt("repeat_interleave: counts must be 1-d, got %d-d", x:dim())) end
      return repeat_interleave(tide.arange(1, x:numel() + 1, device_opts(x)), x, 1, opts)
    end
    opts = options(opts, "repeat_interleave", { output_size = true })
    local d
    if dim == nil then x, d = x:reshape(-1), 1 else d = wrap_dim(x:dim(), dim, "repeat_interleave") end
    local s = x:shape()
    if type(repeats) == "number" then
      need_int(repeats, "repeat_interleave", "repeats", 0)
      local e = {}
      for i = 1, #s do e[#e + 1] = s[i]; if i == d then e[#e + 1] = repeats end end
      local r = {}
      for i = 1, #s do r[i] = s[i] end
      r[d] = s[d] * repeats
      return x:unsqueeze(d + 1):expand(e):reshape(r)
    end
    if not is_tensor(repeats) then
      fail("repeat_interleave: repeats must be a number or a tensor, got " .. type(repeats))
    end
    if repeats:is_floating_point() or repeats:dtype() == "bool" then
      fail("repeat_interleave: repeats must be an integer tensor, got " .. repeats:dtype())
    end
    if repeats:dim() > 1 then fail(fmt("repeat_interleave: repeats must be 0-d or 1-d, got %d-d", repeats:dim())) end
    repeats = repeats:to("int64"):reshape(-1)
    if repeats:numel() == 1 then repeats = repeats:expand(s[d]) end
    if repeats:numel() ~= s[d] then
      fail(fmt("repeat_interleave: repeats must have one count per element of dimension %d (%d), got %d",
        d, s[d], repeats:numel()))
    end
    local total = opts.output_size
    if total ~= nil then
      need_int(total, "repeat_interleave", "output_size", 0)
    elseif s[d] == 0 then
      total = 0
    else   -- host read of the total (and the smallest count, to refuse negative ones)
      local v = tide.stack({ repeats:sum(), repeats:amin() }):totable()
      if v[2] < 0 then fail("repeat_interleave: repeats must not be negative, got " .. v[2]) end
      total = v[1]
    end
    -- the source of output j is the number of elements that start at or before j
    local starts = repeats:cumsum(1) - repeats + 1
    local marks = tide.zeros(total + 1, device_opts(x, "int64"))
      :index_add(1, starts:clamp(1, total + 1), tide.ones_like(repeats))
    return x:index_select(d, marks:cumsum(1):narrow(1, 1, total))
  end
  define("repeat_interleave", repeat_interleave, true)

  --- roll(x, shifts, dims): elements shifted along dims, wrapping around;
  -- without dims, x is rolled as if flattened. shifts and dims: numbers or tables.
  -- @usage x:roll(1, 2); x:roll({1, -1}, {1, 2})
  local function roll(x, shifts, dims)
    need_tensor(x, "roll")
    shifts = int_list(shifts, "roll", "shifts")
    if dims == nil then
      if #shifts ~= 1 then fail(fmt("roll: without dims, shifts must be a single number, got %d", #shifts)) end
      return roll(x:reshape(-1), shifts, 1):reshape(x:shape())
    end
    dims = int_list(dims, "roll", "dims")
    if #shifts ~= #dims then
      fail(fmt("roll: shifts and dims must have the same length, got %d and %d", #shifts, #dims))
    end
    local r = x
    for i = 1, #dims do
      local d = wrap_dim(x:dim(), dims[i], "roll")
      local n = x:size(d)
      local k = n > 0 and shifts[i] % n or 0
      if k ~= 0 then r = tide.cat({ r:narrow(d, n - k + 1, k), r:narrow(d, 1, n - k) }, d) end
    end
    if r == x then r = x:clone() end
    return r
  end
  define("roll", roll, true)

  --- rot90(x, k, dims): x rotated by k quarter turns in the plane of dims
  -- (default {1, 2}), from the first towards the second.
  define("rot90", function(x, k, dims)
    need_tensor(x, "rot90")
    k = need_int(k == nil and 1 or k, "rot90", "k")
    dims = int_list(dims or { 1, 2 }, "rot90", "dims")
    if #dims ~= 2 then fail(fmt("rot90: dims must have length 2, got %d", #dims)) end
    if x:dim() < 2 then fail(fmt("rot90: expected a tensor of at least 2 dimensions, got %d", x:dim())) end
    local a, b = wrap_dim(x:dim(), dims[1], "rot90"), wrap_dim(x:dim(), dims[2], "rot90")
    if a == b then fail(fmt("rot90: dims must be different, got %d and %d", dims[1], dims[2])) end
    k = k % 4
    if k == 1 then return x:flip(b):transpose(a, b) end
    if k == 2 then return x:flip(a, b) end
    if k == 3 then return x:flip(a):transpose(a, b) end
    return x:clone()
  end, true)

  --- tile(x, reps): x repeated reps[i] times along each dim; missing reps count as 1.
  define("tile", function(x, ...)
    need_tensor(x, "tile")
    local reps = size_args(...)
    for i = 1, #reps do need_int(reps[i], "tile", "reps", 0) end
    local r = {}
    for _ = #reps + 1, x:dim() do r[#r + 1] = 1 end
    for i = 1, #reps do r[#r + 1] = reps[i] end
    if #r == 0 then return x:clone() end
    return x:repeat_tensor(r)
  end, true)

  -- -- diagonals ----------------------------------------------------------------------

  --- diagonal(x, offset, dim1, dim2): the diagonal of the (dim1, dim2) planes as
  -- the last dim (offset > 0: above the main one). A view (as_strided), except
  -- where autograd records x: there, a differentiable copy (cheaper to
  -- differentiate than the view's storage-wide scatter), so writing into it does not reach x.
  -- @usage x:diagonal(); x:diagonal(1, -2, -1)
  local function diagonal(x, offset, dim1, dim2)
    need_tensor(x, "diagonal")
    offset = need_int(offset or 0, "diagonal", "offset")
    local n = x:dim()
    if n < 2 then fail(fmt("diagonal: expected a tensor of at least 2 dimensions, got %d", n)) end
    local a, b = wrap_dim(n, dim1 or 1, "diagonal"), wrap_dim(n, dim2 or 2, "diagonal")
    if a == b then fail(fmt("diagonal: dim1 and dim2 must be different, got %d and %d", dim1 or 1, dim2 or 2)) end
    local na, nb = x:size(a), x:size(b)
    local k, ra, rb
    if offset >= 0 then k, ra, rb = max(0, min(na, nb - offset)), 0, offset
    else k, ra, rb = max(0, min(na + offset, nb)), -offset, 0 end
    if k == 0 then ra, rb = 0, 0 end
    if x.requires_grad and tide.is_grad_enabled() then
      local y = movedim(x, { a, b }, { n - 1, n }):narrow(n - 1, ra + 1, k):narrow(n, rb + 1, k)
      local s = y:shape()
      s[n] = nil
      s[n - 1] = k * k
      return y:reshape(s):index_select(n - 1, tide.arange(k, device_opts(x)) * (k + 1) + 1)
    end
    local size, stride = {}, {}
    local st = x:stride()
    for d = 1, n do
      if d ~= a and d ~= b then size[#size + 1] = x:size(d); stride[#stride + 1] = st[d] end
    end
    size[#size + 1], stride[#stride + 1] = k, st[a] + st[b]
    return x:as_strided(size, stride, x:storage_offset() + ra * st[a] + rb * st[b])
  end
  define("diagonal", diagonal, true)

  --- diag_embed(x, offset, dim1, dim2): a tensor whose (dim1, dim2) planes
  -- (default: the last two) have the last dim of x on their offset diagonal, zeros elsewhere.
  local function diag_embed(x, offset, dim1, dim2)
    need_tensor(x, "diag_embed")
    offset = need_int(offset or 0, "diag_embed", "offset")
    if x:dim() == 0 then fail("diag_embed: expected a tensor of at least 1 dimension, got 0") end
    local n = x:dim() + 1
    local a, b = wrap_dim(n, dim1 or -2, "diag_embed"), wrap_dim(n, dim2 or -1, "diag_embed")
    if a == b then
      fail(fmt("diag_embed: dim1 and dim2 must be different, got %d and %d", dim1 or -2, dim2 or -1))
    end
    local o = abs(offset)
    local m = x:size(-1) + o
    if o > 0 then
      local s = x:shape()
      s[#s] = o
      x = tide.cat({ x, tide.zeros(s, device_opts(x, x:dtype())) }, -1)
    end
    local i = tide.arange(m, device_opts(x))
    local mask = (i:unsqueeze(2):neg() + i):eq(offset)     -- column - row == offset
    local zero = 0
    if x:dtype() == "bool" then zero = false end
    local r = tide.where(mask, offset >= 0 and x:unsqueeze(-1) or x:unsqueeze(-2), zero)
    return movedim(r, { n - 1, n }, { a, b })
  end
  define("diag_embed", diag_embed, true)

  --- diag(x, diagonal): a 1-d x as the given diagonal of a square matrix; the
  -- given diagonal of a 2-d x, as a new 1-d tensor.
  define("diag", function(x, k)
    need_tensor(x, "diag")
    k = need_int(k or 0, "diag", "diagonal")
    if x:dim() == 1 then return diag_embed(x, k) end
    if x:dim() == 2 then
      local d = diagonal(x, k)
      return d.requires_grad and d or d:clone()
    end
    fail(fmt("diag: expected a 1-d or 2-d tensor, got %d-d", x:dim()))
  end, true)

  --- trace(x): the sum of the main diagonal of a matrix (int64 for integers).
  define("trace", function(x)
    need_tensor(x, "trace")
    if x:dim() ~= 2 then fail(fmt("trace: expected a 2-d tensor, got %d-d", x:dim())) end
    return diagonal(x):sum()
  end, true)

  -- tril_indices(row, col, offset, opts) and triu_indices: the 1-based (row,
  -- column) indices of the lower/upper triangle of a row x col matrix, as a
  -- 2 x N tensor in row-major order (int64 unless opts.dtype says otherwise).
  local function tri_indices(name, upper)
    return function(row, col, offset, opts)
      if type(offset) == "table" or type(offset) == "string" then offset, opts = nil, offset end
      need_int(row, name, "row", 0)
      need_int(col, name, "col", 0)
      offset = need_int(offset or 0, name, "offset")
      if type(opts) == "string" then opts = { dtype = opts } end
      opts = options(opts, name, { dtype = true, device = true })
      local o = { device = opts.device }
      local r = tide.arange(1, row + 1, o):unsqueeze(2):expand(row, col)
      local c = tide.arange(1, col + 1, o):unsqueeze(1):expand(row, col)
      local mask = upper and (c - r):ge(offset) or (c - r):le(offset)
      local out = tide.stack({ r:masked_select(mask), c:masked_select(mask) }, 1)
      return opts.dtype and out:to(opts.dtype) or out
    end
  end
  --- tril_indices(row, col, offset, opts): the indices of tril(ones(row, col), offset).
  -- @usage local ij = tide.tril_indices(3, 3)   -- {{1,2,2,3,3,3},{1,1,2,1,2,3}}
  define("tril_indices", tri_indices("tril_indices", false))
  --- triu_indices(row, col, offset, opts): the indices of triu(ones(row, col), offset).
  define("triu_indices", tri_indices("triu_indices", true))

  -- -- grids and stacking ---------------------------------------------------------------

  --- meshgrid(x1, x2, ..., {indexing = "ij"}): grids of the 0-d or 1-d inputs,
  -- expanded views as a table; indexing "xy" swaps the first two dims (NumPy's default).
  -- @usage local g = tide.meshgrid(xs, ys, { indexing = "xy" })
  local function meshgrid(...)
    local list, opts = tensor_args("meshgrid", ...)
    opts = options(opts, "meshgrid", { indexing = true })
    local indexing = opts.indexing or "ij"
    if indexing ~= "ij" and indexing ~= "xy" then
      fail(fmt("meshgrid: indexing must be 'ij' or 'xy', got '%s'", tostring(indexing)))
    end
    local k, shape, pos = #list, {}, {}
    for i, t in ipairs(list) do
      if t:dim() > 1 then fail(fmt("meshgrid: tensor %d must be 0-d or 1-d, got %d-d", i, t:dim())) end
      pos[i] = i
    end
    if indexing == "xy" and k >= 2 then pos[1], pos[2] = 2, 1 end
    for i, t in ipairs(list) do shape[pos[i]] = t:numel() end
    local r = {}
    for i, t in ipairs(list) do
      local v = {}
      for j = 1, k do v[j] = 1 end
      v[pos[i]] = t:numel()
      r[i] = t:reshape(v):expand(shape)
    end
    return r
  end
  define("meshgrid", meshgrid)

  --- cartesian_prod(x1, x2, ...): the tuples of the 1-d inputs' Cartesian
  -- product as the rows of an N x k tensor (x1 itself for one input).
  define("cartesian_prod", function(...)
    local list = tensor_args("cartesian_prod", ...)
    for i, t in ipairs(list) do
      if t:dim() ~= 1 then fail(fmt("cartesian_prod: tensor %d must be 1-d, got %d-d", i, t:dim())) end
    end
    if #list == 1 then return list[1] end
    local g = meshgrid(list)
    for i = 1, #g do g[i] = g[i]:reshape(-1) end
    return tide.stack(g, 2)
  end)

  -- atleast_1d/2d/3d(x): x viewed with at least that many dims (a table for a table).
  local function atleast(name, nd, f)
    define(name, function(...)
      local first = ...
      if is_tensor(first) and select("#", ...) == 1 then
        return first:dim() >= nd and first or f(first)
      end
      local list = tensor_args(name, ...)
      local r = {}
      for i, t in ipairs(list) do r[i] = t:dim() >= nd and t or f(t) end
      return r
    end)
  end
  atleast("atleast_1d", 1, function(t) return t:reshape(1) end)
  atleast("atleast_2d", 2, function(t) return t:reshape(1, -1) end)
  atleast("atleast_3d", 3, function(t)
    if t:dim() == 0 then return t:reshape(1, 1, 1) end
    if t:dim() == 1 then return t:reshape(1, -1, 1) end
    return t:unsqueeze(-1)
  end)

  -- name(tensors): f applied to each tensor, then cat along a dimension chosen by `dim`.
  local function stacker(name, prep, dim)
    return function(list)
      if type(list) ~= "table" or is_tensor(list) or #list == 0 then
        fail(name .. ": expects a non-empty table of tensors")
      end
      local r = {}
      for i = 1, #list do
        if not is_tensor(list[i]) then fail(fmt("%s: element %d must be a tensor, got %s", name, i, type(list[i]))) end
        r[i] = prep(list[i])
      end
      return tide.cat(r, dim(r))
    end
  end
  --- hstack(tensors): cat along dim 2 (dim 1 for 1-d tensors).
  define("hstack", stacker("hstack", tide.atleast_1d, function(r)
    for _, t in ipairs(r) do if t:dim() > 1 then return 2 end end
    return 1
  end))
  --- vstack(tensors), row_stack: cat along dim 1 of the tensors as at least 2-d.
  define("vstack", stacker("vstack", tide.atleast_2d, function() return 1 end))
  define("row_stack", stacker("row_stack", tide.atleast_2d, function() return 1 end))
  --- dstack(tensors): cat along dim 3 of the tensors as at least 3-d.
  define("dstack", stacker("dstack", tide.atleast_3d, function() return 3 end))
  --- column_stack(tensors): 0-d and 1-d tensors as columns, then hstack.
  define("column_stack", stacker("column_stack", function(t)
    if t:dim() <= 1 then return t:reshape(-1, 1) end
    return t
  end, function() return 2 end))

  --- tensor_split(x, sections_or_indices, dim): views along dim: n sections as
  -- equal as can be (the first ones one longer), or the pieces ending at each
  -- of the given indices (the same numbers as PyTorch's: x[1..i1], x[i1+1..i2], ...).
  local function tensor_split(x, s, dim, name)
    name = name or "tensor_split"
    need_tensor(x, name)
    local d = wrap_dim(x:dim(), dim or 1, name)
    local n, r = x:size(d), {}
    if type(s) == "number" then
      need_int(s, name, "the number of sections", 1)
      local q, extra, start = floor(n / s), n % s, 1
      for i = 1, s do
        local len = q + (i <= extra and 1 or 0)
        r[i] = x:narrow(d, start, len)
        start = start + len
      end
      return r
    end
    if type(s) ~= "table" then
      fail(fmt("%s: expects a number of sections or a table of indices, got %s", name, type(s)))
    end
    local prev = 0
    for i = 1, #s + 1 do
      local e = s[i]
      if i <= #s then need_int(e, name, "indices", 0) else e = n end
      local a, b = min(prev, n), min(e, n)
      r[i] = x:narrow(d, a + 1, max(0, b - a))
      prev = e
    end
    return r
  end
  define("tensor_split", function(x, s, dim) return tensor_split(x, s, dim) end, true)
  -- hsplit/vsplit/dsplit: tensor_split along dim 2 (1 for 1-d), 1, 3; a number
  -- of sections must divide the dim.
  local function nsplit(name, dim_of, need)
    define(name, function(x, s)
      need_tensor(x, name)
      if x:dim() < need then
        fail(fmt("%s: expected a tensor of at least %d dimension%s, got %d", name, need, need > 1 and "s" or "", x:dim()))
      end
      local d = dim_of(x)
      if type(s) == "number" and is_int(s) and s > 0 and x:size(d) % s ~= 0 then
        fail(fmt("%s: dimension %d of size %d cannot be split into %d equal sections", name, d, x:size(d), s))
      end
      return tensor_split(x, s, d, name)
    end, true)
  end
  nsplit("hsplit", function(x) return x:dim() == 1 and 1 or 2 end, 1)
  nsplit("vsplit", function() return 1 end, 2)
  nsplit("dsplit", function() return 3 end, 3)

  --- flipud(x): x reversed along dim 1; fliplr(x): along dim 2.
  define("flipud", function(x)
    need_tensor(x, "flipud")
    if x:dim() < 1 then fail("flipud: expected a tensor of at least 1 dimension, got 0") end
    return x:flip(1)
  end, true)
  define("fliplr", function(x)
    need_tensor(x, "fliplr")
    if x:dim() < 2 then fail(fmt("fliplr: expected a tensor of at least 2 dimensions, got %d", x:dim())) end
    return x:flip(2)
  end, true)

  -- -- comparisons ------------------------------------------------------------------------

  --- isclose(a, b, rtol, atol, equal_nan) or isclose(a, b, {rtol, atol,
  -- equal_nan}): |a - b| <= atol + rtol * |b| elementwise (1e-5, 1e-8 by
  -- default); equal infinities are close; NaN only with equal_nan.
  local function isclose(a, b, rtol, atol, equal_nan)
    if type(rtol) == "table" then
      local o = options(rtol, "isclose", { rtol = true, atol = true, equal_nan = true })
      rtol, atol, equal_nan = o.rtol, o.atol, o.equal_nan
    end
    rtol, atol = rtol or 1e-5, atol or 1e-8
    if type(rtol) ~= "number" or rtol < 0 then fail("isclose: rtol must be a non-negative number, got " .. tostring(rtol)) end
    if type(atol) ~= "number" or atol < 0 then fail("isclose: atol must be a non-negative number, got " .. tostring(atol)) end
    if not is_tensor(a) and not is_tensor(b) then fail("isclose: at least one argument must be a tensor") end
    a, b = operand(a, "isclose", 1), operand(b, "isclose", 2)
    local r = a:eq(b)
    if a:dtype() ~= "bool" and b:dtype() ~= "bool" then
      local diff = (a - b):abs()
      r = r:logical_or(diff:le(b:abs() * rtol + atol):logical_and(diff:lt(math.huge)))
    end
    if equal_nan then r = r:logical_or(a:ne(a):logical_and(b:ne(b))) end
    return r
  end
  define("isclose", isclose, true)
  --- allclose(a, b, ...): whether isclose holds everywhere, as a Lua boolean (reads the host).
  define("allclose", function(a, b, ...) return isclose(a, b, ...):all():item() end, true)
  --- equal(a, b): whether a and b have the same shape and elements, as a Lua boolean.
  define("equal", function(a, b)
    need_tensor(a, "equal", 1); need_tensor(b, "equal", 2)
    if shape_str(a:shape()) ~= shape_str(b:shape()) then return false end
    if a:numel() == 0 then return true end
    return a:eq(b):all():item()
  end, true)

  --- count_nonzero(x, dims): the number of nonzero elements (over dims, or all), int64.
  define("count_nonzero", function(x, dims) return need_tensor(x, "count_nonzero"):ne(0):sum(dims) end, true)

  --- nonzero(x, {as_tuple}): the 1-based indices of x's nonzero elements as the
  -- rows of an N x ndim int64 tensor, or (as_tuple) a table of one 1-d tensor per
  -- dim. N is data-dependent, so the result waits for x (as in PyTorch).
  local function nonzero(x, opts)
    need_tensor(x, "nonzero")
    opts = options(opts, "nonzero", { as_tuple = true })
    local mask = x:ne(0)
    if x:dim() == 0 then
      local idx = tide.ones(1, device_opts(x, "int64")):masked_select(mask:reshape(1))
      if opts.as_tuple then return { idx } end
      return tide.zeros({ idx:numel(), 0 }, device_opts(x, "int64"))
    end
    local s, r = x:shape(), {}
    for d = 1, #s do
      local v = {}
      for j = 1, #s do v[j] = 1 end
      v[d] = s[d]
      r[d] = tide.arange(1, s[d] + 1, device_opts(x)):reshape(v):expand(s):masked_select(mask)
    end
    if opts.as_tuple then return r end
    return tide.stack(r, 2)
  end
  define("nonzero", nonzero, true)
  --- argwhere(x): nonzero(x) as an N x ndim tensor.
  define("argwhere", function(x) return nonzero(x) end, true)

  --- logical_xor(a, b): whether exactly one of a and b is nonzero (bool).
  define("logical_xor", function(a, b)
    a, b = operand(a, "logical_xor", 1), operand(b, "logical_xor", 2)
    return a:ne(0):ne(b:ne(0))
  end, true)

  -- -- arithmetic ------------------------------------------------------------------------

  --- true_divide(a, b): a / b, floating-point (div's other name).
  define("true_divide", tide.div, true)
  methods.true_divide_ = methods.true_divide_ or methods.div_

  -- floor_divide is a registry op (exact for integers); the compositions below use it
  local floor_divide = tide.floor_divide

  -- trunc: the registry's when there is one, else sign(x) * floor(|x|).
  local function trunc(x)
    if tide.trunc then return tide.trunc(x) end
    return x:sign() * x:abs():floor()
  end
  --- frac(x): the fractional part x - trunc(x), with x's sign.
  define("frac", function(x) need_tensor(x, "frac"); return x - trunc(x) end, true)
  methods.frac_ = methods.frac_ or function(x) return x:sub_(trunc(x)) end

  --- xlogy(x, y): x * log(y), 0 where x is 0 (even for y 0 or inf), NaN where y is NaN.
  define("xlogy", function(x, y)
    if not is_tensor(x) and not is_tensor(y) then fail("xlogy: at least one argument must be a tensor") end
    x, y = operand(x, "xlogy", 1), operand(y, "xlogy", 2)
    local zero = x:eq(0)
    local r = tide.where(zero, 0, x * tide.where(zero, 1, y):log())
    if y:is_floating_point() then r = tide.where(y:ne(y), y, r) end
    return r
  end, true)

  --- heaviside(x, values): 0 where x < 0, values where x == 0, 1 where x > 0.
  define("heaviside", function(x, values)
    need_tensor(x, "heaviside", 1)
    values = operand(values, "heaviside", 2)
    if is_tensor(values) and values:dim() > 0 and values:dtype() ~= x:dtype() then
      fail(fmt("heaviside: input and values must have the same dtype, got %s and %s", x:dtype(), values:dtype()))
    end
    return tide.where(x:eq(0), values, x:gt(0):to(x:dtype()))
  end, true)

  -- log(exp(a) + exp(b)) in base e (scale 1) or 2 (scale ln 2), without overflow.
  local function logaddexp_fn(name, scale)
    return function(a, b)
      if not is_tensor(a) and not is_tensor(b) then fail(name .. ": at least one argument must be a tensor") end
      a, b = operand(a, name, 1), operand(b, name, 2)
      local d = (a - b):abs()
      local r = tide.maximum(a, b) + (d * -scale):exp():log1p() / scale
      -- equal inputs (infinities included): a + log(2), half the gradient to each
      return tide.where(a:eq(b), (a + b) * 0.5 + LN2 / scale, r)
    end
  end
  --- logaddexp(a, b): log(exp(a) + exp(b)); logaddexp2(a, b): log2(2^a + 2^b).
  define("logaddexp", logaddexp_fn("logaddexp", 1), true)
  define("logaddexp2", logaddexp_fn("logaddexp2", LN2), true)

  --- hypot(a, b): sqrt(a^2 + b^2), the squares taken in float64 so that they do
  -- not overflow float32 or float16 (in float64 itself, above 1e154).
  define("hypot", function(a, b)
    if not is_tensor(a) and not is_tensor(b) then fail("hypot: at least one argument must be a tensor") end
    local dt = float_result(a, b)
    for i, v in ipairs { a, b } do
      if not is_tensor(v) and type(v) ~= "number" then
        fail(fmt("hypot: argument %d must be a tensor or a number, got %s", i, type(v)))
      end
    end
    if dt ~= "float64" then   -- a number stays one: a 0-d float64 tensor would be on the host
      if is_tensor(a) then a = a:double() end
      if is_tensor(b) then b = b:double() end
    end
    local r = (a * a + b * b):sqrt()
    return dt ~= "float64" and r:to(dt) or r
  end, true)

  --- fmax(a, b), fmin: the elementwise maximum/minimum, taking the number where one is NaN.
  local function nan_ignoring(name, f)
    return function(a, b)
      if not is_tensor(a) and not is_tensor(b) then fail(name .. ": at least one argument must be a tensor") end
      a, b = operand(a, name, 1), operand(b, name, 2)
      return tide.where(a:ne(a), b, tide.where(b:ne(b), a, f(a, b)))
    end
  end
  define("fmax", nan_ignoring("fmax", tide.maximum), true)
  define("fmin", nan_ignoring("fmin", tide.minimum), true)

  --- deg2rad(x), rad2deg(x): angles converted (floating-point).
  define("deg2rad", function(x) return need_tensor(x, "deg2rad") * (math.pi / 180) end, true)
  define("rad2deg", function(x) return need_tensor(x, "rad2deg") * (180 / math.pi) end, true)
  methods.deg2rad_ = methods.deg2rad_ or function(x) return x:mul_(math.pi / 180) end
  methods.rad2deg_ = methods.rad2deg_ or function(x) return x:mul_(180 / math.pi) end

  --- diff(x, n, dim, prepend, append): the n-th forward difference along dim
  -- (default 1 and -1), after prepend and append are joined to x along dim.
  -- Bool tensors give logical_xor of neighbours, as in PyTorch.
  -- @usage tide.diff(x, 1, -1, tide.zeros(3, 1))
  define("diff", function(x, n, dim, prepend, append)
    need_tensor(x, "diff")
    if x:dim() == 0 then fail("diff: expected a tensor of at least 1 dimension, got 0") end
    n = need_int(n == nil and 1 or n, "diff", "n", 0)
    local d = wrap_dim(x:dim(), dim or -1, "diff")
    local parts = {}
    for _, p in ipairs { { prepend, "prepend" }, { x }, { append, "append" } } do
      local t, what = p[1], p[2]
      if t ~= nil then
        if what and not is_tensor(t) then fail(fmt("diff: %s must be a tensor, got %s", what, type(t))) end
        if what and t:dim() ~= x:dim() then
          fail(fmt("diff: %s must have the same number of dimensions as the input (%d), got %d", what, x:dim(), t:dim()))
        end
        parts[#parts + 1] = t
      end
    end
    local y = #parts > 1 and tide.cat(parts, d) or x
    local is_bool = y:dtype() == "bool"
    for _ = 1, n do
      local len = y:size(d)
      if len == 0 then break end
      local hi, lo = y:narrow(d, 2, len - 1), y:narrow(d, 1, len - 1)
      y = is_bool and hi:ne(lo) or hi - lo
    end
    return y
  end, true)

  --- cross(a, b, dim): the cross product of 3-vectors along dim (default: the
  -- first dim of size 3), a and b broadcast together.
  define("cross", function(a, b, dim)
    need_tensor(a, "cross", 1); need_tensor(b, "cross", 2)
    local ab = broadcast_tensors(a, b)
    a, b = ab[1], ab[2]
    local d
    if dim == nil then
      for i = 1, a:dim() do if a:size(i) == 3 then d = i; break end end
      if not d then fail(fmt("cross: no dimension of size 3 in shape %s", shape_str(a:shape()))) end
    else
      d = wrap_dim(a:dim(), dim, "cross")
      if a:size(d) ~= 3 then fail(fmt("cross: dimension %d must have size 3, got %d", d, a:size(d))) end
    end
    local a1, a2, a3 = a:narrow(d, 1, 1), a:narrow(d, 2, 1), a:narrow(d, 3, 1)
    local b1, b2, b3 = b:narrow(d, 1, 1), b:narrow(d, 2, 1), b:narrow(d, 3, 1)
    return tide.cat({ a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1 }, d)
  end, true)

  --- kron(a, b): the Kronecker product; the shorter shape is padded with leading 1s.
  define("kron", function(a, b)
    need_tensor(a, "kron", 1); need_tensor(b, "kron", 2)
    local k = max(a:dim(), b:dim())
    if k > 4 then fail(fmt("kron: at most 4 dimensions are supported, got %d", k)) end
    local sa, sb = a:shape(), b:shape()
    while #sa < k do table.insert(sa, 1, 1) end
    while #sb < k do table.insert(sb, 1, 1) end
    local va, vb, out = {}, {}, {}
    for i = 1, k do
      va[2 * i - 1], va[2 * i] = sa[i], 1
      vb[2 * i - 1], vb[2 * i] = 1, sb[i]
      out[i] = sa[i] * sb[i]
    end
    return (a:reshape(va) * b:reshape(vb)):reshape(out)
  end, true)

  --- tensordot(a, b, dims): the sum of products over the last `dims` dims of a
  -- and the first of b (default 2), or over the dims {{a dims}, {b dims}}.
  -- @usage tide.tensordot(a, b, { { 2, 3 }, { 1, 2 } })
  local function tensordot(a, b, dims)
    need_tensor(a, "tensordot", 1); need_tensor(b, "tensordot", 2)
    local na, nb = a:dim(), b:dim()
    local ca, cb = {}, {}
    if dims == nil then dims = 2 end
    if type(dims) == "number" then
      need_int(dims, "tensordot", "dims", 0)
      if dims > na or dims > nb then
        fail(fmt("tensordot: dims (%d) must be at most the dimensions of both tensors (%d and %d)", dims, na, nb))
      end
      for i = 1, dims do ca[i], cb[i] = na - dims + i, i end
    elseif type(dims) == "table" and #dims == 2 then
      local da, db = int_list(dims[1], "tensordot", "dims"), int_list(dims[2], "tensordot", "dims")
      if #da ~= #db then
        fail(fmt("tensordot: both dims lists must have the same length, got %d and %d", #da, #db))
      end
      for i = 1, #da do ca[i], cb[i] = wrap_dim(na, da[i], "tensordot"), wrap_dim(nb, db[i], "tensordot") end
    else
      fail("tensordot: dims must be a number or a table {dims of a, dims of b}")
    end
    local used_a, used_b = {}, {}
    local K = 1
    for i = 1, #ca do
      if used_a[ca[i]] or used_b[cb[i]] then fail("tensordot: a dimension is contracted twice") end
      used_a[ca[i]], used_b[cb[i]] = true, true
      if a:size(ca[i]) ~= b:size(cb[i]) then
        fail(fmt("tensordot: contracted dimension %d of a has size %d but dimension %d of b has size %d",
          ca[i], a:size(ca[i]), cb[i], b:size(cb[i])))
      end
      K = K * a:size(ca[i])
    end
    local pa, pb, out, M, N = {}, {}, {}, 1, 1
    for d = 1, na do if not used_a[d] then pa[#pa + 1] = d; out[#out + 1] = a:size(d); M = M * a:size(d) end end
    for i = 1, #ca do pa[#pa + 1] = ca[i]; pb[i] = cb[i] end
    for d = 1, nb do if not used_b[d] then pb[#pb + 1] = d; out[#out + 1] = b:size(d); N = N * b:size(d) end end
    if na > 0 then a = a:permute(pa) end
    if nb > 0 then b = b:permute(pb) end
    return a:reshape(M, K):mm(b:reshape(K, N)):reshape(out)
  end
  define("tensordot", tensordot)

  -- -- einsum -------------------------------------------------------------------------

  -- The letters of one side of an einsum term, with "..." as the placeholders
  -- "0".."9" of its (right-aligned) ellipsis dims; nil when the term has no "...".
  local function einsum_term(term, what)
    local rest = term:gsub("%.%.%.", "", 1)
    if not rest:match("^%a*$") then
      fail(fmt("einsum: invalid subscripts '%s' in %s (use letters and at most one '...')", term, what))
    end
    local pre, post = term:match("^(%a*)%.%.%.(%a*)$")
    return pre or term, post, #rest
  end

  --- einsum(equation, a, b, ...): sums of products named by subscripts, as
  -- torch.einsum: "ij,jk->ik" (matmul), "ii->i" (diagonal), "ii" (trace),
  -- "bij,bjk->bik", "...ij->...ji"; without "->", the letters used once, in
  -- alphabetical order. Operands are combined left to right by bmm; dims of
  -- size 1 broadcast. The tensors may also come as one table.
  -- @usage local c = tide.einsum("ij,jk->ik", a, b)
  define("einsum", function(eq, ...)
    if type(eq) ~= "string" then fail("einsum: argument 1 must be an equation string, got " .. type(eq)) end
    local ops = { ... }
    if #ops == 1 and type(ops[1]) == "table" and not is_tensor(ops[1]) then ops = ops[1] end
    for i = 1, #ops do
      if not is_tensor(ops[i]) then fail(fmt("einsum: operand %d must be a tensor, got %s", i, type(ops[i]))) end
    end
    eq = eq:gsub("%s", "")
    local lhs, rhs = eq:match("^(.-)%->(.*)$")
    lhs = lhs or eq
    local terms = {}
    for term in (lhs .. ","):gmatch("([^,]*),") do terms[#terms + 1] = term end
    if #terms ~= #ops then
      fail(fmt("einsum: the equation has %d operands but %d tensors were given", #terms, #ops))
    end
    -- letters of each operand, ellipsis dims as "0".."9" aligned to the right
    local parsed, maxe = {}, 0
    for i, term in ipairs(terms) do
      local pre, post, nl = einsum_term(term, "operand " .. i)
      local nd = ops[i]:dim()
      local e = post and nd - nl or 0
      if (post and e < 0) or (not post and nl ~= nd) then
        fail(fmt("einsum: operand %d has %d dimensions but its subscripts '%s' name %d", i, nd, term, nl))
      end
      parsed[i] = { pre, post or "", e }
      maxe = max(maxe, e)
    end
    local function ell(e)
      local r = ""
      for j = maxe - e + 1, maxe do r = r .. string.char(47 + j) end
      return r
    end
    local letters, count, size, where = {}, {}, {}, {}
    for i, p in ipairs(parsed) do
      local str, L = p[1] .. ell(p[3]) .. p[2], {}
      for k = 1, #str do
        local l = str:sub(k, k)
        L[k] = l
        count[l] = (count[l] or 0) + 1
        local n = ops[i]:size(k)
        local name = l:match("%d") and "'...'" or "'" .. l .. "'"
        if size[l] and size[l] ~= n and (where[l] == i or (size[l] ~= 1 and n ~= 1)) then
          if where[l] == i then
            fail(fmt("einsum: subscript %s is repeated in operand %d with sizes %d and %d", name, i, size[l], n))
          end
          fail(fmt("einsum: subscript %s has size %d in operand %d but %d in operand %d", name, size[l], where[l], n, i))
        end
        if not size[l] or size[l] == 1 then size[l], where[l] = n, i end
      end
      letters[i] = L
    end
    local out = {}
    if rhs then
      local pre, post = einsum_term(rhs, "the output")
      local str = pre .. (post and ell(maxe) .. post or "")
      for k = 1, #str do
        local l = str:sub(k, k)
        if not count[l] then fail(fmt("einsum: output subscript '%s' does not appear in the inputs", l)) end
        for j = 1, #out do
          if out[j] == l then fail(fmt("einsum: subscript '%s' appears more than once in the output", l)) end
        end
        out[#out + 1] = l
      end
    else
      local once = {}
      for l, c in pairs(count) do if c == 1 and l:match("%a") then once[#once + 1] = l end end
      table.sort(once)
      local e = ell(maxe)
      for k = 1, #e do out[#out + 1] = e:sub(k, k) end
      for _, l in ipairs(once) do out[#out + 1] = l end
    end
    local in_out = {}
    for _, l in ipairs(out) do in_out[l] = true end

    -- a repeated letter within an operand takes the diagonal of its dims
    local xs = {}
    for i, x in ipairs(ops) do
      local L = letters[i]
      local again = true
      while again do
        again = false
        for p = 1, #L do
          for q = p + 1, #L do
            if L[p] == L[q] then
              local l = L[p]
              x = diagonal(x, 0, p, q)
              table.remove(L, q); table.remove(L, p)
              L[#L + 1] = l
              again = true
              break
            end
          end
          if again then break end
        end
      end
      xs[i] = x
    end
    -- sums out the letters of x that `keep` lacks
    local function reduce(x, L, keep)
      local dims, R = {}, {}
      for p, l in ipairs(L) do
        if keep[l] then R[#R + 1] = l else dims[#dims + 1] = p end
      end
      if #dims > 0 then x = x:sum(dims) end
      return x, R
    end
    local function later(from, extra)
      local k = {}
      for l in pairs(in_out) do k[l] = true end
      for j = from, #xs do for _, l in ipairs(letters[j]) do k[l] = true end end
      if extra then for _, l in ipairs(extra) do k[l] = true end end
      return k
    end
    local acc, La = xs[1], letters[1]
    for i = 2, #xs do
      acc, La = reduce(acc, La, later(i))
      local b, Lb = reduce(xs[i], letters[i], later(i + 1, La))
      local keep = later(i + 1)
      local pos_a, pos_b = {}, {}
      for p, l in ipairs(La) do pos_a[l] = p end
      for p, l in ipairs(Lb) do pos_b[l] = p end
      local batch, con, fa, fb = {}, {}, {}, {}
      for _, l in ipairs(La) do
        if pos_b[l] then
          if keep[l] then batch[#batch + 1] = l else con[#con + 1] = l end
        else fa[#fa + 1] = l end
      end
      for _, l in ipairs(Lb) do if not pos_a[l] then fb[#fb + 1] = l end end
      -- size-1 dims broadcast against the other operand's
      local sa, sb = acc:shape(), b:shape()
      for _, l in ipairs(batch) do local n = max(sa[pos_a[l]], sb[pos_b[l]]); sa[pos_a[l]], sb[pos_b[l]] = n, n end
      for _, l in ipairs(con) do local n = max(sa[pos_a[l]], sb[pos_b[l]]); sa[pos_a[l]], sb[pos_b[l]] = n, n end
      if #sa > 0 then acc = acc:expand(sa) end
      if #sb > 0 then b = b:expand(sb) end
      local function group(list, pos, s)
        local perm, n, sz = {}, 1, {}
        for _, l in ipairs(list) do perm[#perm + 1] = pos[l]; n = n * s[pos[l]]; sz[#sz + 1] = s[pos[l]] end
        return perm, n, sz
      end
      local pbA, nb, szb = group(batch, pos_a, sa)
      local pfa, nfa, szfa = group(fa, pos_a, sa)
      local pc, nc = group(con, pos_a, sa)
      local pbB = group(batch, pos_b, sb)
      local pcB = group(con, pos_b, sb)
      local pfb, nfb, szfb = group(fb, pos_b, sb)
      local permA, permB = {}, {}
      for _, t in ipairs { pbA, pfa, pc } do for _, p in ipairs(t) do permA[#permA + 1] = p end end
      for _, t in ipairs { pbB, pcB, pfb } do for _, p in ipairs(t) do permB[#permB + 1] = p end end
      if #permA > 0 then acc = acc:permute(permA) end
      if #permB > 0 then b = b:permute(permB) end
      local shape, L = {}, {}
      for _, t in ipairs { { batch, szb }, { fa, szfa }, { fb, szfb } } do
        for k, l in ipairs(t[1]) do L[#L + 1] = l; shape[#shape + 1] = t[2][k] end
      end
      acc = acc:reshape(nb, nfa, nc):bmm(b:reshape(nb, nc, nfb)):reshape(shape)
      La = L
    end
    acc, La = reduce(acc, La, in_out)
    local pos = {}
    for p, l in ipairs(La) do pos[l] = p end
    local perm = {}
    for k, l in ipairs(out) do perm[k] = pos[l] end
    if #perm > 1 then acc = acc:permute(perm) end
    return acc
  end)

  -- -- NaN and infinities -----------------------------------------------------------------

  local function bool_like(x, value) return tide.full(x:shape(), value, device_opts(x, "bool")) end

  --- isnan(x), isinf(x), isposinf(x), isneginf(x), isfinite(x): bool tensors of x's
  -- shape; integer and bool tensors are finite.
  define("isnan", function(x) x = need_tensor(x, "isnan"); return x:ne(x) end, true)
  define("isinf", function(x)
    x = need_tensor(x, "isinf")
    if not x:is_floating_point() then return bool_like(x, false) end
    return x:abs():eq(math.huge)
  end, true)
  define("isposinf", function(x)
    x = need_tensor(x, "isposinf")
    if not x:is_floating_point() then return bool_like(x, false) end
    return x:eq(math.huge)
  end, true)
  define("isneginf", function(x)
    x = need_tensor(x, "isneginf")
    if not x:is_floating_point() then return bool_like(x, false) end
    return x:eq(-math.huge)
  end, true)
  define("isfinite", function(x)
    x = need_tensor(x, "isfinite")
    if not x:is_floating_point() then return bool_like(x, true) end
    return x:sub(x):eq(0)   -- inf - inf and NaN - NaN are NaN
  end, true)

  local FLOAT_MAX = { float32 = 3.4028234663852886e38, float64 = 1.7976931348623157e308, float16 = 65504,
                      bfloat16 = 3.3895313892515355e38 }
  -- nan_to_num's replacements and masks, the masks taken before anything is written
  local function nan_to_num_parts(x, nan, posinf, neginf, name)
    need_tensor(x, name)
    for k, v in pairs { nan = nan, posinf = posinf, neginf = neginf } do
      if v ~= nil and type(v) ~= "number" then fail(fmt("%s: %s must be a number, got %s", name, k, type(v))) end
    end
    local big = FLOAT_MAX[x:dtype()]
    return x:ne(x), x:eq(math.huge), x:eq(-math.huge), nan or 0, posinf or big, neginf or -big
  end
  --- nan_to_num(x, nan=0, posinf=the dtype's largest, neginf=its lowest): x with
  -- NaN and the infinities replaced (integer tensors: a copy).
  define("nan_to_num", function(x, nan, posinf, neginf)
    if is_tensor(x) and not x:is_floating_point() then return x:clone() end
    local mn, mp, mm, vn, vp, vm = nan_to_num_parts(x, nan, posinf, neginf, "nan_to_num")
    return x:masked_fill(mn, vn):masked_fill(mp, vp):masked_fill(mm, vm)
  end, true)
  methods.nan_to_num_ = methods.nan_to_num_ or function(x, nan, posinf, neginf)
    if is_tensor(x) and not x:is_floating_point() then return x end
    local mn, mp, mm, vn, vp, vm = nan_to_num_parts(x, nan, posinf, neginf, "nan_to_num_")
    return x:masked_fill_(mn, vn):masked_fill_(mp, vp):masked_fill_(mm, vm)
  end

  -- -- order statistics (sort and topk) ------------------------------------------------------

  -- The size of x along dim (1 for a 0-d x) and dim made positive.
  local function line_of(x, dim, name)
    if x:dim() == 0 then
      if dim ~= nil and dim ~= 1 and dim ~= -1 then wrap_dim(0, dim, name) end
      return 1, nil
    end
    local d = wrap_dim(x:dim(), dim or -1, name)
    return x:size(d), d
  end
  -- v, i picked at 1-based positions pos (keepdim-shaped int64) along d of sorted sv, si
  local function pick(sv, si, pos, d, keepdim)
    if not d then return sv, si end
    local v, i = sv:gather(d, pos), si:gather(d, pos)
    if keepdim then return v, i end
    return v:squeeze(d), i:squeeze(d)
  end

  --- kthvalue(x, k, dim=-1, keepdim=false): the k-th smallest value along dim (NaN
  -- above everything) and its 1-based index.
  define("kthvalue", function(x, k, dim, keepdim)
    need_tensor(x, "kthvalue")
    local n, d = line_of(x, dim, "kthvalue")
    if not is_int(k) or k < 1 or k > n then
      fail(fmt("kthvalue: k = %s is out of range for a dimension of size %d", tostring(k), n))
    end
    local v, i = x:topk(k, d or -1, false)
    if not d then return v, i end
    v, i = v:narrow(d, k, 1), i:narrow(d, k, 1)
    if keepdim then return v, i end
    return v:squeeze(d), i:squeeze(d)
  end, true)

  -- median's and nanmedian's positions in sorted order (NaN last), 1-based,
  -- keepdim-shaped: the lower median of the numbers, or (median, a NaN there)
  -- the first NaN
  local function median_of(x, dim, keepdim, name, skip_nan)
    need_tensor(x, name)
    if dim == nil then
      if x:numel() == 0 then fail(name .. ": cannot take the median of an empty tensor") end
      local v = median_of(x:reshape(-1), 1, false, name, skip_nan)
      return v
    end
    local n, d = line_of(x, dim, name)
    if n == 0 then fail(fmt("%s: cannot take the median of dimension %d, of size 0", name, d)) end
    local sv, si = x:sort(d or -1)
    if not d then return sv, si end
    local nans = x:ne(x):sum(d, true)
    local pos
    if skip_nan then   -- the lower median of the numbers; all NaN: the first
      local m = nans:neg():add(n)
      pos = tide.where(m:gt(0), tide.floor_divide(m:sub(1), 2), 0):add(1)
    else
      pos = tide.where(nans:gt(0), nans:neg():add(n), math.floor((n - 1) / 2)):add(1)
    end
    return pick(sv, si, pos, d, keepdim)
  end
  --- median(x): the lower median of all elements (0-d); median(x, dim, keepdim):
  -- values and 1-based indices along dim. A NaN makes the median NaN (its index
  -- the first NaN's), as in PyTorch.
  define("median", function(x, dim, keepdim) return median_of(x, dim, keepdim, "median", false) end, true)
  --- nanmedian: median ignoring NaN (NaN only where everything is NaN).
  define("nanmedian", function(x, dim, keepdim) return median_of(x, dim, keepdim, "nanmedian", true) end, true)

  --- quantile(x, q, dim, keepdim, {interpolation='linear'}) and nanquantile: the q-th
  -- quantiles (q a number in [0, 1], or a table or 1-d tensor of them, which adds a
  -- first dim) of all elements or along dim; interpolation 'linear', 'lower',
  -- 'higher', 'nearest' (half to even) or 'midpoint' between the sorted values at
  -- q * (n - 1). quantile is NaN where a NaN is; nanquantile ignores them.
  local INTERP = { linear = true, lower = true, higher = true, nearest = true, midpoint = true }
  local function quantile_of(x, q, dim, keepdim, opts, name, skip_nan)
    need_tensor(x, name)
    if type(keepdim) == "table" then opts, keepdim = keepdim, nil end
    opts = options(opts, name, { interpolation = true })
    local how = opts.interpolation or "linear"
    if not INTERP[how] then
      fail(fmt("%s: interpolation must be 'linear', 'lower', 'higher', 'nearest' or 'midpoint', got %s", name,
        tostring(how)))
    end
    if not x:is_floating_point() then fail(fmt("%s: input must be a floating-point tensor, got %s", name, x:dtype())) end
    local scalar_q = type(q) == "number"
    local qs
    if scalar_q then qs = { q }
    elseif is_tensor(q) then
      if q:dim() > 1 then fail(fmt("%s: q must be a number or a 1-d tensor, got a %d-d tensor", name, q:dim())) end
      qs = q:reshape(-1):totable()
    elseif type(q) == "table" then qs = q
    else fail(fmt("%s: q must be a number, a table or a tensor, got %s", name, type(q))) end
    for _, v in ipairs(qs) do
      if type(v) ~= "number" or not (v >= 0 and v <= 1) then
        fail(fmt("%s: q must be in [0, 1], got %s", name, tostring(v)))
      end
    end
    local t, d = x, dim
    if d == nil then t, d, keepdim = x:reshape(-1), 1, false end
    local n, dd = line_of(t, d, name)
    if n == 0 then fail(fmt("%s: cannot take quantiles of an empty dimension", name)) end
    if not dd then t, dd = t:reshape(1), 1 end
    local sv = t:sort(dd)
    local nans = t:ne(t):sum(dd, true)
    local m = skip_nan and nans:neg():add(n):to(t:dtype()) or nil   -- numbers per line
    local outs = {}
    for k, qv in ipairs(qs) do
      -- the rank q (m - 1), 0-based, as a keepdim-shaped tensor (a number without NaN skipping)
      local r = skip_nan and m:sub(1):clamp(0):mul(qv) or qv * (n - 1)
      local lo, hi, w
      if type(r) == "number" then
        local fl = math.floor(r)
        local lo_i = how == "higher" and math.ceil(r) or how == "nearest" and
          (r - fl == 0.5 and (fl % 2 == 0 and fl or fl + 1) or math.floor(r + 0.5)) or fl
        local hi_i = (how == "lower" or how == "higher" or how == "nearest") and lo_i or math.min(fl + 1, n - 1)
        lo, hi, w = sv:narrow(dd, lo_i + 1, 1), sv:narrow(dd, hi_i + 1, 1), how == "midpoint" and 0.5 or r - fl
      else
        local fl = r:floor()
        local lo_t = how == "higher" and r:ceil() or how == "nearest" and r:round() or fl
        local hi_t = (how == "lower" or how == "higher" or how == "nearest") and lo_t or
          tide.minimum(fl:add(1), m:sub(1):clamp(0))
        lo, hi = sv:gather(dd, lo_t:to("int64"):add(1)), sv:gather(dd, hi_t:to("int64"):add(1))
        w = how == "midpoint" and 0.5 or r:sub(fl)
      end
      local v = (how == "lower" or how == "higher" or how == "nearest") and lo or lo:lerp(hi, w)
      if skip_nan then v = v:masked_fill(m:eq(0), 0 / 0)   -- all NaN
      else v = v:masked_fill(nans:gt(0), 0 / 0) end
      if not keepdim then v = v:squeeze(dd) end
      if dim == nil and keepdim == false then v = v:reshape({}) end
      outs[k] = v
    end
    if scalar_q then return outs[1] end
    return tide.stack(outs, 1)
  end
  define("quantile", function(x, q, dim, keepdim, opts)
    return quantile_of(x, q, dim, keepdim, opts, "quantile", false)
  end, true)
  define("nanquantile", function(x, q, dim, keepdim, opts)
    return quantile_of(x, q, dim, keepdim, opts, "nanquantile", true)
  end, true)

  -- unique's groups of sorted (or consecutive) values v: the flags of group starts
  local function group_starts(v)
    local n = v:numel()
    if n <= 1 then return tide.ones(n, device_opts(v, "bool")) end
    return tide.cat({ tide.ones(1, device_opts(v, "bool")), v:narrow(1, 2, n - 1):ne(v:narrow(1, 1, n - 1)) })
  end
  local function unique_of(x, opts, name, sorted)
    need_tensor(x, name)
    opts = options(opts, name, { sorted = true, return_inverse = true, return_counts = true, dim = true })
    if opts.dim ~= nil then fail(name .. ": the dim option is not supported; unique works on all elements") end
    local flat = x:reshape(-1)
    local v, order = flat, nil
    if sorted then v, order = flat:sort() end
    local starts = group_starts(v)
    local u = v:masked_select(starts)   -- waits for x: the count is data-dependent
    local r = { u }
    local n = flat:numel()
    if opts.return_inverse then
      local gid = starts:cumsum(1)   -- int64, 1-based group of each sorted position
      local inv = gid
      if order then inv = tide.zeros(n, device_opts(x, "int64")):scatter(1, order, gid) end
      r[#r + 1] = inv:reshape(x:shape())
    end
    if opts.return_counts then
      local first = tide.arange(1, n + 1, device_opts(x, "int64")):masked_select(starts)
      local k = first:numel()
      if k == 0 then
        r[#r + 1] = first
      else   -- each group's start to the next one's (n + 1 after the last)
        local nexts = tide.cat({ first:narrow(1, 2, k - 1), tide.full({ 1 }, n + 1, device_opts(x, "int64")) })
        r[#r + 1] = nexts:sub(first)
      end
    end
    return unpack(r)
  end
  --- unique(x, {sorted=true, return_inverse=false, return_counts=false}): the
  -- distinct elements of x in ascending order (1-d; each NaN is distinct, as in
  -- PyTorch), then the 1-based group of each element of x (x's shape) and the
  -- count of each value. The result's size depends on the data: it waits for x.
  define("unique", function(x, opts) return unique_of(x, opts, "unique", true) end, true)
  --- unique_consecutive(x, opts): unique of each run of equal neighbours, in order.
  define("unique_consecutive", function(x, opts) return unique_of(x, opts, "unique_consecutive", false) end, true)

  -- -- sampling ---------------------------------------------------------------------------------

  --- multinomial(probs, n, replacement=false): n 1-based category
  -- indices per row of probs (1-d [K] or 2-d [R, K] non-negative weights, not
  -- necessarily normalised), as torch.multinomial. With replacement each draw
  -- inverts the row's cumulative distribution at a uniform number; without,
  -- the n largest of log(w) plus Gumbel noise (Efraimidis-Spirakis), so
  -- weights of 0 are never drawn. Draws come from the global generator
  -- (tide.manual_seed). The weights are checked as PyTorch's CPU checks them
  -- (finite, non-negative, each row with a positive sum, and without
  -- replacement at least n nonzero): one read of a flag, which waits for probs.
  define("multinomial", function(probs, n, replacement)
    need_tensor(probs, "multinomial")
    if probs:dim() ~= 1 and probs:dim() ~= 2 then
      fail(fmt("multinomial: probs must be 1-d or 2-d, got %d-d", probs:dim()))
    end
    if not probs:is_floating_point() then
      fail(fmt("multinomial: probs must be a floating-point tensor, got %s", probs:dtype()))
    end
    local K = probs:size(-1)
    need_int(n, "multinomial", "num_samples", 1)
    args.need_bool(replacement, "multinomial", "replacement")
    if K == 0 then fail("multinomial: probs has no categories") end
    if not replacement and n > K then
      fail(fmt("multinomial: cannot draw %d samples from %d categories without replacement", n, K))
    end
    local w = probs:dim() == 1 and probs:view(1, K) or probs
    local R = w:size(1)
    local out
    tide.no_grad(function()
      local bad = w:lt(0):any():logical_or(w:sub(w):ne(0):any()):logical_or(w:sum(2):eq(0):any())
      if not replacement then bad = bad:logical_or(w:ne(0):sum(2):lt(n):any()) end
      if bad:item() then
        fail(fmt("multinomial: invalid weights: each row must be finite, non-negative and have %s",
          replacement and "a positive sum" or ("at least " .. n .. " nonzero weights for " .. n ..
          " samples without replacement")))
      end
      local opts = device_opts(w, w:dtype() == "float64" and "float64" or "float32")
      if replacement then
        local cdf = w:to(opts.dtype):cumsum(2)
        local total = cdf:narrow(2, K, 1)                                   -- [R, 1]
        local u = tide.rand({ R, n }, opts):mul(total)                      -- [R, n] in [0, total)
        -- the first category whose cumulative weight exceeds u
        out = cdf:view(R, 1, K):le(u:view(R, n, 1)):sum(3):add(1):clamp(1, K)
      else
        local u = tide.rand({ R, K }, opts):clamp(1e-30, 1)
        local keys = w:to(opts.dtype):log():sub(u:log():neg():log())       -- log w + Gumbel
        local _, idx = keys:topk(n, 2)
        out = idx
      end
    end)
    if probs:dim() == 1 then out = out:view(n) end
    return out
  end, true)

  -- -- norms ------------------------------------------------------------------------------------

  -- The p-norm of x over dims (nil: all), with the gradient 0 where the norm is 0
  -- (PyTorch's subgradient) rather than NaN.
  local function vector_norm(x, p, dims, keepdim, name)
    need_tensor(x, name)
    if not x:is_floating_point() then
      fail(fmt("%s: input must be a floating-point tensor, got %s", name, x:dtype()))
    end
    if p == nil or p == "fro" then p = 2 end
    if p == "inf" then p = math.huge elseif p == "-inf" then p = -math.huge end
    if type(p) ~= "number" or p ~= p then fail(fmt("%s: ord must be a number, got %s", name, tostring(p))) end
    keepdim = args.need_bool(keepdim, name, "keepdim")
    local a = p ~= 2 and x:abs()   -- the 2-norm squares x itself: |x| would be made for nothing
    if p == math.huge then return a:amax(dims, keepdim) end
    if p == -math.huge then return a:amin(dims, keepdim) end
    if p == 0 then return a:ne(0):sum(dims, keepdim):to(x:dtype()) end
    if p == 1 then return a:sum(dims, keepdim) end
    local s = p == 2 and (x * x):sum(dims, keepdim) or a:pow(p):sum(dims, keepdim)
    local nz = s:ne(0)
    local safe = tide.where(nz, s, 1)
    return tide.where(nz, p == 2 and safe:sqrt() or safe:pow(1 / p), 0)
  end
  --- norm(x, p=2, dim, keepdim): the p-norm of x's elements (p a number, math.huge,
  -- -math.huge, 0 or 'fro'), over dim (a number or a table of dims) or all, as
  -- torch.norm for vectors. Also tide.linalg.vector_norm(x, ord, dim, keepdim).
  define("norm", function(x, p, dim, keepdim) return vector_norm(x, p, dim, keepdim, "norm") end, true)
  tide.linalg = tide.linalg or {}
  tide.linalg.vector_norm = tide.linalg.vector_norm or function(x, ord, dim, keepdim)
    return vector_norm(x, ord, dim, keepdim, "vector_norm")
  end
  --- linalg.matrix_norm(A, ord='fro', dim={-2, -1}, keepdim): 'fro', 1 (largest
  -- column sum), -1, math.huge (largest row sum) or -math.huge of the matrices in
  -- the last two dims (or the two dims given); linalg.lua adds 2, -2 and 'nuc'.
  tide.linalg.matrix_norm = tide.linalg.matrix_norm or function(A, ord, dim, keepdim)
    need_tensor(A, "matrix_norm")
    if A:dim() < 2 then fail(fmt("matrix_norm: input must have at least 2 dimensions, got %d", A:dim())) end
    dim = dim or { -2, -1 }
    if type(dim) ~= "table" or #dim ~= 2 then fail("matrix_norm: dim must be a table of two dims") end
    local r, c = wrap_dim(A:dim(), dim[1], "matrix_norm"), wrap_dim(A:dim(), dim[2], "matrix_norm")
    if r == c then fail(fmt("matrix_norm: the two dims must differ, got %d twice", r)) end
    ord = ord or "fro"
    if ord == "fro" then return vector_norm(A, 2, { r, c }, keepdim, "matrix_norm") end
    if ord ~= 1 and ord ~= -1 and ord ~= math.huge and ord ~= -math.huge then
      fail(fmt("matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, math.huge or -math.huge, got %s", tostring(ord)))
    end
    -- 1: the largest sum over rows (of a column); inf: the largest over columns (of a row)
    local inner, outer = (ord == 1 or ord == -1) and r or c, (ord == 1 or ord == -1) and c or r
    local sums = A:abs():sum(inner, true)
    local e = ord > 0 and sums:amax(outer, true) or sums:amin(outer, true)
    if keepdim then return e end
    return e:squeeze({ r, c })
  end

  -- -- dtypes, and writing a result back in place ---------------------------------------------

  -- The dtype of an op on tensors of dtypes a and b, as PyTorch promotes them.
  local RANK = { bool = 0, uint8 = 1, int32 = 2, int64 = 3, float16 = 4, bfloat16 = 4, float32 = 5, float64 = 6 }
  local function promote(a, b)
    if a == b then return a end
    if RANK[a] == 4 and RANK[b] == 4 then return "float32" end
    return RANK[a] >= RANK[b] and a or b
  end

  -- whether shape s broadcasts to shape t (without growing t)
  local function broadcasts_to(s, t)
    if #s > #t then return false end
    for k = 1, #s do
      local v = s[#s - k + 1]
      if v ~= 1 and v ~= t[#t - k + 1] then return false end
    end
    return true
  end

  -- r copied into x, for an in-place form: r must have x's shape and a dtype x
  -- can hold (as PyTorch's out= rules).
  local function copy_into(name, x, r)
    if shape_str(r:shape()) ~= shape_str(x:shape()) then
      fail(fmt("%s: the result's shape %s does not match the tensor's shape %s", name, shape_str(r:shape()),
        shape_str(x:shape())))
    end
    if (r:is_floating_point() and not x:is_floating_point()) or (r:dtype() ~= "bool" and x:dtype() == "bool") then
      fail(fmt("%s: a %s result cannot be written into a %s tensor", name, r:dtype(), x:dtype()))
    end
    return x:copy_(r)
  end
  -- x:name_(...) from the functional form f: f(x) copied into x. Where autograd
  -- records x, f reads a copy of it, so that the values its gradient needs are
  -- not the ones the copy overwrites.
  local function write_back(name, x, f)
    return copy_into(name, x, f(x.requires_grad and tide.is_grad_enabled() and x:clone() or x))
  end

  -- A number as a 0-d tensor of dtype dt on x's device (a tensor as it is).
  local function like_tensor(v, x, dt)
    if is_tensor(v) then return v end
    return tide.full({}, v, device_opts(x, dt or x:dtype()))
  end

  -- -- products with a scaled sum: addmm & co -------------------------------------------------
  do
    local function need_ndim(x, name, what, n)
      if x:dim() ~= n then fail(fmt("%s: %s must be %d-d, got %d-d", name, what, n, x:dim())) end
    end
    -- beta and alpha from the options: numbers, integers where every tensor is (as PyTorch asks)
    local function scales(name, opts, ...)
      opts = options(opts, name, { beta = true, alpha = true })
      local beta, alpha = opts.beta == nil and 1 or opts.beta, opts.alpha == nil and 1 or opts.alpha
      local ints = true
      for i = 1, select("#", ...) do if (select(i, ...)):is_floating_point() then ints = false end end
      for _, p in ipairs { { "beta", beta }, { "alpha", alpha } } do
        if type(p[2]) ~= "number" then fail(fmt("%s: %s must be a number, got %s", name, p[1], type(p[2]))) end
        if ints and p[2] ~= floor(p[2]) then
          fail(fmt("%s: %s must be an integer for integer tensors, got %s", name, p[1], tostring(p[2])))
        end
      end
      return beta, alpha
    end
    -- beta * input + alpha * prod, input broadcast to prod's shape; beta 0 ignores
    -- input (its NaN and infinities too), as PyTorch does
    local function scaled_sum(name, input, prod, beta, alpha)
      local ps = prod:shape()
      if not broadcasts_to(input:shape(), ps) then
        fail(fmt("%s: input of shape %s cannot be broadcast to the product's shape %s", name,
          shape_str(input:shape()), shape_str(ps)))
      end
      if alpha ~= 1 then prod = prod * alpha end
      if beta == 0 then return prod:to(promote(prod:dtype(), input:dtype())) end
      if beta == 1 then return tide.add(prod, input) end
      return tide.add(prod, input, beta)
    end
    local function mm_check(name, a, b, wa, wb)
      if a:size(-1) ~= b:size(wb == "vec" and 1 or -2) then
        fail(fmt("%s: %s and %s shapes cannot be multiplied (%s and %s)", name, wa, wb, shape_str(a:shape()),
          shape_str(b:shape())))
      end
    end

    local function bmm_check(name, a, b)
      need_ndim(a, name, "batch1", 3); need_ndim(b, name, "batch2", 3)
      if a:size(1) ~= b:size(1) then
        fail(fmt("%s: batch1 and batch2 must have the same number of matrices, got %d and %d", name, a:size(1),
          b:size(1)))
      end
      mm_check(name, a, b, "batch1", "batch2")
    end

    -- name(input, a, b, opts) and input:name_(a, b, opts): `product` checks a and b and multiplies them
    local function scaled(name, product)
      local function f(fname, input, a, b, opts)
        need_tensor(input, fname, 1); need_tensor(a, fname, 2); need_tensor(b, fname, 3)
        local prod = product(fname, a, b)
        local beta, alpha = scales(fname, opts, input, a, b)
        return scaled_sum(fname, input, prod, beta, alpha)
      end
      define(name, function(input, a, b, opts) return f(name, input, a, b, opts) end, true)
      methods[name .. "_"] = methods[name .. "_"] or function(x, a, b, opts)
        return write_back(name .. "_", x, function(v) return f(name .. "_", v, a, b, opts) end)
      end
    end
    --- addmm(input, mat1, mat2, {beta=1, alpha=1}): beta * input + alpha * mat1 @ mat2
    -- (input broadcast to the product's shape); x:addmm_(mat1, mat2, opts) in place.
    -- @usage local y = tide.addmm(bias, x, w, { alpha = 0.5 })
    scaled("addmm", function(name, a, b)
      need_ndim(a, name, "mat1", 2); need_ndim(b, name, "mat2", 2)
      mm_check(name, a, b, "mat1", "mat2")
      return a:mm(b)
    end)
    --- addbmm(input, batch1, batch2, opts): beta * input + alpha * the sum over the
    -- batch of batch1[i] @ batch2[i] (one mm of the batches laid side by side).
    scaled("addbmm", function(name, a, b)
      bmm_check(name, a, b)
      local B_, n, k, m = a:size(1), a:size(2), a:size(3), b:size(3)
      return a:permute(2, 1, 3):reshape(n, B_ * k):mm(b:reshape(B_ * k, m))
    end)
    --- baddbmm(input, batch1, batch2, opts): beta * input + alpha * bmm(batch1, batch2).
    scaled("baddbmm", function(name, a, b)
      bmm_check(name, a, b)
      return a:bmm(b)
    end)
    local function mv(name, a, b)
      need_ndim(a, name, "mat", 2); need_ndim(b, name, "vec", 1)
      mm_check(name, a, b, "mat", "vec")
      return a:matmul(b)
    end
    --- addmv(input, mat, vec, opts): beta * input + alpha * mat @ vec.
    scaled("addmv", mv)
    --- addr(input, vec1, vec2, opts): beta * input + alpha * outer(vec1, vec2).
    scaled("addr", function(name, a, b)
      need_ndim(a, name, "vec1", 1); need_ndim(b, name, "vec2", 1)
      return tide.outer(a, b)
    end)
    --- mv(mat, vec): the matrix-vector product.
    define("mv", function(a, b)
      need_tensor(a, "mv", 1); need_tensor(b, "mv", 2)
      return mv("mv", a, b)
    end, true)
    --- ger(vec1, vec2): outer's old name.
    define("ger", function(a, b)
      need_tensor(a, "ger", 1); need_tensor(b, "ger", 2)
      need_ndim(a, "ger", "vec1", 1); need_ndim(b, "ger", "vec2", 1)
      return tide.outer(a, b)
    end, true)
    --- vdot(a, b): the dot product of two 1-d tensors of the same length.
    define("vdot", function(a, b)
      need_tensor(a, "vdot", 1); need_tensor(b, "vdot", 2)
      if a:dim() ~= 1 or b:dim() ~= 1 then fail(fmt("vdot: expected 1-d tensors, got %d-d and %d-d", a:dim(), b:dim())) end
      if a:numel() ~= b:numel() then
        fail(fmt("vdot: the tensors must have the same number of elements, got %d and %d", a:numel(), b:numel()))
      end
      return a:dot(b)
    end, true)
    --- inner(a, b): the sum of products over the last dims of a and b (shape:
    -- a's leading dims, then b's); a product when one is 0-d.
    define("inner", function(a, b)
      need_tensor(a, "inner", 1); need_tensor(b, "inner", 2)
      if a:dim() == 0 or b:dim() == 0 then return a * b end
      if a:size(-1) ~= b:size(-1) then
        fail(fmt("inner: the last dimensions must have the same size, got shapes %s and %s", shape_str(a:shape()),
          shape_str(b:shape())))
      end
      return tensordot(a, b, { { a:dim() }, { b:dim() } })
    end, true)
    --- chain_matmul(m1, m2, ...): the product of 2-d matrices (or one table of
    -- them), in the order of fewest multiplications (linalg.multi_dot's).
    define("chain_matmul", function(...)
      local list = tensor_args("chain_matmul", ...)
      for i, m in ipairs(list) do
        if m:dim() ~= 2 then fail(fmt("chain_matmul: tensor %d must be 2-d, got %d-d", i, m:dim())) end
        if i > 1 and list[i - 1]:size(2) ~= m:size(1) then
          fail(fmt("chain_matmul: matrices %d and %d cannot be multiplied (%s and %s)", i - 1, i,
            shape_str(list[i - 1]:shape()), shape_str(m:shape())))
        end
      end
      if #list == 1 then return list[1]:clone() end
      return tide.linalg.multi_dot(list)
    end)
  end

  --- block_diag(t1, t2, ...): the 0-d, 1-d (a row) and 2-d tensors as the
  -- blocks of a block-diagonal matrix, zeros elsewhere; the dtypes promoted.
  -- @usage tide.block_diag(a, b)   -- [[a, 0], [0, b]]
  define("block_diag", function(...)
    if select("#", ...) == 0 then return tide.zeros(1, 0) end
    local list = tensor_args("block_diag", ...)
    local ms, dt, C = {}, list[1]:dtype(), 0
    for i, t in ipairs(list) do
      if t:dim() > 2 then fail(fmt("block_diag: tensor %d must have at most 2 dimensions, got %d", i, t:dim())) end
      ms[i] = t:dim() == 2 and t or t:reshape(1, -1)
      dt, C = promote(dt, t:dtype()), C + ms[i]:size(2)
    end
    local rows, c0 = {}, 0
    for i, m in ipairs(ms) do
      local r, c = m:size(1), m:size(2)
      local parts = {}
      if c0 > 0 then parts[#parts + 1] = tide.zeros({ r, c0 }, device_opts(m, dt)) end
      parts[#parts + 1] = m:to(dt)
      if C - c0 - c > 0 then parts[#parts + 1] = tide.zeros({ r, C - c0 - c }, device_opts(m, dt)) end
      rows[i] = #parts > 1 and tide.cat(parts, 2) or parts[1]
      c0 = c0 + c
    end
    return tide.cat(rows, 1)
  end)

  --- diagflat(x, offset): the elements of x (flattened) on the offset diagonal of a square matrix.
  define("diagflat", function(x, offset)
    need_tensor(x, "diagflat")
    return diag_embed(x:reshape(-1), need_int(offset or 0, "diagflat", "offset"))
  end, true)

  -- -- NumPy's names ---------------------------------------------------------------------------

  -- name as another name of target, as a function and (where target is one) a
  -- method, with target's in-place form
  local function alias(name, target, method)
    define(name, tide[target], method ~= false and methods[target] ~= nil)
    if methods[target .. "_"] and method ~= false then methods[name .. "_"] = methods[name .. "_"] or methods[target .. "_"] end
  end
  --- absolute, arccos, arcsin, arctan, arcsinh, arccosh, arctanh, arctan2, clip,
  -- multiply, subtract, negative, greater, greater_equal, less, less_equal,
  -- not_equal, sgn (real tensors: sign), concat and concatenate: NumPy's names.
  for name, target in pairs { absolute = "abs", arccos = "acos", arcsin = "asin", arctan = "atan", arcsinh = "asinh",
                              arccosh = "acosh", arctanh = "atanh", arctan2 = "atan2", clip = "clamp",
                              multiply = "mul", subtract = "sub", negative = "neg", greater = "gt",
                              greater_equal = "ge", less = "lt", less_equal = "le", not_equal = "ne", sgn = "sign" } do
    alias(name, target)
  end
  alias("concat", "cat", false)
  alias("concatenate", "cat", false)

  --- positive(x): x itself (not for bool tensors, as in PyTorch).
  define("positive", function(x)
    need_tensor(x, "positive")
    if x:dtype() == "bool" then fail("positive: bool tensors are not supported") end
    return x
  end, true)

  -- a / b rounded toward zero: from floor_divide, one up where the quotient is negative and inexact
  local function trunc_divide(a, b)
    if a:is_floating_point() or b:is_floating_point() then return (a / b):trunc() end
    local q = floor_divide(a, b)
    return tide.where(tide.remainder(a, b):ne(0):logical_and(a:lt(0):ne(b:lt(0))), q + 1, q)
  end
  local function divide(name, a, b, opts)
    if not is_tensor(a) and not is_tensor(b) then fail(name .. ": at least one argument must be a tensor") end
    opts = options(opts, name, { rounding_mode = true })
    local mode = opts.rounding_mode
    a, b = operand(a, name, 1), operand(b, name, 2)
    if mode == nil then return a / b end
    if mode == "trunc" then return trunc_divide(a, b) end
    if mode == "floor" then return floor_divide(a, b) end
    fail(fmt("%s: rounding_mode must be 'trunc' or 'floor', got %s", name, tostring(mode)))
  end
  --- div(a, b, rounding_mode): div with PyTorch's rounding_mode, 'trunc' or 'floor' (or
  -- {rounding_mode = ...}); without it the registry's div, unchanged.
  -- @usage a:div(b, "floor")
  do
    local div_plain, div_inplace = tide.div, methods.div_
    local function mode_opts(mode)
      if type(mode) == "string" then return { rounding_mode = mode } end
      return mode
    end
    tide.div = function(a, b, mode)
      if mode == nil then return div_plain(a, b) end
      return divide("div", a, b, mode_opts(mode))
    end
    methods.div = tide.div
    methods.div_ = function(x, b, mode)
      if mode == nil then return div_inplace(x, b) end
      return write_back("div_", x, function(v) return divide("div_", v, b, mode_opts(mode)) end)
    end
  end
  --- divide(a, b, {rounding_mode}): a / b (floating-point), or rounded toward zero
  -- ('trunc') or down ('floor'), in the inputs' dtype as PyTorch's div.
  -- @usage tide.divide(a, b, { rounding_mode = "floor" })
  define("divide", function(a, b, opts) return divide("divide", a, b, opts) end, true)
  methods.divide_ = methods.divide_ or function(x, b, opts)
    if opts == nil then return x:div_(b) end
    return write_back("divide_", x, function(v) return divide("divide_", v, b, opts) end)
  end

  -- -- elementwise -----------------------------------------------------------------------------

  -- signbit: whether the sign bit is set (-0.0 included; a NaN's sign cannot be
  -- read through the ops and counts as positive)
  local function signbit(x)
    if x:dtype() == "bool" or x:dtype() == "uint8" then return bool_like(x, false) end
    if not x:is_floating_point() then return x:lt(0) end
    return x:lt(0):logical_or(x:eq(0):logical_and(x:reciprocal():lt(0)))
  end
  --- signbit(x): true where x's sign bit is set, -0.0 included (bool).
  define("signbit", function(x) return signbit(need_tensor(x, "signbit")) end, true)

  -- copysign(a, b): |a| with b's sign (-0.0 counts as negative), floating-point
  local function copysign(name, a, b)
    if not is_tensor(a) and not is_tensor(b) then fail(name .. ": at least one argument must be a tensor") end
    for i, v in ipairs { a, b } do
      if not is_tensor(v) and type(v) ~= "number" then
        fail(fmt("%s: argument %d must be a tensor or a number, got %s", name, i, type(v)))
      end
    end
    local dt = float_result(a, b)
    local m = is_tensor(a) and a:abs():to(dt) or abs(a)
    if not is_tensor(b) then   -- the sign of a number, -0 included
      local neg = b < 0 or (b == 0 and 1 / b < 0)
      return neg and -m or m
    end
    if not is_tensor(m) then m = like_tensor(m, b, dt) end
    return tide.where(signbit(b), -m, m)
  end
  --- copysign(a, b): the magnitude of a with the sign of b, floating-point.
  define("copysign", function(a, b) return copysign("copysign", a, b) end, true)
  methods.copysign_ = methods.copysign_ or function(x, b)
    return write_back("copysign_", x, function(v) return copysign("copysign_", v, b) end)
  end

  local function sinc(x)
    if not x:is_floating_point() then x = x:to("float32") end
    local zero = x:eq(0)
    local px = tide.where(zero, 1, x * math.pi)
    return tide.where(zero, 1, px:sin() / px)
  end
  --- sinc(x): sin(pi x) / (pi x), 1 at 0 (floating-point).
  define("sinc", function(x) return sinc(need_tensor(x, "sinc")) end, true)
  methods.sinc_ = methods.sinc_ or function(x) return write_back("sinc_", x, sinc) end

  local function float_power(name, a, b)
    if not is_tensor(a) and not is_tensor(b) then fail(name .. ": at least one argument must be a tensor") end
    for i, v in ipairs { a, b } do
      if not is_tensor(v) and type(v) ~= "number" then
        fail(fmt("%s: argument %d must be a tensor or a number, got %s", name, i, type(v)))
      end
    end
    if is_tensor(a) then a = a:double() end
    if is_tensor(b) then b = b:double() end
    return a ^ b
  end
  --- float_power(a, b): a ^ b computed and returned in float64.
  define("float_power", function(a, b) return float_power("float_power", a, b) end, true)
  methods.float_power_ = methods.float_power_ or function(x, b)
    if x:dtype() ~= "float64" then
      fail(fmt("float_power_: the tensor must be float64 (the result's dtype), got %s", x:dtype()))
    end
    return write_back("float_power_", x, function(v) return float_power("float_power_", v, b) end)
  end

  local function logit(name, x, eps)
    need_tensor(x, name)
    if eps ~= nil and type(eps) ~= "number" then fail(fmt("%s: eps must be a number, got %s", name, type(eps))) end
    if not x:is_floating_point() then x = x:to("float32") end
    if eps then x = x:clamp(eps, 1 - eps) end
    return (x / (1 - x)):log()
  end
  --- logit(x, eps): log(x / (1 - x)), x first clamped to [eps, 1 - eps] when eps is given.
  define("logit", function(x, eps) return logit("logit", x, eps) end, true)
  methods.logit_ = methods.logit_ or function(x, eps)
    return write_back("logit_", x, function(v) return logit("logit_", v, eps) end)
  end

  -- -- reductions ------------------------------------------------------------------------------

  --- nansum(x, dims, keepdim, dtype): sum treating NaN as 0.
  define("nansum", function(x, dims, keepdim, dtype)
    need_tensor(x, "nansum")
    if x:is_floating_point() then x = tide.where(x:ne(x), 0, x) end
    return x:sum(dims, keepdim, dtype)
  end, true)
  --- nanmean(x, dims, keepdim, dtype): the mean of the elements that are not NaN
  -- (NaN where all are), floating-point tensors only.
  define("nanmean", function(x, dims, keepdim, dtype)
    need_tensor(x, "nanmean")
    if not x:is_floating_point() then fail("nanmean: input must be a floating-point tensor, got " .. x:dtype()) end
    if type(dims) == "boolean" then dims, keepdim, dtype = nil, dims, keepdim end
    local num = x:eq(x)
    return tide.where(num, x, 0):sum(dims, keepdim, dtype) / num:sum(dims, keepdim)
  end, true)

  -- std_mean and var_mean(x, dims, keepdim, correction), or (x, dims, {keepdim,
  -- correction, unbiased}) with PyTorch's keywords: stat and the mean
  local function stat_mean(name, stat)
    return function(x, dims, keepdim, correction)
      need_tensor(x, name)
      if type(dims) == "boolean" then dims, keepdim, correction = nil, dims, keepdim
      elseif type(dims) == "table" and #dims == 0 and next(dims) ~= nil then dims, keepdim = nil, dims end
      if type(keepdim) == "table" then
        local o = options(keepdim, name, { keepdim = true, correction = true, unbiased = true })
        keepdim, correction = o.keepdim, o.correction
        if o.unbiased ~= nil then
          if correction ~= nil then fail(name .. ": give correction or unbiased, not both") end
          correction = o.unbiased and 1 or 0
        end
      end
      if correction ~= nil and type(correction) ~= "number" then
        fail(fmt("%s: correction must be a number, got %s", name, type(correction)))
      end
      return stat(x, dims, keepdim, correction), x:mean(dims, keepdim)
    end
  end
  --- std_mean(x, dims, keepdim, correction): std and mean, as two results.
  -- @usage local s, m = tide.std_mean(x, 1, { correction = 0 })
  define("std_mean", stat_mean("std_mean", tide.std))
  --- var_mean(x, dims, keepdim, correction): var and mean, as two results.
  define("var_mean", stat_mean("var_mean", tide.var))

  --- aminmax(x, {dim, keepdim}): amin and amax, of all elements or along dim.
  -- @usage local lo, hi = x:aminmax({ dim = 1 })
  define("aminmax", function(x, opts)
    need_tensor(x, "aminmax")
    opts = options(opts, "aminmax", { dim = true, keepdim = true })
    local keepdim = opts.keepdim == true
    if opts.dim == nil then
      if x:numel() == 0 then fail("aminmax: cannot compute aminmax of an empty tensor") end
      local lo, hi = x:amin(), x:amax()
      if keepdim then
        local s = {}
        for i = 1, x:dim() do s[i] = 1 end
        lo, hi = lo:reshape(s), hi:reshape(s)
      end
      return lo, hi
    end
    local n, d = line_of(x, opts.dim, "aminmax")
    if n == 0 then fail(fmt("aminmax: cannot compute aminmax over dimension %d, of size 0", d)) end
    if not d then return x:clone(), x:clone() end
    return x:amin(d, keepdim), x:amax(d, keepdim)
  end, true)

  -- -- indexing --------------------------------------------------------------------------------

  -- An index argument: an integer tensor, as int64.
  local function need_index(idx, name, what)
    if not is_tensor(idx) then fail(fmt("%s: %s must be a tensor, got %s", name, what, type(idx))) end
    if idx:is_floating_point() or idx:dtype() == "bool" then
      fail(fmt("%s: %s must be an integer tensor, got %s", name, what, idx:dtype()))
    end
    return idx:to("int64")
  end
  -- 1-based indices with the negative ones counted from the end (-1: the last of n)
  local function from_end(idx, n) return tide.where(idx:lt(0), idx + (n + 1), idx) end
  -- The dim an indexing function works on: nil for a 0-d x (which takes 1 and -1).
  local function need_dim(name, x, dim)
    if dim == nil then fail(name .. ": a dimension is required") end
    local _, d = line_of(x, dim, name)
    return d
  end
  -- x with elements i .. i+k-1 along d replaced by mid
  local function cat_slices(x, d, i, k, mid)
    local n, parts = x:size(d), {}
    if i > 1 then parts[#parts + 1] = x:narrow(d, 1, i - 1) end
    parts[#parts + 1] = mid
    if i + k <= n then parts[#parts + 1] = x:narrow(d, i + k, n - i - k + 1) end
    return tide.cat(parts, d)
  end
  local function ones_shape(n, d, size)
    local s = {}
    for i = 1, n do s[i] = 1 end
    if d then s[d] = size end
    return s
  end

  --- take(x, index): the elements of x (as if flattened) at the 1-based indices
  -- (negative: from the end), in index's shape.
  define("take", function(x, index)
    need_tensor(x, "take")
    local idx = need_index(index, "take", "index")
    local flat = x:reshape(-1)
    return flat:index_select(1, from_end(idx:reshape(-1), flat:numel())):reshape(idx:shape())
  end, true)

  --- take_along_dim(x, indices, dim): gather along dim with x and indices
  -- broadcast against each other outside it; without dim, of the flattened x.
  define("take_along_dim", function(x, indices, dim)
    need_tensor(x, "take_along_dim")
    local idx = need_index(indices, "take_along_dim", "indices")
    if dim == nil then return x:reshape(-1):gather(1, idx:reshape(-1)) end
    if x:dim() ~= idx:dim() then
      fail(fmt("take_along_dim: input and indices must have the same number of dimensions, got %d and %d", x:dim(),
        idx:dim()))
    end
    local d = wrap_dim(x:dim(), dim, "take_along_dim")
    local xs = x:shape()
    xs[d] = idx:size(d)
    local s = broadcast_shapes("take_along_dim", { xs, idx:shape() })
    local si = {}
    for i, v in ipairs(s) do si[i] = v end
    s[d] = x:size(d)
    return x:expand(s):gather(d, idx:expand(si))
  end, true)

  -- A bool mask of the places along dim d (nil: a 0-d x) that index names, to broadcast against x.
  local function index_mask(name, x, d, index)
    local idx = need_index(index, name, "index")
    if idx:dim() > 1 then fail(fmt("%s: index must be 0-d or 1-d, got %d-d", name, idx:dim())) end
    local n = d and x:size(d) or 1
    local m = tide.zeros(n, device_opts(x, "bool")):scatter(1, from_end(idx:reshape(-1), n), 1)
    return m:reshape(ones_shape(x:dim(), d, n))
  end
  local function index_fill(name, x, dim, index, value, inplace)
    need_tensor(x, name)
    local mask = index_mask(name, x, need_dim(name, x, dim), index)
    if type(value) == "boolean" then value = value and 1 or 0 end
    if type(value) == "number" then
      if inplace then return x:masked_fill_(mask, value) end
      return x:masked_fill(mask, value)
    end
    if not is_tensor(value) or value:dim() ~= 0 then
      fail(fmt("%s: value must be a number or a 0-d tensor, got %s", name,
        is_tensor(value) and fmt("a %d-d tensor", value:dim()) or type(value)))
    end
    local r = tide.where(mask, value:to(x:dtype()), x)
    return inplace and copy_into(name, x, r) or r
  end
  --- index_fill(x, dim, index, value): x with the slices along dim at index
  -- (1-based, negative from the end) set to value (a number or a 0-d tensor);
  -- x:index_fill_(dim, index, value) in place.
  define("index_fill", function(x, dim, index, value) return index_fill("index_fill", x, dim, index, value) end, true)
  methods.index_fill_ = methods.index_fill_ or function(x, dim, index, value)
    return index_fill("index_fill_", x, dim, index, value, true)
  end

  local function index_copy(name, x, dim, index, source, inplace)
    need_tensor(x, name); need_tensor(source, name, 4)
    local d = need_dim(name, x, dim)
    local idx = need_index(index, name, "index")
    if idx:dim() > 1 then fail(fmt("%s: index must be 0-d or 1-d, got %d-d", name, idx:dim())) end
    if source:dtype() ~= x:dtype() then
      fail(fmt("%s: source must have the tensor's dtype %s, got %s", name, x:dtype(), source:dtype()))
    end
    local xx, dd = x, d
    if not d then xx, dd = x:reshape(1), 1 end
    local want = xx:shape()
    want[dd] = idx:numel()
    local got = d and source:shape() or (source:dim() == 0 and { 1 } or source:shape())
    if shape_str(got) ~= shape_str(want) then
      fail(fmt("%s: source must have shape %s, got %s", name, shape_str(want), shape_str(source:shape())))
    end
    local ie = idx:reshape(ones_shape(#want, dd, idx:numel())):expand(want)
    if inplace and d then return x:scatter_(dd, ie, source) end
    local r = xx:scatter(dd, ie, source:reshape(want)):reshape(x:shape())
    return inplace and copy_into(name, x, r) or r
  end
  --- index_copy(x, dim, index, source): x with its slices along dim at index
  -- (1-based) replaced by those of source, in order; x:index_copy_ in place.
  define("index_copy", function(x, dim, index, source) return index_copy("index_copy", x, dim, index, source) end, true)
  methods.index_copy_ = methods.index_copy_ or function(x, dim, index, source)
    return index_copy("index_copy_", x, dim, index, source, true)
  end

  -- index_put's 1-based positions in x flattened over its first #idx dims, checked
  -- (a read of the host), and the shape the indices broadcast to
  local function linear_index(name, x, idx)
    local shapes, sizes = {}, x:shape()
    for i, t in ipairs(idx) do shapes[i] = t:shape() end
    local S = broadcast_shapes(name, shapes)
    local lin, stride, bad = nil, 1, nil
    for j = #idx, 1, -1 do
      local i = from_end(idx[j], sizes[j])
      local out = i:lt(1):logical_or(i:gt(sizes[j])):any()
      bad = bad and bad:logical_or(out) or out
      local term = (i - 1) * stride
      lin = lin and lin + term or term
      stride = stride * sizes[j]
    end
    if bad:item() then
      for j, t in ipairs(idx) do
        local i = from_end(t, sizes[j])
        local wrong = t:masked_select(i:lt(1):logical_or(i:gt(sizes[j])))
        if wrong:numel() > 0 then
          fail(fmt("%s: index %d is out of range for dimension %d of size %d", name, wrong[1], j, sizes[j]))
        end
      end
    end
    return (lin + 1):expand(S):reshape(-1), S, stride
  end
  local function index_put(name, x, indices, values, accumulate)
    need_tensor(x, name)
    if type(indices) ~= "table" or is_tensor(indices) then
      fail(fmt("%s: indices must be a table of tensors, got %s", name, is_tensor(indices) and "a tensor" or type(indices)))
    end
    args.need_bool(accumulate, name, "accumulate")
    local idx = {}
    for i, t in ipairs(indices) do
      if is_tensor(t) and t:dtype() == "bool" then   -- a mask: the indices of its true elements (waits)
        for _, v in ipairs(nonzero(t, { as_tuple = true })) do idx[#idx + 1] = v end
      else
        idx[#idx + 1] = need_index(t, name, "index " .. i)
      end
    end
    if #idx == 0 then fail(name .. ": expects at least one index tensor") end
    if #idx > x:dim() then fail(fmt("%s: too many indices for a %d-d tensor: %d", name, x:dim(), #idx)) end
    if is_tensor(values) and values:dtype() ~= x:dtype() then
      fail(fmt("%s: values must have the tensor's dtype %s, got %s", name, x:dtype(), values:dtype()))
    end
    if not is_tensor(values) and type(values) ~= "number" and type(values) ~= "boolean" then
      fail(fmt("%s: values must be a tensor or a number, got %s", name, type(values)))
    end
    local lin, S, P = linear_index(name, x, idx)
    local rest, n = {}, lin:numel()
    for i = #idx + 1, x:dim() do rest[#rest + 1] = x:size(i) end
    local vshape = {}
    for _, v in ipairs(S) do vshape[#vshape + 1] = v end
    for _, v in ipairs(rest) do vshape[#vshape + 1] = v end
    local v = is_tensor(values) and values or like_tensor(type(values) == "boolean" and (values and 1 or 0) or values, x)
    if not broadcasts_to(v:shape(), vshape) then
      fail(fmt("%s: values of shape %s cannot be broadcast to the indexed shape %s", name, shape_str(v:shape()),
        shape_str(vshape)))
    end
    local flat_shape = { n, unpack(rest) }
    v = v:expand(vshape):reshape(flat_shape)
    local xf = x:reshape({ P, unpack(rest) })
    local r
    if accumulate then r = xf:index_add(1, lin, v)
    else r = xf:scatter(1, lin:reshape(ones_shape(#flat_shape, 1, n)):expand(flat_shape), v) end
    return r:reshape(x:shape())
  end
  --- index_put(x, indices, values, accumulate=false): x with values (broadcast)
  -- written at the places that the table of index tensors names, one tensor per
  -- leading dim, broadcast together (1-based, negative from the end; a bool
  -- tensor stands for the indices of its true elements); accumulate adds them
  -- (repeated places too). Indices out of range are found on the host: it waits.
  -- x:index_put_(indices, values, accumulate) in place.
  -- @usage x:index_put_({ rows, cols }, 0)
  define("index_put", function(x, indices, values, accumulate)
    return index_put("index_put", x, indices, values, accumulate)
  end, true)
  methods.index_put_ = methods.index_put_ or function(x, indices, values, accumulate)
    return write_back("index_put_", x, function(v) return index_put("index_put_", v, indices, values, accumulate) end)
  end

  local REDUCTIONS = { sum = true, prod = true, mean = true, amax = true, amin = true }
  local function scatter_reduce(name, x, dim, index, src, reduce, opts)
    need_tensor(x, name); need_tensor(src, name, 4)
    if not is_tensor(index) or index:dtype() ~= "int64" then
      fail(fmt("%s: index must be an int64 tensor, got %s", name, is_tensor(index) and index:dtype() or type(index)))
    end
    if not REDUCTIONS[reduce] then
      fail(fmt("%s: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', got %s", name, tostring(reduce)))
    end
    opts = options(opts, name, { include_self = true })
    local self_too = opts.include_self ~= false
    if src:dtype() ~= x:dtype() then
      fail(fmt("%s: src must have the tensor's dtype %s, got %s", name, x:dtype(), src:dtype()))
    end
    if index:dim() ~= x:dim() or src:dim() ~= x:dim() then
      fail(fmt("%s: index, src and the tensor must have the same number of dimensions, got %d, %d and %d", name,
        index:dim(), src:dim(), x:dim()))
    end
    local d = need_dim(name, x, dim)
    if not d then
      return scatter_reduce(name, x:reshape(1), 1, index:reshape(1), src:reshape(1), reduce, opts):reshape({})
    end
    local s = src
    for i = 1, x:dim() do
      if index:size(i) > src:size(i) or (i ~= d and index:size(i) > x:size(i)) then
        fail(fmt("%s: index of shape %s must be no larger than src %s, nor than the tensor %s outside dimension %d",
          name, shape_str(index:shape()), shape_str(src:shape()), shape_str(x:shape()), d))
      end
      if src:size(i) > index:size(i) then s = s:narrow(i, 1, index:size(i)) end
    end
    if index:numel() == 0 then return x:clone() end
    if reduce == "sum" or reduce == "mean" then
      local r = (self_too and x or x:scatter(d, index, 0)):scatter_add(d, index, s)
      if reduce == "sum" then return r end
      local cnt = tide.zeros(x:shape(), device_opts(x, "int64"))
        :scatter_add(d, index, tide.ones(index:shape(), device_opts(x, "int64")))
      cnt = self_too and cnt + 1 or cnt:clamp(1)
      if x:is_floating_point() then return r / cnt:to(x:dtype()) end
      return floor_divide(r, cnt):to(x:dtype())   -- integers: floored, as PyTorch
    end
    -- prod, amax, amin: src sorted by target along d, then a segmented scan
    -- (log2 of the length in steps) leaves each target's reduction in the last
    -- element of its run. A kernel would do it in one pass.
    local f = reduce == "prod" and tide.mul or reduce == "amax" and tide.maximum or tide.minimum
    local key, perm = index:sort(d)
    local v = s:gather(d, perm)
    local M, k = index:size(d), 1
    while k < M do
      local hi = v:narrow(d, k + 1, M - k)
      local same = key:narrow(d, k + 1, M - k):eq(key:narrow(d, 1, M - k))
      v = tide.cat({ v:narrow(d, 1, k), tide.where(same, f(hi, v:narrow(d, 1, M - k)), hi) }, d)
      k = k * 2
    end
    local ends = tide.ones(ones_shape(0), device_opts(x, "bool")):expand(key:narrow(d, 1, 1):shape())
    if M > 1 then ends = tide.cat({ key:narrow(d, 2, M - 1):ne(key:narrow(d, 1, M - 1)), ends }, d) end
    local N = x:size(d)
    local ext = x:shape()
    ext[d] = N + 1   -- the rest of each run goes to an extra place, dropped
    local r = tide.zeros(ext, device_opts(x, x:dtype())):scatter(d, tide.where(ends, key, N + 1), v):narrow(d, 1, N)
    if self_too then r = f(x, r) end
    local touched = tide.zeros(x:shape(), device_opts(x, "bool")):scatter(d, index, 1)
    return tide.where(touched, r, x)
  end
  --- scatter_reduce(x, dim, index, src, reduce, {include_self=true}): x with the
  -- elements of src reduced into the places index names along dim (1-based, as
  -- scatter): reduce 'sum', 'prod', 'mean' (integers: floored), 'amax' or
  -- 'amin'; include_self=false leaves x's value out where src reaches.
  -- x:scatter_reduce_ in place. Of tied maxima the gradient goes to one.
  -- @usage tide.zeros(3):scatter_reduce(1, idx, src, "amax", { include_self = false })
  define("scatter_reduce", function(x, dim, index, src, reduce, opts)
    return scatter_reduce("scatter_reduce", x, dim, index, src, reduce, opts)
  end, true)
  methods.scatter_reduce_ = methods.scatter_reduce_ or function(x, dim, index, src, reduce, opts)
    return write_back("scatter_reduce_", x, function(v)
      return scatter_reduce("scatter_reduce_", v, dim, index, src, reduce, opts)
    end)
  end

  local function masked_scatter(name, x, mask, source)
    need_tensor(x, name); need_tensor(mask, name, 2); need_tensor(source, name, 3)
    if mask:dtype() ~= "bool" then fail(fmt("%s: mask must be a bool tensor, got %s", name, mask:dtype())) end
    if source:dtype() ~= x:dtype() then
      fail(fmt("%s: source must have the tensor's dtype %s, got %s", name, x:dtype(), source:dtype()))
    end
    local s = x:shape()
    if not broadcasts_to(mask:shape(), s) then
      fail(fmt("%s: mask of shape %s cannot be broadcast to the tensor's shape %s", name, shape_str(mask:shape()),
        shape_str(s)))
    end
    local m = mask:expand(s)
    local pos = m:reshape(-1):to("int64"):cumsum(1)   -- the place in source of each true element
    local count = x:numel() > 0 and pos[x:numel()] or 0   -- a read of the host, as PyTorch's check
    local src = source:reshape(-1)
    if count > src:numel() then
      fail(fmt("%s: the mask selects %d elements but source has only %d", name, count, src:numel()))
    end
    if count == 0 then return x:clone() end
    return tide.where(m, src:index_select(1, pos:clamp(1, count)):reshape(s), x)
  end
  --- masked_scatter(x, mask, source): x with the elements where mask (broadcast)
  -- is true replaced by source's first elements in row-major order; x:masked_scatter_ in place.
  define("masked_scatter", function(x, mask, source) return masked_scatter("masked_scatter", x, mask, source) end, true)
  methods.masked_scatter_ = methods.masked_scatter_ or function(x, mask, source)
    return write_back("masked_scatter_", x, function(v) return masked_scatter("masked_scatter_", v, mask, source) end)
  end

  --- select_scatter(x, src, dim, index): x with x:select(dim, index) replaced by src.
  define("select_scatter", function(x, src, dim, index)
    need_tensor(x, "select_scatter"); need_tensor(src, "select_scatter", 2)
    if x:dim() == 0 then fail("select_scatter: expected a tensor of at least 1 dimension, got 0") end
    local d = wrap_dim(x:dim(), dim, "select_scatter")
    local n = x:size(d)
    if not is_int(index) or index == 0 or index > n or index < -n then
      fail(fmt("select_scatter: index %s is out of range for dimension %d of size %d", tostring(index), d, n))
    end
    local want = x:shape()
    table.remove(want, d)
    if shape_str(src:shape()) ~= shape_str(want) then
      fail(fmt("select_scatter: src must have shape %s (the selected slice's), got %s", shape_str(want),
        shape_str(src:shape())))
    end
    return cat_slices(x, d, index > 0 and index or n + index + 1, 1, src:to(x:dtype()):unsqueeze(d))
  end, true)

  --- slice_scatter(x, src, dim=1, start=1, end=size, step=1): x with the elements
  -- start, start+step, ... up to end (1-based and inclusive, negative from the
  -- end, clamped to the dim as Python's slices are) along dim replaced by src.
  -- @usage tide.slice_scatter(x, tide.zeros(2, 2), 2, 1, -1, 2)
  define("slice_scatter", function(x, src, dim, start, stop, step)
    local name = "slice_scatter"
    need_tensor(x, name); need_tensor(src, name, 2)
    if x:dim() == 0 then fail(name .. ": expected a tensor of at least 1 dimension, got 0") end
    local d = wrap_dim(x:dim(), dim or 1, name)
    local n = x:size(d)
    step = need_int(step or 1, name, "step", 1)
    local a, b = need_int(start or 1, name, "start"), need_int(stop or n, name, "end")
    if a == 0 then fail(name .. ": start must be a 1-based index, got 0") end
    if a < 0 then a = a + n + 1 end
    if b < 0 then b = b + n + 1 end
    a, b = max(a, 1), min(b, n)
    local k = b >= a and floor((b - a) / step) + 1 or 0
    local want = x:shape()
    want[d] = k
    if shape_str(src:shape()) ~= shape_str(want) then
      fail(fmt("%s: src must have shape %s (the slice's), got %s", name, shape_str(want), shape_str(src:shape())))
    end
    src = src:to(x:dtype())
    if k == 0 then return x:clone() end
    if step == 1 then return cat_slices(x, d, a, k, src) end
    local idx = tide.arange(a, a + (k - 1) * step + 1, step, device_opts(x, "int64"))
    return x:scatter(d, idx:reshape(ones_shape(x:dim(), d, k)):expand(want), src)
  end, true)

  --- diagonal_scatter(x, src, offset=0, dim1=1, dim2=2): x with
  -- x:diagonal(offset, dim1, dim2) replaced by src.
  define("diagonal_scatter", function(x, src, offset, dim1, dim2)
    local name = "diagonal_scatter"
    need_tensor(x, name); need_tensor(src, name, 2)
    offset = need_int(offset or 0, name, "offset")
    local n = x:dim()
    if n < 2 then fail(fmt("%s: expected a tensor of at least 2 dimensions, got %d", name, n)) end
    local a, b = wrap_dim(n, dim1 or 1, name), wrap_dim(n, dim2 or 2, name)
    if a == b then fail(fmt("%s: dim1 and dim2 must be different, got %d and %d", name, dim1 or 1, dim2 or 2)) end
    local want = diagonal(x:detach(), offset, a, b):shape()
    if shape_str(src:shape()) ~= shape_str(want) then
      fail(fmt("%s: src must have shape %s (the diagonal's), got %s", name, shape_str(want), shape_str(src:shape())))
    end
    local k, na, nb = want[#want], x:size(a), x:size(b)
    if k == 0 then return x:clone() end
    local ra = offset >= 0 and 0 or -offset
    local col = src:to(x:dtype())
    local function zeros(len)
      local s = col:shape()
      s[#s] = len
      return tide.zeros(s, device_opts(x, x:dtype()))
    end
    local parts = {}
    if ra > 0 then parts[#parts + 1] = zeros(ra) end
    parts[#parts + 1] = col
    if na - ra - k > 0 then parts[#parts + 1] = zeros(na - ra - k) end
    col = (#parts > 1 and tide.cat(parts, -1) or col):unsqueeze(-1)   -- row i of the plane: its diagonal element
    local i, j = tide.arange(na, device_opts(x)):unsqueeze(2), tide.arange(nb, device_opts(x)):unsqueeze(1)
    local r = tide.where((j - i):eq(offset), col, movedim(x, { a, b }, { n - 1, n }))
    return movedim(r, { n - 1, n }, { a, b })
  end, true)

  -- -- counting and statistics -----------------------------------------------------------------

  --- bincount(x, weights, minlength=0): how often each value 0, 1, 2, ... occurs
  -- in the 1-d non-negative integer tensor x (the count of value v at index v + 1),
  -- or the sum of their weights; length max(max(x) + 1, minlength). The length
  -- depends on the data: it waits for x.
  define("bincount", function(x, weights, minlength)
    need_tensor(x, "bincount")
    if x:dim() ~= 1 then fail(fmt("bincount: input must be 1-d, got %d-d", x:dim())) end
    if x:is_floating_point() or x:dtype() == "bool" then
      fail("bincount: input must be an integer tensor, got " .. x:dtype())
    end
    minlength = need_int(minlength or 0, "bincount", "minlength", 0)
    local w, dt = nil, "int64"
    if weights ~= nil then
      need_tensor(weights, "bincount", 2)
      if weights:dim() ~= 1 or weights:numel() ~= x:numel() then
        fail(fmt("bincount: weights must be 1-d with one weight per element (%d), got shape %s", x:numel(),
          shape_str(weights:shape())))
      end
      dt = weights:dtype() == "float32" and "float32" or "float64"   -- as PyTorch
      w = weights:to(dt)
    end
    local len = minlength
    if x:numel() > 0 then
      local v = tide.stack({ x:amin():to("int64"), x:amax():to("int64") }):totable()
      if v[1] < 0 then fail(fmt("bincount: input must be non-negative, got %d", v[1])) end
      len = max(len, v[2] + 1)
    end
    local i = x:to("int64") + 1
    return tide.zeros(len, device_opts(x, dt)):index_add(1, i, w or tide.ones(x:numel(), device_opts(x, dt)))
  end, true)

  --- histc(x, bins=100, min=0, max=0): counts of x's elements in bins equal
  -- bins between min and max (both 0: x's smallest and largest element, which
  -- waits for x); elements outside are left out, max falls in the last bin.
  define("histc", function(x, bins, lo, hi)
    need_tensor(x, "histc")
    if not x:is_floating_point() then fail("histc: input must be a floating-point tensor, got " .. x:dtype()) end
    bins = need_int(bins or 100, "histc", "bins", 1)
    lo, hi = lo or 0, hi or 0
    if type(lo) ~= "number" or type(hi) ~= "number" then fail("histc: min and max must be numbers") end
    if lo > hi then fail(fmt("histc: max must be larger than min, got min %s and max %s", tostring(lo), tostring(hi))) end
    if lo == hi and x:numel() > 0 then
      local v = tide.stack({ x:amin(), x:amax() }):double():totable()
      lo, hi = v[1], v[2]
    end
    if lo == hi then lo, hi = lo - 1, hi + 1 end
    if lo ~= lo or hi ~= hi or abs(lo) == math.huge or abs(hi) == math.huge then
      fail(fmt("histc: the range [%s, %s] is not finite", tostring(lo), tostring(hi)))
    end
    local xd = x:double()
    local pos = ((xd - lo) * (bins / (hi - lo))):floor():clamp(nil, bins - 1):to("int64") + 1
    local inside = xd:ge(lo):logical_and(xd:le(hi))
    local i = tide.where(inside, pos, bins + 1):reshape(-1)   -- the rest into an extra bin, dropped
    return tide.zeros(bins + 1, device_opts(x, x:dtype()))
      :index_add(1, i, tide.ones(x:numel(), device_opts(x, x:dtype()))):narrow(1, 1, bins)
  end, true)

  --- isin(elements, test_elements, {invert=false, assume_unique}): whether each
  -- element is among test_elements (either may be a number), by a sort of
  -- test_elements and a binary search (bool, elements' shape).
  define("isin", function(e, t, opts)
    opts = options(opts, "isin", { invert = true, assume_unique = true })
    if not is_tensor(e) and not is_tensor(t) then fail("isin: at least one argument must be a tensor") end
    for i, v in ipairs { e, t } do
      if not is_tensor(v) and type(v) ~= "number" and type(v) ~= "boolean" then
        fail(fmt("isin: argument %d must be a tensor or a number, got %s", i, type(v)))
      end
    end
    local ref = is_tensor(e) and e or t
    local function as_tensor(v)   -- a number in the dtype that holds it, as a weak scalar would promote
      if is_tensor(v) then return v end
      if type(v) == "boolean" then return like_tensor(v and 1 or 0, ref, "bool") end
      if ref:is_floating_point() then return like_tensor(v, ref) end
      return like_tensor(v, ref, v == floor(v) and promote(ref:dtype(), "int64") or "float32")
    end
    e, t = as_tensor(e), as_tensor(t)
    if e:dtype() == "bool" then e = e:to("uint8") end
    local flat = t:reshape(-1)
    if flat:dtype() == "bool" then flat = flat:to("uint8") end
    local M = flat:numel()
    local r
    if M == 0 then r = bool_like(e, false)
    else
      local sorted = flat:sort()
      local pos = tide.searchsorted(sorted, e):clamp(nil, M)
      r = sorted:gather(1, pos:reshape(-1)):reshape(e:shape()):eq(e)
    end
    if opts.invert then r = r:logical_not() end
    return r
  end)

  --- mode(x, dim=-1, keepdim=false): the most frequent value along dim (of
  -- several, the smallest) and the 1-based index of its last occurrence.
  define("mode", function(x, dim, keepdim)
    need_tensor(x, "mode")
    local n, d = line_of(x, dim, "mode")
    if n == 0 then fail(fmt("mode: cannot take the mode of dimension %d, of size 0", d)) end
    if not d then return x:clone(), tide.ones({}, device_opts(x, "int64")) end
    local sv, si = x:sort(d)
    local at = tide.arange(1, n + 1, device_opts(x, "int64")):reshape(ones_shape(x:dim(), d, n))
    local first = tide.ones(sv:narrow(d, 1, 1):shape(), device_opts(x, "bool"))
    local starts = n > 1 and tide.cat({ first, sv:narrow(d, 2, n - 1):ne(sv:narrow(d, 1, n - 1)) }, d) or first
    -- the length of the run so far: it first reaches the longest at the end of the first longest run
    local run = at - tide.where(starts, at, 0):cummax(d) + 1
    local pos = run:argmax(d, true)
    local v, i = sv:gather(d, pos), si:gather(d, pos)
    if keepdim then return v, i end
    return v:squeeze(d), i:squeeze(d)
  end, true)

  -- cov's checks of a weight vector for n observations
  local function weight_vector(w, what, n, want_float)
    need_tensor(w, "cov")
    if w:dim() ~= 1 then fail(fmt("cov: %s must be 1-d, got %d-d", what, w:dim())) end
    if w:numel() ~= n then
      fail(fmt("cov: %s must have one weight per observation (%d), got %d", what, n, w:numel()))
    end
    if want_float and not w:is_floating_point() then
      fail(fmt("cov: %s must be a floating-point tensor, got %s", what, w:dtype()))
    end
    if not want_float and (w:is_floating_point() or w:dtype() == "bool") then
      fail(fmt("cov: %s must be an integer tensor, got %s", what, w:dtype()))
    end
    if n > 0 and w:amin():item() < 0 then fail(fmt("cov: %s cannot be negative", what)) end   -- waits
    return w
  end
  --- cov(x, {correction=1, fweights, aweights}): the covariance matrix of the
  -- variables in x's rows (observations in its columns; a 1-d x is one variable,
  -- with a 0-d result), as torch.cov and NumPy's cov.
  local function cov(x, opts)
    need_tensor(x, "cov")
    if x:dim() > 2 then fail(fmt("cov: expected a tensor of at most 2 dimensions, got %d", x:dim())) end
    opts = options(opts, "cov", { correction = true, fweights = true, aweights = true })
    local corr = need_int(opts.correction == nil and 1 or opts.correction, "cov", "correction")
    local X = x:dim() < 2 and x:reshape(1, -1) or x
    if not X:is_floating_point() then X = X:to("float32") end
    local N = X:size(2)
    local fw = opts.fweights and weight_vector(opts.fweights, "fweights", N, false)
    local aw = opts.aweights and weight_vector(opts.aweights, "aweights", N, true)
    local w = fw and fw:to(X:dtype()) or nil
    if aw then w = w and w * aw or aw:to(X:dtype()) end
    local avg, norm
    if w then
      local wsum = w:sum()
      avg = (X * w):sum(2, true) / wsum
      if corr == 0 then norm = wsum
      elseif not aw then norm = wsum - corr
      else norm = wsum - (w * aw):sum() * corr / wsum end
      norm = norm:clamp(0)
    else
      avg, norm = X:mean(2, true), max(N - corr, 0)
    end
    local xm = X - avg
    return (xm:mm((w and xm * w or xm):t()) / norm):squeeze()
  end
  define("cov", cov, true)
  --- corrcoef(x): Pearson's correlation coefficients of x's rows, clipped to [-1, 1].
  define("corrcoef", function(x)
    need_tensor(x, "corrcoef")
    local c = cov(x)
    if c:dim() == 0 then return c / c end
    local sd = diagonal(c):sqrt()
    return (c / sd:reshape(-1, 1) / sd:reshape(1, -1)):clamp(-1, 1)
  end, true)

  -- trapezoid's arguments: y, its dim, and the spacing (x's differences, or dx)
  local function trapezoid_args(name, y, x, opts)
    need_tensor(y, name)
    if type(x) == "table" and not is_tensor(x) then x, opts = nil, x end
    opts = options(opts, name, { dx = true, dim = true })
    if x ~= nil and not is_tensor(x) then fail(fmt("%s: x must be a tensor, got %s", name, type(x))) end
    if x and opts.dx ~= nil then fail(name .. ": give x or dx, not both") end
    if y:dim() == 0 then fail(name .. ": y must have at least 1 dimension, got 0") end
    local d = wrap_dim(y:dim(), opts.dim or -1, name)
    local n = y:size(d)
    if not y:is_floating_point() then y = y:to(x and float_result(x) or "float32") end
    if not x then
      local dx = opts.dx == nil and 1 or opts.dx
      if type(dx) ~= "number" then fail(fmt("%s: dx must be a number, got %s", name, type(dx))) end
      return y, d, n, dx
    end
    if x:dim() == 1 then
      if x:numel() ~= n then
        fail(fmt("%s: x has %d elements but dimension %d of y has size %d", name, x:numel(), d, n))
      end
      x = x:reshape(ones_shape(y:dim(), d, n))
    elseif x:dim() ~= y:dim() then
      fail(fmt("%s: x must be 1-d or have y's number of dimensions (%d), got %d", name, y:dim(), x:dim()))
    end
    local xd = wrap_dim(x:dim(), d, name)
    if x:size(xd) ~= n then
      fail(fmt("%s: x has size %d along dimension %d but y has %d", name, x:size(xd), d, n))
    end
    return y, d, n, n > 1 and x:narrow(d, 2, n - 1) - x:narrow(d, 1, n - 1) or nil
  end
  -- the areas of the n - 1 trapezoids along d
  local function trapezoids(y, d, n, dx)
    return (y:narrow(d, 2, n - 1) + y:narrow(d, 1, n - 1)) * dx * 0.5
  end
  --- trapezoid(y, x, {dim=-1}) or trapezoid(y, {dx=1, dim=-1}): the integral
  -- of y along dim by the trapezoidal rule, at the points x (1-d along dim, or
  -- broadcast with y) or spaced dx apart. trapz: its other name.
  -- @usage tide.trapezoid(y, { dx = 0.1 })
  local function trapezoid(name)
    return function(y, x, opts)
      local yy, d, n, dx = trapezoid_args(name, y, x, opts)
      if n < 2 then return yy:narrow(d, 1, 0):sum(d) end
      return trapezoids(yy, d, n, dx):sum(d)
    end
  end
  define("trapezoid", trapezoid("trapezoid"))
  define("trapz", trapezoid("trapz"))
  --- cumulative_trapezoid(y, x, opts): the running integrals (n - 1 along dim).
  define("cumulative_trapezoid", function(y, x, opts)
    local yy, d, n, dx = trapezoid_args("cumulative_trapezoid", y, x, opts)
    if n < 2 then return yy:narrow(d, 1, 0):clone() end
    return trapezoids(yy, d, n, dx):cumsum(d)
  end)

  --- logcumsumexp(x, dim): log(cumsum(exp(x), dim)) without overflow or
  -- underflow: a scan of logaddexp in log2(n) steps (a kernel would take one).
  define("logcumsumexp", function(x, dim)
    need_tensor(x, "logcumsumexp")
    if not x:is_floating_point() then fail("logcumsumexp: input must be a floating-point tensor, got " .. x:dtype()) end
    if dim == nil then fail("logcumsumexp: a dimension is required") end
    local n, d = line_of(x, dim, "logcumsumexp")
    if not d or n == 0 then return x:clone() end
    local y, k = x, 1
    while k < n do
      y = tide.cat({ y:narrow(d, 1, k), tide.logaddexp(y:narrow(d, k + 1, n - k), y:narrow(d, 1, n - k)) }, d)
      k = k * 2
    end
    return y == x and x:clone() or y
  end, true)

  local function renorm(name, x, p, dim, maxnorm)
    need_tensor(x, name)
    if not x:is_floating_point() then fail(fmt("%s: input must be a floating-point tensor, got %s", name, x:dtype())) end
    if type(p) ~= "number" or not (p > 0) then fail(fmt("%s: p must be a positive number, got %s", name, tostring(p))) end
    if type(maxnorm) ~= "number" or not (maxnorm >= 0) then
      fail(fmt("%s: maxnorm must be a non-negative number, got %s", name, tostring(maxnorm)))
    end
    if x:dim() < 2 then fail(fmt("%s: input needs at least 2 dimensions, got %d", name, x:dim())) end
    local d = wrap_dim(x:dim(), dim, name)
    local others = {}
    for i = 1, x:dim() do if i ~= d then others[#others + 1] = i end end
    local norm = vector_norm(x, p, others, true, name)
    return x * tide.where(norm:gt(maxnorm), maxnorm / (norm + 1e-7), 1)
  end
  --- renorm(x, p, dim, maxnorm): x with each slice along dim whose p-norm
  -- exceeds maxnorm scaled down to norm maxnorm; x:renorm_ in place.
  define("renorm", function(x, p, dim, maxnorm) return renorm("renorm", x, p, dim, maxnorm) end, true)
  methods.renorm_ = methods.renorm_ or function(x, p, dim, maxnorm)
    return write_back("renorm_", x, function(v) return renorm("renorm_", v, p, dim, maxnorm) end)
  end

  --- dist(a, b, p=2): the p-norm of a - b (broadcast), 0-d.
  define("dist", function(a, b, p)
    need_tensor(a, "dist", 1); need_tensor(b, "dist", 2)
    return vector_norm(a - b, p, nil, false, "dist")
  end, true)

  -- -- creation --------------------------------------------------------------------------------

  -- creation options: a table or a dtype name
  local function creation_opts(opts, name)
    if type(opts) == "string" then opts = { dtype = opts } end
    return options(opts, name, { dtype = true, device = true, requires_grad = true })
  end
  local function finish(t, o)
    if o.requires_grad then t:requires_grad_() end
    return t
  end
  --- logspace(start, end, steps, base=10, opts): base ^ linspace(start, end, steps)
  -- (float32 unless opts.dtype says otherwise; computed in float64).
  define("logspace", function(a, b, steps, base, opts)
    if type(base) ~= "number" and base ~= nil then base, opts = nil, base end
    local o = creation_opts(opts, "logspace")
    for _, v in ipairs { { "start", a }, { "end", b }, { "base", base or 10 } } do
      if type(v[2]) ~= "number" then fail(fmt("logspace: %s must be a number, got %s", v[1], type(v[2]))) end
    end
    need_int(steps, "logspace", "steps", 0)
    local e = tide.linspace(a, b, steps, { dtype = "float64", device = o.device })
    return finish(tide.pow(base or 10, e):to(o.dtype or "float32"), o)
  end)

  --- range(start, end, step=1, opts): start, start + step, ... up to end included
  -- (torch.range, float32 by default; arange leaves end out).
  define("range", function(a, b, step, opts)
    if type(step) ~= "number" and step ~= nil then step, opts = nil, step end
    step = step or 1
    local o = creation_opts(opts, "range")
    for _, v in ipairs { { "start", a }, { "end", b }, { "step", step } } do
      if type(v[2]) ~= "number" or v[2] ~= v[2] or abs(v[2]) == math.huge then
        fail(fmt("range: %s must be a finite number, got %s", v[1], tostring(v[2])))
      end
    end
    if step == 0 then fail("range: step must be nonzero") end
    if (b - a) * step < 0 then
      fail(fmt("range: end %s cannot be reached from start %s with step %s", tostring(b), tostring(a), tostring(step)))
    end
    local n = floor((b - a) / step) + 1
    local r = tide.arange(n, { dtype = "float64", device = o.device }) * step + a
    return finish(r:to(o.dtype or "float32"), o)
  end)

  --- randint_like(x, high) or randint_like(x, low, high, opts): integers drawn
  -- from [low, high) in x's shape, dtype and device (unless opts say otherwise).
  define("randint_like", function(x, low, high, opts)
    need_tensor(x, "randint_like")
    if type(high) ~= "number" then low, high, opts = 0, low, high end
    if type(low) ~= "number" or type(high) ~= "number" then fail("randint_like: low and high must be numbers") end
    local o = creation_opts(opts, "randint_like")
    local t = tide.randint(low, high, x:shape(), { dtype = o.dtype or x:dtype(), device = o.device or x:device() })
    return finish(t, o)
  end)

  --- normal(mean, std, size, opts): normal draws with the given means and
  -- standard deviations: tensors (broadcast together) or numbers (then size
  -- gives the shape). Like PyTorch's, the draws carry no gradient to mean and std.
  -- @usage local eps = tide.normal(mu, sigma)
  define("normal", function(mean, std, size, opts)
    if std == nil then std = 1 end
    if not is_tensor(mean) and not is_tensor(std) then
      if type(mean) ~= "number" or type(std) ~= "number" then
        fail("normal: mean and std must be tensors or numbers")
      end
      if std < 0 then fail(fmt("normal: std must be non-negative, got %s", tostring(std))) end
      if type(size) == "number" then size = { size } end
      if type(size) ~= "table" then fail("normal: with numbers for mean and std, size must be given") end
      local o = creation_opts(opts, "normal")
      return finish(tide.randn(size, { dtype = o.dtype, device = o.device }) * std + mean, o)
    end
    if size ~= nil then fail("normal: size is given by mean and std when either is a tensor") end
    for i, v in ipairs { mean, std } do
      if is_tensor(v) and not v:is_floating_point() then
        fail(fmt("normal: %s must be a floating-point tensor, got %s", i == 1 and "mean" or "std", v:dtype()))
      elseif not is_tensor(v) and type(v) ~= "number" then
        fail(fmt("normal: %s must be a tensor or a number, got %s", i == 1 and "mean" or "std", type(v)))
      end
    end
    if type(std) == "number" and std < 0 then fail(fmt("normal: std must be non-negative, got %s", tostring(std))) end
    if is_tensor(mean) then mean = mean:detach() end
    if is_tensor(std) then
      std = std:detach()
      if std:numel() > 0 and std:amin():item() < 0 then fail("normal: std must be non-negative") end   -- waits
    end
    local ref = is_tensor(mean) and mean or std
    local s = broadcast_shapes("normal", { is_tensor(mean) and mean:shape() or {}, is_tensor(std) and std:shape() or {} })
    return tide.randn(s, device_opts(ref, float_result(mean, std))) * std + mean
  end)

  --- unravel_index(indices, shape): the 1-based coordinates in shape of 1-based
  -- flat indices (negative: from the end), as a table of one tensor per dim.
  -- Indices out of range are found on the host: it waits.
  -- @usage local rc = tide.unravel_index(i, { 3, 4 }); local row, col = rc[1], rc[2]
  define("unravel_index", function(indices, shape)
    if type(indices) == "number" then indices = tide.tensor(indices, "int64") end
    local idx = need_index(indices, "unravel_index", "indices")
    shape = int_list(shape, "unravel_index", "shape")
    local total = 1
    for _, v in ipairs(shape) do
      need_int(v, "unravel_index", "shape sizes", 0)
      total = total * v
    end
    if idx:numel() > 0 then
      local v = tide.stack({ idx:amin(), idx:amax() }):totable()
      for _, i in ipairs(v) do
        if i == 0 or i > total or i < -total then
          fail(fmt("unravel_index: index %d is out of range for shape %s", i, shape_str(shape)))
        end
      end
    end
    local i0 = tide.where(idx:lt(0), idx + total, idx - 1)   -- 0-based
    local r = {}
    for d = #shape, 1, -1 do
      local q = floor_divide(i0, shape[d])
      r[d] = i0 - q * shape[d] + 1
      i0 = q
    end
    return r
  end)

  --- vander(x, N=#x, increasing=false): the Vandermonde matrix of the 1-d x:
  -- columns x^(N-1) .. x^0 (increasing: x^0 .. x^(N-1)); integers as int64.
  define("vander", function(x, N, increasing)
    need_tensor(x, "vander")
    if x:dim() ~= 1 then fail(fmt("vander: x must be 1-d, got %d-d", x:dim())) end
    if type(N) == "boolean" then N, increasing = nil, N end
    N = need_int(N == nil and x:numel() or N, "vander", "N", 0)
    local dt = x:is_floating_point() and x:dtype() or "int64"
    local n = x:numel()
    local r = tide.ones({ n, min(N, 1) }, device_opts(x, dt))
    if N > 1 then r = tide.cat({ r, x:to(dt):unsqueeze(2):expand(n, N - 1) }, 2):cumprod(2) end
    if increasing or N < 2 then return r end
    return r:flip(2)
  end)

  --- combinations(x, r=2, with_replacement=false): the r-element combinations
  -- of the 1-d x as the rows of a [count, r] tensor, in lexicographic order.
  define("combinations", function(x, r, with_replacement)
    need_tensor(x, "combinations")
    if x:dim() ~= 1 then fail(fmt("combinations: x must be 1-d, got %d-d", x:dim())) end
    r = need_int(r == nil and 2 or r, "combinations", "r", 0)
    if r == 0 then return tide.empty(0, device_opts(x, x:dtype())) end
    local n, cols, pick = x:numel(), {}, {}
    for j = 1, r do cols[j] = {} end
    local function walk(j, from)   -- the combinations on the host; the elements picked by index_select
      if j > r then
        for k = 1, r do local c = cols[k]; c[#c + 1] = pick[k] end
        return
      end
      for i = from, n do
        pick[j] = i
        walk(j + 1, with_replacement and i or i + 1)
      end
    end
    walk(1, 1)
    local out = {}
    for j = 1, r do
      out[j] = x:index_select(1, tide.tensor(cols[j], device_opts(x, "int64")):reshape(#cols[j]))
    end
    return tide.stack(out, 2)
  end)

  --- narrow_copy(x, dim, start, length): narrow's elements as a new tensor.
  define("narrow_copy", function(x, dim, start, length)
    return need_tensor(x, "narrow_copy"):narrow(dim, start, length):clone()
  end, true)

  -- -- floating-point parts --------------------------------------------------------------------

  --- frexp(x): the mantissa (x's dtype, magnitude in [0.5, 1)) and the int32
  -- exponent with x = mantissa * 2^exponent; 0, infinities and NaN give
  -- themselves and exponent 0. Computed in float64 from log2.
  define("frexp", function(x)
    need_tensor(x, "frexp")
    if not x:is_floating_point() then fail("frexp: input must be a floating-point tensor, got " .. x:dtype()) end
    local xd = x:double()
    local a = xd:abs()
    local finite = a:gt(0):logical_and(a:lt(math.huge))
    local e = tide.where(finite, a, 1):log2():floor() + 1
    -- x * 2^-e in two halves: 2^-e alone can leave float64's range (subnormal x, x near its largest)
    local h = (e * 0.5):floor()
    local m = xd * h:neg():exp2() * (h - e):exp2()
    -- log2 may have rounded across a power of two: one step back into [0.5, 1)
    local up = m:abs():ge(1)
    m, e = tide.where(up, m * 0.5, m), tide.where(up, e + 1, e)
    local down = m:abs():lt(0.5):logical_and(finite)
    m, e = tide.where(down, m * 2, m), tide.where(down, e - 1, e)
    return tide.where(finite, m, xd):to(x:dtype()), tide.where(finite, e, 0):to("int32")
  end, true)

  local function ldexp(name, x, e)
    need_tensor(x, name)
    if not is_tensor(e) and type(e) ~= "number" then
      fail(fmt("%s: argument 2 must be a tensor or a number, got %s", name, type(e)))
    end
    local dt = float_result(x, e)
    if is_tensor(e) then e = e:to(dt):exp2() else e = 2 ^ e end
    return x:to(dt) * e
  end
  --- ldexp(x, e): x * 2^e, floating-point (2^e in the result's dtype).
  define("ldexp", function(x, e) return ldexp("ldexp", x, e) end, true)
  methods.ldexp_ = methods.ldexp_ or function(x, e)
    return write_back("ldexp_", x, function(v) return ldexp("ldexp_", v, e) end)
  end

  -- -- integers: gcd, lcm and bitwise operations -----------------------------------------------

  -- The tensors of an integer function of a and b (numbers become tensors like
  -- the other), checked: integer or (with bools) bool dtypes.
  local function int_operands(name, a, b, bools)
    if not is_tensor(a) and not is_tensor(b) then fail(name .. ": at least one argument must be a tensor") end
    local ref = is_tensor(a) and a or b
    local r = {}
    for i, v in ipairs { a, b } do
      if not is_tensor(v) then
        if type(v) == "boolean" and bools then v = like_tensor(v and 1 or 0, ref, ref:dtype() == "bool" and "bool" or nil)
        elseif type(v) == "number" and v == floor(v) then
          v = like_tensor(v, ref, ref:dtype() == "bool" and "int64" or ref:dtype())
        else
          fail(fmt("%s: argument %d must be a tensor or an integer, got %s", name, i, tostring(v)))
        end
      end
      if v:is_floating_point() or (v:dtype() == "bool" and not bools) then
        fail(fmt("%s: argument %d must be an integer%s tensor, got %s", name, i, bools and " or bool" or "", v:dtype()))
      end
      r[i] = v
    end
    return r[1], r[2]
  end

  -- gcd by Euclid's algorithm, elementwise: one step per remainder, until every
  -- one is 0 (a read of the host per step; at most ~92 steps for int64). A kernel
  -- would loop per element.
  local function gcd(a, b)
    a, b = a:abs(), b:abs()
    while true do
      local nz = b:ne(0)
      if not nz:any():item() then break end
      local r = tide.remainder(a, tide.where(nz, b, 1))
      a, b = tide.where(nz, b, a), tide.where(nz, r, 0)
    end
    return a
  end
  local function gcd_of(name, a, b)
    a, b = int_operands(name, a, b)
    local dt = promote(a:dtype(), b:dtype())
    return gcd(a, b):expand(broadcast_shapes(name, { a:shape(), b:shape() })):to(dt, { copy = true })
  end
  local function lcm_of(name, a, b)
    a, b = int_operands(name, a, b)
    local g = gcd(a, b)
    local zero = g:eq(0)
    return tide.where(zero, 0, (floor_divide(a, tide.where(zero, 1, g)) * b):abs())
  end
  --- gcd(a, b): the greatest common divisor of integers, elementwise (non-negative; gcd(0, 0) = 0).
  define("gcd", function(a, b) return gcd_of("gcd", a, b) end, true)
  --- lcm(a, b): the least common multiple of integers, elementwise (non-negative; 0 where either is 0).
  define("lcm", function(a, b) return lcm_of("lcm", a, b) end, true)
  methods.gcd_ = methods.gcd_ or function(x, b) return copy_into("gcd_", x, gcd_of("gcd_", x, b)) end
  methods.lcm_ = methods.lcm_ or function(x, b) return copy_into("lcm_", x, lcm_of("lcm_", x, b)) end

  -- Bitwise and, or, xor: there are no bit kernels, so each int64 value is split
  -- into its bits along a new last dim (by remainders of powers of two, the sign
  -- bit apart), the bits combined, and the sum of the kept powers taken. Exact for
  -- every value; a bit kernel would be ~100 times faster.
  local MAGNITUDE_BITS = { uint8 = 8, int32 = 31, int64 = 63 }
  local function pow2_list(n, from)
    local t = {}
    for k = 1, n do t[k] = 2 ^ (k - 1 + from) end
    return t
  end
  -- x's magnitude bits as a bool tensor [..., nb] (least significant first) and its sign bit
  local function bits_of(x, nb)
    local signed = x:lt(0)
    local o = device_opts(x, "int64")   -- powers of two as int64 tensors: numbers above 2^53 would be float
    local low = tide.where(signed, x - tide.full({}, -2 ^ nb, o), x)   -- x + 2^nb
    local top = low:ge(tide.full({}, 2 ^ (nb - 1), o))
    local p = tide.tensor(pow2_list(nb - 1, 1), o)    -- 2^(k+1): remainder keeps bits 0..k
    local h = tide.tensor(pow2_list(nb - 1, 0), o)    -- 2^k
    local bits = tide.remainder(low:unsqueeze(-1), p):ge(h)
    return tide.cat({ bits, top:unsqueeze(-1) }, -1), signed
  end
  local function bitwise(name, logical, combine)
    return function(a, b)
      a, b = int_operands(name, a, b, true)
      if a:dtype() == "bool" and b:dtype() == "bool" then return logical(a, b) end
      local dt = promote(a:dtype(), b:dtype())
      local nb = MAGNITUDE_BITS[dt]
      local ba, sa = bits_of(a:to("int64"), nb)
      local bb, sb = bits_of(b:to("int64"), nb)
      local w = tide.tensor(pow2_list(nb, 0), device_opts(a, "int64"))
      local r = (combine(ba, bb) * w):sum(-1)
      if dt ~= "uint8" then r = tide.where(combine(sa, sb), r + tide.full({}, -2 ^ nb, device_opts(a, "int64")), r) end
      return r:to(dt)
    end
  end
  local bitwise_fns = {
    bitwise_and = bitwise("bitwise_and", tide.logical_and, tide.logical_and),
    bitwise_or = bitwise("bitwise_or", tide.logical_or, tide.logical_or),
    bitwise_xor = bitwise("bitwise_xor", tide.logical_xor, tide.ne),
  }
  --- bitwise_and(a, b), bitwise_or, bitwise_xor: of integer or bool tensors (or
  -- an integer), two's complement as in PyTorch; x:bitwise_and_(b) & co in place.
  for name, f in pairs(bitwise_fns) do
    define(name, f, true)
    methods[name .. "_"] = methods[name .. "_"] or function(x, b) return copy_into(name .. "_", x, f(x, b)) end
  end
  local function bitwise_not(name, x)
    need_tensor(x, name)
    if x:dtype() == "bool" then return x:logical_not() end
    if x:is_floating_point() then fail(fmt("%s: input must be an integer or bool tensor, got %s", name, x:dtype())) end
    return tide.sub(x:dtype() == "uint8" and 255 or -1, x)   -- -1 - x never overflows
  end
  --- bitwise_not(x): ~x of an integer or bool tensor.
  define("bitwise_not", function(x) return bitwise_not("bitwise_not", x) end, true)
  methods.bitwise_not_ = methods.bitwise_not_ or function(x)
    return copy_into("bitwise_not_", x, bitwise_not("bitwise_not_", x))
  end

  -- -- matrix exponential ----------------------------------------------------------------------

  -- Higham's Pade approximant of degree 13 (SIAM J. Matrix Anal. Appl. 26, 2005):
  -- its coefficients, and the 1-norm up to which it is accurate to float64's precision
  local PADE13 = { 64764752532480000, 32382376266240000, 7771770303897600, 1187353796428800, 129060195264000,
                   10559470521600, 670442572800, 33522128640, 1323241920, 40840800, 960960, 16380, 182, 1 }
  local THETA13 = 5.371920351148152
  --- matrix_exp(A): e^A of each square matrix in the last two dims, by scaling
  -- and squaring with the degree-13 Pade approximant (one linalg.solve); the
  -- number of squarings is read from the host (it waits for A). Differentiable
  -- through the matmuls and the solve. Also tide.linalg.matrix_exp.
  local function matrix_exp(A)
    need_tensor(A, "matrix_exp")
    if A:dim() < 2 or A:size(-1) ~= A:size(-2) then
      fail(fmt("matrix_exp: expected a square matrix or a batch of them, got shape %s", shape_str(A:shape())))
    end
    if not A:is_floating_point() then fail("matrix_exp: input must be a floating-point tensor, got " .. A:dtype()) end
    local n, dt = A:size(-1), A:dtype()
    if A:numel() == 0 then return A:clone() end
    if n == 1 then return A:exp() end
    local X = (dt == "float16" or dt == "bfloat16") and A:float() or A
    -- s squarings per matrix bring its 1-norm under THETA13
    local norm = X:detach():abs():sum(-2):amax(-1)
    local s = (norm / THETA13):log2():ceil():clamp(0)
    s = tide.where(s:lt(math.huge), s, 0)   -- NaN and inf: the result is NaN anyway
    local squarings = s:amax():item()
    local scale = s:neg():exp2():unsqueeze(-1):unsqueeze(-1)
    X = X * scale
    local b = PADE13
    local I = tide.eye(n, device_opts(X, X:dtype()))
    local X2 = X:matmul(X)
    local X4 = X2:matmul(X2)
    local X6 = X4:matmul(X2)
    local U = X:matmul(X6:matmul(X6 * b[14] + X4 * b[12] + X2 * b[10]) + X6 * b[8] + X4 * b[6] + X2 * b[4] + I * b[2])
    local V = X6:matmul(X6 * b[13] + X4 * b[11] + X2 * b[9]) + X6 * b[7] + X4 * b[5] + X2 * b[3] + I * b[1]
    local R = tide.linalg.solve(V - U, V + U)
    local sq = s:unsqueeze(-1):unsqueeze(-1)
    for k = 1, squarings do R = tide.where(sq:ge(k), R:matmul(R), R) end
    return R:to(dt)
  end
  define("matrix_exp", matrix_exp, true)
  tide.linalg.matrix_exp = tide.linalg.matrix_exp or matrix_exp
end
