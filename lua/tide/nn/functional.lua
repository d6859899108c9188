--- tide.nn.functional: the stateless layers and losses of torch.nn.functional,
-- composed of tensor ops, so autograd differentiates them through the ops'
-- own rules. Dimensions and class indices are 1-based, as everywhere in tide.
-- Arguments are checked here, with errors naming the function and the shapes;
-- checks that would need tensor values (an out-of-range class index) are left
-- to the ops (gather, index_select), which name the index and the size.
-- Convolutions and pooling are not here: they come with their own kernels.
-- One instance per Lua state, like tide.nn itself (busted resets package.loaded between files).
do local nn = debug.getregistry()["tide.nn"]; if nn then return nn.functional end end
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local fail = B.fail
local no_grad = tide.no_grad

local F = {}

-- -- argument checks ----------------------------------------------------------------

local shape_str, need_tensor, need_float = args.shape_str, args.need_tensor, args.need_float
local function list_str(l) return "[" .. table.concat(l, ",") .. "]" end

local function need_index(x, fname, what)
  need_tensor(x, fname, what)
  local d = x:dtype()
  if d ~= "int64" and d ~= "int32" then
    fail(string.format("%s: %s must be an int64 or int32 tensor of 1-based indices, got %s", fname, what, d))
  end
end

local function need_prob(p, fname, what)
  if type(p) ~= "number" or p < 0 or p > 1 then
    fail(string.format("%s: %s must be a number between 0 and 1, got %s", fname, what, tostring(p)))
  end
end

-- Whether tensor a broadcasts to shape (a table) without changing it.
local function broadcasts_to(a, shape)
  local sa = a:shape()
  if #sa > #shape then return false end
  for i = 1, #sa do
    local x = sa[#sa - i + 1]
    if x ~= 1 and x ~= shape[#shape - i + 1] then return false end
  end
  return true
end

local function same_shape(a, b)
  if a:dim() ~= b:dim() then return false end
  for i = 1, a:dim() do
    if a:size(i) ~= b:size(i) then return false end
  end
  return true
end

-- Options given as a table, or a reduction given as a string.
local function options(opts, fname)
  if type(opts) == "string" then return { reduction = opts } end
  return args.options(opts, fname)
end

local function reduction_of(opts, fname)
  local r = opts.reduction or "mean"
  if r ~= "mean" and r ~= "sum" and r ~= "none" then
    fail(string.format("%s: reduction must be 'mean', 'sum' or 'none', got %s", fname, tostring(r)))
  end
  return r
end

local function reduce(loss, reduction)
  if reduction == "mean" then return loss:mean() end
  if reduction == "sum" then return loss:sum() end
  return loss
end
F._reduce = reduce   -- for the losses of tide.nn.loss

-- -- linear and activations -----------------------------------------------------------

--- y = x W^T + b.
-- @param input [*, in_features]
-- @param weight [out_features, in_features]
-- @param bias [out_features] or nil
-- @return [*, out_features]
-- @usage local y = F.linear(x, w, b)
function F.linear(input, weight, bias)
  need_float(input, "linear", "input")
  need_float(weight, "linear", "weight")
  if weight:dim() ~= 2 then
    fail(string.format("linear: weight must be 2-d [out_features, in_features], got shape %s", shape_str(weight)))
  end
  if input:dim() == 0 then fail("linear: input must have at least 1 dimension, got a 0-d tensor") end
  if input:size(-1) ~= weight:size(2) then
    fail(string.format("linear: input of shape %s has %d features but weight of shape %s expects %d",
      shape_str(input), input:size(-1), shape_str(weight), weight:size(2)))
  end
  local y = input:matmul(weight:t())
  if bias ~= nil then
    need_float(bias, "linear", "bias")
    if bias:dim() ~= 1 or bias:size(1) ~= weight:size(1) then
      fail(string.format("linear: bias of shape %s does not match weight of shape %s (expected [%d])",
        shape_str(bias), shape_str(weight), weight:size(1)))
    end
    y = y + bias
  end
  return y
end

--- y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o].
-- @param input1 [*, in1_features]
-- @param input2 [*, in2_features] (the same leading dimensions)
-- @param weight [out_features, in1_features, in2_features]
-- @param bias [out_features] or nil
-- @return [*, out_features]
-- @usage local y = F.bilinear(x1, x2, w, b)
function F.bilinear(input1, input2, weight, bias)
  need_float(input1, "bilinear", "input1")
  need_float(input2, "bilinear", "input2")
  need_float(weight, "bilinear", "weight")
  if weight:dim() ~= 3 then
    fail(string.format("bilinear: weight must be 3-d [out_features, in1_features, in2_features], got shape %s",
      shape_str(weight)))
  end
  local out, in1, in2 = weight:size(1), weight:size(2), weight:size(3)
  if input1:dim() == 0 or input1:dim() ~= input2:dim() or input1:size(-1) ~= in1 or input2:size(-1) ~= in2 then
    fail(string.format("bilinear: inputs of shapes %s and %s do not match weight of shape %s " ..
      "(expected [*, %d] and [*, %d])", shape_str(input1), shape_str(input2), shape_str(weight), in1, in2))
  end
  local lead = input1:shape()
  for d = 1, #lead - 1 do
    if input2:size(d) ~= lead[d] then
      fail(string.format("bilinear: inputs of shapes %s and %s differ in their leading dimensions",
        shape_str(input1), shape_str(input2)))
    end
  end
  local x1, x2 = input1:reshape(-1, in1), input2:reshape(-1, in2)
  -- x1 W as [N, out, in2], then contracted with x2 over in2
  local t = x1:matmul(weight:permute(2, 1, 3):reshape(in1, out * in2)):view(-1, out, in2)
  local y = (t * x2:unsqueeze(2)):sum(3)
  if bias ~= nil then
    need_float(bias, "bilinear", "bias")
    if bias:dim() ~= 1 or bias:size(1) ~= out then
      fail(string.format("bilinear: bias of shape %s does not match weight of shape %s (expected [%d])",
        shape_str(bias), shape_str(weight), out))
    end
    y = y + bias
  end
  lead[#lead] = out
  return y:reshape(lead)
end

--- max(x, 0).
-- @usage F.relu(x)
function F.relu(x) need_tensor(x, "relu", "input") return x:relu() end

--- GELU, exact (erf) or with approximate = "tanh".
-- @param x a tensor
-- @param approximate "none" (default) or "tanh"
-- @usage F.gelu(x, "tanh")
function F.gelu(x, approximate) need_tensor(x, "gelu", "input") return x:gelu(approximate) end

--- tanh(x).
-- @usage F.tanh(x)
function F.tanh(x) need_tensor(x, "tanh", "input") return x:tanh() end

--- 1 / (1 + exp(-x)).
-- @usage F.sigmoid(x)
function F.sigmoid(x) need_tensor(x, "sigmoid", "input") return x:sigmoid() end

--- x * sigmoid(x).
-- @usage F.silu(x)
function F.silu(x) need_tensor(x, "silu", "input") return x:silu() end

--- Softmax along dim (required).
-- @param x a tensor
-- @param dim the dimension (1-based, negative from the end)
-- @param dtype optional dtype to compute in
-- @usage F.softmax(logits, -1)
function F.softmax(x, dim, dtype)
  need_tensor(x, "softmax", "input")
  if dim == nil then fail("softmax: a dimension is required") end
  return x:softmax(dim, dtype)
end

--- log(softmax(x)) along dim (required), computed stably.
-- @usage F.log_softmax(logits, 2)
function F.log_softmax(x, dim, dtype)
  need_tensor(x, "log_softmax", "input")
  if dim == nil then fail("log_softmax: a dimension is required") end
  return x:log_softmax(dim, dtype)
end

--- Dropout: in training, zeroes each element with probability p (drawn from
-- tide's generator, so tide.manual_seed makes it reproducible) and scales the
-- others by 1 / (1 - p); otherwise returns x itself.
-- @param x a floating-point tensor
-- @param p the probability of an element being zeroed (default 0.5)
-- @param training whether to drop (default true, as in PyTorch)
-- @return a tensor
-- @usage F.dropout(x, 0.1, model.training)
function F.dropout(x, p, training)
  need_float(x, "dropout", "input")
  if p == nil then p = 0.5 end
  need_prob(p, "dropout", "p")
  if training == false or p == 0 then return x end
  if p == 1 then return x * 0 end
  local keep = tide.empty(x:shape(), { dtype = x:dtype(), device = x:device() }):bernoulli_(1 - p)
  return x * keep * (1 / (1 - p))
end

-- The mask shape of a feature (channel-wise) dropout of x: x's first `lead`
-- sizes (the batch and channel dims, or the channel dim alone), then ones.
local function feature_shape(x, lead)
  local s = {}
  for i = 1, x:dim() do s[i] = i <= lead and x:size(i) or 1 end
  return s
end

-- x with elements (or, for mshape with ones, whole features) dropped: kept
-- ones scaled by 1 / (1 - p), or, with alpha, SELU's alpha dropout, which
-- keeps a standard input's mean and variance: a (x keep + alpha' (keep - 1 + p)),
-- -alpha' = -SELU's scale * alpha its negative saturation and
-- a = 1 / sqrt((alpha'^2 p + 1) (1 - p)), as ATen's.
local ALPHA_PRIME = 1.7580993408473766
local function drop(x, p, mshape, alpha)
  if p == 1 then return x * 0 end
  local keep = tide.empty(mshape, { dtype = x:dtype(), device = x:device() }):bernoulli_(1 - p)
  if not alpha then return x * (keep * (1 / (1 - p))) end
  local a = 1 / math.sqrt((ALPHA_PRIME * ALPHA_PRIME * p + 1) * (1 - p))
  return (x * keep + (keep + (p - 1)) * ALPHA_PRIME) * a
end

-- A feature dropout of an input of lo or hi dimensions (lo: unbatched, unless
-- lo_batched, as dropout2d's 3-d input is in PyTorch): whole channels zeroed.
local function feature_dropout(fname, x, p, training, lo, hi, layouts, lo_batched)
  need_float(x, fname, "input")
  if p == nil then p = 0.5 end
  need_prob(p, fname, "p")
  if x:dim() ~= lo and x:dim() ~= hi then
    fail(string.format("%s: expects a %d-d or %d-d input (%s), got shape %s", fname, lo, hi, layouts, shape_str(x)))
  end
  if not training or p == 0 then return x end
  return drop(x, p, feature_shape(x, (x:dim() == hi or lo_batched) and 2 or 1))
end

--- Channel-wise dropout of [N, C, L] or unbatched [C, L] input: in
-- training, zeroes each channel (all L of its elements) with probability p
-- and scales the others by 1 / (1 - p); otherwise returns x itself.
-- @param x [N, C, L] or [C, L]
-- @param p default 0.5
-- @param training default true, as PyTorch's
-- @usage F.dropout1d(x, 0.2, model.training)
function F.dropout1d(x, p, training)
  return feature_dropout("dropout1d", x, p, training ~= false, 2, 3, "C, L or N, C, L")
end

--- Channel-wise dropout of [N, C, H, W] input, as F.dropout1d. A 3-d input is
-- [N, C, L] (PyTorch's dropout2d does the same, warning that it means to
-- read it as an unbatched [C, H, W] one day: use dropout1d for it).
-- @param x [N, C, H, W] or [N, C, L]
-- @usage F.dropout2d(x, 0.1, model.training)
function F.dropout2d(x, p, training)
  return feature_dropout("dropout2d", x, p, training ~= false, 3, 4, "N, C, L or N, C, H, W", true)
end

--- Channel-wise dropout of [N, C, D, H, W] or unbatched [C, D, H, W] input, as F.dropout1d.
-- @usage F.dropout3d(x, 0.1, model.training)
function F.dropout3d(x, p, training)
  return feature_dropout("dropout3d", x, p, training ~= false, 4, 5, "C, D, H, W or N, C, D, H, W")
end

--- Alpha dropout (for SELU networks): in training, sets each element with
-- probability p to SELU's negative saturation and rescales so that inputs of
-- mean 0 and variance 1 keep them, as PyTorch's; otherwise returns x itself.
-- @param x a floating-point tensor
-- @param p default 0.5
-- @param training default false, as PyTorch's F.alpha_dropout
-- @usage F.alpha_dropout(x, 0.1, model.training)
function F.alpha_dropout(x, p, training)
  need_float(x, "alpha_dropout", "input")
  if p == nil then p = 0.5 end
  need_prob(p, "alpha_dropout", "p")
  if not training or p == 0 then return x end
  return drop(x, p, x:shape(), true)
end

--- Alpha dropout of whole channels (dimension 2 of [N, C, ...] input).
-- @param x [N, C, ...]
-- @param p default 0.5
-- @param training default false, as PyTorch's
-- @usage F.feature_alpha_dropout(x, 0.1, model.training)
function F.feature_alpha_dropout(x, p, training)
  local fname = "feature_alpha_dropout"
  need_float(x, fname, "input")
  if p == nil then p = 0.5 end
  need_prob(p, fname, "p")
  if x:dim() < 2 then
    fail(string.format("%s: expects an input of at least 2 dimensions (N, C, ...), got shape %s", fname, shape_str(x)))
  end
  if not training or p == 0 then return x end
  return drop(x, p, feature_shape(x, 2), true)
end

-- -- embeddings and normalisation -------------------------------------------------------

--- Rows of weight picked by integer indices: out[..., :] = weight[input[...], :].
-- With padding_idx, positions holding that index get no gradient (the row
-- itself is whatever the weight holds; nn.Embedding zeroes it at creation).
-- @param input integer tensor of 1-based indices, any shape
-- @param weight [num_embeddings, embedding_dim]
-- @param padding_idx optional 1-based index (negative counts from the end)
-- @return input's shape followed by embedding_dim
-- @usage local e = F.embedding(tide.tensor({ 1, 3 }, "int64"), w)
function F.embedding(input, weight, padding_idx)
  need_index(input, "embedding", "input")
  need_tensor(weight, "embedding", "weight")
  if weight:dim() ~= 2 then
    fail(string.format("embedding: weight must be 2-d [num_embeddings, embedding_dim], got shape %s", shape_str(weight)))
  end
  local n, d = weight:size(1), weight:size(2)
  local shape = input:shape()
  shape[#shape + 1] = d
  local out = weight:index_select(1, input:reshape(input:numel())):view(shape)
  if padding_idx ~= nil then
    if type(padding_idx) ~= "number" or padding_idx ~= math.floor(padding_idx) or padding_idx == 0
       or padding_idx > n or padding_idx < -n then
      fail(string.format("embedding: padding_idx %s is out of range for %d embeddings", tostring(padding_idx), n))
    end
    if padding_idx < 0 then padding_idx = n + padding_idx + 1 end
    out = tide.where(input:ne(padding_idx):unsqueeze(-1), out, out:detach())
  end
  return out
end

-- normalized_shape as a table, checked, and x's shape checked to end with it.
local function norm_shape(x, normalized_shape, fname)
  local ns = normalized_shape
  if type(ns) == "number" then
    ns = { ns }
  elseif type(ns) ~= "table" or #ns == 0 then
    fail(string.format("%s: normalized_shape must be a number or a non-empty table of sizes, got %s", fname,
      tostring(normalized_shape)))
  end
  local k, nd = #ns, x:dim()
  local ok = nd >= k
  for i = 1, k do ok = ok and x:size(nd - k + i) == ns[i] end
  if not ok then
    fail(string.format("%s: input of shape %s does not end with normalized_shape %s", fname, shape_str(x),
      list_str(ns)))
  end
  return ns
end

-- Checks that t (`what`: weight or bias), if given, is a floating-point tensor of shape ns.
local function need_affine(t, ns, fname, what)
  if t == nil then return end
  need_float(t, fname, what)
  if table.concat(t:shape(), ",") ~= table.concat(ns, ",") then
    fail(string.format("%s: %s of shape %s does not match normalized_shape %s", fname, what, shape_str(t),
      list_str(ns)))
  end
end

--- Layer normalisation over the last dimensions: (x - mean) / sqrt(var + eps)
-- (biased variance), then * weight + bias.
-- @param x [*, normalized_shape...]
-- @param normalized_shape a size or a table of sizes (the trailing dimensions of x)
-- @param weight normalized_shape or nil
-- @param bias normalized_shape or nil
-- @param eps default 1e-5
-- @return a tensor of x's shape
-- @usage F.layer_norm(x, { 16 }, w, b)
function F.layer_norm(x, normalized_shape, weight, bias, eps)
  need_float(x, "layer_norm", "input")
  local ns = norm_shape(x, normalized_shape, "layer_norm")
  need_affine(weight, ns, "layer_norm", "weight")
  need_affine(bias, ns, "layer_norm", "bias")
  local k = #ns
  local dims = {}
  for i = 1, k do dims[i] = -i end
  local mean = x:mean(dims, true)
  local var = x:var(dims, true, 0)
  local y = (x - mean) * (var + (eps or 1e-5)):rsqrt()
  if weight ~= nil then y = y * weight end
  if bias ~= nil then y = y + bias end
  return y
end

-- The machine epsilon of each floating dtype (torch.finfo(dtype).eps).
local FINFO_EPS = { float32 = 2^-23, float64 = 2^-52, float16 = 2^-10, bfloat16 = 2^-7 }

--- Root-mean-square normalisation over the last dimensions: x / sqrt(mean(x^2)
-- + eps), then * weight, as torch.nn.functional.rms_norm.
-- @param x [*, normalized_shape...]
-- @param normalized_shape a size or a table of sizes (the trailing dimensions of x)
-- @param weight normalized_shape or nil
-- @param eps default: the machine epsilon of x's dtype (torch.finfo(dtype).eps)
-- @return a tensor of x's shape
-- @usage F.rms_norm(x, { 64 }, w)
function F.rms_norm(x, normalized_shape, weight, eps)
  need_float(x, "rms_norm", "input")
  local ns = norm_shape(x, normalized_shape, "rms_norm")
  need_affine(weight, ns, "rms_norm", "weight")
  local k = #ns
  if eps == nil then eps = FINFO_EPS[x:dtype()] end
  if type(eps) ~= "number" or not (eps >= 0) then
    fail(string.format("rms_norm: eps must be a non-negative number, got %s", tostring(eps)))
  end
  local dims = {}
  for i = 1, k do dims[i] = -i end
  local y = x * ((x * x):mean(dims, true) + eps):rsqrt()
  if weight ~= nil then y = y * weight end
  return y
end

--- Batch normalisation over every dimension but the channels (dimension 2)
-- of [N, C], [N, C, L] or [N, C, H, W] input. In training it normalises with
-- the batch's mean and biased variance, and updates running_mean/running_var
-- (if given) in place, without gradient: r = (1 - momentum) * r + momentum * s,
-- s being the batch mean or the unbiased batch variance. Otherwise it
-- normalises with the running statistics.
-- @param x [N, C, *]
-- @param running_mean [C] or nil
-- @param running_var [C] or nil
-- @param weight [C] or nil
-- @param bias [C] or nil
-- @param training default false
-- @param momentum default 0.1
-- @param eps default 1e-5
-- @return a tensor of x's shape
-- @usage F.batch_norm(x, rm, rv, w, b, true)
function F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
  need_float(x, "batch_norm", "input")
  if x:dim() < 2 then
    fail(string.format("batch_norm: input must be [N, C, ...] with at least 2 dimensions, got shape %s", shape_str(x)))
  end
  local c = x:size(2)
  local stats = { running_mean, running_var, weight, bias }
  for i, what in ipairs { "running_mean", "running_var", "weight", "bias" } do
    local t = stats[i]
    if t ~= nil then
      need_tensor(t, "batch_norm", what)
      if t:dim() ~= 1 or t:size(1) ~= c then
        fail(string.format("batch_norm: %s of shape %s does not match the %d channels of input %s", what,
          shape_str(t), c, shape_str(x)))
      end
    end
  end
  if (running_mean == nil) ~= (running_var == nil) then
    fail("batch_norm: running_mean and running_var must be given together")
  end
  momentum, eps = momentum or 0.1, eps or 1e-5
  local bshape, dims = { 1, c }, { 1 }
  for i = 3, x:dim() do bshape[i] = 1; dims[#dims + 1] = i end
  local mean, var
  if training then
    local n = x:numel() / c
    if n <= 1 then
      fail(string.format("batch_norm: expected more than 1 value per channel when training, got input of shape %s",
        shape_str(x)))
    end
    if x:dim() > 2 then
      -- per sample and channel over the contiguous H*W... first, then over the
      -- batch, combining the groups' variances (all of H*W elements) exactly:
      -- var = mean(var_nc) + mean((mean_nc - mean)^2). A reduction over
      -- {1, 3, 4} at once copies x into its own layout first (two copies of x)
      local xs = x:reshape(x:size(1), c, -1)
      local mean_nc, var_nc = xs:mean(3), xs:var(3, false, 0)
      mean = mean_nc:mean(1)
      var = var_nc:mean(1) + (mean_nc - mean):pow(2):mean(1)
    else
      mean = x:mean(dims)
      var = x:var(dims, false, 0)
    end
    if running_mean ~= nil then
      no_grad(function()
        running_mean:mul_(1 - momentum):add_(mean:detach() * momentum)
        running_var:mul_(1 - momentum):add_(var:detach() * (momentum * n / (n - 1)))
      end)
    end
  else
    if running_mean == nil then
      fail("batch_norm: running_mean and running_var are required when training is false")
    end
    mean, var = running_mean, running_var
  end
  -- y = x * scale + shift per channel, scale = weight / sqrt(var + eps) and
  -- shift = bias - mean * scale, as PyTorch's CPU kernel folds them: one pass
  -- over x (addcmul) where (x - mean) * invstd * weight + bias took four
  local scale = (var + eps):rsqrt()
  if weight ~= nil then scale = scale * weight end
  local shift = -(mean * scale)
  if bias ~= nil then shift = shift + bias end
  return shift:view(bshape):addcmul(x, scale:view(bshape))
end

-- -- losses --------------------------------------------------------------------------------

-- Puts an unbatched [C] input and its target in batch form [1, C]; returns
-- them and whether to take the batch dimension off again.
local function batch_form(input, target, fname)
  if input:dim() == 0 then
    fail(string.format("%s: input must be [C] or [N, C, ...], got a 0-d tensor", fname))
  end
  if input:dim() == 1 then
    if target:dim() ~= 0 and not (target:is_floating_point() and target:dim() == 1) then
      fail(string.format("%s: target of shape %s does not match input of shape %s", fname, shape_str(target),
        shape_str(input)))
    end
    return input:unsqueeze(1), target:unsqueeze(1), true
  end
  return input, target, false
end

-- The expected shape of a class-index target: input's without dimension 2.
local function index_target_check(input, target, fname)
  local ok = target:dim() == input:dim() - 1
  if ok then
    for i = 1, target:dim() do
      if target:size(i) ~= input:size(i < 2 and i or i + 1) then ok = false end
    end
  end
  if not ok then
    fail(string.format("%s: target of shape %s does not match input of shape %s", fname, shape_str(target),
      shape_str(input)))
  end
end

local function class_weight(weight, c, fname)
  if weight == nil then return nil end
  need_float(weight, fname, "weight")
  if weight:dim() ~= 1 or weight:size(1) ~= c then
    fail(string.format("%s: weight of shape %s does not match the %d classes of input", fname, shape_str(weight), c))
  end
  return weight
end

-- The negative log-likelihood of class-index targets, from log-probabilities
-- logp [N, C, *] and target [N, *]: per-element losses (0 where ignored) and
-- the mean's denominator (the summed weights of the targets not ignored).
-- With smoothing > 0, mixes in the uniform distribution over the classes.
local function nll_terms(logp, target, weight, ignore_index, smoothing)
  local c = logp:size(2)
  local valid = target:ne(ignore_index)
  local safe = tide.where(valid, target, 1)
  local picked = logp:gather(2, safe:unsqueeze(2)):squeeze(2)
  local w_t
  if weight ~= nil then
    w_t = weight:index_select(1, safe:reshape(safe:numel())):view(safe:shape())
  end
  local loss = -picked
  if w_t ~= nil then loss = loss * w_t end
  if smoothing > 0 then
    local smooth
    if weight ~= nil then
      local wshape = {}
      for i = 1, logp:dim() do wshape[i] = i == 2 and c or 1 end
      smooth = -(logp * weight:view(wshape)):sum(2)
    else
      smooth = -logp:sum(2)
    end
    loss = loss * (1 - smoothing) + smooth * (smoothing / c)
  end
  loss = tide.where(valid, loss, 0)
  local denom
  if w_t ~= nil then
    denom = tide.where(valid, w_t, 0):sum()
  else
    denom = valid:to(logp:dtype()):sum()
  end
  return loss, denom
end

local function finish_indexed(loss, denom, reduction, unbatched)
  if reduction == "mean" then return loss:sum() / denom end
  if reduction == "sum" then return loss:sum() end
  if unbatched then return loss:squeeze(1) end
  return loss
end

--- The negative log-likelihood loss of log-probabilities and class indices:
-- loss_i = -weight[t_i] * input[i, t_i]; "mean" divides the sum by the summed
-- weights of the targets that are not ignore_index.
-- @param input log-probabilities [N, C], [N, C, d1, ...] or [C]
-- @param target 1-based class indices (int64 or int32) [N], [N, d1, ...] or 0-d
-- @param opts {weight = [C] tensor, ignore_index = -100, reduction = "mean" | "sum" | "none"}
-- @return the loss (0-d, or per element for "none")
-- @usage F.nll_loss(F.log_softmax(logits, 2), target)
function F.nll_loss(input, target, opts)
  opts = options(opts, "nll_loss")
  need_float(input, "nll_loss", "input")
  need_index(target, "nll_loss", "target")
  local reduction = reduction_of(opts, "nll_loss")
  local x, t, unbatched = batch_form(input, target, "nll_loss")
  index_target_check(x, t, "nll_loss")
  local weight = class_weight(opts.weight, x:size(2), "nll_loss")
  local loss, denom = nll_terms(x, t, weight, opts.ignore_index or -100, 0)
  return finish_indexed(loss, denom, reduction, unbatched)
end

--- Cross entropy of logits and targets, as PyTorch's: log_softmax over the
-- classes (dimension 2) followed by the negative log-likelihood. Targets are
-- either class indices (int64 or int32, 1-based, of input's shape without the
-- class dimension; ignore_index marks positions that take no part), or class
-- probabilities (floating point, of input's shape). label_smoothing = e mixes
-- the targets with the uniform distribution: (1 - e) * target + e / C. "mean"
-- divides by the summed weights of the targets not ignored (class indices)
-- or by the number of positions (probabilities).
-- @param input logits [N, C], [N, C, d1, ...] or [C]
-- @param target class indices or class probabilities (see above)
-- @param opts {weight = [C] tensor, ignore_index = -100, reduction = "mean" | "sum" | "none", label_smoothing = 0}
-- @return the loss (0-d, or per position for "none")
-- @usage local loss = F.cross_entropy(logits, tide.tensor({ 3, 1 }, "int64"))
function F.cross_entropy(input, target, opts)
  opts = options(opts, "cross_entropy")
  need_float(input, "cross_entropy", "input")
  need_tensor(target, "cross_entropy", "target")
  local reduction = reduction_of(opts, "cross_entropy")
  local smoothing = opts.label_smoothing or 0
  need_prob(smoothing, "cross_entropy", "label_smoothing")
  local x, t, unbatched = batch_form(input, target, "cross_entropy")
  local c = x:size(2)
  local weight = class_weight(opts.weight, c, "cross_entropy")
  local logp = x:log_softmax(2)
  if t:is_floating_point() then
    if not same_shape(t, x) then
      fail(string.format("cross_entropy: target of shape %s does not match input of shape %s", shape_str(target),
        shape_str(input)))
    end
    if opts.ignore_index ~= nil and opts.ignore_index ~= -100 then
      fail("cross_entropy: ignore_index applies to class-index targets, not to class probabilities")
    end
    if smoothing > 0 then t = t * (1 - smoothing) + smoothing / c end
    local prod = logp * t
    if weight ~= nil then
      local wshape = {}
      for i = 1, x:dim() do wshape[i] = i == 2 and c or 1 end
      prod = prod * weight:view(wshape)
    end
    local loss = -prod:sum(2)
    if reduction == "none" and unbatched then return loss:squeeze(1) end
    return reduce(loss, reduction)
  end
  need_index(target, "cross_entropy", "target")
  index_target_check(x, t, "cross_entropy")
  local loss, denom = nll_terms(logp, t, weight, opts.ignore_index or -100, smoothing)
  return finish_indexed(loss, denom, reduction, unbatched)
end

--- Mean squared error (input - target)^2, reduced.
-- @param input a floating-point tensor
-- @param target a tensor of the same shape
-- @param opts {reduction = "mean" | "sum" | "none"} or the reduction as a string
-- @usage F.mse_loss(pred, y, "sum")
function F.mse_loss(input, target, opts)
  opts = options(opts, "mse_loss")
  need_float(input, "mse_loss", "input")
  need_tensor(target, "mse_loss", "target")
  local reduction = reduction_of(opts, "mse_loss")
  if not same_shape(input, target) then
    fail(string.format("mse_loss: target of shape %s does not match input of shape %s", shape_str(target),
      shape_str(input)))
  end
  local d = input - target
  return reduce(d * d, reduction)
end

--- Binary cross entropy of logits x and targets t in [0, 1], in the stable
-- form (1 - t) x + (1 + (pw - 1) t) softplus(-x), where softplus(-x) =
-- m + log(exp(-m) + exp(-x - m)) with m = max(-x, 0) (exact for every x, and
-- with the right gradient at 0). pos_weight (broadcast along the last
-- dimension, one per class) weighs the positive examples; weight each element.
-- @param input logits
-- @param target probabilities, input's shape
-- @param opts {weight = tensor, pos_weight = tensor, reduction = "mean" | "sum" | "none"}
-- @usage F.binary_cross_entropy_with_logits(logits, y, { pos_weight = tide.tensor({ 3 }) })
function F.binary_cross_entropy_with_logits(input, target, opts)
  local fname = "binary_cross_entropy_with_logits"
  opts = options(opts, fname)
  need_float(input, fname, "input")
  need_float(target, fname, "target")
  local reduction = reduction_of(opts, fname)
  if not same_shape(input, target) then
    fail(string.format("%s: target of shape %s does not match input of shape %s", fname, shape_str(target),
      shape_str(input)))
  end
  local m = (-input):relu()
  local softplus_neg = m + ((-m):exp() + (-input - m):exp()):log()
  local loss
  if opts.pos_weight ~= nil then
    need_float(opts.pos_weight, fname, "pos_weight")
    if not broadcasts_to(opts.pos_weight, input:shape()) then
      fail(string.format("%s: pos_weight of shape %s does not broadcast to input of shape %s", fname,
        shape_str(opts.pos_weight), shape_str(input)))
    end
    loss = (1 - target) * input + ((opts.pos_weight - 1) * target + 1) * softplus_neg
  else
    loss = (1 - target) * input + softplus_neg
  end
  if opts.weight ~= nil then
    need_float(opts.weight, fname, "weight")
    if not broadcasts_to(opts.weight, input:shape()) then
      fail(string.format("%s: weight of shape %s does not broadcast to input of shape %s", fname,
        shape_str(opts.weight), shape_str(input)))
    end
    loss = loss * opts.weight
  end
  return reduce(loss, reduction)
end

-- -- attention ---------------------------------------------------------------------------

--- Attention: softmax(q k^T * scale + mask) v over the last two dimensions,
-- the leading ones being batch dimensions (broadcast). attn_mask is boolean
-- (true: the position takes part, as in PyTorch's scaled_dot_product_attention)
-- or floating point (added to the scores), broadcast to [..., L, S].
-- is_causal masks out the keys after each query (top-left aligned); it
-- excludes attn_mask. dropout_p drops attention weights (always, as
-- PyTorch's function does: pass 0 outside training).
-- @param q [..., L, E]
-- @param k [..., S, E]
-- @param v [..., S, Ev]
-- @param opts {attn_mask = tensor, is_causal = false, dropout_p = 0, scale = 1 / sqrt(E)}
-- @return [..., L, Ev]
-- @usage local out = F.scaled_dot_product_attention(q, k, v, { is_causal = true })
function F.scaled_dot_product_attention(q, k, v, opts)
  local fname = "scaled_dot_product_attention"
  opts = options(opts, fname)
  need_float(q, fname, "query")
  need_float(k, fname, "key")
  need_float(v, fname, "value")
  if q:dim() < 2 or k:dim() < 2 or v:dim() < 2 then
    fail(string.format("%s: query, key and value need at least 2 dimensions, got shapes %s, %s and %s", fname,
      shape_str(q), shape_str(k), shape_str(v)))
  end
  if q:size(-1) ~= k:size(-1) then
    fail(string.format("%s: query of shape %s and key of shape %s differ in their last dimension", fname,
      shape_str(q), shape_str(k)))
  end
  if k:size(-2) ~= v:size(-2) then
    fail(string.format("%s: key of shape %s and value of shape %s differ in their number of positions", fname,
      shape_str(k), shape_str(v)))
  end
  local mask = opts.attn_mask
  if mask ~= nil and opts.is_causal then fail(fname .. ": pass either attn_mask or is_causal, not both") end
  local dropout_p = opts.dropout_p or 0
  need_prob(dropout_p, fname, "dropout_p")
  local scale = opts.scale or 1 / math.sqrt(q:size(-1))
  local l, s = q:size(-2), k:size(-2)
  local scores = q:matmul(k:transpose(-2, -1)) * scale
  if opts.is_causal then
    mask = tide.ones({ l, s }, { dtype = "bool", device = q:device() }):tril()
  end
  if mask ~= nil then
    need_tensor(mask, fname, "attn_mask")
    if not broadcasts_to(mask, scores:shape()) then
      fail(string.format("%s: attn_mask of shape %s does not broadcast to the scores' shape %s", fname,
        shape_str(mask), shape_str(scores)))
    end
    if mask:dtype() == "bool" then
      scores = scores:masked_fill(mask:logical_not(), -math.huge)
    elseif mask:is_floating_point() then
      scores = scores + mask
    else
      fail(string.format("%s: attn_mask must be bool or floating point, got %s", fname, mask:dtype()))
    end
  end
  local attn = scores:softmax(-1)
  if dropout_p > 0 then attn = F.dropout(attn, dropout_p, true) end
  return attn:matmul(v)
end

-- -- encodings -------------------------------------------------------------------------------

--- One-hot encoding of 1-based class indices: an int64 tensor of input's
-- shape followed by num_classes, 1 at each index. Without num_classes, the
-- largest index is used (which waits for input's values).
-- @param input int64 or int32 indices
-- @param num_classes the number of classes (default: the largest index)
-- @return int64 tensor
-- @usage F.one_hot(tide.tensor({ 1, 3 }, "int64"), 4)
function F.one_hot(input, num_classes)
  need_index(input, "one_hot", "input")
  if num_classes == nil or num_classes == -1 then
    if input:numel() == 0 then fail("one_hot: cannot infer num_classes from an empty tensor; pass it") end
    num_classes = input:max():item()
  end
  if type(num_classes) ~= "number" or num_classes < 1 or num_classes ~= math.floor(num_classes) then
    fail("one_hot: num_classes must be a positive integer, got " .. tostring(num_classes))
  end
  local shape = input:shape()
  shape[#shape + 1] = num_classes
  local idx = input:to("int64"):unsqueeze(-1)
  return tide.zeros(shape, { dtype = "int64", device = input:device() }):scatter(-1, idx, 1)
end

return F
