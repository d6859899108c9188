-- nn containers and small layers: Module:clone (independent deep copies),
-- ModuleDict / ParameterList / ParameterDict (order, state_dict names as
-- PyTorch's, to(), keys that clash), nn.Unflatten and nn.Bilinear / F.bilinear
-- against a plain-Lua float64 reference with gradcheck, and their errors.
local tide = require "tide"
local H = require "spec.helpers"
local nn = tide.nn
local F = nn.functional
local gradcheck = tide.autograd.gradcheck

local t64 = H.t64

describe("Module:clone", function()
  it("copies parameters, buffers, children and fields, keeping what is shared inside shared", function()
    local Net = nn.Module:extend("CloneNet")
    function Net:init()
      self.fc = nn.Linear(3, 2)
      self.bn = nn.BatchNorm1d(2)
      self.again = self.fc
      self.sizes = { 1, { 2 } }
      self.fn = math.abs
      self:register_buffer("scratch", tide.zeros(2), false)
    end
    local a = Net()
    tide.no_grad(function() a.bn.running_mean:fill_(0.5) end)
    local b = a:clone()
    assert.are.equal("CloneNet", b:class_name())
    assert.are_not.equal(a.fc, b.fc)
    assert.are.equal(b.fc, b.again)
    H.equal(b.fc.weight, a.fc.weight)
    H.equal(b.bn.running_mean, a.bn.running_mean)
    assert.is_true(b.fc.weight.requires_grad and b.fc.weight.is_leaf)
    assert.is_false(b.bn.running_mean.requires_grad)
    assert.are.same(a:state_dict_keys(), b:state_dict_keys())
    assert.are.same(a.sizes, b.sizes)
    assert.are_not.equal(a.sizes, b.sizes)
    assert.are.equal(math.abs, b.fn)
    assert.is_nil(b:state_dict().scratch)
    tide.no_grad(function() b.fc.weight:zero_(); b.bn.running_mean:zero_() end)
    assert.are.same({ 0.5, 0.5 }, a.bn.running_mean:totable())
    assert.is_true(a.fc.weight:abs():sum():item() > 0)
    b:eval()
    assert.is_true(a.training)
    local seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU()):to("float64")
    local c = seq:clone()
    assert.are.equal(2, #c)
    assert.are.equal("float64", c[1].weight:dtype())
    H.equal(c(t64({ { 1, -1 } })), seq(t64({ { 1, -1 } })))
  end)
end)

describe("nn.ModuleDict", function()
  it("keeps insertion order for parameters and state_dict", function()
    local md = nn.ModuleDict({ { "z", nn.Linear(2, 3) }, { "a", nn.Linear(3, 1, false) } })
    md:set("m", nn.ReLU())
    md.k = nn.Linear(1, 1)
    assert.are.same({ "z", "a", "m", "k" }, md:keys())
    assert.are.same({ "z.weight", "z.bias", "a.weight", "k.weight", "k.bias" }, md:state_dict_keys())
    assert.are.equal(4, md:len())
    assert.is_true(md:contains("a"))
    assert.are.equal(md.z, md:get("z"))
    assert.are.equal(md.z, md:items()[1][2])
    assert.are.equal(md.a, md:values()[2])
    local popped = md:pop("a")
    assert.are.equal("Linear", popped:class_name())
    assert.are.same({ "z", "m", "k" }, md:keys())
    md:set("z", nn.Linear(2, 2))   -- replacing keeps the place
    assert.are.same({ "z", "m", "k" }, md:keys())
    assert.are.same({ "a", "b" }, nn.ModuleDict({ b = nn.ReLU(), a = nn.Tanh() }):keys())   -- sorted
    local Owner = nn.Module:extend("DictOwner")
    function Owner:init() self.heads = nn.ModuleDict({ { "cls", nn.Linear(2, 3) } }) end
    local o = Owner():to("float64")
    assert.are.same({ "heads.cls.weight", "heads.cls.bias" }, o:state_dict_keys())
    assert.are.equal("float64", o.heads.cls.weight:dtype())
    md:clear()
    assert.are.equal(0, md:len())
  end)

  it("refuses keys that clash and values that are not modules", function()
    local md = nn.ModuleDict()
    assert.has_error(function() md:set("keys", nn.ReLU()) end,
      "ModuleDict: key 'keys' is already an attribute of the module")
    assert.has_error(function() md:set("training", nn.ReLU()) end,
      "ModuleDict: key 'training' is already an attribute of the module")
    assert.has_error(function() md:set("a.b", nn.ReLU()) end,
      "ModuleDict: keys must be non-empty strings without '.', got a.b")
    assert.has_error(function() md:set("x", 3) end, "ModuleDict: value of 'x' must be a module, got number")
    assert.has_error(function() md:pop("x") end, "ModuleDict: no key 'x'")
    assert.has_error(function() md(1) end, "ModuleDict: a ModuleDict has no forward; call its entries")
  end)
end)

describe("nn.ParameterList and nn.ParameterDict", function()
  it("ParameterList names its parameters 0, 1, ... and indexes them 1-based", function()
    local w = tide.ones(2, 2)
    local pl = nn.ParameterList({ w, tide.zeros(3):requires_grad_() })
    assert.are.equal(2, pl:len())
    assert.are.same({ "0", "1" }, pl:state_dict_keys())
    assert.is_true(pl[1].requires_grad and pl[1].is_leaf)
    assert.is_false(w.requires_grad)   -- wrapped, as nn.Parameter does, not changed
    assert.are.same({ 3 }, pl[-1]:shape())
    assert.is_nil(pl[3])
    pl:append((tide.ones(1) * 2))      -- a non-leaf becomes a parameter
    assert.are.equal(3, pl:len())
    assert.is_true(pl[3].is_leaf and pl[3].requires_grad)
    pl[1] = tide.full({ 4 }, 7)
    assert.are.same({ 4 }, pl[1]:shape())
    assert.are.equal(3, #pl:values())
    assert.are.equal(3, #pl:parameters())
    local Owner = nn.Module:extend("ListOwner")
    function Owner:init() self.ws = nn.ParameterList({ tide.ones(2) }) end
    local o = Owner():to("float64")
    assert.are.same({ "ws.0" }, o:state_dict_keys())
    assert.are.equal("float64", o.ws[1]:dtype())
    assert.has_error(function() pl[5] = tide.ones(1) end,
      "ParameterList: index 5 is out of range for a list of 3 parameters")
    assert.has_error(function() pl:append(3) end, "ParameterList: values must be tensors, got number")
  end)

  it("ParameterDict keeps insertion order and wraps tensors as parameters", function()
    local pd = nn.ParameterDict({ { "scale", tide.ones(3) }, { "bias", tide.zeros(3) } })
    pd.extra = tide.ones(1)
    assert.are.same({ "scale", "bias", "extra" }, pd:keys())
    assert.are.same({ "scale", "bias", "extra" }, pd:state_dict_keys())
    assert.is_true(pd.extra.requires_grad)
    assert.are.equal(3, #pd:parameters())
    assert.is_nil(pd:get("none"))
    assert.are.equal(5, pd:get("none", 5))
    pd:pop("bias")
    assert.are.same({ "scale", "extra" }, pd:keys())
    pd:update({ c = tide.ones(2), b = tide.ones(2) })
    assert.are.same({ "scale", "extra", "b", "c" }, pd:keys())
    assert.has_error(function() pd:set("get", tide.ones(1)) end,
      "ParameterDict: key 'get' is already an attribute of the module")
  end)
end)

describe("nn.Unflatten", function()
  it("splits a dimension, the inverse of Flatten", function()
    local x = tide.arange(24):view(2, 12)
    local u = nn.Unflatten(2, { 3, -1 })
    assert.are.same({ 2, 3, 4 }, u(x):shape())
    H.equal(nn.Flatten()(u(x)), x)
    assert.are.same({ 2, 2, 6 }, nn.Unflatten(-1, { 2, 6 })(x):shape())
    assert.are.equal("Unflatten(dim=2, unflattened_size={3, -1})", tostring(u))
    assert.has_error(function() nn.Unflatten(0, { 2 }) end,
      "Unflatten: dim must be a nonzero integer (1-based, negative from the end), got 0")
    assert.has_error(function() nn.Unflatten(1, {}) end,
      "Unflatten: unflattened_size must be a non-empty table of sizes, got table")
  end)
end)

describe("nn.Bilinear", function()
  -- y[n][o] = sum_ij x1[n][i] W[o][i][j] x2[n][j] + b[o]
  local function ref(x1, x2, w, b)
    local r = {}
    for n = 1, #x1 do
      r[n] = {}
      for o = 1, #w do
        local s = b and b[o] or 0
        for i = 1, #x1[n] do
          for j = 1, #x2[n] do s = s + x1[n][i] * w[o][i][j] * x2[n][j] end
        end
        r[n][o] = s
      end
    end
    return r
  end

  it("matches a plain-Lua reference and gradchecks", function()
    tide.manual_seed(3)
    local bl = nn.Bilinear(3, 2, 4, { dtype = "float64" })
    assert.are.same({ "weight", "bias" }, bl:state_dict_keys())
    assert.are.same({ 4, 3, 2 }, bl.weight:shape())
    local bound = 1 / math.sqrt(3)
    assert.is_true(bl.weight:abs():max():item() <= bound and bl.bias:abs():max():item() <= bound)
    local x1 = t64({ { 0.5, -1, 2 }, { 0.25, 0.75, -0.5 } }, true)
    local x2 = t64({ { 1, -2 }, { 0.3, 0.1 } }, true)
    H.close(bl(x1, x2), ref(x1:totable(), x2:totable(), bl.weight:totable(), bl.bias:totable()), 1e-12)
    local nb = nn.Bilinear(3, 2, 4, false):to("float64")
    assert.is_nil(nb.bias)
    H.close(nb(x1, x2), ref(x1:totable(), x2:totable(), nb.weight:totable()), 1e-12)
    -- leading dimensions are kept
    local y = bl(x1:view(2, 1, 3):expand(2, 5, 3), x2:view(2, 1, 2):expand(2, 5, 2))
    assert.are.same({ 2, 5, 4 }, y:shape())
    H.close(y:select(2, 4), bl(x1, x2), 1e-12)
    assert.is_true(gradcheck(function(a, b, w, c) return F.bilinear(a, b, w, c) end,
      { x1, x2, bl.weight, bl.bias }))
  end)

  it("raises clear errors", function()
    local w = tide.randn(4, 3, 2)
    assert.has_error(function() F.bilinear(tide.randn(2, 3), tide.randn(2, 3), w) end,
      "bilinear: inputs of shapes [2,3] and [2,3] do not match weight of shape [4,3,2] (expected [*, 3] and [*, 2])")
    assert.has_error(function() F.bilinear(tide.randn(2, 3), tide.randn(3, 2), w) end,
      "bilinear: inputs of shapes [2,3] and [3,2] differ in their leading dimensions")
    assert.has_error(function() F.bilinear(tide.randn(2, 3), tide.randn(2, 2), tide.randn(3, 2)) end,
      "bilinear: weight must be 3-d [out_features, in1_features, in2_features], got shape [3,2]")
    assert.has_error(function() F.bilinear(tide.randn(2, 3), tide.randn(2, 2), w, tide.randn(3)) end,
      "bilinear: bias of shape [3] does not match weight of shape [4,3,2] (expected [4])")
  end)
end)
