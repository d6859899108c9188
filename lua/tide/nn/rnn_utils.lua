--- tide.nn.utils.rnn: sequences of different lengths, as torch.nn.utils.rnn:
-- padding a list of sequences into one tensor and back, and packing them into
-- a PackedSequence (the steps of every sequence, longest first, with the number
-- of sequences still running at each step), which nn.RNN, nn.LSTM and nn.GRU
-- run without computing the padded steps. The layouts come from the lengths,
-- read on the host (a Lua table, or a CPU integer tensor as PyTorch wants);
-- the data moves by one index_select, so autograd and every device cover it.
-- Called once by tide.nn with the nn table.
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local fail = B.fail
local is_tensor = tide.is_tensor

local shape_str, options, need_bool, list_str = args.shape_str, args.options, args.need_bool, args.list_str

local function is_count(v) return type(v) == "number" and v >= 0 and v == math.floor(v) end

-- An int64 tensor of the 1-based indices in list, on device.
local function index_tensor(list, device)
  if #list == 0 then return tide.zeros({ 0 }, { dtype = "int64", device = device }) end
  return tide.tensor(list, { dtype = "int64", device = device })
end

-- The values of a 1-d integer tensor or of a table of integers, as a table.
local function int_list(v, fname, what)
  if is_tensor(v) then
    if v:dim() ~= 1 or (v:dtype() ~= "int64" and v:dtype() ~= "int32") then
      fail(string.format("%s: %s must be a table of integers or a 1-d int64 tensor, got a %s tensor of shape %s",
        fname, what, v:dtype(), shape_str(v)))
    end
    if v:device() ~= "cpu" then
      fail(string.format("%s: %s must be on the CPU (as in PyTorch), got a tensor on %s", fname, what, v:device()))
    end
    v = v:totable()
  elseif type(v) ~= "table" then
    fail(string.format("%s: %s must be a table of integers or a 1-d int64 tensor, got %s", fname, what, type(v)))
  end
  local r = {}
  for i = 1, #v do
    if not is_count(v[i]) then
      fail(string.format("%s: %s[%d] must be a non-negative integer, got %s", fname, what, i, tostring(v[i])))
    end
    r[i] = v[i]
  end
  return r
end

-- The order that sorts lens by decreasing length, ties in their given order.
local function decreasing(lens)
  local perm = {}
  for i = 1, #lens do perm[i] = i end
  table.sort(perm, function(a, b)
    if lens[a] ~= lens[b] then return lens[a] > lens[b] end
    return a < b
  end)
  return perm
end

-- Checks that each length is in 1..limit and, with enforce_sorted, that they
-- decrease; returns the order that sorts them (nil when enforce_sorted).
local function sort_lengths(lens, limit, enforce_sorted, fname)
  for i, l in ipairs(lens) do
    if l < 1 or (limit and l > limit) then
      fail(string.format("%s: length %d of sequence %d is out of range: each must be between 1 and %s", fname, l, i,
        limit and ("the padded length " .. limit) or "the longest"))
    end
  end
  if not enforce_sorted then return decreasing(lens) end
  for i = 2, #lens do
    if lens[i] > lens[i - 1] then
      fail(string.format("%s: lengths %s are not sorted in decreasing order; sort the batch, or pass " ..
        "enforce_sorted = false", fname, list_str(lens)))
    end
  end
  return nil
end

-- The packing of sequences of lengths lens (each in 1..limit): the sorting
-- order to keep (nil with enforce_sorted), the order itself, and the batch
-- sizes (batch_sizes[t]: how many sequences reach step t).
local function packing(lens, limit, enforce_sorted, fname)
  local perm = sort_lengths(lens, limit, enforce_sorted, fname)
  local order = perm or decreasing(lens)
  local bs = {}
  for t = 1, lens[order[1]] do
    local n = 0
    while n < #order and lens[order[n + 1]] >= t do n = n + 1 end
    bs[t] = n
  end
  return perm, order, bs
end

return function(nn)
  local utils = nn.utils or {}
  nn.utils = utils
  local M = {}
  utils.rnn = M

  -- -- PackedSequence ----------------------------------------------------------------------

  local Packed = {}
  Packed.__index = Packed

  --- Whether x is a PackedSequence.
  -- @usage if nn.utils.rnn.is_packed_sequence(x) then ... end
  function M.is_packed_sequence(x) return getmetatable(x) == Packed end

  -- perm: the sorted order (table of original positions) or nil for the identity.
  local function make_packed(data, bs, perm)
    local p = setmetatable({ data = data, _bs = bs, _perm = perm }, Packed)
    p.batch_sizes = tide.tensor(bs, { dtype = "int64", device = "cpu" })
    if perm then
      local inv = {}
      for j, b in ipairs(perm) do inv[b] = j end
      p._inv = inv
      p.sorted_indices = index_tensor(perm, data:device())
      p.unsorted_indices = index_tensor(inv, data:device())
    end
    return p
  end

  --- nn.utils.rnn.PackedSequence(data, batch_sizes, sorted_indices, unsorted_indices):
  -- the steps of a batch of sequences sorted by decreasing length, as
  -- PyTorch's: data [sum of lengths, *] holds step 1 of every sequence, then
  -- step 2 of those that reach it, and so on; batch_sizes[t] counts the
  -- sequences that reach step t. sorted_indices (1-based; nil when the batch
  -- came sorted) gives, for each place in the sorted order, the sequence's
  -- place in the original batch; unsorted_indices is its inverse. Usually
  -- made by pack_padded_sequence or pack_sequence, read by nn.RNN/LSTM/GRU.
  -- Fields: data, batch_sizes (a CPU int64 tensor), sorted_indices and
  -- unsorted_indices (int64 tensors on data's device, or nil).
  -- @param data a tensor [sum of lengths, *]
  -- @param batch_sizes a table or CPU int64 tensor of non-increasing positive counts that sum to data:size(1)
  -- @param sorted_indices a table or int64 tensor permuting 1..batch_sizes[1], or nil
  -- @param unsorted_indices its inverse (computed when nil)
  -- @usage local p = nn.utils.rnn.PackedSequence(data, { 2, 2, 1 })
  function M.PackedSequence(data, batch_sizes, sorted_indices, unsorted_indices)
    local fname = "PackedSequence"
    if not is_tensor(data) or data:dim() == 0 then
      fail(string.format("%s: data must be a tensor of at least 1 dimension, got %s", fname,
        is_tensor(data) and "a 0-d tensor" or type(data)))
    end
    local bs = int_list(batch_sizes, fname, "batch_sizes")
    if #bs == 0 then fail(fname .. ": batch_sizes is empty (a PackedSequence holds at least one step)") end
    local total = 0
    for t, b in ipairs(bs) do
      if b < 1 or (t > 1 and b > bs[t - 1]) then
        fail(string.format("%s: batch_sizes %s must be positive and non-increasing", fname, list_str(bs)))
      end
      total = total + b
    end
    if total ~= data:size(1) then
      fail(string.format("%s: batch_sizes %s sum to %d but data of shape %s holds %d steps", fname, list_str(bs),
        total, shape_str(data), data:size(1)))
    end
    local function perm_of(v, what)
      local l = is_tensor(v) and v:to("cpu"):totable() or int_list(v, fname, what)
      local seen = {}
      for _, i in ipairs(l) do
        if i < 1 or i > #l or seen[i] then
          fail(string.format("%s: %s %s is not a permutation of 1..%d", fname, what, list_str(l), #l))
        end
        seen[i] = true
      end
      if #l ~= bs[1] then
        fail(string.format("%s: %s has %d entries for a batch of %d", fname, what, #l, bs[1]))
      end
      return l
    end
    local perm
    if sorted_indices ~= nil then
      perm = perm_of(sorted_indices, "sorted_indices")
    elseif unsorted_indices ~= nil then
      local inv = perm_of(unsorted_indices, "unsorted_indices")
      perm = {}
      for b, j in ipairs(inv) do perm[j] = b end
    end
    return make_packed(data, bs, perm)
  end

  --- packed:to(...): the same sequences with data:to(...) (a dtype, a device or
  -- both); the indices follow the device.
  -- @usage local p64 = packed:to("float64")
  function Packed:to(...)
    return make_packed(self.data:to(...), self._bs, self._perm)
  end

  function Packed:__tostring()
    return string.format("PackedSequence(data=%s %s, batch_sizes=%s%s)", self.data:dtype(), shape_str(self.data),
      list_str(self._bs), self._perm and ", sorted_indices=" .. list_str(self._perm) or "")
  end

  -- A PackedSequence of p's layout holding data (for tide.nn.rnn, which also
  -- reads p._bs, the batch sizes as a table).
  function M._with_data(p, data)
    return setmetatable({ data = data, _bs = p._bs, _perm = p._perm, _inv = p._inv, batch_sizes = p.batch_sizes,
      sorted_indices = p.sorted_indices, unsorted_indices = p.unsorted_indices }, Packed)
  end

  -- -- packing ---------------------------------------------------------------------------------

  --- nn.utils.rnn.pack_padded_sequence(input, lengths, opts): packs a padded
  -- batch whose sequence b has lengths[b] steps (the rest is padding and is
  -- left out), for nn.RNN/LSTM/GRU.
  -- @param input [T, B, *] ([B, T, *] with batch_first)
  -- @param lengths a table or a 1-d CPU int64 tensor of B lengths, each in 1..T
  -- @param opts {batch_first = false, enforce_sorted = true}: with enforce_sorted the
  -- lengths must decrease; without it the batch is sorted (stably) and the order kept
  -- in sorted_indices
  -- @return a PackedSequence
  -- @usage local packed = nn.utils.rnn.pack_padded_sequence(x, { 5, 3 }, { batch_first = true })
  function M.pack_padded_sequence(input, lengths, opts)
    local fname = "pack_padded_sequence"
    opts = options(opts, fname, { batch_first = true, enforce_sorted = true })
    local batch_first = need_bool(opts.batch_first, fname, "batch_first")
    local enforce = opts.enforce_sorted == nil or need_bool(opts.enforce_sorted, fname, "enforce_sorted")
    if not is_tensor(input) or input:dim() < 2 then
      fail(string.format("%s: input must be a tensor [T, B, *] ([B, T, *] with batch_first), got %s", fname,
        is_tensor(input) and "shape " .. shape_str(input) or type(input)))
    end
    local lens = int_list(lengths, fname, "lengths")
    local t_len, n = input:size(batch_first and 2 or 1), input:size(batch_first and 1 or 2)
    if #lens ~= n then
      fail(string.format("%s: expected %d lengths for input of shape %s (batch of %d), got %d", fname, n,
        shape_str(input), n, #lens))
    end
    if n == 0 then fail(fname .. ": cannot pack an empty batch") end
    local perm, order, bs = packing(lens, t_len, enforce, fname)
    local idx = {}
    for t, count in ipairs(bs) do
      for j = 1, count do
        local b = order[j]
        idx[#idx + 1] = batch_first and (b - 1) * t_len + t or (t - 1) * n + b
      end
    end
    local shape = input:shape()
    table.remove(shape, 1)
    shape[1] = t_len * n
    local data = input:reshape(shape):index_select(1, index_tensor(idx, input:device()))
    return make_packed(data, bs, perm)
  end

  -- The tensors of a list, checked to share dtype, device and trailing shape.
  local function seq_list(sequences, fname)
    if type(sequences) ~= "table" or is_tensor(sequences) then
      fail(string.format("%s: sequences must be a table of tensors, got %s", fname,
        is_tensor(sequences) and "a tensor" or type(sequences)))
    end
    if #sequences == 0 then fail(fname .. ": sequences is empty") end
    local first = sequences[1]
    for i, s in ipairs(sequences) do
      if not is_tensor(s) or s:dim() == 0 then
        fail(string.format("%s: sequence %d must be a tensor of at least 1 dimension, got %s", fname, i,
          is_tensor(s) and "a 0-d tensor" or type(s)))
      end
      if i > 1 then
        local a, b = first:shape(), s:shape()
        table.remove(a, 1)
        table.remove(b, 1)
        if table.concat(a, ",") ~= table.concat(b, ",") then
          fail(string.format("%s: sequence %d of shape %s and sequence 1 of shape %s differ beyond their length",
            fname, i, shape_str(s), shape_str(first)))
        end
        if s:dtype() ~= first:dtype() or s:device() ~= first:device() then
          fail(string.format("%s: sequence %d is %s on %s but sequence 1 is %s on %s", fname, i, s:dtype(),
            s:device(), first:dtype(), first:device()))
        end
      end
    end
    return sequences
  end

  --- nn.utils.rnn.pack_sequence(sequences, opts): packs a list of sequences
  -- [L_i, *] (pack_padded_sequence of pad_sequence, without the padding).
  -- @param sequences a table of tensors [L_i, *], each L_i >= 1
  -- @param opts {enforce_sorted = true}: with it the lengths must decrease
  -- @return a PackedSequence
  -- @usage local packed = nn.utils.rnn.pack_sequence({ a, b, c }, { enforce_sorted = false })
  function M.pack_sequence(sequences, opts)
    local fname = "pack_sequence"
    opts = options(opts, fname, { enforce_sorted = true })
    local enforce = opts.enforce_sorted == nil or need_bool(opts.enforce_sorted, fname, "enforce_sorted")
    seq_list(sequences, fname)
    local lens, start = {}, {}
    local pos = 1
    for i, s in ipairs(sequences) do
      lens[i], start[i] = s:size(1), pos
      pos = pos + s:size(1)
    end
    local perm, order, bs = packing(lens, nil, enforce, fname)
    local idx = {}
    for t, count in ipairs(bs) do
      for j = 1, count do idx[#idx + 1] = start[order[j]] + t - 1 end
    end
    local all = #sequences == 1 and sequences[1] or tide.cat(sequences, 1)
    return make_packed(all:index_select(1, index_tensor(idx, all:device())), bs, perm)
  end

  -- -- padding ---------------------------------------------------------------------------------

  local function need_number(v, fname, what)
    if v ~= nil and type(v) ~= "number" then
      fail(string.format("%s: %s must be a number, got %s", fname, what, type(v)))
    end
    return v or 0
  end

  -- rows [P, *] with one more row of `value` after them, for indices that pick padding.
  local function with_pad_row(rows, value)
    local shape = rows:shape()
    shape[1] = 1
    return tide.cat({ rows, tide.full(shape, value, { dtype = rows:dtype(), device = rows:device() }) }, 1)
  end

  -- rows:index_select(1, idx) viewed as [T, B, *] or [B, T, *].
  local function padded_of(rows, idx, t_len, n, batch_first)
    local shape = rows:shape()
    table.remove(shape, 1)
    table.insert(shape, 1, batch_first and t_len or n)
    table.insert(shape, 1, batch_first and n or t_len)
    return rows:index_select(1, index_tensor(idx, rows:device())):view(shape)
  end

  --- nn.utils.rnn.pad_packed_sequence(sequence, opts): the inverse of
  -- pack_padded_sequence: the padded batch, in the original order of the
  -- sequences, and their lengths.
  -- @param sequence a PackedSequence
  -- @param opts {batch_first = false, padding_value = 0, total_length = the longest length}
  -- @return padded [T, B, *] ([B, T, *] with batch_first) and the lengths (a CPU int64 tensor)
  -- @usage local out, lengths = nn.utils.rnn.pad_packed_sequence(packed_out, { batch_first = true })
  function M.pad_packed_sequence(sequence, opts)
    local fname = "pad_packed_sequence"
    opts = options(opts, fname, { batch_first = true, padding_value = true, total_length = true })
    if not M.is_packed_sequence(sequence) then
      fail(string.format("%s: sequence must be a PackedSequence, got %s", fname,
        is_tensor(sequence) and "a tensor" or type(sequence)))
    end
    local batch_first = need_bool(opts.batch_first, fname, "batch_first")
    local value = need_number(opts.padding_value, fname, "padding_value")
    local bs, inv = sequence._bs, sequence._inv
    local longest, n = #bs, bs[1] or 0
    local t_len = opts.total_length or longest
    if not is_count(t_len) or t_len < longest then
      fail(string.format("%s: total_length must be an integer of at least the longest length %d, got %s", fname,
        longest, tostring(opts.total_length)))
    end
    local rows = with_pad_row(sequence.data, value)
    local pad = rows:size(1)
    local offset, idx = {}, {}
    offset[1] = 0
    for t = 1, longest do offset[t + 1] = offset[t] + bs[t] end
    local sorted_len = {}
    for j = 1, n do
      local l = 0
      while l < longest and bs[l + 1] >= j do l = l + 1 end
      sorted_len[j] = l
    end
    local lens = {}
    for b = 1, n do lens[b] = sorted_len[inv and inv[b] or b] end
    local function row(t, b)
      local j = inv and inv[b] or b
      return t <= sorted_len[j] and offset[t] + j or pad
    end
    for a = 1, batch_first and n or t_len do
      for c = 1, batch_first and t_len or n do
        idx[#idx + 1] = batch_first and row(c, a) or row(a, c)
      end
    end
    return padded_of(rows, idx, t_len, n, batch_first), tide.tensor(lens, { dtype = "int64", device = "cpu" })
  end

  --- nn.utils.rnn.pad_sequence(sequences, opts): a list of sequences [L_i, *]
  -- padded to the longest and stacked.
  -- @param sequences a table of tensors [L_i, *] of one dtype and device
  -- @param opts {batch_first = false, padding_value = 0, padding_side = "right" | "left"}
  -- @return [L, B, *] ([B, L, *] with batch_first), L the longest L_i
  -- @usage local x = nn.utils.rnn.pad_sequence({ a, b }, { batch_first = true })
  function M.pad_sequence(sequences, opts)
    local fname = "pad_sequence"
    opts = options(opts, fname, { batch_first = true, padding_value = true, padding_side = true })
    local batch_first = need_bool(opts.batch_first, fname, "batch_first")
    local value = need_number(opts.padding_value, fname, "padding_value")
    local side = opts.padding_side or "right"
    if side ~= "right" and side ~= "left" then
      fail(string.format("%s: padding_side must be 'right' or 'left', got %s", fname, tostring(side)))
    end
    seq_list(sequences, fname)
    local n, lens, start, longest = #sequences, {}, {}, 0
    local pos = 1
    for i, s in ipairs(sequences) do
      lens[i], start[i] = s:size(1), pos
      pos = pos + lens[i]
      longest = math.max(longest, lens[i])
    end
    local rows = with_pad_row(tide.cat(sequences, 1), value)
    local function row(t, b)
      local k = side == "right" and t or t - (longest - lens[b])
      return (k >= 1 and k <= lens[b]) and start[b] + k - 1 or pos
    end
    local idx = {}
    for a = 1, batch_first and n or longest do
      for c = 1, batch_first and longest or n do
        idx[#idx + 1] = batch_first and row(c, a) or row(a, c)
      end
    end
    return padded_of(rows, idx, longest, n, batch_first)
  end

  --- nn.utils.rnn.unpad_sequence(padded, lengths, opts): the inverse of
  -- pad_sequence (right padding): the list of sequences, each a view of its
  -- first lengths[b] steps.
  -- @param padded [T, B, *] ([B, T, *] with batch_first)
  -- @param lengths a table or a 1-d CPU int64 tensor of B lengths, each in 0..T
  -- @param opts {batch_first = false}
  -- @return a table of B tensors [lengths[b], *]
  -- @usage local seqs = nn.utils.rnn.unpad_sequence(x, { 3, 1 }, { batch_first = true })
  function M.unpad_sequence(padded, lengths, opts)
    local fname = "unpad_sequence"
    opts = options(opts, fname, { batch_first = true })
    local batch_first = need_bool(opts.batch_first, fname, "batch_first")
    if not is_tensor(padded) or padded:dim() < 2 then
      fail(string.format("%s: padded must be a tensor [T, B, *] ([B, T, *] with batch_first), got %s", fname,
        is_tensor(padded) and "shape " .. shape_str(padded) or type(padded)))
    end
    local lens = int_list(lengths, fname, "lengths")
    local bdim = batch_first and 1 or 2
    local t_len, n = padded:size(3 - bdim), padded:size(bdim)
    if #lens ~= n then
      fail(string.format("%s: expected %d lengths for padded of shape %s (batch of %d), got %d", fname, n,
        shape_str(padded), n, #lens))
    end
    local r = {}
    for b, l in ipairs(lens) do
      if l > t_len then
        fail(string.format("%s: length %d of sequence %d exceeds the padded length %d", fname, l, b, t_len))
      end
      r[b] = padded:select(bdim, b):narrow(1, 1, l)
    end
    return r
  end

  --- nn.utils.rnn.unpack_sequence(packed): the inverse of pack_sequence: the
  -- list of sequences in their original order.
  -- @param packed a PackedSequence
  -- @return a table of tensors [L_i, *]
  -- @usage local seqs = nn.utils.rnn.unpack_sequence(packed)
  function M.unpack_sequence(packed)
    if not M.is_packed_sequence(packed) then
      fail(string.format("unpack_sequence: packed must be a PackedSequence, got %s",
        is_tensor(packed) and "a tensor" or type(packed)))
    end
    local padded, lens = M.pad_packed_sequence(packed, { batch_first = true })
    return M.unpad_sequence(padded, lens, { batch_first = true })
  end
end
