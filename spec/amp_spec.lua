-- tide.amp.autocast: which ops take which dtype, values against float64
-- references of the rounded inputs, gradients through the casts, backward in
-- the forward's dtypes, the weight cache following in-place updates, nesting,
-- jit capture, the CUDA kind of device (fake or real), and the errors.
local tide = require "tide"
local H = require "spec.helpers"

local autocast = tide.autocast

local function raises(f, text)
  local ok, err = pcall(f)
  assert.is_false(ok, "expected an error containing: " .. text)
  assert.matches(text, tostring(err), 1, true)
end

-- |a - b| <= rtol * |b| + atol elementwise, for tensors of any dtype (compared in float64)
local function near(a, b, rtol, atol, msg)
  H.close(a:double(), b:double(), rtol, atol, msg)
end

describe("tide.autocast on the cpu", function()
  local x = tide.randn({ 5, 8 }, { device = "cpu" })
  local w = tide.randn({ 8, 3 }, { device = "cpu" })

  it("runs products in bfloat16 by default, from float64 references of the rounded inputs", function()
    local y, yb = autocast("cpu", function() return x:matmul(w), x:unsqueeze(1):bmm(w:unsqueeze(1)) end)
    assert.equals("bfloat16", y:dtype())
    assert.equals("bfloat16", yb:dtype())
    local ref = x:bfloat16():double():matmul(w:bfloat16():double())
    near(y, ref, 2 ^ -7, 1e-6)
    near(yb:squeeze(1), ref, 2 ^ -7, 1e-6)
    local y16 = autocast({ device_type = "cpu", dtype = "float16" }, function() return x:matmul(w) end)
    assert.equals("float16", y16:dtype())
    near(y16, x:half():double():matmul(w:half():double()), 2 ^ -10, 1e-5)
  end)

  it("runs convolutions in the low dtype", function()
    local img, k = tide.randn({ 1, 2, 6, 6 }, { device = "cpu" }), tide.randn({ 3, 2, 3, 3 }, { device = "cpu" })
    local y = autocast("cpu", function() return tide.nn.functional.conv2d(img, k) end)
    assert.equals("bfloat16", y:dtype())
    local ref = tide.nn.functional.conv2d(img:bfloat16():double(), k:bfloat16():double())
    near(y, ref, 2 ^ -7, 1e-5)
  end)

  it("runs range-hungry ops in float32, and others in their inputs' dtype", function()
    local h = x:bfloat16()
    local r = { autocast("cpu", function()
      return h:softmax(2), h:log_softmax(2), h:exp(), h:sum(), h:cumsum(1), h:pow(2), h:relu(), h + h, h:tanh()
    end) }
    local want = { "float32", "float32", "float32", "float32", "float32", "float32", "bfloat16", "bfloat16", "bfloat16" }
    for i, d in ipairs(want) do assert.equals(d, r[i]:dtype(), "result " .. i) end
    local hd = h:double()
    near(r[1], hd:softmax(2), 1e-6, 1e-7)
    near(r[4], hd:sum(), 1e-6, 1e-5)
    near(r[3], hd:exp(), 1e-6, 1e-7)
  end)

  it("leaves float64, integers, in-place calls and other devices' kinds alone", function()
    local r = { autocast("cpu", function()
      local a = x:double():matmul(w:double())
      local i = tide.arange(1, 7):reshape({ 2, 3 }):matmul(tide.arange(1, 4):reshape({ 3, 1 }))
      local buf = x:clone()
      buf:exp_()
      return a, i, buf
    end) }
    assert.equals("float64", r[1]:dtype())
    assert.equals("int64", r[2]:dtype())
    H.close(r[2], { { 14 }, { 32 } }, 0, 0)
    assert.equals("float32", r[3]:dtype())
    local y = autocast("cuda", function() return x:matmul(w) end)   -- autocast for CUDA: a cpu product is left alone
    assert.equals("float32", y:dtype())
  end)

  it("is off outside, after errors, and inside enabled = false", function()
    assert.is_false(tide.amp.is_autocast_enabled("cpu"))
    local inner = autocast("cpu", function()
      assert.is_true(tide.amp.is_autocast_enabled("cpu"))
      assert.equals("bfloat16", tide.amp.get_autocast_dtype("cpu"))
      return autocast({ device_type = "cpu", enabled = false }, function() return x:matmul(w) end)
    end)
    assert.equals("float32", inner:dtype())
    pcall(autocast, "cpu", function() error("inside") end)
    assert.is_false(tide.amp.is_autocast_enabled("cpu"))
    assert.equals("float32", x:matmul(w):dtype())
  end)

  it("differentiates through the casts, with backward in the forward's dtypes", function()
    local wl = w:clone():requires_grad_()
    local xl = x:clone():requires_grad_()
    local loss = autocast("cpu", function() return (xl:matmul(wl)):float():pow(2):sum() end)
    assert.equals("float32", loss:dtype())
    autocast("cpu", function() loss:backward() end)   -- backward inside a region: still no autocast
    assert.equals("float32", wl.grad:dtype())
    assert.equals("float32", xl.grad:dtype())
    -- d/dW sum((xW)^2) = 2 x^T (xW), with x, W rounded to bfloat16 and xW to bfloat16
    local xb, wb = x:bfloat16():double(), w:bfloat16():double()
    local yb = xb:matmul(wb):bfloat16():double()
    near(wl.grad, xb:t():matmul(yb) * 2, 2 ^ -6, 1e-3)
    near(xl.grad, (yb * 2):matmul(wb:t()), 2 ^ -6, 1e-3)
  end)

  it("casts a weight again after an in-place update, and follows a training loop", function()
    local wl = w:clone():requires_grad_()
    local ys = { autocast("cpu", function()
      local a = x:matmul(wl)
      tide.no_grad(function() wl:add_(1) end)
      local b = x:matmul(wl)
      return a, b
    end) }
    near(ys[2] - ys[1], x:bfloat16():double():sum(2, true):expand({ 5, 3 }), 2 ^ -5, 0.1)
    -- SGD under autocast, the weights updated in place between steps
    local model = tide.nn.Linear(8, 1):to("cpu")
    local target = x:matmul(tide.randn({ 8, 1 }, { device = "cpu" }))
    local opt = tide.optim.SGD(model:parameters(), { lr = 0.05 })
    local first, last
    autocast("cpu", function()
      for step = 1, 60 do
        opt:zero_grad()
        local loss = (model(x):float() - target):pow(2):mean()
        loss:backward()
        opt:step()
        if step == 1 then first = loss:item() end
        last = loss:item()
      end
    end)
    assert.is_true(last < first * 0.2, "loss went from " .. first .. " to " .. last)
  end)

  it("is captured by tide.jit.compile, the casts included", function()
    local wl = w:clone()
    local f = tide.jit.compile(function(a) return autocast("cpu", function() return a:matmul(wl):softmax(2) end) end)
    for i = 1, 3 do
      local a = x * i
      local got = f(a)
      assert.equals("float32", got:dtype())
      H.close(got, autocast("cpu", function() return a:matmul(wl):softmax(2) end), 0, 0)
    end
  end)

  it("names the bad argument", function()
    raises(function() autocast({ device_type = "cpu", dtype = "float32" }, function() end) end,
      "autocast: dtype must be \"float16\" or \"bfloat16\", got float32")
    raises(function() autocast("tpu", function() end) end, "autocast: device_type must be \"cpu\" or \"cuda\", got tpu")
    raises(function() autocast("cpu") end, "autocast: expects a function to run, got nil")
  end)
end)

describe("tide.autocast on cuda", function()
  it("runs products in float16 on the device", function()
    if not tide.cuda.is_available() then
      print("\nskipped autocast on cuda: " .. select(2, tide.cuda.is_available()))
      return
    end
    local x, w = tide.randn({ 4, 8 }, { device = "cuda:0" }), tide.randn({ 8, 2 }, { device = "cuda:0" })
    local y, s = autocast("cuda", function()
      local y = x:matmul(w)
      return y, y:softmax(2)
    end)
    assert.equals("float16", y:dtype())
    assert.equals("float32", s:dtype())
    assert.equals("cuda:0", y:device())
    near(y:cpu(), x:cpu():half():double():matmul(w:cpu():half():double()), 2 ^ -10, 1e-3)
    local c = autocast("cpu", function() return x:matmul(w) end)   -- cpu autocast leaves device ops alone
    assert.equals("float32", c:dtype())
  end)
end)
