-- pointwise: the fused update ops (add/sub with alpha through add_scaled, addcmul,
-- addcdiv, lerp) against a float64 reference computed here in plain Lua, for every
-- dtype they accept, in every layout (contiguous, transposed, strided, broadcast,
-- empty, 0-d), with the scalar as a number, a 0-d tensor, a one-element tensor and a
-- full tensor (the kernels' two paths), large inputs split across threads, the
-- in-place forms, type promotion, integer wrapping, and every error message.
local tide = require "tide"
local H = require "spec.helpers"
local T = require "tide.tensor"

-- -- references -------------------------------------------------------------------------------

local function lerp(x, e, w)   -- PyTorch's two-sided form, as the kernel computes it
  if math.abs(w) < 0.5 then return x + w * (e - x) end
  return e - (e - x) * (1 - w)
end
local REF = {
  add_scaled = function(a, b, s) return a + s * b end,
  addcmul = function(x, a, b, v) return x + v * a * b end,
  addcdiv = function(x, a, b, v) return x + v * a / b end,
  lerp = lerp,
}
-- How each op is called (the method form; the others are checked below).
local CALL = {
  add_scaled = function(a, b, s) return a:add(b, s) end,
  addcmul = function(x, a, b, v) return x:addcmul(a, b, v) end,
  addcdiv = function(x, a, b, v) return x:addcdiv(a, b, v) end,
  lerp = function(x, e, w) return x:lerp(e, w) end,
}
local CALL_ = {
  add_scaled = function(a, b, s) return a:add_(b, s) end,
  addcmul = function(x, a, b, v) return x:addcmul_(a, b, v) end,
  addcdiv = function(x, a, b, v) return x:addcdiv_(a, b, v) end,
  lerp = function(x, e, w) return x:lerp_(e, w) end,
}
local ARITY = { add_scaled = 3, addcmul = 4, addcdiv = 4, lerp = 3 }
local OPS = { "add_scaled", "addcmul", "addcdiv", "lerp" }
local FLOATS = { "float32", "float64", "float16", "bfloat16" }
local INTS = { "int32", "int64", "uint8" }
-- the dtypes each op computes in (addcdiv and lerp are floating-point only)
local DTYPES = {
  add_scaled = { "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8" },
  addcmul = { "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8" },
  addcdiv = FLOATS,
  lerp = FLOATS,
}

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- An argument's values broadcast to shape, flat.
local function flat_to(v, shape)
  if type(v) == "number" then
    local r = {}
    for i = 1, numel(shape) do r[i] = v end
    return r
  end
  return H.flat(v:expand(shape):totable())
end

local function wrap_int(v, dtype)
  if dtype == "uint8" then return v % 256 end
  if dtype == "int32" then return (v + 2 ^ 31) % 2 ^ 32 - 2 ^ 31 end
  return v
end

-- Tolerance of a result of dtype dt whose terms are at most about 10 in magnitude.
local ATOL = { float32 = 4e-6, float64 = 1e-14, float16 = 2e-2, bfloat16 = 1.2e-1 }

-- Checks got = op(args...) elementwise against the reference, in the result's dtype.
local function check(op, got, args, dtype, msg)
  assert.are.equal(dtype, got:dtype(), msg)
  local shape = got:shape()
  local cols = {}
  for k, a in ipairs(args) do cols[k] = flat_to(a, shape) end
  local ref = {}
  for i = 1, numel(shape) do
    local v = REF[op](cols[1][i], cols[2][i], cols[3][i], cols[4] and cols[4][i])
    ref[i] = ATOL[dtype] and v or wrap_int(v, dtype)
  end
  if numel(shape) == 0 then return end
  H.close(got, H.nest(ref, shape), 0, ATOL[dtype] or 0, msg)
end

-- -- inputs -----------------------------------------------------------------------------------

local seed = 100
-- Values for argument k of op in dtype: small integers for integer dtypes, and
-- denominators of addcdiv kept in [0.5, 2].
local function values(op, k, n, dtype)
  seed = seed + 1
  if dtype == "uint8" then
    local v = H.values(n, 0, 6, seed)
    for i = 1, n do v[i] = math.floor(v[i]) end
    return v
  elseif not ATOL[dtype] then
    local v = H.values(n, -6, 6, seed)
    for i = 1, n do v[i] = math.floor(v[i]) end
    return v
  elseif op == "addcdiv" and k == 3 then
    local v = H.values(n, 0.5, 2, seed)
    for i = 1, n, 2 do v[i] = -v[i] end
    return v
  end
  return H.values(n, -2, 2, seed)
end
local function make(op, k, shape, dtype)
  return tide.tensor(H.nest(values(op, k, numel(shape), dtype), shape), dtype)
end
-- The scalar argument in its forms: a number, 0-d tensors, one element of shape [1],
-- and a full tensor, which takes the kernels' other path.
local function scalars(op, dtype, shape)
  local int = not ATOL[dtype]
  local num = int and 3 or (op == "lerp" and 0.3 or -0.75)
  local r = {
    number = num,
    ["0-d float64"] = tide.tensor(int and 2 or 0.8, "float64"),
    ["0-d same dtype"] = tide.tensor(int and -2 or 1.25, dtype),
    ["shape [1]"] = tide.tensor({ int and 4 or -1.5 }, dtype),
    full = make(op, 4, shape, dtype),
  }
  if int then r["0-d float64"] = tide.tensor(2, "int64") end   -- a float one would make the result float
  return r
end

-- -- specs ------------------------------------------------------------------------------------

describe("fused pointwise ops", function()
  it("match hand-computed values", function()
    local x, a, b = tide.tensor({ 1, 2, 3 }), tide.tensor({ 10, 20, 30 }), tide.tensor({ 2, 4, 5 })
    H.equal(x:add(a, 0.5), { 6, 12, 18 })
    H.equal(x:sub(a, 2), { -19, -38, -57 })
    H.equal(tide.add(x, a), { 11, 22, 33 })
    H.equal(tide.sub(x, a, tide.tensor(0.5, "float64")), { -4, -8, -12 })
    H.equal(x:addcmul(a, b, 0.5), { 11, 42, 78 })
    H.equal(x:addcmul(a, b), { 21, 82, 153 })          -- value defaults to 1
    H.equal(tide.addcdiv(x, a, b, -2), { -9, -8, -9 })
    H.equal(x:addcdiv(a, b), { 6, 7, 9 })
    H.equal(x:lerp(a, 0.25), { 3.25, 6.5, 9.75 })
    H.equal(tide.lerp(x, a, tide.tensor({ 0, 0.5, 1 })), { 1, 11, 30 })
    H.equal(tide.addcmul(1, a, 2, 3), { 61, 121, 181 })   -- numbers for any operand
  end)

  it("are one op each, recorded under their registry names", function()
    local x = tide.tensor({ 1, 2 }, { requires_grad = true })
    assert.are.equal("add_scaled", x:add(x, 2).grad_fn)
    assert.are.equal("add_scaled", x:sub(x, 2).grad_fn)
    assert.are.equal("add", x:add(x).grad_fn)
    assert.are.equal("addcmul", x:addcmul(x, x, 2).grad_fn)
    assert.are.equal("addcdiv", x:addcdiv(x, x, 2).grad_fn)
    assert.are.equal("lerp", x:lerp(x, 0.5).grad_fn)
  end)

  for _, op in ipairs(OPS) do
    for _, dtype in ipairs(DTYPES[op]) do
      it(op .. " matches the float64 reference in every layout and scalar form (" .. dtype .. ")", function()
        local shape = { 3, 4 }
        local base = {}
        for k = 1, ARITY[op] - 1 do base[k] = make(op, k, shape, dtype) end
        local lay = {}
        for k = 1, #base do lay[k] = H.layouts(base[k]) end
        for sname, s in pairs(scalars(op, dtype, shape)) do
          for lname in pairs(lay[1]) do
            local args = {}
            for k = 1, #base do args[k] = lay[k][lname] end
            args[#args + 1] = s
            local msg = string.format("%s %s %s, scalar %s", op, dtype, lname, sname)
            local y = CALL[op](unpack(args))
            assert.are.same(shape, y:shape(), msg)
            check(op, y, args, dtype, msg)
          end
          -- mixed layouts: each input its own
          local args = { lay[1].contiguous, (lay[2].transposed or lay[2].contiguous) }
          if #base == 3 then args[3] = lay[3].strided end
          args[#args + 1] = s
          check(op, CALL[op](unpack(args)), args, dtype, op .. " mixed layouts, scalar " .. sname)
        end
      end)
    end
  end

  it("broadcast their inputs, empty and 0-d ones included", function()
    for _, op in ipairs(OPS) do
      local n = ARITY[op]
      local bshapes = { { 3, 4 }, { 3, 1 }, { 4 }, {} }   -- x, then the others
      local args = {}
      for k = 1, n - 1 do args[k] = make(op, k, bshapes[k], "float64") end
      args[n] = tide.tensor(0.3, "float64")
      local y = CALL[op](unpack(args))
      assert.are.same({ 3, 4 }, y:shape())
      check(op, y, args, "float64", op .. " broadcast")
      -- x broadcast by the others ([4] against [2, 1, 4]), and an expanded (stride-0) input
      local x = make(op, 1, { 4 }, "float32")
      local big = make(op, 2, { 2, 1, 4 }, "float32")
      local rest = { x, big, make(op, 3, { 1, 4 }, "float32"):expand(3, 4), 0.6 }
      if n == 3 then rest = { x, big, tide.tensor({ 0.2, 0.9, -0.4 }):view(3, 1) } end
      local r = CALL[op](unpack(rest))
      assert.are.same({ 2, 3, 4 }, r:shape())
      check(op, r, rest, "float32", op .. " broadcast x")
      -- 0-d everything
      local zs = {}
      for k = 1, n - 1 do zs[k] = tide.tensor(op == "addcdiv" and k == 3 and 1.5 or 0.25 * k, "float64") end
      zs[n] = 0.7
      local z = CALL[op](unpack(zs))
      assert.are.same({}, z:shape())
      check(op, z, zs, "float64", op .. " 0-d")
      -- empty
      local es = { tide.zeros(0, 4), tide.ones(4), tide.ones(1, 4), 2 }
      if n == 3 then es = { tide.zeros(0, 4), tide.ones(4), 0.5 } end
      local e = CALL[op](unpack(es))
      assert.are.same({ 0, 4 }, e:shape())
      assert.are.equal("float32", e:dtype())
      local empty_scalar = { tide.ones(3), tide.ones(3), tide.ones(3), tide.zeros(0, 1) }
      if n == 3 then empty_scalar = { tide.ones(3), tide.ones(3), tide.zeros(0, 1) } end
      assert.are.same({ 0, 3 }, CALL[op](unpack(empty_scalar)):shape())
    end
  end)

  it("work in place: the result is x, in x's dtype, on contiguous and strided views", function()
    for _, op in ipairs(OPS) do
      local n = ARITY[op]
      for _, dtype in ipairs { "float32", "float64" } do
        local args = {}
        for k = 1, n - 1 do args[k] = make(op, k, { 4, 6 }, dtype) end
        args[n] = tide.tensor(op == "lerp" and 0.7 or -1.5, "float64")
        local before = { args[1]:clone(), unpack(args, 2) }
        local r = CALL_[op](unpack(args))
        assert.are.equal(args[1], r)
        check(op, r, before, dtype, op .. "_ " .. dtype)
      end
      -- into every other column of a wider tensor; the columns in between stay 0
      local vals = values(op, 1, 24, "float32")
      local wide = tide.zeros(4, 12)
      local view = wide:as_strided({ 4, 6 }, { 12, 2 }, 0)
      view:copy_(tide.tensor(H.nest(vals, { 4, 6 })))
      local args = { view }
      for k = 2, n - 1 do args[k] = make(op, k, { 6 }, "float32") end
      args[n] = 0.4
      local before = { view:clone(), unpack(args, 2) }
      CALL_[op](unpack(args))
      check(op, view, before, "float32", op .. "_ strided")
      H.equal(wide:as_strided({ 4, 6 }, { 12, 2 }, 1), tide.zeros(4, 6))
      -- a transposed destination, the scalar a full tensor
      local t = make(op, 1, { 6, 4 }, "float64"):t()
      local targs = { t }
      for k = 2, n do targs[k] = make(op, k, { 4, 6 }, "float64") end
      local tbefore = { t:clone(), unpack(targs, 2) }
      CALL_[op](unpack(targs))
      check(op, t, tbefore, "float64", op .. "_ transposed")
      -- an integer destination keeps its dtype
      if op == "add_scaled" or op == "addcmul" then
        local xi = tide.tensor({ 1, 2, 3 }, "int32")
        local iargs = { xi, tide.tensor({ 4, 5, 6 }, "int32") }
        if n == 4 then iargs[3] = tide.tensor({ 2, 2, 2 }, "int64") end
        iargs[n] = 3
        local ibefore = { xi:clone(), unpack(iargs, 2) }
        CALL_[op](unpack(iargs))
        assert.are.equal("int32", xi:dtype())
        check(op, xi, ibefore, "int32", op .. "_ int32")
      end
    end
    -- sub_ with a number and with a tensor alpha
    local p = tide.tensor({ 1, 2, 3 })
    p:sub_(tide.tensor({ 1, 1, 1 }), 0.5)
    H.equal(p, { 0.5, 1.5, 2.5 })
    p:sub_(tide.tensor({ 2, 2, 2 }), tide.tensor(0.25, "float64"))
    H.equal(p, { 0, 1, 2 })
    p:add_(tide.tensor({ 1, 2, 3 }), tide.tensor(2, "float64"))
    H.equal(p, { 2, 5, 8 })
  end)

  it("take both kernel paths to the same values on inputs split across threads", function()
    local n = 100003   -- above the iterator's threading grain, not a multiple of a vector
    for _, op in ipairs(OPS) do
      local k = ARITY[op]
      local args = {}
      for i = 1, k - 1 do args[i] = make(op, i, { n }, "float32") end
      args[k] = tide.tensor(op == "lerp" and 0.3 or -0.5, "float64")
      local fast = CALL[op](unpack(args))   -- the scalar as a constant
      local full = { unpack(args) }
      full[k] = args[k]:float():expand(n)
      local slow = CALL[op](unpack(full))   -- the scalar as an (expanded) array
      H.equal(fast, slow, op .. ": constant and array paths")
      check(op, fast, args, "float32", op .. " large")
      -- strided inputs (the iterator's block path) across threads
      local sargs = {}
      for i = 1, k - 1 do sargs[i] = make(op, i, { n, 2 }, "float32"):select(2, 1) end
      sargs[k] = args[k]
      check(op, CALL[op](unpack(sargs)), sargs, "float32", op .. " large strided")
    end
  end)

  it("interpolate exactly at the ends, and extrapolate", function()
    local x, e = tide.tensor({ 0.1, -3, 7.3, 1e-8 }), tide.tensor({ 0.7, 5, -2.9, 3e8 })
    H.equal(x:lerp(e, 0), x)
    H.equal(x:lerp(e, 1), e)
    H.equal(x:lerp(e, tide.tensor({ 1, 0, 1, 0 })), tide.tensor({ 0.7, -3, -2.9, 1e-8 }))
    for _, w in ipairs { -0.5, 0.49, 0.5, 1.7, -2 } do
      check("lerp", x:lerp(e, w), { x, e, w }, "float32", "weight " .. w)
      check("lerp", x:double():lerp(e:double(), w), { x:double(), e:double(), w }, "float64", "weight " .. w)
    end
  end)

  it("promote types like the expressions they stand for (numbers and 0-d tensors are weak)", function()
    local f32, f64 = tide.tensor({ 1, 2 }), tide.tensor({ 1, 2 }, "float64")
    local i32, i64, u8 = tide.tensor({ 1, 2 }, "int32"), tide.tensor({ 1, 2 }, "int64"), tide.tensor({ 1, 2 }, "uint8")
    local d0 = tide.tensor(0.5, "float64")
    assert.are.equal("float32", f32:add(f32, d0):dtype())
    assert.are.equal("float32", f32:addcmul(f32, f32, d0):dtype())
    assert.are.equal("float32", f32:lerp(f32, d0):dtype())
    assert.are.equal("float64", f32:addcdiv(f32, f64, 2):dtype())
    assert.are.equal("float64", f32:lerp(f32, f64):dtype())       -- a weight with dims decides too
    assert.are.equal("float32", tide.tensor(1, "float64"):addcmul(f32, f32, 1):dtype())
    assert.are.equal("int32", i32:add(i32, 2):dtype())
    assert.are.equal("int32", i32:addcmul(i32, i32, 3):dtype())
    assert.are.equal("float32", i32:add(i32, 0.5):dtype())        -- as i32 + 0.5 * i32 is
    H.equal(i32:add(i32, 0.5), { 1.5, 3 })
    assert.are.equal("float64", i32:addcmul(i32, i32, d0):dtype())  -- a 0-d float of a higher kind
    assert.are.equal("int64", i32:addcmul(i64, u8, 1):dtype())
    assert.are.equal("uint8", u8:add(u8, 2):dtype())
    assert.are.equal("int64", tide.tensor({ true }):add(tide.tensor({ true }), 2):dtype())
    H.equal(tide.tensor({ true, false }):add(tide.tensor({ true, true }), 2), { 3, 2 })
    for _, op in ipairs { "addcdiv", "lerp" } do   -- floating-point only: integers give float32
      local args = { i64, i32, tide.tensor({ 2, 4 }, "int32"), 2 }
      if op == "lerp" then args = { i64, tide.tensor({ 5, 6 }, "int64"), 0.5 } end
      local y = CALL[op](unpack(args))
      check(op, y, args, "float32", op .. " of integers")
    end
    local h = tide.tensor({ 1, 2 }, "float16")
    assert.are.equal("float16", h:addcmul(h, h, 0.5):dtype())
    assert.are.equal("bfloat16", tide.tensor({ 1 }, "bfloat16"):lerp(tide.tensor({ 3 }, "bfloat16"), 0.5):dtype())
  end)

  it("compute integers exactly and wrap on overflow", function()
    H.equal(tide.tensor({ 2147483647 }, "int32"):addcmul(tide.tensor({ 1 }, "int32"), tide.tensor({ 1 }, "int32")),
      { -2147483648 })
    H.equal(tide.tensor({ 2147483647 }, "int32"):add(tide.tensor({ 1 }, "int32"), 3), { -2147483646 })
    H.equal(tide.tensor({ 250 }, "uint8"):addcmul(tide.tensor({ 3 }, "uint8"), tide.tensor({ 2 }, "uint8")), { 0 })
    H.equal(tide.tensor({ 5 }, "uint8"):sub(tide.tensor({ 3 }, "uint8"), 2), { 255 })
    H.equal(tide.tensor({ 2 ^ 62 }, "int64"):addcmul(tide.tensor({ 2 ^ 61 }, "int64"), tide.tensor({ 1 }, "int64"), 2),
      { -2 ^ 63 })
    H.equal(tide.tensor({ 5 }, "int64"):add(tide.tensor({ 2 ^ 62 }, "int64"), 4), { 5 })   -- 4 * 2^62 wraps to 0
  end)

  describe("errors", function()
    it("name the op and the shapes for broadcasting", function()
      assert.has_error(function() tide.ones(2, 3):addcmul(tide.ones(4), tide.ones(3)) end,
        "addcmul: shapes [2,3] and [4] cannot be broadcast: size 3 ~= 4 at dimension 2")
      assert.has_error(function() tide.ones(2, 3):addcdiv(tide.ones(3), tide.ones(3), tide.ones(2)) end,
        "addcdiv: shapes [2,3] and [2] cannot be broadcast: size 3 ~= 2 at dimension 2")
      assert.has_error(function() tide.ones(3):lerp(tide.ones(3), tide.ones(4)) end,
        "lerp: shapes [3] and [4] cannot be broadcast: size 3 ~= 4 at dimension 1")
      assert.has_error(function() tide.ones(3):add(tide.ones(2), 2) end,
        "add_scaled: shapes [3] and [2] cannot be broadcast: size 3 ~= 2 at dimension 1")
    end)
    it("name the op when an in-place result does not fit the destination", function()
      assert.has_error(function() tide.ones(3):addcmul_(tide.ones(2, 3), tide.ones(3)) end,
        "addcmul: the result of shape [2,3] cannot be written into a tensor of shape [3]")
      assert.has_error(function() tide.ones(3):lerp_(tide.ones(3), tide.ones(2, 1)) end,
        "lerp: the result of shape [2,3] cannot be written into a tensor of shape [3]")
      assert.has_error(function() tide.tensor({ 1 }, "int64"):addcmul_(tide.ones(1), tide.ones(1)) end,
        "addcmul: the result of dtype float32 cannot be written into a tensor of dtype int64")
      assert.has_error(function() tide.tensor({ 1 }, "int64"):add_(tide.tensor({ 1 }, "int64"), 0.5) end,
        "add_scaled: the result of dtype float32 cannot be written into a tensor of dtype int64")
      assert.has_error(function() tide.tensor({ 1 }, "int32"):addcdiv_(tide.tensor({ 1 }, "int32"), 2) end,
        "addcdiv: the result of dtype float32 cannot be written into a tensor of dtype int32")
      assert.has_error(function() tide.tensor({ 1 }, "int32"):lerp_(tide.tensor({ 1 }, "int32"), 1) end,
        "lerp: the result of dtype float32 cannot be written into a tensor of dtype int32")
      assert.has_error(function() tide.tensor({ 1 }, { requires_grad = true }):addcmul_(tide.ones(1), tide.ones(1)) end,
        "addcmul: a leaf tensor that requires grad cannot be written in place (do it inside tide.no_grad, or on " ..
        "t:detach())")
    end)
    it("reject bool computation", function()
      local b = tide.tensor({ true })
      assert.has_error(function() b:addcmul(b, b, true) end, "addcmul: dtype bool is not supported")
      assert.has_error(function() b:add(b, tide.tensor(true)) end, "add_scaled: dtype bool is not supported")
    end)
    it("name the op and the argument for a bad argument", function()
      local x = tide.ones(2)
      assert.has_error(function() x:addcmul("a", x) end, "addcmul: argument 2 must be a tensor or a number, got string")
      assert.has_error(function() x:addcmul(x, nil) end, "addcmul: argument 3 must be a tensor or a number, got nil")
      assert.has_error(function() x:addcdiv(x, x, {}) end, "addcdiv: argument 4 must be a tensor or a number, got table")
      assert.has_error(function() tide.addcdiv("x", x, x) end,
        "addcdiv: argument 1 must be a tensor or a number, got string")
      assert.has_error(function() x:lerp(x) end, "lerp: argument 3 must be a tensor or a number, got nil")
      assert.has_error(function() x:lerp_({}, 0.5) end, "lerp: argument 2 must be a tensor or a number, got table")
      assert.has_error(function() x:add(x, "2") end, "add: argument 3 (alpha) must be a tensor or a number, got string")
      assert.has_error(function() x:sub_(x, true) end,
        "sub: argument 3 (alpha) must be a tensor or a number, got boolean")
    end)
    it("name the op for a wrong number of inputs through the C API", function()
      local x = tide.ones(2)
      for name, n in pairs { add_scaled = 2, addcmul = 3, addcdiv = 5, lerp = 2 } do
        for i = 0, n - 1 do T.ins_set(i, x) end
        assert.has_error(function() T.run(T.op_ids[name], n, nil, nil) end,
          string.format("%s: takes %d tensor inputs, %d given", name, ARITY[name], n))
      end
    end)
  end)
end)

describe("where", function()
  it("takes a when the condition is true, with broadcasting, 0-d and empty tensors", function()
    local a, b = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }), tide.tensor({ 7, 8, 9 })
    H.equal(tide.where(tide.tensor({ true, false, true }), a, b), { { 1, 8, 3 }, { 4, 8, 6 } })
    H.equal(a:where(tide.tensor({ { false }, { true } }), 0), { { 0, 0, 0 }, { 4, 5, 6 } })
    H.equal(tide.where(a:t():gt(2):t(), a, -a), { { -1, -2, 3 }, { 4, 5, 6 } })   -- a strided condition
    H.equal(tide.where(tide.tensor(true), tide.tensor(1.5), b), { 1.5, 1.5, 1.5 })
    assert.are.same({ 0, 3 }, tide.where(tide.zeros(0, 3, "bool"), tide.zeros(0, 3), 1):shape())
  end)

  it("counts any nonzero condition as true, whatever the operands' dtype", function()
    local a, b = tide.tensor({ 1, 2, 3, 4 }, "int64"), tide.tensor({ 7, 8, 9, 10 }, "int64")
    -- a fractional condition with integer operands: once read as int64 0
    H.equal(tide.where(tide.tensor({ 0.5, 0, -0.25, 0 / 0 }), a, b), { 1, 8, 3, 4 })
    -- 256 with uint8 operands: once read as uint8 0
    local u, v = tide.tensor({ 1, 2 }, "uint8"), tide.tensor({ 5, 6 }, "uint8")
    H.equal(tide.where(tide.tensor({ 256, 0 }, "int64"), u, v), { 1, 6 })
    assert.are.equal("uint8", tide.where(tide.tensor({ 256, 0 }, "int64"), u, v):dtype())
  end)
end)

describe("pow", function()
  it("squares as x * x, the exact square rounded once, on every path", function()
    tide.manual_seed(7)
    for _, dt in ipairs { "float32", "float64" } do
      local x = tide.cat({ tide.randn(1000):mul(1e3),
        tide.tensor({ 0, -0.0, 1 / 0, -1 / 0, 0 / 0, 1e-40, -1e-300, 3e38, 1e200, 2 ^ 0.5 }) }):to(dt)
      local fast = x:pow(2)                                  -- a one-element exponent: the square path
      local lib = x:pow(tide.full(x:shape(), 2, dt))         -- an exponent per element: the general loop
      -- float32: the square of a float is exact in float64, so rounding it once gives the answer
      local exact = dt == "float32" and (x:double() * x:double()):float() or x * x
      local a, b, e = fast:totable(), lib:totable(), exact:totable()
      for i = 1, #a do
        local same = a[i] == e[i] or (a[i] ~= a[i] and e[i] ~= e[i])
        assert(same, ("%s element %d: %.17g, the rounded square is %.17g"):format(dt, i, a[i], e[i]))
        same = a[i] == b[i] or (a[i] ~= a[i] and b[i] ~= b[i])
        assert(same, ("%s element %d: %.17g by the square path, %.17g by the general loop"):format(dt, i, a[i], b[i]))
      end
      H.equal(tide.tensor({ -3, 0.5 }, dt):pow(tide.tensor(2, "int64")), { 9, 0.25 })
    end
  end)
end)
