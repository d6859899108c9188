-- tools/gpu-carry: what it unpacks on a GPU machine without LuaJIT or busted,
-- tried on a package made here (its `fetch` needs the network, so it is not run).
local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("*a")
  p:close()
  return out:match("^(.-)rc=(%d+)%s*$")
end

describe("tools/gpu-carry", function()
  local dir = os.tmpname()
  setup(function()
    os.remove(dir)
    local pkg = dir .. "/pkg"
    assert(os.execute(table.concat({
      "mkdir -p " .. pkg .. "/DEBIAN " .. pkg .. "/usr/lib/x86_64-linux-gnu/pkgconfig " .. pkg .. "/usr/bin",
      "printf 'Package: fake\\nVersion: 1\\nArchitecture: all\\nMaintainer: t <t@t>\\nDescription: t\\n' > "
        .. pkg .. "/DEBIAN/control",
      "printf 'prefix=/usr\\nincludedir=${prefix}/include\\n' > " .. pkg .. "/usr/lib/x86_64-linux-gnu/pkgconfig/fake.pc",
      -- zlib1g-dev's links: libz.so to a libz.so.1 this tree lacks, and libz.a
      "ln -s /nonexistent/libz.so.1.2.13 " .. pkg .. "/usr/lib/x86_64-linux-gnu/libz.so",
      "touch " .. pkg .. "/usr/lib/x86_64-linux-gnu/libz.a",
      "dpkg-deb -b " .. pkg .. " " .. dir .. "/fake.deb >/dev/null",
      "rm -rf " .. pkg,
    }, " && ")) == 0)
  end)
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("unpacks the packages into the folder, not into /, and says how to use them", function()
    local out, rc = sh("tools/gpu-carry env " .. dir)
    assert.are.equal("0", rc, out)
    local root = dir .. "/root"
    local f = assert(io.open(root .. "/usr/lib/x86_64-linux-gnu/pkgconfig/fake.pc"))
    local pc = f:read("*a")
    f:close()
    assert.are.equal("prefix=" .. root .. "/usr\n", pc:match("^[^\n]*\n"))   -- pointed at the unpacked tree
    assert.truthy(out:find('export PATH="' .. root .. '/usr/bin:', 1, true), out)
    assert.truthy(out:find(root .. "/usr/lib/x86_64-linux-gnu/openblas-pthread", 1, true), out)
    assert.truthy(out:find('export LUA_PATH="' .. root .. "/usr/share/lua/5.1/?.lua;", 1, true), out)
    -- the linker finds a carried library a static link names (-lcjson), with no -L
    assert.truthy(out:find('export LIBRARY_PATH="' .. root .. "/usr/lib/x86_64-linux-gnu", 1, true), out)
    -- libz.so dangled: it is the machine's libz.so.1 now, and libz.a (not
    -- position-independent, so no shared library links it) is gone
    local lib = root .. "/usr/lib/x86_64-linux-gnu"
    local system
    for _, p in ipairs { "/usr/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1" } do
      if io.open(p) then system = p; break end
    end
    if system then
      assert.are.equal(system .. "\n", sh("readlink " .. lib .. "/libz.so"))
      assert.is_nil(io.open(lib .. "/libz.a"))
    else
      print("\nskipped the zlib check: this machine has no libz.so.1 where gpu-carry looks")
    end
    -- a second call unpacks nothing again
    local again = sh("tools/gpu-carry env " .. dir)
    assert.are.equal(out, again)
  end)

  it("says what to do without a folder, or without a command", function()
    local out, rc = sh("tools/gpu-carry env " .. dir .. "/none")
    assert.are.equal("1", rc)
    assert.matches("no folder .*/none %(run 'tools/gpu%-carry fetch' where apt works%)", out)
    out, rc = sh("tools/gpu-carry")
    assert.are.equal("2", rc)
    assert.matches("tools/gpu%-carry fetch %[DIR%]", out)
  end)
end)
