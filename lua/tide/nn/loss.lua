--- tide.nn.loss: the losses of torch.nn beyond those in tide.nn (L1, smooth
-- L1 and Huber, binary cross entropy of probabilities, KL divergence, the
-- margin and embedding losses, the multi-class and multi-label margins,
-- Poisson and Gaussian NLL), as functions of
-- tide.nn.functional and as modules, composed of tensor ops. Checks that
-- need tensor values (probabilities in [0, 1], a non-negative variance) are
-- not made: they would wait for the device. Called once by tide.nn with the nn table.
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local fail = B.fail
local is_tensor = tide.is_tensor

return function(nn)
  local F, Module = nn.functional, nn.Module

  -- -- argument checks ------------------------------------------------------------------

  local shape_str, need_tensor, need_float = args.shape_str, args.need_tensor, args.need_float

  local function same_shape(a, b)
    return table.concat(a:shape(), ",") == table.concat(b:shape(), ",")
  end

  -- Fails unless b has a's shape ("target of shape [..] does not match input of shape [..]").
  local function need_same(a, b, fname, what_a, what_b)
    if not same_shape(a, b) then
      fail(string.format("%s: %s of shape %s does not match %s of shape %s", fname, what_b, shape_str(b), what_a,
        shape_str(a)))
    end
  end

  -- The shape that shapes sa and sb (tables) broadcast to, or nil.
  local function broadcast(sa, sb)
    local n, r = math.max(#sa, #sb), {}
    for i = 1, n do
      local x, y = sa[#sa - n + i] or 1, sb[#sb - n + i] or 1
      if x ~= y and x ~= 1 and y ~= 1 then return nil end
      r[i] = x == 1 and y or x
    end
    return r
  end

  -- Fails unless tensor b broadcasts with a (or with shape a, a table); returns the shape they make.
  local function need_broadcast(a, b, fname, what_a, what_b)
    local sa = is_tensor(a) and a:shape() or a
    local s = broadcast(sa, b:shape())
    if not s then
      fail(string.format("%s: %s of shape %s does not broadcast with %s of shape [%s]", fname, what_b, shape_str(b),
        what_a, table.concat(sa, ",")))
    end
    return s
  end

  -- The options of each loss beyond reduction: {key, default, kind}.
  local KINDS = {
    number = { "a number", function(v) return type(v) == "number" and v == v end },
    nonneg = { "a non-negative number", function(v) return type(v) == "number" and v >= 0 end },
    pos = { "a positive number", function(v) return type(v) == "number" and v > 0 end },
    p = { "a positive number or math.huge", function(v) return type(v) == "number" and v > 0 end },
    bool = { "a boolean", function(v) return type(v) == "boolean" end },
    one_or_two = { "1 or 2", function(v) return v == 1 or v == 2 end },
    fn = { "a function or a module", function(v)
      return v == nil or type(v) == "function" or type(v) == "table" and Module.is_module(v)
    end },
  }
  local OPTIONS = {
    l1_loss = {}, binary_cross_entropy = {},
    smooth_l1_loss = { { "beta", 1, "nonneg" } },
    huber_loss = { { "delta", 1, "pos" } },
    kl_div = { { "log_target", false, "bool" } },
    margin_ranking_loss = { { "margin", 0, "number" } },
    hinge_embedding_loss = { { "margin", 1, "number" } },
    cosine_embedding_loss = { { "margin", 0, "number" } },
    triplet_margin_loss = { { "margin", 1, "number" }, { "p", 2, "p" }, { "eps", 1e-6, "number" },
                            { "swap", false, "bool" } },
    triplet_margin_with_distance_loss = { { "margin", 1, "pos" }, { "swap", false, "bool" },
                                          { "distance_function", nil, "fn" } },
    poisson_nll_loss = { { "log_input", true, "bool" }, { "full", false, "bool" }, { "eps", 1e-8, "number" } },
    gaussian_nll_loss = { { "full", false, "bool" }, { "eps", 1e-6, "number" } },
    soft_margin_loss = {}, multilabel_soft_margin_loss = {}, multilabel_margin_loss = {},
    multi_margin_loss = { { "p", 1, "one_or_two" }, { "margin", 1, "number" } },
  }

  -- The options of loss `loss` checked and completed with defaults; name
  -- (the function's or the module's) heads the errors. opts is a table, a
  -- reduction alone as a string, or nil.
  local function parse(loss, opts, name)
    if opts == nil then opts = {} elseif type(opts) == "string" then opts = { reduction = opts } end
    if type(opts) ~= "table" then fail(string.format("%s: options must be a table, got %s", name, type(opts))) end
    local r = opts.reduction or "mean"
    if loss == "kl_div" then
      if r ~= "mean" and r ~= "batchmean" and r ~= "sum" and r ~= "none" then
        fail(string.format("%s: reduction must be 'mean', 'batchmean', 'sum' or 'none', got %s", name, tostring(r)))
      end
    elseif r ~= "mean" and r ~= "sum" and r ~= "none" then
      fail(string.format("%s: reduction must be 'mean', 'sum' or 'none', got %s", name, tostring(r)))
    end
    local c = { reduction = r, weight = opts.weight }
    for _, o in ipairs(OPTIONS[loss]) do
      local key, v, kind = o[1], opts[o[1]], KINDS[o[3]]
      if v == "inf" and o[3] == "p" then v = math.huge end
      if v == nil then v = o[2] end
      if not kind[2](v) then
        fail(string.format("%s: %s must be %s, got %s", name, key, kind[1], tostring(v)))
      end
      c[key] = v
    end
    return c
  end

  local reduce = F._reduce

  -- -- regression ---------------------------------------------------------------------------

  --- F.l1_loss(input, target, opts): |input - target|, reduced.
  -- @param input a floating-point tensor
  -- @param target a tensor of input's shape
  -- @param opts {reduction = "mean" | "sum" | "none"} or the reduction as a string
  -- @usage F.l1_loss(pred, y)
  function F.l1_loss(input, target, opts)
    local c = parse("l1_loss", opts, "l1_loss")
    need_float(input, "l1_loss", "input")
    need_tensor(target, "l1_loss", "target")
    need_same(input, target, "l1_loss", "input", "target")
    return reduce((input - target):abs(), c.reduction)
  end

  --- F.smooth_l1_loss(input, target, opts): per element 0.5 d^2 / beta where
  -- |d| < beta, else |d| - 0.5 beta (d = input - target; beta = 0 is L1).
  -- @param opts {beta = 1, reduction = "mean"}
  -- @usage F.smooth_l1_loss(pred, y, { beta = 0.5 })
  function F.smooth_l1_loss(input, target, opts)
    local fname = "smooth_l1_loss"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_tensor(target, fname, "target")
    need_same(input, target, fname, "input", "target")
    local d = (input - target):abs()
    if c.beta == 0 then return reduce(d, c.reduction) end
    return reduce(tide.where(d:lt(c.beta), d * d * (0.5 / c.beta), d - 0.5 * c.beta), c.reduction)
  end

  --- F.huber_loss(input, target, opts): per element 0.5 d^2 where |d| < delta,
  -- else delta (|d| - 0.5 delta) (d = input - target).
  -- @param opts {delta = 1 (positive), reduction = "mean"}
  -- @usage F.huber_loss(pred, y, { delta = 2 })
  function F.huber_loss(input, target, opts)
    local fname = "huber_loss"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_tensor(target, fname, "target")
    need_same(input, target, fname, "input", "target")
    local d = (input - target):abs()
    return reduce(tide.where(d:lt(c.delta), d * d * 0.5, (d - 0.5 * c.delta) * c.delta), c.reduction)
  end

  -- -- probabilities ----------------------------------------------------------------------------

  -- log(x) clamped at -100 as PyTorch's binary_cross_entropy has it; its
  -- gradient is 0 where x <= 0 (log's argument is made 1 there, so no 0/0).
  local function clamped_log(x)
    local pos = x:gt(0)
    return tide.where(pos, tide.where(pos, x, 1):log(), -100):clamp(-100)
  end

  --- F.binary_cross_entropy(input, target, opts): -w (t log(x) + (1 - t) log(1 - x))
  -- of probabilities x and targets t in [0, 1], each log clamped at -100 (as
  -- torch's). Prefer F.binary_cross_entropy_with_logits on logits.
  -- @param input probabilities
  -- @param target input's shape
  -- @param opts {weight = tensor broadcasting to input, reduction = "mean"}
  -- @usage F.binary_cross_entropy(p, y)
  function F.binary_cross_entropy(input, target, opts)
    local fname = "binary_cross_entropy"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_float(target, fname, "target")
    need_same(input, target, fname, "input", "target")
    local loss = -(target * clamped_log(input) + (1 - target) * clamped_log(1 - input))
    if c.weight ~= nil then
      need_float(c.weight, fname, "weight")
      local ok = c.weight:dim() <= input:dim()
      for i = 1, ok and c.weight:dim() or 0 do
        local s = c.weight:size(-i)
        ok = ok and (s == 1 or s == input:size(-i))
      end
      if not ok then
        fail(string.format("%s: weight of shape %s does not broadcast to input of shape %s", fname,
          shape_str(c.weight), shape_str(input)))
      end
      loss = loss * c.weight
    end
    return reduce(loss, c.reduction)
  end

  --- F.kl_div(input, target, opts): the pointwise KL divergence
  -- t (log t - input) of log-probabilities input and probabilities t (0 where
  -- t = 0), or exp(t) (t - input) with log_target. "batchmean" divides the sum
  -- by the batch size (dimension 1), which is the true KL divergence; "mean"
  -- divides by the number of elements.
  -- @param input log-probabilities
  -- @param target probabilities (or log-probabilities, log_target), broadcasting with input
  -- @param opts {reduction = "mean" | "batchmean" | "sum" | "none", log_target = false}
  -- @usage F.kl_div(q:log_softmax(2), p, { reduction = "batchmean" })
  function F.kl_div(input, target, opts)
    local fname = "kl_div"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_float(target, fname, "target")
    need_broadcast(input, target, fname, "input", "target")
    local loss
    if c.log_target then
      loss = target:exp() * (target - input)
    else
      local zero = target:eq(0)   -- xlogy(t, t): 0 at t = 0, with no 0 * -inf on either pass
      loss = tide.where(zero, 0, target * tide.where(zero, 1, target):log()) - target * input
    end
    if c.reduction == "batchmean" then
      if input:dim() == 0 then return loss:sum() end
      return loss:sum() / input:size(1)
    end
    return reduce(loss, c.reduction)
  end

  -- -- margins and embeddings -----------------------------------------------------------------

  --- F.margin_ranking_loss(input1, input2, target, opts): max(0, -y (x1 - x2) + margin)
  -- for targets y of 1 (x1 should rank higher) or -1.
  -- @param input1 a floating-point tensor
  -- @param input2 input1's number of dimensions
  -- @param target 1 or -1, input1's number of dimensions (all three broadcast)
  -- @param opts {margin = 0, reduction = "mean"}
  -- @usage F.margin_ranking_loss(s1, s2, y, { margin = 0.1 })
  function F.margin_ranking_loss(input1, input2, target, opts)
    local fname = "margin_ranking_loss"
    local c = parse(fname, opts, fname)
    need_float(input1, fname, "input1")
    need_float(input2, fname, "input2")
    need_tensor(target, fname, "target")
    if input1:dim() ~= input2:dim() or input1:dim() ~= target:dim() then
      fail(string.format("%s: input1 %s, input2 %s and target %s must have the same number of dimensions", fname,
        shape_str(input1), shape_str(input2), shape_str(target)))
    end
    need_broadcast(need_broadcast(input1, input2, fname, "input1", "input2"), target, fname, "the inputs", "target")
    return reduce((-target * (input1 - input2) + c.margin):clamp(0), c.reduction)
  end

  --- F.hinge_embedding_loss(input, target, opts): x where y = 1, max(0, margin - x)
  -- where y = -1, for distances x and targets y.
  -- @param input a floating-point tensor
  -- @param target 1 or -1, broadcasting with input
  -- @param opts {margin = 1, reduction = "mean"}
  -- @usage F.hinge_embedding_loss(dist, y)
  function F.hinge_embedding_loss(input, target, opts)
    local fname = "hinge_embedding_loss"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_tensor(target, fname, "target")
    need_broadcast(input, target, fname, "input", "target")
    -- as torch's: both terms for a target that is neither 1 nor -1
    local margin_term = tide.where(target:ne(1), (c.margin - input):clamp(0), 0)
    return reduce(margin_term + tide.where(target:ne(-1), input, 0), c.reduction)
  end

  --- F.cosine_embedding_loss(input1, input2, target, opts): 1 - cos(x1, x2)
  -- where y = 1, max(0, cos(x1, x2) - margin) where y = -1, cos along the
  -- last dimension (with 1e-12 added to each squared norm, as torch's).
  -- @param input1 [N, D] or [D]
  -- @param input2 input1's shape
  -- @param target [N] or 0-d, of 1 and -1
  -- @param opts {margin = 0, reduction = "mean"}
  -- @usage F.cosine_embedding_loss(a, b, y, { margin = 0.5 })
  function F.cosine_embedding_loss(input1, input2, target, opts)
    local fname = "cosine_embedding_loss"
    local c = parse(fname, opts, fname)
    need_float(input1, fname, "input1")
    need_float(input2, fname, "input2")
    need_tensor(target, fname, "target")
    local td = target:dim()
    if td > 1 then fail(string.format("%s: target must be 0-d or 1-d, got shape %s", fname, shape_str(target))) end
    if input1:dim() ~= td + 1 or input2:dim() ~= td + 1 then
      fail(string.format("%s: a %d-d target expects %d-d inputs, got input1 of shape %s and input2 of shape %s",
        fname, td, td + 1, shape_str(input1), shape_str(input2)))
    end
    need_same(input1, input2, fname, "input1", "input2")
    if td == 1 and target:size(1) ~= input1:size(1) then
      fail(string.format("%s: target of shape %s does not match the %d rows of input1 %s", fname, shape_str(target),
        input1:size(1), shape_str(input1)))
    end
    local prod = (input1 * input2):sum(-1)
    local m1, m2 = (input1 * input1):sum(-1) + 1e-12, (input2 * input2):sum(-1) + 1e-12
    local cos = prod / (m1 * m2):sqrt()
    local loss = tide.where(target:eq(1), 1 - cos, 0) + tide.where(target:eq(-1), (cos - c.margin):clamp(0), 0)
    return reduce(loss, c.reduction)
  end

  --- F.triplet_margin_loss(anchor, positive, negative, opts):
  -- max(d(a, p) - d(a, n) + margin, 0), d = F.pairwise_distance with p and eps;
  -- with swap, d(a, n) is min(d(a, n), d(p, n)).
  -- @param anchor [N, D] or [D]
  -- @param positive anchor's number of dimensions
  -- @param negative anchor's number of dimensions
  -- @param opts {margin = 1, p = 2, eps = 1e-6, swap = false, reduction = "mean"}
  -- @usage F.triplet_margin_loss(a, p, n, { margin = 0.2 })
  function F.triplet_margin_loss(anchor, positive, negative, opts)
    local fname = "triplet_margin_loss"
    local c = parse(fname, opts, fname)
    need_float(anchor, fname, "anchor")
    need_float(positive, fname, "positive")
    need_float(negative, fname, "negative")
    if anchor:dim() ~= positive:dim() or anchor:dim() ~= negative:dim() then
      fail(string.format("%s: anchor %s, positive %s and negative %s must have the same number of dimensions",
        fname, shape_str(anchor), shape_str(positive), shape_str(negative)))
    end
    local d = { p = c.p, eps = c.eps }
    local d_ap, d_an = F.pairwise_distance(anchor, positive, d), F.pairwise_distance(anchor, negative, d)
    if c.swap then d_an = tide.minimum(d_an, F.pairwise_distance(positive, negative, d)) end
    return reduce((d_ap - d_an + c.margin):clamp(0), c.reduction)
  end

  --- F.triplet_margin_with_distance_loss(anchor, positive, negative, opts):
  -- max(d(a, p) - d(a, n) + margin, 0) for a distance function d of two
  -- tensors returning one distance per sample (default F.pairwise_distance);
  -- with swap, d(a, n) is min(d(a, n), d(p, n)).
  -- @param anchor a floating-point tensor
  -- @param positive anchor's number of dimensions
  -- @param negative anchor's number of dimensions
  -- @param opts {distance_function (a function or a module), margin = 1 (> 0), swap = false, reduction = "mean"}
  -- @usage F.triplet_margin_with_distance_loss(a, p, n, { distance_function = function(x, y) return 1 - F.cosine_similarity(x, y) end })
  function F.triplet_margin_with_distance_loss(anchor, positive, negative, opts)
    local fname = "triplet_margin_with_distance_loss"
    local c = parse(fname, opts, fname)
    local dist = c.distance_function or F.pairwise_distance
    need_tensor(anchor, fname, "anchor")
    need_tensor(positive, fname, "positive")
    need_tensor(negative, fname, "negative")
    if anchor:dim() ~= positive:dim() or anchor:dim() ~= negative:dim() then
      fail(string.format("%s: anchor %s, positive %s and negative %s must have the same number of dimensions",
        fname, shape_str(anchor), shape_str(positive), shape_str(negative)))
    end
    local d_ap, d_an = dist(anchor, positive), dist(anchor, negative)
    if c.swap then d_an = tide.minimum(d_an, dist(positive, negative)) end
    return reduce((d_ap - d_an + c.margin):clamp(0), c.reduction)
  end

  -- -- classification margins ----------------------------------------------------------------

  local function need_index(x, fname, what)
    need_tensor(x, fname, what)
    if x:dtype() ~= "int64" and x:dtype() ~= "int32" then
      fail(string.format("%s: %s must be an int64 or int32 tensor of 1-based class indices, got %s", fname, what,
        x:dtype()))
    end
  end

  -- input [C] or [N, C] as [N, C], and whether it was unbatched.
  local function rows(input, fname)
    if input:dim() ~= 1 and input:dim() ~= 2 then
      fail(string.format("%s: input must be [C] or [N, C], got shape %s", fname, shape_str(input)))
    end
    if input:dim() == 1 then return input:unsqueeze(1), true end
    return input, false
  end

  -- The per-row losses [N] as a 0-d tensor for an unbatched input, then reduced.
  local function reduce_rows(loss, unbatched, reduction)
    if unbatched then loss = loss:squeeze(1) end
    return reduce(loss, reduction)
  end

  -- The softplus of z, log(1 + exp(z)), as m + log(exp(-m) + exp(z - m)) with
  -- m = max(z, 0): exact at every z, and with the right gradient at 0.
  local function softplus(z)
    local m = z:relu()
    return m + ((-m):exp() + (z - m):exp()):log()
  end

  --- F.soft_margin_loss(input, target, opts): log(1 + exp(-y x)) per element,
  -- for targets y of 1 or -1 (computed stably), reduced.
  -- @param input a floating-point tensor
  -- @param target input's shape, of 1 and -1
  -- @param opts {reduction = "mean"} or the reduction as a string
  -- @usage F.soft_margin_loss(scores, y)
  function F.soft_margin_loss(input, target, opts)
    local fname = "soft_margin_loss"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_tensor(target, fname, "target")
    need_same(input, target, fname, "input", "target")
    return reduce(softplus(-(input * target)), c.reduction)
  end

  --- F.multilabel_soft_margin_loss(input, target, opts): the binary cross
  -- entropy of sigmoid(x) for each class (the last dimension) against targets
  -- of 0 and 1, times weight, averaged over the classes, then reduced over the
  -- samples: -mean_c w_c (y_c log sigmoid(x_c) + (1 - y_c) log sigmoid(-x_c)).
  -- @param input [N, C] (or any shape, the classes last)
  -- @param target input's shape
  -- @param opts {weight = [C] tensor (broadcasting to input), reduction = "mean"}
  -- @return [N] for "none", else 0-d
  -- @usage F.multilabel_soft_margin_loss(logits, y)
  function F.multilabel_soft_margin_loss(input, target, opts)
    local fname = "multilabel_soft_margin_loss"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_tensor(target, fname, "target")
    need_same(input, target, fname, "input", "target")
    if input:dim() == 0 then fail(fname .. ": input must have at least 1 dimension (the classes), got a 0-d tensor") end
    local loss = -(target * F.logsigmoid(input) + (1 - target) * F.logsigmoid(-input))
    if c.weight ~= nil then
      need_float(c.weight, fname, "weight")
      local s = need_broadcast(input, c.weight, fname, "input", "weight")
      if table.concat(s, ",") ~= table.concat(input:shape(), ",") then
        fail(string.format("%s: weight of shape %s does not broadcast to input of shape %s", fname,
          shape_str(c.weight), shape_str(input)))
      end
      loss = loss * c.weight
    end
    return reduce(loss:sum(-1) / input:size(-1), c.reduction)
  end

  --- F.multi_margin_loss(input, target, opts): the multi-class hinge loss of
  -- scores x [N, C] and class indices y [N]: for each sample,
  -- sum_{i ~= y} w_y max(0, margin - x_y + x_i)^p / C, reduced.
  -- @param input [N, C] or [C]
  -- @param target 1-based class indices (int64 or int32) [N], or 0-d for [C] input
  -- @param opts {p = 1 (1 or 2), margin = 1, weight = [C] tensor, reduction = "mean"}
  -- @usage F.multi_margin_loss(scores, labels, { margin = 0.5 })
  function F.multi_margin_loss(input, target, opts)
    local fname = "multi_margin_loss"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_index(target, fname, "target")
    local x, unbatched = rows(input, fname)
    local n, k = x:size(1), x:size(2)
    if target:dim() > 1 or target:numel() ~= n then
      fail(string.format("%s: target of shape %s does not match input of shape %s (expected %d class indices)",
        fname, shape_str(target), shape_str(input), n))
    end
    local t = target:to("int64"):reshape(n, 1)
    local z = (x - x:gather(2, t) + c.margin):clamp(0)
    if c.p == 2 then z = z * z end
    if c.weight ~= nil then
      need_float(c.weight, fname, "weight")
      if c.weight:dim() ~= 1 or c.weight:size(1) ~= k then
        fail(string.format("%s: weight of shape %s does not match the %d classes of input %s", fname,
          shape_str(c.weight), k, shape_str(input)))
      end
      z = z * c.weight:index_select(1, t:view(n)):view(n, 1)
    end
    -- the target's own class takes no part (its term would be margin^p)
    return reduce_rows(z:scatter(2, t, 0):sum(2) / k, unbatched, c.reduction)
  end

  --- F.multilabel_margin_loss(input, target, opts): the multi-label hinge
  -- loss of scores x [N, C] and, per sample, a list of target classes y:
  -- sum over the targets j and the non-target classes i of
  -- max(0, 1 - (x_j - x_i)) / C, reduced. Each row of target holds 1-based
  -- class indices, ended by the first index below 1 (0, or PyTorch's -1).
  -- @param input [N, C] or [C]
  -- @param target int64 or int32, input's shape
  -- @param opts {reduction = "mean"} or the reduction as a string
  -- @usage F.multilabel_margin_loss(scores, tide.tensor({ { 4, 1, 0, 0 } }, "int64"))
  function F.multilabel_margin_loss(input, target, opts)
    local fname = "multilabel_margin_loss"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_index(target, fname, "target")
    need_same(input, target, fname, "input", "target")
    local x, unbatched = rows(input, fname)
    local n, k = x:size(1), x:size(2)
    local t = target:to("int64"):reshape(n, k)
    local listed = t:lt(1):to("int64"):cumsum(2):eq(0)   -- before the first index below 1
    local safe = tide.where(listed, t, 1)
    -- which classes are targets: 1 scattered at each listed index (the others into a spare column k + 1)
    local is_target = tide.zeros({ n, k + 1 }, { dtype = "int64", device = x:device() })
      :scatter(2, tide.where(listed, t, k + 1), 1):narrow(2, 1, k):ne(0)
    local margins = (x:unsqueeze(2) - x:gather(2, safe):unsqueeze(3) + 1):clamp(0)   -- [N, target j, class i]
    local take = listed:unsqueeze(3):logical_and(is_target:logical_not():unsqueeze(2))
    return reduce_rows(tide.where(take, margins, 0):sum({ 2, 3 }) / k, unbatched, c.reduction)
  end

  -- -- likelihoods -------------------------------------------------------------------------------

  --- F.poisson_nll_loss(input, target, opts): the negative log-likelihood of
  -- target under Poisson(rate): exp(input) - target input with log_input
  -- (input = log rate), else input - target log(input + eps); full adds
  -- Stirling's approximation t log t - t + 0.5 log(2 pi t) where t > 1.
  -- @param input log-rates (log_input) or rates
  -- @param target counts, broadcasting with input
  -- @param opts {log_input = true, full = false, eps = 1e-8, reduction = "mean"}
  -- @usage F.poisson_nll_loss(log_rate, counts)
  function F.poisson_nll_loss(input, target, opts)
    local fname = "poisson_nll_loss"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_tensor(target, fname, "target")
    need_broadcast(input, target, fname, "input", "target")
    local loss
    if c.log_input then
      loss = input:exp() - target * input
    else
      loss = input - target * (input + c.eps):log()
    end
    if c.full then
      local big = target:gt(1)
      local t = tide.where(big, target, 1)   -- no log of 0 (or 0 * -inf in the gradient) where masked
      loss = loss + tide.where(big, t * t:log() - t + (t * (2 * math.pi)):log() * 0.5, 0)
    end
    return reduce(loss, c.reduction)
  end

  --- F.gaussian_nll_loss(input, target, var, opts): the negative
  -- log-likelihood of target under N(input, var): 0.5 (log(v) + (input -
  -- target)^2 / v), v = max(var, eps) (clamped without blocking var's
  -- gradient, as torch's); full adds 0.5 log(2 pi). var has input's shape,
  -- or input's without the last dimension or with 1 there (one variance per
  -- row), or is a number.
  -- @param input means
  -- @param target input's shape (or broadcasting to it)
  -- @param var variances (see above), not negative (not checked: it would need their values)
  -- @param opts {full = false, eps = 1e-6, reduction = "mean"}
  -- @usage F.gaussian_nll_loss(mu, y, sigma2)
  function F.gaussian_nll_loss(input, target, var, opts)
    local fname = "gaussian_nll_loss"
    local c = parse(fname, opts, fname)
    need_float(input, fname, "input")
    need_float(target, fname, "target")
    need_broadcast(input, target, fname, "input", "target")
    if type(var) == "number" then
      if not (var >= 0) then fail(string.format("%s: var must not be negative, got %s", fname, tostring(var))) end
      var = tide.full(input:shape(), var, { dtype = input:dtype(), device = input:device() })
    end
    need_float(var, fname, "var")
    if not same_shape(var, input) then
      local si, sv = input:shape(), var:shape()
      local lead = #si >= 1 and table.concat(si, ",", 1, #si - 1)
      if lead and #sv == #si - 1 and table.concat(sv, ",") == lead then
        var = var:unsqueeze(-1)
      elseif not (lead and #sv == #si and sv[#sv] == 1 and table.concat(sv, ",", 1, #sv - 1) == lead) then
        fail(string.format("%s: var of shape %s does not match input of shape %s (input's shape, or it without " ..
          "its last dimension or with 1 there)", fname, shape_str(var), shape_str(input)))
      end
    end
    local v = var + (var:clamp(c.eps) - var):detach()   -- the clamped value, the identity's gradient
    local d = input - target
    local loss = (v:log() + d * d / v) * 0.5
    if c.full then loss = loss + 0.5 * math.log(2 * math.pi) end
    return reduce(loss, c.reduction)
  end

  -- -- modules -------------------------------------------------------------------------------------

  -- nn.<cname>(opts): the loss fname as a module of n tensor arguments; its
  -- options become fields (weight a buffer) and are checked at construction.
  local function loss_module(cname, fname, n, with_weight)
    local cls = Module:extend(cname)
    local f, spec = F[fname], OPTIONS[fname]
    function cls:init(opts)
      local c = parse(fname, opts, cname)
      self.reduction = c.reduction
      for _, o in ipairs(spec) do self[o[1]] = c[o[1]] end
      if with_weight and c.weight ~= nil then
        if not is_tensor(c.weight) then fail(cname .. ": weight must be a tensor, got " .. type(c.weight)) end
        self:register_buffer("weight", c.weight)
      end
    end
    local function opts_of(self)
      local o = { reduction = self.reduction, weight = with_weight and self.weight or nil }
      for _, s in ipairs(spec) do o[s[1]] = self[s[1]] end
      return o
    end
    if n == 2 then
      function cls:forward(a, b) return f(a, b, opts_of(self)) end
    else
      function cls:forward(a, b, c) return f(a, b, c, opts_of(self)) end
    end
    function cls:extra_repr()
      local parts = {}
      for _, s in ipairs(spec) do
        local v = self[s[1]]
        if v ~= s[2] then
          parts[#parts + 1] = s[1] .. "=" .. (type(v) == "number" and string.format("%g", v) or tostring(v))
        end
      end
      if self.reduction ~= "mean" then parts[#parts + 1] = "reduction='" .. self.reduction .. "'" end
      return table.concat(parts, ", ")
    end
    nn[cname] = cls
    return cls
  end

  --- nn.L1Loss(opts): F.l1_loss as a module; opts {reduction} or the reduction as a string.
  -- @usage local loss = nn.L1Loss()(pred, y)
  loss_module("L1Loss", "l1_loss", 2)
  --- nn.SmoothL1Loss(opts): F.smooth_l1_loss as a module; opts {beta = 1, reduction}.
  -- @usage local loss = nn.SmoothL1Loss({ beta = 0.5 })(pred, y)
  loss_module("SmoothL1Loss", "smooth_l1_loss", 2)
  --- nn.HuberLoss(opts): F.huber_loss as a module; opts {delta = 1, reduction}.
  -- @usage local loss = nn.HuberLoss({ delta = 2 })(pred, y)
  loss_module("HuberLoss", "huber_loss", 2)
  --- nn.BCELoss(opts): F.binary_cross_entropy as a module; opts {weight, reduction},
  -- the weight kept as the buffer "weight".
  -- @usage local loss = nn.BCELoss()(probs, y)
  loss_module("BCELoss", "binary_cross_entropy", 2, true)
  --- nn.KLDivLoss(opts): F.kl_div as a module; opts {reduction = "mean", log_target = false}.
  -- @usage local loss = nn.KLDivLoss({ reduction = "batchmean" })(logq, p)
  loss_module("KLDivLoss", "kl_div", 2)
  --- nn.MarginRankingLoss(opts): F.margin_ranking_loss as a module; opts {margin = 0, reduction}.
  -- @usage local loss = nn.MarginRankingLoss({ margin = 0.1 })(s1, s2, y)
  loss_module("MarginRankingLoss", "margin_ranking_loss", 3)
  --- nn.HingeEmbeddingLoss(opts): F.hinge_embedding_loss as a module; opts {margin = 1, reduction}.
  -- @usage local loss = nn.HingeEmbeddingLoss()(dist, y)
  loss_module("HingeEmbeddingLoss", "hinge_embedding_loss", 2)
  --- nn.CosineEmbeddingLoss(opts): F.cosine_embedding_loss as a module; opts {margin = 0, reduction}.
  -- @usage local loss = nn.CosineEmbeddingLoss({ margin = 0.5 })(a, b, y)
  loss_module("CosineEmbeddingLoss", "cosine_embedding_loss", 3)
  --- nn.TripletMarginLoss(opts): F.triplet_margin_loss as a module;
  -- opts {margin = 1, p = 2, eps = 1e-6, swap = false, reduction}.
  -- @usage local loss = nn.TripletMarginLoss({ margin = 0.2 })(a, p, n)
  loss_module("TripletMarginLoss", "triplet_margin_loss", 3)
  --- nn.TripletMarginWithDistanceLoss(opts): F.triplet_margin_with_distance_loss
  -- as a module; opts {distance_function = F.pairwise_distance, margin = 1, swap = false, reduction}.
  -- @usage local loss = nn.TripletMarginWithDistanceLoss({ distance_function = nn.PairwiseDistance() })(a, p, n)
  loss_module("TripletMarginWithDistanceLoss", "triplet_margin_with_distance_loss", 3)
  --- nn.PoissonNLLLoss(opts): F.poisson_nll_loss as a module;
  -- opts {log_input = true, full = false, eps = 1e-8, reduction}.
  -- @usage local loss = nn.PoissonNLLLoss()(log_rate, counts)
  loss_module("PoissonNLLLoss", "poisson_nll_loss", 2)
  --- nn.GaussianNLLLoss(opts): F.gaussian_nll_loss(input, target, var) as a
  -- module; opts {full = false, eps = 1e-6, reduction}.
  -- @usage local loss = nn.GaussianNLLLoss()(mu, y, var)
  loss_module("GaussianNLLLoss", "gaussian_nll_loss", 3)
  --- nn.SoftMarginLoss(opts): F.soft_margin_loss as a module; opts {reduction}.
  -- @usage local loss = nn.SoftMarginLoss()(scores, y)
  loss_module("SoftMarginLoss", "soft_margin_loss", 2)
  --- nn.MultiLabelSoftMarginLoss(opts): F.multilabel_soft_margin_loss as a
  -- module; opts {weight, reduction}, the weight kept as the buffer "weight".
  -- @usage local loss = nn.MultiLabelSoftMarginLoss()(logits, y)
  loss_module("MultiLabelSoftMarginLoss", "multilabel_soft_margin_loss", 2, true)
  --- nn.MultiMarginLoss(opts): F.multi_margin_loss as a module; opts {p = 1,
  -- margin = 1, weight, reduction}, the weight kept as the buffer "weight".
  -- @usage local loss = nn.MultiMarginLoss({ margin = 0.5 })(scores, labels)
  loss_module("MultiMarginLoss", "multi_margin_loss", 2, true)
  --- nn.MultiLabelMarginLoss(opts): F.multilabel_margin_loss as a module; opts {reduction}.
  -- @usage local loss = nn.MultiLabelMarginLoss()(scores, targets)
  loss_module("MultiLabelMarginLoss", "multilabel_margin_loss", 2)
end
