-- plot_spec: tide.plot draws a line chart in the terminal (Braille or ASCII),
-- with the range on its axes, from tables or tensors; bad input is named; and
-- with gnuplot (here a stand-in script, gnuplot being optional) it writes a PNG.
local tide = require "tide"

describe("tide.plot", function()
  it("draws a series in ASCII with its range on the axes", function()
    assert.are.equal(table.concat({
      "3 |  *",
      "  | * *",
      "1 |*   *",
      "  +-----",
      "   1   5",
    }, "\n"), tide.plot.render({ 1, 2, 3, 2, 1 }, { width = 5, height = 3, ascii = true }))
  end)

  it("draws with Braille dots, 2x4 per character, and a title", function()
    local text = tide.plot.render({ 1, 2, 3, 2, 1 }, { width = 10, height = 3, title = "peak" })
    assert.are.equal(table.concat({
      "   peak",
      "3 |   ⢀⠔⠑⡄",
      "  | ⢀⠔⠁  ⠈⠢⡀",
      "1 |⡠⠊      ⠘⢄",
      "  +----------",
      "   1        5",
    }, "\n"), text)
  end)

  it("plots a tensor's values (flattened) and breaks the line at NaN", function()
    local t = tide.tensor({ { 0 / 0, 1 }, { 2, 0 / 0 } })
    assert.are.equal(table.concat({ "2 |  *", "1 | *", "  +----", "   1  4" }, "\n"),
      tide.plot.render(t, { width = 4, height = 2, ascii = true }))
    local s = tide.plot.render(tide.linspace(0, 6.28, 100):sin(), { width = 40, height = 8 })
    assert.truthy(s:match("^ ?0%.99%d* |") or s:match("^ *1 |"), s)
    assert.truthy(s:find("\n%-0%.99%d* |") or s:find("\n%-1 |"), s)
  end)

  it("names what is wrong with its input", function()
    assert.has_error(function() tide.plot.render({ 1, "x" }) end, "plot: value 2 is a string, not a number")
    assert.has_error(function() tide.plot.render({}) end, "plot: no values to plot")
    assert.has_error(function() tide.plot.render({ 0 / 0 }) end, "plot: no finite values to plot")
    assert.has_error(function() tide.plot.render(42) end, "plot: values must be a table of numbers or a tensor, got number")
    assert.has_error(function() tide.plot.render({ 1 }, { width = 1 }) end, "plot: width and height must be numbers >= 2")
    assert.has_error(function() tide.plot({ 1 }, "wide") end, "plot: options must be a table, got string")
  end)

  it("writes a PNG through gnuplot when it is there, and needs it for nothing else", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0)
    -- a stand-in gnuplot: keeps the script it was given and writes the output file
    local fake = dir .. "/gnuplot"
    local f = assert(io.open(fake, "w"))
    f:write("#!/bin/sh\ncp \"$1\" " .. dir .. "/script.gp\n",
      "out=$(sed -n \"s/^set output '\\(.*\\)'$/\\1/p\" \"$1\")\nprintf PNG > \"$out\"\n")
    f:close()
    assert(os.execute("chmod +x " .. fake) == 0)
    local png = dir .. "/out.png"
    local path = tide.plot.png({ 1, 4, 9 }, png, { gnuplot = fake, title = "it's" })
    assert.are.equal(png, path)
    local script = assert(io.open(dir .. "/script.gp")):read("*a")
    assert.truthy(script:find("set terminal png size 800,480\n", 1, true))
    assert.truthy(script:find("set output '" .. png .. "'\n", 1, true))
    assert.truthy(script:find("set title 'it''s'\n", 1, true))
    assert.truthy(script:find("plot '-' using 1:2 with lines", 1, true))
    assert.truthy(script:find("\n1 1\n2 4\n3 9\ne\n", 1, true))
    assert.are.equal("PNG", assert(io.open(png)):read("*a"))
    -- without gnuplot: no PNG, and no complaint unless one was asked for
    assert.are.same({ nil, "gnuplot is not installed" }, { tide.plot.png({ 1 }, png, { gnuplot = false }) })
    local failing = dir .. "/failing"
    f = assert(io.open(failing, "w"))
    f:write("#!/bin/sh\nexit 3\n")
    f:close()
    os.execute("chmod +x " .. failing)
    local ok, err = tide.plot.png({ 1 }, png, { gnuplot = failing })
    assert.is_nil(ok)
    assert.truthy(err:match("^gnuplot failed"))
    os.execute("rm -rf " .. dir)
  end)
end)
