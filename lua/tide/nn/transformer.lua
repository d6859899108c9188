--- tide.nn.transformer: nn.MultiheadAttention and the transformer layers,
-- as PyTorch defines them (parameter names, initialisation, mask conventions,
-- batch_first layout), composed of tensor ops so autograd covers them.
-- Loaded by tide.nn, which passes itself in: `require("tide.nn.transformer")(nn)`.
-- Also the decoder layer, the stacks (TransformerEncoder, TransformerDecoder)
-- and nn.Transformer. Not here: add_bias_kv / add_zero_attn, nested tensors
-- and the fast paths PyTorch takes in inference.
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

  -- The activation option of the layers: a name, a function or a module.
  local function activation_of(act, cname)
    act = act or "relu"
    if type(act) == "string" then
      if not activations[act] then
        fail(cname .. ": activation must be 'relu', 'gelu', a function or a module, got '" .. act .. "'")
      end
      return activations[act]
    elseif type(act) ~= "function" and not nn.is_module(act) then
      fail(cname .. ": activation must be 'relu', 'gelu', a function or a module, got " .. type(act))
    end
    return act
  end

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
    self.activation = activation_of(o.activation, "TransformerEncoderLayer")
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

  -- Options: a table (or nil) whose keys are all in `known`.
  local function call_opts(opts, cname, known)
    opts = opts or {}
    if type(opts) ~= "table" then fail(string.format("%s: options must be a table, got %s", cname, type(opts))) end
    for k in pairs(opts) do
      if not known[k] then fail(string.format("%s: unknown option '%s'", cname, tostring(k))) end
    end
    return opts
  end

  -- num_layers independent copies of `layer` in a ModuleList, and the optional final norm.
  local function stack_init(self, cname, layer, num_layers, o)
    if not nn.is_module(layer) then
      fail(string.format("%s: argument 1 must be a layer module, got %s", cname, type(layer)))
    end
    need_size(num_layers, cname, "num_layers")
    local layers = nn.ModuleList()
    for _ = 1, num_layers do layers:append(layer:clone()) end
    self.layers = layers
    self.num_layers = num_layers
    if o.norm ~= nil then
      if not nn.is_module(o.norm) then fail(string.format("%s: norm must be a module, got %s", cname, type(o.norm))) end
      self.norm = o.norm
    end
  end

  --- nn.TransformerEncoder(encoder_layer, num_layers, opts): num_layers
  -- independent copies of encoder_layer (layers.0, layers.1, ..., each a deep
  -- copy, so all start from the same weights as in PyTorch), applied in turn,
  -- then the optional norm.
  -- @param encoder_layer a TransformerEncoderLayer (or any module with its forward)
  -- @param num_layers the number of copies
  -- @param opts {norm = nil}
  -- @usage local enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4), 6, { norm = nn.LayerNorm(64) })
  -- local y = enc(x, { mask = nn.Transformer.generate_square_subsequent_mask(x:size(1)) })
  local TE = Module:extend("TransformerEncoder")
  function TE:init(encoder_layer, num_layers, opts)
    stack_init(self, "TransformerEncoder", encoder_layer, num_layers, opts_of(opts, "TransformerEncoder"))
  end

  local te_known = { mask = true, src_key_padding_mask = true, is_causal = true }
  --- enc(src, opts): src through every layer, then the norm.
  -- @param opts {mask, src_key_padding_mask, is_causal} (as TransformerEncoderLayer's src_mask, ...)
  -- @return a tensor of src's shape
  -- @usage local y = enc(x, { src_key_padding_mask = pad })
  function TE:forward(src, opts)
    opts = call_opts(opts, "TransformerEncoder", te_known)
    local x = src
    local lo = { src_mask = opts.mask, src_key_padding_mask = opts.src_key_padding_mask, is_causal = opts.is_causal }
    for i = 1, #self.layers do x = self.layers[i](x, lo) end
    if self.norm then x = self.norm(x) end
    return x
  end
  nn.TransformerEncoder = TE

  --- nn.TransformerDecoderLayer(d_model, nhead, opts): self-attention over the
  -- target, attention over the encoder's output (memory), then the
  -- feed-forward block, each with a residual connection, dropout and
  -- LayerNorm (norm1, norm2, norm3), as PyTorch's: post-norm by default,
  -- pre-norm with norm_first.
  -- @param d_model the number of features
  -- @param nhead the number of attention heads
  -- @param opts {dim_feedforward = 2048, dropout = 0.1, activation = "relu" | "gelu" | function | module,
  -- layer_norm_eps = 1e-5, batch_first = false, norm_first = false, bias = true, dtype, device}
  -- @usage local layer = nn.TransformerDecoderLayer(64, 4, { batch_first = true })
  -- local y = layer(tgt, memory, { tgt_is_causal = true })
  local TDL = Module:extend("TransformerDecoderLayer")
  function TDL:init(d_model, nhead, opts)
    local o = opts_of(opts, "TransformerDecoderLayer")
    local ff = o.dim_feedforward or 2048
    local p = o.dropout == nil and 0.1 or o.dropout
    local common = { bias = o.bias ~= false, dtype = o.dtype, device = o.device }
    local mha_opts = { dropout = p, bias = common.bias, batch_first = o.batch_first, dtype = o.dtype,
      device = o.device }
    self.self_attn = MHA(d_model, nhead, mha_opts)
    self.multihead_attn = MHA(d_model, nhead, mha_opts)
    self.linear1 = nn.Linear(d_model, ff, common)
    self.dropout = nn.Dropout(p)
    self.linear2 = nn.Linear(ff, d_model, common)
    self.norm_first = o.norm_first == true
    local norm_opts = { eps = o.layer_norm_eps or 1e-5, bias = common.bias, dtype = o.dtype, device = o.device }
    self.norm1 = nn.LayerNorm(d_model, norm_opts)
    self.norm2 = nn.LayerNorm(d_model, norm_opts)
    self.norm3 = nn.LayerNorm(d_model, norm_opts)
    self.dropout1 = nn.Dropout(p)
    self.dropout2 = nn.Dropout(p)
    self.dropout3 = nn.Dropout(p)
    self.activation = activation_of(o.activation, "TransformerDecoderLayer")
  end

  function TDL:sa_block(x, mask, kpm, is_causal)
    local y = self.self_attn(x, x, x, { attn_mask = mask, key_padding_mask = kpm, need_weights = false,
      is_causal = is_causal })
    return self.dropout1(y)
  end

  function TDL:mha_block(x, mem, mask, kpm, is_causal)
    local y = self.multihead_attn(x, mem, mem, { attn_mask = mask, key_padding_mask = kpm, need_weights = false,
      is_causal = is_causal })
    return self.dropout2(y)
  end

  function TDL:ff_block(x)
    return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))
  end

  local tdl_known = { tgt_mask = true, memory_mask = true, tgt_key_padding_mask = true,
    memory_key_padding_mask = true, tgt_is_causal = true, memory_is_causal = true }
  --- layer(tgt, memory, opts): tgt [T, N, E] and memory [S, N, E] ([N, T, E]
  -- and [N, S, E] with batch_first; [T, E] and [S, E] unbatched).
  -- @param opts {tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal = false,
  -- memory_is_causal = false} (masks as MultiheadAttention's: tgt_mask [T, T], memory_mask [T, S])
  -- @return a tensor of tgt's shape
  -- @usage local y = layer(tgt, memory, { tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt:size(1)) })
  function TDL:forward(tgt, memory, opts)
    opts = call_opts(opts, "TransformerDecoderLayer", tdl_known)
    if not is_tensor(tgt) then fail("TransformerDecoderLayer: tgt must be a tensor, got " .. type(tgt)) end
    if not is_tensor(memory) then fail("TransformerDecoderLayer: memory must be a tensor, got " .. type(memory)) end
    local x = tgt
    if self.norm_first then
      x = x + self:sa_block(self.norm1(x), opts.tgt_mask, opts.tgt_key_padding_mask, opts.tgt_is_causal)
      x = x + self:mha_block(self.norm2(x), memory, opts.memory_mask, opts.memory_key_padding_mask,
        opts.memory_is_causal)
      x = x + self:ff_block(self.norm3(x))
    else
      x = self.norm1(x + self:sa_block(x, opts.tgt_mask, opts.tgt_key_padding_mask, opts.tgt_is_causal))
      x = self.norm2(x + self:mha_block(x, memory, opts.memory_mask, opts.memory_key_padding_mask,
        opts.memory_is_causal))
      x = self.norm3(x + self:ff_block(x))
    end
    return x
  end
  nn.TransformerDecoderLayer = TDL

  --- nn.TransformerDecoder(decoder_layer, num_layers, opts): num_layers
  -- independent copies of decoder_layer, applied in turn, then the optional norm.
  -- @param decoder_layer a TransformerDecoderLayer (or any module with its forward)
  -- @param num_layers the number of copies
  -- @param opts {norm = nil}
  -- @usage local dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(64, 4), 6)
  -- local y = dec(tgt, memory, { tgt_is_causal = true })
  local TD = Module:extend("TransformerDecoder")
  function TD:init(decoder_layer, num_layers, opts)
    stack_init(self, "TransformerDecoder", decoder_layer, num_layers, opts_of(opts, "TransformerDecoder"))
  end

  --- dec(tgt, memory, opts): tgt through every layer (each attending to memory), then the norm.
  -- @param opts as TransformerDecoderLayer's
  -- @return a tensor of tgt's shape
  -- @usage local y = dec(tgt, memory, { tgt_key_padding_mask = pad })
  function TD:forward(tgt, memory, opts)
    opts = call_opts(opts, "TransformerDecoder", tdl_known)
    local x = tgt
    for i = 1, #self.layers do x = self.layers[i](x, memory, opts) end
    if self.norm then x = self.norm(x) end
    return x
  end
  nn.TransformerDecoder = TD

  --- nn.Transformer(d_model, nhead, opts) or nn.Transformer(opts): an encoder-decoder transformer as PyTorch's: an
  -- encoder of num_encoder_layers TransformerEncoderLayers and a decoder of
  -- num_decoder_layers TransformerDecoderLayers, each stack ending in a
  -- LayerNorm; every parameter with more than one dimension is drawn again
  -- Xavier-uniform.
  -- @param d_model the number of features (default 512; also opts.d_model)
  -- @param nhead the number of attention heads (default 8; also opts.nhead)
  -- @param opts {num_encoder_layers = 6, num_decoder_layers = 6,
  -- dim_feedforward = 2048, dropout = 0.1, activation = "relu", custom_encoder, custom_decoder,
  -- layer_norm_eps = 1e-5, batch_first = false, norm_first = false, bias = true, dtype, device}
  -- @usage local model = nn.Transformer({ d_model = 64, nhead = 4, num_encoder_layers = 2, num_decoder_layers = 2 })
  -- local y = model(src, tgt, { tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt:size(1)) })
  local TR = Module:extend("Transformer")
  function TR:init(d_model, nhead, opts)
    if type(d_model) == "table" and nhead == nil and opts == nil then d_model, opts = nil, d_model end
    local o = opts_of(opts, "Transformer")
    local d = need_size(d_model or o.d_model or 512, "Transformer", "d_model")
    local h = need_size(nhead or o.nhead or 8, "Transformer", "nhead")
    local layer_opts = { dim_feedforward = o.dim_feedforward, dropout = o.dropout, activation = o.activation,
      layer_norm_eps = o.layer_norm_eps, batch_first = o.batch_first, norm_first = o.norm_first, bias = o.bias,
      dtype = o.dtype, device = o.device }
    local norm_opts = { eps = o.layer_norm_eps or 1e-5, bias = o.bias ~= false, dtype = o.dtype, device = o.device }
    for _, c in ipairs { { "custom_encoder", "encoder" }, { "custom_decoder", "decoder" } } do
      if o[c[1]] ~= nil and not nn.is_module(o[c[1]]) then
        fail(string.format("Transformer: %s must be a module, got %s", c[1], type(o[c[1]])))
      end
    end
    self.encoder = o.custom_encoder or TE(TEL(d, h, layer_opts), o.num_encoder_layers or 6,
      { norm = nn.LayerNorm(d, norm_opts) })
    self.decoder = o.custom_decoder or TD(TDL(d, h, layer_opts), o.num_decoder_layers or 6,
      { norm = nn.LayerNorm(d, norm_opts) })
    for _, p in ipairs(self:parameters()) do
      if p:dim() > 1 then init.xavier_uniform_(p) end
    end
    self.d_model, self.nhead, self.batch_first = d, h, o.batch_first == true
  end

  local tr_known = { src_mask = true, tgt_mask = true, memory_mask = true, src_key_padding_mask = true,
    tgt_key_padding_mask = true, memory_key_padding_mask = true, src_is_causal = true, tgt_is_causal = true,
    memory_is_causal = true }
  --- model(src, tgt, opts): the encoder on src, then the decoder on tgt
  -- attending to the encoder's output. src [S, N, E], tgt [T, N, E] ([N, S, E]
  -- and [N, T, E] with batch_first; [S, E] and [T, E] unbatched).
  -- @param opts {src_mask, tgt_mask, memory_mask, src_key_padding_mask, tgt_key_padding_mask,
  -- memory_key_padding_mask, src_is_causal, tgt_is_causal, memory_is_causal = false}
  -- @return a tensor of tgt's shape
  -- @usage local y = model(src, tgt, { tgt_is_causal = true })
  function TR:forward(src, tgt, opts)
    opts = call_opts(opts, "Transformer", tr_known)
    if not is_tensor(src) then fail("Transformer: src must be a tensor, got " .. type(src)) end
    if not is_tensor(tgt) then fail("Transformer: tgt must be a tensor, got " .. type(tgt)) end
    if src:dim() ~= tgt:dim() or (src:dim() ~= 2 and src:dim() ~= 3) then
      fail(string.format("Transformer: src and tgt must both be 3-d (batched) or 2-d (unbatched), got %s and %s",
        shape_str(src), shape_str(tgt)))
    end
    local bd = self.batch_first and 1 or 2
    if src:dim() == 3 and src:size(bd) ~= tgt:size(bd) then
      fail(string.format("Transformer: the batch number of src %s and tgt %s must be equal", shape_str(src),
        shape_str(tgt)))
    end
    if src:size(-1) ~= self.d_model or tgt:size(-1) ~= self.d_model then
      fail(string.format("Transformer: the feature number of src %s and tgt %s must be equal to d_model %d",
        shape_str(src), shape_str(tgt), self.d_model))
    end
    local memory = self.encoder(src, { mask = opts.src_mask, src_key_padding_mask = opts.src_key_padding_mask,
      is_causal = opts.src_is_causal })
    return self.decoder(tgt, memory, { tgt_mask = opts.tgt_mask, memory_mask = opts.memory_mask,
      tgt_key_padding_mask = opts.tgt_key_padding_mask, memory_key_padding_mask = opts.memory_key_padding_mask,
      tgt_is_causal = opts.tgt_is_causal, memory_is_causal = opts.memory_is_causal })
  end

  --- nn.Transformer.generate_square_subsequent_mask(sz, opts): the causal
  -- mask [sz, sz]: -inf above the diagonal, 0 elsewhere.
  -- @param opts {dtype = "float32", device}
  -- @usage local mask = nn.Transformer.generate_square_subsequent_mask(5)
  function TR.generate_square_subsequent_mask(sz, opts)
    need_size(sz, "generate_square_subsequent_mask", "sz")
    opts = opts or {}
    local above = tide.ones({ sz, sz }, { dtype = "bool", device = opts.device }):triu(1)
    return tide.zeros({ sz, sz }, { dtype = opts.dtype or "float32", device = opts.device })
      :masked_fill(above, -math.huge)
  end
  nn.Transformer = TR
end
