-- Sequence tools: nn.utils.rnn (padding and packing, round trips sorted and
-- unsorted in both layouts, PackedSequence through nn.RNN/LSTM/GRU against
-- each sequence run alone), F.embedding_bag / nn.EmbeddingBag against a
-- plain-Lua reference for every mode and option, F.ctc_loss / nn.CTCLoss
-- against a plain-Lua float64 forward algorithm (itself checked against every
-- alignment), gradcheck of each, and their error messages.
local tide = require "tide"
local H = require "spec.helpers"
local nn = tide.nn
local F = nn.functional
local R = nn.utils.rnn

local gradcheck = tide.autograd.gradcheck

local vals = H.random_tables(7972)   -- vals(shape, lo, hi): nested tables of values in [lo, hi)
local function f64(t) return tide.tensor(t, "float64") end
local function i64(t) return tide.tensor(t, "int64") end
local function cpu_i64(t) return tide.tensor(t, { dtype = "int64", device = "cpu" }) end

-- -- padding and packing ------------------------------------------------------------------------

-- Three sequences [L_i, 2] of lengths 2, 4 and 1 (unsorted), as tables.
local function three()
  return { vals({ 2, 2 }), vals({ 4, 2 }), vals({ 1, 2 }) }
end

-- The padded batch [T][B][2] (or [B][T][2]) of seqs, right or left padded with v.
local function ref_pad(seqs, batch_first, v, left)
  local longest = 0
  for _, s in ipairs(seqs) do longest = math.max(longest, #s) end
  local r = {}
  for t = 1, longest do
    for b, s in ipairs(seqs) do
      local k = left and t - (longest - #s) or t
      local row = (k >= 1 and k <= #s) and s[k] or { v, v }
      if batch_first then
        r[b] = r[b] or {}
        r[b][t] = row
      else
        r[t] = r[t] or {}
        r[t][b] = row
      end
    end
  end
  return r
end

-- The packed rows of seqs taken in `order` (longest first), and the batch sizes.
local function ref_pack(seqs, order)
  local data, bs = {}, {}
  for t = 1, #seqs[order[1]] do
    local n = 0
    for _, b in ipairs(order) do
      if #seqs[b] >= t then
        data[#data + 1] = seqs[b][t]
        n = n + 1
      end
    end
    bs[t] = n
  end
  return data, bs
end

describe("nn.utils.rnn", function()
  it("pads a list of sequences on either side, in either layout", function()
    local s = three()
    local ts = { f64(s[1]), f64(s[2]), f64(s[3]) }
    H.equal(R.pad_sequence(ts), ref_pad(s, false, 0))
    H.equal(R.pad_sequence(ts, { batch_first = true, padding_value = -1 }), ref_pad(s, true, -1))
    H.equal(R.pad_sequence(ts, { padding_side = "left", padding_value = 7 }), ref_pad(s, false, 7, true))
    H.equal(R.pad_sequence(ts, { batch_first = true, padding_side = "left" }), ref_pad(s, true, 0, true))
    local with_empty = R.pad_sequence({ tide.zeros({ 0, 2 }, "float64"), ts[3] }, { batch_first = true })
    H.equal(with_empty, { { { 0, 0 } }, s[3] })
  end)

  it("packs a list of sequences, sorted or not, and unpacks it", function()
    local s = three()
    local ts = { f64(s[1]), f64(s[2]), f64(s[3]) }
    local p = R.pack_sequence(ts, { enforce_sorted = false })
    assert.is_true(R.is_packed_sequence(p))
    local data, bs = ref_pack(s, { 2, 1, 3 })
    H.equal(p.data, data)
    H.equal(p.batch_sizes, bs)
    assert.are.equal("cpu", p.batch_sizes:device())
    assert.are.equal("int64", p.batch_sizes:dtype())
    H.equal(p.sorted_indices, { 2, 1, 3 })
    H.equal(p.unsorted_indices, { 2, 1, 3 })
    assert.are.equal(tide.get_default_device(), p.sorted_indices:device())
    local back = R.unpack_sequence(p)
    for i = 1, 3 do H.equal(back[i], s[i]) end
    local sorted = R.pack_sequence({ ts[2], ts[1], ts[3] })
    H.equal(sorted.data, data)
    assert.is_nil(sorted.sorted_indices)
    assert.is_nil(sorted.unsorted_indices)
    assert.are.equal("PackedSequence(data=float64 [7,2], batch_sizes={3, 2, 1, 1}, sorted_indices={2, 1, 3})",
      tostring(p))
  end)

  it("packs a padded batch and pads it back, sorted or not, in either layout", function()
    local s = three()
    for _, bf in ipairs { false, true } do
      for _, sorted in ipairs { false, true } do
        local seqs = sorted and { s[2], s[1], s[3] } or s
        local order = sorted and { 1, 2, 3 } or { 2, 1, 3 }
        local lens = sorted and { 4, 2, 1 } or { 2, 4, 1 }
        local padded = f64(ref_pad(seqs, bf, 9))
        for _, l in ipairs { lens, cpu_i64(lens) } do
          local p = R.pack_padded_sequence(padded, l, { batch_first = bf, enforce_sorted = sorted })
          local data, bs = ref_pack(seqs, order)
          H.equal(p.data, data, "data")
          H.equal(p.batch_sizes, bs, "batch_sizes")
          if sorted then assert.is_nil(p.sorted_indices) else H.equal(p.sorted_indices, order) end
          local out, out_lens = R.pad_packed_sequence(p, { batch_first = bf, padding_value = -2 })
          H.equal(out, ref_pad(seqs, bf, -2), "padded back")
          H.equal(out_lens, lens, "lengths")
          assert.are.equal("cpu", out_lens:device())
          local long = R.pad_packed_sequence(p, { batch_first = bf, total_length = 6 })
          assert.are.same(bf and { 3, 6, 2 } or { 6, 3, 2 }, long:shape())
          H.equal(long:narrow(bf and 2 or 1, 5, 2), tide.zeros(bf and { 3, 2, 2 } or { 2, 3, 2 }))
          local back = R.unpad_sequence(out, out_lens, { batch_first = bf })
          for i = 1, 3 do H.equal(back[i], seqs[i]) end
        end
      end
    end
  end)

  it("builds a PackedSequence from its parts and moves it with to", function()
    local data = f64(vals({ 5, 3 }))
    local p = R.PackedSequence(data, { 2, 2, 1 }, { 2, 1 })
    H.equal(p.unsorted_indices, { 2, 1 })
    local q = R.PackedSequence(data, cpu_i64({ 2, 2, 1 }), nil, i64({ 2, 1 }))
    H.equal(q.sorted_indices, { 2, 1 })
    local _, lens = R.pad_packed_sequence(p)
    H.equal(lens, { 2, 3 })
    local p32 = p:to("float32")
    assert.are.equal("float32", p32.data:dtype())
    H.equal(p32.sorted_indices, { 2, 1 })
    assert.is_nil(R.PackedSequence(data, { 2, 2, 1 }).sorted_indices)
  end)

  it("passes gradients through packing and padding (gradcheck)", function()
    local x = f64(vals({ 4, 3, 2 })):requires_grad_()
    assert.is_true(gradcheck(function(a)
      local p = R.pack_padded_sequence(a, { 2, 4, 1 }, { enforce_sorted = false })
      return R.pad_packed_sequence(p, { padding_value = 3 }) * 2
    end, { x }))
    local a, b = f64(vals({ 3, 2 })):requires_grad_(), f64(vals({ 1, 2 })):requires_grad_()
    assert.is_true(gradcheck(function(u, v)
      return R.pad_sequence({ v, u }, { padding_side = "left" })
    end, { a, b }))
  end)
end)

-- -- recurrent layers on packed sequences -----------------------------------------------------

describe("nn.RNN, nn.LSTM, nn.GRU on a PackedSequence", function()
  local lens = { 2, 4, 1 }
  local classes = { { "RNN", {} }, { "RNN", { nonlinearity = "relu" } }, { "LSTM", {} }, { "GRU", {} } }

  local function check_each(m, name, seqs, p, hx)
    local is_lstm = name == "LSTM"
    local out, hn, cn = m(p, hx)
    assert.is_true(R.is_packed_sequence(out))
    H.equal(out.batch_sizes, p.batch_sizes)
    local outs = R.unpack_sequence(out)
    for i, s in ipairs(seqs) do
      local h_i
      if hx then
        h_i = is_lstm and { hx[1]:select(2, i), hx[2]:select(2, i) } or hx:select(2, i)
      end
      local o1, h1, c1 = m(s, h_i)
      H.close(outs[i], o1, 1e-12, 1e-12, name .. " output of sequence " .. i)
      H.close(hn:select(2, i), h1, 1e-12, 1e-12, name .. " h_n of sequence " .. i)
      if is_lstm then H.close(cn:select(2, i), c1, 1e-12, 1e-12, "LSTM c_n of sequence " .. i) end
    end
  end

  it("equal each sequence run alone, with 2 layers and both directions", function()
    for _, c in ipairs(classes) do
      local name = c[1]
      local o = { num_layers = 2, bidirectional = true, dtype = "float64", nonlinearity = c[2].nonlinearity }
      local m = nn[name](3, 4, o)
      local seqs = {}
      for i, l in ipairs(lens) do seqs[i] = f64(vals({ l, 3 })) end
      local unsorted = R.pack_sequence(seqs, { enforce_sorted = false })
      check_each(m, name, seqs, unsorted)
      local h0, c0 = f64(vals({ 4, 3, 4 })), f64(vals({ 4, 3, 4 }))
      check_each(m, name, seqs, unsorted, name == "LSTM" and { h0, c0 } or h0)
      local sorted = R.pack_padded_sequence(R.pad_sequence({ seqs[2], seqs[1], seqs[3] }), { 4, 2, 1 })
      check_each(m, name, { seqs[2], seqs[1], seqs[3] }, sorted)
    end
  end)

  it("ignore batch_first (the packed layout is its own) and keep the weights' dtype", function()
    local m = nn.GRU(3, 4, { batch_first = true, dtype = "float64" })
    local seqs = { f64(vals({ 3, 3 })), f64(vals({ 1, 3 })) }
    check_each(m, "GRU", seqs, R.pack_sequence(seqs))
    local out = m(R.pack_sequence(seqs))
    assert.are.equal("float64", out.data:dtype())
    assert.are.same({ 4, 4 }, out.data:shape())
  end)

  it("pass gradients to the input, h_0, c_0 and the weights (gradcheck)", function()
    local lstm = nn.LSTM(2, 2, { bidirectional = true, dtype = "float64" })
    local x, h0, c0 = f64(vals({ 3, 3, 2 })), f64(vals({ 2, 3, 2 })), f64(vals({ 2, 3, 2 }))
    for _, t in ipairs { x, h0, c0 } do t:requires_grad_() end
    assert.is_true(gradcheck(function(a, h, c)
      local out, hn, cn = lstm(R.pack_padded_sequence(a, { 2, 3, 1 }, { enforce_sorted = false }), { h, c })
      return { R.pad_packed_sequence(out), hn, cn }
    end, { x, h0, c0, lstm.weight_hh_l0_reverse, lstm.bias_ih_l0 }))
  end)

  it("reject packed data of the wrong shape, dtype or state", function()
    local m = nn.LSTM(3, 4, { dtype = "float64" })
    local p = R.pack_sequence({ f64(vals({ 2, 3 })), f64(vals({ 1, 3 })) })
    assert.has_error(function() m(R.PackedSequence(f64(vals({ 3, 2 })), { 2, 1 })) end,
      "LSTM: input size must be 3, got 2")
    assert.has_error(function() m(R.PackedSequence(tide.zeros({ 3, 1, 3 }, "float64"), { 2, 1 })) end,
      "LSTM: expected the data of a PackedSequence to be 2-d [sum of lengths, input_size], got shape [3,1,3]")
    assert.has_error(function() m(p:to("float32")) end, "LSTM: input is float32 but the parameters are float64")
    assert.has_error(function() m(p, { tide.zeros({ 1, 3, 4 }, "float64"), tide.zeros({ 1, 3, 4 }, "float64") }) end,
      "LSTM: expected h_0 of shape [1,2,4], got [1,3,4]")
  end)
end)

-- -- embedding_bag ------------------------------------------------------------------------------

-- The bags of n indices as {first, last} positions, from their starts (with
-- last, the final entry ends the last bag).
local function ref_bags(n, starts, last)
  local bags, nb = {}, last and #starts - 1 or #starts
  for b = 1, nb do
    local stop = (starts[b + 1] or n + 1) - 1
    bags[b] = { starts[b], stop }
  end
  return bags
end

local function ref_embedding_bag(W, input, bags, mode, psw, pad)
  local out = {}
  for b, r in ipairs(bags) do
    local acc, cnt = {}, 0
    for d = 1, #W[1] do acc[d] = mode == "max" and -math.huge or 0 end
    for p = r[1], r[2] do
      local i = input[p]
      if i ~= pad then
        cnt = cnt + 1
        for d = 1, #W[1] do
          local v = W[i][d] * (psw and psw[p] or 1)
          acc[d] = mode == "max" and math.max(acc[d], v) or acc[d] + v
        end
      end
    end
    for d = 1, #W[1] do
      if cnt == 0 then acc[d] = 0 elseif mode == "mean" then acc[d] = acc[d] / cnt end
    end
    out[b] = acc
  end
  return out
end

describe("F.embedding_bag and nn.EmbeddingBag", function()
  local W = vals({ 6, 3 })
  local input = { 2, 5, 1, 6, 6, 3, 2, 4 }
  local starts = { 1, 3, 3, 7 }   -- bag 2 is empty

  it("match the reference in every mode, with offsets as a tensor or a table", function()
    local w = f64(W)
    for _, mode in ipairs { "sum", "mean", "max" } do
      for _, pad in ipairs { false, 2, -1 } do
        local want_pad = pad == -1 and 6 or pad or nil
        local o = { mode = mode, padding_idx = pad or nil }
        local want = ref_embedding_bag(W, input, ref_bags(#input, starts), mode, nil, want_pad)
        local what = mode .. " padding_idx " .. tostring(pad)
        H.close(F.embedding_bag(i64(input), w, i64(starts), o), want, 1e-12, 1e-12, what)
        H.close(F.embedding_bag(i64(input), w, starts, o), want, 1e-12, 1e-12, what .. " (table)")
        local ends = { 1, 3, 3, 7, 8 }   -- CSR: the last entry ends the last bag, index 8 falls out
        o.include_last_offset = true
        local want_last = ref_embedding_bag(W, input, ref_bags(#input, ends, true), mode, nil, want_pad)
        H.close(F.embedding_bag(i64(input), w, i64(ends), o), want_last, 1e-12, 1e-12, what .. " last offset")
        H.close(F.embedding_bag(tide.tensor(input, "int32"), w, ends, o), want_last, 1e-12, 1e-12, what .. " int32")
      end
    end
  end)

  it("take a 2-d input as one bag per row, and per-sample weights in mode sum", function()
    local w = f64(W)
    local rows = { { 2, 5, 2 }, { 6, 1, 4 } }
    local flat = { 2, 5, 2, 6, 1, 4 }
    for _, mode in ipairs { "sum", "mean", "max" } do
      local want = ref_embedding_bag(W, flat, { { 1, 3 }, { 4, 6 } }, mode, nil, 2)
      H.close(F.embedding_bag(i64(rows), w, nil, { mode = mode, padding_idx = 2 }), want, 1e-12, 1e-12, mode)
    end
    local psw = vals({ 8 })
    H.close(F.embedding_bag(i64(input), w, i64(starts), { mode = "sum", per_sample_weights = f64(psw) }),
      ref_embedding_bag(W, input, ref_bags(#input, starts), "sum", psw), 1e-12, 1e-12, "per_sample_weights")
    local psw2 = vals({ 2, 3 })
    H.close(F.embedding_bag(i64(rows), w, nil, { mode = "sum", per_sample_weights = f64(psw2), padding_idx = 5 }),
      ref_embedding_bag(W, flat, { { 1, 3 }, { 4, 6 } }, "sum", H.flat(psw2), 5), 1e-12, 1e-12, "2-d weighted")
  end)

  it("give zeros for empty bags and an empty input", function()
    local w = f64(W)
    for _, mode in ipairs { "sum", "mean", "max" } do
      H.equal(F.embedding_bag(tide.zeros({ 0 }, "int64"), w, i64({ 1, 1 }), { mode = mode }), tide.zeros({ 2, 3 }))
      H.equal(F.embedding_bag(tide.zeros({ 2, 0 }, "int64"), w, nil, { mode = mode }), tide.zeros({ 2, 3 }))
      H.equal(F.embedding_bag(i64({ 3, 3 }), w, { 1 }, { mode = mode, padding_idx = 3 }), tide.zeros({ 1, 3 }))
    end
  end)

  it("pass gradients to the weight and the per-sample weights (gradcheck)", function()
    local w = f64(W):requires_grad_()
    for _, mode in ipairs { "sum", "mean", "max" } do
      assert.is_true(gradcheck(function(a)
        return F.embedding_bag(i64(input), a, i64(starts), { mode = mode, padding_idx = 6 })
      end, { w }), mode)
    end
    local psw = f64(vals({ 8 })):requires_grad_()
    assert.is_true(gradcheck(function(a, p)
      return F.embedding_bag(i64(input), a, i64(starts), { mode = "sum", per_sample_weights = p })
    end, { w, psw }))
  end)

  it("is a module with its own weight, and from_pretrained", function()
    tide.manual_seed(3)
    local bag = nn.EmbeddingBag(6, 3, { mode = "max", padding_idx = 2, dtype = "float64" })
    assert.are.same({ 6, 3 }, bag.weight:shape())
    H.equal(bag.weight:select(1, 2), { 0, 0, 0 })
    local want = ref_embedding_bag(bag.weight:totable(), input, ref_bags(#input, starts), "max", nil, 2)
    H.close(bag(i64(input), i64(starts)), want, 1e-12, 1e-12)
    assert.are.equal("EmbeddingBag(6, 3, mode='max', padding_idx=2)", tostring(bag))
    local pre = nn.EmbeddingBag.from_pretrained(f64(W), { mode = "sum", include_last_offset = true })
    assert.is_false(pre.weight.requires_grad)
    local psw = vals({ 8 })
    H.close(pre(i64(input), i64({ 1, 3, 3, 7, 9 }), f64(psw)),
      ref_embedding_bag(W, input, ref_bags(#input, { 1, 3, 3, 7, 9 }, true), "sum", psw), 1e-12, 1e-12)
    assert.are.equal("EmbeddingBag(6, 3, mode='sum', include_last_offset=true)", tostring(pre))
    assert.is_true(nn.EmbeddingBag.from_pretrained(f64(W), { freeze = false }).weight.requires_grad)
  end)
end)

-- -- ctc_loss -----------------------------------------------------------------------------------

-- -log p(target | lp) by the forward algorithm in probability space: lp
-- [T][C] log-probabilities (only the first t_len steps used), target a table.
local function ref_ctc(lp, t_len, target, blank)
  local ext = { blank }
  for _, l in ipairs(target) do
    ext[#ext + 1] = l
    ext[#ext + 1] = blank
  end
  local w = #ext
  local alpha = {}
  for s = 1, w do alpha[s] = s == 1 and 1 or 0 end   -- before the first step
  for t = 1, t_len do
    local nxt = {}
    for s = 1, w do
      local a = alpha[s] + (alpha[s - 1] or 0)
      if s >= 3 and ext[s] ~= blank and ext[s] ~= ext[s - 2] then a = a + alpha[s - 2] end
      nxt[s] = a * math.exp(lp[t][ext[s]])
    end
    alpha = nxt
  end
  local p = alpha[w] + (w > 1 and alpha[w - 1] or 0)
  return -math.log(p)
end

-- The same by summing over every path of t_len steps that collapses to target.
local function brute_ctc(lp, t_len, target, blank)
  local c, total = #lp[1], 0
  local path = {}
  local function walk(t, logp)
    if t > t_len then
      local out, prev = {}, nil
      for _, k in ipairs(path) do
        if k ~= blank and k ~= prev then out[#out + 1] = k end
        prev = k
      end
      if table.concat(out, ",") == table.concat(target, ",") then total = total + math.exp(logp) end
      return
    end
    for k = 1, c do
      path[t] = k
      walk(t + 1, logp + lp[t][k])
    end
  end
  walk(1, 0)
  return -math.log(total)
end

local function log_softmax_rows(x)
  local r = {}
  for i, row in ipairs(x) do
    local m = -math.huge
    for _, v in ipairs(row) do m = math.max(m, v) end
    local s = 0
    for _, v in ipairs(row) do s = s + math.exp(v - m) end
    r[i] = {}
    for k, v in ipairs(row) do r[i][k] = v - m - math.log(s) end
  end
  return r
end

describe("F.ctc_loss and nn.CTCLoss", function()
  local T, N, C = 6, 5, 4
  local logits = vals({ T, N, C }, -2, 2)
  -- [T][N][C] log-probabilities, and one sequence's [T][C]
  local lp = {}
  for t = 1, T do lp[t] = log_softmax_rows(logits[t]) end
  local function seq(n)
    local r = {}
    for t = 1, T do r[t] = lp[t][n] end
    return r
  end
  -- a repeat, a repeat needing a blank between, an empty target, one too long
  -- for its input (5 steps needed, 3 given), and one with an empty input
  local targets = { { 2, 3, 2 }, { 3, 3 }, {}, { 4, 4, 4 }, {} }
  local in_lens = { 6, 5, 6, 3, 0 }
  local padded = { { 2, 3, 2 }, { 3, 3, 0 }, { 0, 0, 0 }, { 4, 4, 4 }, { 9, 9, 9 } }   -- padding is never read
  local concat = { 2, 3, 2, 3, 3, 4, 4, 4 }
  local tg_lens = { 3, 2, 0, 3, 0 }

  local function want(blank, tgts, zero_inf)
    local r = {}
    for n = 1, N do
      r[n] = ref_ctc(seq(n), in_lens[n], tgts[n], blank)
      if zero_inf and r[n] == math.huge then r[n] = 0 end
    end
    return r
  end

  it("has a reference that agrees with the sum over every alignment", function()
    for n = 1, 4 do
      local a, b = ref_ctc(seq(n), math.min(in_lens[n], 5), targets[n], 1), brute_ctc(seq(n),
        math.min(in_lens[n], 5), targets[n], 1)
      assert.is_true(a == b or math.abs(a - b) <= 1e-12 * math.abs(b), n .. ": " .. a .. " vs " .. b)
    end
    assert.are.equal(math.huge, ref_ctc(seq(4), 3, targets[4], 1))
    assert.are.equal(0, ref_ctc(seq(5), 0, {}, 1))
  end)

  it("matches the reference per sequence, padded or concatenated, with inf where nothing fits", function()
    local x = f64(lp)
    local e = want(1, targets)
    assert.are.equal(math.huge, e[4])
    H.close(F.ctc_loss(x, i64(padded), in_lens, tg_lens, { reduction = "none" }), e, 1e-12, 1e-12, "padded")
    H.close(F.ctc_loss(x, i64(concat), cpu_i64(in_lens), i64(tg_lens), "none"), e, 1e-12, 1e-12, "concatenated")
    H.close(F.ctc_loss(x, tide.tensor(padded, "int32"), tide.tensor(in_lens, "int32"), tg_lens, "none"), e,
      1e-12, 1e-12, "int32")
    local z = want(1, targets, true)
    H.close(F.ctc_loss(x, i64(padded), in_lens, tg_lens, { reduction = "none", zero_infinity = true }), z,
      1e-12, 1e-12, "zero_infinity")
  end)

  it("reduces by sum, or by the mean of the losses over their target lengths", function()
    local x = f64(lp)
    local z = want(1, targets, true)
    local sum, mean = 0, 0
    for n = 1, N do
      sum = sum + z[n]
      mean = mean + z[n] / math.max(tg_lens[n], 1) / N
    end
    local o = { zero_infinity = true }
    H.close(F.ctc_loss(x, i64(padded), in_lens, tg_lens, o), mean, 1e-12, 1e-12, "mean")
    o.reduction = "sum"
    H.close(F.ctc_loss(x, i64(padded), in_lens, tg_lens, o), sum, 1e-12, 1e-12, "sum")
    H.equal(F.ctc_loss(x, i64(padded), in_lens, tg_lens, "sum"), math.huge)
    H.close(nn.CTCLoss({ reduction = "sum", zero_infinity = true })(x, i64(padded), in_lens, tg_lens), sum,
      1e-12, 1e-12, "module")
  end)

  it("takes another blank, one unbatched sequence, and float32", function()
    local x = f64(lp)
    local tg = { { 2, 1, 1 }, { 1, 1 }, {}, { 2, 2, 2 }, {} }   -- classes 1..3 around blank 4
    H.close(F.ctc_loss(x, i64({ 2, 1, 1, 1, 1, 2, 2, 2 }), in_lens, tg_lens, { blank = 4, reduction = "none" }),
      want(4, tg), 1e-12, 1e-12, "blank 4")
    H.close(F.ctc_loss(x:select(2, 1), i64({ 2, 3, 2, 9 }), 6, 3, "none"), ref_ctc(seq(1), 6, { 2, 3, 2 }, 1),
      1e-12, 1e-12, "unbatched")
    H.close(F.ctc_loss(x:select(2, 2), i64({ 3, 3 }), { 5 }, i64({ 2 }), "mean"),
      ref_ctc(seq(2), 5, { 3, 3 }, 1) / 2, 1e-12, 1e-12, "unbatched mean")
    local f = F.ctc_loss(tide.tensor(lp, "float32"), i64(padded), in_lens, tg_lens, { reduction = "none" })
    assert.are.equal("float32", f:dtype())
    H.close(f, want(1, targets), 1e-5, 1e-5, "float32")
    assert.are.equal("CTCLoss(blank=4, reduction='none', zero_infinity=true)",
      tostring(nn.CTCLoss({ blank = 4, reduction = "none", zero_infinity = true })))
  end)

  it("passes gradients to the log-probabilities (gradcheck)", function()
    local x = f64(lp):requires_grad_()
    assert.is_true(gradcheck(function(a)
      return F.ctc_loss(a, i64(padded), in_lens, tg_lens, { zero_infinity = true, reduction = "none" })
    end, { x }))
    assert.is_true(gradcheck(function(a)
      return F.ctc_loss(a:log_softmax(3), i64(concat), { 6, 6, 4, 5, 1 }, tg_lens, { zero_infinity = true })
    end, { x }))
  end)
end)

-- -- errors -------------------------------------------------------------------------------------

describe("sequence tools", function()
  it("name the function and the values in their errors", function()
    local s = { f64(vals({ 2, 2 })), f64(vals({ 1, 2 })) }
    local x3 = f64(vals({ 3, 2, 2 }))
    local p = R.pack_sequence(s)
    local w = f64(vals({ 6, 3 }))
    local lp = f64(vals({ 4, 2, 3 }))
    local tg = i64({ { 2, 3 }, { 2, 0 } })
    local cases = {
      -- packing and padding
      { function() R.pack_padded_sequence(x3, { 3, 2.5 }) end,
        "pack_padded_sequence: lengths[2] must be a non-negative integer, got 2.5" },
      { function() R.pack_padded_sequence(x3, "3") end,
        "pack_padded_sequence: lengths must be a table of integers or a 1-d int64 tensor, got string" },
      { function() R.pack_padded_sequence(x3, tide.tensor({ 3, 2 }, { device = "cpu" })) end,
        "pack_padded_sequence: lengths must be a table of integers or a 1-d int64 tensor, got a float32 tensor " ..
        "of shape [2]" },
      { function() R.pack_padded_sequence(x3, { 3, 2, 1 }) end,
        "pack_padded_sequence: expected 2 lengths for input of shape [3,2,2] (batch of 2), got 3" },
      { function() R.pack_padded_sequence(x3, { 3, 4 }, { enforce_sorted = false }) end,
        "pack_padded_sequence: length 4 of sequence 2 is out of range: each must be between 1 and the padded " ..
        "length 3" },
      { function() R.pack_padded_sequence(x3, { 0, 2 }, { enforce_sorted = false }) end,
        "pack_padded_sequence: length 0 of sequence 1 is out of range: each must be between 1 and the padded " ..
        "length 3" },
      { function() R.pack_padded_sequence(x3, { 2, 3 }) end,
        "pack_padded_sequence: lengths {2, 3} are not sorted in decreasing order; sort the batch, or pass " ..
        "enforce_sorted = false" },
      { function() R.pack_padded_sequence(x3, { 3, 2 }, { batch_first = 1 }) end,
        "pack_padded_sequence: batch_first must be a boolean, got number" },
      { function() R.pack_padded_sequence(x3, { 3, 2 }, { sorted = true }) end,
        "pack_padded_sequence: unknown option 'sorted'" },
      { function() R.pack_padded_sequence(x3, { 3, 2 }, true) end,
        "pack_padded_sequence: options must be a table, got boolean" },
      { function() R.pack_padded_sequence(f64({ 1, 2 }), { 1 }) end,
        "pack_padded_sequence: input must be a tensor [T, B, *] ([B, T, *] with batch_first), got shape [2]" },
      { function() R.pack_padded_sequence(tide.zeros({ 3, 0 }), {}) end,
        "pack_padded_sequence: cannot pack an empty batch" },
      { function() R.pack_sequence({ s[2], s[1] }) end,
        "pack_sequence: lengths {1, 2} are not sorted in decreasing order; sort the batch, or pass " ..
        "enforce_sorted = false" },
      { function() R.pack_sequence({ s[1], tide.zeros({ 0, 2 }, "float64") }) end,
        "pack_sequence: length 0 of sequence 2 is out of range: each must be between 1 and the longest" },
      { function() R.pack_sequence(s[1]) end, "pack_sequence: sequences must be a table of tensors, got a tensor" },
      { function() R.pad_sequence({}) end, "pad_sequence: sequences is empty" },
      { function() R.pad_sequence({ s[1], 3 }) end,
        "pad_sequence: sequence 2 must be a tensor of at least 1 dimension, got number" },
      { function() R.pad_sequence({ s[1], f64(vals({ 2, 3 })) }) end,
        "pad_sequence: sequence 2 of shape [2,3] and sequence 1 of shape [2,2] differ beyond their length" },
      { function() R.pad_sequence({ s[1], s[2]:to("float32") }) end,
        "pad_sequence: sequence 2 is float32 on " .. s[1]:device() .. " but sequence 1 is float64 on " ..
        s[1]:device() },
      { function() R.pad_sequence(s, { padding_side = "middle" }) end,
        "pad_sequence: padding_side must be 'right' or 'left', got middle" },
      { function() R.pad_sequence(s, { padding_value = "0" }) end,
        "pad_sequence: padding_value must be a number, got string" },
      { function() R.pad_packed_sequence(x3) end, "pad_packed_sequence: sequence must be a PackedSequence, got a tensor" },
      { function() R.pad_packed_sequence(p, { total_length = 1 }) end,
        "pad_packed_sequence: total_length must be an integer of at least the longest length 2, got 1" },
      { function() R.unpad_sequence(x3, { 3 }) end,
        "unpad_sequence: expected 2 lengths for padded of shape [3,2,2] (batch of 2), got 1" },
      { function() R.unpad_sequence(x3, { 3, 4 }) end,
        "unpad_sequence: length 4 of sequence 2 exceeds the padded length 3" },
      { function() R.unpad_sequence(f64({ 1 }), { 1 }) end,
        "unpad_sequence: padded must be a tensor [T, B, *] ([B, T, *] with batch_first), got shape [1]" },
      { function() R.unpack_sequence({}) end, "unpack_sequence: packed must be a PackedSequence, got table" },
      { function() R.PackedSequence(3, { 1 }) end,
        "PackedSequence: data must be a tensor of at least 1 dimension, got number" },
      { function() R.PackedSequence(tide.zeros({ 0, 2 }), {}) end,
        "PackedSequence: batch_sizes is empty (a PackedSequence holds at least one step)" },
      { function() R.PackedSequence(f64(vals({ 3, 2 })), { 1, 2 }) end,
        "PackedSequence: batch_sizes {1, 2} must be positive and non-increasing" },
      { function() R.PackedSequence(f64(vals({ 3, 2 })), { 2, 2 }) end,
        "PackedSequence: batch_sizes {2, 2} sum to 4 but data of shape [3,2] holds 3 steps" },
      { function() R.PackedSequence(f64(vals({ 3, 2 })), { 2, 1 }, { 1, 1 }) end,
        "PackedSequence: sorted_indices {1, 1} is not a permutation of 1..2" },
      { function() R.PackedSequence(f64(vals({ 3, 2 })), { 2, 1 }, nil, { 1, 2, 3 }) end,
        "PackedSequence: unsorted_indices has 3 entries for a batch of 2" },
      -- embedding_bag
      { function() F.embedding_bag(f64({ 1 }), w, { 1 }) end,
        "embedding_bag: input must be an int64 or int32 tensor of 1-based indices, got float64" },
      { function() F.embedding_bag(i64({ 1 }), i64({ { 1 } }), { 1 }) end,
        "embedding_bag: weight must be a 2-d floating-point tensor [num_embeddings, embedding_dim], got int64 " ..
        "of shape [1,1]" },
      { function() F.embedding_bag(i64({ 1 }), w, { 1 }, { mode = "min" }) end,
        "embedding_bag: mode must be 'sum', 'mean' or 'max', got min" },
      { function() F.embedding_bag(i64({ 1 }), w, { 1 }, { max_norm = 1 }) end,
        "embedding_bag: unknown option 'max_norm' (max_norm, scale_grad_by_freq and sparse are not supported)" },
      { function() F.embedding_bag(i64({ 1 }), w, { 1 }, 3) end, "embedding_bag: options must be a table, got number" },
      { function() F.embedding_bag(i64({ 1 }), w, { 1 }, { include_last_offset = 1 }) end,
        "embedding_bag: include_last_offset must be a boolean, got number" },
      { function() F.embedding_bag(i64({ 1 }), w, { 1 }, { padding_idx = 7 }) end,
        "embedding_bag: padding_idx 7 is out of range for 6 embeddings" },
      { function() F.embedding_bag(i64({ 1 }), w, { 1 }, { padding_idx = 0 }) end,
        "embedding_bag: padding_idx 0 is out of range for 6 embeddings" },
      { function() F.embedding_bag(i64({ { 1 } }), w, { 1 }) end,
        "embedding_bag: offsets must be nil when input is 2-d (each row is a bag), got table" },
      { function() F.embedding_bag(i64({ { { 1 } } }), w) end,
        "embedding_bag: input must be 1-d (with offsets) or 2-d [bags, indices], got shape [1,1,1]" },
      { function() F.embedding_bag(i64({ 1 }), w) end, "embedding_bag: offsets are required when input is 1-d" },
      { function() F.embedding_bag(i64({ 1 }), w, { 1.5 }) end, "embedding_bag: offsets[1] must be an integer, got 1.5" },
      { function() F.embedding_bag(i64({ 1 }), w, f64({ 1 })) end,
        "embedding_bag: offsets must be an int64 or int32 tensor of 1-based indices, got float64" },
      { function() F.embedding_bag(i64({ 1 }), w, i64({ { 1 } })) end,
        "embedding_bag: offsets must be 1-d, got shape [1,1]" },
      { function() F.embedding_bag(i64({ 1 }), w, {}, { include_last_offset = true }) end,
        "embedding_bag: include_last_offset needs at least one offset (the end), got none" },
      { function() F.embedding_bag(i64({ 1, 2 }), w, { 0, 1 }) end,
        "embedding_bag: offsets[1] must be 1 (the offsets are 1-based: PyTorch's 0 is 1 here), got 0" },
      { function() F.embedding_bag(i64({ 1, 2 }), w, i64({ 1, 3, 2 }), { mode = "max" }) end,
        "embedding_bag: offsets[3] = 2 is out of order or past the end (2 indices): offsets must not decrease " ..
        "and be at most 3" },
      { function() F.embedding_bag(i64({ 1, 2 }), w, { 1, 4 }) end,
        "embedding_bag: offsets[2] = 4 is out of order or past the end (2 indices): offsets must not decrease " ..
        "and be at most 3" },
      { function() F.embedding_bag(i64({ 1 }), w, { 1 }, { mode = "mean", per_sample_weights = f64({ 1 }) }) end,
        "embedding_bag: per_sample_weights is only supported for mode 'sum', got mode 'mean'" },
      { function() F.embedding_bag(i64({ 1 }), w, { 1 }, { mode = "sum", per_sample_weights = tide.ones({ 1 }) }) end,
        "embedding_bag: per_sample_weights must be a float64 tensor (weight's dtype), got float32" },
      { function() F.embedding_bag(i64({ 1 }), w, { 1 }, { mode = "sum", per_sample_weights = f64({ 1, 2 }) }) end,
        "embedding_bag: per_sample_weights of shape [2] does not match input of shape [1]" },
      { function() nn.EmbeddingBag(4, 2, { mode = "avg" }) end,
        "EmbeddingBag: mode must be 'sum', 'mean' or 'max', got avg" },
      { function() nn.EmbeddingBag(4, -2) end, "EmbeddingBag: embedding_dim must be a non-negative integer, got -2" },
      { function() nn.EmbeddingBag(4, 2, { padding_idx = 5 }) end,
        "EmbeddingBag: padding_idx 5 is out of range for 4 embeddings" },
      { function() nn.EmbeddingBag.from_pretrained(f64({ 1 })) end,
        "EmbeddingBag.from_pretrained: weight must be a 2-d tensor [num_embeddings, embedding_dim]" },
      -- ctc_loss
      { function() F.ctc_loss(lp, tg, { 4, 4 }, { 2, 1 }, { reduction = "avg" }) end,
        "ctc_loss: reduction must be 'mean', 'sum' or 'none', got avg" },
      { function() F.ctc_loss(lp, tg, { 4, 4 }, { 2, 1 }, { zero_infinity = 1 }) end,
        "ctc_loss: zero_infinity must be a boolean, got number" },
      { function() F.ctc_loss(lp, tg, { 4, 4 }, { 2, 1 }, { blank = 0 }) end,
        "ctc_loss: blank 0 is out of range for 3 classes (1-based: PyTorch's blank = 0 is 1 here)" },
      { function() F.ctc_loss(lp, tg, { 4, 4 }, { 2, 1 }, { blank = 1.5 }) end,
        "ctc_loss: blank must be an integer (a 1-based class index), got 1.5" },
      { function() F.ctc_loss(lp, tg, { 4, 4 }, { 2, 1 }, { weight = 1 }) end, "ctc_loss: unknown option 'weight'" },
      { function() F.ctc_loss(lp, tg, { 4, 4 }, { 2, 1 }, 1) end, "ctc_loss: options must be a table, got number" },
      { function() F.ctc_loss(i64({ { 1 } }), tg, { 4, 4 }, { 2, 1 }) end,
        "ctc_loss: log_probs must be a floating-point tensor, got int64" },
      { function() F.ctc_loss(f64({ 1 }), tg, { 4, 4 }, { 2, 1 }) end,
        "ctc_loss: log_probs must be [T, N, C] or [T, C], got shape [1]" },
      { function() F.ctc_loss(lp, f64({ 1 }), { 4, 4 }, { 2, 1 }) end,
        "ctc_loss: targets must be an int64 or int32 tensor of 1-based class indices, got float64" },
      { function() F.ctc_loss(lp:select(2, 1), tg, 4, 2) end,
        "ctc_loss: targets must be 1-d [S] for log_probs of shape [4,3], got shape [2,2]" },
      { function() F.ctc_loss(lp, i64({ { { 1 } } }), { 4, 4 }, { 2, 1 }) end,
        "ctc_loss: targets must be [N, S] or 1-d (concatenated), got shape [1,1,1]" },
      { function() F.ctc_loss(lp, tg, { 4 }, { 2, 1 }) end,
        "ctc_loss: expected 2 input_lengths (one per sequence), got 1" },
      { function() F.ctc_loss(lp, tg, { 4, -1 }, { 2, 1 }) end,
        "ctc_loss: input_lengths[2] must be a non-negative integer, got -1" },
      { function() F.ctc_loss(lp, tg, f64({ 4, 4 }), { 2, 1 }) end,
        "ctc_loss: input_lengths must be an int64 or int32 tensor, got float64" },
      { function() F.ctc_loss(lp, tg, { 4, 4 }, "2") end,
        "ctc_loss: target_lengths must be a tensor, a table or a number, got string" },
      { function() F.ctc_loss(lp, tg, { 4, 5 }, { 2, 1 }) end,
        "ctc_loss: input_lengths[2] = 5 exceeds the 4 steps of log_probs" },
      { function() F.ctc_loss(lp, i64({ { 1, 2 } }), { 4, 4 }, { 2, 1 }) end,
        "ctc_loss: targets of shape [1,2] do not match the batch of 2" },
      { function() F.ctc_loss(lp, tg, { 4, 4 }, { 3, 1 }) end,
        "ctc_loss: a target length of 3 exceeds the 2 places of targets of shape [2,2]" },
      { function() F.ctc_loss(lp, i64({ 2, 3, 2 }), { 4, 4 }, { 2, 2 }) end,
        "ctc_loss: the target lengths sum to 4 but the concatenated targets hold 3" },
      { function() nn.CTCLoss({ reduction = "batchmean" }) end,
        "CTCLoss: reduction must be 'mean', 'sum' or 'none', got batchmean" },
    }
    for i, c in ipairs(cases) do assert.has_error(c[1], c[2], "case " .. i) end
  end)

  it("want lengths on the CPU for packing, as PyTorch does", function()
    local dev = tide.get_default_device()
    if dev == "cpu" then
      print("# skipped the lengths-on-a-device error: the suite runs on the CPU (run it with TIDE_DEFAULT_DEVICE)")
      return
    end
    assert.has_error(function() nn.utils.rnn.pack_padded_sequence(tide.zeros({ 2, 1, 1 }), i64({ 2 })) end,
      "pack_padded_sequence: lengths must be on the CPU (as in PyTorch), got a tensor on " .. dev)
  end)
end)
