-- tide.nn's convolution and pooling layers: shapes, initialisation, what they
-- compute against the functional forms and hand-computed values, unbatched
-- inputs, printing, errors, and a small CNN that learns.
local tide = require "tide"
local H = require "spec.helpers"
local nn, F = tide.nn, tide.nn.functional

describe("nn conv layers", function()
  it("Conv2d has PyTorch's shapes and initialisation bounds", function()
    tide.manual_seed(1)
    local conv = nn.Conv2d(6, 8, { 3, 5 }, { groups = 2, padding = 1 })
    assert.are.same({ 8, 3, 3, 5 }, conv.weight:shape())
    assert.are.same({ 8 }, conv.bias:shape())
    local bound = 1 / math.sqrt(3 * 3 * 5)
    assert.is_true(conv.weight:abs():max():item() <= bound)
    assert.is_true(conv.weight:abs():max():item() > 0.8 * bound)
    assert.is_true(conv.bias:abs():max():item() <= bound)
    assert.are.equal(2, #conv:parameters())
    assert.are.equal(1, #nn.Conv2d(1, 2, 3, { bias = false }):parameters())
  end)

  it("Conv2d computes the functional form with its own parameters, batched or not", function()
    local conv = nn.Conv2d(2, 3, 3, { stride = 2, padding = 1 })
    local x = tide.randn(2, 2, 7, 7)
    local y = conv(x)
    assert.are.same({ 2, 3, 4, 4 }, y:shape())
    H.close(y, F.conv2d(x, conv.weight, conv.bias, { stride = 2, padding = 1 }))
    H.close(conv(x[1]), y[1], 1e-5, 1e-6)
  end)

  it("Conv2d pads by reflection, replication or wrapping with padding_mode", function()
    local x = tide.arange(1, 10):float():view(1, 1, 3, 3)
    for mode, corner in pairs { reflect = 33, replicate = 21, circular = 45, zeros = 12 } do
      local conv = nn.Conv2d(1, 1, 3, { padding = 1, padding_mode = mode, bias = false })
      tide.no_grad(function() conv.weight:fill_(1) end)
      local y = conv(x)
      assert.are.same({ 1, 1, 3, 3 }, y:shape())
      H.close(y[{ 1, 1, 1, 1 }], corner, 0, 0, mode)
      H.close(y[{ 1, 1, 2, 2 }], 45, 0, 0, mode)
    end
    local c = nn.Conv2d(2, 3, { 3, 5 }, { padding = { 1, 2 }, padding_mode = "circular" })
    local xs = tide.randn(2, 2, 5, 6)
    H.close(c(xs), F.conv2d(F.pad(xs, { 2, 2, 1, 1 }, "circular"), c.weight, c.bias), 1e-6, 1e-6)
    assert.matches("padding_mode=circular", tostring(c))
    assert.has_error(function() nn.Conv2d(1, 1, 3, { padding_mode = "mirror" }) end,
      "Conv2d: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got mirror")
    assert.has_error(function() nn.Conv2d(1, 1, 3, { padding = "same", padding_mode = "reflect" }) end,
      "Conv2d: padding='same' needs padding_mode 'zeros', got 'reflect'")
  end)

  it("computes a hand-checked convolution and pools", function()
    local x = tide.arange(1, 17):float():view(1, 1, 4, 4)
    local w = tide.ones(1, 1, 2, 2)
    H.close(F.conv2d(x, w, tide.tensor { 1 }), { { { { 15, 19, 23 }, { 31, 35, 39 }, { 47, 51, 55 } } } })
    H.close(F.max_pool2d(x, 2), { { { { 6, 8 }, { 14, 16 } } } })
    H.close(F.avg_pool2d(x, 2), { { { { 3.5, 5.5 }, { 11.5, 13.5 } } } })
    H.close(F.adaptive_avg_pool2d(x, 1), { { { { 8.5 } } } })
    local y, idx = nn.MaxPool2d(2, { return_indices = true })(x)
    H.close(y, { { { { 6, 8 }, { 14, 16 } } } })
    H.equal(idx, { { { { 6, 8 }, { 14, 16 } } } })
  end)

  it("gradients flow to every parameter of a CNN", function()
    local m = nn.Sequential(nn.Conv2d(1, 4, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(4, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)):double()
    local x = tide.randn({ 2, 1, 8, 8 }, "float64")
    F.cross_entropy(m(x), tide.tensor({ 1, 3 }, "int64")):backward()
    for name, p in m:named_parameters() do
      assert.is_not_nil(p.grad, name)
      assert.are.same(p:shape(), p.grad:shape())
    end
    local w = m[1].weight:detach():clone():requires_grad_()
    assert.is_true(tide.autograd.gradcheck(function(ww)
      return F.max_pool2d(F.conv2d(x, ww, nil, { padding = 1 }):relu(), 2)
    end, { w }))
  end)

  it("prints like PyTorch", function()
    assert.are.equal("Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))",
      tostring(nn.Conv2d(1, 32, 3, { padding = 1 })))
    assert.are.equal("Conv2d(4, 8, kernel_size=(3, 1), stride=(2, 2), groups=2, bias=false)",
      tostring(nn.Conv2d(4, 8, { 3, 1 }, { stride = 2, groups = 2, bias = false })))
    assert.are.equal("AdaptiveAvgPool2d(output_size=(1, 1))", tostring(nn.AdaptiveAvgPool2d(1)))
  end)

  it("rejects bad arguments with clear errors", function()
    assert.has_error(function() nn.Conv2d(3, 4, 3, { groups = 2 }) end,
      "Conv2d: in_channels (3) and out_channels (4) must be divisible by groups (2)")
    assert.has_error(function() nn.Conv2d(0, 4, 3) end, "Conv2d: in_channels must be a positive integer, got 0")
    assert.has_error(function() nn.Conv2d(1, 4, 3)(tide.zeros(4, 4)) end,
      "conv2d: expects a 3-d (C, H, W) or 4-d (N, C, H, W) input, got 2-d")
    assert.has_error(function() F.max_pool2d("x", 2) end, "max_pool2d: input must be a tensor, got string")
  end)

  it("a small CNN learns to tell horizontal from vertical bars", function()
    tide.manual_seed(3)
    local n = 64
    local x = tide.zeros(n, 1, 6, 6)
    local y = tide.zeros({ n }, "int64")
    for i = 1, n do
      local k = (i - 1) % 6 + 1
      if i % 2 == 0 then x[{ i, 1, k }] = 1; y[i] = 1 else x[{ i, 1, {}, k }] = 1; y[i] = 2 end
    end
    local m = nn.Sequential(nn.Conv2d(1, 4, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
      nn.Linear(36, 2))
    local opt = tide.optim.Adam(m:parameters(), { lr = 0.05 })
    local loss
    for _ = 1, 60 do
      loss = F.cross_entropy(m(x), y)
      opt:zero_grad()
      loss:backward()
      opt:step()
    end
    assert.is_true(loss:item() < 0.05, "loss " .. loss:item())
    assert.are.equal(n, m(x):argmax(2):eq(y):sum():item())
  end)
end)
