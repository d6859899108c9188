-- examples/: every example runs in a short smoke mode and prints what it should.
-- They run as child processes with the same environment the specs have.
local function run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1; echo \"exit $?\""))
  local out = p:read("*a")
  p:close()
  return out
end

-- Whether Debian's Fashion-MNIST is installed; says why a spec skips when not.
local function have_data()
  local data = "/usr/share/datasets/fashion-mnist"
  local f = io.open(data .. "/train-images-idx3-ubyte.gz", "rb")
  if not f then
    print("\nskipped: " .. data .. " is missing (Debian's dataset-fashion-mnist; make test installs it)")
    return false
  end
  f:close()
  return true
end

describe("examples", function()
  it("fashion_mnist trains, evaluates, saves a checkpoint and sums up", function()
    if not have_data() then return end
    local out_file = os.tmpname()
    local out = run("luajit examples/fashion_mnist.lua --limit 1200 --epochs 1 --batch-size 50 --out " .. out_file)
    assert.matches("Fashion%-MNIST: 1200 training and 1000 test images; model cnn %(421642 parameters%)", out)
    assert.matches("epoch 1/1 %[=+%] 24/24 loss %d%.%d+ acc +%d+%.%d%% +%d+ samples/s took %d:%d%d", out)
    local acc = tonumber(out:match("epoch 1: test accuracy (%d+%.%d+)%%"))
    assert.is_not_nil(acc, out)
    assert.is_true(acc > 50, "accuracy " .. tostring(acc))   -- 10 classes: chance is 10%
    assert.matches("summary: 1 epochs in %d:%d%d, final test accuracy", out)
    assert.matches("Ankle boot", out)
    assert.matches("exit 0\n$", out)
    local ck = require("tide").load(out_file)
    assert.are.same({ 32, 1, 3, 3 }, ck.model["0.weight"]:shape())
    assert.are.equal(1, ck.epochs)
    os.remove(out_file)
  end)

  it("fashion_mnist trains the same with its step compiled by tide.jit", function()
    if not have_data() then return end
    local out_file = os.tmpname()
    local function final(compile)
      local out = run("luajit examples/fashion_mnist.lua --limit 600 --epochs 2 --batch-size 50 --compile " ..
        compile .. " --out " .. out_file)
      assert.matches("exit 0\n$", out)
      return out:match("final test accuracy (%d+%.%d+)%%")
    end
    local eager = final(0)
    assert.is_not_nil(eager)
    assert.are.equal(eager, final(1))
    os.remove(out_file)
  end)

  it("fashion_mnist explains bad options and a missing data set", function()
    local out = run("luajit examples/fashion_mnist.lua --model rnn")
    assert.matches("fashion_mnist: %-%-model must be cnn or mlp", out)
    assert.matches("exit 2\n$", out)
    out = run("luajit examples/fashion_mnist.lua --data /nonexistent")
    assert.matches("fashion_mnist: cannot open /nonexistent/train%-images%-idx3%-ubyte.gz", out)
    assert.matches("exit 1\n$", out)
  end)

  it("mlp_regression fits its function", function()
    local out = run("luajit examples/mlp_regression.lua 300")
    assert.matches("step   300  loss", out)
    local mse = tonumber(out:match("held%-out mean squared error (%d+%.%d+)"))
    assert.is_not_nil(mse, out)
    assert.is_true(mse < 0.05, "held-out error " .. tostring(mse))
    assert.matches("exit 0\n$", out)
  end)

  it("char_rnn learns to predict characters and writes a sample", function()
    local f = io.open("/usr/share/common-licenses/GPL-3", "rb")
    if not f then
      print("\nskipped: /usr/share/common-licenses/GPL-3 (Debian's base-files) is missing")
      return
    end
    f:close()
    local out = run("luajit examples/char_rnn.lua --steps 60 --seq-len 32 --batch-size 16 --hidden 64 --sample 50")
    assert.matches("char%-rnn: 35149 characters of /usr/share/common%-licenses/GPL%-3, %d+ symbols; model %d+ parameters", out)
    local first = tonumber(out:match("step +1/60  loss (%d+%.%d+)"))
    local final = tonumber(out:match("final loss (%d+%.%d+) after 60 steps"))
    assert.is_not_nil(first, out)
    assert.is_not_nil(final, out)
    assert.is_true(final < 0.85 * first, string.format("loss %.3f -> %.3f", first, final))
    local sample = out:match("sample %(temperature 0%.80%):\n(.-)\nfinal loss")
    assert.are.equal(50, #sample)
    assert.matches("exit 0\n$", out)
  end)

  it("char_rnn explains bad options and a missing file", function()
    local out = run("luajit examples/char_rnn.lua --temperature 0")
    assert.matches("char_rnn: %-%-temperature must be positive", out)
    assert.matches("exit 2\n$", out)
    out = run("luajit examples/char_rnn.lua --data /nonexistent")
    assert.matches("char_rnn: cannot read /nonexistent %(pass %-%-data FILE%)", out)
    assert.matches("exit 2\n$", out)
  end)
end)
