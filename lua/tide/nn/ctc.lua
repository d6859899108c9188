--- tide.nn.ctc: the connectionist temporal classification loss, F.ctc_loss and
-- nn.CTCLoss, as PyTorch's. The forward (alpha) recursion runs over the time
-- steps on the blank-interleaved labels of the whole batch at once: one
-- logsumexp of three shifted copies per step, so autograd gives the gradient
-- and every device runs it. Log-zero is a large finite negative number rather
-- than -inf, so that unreachable states give zero gradients, not NaN. The
-- lengths are read on the host (as PyTorch's CPU kernel does) to lay out the
-- labels and the masks. Called once by tide.nn with the nn table.
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local fail = B.fail
local is_tensor = tide.is_tensor

local shape_str = args.shape_str

-- log(0): exp(NEG - x) is 0 for any reachable x, any sum of finite
-- log-probabilities added to it stays far below NEG / 2, and float32 holds it.
local NEG = -1e30

-- The lengths as a table of n integers: a table, a number (n = 1), or an
-- integer tensor of n elements (read back, waiting for its device).
local function lengths_of(v, n, fname, what)
  local l
  if type(v) == "number" then
    l = { v }
  elseif is_tensor(v) then
    if v:dtype() ~= "int64" and v:dtype() ~= "int32" then
      fail(string.format("%s: %s must be an int64 or int32 tensor, got %s", fname, what, v:dtype()))
    end
    l = v:reshape(-1):to("cpu"):totable()
  elseif type(v) == "table" then
    l = v
  else
    fail(string.format("%s: %s must be a tensor, a table or a number, got %s", fname, what, type(v)))
  end
  if #l ~= n then
    fail(string.format("%s: expected %d %s (one per sequence), got %d", fname, n, what, #l))
  end
  for i = 1, n do
    local x = l[i]
    if type(x) ~= "number" or x < 0 or x ~= math.floor(x) then
      fail(string.format("%s: %s[%d] must be a non-negative integer, got %s", fname, what, i, tostring(x)))
    end
  end
  return l
end

local OPTS = { blank = true, reduction = true, zero_infinity = true }

local function options(opts, fname)
  if type(opts) == "string" then opts = { reduction = opts } end
  opts = args.options(opts, fname, OPTS)
  local r = opts.reduction or "mean"
  if r ~= "mean" and r ~= "sum" and r ~= "none" then
    fail(string.format("%s: reduction must be 'mean', 'sum' or 'none', got %s", fname, tostring(r)))
  end
  local zi = args.need_bool(opts.zero_infinity, fname, "zero_infinity")
  local blank = opts.blank == nil and 1 or opts.blank
  if type(blank) ~= "number" or blank ~= math.floor(blank) then
    fail(string.format("%s: blank must be an integer (a 1-based class index), got %s", fname, tostring(blank)))
  end
  return r, zi, blank
end

-- The blank-interleaved labels [N, 2 S + 1] (blank, l1, blank, l2, ..., blank;
-- past a target's end all blank), one index_select from the targets.
-- at(n, s): the position of label s of sequence n in the flattened targets.
local function extended(flat, blank, tl, s_max, at)
  local src = tide.cat({ flat:to("int64"), tide.tensor({ blank }, { dtype = "int64", device = flat:device() }) }, 1)
  local none, idx = src:size(1), {}
  for n = 1, #tl do
    for k = 1, 2 * s_max + 1 do
      local s = k / 2
      idx[#idx + 1] = (k % 2 == 0 and s <= tl[n]) and at(n, s) or none
    end
  end
  return src:index_select(1, tide.tensor(idx, { dtype = "int64", device = flat:device() })):view({ #tl, 2 * s_max + 1 })
end

-- Where the alpha recursion may skip a blank: onto a label that differs from
-- the one two places before (never onto a blank, nor the first two places).
local function skips(ext, blank)
  local n, w = ext:size(1), ext:size(2)
  if w < 3 then return nil end
  local cur, prev = ext:narrow(2, 3, w - 2), ext:narrow(2, 1, w - 2)
  local ok = cur:ne(blank):logical_and(cur:ne(prev))
  return tide.cat({ tide.zeros({ n, 2 }, { dtype = "bool", device = ext:device() }), ok }, 2)
end

return function(nn)
  local F, Module = nn.functional, nn.Module

  -- log p(target | input) per sequence [N]: lp [T, N, C], ext [N, W].
  local function log_likelihood(lp, ext, il, tl, blank)
    local t_len, n, w = lp:size(1), lp:size(2), ext:size(2)
    local dev = lp:device()
    local opts = { dtype = lp:dtype(), device = dev }
    local emit = lp:gather(3, ext:unsqueeze(1):expand(t_len, n, w)):clamp(NEG)   -- [T, N, W]
    local skip = skips(ext, blank)
    local start = {}
    for i = 1, n do
      for k = 1, w do start[#start + 1] = k == 1 and 0 or NEG end
    end
    local alpha = tide.tensor(start, opts):view({ n, w })
    local longest, shortest = 0, math.huge
    for i = 1, n do longest, shortest = math.max(longest, il[i]), math.min(shortest, il[i]) end
    local live   -- [T, N, 1]: whether step t is within sequence n's input
    if shortest < longest then
      local l = {}
      for t = 1, longest do
        for i = 1, n do l[#l + 1] = t <= il[i] end
      end
      live = tide.tensor(l, { dtype = "bool", device = dev }):view({ longest, n, 1 })
    end
    local pad = tide.full({ n, 2 }, NEG, opts)
    for t = 1, longest do
      local shifted = tide.cat({ pad, alpha }, 2)
      local terms = { alpha, shifted:narrow(2, 2, w) }
      if skip then terms[3] = tide.where(skip, shifted:narrow(2, 1, w), NEG) end
      local nxt = tide.stack(terms, 3):logsumexp(3) + emit:select(1, t)
      -- the sequences whose input is over keep their alpha
      alpha = t > shortest and tide.where(live:select(1, t), nxt, alpha) or nxt
    end
    -- end in the last label or the blank after it
    local last, has_label = {}, {}
    for i = 1, n do
      last[2 * i - 1], last[2 * i] = 2 * tl[i] + 1, math.max(2 * tl[i], 1)
      has_label[2 * i - 1], has_label[2 * i] = true, tl[i] > 0
    end
    local ends = alpha:gather(2, tide.tensor(last, { dtype = "int64", device = dev }):view({ n, 2 }))
    ends = tide.where(tide.tensor(has_label, { dtype = "bool", device = dev }):view({ n, 2 }), ends, NEG)
    return ends:logsumexp(2)
  end

  --- F.ctc_loss(log_probs, targets, input_lengths, target_lengths, opts): the
  -- connectionist temporal classification loss, as PyTorch's:
  -- -log p(target | input), summed over every alignment of the target to the
  -- input's steps (labels repeated, blanks between). Classes are 1-based as
  -- everywhere in tide, so the blank is a class index too: blank = 1, the
  -- default, is the first class (PyTorch's default blank = 0). A target that
  -- no alignment fits (too long for its input) gives inf, or 0 (and no
  -- gradient) with zero_infinity. "mean" divides each loss by its target length
  -- (at least 1), then takes the mean over the batch. The lengths are read on
  -- the host; the target values are checked by the ops (gather).
  -- @param log_probs [T, N, C] log-probabilities (log_softmax over C), or [T, C] for one sequence
  -- @param targets 1-based class indices (int64 or int32): padded [N, S], or the N targets
  -- concatenated (1-d, sum(target_lengths) long), or [S] for one sequence
  -- @param input_lengths N lengths in 0..T: a tensor, a table or (one sequence) a number
  -- @param target_lengths N target lengths (at most S when padded): a tensor, a table or a number
  -- @param opts {blank = 1, reduction = "mean" | "sum" | "none", zero_infinity = false}
  -- @return the loss: 0-d, or [N] for "none" (0-d for one sequence)
  -- @usage local loss = F.ctc_loss(logits:log_softmax(3), targets, { 50, 42 }, { 12, 9 })
  function F.ctc_loss(log_probs, targets, input_lengths, target_lengths, opts)
    local fname = "ctc_loss"
    local reduction, zero_inf, blank = options(opts, fname)
    if not is_tensor(log_probs) or not log_probs:is_floating_point() then
      fail(string.format("%s: log_probs must be a floating-point tensor, got %s", fname,
        is_tensor(log_probs) and log_probs:dtype() or type(log_probs)))
    end
    if log_probs:dim() ~= 2 and log_probs:dim() ~= 3 then
      fail(string.format("%s: log_probs must be [T, N, C] or [T, C], got shape %s", fname, shape_str(log_probs)))
    end
    if not is_tensor(targets) or (targets:dtype() ~= "int64" and targets:dtype() ~= "int32") then
      fail(string.format("%s: targets must be an int64 or int32 tensor of 1-based class indices, got %s", fname,
        is_tensor(targets) and targets:dtype() or type(targets)))
    end
    local unbatched = log_probs:dim() == 2
    local lp = unbatched and log_probs:unsqueeze(2) or log_probs
    local t_len, n, c = lp:size(1), lp:size(2), lp:size(3)
    if blank < 1 or blank > c then
      fail(string.format("%s: blank %d is out of range for %d classes (1-based: PyTorch's blank = 0 is 1 here)",
        fname, blank, c))
    end
    if unbatched and targets:dim() ~= 1 then
      fail(string.format("%s: targets must be 1-d [S] for log_probs of shape %s, got shape %s", fname,
        shape_str(log_probs), shape_str(targets)))
    end
    if not unbatched and targets:dim() ~= 1 and targets:dim() ~= 2 then
      fail(string.format("%s: targets must be [N, S] or 1-d (concatenated), got shape %s", fname,
        shape_str(targets)))
    end
    local il = lengths_of(input_lengths, n, fname, "input_lengths")
    local tl = lengths_of(target_lengths, n, fname, "target_lengths")
    for i = 1, n do
      if il[i] > t_len then
        fail(string.format("%s: input_lengths[%d] = %d exceeds the %d steps of log_probs", fname, i, il[i], t_len))
      end
    end
    local padded = unbatched or targets:dim() == 2
    local s_max, total = 0, 0
    for i = 1, n do s_max, total = math.max(s_max, tl[i]), total + tl[i] end
    local at
    if padded then
      local s = targets:size(-1)
      if targets:dim() == 2 and targets:size(1) ~= n then
        fail(string.format("%s: targets of shape %s do not match the batch of %d", fname, shape_str(targets), n))
      end
      if s_max > s then
        fail(string.format("%s: a target length of %d exceeds the %d places of targets of shape %s", fname, s_max,
          s, shape_str(targets)))
      end
      at = function(i, k) return (i - 1) * s + k end
    else
      if total ~= targets:size(1) then
        fail(string.format("%s: the target lengths sum to %d but the concatenated targets hold %d", fname, total,
          targets:size(1)))
      end
      local offset, pos = {}, 0
      for i = 1, n do offset[i], pos = pos, pos + tl[i] end
      at = function(i, k) return offset[i] + k end
    end
    local work = lp
    if lp:dtype() ~= "float64" and lp:dtype() ~= "float32" then work = lp:to("float32") end
    local ext = extended(targets:reshape(-1), blank, tl, s_max, at)
    local ll = log_likelihood(work, ext, il, tl, blank)
    local loss = tide.where(ll:lt(NEG / 2), zero_inf and 0 or math.huge, -ll):to(lp:dtype())
    if reduction == "none" then return unbatched and loss:squeeze(1) or loss end
    if reduction == "sum" then return loss:sum() end
    local denom = {}
    for i = 1, n do denom[i] = math.max(tl[i], 1) end
    return (loss / tide.tensor(denom, { dtype = loss:dtype(), device = loss:device() })):mean()
  end

  --- nn.CTCLoss(opts): F.ctc_loss as a module; forward(log_probs, targets,
  -- input_lengths, target_lengths).
  -- @param opts {blank = 1 (1-based: the first class), reduction = "mean", zero_infinity = false}
  -- @usage local loss = nn.CTCLoss()(log_probs, targets, input_lengths, target_lengths)
  local CTCLoss = Module:extend("CTCLoss")
  function CTCLoss:init(opts)
    self.reduction, self.zero_infinity, self.blank = options(opts, "CTCLoss")
  end
  function CTCLoss:forward(log_probs, targets, input_lengths, target_lengths)
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths,
      { blank = self.blank, reduction = self.reduction, zero_infinity = self.zero_infinity })
  end
  function CTCLoss:extra_repr()
    local parts = {}
    if self.blank ~= 1 then parts[#parts + 1] = "blank=" .. self.blank end
    if self.reduction ~= "mean" then parts[#parts + 1] = "reduction='" .. self.reduction .. "'" end
    if self.zero_infinity then parts[#parts + 1] = "zero_infinity=true" end
    return table.concat(parts, ", ")
  end
  nn.CTCLoss = CTCLoss
end
