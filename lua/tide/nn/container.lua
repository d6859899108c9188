--- tide.nn.container: the keyed and parameter containers of torch.nn --
-- nn.ModuleDict, nn.ParameterList, nn.ParameterDict -- whose contents belong
-- to the owner (parameters(), state_dict(), to()) under the names PyTorch
-- gives them. Sequential and ModuleList are in tide.nn (init.lua).
-- Loaded by tide.nn, which passes itself in: `require("tide.nn.container")(nn)`.
local B = require "bindings.ffi"
local T = require "tide.tensor"
local fail = B.fail
local is_tensor = T.is_tensor

-- The (key, value) pairs of a constructor or update() argument: a list of
-- {key, value} pairs in its order, or a table key -> value in sorted key order
-- (a Lua table keeps no insertion order), or another container's items().
local function entries(src, cname)
  if type(src) ~= "table" then fail(string.format("%s: expects a table of entries, got %s", cname, type(src))) end
  local mt = getmetatable(src)
  if type(mt) == "table" and rawget(mt, "__tide_module") and src.items then return src:items() end
  local r = {}
  if #src > 0 then
    for i, e in ipairs(src) do
      if type(e) ~= "table" or e[1] == nil then
        fail(string.format("%s: entry %d must be a {key, value} pair, got %s", cname, i, type(e)))
      end
      r[i] = { e[1], e[2] }
    end
    return r
  end
  local keys = {}
  for k in pairs(src) do
    if type(k) ~= "string" then fail(string.format("%s: keys must be strings, got %s", cname, type(k))) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  for i, k in ipairs(keys) do r[i] = { k, src[k] } end
  return r
end

-- A key must be a name, and not one the module already uses for something
-- else (a method, a plain field), as PyTorch refuses "attribute already exists".
local function check_key(self, cls, k, store)
  if type(k) ~= "string" or k == "" or k:find(".", 1, true) then
    fail(string.format("%s: keys must be non-empty strings without '.', got %s", cls.__name, tostring(k)))
  end
  if self[store][k] == nil and (rawget(self, k) ~= nil or cls[k] ~= nil or self._attrs[k] ~= nil
      or self._parameters[k] ~= nil or self._buffers[k] ~= nil or self._modules[k] ~= nil) then
    fail(string.format("%s: key '%s' is already an attribute of the module", cls.__name, k))
  end
  return k
end

-- A tensor as a parameter: a leaf that requires grad stays itself, another
-- floating-point tensor becomes nn.Parameter(t) (sharing its memory).
local function as_param(nn, t, cname)
  if not is_tensor(t) then fail(string.format("%s: values must be tensors, got %s", cname, type(t))) end
  if t.is_leaf and (t.requires_grad or not t:is_floating_point()) then return t end
  return nn.Parameter(t)
end

-- The common methods of the keyed containers, over the store (`_modules` or `_parameters`).
local function keyed(cls, store, order)
  --- keys(), values(), items(): lists in insertion order (items as {key, value} pairs).
  function cls:keys()
    local r = {}
    for i, k in ipairs(self[order]) do r[i] = k end
    return r
  end
  function cls:values()
    local r = {}
    for i, k in ipairs(self[order]) do r[i] = self[store][k] end
    return r
  end
  function cls:items()
    local r = {}
    for i, k in ipairs(self[order]) do r[i] = { k, self[store][k] } end
    return r
  end
  --- len(): the number of entries. contains(key): whether key is one.
  function cls:len() return #self[order] end
  function cls:contains(k) return self[store][k] ~= nil end
  --- pop(key): removes the entry and returns its value.
  function cls:pop(k)
    local v = self[store][k]
    if v == nil then fail(string.format("%s: no key '%s'", cls.__name, tostring(k))) end
    self[k] = nil
    return v
  end
  --- clear(): removes every entry.
  function cls:clear()
    for _, k in ipairs(self:keys()) do self[k] = nil end
    return self
  end
  --- update(entries): adds or replaces entries (as the constructor takes them).
  function cls:update(src)
    for _, e in ipairs(entries(src, cls.__name)) do self:set(e[1], e[2]) end
    return self
  end
  function cls:forward()
    fail(string.format("%s: a %s has no forward; call its entries", cls.__name, cls.__name))
  end
end

return function(nn)
  local Module = nn.Module

  --- nn.ModuleDict(modules): modules by string key, registered as children
  -- under their keys (state_dict names "key.weight"), in insertion order. The
  -- argument is a list of {key, module} pairs (kept in its order) or a table
  -- key -> module (added in sorted key order). md[key] reads an entry,
  -- md:set(key, m) (or md[key] = m) adds one.
  -- @usage local heads = nn.ModuleDict({ { "cls", nn.Linear(8, 3) }, { "box", nn.Linear(8, 4) } })
  -- local y = heads.cls(x); for _, e in ipairs(heads:items()) do print(e[1], e[2]) end
  local ModuleDict = Module:extend("ModuleDict")
  function ModuleDict:init(modules)
    if modules ~= nil then self:update(modules) end
  end
  --- set(key, m): adds module m under key (replacing what was there).
  -- @usage md:set("act", nn.ReLU())
  function ModuleDict:set(k, m)
    check_key(self, ModuleDict, k, "_modules")
    if not nn.is_module(m) then
      fail(string.format("ModuleDict: value of '%s' must be a module, got %s", k, type(m)))
    end
    self[k] = m
    return self
  end
  --- get(key): the module under key, or nil.
  function ModuleDict:get(k) return self._modules[k] end
  keyed(ModuleDict, "_modules", "_module_order")
  nn.ModuleDict = ModuleDict

  --- nn.ParameterDict(parameters): parameters by string key (state_dict names
  -- are the keys), in insertion order; the argument as ModuleDict's. A tensor
  -- that is not a leaf requiring grad is stored as nn.Parameter(t).
  -- @usage self.scales = nn.ParameterDict({ a = tide.ones(3), b = tide.zeros(3) })
  local ParameterDict = Module:extend("ParameterDict")
  function ParameterDict:init(params)
    if params ~= nil then self:update(params) end
  end
  --- set(key, t): adds t under key as a parameter (replacing what was there).
  -- @usage pd:set("w", tide.randn(3))
  function ParameterDict:set(k, t)
    check_key(self, ParameterDict, k, "_parameters")
    self:register_parameter(k, as_param(nn, t, "ParameterDict"))
    return self
  end
  --- get(key, default): the parameter under key, or default.
  function ParameterDict:get(k, default)
    local v = self._parameters[k]
    if v == nil then return default end
    return v
  end
  keyed(ParameterDict, "_parameters", "_param_order")
  local pd_newindex = ParameterDict.__instance_mt.__newindex
  ParameterDict.__instance_mt.__newindex = function(self, k, v)
    if is_tensor(v) and type(k) == "string" and self._attrs[k] == nil then return self:set(k, v) end
    return pd_newindex(self, k, v)
  end
  nn.ParameterDict = ParameterDict

  --- nn.ParameterList(parameters): a list of parameters, named "0", "1", ...
  -- in state_dict as in PyTorch. pl[i] reads the i-th (1-based, negative from
  -- the end), pl[i] = t replaces it (or appends at len() + 1); pl:len()
  -- counts them and pl:values() lists them (LuaJIT's # and ipairs do not see
  -- through the module). A tensor that is not a leaf requiring grad is stored
  -- as nn.Parameter(t).
  -- @usage self.ws = nn.ParameterList({ tide.randn(3, 3), tide.randn(3) })
  -- for i = 1, self.ws:len() do x = x * self.ws[i] end
  local ParameterList = Module:extend("ParameterList")
  function ParameterList:init(params)
    if params ~= nil then self:extend(params) end
  end
  function ParameterList:len() return #self._param_order end
  function ParameterList:values()
    local r = {}
    for i = 1, #self._param_order do r[i] = self._parameters[tostring(i - 1)] end
    return r
  end
  --- append(t): adds t at the end.
  function ParameterList:append(t)
    self[#self._param_order + 1] = t
    return self
  end
  --- extend(list): appends each tensor of a table or another ParameterList.
  function ParameterList:extend(list)
    if nn.is_module(list) and list.values then list = list:values() end
    if type(list) ~= "table" then fail("ParameterList: extend expects a table of tensors, got " .. type(list)) end
    for i = 1, #list do
      if not is_tensor(list[i]) then
        fail(string.format("ParameterList: element %d must be a tensor, got %s", i, type(list[i])))
      end
      self:append(list[i])
    end
    return self
  end
  function ParameterList:forward()
    fail("ParameterList: a ParameterList has no forward; use its parameters")
  end
  local pl_index, pl_newindex = ParameterList.__instance_mt.__index, ParameterList.__instance_mt.__newindex
  ParameterList.__instance_mt.__index = function(self, k)
    if type(k) ~= "number" then return pl_index(self, k) end
    local n = #self._param_order
    if k < 0 then k = n + k + 1 end
    return self._parameters[tostring(k - 1)]
  end
  ParameterList.__instance_mt.__newindex = function(self, k, v)
    if type(k) ~= "number" then return pl_newindex(self, k, v) end
    local n = #self._param_order
    if k < 0 and k >= -n then k = n + k + 1 end
    if k ~= math.floor(k) or k < 1 or k > n + 1 then
      fail(string.format("ParameterList: index %s is out of range for a list of %d parameters", tostring(k), n))
    end
    self:register_parameter(tostring(k - 1), as_param(nn, v, "ParameterList"))
  end
  nn.ParameterList = ParameterList
end
