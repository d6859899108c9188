--- tide.tensor: the tensor type seen from Lua. Tensors are `tide_tensor *`
-- cdata with a metatype, so a method call compiles to a direct C call; this
-- file gives them their methods, operators, indexing and the Lua functions of
-- every op in the runtime's registry. Dimensions and indices are 1-based here
-- and become 0-based only in the calls into bindings/.
-- Printing is in tide.format; creation functions are in tide (init.lua).
local B = require "bindings.ffi"
local ffi, C = B.ffi, B.C
local wrap, raise, fail = B.wrap, B.raise, B.fail

local M = {}
local methods = {}
M.methods = methods

-- -- dtypes ------------------------------------------------------------------

local dtype_names, dtype_sizes = {}, {}
for d = 0, tonumber(C.TIDE_DTYPE_COUNT) - 1 do
  dtype_names[d] = ffi.string(C.tide_dtype_name(d))
  dtype_sizes[d] = tonumber(C.tide_dtype_size(d))
end
M.dtype_names = dtype_names
local F32, F64, I64, BOOL = 0, 1, 3, 5

--- Returns the dtype id of a name ("float32", "int64", aliases such as "long"), or raises.
function M.dtype_id(name, op, level)
  if type(name) == "number" and dtype_names[name] then return name end
  local d = type(name) == "string" and C.tide_dtype_from_name(name) or -1
  if d < 0 then
    fail(string.format("%s: unknown dtype %s", op or "dtype", tostring(name)))
  end
  return d
end
local dtype_id = M.dtype_id

local function is_tensor(x) return type(x) == "cdata" and ffi.istype(B.tensor_type, x) end
M.is_tensor = is_tensor

-- -- calling ops ---------------------------------------------------------------

local op_ids = {}
for i = 0, C.tide_op_count() - 1 do
  local info = ffi.new("tide_op_info")
  C.tide_op_get_info(i, info)
  op_ids[ffi.string(info.name)] = { id = i, n_in = info.n_in, n_out = info.n_out, flags = info.flags }
end
M.op_ids = op_ids

local ins = ffi.new("tide_tensor *[8]")
local outs = ffi.new("tide_tensor *[4]")
local params = ffi.new("tide_op_params")
local ONE_BASED = C.TIDE_PARAMF_ONE_BASED

local function fresh_bytes(t) return dtype_sizes[t.dtype_id] * tonumber(t.nelem) end

--- A fresh params block: dtype from the rule, no ints, no flags.
local function new_params()
  params.n_ints, params.keepdim, params.dtype, params.flags = 0, 0, -1, 0
  return params
end
M.new_params = new_params

-- Takes the results of a successful tide_op_call: new tensors for the collector,
-- or `out` itself when the op wrote into it.
local function take(n_out, out)
  if out ~= nil then
    C.tide_tensor_release(outs[0])
    return out
  end
  local r1 = wrap(outs[0], fresh_bytes(outs[0]))
  if n_out == 1 then return r1 end
  local r2 = wrap(outs[1], fresh_bytes(outs[1]))
  if n_out == 2 then return r1, r2 end
  return r1, r2, wrap(outs[2], fresh_bytes(outs[2]))
end

--- Runs op `name` on n tensors already in `ins` with params `p` (or nil), into `out` (or nil).
-- When the engine queued the op rather than running it, it is told the user's
-- line, so that a failure found later names where the op came from.
local user_location = B.user_location
-- The graph tide.jit is capturing on this thread, if any: its nodes learn their Lua line.
local capturing = nil
function M.set_capturing(g) capturing = g end
function M.is_capturing() return capturing ~= nil end
local function run(op, n, p, out)
  if C.tide_op_call(op.id, ins, n, p, outs, out) ~= 0 then raise() end
  local deferred = C.tide_engine_last_deferred()
  if deferred ~= 0 then C.tide_engine_set_origin(deferred, user_location()) end
  if capturing ~= nil then C.tide_graph_set_origin(capturing, user_location()) end
  return take(op.n_out, out)
end
M.run = run
function M.ins_set(i, t) ins[i] = t end

-- A Lua number or boolean as a 0-d "wrapped number" tensor (weak in type promotion).
-- They are immutable, so the ones made recently are kept and reused: loops
-- that write `x * 2 + 1` then make no tensor for the constants.
local floor = math.floor
local scalar_cache, scalar_count = {}, 0
local function scalar(x)
  local hit = scalar_cache[x]
  if hit then return hit end
  local d = type(x) == "boolean" and BOOL or (x == floor(x) and x > -2^53 and x < 2^53) and I64 or F64
  local v = x
  if type(x) == "boolean" then v = x and 1 or 0 end
  local t = wrap(C.tide_tensor_scalar(v, d))
  if x == x and not (x == 0 and 1 / x < 0) then   -- NaN cannot be a key; -0 would meet 0
    if scalar_count >= 256 then scalar_cache, scalar_count = {}, 0 end
    scalar_cache[x] = t
    scalar_count = scalar_count + 1
  end
  return t
end
M.scalar = scalar

-- Accepts a tensor or a Lua number/boolean for argument `pos` of op `name`.
local function operand(x, name, pos)
  if is_tensor(x) then return x end
  local tx = type(x)
  if tx == "number" or tx == "boolean" then return scalar(x) end
  fail(string.format("%s: argument %d must be a tensor or a number, got %s", name, pos, tx))
end

--- Converts a Lua dimension (1-based, negative from the end) to the runtime's 0-based form.
local function cdim(d, name, level)
  if type(d) ~= "number" or d ~= floor(d) then
    fail(string.format("%s: dimension must be an integer, got %s", name, tostring(d)))
  end
  if d == 0 then
    fail(string.format("%s: dimension 0 is out of range (dimensions are 1-based)", name))
  end
  return d > 0 and d - 1 or d
end
M.cdim = cdim

-- Fills params.ints from a dim or a list of dims (nil: none).
local function set_dims(p, dims, name)
  if dims == nil then p.n_ints = 0; return end
  if type(dims) == "number" then
    p.ints[0] = cdim(dims, name, 3); p.n_ints = 1; return
  end
  if type(dims) ~= "table" then
    fail(string.format("%s: dims must be a number or a table of numbers, got %s", name, type(dims)))
  end
  if #dims > 16 then fail(string.format("%s: too many dims (%d)", name, #dims)) end
  for i = 1, #dims do p.ints[i - 1] = cdim(dims[i], name, 3) end
  p.n_ints = #dims
end
M.set_dims = set_dims

-- -- generic op functions -------------------------------------------------------

local function unary_fn(name, op)
  return function(a)
    if not is_tensor(a) then a = operand(a, name, 1) end
    ins[0] = a
    return run(op, 1, nil, nil)
  end, function(a)
    ins[0] = a
    return run(op, 1, nil, a)
  end
end

local function binary_fn(name, op)
  return function(a, b)
    if not is_tensor(a) then a = operand(a, name, 1) end
    if not is_tensor(b) then b = operand(b, name, 2) end
    ins[0], ins[1] = a, b
    return run(op, 2, nil, nil)
  end, function(a, b)
    if not is_tensor(b) then b = operand(b, name, 2) end
    ins[0], ins[1] = a, b
    return run(op, 2, nil, a)
  end
end

local functions = {}   -- tide.<name> functions; init.lua copies them into tide
M.functions = functions

for _, name in ipairs { "neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos",
                        "tanh", "sigmoid", "relu", "silu", "floor", "ceil", "round", "sign",
                        "reciprocal", "logical_not", "trunc", "tan", "asin", "acos", "atan",
                        "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv",
                        "log2", "log10", "exp2", "lgamma", "digamma", "i0", "i0e", "i1", "i1e" } do
  local f, f_ = unary_fn(name, op_ids[name])
  functions[name], methods[name], methods[name .. "_"] = f, f, f_
end

for _, name in ipairs { "add", "sub", "mul", "div", "pow", "fmod", "remainder", "floor_divide", "maximum", "minimum",
                        "atan2", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or" } do
  local f, f_ = binary_fn(name, op_ids[name])
  functions[name], methods[name] = f, f
  if bit.band(op_ids[name].flags, C.TIDE_OPF_INPLACE) ~= 0 then methods[name .. "_"] = f_ end
end

-- -- fused updates ----------------------------------------------------------------------
-- PyTorch's add/sub alpha, addcmul, addcdiv and lerp: one op and one pass over memory
-- each, where the expression they stand for takes two to four. Their scalar (alpha,
-- value, weight) is a number or a tensor (a 0-d one in the optimizers, whose
-- hyperparameters live in tensors); it is an operand like the others: it broadcasts,
-- takes part in type promotion as it would in the expression (a number is weak, so
-- `int_tensor:add(b, 0.5)` is float32 as `int_tensor + 0.5 * b` is) and has a gradient.

do
  local add_op, sub_op, scaled_op, neg_op = op_ids.add, op_ids.sub, op_ids.add_scaled, op_ids.neg

  -- alpha for add, or -alpha for sub (a tensor alpha is negated by an op, a number here)
  local function alpha_operand(alpha, name, negate)
    if type(alpha) == "number" then return scalar(negate and -alpha or alpha) end
    if not is_tensor(alpha) then
      fail(string.format("%s: argument 3 (alpha) must be a tensor or a number, got %s", name, type(alpha)))
    end
    if not negate then return alpha end
    ins[0] = alpha
    return run(neg_op, 1, nil, nil)
  end

  -- a + alpha * b or a - alpha * b (no alpha: the plain op, as fast as before), into out or new
  local function add_sub(name, op, a, b, alpha, out)
    if not is_tensor(b) then b = operand(b, name, 2) end
    if alpha == nil then
      ins[0], ins[1] = a, b
      return run(op, 2, nil, out)
    end
    alpha = alpha_operand(alpha, name, op == sub_op)
    ins[0], ins[1], ins[2] = a, b, alpha
    return run(scaled_op, 3, nil, out)
  end

  --- add(a, b [, alpha]): a + alpha * b in one pass (the op add_scaled); without alpha, a + b.
  -- @param a a tensor or a number
  -- @param b a tensor or a number
  -- @param alpha optional number or tensor (usually 0-d)
  -- @return a new tensor
  -- @usage local p2 = p:add(g, -0.01)          -- p - 0.01 g
  functions.add = function(a, b, alpha)
    if not is_tensor(a) then a = operand(a, "add", 1) end
    return add_sub("add", add_op, a, b, alpha, nil)
  end
  --- sub(a, b [, alpha]): a - alpha * b in one pass; without alpha, a - b.
  -- @usage local r = tide.sub(x, y, 2)          -- x - 2 y
  functions.sub = function(a, b, alpha)
    if not is_tensor(a) then a = operand(a, "sub", 1) end
    return add_sub("sub", sub_op, a, b, alpha, nil)
  end
  methods.add, methods.sub = functions.add, functions.sub
  --- a:add_(b [, alpha]): a = a + alpha * b in place, keeping a's dtype; returns a.
  -- @usage buf:mul_(momentum):add_(g, 1 - dampening)
  methods.add_ = function(a, b, alpha) return add_sub("add", add_op, a, b, alpha, a) end
  --- a:sub_(b [, alpha]): a = a - alpha * b in place; returns a.
  -- @usage p:sub_(g, lr)
  methods.sub_ = function(a, b, alpha) return add_sub("sub", sub_op, a, b, alpha, a) end
end

do
  local addcmul_op, addcdiv_op = op_ids.addcmul, op_ids.addcdiv

  -- x + value * t1 * t2 or x + value * t1 / t2 (op, named name), into out or a new tensor
  local function fused(name, op, x, t1, t2, value, out)
    if not is_tensor(x) then x = operand(x, name, 1) end
    if not is_tensor(t1) then t1 = operand(t1, name, 2) end
    if not is_tensor(t2) then t2 = operand(t2, name, 3) end
    if value == nil then value = scalar(1) elseif not is_tensor(value) then value = operand(value, name, 4) end
    ins[0], ins[1], ins[2], ins[3] = x, t1, t2, value
    return run(op, 4, nil, out)
  end

  --- addcmul(x, t1, t2 [, value]): x + value * t1 * t2 in one pass (value defaults to 1).
  -- @param x a tensor or a number; t1, t2 likewise, all broadcast together
  -- @param value optional number or tensor (usually 0-d)
  -- @return a new tensor
  -- @usage local v2 = v:addcmul(g, g, 0.001)
  functions.addcmul = function(x, t1, t2, value) return fused("addcmul", addcmul_op, x, t1, t2, value, nil) end
  --- x:addcmul_(t1, t2 [, value]): x = x + value * t1 * t2 in place, keeping x's dtype; returns x.
  -- @usage v:mul_(beta2):addcmul_(g, g, 1 - beta2)
  methods.addcmul_ = function(x, t1, t2, value) return fused("addcmul", addcmul_op, x, t1, t2, value, x) end
  --- addcdiv(x, t1, t2 [, value]): x + value * t1 / t2 in one pass (value defaults to 1);
  -- floating-point (integer inputs give float32).
  -- @param x a tensor or a number; t1, t2 likewise, all broadcast together
  -- @param value optional number or tensor (usually 0-d)
  -- @return a new tensor
  -- @usage local q = tide.addcdiv(x, a, b, 0.5)
  functions.addcdiv = function(x, t1, t2, value) return fused("addcdiv", addcdiv_op, x, t1, t2, value, nil) end
  --- x:addcdiv_(t1, t2 [, value]): x = x + value * t1 / t2 in place; returns x.
  -- @usage p:addcdiv_(m, denom, -step_size)
  methods.addcdiv_ = function(x, t1, t2, value) return fused("addcdiv", addcdiv_op, x, t1, t2, value, x) end
  methods.addcmul, methods.addcdiv = functions.addcmul, functions.addcdiv
end

do
  local op = op_ids.lerp
  local function call(x, e, w, out)
    if not is_tensor(e) then e = operand(e, "lerp", 2) end
    if not is_tensor(w) then w = operand(w, "lerp", 3) end
    ins[0], ins[1], ins[2] = x, e, w
    return run(op, 3, nil, out)
  end
  --- lerp(x, end, weight): x + weight * (end - x) in one pass, exactly end at weight 1;
  -- weight is a number or a tensor that broadcasts.
  -- @param x a tensor or a number
  -- @param e the end: a tensor or a number
  -- @param w the weight: a number or a tensor
  -- @return a new tensor
  -- @usage local mid = tide.lerp(a, b, 0.5)
  functions.lerp = function(x, e, w)
    if not is_tensor(x) then x = operand(x, "lerp", 1) end
    return call(x, e, w, nil)
  end
  methods.lerp = functions.lerp
  --- x:lerp_(end, weight): x = x + weight * (end - x) in place; returns x.
  -- @usage m:lerp_(g, 1 - beta1)
  methods.lerp_ = function(x, e, w) return call(x, e, w, x) end
end

do -- gelu(x, approximate): approximate = "tanh" for the tanh form
  local op = op_ids.gelu
  local function gelu(a, approximate, out)
    local p = new_params()
    if approximate == "tanh" then p.flags = 1
    elseif approximate ~= nil and approximate ~= "none" then
      fail("gelu: approximate must be 'none' or 'tanh', got " .. tostring(approximate))
    end
    ins[0] = a
    return run(op, 1, p, out)
  end
  functions.gelu = function(a, approximate) return gelu(a, approximate, nil) end
  methods.gelu = functions.gelu
  methods.gelu_ = function(a, approximate) return gelu(a, approximate, a) end
end

do -- polygamma(n, x): digamma's n-th derivative, PyTorch's argument order
  local op = op_ids.polygamma
  local function polygamma(n, a, out)
    if type(n) ~= "number" or n ~= floor(n) or n < 0 or n >= 2^53 then
      fail("polygamma: n must be a non-negative integer, got " .. tostring(n))
    end
    if not is_tensor(a) then a = operand(a, "polygamma", 2) end
    local p = new_params()
    p.ints[0], p.n_ints = n, 1
    ins[0] = a
    return run(op, 1, p, out)
  end
  --- polygamma(n, x): the n-th derivative of digamma (n = 0: digamma itself).
  -- @param n a non-negative integer
  -- @param x a tensor
  -- @return a new tensor
  -- @usage local trigamma = tide.polygamma(1, x)
  functions.polygamma = function(n, a) return polygamma(n, a, nil) end
  --- x:polygamma(n), x:polygamma_(n): the same, as a method (in place).
  methods.polygamma = function(a, n) return polygamma(n, a, nil) end
  methods.polygamma_ = function(a, n) return polygamma(n, a, a) end
end

do -- clamp(x, min, max): either bound may be nil
  local op = op_ids.clamp
  local function clamp(a, lo, hi, out)
    if lo == nil and hi == nil then fail("clamp: at least one of min and max must be given") end
    if is_tensor(lo) or is_tensor(hi) then  -- tensor bounds: maximum/minimum
      local r = a
      if lo ~= nil then r = functions.maximum(r, lo) end
      if hi ~= nil then r = functions.minimum(r, hi) end
      if out ~= nil then return out:copy_(r) end
      return r
    end
    local p = new_params()
    if lo ~= nil then p.scalars[0] = lo; p.flags = p.flags + C.TIDE_PARAMF_HAS_MIN end
    if hi ~= nil then p.scalars[1] = hi; p.flags = p.flags + C.TIDE_PARAMF_HAS_MAX end
    ins[0] = a
    return run(op, 1, p, out)
  end
  functions.clamp = function(a, lo, hi) return clamp(a, lo, hi, nil) end
  methods.clamp = functions.clamp
  methods.clamp_ = function(a, lo, hi) return clamp(a, lo, hi, a) end
end

do
  local op = op_ids.where
  --- where(condition, a, b): elements of a where condition is true (nonzero,
  -- in any dtype), else of b.
  functions.where = function(cond, a, b)
    if not is_tensor(cond) then fail("where: argument 1 (condition) must be a tensor") end
    a, b = operand(a, "where", 2), operand(b, "where", 3)
    -- the op converts the condition to the compute dtype: 0.5 into int64, or
    -- 256 into uint8, would read as false
    if cond:dtype() ~= "bool" then cond = cond:ne(0) end
    ins[0], ins[1], ins[2] = cond, a, b
    return run(op, 3, nil, nil)
  end
  methods.where = function(a, cond, b) return functions.where(cond, a, b) end
end

do
  local op = op_ids.masked_fill
  local function masked_fill(a, mask, value, out)
    if not is_tensor(mask) then fail("masked_fill: argument 1 (mask) must be a tensor") end
    if type(value) == "boolean" then value = value and 1 or 0 end
    if type(value) ~= "number" then
      if is_tensor(value) then value = value:item() else
        fail("masked_fill: value must be a number, got " .. type(value))
      end
    end
    local p = new_params()
    p.scalars[0] = value
    ins[0], ins[1] = a, mask
    return run(op, 2, p, out)
  end
  functions.masked_fill = function(a, mask, value) return masked_fill(a, mask, value, nil) end
  methods.masked_fill = functions.masked_fill
  methods.masked_fill_ = function(a, mask, value) return masked_fill(a, mask, value, a) end
end

-- -- reductions -------------------------------------------------------------------

-- sum(dims, keepdim, dtype) and friends: dims a number, a table or nil (all).
local function reduce_fn(name)
  local op = op_ids[name]
  return function(a, dims, keepdim, dtype)
    if type(dims) == "boolean" then dims, keepdim = nil, dims end
    local p = new_params()
    set_dims(p, dims, name)
    p.keepdim = keepdim and 1 or 0
    if dtype ~= nil then p.dtype = dtype_id(dtype, name, 2) end
    ins[0] = a
    return run(op, 1, p, nil)
  end
end
for _, name in ipairs { "sum", "mean", "prod", "amax", "amin", "logsumexp", "all", "any" } do
  functions[name] = reduce_fn(name)
  methods[name] = functions[name]
end

-- var/std(dims, keepdim, correction): correction defaults to 1 (Bessel's), as in PyTorch.
for _, name in ipairs { "var", "std" } do
  local op = op_ids[name]
  functions[name] = function(a, dims, keepdim, correction)
    if type(dims) == "boolean" then dims, keepdim = nil, dims end
    local p = new_params()
    set_dims(p, dims, name)
    p.keepdim = keepdim and 1 or 0
    p.scalars[0] = correction or 1
    ins[0] = a
    return run(op, 1, p, nil)
  end
  methods[name] = functions[name]
end

-- argmax/argmin(dim, keepdim): 1-based indices; no dim: index into the flattened tensor.
-- cummax/cummin(dim): the running extreme along dim and its 1-based index (a NaN
-- stays once met; of equal values the later index), as PyTorch.
for _, name in ipairs { "argmax", "argmin", "cummax", "cummin" } do
  local op, scan = op_ids[name], name:sub(1, 3) == "cum"
  functions[name] = function(a, dim, keepdim)
    if scan and dim == nil then fail(name .. ": a dimension is required") end
    local p = new_params()
    set_dims(p, dim, name)
    p.keepdim = keepdim and 1 or 0
    p.flags = ONE_BASED
    ins[0] = a
    return run(op, 1, p, nil)
  end
  methods[name] = functions[name]
end

-- max/min: no argument: the largest element (0-d); a dim: values and 1-based indices;
-- a tensor or number: the elementwise maximum.
for _, pair in ipairs { { "max", "amax", "max_dim", "maximum" }, { "min", "amin", "min_dim", "minimum" } } do
  local name, all_op, dim_op, ew = pair[1], op_ids[pair[2]], op_ids[pair[3]], pair[4]
  functions[name] = function(a, dim, keepdim)
    if dim == nil then
      ins[0] = a
      return run(all_op, 1, nil, nil)
    end
    if is_tensor(dim) then return functions[ew](a, dim) end
    local p = new_params()
    set_dims(p, dim, name)
    p.keepdim = keepdim and 1 or 0
    p.flags = ONE_BASED
    ins[0] = a
    return run(dim_op, 1, p, nil)
  end
  methods[name] = functions[name]
end

-- sort(dim = -1, descending = false): values and 1-based indices, stable (equal
-- values keep their order), NaN above every number; also sort{dim=, descending=,
-- stable=} as PyTorch's keywords. argsort: the indices alone; msort: the values
-- along dim 1. topk(k, dim = -1, largest = true, sorted = true): the k largest
-- (smallest) values in order, and their indices.
do
  local sort_op, topk_op = op_ids.sort, op_ids.topk
  local function dim_arg(name, dim)
    if dim ~= nil and type(dim) ~= "number" then
      fail(string.format("%s: dim must be a number, got %s", name, type(dim)))
    end
    return dim or -1
  end
  local function sort(a, dim, descending)
    if type(dim) == "table" then dim, descending = dim.dim, dim.descending end
    if descending ~= nil and type(descending) ~= "boolean" then
      fail("sort: descending must be a boolean, got " .. type(descending))
    end
    local p = new_params()
    set_dims(p, dim_arg("sort", dim), "sort")
    p.n_ints, p.ints[1], p.flags = 2, descending and 1 or 0, ONE_BASED
    ins[0] = a
    return run(sort_op, 1, p, nil)
  end
  functions.sort, methods.sort = sort, sort
  functions.argsort = function(a, dim, descending)
    local _, i = sort(a, dim, descending)
    return i
  end
  methods.argsort = functions.argsort
  functions.msort = function(a) return (sort(a, 1)) end
  methods.msort = functions.msort
  functions.topk = function(a, k, dim, largest, sorted)
    if type(dim) == "table" then dim, largest, sorted = dim.dim, dim.largest, dim.sorted end
    if type(k) ~= "number" or k ~= math.floor(k) then fail("topk: k must be an integer, got " .. tostring(k)) end
    if largest ~= nil and type(largest) ~= "boolean" then
      fail("topk: largest must be a boolean, got " .. type(largest))
    end
    local p = new_params()
    set_dims(p, dim_arg("topk", dim), "topk")
    p.n_ints, p.ints[1], p.ints[2], p.flags = 3, k, largest == false and 0 or 1, ONE_BASED
    ins[0] = a
    return run(topk_op, 1, p, nil)
  end
  methods.topk = functions.topk
end

-- searchsorted(sorted_sequence, values, {right=false, side='left'|'right'}): where
-- each value would be inserted to keep each row in order, as a 1-based index
-- (1 .. M+1; right: after equal elements); sorted_sequence is 1-d, or rows whose
-- leading dims are the values'. bucketize(input, boundaries, {right=false}): the
-- same with 1-d boundaries, PyTorch's argument order. NaN sorts last, as in sort.
do
  local op = op_ids.searchsorted
  local function side_of(name, opts)
    if opts == nil then return false end
    if type(opts) ~= "table" then fail(string.format("%s: options must be a table, got %s", name, type(opts))) end
    for k in pairs(opts) do
      if k ~= "right" and k ~= "side" then fail(string.format("%s: unknown option '%s'", name, tostring(k))) end
    end
    local right = opts.right
    if right ~= nil and type(right) ~= "boolean" then
      fail(string.format("%s: right must be a boolean, got %s", name, type(right)))
    end
    local side = opts.side
    if side ~= nil and side ~= "left" and side ~= "right" then
      fail(string.format("%s: side must be 'left' or 'right', got %s", name, tostring(side)))
    end
    if side ~= nil and right ~= nil and (side == "right") ~= right then
      fail(string.format("%s: side '%s' contradicts right = %s", name, side, tostring(right)))
    end
    return right or side == "right"
  end
  local function search(name, seq, values, right)
    if not is_tensor(seq) then fail(string.format("%s: the sorted sequence must be a tensor, got %s", name, type(seq))) end
    values = operand(values, name, 2)
    local p = new_params()
    p.n_ints, p.ints[0], p.flags = 1, right and 1 or 0, ONE_BASED
    ins[0], ins[1] = seq, values
    return run(op, 2, p, nil)
  end
  functions.searchsorted = function(seq, values, opts)
    return search("searchsorted", seq, values, side_of("searchsorted", opts))
  end
  functions.bucketize = function(input, boundaries, opts)
    if is_tensor(boundaries) and boundaries.ndim ~= 1 then
      fail(string.format("bucketize: boundaries must be 1-d, got a %d-d tensor", boundaries.ndim))
    end
    return search("bucketize", boundaries, input, side_of("bucketize", opts))
  end
  methods.bucketize = functions.bucketize
end

-- cumsum(dim, dtype), cumprod(dim, dtype), softmax(dim), log_softmax(dim)
for _, name in ipairs { "cumsum", "cumprod", "softmax", "log_softmax" } do
  local op = op_ids[name]
  functions[name] = function(a, dim, dtype)
    if dim == nil then fail(name .. ": a dimension is required") end
    local p = new_params()
    set_dims(p, dim, name)
    if dtype ~= nil then p.dtype = dtype_id(dtype, name, 2) end
    ins[0] = a
    return run(op, 1, p, nil)
  end
  methods[name] = functions[name]
end

-- -- linear algebra ----------------------------------------------------------------

for _, name in ipairs { "matmul", "mm", "bmm", "dot", "outer" } do
  local op = op_ids[name]
  functions[name] = function(a, b)
    if not is_tensor(a) or not is_tensor(b) then
      fail(string.format("%s: both arguments must be tensors, got %s and %s", name,
        is_tensor(a) and "tensor" or type(a), is_tensor(b) and "tensor" or type(b)))
    end
    ins[0], ins[1] = a, b
    return run(op, 2, nil, nil)
  end
  methods[name] = functions[name]
end

-- -- indexing ------------------------------------------------------------------------

local function need_tensor(x, name, what, level)
  if not is_tensor(x) then
    fail(string.format("%s: %s must be a tensor, got %s", name, what, type(x)))
  end
end

local function index_op(name, n_in, inplace_ok)
  local op = op_ids[name]
  local function call(a, dim, index, src, out)
    need_tensor(index, name, "index", 3)
    if n_in == 3 then   -- first: full_like runs an op, which reuses the shared params and inputs
      if type(src) == "number" then src = functions.full_like(index, src, a:dtype()) end
      need_tensor(src, name, "src", 3)
    end
    local p = new_params()
    set_dims(p, dim, name)
    p.flags = ONE_BASED
    ins[0], ins[1], ins[2] = a, index, src
    return run(op, n_in, p, out)
  end
  functions[name] = function(a, dim, index, src) return call(a, dim, index, src, nil) end
  methods[name] = functions[name]
  if inplace_ok then methods[name .. "_"] = function(a, dim, index, src) return call(a, dim, index, src, a) end end
end
index_op("index_select", 2, false)
index_op("gather", 2, false)
index_op("scatter", 3, true)
index_op("scatter_add", 3, true)
index_op("index_add", 3, true)

do
  local op = op_ids.masked_select
  functions.masked_select = function(a, mask)
    need_tensor(mask, "masked_select", "mask")
    ins[0], ins[1] = a, mask
    return run(op, 2, nil, nil)
  end
  methods.masked_select = functions.masked_select
end

-- -- shaping ------------------------------------------------------------------------------

for _, name in ipairs { "cat", "stack" } do
  local op = op_ids[name]
  functions[name] = function(list, dim)
    if type(list) ~= "table" then fail(name .. ": expects a table of tensors") end
    local n = #list
    if n == 0 then fail(name .. ": expects a non-empty table of tensors") end
    if n > 8 then  -- the runtime takes 8 inputs at a time: join in groups, then join the groups
      local groups = {}
      for i = 1, n, 8 do
        local g = {}
        for j = i, math.min(i + 7, n) do g[#g + 1] = list[j] end
        groups[#groups + 1] = #g == 1 and (name == "stack" and g[1]:unsqueeze(dim or 1) or g[1])
          or functions[name](g, dim)
      end
      return functions.cat(groups, dim)
    end
    for i = 1, n do need_tensor(list[i], name, "element " .. i) end
    local p = new_params()
    set_dims(p, dim or 1, name)
    for i = 1, n do ins[i - 1] = list[i] end
    return run(op, n, p, nil)
  end
end

local function ints_param(name, list, what)
  local p = new_params()
  if #list > 16 then fail(string.format("%s: too many %s (%d)", name, what, #list)) end
  for i = 1, #list do
    local v = list[i]
    if type(v) ~= "number" or v ~= floor(v) then
      fail(string.format("%s: %s must be integers, got %s", name, what, tostring(v)))
    end
    p.ints[i - 1] = v
  end
  p.n_ints = #list
  return p
end

-- Collects size-like arguments: f(2, 3), f({2, 3}), or a tensor's shape table.
local function size_args(...)
  local first = ...
  if type(first) == "table" then return first end
  return { ... }
end
M.size_args = size_args

do
  local op = op_ids.flip
  functions.flip = function(a, ...)
    local dims = size_args(...)
    local p = new_params()
    set_dims(p, dims, "flip")
    ins[0] = a
    return run(op, 1, p, nil)
  end
  methods.flip = functions.flip
end

do
  local op = op_ids["repeat"]
  --- repeat_tensor(a, r1, r2, ...): tiles a; `repeat` is a Lua keyword, hence the Torch7 name.
  functions.repeat_tensor = function(a, ...)
    ins[0] = a
    return run(op, 1, ints_param("repeat", size_args(...), "repeats"), nil)
  end
  methods.repeat_tensor = functions.repeat_tensor
  methods["repeat"] = functions.repeat_tensor
end

for _, name in ipairs { "tril", "triu" } do
  local op = op_ids[name]
  local function call(a, k, out)
    local p = new_params()
    p.ints[0] = k or 0
    p.n_ints = 1
    ins[0] = a
    return run(op, 1, p, out)
  end
  functions[name] = function(a, k) return call(a, k, nil) end
  methods[name] = functions[name]
  methods[name .. "_"] = function(a, k) return call(a, k, a) end
end

-- -- properties ----------------------------------------------------------------------------

--- The sizes as a Lua table ({} for a 0-d tensor).
function methods.shape(t)
  local r = {}
  for i = 0, t.ndim - 1 do r[i + 1] = tonumber(t.sizes[i]) end
  return r
end

local function wrap_dim(t, d, name)
  local n = t.ndim
  if type(d) ~= "number" or d == 0 or d > n or d < -n then
    fail(string.format("%s: dimension %s is out of range for a %d-d tensor", name, tostring(d), n))
  end
  return d > 0 and d - 1 or n + d
end

--- size(): the shape table; size(d): the size of dimension d.
function methods.size(t, d)
  if d == nil then return methods.shape(t) end
  return tonumber(t.sizes[wrap_dim(t, d, "size")])
end
function methods.stride(t, d)
  if d == nil then
    local r = {}
    for i = 0, t.ndim - 1 do r[i + 1] = tonumber(t.strides[i]) end
    return r
  end
  return tonumber(t.strides[wrap_dim(t, d, "stride")])
end
function methods.dim(t) return t.ndim end
function methods.numel(t) return tonumber(t.nelem) end
function methods.nelement(t) return tonumber(t.nelem) end
function methods.dtype(t) return dtype_names[t.dtype_id] end
function methods.element_size(t) return dtype_sizes[t.dtype_id] end
function methods.storage_offset(t) return tonumber(t.offset) end
function methods.is_contiguous(t) return C.tide_tensor_is_contiguous(t) ~= 0 end
function methods.is_floating_point(t) return C.tide_dtype_is_float(t.dtype_id) ~= 0 end
local devbuf = ffi.new("char[32]")
function methods.device(t) return ffi.string(C.tide_device_format(t.dev, devbuf, 32)) end

-- -- reading values ---------------------------------------------------------------------------

local dbl = ffi.new("double[1]")
--- The value of a one-element tensor as a Lua number (a boolean for bool tensors). Waits.
function methods.item(t)
  if t.nelem ~= 1 then
    fail(string.format("item: the tensor has %d elements; item() needs exactly one", tonumber(t.nelem)))
  end
  if C.tide_tensor_get(t, 0, dbl) ~= 0 then raise() end
  if t.dtype_id == BOOL then return dbl[0] ~= 0 end
  return dbl[0]
end

--- The elements as nested Lua tables (a number for a 0-d tensor). Waits.
function methods.totable(t)
  local n = tonumber(t.nelem)
  local buf = ffi.new("double[?]", math.max(n, 1))
  if C.tide_tensor_to_doubles(t, buf) ~= 0 then raise() end
  local as_bool = t.dtype_id == BOOL
  local function val(i) if as_bool then return buf[i] ~= 0 end return buf[i] end
  if t.ndim == 0 then return val(0) end
  local sizes = methods.shape(t)
  local pos = 0
  local function build(d)
    local r = {}
    if d == #sizes then
      for i = 1, sizes[d] do r[i] = val(pos); pos = pos + 1 end
    else
      for i = 1, sizes[d] do r[i] = build(d + 1) end
    end
    return r
  end
  return build(1)
end

--- Waits until every pending write to t is done; raises if one failed.
function methods.wait(t)
  if C.tide_tensor_wait(t) ~= 0 then raise() end
  return t
end

--- A pointer to the first element, valid while t lives (waits first). Host
-- tensors only: a device's memory would crash the host that reads it.
function methods.data_ptr(t)
  if t.dev.type ~= C.TIDE_DEVICE_CPU then
    fail(string.format("data_ptr: the tensor is on %s, whose memory the host cannot read (t:cpu() copies it)",
      t:device()))
  end
  local p = C.tide_tensor_data(t)
  if p == nil then raise() end
  return p
end

-- -- copies, conversion, filling ---------------------------------------------------------------

--- A contiguous copy.
function methods.clone(t)
  return wrap(C.tide_tensor_to(t, -1, t.dev, 1), fresh_bytes(t))
end

local to_options = { non_blocking = "boolean", copy = "boolean" }

--- to(dtype) or to(device) or to(dtype, device), or to(other) (other's dtype
-- and device); t itself when nothing changes. A last table of options:
-- `copy = true` always makes a new tensor; `non_blocking` is accepted for
-- PyTorch's sake: every copy is an engine op, asynchronous already.
-- @usage local g = x:to("cuda:0", { non_blocking = true })
function methods.to(t, a, b, c)
  local dtype, dev, copy = -1, t.dev, 0
  local args = { a, b, c }
  local n = c ~= nil and 3 or b ~= nil and 2 or a ~= nil and 1 or 0
  if type(args[n]) == "table" and not is_tensor(args[n]) then
    for k, v in pairs(args[n]) do
      if not to_options[k] then
        fail(("to: unknown option '%s' (options: copy, non_blocking)"):format(tostring(k)))
      elseif type(v) ~= to_options[k] then
        fail(("to: option '%s' must be a %s, got %s"):format(k, to_options[k], type(v)))
      end
    end
    copy = args[n].copy and 1 or 0
    args[n], n = nil, n - 1
  end
  if n > 2 then fail("to: expects at most a dtype and a device before the options, got 3 arguments") end
  for i = 1, n do
    local x = args[i]
    if type(x) == "string" then
      local d = C.tide_dtype_from_name(x)
      if d >= 0 then dtype = d
      else
        local dv = ffi.new("tide_device")
        if C.tide_device_parse(x, dv) ~= 0 then
          if x:match("^cuda") or x:match("^cpu") then raise() end   -- a device, but not one here
          fail(string.format("to: '%s' is neither a dtype nor a device", x))
        end
        dev = dv
      end
    elseif is_tensor(x) then dtype, dev = x.dtype_id, x.dev
    else fail("to: expects a dtype or device name, a tensor or a table of options, got " .. type(x)) end
  end
  local r = C.tide_tensor_to(t, dtype, dev, copy)
  if r == nil then raise() end
  if r == t then C.tide_tensor_release(r); return t end
  return wrap(r, fresh_bytes(r))
end
for name, d in pairs { float = "float32", double = "float64", int = "int32", long = "int64",
                       byte = "uint8", bool = "bool", half = "float16", bfloat16 = "bfloat16" } do
  methods[name] = function(t) return methods.to(t, d) end
end
function methods.type_as(t, other) return methods.to(t, dtype_names[other.dtype_id]) end
--- cuda(device): t on a CUDA device ("cuda:N" or N, default cuda:0); t itself when already there.
-- @usage local g = t:cuda()
function methods.cuda(t, device)
  if type(device) == "number" then device = "cuda:" .. device end
  if device ~= nil and (type(device) ~= "string" or not device:match("^cuda")) then
    fail("cuda: expects a CUDA device ('cuda:N' or N), got " .. tostring(device))
  end
  return methods.to(t, device or "cuda:0")
end
--- is_cuda(): whether t lives on a CUDA device.
function methods.is_cuda(t) return t.dev.type == C.TIDE_DEVICE_CUDA end
--- cpu(): t on the host; t itself when it is on a CPU device already.
function methods.cpu(t)
  if t.dev.type == C.TIDE_DEVICE_CPU then return t end
  return methods.to(t, "cpu")
end

--- Copies src (broadcast to t's shape, converted to t's dtype) into t.
function methods.copy_(t, src)
  if not is_tensor(src) then
    if type(src) == "number" or type(src) == "boolean" then return methods.fill_(t, src) end
    fail("copy_: source must be a tensor, got " .. type(src))
  end
  ins[0] = src
  return run(op_ids.copy, 1, nil, t)
end

--- Sets every element of t to v.
function methods.fill_(t, v)
  if is_tensor(v) then v = v:item() end
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) ~= "number" then fail("fill_: value must be a number, got " .. type(v)) end
  local p = new_params()
  for i = 0, t.ndim - 1 do p.ints[i] = t.sizes[i] end
  p.n_ints = t.ndim
  p.scalars[0] = v
  p.dtype = t.dtype_id
  return run(op_ids.full, 0, p, t)
end
function methods.zero_(t) return methods.fill_(t, 0) end

--- t if contiguous, else a contiguous copy.
function methods.contiguous(t)
  if C.tide_tensor_is_contiguous(t) ~= 0 then return t end
  return methods.clone(t)
end

-- -- views ----------------------------------------------------------------------------------

local sizebuf = ffi.new("int64_t[8]")
local function fill_sizes(list, name)
  if #list > 8 then fail(string.format("%s: %d dimensions given, at most 8 are supported", name, #list)) end
  for i = 1, #list do
    local v = list[i]
    if type(v) ~= "number" or v ~= floor(v) then
      fail(string.format("%s: sizes must be integers, got %s", name, tostring(v)))
    end
    sizebuf[i - 1] = v
  end
  return #list
end
M.fill_sizes = fill_sizes
M.sizebuf = sizebuf

local function view_result(r, fresh)
  if r == nil then raise() end
  return wrap(r, fresh)
end

function methods.view(t, ...)
  local n = fill_sizes(size_args(...), "view")
  return view_result(C.tide_tensor_view(t, n, sizebuf))
end
function methods.reshape(t, ...)
  local n = fill_sizes(size_args(...), "reshape")
  local r = C.tide_tensor_reshape(t, n, sizebuf)
  return view_result(r, r ~= nil and r.storage ~= t.storage and fresh_bytes(r) or 0)
end
function methods.view_as(t, other) return methods.view(t, methods.shape(other)) end
function methods.reshape_as(t, other) return methods.reshape(t, methods.shape(other)) end
function methods.flatten(t, s, e)
  local n = t.ndim
  if n == 0 then return methods.reshape(t, 1) end
  s = s and wrap_dim(t, s, "flatten") or 0
  e = e and wrap_dim(t, e, "flatten") or n - 1
  if s > e then fail(string.format("flatten: start dimension %d is after end dimension %d", s + 1, e + 1)) end
  local sizes, m = {}, 1
  for i = 0, s - 1 do sizes[#sizes + 1] = tonumber(t.sizes[i]) end
  for i = s, e do m = m * tonumber(t.sizes[i]) end
  sizes[#sizes + 1] = m
  for i = e + 1, n - 1 do sizes[#sizes + 1] = tonumber(t.sizes[i]) end
  return methods.reshape(t, sizes)
end
function methods.permute(t, ...)
  local dims = size_args(...)
  for i = 1, #dims do dims[i] = cdim(dims[i], "permute") end
  local n = fill_sizes(dims, "permute")
  return view_result(C.tide_tensor_permute(t, n, sizebuf))
end
function methods.transpose(t, a, b)
  return view_result(C.tide_tensor_transpose(t, cdim(a, "transpose"), cdim(b, "transpose")))
end
--- t(): the transpose of a matrix (a 0-d or 1-d tensor is returned as is).
methods.t = function(t)
  if t.ndim > 2 then fail(string.format("t: expects a tensor of at most 2 dimensions, got %d", t.ndim)) end
  if t.ndim < 2 then return t end
  return methods.transpose(t, 1, 2)
end
function methods.expand(t, ...)
  local n = fill_sizes(size_args(...), "expand")
  return view_result(C.tide_tensor_expand(t, n, sizebuf))
end
function methods.expand_as(t, other) return methods.expand(t, methods.shape(other)) end
--- narrow(dim, start, length): elements start .. start+length-1 of dim (1-based start).
function methods.narrow(t, dim, start, length)
  if type(start) ~= "number" or start == 0 then
    fail(string.format("narrow: start must be a 1-based index, got %s", tostring(start)))
  end
  return view_result(C.tide_tensor_narrow(t, cdim(dim, "narrow"), start > 0 and start - 1 or start, length))
end
--- select(dim, i): the slice at index i of dim, without that dim.
function methods.select(t, dim, i)
  if type(i) ~= "number" or i == 0 or i ~= floor(i) then
    fail(string.format("select: index must be a nonzero integer (1-based), got %s", tostring(i)))
  end
  return view_result(C.tide_tensor_select(t, cdim(dim, "select"), i > 0 and i - 1 or i))
end
-- squeeze(): without every size-1 dim; squeeze(d) or squeeze({d1, d2, ...}):
-- without those of the dims given that have size 1 (the others stay), as PyTorch.
function methods.squeeze(t, dim)
  if type(dim) == "table" then
    local drop = {}
    for i = 1, #dim do
      local d = wrap_dim(t, dim[i], "squeeze")
      if drop[d] then fail(string.format("squeeze: dimension %d is repeated", d + 1)) end
      drop[d] = true
    end
    local r = t
    for d = t.ndim - 1, 0, -1 do   -- the last first: earlier dims keep their place
      if drop[d] and t.sizes[d] == 1 then r = view_result(C.tide_tensor_squeeze(r, d)) end
    end
    return r
  end
  return view_result(C.tide_tensor_squeeze(t, dim == nil and -1 or wrap_dim(t, dim, "squeeze")))
end
function methods.unsqueeze(t, dim)
  if type(dim) ~= "number" or dim == 0 then
    fail(string.format("unsqueeze: dimension must be a nonzero integer, got %s", tostring(dim)))
  end
  return view_result(C.tide_tensor_unsqueeze(t, dim > 0 and dim - 1 or dim))
end

--- t:unfold(dim, size, step): the slices of length size along dim, every step
-- elements, as a view with one more (last) dimension, as Torch7's and PyTorch's
-- unfold: dim becomes floor((len - size) / step) + 1 long. Differentiable
-- (overlapping windows sum their gradients).
-- @usage tide.arange(1, 8):unfold(1, 3, 2)   -- {{1,2,3},{3,4,5},{5,6,7}}
function methods.unfold(t, dim, size, step)
  local nd = tonumber(t.ndim)
  if type(dim) ~= "number" or dim ~= math.floor(dim) or dim == 0 or dim > math.max(nd, 1) or dim < -math.max(nd, 1) then
    fail(string.format("unfold: dimension %s is out of range for a %d-d tensor", tostring(dim), nd))
  end
  if dim < 0 then dim = dim + math.max(nd, 1) + 1 end
  local len = nd == 0 and 1 or tonumber(t.sizes[dim - 1])
  if type(size) ~= "number" or size < 0 or size ~= math.floor(size) or size > len then
    fail(string.format("unfold: size %s must be an integer from 0 to the dimension's length %d", tostring(size), len))
  end
  if type(step) ~= "number" or step < 1 or step ~= math.floor(step) then
    fail(string.format("unfold: step must be a positive integer, got %s", tostring(step)))
  end
  local sizes, strides = {}, {}
  for d = 1, nd do sizes[d], strides[d] = tonumber(t.sizes[d - 1]), tonumber(t.strides[d - 1]) end
  local st = nd == 0 and 1 or strides[dim]
  if nd > 0 then sizes[dim], strides[dim] = math.floor((len - size) / step) + 1, st * step end
  sizes[#sizes + 1], strides[#strides + 1] = size, st
  return methods.as_strided(t, sizes, strides, tonumber(t.offset))
end

--- as_strided(sizes, strides, offset): a view with explicit strides and a 0-based storage offset.
function methods.as_strided(t, sizes, strides, offset)
  local n = fill_sizes(sizes, "as_strided")
  if type(strides) ~= "table" or #strides ~= n then
    fail(string.format("as_strided: %d sizes but %s strides", n, type(strides) == "table" and #strides or "no"))
  end
  local st = ffi.new("int64_t[8]")
  for i = 1, n do st[i - 1] = strides[i] end
  return view_result(C.tide_tensor_as_strided(t, n, sizebuf, st, offset or tonumber(t.offset)))
end

--- split(size, dim): views of `size` elements along dim (the last may be smaller),
-- or, with a table of sizes, views of those sizes.
function methods.split(t, size, dim)
  dim = dim or 1
  local d = wrap_dim(t, dim, "split")
  local n = tonumber(t.sizes[d])
  local r, start = {}, 1
  if type(size) == "table" then
    local total = 0
    for _, s in ipairs(size) do total = total + s end
    if total ~= n then
      fail(string.format("split: sizes add up to %d but dimension %d has size %d", total, d + 1, n))
    end
    for _, s in ipairs(size) do r[#r + 1] = methods.narrow(t, d + 1, start, s); start = start + s end
    return r
  end
  if type(size) ~= "number" or size <= 0 then fail("split: size must be a positive integer, got " .. tostring(size)) end
  while start <= n do
    local len = math.min(size, n - start + 1)
    r[#r + 1] = methods.narrow(t, d + 1, start, len)
    start = start + len
  end
  if n == 0 then r[1] = t end
  return r
end
--- chunk(n, dim): at most n views of equal size along dim (the last may be smaller).
function methods.chunk(t, n, dim)
  if type(n) ~= "number" or n < 1 then fail("chunk: n must be a positive integer, got " .. tostring(n)) end
  local d = wrap_dim(t, dim or 1, "chunk")
  return methods.split(t, math.max(1, math.ceil(tonumber(t.sizes[d]) / n)), d + 1)
end
function methods.unbind(t, dim)
  local d = wrap_dim(t, dim or 1, "unbind")
  local r = {}
  for i = 1, tonumber(t.sizes[d]) do r[i] = methods.select(t, d + 1, i) end
  return r
end

--- Releases t's memory now instead of at the next collection; t must not be used after.
function methods.free(t) B.free(t) end

return M
