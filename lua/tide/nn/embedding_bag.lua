--- tide.nn.embedding_bag: F.embedding_bag and nn.EmbeddingBag, as PyTorch's:
-- the sum, mean or max of the embeddings of each bag of indices, without
-- building the [bags, indices, dim] tensor of all of them. Composed of
-- index_select, searchsorted and index_add (max: a padded gather and max), so
-- autograd and every device cover it. Indices and offsets are 1-based. Not
-- here: max_norm, scale_grad_by_freq and sparse gradients.
-- Called once by tide.nn with the nn table.
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local fail = B.fail
local is_tensor = tide.is_tensor

local shape_str = args.shape_str

local function need_ints(x, fname, what)
  if not is_tensor(x) then fail(string.format("%s: %s must be a tensor, got %s", fname, what, type(x))) end
  if x:dtype() ~= "int64" and x:dtype() ~= "int32" then
    fail(string.format("%s: %s must be an int64 or int32 tensor of 1-based indices, got %s", fname, what, x:dtype()))
  end
end

local MODES = { sum = true, mean = true, max = true }
local KNOWN = { mode = true, per_sample_weights = true, include_last_offset = true, padding_idx = true }

-- opts checked: mode, include_last_offset, and padding_idx made positive (or nil).
local function parse(opts, n_rows, fname)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then fail(string.format("%s: options must be a table, got %s", fname, type(opts))) end
  for k in pairs(opts) do
    if not KNOWN[k] then
      fail(string.format("%s: unknown option '%s' (max_norm, scale_grad_by_freq and sparse are not supported)",
        fname, tostring(k)))
    end
  end
  local mode = opts.mode or "mean"
  if not MODES[mode] then
    fail(string.format("%s: mode must be 'sum', 'mean' or 'max', got %s", fname, tostring(mode)))
  end
  local last = args.need_bool(opts.include_last_offset, fname, "include_last_offset")
  local p = opts.padding_idx
  if p ~= nil then
    if type(p) ~= "number" or p ~= math.floor(p) or p == 0 or p > n_rows or p < -n_rows then
      fail(string.format("%s: padding_idx %s is out of range for %d embeddings", fname, tostring(p), n_rows))
    end
    if p < 0 then p = n_rows + p + 1 end
  end
  return mode, last, p
end

-- The bags as 1-based starts: offsets (a tensor, or a table checked here),
-- or one bag per row of a 2-d input. Returns the 1-d indices, the starts (an
-- int64 tensor or a table), the number of bags, and whether the starts end
-- with the end of the last bag (include_last_offset, for a 1-d input).
local function bags_of(input, offsets, last, fname)
  if input:dim() == 2 then
    if offsets ~= nil then
      fail(string.format("%s: offsets must be nil when input is 2-d (each row is a bag), got %s", fname,
        is_tensor(offsets) and "a tensor" or type(offsets)))
    end
    local nb, len = input:size(1), input:size(2)
    local starts = {}
    for b = 1, nb do starts[b] = (b - 1) * len + 1 end
    return input:reshape(-1), starts, nb, false
  end
  if input:dim() ~= 1 then
    fail(string.format("%s: input must be 1-d (with offsets) or 2-d [bags, indices], got shape %s", fname,
      shape_str(input)))
  end
  if offsets == nil then fail(fname .. ": offsets are required when input is 1-d") end
  local host
  if type(offsets) == "table" and not is_tensor(offsets) then
    host = offsets
    for i, o in ipairs(host) do
      if type(o) ~= "number" or o ~= math.floor(o) then
        fail(string.format("%s: offsets[%d] must be an integer, got %s", fname, i, tostring(o)))
      end
    end
  else
    need_ints(offsets, fname, "offsets")
    if offsets:dim() ~= 1 then
      fail(string.format("%s: offsets must be 1-d, got shape %s", fname, shape_str(offsets)))
    end
  end
  local count = host and #host or offsets:size(1)
  local nb = last and count - 1 or count
  if nb < 0 then fail(fname .. ": include_last_offset needs at least one offset (the end), got none") end
  return input, host or offsets, nb, last
end

-- Checks the host starts: the first is 1, they do not decrease, none is past n + 1.
local function check_starts(starts, n, fname)
  if #starts > 0 and starts[1] ~= 1 then
    fail(string.format("%s: offsets[1] must be 1 (the offsets are 1-based: PyTorch's 0 is 1 here), got %d", fname,
      starts[1]))
  end
  for i = 2, #starts do
    if starts[i] < starts[i - 1] or starts[i] > n + 1 then
      fail(string.format("%s: offsets[%d] = %d is out of order or past the end (%d indices): offsets must not " ..
        "decrease and be at most %d", fname, i, starts[i], n, n + 1))
    end
  end
end

return function(nn)
  local F, Module = nn.functional, nn.Module

  -- sum and mean: each index's row (times its weight) added into its bag's row.
  -- The bag of index i is the number of starts <= i (searchsorted), so with
  -- include_last_offset the indices past the end fall into an extra bag, dropped.
  local function sum_bags(flat, starts, nb, weight, psw, keep, mean)
    local n, dev = flat:size(1), flat:device()
    local opts = { dtype = weight:dtype(), device = weight:device() }
    local s = is_tensor(starts) and starts:to("int64") or tide.tensor(starts, { dtype = "int64", device = dev })
    local pos = tide.arange(1, n + 1, { dtype = "int64", device = dev })
    local bag = tide.searchsorted(s, pos, { right = true }) - 1
    local rows = weight:index_select(1, flat)
    if psw then rows = rows * psw:reshape({ n, 1 }) end
    if keep then rows = tide.where(keep:unsqueeze(2), rows, 0) end
    local buf = s:size(1)
    local out = tide.zeros({ buf, weight:size(2) }, opts):index_add(1, bag, rows)
    if mean then
      local ones = keep and keep:to(weight:dtype()) or tide.ones({ n }, opts)
      local cnt = tide.zeros({ buf }, opts):index_add(1, bag, ones)
      out = out / cnt:clamp(1):unsqueeze(2)
    end
    return out:narrow(1, 1, nb)
  end

  -- max: the rows gathered into [bags, longest bag, dim], the places past a
  -- bag's end or holding padding_idx set to -inf, the max along the bag
  -- (its gradient goes to the row it picked); an empty bag gives zeros.
  local function max_bags(flat, starts, nb, weight, keep, ends_at)
    local dev = flat:device()
    local longest, idx, inside = 0, {}, {}
    for b = 1, nb do longest = math.max(longest, (starts[b + 1] or ends_at) - starts[b]) end
    if longest == 0 then return tide.zeros({ nb, weight:size(2) }, { dtype = weight:dtype(), device = dev }) end
    for b = 1, nb do
      local stop = starts[b + 1] or ends_at
      for j = 0, longest - 1 do
        local p = starts[b] + j
        idx[#idx + 1] = p < stop and p or 1
        inside[#inside + 1] = p < stop
      end
    end
    local at = tide.tensor(idx, { dtype = "int64", device = dev })
    local valid = tide.tensor(inside, { dtype = "bool", device = dev })
    if keep then valid = valid:logical_and(keep:index_select(1, at)) end
    valid = valid:view({ nb, longest, 1 })
    local rows = weight:index_select(1, flat:index_select(1, at)):view({ nb, longest, weight:size(2) })
    local best = rows:masked_fill(valid:logical_not(), -math.huge):max(2)
    return tide.where(valid:any(2), best, 0)
  end

  --- F.embedding_bag(input, weight, offsets, opts): for each bag of indices,
  -- the sum, mean or max of their rows of weight, as PyTorch's. Bags are the
  -- rows of a 2-d input, or, for a 1-d input, the runs that start at offsets
  -- (1-based positions in input: PyTorch's offsets plus one; offsets[1] must
  -- be 1). An empty bag gives zeros. per_sample_weights (input's shape,
  -- weight's dtype; mode "sum" only) scale each row before the sum. Indices
  -- equal to padding_idx are left out of their bag (of the mean's count too)
  -- and give no gradient. With include_last_offset, offsets has one more
  -- entry, the end of the last bag (#input + 1, the CSR layout). The offsets
  -- of a tensor are read back (waiting for the device) in mode "max" only;
  -- elsewhere bad ones are found by the ops, and indices are not checked here.
  -- @param input an int64 or int32 tensor of 1-based indices, 1-d or 2-d [bags, indices]
  -- @param weight [num_embeddings, embedding_dim]
  -- @param offsets a 1-d int64 tensor or a table of 1-based starts (1-d input only), or nil
  -- @param opts {mode = "mean" | "sum" | "max", per_sample_weights, include_last_offset = false, padding_idx}
  -- @return [bags, embedding_dim]
  -- @usage local e = F.embedding_bag(tide.tensor({ 2, 4, 5, 1 }, "int64"), w, tide.tensor({ 1, 3 }, "int64"))
  function F.embedding_bag(input, weight, offsets, opts)
    local fname = "embedding_bag"
    need_ints(input, fname, "input")
    if not is_tensor(weight) or not weight:is_floating_point() or weight:dim() ~= 2 then
      fail(string.format("%s: weight must be a 2-d floating-point tensor [num_embeddings, embedding_dim], got %s",
        fname, is_tensor(weight) and weight:dtype() .. " of shape " .. shape_str(weight) or type(weight)))
    end
    local mode, last, pad = parse(opts, weight:size(1), fname)
    local psw = opts and opts.per_sample_weights
    if psw ~= nil then
      if mode ~= "sum" then
        fail(string.format("%s: per_sample_weights is only supported for mode 'sum', got mode '%s'", fname, mode))
      end
      if not is_tensor(psw) or psw:dtype() ~= weight:dtype() then
        fail(string.format("%s: per_sample_weights must be a %s tensor (weight's dtype), got %s", fname,
          weight:dtype(), is_tensor(psw) and psw:dtype() or type(psw)))
      end
      if table.concat(psw:shape(), ",") ~= table.concat(input:shape(), ",") then
        fail(string.format("%s: per_sample_weights of shape %s does not match input of shape %s", fname,
          shape_str(psw), shape_str(input)))
      end
    end
    local flat, starts, nb
    flat, starts, nb, last = bags_of(input, offsets, last, fname)
    local n = flat:size(1)
    if mode == "max" and is_tensor(starts) then starts = starts:to("cpu"):totable() end
    if not is_tensor(starts) then check_starts(starts, n, fname) end
    flat = flat:to("int64")
    local keep = pad and flat:ne(pad)
    if mode == "max" then
      local ends_at = last and starts[nb + 1] or n + 1
      return max_bags(flat, starts, nb, weight, keep, ends_at)
    end
    if n == 0 or nb == 0 then
      return tide.zeros({ nb, weight:size(2) }, { dtype = weight:dtype(), device = weight:device() })
    end
    return sum_bags(flat, starts, nb, weight, psw, keep, mode == "mean")
  end

  --- nn.EmbeddingBag(num_embeddings, embedding_dim, opts): F.embedding_bag
  -- with its own weight [num_embeddings, embedding_dim], drawn from N(0, 1)
  -- (the padding_idx row zeroed), as torch.nn.EmbeddingBag.
  -- @param opts {mode = "mean", padding_idx, include_last_offset = false, dtype = "float32", device}
  -- @usage local bag = nn.EmbeddingBag(1000, 64, { mode = "sum" }); local e = bag(idx, offsets)
  local EmbeddingBag = Module:extend("EmbeddingBag")
  function EmbeddingBag:init(num_embeddings, embedding_dim, opts)
    local o = nn._opts_of(opts, "EmbeddingBag")
    self.num_embeddings = nn._need_size(num_embeddings, "EmbeddingBag", "num_embeddings")
    self.embedding_dim = nn._need_size(embedding_dim, "EmbeddingBag", "embedding_dim")
    local mode, last, pad = parse({ mode = o.mode, include_last_offset = o.include_last_offset,
      padding_idx = o.padding_idx }, num_embeddings, "EmbeddingBag")
    self.mode, self.include_last_offset, self.padding_idx = mode, last, pad
    if o._weight ~= nil then
      self:register_parameter("weight", o._weight)
    else
      self:register_parameter("weight", nn._new_tensor({ num_embeddings, embedding_dim }, o))
      self:reset_parameters()
    end
  end
  --- Draws the weight again from N(0, 1) and zeroes the padding row.
  -- @usage bag:reset_parameters()
  function EmbeddingBag:reset_parameters()
    nn.init.normal_(self.weight)
    if self.padding_idx then
      tide.no_grad(function() self.weight:select(1, self.padding_idx):zero_() end)
    end
  end
  --- bag(input, offsets, per_sample_weights): F.embedding_bag with the module's options.
  -- @return [bags, embedding_dim]
  function EmbeddingBag:forward(input, offsets, per_sample_weights)
    return F.embedding_bag(input, self.weight, offsets, { mode = self.mode, per_sample_weights = per_sample_weights,
      include_last_offset = self.include_last_offset, padding_idx = self.padding_idx })
  end
  function EmbeddingBag:extra_repr()
    local s = string.format("%d, %d, mode='%s'", self.num_embeddings, self.embedding_dim, self.mode)
    if self.include_last_offset then s = s .. ", include_last_offset=true" end
    if self.padding_idx then s = s .. ", padding_idx=" .. self.padding_idx end
    return s
  end
  --- nn.EmbeddingBag.from_pretrained(weight, opts): an EmbeddingBag whose
  -- weight is `weight` (shared, not copied), frozen unless freeze = false.
  -- @param opts {freeze = true, mode = "mean", padding_idx, include_last_offset = false}
  -- @usage local bag = nn.EmbeddingBag.from_pretrained(vectors, { mode = "max" })
  function EmbeddingBag.from_pretrained(weight, opts)
    opts = opts or {}
    if not is_tensor(weight) or weight:dim() ~= 2 then
      fail("EmbeddingBag.from_pretrained: weight must be a 2-d tensor [num_embeddings, embedding_dim]")
    end
    local e = EmbeddingBag(weight:size(1), weight:size(2), { mode = opts.mode, padding_idx = opts.padding_idx,
      include_last_offset = opts.include_last_offset, _weight = weight:detach() })
    e.weight.requires_grad = opts.freeze == false
    return e
  end
  nn.EmbeddingBag = EmbeddingBag
end
