--- tide.nn.rnn: the recurrent layers nn.RNN (tanh or relu), nn.LSTM and nn.GRU
-- and their one-step cells nn.RNNCell, nn.LSTMCell and nn.GRUCell, with
-- PyTorch's parameter names, shapes, gate order and initialisation, so that a
-- PyTorch state_dict maps onto them. Composed of tensor ops (one input
-- projection per layer and direction, then a hidden projection per time step),
-- so autograd, devices and tide.jit.compile cover them; a PackedSequence
-- (tide.nn.utils.rnn) runs only the steps each sequence has. Not here: LSTM's
-- proj_size.
-- Loaded by tide.nn, which passes itself in: `require("tide.nn.rnn")(nn)`.
local tide = require "tide"
local B = require "bindings.ffi"
local fail = B.fail
local is_tensor = tide.is_tensor

local function shape_str(t) return "[" .. table.concat(t:shape(), ",") .. "]" end
local function list_str(l) return "[" .. table.concat(l, ",") .. "]" end

-- -- one time step ------------------------------------------------------------------------
-- Each takes the input projection gi = x W_ih^T (+ b_ih), the hidden state h
-- (and the cell state c) and the hidden weights, and returns the new state.

local function hidden_proj(h, w_hh_t, b_hh)
  local gh = h:matmul(w_hh_t)
  if b_hh then gh = gh + b_hh end
  return gh
end

local function rnn_step(act)
  return function(gi, h, _, w_hh_t, b_hh)
    return act(gi + hidden_proj(h, w_hh_t, b_hh))
  end
end

-- gates in PyTorch's order i, f, g, o: c' = f c + i g, h' = o tanh(c')
local function lstm_step(gi, h, c, w_hh_t, b_hh)
  local gates = gi + hidden_proj(h, w_hh_t, b_hh)
  local hs = h:size(-1)
  local sig = gates:sigmoid()
  local i, f, o = sig:narrow(-1, 1, hs), sig:narrow(-1, hs + 1, hs), sig:narrow(-1, 3 * hs + 1, hs)
  local g = gates:narrow(-1, 2 * hs + 1, hs):tanh()
  c = f * c + i * g
  return o * c:tanh(), c
end

-- gates r, z, n: n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h
local function gru_step(gi, h, _, w_hh_t, b_hh)
  local gh = hidden_proj(h, w_hh_t, b_hh)
  local hs = h:size(-1)
  local rz = (gi:narrow(-1, 1, 2 * hs) + gh:narrow(-1, 1, 2 * hs)):sigmoid()
  local r, z = rz:narrow(-1, 1, hs), rz:narrow(-1, hs + 1, hs)
  local n = (gi:narrow(-1, 2 * hs + 1, hs) + r * gh:narrow(-1, 2 * hs + 1, hs)):tanh()
  return n + z * (h - n)
end

-- mode -> gates per hidden unit, the step, and whether b_hh may join b_ih in the input projection
local MODES = {
  RNN_TANH = { gates = 1, step = rnn_step(function(x) return x:tanh() end), fold_bias = true },
  RNN_RELU = { gates = 1, step = rnn_step(function(x) return x:relu() end), fold_bias = true },
  LSTM = { gates = 4, step = lstm_step, fold_bias = true },
  GRU = { gates = 3, step = gru_step, fold_bias = false },
}

local function rnn_mode(nonlinearity, cname)
  local nl = nonlinearity == nil and "tanh" or nonlinearity
  if nl == "tanh" then return "RNN_TANH" end
  if nl == "relu" then return "RNN_RELU" end
  fail(string.format("%s: nonlinearity must be 'tanh' or 'relu', got %s", cname, tostring(nonlinearity)))
end

return function(nn)
  local Module, opts_of, new_tensor, need_size, init = nn.Module, nn._opts_of, nn._new_tensor, nn._need_size, nn.init

  local function positive(v, cname, what)
    if type(v) ~= "number" or v < 1 or v ~= math.floor(v) then
      fail(string.format("%s: %s must be a positive integer, got %s", cname, what, tostring(v)))
    end
    return v
  end

  -- U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) for every parameter, as PyTorch.
  local function reset_all(m)
    local k = m.hidden_size > 0 and 1 / math.sqrt(m.hidden_size) or 0
    for _, p in ipairs(m:parameters()) do init.uniform_(p, -k, k) end
  end

  -- Checks that t is a floating-point tensor of the weights' dtype and device.
  local function need_like(t, w, cname, what)
    if not is_tensor(t) then fail(string.format("%s: %s must be a tensor, got %s", cname, what, type(t))) end
    if t:dtype() ~= w:dtype() then
      fail(string.format("%s: %s is %s but the parameters are %s", cname, what, t:dtype(), w:dtype()))
    end
    if t:device() ~= w:device() then
      fail(string.format("%s: %s is on %s but the parameters are on %s", cname, what, t:device(), w:device()))
    end
  end

  -- Checks a state tensor of shape `want` (a table of sizes).
  local function need_state(t, w, want, cname, what)
    need_like(t, w, cname, what)
    if table.concat(t:shape(), ",") ~= table.concat(want, ",") then
      fail(string.format("%s: expected %s of shape %s, got %s", cname, what, list_str(want), shape_str(t)))
    end
    return t
  end

  -- -- RNN, LSTM, GRU ------------------------------------------------------------------------

  -- The layers share everything but the mode (set by each class's init).
  local RNNBase = Module:extend("_RNNBase")
  function RNNBase:setup(mode, input_size, hidden_size, o)
    local cname = self:class_name()
    if o.nonlinearity ~= nil and MODES[mode].gates ~= 1 then
      fail(cname .. ": nonlinearity is an option of RNN and RNNCell only")
    end
    self.mode = mode
    self.input_size = need_size(input_size, cname, "input_size")
    self.hidden_size = positive(hidden_size, cname, "hidden_size")
    self.num_layers = positive(o.num_layers == nil and 1 or o.num_layers, cname, "num_layers")
    local dropout = o.dropout == nil and 0 or o.dropout
    if type(dropout) ~= "number" or dropout < 0 or dropout > 1 then
      fail(string.format("%s: dropout must be a number between 0 and 1, got %s", cname, tostring(dropout)))
    end
    if o.proj_size ~= nil and o.proj_size ~= 0 then fail(cname .. ": proj_size is not supported") end
    self.dropout = dropout
    self.bias = o.bias ~= false
    self.batch_first = o.batch_first == true
    self.bidirectional = o.bidirectional == true
    local dirs = self.bidirectional and 2 or 1
    local g = MODES[mode].gates * hidden_size
    for layer = 0, self.num_layers - 1 do
      local in_size = layer == 0 and input_size or hidden_size * dirs
      for dir = 1, dirs do
        local sfx = "_l" .. layer .. (dir == 2 and "_reverse" or "")
        self:register_parameter("weight_ih" .. sfx, new_tensor({ g, in_size }, o))
        self:register_parameter("weight_hh" .. sfx, new_tensor({ g, hidden_size }, o))
        if self.bias then
          self:register_parameter("bias_ih" .. sfx, new_tensor({ g }, o))
          self:register_parameter("bias_hh" .. sfx, new_tensor({ g }, o))
        end
      end
    end
    self:reset_parameters()
  end

  --- Draws every weight and bias again from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
  -- @usage lstm:reset_parameters()
  function RNNBase:reset_parameters() reset_all(self) end

  -- h_0 (and c_0 for LSTM) from hx, checked against state_shape; nil where not given.
  local function given_states(self, hx, state_shape)
    local cname, w0 = self:class_name(), self.weight_ih_l0
    if self.mode ~= "LSTM" then return hx ~= nil and need_state(hx, w0, state_shape, cname, "hx") or nil end
    if hx == nil then return nil end
    if type(hx) ~= "table" then
      fail(string.format("%s: hx must be a table {h_0, c_0}, got %s", cname, is_tensor(hx) and "a tensor" or type(hx)))
    end
    return need_state(hx[1], w0, state_shape, cname, "h_0"), need_state(hx[2], w0, state_shape, cname, "c_0")
  end

  -- Every layer and direction over x: [L, N, input_size] steps, or packed
  -- [sum of lengths, input_size] ones. run(step, gi, h_0, c_0, w_hh^T, b_hh,
  -- reverse) runs one direction on its input projections gi and returns its
  -- outputs (x's layout) and final states. Returns the last layer's outputs,
  -- h_n and c_n.
  local function run_layers(self, x, h0, c0, run)
    local m, dirs = MODES[self.mode], self.bidirectional and 2 or 1
    local h_n, c_n = {}, {}
    local layer_in = x
    for layer = 0, self.num_layers - 1 do
      local outs = {}
      for dir = 1, dirs do
        local sfx = "_l" .. layer .. (dir == 2 and "_reverse" or "")
        local idx = layer * dirs + dir
        local b_ih, b_hh = self["bias_ih" .. sfx], self["bias_hh" .. sfx]
        if m.fold_bias and b_ih then b_ih, b_hh = b_ih + b_hh, nil end
        local gi = layer_in:matmul(self["weight_ih" .. sfx]:t())   -- for all steps at once
        if b_ih then gi = gi + b_ih end
        outs[dir], h_n[idx], c_n[idx] = run(m.step, gi, h0:select(1, idx), c0 and c0:select(1, idx),
          self["weight_hh" .. sfx]:t(), b_hh, dir == 2)
      end
      layer_in = dirs == 2 and tide.cat(outs, -1) or outs[1]
      if self.dropout > 0 and self.training and layer < self.num_layers - 1 then
        layer_in = nn.functional.dropout(layer_in, self.dropout, true)
      end
    end
    return layer_in, tide.stack(h_n, 1), c0 and tide.stack(c_n, 1)
  end

  -- One direction of one layer over [L, N, G] input projections.
  local function padded_direction(step, gi, h, c, w_hh_t, b_hh, reverse)
    local gi_t = gi:unbind(1)   -- their gradients add into one buffer (autograd.c)
    local seq_len, hs_t = #gi_t, {}
    for s = 1, seq_len do
      local t = reverse and seq_len - s + 1 or s
      h, c = step(gi_t[t], h, c, w_hh_t, b_hh)
      hs_t[t] = h
    end
    return tide.stack(hs_t, 1), h, c
  end

  -- One direction of one layer over packed steps: gi [sum of lengths, G]
  -- holds the input projections, bs the batch sizes. At step t only the
  -- first bs[t] rows (the longest sequences) take part, so each sequence
  -- ends at its own last step; backwards, each starts at its own last step
  -- from h_0. Returns the packed outputs and the final states (all rows).
  local function packed_direction(step, gi, bs, h0, c0, w_hh_t, b_hh, reverse)
    local offset = { 0 }
    for t = 1, #bs do offset[t + 1] = offset[t] + bs[t] end
    local outs, h, c = {}, nil, nil
    if reverse then
      for t = #bs, 1, -1 do
        local had, b = h and h:size(1) or 0, bs[t]
        if b > had then   -- the sequences that end at step t start here
          local h_new, c_new = h0:narrow(1, had + 1, b - had), c0 and c0:narrow(1, had + 1, b - had)
          h = h and tide.cat({ h, h_new }, 1) or h_new
          c = c and tide.cat({ c, c_new }, 1) or c_new
        end
        h, c = step(gi:narrow(1, offset[t] + 1, b), h, c, w_hh_t, b_hh)
        outs[t] = h
      end
      return tide.cat(outs, 1), h, c
    end
    local done_h, done_c = {}, {}   -- the rows that ended, latest first
    h, c = h0, c0
    for t = 1, #bs do
      local b = bs[t]
      if b < h:size(1) then
        table.insert(done_h, 1, h:narrow(1, b + 1, h:size(1) - b))
        h = h:narrow(1, 1, b)
        if c then
          table.insert(done_c, 1, c:narrow(1, b + 1, c:size(1) - b))
          c = c:narrow(1, 1, b)
        end
      end
      h, c = step(gi:narrow(1, offset[t] + 1, b), h, c, w_hh_t, b_hh)
      outs[t] = h
    end
    table.insert(done_h, 1, h)
    if c then table.insert(done_c, 1, c) end
    return tide.cat(outs, 1), tide.cat(done_h, 1), c and tide.cat(done_c, 1)
  end

  -- rnn(packed, hx): the layers over a PackedSequence; hx and the final
  -- states are in the batch's original order, the work in the sorted one.
  local function forward_packed(self, packed, hx)
    local cname, mode, w0 = self:class_name(), self.mode, self.weight_ih_l0
    local data = packed.data
    need_like(data, w0, cname, "input")
    if data:dim() ~= 2 then
      fail(string.format("%s: expected the data of a PackedSequence to be 2-d [sum of lengths, input_size], " ..
        "got shape %s", cname, shape_str(data)))
    end
    if data:size(2) ~= self.input_size then
      fail(string.format("%s: input size must be %d, got %d", cname, self.input_size, data:size(2)))
    end
    local bs = packed._bs
    local n, hs, dirs = bs[1], self.hidden_size, self.bidirectional and 2 or 1
    local state_shape = { self.num_layers * dirs, n, hs }
    local h0, c0 = given_states(self, hx, state_shape)
    local sorted = packed.sorted_indices
    if sorted then
      h0, c0 = h0 and h0:index_select(2, sorted), c0 and c0:index_select(2, sorted)
    end
    local to = { dtype = data:dtype(), device = data:device() }
    h0 = h0 or tide.zeros(state_shape, to)
    if mode == "LSTM" then c0 = c0 or tide.zeros(state_shape, to) end
    local out, hn, cn = run_layers(self, data, h0, c0, function(step, gi, h, c, w_hh_t, b_hh, reverse)
      return packed_direction(step, gi, bs, h, c, w_hh_t, b_hh, reverse)
    end)
    local unsorted = packed.unsorted_indices
    if unsorted then hn, cn = hn:index_select(2, unsorted), cn and cn:index_select(2, unsorted) end
    out = nn.utils.rnn._with_data(packed, out)
    if mode == "LSTM" then return out, hn, cn end
    return out, hn
  end

  --- rnn(input, hx): runs the layers over the sequence.
  -- input [L, N, input_size] ([N, L, input_size] with batch_first), or
  -- [L, input_size] for one unbatched sequence. hx: h_0 [num_layers * D, N,
  -- hidden_size] (D = 2 when bidirectional; [num_layers * D, hidden_size]
  -- unbatched), zeros when absent; for LSTM the table {h_0, c_0}.
  -- @return output [L, N, D * hidden_size] (input's layout) and h_n (the
  -- final hidden state of each layer and direction, h_0's shape); LSTM also
  -- returns c_n. PyTorch's `out, (h, c) = lstm(x)` is `local out, h, c = lstm(x)`.
  -- input may also be a PackedSequence (nn.utils.rnn): the output is then one
  -- too, with the same layout, and h_n (c_n) holds each sequence's state at
  -- its own length (for the reverse direction, at its first step), in the
  -- batch's original order, as PyTorch's.
  -- @usage local out, h_n, c_n = lstm(x, { h0, c0 })
  function RNNBase:forward(input, hx)
    if nn.utils.rnn.is_packed_sequence(input) then return forward_packed(self, input, hx) end
    local cname, mode = self:class_name(), self.mode
    local w0 = self.weight_ih_l0
    need_like(input, w0, cname, "input")
    if input:dim() ~= 2 and input:dim() ~= 3 then
      fail(string.format("%s: expected a 2-d (unbatched) or 3-d (batched) input, got shape %s", cname,
        shape_str(input)))
    end
    if input:size(-1) ~= self.input_size then
      fail(string.format("%s: input size must be %d, got %d", cname, self.input_size, input:size(-1)))
    end
    local unbatched = input:dim() == 2
    local x = unbatched and input:unsqueeze(2) or self.batch_first and input:transpose(1, 2) or input
    local seq_len, n, hs = x:size(1), x:size(2), self.hidden_size
    if seq_len == 0 then
      fail(string.format("%s: expected a sequence length above 0, got input of shape %s", cname, shape_str(input)))
    end
    local dirs = self.bidirectional and 2 or 1
    local state_shape = unbatched and { self.num_layers * dirs, hs } or { self.num_layers * dirs, n, hs }
    local h0, c0 = given_states(self, hx, state_shape)
    local zeros_shape = { self.num_layers * dirs, n, hs }
    local to = { dtype = input:dtype(), device = input:device() }
    h0 = h0 and (unbatched and h0:unsqueeze(2) or h0) or tide.zeros(zeros_shape, to)
    if mode == "LSTM" then c0 = c0 and (unbatched and c0:unsqueeze(2) or c0) or tide.zeros(zeros_shape, to) end

    local out, hn, cn = run_layers(self, x, h0, c0, padded_direction)
    if unbatched then
      out, hn, cn = out:squeeze(2), hn:squeeze(2), cn and cn:squeeze(2)
    elseif self.batch_first then
      out = out:transpose(1, 2)
    end
    if mode == "LSTM" then return out, hn, cn end
    return out, hn
  end

  function RNNBase:extra_repr()
    local s = string.format("%d, %d", self.input_size, self.hidden_size)
    if self.num_layers ~= 1 then s = s .. ", num_layers=" .. self.num_layers end
    if self.mode == "RNN_RELU" then s = s .. ", nonlinearity='relu'" end
    if not self.bias then s = s .. ", bias=false" end
    if self.batch_first then s = s .. ", batch_first=true" end
    if self.dropout ~= 0 then s = s .. string.format(", dropout=%g", self.dropout) end
    if self.bidirectional then s = s .. ", bidirectional=true" end
    return s
  end

  --- nn.RNN(input_size, hidden_size, opts): a multi-layer Elman RNN,
  -- h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh), act tanh or relu, as
  -- torch.nn.RNN. Parameters weight_ih_l{k} [hidden_size, input_size] (layer 0;
  -- later layers take D * hidden_size), weight_hh_l{k} [hidden_size, hidden_size],
  -- bias_ih_l{k}, bias_hh_l{k} [hidden_size], with the suffix _reverse for the
  -- backward direction, all from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
  -- Dropout (training only) applies to the outputs of each layer but the last.
  -- @param input_size the features of each input step
  -- @param hidden_size the features of the hidden state
  -- @param opts {num_layers = 1, nonlinearity = "tanh" | "relu", bias = true, batch_first = false,
  -- dropout = 0, bidirectional = false, dtype = "float32", device}
  -- @usage local rnn = nn.RNN(10, 20, { num_layers = 2 }); local out, h_n = rnn(x, h0)
  local RNN = RNNBase:extend("RNN")
  function RNN:init(input_size, hidden_size, opts)
    local o = opts_of(opts, "RNN")
    self:setup(rnn_mode(o.nonlinearity, "RNN"), input_size, hidden_size, o)
  end
  nn.RNN = RNN

  --- nn.LSTM(input_size, hidden_size, opts): a multi-layer long short-term
  -- memory, as torch.nn.LSTM: gates i, f, g, o = sigmoid, sigmoid, tanh,
  -- sigmoid of x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh, c_t = f c_{t-1} + i g,
  -- h_t = o tanh(c_t). Parameters as nn.RNN's with 4 * hidden_size rows, the
  -- gates stacked in that order. Options as nn.RNN's, without nonlinearity.
  -- @usage local lstm = nn.LSTM(10, 20, { batch_first = true }); local out, h_n, c_n = lstm(x)
  local LSTM = RNNBase:extend("LSTM")
  function LSTM:init(input_size, hidden_size, opts)
    self:setup("LSTM", input_size, hidden_size, opts_of(opts, "LSTM"))
  end
  nn.LSTM = LSTM

  --- nn.GRU(input_size, hidden_size, opts): a multi-layer gated recurrent
  -- unit, as torch.nn.GRU: r, z = sigmoid(x_t W_i{r,z}^T + b_i{r,z} + h W_h{r,z}^T
  -- + b_h{r,z}), n = tanh(x_t W_in^T + b_in + r (h W_hn^T + b_hn)),
  -- h_t = (1 - z) n + z h_{t-1}. Parameters as nn.RNN's with 3 * hidden_size
  -- rows (r, z, n). Options as nn.RNN's, without nonlinearity.
  -- @usage local gru = nn.GRU(10, 20, { bidirectional = true }); local out, h_n = gru(x)
  local GRU = RNNBase:extend("GRU")
  function GRU:init(input_size, hidden_size, opts)
    self:setup("GRU", input_size, hidden_size, opts_of(opts, "GRU"))
  end
  nn.GRU = GRU

  -- -- cells ------------------------------------------------------------------------------

  local CellBase = Module:extend("_RNNCellBase")
  function CellBase:setup(mode, input_size, hidden_size, o)
    local cname = self:class_name()
    if o.nonlinearity ~= nil and MODES[mode].gates ~= 1 then
      fail(cname .. ": nonlinearity is an option of RNN and RNNCell only")
    end
    self.mode = mode
    self.input_size = need_size(input_size, cname, "input_size")
    self.hidden_size = positive(hidden_size, cname, "hidden_size")
    self.bias = o.bias ~= false
    local g = MODES[mode].gates * hidden_size
    self:register_parameter("weight_ih", new_tensor({ g, input_size }, o))
    self:register_parameter("weight_hh", new_tensor({ g, hidden_size }, o))
    if self.bias then
      self:register_parameter("bias_ih", new_tensor({ g }, o))
      self:register_parameter("bias_hh", new_tensor({ g }, o))
    end
    self:reset_parameters()
  end

  --- Draws every weight and bias again from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
  -- @usage cell:reset_parameters()
  function CellBase:reset_parameters() reset_all(self) end

  --- cell(input, hx): one step. input [N, input_size] or [input_size]
  -- (unbatched); hx the hidden state [N, hidden_size] (or [hidden_size]),
  -- zeros when absent; for LSTMCell the table {h, c}.
  -- @return h' (LSTMCell: h', c')
  -- @usage local h, c = cell(x, { h, c })
  function CellBase:forward(input, hx)
    local cname, mode, w = self:class_name(), self.mode, self.weight_ih
    need_like(input, w, cname, "input")
    if input:dim() ~= 1 and input:dim() ~= 2 then
      fail(string.format("%s: expected a 1-d (unbatched) or 2-d (batched) input, got shape %s", cname,
        shape_str(input)))
    end
    if input:size(-1) ~= self.input_size then
      fail(string.format("%s: input size must be %d, got %d", cname, self.input_size, input:size(-1)))
    end
    local unbatched = input:dim() == 1
    local x = unbatched and input:unsqueeze(1) or input
    local state_shape = unbatched and { self.hidden_size } or { x:size(1), self.hidden_size }
    local h, c
    if mode == "LSTM" then
      if hx ~= nil then
        if type(hx) ~= "table" then
          fail(string.format("%s: hx must be a table {h, c}, got %s", cname, is_tensor(hx) and "a tensor" or type(hx)))
        end
        h = need_state(hx[1], w, state_shape, cname, "h")
        c = need_state(hx[2], w, state_shape, cname, "c")
      end
    elseif hx ~= nil then
      h = need_state(hx, w, state_shape, cname, "hx")
    end
    local to = { dtype = input:dtype(), device = input:device() }
    local zeros_shape = { x:size(1), self.hidden_size }
    h = h and (unbatched and h:unsqueeze(1) or h) or tide.zeros(zeros_shape, to)
    if mode == "LSTM" then c = c and (unbatched and c:unsqueeze(1) or c) or tide.zeros(zeros_shape, to) end
    local m = MODES[mode]
    local b_ih, b_hh = self.bias_ih, self.bias_hh
    if m.fold_bias and b_ih then b_ih, b_hh = b_ih + b_hh, nil end
    local gi = x:matmul(self.weight_ih:t())
    if b_ih then gi = gi + b_ih end
    h, c = m.step(gi, h, c, self.weight_hh:t(), b_hh)
    if unbatched then h, c = h:squeeze(1), c and c:squeeze(1) end
    if mode == "LSTM" then return h, c end
    return h
  end

  function CellBase:extra_repr()
    local s = string.format("%d, %d", self.input_size, self.hidden_size)
    if not self.bias then s = s .. ", bias=false" end
    if self.mode == "RNN_RELU" then s = s .. ", nonlinearity='relu'" end
    return s
  end

  --- nn.RNNCell(input_size, hidden_size, opts): one step of nn.RNN,
  -- h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), as torch.nn.RNNCell.
  -- Parameters weight_ih [hidden_size, input_size], weight_hh [hidden_size,
  -- hidden_size], bias_ih, bias_hh [hidden_size], from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
  -- @param opts {bias = true, nonlinearity = "tanh" | "relu", dtype = "float32", device}
  -- @usage local cell = nn.RNNCell(10, 20); h = cell(x, h)
  local RNNCell = CellBase:extend("RNNCell")
  function RNNCell:init(input_size, hidden_size, opts)
    local o = opts_of(opts, "RNNCell")
    self:setup(rnn_mode(o.nonlinearity, "RNNCell"), input_size, hidden_size, o)
  end
  nn.RNNCell = RNNCell

  --- nn.LSTMCell(input_size, hidden_size, opts): one step of nn.LSTM, as
  -- torch.nn.LSTMCell (4 * hidden_size rows, gates i, f, g, o); returns h', c'.
  -- @param opts {bias = true, dtype = "float32", device}
  -- @usage local cell = nn.LSTMCell(10, 20); h, c = cell(x, { h, c })
  local LSTMCell = CellBase:extend("LSTMCell")
  function LSTMCell:init(input_size, hidden_size, opts)
    self:setup("LSTM", input_size, hidden_size, opts_of(opts, "LSTMCell"))
  end
  nn.LSTMCell = LSTMCell

  --- nn.GRUCell(input_size, hidden_size, opts): one step of nn.GRU, as
  -- torch.nn.GRUCell (3 * hidden_size rows, gates r, z, n).
  -- @param opts {bias = true, dtype = "float32", device}
  -- @usage local cell = nn.GRUCell(10, 20); h = cell(x, h)
  local GRUCell = CellBase:extend("GRUCell")
  function GRUCell:init(input_size, hidden_size, opts)
    self:setup("GRU", input_size, hidden_size, opts_of(opts, "GRUCell"))
  end
  nn.GRUCell = GRUCell
end
