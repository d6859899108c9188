-- nn transformer stacks: TransformerDecoderLayer against a plain-Lua float64
-- reference built from the same weights (attention, layer norm, post-norm
-- and pre-norm, causal and key padding masks), the batch_first and unbatched
-- layouts, TransformerEncoder / TransformerDecoder as chains of independent
-- copies, nn.Transformer, state_dict names and shapes as PyTorch's,
-- gradcheck, tide.jit.compile against eager, and the errors of bad input.
local tide = require "tide"
local H = require "spec.helpers"
local nn = tide.nn
local gradcheck = tide.autograd.gradcheck

local seed = 271
local function rnd(shape, lo, hi, grad)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local t = tide.tensor(H.nest(H.values(n, lo or -1, hi or 1, seed), shape), "float64")
  seed = seed + 7919
  if grad then t:requires_grad_() end
  return t
end

local function names(iter)
  local r = {}
  for name in iter do r[#r + 1] = name end
  return r
end

-- -- the plain-Lua reference ------------------------------------------------------------

-- rows [n][in] times W^T ([out][in]) plus b
local function lin(X, W, b)
  local r = {}
  for i = 1, #X do
    local row = {}
    for o = 1, #W do
      local s = b and b[o] or 0
      for k = 1, #X[i] do s = s + X[i][k] * W[o][k] end
      row[o] = s
    end
    r[i] = row
  end
  return r
end

local function add(A, B)
  local r = {}
  for i = 1, #A do
    r[i] = {}
    for j = 1, #A[i] do r[i][j] = A[i][j] + B[i][j] end
  end
  return r
end

local function relu(A)
  local r = {}
  for i = 1, #A do
    r[i] = {}
    for j = 1, #A[i] do r[i][j] = math.max(A[i][j], 0) end
  end
  return r
end

local function layer_norm(A, w, b, eps)
  local r = {}
  for i = 1, #A do
    local n, m, v = #A[i], 0, 0
    for j = 1, n do m = m + A[i][j] end
    m = m / n
    for j = 1, n do v = v + (A[i][j] - m) ^ 2 end
    v = v / n
    r[i] = {}
    for j = 1, n do r[i][j] = (A[i][j] - m) / math.sqrt(v + eps) * w[j] + b[j] end
  end
  return r
end

local function slice(t, a, n)
  local r = {}
  for i = 1, n do r[i] = t[a + i - 1] end
  return r
end

-- Multi-head attention of Q [L][E] over K, V [S][E] with the weights P[prefix .. ...];
-- masked(i, j) says whether query i may not see key j.
local function attention(P, prefix, Q, K, V, h, masked)
  local e = #Q[1]
  local hd = e / h
  local W, b = P[prefix .. ".in_proj_weight"], P[prefix .. ".in_proj_bias"]
  local q = lin(Q, slice(W, 1, e), slice(b, 1, e))
  local k = lin(K, slice(W, e + 1, e), slice(b, e + 1, e))
  local v = lin(V, slice(W, 2 * e + 1, e), slice(b, 2 * e + 1, e))
  local out = {}
  for i = 1, #Q do out[i] = {} end
  for hh = 0, h - 1 do
    local off = hh * hd
    for i = 1, #Q do
      local sc, mx = {}, -math.huge
      for j = 1, #K do
        local s = 0
        for d = 1, hd do s = s + q[i][off + d] * k[j][off + d] end
        s = s / math.sqrt(hd)
        if masked(i, j) then s = -math.huge end
        sc[j] = s
        mx = math.max(mx, s)
      end
      local z = 0
      for j = 1, #K do sc[j] = math.exp(sc[j] - mx); z = z + sc[j] end
      for d = 1, hd do
        local s = 0
        for j = 1, #K do s = s + sc[j] / z * v[j][off + d] end
        out[i][off + d] = s
      end
    end
  end
  return lin(out, P[prefix .. ".out_proj.weight"], P[prefix .. ".out_proj.bias"])
end

-- The decoder layer on one sequence: tgt [T][E], mem [S][E].
local function decoder_ref(P, tgt, mem, h, norm_first, self_masked, mem_masked, eps)
  local function norm(i, A) return layer_norm(A, P["norm" .. i .. ".weight"], P["norm" .. i .. ".bias"], eps) end
  local function sa(A) return attention(P, "self_attn", A, A, A, h, self_masked) end
  local function ca(A) return attention(P, "multihead_attn", A, mem, mem, h, mem_masked) end
  local function ff(A)
    return lin(relu(lin(A, P["linear1.weight"], P["linear1.bias"])), P["linear2.weight"], P["linear2.bias"])
  end
  local x = tgt
  if norm_first then
    x = add(x, sa(norm(1, x)))
    x = add(x, ca(norm(2, x)))
    return add(x, ff(norm(3, x)))
  end
  x = norm(1, add(x, sa(x)))
  x = norm(2, add(x, ca(x)))
  return norm(3, add(x, ff(x)))
end

local function tables(m)
  local P = {}
  for name, t in pairs(m:state_dict()) do P[name] = t:totable() end
  return P
end

-- A float64 decoder layer, d_model 4, 2 heads, in evaluation mode, with its
-- norms and biases moved off their identity start, each by different amounts.
local function dec_layer(opts)
  tide.manual_seed(41)
  opts = opts or {}
  opts.dim_feedforward, opts.dtype = 6, "float64"
  if opts.batch_first == nil then opts.batch_first = true end
  local l = nn.TransformerDecoderLayer(4, 2, opts)
  tide.no_grad(function()
    for name, p in l:named_parameters() do
      if name:find("norm") or name:find("bias") then p:add_(rnd(p:shape(), -0.3, 0.3)) end
    end
  end)
  return l:eval()
end

local function causal(i, j) return j > i end
local function never() return false end

describe("nn.TransformerDecoderLayer", function()
  it("matches a plain-Lua reference, post-norm and pre-norm, with causal and padding masks", function()
    local tgt, mem = rnd { 2, 3, 4 }, rnd { 2, 4, 4 }
    local mpad = { { false, false, false, true }, { false, true, false, false } }
    local tpad = { { false, false, true }, { false, false, false } }
    for _, nf in ipairs { false, true } do
      local l = dec_layer({ norm_first = nf })
      local P = tables(l)
      local y = l(tgt, mem, { tgt_is_causal = true, memory_key_padding_mask = tide.tensor(mpad),
        tgt_key_padding_mask = tide.tensor(tpad) })
      local y0 = l(tgt, mem)
      for b = 1, 2 do
        local T, M = tgt:select(1, b):totable(), mem:select(1, b):totable()
        local ref = decoder_ref(P, T, M, 2, nf, function(i, j) return j > i or tpad[b][j] end,
          function(_, j) return mpad[b][j] end, 1e-5)
        H.close(y:select(1, b), ref, 1e-10, 1e-12, "norm_first " .. tostring(nf))
        H.close(y0:select(1, b), decoder_ref(P, T, M, 2, nf, never, never, 1e-5), 1e-10, 1e-12)
      end
    end
  end)

  it("takes explicit masks: float tgt_mask as tgt_is_causal, a bool memory_mask [T, S]", function()
    local l = dec_layer()
    local tgt, mem = rnd { 2, 3, 4 }, rnd { 2, 4, 4 }
    local sq = nn.Transformer.generate_square_subsequent_mask(3, { dtype = "float64" })
    H.close(l(tgt, mem, { tgt_mask = sq }), l(tgt, mem, { tgt_is_causal = true }), 1e-12)
    local mm = { { false, true, false, true }, { true, false, false, false }, { false, false, true, false } }
    local y = l(tgt, mem, { memory_mask = tide.tensor(mm) })
    local P = tables(l)
    for b = 1, 2 do
      H.close(y:select(1, b), decoder_ref(P, tgt:select(1, b):totable(), mem:select(1, b):totable(), 2, false,
        never, function(i, j) return mm[i][j] end, 1e-5), 1e-10, 1e-12)
    end
  end)

  it("keeps the [T, N, E] layout without batch_first, and runs unbatched", function()
    local l = dec_layer()
    local s = dec_layer({ batch_first = false })
    s:load_state_dict(l:state_dict())
    local tgt, mem = rnd { 2, 3, 4 }, rnd { 2, 4, 4 }
    local y = l(tgt, mem, { tgt_is_causal = true })
    H.close(s(tgt:transpose(1, 2), mem:transpose(1, 2), { tgt_is_causal = true }):transpose(1, 2), y, 1e-12)
    H.close(l(tgt:select(1, 2), mem:select(1, 2), { tgt_is_causal = true }), y:select(1, 2), 1e-12)
    local g = nn.TransformerDecoderLayer(4, 2, { dim_feedforward = 8, activation = "gelu" })
    assert.are.same({ 5, 2, 4 }, g(tide.randn(5, 2, 4), tide.randn(3, 2, 4)):shape())
  end)

  it("names and shapes its parameters as PyTorch", function()
    local l = nn.TransformerDecoderLayer(4, 2, { dim_feedforward = 6 })
    local keys = { "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
      "self_attn.out_proj.bias", "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias",
      "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias", "linear1.weight", "linear1.bias",
      "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
      "norm3.weight", "norm3.bias" }
    assert.are.same(keys, l:state_dict_keys())
    local shapes = { { 12, 4 }, { 12 }, { 4, 4 }, { 4 }, { 12, 4 }, { 12 }, { 4, 4 }, { 4 }, { 6, 4 }, { 6 },
      { 4, 6 }, { 4 }, { 4 }, { 4 }, { 4 }, { 4 }, { 4 }, { 4 } }
    local sd = l:state_dict()
    for i, k in ipairs(keys) do assert.are.same(shapes[i], sd[k]:shape(), k) end
    H.equal(l.self_attn.in_proj_bias, tide.zeros(12))
    H.equal(l.norm3.weight, tide.ones(4))
    assert.are.same({ "self_attn.in_proj_weight", "self_attn.out_proj.weight", "multihead_attn.in_proj_weight",
      "multihead_attn.out_proj.weight", "linear1.weight", "linear2.weight", "norm1.weight", "norm2.weight",
      "norm3.weight" }, nn.TransformerDecoderLayer(4, 2, { dim_feedforward = 6, bias = false }):state_dict_keys())
    assert.are.equal(0.1, l.dropout.p)
    assert.are.equal(2048, nn.TransformerDecoderLayer(4, 2).linear1.out_features)
  end)

  it("gradchecks on a tiny float64 case, post-norm and pre-norm", function()
    for _, nf in ipairs { false, true } do
      local l = dec_layer({ norm_first = nf })
      local ins = { rnd({ 1, 2, 4 }, -1, 1, true), rnd({ 1, 3, 4 }, -1, 1, true), l.self_attn.in_proj_weight,
        l.multihead_attn.in_proj_weight, l.linear1.weight, l.norm3.weight }
      assert.is_true(gradcheck(function(t, m)
        return l(t, m, { tgt_is_causal = true, memory_key_padding_mask = tide.tensor({ { false, true, false } }) })
      end, ins))
    end
  end)

  it("gives the eager results under tide.jit.compile", function()
    local l = dec_layer()
    local f = tide.jit.compile(function(t, m)
      return l(t, m, { tgt_is_causal = true, memory_key_padding_mask = tide.tensor({ { false, false, false, true },
        { false, true, false, false } }) })
    end)
    local tgt, mem = rnd { 2, 3, 4 }, rnd { 2, 4, 4 }
    local eager = l(tgt, mem, { tgt_is_causal = true, memory_key_padding_mask = tide.tensor({
      { false, false, false, true }, { false, true, false, false } }) })
    for _ = 1, 3 do H.close(f(tgt, mem), eager, 1e-12) end
    local tgt2 = rnd { 2, 3, 4 }
    H.close(f(tgt2, mem), l(tgt2, mem, { tgt_is_causal = true, memory_key_padding_mask = tide.tensor({
      { false, false, false, true }, { false, true, false, false } }) }), 1e-12)
  end)

  it("raises clear errors", function()
    assert.has_error(function() nn.TransformerDecoderLayer(4, 2, { activation = "swish" }) end,
      "TransformerDecoderLayer: activation must be 'relu', 'gelu', a function or a module, got 'swish'")
    assert.has_error(function() nn.TransformerDecoderLayer(5, 2) end,
      "MultiheadAttention: embed_dim 5 is not divisible by num_heads 2")
    local l = nn.TransformerDecoderLayer(4, 2, { dim_feedforward = 6 })
    assert.has_error(function() l(tide.randn(3, 1, 4), nil) end,
      "TransformerDecoderLayer: memory must be a tensor, got nil")
    assert.has_error(function() l(tide.randn(3, 1, 4), tide.randn(2, 1, 4), { tgt_maks = 1 }) end,
      "TransformerDecoderLayer: unknown option 'tgt_maks'")
    assert.has_error(function() l(tide.randn(3, 1, 4), tide.randn(2, 1, 5)) end,
      "MultiheadAttention: key of shape [2,1,5] has 5 features, expected kdim = 4")
    assert.has_error(function()
      l(tide.randn(3, 1, 4), tide.randn(2, 1, 4), { memory_mask = tide.ones(3, 3, "bool") })
    end,
      "MultiheadAttention: attn_mask of shape [3,3] must be [L,S] = [3,2] or [N*num_heads,L,S] = [2,3,2]")
  end)
end)

describe("nn.TransformerEncoder and nn.TransformerDecoder", function()
  it("stack independent copies of the layer", function()
    tide.manual_seed(5)
    local layer = nn.TransformerEncoderLayer(4, 2, { dim_feedforward = 6, dtype = "float64" })
    local enc = nn.TransformerEncoder(layer, 3, { norm = nn.LayerNorm(4, { dtype = "float64" }) })
    assert.are.equal(3, #enc.layers)
    assert.are.equal(3, enc.num_layers)
    for i = 1, 3 do
      assert.are_not.equal(layer, enc.layers[i])
      H.equal(enc.layers[i].linear1.weight, layer.linear1.weight)   -- all start from the layer's weights
      assert.is_true(enc.layers[i].linear1.weight.requires_grad)
      assert.is_true(enc.layers[i].linear1.weight.is_leaf)
    end
    local before = layer.linear1.weight:clone()
    tide.no_grad(function() enc.layers[2].linear1.weight:fill_(0.5) end)
    H.equal(enc.layers[1].linear1.weight, before)
    H.equal(enc.layers[3].linear1.weight, before)
    H.equal(layer.linear1.weight, before)
    assert.are.equal(3 * #layer:parameters() + 2, #enc:parameters())
    assert.are.same({ 4, 6 }, enc:state_dict()["layers.2.linear2.weight"]:shape())
    assert.is_not_nil(enc:state_dict()["layers.0.self_attn.in_proj_weight"])
    assert.is_not_nil(enc:state_dict()["norm.bias"])
  end)

  it("apply their layers in turn, with the masks, then the norm", function()
    tide.manual_seed(6)
    local enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, { dim_feedforward = 6, dtype = "float64" }), 2,
      { norm = nn.LayerNorm(4, { dtype = "float64" }) }):eval()
    tide.no_grad(function() enc.layers[2].linear2.weight:mul_(-2) end)
    local x = rnd { 5, 2, 4 }
    local pad = tide.tensor({ { false, false, false, true, true }, { false, false, false, false, false } })
    local o = { src_mask = nn.Transformer.generate_square_subsequent_mask(5, { dtype = "float64" }),
      src_key_padding_mask = pad }
    local ref = enc.norm(enc.layers[2](enc.layers[1](x, o), o))
    H.close(enc(x, { mask = o.src_mask, src_key_padding_mask = pad }), ref, 1e-12)
    H.close(enc(x, { is_causal = true, src_key_padding_mask = pad }), ref, 1e-12)
    local nonorm = nn.TransformerEncoder(enc.layers[1], 1)
    assert.is_nil(nonorm.norm)
    H.close(nonorm(x), enc.layers[1](x), 1e-12)

    local dec = nn.TransformerDecoder(dec_layer({ batch_first = false }), 2,
      { norm = nn.LayerNorm(4, { dtype = "float64" }) })
    tide.no_grad(function() dec.layers[1].linear1.bias:add_(0.25) end)
    local tgt, mem = rnd { 3, 2, 4 }, rnd { 4, 2, 4 }
    local d = { tgt_is_causal = true, memory_key_padding_mask = tide.tensor({ { false, false, true, false },
      { false, false, false, false } }) }
    H.close(dec(tgt, mem, d), dec.norm(dec.layers[2](dec.layers[1](tgt, mem, d), mem, d)), 1e-12)
    assert.are.same({ "layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias" },
      { dec:state_dict_keys()[1], dec:state_dict_keys()[2] })
    assert.are.equal("norm.bias", dec:state_dict_keys()[#dec:state_dict_keys()])
  end)

  it("raise clear errors", function()
    assert.has_error(function() nn.TransformerEncoder(nil, 2) end,
      "TransformerEncoder: argument 1 must be a layer module, got nil")
    assert.has_error(function()
      nn.TransformerDecoder(nn.TransformerDecoderLayer(4, 2, { dim_feedforward = 4 }), -1)
    end,
      "TransformerDecoder: num_layers must be a non-negative integer, got -1")
    assert.has_error(function() nn.TransformerEncoder(nn.Identity(), 2, { norm = 3 }) end,
      "TransformerEncoder: norm must be a module, got number")
    assert.has_error(function() nn.TransformerEncoder(nn.Identity(), 1)(tide.randn(2, 4), { src_mask = 1 }) end,
      "TransformerEncoder: unknown option 'src_mask'")
  end)
end)

describe("nn.Transformer", function()
  local function model(opts)
    tide.manual_seed(8)
    opts = opts or {}
    opts.num_encoder_layers, opts.num_decoder_layers, opts.dim_feedforward = 2, 1, 6
    opts.dtype = "float64"
    return nn.Transformer(4, 2, opts):eval()
  end

  it("is the encoder then the decoder, named as PyTorch", function()
    local m = model()
    local src, tgt = rnd { 5, 2, 4 }, rnd { 3, 2, 4 }
    local spad = tide.tensor({ { false, false, false, false, true }, { false, false, false, false, false } })
    local tmask = nn.Transformer.generate_square_subsequent_mask(3, { dtype = "float64" })
    local y = m(src, tgt, { tgt_mask = tmask, src_key_padding_mask = spad, memory_key_padding_mask = spad })
    local mem = m.encoder(src, { src_key_padding_mask = spad })
    H.close(y, m.decoder(tgt, mem, { tgt_mask = tmask, memory_key_padding_mask = spad }), 1e-12)
    assert.are.same({ 3, 2, 4 }, y:shape())
    local keys = m:state_dict_keys()
    assert.are.equal("encoder.layers.0.self_attn.in_proj_weight", keys[1])
    assert.are.equal(12 * 2 + 2 + 18 + 2, #keys)
    local sd = m:state_dict()
    for _, k in ipairs { "encoder.layers.1.linear2.bias", "encoder.norm.weight", "decoder.layers.0.norm3.bias",
                         "decoder.layers.0.multihead_attn.out_proj.weight", "decoder.norm.bias" } do
      assert.is_not_nil(sd[k], k)
    end
    assert.is_nil(sd["decoder.layers.1.norm1.weight"])
    assert.are.same({ 6, 4 }, sd["decoder.layers.0.linear1.weight"]:shape())
    -- every matrix drawn again Xavier-uniform: the copies of a layer no longer agree
    assert.is_false(pcall(H.equal, m.encoder.layers[1].linear1.weight, m.encoder.layers[2].linear1.weight))
    local bound = math.sqrt(6 / (4 + 6))
    assert.is_true(m.encoder.layers[1].linear1.weight:abs():max():item() <= bound)
    H.equal(m.encoder.layers[1].linear1.bias, m.encoder.layers[2].linear1.bias)   -- vectors keep theirs
    assert.are.equal(4, m.d_model)
    assert.are.equal(2, m.nhead)
  end)

  it("takes batch_first, unbatched input and the options form", function()
    local m = model({ batch_first = true })
    local s = model()
    s:load_state_dict(m:state_dict())
    local src, tgt = rnd { 2, 5, 4 }, rnd { 2, 3, 4 }
    local y = m(src, tgt, { tgt_is_causal = true })
    H.close(s(src:transpose(1, 2), tgt:transpose(1, 2), { tgt_is_causal = true }):transpose(1, 2), y, 1e-12)
    H.close(m(src:select(1, 1), tgt:select(1, 1), { tgt_is_causal = true }), y:select(1, 1), 1e-12)
    local o = nn.Transformer({ d_model = 8, nhead = 4, num_encoder_layers = 1, num_decoder_layers = 1,
      dim_feedforward = 8 })
    assert.are.equal(8, o.d_model)
    assert.are.same({ 3, 1, 8 }, o(tide.randn(2, 1, 8), tide.randn(3, 1, 8)):shape())
    local dflt = nn.Transformer
    assert.is_function(dflt.generate_square_subsequent_mask)
  end)

  it("makes the causal mask", function()
    local inf = -math.huge
    H.equal(nn.Transformer.generate_square_subsequent_mask(3), { { 0, inf, inf }, { 0, 0, inf }, { 0, 0, 0 } })
    assert.are.equal("float32", nn.Transformer.generate_square_subsequent_mask(2):dtype())
    assert.are.same({ 0, 0 }, nn.Transformer.generate_square_subsequent_mask(0):shape())
  end)

  it("raises clear errors", function()
    local m = model()
    assert.has_error(function() m(rnd { 5, 2, 4 }, rnd { 3, 1, 4 }) end,
      "Transformer: the batch number of src [5,2,4] and tgt [3,1,4] must be equal")
    assert.has_error(function() m(rnd { 5, 2, 4 }, rnd { 3, 2, 3 }) end,
      "Transformer: the feature number of src [5,2,4] and tgt [3,2,3] must be equal to d_model 4")
    assert.has_error(function() m(rnd { 5, 2, 4 }, rnd { 3, 4 }) end,
      "Transformer: src and tgt must both be 3-d (batched) or 2-d (unbatched), got [5,2,4] and [3,4]")
    assert.has_error(function() nn.Transformer(4, 2, { custom_encoder = 1 }) end,
      "Transformer: custom_encoder must be a module, got number")
    assert.has_error(function() nn.Transformer.generate_square_subsequent_mask(-1) end,
      "generate_square_subsequent_mask: sz must be a non-negative integer, got -1")
  end)
end)
