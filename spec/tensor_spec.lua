-- tensor_spec: creation, properties, views, indexing, printing, conversion,
-- the cheap elementwise ops (arithmetic, comparisons, logic, where, clamp,
-- masked_fill) with broadcasting and type promotion, and their errors.
local tide = require "tide"
local H = require "spec.helpers"

describe("tensor creation", function()
  it("builds from nested tables, float32 by default", function()
    local t = tide.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.are.same({ 2, 3 }, t:shape())
    assert.are.equal("float32", t:dtype())
    assert.are.equal(6, t:numel())
    assert.are.equal(2, t:dim())
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:totable())
    assert.are.equal(tide.get_default_device(), t:device())   -- "cpu" unless the suite runs on another
  end)

  it("takes a dtype name or an options table", function()
    assert.are.equal("float64", tide.tensor({ 1 }, "float64"):dtype())
    assert.are.equal("int64", tide.tensor({ 1 }, { dtype = "int64" }):dtype())
    assert.are.equal("int64", tide.tensor({ 1 }, "long"):dtype())
    assert.are.equal("bool", tide.tensor({ true, false }):dtype())
    assert.are.same({ true, false }, tide.tensor({ true, false }):totable())
  end)

  it("makes 0-d tensors from numbers", function()
    local t = tide.tensor(3.5)
    assert.are.same({}, t:shape())
    assert.are.equal(3.5, t:item())
    assert.are.equal(1, t:numel())
  end)

  it("creates zeros, ones, full, empty, eye, arange, linspace", function()
    H.equal(tide.zeros(2, 3), { { 0, 0, 0 }, { 0, 0, 0 } })
    H.equal(tide.zeros({ 2, 3 }, { dtype = "int64" }), { { 0, 0, 0 }, { 0, 0, 0 } })
    assert.are.equal("int64", tide.zeros({ 2 }, { dtype = "int64" }):dtype())
    assert.are.equal("int32", tide.ones(2, "int32"):dtype())
    H.equal(tide.ones(2), { 1, 1 })
    H.equal(tide.full({ 2, 2 }, 7), { { 7, 7 }, { 7, 7 } })
    assert.are.same({ 3, 4 }, tide.empty(3, 4):shape())
    H.equal(tide.eye(3), { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } })
    H.equal(tide.eye(2, 3), { { 1, 0, 0 }, { 0, 1, 0 } })
    H.equal(tide.arange(5), { 0, 1, 2, 3, 4 })
    assert.are.equal("int64", tide.arange(5):dtype())
    H.equal(tide.arange(1, 2, 0.25), { 1, 1.25, 1.5, 1.75 })
    assert.are.equal("float32", tide.arange(1, 2, 0.25):dtype())
    -- into an integer dtype, each value converts as any float does: truncated,
    -- saturated at int32's ends, wrapped from int32 into uint8
    H.equal(tide.arange(0, 3, 0.5, { dtype = "int32" }), { 0, 0, 1, 1, 2, 2 })
    H.equal(tide.arange(2147483645, 2147483650, { dtype = "int32" }),
      { 2147483645, 2147483646, 2147483647, 2147483647, 2147483647 })
    H.equal(tide.arange(253, 259, { dtype = "uint8" }), { 253, 254, 255, 0, 1, 2 })
    H.equal(tide.arange(-2, 1, { dtype = "float64" }), { -2, -1, 0 })
    H.equal(tide.arange(5, 0, -2), { 5, 3, 1 })
    H.close(tide.linspace(0, 1, 5), { 0, 0.25, 0.5, 0.75, 1 })
    H.equal(tide.linspace(0, 1, 0), {})
    assert.are.same({ 0, 3 }, tide.zeros(0, 3):shape())
  end)

  it("makes *_like tensors", function()
    local t = tide.tensor({ { 1, 2 } }, "float64")
    local z = tide.zeros_like(t)
    assert.are.same({ 1, 2 }, z:shape())
    assert.are.equal("float64", z:dtype())
    H.equal(tide.ones_like(t, "int32"), { { 1, 1 } })
    H.equal(tide.full_like(t, 3), { { 3, 3 } })
  end)

  it("makes *_like tensors on the tensor's device", function()
    local t = tide.ones(2, 3, { device = "cpu:1", dtype = "float64" })
    for _, name in ipairs { "zeros", "ones", "empty", "rand", "randn" } do
      local z = tide[name .. "_like"](t)
      assert.are.equal("cpu:1", z:device(), name)
      assert.are.equal("float64", z:dtype(), name)
    end
    assert.are.equal("cpu:1", tide.full_like(t, 7):device())
    assert.are.equal("cpu:0", tide.zeros_like(t, { device = "cpu:0" }):device())
    assert.is_true(tide.zeros_like(t, { requires_grad = true }).requires_grad)
  end)

  it("rejects bad creation arguments", function()
    assert.has_error(function() tide.zeros(-1) end, "full: size -1 of dimension 1 is negative")
    assert.has_error(function() tide.zeros(2, "float128") end, "zeros: unknown dtype float128")
    assert.has_error(function() tide.tensor({ { 1, 2 }, { 3 } }) end,
      "tensor: ragged nested table: expected 2 elements at depth 2, got 1")
    assert.has_error(function() tide.tensor("x") end, "tensor: data must be a number, a boolean or a nested table, got string")
    assert.has_error(function() tide.arange(0, 1, 0) end, "arange: step must be nonzero, got 0")
    assert.has_error(function() tide.zeros(1, 1, 1, 1, 1, 1, 1, 1, 1) end,
      "full: 9 dimensions given, at most 8 are supported")
  end)
end)

describe("errors", function()
  it("are raised at the caller's line", function()
    local a, b = tide.ones(2, 3), tide.ones(4, 5)
    local ok, err = pcall(function() return a:matmul(b) end)   -- line of this call
    assert.is_false(ok)
    assert.matches("tensor_spec.lua:%d+: ", err)
    local line = tonumber(err:match("tensor_spec.lua:(%d+):"))
    assert.are.equal(debug.getinfo(1, "l").currentline - 4, line)
  end)

  it("name the op and the shapes for broadcasting", function()
    assert.has_error(function() return tide.ones(2, 3) + tide.ones(4) end,
      "add: shapes [2,3] and [4] cannot be broadcast: size 3 ~= 4 at dimension 2")
  end)

  it("name the op and the result a failed allocation was for, at the call", H.on_cpu(function()
    -- results get their memory when their op runs; one no machine could hold
    -- still fails at once, not at a later wait
    local x = tide.ones(1024):expand(2 ^ 40, 1024)
    local ok, err = pcall(function() return x + 1 end)
    assert.is_false(ok)
    assert.matches("tensor_spec.lua:%d+: add: out of memory: could not allocate 4503599627370496 bytes on the host, "
      .. "for its %[1099511627776,1024%] float32 result", err)
  end))
end)

describe("views", function()
  local t
  before_each(function() t = tide.arange(24):view(2, 3, 4) end)

  it("share storage and allocate no data", function()
    local ones = tide.ones(1, 4)
    -- nothing in flight and no collection between the two readings
    tide.sync()
    collectgarbage()
    collectgarbage("stop")
    local before = H.mem_stats().in_use
    local v = t:view(6, 4)
    local p = t:permute(3, 1, 2)
    local n = t:narrow(3, 2, 2)
    local s = t:select(2, 1)
    local e = ones:expand(5, 4)
    tide.sync()
    local after = H.mem_stats().in_use
    collectgarbage("restart")
    assert.are.equal(before, after)
    v[{ 1, 1 }] = 100
    assert.are.equal(100, t[{ 1, 1, 1 }]:item())
    assert.are.same({ 4, 2, 3 }, p:shape())
    assert.are.same({ 2, 3, 2 }, n:shape())
    assert.are.same({ 2, 4 }, s:shape())
    assert.are.same({ 0, 1 }, e:stride())
    assert.is_false(p:is_contiguous())
  end)

  it("computes values through permute, transpose, narrow, select", function()
    H.equal(t:permute(3, 1, 2)[{ 2, 1 }], { 1, 5, 9 })
    H.equal(t:transpose(1, 3):select(1, 4):select(1, 2), { 7, 19 })
    H.equal(t:narrow(3, 2, 2)[2][3], { 21, 22 })
    H.equal(t:narrow(2, -1, 1):squeeze(2), { { 8, 9, 10, 11 }, { 20, 21, 22, 23 } })
    H.equal(t:select(3, -1), { { 3, 7, 11 }, { 15, 19, 23 } })
  end)

  it("squeezes and unsqueezes", function()
    local x = tide.zeros(1, 3, 1)
    assert.are.same({ 3 }, x:squeeze():shape())
    assert.are.same({ 3, 1 }, x:squeeze(1):shape())
    assert.are.same({ 1, 3 }, x:squeeze(-1):shape())
    assert.are.same({ 1, 1, 3, 1 }, x:unsqueeze(1):shape())
    assert.are.same({ 1, 3, 1, 1 }, x:unsqueeze(-1):shape())
    -- a table of dims (PyTorch 2): those of size 1 go, the others stay
    local y = tide.tensor({ { { 1, 2 } } }):reshape(1, 2, 1, 1)
    assert.are.same({ 2, 1 }, y:squeeze({ 1, 3 }):shape())
    assert.are.same({ 1, 2 }, y:squeeze({ 2, -1, -2 }):shape())
    assert.are.same({ 1, 2, 1, 1 }, y:squeeze({}):shape())
    H.equal(y:squeeze({ 1, -1 }), { { 1 }, { 2 } })
    assert.has_error(function() y:squeeze({ 1, -4 }) end, "squeeze: dimension 1 is repeated")
    assert.has_error(function() y:squeeze({ 5 }) end, "squeeze: dimension 5 is out of range for a 4-d tensor")
  end)

  it("reshapes without copying when strides allow, and copies otherwise", function()
    local r = t:reshape(4, 6)
    r[{ 1, 1 }] = -1
    assert.are.equal(-1, t[{ 1, 1, 1 }]:item())
    local tt = t:transpose(2, 3)
    local c = tt:reshape(-1)
    H.equal(c:narrow(1, 1, 4), { -1, 4, 8, 1 })
    assert.has_error(function() tt:view(-1) end,
      "view: shape [24] is not compatible with the strides of the input (shape [2,4,3]); use reshape, which copies when needed")
    assert.has_error(function() t:view(5, -1) end, "view: shape [5,-1] is invalid for input of size 24")
    assert.has_error(function() t:view(5, 5) end,
      "view: shape [5,5] is invalid for input of shape [2,3,4] (24 elements)")
  end)

  it("flattens, splits, chunks", function()
    assert.are.same({ 2, 12 }, t:flatten(2):shape())
    assert.are.same({ 24 }, t:flatten():shape())
    local parts = tide.arange(7):split(3)
    assert.are.equal(3, #parts)
    H.equal(parts[3], { 6 })
    local ch = tide.arange(6):chunk(3)
    H.equal(ch[2], { 2, 3 })
    local sp = tide.arange(6):split({ 1, 5 })
    H.equal(sp[2], { 1, 2, 3, 4, 5 })
  end)

  it("expands size-1 dims and checks", function()
    H.equal(tide.tensor({ { 1 }, { 2 } }):expand(2, 3), { { 1, 1, 1 }, { 2, 2, 2 } })
    H.equal(tide.tensor({ 1, 2 }):expand(2, -1), { { 1, 2 }, { 1, 2 } })
    assert.has_error(function() tide.ones(2, 3):expand(4, 3) end,
      "expand: shape [2,3] cannot be expanded to [4,3]: size 2 of dimension 1 is not 1")
  end)

  it("rejects bad dims and indices", function()
    assert.has_error(function() t:select(4, 1) end, "select: dimension 4 is out of range for a 3-d tensor")
    assert.has_error(function() t:select(1, 3) end, "select: index 3 is out of range for dimension 1 of size 2")
    assert.has_error(function() t:narrow(3, 3, 3) end,
      "narrow: start 3 and length 3 are out of range for dimension 3 of size 4")
    assert.has_error(function() t:transpose(0, 1) end, "transpose: dimension 0 is out of range (dimensions are 1-based)")
    assert.has_error(function() t:permute(1, 1, 2) end, "permute: dimension 1 is repeated")
    assert.has_error(function() t:size(4) end, "size: dimension 4 is out of range for a 3-d tensor")
  end)
end)

describe("indexing", function()
  it("selects with numbers, ranges and tables, 1-based", function()
    local t = tide.arange(12):view(3, 4)
    assert.are.equal(5, t[2][2])
    assert.are.equal(11, t[-1][-1])
    H.equal(t[2], { 4, 5, 6, 7 })
    H.equal(t[{ { 1, 2 }, 2 }], { 1, 5 })
    H.equal(t[{ {}, { 2, 3 } }], { { 1, 2 }, { 5, 6 }, { 9, 10 } })
    H.equal(t[{ ":", -1 }], { 3, 7, 11 })
    H.equal(t[{ { -2, -1 }, { 1, 1 } }], { { 4 }, { 8 } })
    assert.are.equal(6, t[{ 2, 3 }]:item())
    assert.are.equal(3, #t)
  end)

  it("gives a 0-d tensor, not a number, for an element of a 1-d tensor that requires grad", function()
    local x = tide.tensor({ 1, 2, 3 }, "float64"):requires_grad_()
    local y = x * x
    local e = y[2]
    assert.is_true(tide.is_tensor(e))
    assert.are.equal(0, e:dim())
    assert.are.equal(4, e:item())
    local loss = y[2] * y[3] + y[-1]
    loss:backward()   -- d/dx of x2^2 x3^2 + x3^2: 2 x2 x3^2, 2 x2^2 x3 + 2 x3
    H.equal(x.grad, { 0, 36, 30 })
    local before = y[1]
    tide.no_grad(function() y:add_(10) end)
    assert.are.equal(1, before:item())   -- a value, not a view of y
    assert.are.equal("number", type(x:detach()[2]))
    assert.are.equal("number", type(tide.no_grad(function() return y[1] end)))
  end)

  it("assigns through the same forms", function()
    local t = tide.zeros(3, 4)
    t[1] = 5
    t[{ {}, 4 }] = tide.tensor({ 1, 2, 3 })
    t[{ 3, { 1, 2 } }] = -1
    H.equal(t, { { 5, 5, 5, 1 }, { 0, 0, 0, 2 }, { -1, -1, 0, 3 } })
  end)

  it("rejects out-of-range indices", function()
    local t = tide.arange(4)
    assert.has_error(function() return t[5] end, "index: index 5 is out of range for a tensor of size 4")
    assert.has_error(function() return t[0] end, "index: index 0 is out of range for a tensor of size 4")
    assert.has_error(function() return t[{ { 2, 7 } }] end, "index: range {2, 7} is out of bounds for dimension 1 of size 4")
    assert.has_error(function() return t:nosuch() end, "tensor has no method or field 'nosuch'")
  end)
end)

describe("printing", function()
  it("prints values, dtype, shape and device", function()
    local dev = tide.get_default_device()
    local s = tostring(tide.tensor({ { 1, 2 }, { 3, 4 } }))
    assert.are.equal("1. 2.\n3. 4.\n[tide.Tensor of dtype float32, shape [2, 2] on " .. dev .. "]", s)
    assert.are.equal(" 1 -2\n[tide.Tensor of dtype int64, shape [2] on " .. dev .. "]",
      tostring(tide.tensor({ 1, -2 }, "int64")))
    assert.matches("0.5000", tostring(tide.tensor({ 0.5, 1.25 })))
    assert.matches("true false", tostring(tide.tensor({ true, false })))
    assert.are.equal("2.5000\n[tide.Tensor of dtype float32, shape [] on " .. dev .. "]", tostring(tide.tensor(2.5)))
    assert.are.equal("[]\n[tide.Tensor of dtype float32, shape [0] on " .. dev .. "]", tostring(tide.zeros(0)))
    assert.are.equal("2.5000\n[tide.Tensor of dtype float32, shape [] on cpu:1]", tostring(tide.tensor(2.5):to("cpu:1")))
  end)

  it("summarises large tensors", function()
    local s = tostring(tide.arange(10000))
    assert.matches("%.%.%.", s)
    assert.truthy(#s < 200)
    local m = tostring(tide.arange(4000):view(40, 100))
    assert.truthy(#m < 2000)
  end)

  it("prints nan and inf", function()
    local s = tostring(tide.tensor({ 0 / 0, 1 / 0, -1 / 0, 1 }))
    assert.matches("nan", s)
    assert.matches("-inf", s)
  end)
end)

describe("conversion and copies", function()
  it("reads a NaN of any bit pattern as NaN (LuaJIT keeps its tags in NaNs)", function()
    local ffi = require "ffi"
    for _, case in ipairs { { "float64", "uint64_t *", 0xFFFFFFFFFFFFFFFFULL }, { "float32", "uint32_t *", 0xFFFFFFFF } } do
      local t = tide.zeros(3, { dtype = case[1], device = "cpu" })   -- written through a host pointer
      ffi.cast(case[2], t:data_ptr())[1] = case[3]   -- a NaN whose high bits are all set
      local v = t:totable()
      assert.are.equal(3, #v, case[1])
      assert.is_true(v[2] ~= v[2], case[1] .. ": element 2 must be NaN")
      local e = t[2]
      assert.is_true(e ~= e, case[1] .. ": t[2] must be NaN")
    end
  end)

  it("converts dtypes", function()
    local t = tide.tensor({ 1.7, -1.7, 300 })
    H.equal(t:to("int32"), { 1, -1, 300 })
    H.equal(t:to("uint8"), { 1, 255, 44 })
    H.equal(t:to("bool"), { 1, 1, 1 })
    H.close(t:to("float16"):to("float32"), { 1.7, -1.7, 300 }, 1e-3)
    H.close(t:to("bfloat16"):to("float32"), { 1.7, -1.7, 300 }, 1e-2)
    assert.are.equal(t, t:to("float32"))
    H.equal(tide.tensor({ 65504, 1e-8 }):half():float(), { 65504, 0 })
  end)

  it("converts floats to integers as C would through double, saturating and sending NaN to 0", function()
    local inf, nan = 1 / 0, 0 / 0
    local v = { nan, inf, -inf, 0.5, -0.5, 1.5, -1.5, 2147483520, 2 ^ 31, -2 ^ 31, -2147483904, 255.75, 256, 300, -1,
                -0.0, 1e10 }
    local want = {
      int32 = { 0, 2147483647, -2147483648, 0, 0, 1, -1, 2147483520, 2147483647, -2147483648, -2147483648, 255, 256,
                300, -1, 0, 2147483647 },
      int64 = { 0, 2 ^ 63, -2 ^ 63, 0, 0, 1, -1, 2147483520, 2 ^ 31, -2 ^ 31, -2147483904, 255, 256, 300, -1, 0, 1e10 },
      uint8 = { 0, 255, 0, 0, 0, 1, 255, 128, 255, 0, 0, 255, 0, 44, 255, 0, 255 },   -- from int32, wrapping
      bool = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1 },
    }
    for _, src in ipairs { "float32", "float64", "bfloat16" } do
      local x = tide.tensor(v, src)
      -- the same values strided: every other element of a longer tensor
      local wide = tide.zeros(2 * #v, src)
      wide:view(#v, 2):select(2, 1):copy_(x)
      local strided = wide:view(#v, 2):select(2, 1)
      for dt, w in pairs(want) do
        local exp = w
        if src == "bfloat16" then   -- bfloat16 holds fewer: 2147483520, -2147483904, 255.75, 1e10 round first
          exp = {}
          for i, e in ipairs(w) do exp[i] = e end
          if dt == "int32" then exp[8], exp[12] = 2147483647, 256 end
          if dt == "int64" then exp[8], exp[11], exp[12], exp[17] = 2 ^ 31, -2 ^ 31, 256, 9999220736 end
          if dt == "uint8" then exp[8], exp[12] = 255, 0 end
        end
        H.equal(x:to(dt), exp, src .. " -> " .. dt)
        H.equal(strided:to(dt), exp, src .. " (strided) -> " .. dt)
      end
    end
    -- and back: integers to floats round once
    H.equal(tide.tensor({ 16777217, -7, 0 }, "int32"):to("float32"), { 16777216, -7, 0 })
    H.equal(tide.tensor({ 300, 0, 1 }, "int64"):to("bfloat16"):to("float32"), { 300, 0, 1 })
    H.equal(tide.tensor({ true, false }, "bool"):to("float64"), { 1, 0 })
  end)

  it("converts to another tensor's dtype and device, and takes PyTorch's options", function()
    local t = tide.tensor({ 1.7, -1.7, 300 })
    local other = tide.zeros(2, { dtype = "int32", device = "cpu:1" })
    local r = t:to(other)
    assert.are.equal("int32", r:dtype())
    assert.are.equal("cpu:1", r:device())
    H.equal(r, { 1, -1, 300 })
    assert.are.equal(t, t:to(t:device(), { non_blocking = true }))   -- nothing to do: t itself
    local c = t:to("float32", { copy = true })                 -- always a new tensor
    assert.are_not.equal(t, c)
    c[1] = 5
    assert.are.equal(tide.tensor(1.7):item(), t[1])
    H.equal(t:to({ copy = true }), t)
    H.equal(t:to("float64", "cpu:1", { copy = true, non_blocking = false }), t:to("float64"))
    assert.has_error(function() t:to("float32", { nonblocking = true }) end,
      "to: unknown option 'nonblocking' (options: copy, non_blocking)")
    assert.has_error(function() t:to("float32", { copy = 1 }) end, "to: option 'copy' must be a boolean, got number")
    assert.has_error(function() t:to("float32", "cpu", "int32") end,
      "to: expects at most a dtype and a device before the options, got 3 arguments")
    assert.has_error(function() t:to(5) end,
      "to: expects a dtype or device name, a tensor or a table of options, got number")
  end)

  it("keeps float16 and bfloat16 as storage types that compute in float32", function()
    local h = tide.tensor({ 1, 2, 3 }, "float16")
    local r = h + h
    assert.are.equal("float16", r:dtype())
    H.equal(r, { 2, 4, 6 })
    assert.are.equal("float32", (h + tide.tensor({ 1, 1, 1 })):dtype())
    assert.are.equal("float32", (h + tide.tensor({ 1, 1, 1 }, "bfloat16")):dtype())
  end)

  it("clones, copies and fills, broadcasting the source", function()
    local a = tide.tensor({ { 1, 2 }, { 3, 4 } })
    local c = a:clone()
    c[{ 1, 1 }] = 9
    assert.are.equal(1, a[1][1])
    local d = tide.zeros(2, 2, "int64")
    d:copy_(tide.tensor({ 5.9, 6 }))
    H.equal(d, { { 5, 6 }, { 5, 6 } })
    a:t():fill_(0)
    H.equal(a, { { 0, 0 }, { 0, 0 } })
    local wide = tide.zeros(2, 4)
    wide:narrow(2, 2, 2):copy_(tide.tensor({ { 1, 2 }, { 3, 4 } }):t())
    H.equal(wide, { { 0, 1, 3, 0 }, { 0, 2, 4, 0 } })
    assert.has_error(function() tide.zeros(2, 2):copy_(tide.zeros(3)) end,
      "copy: the result of shape [3] cannot be written into a tensor of shape [2,2]")
  end)

  it("contiguous copies only when needed", function()
    local a = tide.ones(2, 3)
    assert.are.equal(a, a:contiguous())
    local t = a:t()
    local c = t:contiguous()
    assert.are_not.equal(t, c)
    assert.is_true(c:is_contiguous())
  end)

  it("copies large transposed matrices (by tiles) element for element", function()
    -- sizes that are and are not multiples of the tiles (64x64 for 4-byte dtypes,
    -- 32x32 for 8-byte ones), powers of two; a transposed slice (offset, larger
    -- stride) and a batch that copies elementwise
    for _, case in ipairs { { 96, 64, "float32" }, { 100, 77, "float64" }, { 33, 250, "int64" },
                            { 70, 130, "int32" }, { 200, 150, "float32" }, { 256, 512, "float32" },
                            { 128, 64, "float64" } } do
      local m, n, dt = case[1], case[2], case[3]
      local a = tide.arange(0, m * n):view(m, n):to(dt)
      local t = a:t():contiguous()
      assert.are.same({ n, m }, t:shape())
      local v = t:totable()
      local ok = true
      for j = 1, n do for i = 1, m do ok = ok and v[j][i] == (i - 1) * n + (j - 1) end end
      assert.is_true(ok, dt .. " " .. m .. "x" .. n)
      local s = a:narrow(2, 3, n - 5):t():contiguous():totable()   -- rows 3..n-3 of the transpose
      for j = 1, n - 5 do for i = 1, m do ok = ok and s[j][i] == (i - 1) * n + (j + 1) end end
      assert.is_true(ok, dt .. " slice " .. m .. "x" .. n)
    end
    local b = tide.arange(0, 2 * 40 * 60):view(2, 40, 60)
    H.equal(b:transpose(2, 3):contiguous():transpose(2, 3), b:totable())
  end)
end)

describe("elementwise arithmetic", function()
  it("follows operators on tensors and numbers, both sides", function()
    local a = tide.tensor({ 1, 2, 3 })
    H.equal(a + 1, { 2, 3, 4 })
    H.equal(1 + a, { 2, 3, 4 })
    H.equal(10 - a, { 9, 8, 7 })
    H.equal(a * a, { 1, 4, 9 })
    H.close(1 / a, { 1, 0.5, 1 / 3 })
    H.equal(-a, { -1, -2, -3 })
    H.equal(a ^ 2, { 1, 4, 9 })
    H.equal(tide.tensor({ -5, 5, -5, 5 }) % tide.tensor({ 3, 3, -3, -3 }), { 1, 2, -2, -1 })
    H.equal(tide.tensor({ -5, 5, -5, 5 }):fmod(tide.tensor({ 3, 3, -3, -3 })), { -2, 2, -2, 2 })
    H.equal(tide.tensor({ 1, 5 }):maximum(tide.tensor({ 3, 2 })), { 3, 5 })
    H.equal(tide.tensor({ 1, 5 }):minimum(3), { 1, 3 })
    H.close(tide.tensor({ 1, -1 }):atan2(tide.tensor({ 1, 1 })), { math.atan2(1, 1), math.atan2(-1, 1) })
  end)

  it("broadcasts like NumPy", function()
    local col = tide.tensor({ { 1 }, { 2 } })
    local row = tide.tensor({ 10, 20, 30 })
    H.equal(col + row, { { 11, 21, 31 }, { 12, 22, 32 } })
    H.equal(tide.ones(2, 1, 3) * tide.tensor({ { 2 }, { 3 } }), { { { 2, 2, 2 }, { 3, 3, 3 } }, { { 2, 2, 2 }, { 3, 3, 3 } } })
    assert.are.same({ 0, 3 }, (tide.zeros(0, 3) + row):shape())
    H.equal(tide.tensor(2) * tide.tensor(3), 6)
  end)

  it("works on non-contiguous and strided inputs", function()
    local base = tide.arange(12):view(3, 4):float()
    for name, t in pairs(H.layouts(base)) do
      local ref = {}
      for i = 1, 3 do ref[i] = {} for j = 1, 4 do ref[i][j] = ((i - 1) * 4 + j - 1) * 2 + 1 end end
      H.equal(t * 2 + 1, ref, name)
      H.equal(t:t():t() + t, base * 2, name)
    end
  end)

  it("promotes types like PyTorch", function()
    local i32, i64 = tide.tensor({ 1 }, "int32"), tide.tensor({ 1 }, "int64")
    local f32, f64 = tide.tensor({ 1 }), tide.tensor({ 1 }, "float64")
    local u8, b = tide.tensor({ 1 }, "uint8"), tide.tensor({ true })
    assert.are.equal("int64", (i32 + i64):dtype())
    assert.are.equal("float32", (i64 + f32):dtype())
    assert.are.equal("float64", (f32 + f64):dtype())
    assert.are.equal("int32", (u8 + i32):dtype())
    assert.are.equal("uint8", (b + u8):dtype())
    assert.are.equal("int32", (i32 + 1):dtype())         -- a Lua integer does not widen
    assert.are.equal("float32", (i32 + 1.5):dtype())     -- a Lua float makes it float32
    assert.are.equal("float32", (f32 + tide.tensor(1, "float64")):dtype())  -- 0-d tensors are weak
    assert.are.equal("float64", (i32 + tide.tensor(1, "float64")):dtype())  -- ... unless of a higher kind
    assert.are.equal("float32", (i64 / 2):dtype())       -- division is true division
    H.equal(tide.tensor({ 7 }, "int64") / 2, { 3.5 })
    assert.are.equal("int64", (tide.tensor({ true }) + 1):dtype())
  end)

  it("computes integer arithmetic exactly and wraps on overflow", function()
    H.equal(tide.tensor({ 2147483647 }, "int32") + 1, { -2147483648 })
    H.equal(tide.tensor({ 250 }, "uint8") + tide.tensor({ 10 }, "uint8"), { 4 })
    H.equal(tide.tensor({ 7, -7 }, "int64") % 3, { 1, 2 })
    H.equal(tide.tensor({ 2, 3 }, "int64") ^ tide.tensor({ 10, 3 }, "int64"), { 1024, 27 })
  end)

  it("raises for an integer division by zero, as PyTorch, in any layout of the divisor", function()
    local a = tide.tensor({ { 7, -7, 9 }, { 1, 2, 3 } }, "int64")
    assert.has_error(H.sync(function() return tide.tensor({ 5 }, "int32") % 0 end),
      "remainder: integer division by zero")
    -- the one zero in a transposed divisor, and in a row broadcast over a's rows
    local d = tide.tensor({ { 1, 3 }, { 2, 0 }, { 5, 4 } }, "int64"):t()
    assert.is_false(d:is_contiguous())
    assert.has_error(H.sync(function() return a:fmod(d) end),
      "fmod: integer division by zero: element 5 of the divisor is 0")
    assert.has_error(H.sync(function() return a:floor_divide(tide.tensor({ 1, 0, 1 }, "int32")) end),
      "floor_divide: integer division by zero: element 2 of the divisor is 0")
    assert.has_error(H.sync(function() return a:clone():remainder_(tide.tensor({ { 0 }, { 1 } }, "int64")) end),
      "remainder: integer division by zero: element 1 of the divisor is 0")
    -- no zero, an empty result, and floats (NaN, as PyTorch): no error
    H.equal(a:remainder(tide.tensor({ 4, -4, 5 }, "int64")), { { 3, -3, 4 }, { 1, -2, 3 } })
    assert.are.same({ 0, 3 }, tide.zeros(0, 3, "int64"):floor_divide(tide.zeros(3, "int64")):shape())
    local nan = tide.tensor({ 1, 2 }):fmod(0):totable()
    assert.is_true(nan[1] ~= nan[1] and nan[2] ~= nan[2])
  end)

  it("has in-place variants that keep the destination's dtype", function()
    local a = tide.tensor({ 1, 2, 3 }, "int64")
    a:add_(1)
    H.equal(a, { 2, 3, 4 })
    assert.are.equal("int64", a:dtype())
    assert.has_error(function() a:add_(0.5) end,
      "add: the result of dtype float32 cannot be written into a tensor of dtype int64")
    assert.has_error(function() tide.ones(3):add_(tide.ones(2, 3)) end,
      "add: the result of shape [2,3] cannot be written into a tensor of shape [3]")
    local m = tide.arange(6):view(2, 3):float()
    m:t():mul_(2)
    H.equal(m, { { 0, 2, 4 }, { 6, 8, 10 } })
    local x = tide.tensor({ 1, 2, 3, 4 })
    x:narrow(1, 2, 3):add_(x:narrow(1, 1, 3))   -- overlapping: reads the old values
    H.equal(x, { 1, 3, 5, 7 })
  end)

  it("applies the cheap unary ops", function()
    local t = tide.tensor({ -2.5, -0.5, 0, 0.5, 1.5, 2.5 })
    H.equal(t:abs(), { 2.5, 0.5, 0, 0.5, 1.5, 2.5 })
    H.equal(t:neg(), { 2.5, 0.5, 0, -0.5, -1.5, -2.5 })
    H.equal(t:relu(), { 0, 0, 0, 0.5, 1.5, 2.5 })
    H.equal(t:floor(), { -3, -1, 0, 0, 1, 2 })
    H.equal(t:ceil(), { -2, 0, 0, 1, 2, 3 })
    H.equal(t:round(), { -2, 0, 0, 0, 2, 2 })    -- half to even
    H.equal(t:sign(), { -1, -1, 0, 1, 1, 1 })
    H.equal(tide.tensor({ -3, 4 }, "int32"):abs(), { 3, 4 })
    assert.are.equal("int32", tide.tensor({ -3, 4 }, "int32"):relu():dtype())
    assert.has_error(function() tide.tensor({ true }):neg() end, "neg: dtype bool is not supported")
  end)

  it("clamps with either bound", function()
    local t = tide.tensor({ -2, 0, 2 })
    H.equal(t:clamp(-1, 1), { -1, 0, 1 })
    H.equal(t:clamp(0), { 0, 0, 2 })
    H.equal(t:clamp(nil, 0), { -2, 0, 0 })
    H.equal(t:clamp(tide.tensor({ 0, 1, 1 })), { 0, 1, 2 })
    assert.has_error(function() t:clamp() end, "clamp: at least one of min and max must be given")
  end)
end)

describe("comparisons and logic", function()
  it("compare elementwise into bool tensors", function()
    local a, b = tide.tensor({ 1, 2, 3 }), tide.tensor({ 3, 2, 1 })
    assert.are.equal("bool", a:lt(b):dtype())
    assert.are.same({ true, false, false }, a:lt(b):totable())
    assert.are.same({ true, true, false }, a:le(b):totable())
    assert.are.same({ false, false, true }, a:gt(b):totable())
    assert.are.same({ false, true, true }, a:ge(b):totable())
    assert.are.same({ false, true, false }, a:eq(b):totable())
    assert.are.same({ true, false, true }, a:ne(2):totable())
    assert.are.same({ false, true }, tide.tensor({ 1, 2 }, "int64"):gt(1.5):totable())
    assert.are.same({ false }, tide.tensor({ 0 / 0 }):eq(tide.tensor({ 0 / 0 })):totable())
  end)

  it("combine with logical ops", function()
    local a, b = tide.tensor({ true, true, false }), tide.tensor({ true, false, false })
    assert.are.same({ true, false, false }, a:logical_and(b):totable())
    assert.are.same({ true, true, false }, a:logical_or(b):totable())
    assert.are.same({ false, false, true }, a:logical_not():totable())
    assert.are.same({ true, false }, tide.tensor({ 2, 0 }):logical_and(tide.tensor({ 1, 1 })):totable())
  end)

  it("selects with where and masked_fill", function()
    local c = tide.tensor({ true, false, true })
    H.equal(tide.where(c, tide.tensor({ 1, 2, 3 }), 0), { 1, 0, 3 })
    H.equal(tide.where(tide.tensor({ { true }, { false } }), tide.ones(2, 2), tide.zeros(2)), { { 1, 1 }, { 0, 0 } })
    H.equal(tide.tensor({ 1, 2, 3 }):masked_fill(c, -1), { -1, 2, -1 })
    local m = tide.zeros(2, 3)
    m:masked_fill_(tide.tensor({ true, false, true }), 5)
    H.equal(m, { { 5, 0, 5 }, { 5, 0, 5 } })
    assert.has_error(function() tide.zeros(2):masked_fill(tide.tensor({ true, false, true }), 1) end,
      "masked_fill: shapes [2] and [3] cannot be broadcast: size 2 ~= 3 at dimension 1")
  end)
end)

describe("memory", function()
  it("stays flat over a loop without collectgarbage", function()
    local x = tide.ones(256, 256)
    for _ = 1, 50 do local _ = x * 2 + 1 end
    local start = H.mem_stats().in_use
    for _ = 1, 3000 do local _ = x * 2 + 1 end   -- 1.5 GiB of results in all
    local grown = H.mem_stats().in_use - start
    -- queued results included; a CUDA device's dead tensors are collected every
    -- 256 MiB of fresh ones (bindings/ffi.lua's DEV_THRESHOLD), the host's sooner
    local bound = (tide.get_default_device():match("^cuda") and 256 + 150 or 150) * 1024 * 1024
    assert.is_true(grown < bound, "memory grew by " .. grown .. " bytes")
  end)

  it("reports what a collection freed at once, without another tensor made", function()
    -- in a process of its own: here, other specs' objects may make tensors
    -- while they are collected, which would release the dead ones anyway
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
local tide = require "tide"
tide.set_default_device("cpu")   -- memory_stats is host memory's
local x = tide.zeros(1024, 1024):wait()
local with = tide.memory_stats().in_use
x = nil
collectgarbage()
print(with - tide.memory_stats().in_use)
]])
    f:close()
    local p = assert(io.popen("luajit " .. script .. " 2>&1"))
    local out = p:read("*a")
    p:close()
    os.remove(script)
    assert.are.equal(tostring(4 * 1024 * 1024) .. "\n", out)
  end)

  it("reuses freed blocks from the cache", H.on_cpu(function()   -- the host's allocator
    collectgarbage()
    local s0 = tide.memory_stats()
    for _ = 1, 100 do local t = tide.zeros(1000); t:free() end
    local s1 = tide.memory_stats()
    assert.is_true(s1.reused - s0.reused >= 99)
  end))

  it("reports the runtime configuration", function()
    local c = tide.config()
    assert.are.equal(tide._VERSION, c.version)
    assert.is_true(c.threads >= 1)
    assert.truthy(c.simd)
  end)
end)
