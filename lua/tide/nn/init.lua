--- tide.nn: neural network layers as modules, after torch.nn. Each layer is a
-- class deriving from nn.Module (tide.nn.module: parameters, buffers,
-- state_dict, to, train/eval, printing) whose forward calls tide.nn.functional;
-- each owns its parameters, initialised as PyTorch initialises them
-- (tide.nn.init). Attention and the transformer layers are in
-- tide.nn.transformer, ModuleDict and the parameter containers in
-- tide.nn.container. Convolutions and pooling come separately, with kernels.
--
--     local nn = require "tide.nn"   -- or tide.nn
--     local model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
--     local loss = nn.MSELoss()(model(x), y)
-- One instance per Lua state, as tide itself: busted resets package.loaded
-- between spec files, and classes must stay the same tables.
local REG = debug.getregistry()
if REG["tide.nn"] then return REG["tide.nn"] end
local tide = require "tide"
local B = require "bindings.ffi"
local Module = require "tide.nn.module"
local F = require "tide.nn.functional"
local init = require "tide.nn.weight_init"
local fail = B.fail
local is_tensor, is_module = tide.is_tensor, Module.is_module
local no_grad = tide.no_grad

local nn = { Module = Module, functional = F, init = init, is_module = is_module }

-- -- helpers ---------------------------------------------------------------------------

local function need_size(v, cname, what)
  if type(v) ~= "number" or v < 0 or v ~= math.floor(v) then
    fail(string.format("%s: %s must be a non-negative integer, got %s", cname, what, tostring(v)))
  end
  return v
end

-- Constructor options: a table, or a boolean standing for `key`.
local function opts_of(o, cname, key)
  if o == nil then return {} end
  if type(o) == "boolean" and key then return { [key] = o } end
  if type(o) ~= "table" then fail(string.format("%s: options must be a table, got %s", cname, type(o))) end
  return o
end

-- A new tensor for a parameter or buffer, with the dtype and device options.
local function new_tensor(shape, o)
  return tide.empty(shape, { dtype = o.dtype or "float32", device = o.device })
end

local function check_reduction(r, cname)
  r = r or "mean"
  if r ~= "mean" and r ~= "sum" and r ~= "none" then
    fail(string.format("%s: reduction must be 'mean', 'sum' or 'none', got %s", cname, tostring(r)))
  end
  return r
end

local function shape_str(t) return "[" .. table.concat(t:shape(), ",") .. "]" end

nn._opts_of, nn._new_tensor, nn._need_size = opts_of, new_tensor, need_size

--- nn.Parameter(t): a leaf tensor sharing t's memory that requires grad (t
-- itself is left as it is), for assigning to a module field.
-- @param t a floating-point tensor
-- @param requires_grad default true
-- @return the parameter tensor
-- @usage self.scale = nn.Parameter(tide.ones(4))
function nn.Parameter(t, requires_grad)
  if not is_tensor(t) then fail("Parameter: argument 1 must be a tensor, got " .. type(t)) end
  return t:detach():requires_grad_(requires_grad ~= false)
end

-- -- containers ------------------------------------------------------------------------

--- nn.Sequential(m1, m2, ...) or nn.Sequential({m1, m2, ...}): calls its
-- modules in order, each on the previous one's output. seq[i] is the i-th
-- module (1-based; negative from the end), #seq their number, and
-- ipairs(seq) walks them; their names in state_dict() are "0", "1", ... as
-- in PyTorch.
-- @usage local mlp = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
local Sequential = Module:extend("Sequential")
Sequential._is_list = true
function Sequential:init(...)
  local n, list = select("#", ...), { ... }
  if n == 1 and type(list[1]) == "table" and not is_module(list[1]) then list = list[1]; n = #list end
  for i = 1, n do
    if not is_module(list[i]) then
      fail(string.format("Sequential: argument %d must be a module, got %s", i, type(list[i])))
    end
    self[i] = list[i]
  end
end
function Sequential:forward(x)
  for i = 1, #self do x = self[i](x) end
  return x
end
--- seq:add(m) (also seq:append(m)): appends module m.
-- @param m a module
-- @return seq
-- @usage seq:add(nn.ReLU())
function Sequential:add(m)
  self[#self + 1] = m
  return self
end
Sequential.append = Sequential.add
nn.Sequential = Sequential

--- nn.ModuleList({m1, m2, ...}): a list of modules whose parameters belong to
-- the owner; indexed, counted and walked as Sequential, with no forward.
-- @usage self.layers = nn.ModuleList({ nn.Linear(4, 4), nn.Linear(4, 4) })
local ModuleList = Module:extend("ModuleList")
ModuleList._is_list = true
function ModuleList:init(list)
  if list ~= nil then self:extend(list) end
end
--- list:append(m): appends module m.
-- @param m a module
-- @return the list
-- @usage self.blocks:append(nn.Linear(8, 8))
function ModuleList:append(m)
  self[#self + 1] = m
  return self
end
--- list:extend({m1, m2}): appends each module (of a table or another module list).
-- @param list a table of modules or a ModuleList
-- @return the list
-- @usage layers:extend({ nn.Linear(4, 4), nn.ReLU() })
function ModuleList:extend(list)
  local items = list
  if is_module(list) then
    if not list._is_list then
      fail("ModuleList: extend expects a table of modules or a module list, got a " .. list:class_name())
    end
    items = {}
    for i = 1, #list do items[i] = list[i] end
  elseif type(list) ~= "table" then
    fail("ModuleList: extend expects a table of modules, got " .. type(list))
  end
  for i = 1, #items do
    if not is_module(items[i]) then
      fail(string.format("ModuleList: element %d must be a module, got %s", i, type(items[i])))
    end
    self[#self + 1] = items[i]
  end
  return self
end
function ModuleList:forward()
  fail("ModuleList: a module list has no forward; call its modules (for _, m in ipairs(list) do ... end)")
end
nn.ModuleList = ModuleList

-- -- linear layers -------------------------------------------------------------------------

--- nn.Identity(): returns its input.
-- @usage local skip = nn.Identity()
local Identity = Module:extend("Identity")
function Identity:forward(x) return x end
nn.Identity = Identity

--- nn.Linear(in_features, out_features, opts): y = x W^T + b, with W
-- [out_features, in_features] and b [out_features] drawn from
-- U(-1/sqrt(in_features), 1/sqrt(in_features)) as in PyTorch.
-- @param in_features size of each input sample
-- @param out_features size of each output sample
-- @param opts {bias = true, dtype = "float32", device = "cpu"}, or the bias flag alone
-- @usage local fc = nn.Linear(4, 2, { bias = false })
local Linear = Module:extend("Linear")
function Linear:init(in_features, out_features, opts)
  local o = opts_of(opts, "Linear", "bias")
  self.in_features = need_size(in_features, "Linear", "in_features")
  self.out_features = need_size(out_features, "Linear", "out_features")
  self:register_parameter("weight", new_tensor({ out_features, in_features }, o))
  if o.bias ~= false then self:register_parameter("bias", new_tensor({ out_features }, o)) end
  self:reset_parameters()
end
--- Draws the weight and bias again, as at creation.
-- @usage fc:reset_parameters()
function Linear:reset_parameters() init.reset_linear_(self.weight, self.bias) end
function Linear:forward(x) return F.linear(x, self.weight, self.bias) end
function Linear:extra_repr()
  return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features, self.out_features,
    tostring(self.bias ~= nil))
end
nn.Linear = Linear

--- nn.Bilinear(in1_features, in2_features, out_features, opts): y = x1^T W x2
-- + b (F.bilinear), with W [out_features, in1_features, in2_features] and b
-- [out_features] drawn from U(-1/sqrt(in1_features), 1/sqrt(in1_features)) as in PyTorch.
-- @param opts {bias = true, dtype = "float32", device = "cpu"}, or the bias flag alone
-- @usage local bl = nn.Bilinear(4, 5, 3); local y = bl(x1, x2)
local Bilinear = Module:extend("Bilinear")
function Bilinear:init(in1_features, in2_features, out_features, opts)
  local o = opts_of(opts, "Bilinear", "bias")
  self.in1_features = need_size(in1_features, "Bilinear", "in1_features")
  self.in2_features = need_size(in2_features, "Bilinear", "in2_features")
  self.out_features = need_size(out_features, "Bilinear", "out_features")
  self:register_parameter("weight", new_tensor({ out_features, in1_features, in2_features }, o))
  if o.bias ~= false then self:register_parameter("bias", new_tensor({ out_features }, o)) end
  self:reset_parameters()
end
--- Draws the weight and bias again from U(-1/sqrt(in1_features), 1/sqrt(in1_features)).
-- @usage bl:reset_parameters()
function Bilinear:reset_parameters()
  local bound = self.in1_features > 0 and 1 / math.sqrt(self.in1_features) or 0
  init.uniform_(self.weight, -bound, bound)
  if self.bias then init.uniform_(self.bias, -bound, bound) end
end
function Bilinear:forward(x1, x2) return F.bilinear(x1, x2, self.weight, self.bias) end
function Bilinear:extra_repr()
  return string.format("in1_features=%d, in2_features=%d, out_features=%d, bias=%s", self.in1_features,
    self.in2_features, self.out_features, tostring(self.bias ~= nil))
end
nn.Bilinear = Bilinear

--- nn.Embedding(num_embeddings, embedding_dim, opts): a lookup table of
-- vectors, indexed by 1-based integer tensors; the weight is drawn from
-- N(0, 1). With padding_idx (1-based, negative from the end) that row starts
-- at zero and gets no gradient.
-- @param num_embeddings the number of rows
-- @param embedding_dim the size of each vector
-- @param opts {padding_idx = nil, dtype = "float32", device = "cpu"}
-- @usage local emb = nn.Embedding(1000, 64, { padding_idx = 1 }); local e = emb(tokens)
local Embedding = Module:extend("Embedding")
function Embedding:init(num_embeddings, embedding_dim, opts)
  local o = opts_of(opts, "Embedding")
  self.num_embeddings = need_size(num_embeddings, "Embedding", "num_embeddings")
  self.embedding_dim = need_size(embedding_dim, "Embedding", "embedding_dim")
  local p = o.padding_idx
  if p ~= nil then
    if type(p) ~= "number" or p ~= math.floor(p) or p == 0 or p > num_embeddings or p < -num_embeddings then
      fail(string.format("Embedding: padding_idx %s is out of range for %d embeddings", tostring(p), num_embeddings))
    end
    if p < 0 then p = num_embeddings + p + 1 end
  end
  self.padding_idx = p
  if o._weight ~= nil then
    self:register_parameter("weight", o._weight)
  else
    self:register_parameter("weight", new_tensor({ num_embeddings, embedding_dim }, o))
    self:reset_parameters()
  end
end
--- Draws the weight again from N(0, 1) and zeroes the padding row.
-- @usage emb:reset_parameters()
function Embedding:reset_parameters()
  init.normal_(self.weight)
  if self.padding_idx then no_grad(function() self.weight:select(1, self.padding_idx):zero_() end) end
end
function Embedding:forward(idx) return F.embedding(idx, self.weight, self.padding_idx) end
function Embedding:extra_repr()
  local s = string.format("%d, %d", self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ", padding_idx=" .. self.padding_idx end
  return s
end
--- nn.Embedding.from_pretrained(weight, {freeze = true, padding_idx}): an
-- Embedding whose weight is `weight` [num_embeddings, embedding_dim]
-- (shared, not copied); frozen unless freeze = false.
-- @usage local emb = nn.Embedding.from_pretrained(vectors, { freeze = false })
function Embedding.from_pretrained(weight, opts)
  opts = opts or {}
  if not is_tensor(weight) or weight:dim() ~= 2 then
    fail("Embedding.from_pretrained: weight must be a 2-d tensor [num_embeddings, embedding_dim]")
  end
  local e = Embedding(weight:size(1), weight:size(2), { padding_idx = opts.padding_idx, _weight = weight:detach() })
  e.weight.requires_grad = opts.freeze == false
  return e
end
nn.Embedding = Embedding

-- -- normalisation -------------------------------------------------------------------------

-- A copy of normalized_shape (a size or a non-empty table of sizes) as a table, checked.
local function norm_shape(normalized_shape, cname)
  local ns = type(normalized_shape) == "number" and { normalized_shape } or normalized_shape
  if type(ns) ~= "table" or #ns == 0 then
    fail(cname .. ": normalized_shape must be a size or a non-empty table of sizes, got " .. tostring(normalized_shape))
  end
  local copy = {}
  for i, s in ipairs(ns) do copy[i] = need_size(s, cname, "normalized_shape") end
  return copy
end

--- nn.LayerNorm(normalized_shape, opts): normalises over the trailing
-- dimensions normalized_shape, then scales by weight (ones) and shifts by
-- bias (zeros).
-- @param normalized_shape a size or a table of sizes
-- @param opts {eps = 1e-5, elementwise_affine = true, bias = true, dtype, device}
-- @usage local norm = nn.LayerNorm(64)
local LayerNorm = Module:extend("LayerNorm")
function LayerNorm:init(normalized_shape, opts)
  local o = opts_of(opts, "LayerNorm")
  local copy = norm_shape(normalized_shape, "LayerNorm")
  self.normalized_shape = copy
  self.eps = o.eps or 1e-5
  self.elementwise_affine = o.elementwise_affine ~= false
  if self.elementwise_affine then
    self:register_parameter("weight", new_tensor(copy, o))
    if o.bias ~= false then self:register_parameter("bias", new_tensor(copy, o)) end
  end
  self:reset_parameters()
end
--- Sets the weight to ones and the bias to zeros.
-- @usage norm:reset_parameters()
function LayerNorm:reset_parameters()
  if self.weight then init.ones_(self.weight) end
  if self.bias then init.zeros_(self.bias) end
end
function LayerNorm:forward(x)
  return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
end
function LayerNorm:extra_repr()
  return string.format("{%s}, eps=%g, elementwise_affine=%s", table.concat(self.normalized_shape, ", "), self.eps,
    tostring(self.elementwise_affine))
end
nn.LayerNorm = LayerNorm

--- nn.RMSNorm(normalized_shape, opts): F.rms_norm over the trailing
-- dimensions normalized_shape, then scales by weight (ones), as torch.nn.RMSNorm.
-- @param normalized_shape a size or a table of sizes
-- @param opts {eps = nil (the machine epsilon of the input's dtype), elementwise_affine = true, dtype, device}
-- @usage local norm = nn.RMSNorm(64)
local RMSNorm = Module:extend("RMSNorm")
function RMSNorm:init(normalized_shape, opts)
  local o = opts_of(opts, "RMSNorm")
  local copy = norm_shape(normalized_shape, "RMSNorm")
  if o.eps ~= nil and (type(o.eps) ~= "number" or not (o.eps >= 0)) then
    fail("RMSNorm: eps must be a non-negative number or nil, got " .. tostring(o.eps))
  end
  self.normalized_shape, self.eps = copy, o.eps
  self.elementwise_affine = o.elementwise_affine ~= false
  if self.elementwise_affine then self:register_parameter("weight", new_tensor(copy, o)) end
  self:reset_parameters()
end
--- Sets the weight to ones.
-- @usage norm:reset_parameters()
function RMSNorm:reset_parameters()
  if self.weight then init.ones_(self.weight) end
end
function RMSNorm:forward(x) return F.rms_norm(x, self.normalized_shape, self.weight, self.eps) end
function RMSNorm:extra_repr()
  return string.format("{%s}, eps=%s, elementwise_affine=%s", table.concat(self.normalized_shape, ", "),
    self.eps and string.format("%g", self.eps) or "nil", tostring(self.elementwise_affine))
end
nn.RMSNorm = RMSNorm

-- Batch normalisation, shared by BatchNorm1d and BatchNorm2d (which differ in
-- the input dimensions they accept).
local BatchNorm = Module:extend("_BatchNorm")
function BatchNorm:init(num_features, opts)
  local cname = self:class_name()
  local o = opts_of(opts, cname)
  self.num_features = need_size(num_features, cname, "num_features")
  self.eps = o.eps or 1e-5
  if o.momentum ~= nil and o.momentum ~= false and type(o.momentum) ~= "number" then
    fail(cname .. ": momentum must be a number, or false for a cumulative average")
  end
  self.momentum = o.momentum == nil and 0.1 or o.momentum or nil
  self.affine = o.affine ~= false
  self.track_running_stats = o.track_running_stats ~= false
  if self.affine then
    self:register_parameter("weight", new_tensor({ num_features }, o))
    self:register_parameter("bias", new_tensor({ num_features }, o))
  end
  if self.track_running_stats then
    self:register_buffer("running_mean", new_tensor({ num_features }, o))
    self:register_buffer("running_var", new_tensor({ num_features }, o))
    self:register_buffer("num_batches_tracked", tide.zeros({}, { dtype = "int64", device = o.device }))
  end
  self:reset_parameters()
end
--- Resets the running statistics (mean 0, variance 1, no batches seen).
-- @usage bn:reset_running_stats()
function BatchNorm:reset_running_stats()
  if self.track_running_stats then
    no_grad(function()
      self.running_mean:zero_()
      self.running_var:fill_(1)
      self.num_batches_tracked:zero_()
    end)
  end
end
--- Resets the running statistics, the weight to ones and the bias to zeros.
-- @usage bn:reset_parameters()
function BatchNorm:reset_parameters()
  self:reset_running_stats()
  if self.affine then
    init.ones_(self.weight)
    init.zeros_(self.bias)
  end
end
function BatchNorm:forward(x)
  if not is_tensor(x) then fail(self:class_name() .. ": input must be a tensor, got " .. type(x)) end
  self:check_input_dim(x)
  local factor = self.momentum or 0
  if self.training and self.track_running_stats then
    no_grad(function() self.num_batches_tracked:add_(1) end)
    if self.momentum == nil then factor = 1 / self.num_batches_tracked:item() end
  end
  local batch_stats = self.training or not self.track_running_stats
  local use_running = not self.training or self.track_running_stats
  return F.batch_norm(x, use_running and self.running_mean or nil, use_running and self.running_var or nil,
    self.weight, self.bias, batch_stats, factor, self.eps)
end
function BatchNorm:extra_repr()
  return string.format("%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s", self.num_features, self.eps,
    self.momentum == nil and "false" or tostring(self.momentum), tostring(self.affine),
    tostring(self.track_running_stats))
end

--- nn.BatchNorm1d(num_features, opts): batch normalisation of [N, C] or
-- [N, C, L] input over all but the channels. In training it uses the batch's
-- statistics and updates running_mean / running_var (unbiased variance) with
-- momentum (false: a cumulative average); in evaluation it uses the running
-- ones. weight starts at ones, bias at zeros.
-- @param num_features C
-- @param opts {eps = 1e-5, momentum = 0.1, affine = true, track_running_stats = true, dtype, device}
-- @usage local bn = nn.BatchNorm1d(16); bn:eval()
local BatchNorm1d = BatchNorm:extend("BatchNorm1d")
function BatchNorm1d:check_input_dim(x)
  if x:dim() ~= 2 and x:dim() ~= 3 then
    fail(string.format("BatchNorm1d: expected 2-d or 3-d input ([N, C] or [N, C, L]), got shape %s", shape_str(x)))
  end
end
nn.BatchNorm1d = BatchNorm1d

--- nn.BatchNorm2d(num_features, opts): BatchNorm1d for [N, C, H, W] input.
-- @usage local bn = nn.BatchNorm2d(32)
local BatchNorm2d = BatchNorm:extend("BatchNorm2d")
function BatchNorm2d:check_input_dim(x)
  if x:dim() ~= 4 then
    fail(string.format("BatchNorm2d: expected 4-d input [N, C, H, W], got shape %s", shape_str(x)))
  end
end
nn.BatchNorm2d = BatchNorm2d

-- -- dropout, reshaping, activations ------------------------------------------------------------

--- nn.Dropout(p): F.dropout in training mode, the identity in evaluation.
-- @param p the probability of zeroing an element (default 0.5)
-- @usage local drop = nn.Dropout(0.1)
local Dropout = Module:extend("Dropout")
function Dropout:init(p)
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or p < 0 or p > 1 then
    fail(self:class_name() .. ": p must be a number between 0 and 1, got " .. tostring(p))
  end
  self.p = p
end
function Dropout:forward(x) return F.dropout(x, self.p, self.training) end
function Dropout:extra_repr() return string.format("p=%g", self.p) end
nn.Dropout = Dropout

--- nn.Dropout1d(p), nn.Dropout2d(p), nn.Dropout3d(p): channel-wise dropout
-- (F.dropout1d/2d/3d) in training mode, the identity in evaluation.
-- nn.AlphaDropout(p) and nn.FeatureAlphaDropout(p): F.alpha_dropout and
-- F.feature_alpha_dropout (for SELU networks) in the same way.
-- @usage local drop = nn.Dropout2d(0.2)
for name, f in pairs { Dropout1d = F.dropout1d, Dropout2d = F.dropout2d, Dropout3d = F.dropout3d,
                       AlphaDropout = F.alpha_dropout, FeatureAlphaDropout = F.feature_alpha_dropout } do
  local cls = Dropout:extend(name)
  function cls:forward(x) return f(x, self.p, self.training) end
  nn[name] = cls
end

--- nn.Flatten(start_dim = 2, end_dim = -1): flattens dimensions start_dim ..
-- end_dim into one (by default everything but the batch dimension).
-- @usage local flat = nn.Flatten()
local Flatten = Module:extend("Flatten")
function Flatten:init(start_dim, end_dim)
  self.start_dim, self.end_dim = start_dim or 2, end_dim or -1
end
function Flatten:forward(x) return x:flatten(self.start_dim, self.end_dim) end
function Flatten:extra_repr() return string.format("start_dim=%d, end_dim=%d", self.start_dim, self.end_dim) end
nn.Flatten = Flatten

--- nn.Unflatten(dim, unflattened_size): splits dimension dim into the sizes
-- unflattened_size (one may be -1), the inverse of Flatten.
-- @usage local unflat = nn.Unflatten(2, { 3, 4 })   -- [N, 12] -> [N, 3, 4]
local Unflatten = Module:extend("Unflatten")
function Unflatten:init(dim, unflattened_size)
  if type(dim) ~= "number" or dim == 0 or dim ~= math.floor(dim) then
    fail("Unflatten: dim must be a nonzero integer (1-based, negative from the end), got " .. tostring(dim))
  end
  if type(unflattened_size) ~= "table" or #unflattened_size == 0 then
    fail("Unflatten: unflattened_size must be a non-empty table of sizes, got " .. type(unflattened_size))
  end
  local sizes = {}
  for i, v in ipairs(unflattened_size) do sizes[i] = v end
  self.dim, self.unflattened_size = dim, sizes
end
function Unflatten:forward(x) return x:unflatten(self.dim, self.unflattened_size) end
function Unflatten:extra_repr()
  return string.format("dim=%d, unflattened_size={%s}", self.dim, table.concat(self.unflattened_size, ", "))
end
nn.Unflatten = Unflatten

-- Activations without state: nn.ReLU(), nn.Tanh(), nn.Sigmoid(), nn.SiLU().
for name, f in pairs { ReLU = F.relu, Tanh = F.tanh, Sigmoid = F.sigmoid, SiLU = F.silu } do
  local cls = Module:extend(name)
  function cls:forward(x) return f(x) end
  nn[name] = cls
end

--- nn.GELU(approximate): GELU, exact ("none", the default) or "tanh".
-- @usage local act = nn.GELU("tanh")
local GELU = Module:extend("GELU")
function GELU:init(approximate)
  approximate = approximate or "none"
  if approximate ~= "none" and approximate ~= "tanh" then
    fail("GELU: approximate must be 'none' or 'tanh', got " .. tostring(approximate))
  end
  self.approximate = approximate
end
function GELU:forward(x) return F.gelu(x, self.approximate) end
function GELU:extra_repr() return self.approximate == "none" and "" or "approximate='tanh'" end
nn.GELU = GELU

-- nn[name]: a module of one dim, Class(dim) (default: `default`; nil: required),
-- whose forward is f(x, dim).
local function dim_module(name, default, f)
  local cls = Module:extend(name)
  function cls:init(dim)
    if dim == nil then dim = default end
    if type(dim) ~= "number" or dim == 0 or dim ~= math.floor(dim) then
      fail(string.format("%s: dim must be a nonzero integer (1-based, negative from the end), got %s", name,
        tostring(dim)))
    end
    self.dim = dim
  end
  function cls:forward(x) return f(x, self.dim) end
  function cls:extra_repr() return "dim=" .. self.dim end
  nn[name] = cls
end
nn._dim_module = dim_module

--- nn.Softmax(dim) and nn.LogSoftmax(dim): along dim (required, 1-based).
-- @usage local sm = nn.Softmax(-1)
dim_module("Softmax", nil, F.softmax)
dim_module("LogSoftmax", nil, F.log_softmax)

-- -- losses ------------------------------------------------------------------------------

-- Common options of the losses: the reduction, and class weights kept as a buffer.
local function loss_init(self, opts, with_weight)
  local cname = self:class_name()
  local o = opts_of(type(opts) == "string" and { reduction = opts } or opts, cname)
  self.reduction = check_reduction(o.reduction, cname)
  if with_weight and o.weight ~= nil then
    if not is_tensor(o.weight) then fail(cname .. ": weight must be a tensor, got " .. type(o.weight)) end
    self:register_buffer("weight", o.weight)
  end
  return o
end

--- nn.CrossEntropyLoss(opts): F.cross_entropy(input, target, opts) as a
-- module; class weights are kept as the buffer "weight".
-- @param opts {weight, ignore_index = -100, reduction = "mean", label_smoothing = 0}
-- @usage local loss = nn.CrossEntropyLoss({ label_smoothing = 0.1 })(logits, target)
local CrossEntropyLoss = Module:extend("CrossEntropyLoss")
function CrossEntropyLoss:init(opts)
  local o = loss_init(self, opts, true)
  self.ignore_index = o.ignore_index or -100
  self.label_smoothing = o.label_smoothing or 0
  if type(self.label_smoothing) ~= "number" or self.label_smoothing < 0 or self.label_smoothing > 1 then
    fail("CrossEntropyLoss: label_smoothing must be a number between 0 and 1, got " .. tostring(self.label_smoothing))
  end
end
function CrossEntropyLoss:forward(input, target)
  return F.cross_entropy(input, target, { weight = self.weight, ignore_index = self.ignore_index,
    reduction = self.reduction, label_smoothing = self.label_smoothing })
end
nn.CrossEntropyLoss = CrossEntropyLoss

--- nn.NLLLoss(opts): F.nll_loss as a module.
-- @param opts {weight, ignore_index = -100, reduction = "mean"}
-- @usage local loss = nn.NLLLoss()(log_probs, target)
local NLLLoss = Module:extend("NLLLoss")
function NLLLoss:init(opts)
  local o = loss_init(self, opts, true)
  self.ignore_index = o.ignore_index or -100
end
function NLLLoss:forward(input, target)
  return F.nll_loss(input, target, { weight = self.weight, ignore_index = self.ignore_index,
    reduction = self.reduction })
end
nn.NLLLoss = NLLLoss

--- nn.MSELoss(opts): F.mse_loss as a module.
-- @param opts {reduction = "mean"} or the reduction as a string
-- @usage local loss = nn.MSELoss()(pred, y)
local MSELoss = Module:extend("MSELoss")
function MSELoss:init(opts) loss_init(self, opts, false) end
function MSELoss:forward(input, target) return F.mse_loss(input, target, { reduction = self.reduction }) end
nn.MSELoss = MSELoss

--- nn.BCEWithLogitsLoss(opts): F.binary_cross_entropy_with_logits as a
-- module; weight and pos_weight are kept as buffers.
-- @param opts {weight, pos_weight, reduction = "mean"}
-- @usage local loss = nn.BCEWithLogitsLoss({ pos_weight = tide.tensor({ 2 }) })(logits, y)
local BCEWithLogitsLoss = Module:extend("BCEWithLogitsLoss")
function BCEWithLogitsLoss:init(opts)
  local o = loss_init(self, opts, true)
  if o.pos_weight ~= nil then
    if not is_tensor(o.pos_weight) then fail("BCEWithLogitsLoss: pos_weight must be a tensor") end
    self:register_buffer("pos_weight", o.pos_weight)
  end
end
function BCEWithLogitsLoss:forward(input, target)
  return F.binary_cross_entropy_with_logits(input, target, { weight = self.weight, pos_weight = self.pos_weight,
    reduction = self.reduction })
end
nn.BCEWithLogitsLoss = BCEWithLogitsLoss

for _, name in ipairs { "CrossEntropyLoss", "NLLLoss", "MSELoss", "BCEWithLogitsLoss" } do
  nn[name].extra_repr = function(self)
    return self.reduction == "mean" and "" or "reduction='" .. self.reduction .. "'"
  end
end

-- -- attention and transformers --------------------------------------------------------------

require("tide.nn.transformer")(nn)
require("tide.nn.conv")(nn)
require("tide.nn.rnn")(nn)
require("tide.nn.activation")(nn)
require("tide.nn.loss")(nn)
require("tide.nn.utils")(nn)
require("tide.nn.rnn_utils")(nn)
require("tide.nn.embedding_bag")(nn)
require("tide.nn.ctc")(nn)
require("tide.nn.container")(nn)
require("tide.nn.parametrize")(nn)
require("tide.nn.parametrizations")(nn)

REG["tide.nn"] = nn
return nn
