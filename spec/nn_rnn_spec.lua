-- nn.RNN / LSTM / GRU and their cells: values against a plain-Lua float64
-- reference (several layers, both directions, batch_first, unbatched, with
-- and without h_0, without bias, an empty batch), parameter names, shapes and
-- initialisation, dropout between layers, gradcheck through the input, the
-- states and the weights, the errors, a tiny LSTM trained with Adam, and an
-- LSTM forward under tide.jit.compile.
local tide = require "tide"
local H = require "spec.helpers"
local nn = tide.nn

local gradcheck = tide.autograd.gradcheck

local vals = H.random_tables(7950)   -- vals(shape, lo, hi): nested tables of values in [lo, hi)
local function f64(t) return tide.tensor(t, "float64") end
local function zeros(n)
  local r = {}
  for i = 1, n do r[i] = 0 end
  return r
end

-- -- the reference --------------------------------------------------------------------------

local function sigm(v) return 1 / (1 + math.exp(-v)) end
local function affine(w, b, x)
  local r = {}
  for g = 1, #w do
    local s = b and b[g] or 0
    for k = 1, #x do s = s + w[g][k] * x[k] end
    r[g] = s
  end
  return r
end

-- One step of one sample: mode "tanh", "relu", "lstm" or "gru"; p {w_ih, w_hh, b_ih, b_hh}.
local function ref_step(mode, p, x, h, c)
  local hs = #h
  local gi, gh = affine(p.w_ih, p.b_ih, x), affine(p.w_hh, p.b_hh, h)
  local hn, cn = {}, {}
  for j = 1, hs do
    if mode == "tanh" then
      hn[j] = math.tanh(gi[j] + gh[j])
    elseif mode == "relu" then
      hn[j] = math.max(0, gi[j] + gh[j])
    elseif mode == "lstm" then
      local i, f = sigm(gi[j] + gh[j]), sigm(gi[hs + j] + gh[hs + j])
      local g, o = math.tanh(gi[2 * hs + j] + gh[2 * hs + j]), sigm(gi[3 * hs + j] + gh[3 * hs + j])
      cn[j] = f * c[j] + i * g
      hn[j] = o * math.tanh(cn[j])
    else
      local r, z = sigm(gi[j] + gh[j]), sigm(gi[hs + j] + gh[hs + j])
      local n = math.tanh(gi[2 * hs + j] + r * gh[2 * hs + j])
      hn[j] = (1 - z) * n + z * h[j]
    end
  end
  return hn, cn
end

local function params_of(m, sfx)
  local function get(name) local t = m[name .. sfx]; return t and t:totable() end
  return { w_ih = get("weight_ih"), w_hh = get("weight_hh"), b_ih = get("bias_ih"), b_hh = get("bias_hh") }
end

-- The whole layer stack on X [L][N][in] (sequence first), h0/c0 [layers*D][N][H]
-- or nil; zero_between zeroes each layer's output but the last (dropout p = 1).
local function ref_rnn(mode, m, X, h0, c0, zero_between)
  local L, N, hs = #X, #X[1], m.hidden_size
  local D = m.bidirectional and 2 or 1
  local hn, cn = {}, {}
  local inp = X
  for l = 0, m.num_layers - 1 do
    local out = {}
    for t = 1, L do
      out[t] = {}
      for n = 1, N do out[t][n] = {} end
    end
    for d = 1, D do
      local p = params_of(m, "_l" .. l .. (d == 2 and "_reverse" or ""))
      local idx = l * D + d
      hn[idx], cn[idx] = {}, {}
      for n = 1, N do
        local h, c = h0 and h0[idx][n] or zeros(hs), c0 and c0[idx][n] or zeros(hs)
        for s = 1, L do
          local t = d == 1 and s or L - s + 1
          h, c = ref_step(mode, p, inp[t][n], h, c)
          for j = 1, hs do out[t][n][(d - 1) * hs + j] = zero_between and l < m.num_layers - 1 and 0 or h[j] end
        end
        hn[idx][n], cn[idx][n] = h, c
      end
    end
    inp = out
  end
  return inp, hn, cn
end

-- [A][B][...] -> [B][A][...]
local function swap12(t)
  local r = {}
  for i = 1, #t[1] do
    r[i] = {}
    for j = 1, #t do r[i][j] = t[j][i] end
  end
  return r
end
-- [A][1][...] -> [A][...] and back
local function drop2(t)
  local r = {}
  for i = 1, #t do r[i] = t[i][1] end
  return r
end
local function add2(t)
  local r = {}
  for i = 1, #t do r[i] = { t[i] } end
  return r
end

local classes = {
  { name = "RNN", mode = "tanh", opts = {} },
  { name = "RNN", mode = "relu", opts = { nonlinearity = "relu" } },
  { name = "LSTM", mode = "lstm", opts = {} },
  { name = "GRU", mode = "gru", opts = {} },
}
local function make(c, extra)
  local o = { dtype = "float64" }
  for k, v in pairs(c.opts) do o[k] = v end
  for k, v in pairs(extra or {}) do o[k] = v end
  return nn[c.name](3, 4, o)
end
local function label(c) return c.name .. "/" .. c.mode end

-- -- the layers -----------------------------------------------------------------------------------

describe("nn.RNN, nn.LSTM, nn.GRU", function()
  local L, N, IN, HS = 3, 2, 3, 4

  it("match the reference with 2 layers, both directions and a given h_0 (c_0)", function()
    for _, c in ipairs(classes) do
      local m = make(c, { num_layers = 2, bidirectional = true })
      local X, h0, c0 = vals({ L, N, IN }), vals({ 4, N, HS }), vals({ 4, N, HS })
      local hx = c.mode == "lstm" and { f64(h0), f64(c0) } or f64(h0)
      local out, hn, cn = m(f64(X), hx)
      local eo, eh, ec = ref_rnn(c.mode, m, X, h0, c0)
      H.close(out, eo, 1e-10, 1e-12, label(c) .. " output")
      H.close(hn, eh, 1e-10, 1e-12, label(c) .. " h_n")
      if c.mode == "lstm" then H.close(cn, ec, 1e-10, 1e-12, "LSTM c_n") else assert.is_nil(cn) end
      assert.are.equal("float64", out:dtype())
      assert.are.equal(tide.get_default_device(), out:device())
    end
  end)

  it("match the reference with one layer, no h_0 (zeros) and no bias", function()
    for _, c in ipairs(classes) do
      for _, bias in ipairs { true, false } do
        local m = make(c, { bias = bias })
        assert.are.equal(bias, m.bias_ih_l0 ~= nil)
        local X = vals({ L, N, IN })
        local out, hn, cn = m(f64(X))
        local eo, eh, ec = ref_rnn(c.mode, m, X)
        H.close(out, eo, 1e-10, 1e-12, label(c) .. " output")
        H.close(hn, eh, 1e-10, 1e-12, label(c) .. " h_n")
        if c.mode == "lstm" then H.close(cn, ec, 1e-10, 1e-12, "LSTM c_n") end
      end
    end
  end)

  it("match the reference over a longer sequence (time steps sliced in blocks)", function()
    for _, c in ipairs(classes) do
      local m = make(c, { bidirectional = true })
      local X = vals({ 10, 1, IN })
      local out, hn = m(f64(X))
      local eo, eh = ref_rnn(c.mode, m, X)
      H.close(out, eo, 1e-10, 1e-12, label(c) .. " output")
      H.close(hn, eh, 1e-10, 1e-12, label(c) .. " h_n")
    end
  end)

  it("take [N, L, in] with batch_first (a non-contiguous input too) and return [N, L, D*H]", function()
    for _, c in ipairs(classes) do
      local m = make(c, { batch_first = true, bidirectional = true })
      local X, h0 = vals({ L, N, IN }), vals({ 2, N, HS })
      local hx = c.mode == "lstm" and { f64(h0), f64(h0) } or f64(h0)
      local xb = f64(X):transpose(1, 2)   -- [N, L, in], not contiguous
      assert.is_false(xb:is_contiguous())
      local out, hn = m(xb, hx)
      local eo, eh = ref_rnn(c.mode, m, X, h0, h0)
      assert.are.same({ N, L, 2 * HS }, out:shape())
      H.close(out, swap12(eo), 1e-10, 1e-12, label(c) .. " output")
      H.close(hn, eh, 1e-10, 1e-12, label(c) .. " h_n")   -- h_n stays [layers*D, N, H]
      H.close(m(xb:contiguous(), hx), swap12(eo), 1e-10, 1e-12, label(c) .. " contiguous")
    end
  end)

  it("take one unbatched sequence [L, in] with h_0 [layers*D, H]", function()
    for _, c in ipairs(classes) do
      for _, bf in ipairs { false, true } do   -- batch_first does not apply to unbatched input
        local m = make(c, { num_layers = 2, batch_first = bf })
        local X, h0 = vals({ L, IN }), vals({ 2, HS })
        local hx = c.mode == "lstm" and { f64(h0), f64(h0) } or f64(h0)
        local out, hn, cn = m(f64(X), hx)
        local eo, eh, ec = ref_rnn(c.mode, m, add2(X), add2(h0), add2(h0))
        H.close(out, drop2(eo), 1e-10, 1e-12, label(c) .. " output")
        H.close(hn, drop2(eh), 1e-10, 1e-12, label(c) .. " h_n")
        if c.mode == "lstm" then H.close(cn, drop2(ec), 1e-10, 1e-12, "LSTM c_n") end
        local out0 = m(f64(X))
        H.close(out0, drop2((ref_rnn(c.mode, m, add2(X)))), 1e-10, 1e-12, label(c) .. " without h_0")
      end
    end
  end)

  it("run an empty batch", function()
    for _, c in ipairs(classes) do
      local m = make(c, { num_layers = 2, bidirectional = true })
      local out, hn, cn = m(tide.zeros({ L, 0, IN }, "float64"))
      assert.are.same({ L, 0, 2 * HS }, out:shape())
      assert.are.same({ 4, 0, HS }, hn:shape())
      if c.mode == "lstm" then assert.are.same({ 4, 0, HS }, cn:shape()) end
    end
  end)

  it("apply dropout to each layer's output but the last, in training only", function()
    for _, c in ipairs(classes) do
      local m = make(c, { num_layers = 2, dropout = 1 })
      local X = vals({ L, N, IN })
      -- p = 1 zeroes layer 0's output: layer 1 sees zeros; the last layer is not dropped
      H.close(m(f64(X)), (ref_rnn(c.mode, m, X, nil, nil, true)), 1e-10, 1e-12, label(c) .. " training")
      m:eval()
      H.close(m(f64(X)), (ref_rnn(c.mode, m, X)), 1e-10, 1e-12, label(c) .. " eval")
      local one = make(c, { dropout = 1 })   -- one layer: nothing between layers
      H.close(one(f64(X)), (ref_rnn(c.mode, one, X)), 1e-10, 1e-12, label(c) .. " one layer")
    end
  end)

  it("name and shape their parameters as PyTorch does", function()
    local m = nn.LSTM(3, 4, { num_layers = 2, bidirectional = true })
    local keys, want = m:state_dict_keys(), {}
    for l = 0, 1 do
      for _, sfx in ipairs { "", "_reverse" } do
        for _, n in ipairs { "weight_ih", "weight_hh", "bias_ih", "bias_hh" } do
          want[#want + 1] = n .. "_l" .. l .. sfx
        end
      end
    end
    assert.are.same(want, keys)
    local sd = m:state_dict()
    assert.are.same({ 16, 3 }, sd.weight_ih_l0:shape())
    assert.are.same({ 16, 4 }, sd.weight_hh_l0_reverse:shape())
    assert.are.same({ 16, 8 }, sd.weight_ih_l1:shape())   -- later layers take both directions
    assert.are.same({ 16 }, sd.bias_hh_l1_reverse:shape())
    assert.are.same({ 12, 3 }, nn.GRU(3, 4).weight_ih_l0:shape())
    assert.are.same({ 4, 4 }, nn.RNN(3, 4, { num_layers = 2 }).weight_ih_l1:shape())
    assert.are.same({ "weight_ih_l0", "weight_hh_l0" }, nn.GRU(3, 4, { bias = false }):state_dict_keys())
    assert.are.equal(8, #nn.RNN(3, 4, { num_layers = 2 }):parameters())
  end)

  it("draw every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) in the given dtype", function()
    local m = nn.LSTM(3, 16, { bias = true })
    local k = 0.25
    for name, p in pairs(m:state_dict()) do
      assert.are.equal("float32", p:dtype())
      assert.is_true(m[name].requires_grad, name)
      assert.is_true(p:max():item() <= k and p:min():item() >= -k, name)
      assert.is_true(p:max():item() > 0.7 * k and p:min():item() < -0.7 * k, name)
    end
    assert.are.equal("float64", nn.GRU(2, 2, { dtype = "float64" }).weight_hh_l0:dtype())
  end)

  it("print their options as PyTorch does", function()
    assert.are.equal("LSTM(3, 4)", tostring(nn.LSTM(3, 4)))
    assert.are.equal("RNN(3, 4, num_layers=2, nonlinearity='relu', bias=false, batch_first=true, dropout=0.5, " ..
      "bidirectional=true)", tostring(nn.RNN(3, 4, { num_layers = 2, nonlinearity = "relu", bias = false,
        batch_first = true, dropout = 0.5, bidirectional = true })))
    assert.are.equal("GRUCell(3, 4, bias=false)", tostring(nn.GRUCell(3, 4, { bias = false })))
    assert.are.equal("RNNCell(3, 4, nonlinearity='relu')", tostring(nn.RNNCell(3, 4, { nonlinearity = "relu" })))
  end)

  it("pass gradients to the input, h_0, c_0 and the weights (gradcheck)", function()
    local lstm = nn.LSTM(2, 2, { bidirectional = true, dtype = "float64" })
    local x, h0, c0 = f64(vals({ 2, 2, 2 })), f64(vals({ 2, 2, 2 })), f64(vals({ 2, 2, 2 }))
    for _, t in ipairs { x, h0, c0 } do t:requires_grad_() end
    assert.is_true(gradcheck(function(a, h, c)
      local out, hn, cn = lstm(a, { h, c })
      return { out, hn, cn }
    end, { x, h0, c0, lstm.weight_hh_l0_reverse, lstm.bias_ih_l0 }))
    local gru = nn.GRU(2, 2, { num_layers = 2, dtype = "float64" })
    assert.is_true(gradcheck(function(a, h)
      local out, hn = gru(a, h)
      return { out, hn }
    end, { x, h0, gru.weight_hh_l1, gru.bias_hh_l0, gru.weight_ih_l1 }))
    local rnn = nn.RNN(2, 2, { dtype = "float64" })
    assert.is_true(gradcheck(function(a, h) return rnn(a, h:narrow(1, 1, 1)) end, { x, h0, rnn.bias_hh_l0 }))
  end)

  it("set a gradient on every parameter", function()
    tide.manual_seed(11)
    for _, c in ipairs(classes) do
      local m = nn[c.name](3, 4, { num_layers = 2, bidirectional = true, nonlinearity = c.opts.nonlinearity })
      local out, hn = m(tide.randn(L, N, IN))
      ;(out:sum() + hn:sum()):backward()
      for name, p in m:named_parameters() do
        assert.is_not_nil(p.grad, label(c) .. " " .. name)
        -- (relu units may be inactive throughout, and leave a zero gradient)
        if c.mode ~= "relu" then assert.is_true(p.grad:abs():sum():item() > 0, label(c) .. " " .. name) end
      end
    end
  end)

  it("follow module:to and keep to the input's device", function()
    local m = nn.GRU(3, 4):to("float64")
    local out, hn = m(tide.randn(L, N, IN, "float64"))
    assert.are.equal("float64", out:dtype())
    assert.are.equal("float64", hn:dtype())
    assert.are.equal(tide.get_default_device(), hn:device())
  end)

  it("reject bad options", function()
    assert.has_error(function() nn.RNN(3, 4, { nonlinearity = "sigmoid" }) end,
      "RNN: nonlinearity must be 'tanh' or 'relu', got sigmoid")
    assert.has_error(function() nn.RNNCell(3, 4, { nonlinearity = 1 }) end,
      "RNNCell: nonlinearity must be 'tanh' or 'relu', got 1")
    assert.has_error(function() nn.LSTM(3, 4, { num_layers = 0 }) end,
      "LSTM: num_layers must be a positive integer, got 0")
    assert.has_error(function() nn.GRU(3, 4, { num_layers = 1.5 }) end,
      "GRU: num_layers must be a positive integer, got 1.5")
    assert.has_error(function() nn.GRU(3, 0) end, "GRU: hidden_size must be a positive integer, got 0")
    assert.has_error(function() nn.LSTMCell(-1, 4) end, "LSTMCell: input_size must be a non-negative integer, got -1")
    assert.has_error(function() nn.LSTM(3, 4, { dropout = 2 }) end,
      "LSTM: dropout must be a number between 0 and 1, got 2")
    assert.has_error(function() nn.LSTM(3, 4, { proj_size = 2 }) end, "LSTM: proj_size is not supported")
    assert.has_error(function() nn.LSTM(3, 4, 2) end, "LSTM: options must be a table, got number")
    assert.has_error(function() nn.GRU(3, 4, { nonlinearity = "relu" }) end,
      "GRU: nonlinearity is an option of RNN and RNNCell only")
    assert.has_error(function() nn.LSTMCell(3, 4, { nonlinearity = "tanh" }) end,
      "LSTMCell: nonlinearity is an option of RNN and RNNCell only")
  end)

  it("reject bad inputs and states", function()
    local lstm, gru = nn.LSTM(3, 4, { num_layers = 2 }), nn.GRU(3, 4)
    assert.has_error(function() lstm(tide.zeros(2, 2, 2, 3)) end,
      "LSTM: expected a 2-d (unbatched) or 3-d (batched) input, got shape [2,2,2,3]")
    assert.has_error(function() gru(tide.zeros(3)) end,
      "GRU: expected a 2-d (unbatched) or 3-d (batched) input, got shape [3]")
    assert.has_error(function() lstm(tide.zeros(3, 2, 5)) end, "LSTM: input size must be 3, got 5")
    assert.has_error(function() lstm(tide.zeros(0, 2, 3)) end,
      "LSTM: expected a sequence length above 0, got input of shape [0,2,3]")
    assert.has_error(function() gru("x") end, "GRU: input must be a tensor, got string")
    assert.has_error(function() gru(tide.zeros({ 3, 2, 3 }, "float64")) end,
      "GRU: input is float64 but the parameters are float32")
    assert.has_error(function() gru(tide.zeros(3, 2, 3), tide.zeros(2, 2, 4)) end,
      "GRU: expected hx of shape [1,2,4], got [2,2,4]")
    assert.has_error(function() gru(tide.zeros(3, 3), tide.zeros(1, 2, 4)) end,
      "GRU: expected hx of shape [1,4], got [1,2,4]")
    assert.has_error(function() lstm(tide.zeros(3, 2, 3), tide.zeros(2, 2, 4)) end,
      "LSTM: hx must be a table {h_0, c_0}, got a tensor")
    assert.has_error(function() lstm(tide.zeros(3, 2, 3), { tide.zeros(2, 2, 4) }) end,
      "LSTM: c_0 must be a tensor, got nil")
    assert.has_error(function() lstm(tide.zeros(3, 2, 3), { tide.zeros(2, 2, 4), tide.zeros(2, 1, 4) }) end,
      "LSTM: expected c_0 of shape [2,2,4], got [2,1,4]")
    local h64 = tide.zeros({ 2, 2, 4 }, "float64")
    assert.has_error(function() lstm(tide.zeros(3, 2, 3), { h64, tide.zeros(2, 2, 4) }) end,
      "LSTM: h_0 is float64 but the parameters are float32")
    local here = tide.get_default_device()
    local other = here == "cpu:1" and "cpu" or "cpu:1"
    assert.has_error(function() gru(tide.zeros(3, 2, 3, { device = other })) end,
      "GRU: input is on " .. other .. " but the parameters are on " .. here)
  end)
end)

-- -- the cells ------------------------------------------------------------------------------------

describe("nn.RNNCell, nn.LSTMCell, nn.GRUCell", function()
  local cells = {
    { name = "RNNCell", mode = "tanh", opts = {} },
    { name = "RNNCell", mode = "relu", opts = { nonlinearity = "relu" } },
    { name = "LSTMCell", mode = "lstm", opts = {} },
    { name = "GRUCell", mode = "gru", opts = {} },
  }

  it("match one step of the reference, batched, unbatched, without state and without bias", function()
    for _, c in ipairs(cells) do
      for _, bias in ipairs { true, false } do
        local m = make(c, { bias = bias })
        assert.are.same({ "weight_ih", "weight_hh", bias and "bias_ih" or nil, bias and "bias_hh" or nil },
          m:state_dict_keys())
        local G = ({ tanh = 4, relu = 4, lstm = 16, gru = 12 })[c.mode]
        assert.are.same({ G, 3 }, m.weight_ih:shape())
        assert.are.same({ G, 4 }, m.weight_hh:shape())
        local p = params_of(m, "")
        local X, h, cc = vals({ 2, 3 }), vals({ 2, 4 }), vals({ 2, 4 })
        local hx = c.mode == "lstm" and { f64(h), f64(cc) } or f64(h)
        local h1, c1 = m(f64(X), hx)
        local eh, ec = {}, {}
        for n = 1, 2 do eh[n], ec[n] = ref_step(c.mode, p, X[n], h[n], cc[n]) end
        H.close(h1, eh, 1e-10, 1e-12, label(c) .. " h'")
        if c.mode == "lstm" then H.close(c1, ec, 1e-10, 1e-12, "LSTMCell c'") else assert.is_nil(c1) end
        -- unbatched
        local hx1 = c.mode == "lstm" and { f64(h[2]), f64(cc[2]) } or f64(h[2])
        local u, uc = m(f64(X[2]), hx1)
        H.close(u, eh[2], 1e-10, 1e-12, label(c) .. " unbatched")
        if c.mode == "lstm" then H.close(uc, ec[2], 1e-10, 1e-12, "LSTMCell unbatched c'") end
        -- no state: zeros
        local z = m(f64(X))
        local ez = {}
        for n = 1, 2 do ez[n] = ref_step(c.mode, p, X[n], zeros(4), zeros(4)) end
        H.close(z, ez, 1e-10, 1e-12, label(c) .. " zero state")
        local e, ec0 = m(tide.zeros({ 0, 3 }, "float64"))   -- an empty batch
        assert.are.same({ 0, 4 }, e:shape())
        if c.mode == "lstm" then assert.are.same({ 0, 4 }, ec0:shape()) end
      end
    end
  end)

  it("pass gradients to the input, the state and the weights (gradcheck)", function()
    local lstm = nn.LSTMCell(2, 3, { dtype = "float64" })
    local x, h, c = f64(vals({ 2, 2 })), f64(vals({ 2, 3 })), f64(vals({ 2, 3 }))
    for _, t in ipairs { x, h, c } do t:requires_grad_() end
    assert.is_true(gradcheck(function(a, b, d)
      local h1, c1 = lstm(a, { b, d })
      return { h1, c1 }
    end, { x, h, c, lstm.weight_ih, lstm.bias_hh }))
    local gru = nn.GRUCell(2, 3, { dtype = "float64" })
    assert.is_true(gradcheck(function(a, b) return gru(a, b) end, { x, h, gru.weight_hh, gru.bias_hh }))
  end)

  it("reject bad inputs and states", function()
    local lstm, rnn = nn.LSTMCell(3, 4), nn.RNNCell(3, 4)
    assert.has_error(function() rnn(tide.zeros(2, 2, 3)) end,
      "RNNCell: expected a 1-d (unbatched) or 2-d (batched) input, got shape [2,2,3]")
    assert.has_error(function() lstm(tide.zeros(2, 5)) end, "LSTMCell: input size must be 3, got 5")
    assert.has_error(function() rnn(tide.zeros(2, 3), tide.zeros(3, 4)) end,
      "RNNCell: expected hx of shape [2,4], got [3,4]")
    assert.has_error(function() rnn(tide.zeros(3), tide.zeros(1, 4)) end,
      "RNNCell: expected hx of shape [4], got [1,4]")
    assert.has_error(function() lstm(tide.zeros(2, 3), tide.zeros(2, 4)) end,
      "LSTMCell: hx must be a table {h, c}, got a tensor")
    assert.has_error(function() lstm(tide.zeros(2, 3), { tide.zeros(2, 4), tide.zeros(2, 3) }) end,
      "LSTMCell: expected c of shape [2,4], got [2,3]")
  end)
end)

-- -- in use -----------------------------------------------------------------------------------------

describe("recurrent layers in use", function()
  it("a tiny LSTM learns to repeat its first input with Adam", function()
    tide.manual_seed(5)
    local lstm, head = nn.LSTM(1, 8, { batch_first = true }), nn.Linear(8, 1)
    local params = lstm:parameters()
    for _, p in ipairs(head:parameters()) do params[#params + 1] = p end
    local opt = tide.optim.Adam(params, { lr = 0.05 })
    local x = tide.tensor(H.nest(H.values(8 * 4, -1, 1, 77), { 8, 4, 1 }))   -- [N, L, 1]
    local y = x:select(2, 1)                                                -- the first step
    local losses = {}
    for i = 1, 30 do
      local out = lstm(x)
      local loss = ((head(out:select(2, 4)) - y) ^ 2):mean()
      opt:zero_grad()
      loss:backward()
      opt:step()
      losses[i] = loss:item()
    end
    assert.is_true(losses[30] < 0.3 * losses[1], string.format("loss %g -> %g", losses[1], losses[30]))
  end)

  it("an LSTM forward under tide.jit.compile gives the eager values", function()
    tide.manual_seed(3)
    local lstm = nn.LSTM(3, 4, { num_layers = 2, bidirectional = true })
    local f = tide.jit.compile(function(x, h, c) return lstm(x, { h, c }) end)
    for i = 1, 3 do   -- eager warm-up, capture, replay
      local x, h, c = tide.randn(3, 2, 3), tide.randn(4, 2, 4), tide.randn(4, 2, 4)
      local o1, h1, c1 = f(x, h, c)
      local o2, h2, c2 = lstm(x, { h, c })
      H.close(o1, o2, 1e-5, 1e-6, "output, call " .. i)
      H.close(h1, h2, 1e-5, 1e-6, "h_n, call " .. i)
      H.close(c1, c2, 1e-5, 1e-6, "c_n, call " .. i)
    end
    assert.are.equal(1, f:stats().captures)
    assert.are.equal(1, f:stats().replays)
  end)
end)
