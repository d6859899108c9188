--- tide.nn.transformer: nn.MultiheadAttention and nn.TransformerEncoderLayer,
-- as PyTorch defines them (parameter names, initialisation, mask conventions,
-- batch_first layout), composed of tensor ops so autograd covers them.
-- Loaded by tide.nn, which passes itself in: `require("tide.nn.transformer")(nn)`.
-- Not here: add_bias_kv / add_zero_attn, and the stacked TransformerEncoder.
local tide = require "tide"
local B = require "bindings.ffi"
local F = require "tide.nn.functional"
local init = require "tide.nn.weight_init"
local fail = B.fail
local is_tensor = tide.is_tensor

local function shape_str(t) return "[" .. table.concat(t:shape(), ",") .. "]" end

return function(nn)
  local Module, opts_of, new_tensor, need_size = nn.Module, nn._opts_of, nn._new_tensor, nn._need_size

  --- nn.MultiheadAttention(embed_dim, num_heads, opts): attention with
  -- num_heads heads of embed_dim / num_heads features each, as PyTorch's.
  -- Parameters: in_proj_weight [3E, E] (or q_proj_weight, k_proj_weight,
  -- v_proj_weight when kdim or vdim differ from E), in_proj_bias [3E], and the
  -- child out_proj (Linear E -> E). in_proj is Xavier-uniform, the biases zero.
  -- @param embed_dim E
  -- @param num_heads H (must divide E)
  -- @param opts {dropout = 0, bias = true, batch_first = false, kdim = E, vdim = E, dtype, device}
  -- @usage local mha = nn.MultiheadAttention(64, 8, { batch_first = true })
  -- local out, weights = mha(x, x, x, { key_padding_mask = pad })
  local MHA = Module:extend("MultiheadAttention")
  function MHA:init(embed_dim, num_heads, opts)
    local o = opts_of(opts, "MultiheadAttention")
    need_size(embed_dim, "MultiheadAttention", "embed_dim")
    need_size(num_heads, "MultiheadAttention", "num_heads")
    if num_heads < 1 or embed_dim % num_heads ~= 0 then
      fail(string.format("MultiheadAttention: embed_dim %d is not divisible by num_heads %d", embed_dim, num_heads))
    end
    if o.add_bias_kv or o.add_zero_attn then
      fail("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
    end
    local dropout = o.dropout or 0
    if type(dropout) ~= "number" or dropout < 0 or dropout > 1 then
      fail("MultiheadAttention: dropout must be a number between 0 and 1, got " .. tostring(dropout))
    end
    self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim / num_heads
    self.kdim = o.kdim and need_size(o.kdim, "MultiheadAttention", "kdim") or embed_dim
    self.vdim = o.vdim and need_size(o.vdim, "MultiheadAttention", "vdim") or embed_dim
    self.dropout = dropout
    self.batch_first = o.batch_first == true
    if self.kdim == embed_dim and self.vdim == embed_dim then
      self:register_parameter("in_proj_weight", new_tensor({ 3 * embed_dim, embed_dim }, o))
    else
      self:register_parameter("q_proj_weight", new_tensor({ embed_dim, embed_dim }, o))
      self:register_parameter("k_proj_weight", new_tensor({ embed_dim, self.kdim }, o))
      self:register_parameter("v_proj_weight", new_tensor({ embed_dim, self.vdim }, o))
    end
    if o.bias ~= false then self:register_parameter("in_proj_bias", new_tensor({ 3 * embed_dim }, o)) end
    self.out_proj = nn.Linear(embed_dim, embed_dim, { bias = o.bias ~= false, dtype = o.dtype, device = o.device })
    self:reset_parameters()
  end

  --- Xavier-uniform input projections, zero biases (out_proj.weight keeps Linear's draw).
  -- @usage mha:reset_parameters()
  function MHA:reset_parameters()
    if self.in_proj_weight then
      init.xavier_uniform_(self.in_proj_weight)
    else
      init.xavier_uniform_(self.q_proj_weight)
      init.xavier_uniform_(self.k_proj_weight)
      init.xavier_uniform_(self.v_proj_weight)
    end
    if self.in_proj_bias then
      init.zeros_(self.in_proj_bias)
      init.zeros_(self.out_proj.bias)
    end
  end

  -- The float mask to add to the scores for a mask named `what`: 0 or -inf
  -- (in dtype) for a boolean one, the values themselves for a float one.
  local function additive(mask, what, dtype)
    if mask:dtype() == "bool" then
      return tide.zeros(mask:shape(), { dtype = dtype, device = mask:device() }):masked_fill(mask, -math.huge)
    end
    if not mask:is_floating_point() then
      fail(string.format("MultiheadAttention: %s must be bool or floating point, got %s", what, mask:dtype()))
    end
    return mask
  end

  --- mha(query, key, value, opts): attention of query over key/value.
  -- Shapes (batch_first = false): query [L, N, E], key [S, N, kdim], value
  -- [S, N, vdim]; with batch_first, [N, L, E] and so on; without the N
  -- dimension, one unbatched sequence. key and value default to query.
  -- attn_mask [L, S] or [N * num_heads, L, S]: true (bool) marks a position
  -- that may NOT be attended to (PyTorch's convention here), floats are
  -- added to the scores. key_padding_mask [N, S]: true marks padding keys.
  -- is_causal without attn_mask masks the keys after each query.
  -- @param opts {attn_mask, key_padding_mask, need_weights = true, average_attn_weights = true, is_causal = false}
  -- @return the output (query's layout, E features) and the attention weights
  -- [N, L, S] averaged over heads ([N, H, L, S] with average_attn_weights =
  -- false; nil with need_weights = false)
  -- @usage local out, w = mha(q, k, v, { attn_mask = tide.ones(3, 3, "bool"):triu(1) })
  function MHA:forward(query, key, value, opts)
    opts = opts or {}
    if type(opts) ~= "table" then fail("MultiheadAttention: options must be a table, got " .. type(opts)) end
    key = key or query
    value = value or key
    for _, c in ipairs { { "query", query }, { "key", key }, { "value", value } } do
      if not is_tensor(c[2]) then
        fail(string.format("MultiheadAttention: %s must be a tensor, got %s", c[1], type(c[2])))
      end
    end
    local unbatched = query:dim() == 2
    local want = unbatched and 2 or 3
    if (query:dim() ~= 2 and query:dim() ~= 3) or key:dim() ~= want or value:dim() ~= want then
      fail(string.format("MultiheadAttention: query, key and value must all be 3-d (batched) or 2-d (unbatched), " ..
        "got shapes %s, %s and %s", shape_str(query), shape_str(key), shape_str(value)))
    end
    local e, h, hd = self.embed_dim, self.num_heads, self.head_dim
    for _, c in ipairs { { "query", query, e, "embed_dim" }, { "key", key, self.kdim, "kdim" },
                         { "value", value, self.vdim, "vdim" } } do
      if c[2]:size(-1) ~= c[3] then
        fail(string.format("MultiheadAttention: %s of shape %s has %d features, expected %s = %d", c[1],
          shape_str(c[2]), c[2]:size(-1), c[4], c[3]))
      end
    end
    -- to [N, L, E]
    local q, k, v = query, key, value
    if unbatched then
      q, k, v = q:unsqueeze(1), k:unsqueeze(1), v:unsqueeze(1)
    elseif not self.batch_first then
      q, k, v = q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2)
    end
    local n, l, s = q:size(1), q:size(2), k:size(2)
    if k:size(1) ~= n or v:size(1) ~= n or v:size(2) ~= s then
      fail(string.format("MultiheadAttention: query %s, key %s and value %s do not agree in batch size or length",
        shape_str(query), shape_str(key), shape_str(value)))
    end
    local wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
    if self.in_proj_weight then
      local w = self.in_proj_weight
      wq, wk, wv = w:narrow(1, 1, e), w:narrow(1, e + 1, e), w:narrow(1, 2 * e + 1, e)
    end
    local bq, bk, bv
    if self.in_proj_bias then
      local b = self.in_proj_bias
      bq, bk, bv = b:narrow(1, 1, e), b:narrow(1, e + 1, e), b:narrow(1, 2 * e + 1, e)
    end
    q = F.linear(q, wq, bq):view(n, l, h, hd):transpose(2, 3)   -- [N, H, L, hd]
    k = F.linear(k, wk, bk):view(n, s, h, hd):transpose(2, 3)   -- [N, H, S, hd]
    v = F.linear(v, wv, bv):view(n, s, h, hd):transpose(2, 3)
    local scores = q:matmul(k:transpose(3, 4)) * (1 / math.sqrt(hd))   -- [N, H, L, S]

    local attn_mask, kpm = opts.attn_mask, opts.key_padding_mask
    if attn_mask == nil and opts.is_causal then
      attn_mask = tide.ones({ l, s }, { dtype = "bool", device = q:device() }):triu(1)
    end
    if attn_mask ~= nil then
      if not is_tensor(attn_mask) then fail("MultiheadAttention: attn_mask must be a tensor") end
      local sh = attn_mask:shape()
      if #sh == 2 and sh[1] == l and sh[2] == s then
        scores = scores + additive(attn_mask, "attn_mask", scores:dtype())
      elseif #sh == 3 and sh[1] == n * h and sh[2] == l and sh[3] == s then
        scores = scores + additive(attn_mask, "attn_mask", scores:dtype()):view(n, h, l, s)
      else
        fail(string.format("MultiheadAttention: attn_mask of shape %s must be [L,S] = [%d,%d] or " ..
          "[N*num_heads,L,S] = [%d,%d,%d]", shape_str(attn_mask), l, s, n * h, l, s))
      end
    end
    if kpm ~= nil then
      if not is_tensor(kpm) then fail("MultiheadAttention: key_padding_mask must be a tensor") end
      local ok = unbatched and kpm:dim() == 1 and kpm:size(1) == s
        or kpm:dim() == 2 and kpm:size(1) == n and kpm:size(2) == s
      if not ok then
        fail(string.format("MultiheadAttention: key_padding_mask of shape %s must be %s", shape_str(kpm),
          unbatched and string.format("[S] = [%d]", s) or string.format("[N,S] = [%d,%d]", n, s)))
      end
      scores = scores + additive(kpm, "key_padding_mask", scores:dtype()):reshape(n, 1, 1, s)
    end

    local attn = scores:softmax(-1)
    if self.training and self.dropout > 0 then attn = F.dropout(attn, self.dropout, true) end
    local out = attn:matmul(v):transpose(2, 3):reshape(n, l, e)   -- [N, L, E]
    out = self.out_proj(out)
    if unbatched then
      out = out:squeeze(1)
    elseif not self.batch_first then
      out = out:transpose(1, 2)
    end
    if opts.need_weights == false then return out, nil end
    local weights = opts.average_attn_weights == false and attn or attn:mean(2)
    if unbatched then weights = weights:squeeze(1) end
    return out, weights
  end

  function MHA:extra_repr()
    return string.format("embed_dim=%d, num_heads=%d, dropout=%g, batch_first=%s", self.embed_dim, self.num_heads,
      self.dropout, tostring(self.batch_first))
  end
  nn.MultiheadAttention = MHA

  local activations = { relu = F.relu, gelu = F.gelu }

  --- nn.TransformerEncoderLayer(d_model, nhead, opts): self-attention then a
  -- feed-forward block (linear1, activation, dropout, linear2), each with a
  -- residual connection, dropout and LayerNorm, as PyTorch's: post-norm by
  -- default, pre-norm with norm_first.
  -- @param d_model the number of features
  -- @param nhead the number of attention heads
  -- @param opts {dim_feedforward = 2048, dropout = 0.1, activation = "relu" | "gelu" | function | module,
  -- layer_norm_eps = 1e-5, batch_first = false, norm_first = false, bias = true, dtype, device}
  -- @usage local layer = nn.TransformerEncoderLayer(64, 4, { dim_feedforward = 128, batch_first = true })
  -- local y = layer(x, { src_key_padding_mask = pad })
  local TEL = Module:extend("TransformerEncoderLayer")
  function TEL:init(d_model, nhead, opts)
    local o = opts_of(opts, "TransformerEncoderLayer")
    local ff = o.dim_feedforward or 2048
    local p = o.dropout == nil and 0.1 or o.dropout
    local common = { bias = o.bias ~= false, dtype = o.dtype, device = o.device }
    self.self_attn = MHA(d_model, nhead, { dropout = p, bias = common.bias, batch_first = o.batch_first,
      dtype = o.dtype, device = o.device })
    self.linear1 = nn.Linear(d_model, ff, common)
    self.dropout = nn.Dropout(p)
    self.linear2 = nn.Linear(ff, d_model, common)
    self.norm_first = o.norm_first == true
    local norm_opts = { eps = o.layer_norm_eps or 1e-5, bias = common.bias, dtype = o.dtype, device = o.device }
    self.norm1 = nn.LayerNorm(d_model, norm_opts)
    self.norm2 = nn.LayerNorm(d_model, norm_opts)
    self.dropout1 = nn.Dropout(p)
    self.dropout2 = nn.Dropout(p)
    local act = o.activation or "relu"
    if type(act) == "string" then
      if not activations[act] then
        fail("TransformerEncoderLayer: activation must be 'relu', 'gelu', a function or a module, got '" .. act .. "'")
      end
      act = activations[act]
    elseif type(act) ~= "function" and not nn.is_module(act) then
      fail("TransformerEncoderLayer: activation must be 'relu', 'gelu', a function or a module, got " .. type(act))
    end
    self.activation = act
  end

  function TEL:sa_block(x, mask, kpm, is_causal)
    local y = self.self_attn(x, x, x, { attn_mask = mask, key_padding_mask = kpm, need_weights = false,
      is_causal = is_causal })
    return self.dropout1(y)
  end

  function TEL:ff_block(x)
    return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))
  end

  --- layer(src, opts): src [S, N, E] ([N, S, E] with batch_first, [S, E] unbatched).
  -- @param opts {src_mask, src_key_padding_mask, is_causal = false} (masks as MultiheadAttention's)
  -- @return a tensor of src's shape
  -- @usage local y = layer(x, { src_key_padding_mask = pad })
  function TEL:forward(src, opts)
    opts = opts or {}
    if type(opts) ~= "table" then fail("TransformerEncoderLayer: options must be a table, got " .. type(opts)) end
    local mask, kpm, causal = opts.src_mask, opts.src_key_padding_mask, opts.is_causal
    local x = src
    if self.norm_first then
      x = x + self:sa_block(self.norm1(x), mask, kpm, causal)
      x = x + self:ff_block(self.norm2(x))
    else
      x = self.norm1(x + self:sa_block(x, mask, kpm, causal))
      x = self.norm2(x + self:ff_block(x))
    end
    return x
  end
  nn.TransformerEncoderLayer = TEL
end
