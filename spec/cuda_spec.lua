-- CUDA: the backend library is built where the toolkit is, and libtide says
-- whether CUDA devices are usable and why not, tensors move there and back,
-- and the device's settings. The ops on the device are cuda_ops_spec.lua's.
local tide = require "tide"
local H = require "spec.helpers"

describe("tide.cuda", function()
  it("says whether CUDA is usable, and why not", function()
    local ok, why = tide.cuda.is_available()
    local listed = {}
    for _, d in ipairs(tide.devices()) do
      if d:match("^cuda:") then listed[#listed + 1] = d end
    end
    if ok then
      print("\nCUDA devices here: " .. tide.cuda.status())
      assert.is_true(tide.cuda.device_count() >= 1)
      assert.matches("^%d+ devices?: cuda:0 ", tide.cuda.status())
      assert.are.equal(tide.cuda.device_count(), #listed)
      assert.are.equal("cuda:0", listed[1])
    else
      assert.are.same({}, listed)
      assert.are.equal(0, tide.cuda.device_count())
      assert.matches("^CUDA is not available: ", why)
      assert.is_true(why:find("no CUDA backend", 1, true) ~= nil or why:find("no usable device", 1, true) ~= nil
        or why:find("no device", 1, true) ~= nil, why)
      assert.has_error(function() tide.zeros(2, { device = "cuda:0" }) end, "device: 'cuda:0': " .. why)
    end
  end)

  it("loads the backend TIDE_CUDA_LIBRARY names, and says why not when it does not load", function()
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write('print(select(2, require("tide").cuda.is_available()) or require("tide").cuda.status())\n')
    f:close()
    local function run(lib)
      local p = assert(io.popen("env -u TIDE_DEFAULT_DEVICE -u TIDE_FAKE_DEVICES TIDE_CUDA_LIBRARY='" .. lib .. "' luajit " .. script .. " 2>&1"))
      local out = p:read("*a")
      p:close()
      return out
    end
    assert.matches("CUDA is not available: TIDE_CUDA_LIBRARY names a backend that does not load %(/nonexistent/x%.so: ",
      run("/nonexistent/x.so"))
    -- the fake device's backend, built beside libtide (make test-specs runs the suite on it)
    local fake = (os.getenv("TIDE_LIBRARY") or ""):match("^(.*/)libtide%.so$")
    local h = fake and io.open(fake .. "libtide_fakecuda.so")
    if h then
      h:close()
      assert.matches("^1 device: cuda:0 fake %(host memory%)", run(fake .. "libtide_fakecuda.so"))
    else
      print("\nskipped the fake backend: no libtide_fakecuda.so beside $TIDE_LIBRARY (" ..
        tostring(os.getenv("TIDE_LIBRARY")) .. ")")
    end
    os.remove(script)
  end)

  it("runs queued device work at exit before the teardown that a kernel's library registered", function()
    -- cuBLAS registers its teardown in its first GEMM, after libtide registered the
    -- engine's drain; the fake backend does so in its first matmul when told to, and
    -- exits with 86 when a kernel launches after the teardown ran
    local fake = (os.getenv("TIDE_LIBRARY") or ""):match("^(.*/)libtide%.so$")
    local h = fake and io.open(fake .. "libtide_fakecuda.so")
    if not h then
      print("\nskipped the exit drain: no libtide_fakecuda.so beside $TIDE_LIBRARY")
      return
    end
    h:close()
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
      local tide = require("tide")
      local a = tide.randn(384, 384, { device = "cuda:0" })
      a:matmul(a):wait()               -- the first product: the library starts
      local b
      for _ = 1, 40 do b = a:matmul(a) end
      io.stdout:write("queued\n")
      os.exit(0)                       -- exit() with the products still queued
    ]])
    f:close()
    local p = assert(io.popen("env -u TIDE_DEFAULT_DEVICE -u TIDE_FAKE_DEVICES TIDE_FAKE_TEARDOWN_AFTER=matmul "
      .. "TIDE_CUDA_LIBRARY='" .. fake .. "libtide_fakecuda.so' luajit " .. script .. " 2>&1; echo rc=$?"))
    local out = p:read("*a")
    p:close()
    os.remove(script)
    assert.are.equal("queued\nrc=0\n", out)
  end)

  it("says what each CUDA device is: name, memory, compute capability", function()
    assert.has_error(function() tide.cuda.get_device_properties("cpu") end,
      "tide.cuda.get_device_properties: expected a CUDA device (N or 'cuda:N'), got 'cpu'")
    local ok, why = tide.cuda.is_available()
    if not ok then
      print("\nskipped the device properties: " .. why)
      assert.has_error(function() tide.cuda.get_device_name() end, "cuda.get_device_properties: " .. why)
      return
    end
    local n = tide.cuda.device_count()
    for i = 0, n - 1 do
      local p = tide.cuda.get_device_properties(i)
      assert.are.same(p, tide.cuda.get_device_properties("cuda:" .. i))
      assert.are.equal(p.name, tide.cuda.get_device_name(i))
      assert.are.same({ p.major, p.minor }, { tide.cuda.get_device_capability(i) })
      assert.is_true(p.total_memory > 0 and p.multi_processor_count >= 1, i)
      if tide.cuda.status():match("fake") then   -- the fake backend of make test-specs
        assert.are.same({ name = "fake cuda:" .. i .. " (host memory)", major = 9, minor = 0,
                          multi_processor_count = 1, total_memory = p.total_memory }, p)
      else                                       -- a GPU: as the backend's status line names it
        assert.truthy(tide.cuda.status():find((" cuda:%d %s (sm_%d%d, "):format(i, p.name, p.major, p.minor), 1, true),
          tide.cuda.status())
      end
    end
    assert.are.equal(tide.cuda.get_device_name(), tide.cuda.get_device_name(0))
    assert.has_error(function() tide.cuda.get_device_properties(n) end,
      ("cuda.get_device_properties: there is no device cuda:%d (the CUDA devices are cuda:0 to cuda:%d)"):format(n, n - 1))
  end)

  it("moves tensors to a CUDA device and back #cuda", H.on_cpu(function()
    local x = tide.tensor({ { 1.5, -2, 3 }, { 4, 5, 6.25 } })
    assert.are.equal(x, x:cpu())
    assert.is_false(x:is_cuda())
    assert.has_error(function() x:cuda("cpu") end, "cuda: expects a CUDA device ('cuda:N' or N), got cpu")
    assert.has_error(function() tide.cuda.synchronize("cpu") end,
      "tide.cuda.synchronize: expected a CUDA device (N or 'cuda:N'), got 'cpu'")
    if not tide.cuda.is_available() then
      print("\nskipped the device round trip: " .. select(2, tide.cuda.is_available()))
      assert.has_error(function() x:cuda() end, "device: 'cuda:0': " .. select(2, tide.cuda.is_available()))
      assert.has_error(function() tide.cuda.synchronize() end,
        "tide.cuda.synchronize: " .. select(2, tide.cuda.is_available()))
      return
    end
    assert.has_error(function() tide.cuda.synchronize(tide.cuda.device_count()) end)
    collectgarbage()   -- what earlier specs left on the device goes now, not in the figures below
    tide.sync()
    local before = tide.cuda.memory_stats(0).in_use
    local g = x:cuda()
    assert.is_true(g:is_cuda())
    tide.cuda.synchronize()
    assert.are.equal("cuda:0", g:device())
    assert.are.same(x:totable(), g:totable())          -- read through the host
    assert.are.same(x:t():totable(), g:t():cpu():totable())   -- a strided device view
    assert.are.same(x:t():totable(), x:t():cuda():cpu():totable())   -- a strided host source
    assert.are.equal(5, g[2][2])                          -- an element: a number, read through the host
    assert.are.equal(5, g[2]:narrow(1, 2, 1):item())
    assert.has_error(function() g:data_ptr() end,
      "data_ptr: the tensor is on cuda:0, whose memory the host cannot read (t:cpu() copies it)")
    assert.is_true(tide.cuda.memory_stats(0).in_use > before)
    g = nil
    collectgarbage()
    tide.sync()
    assert.are.equal(before, tide.cuda.memory_stats(0).in_use)
  end))

  it("saves device tensors through the host, and checks compiled functions on the device #cuda", H.on_cpu(function()
    if not tide.cuda.is_available() then
      print("\nskipped the device checkpoint: " .. select(2, tide.cuda.is_available()))
      return
    end
    local x = tide.tensor({ { 1.5, -2, 3 }, { 4, 5, 6.25 } }):cuda()
    local path = os.tmpname()
    tide.save(path, { w = x, wt = x:t() })
    local back = tide.load(path)
    assert.are.same(x:cpu():totable(), back.w:totable())
    assert.are.same(x:t():cpu():totable(), back.wt:totable())
    tide.io.save_npy(path, x:t())
    assert.are.same(x:t():cpu():totable(), tide.io.load_npy(path):totable())
    os.remove(path)
    -- check mode on the device: the replay's values copied there, compared through the host
    local w = tide.ones(3):cuda()
    local scale = 2
    local f = tide.jit.compile(function(a)
      w:mul_(scale)
      return a * w
    end, { warmup = 0, check = true })
    local a = tide.ones(3):cuda()
    f(a)
    assert.are.same({ 4, 4, 4 }, f(a):cpu():totable())
    assert.are.equal("", f:explain():match("check:.*") or "")
    scale = 3
    assert.are.same({ 12, 12, 12 }, f(a):cpu():totable())   -- the eager result stands: w = 4 * 3
    assert.matches("reads a Lua number that has changed since capture", f:explain(), 1, true)
  end))

  it("lets float32 matmuls use TF32 only when allowed", function()
    assert.is_false(tide.cuda.allow_tf32())
    tide.cuda.set_allow_tf32(true)
    assert.is_true(tide.cuda.allow_tf32())
    tide.cuda.set_allow_tf32(false)
    assert.is_false(tide.cuda.allow_tf32())
    assert.has_error(function() tide.cuda.set_allow_tf32(1) end,
      "tide.cuda.set_allow_tf32: expected true or false, got number")
  end)

  it("reports each device's caching allocator, or why there is none", function()
    if tide.cuda.is_available() then
      local s = tide.cuda.memory_stats("cuda:0")
      for _, k in ipairs { "in_use", "cached", "reserved", "peak", "allocs", "reused", "segments",
                           "cache_flushes", "ooms" } do
        assert.is_number(s[k], k)
      end
      assert.are.equal(s.reserved, s.in_use + s.cached)
      tide.cuda.empty_cache(0)
      tide.cuda.reset_peak_memory()
      assert.has_error(function() tide.cuda.memory_stats(tide.cuda.device_count()) end,
        ("cuda.memory_stats: there is no device cuda:%d (the CUDA devices are cuda:0 to cuda:%d)")
          :format(tide.cuda.device_count(), tide.cuda.device_count() - 1))
    else
      local _, why = tide.cuda.is_available()
      assert.has_error(function() tide.cuda.memory_stats(0) end, "cuda.memory_stats: " .. why)
      assert.has_error(function() tide.cuda.empty_cache("cuda:1") end, "cuda.empty_cache: " .. why)
      assert.has_error(function() tide.cuda.reset_peak_memory() end, "cuda.reset_peak: " .. why)
    end
    assert.has_error(function() tide.cuda.memory_stats("cpu") end,
      "tide.cuda.memory_stats: expected a CUDA device (N or 'cuda:N'), got 'cpu'")
    assert.has_error(function() tide.cuda.empty_cache(-1) end,
      "tide.cuda.empty_cache: expected a CUDA device (N or 'cuda:N'), got -1")
  end)

  it("is built into its own library where the CUDA toolkit is installed", function()
    local nvcc = os.execute("command -v nvcc >/dev/null 2>&1 || test -x /usr/local/cuda/bin/nvcc") == 0
    local libdir = (os.getenv("TIDE_LIBRARY") or ""):match("^(.*)/[^/]*$") or "."
    local f = io.open(libdir .. "/libtide_cuda.so")
    if f then f:close() end
    if not nvcc then
      print("\nskipped the build check: no CUDA toolkit (nvcc) on this machine")
      assert.is_nil(f)
      return
    end
    if libdir:find("build%-asan") or libdir:find("build%-tsan") then
      print("\nskipped the build check: the sanitizer builds leave the CUDA backend out")
      return
    end
    assert.is_not_nil(f, "nvcc is installed but " .. libdir .. "/libtide_cuda.so was not built")
  end)
end)
