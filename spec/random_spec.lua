-- random_spec: the random ops (rand, randn, randint, randperm, bernoulli) on the
-- Philox stream. A plain-Lua Philox4x32-10 recomputes the first elements of each
-- op from the documented mapping (element g of the stream: word g % 4 of the
-- block at counter {g / 4, draw, 0}, key = seed); then determinism across seeds
-- and thread counts, statistics of 1e6 draws, dtypes, layouts and errors.
local tide = require "tide"
local H = require "spec.helpers"
local ffi = require "ffi"
local bit = require "bit"

-- -- a reference Philox4x32-10 in plain Lua ------------------------------------------------

local TWO32 = 4294967296
local function u32(x) return x % TWO32 end   -- bit ops return signed 32-bit numbers
local function mulhilo(a, b)
  local p = ffi.new("uint64_t", a) * b
  return tonumber(p / 4294967296ULL), tonumber(p % 4294967296ULL)
end

local function philox(ctr, key)
  local c0, c1, c2, c3 = ctr[1], ctr[2], ctr[3], ctr[4]
  local k0, k1 = key[1], key[2]
  for r = 1, 10 do
    if r > 1 then k0, k1 = u32(k0 + 0x9E3779B9), u32(k1 + 0xBB67AE85) end
    local hi0, lo0 = mulhilo(0xD2511F53, c0)
    local hi1, lo1 = mulhilo(0xCD9E8D57, c2)
    c0, c1, c2, c3 = u32(bit.bxor(hi1, c1, k0)), lo1, u32(bit.bxor(hi0, c3, k1)), lo0
  end
  return { c0, c1, c2, c3 }
end

-- Draw d of stream element g under seed (both below 2^53).
local function word(seed, g, d)
  local block = math.floor(g / 4)
  local w = philox({ block % TWO32, math.floor(block / TWO32), d, 0 },
                   { seed % TWO32, math.floor(seed / TWO32) })
  return w[g % 4 + 1]
end
local function u24(seed, g) return math.floor(word(seed, g, 0) / 256) * 2 ^ -24 end
local function u53(seed, g)
  return (word(seed, g, 0) * 2 ^ 21 + math.floor(word(seed, g, 1) / 2048)) * 2 ^ -53
end

local function values(t) return H.flat(t:totable()) end

local function mean_var(v)
  local s = 0
  for i = 1, #v do s = s + v[i] end
  local m = s / #v
  local q = 0
  for i = 1, #v do q = q + (v[i] - m) ^ 2 end
  return m, q / #v
end

local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] and not (a[i] ~= a[i] and b[i] ~= b[i]) then return false end
  end
  return true
end

-- Runs an op under tide.debug.sync so that an error found by the kernel is raised at once.
local now = H.sync   -- errors found by the op, raised at once, as on the host

describe("random", function()
  describe("the reference Philox", function()
    it("matches the Random123 known-answer vectors", function()
      local function hex(w)
        local r = {}
        for i = 1, 4 do r[i] = string.format("%08x", w[i]) end
        return table.concat(r, " ")
      end
      assert.equal("6627e8d5 e169c58d bc57ac4c 9b00dbd8", hex(philox({ 0, 0, 0, 0 }, { 0, 0 })))
      local f = 0xffffffff
      assert.equal("408f276d 41c83b0e a20bc7c6 6d5451fd", hex(philox({ f, f, f, f }, { f, f })))
      assert.equal("d16cfe09 94fdcceb 5001e420 24126ea1",
        hex(philox({ 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 }, { 0xa4093822, 0x299f31d0 })))
    end)
  end)

  describe("follows the stream", function()
    local seed = 20240607 + 3 * TWO32   -- a key with both words set

    it("rand: float32 from 24 bits, float64 from 53, scaled to [low, high)", function()
      tide.manual_seed(seed)
      local a = values(tide.rand(7))
      local b = values(tide.rand(5, "float64"))   -- starts at counter 8: 7 rounded up to 4s
      for i = 1, 7 do assert.equal(u24(seed, i - 1), a[i]) end
      for i = 1, 5 do assert.equal(u53(seed, 8 + i - 1), b[i]) end
      local c = values(tide.rand(600))   -- large enough for the batched Philox, from counter 16
      local bad = 0
      for i = 1, 600 do if c[i] ~= u24(seed, 16 + i - 1) then bad = bad + 1 end end
      assert.equal(0, bad)
    end)

    it("randn: Box-Muller on pairs of elements", function()
      tide.manual_seed(seed)
      local z = values(tide.randn(6, "float64"))
      for j = 0, 2 do
        local r = math.sqrt(-2 * math.log(1 - u53(seed, 2 * j)))
        local t = 2 * math.pi * u53(seed, 2 * j + 1)
        assert.is_true(math.abs(z[2 * j + 1] - r * math.cos(t)) < 1e-12)
        assert.is_true(math.abs(z[2 * j + 2] - r * math.sin(t)) < 1e-12)
      end
    end)

    it("randint: low + (64-bit draw * range) >> 64", function()
      tide.manual_seed(seed)
      local v = values(tide.randint(-3, 1000, { 9 }))
      for i = 1, 9 do
        local a, b = word(seed, i - 1, 0), word(seed, i - 1, 1)
        -- (a * 2^32 + b) * 1003 >> 64, exactly in doubles
        local e = math.floor((a * 1003 + math.floor(b * 1003 / TWO32)) / TWO32) - 3
        assert.equal(e, v[i])
      end
    end)

    it("randperm: indices sorted by their 64-bit keys", function()
      tide.manual_seed(seed)
      local p = values(tide.randperm(20))
      local keys = {}
      for i = 0, 19 do
        keys[i + 1] = { k = ffi.new("uint64_t", word(seed, i, 0)) * 4294967296ULL + word(seed, i, 1), i = i + 1 }
      end
      table.sort(keys, function(x, y) return x.k < y.k or (x.k == y.k and x.i < y.i) end)
      for i = 1, 20 do assert.equal(keys[i].i, p[i]) end
    end)

    it("bernoulli: 1 where u < p", function()
      tide.manual_seed(seed)
      local ps = { 0.1, 0.5, 0.9, 0.3, 0.7, 0.5, 0.2, 0.8 }
      local v = values(tide.bernoulli(tide.tensor(ps)))
      for i = 1, 8 do assert.equal(u24(seed, i - 1) < ps[i] and 1 or 0, v[i]) end
    end)
  end)

  describe("determinism", function()
    local ops = {
      rand = function(n) return tide.rand(n) end,
      randn = function(n) return tide.randn(n) end,
      randint = function(n) return tide.randint(0, 1000, { n }) end,
      randperm = function(n) return tide.randperm(n) end,
      bernoulli = function(n) return tide.bernoulli(tide.full({ n }, 0.5)) end,
      bernoulli_ = function(n) return tide.zeros(n / 1000, 1000):t():bernoulli_(0.25) end,
    }

    for name, f in pairs(ops) do
      it(name .. ": the same seed gives the same tensor, another seed another", function()
        tide.manual_seed(7)
        local a = values(f(1000))
        local a2 = values(f(1000))   -- the stream moves on
        tide.manual_seed(7)
        local b = values(f(1000))
        tide.manual_seed(8)
        local c = values(f(1000))
        assert.is_true(same(a, b))
        assert.is_false(same(a, a2))
        assert.is_false(same(a, c))
      end)

      it(name .. ": 1, 2 and 3 threads give the same bits for 1e6 elements", function()
        local threads = tide.get_num_threads()
        local results = {}
        for k, n in ipairs({ 1, 2, 3 }) do
          tide.set_num_threads(n)
          tide.manual_seed(99)
          results[k] = values(f(1000000))
        end
        tide.set_num_threads(threads)
        assert.is_true(same(results[1], results[2]))
        assert.is_true(same(results[1], results[3]))
      end)
    end
  end)

  describe("statistics of 1e6 draws", function()
    local N = 1000000

    it("rand is uniform on [0, 1)", function()
      tide.manual_seed(1)
      for _, d in ipairs({ "float32", "float64" }) do
        local v = values(tide.rand({ N }, { dtype = d }))
        local m, var = mean_var(v)
        assert.is_true(math.abs(m - 0.5) < 0.002, d .. " mean " .. m)
        assert.is_true(math.abs(var - 1 / 12) < 0.001, d .. " variance " .. var)
        local lo, hi = math.huge, -math.huge
        for i = 1, N do lo = math.min(lo, v[i]); hi = math.max(hi, v[i]) end
        assert.is_true(lo >= 0 and lo < 1e-4 and hi < 1 and hi > 1 - 1e-4)
      end
    end)

    it("rand stays below high after rounding to float16 and bfloat16", function()
      tide.manual_seed(2)
      for _, d in ipairs({ "float16", "bfloat16" }) do
        local t = tide.rand({ N }, { dtype = d })
        assert.equal(d, t:dtype())
        local v = values(t)
        local hi = -math.huge
        for i = 1, N do hi = math.max(hi, v[i]) end
        assert.is_true(hi < 1, d .. " reached " .. hi)
        assert.is_true(hi > 0.99, d .. " max " .. hi)
        assert.is_true(math.abs(mean_var(v) - 0.5) < 0.003)
      end
    end)

    it("randn has mean 0 and std 1", function()
      tide.manual_seed(3)
      for _, d in ipairs({ "float32", "float64" }) do
        local v = values(tide.randn({ N }, { dtype = d }))
        local m, var = mean_var(v)
        assert.is_true(math.abs(m) < 0.005, d .. " mean " .. m)
        assert.is_true(math.abs(math.sqrt(var) - 1) < 0.005, d .. " std " .. math.sqrt(var))
        -- tails: P(|z| > 3) = 0.0027
        local out = 0
        for i = 1, N do if math.abs(v[i]) > 3 then out = out + 1 end end
        assert.is_true(math.abs(out / N - 0.0027) < 0.0003, "tail " .. out / N)
      end
    end)

    it("randint covers [low, high) evenly, high excluded", function()
      tide.manual_seed(4)
      for _, d in ipairs({ "int64", "int32", "uint8", "float32", "float64" }) do
        local t = tide.randint(3, 13, { N }, { dtype = d })
        assert.equal(d, t:dtype())
        local count, bad = {}, 0
        for _, x in ipairs(values(t)) do
          if not (x >= 3 and x < 13 and x == math.floor(x)) then bad = bad + 1 end
          count[x] = (count[x] or 0) + 1
        end
        assert.equal(0, bad)
        for x = 3, 12 do assert.is_true(math.abs(count[x] / N - 0.1) < 0.002, d .. " count of " .. x) end
      end
      local v = values(tide.randint(-2, 1, { 1000 }))   -- negative low
      local seen = {}
      for _, x in ipairs(v) do seen[x] = true end
      assert.same({ [-2] = true, [-1] = true, [0] = true }, seen)
      -- the widest ranges
      local wide = values(tide.randint(-2 ^ 63, 2 ^ 63, { 1000 }))
      local neg = 0
      for _, x in ipairs(wide) do if x < 0 then neg = neg + 1 end end
      assert.is_true(neg > 400 and neg < 600)
      assert.equal("int64", tide.randint(10, { 3 }):dtype())   -- randint(high, sizes)
    end)

    it("randperm of 1000 is a permutation of 1..1000", function()
      tide.manual_seed(5)
      for _, d in ipairs({ "int64", "int32", "float32", "float64" }) do
        local t = tide.randperm(1000, { dtype = d })
        assert.equal(d, t:dtype())
        local v = values(t)
        assert.equal(1000, #v)
        local seen, fixed = {}, 0
        for i, x in ipairs(v) do
          assert.is_nil(seen[x])
          seen[x] = true
          if x == i then fixed = fixed + 1 end
        end
        for x = 1, 1000 do assert.is_true(seen[x]) end
        assert.is_true(fixed < 10)   -- about one fixed point expected
      end
      assert.equal("int64", tide.randperm(3):dtype())
      -- position of 1 over many small permutations is uniform
      local pos = { 0, 0, 0, 0 }
      for _ = 1, 4000 do
        local v = values(tide.randperm(4))
        for i = 1, 4 do if v[i] == 1 then pos[i] = pos[i] + 1 end end
      end
      for i = 1, 4 do assert.is_true(math.abs(pos[i] - 1000) < 120, "position " .. i .. ": " .. pos[i]) end
    end)

    it("bernoulli frequencies follow p", function()
      tide.manual_seed(6)
      for _, p in ipairs({ 0.05, 0.5, 0.9 }) do
        for _, d in ipairs({ "float32", "float64" }) do
          local t = tide.bernoulli(tide.full({ N }, p, { dtype = d }))
          assert.equal(d, t:dtype())
          local ones, bad = 0, 0
          for _, x in ipairs(values(t)) do
            if x ~= 0 and x ~= 1 then bad = bad + 1 end
            ones = ones + x
          end
          assert.equal(0, bad)
          assert.is_true(math.abs(ones / N - p) < 0.002, d .. " p " .. p .. ": " .. ones / N)
        end
      end
      assert.same({ 0, 0, 0, 1, 1, 1 }, values(tide.bernoulli(tide.tensor({ 0, 0, 0, 1, 1, 1 }))))
    end)

    it("bernoulli_ broadcasts a p tensor over the destination", function()
      tide.manual_seed(7)
      local ps = { 0.1, 0.4, 0.6, 0.95 }
      local t = tide.zeros(250000, 4):bernoulli_(tide.tensor({ ps }))   -- p [1, 4] over [250000, 4]
      local v = values(t)
      local ones = { 0, 0, 0, 0 }
      for i = 1, #v do ones[(i - 1) % 4 + 1] = ones[(i - 1) % 4 + 1] + v[i] end
      for j = 1, 4 do assert.is_true(math.abs(ones[j] / 250000 - ps[j]) < 0.004, "column " .. j) end
    end)
  end)

  describe("layouts and dtypes", function()
    it("bernoulli_ on non-contiguous views draws by logical element", function()
      local p = tide.tensor(H.values(60, 0, 1, 3)):view(6, 10)
      tide.manual_seed(11)
      local want = values(tide.zeros(6, 10):bernoulli_(p))
      for name, dst in pairs(H.layouts(tide.zeros(6, 10))) do
        tide.manual_seed(11)
        dst:bernoulli_(p)
        H.equal(dst, H.nest(want, { 6, 10 }), name)
      end
      -- and p itself non-contiguous
      for name, pl in pairs(H.layouts(p)) do
        tide.manual_seed(11)
        H.equal(tide.bernoulli(pl), H.nest(want, { 6, 10 }), "p " .. name)
      end
      -- the transposed view holds the logical elements, so memory order differs
      tide.manual_seed(11)
      local base = tide.zeros(10, 6)
      base:t():bernoulli_(p)
      H.equal(base:t(), H.nest(want, { 6, 10 }))
    end)

    it("bernoulli_ of a number, into float16 and float64 tensors", function()
      tide.manual_seed(12)
      for _, d in ipairs({ "float16", "bfloat16", "float64" }) do
        local t = tide.zeros({ 20000 }, d):bernoulli_(0.25)
        assert.equal(d, t:dtype())
        local ones = 0
        for _, x in ipairs(values(t)) do ones = ones + x end
        assert.is_true(math.abs(ones / 20000 - 0.25) < 0.015)
      end
      local p16 = tide.full({ 100000 }, 0.75, { dtype = "float16" })
      local ones = 0
      for _, x in ipairs(values(tide.bernoulli(p16))) do ones = ones + x end
      assert.is_true(math.abs(ones / 100000 - 0.75) < 0.006)
    end)

    it("rand, randn and randint fill 0-d and empty tensors", function()
      for _, f in ipairs({ tide.rand, tide.randn }) do
        local z = f({})
        assert.same({}, z:shape())
        assert.equal("number", type(z:item()))
        assert.same({ 0, 3 }, f(0, 3):shape())
      end
      assert.same({}, tide.randint(0, 5, {}):shape())
      assert.same({ 2, 0 }, tide.randint(0, 5, { 2, 0 }):shape())
      assert.same({ 0 }, tide.randperm(0):shape())
      assert.same({ 0 }, tide.bernoulli(tide.zeros(0)):shape())
      local one = tide.randperm(1)
      H.equal(one, { 1 })
      assert.equal(0, tide.bernoulli(tide.full({}, 0)):item())
    end)

    it("rand keeps every value in range for a scaled interval", function()
      tide.manual_seed(13)
      local x = tide.rand(4, 5)
      assert.same({ 4, 5 }, x:shape())
      local v = values(tide.randint(100, 101, { 50 }))
      for i = 1, 50 do assert.equal(100, v[i]) end
    end)
  end)

  describe("errors", function()
    it("randint needs low < high, integers, and a range the dtype holds, checked at the call", function()
      assert.has_error(function() tide.randint(5, 5, { 3 }) end,
        "randint: low must be less than high, got low = 5 and high = 5")
      assert.has_error(function() tide.randint(5, 2, { 3 }) end,
        "randint: low must be less than high, got low = 5 and high = 2")
      assert.has_error(function() tide.randint(0.5, 2, { 3 }) end,
        "randint: low and high must be integers, got 0.5 and 2")
      assert.has_error(function() tide.randint(0, 300, { 3 }, { dtype = "uint8" }) end,
        "randint: [0, 300) is outside what dtype uint8 holds exactly, [0, 256]")
      assert.has_error(function() tide.randint(-1, 3, { 3 }, { dtype = "uint8" }) end,
        "randint: [-1, 3) is outside what dtype uint8 holds exactly, [0, 256]")
      assert.has_error(function() tide.randint(0, 2 ^ 25, { 3 }, { dtype = "float32" }) end,
        "randint: [0, 33554432) is outside what dtype float32 holds exactly, [-16777216, 16777216]")
    end)

    it("bernoulli needs probabilities in [0, 1]", function()
      assert.has_error(now(function() tide.bernoulli(tide.tensor({ 0.5, 1.5 })) end),
        "bernoulli: probability 1.5 is outside [0, 1]")
      assert.has_error(now(function() tide.bernoulli(tide.tensor({ { 0.5 }, { -0.25 } }):t()) end),
        "bernoulli: probability -0.25 is outside [0, 1]")
      assert.has_error(now(function() tide.zeros(3):bernoulli_(2) end),
        "bernoulli: probability 2 is outside [0, 1]")
      assert.has_error(now(function() tide.zeros(3):bernoulli_(0 / 0) end))
      assert.has_error(function() tide.bernoulli(0.5) end, "bernoulli: argument must be a tensor of probabilities")
      assert.has_error(function() tide.bernoulli(tide.tensor({ 1, 0 }, "int64")) end,
        "bernoulli: dtype int64 is not supported")
    end)

    it("sizes must be non-negative", function()
      assert.has_error(function() tide.rand(2, -3) end, "rand: size -3 of dimension 2 is negative")
      assert.has_error(function() tide.randn(-1) end, "randn: size -1 of dimension 1 is negative")
      assert.has_error(function() tide.randint(0, 5, { -2 }) end, "randint: size -2 of dimension 1 is negative")
      assert.has_error(function() tide.randperm(-3) end, "randperm: size -3 of dimension 1 is negative")
    end)

    it("randperm needs n that the dtype holds", function()
      assert.has_error(function() tide.randperm(300, "uint8") end,
        "randperm: n = 300 is too large for dtype uint8 (at most 255)")
      local seen = {}
      for _, x in ipairs(values(tide.randperm(255, "uint8"))) do seen[x] = true end
      for x = 1, 255 do assert.is_true(seen[x]) end
    end)

    it("rand and randn reject float dtypes only by the registry", function()
      assert.has_error(function() tide.rand(3, "int64") end, "rand: dtype int64 is not supported")
      assert.has_error(function() tide.randn(3, "int32") end, "randn: dtype int32 is not supported")
      assert.has_error(function() tide.randint(0, 2, { 3 }, "bool") end, "randint: dtype bool is not supported")
    end)
  end)
end)
