-- linalg_bench.lua: tide.linalg's solvers and decompositions on float32, each
-- next to LAPACK called directly in the same run (bench/ref.c: OpenBLAS's
-- sgetrf/sgetrs, spotrf, ssyevd, sgesdd on column-major copies, OpenBLAS on
-- every core for a lone matrix; one matrix after the other on one thread for a
-- batch, where Tide spreads the matrices over its pool).
-- usage: build/tide bench/linalg_bench.lua [device]   (default: the default device)
local tide = require "tide"
local ffi = require "ffi"
local common = dofile((debug.getinfo(1, "S").source:sub(2):match("^(.*)/") or ".") .. "/common.lua")

ffi.cdef [[
double tide_ref_lapack(int32_t which, int32_t n, int32_t batch, int32_t threads, int32_t reps);
]]
local ref = common.load_ref()

local dev = arg[1] or tide.get_default_device()
local linalg = tide.linalg
local threads = tide.get_num_threads()
print(string.format("machine: %s, %d threads, device %s", common.cpu_model(), threads, dev))
print(string.format("%-46s %10s %14s", "", "tide ms", "LAPACK ms"))

-- symmetric, diagonally dominant matrices: every routine succeeds
local function spd(batch, n)
  local x = tide.rand(batch, n, n, { device = dev }) - 0.5
  return (x + x:mT()) * 0.5 + tide.eye(n, { device = dev }) * n
end

local cases = {
  { "solve %dx%d, one right-hand side", 0, 1024, 1, function(a) return linalg.solve(a, tide.ones(1024, 1, { device = dev })) end },
  { "cholesky %dx%d", 2, 1024, 1, function(a) return linalg.cholesky(a) end },
  { "eigh %dx%d", 3, 512, 1, function(a) return linalg.eigh(a) end },
  { "svd %dx%d", 4, 512, 1, function(a) return linalg.svd(a) end },
  { "inv of %d 4x4 matrices", 1, 4, 20000, function(a) return linalg.inv(a) end },
  { "cholesky of %d 16x16 matrices", 2, 16, 20000, function(a) return linalg.cholesky(a) end },
  { "eigh of %d 8x8 matrices", 3, 8, 20000, function(a) return linalg.eigh(a) end },
}
for _, c in ipairs(cases) do
  local name, which, n, batch, f = c[1], c[2], c[3], c[4], c[5]
  local a = spd(batch, n)
  if batch == 1 then a = a[1] end
  local ms = common.best_ms(function() return f(a) end, 3)
  local ref_ms
  if ref then
    local s = ref.tide_ref_lapack(which, n, batch, batch == 1 and threads or 1, 3)
    ref_ms = s >= 0 and s * 1e3 or nil
  end
  local label = batch == 1 and string.format(name, n, n) or string.format(name, batch)
  print(string.format("%-46s %10.2f %14s", label, ms, ref_ms and string.format("%.2f", ref_ms) or "-"))
end
