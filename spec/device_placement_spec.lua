-- Everything tide.nn, tide.optim and autograd make for a model stays on the
-- model's device: a tensor made on the default device instead (a mask, a
-- probability, a one-hot target, an optimizer's state) mixes devices and is
-- refused. cpu:1 stands in for a GPU here, with the default device left at
-- cpu, so a stray tensor fails these specs on any machine; with a GPU,
-- TIDE_SPEC_DEVICE=cuda:0 runs them there.
local tide = require "tide"

local nn, F, optim = tide.nn, tide.nn.functional, tide.optim
local DEV = os.getenv("TIDE_SPEC_DEVICE") or "cpu:1"

local function on_dev(t, what)
  assert.are.equal(DEV, t:device(), what)
  return t
end

describe("models on another device than the default", function()
  local initial = tide.get_default_device()
  if DEV:match("^cuda") and not tide.cuda.is_available() then
    it("(skipped)", function()
      print(("\nskipped: TIDE_SPEC_DEVICE=%s: %s"):format(DEV, select(2, tide.cuda.is_available())))
    end)
    return
  end
  before_each(function()
    tide.set_default_device("cpu")
    tide.manual_seed(1)
  end)
  after_each(function() tide.set_default_device(initial) end)

  it("train a CNN with batch norm, dropout and every optimizer there", function()
    local model = nn.Sequential(
      nn.Conv2d(1, 4, 3, { padding = 1 }), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(4, 8, 3, { padding = 1 }), nn.ReLU(), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
      nn.Dropout(0.25), nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.BatchNorm1d(16), nn.Linear(16, 10))
    model:to(DEV)
    for _, p in ipairs(model:parameters()) do on_dev(p, "parameter") end
    local x = tide.randn(8, 1, 8, 8):to(DEV)
    local y = tide.randint(1, 11, { 8 }):to(DEV)
    for _, name in ipairs { "SGD", "Adam", "AdamW", "RMSprop" } do
      local opts = { lr = 0.01, weight_decay = 0.01 }
      if name == "SGD" then opts.momentum, opts.nesterov = 0.9, true end
      if name == "RMSprop" then opts.momentum, opts.centered = 0.5, true end
      if name == "Adam" then opts.amsgrad = true end
      local opt = optim[name](model:parameters(), opts)
      for _ = 1, 2 do
        opt:zero_grad()
        local out = on_dev(model(x), "output")
        local loss = F.cross_entropy(out, y, { label_smoothing = 0.1 })
          + F.mse_loss(out:softmax(2), F.one_hot(y, 10):float())
          + F.binary_cross_entropy_with_logits(out, F.one_hot(y, 10):float())
        loss:backward()
        opt:step()
        assert.is_true(loss:item() == loss:item(), name .. ": the loss is a number")
      end
      for _, p in ipairs(model:parameters()) do
        on_dev(p.grad, name .. " gradient")
        for k, v in pairs(opt.state[p] or {}) do
          if tide.is_tensor(v) then on_dev(v, name .. " state " .. k) end
        end
      end
    end
    model:eval()
    on_dev(model(x), "eval output")
    -- backward seeds its root's gradient on the root's device
    local w = model:parameters()[1]
    w.grad = nil
    ;(w:sum() / w:detach():sum()):backward()
    on_dev(w.grad, "gradient of a ratio")
  end)

  it("run attention, embeddings and the transformer layer there", function()
    local emb = nn.Embedding(10, 8):to(DEV)
    local ids = tide.randint(1, 11, { 2, 5 }):to(DEV)
    local h = on_dev(emb(ids), "embedding")
    local q = h:reshape(2, 1, 5, 8)
    on_dev(F.scaled_dot_product_attention(q, q, q, { is_causal = true }), "causal attention")
    local mha = nn.MultiheadAttention(8, 2, { batch_first = true }):to(DEV)
    local mask = tide.ones({ 5, 5 }, { dtype = "bool", device = DEV }):triu(1)
    on_dev(mha(h, h, h, { attn_mask = mask }), "attention with a bool mask")
    on_dev(mha(h, h, h, { is_causal = true }), "causal attention module")
    local layer = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0.1, batch_first = true })
    layer:to(DEV)
    local out = on_dev(layer(h, { is_causal = true }), "encoder layer")
    out:sum():backward()
    for _, p in ipairs(layer:parameters()) do on_dev(p.grad, "encoder gradient") end
  end)

  it("draw in place on the tensor's device", function()
    local t = tide.zeros(100, { device = DEV })
    on_dev(t:bernoulli_(), "bernoulli_")
    on_dev(t:bernoulli_(0.3), "bernoulli_(p)")
    on_dev(t:uniform_(-1, 1), "uniform_")
    on_dev(t:normal_(0, 2), "normal_")
    local w = tide.empty({ 4, 3 }, { device = DEV })
    for _, init in ipairs { "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_" } do
      on_dev(nn.init[init](w), init)
    end
  end)
end)
