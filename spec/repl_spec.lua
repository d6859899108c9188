-- repl_spec: the tide REPL. Its logic (repl/repl.lua) line by line: results,
-- multi-line input, errors, completion, printing of tables, help, who, time and
-- the :commands. Then the tide executable: lua's options and `arg`, scripts and
-- their errors, and the REPL in a real terminal (tmux): typing, Tab, history,
-- and Ctrl-C during a loop and during a wait on the engine.
local tide = require "tide"

local ROOT = debug.getinfo(1, "S").source:sub(2):gsub("[^/]*$", "") .. "../"
local BUILD = (os.getenv("TIDE_LIBRARY") or ""):match("^(.*)/[^/]*$")
local TIDE = BUILD and BUILD .. "/tide"

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1; echo \"rc=$?\""))
  local out = p:read("*a")
  p:close()
  local body, rc = out:match("^(.-)rc=(%d+)\n$")
  return body, tonumber(rc)
end

local function q(s) return "'" .. s:gsub("'", [['\'']]) .. "'" end

describe("repl", function()
  local R = dofile(ROOT .. "repl/repl.lua")
  local out = {}
  R.write = function(s) out[#out + 1] = s end
  local function run(...)   -- feeds lines; returns what they printed
    out = {}
    local res
    for _, line in ipairs { ... } do res = R.feed(line) end
    return table.concat(out), res
  end

  it("prints the value of an expression, every value of several, nothing for a statement", function()
    assert.are.equal("3\n", run("1 + 2"))
    assert.are.equal("1\tnil\tx\n", run("1, nil, 'x'"))
    assert.are.equal("nil\n", run("nil"))
    assert.are.equal("", run("spec_repl_x = 5"))
    assert.are.equal("6\n", run("spec_repl_x + 1"))
    assert.are.equal("7\n", run("= spec_repl_x + 2"))
    assert.are.equal("", run("print_nothing = function() end", "print_nothing()"))
    assert.are.equal("8\t9\n", run("do return 8, 9 end"))
    _G.spec_repl_x, _G.print_nothing = nil, nil
  end)

  it("prints tensors as tostring does", function()
    local t = tide.tensor({ 1, 2 })
    _G.spec_t = t
    assert.are.equal(tostring(t) .. "\n", run("spec_t"))
    assert.are.equal(tostring(t) .. "\n" .. tostring(t) .. "\n", run("spec_t, spec_t"))
    _G.spec_t = nil
  end)

  it("continues a statement over lines while it is incomplete", function()
    assert.are.same({ "", "more" }, { run("function spec_sq(x)") })
    assert.are.same({ "", "more" }, { run("  local y = x * x") })
    assert.are.same({ "", nil }, { run("  return y", "end") })
    assert.are.equal("49\n", run("spec_sq(7)"))
    assert.are.equal("more", select(2, run("spec_t = {")))
    assert.are.equal("{ 1, 2 }\n", run("1, 2 }", "spec_t"))
    -- a syntax error is not an incomplete statement; Ctrl-C drops a pending one
    assert.are.equal("stdin:1: unfinished string near '<eof>'\n", run('"abc'))
    assert.are.equal("more", select(2, run("if true then")))
    R.cancel()
    assert.are.equal("1\n", run("1"))
    _G.spec_sq, _G.spec_t = nil, nil
  end)

  it("shows errors with a short traceback and goes on", function()
    assert.are.equal("stdin:1: boom\nstack traceback:\n\tstdin:1: in main chunk\n", run('error("boom")'))
    local text = run("function spec_f() local x; return x.y end", "spec_f()")
    assert.are.equal("stdin:1: attempt to index local 'x' (a nil value)\nstack traceback:\n"
      .. "\tstdin:1: in function 'spec_f'\n\tstdin:1: in main chunk\n", text)
    text = run("tide.zeros(2):matmul(tide.zeros(3))")
    assert.truthy(text:match("^stdin:1: matmul: shapes %[2%] and %[3%] cannot be multiplied: 2 ~= 3\n"))
    assert.falsy(text:find("bindings/ffi.lua", 1, true))
    -- deep recursion: the traceback stays short
    text = run("function spec_r(n) if n == 0 then error('deep') end return 1 + spec_r(n - 1) end", "spec_r(50)")
    assert.truthy(text:find("\t%.%.%. %(%d+ more%)\n$"))
    assert.are.equal("2\n", run("1 + 1"))
    _G.spec_f, _G.spec_r = nil, nil
  end)

  it("prints tables as a readable, depth-limited, cycle-safe listing", function()
    assert.are.equal("{ 1, 2, 3, [\"a b\"] = true, name = \"x\" }", R.pretty({ 1, 2, 3, name = "x", ["a b"] = true }))
    assert.are.equal("{ a = { b = { c = {...} } } }", R.pretty({ a = { b = { c = { d = 1 } } } }))
    local cyc = { n = 1 }
    cyc.self = cyc
    assert.are.equal("{ n = 1, self = <cycle: " .. tostring(cyc) .. "> }", R.pretty(cyc))
    local shared = { 1 }
    assert.are.equal("{ { 1 }, { 1 } }", R.pretty({ shared, shared }))   -- shared is no cycle
    local long = {}
    for i = 1, 50 do long[i] = i * 1000 end
    local text = R.pretty(long)
    assert.truthy(text:match("^{\n  1000,\n  2000,\n"))
    assert.are.equal("\n  ... (10 more)\n}", text:sub(-18))
    assert.are.equal("{ t = <tensor float32 [2, 3] " .. tide.get_default_device() .. "> }", R.pretty({ t = tide.zeros(2, 3) }))
    assert.truthy(R.pretty({ f = print }):match("^{ f = <function builtin> }$"))
    assert.are.equal('{ "a\\nb" }', R.pretty({ "a\nb" }))
    assert.are.equal("{}", R.pretty({}))
  end)

  it("completes globals, keywords, fields, module members and tensor methods", function()
    _G.spec_c = tide.ones(2)
    local c = R.complete("x = spec_c:re", "spec_c:re")
    for _, want in ipairs { "spec_c:relu", "spec_c:reshape", "spec_c:reshape_as", "spec_c:reciprocal" } do
      assert.truthy(c[1] and table.concat(c, " "):find(want, 1, true), want)
    end
    for _, w in ipairs(c) do assert.truthy(w:match("^spec_c:re")) end
    assert.are.same({ "tide.zeros", "tide.zeros_like" }, R.complete("tide.zer", "tide.zer"))
    assert.are.same({ "tide.debug.sync" }, R.complete("tide.debug.sy", "tide.debug.sy"))
    assert.are.same({ "function" }, R.complete("fun", "fun"))
    assert.are.same({ "print" }, R.complete("pri", "pri"))
    assert.are.same({ "string.format" }, R.complete("string.form", "string.form"))
    _G.spec_s = "text"
    assert.are.same({ "spec_s:upper" }, R.complete("spec_s:up", "spec_s:up"))
    _G.spec_tab = { alpha = 1, beta = function() end }
    assert.are.same({ "spec_tab.alpha", "spec_tab.beta" }, R.complete("spec_tab.", "spec_tab."))
    assert.are.same({ "spec_tab:beta" }, R.complete("spec_tab:", "spec_tab:"))   -- only callables after ':'
    assert.are.same({}, R.complete("nothing_here.x", "nothing_here.x"))
    assert.are.same({}, R.complete("f():x", "f():x"))   -- no call is made to complete
    assert.are.same({ "tide.Tensor.relu", "tide.Tensor.relu_" }, R.complete("tide.Tensor.relu", "tide.Tensor.relu"))
    _G.spec_c, _G.spec_s, _G.spec_tab = nil, nil, nil
  end)

  it("documents Tide's functions and modules with help()", function()
    local h = R.help_text(tide.zeros)
    assert.truthy(h:match("^tide%.zeros%(%.%.%.%)\n"))
    assert.truthy(h:find('zeros(2, 3), zeros({2, 3}), zeros(2, 3, {dtype = "int64"})', 1, true))
    h = R.help_text(tide.plot.render)
    assert.truthy(h:find("  values: a table of numbers, or a tensor (flattened)", 1, true))
    assert.truthy(h:find("  usage: print(tide.plot.render", 1, true))
    h = R.help_text("matmul")
    assert.truthy(h:find("op matmul of the registry: 2 inputs, 1 output", 1, true))
    assert.truthy(R.help_text(tide.relu):find("t:relu", 1, true))
    h = R.help_text(tide)
    assert.truthy(h:match("^tide: deep learning from LuaJIT"))
    assert.truthy(h:find("functions:\n", 1, true) and h:find("%srandn%s"))
    assert.truthy(R.help_text(tide.Tensor):find("%sreshape%s"))
    assert.are.equal("a tensor: <tensor float32 [2] " .. tide.get_default_device() .. ">, 2 elements. Its methods: "
      .. "help(tide.Tensor); a method: help(t.relu)", R.help_text(tide.ones(2)))
    assert.are.equal('help: nothing is called "no_such_thing" (try help(tide) for the list)',
      R.help_text("no_such_thing"))
    assert.truthy(R.help_text(print):find("a built-in function", 1, true))
    assert.truthy(R.help_text():find("who()", 1, true))
    assert.are.equal("a number: 3", R.help_text(3))
  end)

  it("lists live tensors and their memory with who()", function()
    _G.spec_w = tide.zeros(10, 10)
    _G.spec_holder = { inner = tide.ones(3, "int64") }
    local text = R.who_text()
    local dev = tide.get_default_device()
    assert.truthy(text:find("\nspec_w%s+float32%s+%[10, 10%]%s+" .. dev .. "%s+400 B\n"), text)
    assert.truthy(text:find("\nspec_holder%.inner%s+int64%s+%[3%]%s+" .. dev .. "%s+24 B\n"), text)
    assert.truthy(text:match("^name%s+dtype%s+shape%s+device%s+bytes\n"))
    assert.truthy(text:match("\n%d+ live tensors? over %d+ storages?: [%d%.]+ %a+; allocator: .* in use, .* cached, peak .*$"))
    _G.spec_w, _G.spec_holder = nil, nil
    assert.falsy(R.who_text():find("spec_w", 1, true))
  end)

  it("times functions and code with time() and :time", function()
    out = {}
    local a, b = R.time(function(x) return x, x + 1 end, 1)
    assert.are.same({ 1, 2 }, { a, b })
    assert.truthy(table.concat(out):match("^time: [%d%.]+ [um]?s\n$"))
    assert.has_error(function() R.time(3) end, "time: argument 1 must be a function, got number (or use :time expr)")
    local text = run(":time 20 + 22")
    assert.truthy(text:match("^time: [%d%.]+ [um]?s\n42\n$"), text)
    assert.truthy(run(":time error('x')"):match("^stdin:1: x\n"))
    assert.are.equal("1.5 us", R.duration(1.5e-6))
    assert.are.equal("2.000 ms", R.duration(0.002))
    assert.are.equal("3.000 s", R.duration(3))
  end)

  it("has :commands, and names an unknown one", function()
    assert.are.equal("unknown command ':bogus' (:help lists them)\n", run(":bogus"))
    assert.truthy(run(":help"):find(":time code", 1, true))
    assert.are.equal("typed code is compiled by LuaJIT\n", run(":jit on"))
    assert.is_false(R.interpreted)
    assert.are.equal("typed code is interpreted (Ctrl-C stops any loop)\n", run(":jit off"))
    assert.is_true(R.interpreted)
    assert.are.equal("usage: :jit on|off\n", run(":jit maybe"))
    assert.are.equal("quit", select(2, run(":quit")))
  end)

  it("runs typed code in the interpreter unless :jit on", function()
    local fn = R.compile("spec_loop = 0 for i = 1, 10 do spec_loop = spec_loop + i end", "=stdin")
    fn()
    assert.are.equal(55, _G.spec_loop)
    _G.spec_loop = nil
  end)

  it("offers jit.compile as tide.jit.compile, and nothing when tide.jit is missing", function()
    local tide_jit = tide.jit
    jit.compile = nil
    R.install_globals()
    assert.are.equal(R.help, _G.help)
    assert.are.equal(tide_jit.compile, jit.compile)
    jit.compile = nil
    rawset(tide, "jit", nil)
    R.install_globals()
    assert.is_nil(jit.compile)
    rawset(tide, "jit", tide_jit)
    jit.compile, _G.help, _G.who, _G.time = nil, nil, nil, nil
  end)
end)

describe("the tide executable", function()
  if not TIDE then
    it("needs TIDE_LIBRARY", function() error("TIDE_LIBRARY is not set: run the specs through build/tide") end)
    return
  end
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir)
  local function write(name, text)
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(text)
    f:close()
    return dir .. "/" .. name
  end

  it("runs a script with `arg` and `...` set as lua sets them, Tide loaded", function()
    local s = write("args.lua", "print(arg[0], arg[1], arg[2], #arg, ...)\nprint(tide == require('tide'), tide.ones(2):sum():item())\n")
    local body, rc = sh(TIDE .. " " .. s .. " a 'b c'")
    assert.are.equal(0, rc)
    assert.are.equal(s .. "\ta\tb c\t2\ta\tb c\ntrue\t2\n", body)
    assert.are.equal("stdin\n", (sh("echo 'print(\"stdin\")' | " .. TIDE .. " -")))
  end)

  it("runs -e code and -l libraries in order, then the script", function()
    local s = write("after.lua", "print('script', spec_v)\n")
    local body, rc = sh(TIDE .. " -e 'spec_v = 1' -l tide.plot -e 'print(type(plot))' " .. s)
    assert.are.equal(0, rc)
    assert.are.equal("table\nscript\t1\n", body)
    assert.are.equal("3\n", (sh(TIDE .. " -e 'print(tide.tensor({1, 2}):sum():item())'")))
  end)

  it("prints its version and help, and names a bad option", function()
    local body, rc = sh(TIDE .. " --version")
    assert.are.equal(0, rc)
    assert.are.equal("tide " .. tide._VERSION .. " (" .. jit.version .. ")\n", body)
    body, rc = sh(TIDE .. " --help")
    assert.are.equal(0, rc)
    assert.truthy(body:find("usage: .*%[options%] %[script %[args%.%.%.%]%]"))
    body, rc = sh(TIDE .. " --bogus")
    assert.are.equal(1, rc)
    assert.truthy(body:match("^.*tide: unknown option '%-%-bogus'\nusage:"))
    body, rc = sh(TIDE .. " -e")
    assert.are.equal(1, rc)
    assert.truthy(body:find("'-e' needs an argument", 1, true))
  end)

  it("reports a script's error with a traceback and fails", function()
    local s = write("fails.lua", "local function f() error('boom') end\nf()\n")
    local body, rc = sh(TIDE .. " " .. s)
    assert.are.equal(1, rc)
    assert.truthy(body:find("tide: " .. s .. ":1: boom\nstack traceback:\n", 1, true))
    assert.truthy(body:find(s .. ":2: in main chunk", 1, true))
    body, rc = sh(TIDE .. " " .. dir .. "/missing.lua")
    assert.are.equal(1, rc)
    assert.truthy(body:find("cannot open " .. dir .. "/missing.lua", 1, true))
    body, rc = sh(TIDE .. " -e 'x = = 1'")
    assert.are.equal(1, rc)
    assert.truthy(body:find("(command line):1: unexpected symbol near '='", 1, true))
  end)

  it("runs the REPL on piped input with -i, quietly, printing results", function()
    local body, rc = sh("printf '%s\\n' 'x = 6' 'x * 7' 'function f()' 'return 1, 2' 'end' 'f()' 'error(\"e\")' 'x' | "
      .. TIDE .. " -i")
    assert.are.equal(0, rc)
    assert.are.equal("42\n1\t2\nstdin:1: e\nstack traceback:\n\tstdin:1: in main chunk\n6\n", body)
  end)

  it("passes where it found Tide to the luajit processes it starts", function()
    local body = sh(TIDE .. " -e 'print(os.getenv(\"TIDE_LIBRARY\"))'")
    assert.are.equal(os.getenv("TIDE_LIBRARY") .. "\n", body)
    body = sh(TIDE .. " -e 'os.exit(os.execute(\"luajit -e \\\"assert(require [[tide]].ones(1))\\\"\") == 0 and 0 or 1)'")
    assert.are.equal("", body)
  end)

  teardown(function() os.execute("rm -rf " .. dir) end)
end)

-- -- in a terminal ------------------------------------------------------------------------

local function has_tmux() return select(2, sh("command -v tmux")) == 0 end

describe("the tide REPL in a terminal (tmux)", function()
  if not TIDE or not has_tmux() then
    it("needs tmux and TIDE_LIBRARY", function()
      print("skipped: the terminal specs need tmux (tools/setup-deps installs it) and build/tide")
    end)
    return
  end
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir)
  local sock, hist = dir .. "/tmux.sock", dir .. "/history"
  -- tmux itself runs without the sanitizers' preload; the REPL gets it back
  local tmux = "env -u LD_PRELOAD tmux -S " .. sock .. " "
  local slow = (os.getenv("LD_PRELOAD") or ""):find("san") and 4 or 1
  local env = "TIDE_HISTORY=" .. hist
  for _, v in ipairs { "LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS" } do
    if os.getenv(v) then env = env .. " " .. v .. "=" .. q(os.getenv(v)) end
  end

  local function screen()
    return (sh(tmux .. "capture-pane -p -t repl"))
  end
  -- Polls the screen until `pattern` is found (plain text) or the time is up;
  -- with `after`, only in what follows the last line that shows `after`.
  local function wait_for(pattern, seconds, after)
    local deadline = os.time() + (seconds or 10) * slow
    local s
    repeat
      s = screen()
      local from = 1
      if after then
        from = nil
        local i = 0
        while true do
          i = s:find(after, i + 1, true)
          if not i then break end
          from = i + #after
        end
      end
      if from and s:find(pattern, from, true) then return s end
      os.execute("sleep 0.05")
    until os.time() > deadline
    error(string.format("the screen never showed %q%s; it shows:\n%s", pattern,
      after and (" after " .. after) or "", s), 2)
  end
  -- Waits for an empty prompt below the last line showing `after`.
  local function wait_prompt(after) return wait_for("\n>\n", nil, after) end
  local function keys(...) sh(tmux .. "send-keys -t repl " .. table.concat({ ... }, " ")) end
  local function type_line(text) keys("-l", q(text)) keys("Enter") end
  -- Ctrl-C until the screen shows `pattern`: a second press covers one that came
  -- before the code started (at the prompt it only drops the line).
  local function interrupt(pattern, after)
    for attempt = 1, 2 do
      keys("C-c")
      local ok = pcall(wait_for, pattern, attempt == 1 and 5 or 10, after)
      if ok then return end
    end
    wait_for(pattern, 1, after)   -- fails with the screen in the message
  end
  local function start()
    sh(tmux .. "new-session -d -s repl -x 100 -y 50 " .. q("env " .. env .. " " .. TIDE))
    wait_for("help() for help, Ctrl-D to leave.\n>")   -- the prompt: typing before it would echo twice
  end
  -- Waits (bounded) until the REPL has exited and the tmux server with it.
  local function gone()
    for _ = 1, 200 * slow do
      if select(2, sh(tmux .. "has-session -t repl")) ~= 0 then return true end
      os.execute("sleep 0.05")
    end
    return false
  end
  local function stop()
    sh(tmux .. "kill-server")
    gone()
  end

  it("evaluates, continues lines, completes, reports errors and survives Ctrl-C", function()
    start()
    finally(stop)
    -- an expression
    type_line("1 + 2")
    wait_for("> 1 + 2\n3\n>")
    -- a multi-line function
    type_line("function sq(x)")
    wait_for("> function sq(x)\n>>")
    type_line("  return x * x")
    wait_for(">>   return x * x\n>>")
    type_line("end")
    wait_for(">> end\n>")   -- each line waits for the prompt, as a person does
    type_line("sq(12)")
    wait_for(">> end\n> sq(12)\n144\n>")
    -- Tab completion: the common part at once, the choices on a second Tab
    type_line("t = tide.ones(2, 3)")
    wait_for("> t = tide.ones(2, 3)\n>")
    keys("-l", "t:resh")
    keys("Tab")
    wait_for("> t:reshape")
    keys("C-u")
    keys("-l", "t:re")
    keys("Tab", "Tab")
    local s = wait_for("t:relu")
    assert.truthy(s:find("t:reshape", 1, true) and s:find("t:reciprocal", 1, true))
    keys("-l", q("shape(3, 2):size(1)"))
    keys("Enter")
    wait_for("> t:reshape(3, 2):size(1)\n3\n>")
    -- an error, and the session goes on
    type_line("nosuch(1)")
    wait_for("stdin:1: attempt to call global 'nosuch' (a nil value)\nstack traceback:\n")
    wait_prompt("nosuch(1)")
    -- Ctrl-C during a long loop
    type_line("for i = 1, 1e12 do end")
    wait_for("> for i = 1, 1e12 do end\n")
    os.execute("sleep 0.3")
    interrupt("interrupted\nstack traceback:", "for i = 1, 1e12 do end")
    wait_prompt("for i = 1, 1e12 do end")
    type_line("2 * 21")
    wait_for("> 2 * 21\n42\n>")
    -- Ctrl-C during a wait on the engine (seconds of matmuls queued on one core)
    type_line("y = tide.randn(2500, 2500):to('cpu:0') for i = 1, 6 do y = y:matmul(y) end y:sum():item()")
    wait_for("y:sum():item()\n")
    os.execute("sleep 0.3")
    interrupt("interrupted\nstack traceback:", "y:sum():item()")
    wait_prompt("y:sum():item()")
    -- and while printing a result waits for it (six more matmuls, queued by
    -- the line itself: what was left of the loop may be done on a fast machine)
    local chain = "y" .. string.rep(":matmul(y)", 6)
    type_line(chain)
    wait_for("> " .. chain .. "\n")
    os.execute("sleep 0.3")
    interrupt("interrupted\nstack traceback:", "> " .. chain .. "\n")
    wait_prompt("> " .. chain .. "\n")
    type_line("tide.ones(4):sum():item()")
    wait_for("> tide.ones(4):sum():item()\n4\n>")
    -- Ctrl-C at the prompt drops the line
    keys("-l", q("'half typed'"))
    wait_for("> 'half typed'")
    keys("C-c")
    wait_for("> 'half typed'\n>")
    type_line("'next'")
    wait_for("> 'next'\nnext\n>")
  end)

  it("keeps the history in a file across sessions", function()
    start()
    type_line("history_marker = 1")
    wait_for("> history_marker = 1\n>")
    keys("C-d")
    assert.is_true(gone(), "the REPL did not end at Ctrl-D")
    start()
    finally(stop)
    keys("Up")
    wait_for("> history_marker = 1")
  end)

  teardown(function() os.execute("rm -rf " .. dir) end)
end)
